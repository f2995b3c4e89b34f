//! The one compaction runner. Every compaction goes through [`run`]: manual `compact`, the
//! automatic threshold and overflow paths, and the install of a speculative summary; they differ
//! only in their [`Job`] and in what their callers do before (the automatic checks) and after
//! (the thrash breaker, overflow retries).
//!
//! One run: announce `compaction_start` and install the abort token → take a ready speculation
//! when the job may use one (waiting for a running one rather than sending a second request),
//! updating it on top when the context would still be over the threshold with it → otherwise
//! snapshot the branch, prepare, ask the hooks and summarize (no lock held) → finish and write
//! the entry → announce the end and log.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::super::settings::EffectiveSettings;
use super::super::{Daemon, Session};
use super::announce::{self, Ended, RetryEvents};
use super::finish::{self, Anchor, Finished, Written};
use super::prepare;
use super::speculation::{self, DiscardReason};
use super::summarize::{self, Hooks, Request, Summarized};
use super::CompactionFailure;
use crate::compaction::prepare::Preparation;
use crate::rpc::errors::RpcError;
use crate::rpc::events::Reason;
use crate::rpc::results::CompactionResult;
use crate::session::Entry;

/// What a compaction works from, taken under the state lock: the preparation (planned from the
/// live branch index, O(kept tail)) and shared handles on the branch's entries, so nothing is
/// copied and the lock is released before any summarizing.
pub(super) struct Snapshot {
    pub path: Vec<Arc<Entry>>,
    /// The preparation, or Pi's refusal with (beyond Pi) its explanation.
    pub prep: Result<Preparation, prepare::Refusal>,
    pub thinking_level: String,
    pub leaf_id: Option<String>,
}

pub(super) fn snapshot(session: &Session, settings: &EffectiveSettings) -> Snapshot {
    let state = session.lock_state();
    let prep = prepare::of_branch(&state, settings);
    Snapshot {
        path: state.branch.iter().map(|&i| state.tree.shared(i)).collect(),
        prep,
        thinking_level: state.thinking_level.clone(),
        leaf_id: state.tree.leaf_id().map(str::to_owned),
    }
}

/// The snapshot's preparation to summarize from, or Pi's refusal.
fn prepared(snap: &Snapshot) -> Result<Preparation, CompactionFailure> {
    snap.prep
        .clone()
        .map_err(|(n, detail)| CompactionFailure::Nothing(n, detail))
}

/// Why and how a compaction runs.
pub(super) struct Job {
    pub reason: Reason,
    pub will_retry: bool,
    pub custom: Option<String>,
    /// `false` (`compact` with `write: false`): validate and return the result, append nothing.
    pub write: bool,
    /// A valid speculative summary may be installed (a threshold compaction, a manual one
    /// without instructions); overflow recovery and instructed compactions never use one.
    pub use_speculation: bool,
}

/// A compaction that wrote its entry (or, without `write`, would have).
pub(super) struct Completed {
    pub result: CompactionResult,
    /// The appended entry (`Value::Null` without `write`).
    pub entry: serde_json::Value,
}

/// A compaction that produced no entry.
pub(super) struct Failed {
    pub failure: CompactionFailure,
}

/// One pass's outcome before it is announced.
struct Pass {
    written: Written,
    /// A speculative summary was installed.
    speculative: bool,
}

/// One compaction while it runs: what it works with, and who wrote its summary (for the log
/// and the hooks' `fromExtension`).
struct Run<'a> {
    daemon: &'a Daemon,
    session: &'a Arc<Session>,
    settings: &'a EffectiveSettings,
    job: &'a Job,
    cancel: CancellationToken,
    from_extension: bool,
    summarizer: String,
}

/// Runs `job` (see the module doc). The caller holds the session's slot. `first` is a snapshot
/// the caller already took (the automatic path checks it has something to compact before
/// starting).
pub(super) async fn run(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: &EffectiveSettings,
    job: &Job,
    first: Option<Snapshot>,
) -> Result<Completed, Failed> {
    // Every line of the compaction (retries, fallbacks, ignored hook replies, the summary line)
    // carries the session and the reason.
    let span = tracing::info_span!("compaction", session = %session.id, reason = ?job.reason);
    run_job(daemon, session, settings, job, first)
        .instrument(span)
        .await
}

async fn run_job(
    daemon: &Daemon,
    session: &Arc<Session>,
    settings: &EffectiveSettings,
    job: &Job,
    first: Option<Snapshot>,
) -> Result<Completed, Failed> {
    let started = std::time::Instant::now();
    let mut run = Run {
        daemon,
        session,
        settings,
        job,
        cancel: announce::start(daemon, session, job.reason),
        from_extension: false,
        summarizer: String::from("none"),
    };
    let pass = run.pass(first).await;
    *session.running.lock() = None;
    let ended = Ended {
        reason: job.reason,
        will_retry: job.will_retry,
        from_extension: run.from_extension,
    };
    match pass {
        Ok(p) => {
            announce::log_compaction(
                session,
                job.reason,
                &run.summarizer,
                started,
                Ok((&p.written.result, p.speculative)),
            );
            ended.succeeded(
                daemon,
                session,
                &p.written.result,
                job.write.then_some(&p.written.entry),
            );
            Ok(Completed {
                result: p.written.result,
                entry: p.written.entry,
            })
        }
        Err(failure) => {
            announce::log_compaction(session, job.reason, &run.summarizer, started, Err(&failure));
            let aborted = matches!(failure, CompactionFailure::Cancelled);
            let error = (!aborted).then(|| {
                format!(
                    "{}{}",
                    announce::failure_prefix(job.reason),
                    failure.message()
                )
            });
            ended.failed(daemon, session, error.as_deref(), aborted);
            Err(Failed { failure })
        }
    }
}

impl Run<'_> {
    /// The session's threshold (`contextWindow − reserveTokens`), when it has a model.
    fn threshold(&self) -> Option<f64> {
        self.session
            .lock_state()
            .threshold(&self.settings.compaction)
    }

    /// The one summarization step for `prep` (see `summarize`), with the job's instructions
    /// and its retries reported as events.
    async fn summarize(
        &mut self,
        prep: &Preparation,
        path: &[Arc<Entry>],
        thinking_level: &str,
        hooks: Hooks<'_>,
        made: Option<Summarized>,
    ) -> Result<Summarized, CompactionFailure> {
        let events = RetryEvents {
            daemon: self.daemon,
            session_id: &self.session.id,
            reason: self.job.reason,
        };
        let on_retry = |e: &crate::summarizer::RetryEvent| events.emit(e);
        let made = summarize::summarize(Request {
            daemon: self.daemon,
            session: self.session,
            settings: self.settings,
            prep,
            path,
            custom: self.job.custom.as_deref(),
            reason: self.job.reason,
            will_retry: self.job.will_retry,
            thinking_level,
            hooks,
            on_retry: &on_retry,
            cancel: &self.cancel,
            made,
        })
        .await
        .map_err(|stopped| {
            if let summarize::Stopped::Failed(..) = stopped {
                // The failure's log line names the summarizer that failed.
                if let Ok(engine) = self.daemon.session_engine(self.session, self.settings) {
                    self.summarizer = engine.label();
                }
            }
            CompactionFailure::from(stopped)
        })?;
        self.summarizer = made.summarizer.clone();
        self.from_extension = made.from_extension;
        Ok(made)
    }

    /// The pass after `compaction_start`: a speculation when one is ready for this compaction,
    /// else prepare and the one summarization step; then finish and write.
    async fn pass(&mut self, first: Option<Snapshot>) -> Result<Pass, CompactionFailure> {
        if self.job.use_speculation {
            let claimed =
                speculation::claim(self.daemon, self.session, self.settings, &self.cancel).await;
            if let Some(ready) = claimed {
                return self.install(ready).await;
            }
        }
        if self.cancel.is_cancelled() {
            return Err(CompactionFailure::Cancelled);
        }
        let snap = match first {
            Some(s) => s,
            None => snapshot(self.session, self.settings),
        };
        let prep = prepared(&snap)?;
        let hooks = Hooks::Ask {
            asked: &[],
            speculative: false,
        };
        let made = self
            .summarize(&prep, &snap.path, &snap.thinking_level, hooks, None)
            .await?;
        if self.cancel.is_cancelled() {
            return Err(CompactionFailure::Cancelled);
        }
        let mut written = finish::write(
            self.session,
            Finished {
                outcome: made.outcome,
                prep: &prep,
                anchor: Anchor::Leaf(snap.leaf_id.as_deref()),
                file_list_limit: self.settings.file_list_limit,
                recall_footer: self.settings.recall_footer,
                write: self.job.write,
                handoff: made.handoff,
            },
        )?;
        written.result.cost = Some(made.cost);
        if self.job.write {
            // Another compaction now sits on the branch: a speculation made before it is void.
            speculation::revalidate(
                self.daemon,
                self.session,
                self.settings,
                DiscardReason::Compacted,
            );
        }
        Ok(Pass {
            written,
            speculative: false,
        })
    }

    /// Installs a claimed speculation. The hooks registered after it started are asked first
    /// (their cancel writes nothing; their own summary replaces it). When the tail grew so much
    /// meanwhile that the context would still be at or over the threshold with it, the summary
    /// is then updated on top of it (Pi's incremental update of the speculative summary,
    /// summarizing what lies between its cut and a cut made now), and that one entry is
    /// written: no request is ever made with a context known to be over the threshold, and the
    /// speculation's work is not thrown away.
    async fn install(&mut self, ready: speculation::Claimed) -> Result<Pass, CompactionFailure> {
        let (path, thinking_level) = {
            let state = self.session.lock_state();
            let path: Vec<Arc<Entry>> =
                state.branch.iter().map(|&i| state.tree.shared(i)).collect();
            (path, state.thinking_level.clone())
        };
        let (rules, system) = {
            let state = self.session.lock_state();
            (state.rules, state.current_system_message())
        };
        let speculative = Summarized {
            from_extension: ready.outcome.from_hook,
            outcome: ready.outcome.clone(),
            summarizer: ready.summarizer.clone(),
            cost: ready.cost,
            asked: Vec::new(),
            took: None,
            handoff: ready.handoff.clone(),
        };
        let hooks = Hooks::Ask {
            asked: &ready.asked,
            speculative: false,
        };
        let vetted = self
            .summarize(
                &ready.prep,
                &path,
                &thinking_level,
                hooks,
                Some(speculative),
            )
            .await?;
        let replaced = vetted.from_extension && !ready.outcome.from_hook;
        let over = !replaced
            && self.threshold().is_some_and(|t| {
                finish::estimate_after(&path, &vetted.outcome, rules, system.as_ref()) as f64 >= t
            });
        // The speculation's own calls, then those of an update on top.
        let mut cost = vetted.cost;
        let on_top = if over {
            speculation::on_top(&path, &ready, self.settings)
        } else {
            None
        };
        let (outcome, prep, handoff) = match on_top {
            Some(prep) => {
                tracing::info!(
                    session = %self.session.id,
                    "the speculative summary alone would leave the context over the threshold; updating it on top"
                );
                let made = self
                    .summarize(&prep, &path, &thinking_level, Hooks::Skip, None)
                    .await?;
                cost = cost.plus(&made.cost);
                let mut outcome = made.outcome;
                // The context it replaces is the session's now, not the virtual path's.
                outcome.tokens_before = ready.outcome.tokens_before;
                speculation::mark(&mut outcome, &ready.origin, true);
                (outcome, Arc::new(prep), made.handoff)
            }
            None => {
                let mut outcome = vetted.outcome;
                if !replaced {
                    speculation::mark(&mut outcome, &ready.origin, false);
                }
                (outcome, ready.prep.clone(), vetted.handoff)
            }
        };
        if self.cancel.is_cancelled() {
            return Err(CompactionFailure::Cancelled);
        }
        let mut written = finish::write(
            self.session,
            Finished {
                outcome,
                prep: &prep,
                anchor: Anchor::Cut {
                    first_kept: &prep.first_kept_entry_id,
                    previous: ready.previous_compaction.as_deref(),
                },
                file_list_limit: self.settings.file_list_limit,
                recall_footer: self.settings.recall_footer,
                write: self.job.write,
                handoff,
            },
        )?;
        written.result.cost = Some(cost);
        Ok(Pass {
            written,
            speculative: true,
        })
    }
}

/// Manual `compact` (compaction.md §8.2). Supersedes a running compaction of the session.
/// With `write` false the entry is not appended (and `session_compact` not sent): the caller
/// writes it, e.g. a Pi extension returning it from Pi's own `session_before_compact`. Without
/// custom instructions a ready speculative summary is used (beyond Pi).
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
    let _lease = super::super::shared_store::lease(daemon, session).await?;
    let settings = daemon.session_settings(session);
    let custom = custom.filter(|c| !c.is_empty());
    let job = Job {
        reason: Reason::Manual,
        will_retry: false,
        use_speculation: custom.is_none(),
        custom,
        write,
    };
    match run(daemon, session, &settings, &job, None).await {
        Ok(done) => {
            if write {
                // Beyond Pi: a manual compaction resumes paused automatic compaction.
                session.lock_state().thrash.reset();
            }
            Ok(done.result)
        }
        Err(f) => Err(f.failure.to_rpc()),
    }
}

/// Signals the running compaction or branch summary; true if one was running. A speculation is
/// left alone: it belongs to no request (`abortCompaction` discards it explicitly).
pub fn abort(session: &Session) -> bool {
    match session.running.lock().as_ref() {
        Some(t) => {
            t.cancel();
            true
        }
        None => false,
    }
}
