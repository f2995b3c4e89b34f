//! Asking the `session_before_compact` hooks (Pi's extension point before a compaction): a hook
//! may cancel the compaction or supply its own summary. They are asked only from the one
//! summarization step (`super::summarize`), which says when on every path.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::super::Daemon;
use crate::compaction::prepare::Preparation;
use crate::compaction::summary::CompactionOutcome;
use crate::rpc::events::{self, HookCompaction, Reason, SessionBeforeCompact};
use crate::rpc::results::SessionEntry;
use crate::session::Entry;

use crate::compactor::step::Verdict;

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
    /// Registrations asked already about this summary (by the speculation it comes from).
    pub asked: &'a [u64],
}

/// What the hooks said, and which registrations were asked (by `seq`).
pub(super) struct Answered {
    pub verdict: Verdict,
    pub asked: Vec<u64>,
}

/// Asks every registered `session_before_compact` hook, in registration order.
pub(super) async fn ask(daemon: &Daemon, q: Question<'_>, cancel: &CancellationToken) -> Answered {
    if !daemon.has_hook_besides::<SessionBeforeCompact>(q.session_id, q.asked) {
        return Answered {
            verdict: Verdict::Proceed,
            asked: Vec::new(),
        };
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
    let (answers, asked) = daemon
        .ask_hooks::<SessionBeforeCompact>(q.session_id, params, q.asked, cancel, |r| r.cancel)
        .await;
    let mut verdict = Verdict::Proceed;
    for a in answers {
        if a.cancel {
            verdict = Verdict::Cancel;
            break;
        }
        if let Some(o) = a.compaction.and_then(|c| hook_outcome(c, q.path)) {
            verdict = Verdict::Supplied(Box::new(o));
        }
    }
    Answered { verdict, asked }
}

/// A hook-supplied compaction, validated (beyond Pi): its `firstKeptEntryId` must be on the
/// branch, else it counts as no result.
fn hook_outcome(c: HookCompaction, path: &[Arc<Entry>]) -> Option<CompactionOutcome> {
    if !path
        .iter()
        .any(|e| e.id.as_deref() == Some(c.first_kept_entry_id.as_str()))
    {
        tracing::warn!(
            first_kept = c.first_kept_entry_id,
            "hook compaction's firstKeptEntryId is not on the branch; ignored"
        );
        return None;
    }
    Some(CompactionOutcome {
        summary: c.summary,
        first_kept_entry_id: c.first_kept_entry_id,
        tokens_before: c.tokens_before.unwrap_or(0.0),
        usage: c.usage,
        details: c.details.unwrap_or(Value::Null),
        from_hook: true,
    })
}
