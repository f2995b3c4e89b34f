//! The embedded default summarizer: deterministic, offline, no model.
//!
//! A fresh install has no provider configured, yet compaction must still produce a summary that
//! a model resuming the work can act on (protocol.md §4, "Embedded default"). Instead of
//! paraphrasing, this module *extracts*: it walks the structured history (user requests, tool
//! calls and their results, bash executions, assistant errors) and fills Pi's exact section
//! layout (compaction.md §6.3) with verbatim facts: what was asked, which files changed, which
//! commands ran with which exit codes, what failed last, and what the assistant said last.
//!
//! Everything is budgeted: each fact becomes an item with a priority, and items are admitted
//! most-important-first until the output would exceed `max_tokens * 4` UTF-16 units (Pi's
//! chars/4 token estimate). Headings are never cut. The same input always yields byte-identical
//! output (no hash-map iteration, no clocks), so compactions are reproducible and testable.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::json::{utf16_len, utf16_prefix};

/// What the extractive summarizer needs for a history summary (the same inputs an LLM
/// summarizer gets: the messages, the summary being updated, the user's focus and the file
/// lists that Pi appends after the summary).
pub struct ExtractiveInput<'a> {
    /// AgentMessages to summarize, chronological (Pi shapes: user/assistant/toolResult/...).
    pub messages: &'a [Value],
    /// The earlier compaction summary to merge (update mode); `None` or empty for a first one.
    pub previous_summary: Option<&'a str>,
    /// The user's focus text for this compaction ("Additional focus" in Pi's prompt).
    pub custom_instructions: Option<&'a str>,
    /// Files read but not modified (computed by the compaction core, already sorted).
    pub read_files: &'a [String],
    /// Files written or edited (computed by the compaction core, already sorted).
    pub modified_files: &'a [String],
    /// Output budget in tokens (chars/4); the summary always fits `max_tokens * 4` UTF-16 units
    /// unless even the bare headings do not (then the bare headings are returned).
    pub max_tokens: u64,
}

/// Pi's six-section history layout; `## Progress` carries no items of its own, so it is part
/// of the `### Done` heading block.
const HISTORY_SECTIONS: [SectionSpec; 8] = [
    SectionSpec::new("## Goal", Marker::Bullet, 12),
    SectionSpec::new("## Constraints & Preferences", Marker::Bullet, 12),
    SectionSpec::new("## Progress\n### Done", Marker::Done, 25),
    SectionSpec::new("### In Progress", Marker::Todo, 6),
    SectionSpec::new("### Blocked", Marker::Bullet, 5),
    SectionSpec::new("## Key Decisions", Marker::Bullet, 8),
    SectionSpec::new("## Next Steps", Marker::Numbered, 9),
    SectionSpec::new("## Critical Context", Marker::Bullet, 60),
];
const GOAL: usize = 0;
const CONSTRAINTS: usize = 1;
const DONE: usize = 2;
const IN_PROGRESS: usize = 3;
const BLOCKED: usize = 4;
const DECISIONS: usize = 5;
const NEXT: usize = 6;
const CRITICAL: usize = 7;

/// Pi's turn-prefix layout (the start of an over-long turn whose suffix is kept).
const TURN_PREFIX_SECTIONS: [SectionSpec; 3] = [
    SectionSpec::new("## Original Request", Marker::Bullet, 3),
    SectionSpec::new("## Early Progress", Marker::Bullet, 30),
    SectionSpec::new("## Context for Suffix", Marker::Bullet, 40),
];
const ORIGINAL: usize = 0;
const EARLY: usize = 1;
const SUFFIX_CTX: usize = 2;

/// What an empty section says (Pi's template asks for "(none)").
const PLACEHOLDER: &str = "(none)";

// Priorities: higher is admitted first. Within a band, `recency` adds 0..=1000 so newer facts
// win; bands are at least 1000 apart so recency never reorders categories.
const P_FOCUS: u32 = 100_000;
const P_GOAL_LATEST: u32 = 90_000;
/// The first request of the span usually states the task; it outranks the requests between.
const P_GOAL_FIRST: u32 = 85_000;
const P_BLOCKED: u32 = 80_000;
const P_CONSTRAINT: u32 = 70_000;
const P_PREV_CONSTRAINT: u32 = 69_000;
const P_IN_PROGRESS: u32 = 65_000;
const P_NEXT: u32 = 60_000;
const P_MODIFIED: u32 = 55_000;
const P_LAST_ERROR: u32 = 50_000;
const P_GOAL_OLDER: u32 = 45_000;
const P_PREV_GOAL: u32 = 44_000;
const P_DONE: u32 = 40_000;
const P_PREV_DONE: u32 = 39_000;
const P_DECISION: u32 = 35_000;
const P_PREV_DECISION: u32 = 34_000;
const P_PREV_CRITICAL: u32 = 33_000;
const P_PREV_BLOCKED: u32 = 32_000;
const P_RESOLVED_ERROR: u32 = 31_000;
const P_PREV_IN_PROGRESS: u32 = 30_000;
const P_PREV_NEXT: u32 = 29_000;
const P_COMMAND: u32 = 20_000;
const P_READ: u32 = 15_000;
const P_NOTE: u32 = 10_000;

/// Render-order groups inside a section: earlier summaries first, then this span's facts, then
/// stale carry-overs that should not sit at the top of a to-do list.
const G_PREVIOUS: u8 = 0;
const G_NEW: u8 = 1;
const G_AFTER: u8 = 2;

/// How many file paths share one Critical Context line.
const PATHS_PER_LINE: usize = 4;

#[derive(Clone, Copy)]
enum Marker {
    Bullet,
    Done,
    Todo,
    /// `N. `; sections using it hold at most 9 items so the prefix is always 3 units wide.
    Numbered,
}

impl Marker {
    fn prefix(self) -> &'static str {
        match self {
            Marker::Bullet => "- ",
            Marker::Done => "- [x] ",
            Marker::Todo => "- [ ] ",
            Marker::Numbered => "1. ",
        }
    }
}

struct SectionSpec {
    heading: &'static str,
    marker: Marker,
    max_items: usize,
}

impl SectionSpec {
    const fn new(heading: &'static str, marker: Marker, max_items: usize) -> Self {
        let max_items = match marker {
            Marker::Numbered if max_items > 9 => 9,
            _ => max_items,
        };
        SectionSpec {
            heading,
            marker,
            max_items,
        }
    }
}

/// One fact competing for space in the summary.
struct Item {
    section: usize,
    priority: u32,
    /// Render order inside the section: (group, sequence).
    order: (u8, u64),
    /// The text already laid out for a list item (continuation lines indented).
    text: String,
}

/// Collects items, skipping empty texts.
struct Items {
    list: Vec<Item>,
}

impl Items {
    fn new() -> Self {
        Items { list: Vec::new() }
    }

    fn add(&mut self, section: usize, priority: u32, order: (u8, u64), text: &str) {
        let text = layout(text);
        if text.is_empty() || is_placeholder(&text) {
            return;
        }
        self.list.push(Item {
            section,
            priority,
            order,
            text,
        });
    }
}

/// Builds Pi's six-section history summary from the structured messages (see module docs).
pub fn summarize_history(input: &ExtractiveInput) -> String {
    let budget = budget_units(input.max_tokens);
    let caps = Caps::for_budget(budget);
    let a = Analysis::of(input.messages);
    let mut items = Items::new();

    // Critical Context: the user's focus for this compaction comes first and is kept first.
    if let Some(focus) = input.custom_instructions.map(str::trim) {
        if !focus.is_empty() {
            let text = format!(
                "Focus requested for this summary: {}",
                clip_head(focus, caps.goal)
            );
            items.add(CRITICAL, P_FOCUS, (G_PREVIOUS, 0), &text);
        }
    }

    // Earlier summaries: the one being updated, then any summaries replayed inside the span.
    if let Some(prev) = input.previous_summary {
        merge_previous(&mut items, prev, 0, &caps);
    }
    for (n, (idx, label, summary)) in a.embedded_summaries.iter().enumerate() {
        let seq = 1_000_000 + (*idx as u64) * 10 + n as u64;
        merge_embedded(&mut items, label, summary, seq, &caps);
    }

    // Goal: every user request verbatim, newest kept first; the latest is labelled, and the
    // first (the task as originally stated) is kept right after it.
    let labelled = a.user_texts.len() > 1 || items.list.iter().any(|i| i.section == GOAL);
    for (n, (idx, text)) in a.user_texts.iter().enumerate() {
        let latest = n + 1 == a.user_texts.len();
        let clipped = clip_head(text, caps.goal);
        let (priority, text) = if latest {
            let t = if labelled {
                format!("(latest) {clipped}")
            } else {
                clipped
            };
            (P_GOAL_LATEST, t)
        } else if n == 0 {
            (P_GOAL_FIRST, format!("(original request) {clipped}"))
        } else {
            (P_GOAL_OLDER + a.recency(*idx), clipped)
        };
        items.add(GOAL, priority, (G_NEW, *idx as u64), &text);
    }

    // Constraints & Preferences: user sentences that read like rules.
    for (idx, sentence) in a.user_sentences(&CONSTRAINT_RE) {
        let text = clip_head(&sentence, caps.item);
        items.add(
            CONSTRAINTS,
            P_CONSTRAINT + a.recency(idx),
            (G_NEW, idx as u64),
            &text,
        );
    }

    // Done: completed file changes and successful commands.
    for done in a.done_items() {
        items.add(
            DONE,
            P_DONE + a.recency(done.idx),
            (G_NEW, done.idx as u64),
            &done.text,
        );
    }

    // In Progress: the last assistant words, pending calls, an aborted last turn.
    for (seq, (idx, text)) in a.in_progress(&caps).into_iter().enumerate() {
        let order = (idx as u64) * 10 + seq as u64;
        items.add(
            IN_PROGRESS,
            P_IN_PROGRESS + a.recency(idx),
            (G_NEW, order),
            &text,
        );
    }

    // Blocked: failures nothing later fixed, newest first in priority.
    for fail in a.failures().into_iter().filter(|f| !f.resolved) {
        let text = format!(
            "{} failed{}: {}",
            fail.label,
            fail.code_note(),
            first_line(fail.text, caps.item)
        );
        items.add(
            BLOCKED,
            P_BLOCKED + a.recency(fail.idx),
            (G_NEW, fail.idx as u64),
            &text,
        );
    }

    // Key Decisions: assistant sentences that announce a choice.
    for (idx, sentence) in a.assistant_sentences(&DECISION_RE) {
        let text = clip_head(&sentence, caps.item);
        items.add(
            DECISIONS,
            P_DECISION + a.recency(idx),
            (G_NEW, idx as u64),
            &text,
        );
    }

    // Next Steps: ranked, most actionable first.
    for (rank, text) in a.next_steps(&caps).into_iter().enumerate() {
        let rank = rank as u32;
        items.add(
            NEXT,
            P_NEXT.saturating_sub(rank * 10),
            (G_NEW, u64::from(rank)),
            &text,
        );
    }

    // Critical Context: files, commands with exit codes, last errors verbatim, notes.
    add_file_lines(
        &mut items,
        CRITICAL,
        "Modified",
        input.modified_files,
        P_MODIFIED,
    );
    add_file_lines(&mut items, CRITICAL, "Read", input.read_files, P_READ);
    for cmd in a.command_histories() {
        let text = format!("Command {} → {}", cmd.label, cmd.outcomes);
        items.add(
            CRITICAL,
            P_COMMAND + a.recency(cmd.last_idx),
            (G_NEW, 10_000_000 + cmd.last_idx as u64),
            &text,
        );
    }
    // The newest error gets the most room; errors fixed later rank below open ones.
    for (k, fail) in a.failures().iter().rev().take(3).enumerate() {
        let cap = if k == 0 { caps.error } else { caps.item };
        let text = format!(
            "Last error from {}{}{}:\n{}",
            fail.label,
            fail.code_note(),
            if fail.resolved {
                ", later resolved"
            } else {
                ""
            },
            clip_head(fail.text.trim(), cap)
        );
        let band = if fail.resolved {
            P_RESOLVED_ERROR
        } else {
            P_LAST_ERROR
        };
        items.add(
            CRITICAL,
            band + a.recency(fail.idx),
            (G_NEW, 20_000_000 + fail.idx as u64),
            &text,
        );
    }
    for (idx, label, text) in &a.notes {
        let text = format!("Note ({label}): {}", clip_head(text, caps.item));
        items.add(
            CRITICAL,
            P_NOTE + a.recency(*idx),
            (G_NEW, 30_000_000 + *idx as u64),
            &text,
        );
    }

    render(&HISTORY_SECTIONS, items.list, budget)
}

/// Builds Pi's three-section turn-prefix summary: the start of an over-long turn whose recent
/// part (the suffix) stays in context verbatim, so this only has to say what led up to it.
pub fn summarize_turn_prefix(messages: &[Value], max_tokens: u64) -> String {
    let budget = budget_units(max_tokens);
    let caps = Caps::for_budget(budget);
    let a = Analysis::of(messages);
    let mut items = Items::new();

    // Original Request: the first user text is the request; later ones are follow-ups.
    for (n, (idx, text)) in a.user_texts.iter().enumerate() {
        let priority = if n == 0 {
            P_GOAL_LATEST
        } else {
            P_GOAL_OLDER + a.recency(*idx)
        };
        items.add(
            ORIGINAL,
            priority,
            (G_NEW, *idx as u64),
            &clip_head(text, caps.goal),
        );
    }
    for (idx, label, summary) in &a.embedded_summaries {
        let text = format!("{label}:\n{}", clip_head(summary, caps.error));
        items.add(
            SUFFIX_CTX,
            P_PREV_CRITICAL,
            (G_PREVIOUS, *idx as u64),
            &text,
        );
    }

    // Early Progress: what got done, what failed, what was decided.
    for done in a.done_items() {
        items.add(
            EARLY,
            P_DONE + a.recency(done.idx),
            (G_NEW, done.idx as u64),
            &done.text,
        );
    }
    for fail in a.failures() {
        let text = format!(
            "{} failed{}{}: {}",
            fail.label,
            fail.code_note(),
            if fail.resolved {
                " (later resolved)"
            } else {
                ""
            },
            first_line(fail.text, caps.item)
        );
        let priority = if fail.resolved { P_DONE } else { P_BLOCKED };
        items.add(
            EARLY,
            priority + a.recency(fail.idx),
            (G_NEW, fail.idx as u64),
            &text,
        );
    }
    for (idx, sentence) in a.assistant_sentences(&DECISION_RE) {
        let text = format!("Decision: {}", clip_head(&sentence, caps.item));
        items.add(
            EARLY,
            P_DECISION + a.recency(idx),
            (G_NEW, idx as u64),
            &text,
        );
    }

    // Context for Suffix: rules, files, open calls, last words, last error verbatim.
    for (idx, sentence) in a.user_sentences(&CONSTRAINT_RE) {
        let text = format!("Constraint: {}", clip_head(&sentence, caps.item));
        items.add(
            SUFFIX_CTX,
            P_CONSTRAINT + a.recency(idx),
            (G_PREVIOUS, idx as u64),
            &text,
        );
    }
    let (read, modified) = a.file_lists();
    add_file_lines(&mut items, SUFFIX_CTX, "Modified", &modified, P_MODIFIED);
    add_file_lines(&mut items, SUFFIX_CTX, "Read", &read, P_READ);
    for (seq, (idx, text)) in a.in_progress(&caps).into_iter().enumerate() {
        let order = 20_000_000 + (idx as u64) * 10 + seq as u64;
        items.add(
            SUFFIX_CTX,
            P_IN_PROGRESS + a.recency(idx),
            (G_NEW, order),
            &text,
        );
    }
    if let Some(fail) = a.failures().pop() {
        let text = format!(
            "Last error from {}{}:\n{}",
            fail.label,
            fail.code_note(),
            clip_head(fail.text.trim(), caps.error)
        );
        items.add(SUFFIX_CTX, P_LAST_ERROR, (G_NEW, 30_000_000), &text);
    }

    render(&TURN_PREFIX_SECTIONS, items.list, budget)
}

/// `max_tokens * 4`, saturating (Pi estimates one token per four characters).
fn budget_units(max_tokens: u64) -> usize {
    usize::try_from(max_tokens.saturating_mul(4)).unwrap_or(usize::MAX)
}

/// Per-item length caps, scaled with the budget so a small budget is not eaten by one item.
struct Caps {
    goal: usize,
    item: usize,
    error: usize,
}

impl Caps {
    fn for_budget(budget: usize) -> Self {
        Caps {
            goal: (budget / 4).clamp(200, 4000),
            item: (budget / 12).clamp(120, 600),
            error: (budget / 8).clamp(160, 1500),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering under a budget
// ---------------------------------------------------------------------------------------------

/// Admits items by priority until the budget is reached, then lays the sections out in Pi's
/// order. Returns the bare headings when not even the "(none)" skeleton fits.
fn render(specs: &[SectionSpec], items: Vec<Item>, budget: usize) -> String {
    // Highest priority first; ties keep insertion order (stable sort), so output is stable.
    let mut ranked: Vec<usize> = (0..items.len()).collect();
    ranked.sort_by(|&x, &y| items[y].priority.cmp(&items[x].priority));

    let mut counts = vec![0usize; specs.len()];
    let mut sums = vec![0usize; specs.len()];
    let mut seen: BTreeSet<(usize, &str)> = BTreeSet::new();
    let mut chosen: Vec<usize> = Vec::new();
    let mut total = layout_len(specs, &counts, &sums);

    if total > budget {
        return specs
            .iter()
            .map(|s| s.heading)
            .collect::<Vec<_>>()
            .join("\n\n");
    }

    for i in ranked {
        let item = &items[i];
        let Some(spec) = specs.get(item.section) else {
            continue;
        };
        let s = item.section;
        if counts[s] >= spec.max_items || !seen.insert((s, dedup_key(&item.text))) {
            continue;
        }
        let line = utf16_len(spec.marker.prefix()) + utf16_len(&item.text);
        counts[s] += 1;
        sums[s] += line;
        let next = layout_len(specs, &counts, &sums);
        if next <= budget {
            total = next;
            chosen.push(i);
        } else {
            counts[s] -= 1;
            sums[s] -= line;
        }
    }

    chosen.sort_by(|&x, &y| {
        (items[x].section, items[x].order, x).cmp(&(items[y].section, items[y].order, y))
    });
    let mut out = String::with_capacity(total);
    for (s, spec) in specs.iter().enumerate() {
        if s > 0 {
            out.push_str("\n\n");
        }
        out.push_str(spec.heading);
        out.push('\n');
        let mut n = 0usize;
        for &i in chosen.iter().filter(|&&i| items[i].section == s) {
            if n > 0 {
                out.push('\n');
            }
            n += 1;
            match spec.marker {
                Marker::Numbered => out.push_str(&format!("{n}. ")),
                m => out.push_str(m.prefix()),
            }
            out.push_str(&items[i].text);
        }
        if n == 0 {
            out.push_str(PLACEHOLDER);
        }
    }
    debug_assert_eq!(utf16_len(&out), total);
    out
}

/// The exact UTF-16 length of the rendered output for the given per-section item counts and
/// summed line lengths.
fn layout_len(specs: &[SectionSpec], counts: &[usize], sums: &[usize]) -> usize {
    let mut total = 2 * specs.len().saturating_sub(1);
    for (s, spec) in specs.iter().enumerate() {
        total += utf16_len(spec.heading) + 1;
        total += match counts[s] {
            0 => PLACEHOLDER.len(),
            c => sums[s] + (c - 1),
        };
    }
    total
}

/// Two items are duplicates when they read the same ignoring a leading "(latest)"/"(earlier)"
/// label, so a merged summary does not repeat what this span re-derived.
fn dedup_key(text: &str) -> &str {
    strip_labels(text)
}

fn strip_labels(mut text: &str) -> &str {
    loop {
        let before = text;
        for label in ["(latest) ", "(earlier) "] {
            if let Some(rest) = text.strip_prefix(label) {
                text = rest;
            }
        }
        if text.len() == before.len() {
            return text;
        }
    }
}

/// Lays text out as one list item: CRLF normalized, trailing spaces and blank lines dropped,
/// continuation lines indented two spaces so no content line can look like a heading.
fn layout(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let line = line.trim_end_matches(['\r', ' ', '\t']);
        if line.trim().is_empty() {
            continue;
        }
        if out.is_empty() {
            out.push_str(line.trim_start());
        } else {
            out.push_str("\n  ");
            out.push_str(line.trim_start());
        }
    }
    out
}

fn is_placeholder(text: &str) -> bool {
    let t = text.trim().trim_end_matches('.');
    t.eq_ignore_ascii_case("(none)") || t.eq_ignore_ascii_case("none")
}

/// Adds sorted file paths a few per line, so a long list costs few lines and drops from its
/// end first.
fn add_file_lines(items: &mut Items, section: usize, label: &str, paths: &[String], base: u32) {
    let paths: Vec<&str> = paths
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect();
    let seq_base: u64 = if label == "Modified" { 1_000 } else { 2_000 };
    for (n, chunk) in paths.chunks(PATHS_PER_LINE).enumerate() {
        let list: Vec<String> = chunk.iter().map(|p| code(p, 300)).collect();
        let text = format!("{label}: {}", list.join(", "));
        let priority = base.saturating_sub(n.min(999) as u32);
        items.add(section, priority, (G_NEW, seq_base + n as u64), &text);
    }
}

// ---------------------------------------------------------------------------------------------
// Text helpers
// ---------------------------------------------------------------------------------------------

/// Keeps the first `cap` UTF-16 units and says how much was cut.
fn clip_head(s: &str, cap: usize) -> String {
    let len = utf16_len(s);
    if len <= cap {
        return s.to_string();
    }
    let head = utf16_prefix(s, cap).trim_end();
    format!("{head} […{} more chars]", len - utf16_len(head))
}

/// Keeps the last `cap` UTF-16 units (conclusions sit at the end of a message).
fn clip_tail(s: &str, cap: usize) -> String {
    let len = utf16_len(s);
    if len <= cap {
        return s.to_string();
    }
    let mut units = 0usize;
    let mut start = s.len();
    for (i, ch) in s.char_indices().rev() {
        let w = ch.len_utf16();
        if units + w > cap {
            break;
        }
        units += w;
        start = i;
    }
    let tail = s.get(start..).unwrap_or("").trim_start();
    format!("[…{} earlier chars] {tail}", len - utf16_len(tail))
}

/// The first non-blank line, clipped; what a one-line error report needs.
fn first_line(s: &str, cap: usize) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let more = s.lines().filter(|l| !l.trim().is_empty()).count() > 1;
    let clipped = clip_head(line, cap);
    if more && utf16_len(line) <= cap {
        format!("{clipped} …")
    } else {
        clipped
    }
}

/// A command or path as inline code on one line.
fn code(s: &str, cap: usize) -> String {
    let mut lines = s.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let mut text = clip_head(first, cap);
    if lines.next().is_some() {
        text.push_str(" …");
    }
    format!("`{}`", text.replace('`', "'"))
}

/// Splits prose into sentences: line breaks and `.`/`!`/`?`/`;` followed by whitespace end a
/// sentence; fenced code blocks are skipped (they are not statements of intent).
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut current = String::new();
        let mut chars = trimmed.chars().peekable();
        while let Some(ch) = chars.next() {
            current.push(ch);
            let ends = matches!(ch, '.' | '!' | '?' | ';')
                && chars.peek().is_none_or(|c| c.is_whitespace());
            if ends {
                push_sentence(&mut out, &current);
                current.clear();
            }
        }
        push_sentence(&mut out, &current);
    }
    out
}

fn push_sentence(out: &mut Vec<String>, s: &str) {
    let s = s.trim().trim_start_matches(['-', '*', '>', ' ']).trim();
    if s.chars().count() >= 4 {
        out.push(s.to_string());
    }
}

/// User sentences that state a rule or preference.
static CONSTRAINT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(must|mustn't|must not|should|shouldn't|should not|don't|do not|doesn't|never|always|prefer\w*|avoid\w*|only|without|make sure|ensure|required|mandatory|not allowed|forbidden|at most|at least|no more than)\b",
    )
    .expect("constraint pattern is valid")
});

/// Assistant sentences that announce a choice.
static DECISION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(i'll use|i will use|we'll use|we will use|let's use|let's go with|going with|go with|decided|decide to|decision|chose|chosen|choose to|opted|opt for|instead of|rather than|switch(ed|ing)? to|the approach|approach is|the plan is|will use|better to)\b",
    )
    .expect("decision pattern is valid")
});

/// Assistant sentences that announce what comes next.
static NEXT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(next|then i'll|then we|remaining|todo|still need|needs? to|will now|i'll|i will|let me|going to|afterwards|follow[- ]up)\b",
    )
    .expect("next-step pattern is valid")
});

/// Pulls `exited with code N` out of a bash tool result (Pi's wording, sessions.md §9.4).
static EXIT_CODE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)exit(?:ed)? with (?:code|status) (-?\d+)").expect("exit pattern is valid")
});

/// A leading list marker in a previous summary (`- `, `* `, `1. `, `- [x] `).
static BULLET_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-*+]\s+(?:\[[ xX]\]\s+)?|\d{1,3}[.)]\s+)").expect("bullet pattern is valid")
});

// ---------------------------------------------------------------------------------------------
// Reading the messages
// ---------------------------------------------------------------------------------------------

/// How a tool call or command ended.
#[derive(Clone)]
enum Outcome {
    Ok { exit: Option<i64> },
    Fail { code: Option<i64>, text: String },
    Cancelled,
}

#[derive(Clone, PartialEq, Eq)]
enum ActionKind {
    Command(String),
    FileOp { tool: String, path: String },
    Tool(String),
    AssistantError,
}

/// One thing the agent did (a tool call, a user bash command, a failed model turn).
struct Action {
    idx: usize,
    kind: ActionKind,
    /// `None` while no result has been seen.
    outcome: Option<Outcome>,
}

impl Action {
    fn label(&self) -> String {
        match &self.kind {
            ActionKind::Command(c) => code(c, 160),
            ActionKind::FileOp { tool, path } => format!("`{tool}` {}", code(path, 200)),
            ActionKind::Tool(name) => format!("tool `{}`", clip_head(name, 60)),
            ActionKind::AssistantError => "the model call".to_string(),
        }
    }
}

/// A failure, with whether a later success of the same action fixed it.
struct Failure<'a> {
    idx: usize,
    label: String,
    code: Option<i64>,
    cancelled: bool,
    text: &'a str,
    resolved: bool,
}

impl Failure<'_> {
    fn code_note(&self) -> String {
        match (self.cancelled, self.code) {
            (true, _) => " (cancelled)".to_string(),
            (false, Some(c)) => format!(" (exit code {c})"),
            (false, None) => String::new(),
        }
    }
}

struct DoneItem {
    idx: usize,
    text: String,
}

struct CommandHistory {
    label: String,
    outcomes: String,
    last_idx: usize,
}

/// Everything the sections are filled from, gathered in one chronological pass.
struct Analysis {
    n: usize,
    user_texts: Vec<(usize, String)>,
    /// Assistant `text` blocks joined with "\n" (thinking is not a conclusion).
    assistant_texts: Vec<(usize, String)>,
    actions: Vec<Action>,
    /// Index of the last assistant message that ended normally.
    last_ok_assistant: Option<usize>,
    /// The last assistant message, if it was aborted: (index, errorMessage).
    aborted_last: Option<(usize, String)>,
    /// Extension messages: (index, customType, text).
    notes: Vec<(usize, String, String)>,
    /// branchSummary / compactionSummary messages inside the span: (index, label, summary).
    embedded_summaries: Vec<(usize, &'static str, String)>,
}

fn str_field<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Value::as_str)
}

/// The text of a `content` field: a string, or its `text` blocks joined with `sep`.
fn content_text(content: Option<&Value>, sep: &str) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| str_field(b, "type") == Some("text"))
            .filter_map(|b| str_field(b, "text"))
            .collect::<Vec<_>>()
            .join(sep),
        _ => String::new(),
    }
}

fn truthy(v: Option<&Value>) -> bool {
    crate::json::truthy(v)
}

impl Analysis {
    fn of(messages: &[Value]) -> Self {
        let mut a = Analysis {
            n: messages.len(),
            user_texts: Vec::new(),
            assistant_texts: Vec::new(),
            actions: Vec::new(),
            last_ok_assistant: None,
            aborted_last: None,
            notes: Vec::new(),
            embedded_summaries: Vec::new(),
        };
        // toolCallId → index into `actions`; ids may repeat, the latest call wins.
        let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
        for (idx, m) in messages.iter().enumerate() {
            match str_field(m, "role") {
                Some("user") => {
                    let text = content_text(m.get("content"), "");
                    if !text.trim().is_empty() {
                        a.user_texts.push((idx, text.trim().to_string()));
                    }
                }
                Some("assistant") => a.read_assistant(idx, m, &mut by_id),
                Some("toolResult") => a.read_tool_result(idx, m, &by_id),
                Some("bashExecution") => {
                    if truthy(m.get("excludeFromContext")) {
                        continue;
                    }
                    let command = str_field(m, "command").unwrap_or("").to_string();
                    let output = str_field(m, "output").unwrap_or("");
                    let exit = m.get("exitCode").and_then(Value::as_f64);
                    let outcome = if truthy(m.get("cancelled")) {
                        Outcome::Cancelled
                    } else {
                        match exit {
                            Some(c) if c != 0.0 => Outcome::Fail {
                                code: Some(c as i64),
                                text: clip_tail(output, 4000),
                            },
                            _ => Outcome::Ok {
                                exit: exit.map(|c| c as i64),
                            },
                        }
                    };
                    a.actions.push(Action {
                        idx,
                        kind: ActionKind::Command(command),
                        outcome: Some(outcome),
                    });
                }
                Some("custom") => {
                    let text = content_text(m.get("content"), "");
                    if !text.trim().is_empty() {
                        let label = str_field(m, "customType").unwrap_or("custom").to_string();
                        a.notes.push((idx, clip_head(&label, 60), text));
                    }
                }
                Some("branchSummary") | Some("compactionSummary") => {
                    let label = if str_field(m, "role") == Some("branchSummary") {
                        "Summary of an abandoned branch"
                    } else {
                        "Earlier summary"
                    };
                    if let Some(s) = str_field(m, "summary") {
                        if !s.trim().is_empty() {
                            a.embedded_summaries.push((idx, label, s.to_string()));
                        }
                    }
                }
                _ => {}
            }
        }
        a
    }

    fn read_assistant(&mut self, idx: usize, m: &Value, by_id: &mut BTreeMap<String, usize>) {
        let text = content_text(m.get("content"), "\n");
        if !text.trim().is_empty() {
            self.assistant_texts.push((idx, text.trim().to_string()));
        }
        if let Some(Value::Array(blocks)) = m.get("content") {
            for b in blocks
                .iter()
                .filter(|b| str_field(b, "type") == Some("toolCall"))
            {
                let name = str_field(b, "name").unwrap_or("unknown").to_string();
                let args = b.get("arguments");
                let arg = |k: &str| args.and_then(|a| a.get(k)).and_then(Value::as_str);
                let kind = match (name.as_str(), arg("path"), arg("command")) {
                    ("read" | "write" | "edit", Some(p), _) if !p.is_empty() => {
                        ActionKind::FileOp {
                            tool: name.clone(),
                            path: p.to_string(),
                        }
                    }
                    ("bash", _, Some(c)) if !c.trim().is_empty() => {
                        ActionKind::Command(c.to_string())
                    }
                    _ => ActionKind::Tool(name.clone()),
                };
                if let Some(id) = str_field(b, "id") {
                    by_id.insert(id.to_string(), self.actions.len());
                }
                self.actions.push(Action {
                    idx,
                    kind,
                    outcome: None,
                });
            }
        }
        match str_field(m, "stopReason") {
            Some("error") => {
                let msg = str_field(m, "errorMessage").unwrap_or("unknown error");
                self.actions.push(Action {
                    idx,
                    kind: ActionKind::AssistantError,
                    outcome: Some(Outcome::Fail {
                        code: None,
                        text: msg.to_string(),
                    }),
                });
                self.aborted_last = None;
            }
            Some("aborted") => {
                let msg = str_field(m, "errorMessage").unwrap_or("").to_string();
                self.aborted_last = Some((idx, msg));
            }
            _ => {
                self.last_ok_assistant = Some(idx);
                self.aborted_last = None;
            }
        }
    }

    fn read_tool_result(&mut self, idx: usize, m: &Value, by_id: &BTreeMap<String, usize>) {
        let text = content_text(m.get("content"), "");
        let outcome = if truthy(m.get("isError")) {
            let code = EXIT_CODE_RE
                .captures(&text)
                .and_then(|c| c.get(1))
                .and_then(|c| c.as_str().parse::<i64>().ok());
            Outcome::Fail {
                code,
                text: clip_head(&text, 4000),
            }
        } else {
            Outcome::Ok { exit: None }
        };
        let slot = str_field(m, "toolCallId")
            .and_then(|id| by_id.get(id))
            .copied()
            .filter(|&i| self.actions.get(i).is_some_and(|a| a.outcome.is_none()));
        match slot.and_then(|i| self.actions.get_mut(i)) {
            Some(action) => action.outcome = Some(outcome),
            None => {
                let name = str_field(m, "toolName").unwrap_or("unknown").to_string();
                self.actions.push(Action {
                    idx,
                    kind: ActionKind::Tool(name),
                    outcome: Some(outcome),
                });
            }
        }
    }

    /// 0..=1000 by position in the span, so newer facts win ties within a priority band.
    fn recency(&self, idx: usize) -> u32 {
        let n = self.n.max(1) as u64;
        ((idx as u64).min(n) * 1000 / n) as u32
    }

    fn user_sentences(&self, re: &Regex) -> Vec<(usize, String)> {
        pick_sentences(&self.user_texts, re)
    }

    fn assistant_sentences(&self, re: &Regex) -> Vec<(usize, String)> {
        pick_sentences(&self.assistant_texts, re)
    }

    /// Failures in chronological order, each marked resolved when the same action later
    /// succeeded (same command, same tool on the same path, or a later normal model turn).
    fn failures(&self) -> Vec<Failure<'_>> {
        let mut out = Vec::new();
        for (i, act) in self.actions.iter().enumerate() {
            let (code, cancelled, text) = match &act.outcome {
                Some(Outcome::Fail { code, text }) => (*code, false, text.as_str()),
                Some(Outcome::Cancelled) => (None, true, "command cancelled"),
                _ => continue,
            };
            let resolved = match act.kind {
                ActionKind::AssistantError => self.last_ok_assistant.is_some_and(|j| j > act.idx),
                _ => self.actions[i + 1..].iter().any(|later| {
                    later.kind == act.kind && matches!(later.outcome, Some(Outcome::Ok { .. }))
                }),
            };
            out.push(Failure {
                idx: act.idx,
                label: act.label(),
                code,
                cancelled,
                text,
                resolved,
            });
        }
        out
    }

    /// Successful file changes (one line per path) and commands (one line per command).
    fn done_items(&self) -> Vec<DoneItem> {
        // path → (writes, edits, last index)
        let mut files: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
        // command → (last ok index, failed before)
        let mut commands: BTreeMap<&str, (usize, bool)> = BTreeMap::new();
        let mut failed_commands: BTreeSet<&str> = BTreeSet::new();
        for act in &self.actions {
            let ok = matches!(act.outcome, Some(Outcome::Ok { .. }));
            match &act.kind {
                ActionKind::FileOp { tool, path } if ok && tool != "read" => {
                    let e = files.entry(path.as_str()).or_insert((0, 0, act.idx));
                    if tool == "write" {
                        e.0 += 1;
                    } else {
                        e.1 += 1;
                    }
                    e.2 = act.idx;
                }
                ActionKind::Command(c) if ok => {
                    let before = failed_commands.contains(c.as_str());
                    commands.insert(c.as_str(), (act.idx, before));
                }
                ActionKind::Command(c) if act.outcome.is_some() => {
                    // A command that failed after its last success is not done.
                    failed_commands.insert(c.as_str());
                    commands.remove(c.as_str());
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for (path, (writes, edits, idx)) in files {
            let p = code(path, 200);
            let text = match (writes, edits) {
                (0, 1) => format!("Edited {p}"),
                (0, e) => format!("Edited {p} ({e} edits)"),
                (_, 0) => format!("Wrote {p}"),
                (_, _) => format!("Wrote and edited {p}"),
            };
            out.push(DoneItem { idx, text });
        }
        for (cmd, (idx, failed_before)) in commands {
            let note = if failed_before {
                " (after earlier failures)"
            } else {
                ""
            };
            out.push(DoneItem {
                idx,
                text: format!("Ran {} successfully{note}", code(cmd, 160)),
            });
        }
        out.sort_by_key(|d| d.idx);
        out
    }

    /// (index, text) lines for In Progress: the last assistant words, pending calls, an
    /// aborted final turn.
    fn in_progress(&self, caps: &Caps) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        if let Some((idx, text)) = self.assistant_texts.last() {
            out.push((
                *idx,
                format!("Last assistant message: {}", clip_tail(text, caps.error)),
            ));
        }
        let pending: Vec<&Action> = self
            .actions
            .iter()
            .filter(|a| a.outcome.is_none())
            .collect();
        for act in pending.iter().rev().take(3).rev() {
            out.push((act.idx, format!("Pending {} (no result yet)", act.label())));
        }
        if let Some((idx, msg)) = &self.aborted_last {
            let why = if msg.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", first_line(msg, caps.item))
            };
            out.push((*idx, format!("The last assistant turn was aborted{why}")));
        }
        out
    }

    /// Ranked next steps: fix what is broken, finish what is pending, what the assistant said
    /// it would do, then the latest request.
    fn next_steps(&self, caps: &Caps) -> Vec<String> {
        let mut out = Vec::new();
        for fail in self.failures().iter().rev().filter(|f| !f.resolved).take(2) {
            out.push(format!(
                "Fix the failure of {}: {}",
                fail.label,
                first_line(fail.text, caps.item)
            ));
        }
        let pending: Vec<&Action> = self
            .actions
            .iter()
            .filter(|a| a.outcome.is_none())
            .collect();
        for act in pending.iter().rev().take(2) {
            out.push(format!("Check the result of the pending {}", act.label()));
        }
        if let Some((_, text)) = self.assistant_texts.last() {
            let said: Vec<String> = sentences(text)
                .into_iter()
                .filter(|s| NEXT_RE.is_match(s))
                .collect();
            for s in said.iter().rev().take(3).rev() {
                out.push(clip_head(s, caps.item));
            }
        }
        if let Some((_, text)) = self.user_texts.last() {
            out.push(format!(
                "Make sure the latest user request is fully handled: {}",
                first_line(text, caps.item)
            ));
        }
        out
    }

    /// One line per distinct command (latest 12): its outcomes in order, most recent last.
    fn command_histories(&self) -> Vec<CommandHistory> {
        let mut by_cmd: BTreeMap<&str, (Vec<String>, usize)> = BTreeMap::new();
        for act in &self.actions {
            let ActionKind::Command(c) = &act.kind else {
                continue;
            };
            let outcome = match &act.outcome {
                Some(Outcome::Ok { exit: Some(c) }) => format!("exit {c}"),
                Some(Outcome::Ok { exit: None }) => "ok".to_string(),
                Some(Outcome::Fail { code: Some(c), .. }) => format!("exit {c}"),
                Some(Outcome::Fail { code: None, .. }) => "error".to_string(),
                Some(Outcome::Cancelled) => "cancelled".to_string(),
                None => "pending".to_string(),
            };
            let e = by_cmd.entry(c.as_str()).or_insert((Vec::new(), act.idx));
            e.0.push(outcome);
            e.1 = act.idx;
        }
        let mut out: Vec<CommandHistory> = by_cmd
            .into_iter()
            .map(|(cmd, (outcomes, last_idx))| {
                // Runs of the same outcome collapse ("ok ×3"); the latest four runs are shown.
                let mut runs: Vec<(String, usize)> = Vec::new();
                for o in outcomes {
                    match runs.last_mut() {
                        Some((last, n)) if *last == o => *n += 1,
                        _ => runs.push((o, 1)),
                    }
                }
                let shown = runs.len().min(4);
                let mut parts: Vec<String> = runs[runs.len() - shown..]
                    .iter()
                    .map(|(o, n)| {
                        if *n > 1 {
                            format!("{o} ×{n}")
                        } else {
                            o.clone()
                        }
                    })
                    .collect();
                if runs.len() > shown {
                    parts.insert(0, "…".to_string());
                }
                let list = parts.join(", ");
                CommandHistory {
                    label: code(cmd, 160),
                    outcomes: list,
                    last_idx,
                }
            })
            .collect();
        out.sort_by_key(|c| c.last_idx);
        let skip = out.len().saturating_sub(12);
        out.split_off(skip)
    }

    /// Pi's file lists from the span's own tool calls (compaction.md §6.5): (read, modified).
    fn file_lists(&self) -> (Vec<String>, Vec<String>) {
        let mut read = BTreeSet::new();
        let mut modified = BTreeSet::new();
        for act in &self.actions {
            if let ActionKind::FileOp { tool, path } = &act.kind {
                if tool == "read" {
                    read.insert(path.clone());
                } else {
                    modified.insert(path.clone());
                }
            }
        }
        let mut read: Vec<String> = read.difference(&modified).cloned().collect();
        let mut modified: Vec<String> = modified.into_iter().collect();
        read.sort_by(|a, b| crate::json::cmp_utf16(a, b));
        modified.sort_by(|a, b| crate::json::cmp_utf16(a, b));
        (read, modified)
    }
}

fn pick_sentences(texts: &[(usize, String)], re: &Regex) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (idx, text) in texts {
        for s in sentences(text) {
            if re.is_match(&s) {
                out.push((*idx, s));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Merging an earlier summary
// ---------------------------------------------------------------------------------------------

/// Maps a heading line of an earlier summary to the section its bullets belong to. Turn-prefix
/// headings appear in split-turn summaries (after Pi's `**Turn Context (split turn):**` joiner).
fn section_of_heading(line: &str) -> Option<usize> {
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
type Parsed = Vec<(Option<usize>, String)>;

fn parse_summary(summary: &str) -> Option<Parsed> {
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

/// Merges an earlier summary's items into their sections at "previous" priority (oldest
/// content, dropped first under pressure); an unparseable one is kept verbatim.
fn merge_previous(items: &mut Items, summary: &str, seq_base: u64, caps: &Caps) {
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
fn merge_embedded(items: &mut Items, label: &str, summary: &str, seq_base: u64, caps: &Caps) {
    if label == "Earlier summary" {
        merge_previous(items, summary, seq_base * 1000, caps);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HEADINGS: [&str; 9] = [
        "## Goal",
        "## Constraints & Preferences",
        "## Progress",
        "### Done",
        "### In Progress",
        "### Blocked",
        "## Key Decisions",
        "## Next Steps",
        "## Critical Context",
    ];
    const TP_HEADINGS: [&str; 3] = [
        "## Original Request",
        "## Early Progress",
        "## Context for Suffix",
    ];

    /// The lines that are exactly a heading, in order.
    fn headings_of(s: &str) -> Vec<&str> {
        s.lines().filter(|l| l.starts_with('#')).collect()
    }

    fn assert_well_formed(s: &str, expected: &[&str], max_tokens: u64) {
        assert_eq!(headings_of(s), expected, "headings in:\n{s}");
        assert!(
            utf16_len(s) <= budget_units(max_tokens),
            "{} > {} in:\n{s}",
            utf16_len(s),
            budget_units(max_tokens)
        );
    }

    fn assistant(content: Value, stop: &str) -> Value {
        json!({"role": "assistant", "content": content, "api": "anthropic-messages",
               "provider": "anthropic", "model": "m", "stopReason": stop, "timestamp": 1})
    }

    fn call(id: &str, name: &str, args: Value) -> Value {
        json!({"type": "toolCall", "id": id, "name": name, "arguments": args})
    }

    fn result(id: &str, name: &str, text: &str, is_error: bool) -> Value {
        json!({"role": "toolResult", "toolCallId": id, "toolName": name,
               "content": [{"type": "text", "text": text}], "isError": is_error, "timestamp": 2})
    }

    fn session() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "Add a --json flag to the `report` command. Please don't use unsafe code, and keep the output stable.", "timestamp": 0}),
            assistant(json!([
                {"type": "thinking", "thinking": "Look at the CLI first."},
                {"type": "text", "text": "I'll read the CLI module first."},
                call("c1", "read", json!({"path": "src/cli.rs"})),
            ]), "toolUse"),
            result("c1", "read", "pub fn report() {}", false),
            assistant(json!([
                {"type": "text", "text": "I'll use serde_json for the output instead of hand-written formatting."},
                call("c2", "edit", json!({"path": "src/cli.rs", "edits": [{"oldText": "a", "newText": "b"}]})),
                call("c3", "write", json!({"path": "src/report/json.rs", "content": "pub fn x() {}"})),
            ]), "toolUse"),
            result("c2", "edit", "Successfully replaced 1 block(s) in src/cli.rs.", false),
            result("c3", "write", "Successfully wrote 13 bytes to src/report/json.rs", false),
            assistant(json!([call("c4", "bash", json!({"command": "cargo test report"}))]), "toolUse"),
            result("c4", "bash", "error[E0425]: cannot find value `fmt` in this scope\n --> src/report/json.rs:3:5\n\nCommand exited with code 1", true),
            json!({"role": "bashExecution", "command": "cargo build", "output": "error: could not compile `report`", "exitCode": 101, "cancelled": false, "truncated": false, "timestamp": 3}),
            assistant(json!([
                {"type": "text", "text": "The build fails because `fmt` is missing; fixing the import."},
                call("c5", "edit", json!({"path": "src/report/json.rs", "edits": []})),
            ]), "toolUse"),
            result("c5", "edit", "Successfully replaced 1 block(s) in src/report/json.rs.", false),
            assistant(json!([call("c6", "bash", json!({"command": "cargo test report"}))]), "toolUse"),
            result("c6", "bash", "test result: ok. 4 passed", false),
            assistant(json!([{"type": "text", "text": "All report tests pass. Next I will add a snapshot test for the JSON output."}]), "stop"),
        ]
    }

    fn input<'a>(
        messages: &'a [Value],
        read: &'a [String],
        modified: &'a [String],
        max_tokens: u64,
    ) -> ExtractiveInput<'a> {
        ExtractiveInput {
            messages,
            previous_summary: None,
            custom_instructions: None,
            read_files: read,
            modified_files: modified,
            max_tokens,
        }
    }

    #[test]
    fn realistic_session() {
        let msgs = session();
        let read: Vec<String> = vec![];
        let modified = vec!["src/cli.rs".to_string(), "src/report/json.rs".to_string()];
        let mut inp = input(&msgs, &read, &modified, 2000);
        inp.custom_instructions = Some("the JSON schema");
        let s = summarize_history(&inp);
        assert_well_formed(&s, &HEADINGS, 2000);
        assert!(
            s.contains("Add a --json flag to the `report` command."),
            "{s}"
        );
        assert!(s.contains("Please don't use unsafe code"), "{s}");
        assert!(
            s.contains("`src/cli.rs`") && s.contains("`src/report/json.rs`"),
            "{s}"
        );
        assert!(
            s.contains("error[E0425]: cannot find value `fmt` in this scope"),
            "{s}"
        );
        assert!(
            s.contains("Command `cargo test report` → exit 1, ok"),
            "{s}"
        );
        assert!(s.contains("Command `cargo build` → exit 101"), "{s}");
        assert!(
            s.contains("Focus requested for this summary: the JSON schema"),
            "{s}"
        );
        assert!(s.contains("I'll use serde_json"), "{s}");
        assert!(s.contains("Next I will add a snapshot test"), "{s}");
        // The failed test run was fixed later; the build failure was not.
        let blocked = section(&s, "### Blocked");
        assert!(blocked.contains("cargo build"), "{blocked}");
        assert!(!blocked.contains("cargo test"), "{blocked}");
        let done = section(&s, "### Done");
        assert!(done.contains("- [x] Edited `src/cli.rs`"), "{done}");
        assert!(
            done.contains("Wrote and edited `src/report/json.rs`"),
            "{done}"
        );
        assert!(
            done.contains("Ran `cargo test report` successfully (after earlier failures)"),
            "{done}"
        );
    }

    /// The body under `heading` up to the next heading line.
    fn section<'s>(s: &'s str, heading: &str) -> &'s str {
        let start = s
            .find(&format!("{heading}\n"))
            .map(|i| i + heading.len() + 1)
            .unwrap_or(0);
        let rest = &s[start..];
        let end = rest.find("\n#").unwrap_or(rest.len());
        &rest[..end]
    }

    #[test]
    fn tight_budget_keeps_headings_and_latest_request() {
        let msgs = session();
        let modified = vec!["src/cli.rs".to_string()];
        for max_tokens in [0u64, 10, 49, 50, 60, 80, 120, 200, 400] {
            let s = summarize_history(&input(&msgs, &[], &modified, max_tokens));
            assert_eq!(headings_of(&s), HEADINGS, "{max_tokens}: {s}");
            let skeleton_fits = utf16_len(&s) <= budget_units(max_tokens);
            if max_tokens >= 60 {
                assert!(skeleton_fits, "{max_tokens}: {s}");
            }
            if max_tokens >= 120 {
                assert!(s.contains("Add a --json flag"), "{max_tokens}: {s}");
            }
        }
    }

    #[test]
    fn update_mode_merges_previous_sections() {
        let msgs = session();
        let previous = "## Goal\nSet up the CLI skeleton.\n\n## Constraints & Preferences\n- Keep MSRV 1.80\n\n## Progress\n### Done\n- [x] Created `src/main.rs`\n\n### In Progress\n- [ ] Wiring subcommands\n\n### Blocked\n- (none)\n\n## Key Decisions\n- **clap derive**: less code\n\n## Next Steps\n1. Add the report command\n\n## Critical Context\n- Config lives in `~/.report.toml`\n\n<read-files>\nsrc/old.rs\n</read-files>";
        let mut inp = input(&msgs, &[], &[], 3000);
        inp.previous_summary = Some(previous);
        let s = summarize_history(&inp);
        assert_well_formed(&s, &HEADINGS, 3000);
        assert!(
            section(&s, "## Goal").contains("Set up the CLI skeleton."),
            "{s}"
        );
        assert!(
            section(&s, "## Goal").contains("(latest) Add a --json flag"),
            "{s}"
        );
        assert!(
            section(&s, "## Constraints & Preferences").contains("- Keep MSRV 1.80"),
            "{s}"
        );
        assert!(
            section(&s, "### Done").contains("- [x] Created `src/main.rs`"),
            "{s}"
        );
        assert!(
            section(&s, "### In Progress").contains("(earlier) Wiring subcommands"),
            "{s}"
        );
        assert!(
            section(&s, "## Key Decisions").contains("**clap derive**: less code"),
            "{s}"
        );
        assert!(
            section(&s, "## Next Steps").contains("(earlier) Add the report command"),
            "{s}"
        );
        assert!(s.contains("Config lives in `~/.report.toml`"), "{s}");
        assert!(
            !s.contains("src/old.rs"),
            "file blocks are recomputed, not merged: {s}"
        );
        // Earlier next steps come after the new ones.
        let next = section(&s, "## Next Steps");
        assert!(next.find("(earlier)") > next.find("1. "), "{next}");

        // Merging the output again does not duplicate or re-label items.
        let mut again = input(&[], &[], &[], 3000);
        again.previous_summary = Some(&s);
        let s2 = summarize_history(&again);
        assert_well_formed(&s2, &HEADINGS, 3000);
        assert_eq!(s2.matches("Set up the CLI skeleton.").count(), 1, "{s2}");
        assert!(!s2.contains("(earlier) (earlier)"), "{s2}");
        assert!(s2.contains("Keep MSRV 1.80"), "{s2}");
    }

    #[test]
    fn unparseable_previous_summary_is_kept_verbatim() {
        let mut inp = input(&[], &[], &[], 1000);
        inp.previous_summary = Some("We were porting the parser to nom; tests in tests/parse.rs.");
        let s = summarize_history(&inp);
        assert_well_formed(&s, &HEADINGS, 1000);
        assert!(
            s.contains(
                "Earlier summary:\n  We were porting the parser to nom; tests in tests/parse.rs."
            ),
            "{s}"
        );
        inp.previous_summary = Some("No prior history.");
        let s = summarize_history(&inp);
        assert!(!s.contains("No prior history"), "{s}");
    }

    #[test]
    fn turn_prefix() {
        let msgs = session();
        let s = summarize_turn_prefix(&msgs[..8], 1000);
        assert_well_formed(&s, &TP_HEADINGS, 1000);
        assert!(
            section(&s, "## Original Request").contains("Add a --json flag"),
            "{s}"
        );
        let early = section(&s, "## Early Progress");
        assert!(early.contains("Edited `src/cli.rs`"), "{s}");
        assert!(
            early.contains("`cargo test report` failed (exit code 1)"),
            "{s}"
        );
        let ctx = section(&s, "## Context for Suffix");
        assert!(
            ctx.contains("Modified: `src/cli.rs`, `src/report/json.rs`"),
            "{s}"
        );
        assert!(
            ctx.contains("Constraint: Please don't use unsafe code"),
            "{s}"
        );
        assert!(ctx.contains("error[E0425]"), "{s}");
        // A call whose result is in the suffix is pending.
        let s = summarize_turn_prefix(&msgs[..7], 1000);
        assert!(s.contains("Pending `cargo test report`"), "{s}");
    }

    #[test]
    fn empty_input() {
        let s = summarize_history(&input(&[], &[], &[], 1000));
        assert_eq!(
            s,
            "## Goal\n(none)\n\n## Constraints & Preferences\n(none)\n\n## Progress\n### Done\n(none)\n\n### In Progress\n(none)\n\n### Blocked\n(none)\n\n## Key Decisions\n(none)\n\n## Next Steps\n(none)\n\n## Critical Context\n(none)"
        );
        let t = summarize_turn_prefix(&[], 1000);
        assert_eq!(t, "## Original Request\n(none)\n\n## Early Progress\n(none)\n\n## Context for Suffix\n(none)");
        assert_eq!(
            summarize_turn_prefix(&[], 0),
            "## Original Request\n\n## Early Progress\n\n## Context for Suffix"
        );
    }

    #[test]
    fn deterministic() {
        let msgs = session();
        let modified = vec!["src/cli.rs".to_string()];
        let a = summarize_history(&input(&msgs, &[], &modified, 700));
        let b = summarize_history(&input(&msgs, &[], &modified, 700));
        assert_eq!(a, b);
        assert_eq!(
            summarize_turn_prefix(&msgs, 300),
            summarize_turn_prefix(&msgs, 300)
        );
    }

    #[test]
    fn malformed_messages_do_not_panic() {
        let msgs = vec![
            json!(null),
            json!(42),
            json!({"role": 7}),
            json!({"role": "user", "content": null}),
            json!({"role": "user"}),
            json!({"role": "user", "content": [null, 1, {"type": "text"}, {"type": "text", "text": 5}]}),
            json!({"role": "assistant", "content": "plain string", "stopReason": 3}),
            json!({"role": "assistant", "content": [{"type": "toolCall", "arguments": "x"}], "stopReason": "error"}),
            json!({"role": "toolResult", "toolCallId": 9, "isError": "yes", "content": {}}),
            json!({"role": "bashExecution", "exitCode": "1", "command": null}),
            json!({"role": "bashExecution", "exitCode": 2.5e300, "command": "x"}),
            json!({"role": "compactionSummary", "summary": 12}),
            json!({"role": "branchSummary", "summary": "## Goal\n- g"}),
            json!({"role": "custom", "customType": [], "content": "note"}),
            json!({"role": "wat", "content": "x"}),
        ];
        let s = summarize_history(&input(&msgs, &[], &[], 500));
        assert_well_formed(&s, &HEADINGS, 500);
        let t = summarize_turn_prefix(&msgs, 500);
        assert_well_formed(&t, &TP_HEADINGS, 500);
    }

    #[test]
    fn long_and_hostile_text_is_clipped_and_cannot_fake_headings() {
        let long = format!("## Goal\n{}\n## Critical Context", "é🦀x".repeat(5000));
        let msgs = vec![json!({"role": "user", "content": long})];
        let s = summarize_history(&input(&msgs, &[], &[], 800));
        assert_well_formed(&s, &HEADINGS, 800);
        assert!(s.contains("more chars]"), "{s}");
    }

    fn fixture_messages(case: &str) -> Option<Vec<Value>> {
        let path = crate::test_fixtures::case_file("extractive fixture", case, "session.jsonl")?;
        let Ok(text) = std::fs::read_to_string(&path) else {
            crate::test_fixtures::skip_or_fail("extractive fixture", "unreadable session");
            return None;
        };
        Some(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|e| e.get("type").and_then(Value::as_str) == Some("message"))
                .filter_map(|e| e.get("message").cloned())
                .collect(),
        )
    }

    #[test]
    fn split_turn_previous_summary_from_an_llm() {
        // Pi's shape: history summary, the split-turn joiner, a turn-prefix summary, then the
        // file-list blocks appended by compaction.
        let previous = "## Goal\nPort the parser to nom.\n\n## Constraints & Preferences\n- (none)\n\n## Progress\n### Done\n- [x] Wrote `src/parse.rs`\n  with the tokenizer\n\n### In Progress\n- [ ] (none)\n\n### Blocked\n- (none)\n\n## Key Decisions\n- **nom 7**: stable API\n\n## Next Steps\n1. Port expressions\n2. Run `cargo test`\n\n## Critical Context\n- (none)\n\n---\n\n**Turn Context (split turn):**\n\n## Original Request\nAlso support comments.\n\n## Early Progress\n- Read `src/lex.rs`\n\n## Context for Suffix\n- Comments start with `#`\n\n<read-files>\nsrc/lex.rs\n</read-files>\n\n<modified-files>\nsrc/parse.rs\n</modified-files>";
        let mut inp = input(&[], &[], &[], 2000);
        inp.previous_summary = Some(previous);
        let s = summarize_history(&inp);
        assert_well_formed(&s, &HEADINGS, 2000);
        let goal = section(&s, "## Goal");
        assert!(
            goal.contains("Port the parser to nom.") && goal.contains("Also support comments."),
            "{s}"
        );
        assert!(
            section(&s, "### Done").contains("- [x] Wrote `src/parse.rs`\n  with the tokenizer"),
            "{s}"
        );
        assert!(
            section(&s, "### Done").contains("- [x] Read `src/lex.rs`"),
            "{s}"
        );
        assert!(
            section(&s, "## Next Steps").contains("2. (earlier) Run `cargo test`"),
            "{s}"
        );
        assert!(
            section(&s, "## Critical Context").contains("- Comments start with `#`"),
            "{s}"
        );
        assert_eq!(section(&s, "### Blocked").trim(), "(none)", "{s}");
        assert!(
            !s.contains("<read-files>") && !s.contains("Turn Context"),
            "{s}"
        );
    }

    #[test]
    fn real_fixture_sessions() {
        for case in [
            "006-tool-heavy-file-ops",
            "009-bash-executions",
            "013-error-and-aborted-usage",
            "010-custom-messages",
        ] {
            let Some(msgs) = fixture_messages(case) else {
                continue;
            };
            let a = Analysis::of(&msgs);
            let (read, modified) = a.file_lists();
            for max_tokens in [100u64, 1000, 13_107] {
                let s = summarize_history(&input(&msgs, &read, &modified, max_tokens));
                assert_well_formed(&s, &HEADINGS, max_tokens);
                if max_tokens >= 1000 {
                    assert!(!section(&s, "## Goal").starts_with("(none)"), "{case}: {s}");
                }
                let t = summarize_turn_prefix(&msgs, max_tokens);
                assert_well_formed(&t, &TP_HEADINGS, max_tokens);
            }
            let big = summarize_history(&input(&msgs, &read, &modified, 13_107));
            if let Some(p) = modified.first() {
                assert!(big.contains(p.as_str()), "{case}: {big}");
            }
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z ]{0,40}",
                "(must|don't|## Goal|\n|x|🦀|é|`|\\.| ){0,30}",
                ".{0,200}",
            ]
        }

        fn block() -> impl Strategy<Value = Value> {
            prop_oneof![
                text().prop_map(|t| json!({"type": "text", "text": t})),
                text().prop_map(|t| json!({"type": "thinking", "thinking": t})),
                (0..4u8, prop::sample::select(vec!["read", "write", "edit", "bash", "grep"]), text())
                    .prop_map(|(id, name, t)| json!({"type": "toolCall", "id": format!("c{id}"), "name": name, "arguments": {"path": t.clone(), "command": t}})),
                Just(json!(null)),
                Just(json!({"type": "image", "data": "AAAA", "mimeType": "image/png"})),
            ]
        }

        fn message() -> impl Strategy<Value = Value> {
            prop_oneof![
                text().prop_map(|t| json!({"role": "user", "content": t})),
                prop::collection::vec(block(), 0..4).prop_map(|b| json!({"role": "user", "content": b})),
                (prop::collection::vec(block(), 0..4), prop::sample::select(vec!["stop", "toolUse", "error", "aborted", "length"]), text())
                    .prop_map(|(b, stop, err)| json!({"role": "assistant", "content": b, "stopReason": stop, "errorMessage": err})),
                (0..4u8, any::<bool>(), text()).prop_map(|(id, e, t)| json!({"role": "toolResult", "toolCallId": format!("c{id}"), "toolName": "bash", "isError": e, "content": [{"type": "text", "text": t}]})),
                (text(), -2..3i64, any::<bool>(), text()).prop_map(|(c, code, cancelled, out)| json!({"role": "bashExecution", "command": c, "exitCode": code, "cancelled": cancelled, "output": out})),
                text().prop_map(|t| json!({"role": "compactionSummary", "summary": t})),
                text().prop_map(|t| json!({"role": "custom", "customType": "x", "content": t})),
                Just(json!({"role": "toolResult", "content": null})),
                Just(json!(null)),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            #[test]
            fn never_panics_and_fits(
                msgs in prop::collection::vec(message(), 0..25),
                prev in prop::option::of(text()),
                focus in prop::option::of(text()),
                max_tokens in 50u64..3000,
            ) {
                let files = vec!["a.rs".to_string(), "b/c.rs".to_string()];
                let inp = ExtractiveInput {
                    messages: &msgs,
                    previous_summary: prev.as_deref(),
                    custom_instructions: focus.as_deref(),
                    read_files: &files,
                    modified_files: &files,
                    max_tokens,
                };
                let s = summarize_history(&inp);
                prop_assert_eq!(headings_of(&s), HEADINGS.to_vec());
                prop_assert!(utf16_len(&s) <= budget_units(max_tokens));
                prop_assert_eq!(&s, &summarize_history(&inp));
                let t = summarize_turn_prefix(&msgs, max_tokens);
                prop_assert_eq!(headings_of(&t), TP_HEADINGS.to_vec());
                prop_assert!(utf16_len(&t) <= budget_units(max_tokens));
            }
        }
    }
}
