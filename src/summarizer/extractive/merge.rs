//! Merging an earlier summary (update mode): its items go back into their sections at
//! "previous" priority, so new facts win space and nothing is repeated.

use super::layout::*;
use super::text::*;
use super::*;

/// Maps a heading line of an earlier summary to the section its bullets belong to. Turn-prefix
/// headings appear in split-turn summaries (after Pi's `**Turn Context (split turn):**` joiner).
pub(super) fn section_of_heading(line: &str) -> Option<usize> {
    Some(match line {
        "## Goal" | "## Original Request" => GOAL,
        "## Constraints & Preferences" => CONSTRAINTS,
        "## Progress" | "### Done" | "## Early Progress" => DONE,
        "### In Progress" => IN_PROGRESS,
        "### Blocked" => BLOCKED,
        "## Key Decisions" => DECISIONS,
        "## Next Steps" => NEXT,
        "## Critical Context" | "## Context for Suffix" => CRITICAL,
        _ => return None,
    })
}

/// An earlier summary split into (section, item text) pairs; `None` when it has none of Pi's
/// headings. Text before the first heading comes back as section `None`.
pub(super) type Parsed = Vec<(Option<usize>, String)>;

pub(super) fn parse_summary(summary: &str) -> Option<Parsed> {
    let mut out: Parsed = Vec::new();
    let mut section: Option<usize> = None;
    let mut found = false;
    let mut skip_block: Option<&str> = None;
    let mut preamble = String::new();
    for raw in summary.lines() {
        let line = raw.trim_end();
        // Pi appends the file lists after the summary; they are recomputed, so drop them.
        if let Some(end) = skip_block {
            if line.trim() == end {
                skip_block = None;
            }
            continue;
        }
        match line.trim() {
            "<read-files>" => {
                skip_block = Some("</read-files>");
                continue;
            }
            "<modified-files>" => {
                skip_block = Some("</modified-files>");
                continue;
            }
            "---" | "**Turn Context (split turn):**" => continue,
            _ => {}
        }
        if let Some(s) = section_of_heading(line) {
            section = Some(s);
            found = true;
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let Some(sec) = section else {
            preamble.push_str(line);
            preamble.push('\n');
            continue;
        };
        let indented = line.starts_with(' ') || line.starts_with('\t');
        // Unindented lines start an item; indented ones continue the previous one.
        let starts_item = !indented;
        match out.last_mut() {
            Some((Some(s), text)) if *s == sec && !starts_item => {
                text.push('\n');
                text.push_str(line.trim_start());
            }
            _ => {
                let body = BULLET_RE.replace(line.trim_start(), "");
                out.push((Some(sec), body.into_owned()));
            }
        }
    }
    if !found {
        return None;
    }
    if !preamble.trim().is_empty() {
        out.insert(0, (None, preamble));
    }
    Some(out)
}

/// What becomes of an item carried over from an earlier summary, given this span.
pub(super) enum Carry {
    Keep,
    /// Superseded by this span's own item (its last assistant message, its latest request,
    /// its run of the same command).
    Drop,
    /// An open item (a blocker) this span settled: kept as history in Critical Context.
    Settled,
    /// Kept with a new text (an error line that is no longer the last one).
    Rewrite(String),
}

/// Merges an earlier summary's items into their sections at "previous" priority (oldest
/// content, dropped first under pressure); an unparseable one is kept verbatim.
pub(super) fn merge_previous(
    items: &mut Items,
    summary: &str,
    seq_base: u64,
    caps: &Caps,
    carry: &dyn Fn(usize, &str) -> Carry,
) {
    let trimmed = summary.trim();
    if trimmed.is_empty() || trimmed == "No prior history." {
        return;
    }
    let Some(parsed) = parse_summary(trimmed) else {
        let text = format!("Earlier summary:\n{}", clip_head(trimmed, caps.goal));
        items.add(CRITICAL, P_PREV_CRITICAL, (G_PREVIOUS, seq_base), &text);
        return;
    };
    for (n, (section, text)) in parsed.into_iter().enumerate() {
        let seq = seq_base + n as u64 + 1;
        let text = strip_labels(text.trim()).to_string();
        if is_placeholder(&text) {
            continue;
        }
        // File-list lines are superseded by the current (cumulative) lists.
        if section == Some(CRITICAL)
            && (text.starts_with("Modified: ") || text.starts_with("Read: "))
        {
            continue;
        }
        // What this span says about the item: superseded, settled, or to be relabelled.
        let text = match section.map(|sec| carry(sec, &text)) {
            Some(Carry::Drop) => continue,
            Some(Carry::Settled) => {
                let text = format!(
                    "Settled since the earlier summary: {}",
                    clip_head(&text, caps.item)
                );
                items.add(CRITICAL, P_RESOLVED_ERROR, (G_PREVIOUS, seq), &text);
                continue;
            }
            Some(Carry::Rewrite(t)) => t,
            Some(Carry::Keep) | None => text,
        };
        let (section, priority, group, text) = match section {
            None => (
                CRITICAL,
                P_PREV_CRITICAL,
                G_PREVIOUS,
                format!("Earlier summary:\n{}", clip_head(&text, caps.goal)),
            ),
            Some(GOAL) => (GOAL, P_PREV_GOAL, G_PREVIOUS, clip_head(&text, caps.goal)),
            Some(CONSTRAINTS) => (CONSTRAINTS, P_PREV_CONSTRAINT, G_PREVIOUS, text),
            Some(DONE) => (DONE, P_PREV_DONE, G_PREVIOUS, text),
            Some(IN_PROGRESS) => (
                IN_PROGRESS,
                P_PREV_IN_PROGRESS,
                G_PREVIOUS,
                format!("(earlier) {text}"),
            ),
            Some(BLOCKED) => (
                BLOCKED,
                P_PREV_BLOCKED,
                G_PREVIOUS,
                format!("(earlier) {text}"),
            ),
            Some(DECISIONS) => (DECISIONS, P_PREV_DECISION, G_PREVIOUS, text),
            Some(NEXT) => (NEXT, P_PREV_NEXT, G_AFTER, format!("(earlier) {text}")),
            Some(_) => (CRITICAL, P_PREV_CRITICAL, G_PREVIOUS, text),
        };
        let text = if section == GOAL {
            text
        } else {
            clip_head(&text, caps.error)
        };
        items.add(section, priority, (group, seq), &text);
    }
}

/// A summary replayed inside the span (a branch or compaction summary message).
pub(super) fn merge_embedded(
    items: &mut Items,
    label: &str,
    summary: &str,
    seq_base: u64,
    caps: &Caps,
    carry: &dyn Fn(usize, &str) -> Carry,
) {
    if label == "Earlier summary" {
        merge_previous(items, summary, seq_base * 1000, caps, carry);
    } else {
        let text = format!("{label}:\n{}", clip_head(summary.trim(), caps.error));
        items.add(
            CRITICAL,
            P_PREV_CRITICAL,
            (G_PREVIOUS, seq_base * 1000),
            &text,
        );
    }
}
