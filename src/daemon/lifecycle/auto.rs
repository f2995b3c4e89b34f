//! The automatic half of Pi's lifecycle behind `checkCompaction` (compaction.md §8.4–8.5,
//! overflow.md §5): the facts about the last reply are gathered here, the pure
//! [`decide`](super::super::auto_check::decide) chooses, and the choice is carried out through
//! the runner. Beyond Pi, a check that does not compact may start a speculation.

use std::sync::Arc;

use serde_json::Value;

use super::super::auto_check::{decide, Action, CheckFacts};
use super::super::settings::EffectiveSettings;
use super::super::{Daemon, Session};
use super::announce::{self, Ended};
use super::runner::{self, snapshot, Failed, Job};
use super::summarize::engine;
use super::{speculation, CompactionFailure};
use crate::rpc::events::Reason;
use crate::rpc::results::{AutoReason, CheckAction, CheckCompactionResult};
use crate::rpc::types::Phase;
use crate::session::{ids, PiVersion, Role};
use crate::summarizer::overflow::ReplyFacts;
use crate::summarizer::StopReason;

/// `_runAutoCompaction(reason, willRetry)` (compaction.md §8.5), with the settings the check
/// read. The caller holds the slot.
async fn run_auto(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: &EffectiveSettings,
    auto: AutoReason,
    will_retry: bool,
) -> CheckCompactionResult {
    let reason = Reason::from(auto);
    // `reason` is reported only for outcomes of a compaction that started.
    let mut out = CheckCompactionResult::default();
    if session.lock_state().model.is_none() {
        return out;
    }
    if engine(daemon, session, settings).is_err() {
        return out; // Pi: an auth failure here is silent.
    }
    // Beyond Pi: the thrash breaker (never for overflow recovery).
    let breaker = auto == AutoReason::Threshold
        && settings.compaction.enabled
        && settings.max_ineffective_compactions > 0;
    if breaker {
        let suppressed = {
            let mut state = session.lock_state();
            state
                .thrash
                .suppress(&settings.merged)
                .map(|why| (why, state.thrash.is_paused()))
        };
        if let Some((why, paused)) = suppressed {
            if let Some(why) = why {
                daemon.emit(
                    &session.id,
                    &super::super::thrash::event(&session.id, &why, paused),
                );
            }
            return out;
        }
    }
    // Pi's automatic compaction is silent when there is nothing to compact.
    let snap = snapshot(session, settings);
    if snap.prep.is_err() {
        return out;
    }
    out.reason = Some(auto);
    let job = Job {
        reason,
        will_retry,
        custom: None,
        write: true,
        // A ready speculative summary makes the idle compaction instant too.
        use_speculation: matches!(auto, AutoReason::Threshold | AutoReason::Idle),
    };
    match runner::run(daemon, session, settings, &job, Some(snap)).await {
        Ok(done) => {
            if will_retry {
                let mut state = session.lock_state();
                // Under 1.6 the failed attempt was omitted by an edit before compacting.
                if !state.rules.is_1_6() {
                    state.drop_trailing_assistant(true);
                }
            }
            if breaker {
                let mut state = session.lock_state();
                let pinned = super::super::pins::section(&super::super::pins::live_pins(&state).0);
                let summary = done
                    .entry
                    .get("summary")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let est = |t: &str| (crate::json::utf16_len(t) as f64 / 4.0).ceil();
                state.thrash.compacted(super::super::thrash::Pending {
                    tokens_before: done.result.tokens_before,
                    summary_tokens: est(summary),
                    pinned_tokens: est(&pinned),
                });
            }
            out.action = CheckAction::Compacted;
            out.will_retry = will_retry;
            out.context_changed = true;
            out.result = Some(done.result);
        }
        Err(Failed {
            failure: CompactionFailure::Cancelled,
        }) => {
            out.action = CheckAction::Aborted;
        }
        Err(Failed { failure }) => {
            out.action = CheckAction::Failed;
            out.error_message = Some(format!(
                "{}{}",
                announce::failure_prefix(reason),
                failure.message()
            ));
        }
    }
    out
}

/// `_checkCompaction(msg, skipAbortedCheck)` (compaction.md §8.4): the facts gathered here,
/// the decision [`decide`]'s, carried out here.
async fn check_message(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: &EffectiveSettings,
    msg: &Value,
    skip_aborted: bool,
) -> CheckCompactionResult {
    let stop = msg.get("stopReason").and_then(Value::as_str).unwrap_or("");
    let usage = msg.get("usage");
    let (action, window) = {
        let state = session.lock_state();
        let model = state.model.as_ref();
        let estimate = daemon.estimate(&state, settings);
        let facts = CheckFacts {
            settings: &settings.compaction,
            skip_aborted,
            stop,
            reply: ReplyFacts {
                stop_reason: StopReason::parse(stop).unwrap_or(StopReason::Stop),
                error_message: msg.get("errorMessage").and_then(Value::as_str),
                input: num(usage.and_then(|u| u.get("input"))) as u64,
                cache_read: num(usage.and_then(|u| u.get("cacheRead"))) as u64,
                output: num(usage.and_then(|u| u.get("output"))) as u64,
            },
            message_ms: num(msg.get("timestamp")),
            latest_compaction_ms: state
                .index
                .latest_compaction()
                .map(|l| state.tree.entry(state.branch[l.at]))
                .map(|e| ids::timestamp_value_ms(e.get("timestamp"))),
            same_model: model.is_some_and(|m| {
                msg.get("provider").and_then(Value::as_str) == Some(m.provider.as_str())
                    && msg.get("model").and_then(Value::as_str) == Some(m.id.as_str())
            }),
            window: state.context_window().unwrap_or(0),
            model_max_tokens: model.map_or(0, |m| m.max_tokens),
            overflow_recovery_attempted: state.overflow_recovery_attempted,
            // Beyond Pi: usage reported before a clearing pass counted outputs the projection
            // no longer holds; the projection's estimate stands until a newer reply.
            usage_tokens: if state.last_assistant_usage_stale() {
                0.0
            } else {
                usage
                    .and_then(Value::as_object)
                    .map_or(0.0, crate::compaction::tokens::calculate_context_tokens)
            },
            estimate_tokens: estimate.tokens,
            estimate_usage_ms: estimate
                .last_usage_index
                .and_then(|i| state.agent.get(i))
                .and_then(|&ei| {
                    let e = state.tree.entry(ei);
                    e.is_message(Role::Assistant)
                        .then(|| {
                            e.message()
                                .and_then(|m| m.get("timestamp").and_then(Value::as_f64))
                        })
                        .flatten()
                }),
            estimate_has_usage: estimate.last_usage_index.is_some(),
        };
        (decide(&facts), facts.window)
    };
    match action {
        Action::Nothing => CheckCompactionResult::default(),
        Action::RecoverOverflow { retry: false } => {
            run_auto(daemon, session, settings, AutoReason::Overflow, false).await
        }
        Action::RecoverOverflow { retry: true } => {
            let dropped = {
                let mut state = session.lock_state();
                state.overflow_recovery_attempted = true;
                match state.rules {
                    // Pi 1.6 omits the failed attempt persistently, by edits in the file.
                    PiVersion::V1_6 => state.omit_recovery_attempt().unwrap_or_else(|e| {
                        tracing::warn!(session = %session.id, error = %e.message, "the failed attempt could not be omitted");
                        false
                    }),
                    PiVersion::V0_85 => state.drop_trailing_assistant(false),
                }
            };
            let mut out = run_auto(daemon, session, settings, AutoReason::Overflow, true).await;
            out.context_changed |= dropped;
            out
        }
        Action::GiveUp { message } => {
            let ended = Ended {
                reason: Reason::Overflow,
                will_retry: false,
                from_extension: false,
            };
            ended.failed(daemon, session, Some(message), false);
            CheckCompactionResult {
                action: CheckAction::Failed,
                reason: Some(AutoReason::Overflow),
                error_message: Some(message.to_owned()),
                ..CheckCompactionResult::default()
            }
        }
        Action::Measure { tokens, compact } => {
            observe_size(session, settings, tokens, window);
            if compact {
                run_auto(daemon, session, settings, AutoReason::Threshold, false).await
            } else {
                CheckCompactionResult::default()
            }
        }
    }
}

/// Beyond Pi: hands the thrash breaker a context size reported after the latest compaction.
fn observe_size(session: &Session, settings: &EffectiveSettings, tokens: f64, window: i64) {
    if settings.max_ineffective_compactions == 0 || window <= 0 {
        return;
    }
    let threshold = crate::compaction::tokens::threshold(window, &settings.compaction);
    session.lock_state().thrash.observe(
        tokens,
        threshold,
        settings.max_ineffective_compactions,
        &settings.merged,
    );
}

/// Beyond Pi: after `setModel` reported that the context exceeds the new model's threshold,
/// the first check compacts (as a threshold compaction), whatever its phase and whatever the
/// last reply says. Re-evaluated now, so a switch back or an intervening compaction cancels it.
async fn check_model_switch(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: &EffectiveSettings,
) -> Option<CheckCompactionResult> {
    let (window, tokens) = {
        let mut state = session.lock_state();
        if !std::mem::take(&mut state.model_switch_pending) {
            return None;
        }
        (
            state.context_window().unwrap_or(0),
            daemon.estimate(&state, settings).tokens,
        )
    };
    if window <= 0
        || !crate::compaction::tokens::should_compact(tokens, window, &settings.compaction)
    {
        return None;
    }
    let out = run_auto(daemon, session, settings, AutoReason::Threshold, false).await;
    (out.action != CheckAction::None).then_some(out)
}

fn num(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(0.0)
}

/// `checkCompaction {phase}`: waits for a running compaction first. Beyond Pi, a check that
/// does not compact considers starting a speculation.
pub async fn check(
    daemon: &Arc<Daemon>,
    session: &Arc<Session>,
    phase: Phase,
) -> CheckCompactionResult {
    let _slot = session.slot.lock().await;
    // A stored session: another daemon's compaction is waited for and read in first, so two
    // daemons crossing the threshold together make one compaction.
    let _lease = match super::super::shared_store::lease(daemon, session).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(session = %session.id, error = %e.message, "cannot take the compaction lease; not compacting now");
            return CheckCompactionResult::default();
        }
    };
    // The settings files are read once per check.
    let settings = daemon.session_settings(session);
    // Beyond Pi, the second tier first: old tool output is cleared before anything is
    // summarized; the decision below then measures the projection.
    let cleared = super::clearing::run(daemon, session, &settings);
    let mut out = check_phase(daemon, session, &settings, phase).await;
    // Beyond Pi, with clearing on: a summary once clearing alone leaves the context at
    // `summarizeAt` × the threshold (what remains is conversation, which only a summary
    // shrinks).
    if out.action == CheckAction::None && super::clearing::summary_due(daemon, session, &settings) {
        out = run_auto(daemon, session, &settings, AutoReason::Threshold, false).await;
        out.will_retry = false;
    }
    if cleared.is_some() {
        out.context_changed = true;
        out.cleared = cleared;
    }
    if out.action == CheckAction::None {
        speculation::consider(daemon, session, &settings);
    }
    out
}

async fn check_phase(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: &EffectiveSettings,
    phase: Phase,
) -> CheckCompactionResult {
    if let Some(out) = check_model_switch(daemon, session, settings).await {
        return out;
    }
    match phase {
        Phase::MidRun => {
            let (model_window, estimate) = {
                let state = session.lock_state();
                (state.context_window(), daemon.estimate(&state, settings))
            };
            let Some(window) = model_window else {
                return CheckCompactionResult::default();
            };
            if crate::compaction::tokens::should_compact(
                estimate.tokens,
                window,
                &settings.compaction,
            ) {
                let mut out =
                    run_auto(daemon, session, settings, AutoReason::Threshold, false).await;
                out.will_retry = false;
                return out;
            }
            CheckCompactionResult::default()
        }
        Phase::PrePrompt | Phase::PostRun => {
            let last = session.lock_state().last_assistant();
            let Some(msg) = last else {
                return CheckCompactionResult::default();
            };
            let out = check_message(daemon, session, settings, &msg, phase == Phase::PostRun).await;
            if phase == Phase::PrePrompt
                && out.action == CheckAction::None
                && idle(daemon, session, settings, &msg)
            {
                return run_auto(daemon, session, settings, AutoReason::Idle, false).await;
            }
            out
        }
    }
}

/// Beyond Pi, the idle gate (`compaction.idleCompactAt`): before a new prompt, the last reply is
/// older than the provider's cache lifetime (its timestamp against the daemon's clock), so the
/// next request writes the whole prompt to the cache anyway and a compaction now costs no cache
/// rewrite; compact when the context is at `idleCompactAt` × the threshold.
fn idle(daemon: &Daemon, session: &Session, settings: &EffectiveSettings, reply: &Value) -> bool {
    let Some(fraction) = settings
        .idle_compact_at
        .filter(|_| settings.compaction.enabled)
    else {
        return false;
    };
    let Some(replied_ms) = reply.get("timestamp").and_then(Value::as_f64) else {
        return false;
    };
    let idle_ms = ids::now_ms() as f64 - replied_ms;
    if idle_ms < settings.cache_ttl_seconds as f64 * 1000.0 {
        return false;
    }
    let state = session.lock_state();
    let Some(window) = state.context_window() else {
        return false;
    };
    let threshold = crate::compaction::tokens::threshold(window, &settings.compaction);
    daemon.context_tokens(&state, settings) >= fraction * threshold
}
