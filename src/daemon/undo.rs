//! Undo and edit of the latest compaction (beyond Pi). The file is append-only and Pi's leaf on
//! load is the file's last entry, so both work by appending: `undoCompaction` appends a marker
//! `custom` entry under the compaction's parent (the pre-compaction path becomes the active one;
//! the compaction stays in the tree), and `editSummary` appends a corrected compaction beside
//! the original (same parent, `firstKeptEntryId` and `tokensBefore`, `details.editedFrom`).

use serde_json::{json, Map, Value};

use super::handlers::Ctx;
use super::lifecycle::speculation::{self, DiscardReason};
use super::session::{custom_entry, SessionState};
use super::Session;
use crate::compaction::summary::{compaction_entry, CompactionOutcome};
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::events;
use crate::rpc::results::{EditSummaryResult, SessionEntry, UndoCompactionResult};
use crate::rpc::types::{EditSummaryParams, SessionParams};
use crate::session::EntryKind;

/// The `customType` of the entry `undoCompaction` appends.
pub const UNDO_TYPE: &str = "compactd.undo_compaction";

/// The branch's latest compaction (tree index), checked to be undoable: the file's last entry
/// is on its branch (Pi would load this leaf), and nothing the context holds was appended after
/// it (that would leave the restored path).
fn latest_compaction(state: &SessionState) -> Result<usize, RpcError> {
    let at = state
        .branch
        .iter()
        .rposition(|&i| state.tree.entry(i).kind == EntryKind::Compaction)
        .ok_or_else(|| {
            RpcError::new(
                ErrorKind::NothingToCompact,
                "No compaction on the current branch",
            )
        })?;
    let last = state.tree.len().checked_sub(1);
    if last.is_none_or(|l| !state.branch[at..].contains(&l)) {
        return Err(RpcError::new(
            ErrorKind::LeafMoved,
            "The branch's latest compaction is not an ancestor of the session's latest entry (the leaf was moved elsewhere); navigate back first",
        ));
    }
    if let Some(&i) = state.branch[at + 1..]
        .iter()
        .find(|&&i| state.tree.entry(i).role.is_some())
    {
        return Err(RpcError::new(
            ErrorKind::LeafMoved,
            format!(
                "Entry {} was appended after the latest compaction; undoing or editing it would drop it from the context",
                state.tree.entry(i).id.as_deref().unwrap_or("?")
            ),
        ));
    }
    Ok(state.branch[at])
}

/// Appends `build`'s entry under `parent` (moving the leaf there first), restoring the leaf if
/// the write fails.
fn append_under(
    state: &mut SessionState,
    parent: Option<usize>,
    build: impl FnOnce(&str, Option<&str>, &str) -> Value,
) -> Result<usize, RpcError> {
    let old = state.tree.leaf();
    state.tree.set_leaf(parent);
    state.refresh_branch();
    match state.append_with(build) {
        Ok(idx) => {
            state.rebuild_agent_context();
            Ok(idx)
        }
        Err(e) => {
            state.tree.set_leaf(old);
            state.refresh_branch();
            Err(e)
        }
    }
}

/// `undoCompaction`.
pub fn undo_compaction(ctx: &Ctx, p: SessionParams) -> Result<UndoCompactionResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let mut state = session.lock_state();
    session.writable()?;
    state.sync_with_file()?;
    let c = latest_compaction(&state)?;
    let compaction_id = state.tree.id_at(c);
    let parent = parent_index(&state, c);
    let data = json!({"undoneCompactionId": compaction_id});
    let idx = append_under(&mut state, parent, |id, parent, ts| {
        custom_entry(
            "custom",
            id,
            parent,
            ts,
            vec![("customType", json!(UNDO_TYPE)), ("data", data)],
        )
    })?;
    let entry_id = state.tree.id_at(idx);
    // The thrash breaker's verdict pending on that compaction no longer applies; a user's undo
    // resumes automatic compaction as a manual compaction does.
    state.thrash.reset();
    drop(state);
    revalidate_speculation(ctx, &session, DiscardReason::Undone);
    ctx.daemon.emit(
        &session.id,
        &events::CompactionUndone {
            session_id: &session.id,
            compaction_id: &compaction_id,
            entry_id: &entry_id,
        },
    );
    Ok(UndoCompactionResult {
        undone_compaction_id: compaction_id,
        entry_id: entry_id.clone(),
        leaf_id: entry_id,
    })
}

/// A speculation made before the undo or edit summarized a path that is no longer the one.
fn revalidate_speculation(ctx: &Ctx, session: &Session, why: DiscardReason) {
    let settings = ctx.daemon.session_settings(session);
    speculation::revalidate(&ctx.daemon, session, &settings, why);
}

/// `editSummary`.
pub fn edit_summary(ctx: &Ctx, p: EditSummaryParams) -> Result<EditSummaryResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    if p.summary.trim().is_empty() {
        return Err(RpcError::invalid_params("summary must not be empty"));
    }
    let mut state = session.lock_state();
    session.writable()?;
    state.sync_with_file()?;
    let c = latest_compaction(&state)?;
    let original = state.tree.entry(c).value();
    let original_id = original["id"].as_str().unwrap_or_default().to_owned();
    let first_kept = original["firstKeptEntryId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut details = match original.get("details") {
        Some(Value::Object(d)) => d.clone(),
        _ => Map::new(),
    };
    details.insert("editedFrom".into(), json!(original_id));
    let outcome = CompactionOutcome {
        summary: p.summary,
        first_kept_entry_id: first_kept,
        tokens_before: original["tokensBefore"].as_f64().unwrap_or(0.0),
        usage: None,
        details: Value::Object(details),
        from_hook: false,
    };
    let parent = parent_index(&state, c);
    let idx = append_under(&mut state, parent, |id, parent, ts| {
        compaction_entry(id, parent, ts, &outcome)
    })?;
    let entry = state.tree.entry(idx).value();
    let entry_id = state.tree.id_at(idx);
    // As for an undo: the verdict pending on the original compaction no longer applies.
    state.thrash.reset();
    drop(state);
    revalidate_speculation(ctx, &session, DiscardReason::Edited);
    ctx.daemon.emit(
        &session.id,
        &events::SummaryEdited {
            session_id: &session.id,
            compaction_id: &original_id,
            entry_id: &entry_id,
        },
    );
    Ok(EditSummaryResult {
        entry: SessionEntry(entry),
        edited_from: original_id,
        entry_id: entry_id.clone(),
        leaf_id: entry_id,
    })
}

/// The entry index of `c`'s parent (where an undo marker or an edited compaction hangs).
fn parent_index(state: &super::session::SessionState, c: usize) -> Option<usize> {
    let pid = state.tree.entry(c).parent_id.as_deref()?;
    state.tree.index_of(pid)
}
