//! What a set of provider calls consumed, in tokens and (with a price) in US dollars.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::prices::Price;

/// Tokens of one or more calls, by kind, and their price (`None`: the model has no known
/// price, never 0). Serialized as `{input, output, cacheRead, cacheWrite, usd}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// US dollars; null when the model's price is unknown. Written rounded to a billionth of
    /// a dollar (sums of prices in floating point carry noise such as `0.5497500000000001`;
    /// every price is a whole number of billionths per token at most).
    #[serde(serialize_with = "rounded_usd")]
    pub usd: Option<f64>,
}

/// `usd` rounded to 1e-9 dollars as it is written.
fn rounded_usd<S: serde::Serializer>(usd: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match usd {
        Some(v) => s.serialize_some(&round_usd(*v)),
        None => s.serialize_none(),
    }
}

/// Dollars rounded to a billionth, as they are shown and written.
pub fn round_usd(v: f64) -> f64 {
    (v * 1e9).round() / 1e9
}

/// `tokens` at `per_million` USD per million.
pub fn usd(tokens: u64, per_million: f64) -> f64 {
    tokens as f64 * per_million / 1_000_000.0
}

impl Cost {
    /// Nothing spent, at a known price of 0 (the extractive summarizer).
    pub const FREE: Cost = Cost {
        input: 0,
        output: 0,
        cache_read: 0,
        cache_write: 0,
        usd: Some(0.0),
    };

    /// These tokens, priced at `price`.
    pub fn of(
        input: u64,
        output: u64,
        cache_read: u64,
        cache_write: u64,
        price: Option<Price>,
    ) -> Cost {
        let mut c = Cost {
            input,
            output,
            cache_read,
            cache_write,
            usd: None,
        };
        // No tokens cost nothing at any price: a free compaction is free, priced or not.
        c.usd = match price {
            Some(p) => Some(c.priced(p)),
            None if c.tokens() == 0 => Some(0.0),
            None => None,
        };
        c
    }

    /// These tokens at `p`.
    pub fn priced(&self, p: Price) -> f64 {
        usd(self.input, p.input)
            + usd(self.output, p.output)
            + usd(self.cache_read, p.cache_read)
            + usd(self.cache_write, p.cache_write)
    }

    /// Both together: tokens add up; the price is known only when both are.
    pub fn plus(&self, other: &Cost) -> Cost {
        Cost {
            input: self.input + other.input,
            output: self.output + other.output,
            cache_read: self.cache_read + other.cache_read,
            cache_write: self.cache_write + other.cache_write,
            usd: self.usd.zip(other.usd).map(|(a, b)| a + b),
        }
    }

    pub fn tokens(&self) -> u64 {
        self.input + self.output + self.cache_read + self.cache_write
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dollars_are_written_without_float_noise_and_nothing_spent_is_free() {
        use super::*;
        let a = Cost {
            usd: Some(0.1),
            ..Cost::default()
        };
        let b = Cost {
            usd: Some(0.2),
            ..Cost::default()
        };
        // 0.1 + 0.2 is 0.30000000000000004 in floating point.
        let sum = a.plus(&b);
        assert_eq!(
            serde_json::to_value(sum).unwrap()["usd"],
            serde_json::json!(0.3)
        );
        let noisy = Cost {
            usd: Some(0.5497500000000001),
            ..Cost::default()
        };
        assert_eq!(
            serde_json::to_string(&noisy).unwrap(),
            r#"{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"usd":0.54975}"#
        );
        assert_eq!(
            Cost::of(0, 0, 0, 0, None).usd,
            Some(0.0),
            "nothing spent is free"
        );
        assert_eq!(
            Cost::of(5, 0, 0, 0, None).usd,
            None,
            "tokens at no known price"
        );
    }

    use super::*;

    #[test]
    fn prices_each_kind_and_unknown_prices_stay_unknown() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cache_read: 0.30,
            cache_write: 3.75,
        };
        let c = Cost::of(2_000_000, 100_000, 1_000_000, 400_000, Some(price));
        // 2 × 3 + 0.1 × 15 + 1 × 0.3 + 0.4 × 3.75
        assert!((c.usd.unwrap() - 9.3).abs() < 1e-9, "{c:?}");
        let unknown = Cost::of(2_000_000, 100_000, 1_000_000, 400_000, None);
        assert_eq!(unknown.usd, None);
        assert_eq!(c.plus(&unknown).usd, None);
        assert_eq!(c.plus(&Cost::FREE).usd, c.usd);
        assert_eq!(c.plus(&c).input, 4_000_000);
        let json = serde_json::to_value(unknown).unwrap();
        assert_eq!(json["usd"], serde_json::Value::Null);
        assert_eq!(json["cacheWrite"], 400_000);
    }
}
