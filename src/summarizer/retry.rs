//! The retry wrapper around every summarization call (compaction.md §6.2, pi-ai's
//! `retryAssistantCall`).
//!
//! Transient provider failures (rate limits, 5xx, dropped streams) should not fail a compaction,
//! but quota errors and context overflows must surface at once. The schedule is deterministic
//! (`base × 2^(attempt−1)`, no jitter) and the sleep is abortable, exactly as in Pi, so the
//! session events the daemon emits line up with Pi's.
//!
//! One addition to Pi's schedule: when a failed call carries the provider's `Retry-After`
//! (429/503), the retry waits at least that long, since retrying sooner only earns another 429.
//! A provider asking for more than [`MAX_RETRY_AFTER_MS`] is not waited for: the call fails
//! at once with the error and the wait asked for, rather than holding a compaction for minutes.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::overflow::is_retryable_assistant_error;
use super::types::{AssistantReply, StopReason};

/// Pi's `settings.retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RetrySettings {
    pub enabled: bool,
    pub max_retries: u32,
    pub base_delay_ms: u64,
}

impl Default for RetrySettings {
    /// Pi's defaults: enabled, 3 retries, 2 s base delay.
    fn default() -> Self {
        RetrySettings {
            enabled: true,
            max_retries: 3,
            base_delay_ms: 2000,
        }
    }
}

/// Progress notifications, mapped by the caller onto Pi's `summarization_retry_*` events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryEvent {
    /// Emitted before each backoff sleep.
    Scheduled {
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        error_message: String,
    },
    /// Emitted after a sleep, right before the call is made again.
    AttemptStart,
    /// Emitted once at the end, only if at least one retry was scheduled. `success` and the
    /// error are informational (Pi's wire event carries neither).
    Finished {
        success: bool,
        attempt: u32,
        error_message: Option<String>,
    },
}

/// The longest `Retry-After` a retry waits for; a longer one ends the retries.
pub const MAX_RETRY_AFTER_MS: u64 = 60_000;

/// `base × 2^(attempt−1)`, saturating instead of overflowing on absurd settings.
pub fn backoff_delay_ms(base_delay_ms: u64, attempt: u32) -> u64 {
    let factor = 1u64
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u64::MAX);
    base_delay_ms.saturating_mul(factor)
}

/// Calls `produce` until it returns something final.
///
/// - `Aborted` replies return at once; non-error replies return.
/// - An error reply is retried only when it is retryable (overflow.md §4) and fewer than
///   `max_attempts` retries were made (`max_attempts = enabled ? max_retries : 0`).
/// - Cancelling during a backoff sleep returns the last error reply re-labelled `Aborted`, with
///   its error message removed, as Pi does.
pub async fn retry_call<F, Fut>(
    mut produce: F,
    settings: &RetrySettings,
    cancel: &CancellationToken,
    mut on_event: impl FnMut(RetryEvent),
) -> AssistantReply
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AssistantReply>,
{
    let max_attempts = if settings.enabled {
        settings.max_retries
    } else {
        0
    };
    let mut attempt = 0u32;
    let mut retried = false;
    loop {
        let reply = produce().await;
        match reply.stop_reason {
            StopReason::Aborted => {
                if retried {
                    on_event(RetryEvent::Finished {
                        success: false,
                        attempt,
                        error_message: None,
                    });
                }
                return reply;
            }
            StopReason::Error => {}
            _ => {
                if retried {
                    on_event(RetryEvent::Finished {
                        success: true,
                        attempt,
                        error_message: None,
                    });
                }
                return reply;
            }
        }
        if attempt >= max_attempts
            || !is_retryable_assistant_error(reply.stop_reason, reply.error_message.as_deref())
        {
            if retried {
                on_event(RetryEvent::Finished {
                    success: false,
                    attempt,
                    error_message: reply.error_message.clone(),
                });
            }
            return reply;
        }
        let backoff_ms = backoff_delay_ms(settings.base_delay_ms, attempt + 1);
        let delay_ms = match reply.retry_after_ms {
            Some(asked) if asked > MAX_RETRY_AFTER_MS => {
                let error_message = format!(
                    "{} (the provider asked to retry after {} s, longer than the {} s compactd waits)",
                    reply.error_message.as_deref().unwrap_or("Unknown error"),
                    asked.div_ceil(1000),
                    MAX_RETRY_AFTER_MS / 1000
                );
                if retried {
                    on_event(RetryEvent::Finished {
                        success: false,
                        attempt,
                        error_message: Some(error_message.clone()),
                    });
                }
                return AssistantReply {
                    error_message: Some(error_message),
                    ..reply
                };
            }
            Some(asked) => backoff_ms.max(asked),
            None => backoff_ms,
        };
        attempt += 1;
        retried = true;
        let error_message = reply
            .error_message
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "Unknown error".to_string());
        on_event(RetryEvent::Scheduled {
            attempt,
            max_attempts,
            delay_ms,
            error_message: error_message.clone(),
        });
        let aborted = cancel.is_cancelled()
            || tokio::select! {
                biased;
                _ = cancel.cancelled() => true,
                _ = tokio::time::sleep(Duration::from_millis(delay_ms)) => false,
            };
        if aborted {
            on_event(RetryEvent::Finished {
                success: false,
                attempt,
                error_message: Some(error_message),
            });
            return AssistantReply {
                stop_reason: StopReason::Aborted,
                error_message: None,
                ..reply
            };
        }
        on_event(RetryEvent::AttemptStart);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::time::Instant;

    fn ok() -> AssistantReply {
        AssistantReply {
            text_blocks: vec!["done".into()],
            stop_reason: StopReason::Stop,
            error_message: None,
            ..AssistantReply::aborted()
        }
    }

    /// Runs `retry_call` over a scripted sequence of replies; returns the result, the events,
    /// the number of calls and the elapsed (virtual) time.
    async fn run(
        script: Vec<AssistantReply>,
        settings: RetrySettings,
        cancel: CancellationToken,
    ) -> (AssistantReply, Vec<RetryEvent>, usize, Duration) {
        let script = Arc::new(Mutex::new(script.into_iter()));
        let calls = Arc::new(Mutex::new(0usize));
        let mut events = Vec::new();
        let start = Instant::now();
        let reply = retry_call(
            || {
                let script = script.clone();
                let calls = calls.clone();
                async move {
                    *calls.lock().unwrap() += 1;
                    script.lock().unwrap().next().unwrap_or_else(ok)
                }
            },
            &settings,
            &cancel,
            |e| events.push(e),
        )
        .await;
        let n = *calls.lock().unwrap();
        (reply, events, n, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn retries_with_exponential_backoff() {
        let e = || AssistantReply::error("429 rate limited", Some(429));
        let (reply, events, calls, elapsed) = run(
            vec![e(), e(), ok()],
            RetrySettings::default(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(reply.stop_reason, StopReason::Stop);
        assert_eq!(calls, 3);
        assert_eq!(elapsed, Duration::from_millis(2000 + 4000));
        assert_eq!(
            events,
            vec![
                RetryEvent::Scheduled {
                    attempt: 1,
                    max_attempts: 3,
                    delay_ms: 2000,
                    error_message: "429 rate limited".into()
                },
                RetryEvent::AttemptStart,
                RetryEvent::Scheduled {
                    attempt: 2,
                    max_attempts: 3,
                    delay_ms: 4000,
                    error_message: "429 rate limited".into()
                },
                RetryEvent::AttemptStart,
                RetryEvent::Finished {
                    success: true,
                    attempt: 2,
                    error_message: None
                },
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_retries() {
        let e = || AssistantReply::error("503 overloaded", Some(503));
        let (reply, events, calls, elapsed) = run(
            vec![e(), e(), e(), e(), e()],
            RetrySettings::default(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(reply.stop_reason, StopReason::Error);
        assert_eq!(calls, 4);
        assert_eq!(elapsed, Duration::from_millis(2000 + 4000 + 8000));
        assert_eq!(
            events.last(),
            Some(&RetryEvent::Finished {
                success: false,
                attempt: 3,
                error_message: Some("503 overloaded".into())
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_or_non_retryable_returns_first_error() {
        let (reply, events, calls, _) = run(
            vec![AssistantReply::error("503 overloaded", Some(503))],
            RetrySettings {
                enabled: false,
                ..Default::default()
            },
            CancellationToken::new(),
        )
        .await;
        assert_eq!((reply.stop_reason, calls), (StopReason::Error, 1));
        assert!(events.is_empty());

        let (reply, events, calls, _) = run(
            vec![AssistantReply::error("400 prompt is too long", Some(400))],
            RetrySettings::default(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!((reply.stop_reason, calls), (StopReason::Error, 1));
        assert!(events.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn aborted_and_length_return_immediately() {
        let (reply, _, calls, _) = run(
            vec![AssistantReply::aborted()],
            RetrySettings::default(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!((reply.stop_reason, calls), (StopReason::Aborted, 1));
        let length = AssistantReply {
            stop_reason: StopReason::Length,
            ..ok()
        };
        let (reply, _, calls, _) = run(
            vec![length],
            RetrySettings::default(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!((reply.stop_reason, calls), (StopReason::Length, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn abort_during_sleep_returns_aborted_without_message() {
        let cancel = CancellationToken::new();
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            c2.cancel();
        });
        let (reply, events, calls, elapsed) = run(
            vec![AssistantReply::error("429 rate limited", Some(429))],
            RetrySettings::default(),
            cancel,
        )
        .await;
        assert_eq!(calls, 1);
        assert_eq!(reply.stop_reason, StopReason::Aborted);
        assert_eq!(reply.error_message, None);
        assert_eq!(reply.http_status, Some(429));
        assert_eq!(elapsed, Duration::from_millis(500));
        assert!(matches!(
            events.last(),
            Some(RetryEvent::Finished { success: false, .. })
        ));
    }

    fn rate_limited(after_ms: u64) -> AssistantReply {
        AssistantReply {
            retry_after_ms: Some(after_ms),
            ..AssistantReply::error("429 rate limited", Some(429))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_lengthens_the_wait_but_never_shortens_it() {
        let settings = RetrySettings {
            base_delay_ms: 1000,
            ..Default::default()
        };
        // Asked 5 s (over the 1 s backoff), then 100 ms (under the 2 s backoff).
        let (reply, events, calls, elapsed) = run(
            vec![rate_limited(5000), rate_limited(100), ok()],
            settings,
            CancellationToken::new(),
        )
        .await;
        assert_eq!((reply.stop_reason, calls), (StopReason::Stop, 3));
        assert_eq!(elapsed, Duration::from_millis(5000 + 2000));
        let delays: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                RetryEvent::Scheduled { delay_ms, .. } => Some(*delay_ms),
                _ => None,
            })
            .collect();
        assert_eq!(delays, [5000, 2000], "the events report the real wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_cap_fails_at_once_with_the_reason() {
        let (reply, events, calls, elapsed) = run(
            vec![rate_limited(2000), rate_limited(3_600_000)],
            RetrySettings::default(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!((reply.stop_reason, calls), (StopReason::Error, 2));
        assert_eq!(elapsed, Duration::from_millis(2000));
        let msg = reply.error_message.unwrap_or_default();
        assert!(
            msg.starts_with("429 rate limited") && msg.contains("retry after 3600 s"),
            "{msg}"
        );
        assert!(matches!(
            events.last(),
            Some(RetryEvent::Finished {
                success: false,
                attempt: 1,
                ..
            })
        ));
        // Retries disabled: the first error returns unchanged, whatever it asked for.
        let (reply, _, calls, _) = run(
            vec![rate_limited(3_600_000)],
            RetrySettings {
                enabled: false,
                ..Default::default()
            },
            CancellationToken::new(),
        )
        .await;
        assert_eq!(calls, 1);
        assert_eq!(reply.error_message.as_deref(), Some("429 rate limited"));
    }

    #[test]
    fn backoff_saturates() {
        assert_eq!(backoff_delay_ms(2000, 1), 2000);
        assert_eq!(backoff_delay_ms(2000, 3), 8000);
        assert_eq!(backoff_delay_ms(2000, 200), u64::MAX);
    }
}
