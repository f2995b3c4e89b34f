//! Model prices: `[prices."<model id>"]` (or `"<provider>/<model id>"`) in `config.toml`, over a
//! built-in table of the common models. An unknown model has no price: its money figures are
//! `null`, never 0.

use std::collections::BTreeMap;

use serde::Deserialize;

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

impl Price {
    const fn of(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
        Price {
            input,
            output,
            cache_read,
            cache_write,
        }
    }
}

/// The built-in prices: list prices per million tokens, standard tier, prompts under 200k tokens
/// where a provider charges more above. Keys are `provider/model id`; a model id with a date
/// suffix (`claude-sonnet-4-5-20250929`) takes its family's price.
const BUILT_IN: &[(&str, Price)] = &[
    // Anthropic, docs.anthropic.com/en/docs/about-claude/pricing, as published 2025-11-24:
    // cache_write is the 5-minute write (1.25x input), cache_read a cache hit (0.1x input).
    (
        "anthropic/claude-opus-4-5",
        Price::of(5.0, 25.0, 0.50, 6.25),
    ),
    (
        "anthropic/claude-opus-4-1",
        Price::of(15.0, 75.0, 1.50, 18.75),
    ),
    (
        "anthropic/claude-opus-4",
        Price::of(15.0, 75.0, 1.50, 18.75),
    ),
    (
        "anthropic/claude-sonnet-4-5",
        Price::of(3.0, 15.0, 0.30, 3.75),
    ),
    (
        "anthropic/claude-sonnet-4",
        Price::of(3.0, 15.0, 0.30, 3.75),
    ),
    (
        "anthropic/claude-haiku-4-5",
        Price::of(1.0, 5.0, 0.10, 1.25),
    ),
    // Anthropic, the same page as of 2026-02 for the 4.6 models (same rates as their 4.5
    // predecessors' tiers).
    (
        "anthropic/claude-opus-4-6",
        Price::of(5.0, 25.0, 0.50, 6.25),
    ),
    (
        "anthropic/claude-sonnet-4-6",
        Price::of(3.0, 15.0, 0.30, 3.75),
    ),
    // OpenAI, openai.com/api/pricing, as published 2025-11-13: cached input is the cache read;
    // OpenAI charges no premium to write the cache, so cache_write is the input price.
    ("openai/gpt-5.1", Price::of(1.25, 10.0, 0.125, 1.25)),
    ("openai/gpt-5", Price::of(1.25, 10.0, 0.125, 1.25)),
    ("openai/gpt-5-mini", Price::of(0.25, 2.0, 0.025, 0.25)),
    ("openai/gpt-5-nano", Price::of(0.05, 0.40, 0.005, 0.05)),
    ("openai/gpt-4.1", Price::of(2.0, 8.0, 0.50, 2.0)),
    ("openai/gpt-4.1-mini", Price::of(0.40, 1.60, 0.10, 0.40)),
    ("openai/gpt-4.1-nano", Price::of(0.10, 0.40, 0.025, 0.10)),
    // Google, ai.google.dev/gemini-api/docs/pricing, as published 2025-11-18 (prompts up to
    // 200k tokens): context-cache reads; implicit caching has no write premium, so cache_write
    // is the input price (explicit caches also bill storage per hour, not modelled here).
    (
        "google/gemini-3-pro-preview",
        Price::of(2.0, 12.0, 0.20, 2.0),
    ),
    ("google/gemini-2.5-pro", Price::of(1.25, 10.0, 0.125, 1.25)),
    ("google/gemini-2.5-flash", Price::of(0.30, 2.50, 0.03, 0.30)),
    (
        "google/gemini-2.5-flash-lite",
        Price::of(0.10, 0.40, 0.01, 0.10),
    ),
];

/// The prices compactd knows: the configuration's over the built-in table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct PriceTable {
    /// `[prices."<model id>"]` and `[prices."<provider>/<model id>"]` from `config.toml`.
    configured: BTreeMap<String, Price>,
}

/// `id` without a trailing `-YYYYMMDD` date (Anthropic's snapshot ids).
fn undated(id: &str) -> &str {
    match id.rsplit_once('-') {
        Some((family, date)) if date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()) => {
            family
        }
        _ => id,
    }
}

impl Price {
    /// The highest price per million tokens accepted from a configuration: far above any
    /// model's (the dearest list price is under $200), so a larger one is a typo.
    pub const MAX: f64 = 1_000_000.0;

    /// Why this configured price makes no sense, naming the field (`None`: it does): each rate
    /// must be a finite number of dollars, 0 or more, at most [`Price::MAX`]. A negative, NaN
    /// or infinite rate (TOML writes `nan` and `inf`) reported negative dollars or `null`.
    pub fn invalid_field(&self) -> Option<String> {
        [
            ("input", self.input),
            ("output", self.output),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
        ]
        .into_iter()
        .find(|(_, v)| !(v.is_finite() && (0.0..=Price::MAX).contains(v)))
        .map(|(name, v)| {
            format!(
                "{name} = {v} must be a finite number of dollars per million tokens from 0 to {}",
                Price::MAX
            )
        })
    }
}

impl PriceTable {
    /// The configured prices that make no sense, as `prices."<key>".<field> …` messages.
    pub fn invalid(&self) -> Option<String> {
        self.configured.iter().find_map(|(key, price)| {
            price
                .invalid_field()
                .map(|why| format!("prices.{key:?}.{why}"))
        })
    }

    /// A table with `configured` prices over the built-in ones.
    pub fn new(configured: BTreeMap<String, Price>) -> PriceTable {
        PriceTable { configured }
    }

    /// The price of `provider`'s model `id`: a configured `provider/id`, then a configured
    /// `id`, then the built-in table (by provider and id for the providers it lists, by id
    /// alone for any other); a dated id falls back to its family.
    pub fn lookup(&self, provider: Option<&str>, id: &str) -> Option<Price> {
        for id in [id, undated(id)] {
            if let Some(p) = provider.and_then(|p| self.configured.get(&format!("{p}/{id}"))) {
                return Some(*p);
            }
            if let Some(p) = self.configured.get(id) {
                return Some(*p);
            }
            // Another provider serving a model under its original id (a proxy, a cloud
            // marketplace) is priced as the model's maker lists it.
            let known = provider.is_some_and(|p| {
                BUILT_IN
                    .iter()
                    .any(|(key, _)| key.split_once('/').is_some_and(|(k, _)| k == p))
            });
            let built_in = BUILT_IN.iter().find(|(key, _)| match provider {
                Some(p) if known => *key == format!("{p}/{id}"),
                _ => key.rsplit_once('/').is_some_and(|(_, k)| k == id),
            });
            if let Some((_, p)) = built_in {
                return Some(*p);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_prices_win_and_dated_ids_take_their_familys() {
        let table = PriceTable::new(BTreeMap::from([
            (
                "claude-sonnet-4-5".to_owned(),
                Price::of(1.0, 2.0, 0.1, 1.5),
            ),
            ("acme/house-model".to_owned(), Price::of(9.0, 9.0, 9.0, 9.0)),
        ]));
        assert_eq!(
            table.lookup(Some("anthropic"), "claude-sonnet-4-5"),
            Some(Price::of(1.0, 2.0, 0.1, 1.5)),
            "the configuration overrides the table"
        );
        assert_eq!(
            table.lookup(Some("anthropic"), "claude-haiku-4-5-20251001"),
            Some(Price::of(1.0, 5.0, 0.10, 1.25))
        );
        assert_eq!(
            table.lookup(Some("acme"), "house-model"),
            Some(Price::of(9.0, 9.0, 9.0, 9.0))
        );
        assert_eq!(table.lookup(Some("other"), "house-model"), None);
        assert_eq!(
            table.lookup(None, "gpt-4.1"),
            Some(Price::of(2.0, 8.0, 0.50, 2.0))
        );
        assert_eq!(table.lookup(Some("openai"), "no-such-model"), None);
        // A listed provider must list the model: Anthropic sells no "gpt-5".
        assert_eq!(table.lookup(Some("anthropic"), "gpt-5"), None);
        // Another provider serving it under its original id gets the maker's price.
        assert_eq!(
            table.lookup(Some("my-proxy"), "gpt-5"),
            Some(Price::of(1.25, 10.0, 0.125, 1.25))
        );
    }
}
