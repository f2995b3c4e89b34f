//! The clearing pass of `checkCompaction` (beyond Pi, `compaction.clearToolResults`): before
//! any summarizing decision, when the context is at `at` × the threshold and the clearable tool
//! output frees at least `clearAtLeast`, one `compactd.clear` custom entry is appended and
//! `context_cleared` announced. The plan is the pure [`crate::clearing`]'s; what the entry does
//! to the context (the projection, the estimate) is the session's (`SessionState::apply_pass`),
//! so a pass another writer appended reads the same.
//!
//! Every pass breaks the provider's prompt cache once, so with `cacheAware` (the default) a
//! pass that frees enough still waits while the cache is warm until it pays for that break
//! ([`clearing::pays_back`]), unless the context has reached the point where the alternative
//! is a summary. With `summarizeAt` below 1, a summarizing compaction follows once the context
//! is still at that fraction of the threshold after clearing ([`summary_due`]): clearing cannot
//! shrink the conversation itself, only a summary can.

use serde_json::json;

use super::super::session::{custom_entry, SessionState};
use super::super::settings::EffectiveSettings;
use super::super::spend;
use super::super::{Daemon, Session};
use crate::clearing::{self, CacheDebt, ClearSettings, Pass, CLEAR_TYPE};
use crate::rpc::events::ContextCleared;
use crate::rpc::results::ContextEditDraft;
use crate::rpc::results::{ClearingPass, ClearingPreview};
use crate::session::Role;

/// What a pass would do now: the one decision of [`run`] and [`preview`].
struct Decision {
    /// Everything a pass would clear now, whether or not it runs.
    pass: Pass,
    tokens_before: f64,
    at_tokens: f64,
    /// The cache debt with this check counted in.
    debt: CacheDebt,
    /// It frees enough (`clearAtLeast`) at or above `at`.
    enough: bool,
    /// It frees enough but waits for the cache to pay back.
    waits_for_cache: bool,
}

impl Decision {
    fn due(&self) -> bool {
        self.enough && !self.waits_for_cache
    }
}

fn decide(
    daemon: &Daemon,
    state: &SessionState,
    settings: &EffectiveSettings,
    clear: &ClearSettings,
) -> Option<Decision> {
    let threshold = threshold(state, settings)?;
    let tokens_before = daemon.context_tokens(state, settings);
    let at_tokens = clear.at * threshold;
    let context = state.context_entries();
    let pass = clearing::clearable(&clearing::candidates(&context, &state.cleared), clear);
    // Every check counts (below `at` too): the outputs were read whether or not a pass was
    // considered yet.
    let mut debt = state.cache_debt;
    let replies = context
        .iter()
        .filter(|e| e.is_message(Role::Assistant))
        .count();
    debt.observe(replies as u64, pass.tokens_freed);
    let enough = tokens_before >= at_tokens && pass.frees_enough(clear);
    // At the point where a summary would follow, a pass that avoids it is always worth it; so
    // is one while the cache is cold (the next request writes everything anyway) or when the
    // agent's prices are unknown (no cost to weigh).
    let urgent = tokens_before >= summary_point(settings, threshold);
    let waits_for_cache = enough
        && clear.cache_aware
        && !urgent
        && !spend::cache_cold(state, settings)
        && spend::agent_price(daemon, state).is_some_and(|p| {
            let rewrite = clearing::rewrite_tokens(&context, &state.cleared, &pass);
            !clearing::pays_back(debt.held(), rewrite, p.cache_read, p.cache_write)
        });
    Some(Decision {
        pass,
        tokens_before,
        at_tokens,
        debt,
        enough,
        waits_for_cache,
    })
}

/// What a pass would clear now and whether it is due (`previewCompaction`, and the Pi
/// extension before each request), or `None` when clearing is off or the session has no model
/// window.
pub fn preview(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
) -> Option<ClearingPreview> {
    let clear = settings.clear_tool_results.as_ref()?;
    let mut state = session.lock_state();
    let d = decide(daemon, &state, settings, clear)?;
    // The reads are counted here too: the Pi extension asks (inside Pi 0.85 before every
    // request, inside Pi 1.6 at the end of every turn) and never checks (a count only moves
    // with new replies, so asking twice adds nothing).
    state.cache_debt = d.debt;
    let edits = state.rules.is_1_6().then(|| edits(&state, &d.pass));
    Some(ClearingPreview {
        edits,
        due: d.due(),
        waits_for_cache: d.waits_for_cache,
        tokens_after: state
            .live
            .estimated_total()
            .saturating_sub(d.pass.tokens_freed) as f64,
        at_tokens: d.at_tokens,
        entry_ids: d.pass.entry_ids,
        tokens_freed: d.pass.tokens_freed,
        tokens_before: d.tokens_before,
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
        let d = decide(daemon, &state, settings, clear)?;
        state.cache_debt = d.debt;
        if !d.due() {
            return None;
        }
        if let Err(e) = record(&mut state, &d.pass) {
            tracing::warn!(session = %session.id, error = %e.message, "could not write the clearing pass; nothing cleared");
            return None;
        }
        (
            d.pass,
            d.tokens_before,
            daemon.context_tokens(&state, settings),
        )
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

/// Writes a pass in the form the session's Pi reads. Under 0.85 one `compactd.clear` custom
/// entry (Pi 0.85 loads and ignores it; the daemon's projection applies it). Under 1.6 Pi's
/// own mechanism: one `context_edit` per output, its content replaced by the placeholder, so
/// Pi 1.6 and every reader of the file project the same context with no extension. A failure
/// after some edits leaves those (each stands alone: an output cleared); the rest are not
/// written.
fn record(state: &mut SessionState, pass: &Pass) -> Result<(), crate::rpc::errors::RpcError> {
    if !state.rules.is_1_6() {
        let data = clearing::pass_data(pass);
        return state
            .append_with(|id, parent, ts| {
                custom_entry(
                    "custom",
                    id,
                    parent,
                    ts,
                    vec![("customType", json!(CLEAR_TYPE)), ("data", data)],
                )
            })
            .map(drop);
    }
    let drafts = edits(state, pass);
    state
        .append_context_edits(
            drafts
                .iter()
                .map(|d| (d.target_id.as_str(), Some(d.replacement.clone()))),
        )
        .map(drop)
}

/// Under 1.6, the `context_edit`s that make `pass` (what the Pi extension hands Pi to append).
pub fn edits(state: &SessionState, pass: &Pass) -> Vec<ContextEditDraft> {
    let tokens: std::collections::HashMap<&str, u64> = state
        .context_entries()
        .into_iter()
        .filter_map(|e| Some((e.id.as_deref()?, e.tokens)))
        .collect();
    pass.entry_ids
        .iter()
        .filter_map(|id| {
            Some(ContextEditDraft {
                kind: "context_edit".into(),
                target_id: id.clone(),
                replacement: clearing::replacement(id, *tokens.get(id.as_str())?),
            })
        })
        .collect()
}

/// Where a summarizing compaction comes, of Pi's `threshold`: `summarizeAt` × it with clearing
/// on, else the threshold itself. Speculation aims at this point too.
pub fn summary_point(settings: &EffectiveSettings, threshold: f64) -> f64 {
    settings
        .clear_tool_results
        .as_ref()
        .map_or(threshold, |c| c.summarize_at * threshold)
}

/// Whether a summarizing compaction is due below Pi's threshold: clearing is on with
/// `summarizeAt` below 1, compaction is enabled, and the context (projected, after any pass
/// of this check) is at [`summary_point`].
pub fn summary_due(daemon: &Daemon, session: &Session, settings: &EffectiveSettings) -> bool {
    if !settings.compaction.enabled
        || !settings
            .clear_tool_results
            .as_ref()
            .is_some_and(|c| c.summarize_at < 1.0)
    {
        return false;
    }
    let state = session.lock_state();
    threshold(&state, settings).is_some_and(|threshold| {
        daemon.context_tokens(&state, settings) >= summary_point(settings, threshold)
    })
}

/// `contextWindow − reserveTokens`, when the session has a model with a window.
fn threshold(state: &SessionState, settings: &EffectiveSettings) -> Option<f64> {
    state.threshold(&settings.compaction)
}
