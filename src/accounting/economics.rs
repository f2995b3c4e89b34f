//! What a compaction due now would cost and save (`previewCompaction`'s `economics`).
//!
//! A compaction changes the prompt's prefix, so the next request writes the summary and the
//! kept tail to the provider's cache at the cache-write price, where it would otherwise have
//! read the whole context at the cache-read price; every later request then reads fewer tokens.
//! After the provider's cache has expired (an idle user) the next request writes everything
//! anyway, so the rewrite costs the compaction nothing.

use schemars::JsonSchema;
use serde::Serialize;

use super::cost::usd;
use super::prices::Price;

/// The numbers a preview knows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inputs {
    /// The context's size now.
    pub tokens_before: u64,
    /// Estimated tokens of the kept tail.
    pub kept_tokens: u64,
    /// Estimated tokens of the summary (a ready speculation's own, the previous summary's
    /// size, or a typical summary's).
    pub summary_tokens: u64,
    /// Estimated prompt tokens of the summarization call(s).
    pub summarization_input_tokens: u64,
    /// The summarizer's price (`Some(zero)` for the extractive one; `None`: unknown).
    pub summarizer_price: Option<Price>,
    /// The agent's model's price (its requests read and write the cache).
    pub agent_price: Option<Price>,
    /// The provider's cache is cold anyway (the last reply is older than its TTL).
    pub cache_cold: bool,
}

/// Dollar figures; each is null when a price it needs is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usd {
    /// The summarization call(s): prompt at the input price, the summary at the output price.
    pub summarization: Option<f64>,
    /// The next request's cache write of the summary and kept tail (0 when the cache is cold).
    pub cache_rewrite: Option<f64>,
    /// What every later request saves: the tokens it no longer reads, at the cache-read price.
    pub saved_per_request: Option<f64>,
}

/// `previewCompaction`'s `economics`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Economics {
    pub tokens_before: u64,
    /// The summary plus the kept tail.
    pub estimated_tokens_after: u64,
    pub saved_tokens_per_request: u64,
    /// What the next request must write to the cache: the summary plus the kept tail.
    pub cache_rewrite_tokens: u64,
    pub summarization_input_tokens: u64,
    /// Whether the provider's cache is still warm (the last reply is within its TTL).
    pub cache_warm: bool,
    pub usd: Usd,
    /// Requests after which the savings pay for the summarization and the rewrite (null
    /// without prices, or when nothing is saved).
    pub break_even_requests: Option<u64>,
}

impl Economics {
    pub fn of(i: &Inputs) -> Economics {
        let after = i.kept_tokens + i.summary_tokens;
        let saved = i.tokens_before.saturating_sub(after);
        let summarization = i
            .summarizer_price
            .map(|p| usd(i.summarization_input_tokens, p.input) + usd(i.summary_tokens, p.output));
        let cache_rewrite = i.agent_price.map(|p| {
            if i.cache_cold {
                0.0
            } else {
                usd(after, p.cache_write)
            }
        });
        let saved_per_request = i.agent_price.map(|p| usd(saved, p.cache_read));
        let break_even_requests = match (summarization, cache_rewrite, saved_per_request) {
            (Some(s), Some(r), Some(per)) if per > 0.0 => Some(((s + r) / per).ceil() as u64),
            _ => None,
        };
        Economics {
            tokens_before: i.tokens_before,
            estimated_tokens_after: after,
            saved_tokens_per_request: saved,
            cache_rewrite_tokens: after,
            summarization_input_tokens: i.summarization_input_tokens,
            cache_warm: !i.cache_cold,
            usd: Usd {
                summarization,
                cache_rewrite,
                saved_per_request,
            },
            break_even_requests,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SONNET: Price = Price {
        input: 3.0,
        output: 15.0,
        cache_read: 0.30,
        cache_write: 3.75,
    };

    fn inputs() -> Inputs {
        Inputs {
            tokens_before: 150_000,
            kept_tokens: 18_000,
            summary_tokens: 2_000,
            summarization_input_tokens: 131_000,
            summarizer_price: Some(SONNET),
            agent_price: Some(SONNET),
            cache_cold: false,
        }
    }

    #[test]
    fn known_numbers() {
        let e = Economics::of(&inputs());
        assert_eq!(e.estimated_tokens_after, 20_000);
        assert_eq!(e.saved_tokens_per_request, 130_000);
        assert_eq!(e.cache_rewrite_tokens, 20_000);
        // 131k × $3/M + 2k × $15/M = 0.393 + 0.03
        assert!((e.usd.summarization.unwrap() - 0.423).abs() < 1e-9);
        // 20k × $3.75/M
        assert!((e.usd.cache_rewrite.unwrap() - 0.075).abs() < 1e-9);
        // 130k × $0.30/M
        assert!((e.usd.saved_per_request.unwrap() - 0.039).abs() < 1e-9);
        // (0.423 + 0.075) / 0.039 = 12.77
        assert_eq!(e.break_even_requests, Some(13));
        assert!(e.cache_warm);
    }

    #[test]
    fn a_cold_cache_makes_the_rewrite_free_and_unknown_prices_stay_null() {
        let cold = Economics::of(&Inputs {
            cache_cold: true,
            ..inputs()
        });
        assert_eq!(cold.usd.cache_rewrite, Some(0.0));
        assert_eq!(cold.break_even_requests, Some(11));
        let unknown = Economics::of(&Inputs {
            agent_price: None,
            ..inputs()
        });
        assert_eq!(unknown.usd.cache_rewrite, None);
        assert_eq!(unknown.usd.saved_per_request, None);
        assert_eq!(unknown.break_even_requests, None);
        assert!(unknown.usd.summarization.is_some());
        let json = serde_json::to_value(unknown).unwrap();
        assert!(json["usd"]["cacheRewrite"].is_null());
    }
}
