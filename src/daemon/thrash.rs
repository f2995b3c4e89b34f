//! The thrash breaker (beyond Pi): stops automatic compactions that loop without bringing the
//! context under the threshold (an agent's fixed overhead above it, a kept tail that cannot be
//! cut), which otherwise run back to back. After an ineffective automatic compaction the next
//! automatic one is suppressed with a `compaction_suppressed` event; after
//! `maxIneffectiveCompactions` in a row, automatic compaction pauses for the session until a
//! manual `compact` or a change of its effective settings. Overflow recovery is never
//! suppressed; `maxIneffectiveCompactions: 0` turns the breaker off (Pi's behaviour).

use crate::rpc::events::{self, Ineffectiveness};
use serde_json::Value;

/// Default of `compaction.maxIneffectiveCompactions`.
pub const DEFAULT_MAX_INEFFECTIVE: u32 = 2;

/// Why a compaction counted as ineffective.
#[derive(Debug, Clone, PartialEq)]
pub struct Ineffective {
    /// The context stayed above the threshold, or what cannot be summarized is itself above
    /// it.
    pub reason: Ineffectiveness,
    pub tokens_before: f64,
    pub tokens_after: f64,
    pub threshold: f64,
}

/// An automatic compaction waiting for its verdict: the first context size reported after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub tokens_before: f64,
    /// Estimated tokens of its summary, and of the pinned section in it.
    pub summary_tokens: f64,
    pub pinned_tokens: f64,
}

/// A session's breaker state.
#[derive(Debug, Clone, Default)]
pub struct Breaker {
    streak: u32,
    pending: Option<Pending>,
    /// The next automatic compaction is skipped, for this reason.
    suppress_next: Option<Ineffective>,
    /// Paused: why, whether the event was sent, and the settings it paused under.
    paused: Option<(Ineffective, bool, Value)>,
}

impl Breaker {
    /// Whether the next automatic threshold compaction would be skipped (suppressed or
    /// paused): a speculation for it would be wasted.
    pub fn holds(&self) -> bool {
        self.suppress_next.is_some() || self.paused.is_some()
    }

    /// Back to normal (a manual compaction ran).
    pub fn reset(&mut self) {
        *self = Breaker::default();
    }

    /// Called before an automatic threshold compaction: `Some(event)` when it is suppressed
    /// (`event` is `None` when the pause was already announced). `settings` is the session's
    /// effective settings JSON: a pause ends when they changed.
    pub fn suppress(&mut self, settings: &Value) -> Option<Option<Ineffective>> {
        if let Some((why, announced, at)) = &mut self.paused {
            if at != settings {
                self.reset();
                return None;
            }
            let first = !*announced;
            *announced = true;
            return Some(first.then(|| why.clone()));
        }
        self.suppress_next.take().map(Some)
    }

    /// An automatic threshold compaction was written: judged at the next size observed.
    pub fn compacted(&mut self, pending: Pending) {
        self.pending = Some(pending);
    }

    /// The context size a threshold check works from, reported after the latest compaction.
    /// The first one after an automatic compaction decides whether it was effective.
    pub fn observe(&mut self, tokens: f64, threshold: f64, max: u32, settings: &Value) {
        let Some(p) = self.pending.take() else {
            return;
        };
        let verdict = judge(
            p.tokens_before,
            tokens,
            p.summary_tokens,
            p.pinned_tokens,
            threshold,
        );
        self.record(verdict, max, settings);
    }

    /// Records an automatic compaction's verdict; `max` is `maxIneffectiveCompactions` (> 0).
    pub fn record(&mut self, outcome: Option<Ineffective>, max: u32, settings: &Value) {
        match outcome {
            None => self.reset(),
            Some(why) => {
                self.streak += 1;
                if self.streak >= max {
                    self.suppress_next = None;
                    self.paused = Some((why, false, settings.clone()));
                } else {
                    self.suppress_next = Some(why);
                }
            }
        }
    }

    /// Whether automatic compaction is paused.
    pub fn is_paused(&self) -> bool {
        self.paused.is_some()
    }

    /// Whether automatic compaction is paused under `settings` (a pause ends when the effective
    /// settings change; the next check notices, a status report may say so now).
    pub fn paused_under(&self, settings: &Value) -> bool {
        self.paused
            .as_ref()
            .is_some_and(|(_, _, at)| at == settings)
    }

    /// Whether the next automatic threshold compaction will be skipped.
    pub fn suppresses_next(&self) -> bool {
        self.suppress_next.is_some()
    }
}

/// Judges an automatic compaction by the first context size reported after it (`tokens_after`,
/// which includes the agent's system prompt and tools): ineffective when it is still above the
/// threshold; `floor` when, of that, what a further compaction cannot summarize (everything but
/// the summary's body: the agent's overhead, the kept tail, the pinned lane) is above it alone.
pub fn judge(
    tokens_before: f64,
    tokens_after: f64,
    summary_tokens: f64,
    pinned_tokens: f64,
    threshold: f64,
) -> Option<Ineffective> {
    if tokens_after <= threshold {
        return None;
    }
    let floor = (tokens_after - summary_tokens).max(0.0) + pinned_tokens;
    Some(Ineffective {
        reason: if floor > threshold {
            Ineffectiveness::Floor
        } else {
            Ineffectiveness::Ineffective
        },
        tokens_before,
        tokens_after,
        threshold,
    })
}

/// The `compaction_suppressed` event's params.
pub fn event<'a>(
    session_id: &'a str,
    why: &Ineffective,
    paused: bool,
) -> events::CompactionSuppressed<'a> {
    events::CompactionSuppressed {
        session_id,
        reason: why.reason,
        tokens_before: why.tokens_before,
        tokens_after: why.tokens_after,
        threshold: why.threshold,
        paused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn why() -> Ineffective {
        judge(100.0, 90.0, 10.0, 0.0, 50.0).unwrap()
    }

    #[test]
    fn suppresses_once_then_pauses_until_settings_change() {
        let s = json!({"a": 1});
        let mut b = Breaker::default();
        assert_eq!(b.suppress(&s), None);
        b.record(Some(why()), 2, &s);
        assert!(b.suppresses_next() && !b.is_paused());
        assert_eq!(b.suppress(&s), Some(Some(why())));
        assert_eq!(b.suppress(&s), None, "only the next one");
        assert!(!b.suppresses_next());
        b.record(Some(why()), 2, &s);
        assert!(b.is_paused());
        assert!(b.paused_under(&s) && !b.paused_under(&json!({"a": 2})));
        assert_eq!(b.suppress(&s), Some(Some(why())), "announced once");
        assert_eq!(b.suppress(&s), Some(None));
        assert_eq!(
            b.suppress(&json!({"a": 2})),
            None,
            "a settings change resumes"
        );
        assert!(!b.is_paused());
        b.record(Some(why()), 2, &s);
        b.record(None, 2, &s);
        assert_eq!(
            b.suppress(&s),
            None,
            "an effective compaction clears the streak"
        );
    }

    #[test]
    fn judging() {
        assert_eq!(judge(100.0, 40.0, 10.0, 0.0, 50.0), None);
        assert_eq!(why().reason, Ineffectiveness::Floor);
        assert_eq!(
            judge(100.0, 90.0, 60.0, 0.0, 50.0).unwrap().reason,
            Ineffectiveness::Ineffective
        );
        assert_eq!(
            judge(100.0, 90.0, 60.0, 30.0, 50.0).unwrap().reason,
            Ineffectiveness::Floor
        );
    }
}
