//! A session as the daemon described it: its `listSessions` member (authoritative for what it
//! carries) and what only events told about it between snapshots.

use serde_json::Value;

/// Where a session's automatic compaction stands (`SessionInfo.autoCompaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auto {
    On,
    Off,
    Suppressed,
    Paused,
}

impl Auto {
    pub(super) fn parse(s: &str) -> Option<Auto> {
        Some(match s {
            "on" => Auto::On,
            "off" => Auto::Off,
            "suppressed" => Auto::Suppressed,
            "paused" => Auto::Paused,
            _ => return None,
        })
    }
}

/// A compaction in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Compacting {
    /// `compaction_start`'s reason (`manual`, `threshold`, `overflow`, `idle`).
    pub reason: String,
    /// When it started, on this machine's clock (`None`: unknown).
    pub since_ms: Option<i64>,
    /// A summarizer retry in progress: (attempt, max attempts).
    pub retry: Option<(u64, u64)>,
}

/// A speculative compaction (issue 17): a summary prepared ahead of the threshold.
#[derive(Debug, Clone, PartialEq)]
pub enum Speculation {
    Running {
        covers: String,
        tokens: Option<f64>,
    },
    Ready {
        covers: String,
        summary_tokens: Option<f64>,
        ms: Option<u64>,
    },
}

/// What a compaction cost (issue 18).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cost {
    Usd(f64),
    /// The token counts are known but not the model's prices.
    Unpriced,
}

impl Cost {
    /// `{…, usd: number | null}`; anything else is no cost information.
    pub(super) fn parse(v: Option<&Value>) -> Option<Cost> {
        let usd = v?.as_object()?.get("usd")?;
        match usd {
            Value::Null => Some(Cost::Unpriced),
            other => other.as_f64().map(Cost::Usd),
        }
    }

    /// The cost a `compaction_end` result reports.
    pub(super) fn of(c: &crate::accounting::Cost) -> Cost {
        match c.usd {
            Some(usd) => Cost::Usd(usd),
            None => Cost::Unpriced,
        }
    }
}

/// The latest compaction of a session.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Last {
    pub at_ms: Option<i64>,
    pub tokens_before: Option<f64>,
    pub tokens_after: Option<f64>,
    pub summarizer: Option<String>,
    pub duration_ms: Option<u64>,
    pub cost: Option<Cost>,
    /// Its summary's handoff score (`compaction.handoff`), when it was checked.
    pub handoff: Option<f64>,
}

impl Last {
    /// An extractive compaction is free whether or not a cost came with it (`listSessions`
    /// names the summarizer, a `compaction_end` the cost): shown one way either way.
    pub(super) fn known_free(&mut self) {
        if self.cost.is_none() && self.summarizer.as_deref() == Some("extractive") {
            self.cost = Some(Cost::Usd(0.0));
        }
    }

    /// Fills what this one lacks from `earlier`, when both describe the same compaction.
    fn fill_from(&mut self, earlier: &Last) {
        if self.tokens_before != earlier.tokens_before {
            return;
        }
        self.tokens_after = self.tokens_after.or(earlier.tokens_after);
        self.duration_ms = self.duration_ms.or(earlier.duration_ms);
        self.cost = self.cost.or(earlier.cost);
        self.handoff = self.handoff.or(earlier.handoff);
        if self.summarizer.is_none() {
            self.summarizer.clone_from(&earlier.summarizer);
        }
    }
}

/// One open session as the daemon described it.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct SessionView {
    pub(super) path: String,
    pub(super) cwd: Option<String>,
    pub(super) model: Option<String>,
    pub(super) window: Option<i64>,
    pub(super) tokens: Option<f64>,
    pub(super) threshold: Option<f64>,
    pub(super) auto: Option<Auto>,
    /// `isCompacting`: a compaction or a branch summary holds the session.
    pub(super) busy: bool,
    pub(super) compacting: Option<Compacting>,
    pub(super) speculation: Option<Speculation>,
    pub(super) last: Option<Last>,
}

/// A session's view from its `SessionInfo`, keeping what only events told about it.
pub(super) fn session_from(item: &Value, prev: Option<&SessionView>, now_ms: i64) -> SessionView {
    let str_at = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
    let model = item.get("model");
    let busy = item.get("isCompacting") == Some(&Value::Bool(true));
    let prev_compacting = prev.and_then(|p| p.compacting.as_ref());
    let compacting = match item.get("currentCompaction") {
        Some(c) => Some(Compacting {
            reason: c
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            since_ms: c
                .get("elapsedMs")
                .and_then(Value::as_u64)
                .map(|e| now_ms - e as i64),
            retry: prev_compacting.and_then(|p| p.retry),
        }),
        // A daemon that does not report the running compaction: what the events said, while
        // it is still busy.
        None if busy && item.get("contextTokens").is_none() => prev_compacting.cloned(),
        None => None,
    };
    let mut last = item.get("lastCompaction").map(|l| Last {
        at_ms: l.get("timestamp").and_then(timestamp_ms),
        tokens_before: l.get("tokensBefore").and_then(Value::as_f64),
        tokens_after: l.get("tokensAfter").and_then(Value::as_f64),
        summarizer: l
            .get("summarizer")
            .and_then(Value::as_str)
            .map(str::to_owned),
        duration_ms: l.get("durationMs").and_then(Value::as_u64),
        cost: Cost::parse(l.get("cost")),
        handoff: l.get("handoffScore").and_then(Value::as_f64),
    });
    if let (Some(last), Some(earlier)) = (&mut last, prev.and_then(|p| p.last.as_ref())) {
        last.fill_from(earlier);
    }
    if let Some(last) = &mut last {
        last.known_free();
    }
    SessionView {
        path: str_at("path").unwrap_or_default(),
        cwd: str_at("cwd"),
        model: model
            .and_then(|m| m.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        window: model
            .and_then(|m| m.get("contextWindow"))
            .and_then(Value::as_i64),
        tokens: item.get("contextTokens").and_then(Value::as_f64),
        threshold: item.get("threshold").and_then(Value::as_f64),
        auto: item
            .get("autoCompaction")
            .and_then(Value::as_str)
            .and_then(Auto::parse),
        busy,
        compacting,
        speculation: item.get("speculation").and_then(speculation_from),
        last,
    }
}

/// `SessionInfo.speculation`: `{state: "running" | "ready", coversThroughEntryId, tokens}`.
fn speculation_from(s: &Value) -> Option<Speculation> {
    let covers = s
        .get("coversThroughEntryId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    match s.get("state").and_then(Value::as_str)? {
        "running" => Some(Speculation::Running {
            covers,
            tokens: s.get("tokens").and_then(Value::as_f64),
        }),
        "ready" => Some(Speculation::Ready {
            covers,
            summary_tokens: s.get("summaryTokens").and_then(Value::as_f64),
            ms: s.get("ms").and_then(Value::as_u64),
        }),
        _ => None,
    }
}

/// An entry timestamp (ISO 8601 string, or epoch milliseconds) as epoch milliseconds.
fn timestamp_ms(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp_millis()),
        other => other.as_i64(),
    }
}
