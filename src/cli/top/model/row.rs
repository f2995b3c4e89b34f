//! A table row: one session's cells and its state, most pressing first.

use super::format::{duration, opt_tokens, session_name, short_id};
use super::session::{Auto, Last, SessionView, Speculation};

/// What a row's state cell says, most pressing first.
#[derive(Debug, Clone, PartialEq)]
pub enum RowState {
    Compacting {
        reason: String,
        elapsed_ms: Option<u64>,
        retry: Option<(u64, u64)>,
    },
    /// Busy without a known compaction (a branch summary, or an older daemon).
    Busy,
    Speculating {
        covers: String,
        tokens: Option<f64>,
    },
    Suppressed,
    Paused,
    SpeculationReady {
        covers: String,
        summary_tokens: Option<f64>,
    },
    AutoOff,
    Idle,
}

impl RowState {
    /// For the terminal view.
    pub fn label(&self) -> String {
        match self {
            RowState::Compacting {
                reason,
                elapsed_ms,
                retry,
            } => {
                let mut s = format!("compacting {reason}");
                if let Some(ms) = elapsed_ms {
                    s += &format!(" {}", duration(*ms));
                }
                if let Some((a, m)) = retry {
                    s += &format!(" (retry {a}/{m})");
                }
                s
            }
            RowState::Busy => "busy".into(),
            RowState::Speculating { covers, tokens } => {
                format!(
                    "speculating ≤{}{}",
                    short_id(covers),
                    opt_tokens(*tokens, " ")
                )
            }
            RowState::Suppressed => "suppressed (thrash)".into(),
            RowState::Paused => "paused (thrash)".into(),
            RowState::SpeculationReady {
                covers,
                summary_tokens,
            } => format!(
                "ready ≤{}{}",
                short_id(covers),
                opt_tokens(*summary_tokens, " → ")
            ),
            RowState::AutoOff => "idle (auto off)".into(),
            RowState::Idle => "idle".into(),
        }
    }

    /// For `--once`: one word, no spaces (`compacting:manual:1.2s`).
    pub fn word(&self) -> String {
        match self {
            RowState::Compacting {
                reason,
                elapsed_ms,
                retry,
            } => {
                let mut s = format!("compacting:{reason}");
                if let Some(ms) = elapsed_ms {
                    s += &format!(":{}", duration(*ms));
                }
                if let Some((a, m)) = retry {
                    s += &format!(":retry{a}/{m}");
                }
                s
            }
            RowState::Busy => "busy".into(),
            RowState::Speculating { covers, tokens } => {
                format!(
                    "speculating:{}{}",
                    short_id(covers),
                    opt_tokens(*tokens, ":")
                )
            }
            RowState::Suppressed => "suppressed".into(),
            RowState::Paused => "paused".into(),
            RowState::SpeculationReady {
                covers,
                summary_tokens,
            } => format!(
                "ready:{}{}",
                short_id(covers),
                opt_tokens(*summary_tokens, ":")
            ),
            RowState::AutoOff => "idle:auto-off".into(),
            RowState::Idle => "idle".into(),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub session_id: String,
    /// The cwd and file, shortened ([`session_name`]).
    pub name: String,
    pub path: String,
    pub model: Option<String>,
    pub tokens: Option<f64>,
    pub threshold: Option<f64>,
    pub window: Option<i64>,
    pub state: RowState,
    pub last: Option<Last>,
    /// Milliseconds since the last compaction.
    pub last_age_ms: Option<i64>,
    /// The daemon is unreachable: the row shows what it last said.
    pub stale: bool,
}

impl Row {
    /// Context tokens as a percentage of the window (as `getContextUsage` reports it).
    pub fn percent(&self) -> Option<f64> {
        match (self.tokens, self.window) {
            (Some(t), Some(w)) if w > 0 => Some(t / w as f64 * 100.0),
            _ => None,
        }
    }

    pub(super) fn matches(&self, filter: &str) -> bool {
        if filter.is_empty() {
            return true;
        }
        let needle = filter.to_lowercase();
        [
            self.session_id.as_str(),
            self.name.as_str(),
            self.path.as_str(),
            self.model.as_deref().unwrap_or(""),
        ]
        .iter()
        .any(|h| h.to_lowercase().contains(&needle))
    }
}

pub(super) fn row(id: &str, v: &SessionView, stale: bool, now_ms: i64) -> Row {
    let state = if let Some(c) = &v.compacting {
        RowState::Compacting {
            reason: c.reason.clone(),
            elapsed_ms: c.since_ms.map(|s| (now_ms - s).max(0) as u64),
            retry: c.retry,
        }
    } else if v.busy {
        RowState::Busy
    } else if let Some(Speculation::Running { covers, tokens }) = &v.speculation {
        RowState::Speculating {
            covers: covers.clone(),
            tokens: *tokens,
        }
    } else if v.auto == Some(Auto::Suppressed) {
        RowState::Suppressed
    } else if v.auto == Some(Auto::Paused) {
        RowState::Paused
    } else if let Some(Speculation::Ready {
        covers,
        summary_tokens,
        ..
    }) = &v.speculation
    {
        RowState::SpeculationReady {
            covers: covers.clone(),
            summary_tokens: *summary_tokens,
        }
    } else if v.auto == Some(Auto::Off) {
        RowState::AutoOff
    } else {
        RowState::Idle
    };
    Row {
        session_id: id.to_owned(),
        // A session known only from an event so far (its listing is on the way).
        name: if v.path.is_empty() {
            "…".into()
        } else {
            session_name(v.cwd.as_deref(), &v.path)
        },
        path: v.path.clone(),
        model: v.model.clone(),
        tokens: v.tokens,
        threshold: v.threshold,
        window: v.window,
        state,
        last_age_ms: v
            .last
            .as_ref()
            .and_then(|l| l.at_ms)
            .map(|at| (now_ms - at).max(0)),
        last: v.last.clone(),
        stale,
    }
}
