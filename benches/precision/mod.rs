//! The precision lint: counts the items of a summary that a person taking the work over would
//! strike out as noise, by kind. Recall probes say what a summary kept; this says what it should
//! not have kept, so a summarizer cannot buy recall by pasting everything.
//!
//! Why a lint and not probes: noise on real sessions comes in a few recurring shapes (the same
//! injected note a dozen times, a wall of pasted text, `grep` listed as progress, a search that
//! found nothing listed as a blocker, a sentence fragment as a decision, a provider's error text
//! as a rule, "yo" as a goal), and each shape is recognisable from the summary alone, whatever
//! session it came from. A probe catches one planted case; the lint catches every occurrence.
//!
//! The lint reads only the rendered text (Pi's section layouts: the history summary, the
//! turn-prefix summary, both joined for a split turn); it knows nothing of how the summarizer
//! works. Pi's file blocks and compactd's recall footer are not items and are skipped.
//!
//! This file is shared: the quality bench (`benches/quality.rs`) runs it over its corpus, and
//! the extractive summarizer's unit tests include it (`#[path]`), which also runs the tests at
//! its end, so a lint that stopped counting planted noise fails `cargo test --lib extractive`.

#![allow(dead_code)]

/// A kind of noise item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// An item saying what another item of its section says: the same text once digits,
    /// timestamps and ids are masked (a re-sent note, the same polling command with another
    /// `sleep`), or the same error quoted again for another command. Each copy after the first
    /// counts.
    Repeat,
    /// An item longer than [`LONG_ITEM`] characters: a pasted note, report or output.
    Long,
    /// An item holding base64, minified code or another run no person reads.
    Blob,
    /// Read-only exploration (`grep`, `ls`, `cat`, `find`, `git log`…) listed under Done;
    /// one line saying what was explored is allowed, each further one counts.
    ReadOnlyProgress,
    /// A search that found nothing (`grep` exiting 1) listed under Blocked.
    NoMatchFailure,
    /// A Key Decision or Next Step that is no complete statement: a lead-in ending with a
    /// colon, a cut sentence, two words.
    Fragment,
    /// A provider's or tool's error text listed under Constraints & Preferences.
    ErrorAsConstraint,
    /// A greeting, an acknowledgement, a bare command or another one- or two-word message
    /// listed as a goal beside the latest request.
    TriviaGoal,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Repeat,
        Kind::Long,
        Kind::Blob,
        Kind::ReadOnlyProgress,
        Kind::NoMatchFailure,
        Kind::Fragment,
        Kind::ErrorAsConstraint,
        Kind::TriviaGoal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Repeat => "repeats",
            Kind::Long => "long items",
            Kind::Blob => "blobs",
            Kind::ReadOnlyProgress => "read-only progress",
            Kind::NoMatchFailure => "no-match failures",
            Kind::Fragment => "fragments",
            Kind::ErrorAsConstraint => "error text as constraints",
            Kind::TriviaGoal => "trivia as goals",
        }
    }
}

/// The longest item a person reads as one line of a handoff, in characters.
pub const LONG_ITEM: usize = 400;

/// The shortest whitespace-free run that counts as a blob (a path or URL does not).
const BLOB_RUN: usize = 60;

/// One noise item found.
#[derive(Clone, Debug)]
pub struct Finding {
    pub kind: Kind,
    /// The section's short name (`goal`, `done`, …).
    pub section: &'static str,
    pub item: String,
}

/// One item of a summary: its section and its text (continuation lines joined with `\n`).
#[derive(Clone, Debug)]
pub struct Item {
    pub section: &'static str,
    pub text: String,
    /// 0 for the history summary, 1 for a split turn's prefix summary after it: two summaries
    /// of two spans, so the same edit in both is two edits, not a repeat.
    pub part: usize,
}

/// The section a heading line opens, by short name; `None` for a line that is no heading.
fn section_of(line: &str) -> Option<&'static str> {
    Some(match line.trim_end() {
        "## Goal" | "## Original Request" => "goal",
        "## Constraints & Preferences" => "constraints",
        "### Done" | "## Early Progress" => "done",
        "## Progress" => "progress",
        "### In Progress" => "in-progress",
        "### Blocked" => "blocked",
        "## Key Decisions" => "decisions",
        "## Next Steps" => "next",
        "## Critical Context" | "## Context for Suffix" => "critical",
        _ => return None,
    })
}

/// Splits a rendered summary into its items (see [`Item`]). File blocks, the recall footer,
/// the split-turn joiner and "(none)" placeholders are not items.
pub fn items(summary: &str) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    let mut section: Option<&'static str> = None;
    let mut in_block = false;
    let mut part = 0usize;
    for line in summary.lines() {
        let t = line.trim();
        if t == "<read-files>" || t == "<modified-files>" {
            in_block = true;
            continue;
        }
        if t == "</read-files>" || t == "</modified-files>" {
            in_block = false;
            continue;
        }
        if in_block || t.is_empty() || t == "---" || t.starts_with("[compactd recall]") {
            continue;
        }
        if t.starts_with("**Turn Context") {
            section = None;
            part += 1;
            continue;
        }
        if let Some(s) = section_of(line) {
            section = Some(s);
            continue;
        }
        let Some(sec) = section else {
            continue;
        };
        let continues = line.starts_with(' ') || line.starts_with('\t');
        if continues {
            if let Some(last) = out.last_mut() {
                last.text.push('\n');
                last.text.push_str(t);
                continue;
            }
        }
        let body = strip_marker(t);
        if body == "(none)" {
            continue;
        }
        out.push(Item {
            section: sec,
            text: body.to_string(),
            part,
        });
    }
    out
}

/// A list item's text without its marker (`- `, `- [x] `, `- [ ] `, `3. `).
fn strip_marker(line: &str) -> &str {
    for m in ["- [x] ", "- [ ] ", "- ", "* "] {
        if let Some(rest) = line.strip_prefix(m) {
            return rest;
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 {
        if let Some(rest) = line[digits..].strip_prefix(". ") {
            return rest;
        }
    }
    line
}

/// Every noise item of a summary (see [`Kind`]).
pub fn lint(summary: &str) -> Vec<Finding> {
    let items = items(summary);
    let mut out = Vec::new();
    let mut found = |kind: Kind, item: &Item| {
        out.push(Finding {
            kind,
            section: item.section,
            item: item.text.clone(),
        })
    };
    let mut seen: Vec<(usize, &'static str, String)> = Vec::new();
    let mut read_only_done = 0usize;
    let labelled_latest = items
        .iter()
        .any(|i| i.section == "goal" && i.text.starts_with("(latest) "));
    // The errors the items of a section quote: the same error said twice is a repeat too.
    let mut errors: Vec<(usize, &'static str, String)> = Vec::new();
    for item in &items {
        let key = repeat_key(&item.text);
        let error = error_key(&item.text);
        let said_error = error.as_ref().is_some_and(|e| {
            errors
                .iter()
                .any(|(p, s, k)| *p == item.part && *s == item.section && k == e)
        });
        if said_error
            || seen
                .iter()
                .any(|(p, s, k)| *p == item.part && *s == item.section && same_statement(k, &key))
        {
            found(Kind::Repeat, item);
        } else {
            seen.push((item.part, item.section, key));
        }
        if let Some(e) = error {
            errors.push((item.part, item.section, e));
        }
        if item.text.chars().count() > LONG_ITEM {
            found(Kind::Long, item);
        }
        if has_blob(&item.text) {
            found(Kind::Blob, item);
        }
        match item.section {
            "done" if is_read_only_item(&item.text) => {
                read_only_done += 1;
                if read_only_done > 1 {
                    found(Kind::ReadOnlyProgress, item);
                }
            }
            "blocked" if is_no_match_failure(&item.text) => found(Kind::NoMatchFailure, item),
            "decisions" | "next" if is_fragment(&item.text) => found(Kind::Fragment, item),
            // A turn-prefix summary lists its decisions under Early Progress.
            "done" if item.text.starts_with("Decision: ") && is_fragment(&item.text) => {
                found(Kind::Fragment, item)
            }
            "constraints" if is_error_text(&item.text) => found(Kind::ErrorAsConstraint, item),
            "goal"
                if labelled_latest
                    && !item.text.starts_with("(latest) ")
                    && is_trivia(&item.text) =>
            {
                found(Kind::TriviaGoal, item)
            }
            _ => {}
        }
    }
    out
}

/// Noise counts by kind, in [`Kind::ALL`] order.
pub fn counts(findings: &[Finding]) -> [usize; 8] {
    let mut c = [0usize; 8];
    for f in findings {
        if let Some(k) = Kind::ALL.iter().position(|k| *k == f.kind) {
            c[k] += 1;
        }
    }
    c
}

// ---------------------------------------------------------------------------------------------
// The rules
// ---------------------------------------------------------------------------------------------

/// What an item says with its numbers masked: lowercase, whitespace collapsed, markdown marks
/// gone, every run of digits (and every hex id or timestamp holding digits) as `#`, count
/// annotations (`×3`, `(3 runs)`, `sent 3×`) dropped.
fn repeat_key(text: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    for raw in text.split_whitespace() {
        let w: String = raw
            .chars()
            .filter(|c| !matches!(c, '`' | '*' | '"' | '\''))
            .collect::<String>()
            .to_lowercase();
        let hexish = w.len() >= 8
            && w.chars().any(|c| c.is_ascii_digit())
            && w.chars()
                .all(|c| c.is_ascii_hexdigit() || matches!(c, '-' | ':' | '.' | 't' | 'z'));
        let masked = if hexish {
            "#".to_string()
        } else {
            let mut m = String::new();
            let mut digits = false;
            for c in w.chars() {
                if c.is_ascii_digit() {
                    if !digits {
                        m.push('#');
                    }
                    digits = true;
                } else {
                    digits = false;
                    m.push(c);
                }
            }
            m
        };
        // "×#", "#×", "(#", "runs)": counts say how often, not what.
        if masked.contains('×') || masked == "(#" || masked == "#)" {
            continue;
        }
        words.push(masked);
    }
    words.join(" ")
}

/// The error an item quotes, masked as [`repeat_key`] masks: the message after a Blocked
/// line's "failed …: " or a Next Step's "Fix the failure of `x`: ", or the quoted line naming
/// the error under a Critical Context "… error from …:" heading. `None` for an item quoting no error.
fn error_key(text: &str) -> Option<String> {
    let first = text.lines().next()?;
    let message = if first.starts_with("Last error from ") || first.starts_with("Earlier error") {
        // The quoted line that names the error (a test runner's `FAIL …` line names the test).
        let quoted: Vec<&str> = text.lines().skip(1).map(str::trim).collect();
        let named = quoted.iter().find(|l| {
            let lower = l.to_lowercase();
            ["error", "exception", "panicked"]
                .iter()
                .any(|w| lower.contains(w))
        });
        named.or(quoted.first())?.to_string()
    } else if first.starts_with("Fix the failure of ") || first.contains("` failed") {
        let h = head(first)?;
        first[h.len()..].trim_start_matches(':').trim().to_owned()
    } else {
        return None;
    };
    let key = repeat_key(&message);
    (key.len() >= 12).then_some(key)
}

/// Two masked items say the same thing: equal, one holding the other whole (a sentence listed
/// alone and again after its lead-in), or (long enough to be a pasted note) the same first 80
/// characters.
fn same_statement(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short.chars().count() >= 40 && long.contains(short) {
        return true;
    }
    let head = |s: &str| s.chars().take(80).collect::<String>();
    a.chars().count() >= 80 && b.chars().count() >= 80 && head(a) == head(b)
}

/// A run no person reads: a whitespace-free token of [`BLOB_RUN`] characters or more that is
/// no plain path or URL and holds a run of letters and digits longer than any identifier
/// (base64; a hex hash names something and is no blob), or is so long nobody reads it; or a
/// long line dense with code punctuation (minified code with spaces). A one-line command or a
/// compact JSON error is long but readable.
fn has_blob(text: &str) -> bool {
    for token in text.split_whitespace() {
        let t = token.trim_matches(|c: char| matches!(c, '`' | '(' | ')' | ',' | '.' | ':' | '"'));
        let n = t.chars().count();
        if n < BLOB_RUN {
            continue;
        }
        let url = t.starts_with("http://") || t.starts_with("https://");
        let path = t.contains('/')
            && t.split('/').all(|seg| {
                seg.chars().count() <= 40
                    && seg
                        .chars()
                        .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '~'))
            });
        if url || path {
            continue;
        }
        let encoded = t
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|run| run.len() >= 32 && !run.chars().all(|c| c.is_ascii_hexdigit()));
        if encoded || n >= 120 {
            return true;
        }
    }
    text.lines().any(|line| {
        let n = line.chars().count();
        let punct = line
            .chars()
            .filter(|c| matches!(c, '{' | '}' | '(' | ')' | ';' | '=' | '[' | ']' | '<' | '>'))
            .count();
        n >= 160 && punct * 100 >= n * 12
    })
}

/// The first inline-code span of an item (`` `grep -rn x src` ``), if any.
fn first_code(text: &str) -> Option<&str> {
    let c = text.split('`').nth(1)?;
    (!c.trim().is_empty()).then_some(c.trim())
}

/// Read-only shell commands: they look, they change nothing.
const LOOK: [&str; 26] = [
    "ls", "ll", "find", "cat", "head", "tail", "grep", "egrep", "fgrep", "rg", "ag", "ack", "fd",
    "tree", "pwd", "wc", "which", "stat", "file", "du", "less", "more", "jq", "sort", "uniq",
    "awk",
];

/// Read-only `git` subcommands.
const GIT_LOOK: [&str; 9] = [
    "log",
    "status",
    "diff",
    "show",
    "grep",
    "blame",
    "branch",
    "ls-files",
    "rev-parse",
];

/// Tools that only look (Pi's `read`, `grep`, `find`, `ls`; other harnesses' search tools).
const LOOK_TOOLS: [&str; 12] = [
    "read",
    "grep",
    "find",
    "ls",
    "glob",
    "search",
    "list",
    "view",
    "read_file",
    "list_files",
    "search_files",
    "codebase_search",
];

/// The parts of a command line, split at `|`, `;`, `&` outside quotes.
fn parts(cmd: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    for (i, c) in cmd.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '|' | ';' | '&') => {
                out.push(&cmd[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&cmd[start..]);
    out
}

/// Whether a shell command only reads: every part of a pipeline or chain is a read-only
/// command (`cd` moves, `sleep` waits, a `curl` without a method, body or output file gets),
/// and nothing is redirected into a file.
fn is_read_only_command(cmd: &str) -> bool {
    if cmd.contains('>') {
        return false;
    }
    let mut any = false;
    for part in parts(cmd) {
        let words: Vec<&str> = part.split_whitespace().collect();
        let Some(first) = words.first() else {
            continue;
        };
        any = true;
        let ok = match *first {
            "cd" => true,
            "git" => words
                .iter()
                .skip(1)
                .find(|w| !w.starts_with('-'))
                .is_some_and(|s| GIT_LOOK.contains(s)),
            "sed" => words.get(1) == Some(&"-n"),
            "sleep" => true,
            "curl" => !words.iter().any(|w| {
                [
                    "-X",
                    "--request",
                    "-d",
                    "--data",
                    "-F",
                    "--form",
                    "-T",
                    "-o",
                    "--output",
                ]
                .iter()
                .any(|f| w == f || w.starts_with(&format!("{f}=")))
                    || w.starts_with("--data") && !w.starts_with("--data-urlencode")
            }),
            w => LOOK.contains(&w),
        };
        if !ok {
            return false;
        }
    }
    any
}

/// A Done item about read-only exploration: a read-only command run, a looking tool called, a
/// file read.
fn is_read_only_item(text: &str) -> bool {
    let lower = text.to_lowercase();
    let tool_named = |prefix: &str| {
        lower.strip_prefix(prefix).is_some_and(|rest| {
            let name = rest.split('`').next().unwrap_or("");
            LOOK_TOOLS.contains(&name)
        })
    };
    if tool_named("called `") || tool_named("`") || lower.starts_with("read `") {
        return true;
    }
    (lower.starts_with("ran `") || lower.starts_with("command `"))
        && first_code(text).is_some_and(is_read_only_command)
}

/// A search command: its first word (after `cd …&&`) searches.
fn is_search(cmd: &str) -> bool {
    parts(cmd).into_iter().any(|part| {
        let words: Vec<&str> = part.split_whitespace().collect();
        match words.first() {
            Some(&"git") => words.get(1) == Some(&"grep"),
            Some(w) => ["grep", "egrep", "fgrep", "rg", "ag", "ack"].contains(w),
            None => false,
        }
    })
}

/// A Blocked item about a search that exited 1 (grep's "no match") with nothing to say.
fn is_no_match_failure(text: &str) -> bool {
    let Some(cmd) = first_code(text) else {
        return false;
    };
    if !is_search(cmd) {
        return false;
    }
    let lower = text.to_lowercase();
    let code_one = lower.contains("exit code 1)") || lower.contains("exit code 1:");
    let after = text.splitn(3, '`').nth(2).unwrap_or("");
    let message = after.split_once(": ").map_or("", |(_, m)| m).trim();
    let nothing = message.is_empty()
        || message.contains("(no output)")
        || message
            .to_lowercase()
            .starts_with("command exited with code");
    code_one || nothing
}

/// Words a statement cannot end on.
const DANGLING: [&str; 22] = [
    "and", "or", "but", "the", "a", "an", "to", "of", "with", "for", "in", "on", "at", "by",
    "from", "that", "which", "then", "so", "let", "me", "is",
];

/// A Key Decision or Next Step that is no complete statement: a lead-in ending on a colon or a
/// comma, fewer than three words, a sentence ending on a word no sentence ends on or cut.
fn is_fragment(text: &str) -> bool {
    let mut t = text.trim();
    for label in ["(earlier) ", "(latest) ", "Decision: "] {
        t = t.strip_prefix(label).unwrap_or(t);
    }
    // "(plan step 2) …": the label numbers the step, it is not the statement.
    if let Some(rest) = t.strip_prefix("(plan step ") {
        t = rest.split_once(") ").map_or(rest, |(_, r)| r);
    }
    let t = t.lines().next().unwrap_or("").trim();
    // A statement introducing a quote ("Fix the failure of `x`: <the error>", "Make sure the
    // latest request is handled: <the request>") is judged by the statement: a quoted error
    // or request may be cut, the step is still a sentence.
    !is_statement(t) && head(t).is_none_or(|h| !is_statement(h))
}

/// What precedes the first `: ` outside inline code, when something follows it.
fn head(t: &str) -> Option<&str> {
    let mut in_code = false;
    for (i, c) in t.char_indices() {
        match c {
            '`' => in_code = !in_code,
            ':' if !in_code && t[i + 1..].starts_with(' ') && !t[i + 2..].trim().is_empty() => {
                return Some(&t[..i]);
            }
            _ => {}
        }
    }
    None
}

/// Whether a line is a complete statement (see [`is_fragment`]).
fn is_statement(t: &str) -> bool {
    // A reference to where the rest is (`[120 more chars in entry 1a2b]`) follows a statement
    // cut at its end; after a cut word it marks a cut sentence.
    if t.ends_with("more chars]") {
        let before = t.rfind(" [").map_or("", |i| t[..i].trim_end());
        return before.ends_with(['.', '!', '?', ')', '`', '…']);
    }
    let t = t.trim_end_matches(['*', '_', '`', ' ']);
    if t.ends_with(':') || t.ends_with(',') || t.ends_with(" -") || t.ends_with('—') {
        return false;
    }
    let words: Vec<String> = t
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    words.len() >= 3
        && words
            .last()
            .is_some_and(|w| !DANGLING.contains(&w.as_str()))
}

/// A provider's or tool's error text: an API error's wording (`tool_use`/`tool_result`,
/// `invalid_request_error`, an HTTP status), an exception's name, `error:`, a traceback.
fn is_error_text(text: &str) -> bool {
    let lower = text.to_lowercase();
    const MARKERS: [&str; 14] = [
        "tool_use",
        "tool_result",
        "invalid_request",
        "\"type\":\"error\"",
        "\"type\": \"error\"",
        "status code",
        "traceback",
        "exception",
        "error:",
        "error[",
        "rate limit",
        "rate_limit",
        "overloaded",
        "stack trace",
    ];
    if MARKERS.iter().any(|m| lower.contains(m)) {
        return true;
    }
    // `TypeError`, `ECONNREFUSED`-style names.
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .any(|w| {
            w.len() > 5 && w.ends_with("Error") && w.chars().next().is_some_and(char::is_uppercase)
        })
}

/// Greetings and acknowledgements, in a few languages.
const SMALL_TALK: [&str; 40] = [
    "hi", "hey", "hello", "yo", "sup", "ok", "okay", "oke", "k", "kk", "yes", "yep", "yeah", "no",
    "nope", "thanks", "thx", "ty", "cool", "nice", "great", "good", "sure", "continue", "go",
    "proceed", "lgtm", "hmm", "lol", "morning", "gm", "there", "please", "pls", "ja", "danke",
    "merci", "oui", "gracias", "ahead",
];

/// A goal line that states no task: small talk only, a bare read-only command, or at most two
/// words.
fn is_trivia(text: &str) -> bool {
    let mut t = text.trim();
    t = t.strip_prefix("(original request) ").unwrap_or(t);
    let words: Vec<String> = t
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    words.len() <= 2
        || words.iter().all(|w| SMALL_TALK.contains(&w.as_str()))
        || (words.len() <= 4 && is_read_only_command(t.trim_matches('`')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(summary: &str) -> Vec<Kind> {
        lint(summary).into_iter().map(|f| f.kind).collect()
    }

    /// A clean history summary: every section holds what it says, once, in readable lines.
    const CLEAN: &str = "## Goal\n- (original request) Add a --json flag to the report command\n- (latest) Also document the flag in README.md\n\n## Constraints & Preferences\n- Please don't use unsafe code.\n\n## Progress\n### Done\n- [x] Edited `src/cli.rs` (2 edits)\n- [x] Explored the code: 6 read-only calls (grep ×4, ls ×2)\n- [x] Ran `cargo test report` successfully (after earlier failures)\n\n### In Progress\n- [ ] Last assistant message: The flag works now.\n\n### Blocked\n- `npm run lint` failed (exit code 2): error: Unexpected token in src/report.ts\n\n## Key Decisions\n- I'll use serde_json for the output instead of hand-written formatting.\n\n## Next Steps\n1. Fix the failure of `npm run lint`: error: Unexpected token in src/report.ts\n2. Document the flag in README.md.\n\n## Critical Context\n- Command `cargo test report` → exit 101, exit 0\n- Note (heartbeat, sent 12×): Read HEARTBEAT.md and reply HEARTBEAT_OK when idle.\n\n<read-files>\nsrc/cli.rs\n</read-files>\n\n[compactd recall] This summary stands for entries 1 to 9.";

    #[test]
    fn a_clean_summary_has_no_noise() {
        assert_eq!(lint(CLEAN).len(), 0, "{:?}", lint(CLEAN));
        assert_eq!(items(CLEAN).len(), 13, "{:?}", items(CLEAN));
    }

    #[test]
    fn planted_noise_is_counted_by_kind() {
        let long = "x ".repeat(LONG_ITEM);
        let blob =
            "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkwYWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXo=";
        let summary = format!(
            "## Goal\n- (original request) yo\n- ls\n- hi there\n- (latest) Fix the retry test in packages/ai\n\n## Constraints & Preferences\n- tool_use ids were found without tool_result blocks immediately after: toolu_01.\n- Never commit to main.\n\n## Progress\n### Done\n- [x] Ran `grep -rn retry packages/` successfully\n- [x] Ran `ls -la src` successfully\n- [x] Called `grep` (pattern: backoff)\n- [x] Ran `git log --oneline | head -5` successfully\n- [x] Edited `packages/ai/src/retry.ts`\n\n### In Progress\n(none)\n\n### Blocked\n- `grep -rn TODO src` failed (exit code 1): (no output)\n- `cargo build` failed (exit code 101): {blob}\n- `cargo check -p core` failed (exit code 101): error[E0599]: no method named `parse_v2` found\n- `cargo test -p core` failed (exit code 101): error[E0599]: no method named `parse_v2` found\n\n## Key Decisions\n- The approach:\n- Now let\n- I'll keep the old parser because the new one drops comments.\n- The plan: I'll keep the old parser because the new one drops comments.\n\n## Next Steps\n1. Now let me look at the retry logic:\n2. Run the tests again.\n\n## Critical Context\n- Note (heartbeat): Current time 2026-03-05T10:15:00Z. Reply HEARTBEAT_OK.\n- Note (heartbeat): Current time 2026-03-05T10:45:00Z. Reply HEARTBEAT_OK.\n- Note (heartbeat): Current time 2026-03-05T11:15:00Z. Reply HEARTBEAT_OK.\n- Command `sleep 30 && curl -s localhost:8080/health` → exit 0\n- Command `sleep 60 && curl -s localhost:8080/health` → exit 0\n- Note (report): {long}"
        );
        let c = counts(&lint(&summary));
        let by = |k: Kind| c[Kind::ALL.iter().position(|x| *x == k).unwrap()];
        assert_eq!(by(Kind::Repeat), 5, "{:?}", lint(&summary));
        assert_eq!(by(Kind::Long), 1);
        assert_eq!(by(Kind::Blob), 1);
        // Four read-only Done lines: one is allowed.
        assert_eq!(by(Kind::ReadOnlyProgress), 3);
        assert_eq!(by(Kind::NoMatchFailure), 1);
        assert_eq!(by(Kind::Fragment), 3);
        assert_eq!(by(Kind::ErrorAsConstraint), 1);
        assert_eq!(by(Kind::TriviaGoal), 3);
        assert_eq!(c.iter().sum::<usize>(), 18);
    }

    #[test]
    fn the_same_error_quoted_for_two_commands_is_a_repeat() {
        let s = "## Critical Context\n- Earlier error from `cargo build -p core` (exit code 101), later fixed:\n  error[E0599]: no method named `parse_v2` found for struct `Header`\n  --> core/src/frame.rs:41:18\n- Last error from `cargo test -p core` (exit code 101):\n  error[E0599]: no method named `parse_v2` found for struct `Header`\n  --> core/src/frame.rs:41:18\n  error: could not compile `core` (lib test)";
        assert_eq!(kinds(s), vec![Kind::Repeat]);
        // Two failures of one test run with different errors are two items.
        let t = "## Critical Context\n- Earlier error from `npx vitest run` (exit code 1):\n  FAIL test/status.test.ts > offline\n  Error: connect ECONNREFUSED 127.0.0.1:18789\n- Last error from `npx vitest run` (exit code 1):\n  FAIL test/status.test.ts > offline\n  TypeError: Cannot read properties of null";
        assert!(kinds(t).is_empty(), "{:?}", lint(t));
    }

    #[test]
    fn the_turn_prefix_layout_and_a_split_turn_are_read_too() {
        // The same edit in the history and in the split turn's prefix is two edits.
        let s = "## Goal\n- (latest) Port the parser\n- ok\n\n## Progress\n### Done\n- [x] Edited `src/parse.rs`\n\n## Critical Context\n(none)\n\n---\n\n**Turn Context (split turn):**\n\n## Original Request\n- Port the parser to nom\n\n## Early Progress\n- Edited `src/parse.rs`\n- Decision: The approach:\n\n## Context for Suffix\n- Constraint: keep the API\n- Constraint: keep the API";
        let k = kinds(s);
        assert!(k.contains(&Kind::TriviaGoal), "{k:?}");
        assert!(k.contains(&Kind::Repeat), "{k:?}");
        assert!(k.contains(&Kind::Fragment), "{k:?}");
        assert_eq!(k.len(), 3, "{k:?}");
    }

    #[test]
    fn paths_urls_and_failures_that_say_why_are_not_noise() {
        assert!(!has_blob(
            "Edited `packages/coding-agent/src/core/extensions/loader/resolve-extension-paths.ts`"
        ));
        assert!(!has_blob(
            "See https://github.com/badlogic/pi-mono/blob/main/packages/ai/src/providers/anthropic.ts#L120"
        ));
        assert!(!is_no_match_failure(
            "`rg -n foo src` failed (exit code 2): rg: src: No such file or directory"
        ));
        assert!(!is_no_match_failure(
            "`cargo test` failed (exit code 101): test retry ... FAILED"
        ));
        assert!(!is_fragment(
            "Switch to the streaming parser instead of buffering."
        ));
        assert!(!is_error_text("Never swallow errors silently."));
        assert!(!is_trivia("(original request) fix the flaky retry test"));
        assert!(!is_read_only_item(
            "Ran `git commit -m 'fix retry'` successfully"
        ));
        assert!(!is_read_only_item("Ran `cat > notes.md` successfully"));
        assert!(is_read_only_item(
            "Ran `cd pkg && rg -n retry` successfully"
        ));
    }
}
