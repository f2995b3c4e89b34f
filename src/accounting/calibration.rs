//! Calibrated estimates (beyond Pi, opt-in). Pi's context size is the last reply's reported
//! usage plus chars/4 for every message after it; chars/4 drifts from a model's real tokenizer
//! (code, JSON, non-English text). Each new reply measures that drift exactly: the tokens the
//! provider reports for its prompt, less the previous reply's reported context, are the real
//! size of the messages in between, whose chars/4 estimate was the trailing part. An
//! exponentially weighted average of that ratio, per model, corrects later trailing estimates.

/// Weight of a new sample in the average.
const ALPHA: f64 = 0.2;
/// Trailing estimates smaller than this say little about the ratio and are not sampled.
pub const MIN_TRAILING: u64 = 100;
/// Samples outside this range are measurement accidents (a cache reset, a changed system
/// prompt), not tokenizer drift.
const PLAUSIBLE: std::ops::RangeInclusive<f64> = 0.25..=4.0;
/// Samples before the ratio is used.
pub const MIN_SAMPLES: u64 = 3;

/// The learned ratio of real to estimated tokens for one model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    pub ratio: f64,
    pub samples: u64,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            ratio: 1.0,
            samples: 0,
        }
    }
}

impl Calibration {
    /// Takes one reply's measurement: the provider reported `reported_prompt` prompt tokens;
    /// the previous reply reported a context of `previous_context`, and compactd estimated the
    /// messages since at `trailing_estimate`. Returns whether the sample was taken.
    pub fn observe(
        &mut self,
        reported_prompt: f64,
        previous_context: f64,
        trailing_estimate: u64,
    ) -> bool {
        if trailing_estimate < MIN_TRAILING {
            return false;
        }
        let sample = (reported_prompt - previous_context) / trailing_estimate as f64;
        if !sample.is_finite() || !PLAUSIBLE.contains(&sample) {
            return false;
        }
        self.ratio = if self.samples == 0 {
            sample
        } else {
            self.ratio + ALPHA * (sample - self.ratio)
        };
        self.samples += 1;
        true
    }

    /// The factor for trailing estimates: the ratio once enough samples were taken, else 1.
    pub fn factor(&self) -> f64 {
        if self.samples >= MIN_SAMPLES {
            self.ratio
        } else {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_on_a_steady_drift_and_ignores_accidents() {
        let mut c = Calibration::default();
        assert!(!c.observe(10_500.0, 10_000.0, 50), "too little to measure");
        assert!(
            !c.observe(9_000.0, 10_000.0, 400),
            "a shrinking prompt is an accident"
        );
        assert_eq!(c.factor(), 1.0);
        for _ in 0..20 {
            assert!(c.observe(10_000.0 + 1.3 * 400.0, 10_000.0, 400));
        }
        assert!((c.ratio - 1.3).abs() < 1e-9);
        assert_eq!(c.factor(), c.ratio);
        // A change in drift is followed, not jumped to.
        c.observe(10_000.0 + 2.0 * 400.0, 10_000.0, 400);
        assert!(c.ratio > 1.3 && c.ratio < 2.0);
    }
}
