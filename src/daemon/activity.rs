//! What a session's compactions are doing and did, as the daemon's own events announced it: the
//! compaction running now (its reason and start) and the last one that wrote an entry (how long
//! it took, the context it left). Beyond Pi, `listSessions` reports both so a monitor such as
//! `compactd top` can show "compacting for 3 s" or "45k → 3k in 1.2 s" for work that began before
//! it connected.
//!
//! The record is folded from the events at `Daemon::emit`, the one place every event passes,
//! so it can never disagree with what subscribers were told, and the compaction lifecycle needs
//! no bookkeeping of its own. Pure: the caller passes the clock (epoch milliseconds).

use crate::rpc::events::Event;

/// A compaction between its `compaction_start` and `compaction_end`.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    /// `compaction_start`'s reason, as sent (`manual`, `threshold`, `overflow`, …).
    pub reason: String,
    pub started_ms: i64,
}

/// The latest compaction that ended with a result.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub first_kept_entry_id: String,
    pub tokens_before: f64,
    /// `estimatedTokensAfter`: the agent context rebuilt right after the entry was appended.
    pub tokens_after: u64,
    /// From `compaction_start` to `compaction_end`; `None` when the start was not seen.
    pub duration_ms: Option<u64>,
}

/// A session's compaction activity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    running: Option<Running>,
    finished: Option<Finished>,
}

impl Activity {
    /// Takes in one event of the session, announced at `now_ms`.
    pub fn observe(&mut self, event: &Event<'_>, now_ms: i64) {
        match event {
            Event::CompactionStart(start) => {
                self.running = Some(Running {
                    reason: start.reason.as_str().to_owned(),
                    started_ms: now_ms,
                });
            }
            Event::CompactionEnd(end) => {
                // Ends whatever runs, with or without a start (the overflow give-up has none).
                let started = self.running.take();
                let Some(result) = &end.result else {
                    return;
                };
                self.finished = Some(Finished {
                    first_kept_entry_id: result.first_kept_entry_id.clone(),
                    tokens_before: result.tokens_before,
                    tokens_after: result.estimated_tokens_after,
                    duration_ms: started.map(|s| (now_ms - s.started_ms).max(0) as u64),
                });
            }
            _ => {}
        }
    }

    /// The compaction running now, if one announced its start.
    pub fn running(&self) -> Option<&Running> {
        self.running.as_ref()
    }

    /// The finished compaction that wrote the entry with this `firstKeptEntryId` and
    /// `tokensBefore`, if it was the latest one this daemon ran for the session.
    pub fn finished(&self, first_kept_entry_id: &str, tokens_before: f64) -> Option<&Finished> {
        self.finished
            .as_ref()
            .filter(|f| f.first_kept_entry_id == first_kept_entry_id)
            .filter(|f| f.tokens_before == tokens_before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::summary::CompactionResult;
    use crate::rpc::events::{CompactionEnd, CompactionStart, Reason, SummaryEdited};
    use std::borrow::Cow;

    fn start(reason: Reason) -> Event<'static> {
        Event::CompactionStart(CompactionStart {
            session_id: "s1",
            reason,
        })
    }

    /// A `compaction_end`: a success when `kept` names the first kept entry, else aborted.
    fn end(reason: Reason, kept: Option<(&'static str, f64, u64)>) -> Event<'static> {
        Event::CompactionEnd(CompactionEnd {
            session_id: "s1",
            reason,
            result: kept.map(|(kept, before, after)| {
                Cow::Owned(CompactionResult {
                    summary: "s".into(),
                    first_kept_entry_id: kept.into(),
                    tokens_before: before,
                    estimated_tokens_after: after,
                    usage: None,
                    details: None,
                    cost: None,
                    handoff: None,
                })
            }),
            aborted: kept.is_none(),
            will_retry: false,
            error_message: None,
        })
    }

    #[test]
    fn a_start_and_a_successful_end_give_the_run_and_its_duration() {
        let mut a = Activity::default();
        a.observe(&start(Reason::Threshold), 1_000);
        assert_eq!(
            a.running(),
            Some(&Running {
                reason: "threshold".into(),
                started_ms: 1_000
            })
        );
        a.observe(&end(Reason::Threshold, Some(("k1", 9000.0, 1200))), 3_500);
        assert_eq!(a.running(), None);
        let f = a.finished("k1", 9000.0).expect("the run is recorded");
        assert_eq!(f.tokens_after, 1200);
        assert_eq!(f.duration_ms, Some(2_500));
        assert_eq!(
            a.finished("k2", 9000.0),
            None,
            "another entry is not this run"
        );
        assert_eq!(a.finished("k1", 9001.0), None);
    }

    #[test]
    fn a_failed_or_aborted_end_keeps_the_previous_run() {
        let mut a = Activity::default();
        a.observe(&start(Reason::Manual), 0);
        a.observe(&end(Reason::Manual, Some(("k1", 10.0, 1))), 5);
        a.observe(&start(Reason::Manual), 10);
        a.observe(&end(Reason::Manual, None), 20);
        assert_eq!(a.running(), None);
        assert_eq!(a.finished("k1", 10.0).and_then(|f| f.duration_ms), Some(5));
        // An end without a start (the overflow give-up) leaves no duration.
        a.observe(&end(Reason::Overflow, Some(("k2", 7.0, 1))), 30);
        assert_eq!(a.finished("k2", 7.0).and_then(|f| f.duration_ms), None);
        // Other events change nothing.
        let before = a.clone();
        a.observe(
            &Event::SummaryEdited(SummaryEdited {
                session_id: "s1",
                compaction_id: "x",
                entry_id: "y",
            }),
            40,
        );
        assert_eq!(a, before);
    }
}
