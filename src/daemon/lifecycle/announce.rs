//! Telling the world about a compaction: `compaction_start` and the abort token it installs,
//! the `summarization_retry_*` events of its calls, how it ended (`compaction_end` to
//! subscribers, `session_compact` / `session_compact_failed` to hooks, in Pi's order), and the
//! one log line per compaction. Manual, automatic and speculative-install compactions all
//! announce themselves here, so their events cannot drift apart.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::super::{Daemon, Session};
use super::CompactionFailure;
use crate::rpc::events::{self, Reason};
use crate::rpc::results::CompactionResult;
use crate::session::EntryKind;
use crate::summarizer::RetryEvent;

/// Announces a compaction that starts now and installs its abort token.
pub(super) fn start(daemon: &Daemon, session: &Session, reason: Reason) -> CancellationToken {
    let token = daemon.run_token();
    *session.running.lock() = Some(token.clone());
    daemon.emit(
        &session.id,
        &events::CompactionStart {
            session_id: &session.id,
            reason,
        },
    );
    token
}

/// The `summarization_retry_*` events of one compaction's calls.
pub(super) struct RetryEvents<'a> {
    pub daemon: &'a Daemon,
    pub session_id: &'a str,
    pub reason: Reason,
}

impl RetryEvents<'_> {
    pub fn emit(&self, e: &RetryEvent) {
        let session_id = self.session_id;
        match e {
            RetryEvent::Scheduled {
                attempt,
                max_attempts,
                delay_ms,
                error_message,
            } => self.daemon.emit(
                session_id,
                &events::RetryScheduled {
                    session_id,
                    attempt: *attempt,
                    max_attempts: *max_attempts,
                    delay_ms: *delay_ms,
                    error_message,
                },
            ),
            RetryEvent::AttemptStart => self.daemon.emit(
                session_id,
                &events::RetryAttemptStart {
                    session_id,
                    source: events::RetrySource::Compaction,
                    reason: self.reason,
                },
            ),
            RetryEvent::Finished { .. } => self
                .daemon
                .emit(session_id, &events::RetryFinished { session_id }),
        }
    }
}

/// How a compaction that started ended, told to subscribers (`compaction_end`) and to hooks
/// (`session_compact` / `session_compact_failed`) in Pi's order.
pub(super) struct Ended {
    pub reason: Reason,
    pub will_retry: bool,
    pub from_extension: bool,
}

impl Ended {
    /// Success: `session_compact` when an entry was written, then `compaction_end` with the
    /// result.
    pub fn succeeded(
        &self,
        daemon: &Daemon,
        session: &Session,
        result: &CompactionResult,
        entry: Option<&Value>,
    ) {
        if let Some(entry) = entry {
            self.compact_notice(daemon, session, entry, result.handoff.as_ref());
        }
        self.end(daemon, session, Some(result), false, None);
    }

    /// No entry: `compaction_end` without a result, then `session_compact_failed`.
    pub fn failed(&self, daemon: &Daemon, session: &Session, error: Option<&str>, aborted: bool) {
        self.end(daemon, session, None, aborted, error);
        daemon.notify_hooks(
            &session.id,
            &events::SessionCompactFailed {
                session_id: &session.id,
                reason: self.reason,
                error_message: error,
                aborted,
                will_retry: false,
                from_extension: self.from_extension,
            },
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
            &events::CompactionEnd {
                session_id: &session.id,
                reason: self.reason,
                result: result.map(std::borrow::Cow::Borrowed),
                aborted,
                will_retry: self.will_retry && result.is_some(),
                error_message: error,
            },
        );
    }

    /// `session_compact`'s entry: the *first* compaction in the file with this summary (E16).
    fn compact_notice(
        &self,
        daemon: &Daemon,
        session: &Session,
        entry: &Value,
        handoff: Option<&crate::handoff::Report>,
    ) {
        let summary = entry.get("summary").cloned();
        let first = {
            let state = session.lock_state();
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
            &events::SessionCompact {
                session_id: &session.id,
                compaction_entry: events::CompactionEntry(first),
                from_extension: self.from_extension,
                reason: self.reason,
                will_retry: self.will_retry,
                handoff: handoff.cloned(),
            },
        );
    }
}

/// Pi's prefix of a failed compaction's error message, by why it ran.
pub(super) fn failure_prefix(reason: Reason) -> &'static str {
    match reason {
        Reason::Manual => "Compaction failed: ",
        Reason::Overflow => "Context overflow recovery failed: ",
        Reason::Threshold | Reason::Idle => "Auto-compaction failed: ",
    }
}

/// How the log line states a handoff check: `0.857 (6/7 carried, 1 repaired)`, `off`.
fn handoff_note(report: Option<&crate::handoff::Report>) -> String {
    let Some(r) = report else {
        return "off".to_owned();
    };
    let owed = r.owed();
    let carried = owed - r.missing.len();
    let mut note = format!("{} ({carried}/{owed} carried", r.score);
    if let Some(first) = r.first_score {
        note.push_str(&format!(", {first} before the retry"));
    }
    if r.repaired > 0 {
        note.push_str(&format!(", {} repaired", r.repaired));
    }
    note.push(')');
    note
}

/// One log line per finished compaction: reason, tokens (whole numbers), summarizer, duration,
/// the handoff check, and whether a speculation was installed. A refusal (nothing to compact, an abort) is not a
/// problem of the daemon's: it is logged at INFO with its reason; only real failures warn.
pub(super) fn log_compaction(
    session: &Session,
    reason: Reason,
    summarizer: &str,
    started: std::time::Instant,
    outcome: Result<(&CompactionResult, bool), &CompactionFailure>,
) {
    let ms = started.elapsed().as_millis() as u64;
    let reason = reason.as_str();
    match outcome {
        Ok((r, speculative)) => tracing::info!(
            session = %session.id,
            path = %session.location,
            reason,
            tokens_before = r.tokens_before.round() as u64,
            tokens_after = r.estimated_tokens_after,
            summarizer,
            speculative,
            duration_ms = ms,
            handoff = %handoff_note(r.handoff.as_ref()),
            "compacted"
        ),
        Err(f) if f.is_refusal() => tracing::info!(
            session = %session.id,
            path = %session.location,
            reason,
            summarizer,
            duration_ms = ms,
            why = %f.message(),
            hint = %match f {
                CompactionFailure::Nothing(_, detail) => detail.hint.as_str(),
                _ => "",
            },
            "compaction refused"
        ),
        Err(f) => tracing::warn!(
            session = %session.id,
            path = %session.location,
            reason,
            summarizer,
            duration_ms = ms,
            error = %f.message(),
            "compaction failed"
        ),
    }
}
