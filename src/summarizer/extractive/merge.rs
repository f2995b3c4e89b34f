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

/// An earlier summary split into (section, item text, from its split-turn part) triples;
/// `None` when it has none of Pi's headings. Text before the first heading comes back as
/// section `None`.
pub(super) type Parsed = Vec<(Option<usize>, String, bool)>;

pub(super) fn parse_summary(summary: &str) -> Option<Parsed> {
    // compactd's repair section (what the summary missed, appended after it) is read back into
    // the sections its items belong to, so an update carries them as its own.
    let mut out = parse_body(crate::handoff::repair::strip_section(summary))?;
    out.extend(
        crate::handoff::repair::read_section(summary)
            .iter()
            .filter_map(repaired_item)
            .map(|(section, text)| (Some(section), text, false)),
    );
    Some(out)
}

/// The section and text an item of a repair section is carried as (a modified file is in Pi's
/// file blocks already).
fn repaired_item(item: &crate::handoff::Item) -> Option<(usize, String)> {
    use crate::handoff::Kind;
    let (section, text) = match item.kind {
        Kind::Request => (GOAL, item.text.clone()),
        Kind::Constraint => (CONSTRAINTS, item.text.clone()),
        Kind::OpenTask => (NEXT, item.text.clone()),
        Kind::Failure => (BLOCKED, item.text.clone()),
        Kind::Identifier => {
            let id = crate::handoff::owed::identifier_of(&item.text);
            let rest = &item.text[id.len()..];
            (CRITICAL, format!("Identifier the user gave: `{id}`{rest}"))
        }
        Kind::Command => (CRITICAL, format!("Verification command: `{}`", item.text)),
        Kind::File => return None,
    };
    let text = match &item.entry_id {
        Some(id) => format!("{text} (entry {id})"),
        None => text,
    };
    Some((section, text))
}

fn parse_body(summary: &str) -> Option<Parsed> {
    let mut out: Parsed = Vec::new();
    let mut section: Option<usize> = None;
    let mut found = false;
    let mut split_turn = false;
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
            "---" => continue,
            "**Turn Context (split turn):**" => {
                split_turn = true;
                continue;
            }
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
            Some((Some(s), text, _)) if *s == sec && !starts_item => {
                text.push('\n');
                text.push_str(line.trim_start());
            }
            _ => {
                let body = BULLET_RE.replace(line.trim_start(), "");
                out.push((Some(sec), body.into_owned(), split_turn));
            }
        }
    }
    if !found {
        return None;
    }
    if !preamble.trim().is_empty() {
        out.insert(0, (None, preamble, false));
    }
    Some(out)
}

/// Which part of the goal an earlier summary's Goal item was.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum GoalRole {
    /// Labelled `(original request)`: the task as first stated.
    Original,
    /// Labelled `(latest)`.
    Latest,
    /// The request of a split turn (its `## Original Request`): the latest one then.
    SplitTurn,
    /// Anything else: an earlier per-task request, an LLM's goal line, a folded line.
    Other,
}

/// What an update takes from an earlier summary besides the items it merges: the goal (which
/// the span's requests rearrange) and the latest request its Next Steps named. Its plan steps
/// left are read by [`carried_plan`] before the span is followed.
#[derive(Default)]
pub(super) struct Carried {
    /// Goal items in order: (sequence, role, text without its label).
    pub(super) goals: Vec<(u64, GoalRole, String)>,
    /// The request of "Make sure the latest user request is fully handled: …".
    pub(super) latest_next: Option<String>,
    /// Counted Critical Context lines (injected notes, boilerplate): (key, count, sequence,
    /// text). The span's line of the same key takes the count over (see [`counted_key`]);
    /// the others are added back as they were.
    pub(super) counted: Vec<(String, usize, u64, String)>,
}

/// Reads a counted Critical Context line back: `Note (label, sent 4×): …` or `Boilerplate the
/// user side sent 4× (not a request): …`. Returns its key (what it says, numbers masked and
/// the entry reference left out: the same note sent again has the same key) and its count.
pub(super) fn counted_key(text: &str) -> Option<(String, usize)> {
    let sent = |s: &str| -> Option<usize> {
        s.trim()
            .strip_prefix("sent ")?
            .strip_suffix('×')?
            .parse()
            .ok()
    };
    if let Some(rest) = text.strip_prefix("Note (") {
        let (head, body) = rest.split_once("): ")?;
        let (label, count) = match head.rsplit_once(", ") {
            Some((l, c)) if sent(c).is_some() => (l, sent(c)?),
            _ => (head, 1),
        };
        return Some((format!("note\u{1f}{label}\u{1f}{}", body_key(body)), count));
    }
    let rest = text.strip_prefix("Boilerplate the user side ")?;
    let (head, body) = rest.split_once(" (not a request): ")?;
    Some((format!("boilerplate\u{1f}{}", body_key(body)), sent(head)?))
}

/// What a counted line's body says: numbers masked, a trailing reference to where the rest is
/// (`[120 more chars in entry 1a2b]`, `[…120 more chars]`) left out.
fn body_key(body: &str) -> String {
    super::noise::shape(super::noise::without_reference(body.trim()))
}

/// The plan steps an earlier summary left (its `(plan step N) …` Next Steps): (number, text).
pub(super) fn carried_plan(summary: &str) -> Vec<(Option<u32>, String)> {
    parse_summary(summary.trim())
        .unwrap_or_default()
        .iter()
        .filter(|(section, ..)| *section == Some(NEXT))
        .filter_map(|(_, text, _)| super::plan::parse_step_label(strip_labels(text.trim())))
        .collect()
}

const LATEST_NEXT: &str = "Make sure the latest user request is fully handled: ";

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
/// content, dropped first under pressure); an unparseable one is kept verbatim. Its goal, plan
/// steps and latest request go to `carried` instead. Constraints, decisions and open blockers
/// are must-keep items, wherever the earlier summary put them (a turn-prefix summary lists its
/// constraints under Context for Suffix and its decisions under Early Progress).
pub(super) fn merge_previous(
    items: &mut Items,
    summary: &str,
    seq_base: u64,
    caps: &Caps,
    carry: &dyn Fn(usize, &str) -> Carry,
    carried: &mut Carried,
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
    for (n, (section, text, split_turn)) in parsed.into_iter().enumerate() {
        let seq = seq_base + n as u64 + 1;
        let raw = text.trim();
        let text = strip_labels(raw).to_string();
        if is_placeholder(&text) {
            continue;
        }
        match section {
            Some(GOAL) => {
                let role = if split_turn {
                    GoalRole::SplitTurn
                } else if raw.starts_with("(original request) ") {
                    GoalRole::Original
                } else if raw.starts_with("(latest) ") {
                    GoalRole::Latest
                } else {
                    GoalRole::Other
                };
                carried.goals.push((seq, role, text));
                continue;
            }
            Some(NEXT) => {
                // Plan steps are followed by `plan`, which re-adds those still left.
                if super::plan::parse_step_label(&text).is_some() {
                    continue;
                }
                if let Some(rest) = text.strip_prefix(LATEST_NEXT) {
                    carried.latest_next = Some(rest.trim().to_string());
                    continue;
                }
            }
            _ => {}
        }
        // A counted line waits for the span's line of the same key (see `Carried::counted`).
        if section == Some(CRITICAL) {
            if let Some((key, count)) = counted_key(&text) {
                carried.counted.push((key, count, seq, text));
                continue;
            }
        }
        // File-list lines are superseded by the current (cumulative) lists.
        if section == Some(CRITICAL)
            && (text.starts_with("Modified: ") || text.starts_with("Read: "))
        {
            continue;
        }
        // A turn prefix's constraints and decisions are constraints and decisions.
        let (section, text) = match (section, &text) {
            (Some(CRITICAL), t) if t.starts_with("Constraint: ") => {
                (Some(CONSTRAINTS), t["Constraint: ".len()..].to_string())
            }
            (Some(DONE), t) if t.starts_with("Decision: ") => {
                (Some(DECISIONS), t["Decision: ".len()..].to_string())
            }
            _ => (section, text),
        };
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
        let text = clip_head(&text, caps.error);
        let open_error = section == CRITICAL
            && text.starts_with("Earlier error from ")
            && !super::is_resolved_error(&text);
        let keep = matches!(section, CONSTRAINTS | DECISIONS | BLOCKED) || open_error;
        if keep {
            items.keep(section, priority, (group, seq), &text);
        } else {
            items.add(section, priority, (group, seq), &text);
        }
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
    carried: &mut Carried,
) {
    if label == "Earlier summary" {
        merge_previous(items, summary, seq_base * 1000, caps, carry, carried);
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
