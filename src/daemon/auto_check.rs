//! Pi's automatic-compaction decision after an assistant reply (`_checkCompaction`,
//! compaction.md §8.4, overflow.md §4), as a pure function of what the session knows: [`decide`]
//! takes [`CheckFacts`] and says what to do, and `lifecycle` gathers the facts and carries the
//! [`Action`] out (compacting, emitting, recording). Keeping the rules apart from the I/O lets
//! every branch of them be tested directly.

use crate::compaction::tokens::{should_compact, CompactionSettings};
use crate::session::StopReason;
use crate::summarizer::overflow::{is_context_overflow, is_recoverable_length, ReplyFacts};

/// Pi's give-up text when the one overflow recovery already ran.
pub const OVERFLOW_GIVE_UP: &str = "Context overflow recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model.";
/// The same for a reply cut by the output cap.
pub const LENGTH_GIVE_UP: &str =
    "Output-length recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model.";

/// What the check knows about the last assistant reply and the session.
#[derive(Debug, Clone, Copy)]
pub struct CheckFacts<'a> {
    pub settings: &'a CompactionSettings,
    /// `postRun`: an aborted reply is not checked.
    pub skip_aborted: bool,
    /// The reply's `stopReason` as stored (`""` when absent).
    pub stop: &'a str,
    /// The reply's classifier facts (stop reason, error text, usage).
    pub reply: ReplyFacts<'a>,
    /// The reply's `timestamp` (0 when absent).
    pub message_ms: f64,
    /// The latest compaction on the branch, if any, with its timestamp when it parses.
    pub latest_compaction_ms: Option<Option<i64>>,
    /// The reply came from the session's current model (provider and id).
    pub same_model: bool,
    /// The current model's context window and output cap (0 when unknown).
    pub window: i64,
    pub model_max_tokens: i64,
    /// The one compact-and-retry of this run was already spent.
    pub overflow_recovery_attempted: bool,
    /// Context tokens the reply's own usage reports (0 when it reports none).
    pub usage_tokens: f64,
    /// The agent context's estimate, and the timestamp of the reply its usage came from.
    pub estimate_tokens: f64,
    pub estimate_usage_ms: Option<f64>,
    pub estimate_has_usage: bool,
}

/// What to do after the reply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Nothing: compaction disabled, an aborted or stale reply, or a context whose size is
    /// unknown since the latest compaction.
    Nothing,
    /// The current model's context overflowed (or its output cap cut a reply that could have
    /// fit): compact. With `retry`, the failed reply is dropped and the request re-sent after
    /// (Pi's compact-and-retry-once).
    RecoverOverflow { retry: bool },
    /// The one recovery was already spent: report `message` and stop.
    GiveUp { message: &'static str },
    /// The context has `tokens` now (the thrash breaker observes it); `compact` when that is
    /// over the threshold.
    Measure { tokens: f64, compact: bool },
}

/// Pi's decision for one reply.
pub fn decide(f: &CheckFacts<'_>) -> Action {
    if !f.settings.enabled || (f.skip_aborted && f.stop == "aborted") {
        return Action::Nothing;
    }
    // Stale guard: a reply at or before the latest compaction never triggers anything (an
    // unparsable compaction timestamp compares as NaN: nothing is stale).
    if let Some(c) = f.latest_compaction_ms {
        if f.message_ms <= c.map_or(f64::NAN, |v| v as f64) {
            return Action::Nothing;
        }
    }
    let overflow = f.same_model && is_context_overflow(&f.reply, f.window.max(0) as u64);
    let length = f.same_model && is_recoverable_length(&f.reply, f.model_max_tokens.max(0) as u64);
    if overflow || length {
        let retry = f.stop != "stop";
        if retry && f.overflow_recovery_attempted {
            let message = if overflow {
                OVERFLOW_GIVE_UP
            } else {
                LENGTH_GIVE_UP
            };
            return Action::GiveUp { message };
        }
        return Action::RecoverOverflow { retry };
    }
    // Threshold: the reply's own usage, else (an error, or no usage) the context estimate,
    // unless that estimate's usage predates the latest compaction.
    let usage = if f.usage_tokens.is_nan() {
        0.0
    } else {
        f.usage_tokens
    };
    let tokens = if f.reply.stop_reason == StopReason::Error || usage == 0.0 {
        if let (true, Some(Some(c)), Some(ts)) = (
            f.estimate_has_usage,
            f.latest_compaction_ms,
            f.estimate_usage_ms,
        ) {
            if ts <= c as f64 {
                return Action::Nothing;
            }
        }
        f.estimate_tokens
    } else {
        usage
    };
    Action::Measure {
        tokens,
        compact: should_compact(tokens, f.window, f.settings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: CompactionSettings = CompactionSettings {
        enabled: true,
        reserve_tokens: 16_384,
        keep_recent_tokens: 20_000,
    };

    /// A successful reply of the current model at t=2000 reporting 1000 context tokens, on a
    /// 200k window, after a compaction at t=1000.
    fn facts() -> CheckFacts<'static> {
        CheckFacts {
            settings: &SETTINGS,
            skip_aborted: false,
            stop: "stop",
            reply: ReplyFacts {
                stop_reason: StopReason::Stop,
                error_message: None,
                input: 1000,
                cache_read: 0,
                output: 50,
            },
            message_ms: 2000.0,
            latest_compaction_ms: Some(Some(1000)),
            same_model: true,
            window: 200_000,
            model_max_tokens: 64_000,
            overflow_recovery_attempted: false,
            usage_tokens: 1050.0,
            estimate_tokens: 1200.0,
            estimate_usage_ms: Some(2000.0),
            estimate_has_usage: true,
        }
    }

    fn overflowed(f: CheckFacts<'static>) -> CheckFacts<'static> {
        CheckFacts {
            stop: "error",
            reply: ReplyFacts {
                stop_reason: StopReason::Error,
                error_message: Some("prompt is too long: 213000 tokens > 200000 maximum"),
                ..f.reply
            },
            usage_tokens: 0.0,
            ..f
        }
    }

    #[test]
    fn a_small_context_is_measured_and_left_alone() {
        assert_eq!(
            decide(&facts()),
            Action::Measure {
                tokens: 1050.0,
                compact: false
            }
        );
    }

    #[test]
    fn over_the_threshold_compacts_with_the_replys_own_usage() {
        let f = CheckFacts {
            usage_tokens: 190_000.0,
            ..facts()
        };
        assert_eq!(
            decide(&f),
            Action::Measure {
                tokens: 190_000.0,
                compact: true
            }
        );
    }

    #[test]
    fn disabled_aborted_and_stale_replies_do_nothing() {
        let disabled = CompactionSettings {
            enabled: false,
            ..SETTINGS
        };
        let f = CheckFacts {
            settings: &disabled,
            usage_tokens: 190_000.0,
            ..facts()
        };
        assert_eq!(decide(&f), Action::Nothing);
        let aborted = CheckFacts {
            skip_aborted: true,
            stop: "aborted",
            ..facts()
        };
        assert_eq!(decide(&aborted), Action::Nothing);
        let stale = CheckFacts {
            message_ms: 1000.0,
            usage_tokens: 190_000.0,
            ..facts()
        };
        assert_eq!(decide(&stale), Action::Nothing);
        // An unparsable compaction timestamp makes nothing stale.
        let unknown = CheckFacts {
            latest_compaction_ms: Some(None),
            message_ms: 0.0,
            ..facts()
        };
        assert!(matches!(decide(&unknown), Action::Measure { .. }));
    }

    #[test]
    fn an_overflow_of_the_current_model_is_recovered_once() {
        assert_eq!(
            decide(&overflowed(facts())),
            Action::RecoverOverflow { retry: true }
        );
        let spent = CheckFacts {
            overflow_recovery_attempted: true,
            ..overflowed(facts())
        };
        assert_eq!(
            decide(&spent),
            Action::GiveUp {
                message: OVERFLOW_GIVE_UP
            }
        );
        // Another model's overflow is not this model's problem: the threshold path decides.
        let other = CheckFacts {
            same_model: false,
            ..overflowed(facts())
        };
        assert!(matches!(decide(&other), Action::Measure { .. }));
    }

    #[test]
    fn a_reply_cut_by_the_output_cap_is_a_length_recovery() {
        let cut = CheckFacts {
            stop: "length",
            reply: ReplyFacts {
                stop_reason: StopReason::Length,
                output: 4000,
                ..facts().reply
            },
            ..facts()
        };
        assert_eq!(decide(&cut), Action::RecoverOverflow { retry: true });
        let spent = CheckFacts {
            overflow_recovery_attempted: true,
            ..cut
        };
        assert_eq!(
            decide(&spent),
            Action::GiveUp {
                message: LENGTH_GIVE_UP
            }
        );
    }

    #[test]
    fn without_usage_the_estimate_decides_unless_it_predates_the_compaction() {
        let errored = CheckFacts {
            stop: "error",
            reply: ReplyFacts {
                stop_reason: StopReason::Error,
                error_message: Some("upstream connect error"),
                ..facts().reply
            },
            usage_tokens: 0.0,
            ..facts()
        };
        assert_eq!(
            decide(&errored),
            Action::Measure {
                tokens: 1200.0,
                compact: false
            }
        );
        let old = CheckFacts {
            estimate_usage_ms: Some(900.0),
            ..errored
        };
        assert_eq!(decide(&old), Action::Nothing);
    }
}
