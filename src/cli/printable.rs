//! Text from a session or a client made safe to print on a terminal.
//!
//! A model id, a cwd, a summary, a session id or a path is data someone else wrote. Printed as
//! it is, its control characters are commands to the terminal: `ESC ] 52 ; c ; … BEL` writes
//! the user's clipboard, `ESC [ 2 J` clears the screen, `ESC ] 0 ; … BEL` sets the window title,
//! and C1 controls (U+0080–U+009F, such as U+009B, the one-character CSI) do the same on
//! terminals that read them. Every CLI output that can carry such text (`top --once`,
//! `inspect`, `compact`, error messages, log lines on a terminal) goes through one of these
//! functions; `export` writes the session's bytes, as asked.
//!
//! A control character is replaced by a visible escape (`\x1b`, `\x07`, `\u{9b}`), so an escape
//! sequence shows as inert text (`\x1b]0;title\x07`) and what was there stays readable.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is a control character a terminal may act on: C0 (U+0000–U+001F), DEL (U+007F)
/// and C1 (U+0080–U+009F).
fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

fn escape_into(out: &mut String, c: char) {
    if c <= '\u{7f}' {
        let _ = write!(out, "\\x{:02x}", u32::from(c));
    } else {
        let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
    }
}

fn escaped(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_control(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_control(c) && !keep(c) {
            escape_into(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` for one line or one cell: every control character escaped, newline and tab included.
pub fn line(s: &str) -> Cow<'_, str> {
    escaped(s, |_| false)
}

/// `s` for multi-line output (a summary, an error message, a report): newlines and tabs are
/// kept, every other control character escaped.
pub fn text(s: &str) -> Cow<'_, str> {
    escaped(s, |c| c == '\n' || c == '\t')
}

/// JSON text for a terminal. `JSON.stringify` already escapes C0 inside strings, but writes DEL
/// and C1 characters as they are; they are written as `\u007f`…`\u009f` instead, the same JSON
/// value (control characters appear only inside strings in JSON text).
pub fn json(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_control(c) && c != '\n' {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Prints `compactd: <message>` on stderr, the message made printable ([`text`]).
pub fn eprint_error(message: std::fmt::Arguments<'_>) {
    let message = message.to_string();
    eprintln!("compactd: {}", text(&message));
}

/// `eprintln!("compactd: …")` with the message made printable: every error a command prints
/// may quote a path, a session's content or a daemon's reply.
#[macro_export]
macro_rules! print_err {
    ($($arg:tt)*) => {
        $crate::cli::printable::eprint_error(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "a\x1b]52;c;aGk=\x07b\x1b[2Jc\x1b]0;title\x07d\u{9b}31me\x7ff\r\x08g";

    #[test]
    fn control_characters_become_visible_escapes() {
        assert_eq!(
            line(HOSTILE),
            "a\\x1b]52;c;aGk=\\x07b\\x1b[2Jc\\x1b]0;title\\x07d\\u{9b}31me\\x7ff\\x0d\\x08g"
        );
        assert_eq!(line("x\ny\tz"), "x\\x0ay\\x09z");
        assert_eq!(text("x\ny\tz\x1b"), "x\ny\tz\\x1b");
        // Clean text is borrowed, and non-ASCII text that is not a control passes unchanged.
        assert!(matches!(line("héllo — 日本 €"), Cow::Borrowed(_)));
        for out in [line(HOSTILE), text(HOSTILE)] {
            assert!(!out.chars().any(is_control), "{out:?}");
        }
    }

    #[test]
    fn json_text_keeps_its_value() {
        let v = serde_json::json!({"s": HOSTILE, "n": 1});
        let text = crate::json::stringify(&v);
        let safe = json(&text);
        assert!(!safe.chars().any(is_control), "{safe}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&safe).unwrap(), v);
    }
}
