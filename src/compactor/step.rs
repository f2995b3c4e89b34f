//! The one summarization step: a preparation in, a summary with its cost out. Every compaction
//! summary comes from [`summarize`]: the daemon's compactions, speculations and their installs
//! (through `daemon::lifecycle::summarize`, which supplies the `session_before_compact` hooks
//! and says when they are asked on each path) and `compactd compact` (no hooks: no client is
//! there to ask). The order is fixed here once: the hooks (a cancel stops everything, a valid
//! summary of their own replaces the summarizer's), then the engine with its retries, then the
//! price of every call it made.
//!
//! Beyond Pi, every summary made here (the engine's, a hook's) is then checked against what
//! its handoff owes (`compaction.handoff`, [`crate::handoff`]): the obligations are read from
//! the preparation, and in `retry` mode a summary an LLM engine wrote that misses some gets one
//! more call with them as extra instructions. Finishing (`daemon::lifecycle::finish`) scores
//! the summary as it is installed and repairs it when asked.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{generate, CompactError, Meter, OnRetry, SummaryEngine};
use crate::accounting::Cost;
use crate::compaction::prepare::Preparation;
use crate::compaction::summary::CompactionOutcome;
use crate::handoff::{self, Mode, Owed};
use crate::summarizer::extractive::{handoff_facts, HandoffInput, Messages};
use crate::summarizer::Usage;

/// What the hooks said.
pub enum Verdict {
    /// No hook had anything to say: the summarizer writes the summary.
    Proceed,
    /// A hook cancelled the compaction.
    Cancel,
    /// A hook supplied the compaction (the last valid one wins, as in Pi).
    Supplied(Box<CompactionOutcome>),
}

/// The `session_before_compact` hooks of one summary, as whoever runs the step asks them.
pub trait Hooks: Send + Sync {
    /// Asks every hook not asked yet about `prep`: the verdict, and the hooks asked (by
    /// registration `seq`).
    fn ask<'a>(&'a self, prep: &'a Preparation) -> BoxFuture<'a, (Verdict, Vec<u64>)>;
}

/// One summary to make.
pub struct Step<'a> {
    pub prep: &'a Preparation,
    /// Who may cancel or supply it (`None`: nobody is asked).
    pub hooks: Option<&'a dyn Hooks>,
    /// The summarizer, or why there is none (a missing key): asked for only when needed.
    pub engine: &'a (dyn Fn() -> Result<Arc<SummaryEngine>, String> + Sync),
    /// The price of the engine's usage.
    pub price: &'a (dyn Fn(&SummaryEngine, &Usage) -> Cost + Sync),
    pub custom: Option<&'a str>,
    pub thinking_level: Option<&'a str>,
    pub on_retry: &'a OnRetry<'a>,
    pub cancel: &'a CancellationToken,
    /// A summary made already (a speculation's, at its install): the hooks are asked, and when
    /// none objects it is the result; the summarizer is not called.
    pub made: Option<Summarized>,
    /// `compaction.handoff`: whether (and how) the summary is checked.
    pub handoff: Mode,
    /// The compaction entry whose summary the preparation updates (what obligations carried
    /// from it name).
    pub previous_id: Option<&'a str>,
}

/// A summary made.
#[derive(Debug, Clone)]
pub struct Summarized {
    pub outcome: CompactionOutcome,
    /// Who wrote it, as logs name it.
    pub summarizer: String,
    /// A hook supplied it (Pi's `fromExtension`).
    pub from_extension: bool,
    /// What its calls cost: priced at the engine's model; the extractive engine is free; a
    /// hook's own summary reports its own usage, at a price compactd does not know.
    pub cost: Cost,
    /// The hooks asked for it (by registration `seq`).
    pub asked: Vec<u64>,
    /// How long the engine took to write it (`None`: a hook's, or one made already): what
    /// tells a speculation how early to start.
    pub took: Option<std::time::Duration>,
    /// What its handoff owes (`None`: `compaction.handoff` is `off`).
    pub handoff: Option<Owed>,
}

/// Why no summary was made.
#[derive(Debug)]
pub enum Stopped {
    /// A hook cancelled it.
    Vetoed,
    /// There is no summarizer to call (the message says why: a missing key).
    NoEngine(String),
    /// The summarizer failed, or the run was cancelled; with what its calls spent meanwhile.
    Failed(CompactError, Cost),
}

/// Who wrote a summary, as logs name it.
pub fn summarizer_name(engine: Option<&SummaryEngine>, from_hook: bool) -> String {
    if from_hook {
        return "hook".to_owned();
    }
    match engine {
        Some(SummaryEngine::Llm { model, .. }) => format!("{}/{}", model.provider, model.id),
        Some(SummaryEngine::Extractive { .. }) => "extractive".to_owned(),
        None => "none".to_owned(),
    }
}

/// The hooks, then (unless one cancelled or supplied the summary, or one was made already) the
/// engine with its retries; prices what the calls cost; reads what the summary's handoff owes
/// (and, in `retry` mode, makes the one extra call).
pub async fn summarize(mut step: Step<'_>) -> Result<Summarized, Stopped> {
    let (verdict, asked) = match step.hooks {
        Some(hooks) => hooks.ask(step.prep).await,
        None => (Verdict::Proceed, Vec::new()),
    };
    match verdict {
        Verdict::Cancel => Err(Stopped::Vetoed),
        Verdict::Supplied(o) => Ok(Summarized {
            cost: o.usage.unwrap_or_default().cost(None),
            outcome: *o,
            summarizer: summarizer_name(None, true),
            from_extension: true,
            asked,
            took: None,
            handoff: owed(&step),
        }),
        Verdict::Proceed => match step.made.take() {
            Some(mut made) => {
                made.asked.extend(asked);
                if made.handoff.is_none() {
                    made.handoff = owed(&step);
                }
                Ok(made)
            }
            None => {
                if step.cancel.is_cancelled() {
                    return Err(Stopped::Failed(CompactError::Cancelled, Cost::FREE));
                }
                let engine = (step.engine)().map_err(Stopped::NoEngine)?;
                let meter = Meter::default();
                let started = std::time::Instant::now();
                let generated = generate(
                    step.prep,
                    &engine,
                    step.custom,
                    step.thinking_level,
                    step.cancel,
                    step.on_retry,
                    &meter,
                )
                .await;
                let took = started.elapsed();
                let checked = match generated {
                    Ok(outcome) => Ok(verified(&step, &engine, outcome, &meter).await),
                    Err(e) => Err(e),
                };
                // What the calls spent counts even when they failed (a discarded speculation's
                // waste, a failed compaction's spend).
                let cost = (step.price)(&engine, &meter.total());
                match checked {
                    Ok((outcome, handoff)) => Ok(Summarized {
                        outcome,
                        summarizer: summarizer_name(Some(&engine), false),
                        from_extension: false,
                        cost,
                        asked,
                        took: Some(took),
                        handoff,
                    }),
                    Err(e) => Err(Stopped::Failed(e, cost)),
                }
            }
        },
    }
}

/// What the handoff of `step`'s preparation owes (see [`owed_by`]).
fn owed(step: &Step<'_>) -> Option<Owed> {
    owed_by(step.prep, step.handoff, step.previous_id)
}

/// What the handoff of `prep` owes (`None` when `mode` is off): the obligations of its span and
/// of the summary it updates (the compaction `previous_id`), read on a thread of its own like
/// the extractive summary (it is the same pass). `previewCompaction` shows the same list.
pub fn owed_by(prep: &Preparation, mode: Mode, previous_id: Option<&str>) -> Option<Owed> {
    if !mode.checks() {
        return None;
    }
    let written: Vec<String> = prep.file_ops.written.iter().cloned().collect();
    let edited: Vec<String> = prep.file_ops.edited.iter().cloned().collect();
    let split = prep.is_split_turn && !prep.turn_prefix_messages.is_empty();
    let obligations = crate::cpu::background(|| {
        handoff::owed(&handoff_facts(&HandoffInput {
            messages: Messages::Entries(&prep.messages_to_summarize),
            turn_prefix: match split {
                true => Messages::Entries(&prep.turn_prefix_messages),
                false => Messages::Parsed(&[]),
            },
            previous_summary: prep.previous_summary.as_deref().filter(|s| !s.is_empty()),
            previous_id,
            written: &written,
            edited: &edited,
        }))
    });
    Some(Owed {
        mode,
        obligations,
        first_score: None,
    })
}

/// The engine's summary with what its handoff owes; in `retry` mode, when an LLM wrote it (not
/// the extractive fallback) and it misses something, one more call with the missing items as
/// extra instructions, whose summary replaces it (a failed extra call keeps the first one:
/// finishing repairs what it misses).
async fn verified(
    step: &Step<'_>,
    engine: &SummaryEngine,
    outcome: CompactionOutcome,
    meter: &Meter,
) -> (CompactionOutcome, Option<Owed>) {
    let Some(mut owed) = owed(step) else {
        return (outcome, None);
    };
    let fell_back = outcome.details.get("fallbackReason").is_some();
    if step.handoff != Mode::Retry || fell_back {
        return (outcome, Some(owed));
    }
    let first = owed.report(&outcome.summary);
    if first.missing.is_empty() {
        return (outcome, Some(owed));
    }
    let retried = super::retry_history(
        step.prep,
        engine,
        &outcome,
        step.custom,
        &handoff::repair::instructions(&first.missing),
        step.thinking_level,
        step.cancel,
        step.on_retry,
        meter,
    )
    .await;
    match retried {
        Ok(Some(again)) => {
            owed.first_score = Some(first.score);
            (again, Some(owed))
        }
        Ok(None) => (outcome, Some(owed)),
        Err(e) => {
            tracing::warn!(error = %e, "the handoff retry call failed; the first summary is repaired instead");
            (outcome, Some(owed))
        }
    }
}
