//! The one summarization step: a preparation in, a summary with its cost out. Every summary the
//! daemon writes for a compaction comes from [`summarize`]: a manual or automatic compaction
//! (`runner`), a speculation in the background (`speculation`), and the install of a
//! speculation (the hooks it did not ask, then an update on top when the tail outgrew it).
//! What a summary gets afterwards (pins, file-list limit, recall footer) and its write are
//! `finish`'s, shared with tree navigation's branch summaries.
//!
//! When the `session_before_compact` hooks are asked, on every path:
//! - a compaction (manual, threshold, overflow): once, after `compaction_start`, before the
//!   summarizer; `speculative: false`;
//! - a speculation: once, when it starts, before its summarizer; `speculative: true`;
//! - the install of a speculation: the registrations that were not asked when it started (a
//!   hook registered meanwhile) are asked, with the speculation's preparation and
//!   `speculative: false`, before anything is written. Their cancel writes no compaction;
//!   their own summary replaces the speculative one;
//! - an update made on top of a speculation at install: not again (the hooks just answered for
//!   this compaction).
//!
//! A hook's cancel or its own summary always wins over the summarizer; the last valid summary
//! supplied wins, as in Pi.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::super::settings::EffectiveSettings;
use super::super::{Daemon, Session};
use super::announce;
use super::hooks::{self, Question, Verdict};
use super::CompactionFailure;
use crate::accounting::Cost;
use crate::compaction::prepare::Preparation;
use crate::compaction::summary::CompactionOutcome;
use crate::compactor::{generate, CompactError, Meter, OnRetry, SummaryEngine};
use crate::rpc::events::Reason;
use crate::session::Entry;

/// Whether and how the hooks are asked.
pub(super) enum Hooks<'a> {
    /// Ask every registration not in `asked`.
    Ask { asked: &'a [u64], speculative: bool },
    /// Not asked (an update on top, whose compaction the hooks just answered for).
    Skip,
}

/// One summary to make.
pub(super) struct Request<'a> {
    pub daemon: &'a Daemon,
    pub session: &'a Session,
    pub settings: &'a EffectiveSettings,
    pub prep: &'a Preparation,
    /// The branch the preparation was made from (for the hooks, and to check a hook's cut).
    pub path: &'a [Arc<Entry>],
    pub custom: Option<&'a str>,
    pub reason: Reason,
    pub will_retry: bool,
    pub thinking_level: &'a str,
    pub hooks: Hooks<'a>,
    /// The summarizer's retries, as the caller reports them.
    pub on_retry: &'a OnRetry<'a>,
    pub cancel: &'a CancellationToken,
    /// A summary made already (a speculation's, at its install): the hooks it was not asked
    /// about are asked, and when none objects it is the result; the summarizer is not called.
    pub made: Option<Summarized>,
}

/// A summary made.
pub(super) struct Summarized {
    pub outcome: CompactionOutcome,
    /// Who wrote it, as the log names it.
    pub summarizer: String,
    /// A hook supplied it (Pi's `fromExtension`).
    pub from_extension: bool,
    /// What its calls cost: priced at the engine's model; the extractive engine is free; a
    /// hook's own summary reports its own usage, at a price compactd does not know.
    pub cost: Cost,
    /// The hook registrations asked for it (by `seq`).
    pub asked: Vec<u64>,
}

/// Why no summary was made.
pub(super) enum Stopped {
    /// A hook cancelled it.
    Vetoed,
    /// The summarizer failed, or the run was aborted; with what its calls spent meanwhile.
    Failed(CompactionFailure, Cost),
}

impl From<Stopped> for CompactionFailure {
    fn from(s: Stopped) -> CompactionFailure {
        match s {
            Stopped::Vetoed => CompactionFailure::Cancelled,
            Stopped::Failed(f, _) => f,
        }
    }
}

/// The protocol's failure for a summarizer's error.
fn summarizer_failure(e: CompactError) -> CompactionFailure {
    use crate::rpc::errors::ErrorKind;
    match e {
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
    }
}

/// The session's summarizer (the daemon's cached engine), or the auth failure compacting reports.
pub(super) fn engine(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
) -> Result<Arc<SummaryEngine>, CompactionFailure> {
    daemon
        .session_engine(session, settings)
        .map_err(|e| CompactionFailure::Error(crate::rpc::errors::ErrorKind::Auth, e.message))
}

/// Asks the hooks (see the module doc), then, unless one cancelled or supplied the summary,
/// the session's engine with its retries; prices what the calls cost.
pub(super) async fn summarize(r: Request<'_>) -> Result<Summarized, Stopped> {
    let (verdict, asked) = match r.hooks {
        Hooks::Ask { asked, speculative } => {
            let answered = hooks::ask(
                r.daemon,
                Question {
                    session_id: &r.session.id,
                    prep: r.prep,
                    path: r.path,
                    custom: r.custom,
                    reason: r.reason,
                    will_retry: r.will_retry,
                    speculative,
                    asked,
                },
                r.cancel,
            )
            .await;
            (answered.verdict, answered.asked)
        }
        Hooks::Skip => (Verdict::Proceed, Vec::new()),
    };
    match verdict {
        Verdict::Cancel => Err(Stopped::Vetoed),
        Verdict::Proceed if r.made.is_some() => {
            let mut made = r.made.ok_or(Stopped::Vetoed)?;
            made.asked.extend(asked);
            Ok(made)
        }
        Verdict::Supplied(o) => Ok(Summarized {
            cost: o.usage.unwrap_or_default().cost(None),
            outcome: *o,
            summarizer: announce::summarizer_name(None, true),
            from_extension: true,
            asked,
        }),
        Verdict::Proceed => {
            if r.cancel.is_cancelled() {
                return Err(Stopped::Failed(CompactionFailure::Cancelled, Cost::FREE));
            }
            let engine = engine(r.daemon, r.session, r.settings)
                .map_err(|f| Stopped::Failed(f, Cost::FREE))?;
            let meter = Meter::default();
            let generated = generate(
                r.prep,
                &engine,
                r.custom,
                Some(r.thinking_level),
                r.cancel,
                r.on_retry,
                &meter,
            )
            .await;
            // What the calls spent counts even when they failed (a discarded speculation's
            // waste, a failed compaction's spend).
            let cost = r.daemon.config.summarizer_cost(&engine, &meter.total());
            match generated {
                Ok(outcome) => Ok(Summarized {
                    outcome,
                    summarizer: announce::summarizer_name(Some(&engine), false),
                    from_extension: false,
                    cost,
                    asked,
                }),
                Err(e) => Err(Stopped::Failed(summarizer_failure(e), cost)),
            }
        }
    }
}
