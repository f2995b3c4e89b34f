//! The embedded default summarizer: deterministic, offline, no model.
//!
//! A fresh install has no provider configured, yet compaction must still produce a summary that
//! a model resuming the work can act on (protocol.md §4, "Embedded default"). Instead of
//! paraphrasing, this module *extracts*: it walks the structured history (user requests, tool
//! calls and their results, bash executions, assistant errors) and fills Pi's exact section
//! layout (compaction.md §6.3) with verbatim facts: what was asked, which commands ran with
//! which exit codes, what failed last, what was planned and what of it is left, and what the
//! assistant said last. The file lists are not repeated in the body: they are Pi's file blocks
//! after it (and `details`), which the daemon cuts to `fileListLimit`.
//!
//! Everything is budgeted: each fact becomes an item with a priority, and items are admitted
//! most-important-first until the output would exceed its target: a quarter of a large cap
//! (`layout::target_units`), lowered to `[summarizer] extractive_target_tokens`
//! ([`ExtractiveSettings`]). Must-keep facts (the goal, constraints, decisions, open errors) are
//! admitted first and may pass the target, up to the hard cap of `max_tokens * 4` UTF-16 units
//! (Pi's chars/4 token estimate; the caller passes 0.8 × reserve like Pi). Headings are never cut.
//!
//! An update (Pi's incremental compaction: the previous summary fed back in) stays flat:
//! repeated, similar items fold into one line with a count and a range (`consolidate`), what
//! the span settled is no longer open, and the latest statement of what is left replaces the
//! earlier ones.
//!
//! What makes an item true is tracked, not guessed from the last message: a failure is open
//! only while no later run of the same action succeeded, no later run of it stopped showing the
//! error, and no later sentence naming it says it was fixed or gives it up (abandoned approaches
//! become Key Decisions); a plan's step is done when a tool result or a statement says so
//! (`plan`); the goal is the first substantive request, not a greeting, an acknowledgement, a
//! slash command or boilerplate the session repeats; tools are read by their arguments (any
//! tool with a `command`/`cmd`/`script` is a shell), so harnesses that do not name their tools
//! like Pi's are summarized just as well. The same input always yields byte-identical output (no
//! hash-map iteration, no clocks), so compactions are reproducible and testable.
//!
//! Every item is a line a person reads (`noise`): a note, command or poll sent again with
//! another time or number is one line with a count and its latest text, across compactions too;
//! a long note, report, request or error output gives its point and names the entry holding
//! the rest (`get_entry`); no base64 or minified run reaches a summary; looking around (`grep`,
//! `ls`, `git log`, polls) is one Done line, not progress; a search that found nothing is no
//! failure; a lead-in or a fragment is no decision; a pasted provider error sets no rule; and
//! small talk, a bare command or a text of rules only is no goal.

mod consolidate;
mod facts;
mod handoff;
mod layout;
mod merge;
mod noise;
mod plan;
#[cfg(test)]
mod tests;
mod text;

use serde_json::Value;

pub use handoff::{handoff_facts, HandoffInput};
pub(crate) use text::lines_outside_fences;

use facts::*;
use layout::*;
use merge::*;
use text::*;

/// The extractive summarizer's settings (`[summarizer]` in `config.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractiveSettings {
    /// The size a summary aims for, in tokens (chars/4), below Pi's cap: what keeps summaries
    /// small over many compactions. Must-keep facts may pass it, never Pi's cap.
    pub target_tokens: u64,
}

impl ExtractiveSettings {
    /// 2000 tokens: room for a long session's goal, rules, decisions, open errors and recent
    /// work, about a sixth of Pi's default output cap (0.8 × 16384 reserve tokens).
    pub const DEFAULT: ExtractiveSettings = ExtractiveSettings {
        target_tokens: 2000,
    };
}

impl Default for ExtractiveSettings {
    fn default() -> Self {
        ExtractiveSettings::DEFAULT
    }
}

/// The messages a summary reads, chronological: values parsed already, or a span's entries,
/// each parsed only when the one pass over them ([`Analysis::of`]) reaches it. Parsed whole, the
/// span of a 100 MB session is some 370 MB of values at once; one at a time, it is one message.
#[derive(Clone, Copy)]
pub enum Messages<'a> {
    /// AgentMessages as values (Pi shapes: user/assistant/toolResult/...).
    Parsed(&'a [Value]),
    /// A compaction's span, projected to AgentMessages one entry at a time.
    Entries(&'a [crate::compaction::prepare::PreparedMessage]),
}

impl<'a> Messages<'a> {
    pub fn len(self) -> usize {
        match self {
            Messages::Parsed(v) => v.len(),
            Messages::Entries(e) => e.len(),
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Each message in order, borrowed or parsed now.
    fn each(self) -> impl Iterator<Item = std::borrow::Cow<'a, Value>> {
        use std::borrow::Cow;
        let (parsed, entries) = match self {
            Messages::Parsed(v) => (v, &[][..]),
            Messages::Entries(e) => (&[][..], e),
        };
        let parsed = parsed.iter().map(Cow::Borrowed);
        parsed.chain(entries.iter().map(|m| Cow::Owned(m.message())))
    }

    /// The session entry id of message `idx`, when the messages are a span's entries: how a
    /// summary names the entry holding a text it only gives the point of (`get_entry`).
    fn entry_id(self, idx: usize) -> Option<&'a str> {
        match self {
            Messages::Parsed(_) => None,
            Messages::Entries(e) => e.get(idx).and_then(|m| m.entry_id()),
        }
    }
}

impl<'a> From<&'a [Value]> for Messages<'a> {
    fn from(v: &'a [Value]) -> Self {
        Messages::Parsed(v)
    }
}

impl<'a, const N: usize> From<&'a [Value; N]> for Messages<'a> {
    fn from(v: &'a [Value; N]) -> Self {
        Messages::Parsed(v)
    }
}

impl<'a> From<&'a Vec<Value>> for Messages<'a> {
    fn from(v: &'a Vec<Value>) -> Self {
        Messages::Parsed(v)
    }
}

/// What the extractive summarizer needs for a history summary (the same inputs an LLM
/// summarizer gets: the messages, the summary being updated and the user's focus; the file
/// lists follow the summary as Pi's blocks, so they are not inputs).
pub struct ExtractiveInput<'a> {
    /// AgentMessages to summarize, chronological (Pi shapes: user/assistant/toolResult/...).
    pub messages: Messages<'a>,
    /// The earlier compaction summary to merge (update mode); `None` or empty for a first one.
    pub previous_summary: Option<&'a str>,
    /// The user's focus text for this compaction ("Additional focus" in Pi's prompt).
    pub custom_instructions: Option<&'a str>,
    /// A split turn's prefix, summarized on its own after this history: the latest request
    /// may be there, and this summary's Next Steps must name it. Empty otherwise.
    pub turn_prefix: Messages<'a>,
    /// Output budget in tokens (chars/4); the summary always fits `max_tokens * 4` UTF-16 units
    /// unless even the bare headings do not (then the bare headings are returned).
    pub max_tokens: u64,
    pub settings: ExtractiveSettings,
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
/// Work the assistant reported in its own words, below what tool results show.
const P_REPORTED: u32 = 38_000;
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

/// Order of the goal items this span adds after the carried ones (the split turn's last).
const SEQ_PREFIX_REQUEST: u64 = 90_000_000;

/// Builds Pi's six-section history summary from the structured messages (see module docs): the
/// sections are filled in turn, then consolidated and rendered within the budget.
pub fn summarize_history(input: &ExtractiveInput) -> String {
    let budget = Budget::new(input.max_tokens, Some(input.settings.target_tokens));
    let caps = Caps::for_budget(budget.target);
    let mut a = Analysis::of(input.messages);
    let prefix = Analysis::of(input.turn_prefix);
    let mut items = Items::new();
    add_focus(&mut items, input.custom_instructions, &caps);
    let (plans, reported, mut carried) = add_earlier_summaries(&mut items, input, &a, &caps);
    sent_before(&mut a, &mut carried);
    let latest = add_goal(&mut items, &a, &prefix, &carried, &caps);
    let carried_counted = std::mem::take(&mut carried.counted);
    add_constraints(&mut items, &a, &caps);
    add_done(&mut items, &a, &plans, &reported, &caps);
    add_in_progress(&mut items, &a, &caps);
    add_blocked(&mut items, &a, &caps);
    add_decisions(&mut items, &a, &caps);
    add_next_steps(&mut items, &a, &plans, latest.as_deref(), &caps);
    add_critical_context(&mut items, &a, &caps, carried_counted);
    consolidate::consolidate(&mut items);
    render(&HISTORY_SECTIONS, items.list, budget)
}

/// Requests the earlier summary already had, sent again with another time or count (a
/// heartbeat once per span): boilerplate over the whole session, though no one span repeats
/// them (see `Analysis::requests_sent_before`).
fn sent_before(a: &mut Analysis, carried: &mut Carried) {
    let earlier_boilerplate: Vec<String> = carried
        .counted
        .iter()
        .filter(|(_, _, _, line)| line.starts_with("Boilerplate "))
        .map(|(key, ..)| key.clone())
        .collect();
    a.requests_sent_before(&mut carried.goals, &|text| {
        counted_key(&boilerplate_line(text, 1))
            .is_some_and(|(key, _)| earlier_boilerplate.contains(&key))
    });
}

/// Critical Context: the user's focus for this compaction comes first and is kept first.
fn add_focus(items: &mut Items, custom_instructions: Option<&str>, caps: &Caps) {
    if let Some(focus) = custom_instructions.map(str::trim) {
        if !focus.is_empty() {
            let text = format!(
                "Focus requested for this summary: {}",
                clip_head(focus, caps.goal)
            );
            items.keep(CRITICAL, P_FOCUS, (G_PREVIOUS, 0), &text);
        }
    }
}

/// Earlier summaries: the one being updated, then any summaries replayed inside the span.
/// Their plan steps are read back first, so the span's statements and results can finish them;
/// what the span settled is no longer open, and what it supersedes (its own last words, latest
/// request, command runs, an older statement of what comes next) is dropped. Returns the plans
/// tracked over the span, the work the assistant reported, and what was carried over.
fn add_earlier_summaries(
    items: &mut Items,
    input: &ExtractiveInput,
    a: &Analysis,
    caps: &Caps,
) -> (plan::Plans, Vec<facts::DoneItem>, Carried) {
    let carried_steps = input.previous_summary.map(carried_plan).unwrap_or_default();
    let plans = plan::track(a, &carried_steps);
    let reported = a.reported_work(caps.item);
    let said_done: Vec<Vec<String>> = reported
        .iter()
        .map(|d| d.text.as_str())
        .chain(plans.done.iter().map(|(_, t)| t.as_str()))
        .map(stems)
        .collect();
    let restated_next = plans.stated || !a.said_next().is_empty();
    let span = Span {
        a,
        said_done: &said_done,
        restated_next,
        explored: a.done_items().iter().any(|d| d.text.starts_with(EXPLORED)),
    };
    let carry = |section: usize, item: &str| span.carry_over(section, item);
    let mut carried = Carried::default();
    if let Some(prev) = input.previous_summary {
        merge_previous(items, prev, 0, caps, &carry, &mut carried);
    }
    for (n, (idx, label, summary)) in a.embedded_summaries.iter().enumerate() {
        let seq = 1_000_000 + (*idx as u64) * 10 + n as u64;
        merge_embedded(items, label, summary, seq, caps, &carry, &mut carried);
    }
    (plans, reported, carried)
}

/// Constraints & Preferences: user sentences that read like rules (questions do not).
fn add_constraints(items: &mut Items, a: &Analysis, caps: &Caps) {
    for (idx, sentence) in a.constraints() {
        let text = clip_head(&sentence, caps.item);
        items.keep_new(CONSTRAINTS, P_CONSTRAINT + a.recency(idx), idx, &text);
    }
}

/// Done: completed file changes, successful commands, plan steps finished, and work the
/// assistant reported (a fix it announced belongs here, not under Next Steps).
fn add_done(
    items: &mut Items,
    a: &Analysis,
    plans: &plan::Plans,
    reported: &[facts::DoneItem],
    caps: &Caps,
) {
    for done in a.done_items() {
        items.add_new(DONE, P_DONE + a.recency(done.idx), done.idx, &done.text);
    }
    for (idx, text) in &plans.done {
        let text = clip_head(text, caps.item);
        items.add_new(DONE, P_DONE + a.recency(*idx), *idx, &text);
    }
    for done in reported {
        items.add_new(DONE, P_REPORTED + a.recency(done.idx), done.idx, &done.text);
    }
}

/// In Progress: the last assistant words, pending calls, an aborted last turn.
fn add_in_progress(items: &mut Items, a: &Analysis, caps: &Caps) {
    for (seq, (idx, text)) in a.in_progress(caps).into_iter().enumerate() {
        let order = (idx as u64) * 10 + seq as u64;
        items.add(
            IN_PROGRESS,
            P_IN_PROGRESS + a.recency(idx),
            (G_NEW, order),
            &text,
        );
    }
}

/// Blocked: failures nothing later fixed, newest first in priority, and problems the user
/// reported that nothing answered.
fn add_blocked(items: &mut Items, a: &Analysis, caps: &Caps) {
    for (idx, text) in a.open_reports() {
        let text = format!(
            "Reported by the user, not solved yet: {}",
            a.gist(idx, &text, caps.item)
        );
        items.keep_new(BLOCKED, P_BLOCKED + a.recency(idx), idx, &text);
    }
    for fail in a.open_failures() {
        let text = format!(
            "{} failed{}: {}",
            fail.label,
            fail.code_note(),
            fail.headline_line(caps.item)
        );
        items.keep_new(BLOCKED, P_BLOCKED + a.recency(fail.idx), fail.idx, &text);
    }
}

/// Key Decisions: assistant sentences that announce a choice or abandon an approach.
fn add_decisions(items: &mut Items, a: &Analysis, caps: &Caps) {
    for (idx, sentence) in a.decisions() {
        let text = clip_head(&sentence, caps.item);
        items.keep_new(DECISIONS, P_DECISION + a.recency(idx), idx, &text);
    }
}

/// Next Steps: ranked, most actionable first; the plan's steps left in order.
fn add_next_steps(
    items: &mut Items,
    a: &Analysis,
    plans: &plan::Plans,
    latest: Option<&str>,
    caps: &Caps,
) {
    for (rank, text) in a.next_steps(caps, plans, latest).into_iter().enumerate() {
        let rank = rank as u32;
        items.add(
            NEXT,
            P_NEXT.saturating_sub(rank * 10),
            (G_NEW, u64::from(rank)),
            &text,
        );
    }
}

/// Critical Context: commands with exit codes, the last errors in a few lines (see
/// `noise::excerpt`), injected notes and boilerplate (each once, counted, their counts carried
/// over compactions), slash commands the user side sent, and the latest user reply.
fn add_critical_context(
    items: &mut Items,
    a: &Analysis,
    caps: &Caps,
    mut counted: Vec<(String, usize, u64, String)>,
) {
    // The count an earlier summary gave a line this span states again (its key's count).
    let mut earlier_count = |line: &str| -> usize {
        let Some((key, _)) = counted_key(line) else {
            return 0;
        };
        let mut n = 0;
        counted.retain(|(k, c, ..)| {
            let same = *k == key;
            if same {
                n += c;
            }
            !same
        });
        n
    };
    for cmd in a.command_histories() {
        let text = format!("Command {} → {}", cmd.label, cmd.outcomes);
        items.add(
            CRITICAL,
            P_COMMAND + a.recency(cmd.last_idx),
            (G_NEW, 10_000_000 + cmd.last_idx as u64),
            &text,
        );
    }
    // The newest error gets the most room; errors fixed later rank below open ones, and open
    // ones are kept verbatim whatever the budget. An error is quoted once: an earlier failure
    // showing the same error as a later one (a build and a test run stopping at one compile
    // error) is said by the later one.
    let mut quoted: Vec<String> = Vec::new();
    let failures: Vec<FailedAction<'_>> = a
        .failures()
        .into_iter()
        .rev()
        .filter(|f| {
            let key = masked(f.headline());
            let again = !key.trim().is_empty() && quoted.contains(&key);
            quoted.push(key);
            !again
        })
        .take(3)
        .collect();
    for (k, fail) in failures.iter().enumerate() {
        let cap = if k == 0 { caps.error } else { caps.item };
        // Only the newest is the last error; two failures never share that label.
        let head = format!(
            "{} from {}{}{}:",
            if k == 0 {
                "Last error"
            } else {
                "Earlier error"
            },
            fail.label,
            fail.code_note(),
            fail.resolution_note(),
        );
        let text = format!("{head}\n{}", a.excerpt(fail, &head, cap));
        let order = (G_NEW, 20_000_000 + fail.idx as u64);
        if fail.resolved {
            items.add(
                CRITICAL,
                P_RESOLVED_ERROR + a.recency(fail.idx),
                order,
                &text,
            );
        } else {
            items.keep(CRITICAL, P_LAST_ERROR + a.recency(fail.idx), order, &text);
        }
    }
    // An injected note is context, not news: its point in one line, how often it was sent, and
    // the entry holding its latest text.
    for note in &a.notes {
        let body = a.gist(note.last_idx, &note.text, caps.note);
        let count = note.count + earlier_count(&format!("Note ({}): {body}", note.label));
        let times = if count > 1 {
            format!(", sent {count}×")
        } else {
            String::new()
        };
        let text = format!("Note ({}{times}): {body}", note.label);
        items.add(
            CRITICAL,
            P_NOTE + a.recency(note.last_idx),
            (G_NEW, 30_000_000 + note.idx as u64),
            &text,
        );
    }
    for (idx, text, count) in &a.boilerplate {
        let count = count + earlier_count(&boilerplate_line(text, 1));
        let text = boilerplate_line(text, count);
        items.add(
            CRITICAL,
            P_NOTE + a.recency(*idx),
            (G_NEW, 30_000_000 + *idx as u64),
            &text,
        );
    }
    // Counted lines of an earlier summary this span did not state again.
    for (_, _, seq, text) in &counted {
        items.add(CRITICAL, P_PREV_CRITICAL, (G_PREVIOUS, *seq), text);
    }
    if let Some((idx, _)) = a.slash_commands.last() {
        let list: Vec<String> = a
            .slash_commands
            .iter()
            .rev()
            .take(6)
            .rev()
            .map(|(_, c)| code(c, 80))
            .collect();
        let text = format!(
            "Slash commands the user ran (not requests): {}",
            list.join(", ")
        );
        items.add(CRITICAL, P_NOTE, (G_NEW, 30_000_000 + *idx as u64), &text);
    }
    if let Some((idx, text)) = &a.last_ack {
        let text = format!("Latest user reply: {}", first_line(text, caps.item));
        items.add(CRITICAL, P_NEXT, (G_NEW, 30_000_000 + *idx as u64), &text);
    }
}

/// The Critical Context line for a text the user side sent `count` times that asks for nothing
/// new (see `Analysis::boilerplate`), on one line.
fn boilerplate_line(text: &str, count: usize) -> String {
    let body = clip_head(&text.split_whitespace().collect::<Vec<_>>().join(" "), 160);
    format!("Boilerplate the user side sent {count}× (not a request): {body}")
}

/// Fills the Goal section and returns the latest request. Every request is there, verbatim:
/// the original one (the task as first stated, kept from the earliest summary on) and the
/// latest (the span's last, or the split turn's, which is later still; else the one the earlier
/// summary named) are must-keep and labelled when there are several; the requests between are
/// kept too but fold once there are many (`consolidate`). Acknowledgements, greetings, slash
/// commands and repeated boilerplate are not requests. With no request at all, an injected
/// message (a task handed over by an extension) states the task.
fn add_goal(
    items: &mut Items,
    a: &Analysis,
    prefix: &Analysis,
    carried: &Carried,
    caps: &Caps,
) -> Option<String> {
    /// One goal line: where it sorts, its text, and where it came from.
    struct Line {
        order: (u8, u64),
        text: String,
        priority: u32,
    }
    let mut lines: Vec<Line> = Vec::new();
    for (seq, _, text) in &carried.goals {
        lines.push(Line {
            order: (G_PREVIOUS, *seq),
            text: clip_head(text, caps.goal),
            priority: P_PREV_GOAL,
        });
    }
    for (idx, text) in &a.requests {
        lines.push(Line {
            order: (G_NEW, *idx as u64),
            text: a.gist(*idx, text, caps.goal),
            priority: P_GOAL_OLDER + a.recency(*idx),
        });
    }
    // A split turn's requests; a turn opened by an injected message states its task there.
    let opened_by_note = prefix.notes.first().filter(|n| n.idx == 0).map(|n| {
        (
            n.idx,
            format!(
                "(from {}) {}",
                n.label,
                prefix.gist(n.last_idx, &n.text, caps.goal)
            ),
        )
    });
    for (idx, text) in opened_by_note.iter() {
        lines.push(Line {
            order: (G_NEW, SEQ_PREFIX_REQUEST + *idx as u64),
            text: text.clone(),
            priority: P_GOAL_OLDER + 1000,
        });
    }
    for (idx, text) in &prefix.requests {
        lines.push(Line {
            order: (G_NEW, SEQ_PREFIX_REQUEST + *idx as u64),
            text: prefix.gist(*idx, text, caps.goal),
            priority: P_GOAL_OLDER + 1000,
        });
    }
    if lines.is_empty() {
        if let Some(n) = a.notes.first() {
            let text = format!(
                "(from {}) {}",
                n.label,
                a.gist(n.last_idx, &n.text, caps.goal)
            );
            items.keep_new(GOAL, P_GOAL_FIRST, n.idx, &text);
        }
        return carried.latest_next.clone();
    }
    // The original request: labelled so in the earlier summary, else its first goal line.
    let carried_n = carried.goals.len();
    let original = carried
        .goals
        .iter()
        .position(|(_, role, _)| *role == GoalRole::Original)
        .unwrap_or(0);
    // The latest: the split turn's, else the span's, else what the earlier summary said.
    let latest =
        if opened_by_note.is_some() || !prefix.requests.is_empty() || !a.requests.is_empty() {
            lines.len() - 1
        } else {
            carried
                .goals
                .iter()
                .rposition(|(_, role, _)| *role == GoalRole::SplitTurn)
                .or_else(|| {
                    carried
                        .goals
                        .iter()
                        .rposition(|(_, role, _)| *role == GoalRole::Latest)
                })
                .unwrap_or(carried_n.saturating_sub(1))
        };
    let labelled = lines.len() > 1;
    let latest_text = lines[latest].text.clone();
    for (k, line) in lines.into_iter().enumerate() {
        if k == latest {
            let text = if labelled {
                format!("(latest) {}", line.text)
            } else {
                line.text
            };
            items.keep(GOAL, P_GOAL_LATEST, line.order, &text);
        } else if k == original {
            items.keep(
                GOAL,
                P_GOAL_FIRST,
                line.order,
                &format!("(original request) {}", line.text),
            );
        } else {
            items.add(GOAL, line.priority, line.order, &line.text);
        }
    }
    Some(latest_text)
}

/// Whether an error line already says how it was resolved (`…, later fixed:`).
fn is_resolved_error(item: &str) -> bool {
    item.lines().next().is_some_and(|l| {
        [
            ", later fixed",
            ", approach abandoned",
            ", gone in a later run",
        ]
        .iter()
        .any(|n| l.contains(n))
    })
}

/// What a span says about the items of an earlier summary (see [`Carry`]).
struct Span<'s> {
    a: &'s Analysis,
    /// The content words of the span's latest clauses reporting work done (see
    /// `Analysis::reported_work`), and of every plan step it finished.
    said_done: &'s [Vec<String>],
    /// The span states what comes next itself (a plan, a list of what is left, or next-step
    /// prose in its last assistant message): that statement replaces the earlier one.
    restated_next: bool,
    /// The span has its own line about read-only exploration, which replaces the earlier one.
    explored: bool,
}

impl Span<'_> {
    /// Whether a clause of the span reported `item` done.
    fn said_done(&self, item: &str) -> bool {
        let st = stems(item);
        self.said_done.iter().any(|d| plan::is_about(d, &st))
    }

    /// See [`Carry`]: how an earlier summary's item fares against this span.
    fn carry_over(&self, section: usize, item: &str) -> Carry {
        let a = self.a;
        let resolved = || a.resolves(item) != Resolution::Open;
        let drop = match section {
            IN_PROGRESS => {
                (item.starts_with("Last assistant message:") && !a.assistant_texts.is_empty())
                    || item.starts_with("Pending ")
                    || (item.ends_with(" (in progress)") && !a.todo_lists.is_empty())
                    || resolved()
                    || self.said_done(item)
            }
            NEXT => {
                item.starts_with("Check the result of the pending ")
                    || resolved()
                    || (!item.starts_with("Fix the failure of ")
                        && (self.restated_next || self.said_done(item)))
            }
            CRITICAL => {
                (item.starts_with("Command `") && a.resolves(item) == Resolution::Fixed)
                    || a.reruns(item)
                    || (item.starts_with("Latest user reply:") && !a.user_texts.is_empty())
                    || (item.starts_with("Slash commands the user ran")
                        && !a.slash_commands.is_empty())
            }
            // This span's own exploration line replaces the earlier one.
            DONE => item.starts_with(EXPLORED) && self.explored,
            _ => false,
        };
        if drop {
            return Carry::Drop;
        }
        match section {
            BLOCKED if resolved() => Carry::Settled,
            CRITICAL => match item.strip_prefix("Last error from ") {
                Some(rest) if resolved() && !is_resolved_error(item) => {
                    Carry::Rewrite(format!("Earlier error (fixed since) from {rest}"))
                }
                Some(rest) => Carry::Rewrite(format!("Earlier error from {rest}")),
                None => Carry::Keep,
            },
            _ => Carry::Keep,
        }
    }
}

/// Builds Pi's three-section turn-prefix summary: the start of an over-long turn whose recent
/// part (the suffix) stays in context verbatim, so this only has to say what led up to it.
pub fn summarize_turn_prefix<'a>(
    messages: impl Into<Messages<'a>>,
    max_tokens: u64,
    settings: ExtractiveSettings,
) -> String {
    let budget = Budget::new(max_tokens, Some(settings.target_tokens));
    let caps = Caps::for_budget(budget.target);
    let messages = messages.into();
    let a = Analysis::of(messages);
    let mut items = Items::new();

    // Original Request: the turn's first request; later ones are follow-ups. A turn opened by
    // an injected message (a task from an extension) states its request there.
    let opened_by_note = messages
        .each()
        .next()
        .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("custom"));
    if opened_by_note || a.requests.is_empty() {
        if let Some(n) = a.notes.first() {
            let text = format!(
                "(from {}) {}",
                n.label,
                a.gist(n.last_idx, &n.text, caps.goal)
            );
            items.keep_new(ORIGINAL, P_GOAL_LATEST, n.idx, &text);
        }
    }
    for n in a
        .notes
        .iter()
        .skip(usize::from(opened_by_note || a.requests.is_empty()))
    {
        let times = if n.count > 1 {
            format!(", sent {}×", n.count)
        } else {
            String::new()
        };
        let text = format!(
            "Note ({}{times}): {}",
            n.label,
            a.gist(n.last_idx, &n.text, caps.note)
        );
        items.add(
            SUFFIX_CTX,
            P_NOTE + a.recency(n.last_idx),
            (G_NEW, 25_000_000 + n.idx as u64),
            &text,
        );
    }
    for (n, (idx, text)) in a.requests.iter().enumerate() {
        let priority = if n == 0 && !opened_by_note {
            P_GOAL_LATEST
        } else {
            P_GOAL_OLDER + a.recency(*idx)
        };
        let text = a.gist(*idx, text, caps.goal);
        if priority == P_GOAL_LATEST {
            items.keep_new(ORIGINAL, priority, *idx, &text);
        } else {
            items.add_new(ORIGINAL, priority, *idx, &text);
        }
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
            fail.headline_line(caps.item)
        );
        let priority = if fail.resolved { P_DONE } else { P_BLOCKED };
        items.add_new(EARLY, priority + a.recency(fail.idx), fail.idx, &text);
    }
    for (idx, sentence) in a.decisions() {
        let text = format!("Decision: {}", clip_head(&sentence, caps.item));
        items.keep_new(EARLY, P_DECISION + a.recency(idx), idx, &text);
    }

    // Context for Suffix: rules, files, open calls, last words, last error verbatim.
    for (idx, sentence) in a.constraints() {
        let text = format!("Constraint: {}", clip_head(&sentence, caps.item));
        items.keep(
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
        let head = format!("Last error from {}{}:", fail.label, fail.code_note());
        let text = format!("{head}\n{}", a.excerpt(&fail, &head, caps.error));
        if fail.resolved {
            items.add(SUFFIX_CTX, P_LAST_ERROR, (G_NEW, 30_000_000), &text);
        } else {
            items.keep(SUFFIX_CTX, P_LAST_ERROR, (G_NEW, 30_000_000), &text);
        }
    }

    render(&TURN_PREFIX_SECTIONS, items.list, budget)
}
