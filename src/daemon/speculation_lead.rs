//! Beyond Pi: when a speculative compaction starts, so that its summary is ready when the
//! threshold comes (pure: times are passed in, nothing is read from a clock here).
//!
//! A fixed `compaction.speculativeAt` fraction starts it at that fraction of the threshold, as
//! it always did. `"auto"` starts it once the context, growing at the rate it grew over the
//! last appends ([`Growth`]), would reach the threshold within the time the session's
//! summarizer takes ([`Latency`], a moving estimate of its summaries' wall time, a split
//! turn's concurrent calls included), with a margin. A summary started too early is not lost
//! (the compaction at the threshold installs it, and the tail appended since is kept), but it
//! covers less, so the next compaction comes sooner; a summary started too late makes the agent
//! wait at the threshold. Hence the bounds: never below [`AUTO_FLOOR`] of the threshold, always
//! by [`AUTO_CEILING`], and [`DEFAULT_FRACTION`] while the context's growth is not known yet.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::rpc::types::SpeculativeAt;

/// `compaction.speculativeAt` when a session with an LLM summarizer does not set it, and where
/// `"auto"` starts while it knows no growth rate.
pub const DEFAULT_FRACTION: f64 = 0.75;
/// `"auto"` never starts below this fraction of the threshold.
pub const AUTO_FLOOR: f64 = 0.5;
/// `"auto"` starts here at the latest: one big turn may cross the rest.
pub const AUTO_CEILING: f64 = 0.9;
/// The latency assumed before a summary of the engine was measured: a slow model's, so the
/// first speculation of a daemon starts early rather than late.
pub const LATENCY_PRIOR: Duration = Duration::from_secs(10);
/// The lead is the expected latency times this, plus [`LATENCY_SLACK`]: a summary of a longer
/// span takes longer than the ones measured, and the agent's check comes after its append.
const LATENCY_FACTOR: f64 = 1.25;
const LATENCY_SLACK: Duration = Duration::from_millis(500);
/// The weight of the newest measurement in the moving estimate.
const LATENCY_WEIGHT: f64 = 0.3;
/// How far back the growth rate looks (the agent's recent pace, not the session's history).
const RATE_WINDOW: Duration = Duration::from_secs(10);
/// At most this many samples are kept (a check and an append per turn).
const MAX_SAMPLES: usize = 32;

/// A moving estimate of how long one engine takes to write a summary.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    seconds: Option<f64>,
}

impl Latency {
    /// Adds a summary that took `took`.
    pub fn observe(&mut self, took: Duration) {
        let t = took.as_secs_f64();
        self.seconds = Some(match self.seconds {
            Some(mean) => mean + LATENCY_WEIGHT * (t - mean),
            None => t,
        });
    }

    /// The estimate, once a summary was measured.
    pub fn estimate(&self) -> Option<Duration> {
        self.seconds.map(Duration::from_secs_f64)
    }
}

/// The context's size over its recent appends, for its growth rate.
#[derive(Debug, Clone, Default)]
pub struct Growth {
    samples: VecDeque<(Instant, f64)>,
}

impl Growth {
    /// The context holds `tokens` at `at`. A smaller context than the last sample (a
    /// compaction, a navigation) starts the record afresh.
    pub fn observe(&mut self, at: Instant, tokens: f64) {
        if self.samples.back().is_some_and(|&(_, last)| tokens < last) {
            self.samples.clear();
        }
        self.samples.push_back((at, tokens));
        while self.samples.len() > MAX_SAMPLES
            || self
                .samples
                .front()
                .is_some_and(|&(t, _)| at.saturating_duration_since(t) > RATE_WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// Tokens per second over the samples kept, once they span a millisecond (an agent that
    /// appends turns that fast grows faster than any summarizer).
    pub fn rate(&self) -> Option<f64> {
        let (&(t0, first), &(t1, last)) = (self.samples.front()?, self.samples.back()?);
        let span = t1.saturating_duration_since(t0).as_secs_f64();
        (span >= 0.001).then(|| (last - first) / span)
    }
}

/// Whether a speculation is due with the context at `tokens` of `threshold`, by the rule `at`,
/// the context growing at `rate` tokens per second (if known) and the summarizer taking
/// `latency` (if measured).
pub fn due(
    at: SpeculativeAt,
    tokens: f64,
    threshold: f64,
    rate: Option<f64>,
    latency: Option<Duration>,
) -> bool {
    match at {
        SpeculativeAt::Fraction(f) => f > 0.0 && f < 1.0 && tokens >= f * threshold,
        SpeculativeAt::Adaptive(_) => {
            if tokens < AUTO_FLOOR * threshold {
                return false;
            }
            if tokens >= AUTO_CEILING * threshold {
                return true;
            }
            let Some(rate) = rate.filter(|r| *r > 0.0) else {
                return tokens >= DEFAULT_FRACTION * threshold;
            };
            let lead = latency.unwrap_or(LATENCY_PRIOR).as_secs_f64() * LATENCY_FACTOR
                + LATENCY_SLACK.as_secs_f64();
            (threshold - tokens) / rate <= lead
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::types::Adaptive;

    const AUTO: SpeculativeAt = SpeculativeAt::Adaptive(Adaptive::Auto);

    #[test]
    fn a_fixed_fraction_starts_there_whatever_the_pace() {
        let at = SpeculativeAt::Fraction(0.75);
        for rate in [None, Some(1.0), Some(1e6)] {
            assert!(!due(at, 74.0, 100.0, rate, Some(Duration::from_secs(60))));
            assert!(due(at, 75.0, 100.0, rate, Some(Duration::ZERO)));
        }
        assert!(!due(SpeculativeAt::Fraction(0.0), 99.0, 100.0, None, None));
    }

    /// 3 s summaries, 1.7k tokens every half second (3 400 a second): 3 s × 1.25 + 0.5 s of
    /// lead is 14 450 tokens, so with a 36 000-token threshold "auto" starts at 21 550.
    #[test]
    fn auto_starts_when_the_threshold_is_within_the_summarizers_time() {
        let latency = Some(Duration::from_secs(3));
        assert!(!due(AUTO, 21_000.0, 36_000.0, Some(3_400.0), latency));
        assert!(due(AUTO, 21_600.0, 36_000.0, Some(3_400.0), latency));
        // A slow agent: later, but by the ceiling at the latest.
        assert!(!due(AUTO, 30_000.0, 36_000.0, Some(100.0), latency));
        assert!(due(AUTO, 32_400.0, 36_000.0, Some(100.0), latency));
        // A fast one: never below the floor.
        assert!(!due(AUTO, 17_000.0, 36_000.0, Some(1e9), latency));
        assert!(due(AUTO, 18_000.0, 36_000.0, Some(1e9), latency));
    }

    #[test]
    fn auto_assumes_a_slow_summarizer_until_one_was_measured_and_the_default_until_growth_is_known()
    {
        // 10 s prior: 13 s of lead at 1 000 tokens a second.
        assert!(due(AUTO, 23_000.0, 36_000.0, Some(1_000.0), None));
        assert!(!due(
            AUTO,
            23_000.0,
            36_000.0,
            Some(1_000.0),
            Some(Duration::from_secs(1))
        ));
        for rate in [None, Some(0.0), Some(-5.0)] {
            assert!(!due(AUTO, 26_000.0, 36_000.0, rate, None));
            assert!(due(AUTO, 27_000.0, 36_000.0, rate, None));
        }
    }

    #[test]
    fn the_latency_estimate_moves_toward_new_measurements() {
        let mut l = Latency::default();
        assert_eq!(l.estimate(), None);
        l.observe(Duration::from_secs(3));
        assert_eq!(l.estimate(), Some(Duration::from_secs(3)));
        l.observe(Duration::from_secs(13));
        assert_eq!(l.estimate(), Some(Duration::from_secs(6)));
    }

    #[test]
    fn growth_is_measured_over_recent_appends_and_restarts_after_a_compaction() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut g = Growth::default();
        g.observe(at(0), 1_000.0);
        assert_eq!(g.rate(), None);
        g.observe(at(500), 2_700.0);
        assert_eq!(g.rate(), Some(3_400.0));
        // A fast start long ago no longer counts.
        g.observe(at(30_000), 4_700.0);
        g.observe(at(32_000), 6_700.0);
        assert_eq!(g.rate(), Some(1_000.0));
        // A compaction: the record starts again.
        g.observe(at(33_000), 3_000.0);
        assert_eq!(g.rate(), None);
    }
}
