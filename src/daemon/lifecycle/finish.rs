//! Finishing a summary and writing it: what compactd adds to a summary it wrote (the pinned
//! lane, limited file blocks, the recall footer), the check that the branch only grew while
//! the summarizer ran, and the append. Compactions and tree navigation's branch summaries
//! finish through [`finish_text`], so a pin, a `fileListLimit` or the footer reads the same in
//! both.

use std::sync::Arc;

use serde_json::Value;

use super::super::pins::{self, Pin};
use super::super::session::SessionState;
use super::super::Session;
use super::CompactionFailure;
use crate::compaction::file_ops::{format_file_operations, format_file_operations_limited};
use crate::compaction::prepare::Preparation;
use crate::compaction::projection::Projection;
use crate::compaction::recall::with_recall_footer;
use crate::compaction::summary::{compaction_entry, with_system_message, CompactionOutcome};
use crate::compaction::BranchIndex;
use crate::rpc::errors::ErrorKind;
use crate::rpc::results::CompactionResult;
use crate::session::{ids, Entry, EntryKind, PiVersion};

/// Beyond Pi, a summary body as compactd finishes it: the pinned lane's `## Pinned` section
/// (the pins verbatim, replacing any the model echoed) when pins were ever used, then the file
/// blocks, with `fileListLimit` cut to the most recently touched paths (`recent`, most recent
/// first; `details` keeps the full lists), then the recall footer naming the first and last
/// entry the summary stands for (`recall`, when `recallFooter` is on).
pub fn finish_text(
    body: &str,
    read: &[String],
    modified: &[String],
    recent: &[&str],
    limit: Option<usize>,
    pins: Option<&[Pin]>,
    recall: Option<(&str, &str)>,
) -> String {
    let body = match pins {
        Some(p) => pins::strip_section(body) + &pins::section(p),
        None => body.to_owned(),
    };
    let files = match limit {
        Some(limit) => format_file_operations_limited(read, modified, recent, limit),
        None => format_file_operations(read, modified),
    };
    footed(body + &files, recall)
}

/// `text` with the recall footer for `recall`, if any.
fn footed(text: String, recall: Option<(&str, &str)>) -> String {
    match recall {
        Some((first, last)) => with_recall_footer(&text, first, last),
        None => text,
    }
}

/// The paths a preparation's messages touched, most recent first (the turn prefix is later than
/// the history, and later blocks later).
fn recent_paths(prep: &Preparation) -> Vec<&str> {
    prep.turn_prefix_messages
        .iter()
        .rev()
        .chain(prep.messages_to_summarize.iter().rev())
        .flat_map(|m| m.entry.file_ops.iter().rev().map(|(_, p)| &**p))
        .collect()
}

/// [`finish_text`] applied to a compaction's generated summary, whose file blocks `generate`
/// already appended, without the recall footer (the handoff check reads the summary before it
/// gets one). Without pins ever used and without a limit the summary stays exactly Pi's.
fn finish_compaction(
    outcome: &mut CompactionOutcome,
    prep: &Preparation,
    limit: Option<usize>,
    pins: &[Pin],
    pins_used: bool,
) {
    if limit.is_none() && !pins_used {
        return;
    }
    let list = |k: &str| -> Vec<String> {
        outcome.details[k]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let (read, modified) = (list("readFiles"), list("modifiedFiles"));
    let full = format_file_operations(&read, &modified);
    let (body, read, modified) = match outcome.summary.strip_suffix(&full) {
        Some(b) if !full.is_empty() => (b.to_owned(), read, modified),
        // No file blocks to rewrite.
        _ => (outcome.summary.clone(), Vec::new(), Vec::new()),
    };
    outcome.summary = finish_text(
        &body,
        &read,
        &modified,
        &recent_paths(prep),
        limit,
        pins_used.then_some(pins),
        None,
    );
}

/// The entries a compaction cut at `first_kept` stands for, as its recall footer names them:
/// from the branch's first message (every summary folds in the ones before it) to the entry
/// before the cut.
fn covered<'a>(state: &'a SessionState, first_kept: &str) -> Option<(&'a str, &'a str)> {
    let at = position(state, first_kept)?;
    let ids = |range: &mut dyn Iterator<Item = &usize>| {
        range
            .map(|&i| state.tree.entry(i))
            .find(|e| e.kind == EntryKind::Message)
            .and_then(|e| e.id.as_deref())
    };
    let first = ids(&mut state.branch[..at].iter())?;
    let last = ids(&mut state.branch[..at].iter().rev())?;
    Some((first, last))
}

/// Where the branch must still be for an entry to be written under the leaf of now (beyond Pi:
/// appends are accepted while the summarizer runs). Then everything appended meanwhile sits
/// between `firstKeptEntryId` and the compaction, in its kept tail.
#[derive(Debug, Clone, Copy)]
pub(super) enum Anchor<'a> {
    /// The leaf the compaction was prepared at: still on the current branch, and nothing after
    /// it is a compaction.
    Leaf(Option<&'a str>),
    /// A speculation's cut and the compaction it built on: the cut still on the current branch,
    /// and the latest compaction on it still that one.
    Cut {
        first_kept: &'a str,
        previous: Option<&'a str>,
    },
}

fn position(state: &SessionState, id: &str) -> Option<usize> {
    state
        .branch
        .iter()
        .rposition(|&i| state.tree.entry(i).id.as_deref() == Some(id))
}

/// Whether entry `id` is on the current branch.
pub(super) fn on_branch(state: &SessionState, id: &str) -> bool {
    position(state, id).is_some()
}

/// The id of the latest compaction on the current branch.
pub(super) fn latest_compaction(state: &SessionState) -> Option<&str> {
    state
        .index
        .latest_compaction()
        .and_then(|l| state.tree.entry(state.branch[l.at]).id.as_deref())
}

/// Whether the branch is still where `anchor` says it must be.
pub(super) fn holds(state: &SessionState, anchor: Anchor<'_>) -> bool {
    match anchor {
        Anchor::Leaf(None) => state.tree.leaf_id().is_none(),
        Anchor::Leaf(Some(leaf)) => position(state, leaf).is_some_and(|at| {
            state.branch[at + 1..]
                .iter()
                .all(|&i| state.tree.entry(i).kind != EntryKind::Compaction)
        }),
        Anchor::Cut {
            first_kept,
            previous,
        } => on_branch(state, first_kept) && latest_compaction(state) == previous,
    }
}

/// The agent-context estimate had `outcome` been appended after `path` under `rules` (for
/// `write: false`, where no entry exists to rebuild the context from; `system`: the context's
/// replayed system message, which a 1.6 entry checkpoints).
pub(super) fn estimate_after(
    path: &[Arc<Entry>],
    outcome: &CompactionOutcome,
    rules: PiVersion,
    system: Option<&Value>,
) -> u64 {
    let parent = path.last().and_then(|e| e.id.as_deref());
    let ts = ids::iso_timestamp(ids::now_ms());
    let entry = compaction_entry("unwritten", parent, &ts, outcome);
    let entry = Entry::from_value(match rules {
        PiVersion::V1_6 => with_system_message(entry, system, &ts),
        PiVersion::V0_85 => entry,
    });
    let mut refs: Vec<&Entry> = path.iter().map(|e| &**e).collect();
    refs.push(&entry);
    match rules {
        PiVersion::V0_85 => BranchIndex::build(&refs).context_total(),
        PiVersion::V1_6 => Projection::build(&refs).message_tokens().iter().sum(),
    }
}

/// A compaction ready to be written.
pub(super) struct Finished<'a> {
    pub outcome: CompactionOutcome,
    /// What it was summarized from (its file operations order the limited file blocks).
    pub prep: &'a Preparation,
    pub anchor: Anchor<'a>,
    pub file_list_limit: Option<usize>,
    /// End the summary with the recall footer (`compaction.recallFooter`).
    pub recall_footer: bool,
    /// `false` (`compact {write: false}`): return the result, append nothing.
    pub write: bool,
    /// What the summary's handoff owes (`None`: `compaction.handoff` is off).
    pub handoff: Option<crate::handoff::Owed>,
}

/// What was written: the result, and the appended entry (`Value::Null` without `write`).
pub(super) struct Written {
    pub result: CompactionResult,
    pub entry: Value,
}

/// Takes another process's lines in, checks the branch only grew, finishes the summary with the
/// pins live now (one may have been added while the summarizer ran) and appends the entry.
pub(super) fn write(session: &Session, f: Finished<'_>) -> Result<Written, CompactionFailure> {
    let Finished {
        mut outcome,
        prep,
        anchor,
        file_list_limit,
        recall_footer,
        write,
        handoff,
    } = f;
    let mut state = session.lock_state();
    // Another process may have written to the file while the summarizer ran: take its lines in
    // first, so a moved leaf is noticed rather than written under.
    if let Err(e) = state.sync_with_file() {
        // The kind every other write reports for the same file: `io` for a file that cannot be
        // read (it used to come back `file_changed` here only), `file_busy`, `file_changed`.
        let kind = match e.kind {
            ErrorKind::FileBusy | ErrorKind::Io | ErrorKind::FileChanged => e.kind,
            _ => ErrorKind::FileChanged,
        };
        return Err(CompactionFailure::Error(kind, e.message));
    }
    if !holds(&state, anchor) {
        return Err(CompactionFailure::Error(
            ErrorKind::LeafMoved,
            "the session changed during compaction".into(),
        ));
    }
    if !outcome.from_hook {
        let (pins, pins_used) = pins::live_pins(&state);
        finish_compaction(&mut outcome, prep, file_list_limit, &pins, pins_used);
    }
    // Beyond Pi: the summary as it will be installed (pins, limited file blocks; a hook's as it
    // supplied it) is checked against what its handoff owes, and repaired when asked.
    let report = handoff.map(|owed| checked(&mut outcome, &owed));
    if !outcome.from_hook {
        let recall = recall_footer
            .then(|| covered(&state, &outcome.first_kept_entry_id))
            .flatten();
        outcome.summary = footed(std::mem::take(&mut outcome.summary), recall);
    }
    if !write {
        let path: Vec<Arc<Entry>> = state.branch.iter().map(|&i| state.tree.shared(i)).collect();
        let (rules, system) = (state.rules, state.current_system_message());
        drop(state);
        let estimated = estimate_after(&path, &outcome, rules, system.as_ref());
        let mut result = CompactionResult::new(&outcome, estimated);
        result.handoff = report;
        return Ok(Written {
            result,
            entry: Value::Null,
        });
    }
    // Pi 1.6 checkpoints the context's system prompt and tools on the entry.
    let system = state.current_system_message();
    let idx = state
        .append_with(|id, parent, ts| {
            with_system_message(
                compaction_entry(id, parent, ts, &outcome),
                system.as_ref(),
                ts,
            )
        })
        .map_err(|e| CompactionFailure::Error(ErrorKind::Io, e.message))?;
    let entry = state.tree.entry(idx).value();
    state.rebuild_agent_context();
    let estimated = state.live.estimated_total();
    if let (Some(id), Some(r)) = (state.tree.entry(idx).id_owned(), &report) {
        state.handoffs.insert(id, r.clone());
    }
    let mut result = CompactionResult::new(&outcome, estimated);
    result.handoff = report;
    Ok(Written { result, entry })
}

/// The handoff check of `outcome`'s summary, repaired when the mode says so: the section of
/// what it missed is appended (before the recall footer), and `details.handoff` records the
/// score of a summary that was changed, so the entry says why it ends that way. In `report`
/// mode the summary is untouched.
fn checked(outcome: &mut CompactionOutcome, owed: &crate::handoff::Owed) -> crate::handoff::Report {
    let (summary, report) = owed.finish(std::mem::take(&mut outcome.summary));
    outcome.summary = summary;
    if report.repaired > 0 {
        if outcome.details.is_null() {
            outcome.details = Value::Object(Default::default());
        }
        if let Some(d) = outcome.details.as_object_mut() {
            d.insert(
                "handoff".into(),
                serde_json::json!({
                    "score": report.score,
                    "mode": report.mode,
                    "repaired": report.repaired,
                }),
            );
        }
    }
    report
}
