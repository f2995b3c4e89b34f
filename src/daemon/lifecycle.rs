//! Pi's compaction lifecycle as a service (compaction.md §8, overflow.md §5): manual `compact`,
//! the automatic threshold and overflow paths behind `checkCompaction`, and abort.
//!
//! Order of operations per compaction: wait for the session's compaction slot, snapshot the
//! branch under the state lock, prepare, ask hooks, summarize (no lock held), then re-take the
//! lock to append the entry. Appends are accepted meanwhile (beyond Pi, which makes the user
//! wait): they land after the leaf as usual, and the entry is written under the leaf at write
//! time, so they sit in the kept tail between `firstKeptEntryId` and the compaction. Only a
//! moved leaf (another process's write elsewhere in the tree) refuses the write.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::auto_check::{decide, Action, CheckFacts};
use super::settings::EffectiveSettings;
use super::{Daemon, Session};
use crate::compaction::prepare::{prepare_branch, NothingToCompact, Preparation};
use crate::compaction::summary::{compaction_entry, CompactionOutcome};
use crate::compactor::{generate, CompactError, SummaryEngine};
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::events::{self, Reason};
use crate::rpc::results::{
    AutoReason, CheckAction, CheckCompactionResult, CompactionResult, SessionEntry,
};
use crate::rpc::types::Phase;
use crate::session::{ids, Entry, EntryKind, Role};
use crate::summarizer::overflow::ReplyFacts;
use crate::summarizer::{RetryEvent, StopReason, Usage};

/// Why a compaction produced no entry.
#[derive(Debug, Clone)]
enum CompactionFailure {
    Nothing(NothingToCompact),
    Cancelled,
    Error(ErrorKind, String),
}

impl CompactionFailure {
    fn message(&self) -> String {
        match self {
            CompactionFailure::Nothing(n) => n.message().to_owned(),
            CompactionFailure::Cancelled => crate::compactor::CANCELLED.to_owned(),
            CompactionFailure::Error(_, m) => m.clone(),
        }
    }

    fn to_rpc(&self) -> RpcError {
        match self {
            CompactionFailure::Nothing(NothingToCompact::AlreadyCompacted) => {
                RpcError::new(ErrorKind::AlreadyCompacted, self.message())
            }
            CompactionFailure::Nothing(NothingToCompact::TooSmall) => {
                RpcError::new(ErrorKind::NothingToCompact, self.message())
            }
            CompactionFailure::Cancelled => RpcError::new(ErrorKind::Cancelled, self.message()),
            CompactionFailure::Error(kind, m) => RpcError::new(*kind, m.clone()),
        }
    }
}

/// What the compaction worked from, taken under the state lock: the preparation (planned from
/// the live branch index, O(kept tail)) and shared handles on the branch's entries, so nothing
/// is copied and the lock is released before any summarizing.
struct Snapshot {
    /// The session's settings, read once for the whole compaction.
    settings: EffectiveSettings,
    path: Vec<Arc<Entry>>,
    prep: Result<Preparation, NothingToCompact>,
    thinking_level: String,
    leaf_id: Option<String>,
}

fn snapshot(session: &Session, settings: EffectiveSettings) -> Snapshot {
    let state = session.state.lock();
    let view = state.view();
    let prep = prepare_branch(&view, &state.index, &settings.compaction);
    Snapshot {
        settings,
        path: state.branch.iter().map(|&i| state.tree.shared(i)).collect(),
        prep,
        thinking_level: state.thinking_level.clone(),
        leaf_id: state.tree.leaf_id().map(str::to_owned),
    }
}

/// The preparation to summarize from. Beyond Pi: a previous summary goes to the summarizer (and
/// hooks) without compactd's `## Pinned` section, which compactd puts back itself afterwards, so
/// the model never sees or rewrites the pins.
fn prepare(snap: &Snapshot) -> Result<Preparation, CompactionFailure> {
    let mut prep = snap.prep.clone().map_err(CompactionFailure::Nothing)?;
    if let Some(prev) = prep.plan.previous_summary.as_mut() {
        if prev.contains(super::pins::HEADING) {
            *prev = super::pins::strip_section(prev);
        }
    }
    Ok(prep)
}

/// The session's summarizer (the daemon's cached engine), or the auth failure compacting reports.
fn engine(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
) -> Result<Arc<SummaryEngine>, CompactionFailure> {
    daemon
        .session_engine(session, settings)
        .map_err(|e| CompactionFailure::Error(ErrorKind::Auth, e.message))
}

/// A hook-supplied compaction, validated (beyond Pi): its `firstKeptEntryId` must be on the
/// branch, else it counts as no result.
fn hook_outcome(v: &Value, snap: &Snapshot) -> Option<CompactionOutcome> {
    let c = v.get("compaction")?.as_object()?;
    let summary = c.get("summary")?.as_str()?.to_owned();
    let first_kept = c.get("firstKeptEntryId")?.as_str()?.to_owned();
    if !snap
        .path
        .iter()
        .any(|e| e.id.as_deref() == Some(first_kept.as_str()))
    {
        tracing::warn!(
            first_kept,
            "hook compaction's firstKeptEntryId is not on the branch; ignored"
        );
        return None;
    }
    let usage = c
        .get("usage")
        .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
    Some(CompactionOutcome {
        summary,
        first_kept_entry_id: first_kept,
        tokens_before: c.get("tokensBefore").and_then(Value::as_f64).unwrap_or(0.0),
        usage,
        details: c.get("details").cloned().unwrap_or(Value::Null),
        from_hook: true,
    })
}

/// Why and how a compaction runs.
#[derive(Clone, Copy)]
struct Job<'a> {
    reason: Reason,
    will_retry: bool,
    custom: Option<&'a str>,
    cancel: &'a CancellationToken,
    /// `false` (`compact` with `write: false`): validate and return the result, append nothing.
    write: bool,
}

/// Steps after "started": hook, summary, abort check, append. Returns (result, entry).
async fn run_started(
    daemon: &Daemon,
    session: &Session,
    snap: &Snapshot,
    prep: &Preparation,
    job: Job<'_>,
    from_extension: &mut bool,
) -> Result<(CompactionResult, Value), CompactionFailure> {
    let Job {
        reason,
        will_retry,
        custom,
        cancel,
        write,
    } = job;
    let mut outcome: Option<CompactionOutcome> = None;
    if daemon.has_hook(&session.id, "session_before_compact") {
        // Every message and entry is parsed from its line: off the async workers.
        let params = crate::cpu::blocking(|| {
            events::payload(&events::SessionBeforeCompact {
                session_id: &session.id,
                preparation: events::CompactionPreparation::of(prep),
                branch_entries: snap.path.iter().map(|e| SessionEntry(e.value())).collect(),
                custom_instructions: custom,
                reason,
                will_retry,
            })
        });
        let answers = daemon
            .ask_hooks(&session.id, "session_before_compact", params, cancel, |v| {
                v.get("cancel") == Some(&Value::Bool(true))
            })
            .await;
        for a in &answers {
            if a.get("cancel") == Some(&Value::Bool(true)) {
                return Err(CompactionFailure::Cancelled);
            }
            if let Some(o) = hook_outcome(a, snap) {
                outcome = Some(o);
                *from_extension = true;
            }
        }
    }
    let outcome = match outcome {
        Some(o) => o,
        None => {
            let engine = engine(daemon, session, &snap.settings)?;
            let events = EventSink {
                daemon,
                session_id: session.id.clone(),
            };
            let on_retry = |e: &RetryEvent| events.retry_event(e, reason);
            let result = generate(
                prep,
                &engine,
                custom,
                Some(&snap.thinking_level),
                cancel,
                &on_retry,
            )
            .await;
            result.map_err(|e| match e {
                CompactError::Cancelled => CompactionFailure::Cancelled,
                CompactError::NothingToCompact(m) => {
                    CompactionFailure::Error(ErrorKind::NothingToCompact, m.to_owned())
                }
                CompactError::Summarization(m) => {
                    CompactionFailure::Error(ErrorKind::SummarizationFailed, m)
                }
                e @ (CompactError::Store(_)
                | CompactError::Locked(_)
                | CompactError::ChangedMeanwhile(_)) => {
                    CompactionFailure::Error(ErrorKind::Io, e.to_string())
                }
            })?
        }
    };
    if cancel.is_cancelled() {
        return Err(CompactionFailure::Cancelled);
    }
    let mut outcome = outcome;
    let file_list_limit = snap.settings.file_list_limit;
    let mut state = session.state.lock();
    // Another process may have written to the file while the summarizer ran: take its lines in
    // first, so a moved leaf is noticed rather than written under.
    if let Err(e) = state.sync_with_file() {
        let kind = if e.kind == ErrorKind::FileBusy {
            ErrorKind::FileBusy
        } else {
            ErrorKind::FileChanged
        };
        return Err(CompactionFailure::Error(kind, e.message));
    }
    if !grew_from_snapshot(&state, snap) {
        return Err(CompactionFailure::Error(
            ErrorKind::LeafMoved,
            "the session changed during compaction".into(),
        ));
    }
    if !outcome.from_hook {
        // The pins live now (one may have been added while the summarizer ran).
        let (pins, pins_used) = super::pins::live_pins(&state);
        finish_summary(&mut outcome, prep, file_list_limit, &pins, pins_used);
    }
    if !write {
        drop(state);
        let estimated = estimate_after(&snap.path, &outcome);
        return Ok((CompactionResult::new(&outcome, estimated), Value::Null));
    }
    let idx = state
        .append_with(|id, parent, ts| compaction_entry(id, parent, ts, &outcome))
        .map_err(|e| CompactionFailure::Error(ErrorKind::Io, e.message))?;
    let entry = state.tree.entry(idx).value();
    state.rebuild_agent_context();
    let estimated = state.live.estimated_total();
    Ok((CompactionResult::new(&outcome, estimated), entry))
}

/// Beyond Pi, what compactd adds to a summary it generated, between the body and Pi's file
/// blocks: the pinned lane's `## Pinned` section (the pins verbatim, replacing any the model
/// echoed), and with `fileListLimit` the file blocks cut to the most recently touched paths
/// (`details` keeps the full lists). Without pins ever used and without a limit the summary
/// stays exactly Pi's.
fn finish_summary(
    outcome: &mut CompactionOutcome,
    prep: &Preparation,
    limit: Option<usize>,
    pins: &[super::pins::Pin],
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
    let full = crate::compaction::file_ops::format_file_operations(&read, &modified);
    let (base, has_blocks) = match outcome.summary.strip_suffix(&full) {
        Some(b) if !full.is_empty() => (b.to_owned(), true),
        _ => (outcome.summary.clone(), false),
    };
    let body = if pins_used {
        super::pins::strip_section(&base) + &super::pins::section(pins)
    } else {
        base
    };
    let Some(limit) = limit.filter(|_| has_blocks) else {
        outcome.summary = if has_blocks { body + &full } else { body };
        return;
    };
    // Most recent first: the turn prefix is later than the history, and later blocks later.
    let recent: Vec<&str> = prep
        .turn_prefix_messages
        .iter()
        .rev()
        .chain(prep.messages_to_summarize.iter().rev())
        .flat_map(|m| m.entry.file_ops.iter().rev().map(|(_, p)| &**p))
        .collect();
    let limited = crate::compaction::file_ops::format_file_operations_limited(
        &read, &modified, &recent, limit,
    );
    outcome.summary = format!("{body}{limited}");
}

/// Whether the branch only grew since the snapshot (beyond Pi: appends are accepted while the
/// summarizer runs): the snapshot's leaf is still on the current branch and nothing after it is
/// a compaction. Then the entry can be written under the leaf of now, and everything appended
/// meanwhile sits between `firstKeptEntryId` and the compaction, in its kept tail.
fn grew_from_snapshot(state: &super::session::SessionState, snap: &Snapshot) -> bool {
    let Some(leaf) = snap.leaf_id.as_deref() else {
        return state.tree.leaf_id().is_none();
    };
    let Some(at) = state
        .branch
        .iter()
        .rposition(|&i| state.tree.entry(i).id.as_deref() == Some(leaf))
    else {
        return false;
    };
    state.branch[at + 1..]
        .iter()
        .all(|&i| state.tree.entry(i).kind != EntryKind::Compaction)
}

/// The agent-context estimate had `outcome` been appended after `path` (for `write: false`,
/// where no entry exists to rebuild the context from).
fn estimate_after(path: &[Arc<Entry>], outcome: &CompactionOutcome) -> u64 {
    let parent = path.last().and_then(|e| e.id.as_deref());
    let ts = ids::iso_timestamp(ids::now_ms());
    let entry = Entry::from_value(compaction_entry("unwritten", parent, &ts, outcome));
    let mut refs: Vec<&Entry> = path.iter().map(|e| &**e).collect();
    refs.push(&entry);
    crate::compaction::BranchIndex::build(&refs).context_total()
}

struct EventSink<'a> {
    daemon: &'a Daemon,
    session_id: String,
}

impl EventSink<'_> {
    fn retry_event(&self, e: &RetryEvent, reason: Reason) {
        let session_id = self.session_id.as_str();
        let (event, params) = match e {
            RetryEvent::Scheduled {
                attempt,
                max_attempts,
                delay_ms,
                error_message,
            } => (
                "summarization_retry_scheduled",
                events::payload(&events::RetryScheduled {
                    session_id,
                    attempt: *attempt,
                    max_attempts: *max_attempts,
                    delay_ms: *delay_ms,
                    error_message,
                }),
            ),
            RetryEvent::AttemptStart => (
                "summarization_retry_attempt_start",
                events::payload(&events::RetryAttemptStart {
                    session_id,
                    source: events::RetrySource::Compaction,
                    reason,
                }),
            ),
            RetryEvent::Finished { .. } => (
                "summarization_retry_finished",
                events::payload(&events::RetryFinished { session_id }),
            ),
        };
        self.daemon.emit(session_id, event, params);
    }
}

/// How a compaction that started ended, told to subscribers (`compaction_end`) and to hooks
/// (`session_compact` / `session_compact_failed`) in Pi's order. Manual and automatic
/// compactions end the same way.
struct Ended {
    reason: Reason,
    will_retry: bool,
    from_extension: bool,
}

impl Ended {
    /// Success: `session_compact` when an entry was written, then `compaction_end` with the
    /// result.
    fn succeeded(
        &self,
        daemon: &Daemon,
        session: &Session,
        result: &CompactionResult,
        entry: Option<&Value>,
    ) {
        if let Some(entry) = entry {
            self.compact_notice(daemon, session, entry);
        }
        self.end(daemon, session, Some(result), false, None);
    }

    /// No entry: `compaction_end` without a result, then `session_compact_failed`.
    fn failed(&self, daemon: &Daemon, session: &Session, error: Option<&str>, aborted: bool) {
        self.end(daemon, session, None, aborted, error);
        daemon.notify_hooks(
            &session.id,
            "session_compact_failed",
            events::payload(&events::SessionCompactFailed {
                session_id: &session.id,
                reason: self.reason,
                error_message: error,
                aborted,
                will_retry: false,
                from_extension: self.from_extension,
            }),
        );
    }

    /// `compaction_end`; only a success may retry (`willRetry`).
    fn end(
        &self,
        daemon: &Daemon,
        session: &Session,
        result: Option<&CompactionResult>,
        aborted: bool,
        error: Option<&str>,
    ) {
        daemon.emit(
            &session.id,
            "compaction_end",
            events::payload(&events::CompactionEnd {
                session_id: &session.id,
                reason: self.reason,
                result,
                aborted,
                will_retry: self.will_retry && result.is_some(),
                error_message: error,
            }),
        );
    }

    /// `session_compact`'s entry: the *first* compaction in the file with this summary (E16).
    fn compact_notice(&self, daemon: &Daemon, session: &Session, entry: &Value) {
        let summary = entry.get("summary").cloned();
        let first = {
            let state = session.state.lock();
            state
                .tree
                .entries()
                .iter()
                .find(|e| e.kind == EntryKind::Compaction && e.get("summary") == summary.as_ref())
                .map(|e| e.value())
                .unwrap_or_else(|| entry.clone())
        };
        daemon.notify_hooks(
            &session.id,
            "session_compact",
            events::payload(&events::SessionCompact {
                session_id: &session.id,
                compaction_entry: events::CompactionEntry(first),
                from_extension: self.from_extension,
                reason: self.reason,
                will_retry: self.will_retry,
            }),
        );
    }
}

/// Announces a compaction that starts now and installs its abort token.
fn start(daemon: &Daemon, session: &Session, reason: Reason) -> CancellationToken {
    let token = daemon.run_token();
    *session.running.lock() = Some(token.clone());
    daemon.emit(
        &session.id,
        "compaction_start",
        events::payload(&events::CompactionStart {
            session_id: &session.id,
            reason,
        }),
    );
    token
}

/// One log line per finished compaction: reason, tokens, summarizer and duration.
fn log_compaction(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
    reason: &str,
    started: std::time::Instant,
    outcome: Result<&CompactionResult, &str>,
    from_extension: bool,
) {
    let summarizer = if from_extension {
        "hook".to_owned()
    } else {
        match daemon.session_engine(session, settings).as_deref() {
            Ok(SummaryEngine::Llm { model, .. }) => format!("{}/{}", model.provider, model.id),
            Ok(SummaryEngine::Extractive { .. }) => "extractive".to_owned(),
            Err(_) => "none".to_owned(),
        }
    };
    let ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(r) => tracing::info!(
            session = %session.id,
            path = %session.path.display(),
            reason,
            tokens_before = r.tokens_before,
            tokens_after = r.estimated_tokens_after,
            summarizer,
            duration_ms = ms,
            "compacted"
        ),
        Err(e) => tracing::warn!(
            session = %session.id,
            path = %session.path.display(),
            reason,
            summarizer,
            duration_ms = ms,
            error = e,
            "compaction did not complete"
        ),
    }
}

/// Manual `compact` (compaction.md §8.2). Supersedes a running compaction of the session.
/// With `write` false the entry is not appended (and `session_compact` not sent): the caller
/// writes it, e.g. a Pi extension returning it from Pi's own `session_before_compact`.
pub async fn compact(
    daemon: &Daemon,
    session: &Arc<Session>,
    custom: Option<String>,
    write: bool,
) -> Result<CompactionResult, RpcError> {
    if let Some(t) = session.running.lock().as_ref() {
        t.cancel();
    }
    let _slot = session.slot.lock().await;
    let started = std::time::Instant::now();
    let cancel = start(daemon, session, Reason::Manual);
    let custom = custom.filter(|c| !c.is_empty());
    let mut from_extension = false;
    let snap = snapshot(session, daemon.session_settings(session));
    let outcome = match prepare(&snap) {
        Ok(prep) => {
            run_started(
                daemon,
                session,
                &snap,
                &prep,
                Job {
                    reason: Reason::Manual,
                    will_retry: false,
                    custom: custom.as_deref(),
                    cancel: &cancel,
                    write,
                },
                &mut from_extension,
            )
            .await
        }
        Err(f) => Err(f),
    };
    *session.running.lock() = None;
    let log_error = outcome.as_ref().err().map(CompactionFailure::message);
    log_compaction(
        daemon,
        session,
        &snap.settings,
        "manual",
        started,
        outcome
            .as_ref()
            .map(|(r, _)| r)
            .map_err(|_| log_error.as_deref().unwrap_or("")),
        from_extension,
    );
    let ended = Ended {
        reason: Reason::Manual,
        will_retry: false,
        from_extension,
    };
    match outcome {
        Ok((result, entry)) => {
            if write {
                // Beyond Pi: a manual compaction resumes paused automatic compaction.
                session.state.lock().thrash.reset();
            }
            ended.succeeded(daemon, session, &result, write.then_some(&entry));
            Ok(result)
        }
        Err(f) => {
            let aborted = matches!(f, CompactionFailure::Cancelled);
            let error = (!aborted).then(|| format!("Compaction failed: {}", f.message()));
            ended.failed(daemon, session, error.as_deref(), aborted);
            Err(f.to_rpc())
        }
    }
}

/// `abortCompaction`: signals the running compaction/branch summary; true if one was running.
pub fn abort(session: &Session) -> bool {
    match session.running.lock().as_ref() {
        Some(t) => {
            t.cancel();
            true
        }
        None => false,
    }
}

/// `_runAutoCompaction(reason, willRetry)` (compaction.md §8.5), with the settings the check
/// read. The caller holds the slot.
async fn run_auto(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: EffectiveSettings,
    auto: AutoReason,
    will_retry: bool,
) -> CheckCompactionResult {
    let reason = Reason::from(auto);
    // `reason` is reported only for outcomes of a compaction that started.
    let mut out = CheckCompactionResult::default();
    if session.state.lock().model.is_none() {
        return out;
    }
    if engine(daemon, session, &settings).is_err() {
        return out; // Pi: an auth failure here is silent.
    }
    // Beyond Pi: the thrash breaker (never for overflow recovery).
    let breaker = auto == AutoReason::Threshold
        && settings.compaction.enabled
        && settings.max_ineffective_compactions > 0;
    if breaker {
        let suppressed = {
            let mut state = session.state.lock();
            state
                .thrash
                .suppress(&settings.merged)
                .map(|why| (why, state.thrash.is_paused()))
        };
        if let Some((why, paused)) = suppressed {
            if let Some(why) = why {
                daemon.emit(
                    &session.id,
                    "compaction_suppressed",
                    super::thrash::event(&session.id, &why, paused),
                );
            }
            return out;
        }
    }
    let snap = snapshot(session, settings);
    let Ok(prep) = prepare(&snap) else {
        return out;
    };
    out.reason = Some(auto);
    let started = std::time::Instant::now();
    let cancel = start(daemon, session, reason);
    let mut from_extension = false;
    let r = run_started(
        daemon,
        session,
        &snap,
        &prep,
        Job {
            reason,
            will_retry,
            custom: None,
            cancel: &cancel,
            write: true,
        },
        &mut from_extension,
    )
    .await;
    *session.running.lock() = None;
    let log_error = r.as_ref().err().map(CompactionFailure::message);
    log_compaction(
        daemon,
        session,
        &snap.settings,
        reason.as_str(),
        started,
        r.as_ref()
            .map(|(v, _)| v)
            .map_err(|_| log_error.as_deref().unwrap_or("")),
        from_extension,
    );
    let ended = Ended {
        reason,
        will_retry,
        from_extension,
    };
    match r {
        Ok((result, entry)) => {
            ended.succeeded(daemon, session, &result, Some(&entry));
            if will_retry {
                session.state.lock().drop_trailing_assistant(true);
            }
            if breaker {
                let mut state = session.state.lock();
                let pinned = super::pins::section(&super::pins::live_pins(&state).0);
                let summary = entry.get("summary").and_then(Value::as_str).unwrap_or("");
                let est = |t: &str| (crate::json::utf16_len(t) as f64 / 4.0).ceil();
                state.thrash.compacted(super::thrash::Pending {
                    tokens_before: result.tokens_before,
                    summary_tokens: est(summary),
                    pinned_tokens: est(&pinned),
                });
            }
            out.action = CheckAction::Compacted;
            out.will_retry = will_retry;
            out.context_changed = true;
            out.result = Some(result);
        }
        Err(CompactionFailure::Cancelled) => {
            ended.failed(daemon, session, None, true);
            out.action = CheckAction::Aborted;
        }
        Err(f) => {
            let prefix = if auto == AutoReason::Overflow {
                "Context overflow recovery failed: "
            } else {
                "Auto-compaction failed: "
            };
            let msg = format!("{prefix}{}", f.message());
            ended.failed(daemon, session, Some(&msg), false);
            out.action = CheckAction::Failed;
            out.error_message = Some(msg);
        }
    }
    out
}

/// `_checkCompaction(msg, skipAbortedCheck)` (compaction.md §8.4): the facts gathered here,
/// the decision [`decide`]'s, carried out here.
async fn check_message(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: EffectiveSettings,
    msg: &Value,
    skip_aborted: bool,
) -> CheckCompactionResult {
    let stop = msg.get("stopReason").and_then(Value::as_str).unwrap_or("");
    let usage = msg.get("usage");
    let (action, window) = {
        let state = session.state.lock();
        let model = state.model.as_ref();
        let estimate = state.live.estimate();
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
            window: model.map_or(0, |m| m.context_window),
            model_max_tokens: model.map_or(0, |m| m.max_tokens),
            overflow_recovery_attempted: state.overflow_recovery_attempted,
            usage_tokens: usage
                .and_then(Value::as_object)
                .map_or(0.0, crate::compaction::tokens::calculate_context_tokens),
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
                let mut state = session.state.lock();
                state.overflow_recovery_attempted = true;
                state.drop_trailing_assistant(false)
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
            observe_size(session, &settings, tokens, window);
            if compact {
                run_auto(daemon, session, settings, AutoReason::Threshold, false).await
            } else {
                CheckCompactionResult::default()
            }
        }
    }
}

/// Beyond Pi: hands the thrash breaker a context size reported after the latest compaction.
fn observe_size(
    session: &Session,
    settings: &super::settings::EffectiveSettings,
    tokens: f64,
    window: i64,
) {
    if settings.max_ineffective_compactions == 0 || window <= 0 {
        return;
    }
    let threshold = window as f64 - settings.compaction.reserve_tokens as f64;
    session.state.lock().thrash.observe(
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
        let mut state = session.state.lock();
        if !std::mem::take(&mut state.model_switch_pending) {
            return None;
        }
        (
            state.model.as_ref().map_or(0, |m| m.context_window),
            state.live.estimate().tokens,
        )
    };
    if window <= 0
        || !crate::compaction::tokens::should_compact(tokens, window, &settings.compaction)
    {
        return None;
    }
    let out = run_auto(
        daemon,
        session,
        settings.clone(),
        AutoReason::Threshold,
        false,
    )
    .await;
    (out.action != CheckAction::None).then_some(out)
}

fn num(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(0.0)
}

/// `checkCompaction {phase}`: waits for a running compaction first.
pub async fn check(daemon: &Daemon, session: &Arc<Session>, phase: Phase) -> CheckCompactionResult {
    let _slot = session.slot.lock().await;
    // The settings files are read once per check.
    let settings = daemon.session_settings(session);
    if let Some(out) = check_model_switch(daemon, session, &settings).await {
        return out;
    }
    match phase {
        Phase::MidRun => {
            let (model_window, estimate) = {
                let state = session.state.lock();
                (
                    state.model.as_ref().map(|m| m.context_window),
                    state.live.estimate(),
                )
            };
            let Some(window) = model_window.filter(|w| *w > 0) else {
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
            let last = session.state.lock().last_assistant();
            match last {
                Some(msg) => {
                    check_message(daemon, session, settings, &msg, phase == Phase::PostRun).await
                }
                None => CheckCompactionResult::default(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `compact` (with `write: false`, so it can repeat) on a copy of a conformance session,
    /// opened in a daemon with the default (extractive) configuration.
    #[tokio::test]
    async fn compactions_share_the_one_cached_engine() {
        let test = "compactions_share_the_one_cached_engine";
        let Some(fixture) =
            crate::test_fixtures::case_file(test, "005-medium-basic", "session.jsonl")
        else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, std::fs::read(&fixture).expect("read fixture")).expect("copy");
        let daemon = Daemon::new(crate::config::Config::default());
        // Pi's defaults whatever settings files the machine has.
        *daemon.global_overrides.lock() =
            Some(json!({"enabled": true, "reserveTokens": 16384, "keepRecentTokens": 20000}));
        let (conn, _events) = daemon.connect();
        let limits = crate::store::Limits::default();
        let (session, _) = daemon
            .open_or_insert(&path, &conn, || {
                let (tree, _, stamp) = crate::store::load_with(&path, true, &limits)
                    .map_err(super::super::session::store_error)?;
                let mut state = super::super::session::SessionState::loaded(
                    path.clone(),
                    tree,
                    None,
                    "off",
                    None,
                );
                state.stamp = Some(stamp);
                Ok(state)
            })
            .expect("open");
        let mut engines = Vec::new();
        for _ in 0..2 {
            let result = compact(&daemon, &session, None, false).await;
            assert!(result.is_ok(), "{:?}", result.err().map(|e| e.message));
            let cache = daemon.engines.lock();
            assert_eq!(cache.len(), 1, "the compactions built one engine");
            engines.extend(cache.values().cloned());
        }
        assert!(Arc::ptr_eq(&engines[0], &engines[1]), "and both used it");
    }
}
