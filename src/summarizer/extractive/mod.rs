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
//! most-important-first until the output would exceed its target. The hard cap is
//! `max_tokens * 4` UTF-16 units (Pi's chars/4 token estimate; the caller passes 0.8 × reserve
//! like Pi); the target stays well under it (a quarter of a large cap, see
//! `layout::target_units`), since a summary that fills the reserve leaves no room to work.
//! Headings are never cut.
//!
//! What makes an item true is tracked, not guessed from the last message: a failure is open
//! only while no later run of the same action succeeded and no later sentence naming it says it
//! was fixed or gives it up (abandoned approaches become Key Decisions); the goal is the first
//! substantive request, not a greeting, an acknowledgement or boilerplate the session repeats;
//! tools are read by their arguments (any tool with a `command`/`cmd`/`script` is a shell), so
//! harnesses that do not name their tools like Pi's are summarized just as well. The same input always yields byte-identical
//! output (no hash-map iteration, no clocks), so compactions are reproducible and testable.

mod facts;
mod layout;
mod merge;
#[cfg(test)]
mod tests;
mod text;

use serde_json::Value;

use facts::*;
use layout::*;
use merge::*;
use text::*;

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

/// Builds Pi's six-section history summary from the structured messages (see module docs).
pub fn summarize_history(input: &ExtractiveInput) -> String {
    let budget = target_units(input.max_tokens);
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
    // Items carried over from an earlier summary: what this span settled is no longer open,
    // and what it supersedes (its own last words, latest request, command runs) is dropped.
    let carry = |section: usize, item: &str| carry_over(&a, section, item);
    if let Some(prev) = input.previous_summary {
        merge_previous(&mut items, prev, 0, &caps, &carry);
    }
    for (n, (idx, label, summary)) in a.embedded_summaries.iter().enumerate() {
        let seq = 1_000_000 + (*idx as u64) * 10 + n as u64;
        merge_embedded(&mut items, label, summary, seq, &caps, &carry);
    }

    // Goal: every request verbatim (acknowledgements, greetings and repeated boilerplate are
    // not requests), newest kept first; the latest is labelled, and the first (the task as
    // originally stated) is kept right after it. With no request at all, an injected message
    // (a task handed over by an extension) states the task.
    let carried_goal = items.list.iter().any(|i| i.section == GOAL);
    let labelled = a.requests.len() > 1 || carried_goal;
    if a.requests.is_empty() {
        if let Some((idx, label, text, _)) = a.notes.first() {
            let text = format!("(from {label}) {}", clip_head(text, caps.goal));
            items.add_new(GOAL, P_GOAL_FIRST, *idx, &text);
        }
    }
    for (n, (idx, text)) in a.requests.iter().enumerate() {
        let latest = n + 1 == a.requests.len();
        let clipped = clip_head(text, caps.goal);
        let (priority, text) = if latest {
            let t = if labelled {
                format!("(latest) {clipped}")
            } else {
                clipped
            };
            (P_GOAL_LATEST, t)
        } else if n == 0 && !carried_goal {
            (P_GOAL_FIRST, format!("(original request) {clipped}"))
        } else {
            (P_GOAL_OLDER + a.recency(*idx), clipped)
        };
        items.add_new(GOAL, priority, *idx, &text);
    }

    // Constraints & Preferences: user sentences that read like rules.
    for (idx, sentence) in a.user_sentences(&CONSTRAINT_RE) {
        let text = clip_head(&sentence, caps.item);
        items.add_new(CONSTRAINTS, P_CONSTRAINT + a.recency(idx), idx, &text);
    }

    // Done: completed file changes and successful commands.
    for done in a.done_items() {
        items.add_new(DONE, P_DONE + a.recency(done.idx), done.idx, &done.text);
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
        items.add_new(BLOCKED, P_BLOCKED + a.recency(fail.idx), fail.idx, &text);
    }

    // Key Decisions: assistant sentences that announce a choice or abandon an approach.
    for (idx, sentence) in a.decisions() {
        let text = clip_head(&sentence, caps.item);
        items.add_new(DECISIONS, P_DECISION + a.recency(idx), idx, &text);
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
        // Only the newest is the last error; two failures never share that label.
        let text = format!(
            "{} from {}{}{}:\n{}",
            if k == 0 {
                "Last error"
            } else {
                "Earlier error"
            },
            fail.label,
            fail.code_note(),
            fail.resolution_note(),
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
    for (idx, label, text, count) in &a.notes {
        let times = if *count > 1 {
            format!(", sent {count}×")
        } else {
            String::new()
        };
        let text = format!("Note ({label}{times}): {}", clip_head(text, caps.item));
        items.add(
            CRITICAL,
            P_NOTE + a.recency(*idx),
            (G_NEW, 30_000_000 + *idx as u64),
            &text,
        );
    }
    for (idx, text, count) in &a.boilerplate {
        let text = format!(
            "Boilerplate the user side sent {count}× (not a request): {}",
            clip_head(&text.split_whitespace().collect::<Vec<_>>().join(" "), 160)
        );
        items.add(
            CRITICAL,
            P_NOTE + a.recency(*idx),
            (G_NEW, 30_000_000 + *idx as u64),
            &text,
        );
    }
    if let Some((idx, text)) = &a.last_ack {
        let text = format!("Latest user reply: {}", first_line(text, caps.item));
        items.add(CRITICAL, P_NEXT, (G_NEW, 30_000_000 + *idx as u64), &text);
    }

    render(&HISTORY_SECTIONS, items.list, budget)
}

/// See [`Carry`]: how an earlier summary's item fares against this span's analysis.
fn carry_over(a: &Analysis, section: usize, item: &str) -> Carry {
    let superseded = match section {
        IN_PROGRESS => {
            (item.starts_with("Last assistant message:") && !a.assistant_texts.is_empty())
                || item.starts_with("Pending ")
        }
        NEXT => item.starts_with("Make sure the latest user request") && !a.requests.is_empty(),
        CRITICAL => item.starts_with("Command `") && a.settles(item) || a.reruns(item),
        _ => false,
    };
    if superseded {
        return Carry::Drop;
    }
    match section {
        BLOCKED if a.settles(item) => Carry::Settled,
        NEXT | IN_PROGRESS if a.settles(item) => Carry::Drop,
        CRITICAL => match item.strip_prefix("Last error from ") {
            Some(rest) if a.settles(item) => {
                Carry::Rewrite(format!("Earlier error (fixed since) from {rest}"))
            }
            Some(rest) => Carry::Rewrite(format!("Earlier error from {rest}")),
            None => Carry::Keep,
        },
        _ => Carry::Keep,
    }
}

/// Builds Pi's three-section turn-prefix summary: the start of an over-long turn whose recent
/// part (the suffix) stays in context verbatim, so this only has to say what led up to it.
pub fn summarize_turn_prefix(messages: &[Value], max_tokens: u64) -> String {
    let budget = target_units(max_tokens);
    let caps = Caps::for_budget(budget);
    let a = Analysis::of(messages);
    let mut items = Items::new();

    // Original Request: the turn's first request; later ones are follow-ups. A turn opened by
    // an injected message (a task from an extension) states its request there.
    let opened_by_note = messages
        .first()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("custom");
    if opened_by_note || a.requests.is_empty() {
        if let Some((idx, label, text, _)) = a.notes.first() {
            let text = format!("(from {label}) {}", clip_head(text, caps.goal));
            items.add_new(ORIGINAL, P_GOAL_LATEST, *idx, &text);
        }
    }
    for (idx, label, text, _) in a
        .notes
        .iter()
        .skip(usize::from(opened_by_note || a.requests.is_empty()))
    {
        let text = format!("Note ({label}): {}", clip_head(text, caps.item));
        items.add(
            SUFFIX_CTX,
            P_NOTE + a.recency(*idx),
            (G_NEW, 25_000_000 + *idx as u64),
            &text,
        );
    }
    for (n, (idx, text)) in a.requests.iter().enumerate() {
        let priority = if n == 0 && !opened_by_note {
            P_GOAL_LATEST
        } else {
            P_GOAL_OLDER + a.recency(*idx)
        };
        items.add_new(ORIGINAL, priority, *idx, &clip_head(text, caps.goal));
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
        items.add_new(EARLY, P_DONE + a.recency(done.idx), done.idx, &done.text);
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
        items.add_new(EARLY, priority + a.recency(fail.idx), fail.idx, &text);
    }
    for (idx, sentence) in a.decisions() {
        let text = format!("Decision: {}", clip_head(&sentence, caps.item));
        items.add_new(EARLY, P_DECISION + a.recency(idx), idx, &text);
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
