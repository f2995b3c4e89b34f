//! Beyond Pi: speculative compaction. With an LLM summarizer a compaction takes seconds to
//! minutes, and the agent waits for all of it. compactd owns the session, so once the context
//! passes `compaction.speculativeAt` × the threshold (or, set to `"auto"`, once the threshold
//! is nearer than the summarizer's measured time at the context's recent growth rate: the
//! rule is [`speculation_lead`]'s) it summarizes the old part in the background, exactly as a compaction at that moment would (Pi's `prepareCompaction` on the
//! branch as it is, the session's engine), while the agent goes on appending. When the
//! compaction is due, the ready summary is installed at once ([`claim`], called by the runner);
//! everything appended since sits in the kept tail. A compaction due while the speculation still
//! runs waits for it instead of sending a second request.
//!
//! A speculative summary is keyed by what it summarized: the compaction it builds on, its cut
//! (`firstKeptEntryId`), and the [`Basis`] (engine, model, and the settings that shape the
//! request). It stays valid while its first kept entry is still on the current branch, no other
//! compaction followed, and the basis is unchanged; anything else discards it with
//! `speculation_discarded {reason}`, and it is never installed. Nothing is written to the
//! session until the install, so a crash during a speculation loses nothing.
//!
//! Locks: the session's state lock, then the speculation slot's, never the other way round.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::super::session::SessionState;
use super::super::settings::EffectiveSettings;
use super::super::speculation_lead::{self, Growth};
use super::super::spend::Wasted;
use super::super::{Daemon, Session};
use super::finish;
use super::summarize::{self, Hooks, Request, Stopped};
use super::CompactionFailure;
use crate::accounting::Cost;
use crate::compaction::prepare::{plan_compaction, Preparation};
use crate::compaction::summary::{compaction_entry, CompactionOutcome};
use crate::compactor::SummaryEngine;
use crate::config::EngineKey;
pub use crate::rpc::events::DiscardReason;
use crate::rpc::events::{self, Reason};
use crate::rpc::results::{SpeculationState, SpeculationView};
use crate::rpc::types::{Model, SpeculativeAt};
use crate::session::{ids, Entry, Role};
use crate::summarizer::RetryEvent;

/// When a session speculates (`compaction.speculativeAt`, see [`speculation_lead`]), or `None`
/// when it never does: speculation off (`0`), compaction disabled, or the extractive engine
/// (which is instant).
pub fn start_rule(settings: &EffectiveSettings, engine: &SummaryEngine) -> Option<SpeculativeAt> {
    if !settings.compaction.enabled || engine.model().is_none() {
        return None;
    }
    let at = settings
        .speculative_at
        .unwrap_or(SpeculativeAt::Fraction(speculation_lead::DEFAULT_FRACTION));
    match at {
        SpeculativeAt::Fraction(f) if !(f > 0.0 && f < 1.0) => None,
        at => Some(at),
    }
}

/// What a speculative summary depends on besides the branch: the same request needs the same
/// engine, model and shaping settings.
#[derive(Debug, Clone, PartialEq)]
struct Basis {
    engine: EngineKey,
    model: Option<Model>,
    thinking_level: String,
    reserve_tokens: i64,
    keep_recent_tokens: i64,
}

fn basis(daemon: &Daemon, state: &SessionState, settings: &EffectiveSettings) -> Basis {
    Basis {
        engine: daemon.config.engine_key(state.model.as_ref()),
        model: state.model.clone(),
        thinking_level: state.thinking_level.clone(),
        reserve_tokens: settings.compaction.reserve_tokens,
        keep_recent_tokens: settings.compaction.keep_recent_tokens,
    }
}

/// A finished speculative summary, waiting for the compaction that installs it.
struct Ready {
    outcome: CompactionOutcome,
    summarizer: String,
    /// What its calls cost.
    cost: Cost,
    /// The hook registrations asked about it (the install asks the others).
    asked: Vec<u64>,
    /// What its handoff owes (`compaction.handoff`), checked again when it is installed.
    handoff: Option<crate::handoff::Owed>,
    /// Its score against that, as made.
    handoff_score: Option<f64>,
}

/// One speculation, running or ready.
struct Speculation {
    id: u64,
    basis: Basis,
    /// The id of the latest compaction on the branch it was prepared from, if any.
    previous_compaction: Option<String>,
    prep: Arc<Preparation>,
    /// The entry before the first kept one: the last one the summary covers.
    covers_through: Option<String>,
    /// The leaf when it started (where it would have been installed, for an update on top).
    leaf_at_start: Option<String>,
    /// The context tokens when it started.
    tokens: f64,
    started_at: String,
    /// `SessionState::foreign_moves` when it started, to tell a fork by another writer from
    /// other branch changes.
    foreign_moves: u64,
    cancel: CancellationToken,
    /// Cancelled when it is ready or discarded (what a waiting compaction waits on).
    done: CancellationToken,
    ready: Option<Ready>,
}

/// A session's speculation slot.
#[derive(Default)]
pub struct Slot {
    inner: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    current: Option<Speculation>,
    /// The assistant reply the last speculation started after: one start per turn.
    last_turn: Option<usize>,
    next_id: u64,
    wasted: Wasted,
    /// The context's recent growth, for a `speculativeAt` of `"auto"`.
    growth: Growth,
}

impl Slot {
    /// Whether a speculation runs or is ready.
    pub fn is_busy(&self) -> bool {
        self.inner.lock().current.is_some()
    }

    /// The summarization spend of discarded speculations so far.
    pub fn wasted(&self) -> Wasted {
        self.inner.lock().wasted
    }
}

/// Checks a speculation against the session as it is now.
fn validate(spec: &Speculation, state: &SessionState, now: &Basis) -> Result<(), DiscardReason> {
    if spec.basis.engine != now.engine || spec.basis.model != now.model {
        return Err(DiscardReason::ModelChanged);
    }
    if spec.basis != *now {
        return Err(DiscardReason::SettingsChanged);
    }
    // The branch, as `finish::holds` checks it for the write.
    if !finish::on_branch(state, &spec.prep.first_kept_entry_id) {
        return Err(if state.foreign_moves != spec.foreign_moves {
            DiscardReason::Forked
        } else {
            DiscardReason::BranchChanged
        });
    }
    if finish::latest_compaction(state) != spec.previous_compaction.as_deref() {
        return Err(DiscardReason::Compacted);
    }
    Ok(())
}

/// Removes the current speculation (cancelling it if it runs) and counts it as wasted: a ready
/// one with what its calls cost; a running one's task adds its calls' cost when it ends.
fn discard_locked(slot: &mut SlotState) -> Option<()> {
    let spec = slot.current.take()?;
    spec.cancel.cancel();
    spec.done.cancel();
    slot.wasted.speculations += 1;
    if let Some(r) = &spec.ready {
        slot.wasted.cost = slot.wasted.cost.plus(&r.cost);
    }
    Some(())
}

fn emit_discarded(daemon: &Daemon, session: &Session, reason: DiscardReason) {
    tracing::info!(session = %session.id, reason = ?reason, "speculative summary discarded");
    daemon.emit(
        &session.id,
        &events::SpeculationDiscarded {
            session_id: &session.id,
            reason,
        },
    );
}

/// Discards the session's speculation, if any, for `reason` (`abortCompaction`, a closed
/// session). True when there was one.
pub fn discard(daemon: &Daemon, session: &Session, reason: DiscardReason) -> bool {
    let gone = discard_locked(&mut session.speculation.inner.lock()).is_some();
    if gone {
        emit_discarded(daemon, session, reason);
    }
    gone
}

/// Discards the session's speculation if it is no longer valid. `hint` names the reason when
/// the branch changed (the caller knows why: a navigation, an undo, an edit, a compaction).
pub fn revalidate(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
    hint: DiscardReason,
) {
    let reason = {
        let state = session.lock_state();
        let slot = session.speculation.inner.lock();
        let Some(spec) = slot.current.as_ref() else {
            return;
        };
        let now = basis(daemon, &state, settings);
        match validate(spec, &state, &now) {
            Ok(()) => return,
            // The caller knows why the branch changed (an undo or edit also changes the
            // latest compaction).
            Err(DiscardReason::BranchChanged | DiscardReason::Compacted) => hint,
            Err(r) => r,
        }
    };
    discard(daemon, session, reason);
}

/// The session's speculation as `previewCompaction`, `listSessions` and `syncSession` report
/// it. The caller holds the state lock.
pub fn view(
    daemon: &Daemon,
    session: &Session,
    state: &SessionState,
    settings: &EffectiveSettings,
) -> Option<SpeculationView> {
    let slot = session.speculation.inner.lock();
    let spec = slot.current.as_ref()?;
    Some(SpeculationView {
        state: if spec.ready.is_some() {
            SpeculationState::Ready
        } else {
            SpeculationState::Running
        },
        covers_through_entry_id: spec.covers_through.clone(),
        first_kept_entry_id: spec.prep.first_kept_entry_id.clone(),
        started_at: spec.started_at.clone(),
        tokens: spec.tokens,
        summary_tokens: spec
            .ready
            .as_ref()
            .map(|r| (crate::json::utf16_len(&r.outcome.summary) as f64 / 4.0).ceil() as u64),
        handoff_score: spec.ready.as_ref().and_then(|r| r.handoff_score),
        would_install: validate(spec, state, &basis(daemon, state, settings)).is_ok(),
    })
}

/// Starts a speculation when one is due (see the module doc): after an assistant reply is
/// appended, after other writers' lines were read in, and at `checkCompaction` when it did
/// not compact. Cheap when nothing is due; the summarizing runs in a task of its own.
pub fn consider(daemon: &Arc<Daemon>, session: &Arc<Session>, settings: &EffectiveSettings) {
    if !settings.compaction.enabled || session.is_compacting() || session.is_navigating() {
        return;
    }
    let Ok(engine) = daemon.session_engine(session, settings) else {
        return;
    };
    let Some(rule) = start_rule(settings, &engine) else {
        return;
    };
    let mut stale = None;
    let started = {
        let state = session.lock_state();
        let Some(window) = state.context_window() else {
            return;
        };
        // Aimed at where the summary will come (with clearing on, `summarizeAt` of the
        // threshold).
        let threshold = super::clearing::summary_point(
            settings,
            crate::compaction::tokens::threshold(window, &settings.compaction),
        );
        let tokens = daemon.context_tokens(&state, settings);
        let rate = {
            let mut slot = session.speculation.inner.lock();
            slot.growth.observe(Instant::now(), tokens);
            slot.growth.rate()
        };
        let latency = daemon.summary_latency(&daemon.config.engine_key(state.model.as_ref()));
        if !speculation_lead::due(rule, tokens, threshold, rate, latency) || state.thrash.holds() {
            return;
        }
        // The turn: the last assistant reply of the context.
        let Some(turn) = state
            .agent
            .iter()
            .rev()
            .copied()
            .find(|&i| state.tree.entry(i).is_message(Role::Assistant))
        else {
            return;
        };
        let now = basis(daemon, &state, settings);
        let mut slot = session.speculation.inner.lock();
        if let Some(spec) = slot.current.as_ref() {
            match validate(spec, &state, &now) {
                Ok(()) => return,
                Err(reason) => {
                    discard_locked(&mut slot);
                    stale = Some(reason);
                }
            }
        }
        if slot.last_turn == Some(turn) {
            None
        } else {
            start_locked(daemon, session, &state, &mut slot, now, settings, turn)
        }
    };
    if let Some(reason) = stale {
        emit_discarded(daemon, session, reason);
    }
    if let Some(spec) = started {
        tracing::info!(
            session = %session.id,
            tokens = spec.tokens.round() as u64,
            first_kept = %spec.first_kept,
            "speculative compaction started"
        );
        daemon.emit(
            &session.id,
            &events::SpeculationStarted {
                session_id: &session.id,
                covers_through_entry_id: spec.covers_through.as_deref(),
                tokens: spec.tokens,
            },
        );
        let span = tracing::info_span!("speculation", session = %session.id);
        tokio::spawn(tracing::Instrument::instrument(
            speculate(daemon.clone(), session.clone(), spec.task),
            span,
        ));
    }
}

/// What `consider` announces and hands to the task.
struct Started {
    tokens: f64,
    first_kept: String,
    covers_through: Option<String>,
    task: Task,
}

/// Everything the background summarization needs.
struct Task {
    id: u64,
    prep: Arc<Preparation>,
    /// The branch, for hooks (only taken when a hook is registered).
    path: Option<Vec<Arc<Entry>>>,
    thinking_level: String,
    cancel: CancellationToken,
    started: Instant,
}

/// Prepares the branch as it is now and records the new speculation in the slot.
#[allow(clippy::too_many_arguments)]
fn start_locked(
    daemon: &Daemon,
    session: &Session,
    state: &SessionState,
    slot: &mut SlotState,
    basis: Basis,
    settings: &EffectiveSettings,
    turn: usize,
) -> Option<Started> {
    let prep = super::prepare::of_branch(state, settings).ok()?;
    let first_kept = prep.first_kept_entry_id.clone();
    let covers_through = state
        .branch
        .iter()
        .position(|&i| state.tree.entry(i).id.as_deref() == Some(first_kept.as_str()))
        .and_then(|p| p.checked_sub(1))
        .and_then(|p| state.tree.entry(state.branch[p]).id_owned());
    let previous_compaction = state
        .index
        .latest_compaction()
        .and_then(|l| state.tree.entry(state.branch[l.at]).id_owned());
    let path = daemon
        .has_hook::<events::SessionBeforeCompact>(&session.id)
        .then(|| state.branch.iter().map(|&i| state.tree.shared(i)).collect());
    let tokens = daemon.context_tokens(state, settings);
    let prep = Arc::new(prep);
    let cancel = daemon.run_token();
    slot.next_id += 1;
    slot.last_turn = Some(turn);
    slot.current = Some(Speculation {
        id: slot.next_id,
        basis,
        previous_compaction,
        prep: prep.clone(),
        covers_through: covers_through.clone(),
        leaf_at_start: state.tree.leaf_id().map(str::to_owned),
        tokens,
        started_at: ids::iso_timestamp(ids::now_ms()),
        foreign_moves: state.foreign_moves,
        cancel: cancel.clone(),
        done: CancellationToken::new(),
        ready: None,
    });
    Some(Started {
        tokens,
        first_kept,
        covers_through,
        task: Task {
            id: slot.next_id,
            prep,
            path,
            thinking_level: state.thinking_level.clone(),
            cancel,
            started: Instant::now(),
        },
    })
}

/// The background half: the one summarization step (`super::summarize`), exactly the request a
/// compaction at the start would have sent, the hooks asked with `speculative: true`. Retries
/// are only logged: the `summarization_retry_*` events describe compactions the agent waits for.
/// Without a hook registered when it started, none is asked here: one registered since is asked
/// at the install, as every hook the speculation did not ask.
async fn speculate(daemon: Arc<Daemon>, session: Arc<Session>, task: Task) {
    let Task {
        id,
        prep,
        path,
        thinking_level,
        cancel,
        started,
    } = task;
    let settings = daemon.session_settings(&session);
    let log_retry = |e: &RetryEvent| {
        if let RetryEvent::Scheduled { attempt, .. } = e {
            tracing::info!(session = %session.id, attempt, "speculative summarization retries");
        }
    };
    let hooks = match &path {
        Some(_) => Hooks::Ask {
            asked: &[],
            speculative: true,
        },
        None => Hooks::Skip,
    };
    let result = summarize::summarize(Request {
        daemon: &daemon,
        session: &session,
        settings: &settings,
        prep: &prep,
        path: path.as_deref().unwrap_or_default(),
        custom: None,
        reason: Reason::Threshold,
        will_retry: false,
        thinking_level: &thinking_level,
        hooks,
        on_retry: &log_retry,
        cancel: &cancel,
        made: None,
    })
    .await;
    let cost = match &result {
        Ok(made) => made.cost,
        Err(Stopped::Failed(_, cost)) => *cost,
        Err(Stopped::Vetoed) => Cost::FREE,
    };
    let ms = started.elapsed().as_millis() as u64;
    let mut slot = session.speculation.inner.lock();
    let current = slot.current.as_mut().filter(|s| s.id == id);
    let Some(spec) = current else {
        // Discarded meanwhile: what the calls spent was spent for nothing.
        slot.wasted.cost = slot.wasted.cost.plus(&cost);
        return;
    };
    let reason = match result {
        Ok(made) => {
            let summary_tokens =
                (crate::json::utf16_len(&made.outcome.summary) as f64 / 4.0).ceil();
            let covers_through = spec.covers_through.clone();
            let handoff_score = made
                .handoff
                .as_ref()
                .map(|h| h.report(&made.outcome.summary).score);
            spec.ready = Some(Ready {
                outcome: made.outcome,
                summarizer: made.summarizer,
                cost,
                asked: made.asked,
                handoff: made.handoff,
                handoff_score,
            });
            spec.done.cancel();
            drop(slot);
            tracing::info!(session = %session.id, ms, "speculative summary ready");
            daemon.emit(
                &session.id,
                &events::SpeculationReady {
                    session_id: &session.id,
                    covers_through_entry_id: covers_through.as_deref(),
                    summary_tokens: summary_tokens as u64,
                    ms,
                    handoff_score,
                },
            );
            return;
        }
        Err(Stopped::Vetoed) => DiscardReason::HookCancelled,
        Err(Stopped::Failed(CompactionFailure::Cancelled, _)) => DiscardReason::Aborted,
        Err(Stopped::Failed(f, _)) => {
            tracing::warn!(session = %session.id, error = %f.message(), "speculative summarization failed; the compaction will summarize normally");
            DiscardReason::Failed
        }
    };
    // What the failed calls spent is wasted too.
    slot.wasted.cost = slot.wasted.cost.plus(&cost);
    discard_locked(&mut slot);
    drop(slot);
    emit_discarded(&daemon, &session, reason);
}

/// A ready speculation taken for installation.
pub(super) struct Claimed {
    pub outcome: CompactionOutcome,
    pub prep: Arc<Preparation>,
    /// The compaction it built on (where the branch must still be when it is written).
    pub previous_compaction: Option<String>,
    pub summarizer: String,
    /// What its calls cost.
    pub cost: Cost,
    pub origin: Origin,
    /// The hook registrations asked about it when it was made.
    pub asked: Vec<u64>,
    /// What its handoff owes (`None`: `compaction.handoff` was off).
    pub handoff: Option<crate::handoff::Owed>,
}

/// Where a claimed speculation came from.
pub(super) struct Origin {
    started_at: String,
    covers_through: Option<String>,
    leaf_at_start: Option<String>,
}

/// Marks an outcome built from a speculation (`details.speculative`); `updated`: the summary
/// is an update made on top of the speculative one at install time.
pub(super) fn mark(outcome: &mut CompactionOutcome, origin: &Origin, updated: bool) {
    let mut marker = serde_json::json!({
        "startedAt": origin.started_at,
        "coversThroughEntryId": origin.covers_through,
    });
    if updated {
        marker["updatedOnTop"] = Value::Bool(true);
    }
    if outcome.details.is_null() {
        outcome.details = Value::Object(Default::default());
    }
    if let Some(d) = outcome.details.as_object_mut() {
        d.insert("speculative".into(), marker);
    }
}

/// The preparation of an update on top of a claimed speculation (see
/// [`prepare_on_top`]): the speculative compaction placed where it would have been installed,
/// at the leaf it started from (or, when that left the branch, right after its cut). `None`
/// when there is nothing more to summarize.
pub(super) fn on_top(
    path: &[Arc<Entry>],
    c: &Claimed,
    settings: &EffectiveSettings,
) -> Option<Preparation> {
    let position = |id: &str| path.iter().rposition(|e| e.id.as_deref() == Some(id));
    let at = c
        .origin
        .leaf_at_start
        .as_deref()
        .and_then(position)
        .or_else(|| position(&c.prep.first_kept_entry_id))?;
    let parent = path[at].id.as_deref();
    let virtual_entry = Entry::from_value(compaction_entry(
        "speculative",
        parent,
        &c.origin.started_at,
        &c.outcome,
    ));
    let refs: Vec<&Entry> = path.iter().map(|e| &**e).collect();
    super::prepare::on_top(c.prep.edits.version, &refs, at, &virtual_entry, settings)
}

/// The speculation a compaction due now installs: the ready one when it is still valid, after
/// waiting for a running one (rather than sending a second request). `None` when there is none
/// or it was discarded (the compaction then summarizes normally), or when `cancel` fired while
/// waiting. The claimed speculation leaves the slot; its outcome carries the context's size now
/// as `tokensBefore` (the installer marks it, see [`mark`]).
pub(super) async fn claim(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
    cancel: &CancellationToken,
) -> Option<Claimed> {
    loop {
        let wait = {
            let state = session.lock_state();
            let now = basis(daemon, &state, settings);
            let mut slot = session.speculation.inner.lock();
            let spec = slot.current.as_ref()?;
            if let Err(reason) = validate(spec, &state, &now) {
                discard_locked(&mut slot);
                drop(slot);
                drop(state);
                emit_discarded(daemon, session, reason);
                return None;
            }
            if spec.ready.is_some() {
                let spec = slot.current.take()?;
                let ready = spec.ready?;
                let tokens_before = plan_compaction(
                    state.rules,
                    &state.view(),
                    &state.index,
                    &settings.compaction,
                )
                .map_or(ready.outcome.tokens_before, |p| p.tokens_before);
                let mut outcome = ready.outcome;
                outcome.tokens_before = tokens_before;
                return Some(Claimed {
                    outcome,
                    prep: spec.prep,
                    previous_compaction: spec.previous_compaction,
                    summarizer: ready.summarizer,
                    cost: ready.cost,
                    asked: ready.asked,
                    handoff: ready.handoff,
                    origin: Origin {
                        started_at: spec.started_at,
                        covers_through: spec.covers_through,
                        leaf_at_start: spec.leaf_at_start,
                    },
                });
            }
            spec.done.clone()
        };
        tokio::select! {
            _ = wait.cancelled() => {}
            _ = cancel.cancelled() => return None,
        }
    }
}
