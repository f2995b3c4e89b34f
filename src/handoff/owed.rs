//! What a handoff owes: deterministic obligations from the facts of the span being summarized
//! and the summary it updates. The facts are read by the extractive summarizer's own pass
//! (`summarizer::extractive::handoff_facts`: the same requests, rules, plans, failures and
//! commands its sections are filled from); this module decides what of them a summary must
//! carry, and how a check recognises it.
//!
//! - the latest request, and each explicit instruction or rule: sentences, carried when most
//!   of their content words are there (a summary words things its own way);
//! - open tasks (todo and plan items not done, calls without a result): sentences;
//! - unresolved failures: the failing command (or tool, or path) exactly, and most of its
//!   error's words;
//! - modified files, the exact identifiers the user gave (numbers, versions, ports, URLs, ids,
//!   paths, flags, environment variable names) and the commands that verify the work:
//!   exactly.
//!
//! Each kind is capped (the latest first), so a long span owes a handoff a person can read.

use std::sync::LazyLock;

use regex::Regex;

use super::words::stems;
use super::{Kind, Needle, Obligation};
use crate::summarizer::extractive::lines_outside_fences;

/// A statement with the entry it came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Said {
    pub text: String,
    pub entry_id: Option<String>,
}

impl Said {
    pub fn new(text: impl Into<String>, entry_id: Option<&str>) -> Said {
        Said {
            text: text.into(),
            entry_id: entry_id.map(str::to_owned),
        }
    }
}

/// A failure nothing later answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// How it is named: `` `cargo test` ``, ``tool `deploy` ``, `` `edit` `src/a.rs` ``.
    pub label: String,
    /// What a summary must name exactly for it (the command's main part, a path, a tool's
    /// name); `None` when only its error's words can say it (a failed model call).
    pub key: Option<String>,
    /// The line of its output that says what went wrong.
    pub headline: String,
    pub entry_id: Option<String>,
}

/// A file the work modified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    /// What was done to it (`edited`, `written`, `written and edited`).
    pub change: String,
    pub entry_id: Option<String>,
}

/// The facts a handoff's obligations come from, oldest first within each list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Facts {
    /// The latest request (the span's, a split turn's, else the one the earlier summary named).
    pub request: Option<Said>,
    /// The user's own words in the span (requests and instructions, without injected notes or
    /// pasted output): where the identifiers the user gave are read from.
    pub user_words: Vec<Said>,
    pub constraints: Vec<Said>,
    pub open_tasks: Vec<Said>,
    pub failures: Vec<Failure>,
    pub files: Vec<FileChange>,
    /// The commands that verified the work, each as a summary must name it.
    pub commands: Vec<Said>,
    /// Obligations an earlier summary's repair section listed that still stand.
    pub carried: Vec<(Kind, Said)>,
}

/// The most obligations of each kind (the latest kept): a handoff a person reads.
const CAP_CONSTRAINTS: usize = 12;
const CAP_OPEN_TASKS: usize = 10;
const CAP_FAILURES: usize = 5;
const CAP_FILES: usize = 20;
const CAP_IDENTIFIERS: usize = 16;
const CAP_IDENTIFIERS_PER_TEXT: usize = 6;
const CAP_COMMANDS: usize = 5;
/// The content words a sentence is recognised by (its first ones).
const STEMS_CHECKED: usize = 24;
/// The longest line the repair section states an obligation in, in characters.
const TEXT_MAX: usize = 200;

/// The last `cap` distinct statements of `items` (a text said again counts once, where it was
/// said last), oldest first.
fn latest(items: &[Said], cap: usize) -> Vec<&Said> {
    let mut out: Vec<&Said> = Vec::new();
    for said in items.iter().rev() {
        if out.len() == cap {
            break;
        }
        if !out.iter().any(|o| o.text == said.text) {
            out.push(said);
        }
    }
    out.reverse();
    out
}

/// `text` on one line of at most `cap` characters, cut at a word with `…`.
pub(super) fn one_line(text: &str, cap: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= cap {
        return flat;
    }
    let head: String = flat.chars().take(cap).collect();
    let cut = head
        .rfind(' ')
        .filter(|&i| i * 2 >= head.len())
        .map_or(head.as_str(), |i| &head[..i]);
    format!("{}…", cut.trim_end())
}

/// The needle of a sentence: its first content words, most of which must be said in one item
/// (seven in ten; three in five past ten words, where a summary shortens more). `None` for a
/// text with no content word.
pub(super) fn words_needle(text: &str) -> Option<Needle> {
    let mut st = stems(text);
    st.truncate(STEMS_CHECKED);
    let n = st.len();
    let need = if n <= 10 {
        (n * 7).div_ceil(10)
    } else {
        (n * 3).div_ceil(5)
    };
    (n > 0).then_some(Needle::Words { stems: st, need })
}

/// What a handoff of `facts` owes (see the module doc), in kind order, each once.
pub fn owed(facts: &Facts) -> Vec<Obligation> {
    let mut out: Vec<Obligation> = Vec::new();
    let push = |out: &mut Vec<Obligation>,
                kind: Kind,
                text: String,
                entry_id: &Option<String>,
                needles: Vec<Needle>| {
        if needles.is_empty() {
            return;
        }
        if out
            .iter()
            .any(|o| o.kind == kind && (o.needles == needles || o.text == text))
        {
            return;
        }
        out.push(Obligation {
            kind,
            text,
            entry_id: entry_id.clone(),
            needles,
        });
    };
    // A sentence is carried when most of its words are there and every identifier in it is,
    // exactly: "Never retry a 403" said as "never retry some errors" lost what mattered.
    let sentence = |s: &str| {
        let mut needles: Vec<Needle> = words_needle(s).into_iter().collect();
        needles.extend(identifiers(s).into_iter().map(Needle::Exact));
        needles
    };
    let exact = |s: &str| vec![Needle::Exact(s.trim().to_owned())];
    if let Some(r) = &facts.request {
        push(
            &mut out,
            Kind::Request,
            one_line(&r.text, TEXT_MAX),
            &r.entry_id,
            sentence(&r.text),
        );
    }
    for (kind, said, cap) in [
        (Kind::Constraint, &facts.constraints, CAP_CONSTRAINTS),
        (Kind::OpenTask, &facts.open_tasks, CAP_OPEN_TASKS),
    ] {
        for c in latest(said, cap) {
            push(
                &mut out,
                kind,
                one_line(&c.text, TEXT_MAX),
                &c.entry_id,
                sentence(&c.text),
            );
        }
    }
    for f in &facts.failures[facts.failures.len().saturating_sub(CAP_FAILURES)..] {
        let mut needles: Vec<Needle> = f.key.iter().map(|k| Needle::Exact(k.clone())).collect();
        // The error's words say which failure it is; a one-word error says little more.
        if let Some(Needle::Words { stems, .. }) = words_needle(&f.headline) {
            if stems.len() >= 2 {
                let need = stems.len().div_ceil(2);
                needles.push(Needle::Words { stems, need });
            }
        }
        let text = if f.headline.trim().is_empty() {
            format!("{} failed", f.label)
        } else {
            format!("{} failed: {}", f.label, f.headline.trim())
        };
        push(
            &mut out,
            Kind::Failure,
            one_line(&text, TEXT_MAX),
            &f.entry_id,
            needles,
        );
    }
    for f in &facts.files[facts.files.len().saturating_sub(CAP_FILES)..] {
        push(
            &mut out,
            Kind::File,
            format!("{} ({})", f.path, f.change),
            &f.entry_id,
            exact(&f.path),
        );
    }
    // The latest texts' identifiers (each under the latest text that gave it), in reading order,
    // each stated with the words around it (`16` alone tells the next model nothing; "to
    // Postgres 16" does).
    let mut seen: Vec<String> = Vec::new();
    let mut blocks: Vec<Vec<(String, String, &Option<String>)>> = Vec::new();
    for said in facts.user_words.iter().rev() {
        let mut block = Vec::new();
        for id in identifiers(&said.text)
            .into_iter()
            .take(CAP_IDENTIFIERS_PER_TEXT)
        {
            if seen.len() < CAP_IDENTIFIERS && !seen.contains(&id) {
                seen.push(id.clone());
                let text = in_context(&said.text, &id);
                block.push((id, text, &said.entry_id));
            }
        }
        blocks.push(block);
    }
    for (id, text, entry_id) in blocks.into_iter().rev().flatten() {
        // One owed by a request or a rule is owed there (the repair states the sentence).
        let in_sentence = out.iter().any(|o| {
            matches!(o.kind, Kind::Request | Kind::Constraint | Kind::OpenTask)
                && o.needles.contains(&Needle::Exact(id.clone()))
        });
        if !in_sentence {
            push(&mut out, Kind::Identifier, text, entry_id, exact(&id));
        }
    }
    for c in latest(&facts.commands, CAP_COMMANDS) {
        push(
            &mut out,
            Kind::Command,
            c.text.trim().to_owned(),
            &c.entry_id,
            exact(&c.text),
        );
    }
    for (kind, said) in &facts.carried {
        let needles = match kind {
            Kind::Identifier => exact(identifier_of(&said.text)),
            Kind::File | Kind::Command => exact(&said.text),
            _ => sentence(&said.text),
        };
        push(
            &mut out,
            *kind,
            one_line(&said.text, TEXT_MAX),
            &said.entry_id,
            needles,
        );
    }
    out.sort_by_key(|o| o.kind);
    out
}

/// The exact identifiers in a user's text: inline code of one word, URLs, paths (and
/// `owner/repo` names), UUIDs, dates, versions, ticket and issue ids, environment variable
/// names, hex ids, flags and numbers (two digits or more, or with a unit), in order, each once. Fenced code and lines of pasted output are not the user's words.
pub fn identifiers(text: &str) -> Vec<String> {
    static ID_RE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"`(?P<code>[^`\s]{2,60})`",
            r"|(?P<url>https?://[^\s<>()`'\x22]+)",
            r"|(?P<uuid>\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)",
            r"|(?P<path>(?:~|\.{1,2})?/?[\w.@-]+(?:/[\w.@-]+)+/?)",
            r"|(?P<date>\b\d{4}-\d{2}-\d{2}\b)",
            r"|(?P<version>\bv\d+(?:\.\d+)+(?:-[0-9A-Za-z.]+)?\b|\b\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?\b)",
            r"|(?P<ticket>\b[A-Z][A-Z0-9]+-\d+\b|#\d+\b)",
            r"|(?P<env>\$?\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b)",
            r"|(?P<hex>\b[0-9a-f]{7,40}\b)",
            r"|(?P<flag>--[a-z][a-z0-9][a-z0-9-]*)",
            r"|(?P<number>\b\d+(?:\.\d+)?(?:%|(?:ms|s|m|h|kb|mb|gb|k)\b)?)",
        ))
        .expect("identifier pattern is valid")
    });
    let mut out: Vec<String> = Vec::new();
    for line in lines_outside_fences(text) {
        let t = line.trim();
        // A line of a pasted log or listing is output, not something the user gave.
        if t.chars().count() > 300 || looks_like_output(t) {
            continue;
        }
        for caps in ID_RE.captures_iter(line) {
            let Some(m) = caps.get(0) else { continue };
            let raw = m.as_str();
            let id = if let Some(code) = caps.name("code") {
                code.as_str()
            } else if caps.name("url").is_some() {
                raw.trim_end_matches(['.', ',', ';', ':', '!', '?'])
            } else if caps.name("path").is_some() {
                let p = raw.trim_end_matches(['.', ',']);
                let last = p.trim_end_matches('/').rsplit('/').next().unwrap_or("");
                let rooted = p.starts_with(['/', '~', '.']);
                let segments: Vec<&str> = p.split('/').filter(|s| !s.is_empty()).collect();
                // `owner/repo`: names, not a pair of words such as "and/or".
                let named =
                    segments.iter().all(|s| s.len() >= 2) && segments.iter().any(|s| s.len() >= 4);
                if !(rooted || last.contains('.') || named) || segments.iter().all(|s| s.len() <= 2)
                {
                    continue;
                }
                p
            } else if caps.name("env").is_some() {
                raw.trim_start_matches('$')
            } else if caps.name("hex").is_some() {
                let digits = raw.chars().any(|c| c.is_ascii_digit());
                let letters = raw.chars().any(|c| c.is_ascii_alphabetic());
                if !(digits && letters) {
                    continue;
                }
                raw
            } else if caps.name("flag").is_some() {
                // A flag starts a word (`--json`), not a dash run inside one.
                let before = line[..m.start()].chars().next_back();
                if before.is_some_and(|c| !c.is_whitespace() && !matches!(c, '`' | '(' | '"')) {
                    continue;
                }
                raw
            } else if caps.name("number").is_some() {
                let digits = raw.chars().filter(char::is_ascii_digit).count();
                let unit = raw.ends_with(|c: char| !c.is_ascii_digit());
                if digits < 2 && !unit {
                    continue;
                }
                raw
            } else {
                raw
            };
            if !id.is_empty() && !out.iter().any(|o| o == id) {
                out.push(id.to_owned());
            }
        }
    }
    out
}

/// How an identifier is stated: itself, then the words around it where the user gave it
/// (`` 16 (in "… schema to Postgres 16. The data …") ``); read back by [`identifier_of`].
fn in_context(text: &str, id: &str) -> String {
    const AROUND: usize = 40;
    let Some(at) = text.find(id) else {
        return id.to_owned();
    };
    let head = &text[..at];
    let tail = &text[at + id.len()..];
    let cut_head = head.chars().count() > AROUND;
    let cut_tail = tail.chars().count() > AROUND;
    let mut before: String = head
        .chars()
        .rev()
        .take(AROUND)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let mut after: String = tail.chars().take(AROUND).collect();
    // A cut side starts (ends) at a word.
    if cut_head {
        before = before
            .split_once(' ')
            .map_or(before.clone(), |(_, b)| b.to_owned());
    }
    if cut_tail {
        after = after
            .rsplit_once(' ')
            .map_or(after.clone(), |(a, _)| a.to_owned());
    }
    let quote = format!("{before}{id}{after}")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('"', "'");
    if quote == id {
        return id.to_owned();
    }
    let (open, close) = (
        if cut_head { "…" } else { "" },
        if cut_tail { "…" } else { "" },
    );
    format!("{id} (in \"{open}{quote}{close}\")")
}

/// The identifier an identifier obligation's text states (see [`in_context`]).
pub fn identifier_of(text: &str) -> &str {
    text.split_once(" (in \"").map_or(text, |(id, _)| id)
}

/// A line that reads as pasted output rather than prose: a log line's timestamp or level, a
/// stack frame, a compiler's location.
fn looks_like_output(line: &str) -> bool {
    static OUTPUT_RE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r#"(?i)^(?:\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\s*at\s+\S+\s*\(|(?:error|warning|info|debug|trace)(?:\[\w+\])?:|-->\s|\s*File "|Traceback|\s*\d+\s*\|)"#,
        )
        .expect("output pattern is valid")
    });
    OUTPUT_RE.is_match(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identifiers_a_user_gives_are_read_exactly() {
        let ids = identifiers(
            "Serve it on port 8080 from https://example.com/api/v2, use Node v20.11.1 and set \
             DATABASE_URL (see PROJ-123, commit 3fa9c2e). Edit src/config/loader.ts with \
             --dry-run; timeout 30s, 3 retries, ratio 1.5.",
        );
        assert_eq!(
            ids,
            vec![
                "8080",
                "https://example.com/api/v2",
                "v20.11.1",
                "DATABASE_URL",
                "PROJ-123",
                "3fa9c2e",
                "src/config/loader.ts",
                "--dry-run",
                "30s",
                "1.5",
            ]
        );
        // Pasted output and code are not what the user gave; a lone digit says too little.
        assert!(
            identifiers("```\nlet x = 4242;\n```\nerror[E0599]: no method at 12:5\n3 things")
                .is_empty()
        );
        assert!(identifiers("and/or it/is").is_empty());
    }

    #[test]
    fn facts_become_obligations_capped_and_once() {
        let facts = Facts {
            request: Some(Said::new(
                "Add a --json flag to the report command",
                Some("u1"),
            )),
            user_words: vec![
                Said::new("The database listens on 5432.", Some("u0")),
                Said::new("Add a --json flag to the report command", Some("u1")),
            ],
            constraints: vec![
                Said::new("Never commit to main.", Some("u0")),
                Said::new("Never commit to main.", Some("u1")),
            ],
            failures: vec![Failure {
                label: "`cargo test`".into(),
                key: Some("cargo test".into()),
                headline: "error[E0599]: no method named `render` found".into(),
                entry_id: Some("r7".into()),
            }],
            files: vec![FileChange {
                path: "src/report.rs".into(),
                change: "edited".into(),
                entry_id: Some("a3".into()),
            }],
            commands: vec![Said::new("cargo build --release", Some("r9"))],
            ..Facts::default()
        };
        let owed = owed(&facts);
        let kinds: Vec<Kind> = owed.iter().map(|o| o.kind).collect();
        assert_eq!(
            kinds,
            vec![
                Kind::Request,
                Kind::Constraint,
                Kind::Failure,
                Kind::File,
                Kind::Identifier,
                Kind::Command
            ]
        );
        let failure = &owed[2];
        assert_eq!(
            failure.text,
            "`cargo test` failed: error[E0599]: no method named `render` found"
        );
        assert_eq!(failure.needles[0], Needle::Exact("cargo test".into()));
        // The request owes its flag exactly; the earlier text's port is owed on its own.
        assert!(owed[0].needles.contains(&Needle::Exact("--json".into())));
        assert_eq!(owed[4].text, "5432 (in \"The database listens on 5432.\")");
        assert_eq!(owed[4].needles, vec![Needle::Exact("5432".into())]);
        assert_eq!(owed[4].entry_id.as_deref(), Some("u0"));
        let many = Facts {
            constraints: (0..30)
                .map(|n| Said::new(format!("Keep src/mod{n}.rs stable"), None))
                .collect(),
            ..Facts::default()
        };
        let owed_many = super::owed(&many);
        assert_eq!(owed_many.len(), CAP_CONSTRAINTS);
        assert!(owed_many[CAP_CONSTRAINTS - 1].text.contains("src/mod29.rs"));
    }
}
