//! Whether a literal is a secret: random enough, and not a placeholder, an elided example, a
//! reference, code or a type name.

use super::REDACTED;

pub(super) fn distinct_chars(s: &str) -> usize {
    let mut seen: Vec<char> = s.chars().collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// What a secret-named key holds, which decides how random its value must look.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum SecretKind {
    /// Chosen by a person: may be a plain word (`PASSWORD=correcthorse`).
    Password,
    /// Generated (a key, a token, a secret): must look random.
    Generated,
}

impl SecretKind {
    pub(super) fn of(name: &str) -> SecretKind {
        let lower = name.to_ascii_lowercase();
        if ["pass", "pwd", "passphrase"]
            .iter()
            .any(|w| lower.contains(w))
        {
            SecretKind::Password
        } else {
            SecretKind::Generated
        }
    }
}

/// `(open quote, inner, close quote)` of an assigned value.
pub(super) fn unquote(value: &str) -> (&str, &str, &str) {
    if let Some(i) = value
        .strip_prefix("\\\"")
        .and_then(|v| v.strip_suffix("\\\""))
    {
        ("\\\"", i, "\\\"")
    } else if value.len() >= 2 && (value.starts_with('"') || value.starts_with('\'')) {
        let q = &value[..1];
        let i = value
            .strip_prefix(q)
            .and_then(|v| v.strip_suffix(q))
            .unwrap_or("");
        (q, i, q)
    } else {
        ("", value, "")
    }
}

/// The redacted form of an assigned value (quotes kept), or `None` when it is not a secret.
pub(super) fn redact_assigned(value: &str, kind: SecretKind, env_style: bool) -> Option<String> {
    let (open, inner, close) = unquote(value);
    if !is_secret_value(inner, kind, !open.is_empty() || env_style) {
        return None;
    }
    Some(format!("{open}{REDACTED}{close}"))
}

/// Whether `inner` (an assigned literal without quotes) is a secret. Never: short values,
/// placeholders and elided examples, references (`$VAR`, `${…}`, `process.env…`), code
/// (`args[++i]`, `options?.apiKey`, `getToken()`), types (`String`, `Option<String>`) and
/// structured identifiers (`agent:main:main`). Otherwise a password may be any word when it is
/// a literal (`quoted`: in quotes or env style), and needs a digit or symbol when bare; every
/// other secret must look random.
pub(super) fn is_secret_value(inner: &str, kind: SecretKind, quoted: bool) -> bool {
    let v = inner.trim();
    let min = if kind == SecretKind::Password { 4 } else { 8 };
    if v.chars().count() < min || v.contains(REDACTED) {
        return false;
    }
    if is_placeholder(v) || is_reference(v) || is_code(v) {
        return false;
    }
    // Keys, tokens and generated passwords have no spaces or escape sequences; a quoted
    // value with them is prose or code (`token = "module\tclient"`).
    if v.contains(char::is_whitespace) || v.contains('\\') {
        return false;
    }
    match kind {
        SecretKind::Password if quoted => !is_type_word(v),
        SecretKind::Password => {
            !is_type_word(v)
                && v.bytes().any(|b| b.is_ascii_alphabetic())
                && v.bytes().any(|b| !b.is_ascii_alphabetic())
        }
        SecretKind::Generated => looks_random(v),
    }
}

/// Random enough for a generated credential: at least 8 characters, not a structured
/// identifier, and either letters mixed with digits, or a long mixed-case string whose
/// characters vary (Shannon entropy of at least 3.5 bits per character).
pub(super) fn looks_random(v: &str) -> bool {
    let n = v.chars().count();
    if n < 8 || is_structured(v) {
        return false;
    }
    let digit = v.bytes().any(|b| b.is_ascii_digit());
    let alpha = v.bytes().any(|b| b.is_ascii_alphabetic());
    let upper = v.bytes().any(|b| b.is_ascii_uppercase());
    let lower = v.bytes().any(|b| b.is_ascii_lowercase());
    (digit && alpha && distinct_chars(v) >= 6) || (n >= 20 && upper && lower && entropy(v) >= 3.5)
}

pub(super) fn entropy(v: &str) -> f64 {
    let chars: Vec<char> = v.chars().collect();
    let n = chars.len() as f64;
    let mut sorted = chars.clone();
    sorted.sort_unstable();
    let mut h = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let j = sorted[i..].iter().take_while(|&&c| c == sorted[i]).count();
        let p = j as f64 / n;
        h -= p * p.log2();
        i += j;
    }
    h
}

/// Words, short numbers and short alphanumerics joined by `:` `.` `/` `-` `_`: an identifier
/// (`agent:main:main`, `user:42:profile`, `docs/readme.md`, `v1.2.3`), not a secret.
pub(super) fn is_structured(v: &str) -> bool {
    let parts: Vec<&str> = v
        .split([':', '.', '/', '-', '_', '@', '+'])
        .filter(|p| !p.is_empty())
        .collect();
    parts.len() >= 2
        && parts.iter().all(|p| {
            p.chars().all(|c| c.is_ascii_alphabetic())
                || (p.len() <= 4 && p.chars().all(|c| c.is_ascii_digit()))
                || p.len() <= 3
        })
}

/// Placeholders and elided examples: `YOUR_API_KEY`, `<token>`, `sk-...`, `xxxx`, `****`,
/// `changeme`, `REPLACE_ME`.
pub(super) fn is_placeholder(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    const WORDS: [&str; 22] = [
        "changeme",
        "change_me",
        "change-me",
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "api_key",
        "test",
        "testing",
        "dummy",
        "example",
        "placeholder",
        "redacted",
        "none",
        "null",
        "todo",
        "fixme",
        "value",
        "foo",
        "bar",
    ];
    let masked = v.len() >= 3
        && v.chars()
            .all(|c| matches!(c, '*' | 'x' | 'X' | '.' | '•' | '…' | '#' | '-' | '_'));
    let caps_name = v
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b == b'_' || b == b'-')
        && v.bytes().any(|b| b == b'_' || b == b'-');
    masked
        || caps_name
        || WORDS.contains(&lower.as_str())
        || v.contains("...")
        || v.contains('…')
        || lower.contains("xxxx")
        || lower.contains("****")
        || v.starts_with('<')
        || v.starts_with('[')
        || [
            "your", "my-", "my_", "insert", "replace", "enter-", "enter_", "put-", "put_",
        ]
        .iter()
        .any(|p| lower.starts_with(p))
        || lower.contains("replace_me")
        || lower.contains("replace-me")
        || lower.ends_with("_here")
        || lower.ends_with("-here")
}

/// References to a secret kept elsewhere: `$VAR`, `${…}`, `{{ … }}`, `%(…)s`, `process.env…`.
pub(super) fn is_reference(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    [
        "$",
        "{{",
        "%",
        "process.env",
        "os.environ",
        "env::",
        "env.",
        "import.meta.env",
    ]
    .iter()
    .any(|p| lower.starts_with(p))
        || v.contains("${")
        || v.contains("$(")
}

/// Code, not a literal: calls, indexing, optional chaining, paths, arrows, member access on
/// identifiers (`self.token`, `options.apiKey`).
pub(super) fn is_code(v: &str) -> bool {
    let punct = ['(', ')', '[', ']', '{', '}', '<', '>', '?', '`', ','];
    if v.contains(punct) || v.contains("::") || v.contains("=>") || v.starts_with('=') {
        return true;
    }
    let ident = |s: &str| {
        let mut chars = s.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
            && s.bytes().filter(u8::is_ascii_digit).count() <= 2
    };
    v.contains('.') && v.split('.').all(ident)
}

/// Type names and literal keywords: `String`, `string`, `Option`, `bool`, `true`, `None`.
pub(super) fn is_type_word(v: &str) -> bool {
    const WORDS: [&str; 22] = [
        "string",
        "str",
        "number",
        "int",
        "integer",
        "bool",
        "boolean",
        "bytes",
        "any",
        "unknown",
        "object",
        "undefined",
        "true",
        "false",
        "required",
        "optional",
        "text",
        "varchar",
        "char",
        "hidden",
        "masked",
        "nil",
    ];
    let lower = v.to_ascii_lowercase();
    let capitalized_ident = v.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && v.chars().skip(1).all(|c| c.is_ascii_alphabetic())
        && v.chars().skip(1).any(|c| c.is_ascii_lowercase());
    WORDS.contains(&lower.as_str()) || capitalized_ident
}
