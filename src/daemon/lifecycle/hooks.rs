//! Asking the `session_before_compact` hooks (Pi's extension point before a compaction): a hook
//! may cancel the compaction or supply its own summary. Normal compactions ask them after
//! `compaction_start`; a speculation asks them when it starts, with `speculative: true`, so the
//! summary it installs later is one the hooks saw (and a hook's own summary or cancel wins).

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::super::Daemon;
use crate::compaction::prepare::Preparation;
use crate::compaction::summary::CompactionOutcome;
use crate::rpc::events::{self, Reason};
use crate::rpc::results::SessionEntry;
use crate::session::Entry;
use crate::summarizer::Usage;

/// What the hooks said.
pub(super) enum Verdict {
    /// No hook is registered, or none had anything to say: the summarizer writes the summary.
    Proceed,
    /// A hook cancelled the compaction.
    Cancel,
    /// A hook supplied the compaction (the last valid one wins, as in Pi).
    Supplied(Box<CompactionOutcome>),
}

/// What the hooks are asked about.
pub(super) struct Question<'a> {
    pub session_id: &'a str,
    pub prep: &'a Preparation,
    /// The branch the preparation was made from.
    pub path: &'a [Arc<Entry>],
    pub custom: Option<&'a str>,
    pub reason: Reason,
    pub will_retry: bool,
    pub speculative: bool,
}

/// Asks every registered `session_before_compact` hook, in registration order.
pub(super) async fn ask(daemon: &Daemon, q: Question<'_>, cancel: &CancellationToken) -> Verdict {
    if !daemon.has_hook(q.session_id, "session_before_compact") {
        return Verdict::Proceed;
    }
    // Every message and entry is parsed from its line: off the async workers.
    let params = crate::cpu::blocking(|| {
        events::payload(&events::SessionBeforeCompact {
            session_id: q.session_id,
            preparation: events::CompactionPreparation::of(q.prep),
            branch_entries: q.path.iter().map(|e| SessionEntry(e.value())).collect(),
            custom_instructions: q.custom,
            reason: q.reason,
            will_retry: q.will_retry,
            speculative: q.speculative,
        })
    });
    let answers = daemon
        .ask_hooks(
            q.session_id,
            "session_before_compact",
            params,
            cancel,
            |v| v.get("cancel") == Some(&Value::Bool(true)),
        )
        .await;
    let mut verdict = Verdict::Proceed;
    for a in &answers {
        if a.get("cancel") == Some(&Value::Bool(true)) {
            return Verdict::Cancel;
        }
        if let Some(o) = hook_outcome(a, q.path) {
            verdict = Verdict::Supplied(Box::new(o));
        }
    }
    verdict
}

/// A hook-supplied compaction, validated (beyond Pi): its `firstKeptEntryId` must be on the
/// branch, else it counts as no result.
fn hook_outcome(v: &Value, path: &[Arc<Entry>]) -> Option<CompactionOutcome> {
    let c = v.get("compaction")?.as_object()?;
    let summary = c.get("summary")?.as_str()?.to_owned();
    let first_kept = c.get("firstKeptEntryId")?.as_str()?.to_owned();
    if !path
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
