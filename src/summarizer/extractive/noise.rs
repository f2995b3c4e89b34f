//! What a handoff leaves out or says in one line: the rules that keep a summary's items readable
//! on real sessions, where most of the volume is not news.
//!
//! Why a module of its own: published sessions (Pi development, OpenClaw assistants, harnesses
//! with subagents) repeat themselves by design (a heartbeat every half hour, a runtime note per
//! turn, a status poll every minute), paste whole documents into the transcript (injected system
//! notes, subagent reports, minified bundles in an error), and look around far more than they
//! change anything. Each rule here answers one question the sections ask before they admit an
//! item: is this the same thing again ([`shape`]), is it a line a person reads ([`gist`],
//! [`deblob`]), is it a change or only a look ([`is_look_tool`], `text::is_exploration`), did a
//! search fail or just find nothing ([`is_no_match`]), is it a request or small talk
//! ([`is_trivial_message`]), is it a rule or a pasted error ([`is_error_report`]).

use std::sync::LazyLock;

use regex::Regex;

use super::text::{clip_head, is_acknowledgement, is_exploration, sentences};
use crate::json::utf16_len;

/// What a text says with its numbers masked: lowercase, whitespace collapsed, every run of
/// digits as `#`. Two notes of the same shape are the same note sent again (a heartbeat with
/// another timestamp, a reminder with another count): a harness injects them, and what a
/// number in them says is news only in the latest.
pub(super) fn shape(text: &str) -> String {
    super::text::masked(text)
}

/// What a text the user side sent says with its dates, times and quantities masked
/// (`2026-03-05`, `10:15`, an ISO timestamp, an epoch, `4 files`, `88ms`, `3.5s`): a heartbeat
/// that differs only in its time, or a hook's report that differs only in its counts, is the
/// same text sent again. Numbers in names and labels stay: "Task 3: …" and "Task 4: …", or
/// `--opt1` and `--opt2`, are two requests.
pub(super) fn sent_shape(text: &str) -> String {
    static TIME_RE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?|\b\d{1,2}:\d{2}(?::\d{2})?\b|\b\d{10,13}\b",
        )
        .expect("time pattern is valid")
    });
    static QUANTITY_RE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)^\(?\d+(?:[.,]\d+)?(?:ms|s|m|h|kb|mb|gb|%|x)?[),.;]?$")
            .expect("quantity pattern is valid")
    });
    // A scheduled text names its day in words ("Thursday 5 March") as often as in digits.
    static DAY_RE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"\b(?:(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|January|February|March|April|June|July|August|September|October|November|December)\b",
        )
        .expect("day pattern is valid")
    });
    let timed = TIME_RE.replace_all(text.trim(), "#time");
    DAY_RE
        .replace_all(&timed, "#day")
        .split_whitespace()
        .map(|w| if QUANTITY_RE.is_match(w) { "#" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits injected blocks off a user text: a harness appends or prepends a block wrapped in a
/// tag on lines of their own (`<system-reminder>` … `</system-reminder>`) to what the user
/// typed. Returns the user's own text and the blocks as (tag, text without markup).
pub(super) fn split_injected(text: &str) -> (String, Vec<(String, String)>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut own: Vec<&str> = Vec::new();
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut k = 0;
    while k < lines.len() {
        let line = lines[k].trim();
        let tag = line
            .strip_prefix('<')
            .and_then(|r| r.strip_suffix('>'))
            .filter(|name| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':'))
                    && name.contains(['-', '_'])
            });
        if let Some(name) = tag {
            let close = format!("</{name}>");
            if let Some(end) = (k + 1..lines.len()).find(|&e| lines[e].trim() == close) {
                let body = lines[k + 1..end].join("\n");
                blocks.push((name.to_string(), without_markup(&body)));
                k = end + 1;
                continue;
            }
        }
        own.push(lines[k]);
        k += 1;
    }
    (own.join("\n").trim().to_string(), blocks)
}

/// Splits a harness's preamble off the start of a user text: paragraphs a gateway or harness
/// puts before what the user typed, such as metadata blocks (`Conversation info (untrusted
/// metadata):` and a fenced JSON block), system lines (`System: [2026-03-05 08:52] Heartbeat:
/// …`, `[System] …`) and capability lists. Returns the user's own words and the preamble as
/// (label, text) notes; a text that is all preamble comes back whole (it is then judged as it
/// is: a note, boilerplate or a request).
pub(super) fn split_preamble(text: &str) -> (String, Vec<(String, String)>) {
    static LABEL_RE: LazyLock<Regex> = LazyLock::new(|| {
        // The gateway says what the block is: a user's own "Here's the context:" before a
        // pasted log is part of the request.
        Regex::new(r"(?i)^[\w ()./-]{0,60}\b(?:untrusted|metadata)\b[^\n:]{0,30}:\s*$")
            .expect("metadata label pattern")
    });
    static SYSTEM_RE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?i)^(?:system(?: \([\w ]+\))?:|\[system\]|\[?(?:heartbeat|capabilities|tools available)\b)")
            .expect("system line pattern")
    });
    let paragraphs: Vec<&str> = text.split("\n\n").collect();
    let mut notes: Vec<(String, String)> = Vec::new();
    let mut k = 0;
    while k < paragraphs.len() {
        let p = paragraphs[k].trim();
        let first = p.lines().next().unwrap_or("").trim();
        let fenced = |q: &str| q.trim_start().starts_with("```") && q.trim_end().ends_with("```");
        if LABEL_RE.is_match(first) && (fenced(&p[first.len()..]) || p.lines().count() == 1) {
            // A label line with its fenced block (in this paragraph or the next).
            let mut body = p[first.len()..].trim().to_string();
            if body.is_empty() && paragraphs.get(k + 1).is_some_and(|q| fenced(q)) {
                k += 1;
                body = paragraphs[k].trim().to_string();
            }
            if body.is_empty() {
                break;
            }
            notes.push((
                first.trim_end_matches(':').to_string(),
                without_markup(body.trim_matches('`').trim_start_matches("json")),
            ));
        } else if SYSTEM_RE.is_match(first) && p.lines().all(|l| !l.trim().is_empty()) {
            notes.push(("system".to_string(), p.to_string()));
        } else {
            break;
        }
        k += 1;
    }
    let own = paragraphs[k.min(paragraphs.len())..].join("\n\n");
    if notes.is_empty() || own.trim().is_empty() {
        return (text.to_string(), Vec::new());
    }
    (own.trim().to_string(), notes)
}

/// A quoted text without the reference to where its rest is (`[120 more chars in entry 1a2b]`,
/// `[…120 more chars]`) that [`gist`] and `clip_head` end a cut text with.
pub(super) fn without_reference(text: &str) -> &str {
    let t = text.trim_end();
    match t.rfind(" [") {
        Some(i) if t.ends_with("more chars]") => &t[..i],
        _ => t,
    }
}

/// What a user text says for comparing it with a line an earlier summary quoted from a text
/// of the same kind: its first 120 characters, whitespace collapsed, dates and times masked
/// (see [`sent_shape`]). An earlier summary quotes a request clipped; the start survives.
pub(super) fn quoted_key(text: &str) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let start: String = collapsed.chars().take(120).collect();
    sent_shape(&start)
}

/// What a command does with its numeric arguments masked: a word that is a number (`sleep 30`,
/// `head -20`, `--timeout=60`, `5s`) is `#`, while digits inside a name (`opt0_1`, `v1.2`,
/// `job-2.sh`) stay, since another name is another command. Two commands of the same shape
/// are the same command run again (a poll with another `sleep`).
pub(super) fn command_shape(command: &str) -> String {
    fn number(w: &str) -> bool {
        let w = w.trim_start_matches('-');
        let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        !digits.is_empty()
            && w.len() - digits.len() <= 2
            && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
            && digits.starts_with(|c: char| c.is_ascii_digit())
    }
    command
        .split_whitespace()
        .map(|w| {
            let (flag, value) = match w.split_once('=') {
                Some((f, v)) => (Some(f), v),
                None => (None, w),
            };
            let value = value.trim_end_matches([';', ')']);
            let masked = if number(value) { "#" } else { value };
            match flag {
                Some(f) => format!("{f}={masked}"),
                None => masked.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The longest item a summary holds, in UTF-16 units: a line a person reads. Longer texts are
/// summarized to their point ([`gist`]) and named by entry id for the rest.
pub(super) const ITEM_MAX: usize = 360;

/// The shortest whitespace-free run that is no word (base64, a minified bundle, a token).
const BLOB_RUN: usize = 60;

/// Whether a whitespace-free token is a blob: long, and no plain path or URL; a run of letters
/// and digits longer than any identifier (base64, not a hex hash, which names something), or so
/// long nobody reads it.
fn is_blob_token(token: &str) -> bool {
    let t = token.trim_matches(|c: char| matches!(c, '`' | '(' | ')' | ',' | '.' | ':' | '"'));
    let n = t.chars().count();
    if n < BLOB_RUN {
        return false;
    }
    if t.starts_with("http://") || t.starts_with("https://") {
        return false;
    }
    let path = t.contains('/')
        && t.split('/').all(|seg| {
            seg.chars().count() <= 40
                && seg
                    .chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '~'))
        });
    if path {
        return false;
    }
    let encoded = t
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|run| run.len() >= 32 && !run.chars().all(|c| c.is_ascii_hexdigit()));
    encoded || n >= 120
}

/// Whether a line is minified code: long and dense with code punctuation.
fn is_minified_line(line: &str) -> bool {
    let n = line.chars().count();
    let punct = line
        .chars()
        .filter(|c| matches!(c, '{' | '}' | '(' | ')' | ';' | '=' | '[' | ']' | '<' | '>'))
        .count();
    n >= 160 && punct * 100 >= n * 12
}

/// The text with every blob token and minified line replaced by a short mark saying what was
/// there and how long it was: a summary never carries a run no person reads.
pub(super) fn deblob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (k, line) in text.lines().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        if is_minified_line(line) {
            out.push_str(&format!("[minified code, {} chars]", line.chars().count()));
            continue;
        }
        if !line.split_whitespace().any(is_blob_token) {
            out.push_str(line);
            continue;
        }
        let mut first = true;
        for word in line.split(' ') {
            if !first {
                out.push(' ');
            }
            first = false;
            if is_blob_token(word) {
                out.push_str(&format!(
                    "[unreadable run of {} chars]",
                    word.chars().count()
                ));
            } else {
                out.push_str(word);
            }
        }
    }
    out
}

/// Whether a text needs [`deblob`] (cheap enough to ask of every item).
pub(super) fn has_blob(text: &str) -> bool {
    text.lines()
        .any(|l| is_minified_line(l) || l.split_whitespace().any(is_blob_token))
}

/// A long text's point in at most `cap` units: from its first statement on (a line of three
/// words or more, so a wrapper's id line is skipped), as many whole statement lines as fit
/// (a listing after them is left to the entry), the first
/// one cut at a sentence end when it is longer than all the room; blobs marked. Says how much
/// was left out, and where to read it when the entry id is known. A text that fits is returned
/// as it is (blobs marked).
pub(super) fn gist(text: &str, cap: usize, entry: Option<&str>) -> String {
    let text = deblob(text.trim());
    if utf16_len(&text) <= cap {
        return text;
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines
        .iter()
        .position(|l| l.split_whitespace().count() >= 3)
        .unwrap_or(0);
    let mut kept: Vec<String> = Vec::new();
    let mut used = 0usize;
    for line in &lines[start.min(lines.len())..] {
        // A listing (a path per line, a tree) is no statement: the point ends before it.
        if !kept.is_empty() && line.split_whitespace().count() < 3 {
            break;
        }
        let n = utf16_len(line) + 1;
        if used + n <= cap {
            kept.push(line.to_string());
            used += n;
            continue;
        }
        if kept.is_empty() {
            kept.push(sentences_within(line, cap));
        }
        break;
    }
    let said = kept.join("\n");
    let left = utf16_len(&lines.join(" ")).saturating_sub(utf16_len(&kept.join(" ")));
    match entry {
        Some(id) if left > 0 => format!("{said} [{left} more chars in entry {id}]"),
        _ if left > 0 && !said.ends_with("more chars]") => format!("{said} […{left} more chars]"),
        _ => said,
    }
}

/// The whole sentences of a line that fit `cap` units (at least the first, clipped at a word
/// if it alone is longer), `…` when some were left out.
pub(super) fn sentences_within(line: &str, cap: usize) -> String {
    if utf16_len(line) <= cap {
        return line.to_string();
    }
    let mut said = String::new();
    for s in sentences(line) {
        let next = if said.is_empty() {
            s
        } else {
            format!("{said} {s}")
        };
        if utf16_len(&next) + 2 > cap {
            break;
        }
        said = next;
    }
    if said.is_empty() {
        clip_head(line, cap)
    } else {
        format!("{said} …")
    }
}

/// A failure's output in a few lines of at most `cap` units in all: from a line or two before
/// the line saying what went wrong (`headline`, see `text::error_headline`), which gives its
/// context, as many whole lines as fit; Pi's exit-code trailer and "(no output)" left out,
/// blobs marked. Says how much was left out, and where to read it when the entry id is known.
pub(super) fn excerpt(text: &str, headline: &str, cap: usize, entry: Option<&str>) -> String {
    let text = deblob(text);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "(no output)" && !super::text::EXIT_CODE_RE.is_match(l))
        .collect();
    let headline = deblob(headline.trim());
    let at = lines.iter().position(|l| *l == headline).unwrap_or(0);
    let mut out: Vec<String> = Vec::new();
    let mut used = 0usize;
    // The headline first, then the lines before it, then after it, while they fit.
    let mut take = |line: &str, out: &mut Vec<String>, front: bool| -> bool {
        let n = utf16_len(line) + 1;
        if used + n > cap && !out.is_empty() {
            return false;
        }
        used += n;
        let line = if n > cap {
            clip_head(line, cap)
        } else {
            line.to_string()
        };
        if front {
            out.insert(0, line);
        } else {
            out.push(line);
        }
        true
    };
    if let Some(h) = lines.get(at) {
        take(h, &mut out, false);
    }
    for k in (at.saturating_sub(2)..at).rev() {
        if !take(lines[k], &mut out, true) {
            break;
        }
    }
    let mut end = at + 1;
    while end < lines.len() && take(lines[end], &mut out, false) {
        end += 1;
    }
    let shown = utf16_len(&out.join(" "));
    let left = utf16_len(&lines.join(" ")).saturating_sub(shown);
    let mut said = out.join("\n");
    if left > 0 {
        match entry {
            Some(id) => said.push_str(&format!("\n[{left} more chars in entry {id}]")),
            None => said.push_str(&format!("\n[…{left} more chars]")),
        }
    }
    said
}

/// An injected text without its markup: each line's tags removed (`<summary>…</summary>` reads
/// as its content), lines left empty dropped.
pub(super) fn without_markup(text: &str) -> String {
    text.lines()
        .map(|l| strip_tags(l).trim().to_string())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A line without its markup tags.
fn strip_tags(line: &str) -> String {
    static TAG_RE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?/?>").expect("tag pattern"));
    TAG_RE.replace_all(line, " ").into_owned()
}

/// A user-role text a harness injected rather than the user typed: it is wrapped whole in one
/// markup tag (`<system-reminder>…</system-reminder>`, `<task-notification>…`). Returns the
/// tag's name, which labels the note.
pub(super) fn injected_tag(text: &str) -> Option<&str> {
    let t = text.trim();
    let rest = t.strip_prefix('<')?;
    let name_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':')))
        .unwrap_or(rest.len());
    let name = &rest[..name_len];
    if name.is_empty() || !rest[name_len..].starts_with(['>', ' ']) {
        return None;
    }
    t.ends_with(&format!("</{name}>")).then_some(name)
}

/// Verbs that make even a one-word message a request ("fix", "deploy"): the verbs a request
/// opens with (`text::TASK_VERBS`) and a few that are requests on their own.
fn is_task_verb(word: &str) -> bool {
    const ALSO: [&str; 4] = ["deploy", "test", "commit", "push"];
    super::text::TASK_VERBS.contains(&word) || ALSO.contains(&word)
}

/// A user message that states no task: an acknowledgement or greeting (see
/// `is_acknowledgement`), a bare read-only command typed as a message (`ls`, `git status`),
/// one word that is no task verb ("yo", "hmm", "status?"), or a two-word nudge ("retry
/// please") naming no path or identifier. The latest one is kept as the latest user reply.
pub(super) fn is_trivial_message(text: &str) -> bool {
    let t = text.trim();
    if is_acknowledgement(t) {
        return true;
    }
    if t.lines().count() > 1 {
        return false;
    }
    let words: Vec<&str> = t.split_whitespace().collect();
    if words.len() <= 4 && is_exploration(t.trim_matches('`')) {
        return true;
    }
    // Two words are a nudge ("retry please", "fix it"): they point at what was said before,
    // and state no task of their own; a path or an identifier in them may.
    let names_something = t.contains(['/', '.', '_', '`']);
    match words.as_slice() {
        [one] => {
            let w = one
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            !names_something && !is_task_verb(&w)
        }
        [_, _] => !names_something,
        _ => false,
    }
}

/// A line reporting an error rather than stating a rule: a provider's or tool's message
/// (`… rejected: …`, `error: …`, an exception name, an HTTP status with a JSON body, the
/// `tool_use`/`tool_result` pairing errors, a traceback). Sentences of such a line are quoted
/// error text, never constraints, whatever modal verb they use ("Each `tool_use` block must
/// have …").
pub(super) fn is_error_report(line: &str) -> bool {
    static ERROR_REPORT_RE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r#"(?i)(\b(?:error|exception|rejected|failed|failure|invalid|denied|refused)\b(?:\s*\([^)]*\)|\s+\d{3})?:\s|(?-i:\b[A-Z][a-z]+(?:Error|Exception)\b)|\btool_use\b|\btool_result\b|\binvalid_request|"type"\s*:\s*"error"|\b[45]\d\d\s*[{\[]|\btraceback\b|\bstatus(?: code)? [45]\d\d\b)"#,
        )
        .expect("error report pattern is valid")
    });
    ERROR_REPORT_RE.is_match(line)
}

/// Searching commands: an exit code of 1 with nothing on stderr means "no match".
fn is_search_command(command: &str) -> bool {
    super::text::command_parts(command).into_iter().any(|part| {
        let words: Vec<&str> = part.split_whitespace().collect();
        match words.first() {
            Some(&"git") => words.get(1) == Some(&"grep"),
            Some(w) => ["grep", "egrep", "fgrep", "rg", "ag", "ack", "zgrep"].contains(w),
            None => false,
        }
    })
}

/// Whether a command's failure is a search that found nothing: a search command (or a pipeline
/// with one) exiting 1 whose output says nothing but that (`(no output)`, Pi's exit-code
/// trailer). That is an answer, not a failure.
pub(super) fn is_no_match(command: &str, code: Option<i64>, output: &str) -> bool {
    if code != Some(1) || !is_search_command(command) {
        return false;
    }
    output.lines().map(str::trim).all(|l| {
        l.is_empty()
            || l == "(no output)"
            || super::text::EXIT_CODE_RE.is_match(l) && l.split_whitespace().count() <= 5
    })
}

/// Tools that only look (Pi's `grep`, `find`, `ls`; other harnesses' search and list tools).
/// Reading a file is a file operation and already no progress.
pub(super) fn is_look_tool(name: &str) -> bool {
    const LOOK: [&str; 14] = [
        "grep",
        "find",
        "ls",
        "glob",
        "search",
        "list",
        "tree",
        "list_files",
        "list_dir",
        "search_files",
        "file_search",
        "grep_search",
        "codebase_search",
        "semantic_search",
    ];
    let lower = name.to_ascii_lowercase();
    LOOK.contains(&lower.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_mask_numbers_so_a_resent_note_or_poll_is_the_same() {
        assert_eq!(
            shape("Current time: 2026-03-05 10:15 (Europe/Berlin)"),
            shape("Current time: 2026-03-05 10:45 (Europe/Berlin)")
        );
        assert_eq!(
            shape("[heartbeat] 10:15 reply HEARTBEAT_OK"),
            shape("[heartbeat] 10:45 reply HEARTBEAT_OK")
        );
        assert_eq!(
            sent_shape("Read HEARTBEAT.md. Current time: 2026-03-05 10:15 (Europe/Berlin)"),
            sent_shape("Read HEARTBEAT.md. Current time: 2026-03-06 11:45 (Europe/Berlin)")
        );
        assert_ne!(
            sent_shape("Task 3: add the flag"),
            sent_shape("Task 4: add the flag")
        );
        assert_eq!(
            sent_shape("PostToolUse:Read hook succeeded: checked 4 files in 88ms"),
            sent_shape("PostToolUse:Read hook succeeded: checked 12 files in 7ms")
        );
        assert_ne!(
            sent_shape("add the `--opt1` flag"),
            sent_shape("add the `--opt2` flag")
        );
        assert_eq!(
            command_shape("sleep 30 && curl -s localhost:8080/health | head -20"),
            command_shape("sleep 60 && curl -s localhost:8080/health | head -5")
        );
        assert_eq!(
            command_shape("pytest --timeout=30 -x"),
            command_shape("pytest --timeout=90 -x")
        );
        assert_ne!(
            command_shape("cargo test opt0_1"),
            command_shape("cargo test opt0_2")
        );
        assert_ne!(
            command_shape("sh scripts/job-1.sh"),
            command_shape("sh scripts/job-2.sh")
        );
    }

    #[test]
    fn blobs_are_marked_and_paths_urls_and_hashes_are_not() {
        let b64 =
            "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkwYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo=";
        let out = deblob(&format!("token: {b64} rejected"));
        assert!(
            out.starts_with("token: [unreadable run of") && out.ends_with(" chars] rejected"),
            "{out}"
        );
        let minified = "function n(r){if(t[r])return t[r].exports;var o=t[r]={i:r,l:!1,exports:{}};return e[r].call(o.exports,o,o.exports,n),o.l=!0,o.exports}n.m=e,n.c=t,n.d=function(e,t,r){n.o(e,t)}";
        assert_eq!(
            deblob(minified),
            format!("[minified code, {} chars]", minified.len())
        );
        for fine in [
            "Edited `packages/coding-agent/src/core/extensions/loader/resolve-extension-paths.ts`",
            "see https://github.com/badlogic/pi-mono/blob/main/packages/ai/src/providers/anthropic.ts#L120",
            "image sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
            r#"529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ] {
            assert!(!has_blob(fine), "{fine}");
            assert_eq!(deblob(fine), fine);
        }
    }

    #[test]
    fn a_gist_is_one_bounded_line_that_names_where_the_rest_is() {
        let report = format!(
            "<task-notification>\n<task-id>bg_1</task-id>\n<summary>Agent \"Audit billing\" completed</summary>\n<result>\n{}\n</result>\n</task-notification>",
            "- checked a handler: fine\n".repeat(40)
        );
        let g = gist(&without_markup(&report), ITEM_MAX, Some("0000002a"));
        assert!(g.starts_with("Agent \"Audit billing\" completed"), "{g}");
        assert!(g.ends_with("more chars in entry 0000002a]"), "{g}");
        assert!(utf16_len(&g) <= ITEM_MAX + 40, "{g}");
        assert_eq!(gist("short note", ITEM_MAX, None), "short note");
    }

    #[test]
    fn blocks_a_harness_appends_to_the_users_text_are_split_off() {
        let (own, blocks) = split_injected(
            "Stream the export.\n\n<system-reminder>\nThe project uses Django 5.\n</system-reminder>",
        );
        assert_eq!(own, "Stream the export.");
        assert_eq!(
            blocks,
            vec![(
                "system-reminder".to_string(),
                "The project uses Django 5.".to_string()
            )]
        );
        // Markup the user typed stays: a tag without a closing line, an HTML tag.
        let typed = "Fix the layout of\n<div>\nin the header";
        assert_eq!(split_injected(typed), (typed.to_string(), vec![]));
    }

    #[test]
    fn injected_user_texts_are_recognised_by_their_wrapping_tag() {
        assert_eq!(
            injected_tag("<system-reminder>\nUpdate the todo list.\n</system-reminder>"),
            Some("system-reminder")
        );
        assert_eq!(injected_tag("<b>bold</b> text"), None);
        assert_eq!(injected_tag("fix the <div> layout"), None);
    }

    #[test]
    fn trivial_messages_are_small_talk_bare_commands_and_lone_words() {
        for t in [
            "yo",
            "ls",
            "git status",
            "ok thanks",
            "hmm",
            "status?",
            "retry please",
            "fix it",
        ] {
            assert!(is_trivial_message(t), "{t}");
        }
        for t in [
            "deploy",
            "Fix the flaky retry test",
            "src/main.rs",
            "fix src/main.rs",
        ] {
            assert!(!is_trivial_message(t), "{t}");
        }
    }

    #[test]
    fn pasted_errors_are_reports_and_rules_are_not() {
        assert!(is_error_report("got this: LLM request rejected: messages.14: `tool_use` ids were found without `tool_result` blocks. Each `tool_use` block must have a corresponding `tool_result` block."));
        assert!(is_error_report(
            "TypeError: cannot read properties of undefined"
        ));
        assert!(is_error_report(
            r#"400 {"type":"error","error":{"type":"invalid_request_error"}}"#
        ));
        for rule in [
            "Never swallow errors silently.",
            "Don't use unwrap in library code.",
            "Always run the tests before committing; never push to main.",
            "Also, I prefer error types with thiserror over anyhow in this crate.",
        ] {
            assert!(!is_error_report(rule), "{rule}");
        }
    }

    #[test]
    fn a_search_that_found_nothing_is_no_failure() {
        assert!(is_no_match(
            "grep -rn useFakeTimers test",
            Some(1),
            "(no output)\n\nCommand exited with code 1"
        ));
        assert!(is_no_match("rg -n foo src | head", Some(1), ""));
        assert!(!is_no_match(
            "rg -n foo src",
            Some(2),
            "rg: src: No such file or directory"
        ));
        assert!(!is_no_match(
            "grep -rn foo nope",
            Some(1),
            "grep: nope: No such file or directory"
        ));
        assert!(!is_no_match("cargo test", Some(1), ""));
    }
}
