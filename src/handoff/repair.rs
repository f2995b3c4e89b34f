//! What `repair` and `retry` do with a check: the short section of the obligations a summary
//! missed, each naming the entry it came from (so `getEntry` brings back the whole text), the
//! extra instructions a retried LLM call gets, and reading a section back out of an earlier
//! summary (what it listed is still owed by the next one, unless the span settled it).
//!
//! The section sits at the end of the summary, before the recall footer: after Pi's file blocks,
//! so Pi reads the summary, the blocks and the section alike as the summary's text.

use super::check::Item;
use super::owed::one_line;
use super::Kind;

/// The heading of the repair section (read back by [`read_section`]).
pub const HEADING: &str = "## Handoff check: also carried over";

/// The longest line the section states an obligation in, in characters.
const LINE_MAX: usize = 200;

/// How a line names the entry an obligation came from.
fn entry_note(entry_id: Option<&str>) -> String {
    match entry_id {
        Some(id) => format!(" (entry {id})"),
        None => " (earlier summary)".to_owned(),
    }
}

/// One line of the section.
fn line(m: &Item) -> String {
    let text = one_line(&m.text, LINE_MAX);
    let text = match m.kind {
        Kind::File | Kind::Command => format!("`{}`", text.replace('`', "'")),
        Kind::Identifier => {
            let id = super::owed::identifier_of(&text);
            format!("`{}`{}", id.replace('`', "'"), &text[id.len()..])
        }
        _ => text,
    };
    format!(
        "- {}: {text}{}",
        m.kind.label(),
        entry_note(m.entry_id.as_deref())
    )
}

/// The section listing `missing` (empty for nothing missing), starting with a blank line, to
/// append to a summary's text.
pub fn section(missing: &[Item]) -> String {
    if missing.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n\n{HEADING}\n(The summary above did not carry these; each names the entry holding it: \
         getEntry / get_entry returns it whole.)"
    );
    for m in missing {
        out.push('\n');
        out.push_str(&line(m));
    }
    out
}

/// `summary` with the section of `missing` appended (a section an earlier repair left at its
/// end is replaced, never repeated).
pub fn repaired(summary: &str, missing: &[Item]) -> String {
    let body = strip_section(summary);
    format!("{body}{}", section(missing))
}

/// `summary` without a repair section at its end.
pub fn strip_section(summary: &str) -> &str {
    match summary.rfind(&format!("\n\n{HEADING}\n")) {
        Some(at) if summary[at + 2..].lines().skip(1).all(is_section_line) => &summary[..at],
        _ => summary,
    }
}

fn is_section_line(l: &str) -> bool {
    l.starts_with("- ") || l.starts_with("(The summary above") || l.trim().is_empty()
}

/// The extra instructions of a retried summarization call: what the first summary missed,
/// which the new one must carry (verbatim where exactness matters).
pub fn instructions(missing: &[Item]) -> String {
    let mut out = String::from(
        "The previous attempt at this summary left out the items below. Rewrite the summary so \
         that it carries every one of them in the right section, keeping file paths, commands, \
         numbers, versions, URLs and other identifiers exactly as written:",
    );
    for m in missing {
        out.push('\n');
        out.push_str(&format!(
            "- {}: {}",
            m.kind.label(),
            one_line(&m.text, LINE_MAX)
        ));
    }
    out
}

/// The items of a repair section an earlier summary ends with (before its recall footer), by
/// kind, with the entries they name.
pub fn read_section(summary: &str) -> Vec<Item> {
    let Some(at) = summary.rfind(&format!("\n\n{HEADING}\n")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for l in summary[at + 2..].lines().skip(1) {
        let Some(item) = l.strip_prefix("- ") else {
            if is_section_line(l) {
                continue;
            }
            break;
        };
        let Some((label, rest)) = item.split_once(": ") else {
            continue;
        };
        let Some(kind) = Kind::ALL.into_iter().find(|k| k.label() == label) else {
            continue;
        };
        let (text, entry_id) = match rest.rsplit_once(" (entry ") {
            Some((t, id)) if id.ends_with(')') => (t, Some(id.trim_end_matches(')').to_owned())),
            _ => (rest.trim_end_matches(" (earlier summary)"), None),
        };
        let text = match kind {
            Kind::File | Kind::Command => text.trim_matches('`').to_owned(),
            Kind::Identifier => text.replacen('`', "", 2),
            _ => text.to_owned(),
        };
        out.push(Item {
            kind,
            text,
            entry_id,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing() -> Vec<Item> {
        vec![
            Item {
                kind: Kind::Constraint,
                text: "Never commit to main.".into(),
                entry_id: Some("a1b2c3d4".into()),
            },
            Item {
                kind: Kind::Identifier,
                text: "8080".into(),
                entry_id: Some("e5f6a7b8".into()),
            },
            Item {
                kind: Kind::OpenTask,
                text: "Document the flag".into(),
                entry_id: None,
            },
        ]
    }

    #[test]
    fn a_section_names_each_entry_and_reads_back() {
        let s = section(&missing());
        assert!(s.starts_with("\n\n## Handoff check: also carried over\n"));
        assert!(s.contains("\n- Constraint: Never commit to main. (entry a1b2c3d4)"));
        assert!(s.contains("\n- Identifier: `8080` (entry e5f6a7b8)"));
        assert!(s.contains("\n- Open task: Document the flag (earlier summary)"));
        let summary = format!("## Goal\n- x{s}");
        assert_eq!(read_section(&summary), missing());
        // Repairing again replaces the section; nothing missing adds nothing.
        let again = repaired(&summary, &missing()[..1]);
        assert_eq!(again.matches(HEADING).count(), 1);
        assert_eq!(read_section(&again).len(), 1);
        assert_eq!(repaired("## Goal\n- x", &[]), "## Goal\n- x");
        assert!(instructions(&missing()).contains("\n- Identifier: 8080"));
    }
}
