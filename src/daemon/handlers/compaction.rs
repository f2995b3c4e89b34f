//! Handlers for compaction: Pi's `shouldCompact`, the preview, manual and automatic compaction,
//! abort, and the settings that govern them.

use serde_json::Value;

use super::super::lifecycle::{self, speculation, speculation::DiscardReason};
use super::super::settings::invalid_override;
use super::Ctx;
use crate::compaction::prepare::{plan_compaction, Preparation, PreparedMessage};
use crate::compaction::tokens::{self, CompactionSettings};
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::results::*;
use crate::rpc::types::*;
use crate::session::PathEntries;

fn patch_settings(
    base: CompactionSettings,
    patch: Option<&CompactionSettingsPatch>,
) -> CompactionSettings {
    let Some(p) = patch else { return base };
    CompactionSettings {
        enabled: p.enabled.unwrap_or(base.enabled),
        reserve_tokens: p.reserve_tokens.unwrap_or(base.reserve_tokens),
        keep_recent_tokens: p.keep_recent_tokens.unwrap_or(base.keep_recent_tokens),
    }
}

pub fn should_compact(ctx: &Ctx, p: ShouldCompactParams) -> Result<ShouldCompactResult, RpcError> {
    let (tokens, window, settings) = match &p.session_id {
        Some(id) => {
            let session = ctx.daemon.session(id)?;
            let all = ctx.daemon.session_settings(&session);
            let s = all.compaction;
            let state = session.read_state();
            if state.model.is_none() {
                return Err(RpcError::new(
                    ErrorKind::NoModel,
                    "No model selected for this session",
                ));
            }
            let window = state.context_window().unwrap_or(0);
            (
                ctx.daemon.estimate(&state, &all).tokens,
                p.context_window.unwrap_or(window),
                patch_settings(s, p.settings.as_ref()),
            )
        }
        None => {
            let tokens = p.context_tokens.ok_or_else(|| {
                RpcError::invalid_params("contextTokens is required without sessionId")
            })?;
            let window = p.context_window.ok_or_else(|| {
                RpcError::invalid_params("contextWindow is required without sessionId")
            })?;
            (
                tokens,
                window,
                patch_settings(CompactionSettings::default(), p.settings.as_ref()),
            )
        }
    };
    Ok(ShouldCompactResult {
        should_compact: tokens::should_compact(tokens, window, &settings),
        context_tokens: tokens,
        context_window: window,
        threshold: crate::compaction::tokens::threshold(window, &settings),
        settings: CompactionSettingsView::from(&settings),
    })
}

pub fn preview_compaction(
    ctx: &Ctx,
    p: PreviewCompactionParams,
) -> Result<PreviewCompactionResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let all_settings = ctx.daemon.session_settings(&session);
    let settings = all_settings.compaction;
    // Before the state lock: finding the engine reads the session's model.
    let engine = ctx.daemon.session_engine(&session, &all_settings).ok();
    let clearing =
        crate::daemon::lifecycle::clearing::preview(&ctx.daemon, &session, &all_settings);
    let state = session.read_state();
    let view = state.view();
    let plan = match plan_compaction(state.rules, &view, &state.index, &settings) {
        Ok(p) => p,
        Err(reason) => {
            return Ok(PreviewCompactionResult::Nothing(NothingToCompact {
                nothing_to_compact: reason.message(),
                detail: reason.detail(&view, &state.index, &settings),
                clearing,
            }))
        }
    };
    let kept_start = plan.boundaries.cut.first_kept_entry_index;
    let (kept_tokens, kept_count) = state.index.range_sums(kept_start..view.path_len());
    let (read_files, modified_files) = plan.file_ops.file_lists();
    let stats = |count, estimated_tokens| MessageStats {
        count,
        estimated_tokens,
    };
    let speculation = speculation::view(&ctx.daemon, &session, &state, &all_settings);
    let economics = crate::daemon::spend::economics(
        &ctx.daemon,
        engine.as_deref(),
        &state,
        &all_settings,
        &plan,
        kept_tokens,
        speculation
            .as_ref()
            .filter(|s| s.would_install)
            .and_then(|s| s.summary_tokens),
    );
    let mut preview = CompactionPreview {
        first_kept_entry_id: plan.first_kept_entry_id.clone(),
        is_split_turn: plan.is_split_turn,
        tokens_before: plan.tokens_before,
        has_previous_summary: plan.previous_summary.is_some(),
        summarize: stats(plan.history.count, plan.history.tokens),
        turn_prefix: stats(plan.turn_prefix.count, plan.turn_prefix.tokens),
        kept: stats(kept_count, kept_tokens),
        file_lists: FileLists {
            read_files,
            modified_files,
        },
        settings: CompactionSettingsView::from(&settings),
        speculation,
        economics,
        clearing,
        handoff: None,
        full: None,
    };
    let previous_id = plan
        .boundaries
        .prev_compaction_index
        .and_then(|i| state.tree.entry(state.branch[i]).id_owned());
    let mut prep = Preparation::from_plan(plan, &view, |i| state.tree.shared(state.branch[i]));
    lifecycle::summary_input(&mut prep, &all_settings, &state.cleared);
    drop(state);
    if p.detail == Some(PreviewDetail::Full) {
        // What the handoff would owe: the span read as a compaction reads it (no lock held),
        // its previous summary without compactd's own additions. Only on request: reading a
        // span costs what an extractive summary of it does (86 ms at 1.8M tokens), and the
        // plain preview is what the Pi extension and `top` ask for all the time.
        let mut summarized = prep.clone();
        lifecycle::strip_additions(&mut summarized);
        preview.handoff = crate::compactor::step::owed_by(
            &summarized,
            all_settings.handoff,
            previous_id.as_deref(),
        )
        .map(|owed| HandoffPreview {
            mode: owed.mode,
            owed: owed
                .obligations
                .iter()
                .map(crate::handoff::Item::from)
                .collect(),
        });
        let refs = |m: &[PreparedMessage]| {
            m.iter()
                .map(|x| MessageRef {
                    entry_id: x.entry_id().map(str::to_owned),
                    role: x.role_value(),
                })
                .collect()
        };
        let (history, prefix) = prep.serialized_inputs();
        preview.full = Some(PreviewDetails {
            previous_summary: prep.previous_summary.clone(),
            messages_to_summarize: refs(&prep.messages_to_summarize),
            turn_prefix_messages: refs(&prep.turn_prefix_messages),
            serialized: SerializedInputs {
                messages_to_summarize: history,
                turn_prefix_messages: prefix,
            },
        });
    }
    Ok(PreviewCompactionResult::Preview(Box::new(preview)))
}

pub async fn compact(ctx: &Ctx, p: CompactParams) -> Result<CompactionResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let write = p.write != Some(false);
    lifecycle::compact(&ctx.daemon, &session, p.custom_instructions, write).await
}

pub async fn check_compaction(
    ctx: &Ctx,
    p: CheckCompactionParams,
) -> Result<CheckCompactionResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    Ok(lifecycle::check(&ctx.daemon, &session, p.phase).await)
}

pub fn abort_compaction(ctx: &Ctx, p: SessionParams) -> Result<AbortCompactionResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    Ok(AbortCompactionResult {
        aborted: lifecycle::abort(&session),
        speculation_discarded: speculation::discard(&ctx.daemon, &session, DiscardReason::Aborted),
    })
}

pub fn get_settings(ctx: &Ctx, p: SessionParams) -> Result<EffectiveSettings, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let settings = ctx.daemon.session_settings(&session);
    let mut report = settings.report();
    // The rule as it applies to this session's summarizer (the default depends on it).
    let rule = ctx
        .daemon
        .session_engine(&session, &settings)
        .ok()
        .and_then(|engine| speculation::start_rule(&settings, &engine));
    report.compaction.speculative_at =
        Some(rule.unwrap_or(crate::rpc::types::SpeculativeAt::Fraction(0.0)));
    Ok(report)
}

/// Logs, once, that `state` is read under Pi 0.85's rules although its file shows what only Pi
/// 1.6 writes (see [`crate::session::SessionState::misread`]).
pub(crate) fn warn_if_misread(session_id: &str, state: &super::super::session::SessionState) {
    if let Some(why) = state.misread() {
        tracing::warn!(session = session_id, path = %state.location(), "{why}");
    }
}

pub fn set_settings_overrides(
    ctx: &Ctx,
    p: SetSettingsOverridesParams,
) -> Result<SetSettingsOverridesResult, RpcError> {
    let pi_version = match &p.pi_version {
        None => None,
        Some(None) => Some(None),
        Some(Some(v)) => Some(Some(crate::session::PiVersion::parse(v).ok_or_else(
            || {
                RpcError::invalid_params(format!(
                    "piVersion must be \"1.6\" or \"0.85\", not {v:?}"
                ))
            },
        )?)),
    };
    // Omitted beside a `piVersion`: the compaction overrides stay.
    let keep_compaction = p.compaction.is_none() && pi_version.is_some();
    let value = match p.compaction.flatten() {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => {
            // Checked field by field (an unknown or mistyped key is refused with its path);
            // the object itself is what merges over Pi's settings.
            let patch =
                crate::rpc::types::decode::<CompactionSettingsPatch>(v.clone(), "compaction")?;
            if let Some(why) = invalid_override(&patch) {
                return Err(RpcError::invalid_params(why));
            }
            Some(v)
        }
        Some(_) => {
            return Err(RpcError::invalid_params(
                "compaction must be an object or null",
            ))
        }
    };
    let sessions = match &p.session_id {
        Some(id) => {
            let session = ctx.daemon.session(id)?;
            let mut state = session.lock_state();
            if !keep_compaction {
                state.overrides = value;
            }
            if let Some(own) = pi_version {
                state.own_pi_version = own;
                let rules = own.unwrap_or_else(|| ctx.daemon.default_pi_version());
                state.set_rules(rules);
                warn_if_misread(&session.id, &state);
            }
            drop(state);
            vec![session]
        }
        None => {
            if !keep_compaction {
                *ctx.daemon.global_overrides.lock() = value;
            }
            if let Some(global) = pi_version {
                *ctx.daemon.global_pi_version.lock() = global;
                let rules = ctx.daemon.default_pi_version();
                for session in ctx.daemon.sessions() {
                    let mut state = session.lock_state();
                    if state.own_pi_version.is_none() {
                        state.set_rules(rules);
                        warn_if_misread(&session.id, &state);
                    }
                }
            }
            ctx.daemon.sessions()
        }
    };
    for session in sessions.iter().filter(|s| s.speculation.is_busy()) {
        let settings = ctx.daemon.session_settings(session);
        let off = ctx
            .daemon
            .session_engine(session, &settings)
            .map_or(true, |e| speculation::start_rule(&settings, &e).is_none());
        if off {
            speculation::discard(&ctx.daemon, session, DiscardReason::SettingsChanged);
        } else {
            speculation::revalidate(
                &ctx.daemon,
                session,
                &settings,
                DiscardReason::SettingsChanged,
            );
        }
    }
    Ok(SetSettingsOverridesResult { ok: true })
}
