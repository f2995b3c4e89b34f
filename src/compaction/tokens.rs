//! Token accounting of a context exactly as Pi does it (compaction.md §3): the context estimate
//! (the last valid usage plus the estimates of the messages after it), the compaction settings
//! and Pi's `shouldCompact`. The per-message primitives are in [`crate::estimate`], re-exported
//! here.

use serde_json::Value;

pub use crate::estimate::*;

/// What [`estimate_context_tokens`] needs to know about one context message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MessageFacts {
    pub tokens: u64,
    pub usage_tokens: Option<f64>,
}

impl MessageFacts {
    pub fn of(m: &Value) -> MessageFacts {
        MessageFacts {
            tokens: estimate_value(m),
            usage_tokens: message_usage_tokens(m),
        }
    }
}

/// Result of `estimateContextTokens` (compaction.md §3.4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextEstimate {
    pub tokens: f64,
    pub usage_tokens: f64,
    pub trailing_tokens: u64,
    pub last_usage_index: Option<usize>,
}

/// `estimateContextTokens(messages)`: the last valid usage plus estimates of what follows it, or
/// the sum of all estimates when no message has valid usage.
pub fn estimate_context_tokens<I>(messages: I) -> ContextEstimate
where
    I: IntoIterator<Item = MessageFacts>,
{
    let mut last_usage: Option<(usize, f64)> = None;
    let mut trailing: u64 = 0;
    let mut total: u64 = 0;
    for (i, f) in messages.into_iter().enumerate() {
        total += f.tokens;
        if let Some(u) = f.usage_tokens {
            last_usage = Some((i, u));
            trailing = 0;
        } else {
            trailing += f.tokens;
        }
    }
    match last_usage {
        Some((idx, usage)) => ContextEstimate {
            tokens: usage + trailing as f64,
            usage_tokens: usage,
            trailing_tokens: trailing,
            last_usage_index: Some(idx),
        },
        None => ContextEstimate {
            tokens: total as f64,
            usage_tokens: 0.0,
            trailing_tokens: total,
            last_usage_index: None,
        },
    }
}

/// Pi's compaction settings block (compaction.md §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    pub enabled: bool,
    pub reserve_tokens: i64,
    pub keep_recent_tokens: i64,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            enabled: true,
            reserve_tokens: 16384,
            keep_recent_tokens: 20000,
        }
    }
}

impl CompactionSettings {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "enabled": self.enabled,
            "reserveTokens": self.reserve_tokens,
            "keepRecentTokens": self.keep_recent_tokens,
        })
    }
}

/// `shouldCompact`: enabled and strictly above `contextWindow - reserveTokens`.
pub fn should_compact(
    context_tokens: f64,
    context_window: i64,
    settings: &CompactionSettings,
) -> bool {
    settings.enabled && context_tokens > threshold(context_window, settings)
}

/// Pi's threshold, `contextWindow − reserveTokens`, in floating point as Pi computes it (no
/// overflow whatever the settings); every decision measured against it uses this one.
pub fn threshold(context_window: i64, settings: &CompactionSettings) -> f64 {
    context_window as f64 - settings.reserve_tokens as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn est(v: Value) -> u64 {
        estimate_value(&v)
    }

    #[test]
    fn verified_estimates_from_the_spec() {
        assert_eq!(est(json!({"role":"user","content":"abcde"})), 2);
        assert_eq!(
            est(
                json!({"role":"user","content":[{"type":"image","data":"x","mimeType":"image/png"},{"type":"text","text":"a"}]})
            ),
            1201
        );
        assert_eq!(
            est(
                json!({"role":"assistant","content":[{"type":"toolCall","id":"1","name":"read","arguments":{"path":"a"}}]})
            ),
            4
        );
        assert_eq!(est(json!({"role":"user","content":"😀"})), 1);
        assert_eq!(
            est(json!({"role":"bashExecution","command":"ls","output":"abc"})),
            2
        );
        assert_eq!(est(json!({"role":"weird","content":"abc"})), 0);
        assert_eq!(est(json!({"role":"user","content":null})), 0);
    }

    #[test]
    fn context_estimate_skips_error_usage_but_counts_its_text() {
        let msgs = [
            json!({"role":"user","content":"aaaa"}),
            json!({"role":"assistant","content":[],"usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":100},"stopReason":"stop"}),
            json!({"role":"user","content":"aaaaa"}),
            json!({"role":"assistant","content":[{"type":"text","text":"x"}],"usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":500},"stopReason":"error"}),
        ];
        let e = estimate_context_tokens(msgs.iter().map(MessageFacts::of));
        assert_eq!(
            e,
            ContextEstimate {
                tokens: 103.0,
                usage_tokens: 100.0,
                trailing_tokens: 3,
                last_usage_index: Some(1)
            }
        );
    }

    #[test]
    fn total_tokens_zero_falls_back_to_the_sum() {
        let u = json!({"input":3,"output":4,"cacheRead":5,"cacheWrite":6,"totalTokens":0});
        assert_eq!(calculate_context_tokens(u.as_object().unwrap()), 18.0);
        let missing = json!({"input":3});
        assert!(calculate_context_tokens(missing.as_object().unwrap()).is_nan());
    }

    #[test]
    fn should_compact_is_strict() {
        let s = CompactionSettings {
            enabled: true,
            reserve_tokens: 16,
            keep_recent_tokens: 0,
        };
        assert!(!should_compact(100.0, 116, &s));
        assert!(should_compact(101.0, 116, &s));
        assert!(!should_compact(
            1e9,
            116,
            &CompactionSettings {
                enabled: false,
                ..s
            }
        ));
    }
}
