//! The clearing pass of `checkCompaction` (beyond Pi, `compaction.clearToolResults`): before
//! any summarizing decision, when the context is at `at` × the threshold and the clearable tool
//! output frees at least `clearAtLeast`, one `compactd.clear` custom entry is appended and
//! `context_cleared` announced. The plan is the pure [`crate::clearing`]'s; what the entry does
//! to the context (the projection, the estimate) is the session's (`SessionState::apply_pass`),
//! so a pass another writer appended reads the same.

use serde_json::json;

use super::super::session::custom_entry;
use super::super::settings::EffectiveSettings;
use super::super::{Daemon, Session};
use crate::clearing::{self, ClearSettings, Pass, CLEAR_TYPE};
use crate::rpc::events::ContextCleared;
use crate::rpc::results::{ClearingPass, ClearingPreview};

/// What a pass would clear now and whether it is due (`previewCompaction`), or `None` when
/// clearing is off or the session has no model window.
pub fn preview(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
) -> Option<ClearingPreview> {
    let clear = settings.clear_tool_results.as_ref()?;
    let state = session.lock_state();
    let threshold = threshold(&state, settings)?;
    let tokens = daemon.context_tokens(&state, settings);
    let pass = clearing::clearable(
        &clearing::candidates(&state.context_entries(), &state.cleared),
        clear,
    );
    Some(ClearingPreview {
        due: tokens >= clear.at * threshold
            && !pass.entry_ids.is_empty()
            && pass.tokens_freed >= clear.clear_at_least,
        tokens_after: state
            .live
            .estimated_total()
            .saturating_sub(pass.tokens_freed) as f64,
        at_tokens: clear.at * threshold,
        entry_ids: pass.entry_ids,
        tokens_freed: pass.tokens_freed,
        tokens_before: tokens,
    })
}

/// Runs a pass when one is due; the pass, or `None`. The caller holds the session's slot (no
/// compaction runs meanwhile).
pub fn run(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
) -> Option<ClearingPass> {
    let clear = settings.clear_tool_results.as_ref()?;
    let (pass, before, after) = {
        let mut state = session.lock_state();
        let threshold = threshold(&state, settings)?;
        let before = daemon.context_tokens(&state, settings);
        if before < clear.at * threshold {
            return None;
        }
        let pass = due(&state, clear)?;
        let data = clearing::pass_data(&pass);
        let written = state.append_with(|id, parent, ts| {
            custom_entry(
                "custom",
                id,
                parent,
                ts,
                vec![("customType", json!(CLEAR_TYPE)), ("data", data)],
            )
        });
        if let Err(e) = written {
            tracing::warn!(session = %session.id, error = %e.message, "could not write the clearing pass; nothing cleared");
            return None;
        }
        (pass, before, daemon.context_tokens(&state, settings))
    };
    tracing::info!(
        session = %session.id,
        entries = pass.entry_ids.len(),
        tokens_freed = pass.tokens_freed,
        "cleared old tool output"
    );
    daemon.emit(
        &session.id,
        &ContextCleared {
            session_id: &session.id,
            entry_ids: pass.entry_ids.iter().map(|s| s.as_str().into()).collect(),
            tokens_freed: pass.tokens_freed,
            tokens_before: before,
            tokens_after: after,
        },
    );
    Some(ClearingPass {
        entry_ids: pass.entry_ids,
        tokens_freed: pass.tokens_freed,
        tokens_before: before,
        tokens_after: after,
    })
}

/// The pass to run on `state`'s context, if it frees enough.
fn due(state: &super::super::session::SessionState, clear: &ClearSettings) -> Option<Pass> {
    clearing::plan(
        &clearing::candidates(&state.context_entries(), &state.cleared),
        clear,
    )
}

/// `contextWindow − reserveTokens`, when the session has a model with a window.
fn threshold(
    state: &super::super::session::SessionState,
    settings: &EffectiveSettings,
) -> Option<f64> {
    let window = state.model.as_ref()?.context_window;
    (window > 0).then_some(crate::compaction::tokens::threshold(
        window,
        &settings.compaction,
    ))
}
