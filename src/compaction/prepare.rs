//! `prepareCompaction` (compaction.md §5): everything a compaction needs, computed from the
//! branch path without calling any model.
//!
//! Split in two so the frequent questions stay cheap. A [`Plan`] is the decision: boundaries,
//! the cut point, the spans to summarize as index ranges with their counts and estimates, the
//! file operations and `tokensBefore`; with a [`BranchIndex`] it costs O(kept tail). A
//! [`Preparation`] adds handles on the entries of those spans, for the compaction itself; their
//! messages are parsed from the entries' bytes only while they are serialized or summarized.

use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;

use super::branch_index::BranchIndex;
use super::cut_point::{find_cut_point, CutPoint};
use super::file_ops::FileOps;
use super::projection::{Part, Projection};
use super::serialize::serialize_agent_messages;
use super::tokens::CompactionSettings;
use crate::context::project_entry;
use crate::json::truthy;
use crate::session::{BranchView, Entry, EntryKind, PathEntries, PiVersion, Role};

/// Pi's exact refusal texts for a manual compaction with nothing to do.
pub const ALREADY_COMPACTED: &str = "Already compacted";
pub const NOTHING_TO_COMPACT: &str = "Nothing to compact (session too small)";

/// Why `prepareCompaction` returned `undefined`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NothingToCompact {
    /// The last path entry is a compaction.
    AlreadyCompacted,
    /// Nothing to summarize (small session, A2, an empty path, or a first kept entry without id).
    TooSmall,
}

impl NothingToCompact {
    pub fn message(self) -> &'static str {
        match self {
            NothingToCompact::AlreadyCompacted => ALREADY_COMPACTED,
            NothingToCompact::TooSmall => NOTHING_TO_COMPACT,
        }
    }
}

/// Why nothing could be compacted, with the numbers that decided it and the setting that would
/// change it. Beyond Pi: Pi's refusal message stays byte for byte ([`NothingToCompact::message`]);
/// this is what a refusal's error `data` and the CLI add after it, because "session too small"
/// alone does not say that the whole tail fits in `keepRecentTokens`, nor what to change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NothingToCompactDetail {
    /// Stable name of the cause: `already_compacted` (the branch ends with a compaction),
    /// `no_messages` (nothing to summarize since the previous compaction or the start),
    /// `within_keep_recent` (every message since then fits in `keepRecentTokens`, so all are
    /// kept) or `no_cut_point` (the kept tail would have to start at a tool result, Pi's A2).
    pub reason: &'static str,
    /// One sentence for a person: what happened, with the numbers, and what to change.
    pub hint: String,
    /// Estimated tokens of the messages since the previous compaction's kept start (or the
    /// session start): what a compaction could summarize at most.
    pub recent_tokens: u64,
    /// How many messages those are.
    pub recent_messages: usize,
    /// The `compaction.keepRecentTokens` in force.
    pub keep_recent_tokens: i64,
}

impl NothingToCompact {
    /// Explains this refusal for the branch it came from (the same path, index and settings
    /// `plan_compaction` was given). Pure; O(1) over the index plus the cut-point walk.
    pub fn detail<P: PathEntries + ?Sized>(
        self,
        path: &P,
        index: &BranchIndex,
        settings: &CompactionSettings,
    ) -> NothingToCompactDetail {
        let b = indexed_boundaries(path, index, settings);
        let (recent_tokens, recent_messages) =
            index.summarizable_sums(b.boundary_start..b.boundary_end);
        let keep = settings.keep_recent_tokens;
        let since = if b.prev_compaction_index.is_some() {
            "since the previous compaction"
        } else {
            "in the session"
        };
        let (reason, hint) = match self {
            NothingToCompact::AlreadyCompacted => (
                "already_compacted",
                "the branch already ends with a compaction; append at least one message before \
                 compacting again"
                    .to_owned(),
            ),
            NothingToCompact::TooSmall if recent_messages == 0 => (
                "no_messages",
                format!("there are no messages {since} to summarize"),
            ),
            NothingToCompact::TooSmall if (recent_tokens as i64) < keep => (
                "within_keep_recent",
                format!(
                    "the {recent_messages} message(s) {since} estimate {recent_tokens} tokens, \
                     fewer than compaction.keepRecentTokens ({keep}), so all of them are kept \
                     verbatim; set compaction.keepRecentTokens below {recent_tokens} to compact \
                     now (setSettingsOverrides, Pi's settings.json, or --keep-recent-tokens)"
                ),
            ),
            NothingToCompact::TooSmall => (
                "no_cut_point",
                format!(
                    "the newest messages {since} reach compaction.keepRecentTokens ({keep}) only \
                     where the kept tail would have to start at a tool result, which Pi never \
                     separates from its call, so everything is kept; compaction becomes possible \
                     after the next user or assistant message"
                ),
            ),
        };
        NothingToCompactDetail {
            reason,
            hint,
            recent_tokens,
            recent_messages,
            keep_recent_tokens: keep,
        }
    }
}

/// The boundaries `prepareCompaction` worked with (reported by `inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundaries {
    pub prev_compaction_index: Option<usize>,
    pub boundary_start: usize,
    pub boundary_end: usize,
    pub cut: CutPoint,
}

/// A span of the path whose messages a compaction summarizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// Path positions; entries that project nothing and compactions are skipped inside it.
    pub range: Range<usize>,
    /// Messages in the span.
    pub count: usize,
    /// Sum of their token estimates.
    pub tokens: u64,
}

impl Span {
    fn of(index: &BranchIndex, range: Range<usize>) -> Span {
        let (tokens, count) = index.summarizable_sums(range.clone());
        Span {
            range,
            count,
            tokens,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Path positions of the span's messages under `edits`' rules.
    pub fn positions<'a, P: PathEntries + ?Sized>(
        &self,
        path: &'a P,
        edits: &'a Edits,
    ) -> impl Iterator<Item = usize> + 'a {
        self.range
            .clone()
            .filter(move |&i| edits.summarizes(i, path.at(i)))
    }
}

/// Pi 1.6's edits of the messages a plan summarizes, and which rules pick them: under 0.85
/// every message but a compaction's summary is summarized as stored; under 1.6 system messages
/// are not (they are prompt state), an omitted message is not, and an edited one is summarized
/// as the edit left it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Edits {
    pub version: PiVersion,
    /// Path position of an edited message → the message as projected (`None`: omitted).
    pub messages: std::collections::BTreeMap<usize, Option<Value>>,
}

impl Edits {
    /// No edit, under `version`'s rules.
    pub fn none(version: PiVersion) -> Edits {
        Edits {
            version,
            messages: Default::default(),
        }
    }

    /// Whether the entry at path position `i` contributes a message to summarize.
    fn summarizes(&self, i: usize, e: &Entry) -> bool {
        let base = e.kind != EntryKind::Compaction && e.role.is_some();
        match self.version {
            PiVersion::V0_85 => base,
            PiVersion::V1_6 => {
                base && e.role != Some(Role::System) && !matches!(self.messages.get(&i), Some(None))
            }
        }
    }
}

/// The decision half of `prepareCompaction`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Whose rules made it, and (1.6) the edits of the messages it summarizes.
    pub edits: Arc<Edits>,
    pub first_kept_entry_id: String,
    /// `messagesToSummarize`.
    pub history: Span,
    /// `turnPrefixMessages` (empty unless the cut splits a turn).
    pub turn_prefix: Span,
    pub is_split_turn: bool,
    pub tokens_before: f64,
    pub previous_summary: Option<String>,
    pub file_ops: FileOps,
    pub settings: CompactionSettings,
    pub boundaries: Boundaries,
}

/// Boundaries of the span a compaction of `path` would summarize: after the previous
/// compaction's kept start, through the end of the path (builds the index: O(path)).
pub fn compaction_boundaries(path: &[&Entry], settings: &CompactionSettings) -> Boundaries {
    indexed_boundaries(path, &BranchIndex::build(path), settings)
}

/// [`compaction_boundaries`] over an indexed path. O(kept tail).
pub fn indexed_boundaries<P: PathEntries + ?Sized>(
    path: &P,
    index: &BranchIndex,
    settings: &CompactionSettings,
) -> Boundaries {
    let latest = index.latest_compaction();
    let prev = latest.map(|l| l.at);
    let boundary_start = match latest {
        Some(l) => l.kept_on_path.unwrap_or(l.at + 1),
        None => 0,
    };
    let boundary_end = path.path_len();
    let cut = find_cut_point(
        path,
        boundary_start,
        boundary_end,
        settings.keep_recent_tokens,
    );
    Boundaries {
        prev_compaction_index: prev,
        boundary_start,
        boundary_end,
        cut,
    }
}

/// `prepareCompaction` as a plan, under `version`'s rules: Pi 0.85's over the indexed path
/// (O(kept tail + files)), or Pi 1.6's over the path's projection (O(context)).
pub fn plan_compaction<P: PathEntries + ?Sized>(
    version: PiVersion,
    path: &P,
    index: &BranchIndex,
    settings: &CompactionSettings,
) -> Result<Plan, NothingToCompact> {
    match version {
        PiVersion::V0_85 => plan_indexed(path, index, settings),
        PiVersion::V1_6 => plan_projected(path, &Projection::build(path), settings),
    }
}

/// Pi 0.85's `prepareCompaction` as a plan over an indexed path. O(kept tail + files).
fn plan_indexed<P: PathEntries + ?Sized>(
    path: &P,
    index: &BranchIndex,
    settings: &CompactionSettings,
) -> Result<Plan, NothingToCompact> {
    let n = path.path_len();
    if n > 0 && path.at(n - 1).kind == EntryKind::Compaction {
        return Err(NothingToCompact::AlreadyCompacted);
    }
    let b = indexed_boundaries(path, index, settings);
    let prev = b.prev_compaction_index.map(|p| path.at(p));
    let previous_summary = prev.and_then(|c| c.str_field("summary")).map(str::to_owned);
    let tokens_before = index.context_estimate(path).tokens;
    let cut = b.cut;
    let first_kept_id = (cut.first_kept_entry_index < n)
        .then(|| path.at(cut.first_kept_entry_index).id.clone())
        .flatten()
        .filter(|id| !id.is_empty())
        .ok_or(NothingToCompact::TooSmall)?;
    let history_end = match (cut.is_split_turn, cut.turn_start_index) {
        (true, Some(ts)) => ts,
        _ => cut.first_kept_entry_index,
    };
    let history = Span::of(index, b.boundary_start..history_end.max(b.boundary_start));
    let turn_prefix = match (cut.is_split_turn, cut.turn_start_index) {
        (true, Some(ts)) => Span::of(index, ts..cut.first_kept_entry_index),
        _ => Span::of(index, 0..0),
    };
    if history.is_empty() && turn_prefix.is_empty() {
        return Err(NothingToCompact::TooSmall);
    }
    let mut seed = FileOps::default();
    if let Some(prev) = prev {
        if !truthy(prev.get("fromHook")) && truthy(prev.get("details")) {
            if let Some(details) = prev.get("details").and_then(Value::as_object) {
                seed.add_from_details(details);
            }
        }
    }
    // The file operations of both spans, which together run from the history's start to the
    // first kept entry.
    let ops_end = if turn_prefix.range.is_empty() {
        history.range.end
    } else {
        turn_prefix.range.end
    };
    let file_ops = index.file_ops(history.range.start..ops_end, seed);
    Ok(Plan {
        edits: Arc::new(Edits::none(PiVersion::V0_85)),
        first_kept_entry_id: first_kept_id.into(),
        history,
        turn_prefix,
        is_split_turn: cut.is_split_turn,
        tokens_before,
        previous_summary,
        file_ops,
        settings: *settings,
        boundaries: b,
    })
}

/// Pi 1.6's `prepareCompaction` as a plan over the path's projection `proj`: the boundary is
/// the projected entry after the newest compaction (so the previous summary no longer counts
/// toward `keepRecentTokens`), the cut is `findProjectedCutPoint`'s, `tokensBefore` is
/// `estimateProjectedContextTokens`, the messages are the projected ones (edits applied, system
/// messages left out), and file operations come from those messages (the nested calls a
/// codemode script's tool result records included). O(context).
pub fn plan_projected<P: PathEntries + ?Sized>(
    path: &P,
    proj: &Projection,
    settings: &CompactionSettings,
) -> Result<Plan, NothingToCompact> {
    let n = path.path_len();
    if n > 0 && path.at(n - 1).kind == EntryKind::Compaction {
        return Err(NothingToCompact::AlreadyCompacted);
    }
    let entries = &proj.entries;
    let prev = proj.newest_compaction();
    let previous_summary = prev
        .and_then(|p| path.at(entries[p].pos).str_field("summary"))
        .map(str::to_owned);
    let start = prev.map_or(0, |p| p + 1);
    let system = proj.current_system_message(path);
    let tokens_before = proj
        .estimate(path, super::projection::system_tokens(system.as_ref()))
        .tokens;
    let cut = proj.cut_point(path, start, entries.len(), settings.keep_recent_tokens);
    let first_kept_id = entries
        .get(cut.first_kept_entry_index)
        .and_then(|e| path.at(e.pos).id.clone())
        .filter(|id| !id.is_empty())
        .ok_or(NothingToCompact::TooSmall)?;
    let history_end = match (cut.is_split_turn, cut.turn_start_index) {
        (true, Some(ts)) => ts,
        _ => cut.first_kept_entry_index,
    };
    // Projected indices as path positions (the end of the projection is the end of the path).
    let pos = |i: usize| entries.get(i).map_or(n, |e| e.pos);
    let span = |from: usize, to: usize| {
        let (mut count, mut tokens) = (0, 0);
        for e in &entries[from.min(to)..to] {
            if let Part::Message(m) = &e.part {
                if m.role != Role::System {
                    count += 1;
                    tokens += m.tokens;
                }
            }
        }
        Span {
            range: pos(from)..pos(to).max(pos(from)),
            count,
            tokens,
        }
    };
    let history = span(start, history_end.max(start));
    let turn_prefix = match (cut.is_split_turn, cut.turn_start_index) {
        (true, Some(ts)) => span(ts, cut.first_kept_entry_index),
        _ => Span {
            range: 0..0,
            count: 0,
            tokens: 0,
        },
    };
    if history.is_empty() && turn_prefix.is_empty() {
        return Err(NothingToCompact::TooSmall);
    }
    // The edited messages among those summarized, as projected.
    let mut edits = Edits::none(PiVersion::V1_6);
    let summarized = (start..history_end.max(start)).chain(match cut.turn_start_index {
        Some(ts) if cut.is_split_turn => ts..cut.first_kept_entry_index,
        _ => 0..0,
    });
    for i in summarized.clone() {
        let e = &entries[i];
        let src = path.at(e.pos);
        if src.kind == EntryKind::Compaction || src.role.is_none() {
            continue;
        }
        match &e.part {
            Part::Nothing => {
                edits.messages.insert(e.pos, None);
            }
            Part::Message(m) if m.edit.is_some() => {
                let message = proj.messages_of(path, i).into_iter().next();
                edits.messages.insert(e.pos, message);
            }
            _ => {}
        }
    }
    let mut file_ops = FileOps::default();
    if let Some(p) = prev {
        let c = path.at(entries[p].pos);
        if !truthy(c.get("fromHook")) && truthy(c.get("details")) {
            if let Some(details) = c.get("details").and_then(Value::as_object) {
                file_ops.add_from_details(details);
            }
        }
    }
    for i in summarized {
        let e = &entries[i];
        let src = path.at(e.pos);
        if !edits.summarizes(e.pos, src) {
            continue;
        }
        match edits.messages.get(&e.pos) {
            Some(Some(message)) => file_ops.add_from_message_1_6(message),
            _ => {
                for (kind, file) in src.file_ops.iter() {
                    file_ops.add(*kind, file);
                }
                if src.nested_calls {
                    if let Some(m) = src.message() {
                        file_ops.add_from_message_1_6(&Value::Object(m));
                    }
                }
            }
        }
    }
    let boundaries = Boundaries {
        prev_compaction_index: prev.map(|p| entries[p].pos),
        boundary_start: pos(start),
        boundary_end: n,
        cut: CutPoint {
            first_kept_entry_index: pos(cut.first_kept_entry_index),
            turn_start_index: cut.turn_start_index.map(pos),
            is_split_turn: cut.is_split_turn,
        },
    };
    Ok(Plan {
        edits: Arc::new(edits),
        first_kept_entry_id: first_kept_id.into(),
        history,
        turn_prefix,
        is_split_turn: cut.is_split_turn,
        tokens_before,
        previous_summary,
        file_ops,
        settings: *settings,
        boundaries,
    })
}

/// One message picked for summarization: a handle on its entry, projected on demand.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedMessage {
    /// Index into the path the preparation was made from.
    pub path_index: usize,
    pub entry: Arc<Entry>,
    /// The message as a 1.6 edit left it, when one replaced its content.
    pub edited: Option<Arc<Value>>,
}

impl PreparedMessage {
    pub fn entry_id(&self) -> Option<&str> {
        self.entry.id.as_deref()
    }

    /// The AgentMessage the entry projects to (parsed from its bytes now), as an edit left it.
    pub fn message(&self) -> Value {
        match &self.edited {
            Some(m) => (**m).clone(),
            None => project_entry(&self.entry).unwrap_or(Value::Null),
        }
    }

    /// The projected message's `role` value (from the facts, parsing only for unknown roles).
    pub fn role_value(&self) -> Value {
        match self.entry.role {
            Some(Role::Other) | None => self.message().get("role").cloned().unwrap_or(Value::Null),
            Some(r) => Value::from(r.as_str()),
        }
    }
}

/// Pi's `CompactionPreparation`: the plan plus the messages of its spans.
#[derive(Debug, Clone, PartialEq)]
pub struct Preparation {
    pub plan: Plan,
    pub messages_to_summarize: Vec<PreparedMessage>,
    pub turn_prefix_messages: Vec<PreparedMessage>,
}

impl std::ops::Deref for Preparation {
    type Target = Plan;
    fn deref(&self) -> &Plan {
        &self.plan
    }
}

impl Preparation {
    /// The summarizer's inputs as Pi serializes them: (history, the turn prefix if split).
    /// `previewCompaction` and `inspect` show them.
    pub fn serialized_inputs(&self) -> (String, Option<String>) {
        let version = self.edits.version;
        let history = serialize_agent_messages(version, self.history_messages());
        let prefix = self
            .is_split_turn
            .then(|| serialize_agent_messages(version, self.prefix_messages()));
        (history, prefix)
    }

    /// Takes handles on the plan's messages; `shared(i)` gives the entry at path position `i`.
    pub fn from_plan<P: PathEntries + ?Sized>(
        plan: Plan,
        path: &P,
        shared: impl Fn(usize) -> Arc<Entry>,
    ) -> Preparation {
        let edits = Arc::clone(&plan.edits);
        let take = |span: &Span| -> Vec<PreparedMessage> {
            span.positions(path, &edits)
                .map(|i| PreparedMessage {
                    path_index: i,
                    entry: shared(i),
                    edited: edits
                        .messages
                        .get(&i)
                        .and_then(Option::as_ref)
                        .map(|m| Arc::new(m.clone())),
                })
                .collect()
        };
        Preparation {
            messages_to_summarize: take(&plan.history),
            turn_prefix_messages: take(&plan.turn_prefix),
            plan,
        }
    }

    /// The AgentMessages to summarize, parsed one at a time.
    pub fn history_messages(&self) -> impl Iterator<Item = Value> + '_ {
        self.messages_to_summarize
            .iter()
            .map(PreparedMessage::message)
    }

    /// The turn prefix's AgentMessages, parsed one at a time.
    pub fn prefix_messages(&self) -> impl Iterator<Item = Value> + '_ {
        self.turn_prefix_messages
            .iter()
            .map(PreparedMessage::message)
    }
}

/// `prepareCompaction(pathEntries, settings)` under `version`'s rules over a plain path (builds
/// the index: O(path)).
pub fn prepare_compaction(
    version: PiVersion,
    path: &[&Entry],
    settings: &CompactionSettings,
) -> Result<Preparation, NothingToCompact> {
    let index = BranchIndex::build(path);
    let plan = plan_compaction(version, path, &index, settings)?;
    Ok(Preparation::from_plan(plan, path, |i| {
        Arc::new(path[i].clone())
    }))
}

/// Beyond Pi (speculative compaction): `prepareCompaction` as if `compaction`, a compaction that
/// was summarized but never written, sat on the path right after position `at`. Its summary is
/// then the previous summary, its details seed the file operations, and the messages between its
/// cut and the new cut are to be summarized: Pi's incremental update on top of it, written as one
/// entry. `at` must not be before the compaction's first kept entry. O(path).
pub fn prepare_on_top(
    version: PiVersion,
    path: &[&Entry],
    at: usize,
    compaction: &Entry,
    settings: &CompactionSettings,
) -> Result<Preparation, NothingToCompact> {
    let at = at.min(path.len().saturating_sub(1));
    let mut with: Vec<&Entry> = Vec::with_capacity(path.len() + 1);
    with.extend(path.iter().take(at + 1));
    with.push(compaction);
    with.extend(path.iter().skip(at + 1));
    prepare_compaction(version, &with, settings)
}

/// `prepareCompaction` under `version`'s rules over a tree's branch: entries are shared with
/// the tree, not copied.
pub fn prepare_branch(
    version: PiVersion,
    view: &BranchView<'_>,
    index: &BranchIndex,
    settings: &CompactionSettings,
) -> Result<Preparation, NothingToCompact> {
    let plan = plan_compaction(version, view, index, settings)?;
    Ok(Preparation::from_plan(plan, view, |i| {
        view.tree.shared(view.positions[i])
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::summary::{compaction_entry, CompactionOutcome};
    use serde_json::{json, Value};

    /// A user request of `chars` characters (`chars / 4` estimated tokens).
    fn user(id: &str, chars: usize) -> Entry {
        Entry::from_value(
            json!({"type":"message","id":id,"parentId":null,"message":{"role":"user","content":"x".repeat(chars)}}),
        )
    }

    /// An unwritten compaction with `summary`, cut at `first_kept`, carrying file details.
    fn speculative(first_kept: &str, summary: &str) -> Entry {
        let outcome = CompactionOutcome {
            summary: summary.into(),
            first_kept_entry_id: first_kept.into(),
            tokens_before: 0.0,
            usage: None,
            details: json!({"readFiles": ["a.rs"], "modifiedFiles": []}),
            from_hook: false,
        };
        Entry::from_value(compaction_entry("spec", None, "t", &outcome))
    }

    #[test]
    fn on_top_summarizes_between_the_two_cuts_with_the_unwritten_summary_as_previous() {
        // u0..u9, 100 tokens each; the speculation cut at u3 (it had summarized u0..u2) and
        // would have been installed after u5.
        let entries: Vec<Entry> = (0..10).map(|i| user(&format!("u{i}"), 400)).collect();
        let path: Vec<&Entry> = entries.iter().collect();
        let spec = speculative("u3", "SPECULATIVE");
        let settings = CompactionSettings {
            enabled: true,
            reserve_tokens: 100,
            keep_recent_tokens: 250,
        };
        let prep = prepare_on_top(PiVersion::V0_85, &path, 5, &spec, &settings)
            .expect("something to summarize");
        assert_eq!(prep.previous_summary.as_deref(), Some("SPECULATIVE"));
        // Pi's cut, keeping 250 tokens of the 500 after u5 and the summary: u7.
        assert_eq!(prep.first_kept_entry_id, "u7");
        let ids: Vec<&str> = prep
            .messages_to_summarize
            .iter()
            .filter_map(|m| m.entry_id())
            .collect();
        assert_eq!(
            ids,
            ["u3", "u4", "u5", "u6"],
            "from the speculation's cut on"
        );
        assert!(
            prep.file_ops.read.contains("a.rs"),
            "its details seed the files"
        );
        // Placed at the end, the same compaction leaves nothing (Pi refuses after a compaction).
        let mut at_end = path.clone();
        at_end.push(&spec);
        assert_eq!(
            prepare_compaction(PiVersion::V0_85, &at_end, &settings).err(),
            Some(NothingToCompact::AlreadyCompacted)
        );
    }

    fn msg(id: &str, role: &str, chars: usize) -> Entry {
        let text = "x".repeat(chars);
        let m: Value = match role {
            "assistant" => json!({"role":"assistant","content":[{"type":"text","text":text}]}),
            "toolResult" => {
                json!({"role":"toolResult","toolCallId":"t","toolName":"read","content":[{"type":"text","text":text}],"isError":false})
            }
            _ => json!({"role":role,"content":text}),
        };
        Entry::from_value(json!({"type":"message","id":id,"parentId":null,"message":m}))
    }

    fn explain(
        entries: &[Entry],
        keep: i64,
    ) -> (
        Result<Plan, NothingToCompact>,
        Option<NothingToCompactDetail>,
    ) {
        let path: Vec<&Entry> = entries.iter().collect();
        let index = BranchIndex::build(&path);
        let settings = CompactionSettings {
            keep_recent_tokens: keep,
            ..CompactionSettings::default()
        };
        let plan = plan_compaction(PiVersion::V0_85, &path, &index, &settings);
        let detail = plan
            .as_ref()
            .err()
            .map(|n| n.detail(&path, &index, &settings));
        (plan, detail)
    }

    #[test]
    fn a_small_session_says_keep_recent_tokens_keeps_it_all_and_by_how_much() {
        // 400 chars = 100 tokens each.
        let entries = [
            msg("u0", "user", 400),
            msg("a1", "assistant", 400),
            msg("u2", "user", 400),
        ];
        let (plan, detail) = explain(&entries, 20_000);
        assert_eq!(
            plan.unwrap_err().message(),
            NOTHING_TO_COMPACT,
            "Pi's message is unchanged"
        );
        let d = detail.unwrap();
        assert_eq!(d.reason, "within_keep_recent");
        assert_eq!(
            (d.recent_tokens, d.recent_messages, d.keep_recent_tokens),
            (300, 3, 20_000)
        );
        assert!(d.hint.contains("estimate 300 tokens"), "{}", d.hint);
        assert!(
            d.hint.contains("compaction.keepRecentTokens (20000)"),
            "{}",
            d.hint
        );
        assert!(d.hint.contains("below 300"), "{}", d.hint);
        // Following the hint compacts.
        let (plan, _) = explain(&entries, 150);
        assert!(plan.is_ok());
    }

    #[test]
    fn a_huge_trailing_tool_result_is_no_cut_point_not_keep_recent() {
        let entries = [
            msg("u", "user", 40),
            msg("a", "assistant", 40),
            msg("t", "toolResult", 400_000),
        ];
        let d = explain(&entries, 20_000).1.unwrap();
        assert_eq!(d.reason, "no_cut_point");
        assert!(d.recent_tokens > 20_000);
        assert!(d.hint.contains("tool result"), "{}", d.hint);
    }

    #[test]
    fn empty_and_already_compacted_branches_say_so() {
        let d = explain(&[], 20_000).1.unwrap();
        assert_eq!((d.reason, d.recent_messages), ("no_messages", 0));
        let compaction = Entry::from_value(json!({"type":"compaction","id":"c","parentId":"u0",
            "summary":"s","firstKeptEntryId":"u0","tokensBefore":1}));
        let entries = [msg("u0", "user", 400), compaction];
        let (plan, detail) = explain(&entries, 20_000);
        assert_eq!(plan.unwrap_err().message(), ALREADY_COMPACTED);
        let d = detail.unwrap();
        assert_eq!(d.reason, "already_compacted");
        assert!(d.hint.contains("append at least one message"), "{}", d.hint);
    }
}
