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

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::super::settings::EffectiveSettings;
use super::super::{Daemon, Session};
use super::hooks::{self, Question};
use super::CompactionFailure;
use crate::accounting::Cost;
use crate::compaction::prepare::Preparation;
pub(super) use crate::compactor::step::Summarized;
use crate::compactor::step::{self, Verdict};
use crate::compactor::{CompactError, OnRetry};
use crate::rpc::errors::ErrorKind;
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
    match e {
        CompactError::Cancelled => CompactionFailure::Cancelled,
        CompactError::NothingToCompact(m) => {
            CompactionFailure::Error(ErrorKind::NothingToCompact, m.to_owned())
        }
        CompactError::Summarization(m) => {
            CompactionFailure::Error(ErrorKind::SummarizationFailed, m)
        }
    }
}

/// The session's summarizer (the daemon's cached engine), or the auth failure compacting reports.
pub(super) fn engine(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
) -> Result<Arc<crate::compactor::SummaryEngine>, CompactionFailure> {
    daemon
        .session_engine(session, settings)
        .map_err(|e| CompactionFailure::Error(ErrorKind::Auth, e.message))
}

/// The session's `session_before_compact` hooks, as the step asks them.
struct SessionHooks<'a> {
    daemon: &'a Daemon,
    session_id: &'a str,
    path: &'a [Arc<Entry>],
    custom: Option<&'a str>,
    reason: Reason,
    will_retry: bool,
    speculative: bool,
    asked: &'a [u64],
    cancel: &'a CancellationToken,
}

impl step::Hooks for SessionHooks<'_> {
    fn ask<'a>(&'a self, prep: &'a Preparation) -> BoxFuture<'a, (Verdict, Vec<u64>)> {
        Box::pin(async move {
            let answered = hooks::ask(
                self.daemon,
                Question {
                    session_id: self.session_id,
                    prep,
                    path: self.path,
                    custom: self.custom,
                    reason: self.reason,
                    will_retry: self.will_retry,
                    speculative: self.speculative,
                    asked: self.asked,
                },
                self.cancel,
            )
            .await;
            (answered.verdict, answered.asked)
        })
    }
}

/// Beyond Pi: a summary compactd's engine wrote names it in `details.summarizer`
/// (`provider/model`, or `extractive`, which the extractive engine writes itself), so a
/// compaction says who wrote it wherever it is read. A hook's summary keeps its own details.
fn named(mut made: Summarized) -> Summarized {
    if made.from_extension {
        return made;
    }
    if made.outcome.details.is_null() {
        made.outcome.details = serde_json::Value::Object(Default::default());
    }
    if let Some(d) = made.outcome.details.as_object_mut() {
        d.entry("summarizer")
            .or_insert_with(|| serde_json::Value::from(made.summarizer.clone()));
    }
    made
}

/// The id of the compaction entry whose summary `prep` updates, when it is on `path` (an update
/// on top of a speculation builds on one that was never written: none).
fn previous_compaction<'p>(prep: &Preparation, path: &'p [Arc<Entry>]) -> Option<&'p str> {
    let at = prep.boundaries.prev_compaction_index?;
    path.get(at)
        .filter(|e| e.kind == crate::session::EntryKind::Compaction)
        .and_then(|e| e.id.as_deref())
}

/// The one step (`compactor::step::summarize`) with the session's hooks, engine and prices.
pub(super) async fn summarize(r: Request<'_>) -> Result<Summarized, Stopped> {
    let hooks = match r.hooks {
        Hooks::Ask { asked, speculative } => Some(SessionHooks {
            daemon: r.daemon,
            session_id: &r.session.id,
            path: r.path,
            custom: r.custom,
            reason: r.reason,
            will_retry: r.will_retry,
            speculative,
            asked,
            cancel: r.cancel,
        }),
        Hooks::Skip => None,
    };
    let engine = || {
        r.daemon
            .session_engine(r.session, r.settings)
            .map_err(|e| e.message)
    };
    let price = |engine: &crate::compactor::SummaryEngine, usage: &crate::summarizer::Usage| {
        r.daemon.config.summarizer_cost(engine, usage)
    };
    step::summarize(step::Step {
        prep: r.prep,
        hooks: hooks.as_ref().map(|h| h as &dyn step::Hooks),
        engine: &engine,
        price: &price,
        custom: r.custom,
        thinking_level: Some(r.thinking_level),
        on_retry: r.on_retry,
        cancel: r.cancel,
        made: r.made,
        handoff: r.settings.handoff,
        previous_id: previous_compaction(r.prep, r.path),
    })
    .await
    .inspect(|made| {
        // Every summary the engine wrote tells how long the next one will take.
        if let Some(took) = made.took {
            let key = r
                .daemon
                .config
                .engine_key(r.session.lock_state().model.as_ref());
            r.daemon.observe_summary_latency(key, took);
        }
    })
    .map(named)
    .map_err(|s| match s {
        step::Stopped::Vetoed => Stopped::Vetoed,
        step::Stopped::NoEngine(m) => {
            Stopped::Failed(CompactionFailure::Error(ErrorKind::Auth, m), Cost::FREE)
        }
        step::Stopped::Failed(e, cost) => Stopped::Failed(summarizer_failure(e), cost),
    })
}
