//! The view model of `compactd top`: what the daemon said, folded into rows and an event log.
//!
//! Pure: no sockets, no terminal, no clock. The connection shell feeds it `listSessions`
//! snapshots ([`TopModel::apply_snapshot`]), event notifications ([`TopModel::apply_event`]),
//! the replies to the user's actions and the state of the link; both renderers (the live
//! terminal view and `--once`) read [`TopModel::rows`] and [`TopModel::events`]. Every time is
//! passed in as epoch milliseconds, so a test drives it with events in and checks rows out.
//!
//! Snapshots are authoritative for what they carry; events update a row between snapshots
//! (a compaction shows as running the moment `compaction_start` arrives). What only events
//! tell (a retry in progress, a compaction's cost before the daemon reports it) is carried
//! over when the next snapshot is silent about it. Every field the daemon sends beyond
//! `listSessions`' base `SessionInfo` is optional: an older daemon, or one without the
//! speculation and accounting work, simply leaves those cells empty.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

/// Event lines kept for the event pane (older ones scroll away).
pub const EVENT_LINES: usize = 500;

/// Where a session's automatic compaction stands (`SessionInfo.autoCompaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auto {
    On,
    Off,
    Suppressed,
    Paused,
}

impl Auto {
    fn parse(s: &str) -> Option<Auto> {
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
    fn parse(v: Option<&Value>) -> Option<Cost> {
        let usd = v?.as_object()?.get("usd")?;
        match usd {
            Value::Null => Some(Cost::Unpriced),
            other => other.as_f64().map(Cost::Usd),
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
}

impl Last {
    /// Fills what this one lacks from `earlier`, when both describe the same compaction.
    fn fill_from(&mut self, earlier: &Last) {
        if self.tokens_before != earlier.tokens_before {
            return;
        }
        self.tokens_after = self.tokens_after.or(earlier.tokens_after);
        self.duration_ms = self.duration_ms.or(earlier.duration_ms);
        self.cost = self.cost.or(earlier.cost);
        if self.summarizer.is_none() {
            self.summarizer.clone_from(&earlier.summarizer);
        }
    }
}

/// One open session as the daemon described it.
#[derive(Debug, Clone, PartialEq, Default)]
struct SessionView {
    path: String,
    cwd: Option<String>,
    model: Option<String>,
    window: Option<i64>,
    tokens: Option<f64>,
    threshold: Option<f64>,
    auto: Option<Auto>,
    /// `isCompacting`: a compaction or a branch summary holds the session.
    busy: bool,
    compacting: Option<Compacting>,
    speculation: Option<Speculation>,
    last: Option<Last>,
}

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

fn opt_tokens(t: Option<f64>, sep: &str) -> String {
    t.map(|t| format!("{sep}{}", tokens(t))).unwrap_or_default()
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

    fn matches(&self, filter: &str) -> bool {
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

/// How an event line reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Info,
    Good,
    Warn,
    Bad,
}

/// One line of the event pane.
#[derive(Debug, Clone, PartialEq)]
pub struct EventLine {
    pub at_ms: i64,
    pub session_id: Option<String>,
    pub text: String,
    pub tone: Tone,
}

/// The connection to the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum Link {
    /// Not connected yet.
    Connecting,
    Up,
    /// Lost (or never made): retrying.
    Down {
        since_ms: i64,
        attempts: u32,
        error: String,
        retry_in_ms: Option<u64>,
    },
}

/// A `previewCompaction` shown for a session.
#[derive(Debug, Clone, PartialEq)]
pub enum Preview {
    Loading,
    Ready(Vec<String>),
    Failed(String),
}

/// What an event asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Follow {
    /// The event named a session the model has not seen: fetch `listSessions` now.
    pub refresh: bool,
    /// The daemon dropped this connection's subscriptions: subscribe again.
    pub resubscribe: bool,
}

/// The state of the whole view.
#[derive(Debug, Clone)]
pub struct TopModel {
    sessions: BTreeMap<(u64, String), SessionView>,
    events: VecDeque<EventLine>,
    link: Link,
    /// A connection was up once (a later one is a reconnection).
    was_up: bool,
    /// The first snapshot of this connection is applied silently (no "opened" lines).
    primed: bool,
    preview: Option<(String, Preview)>,
}

impl Default for TopModel {
    fn default() -> Self {
        TopModel::new()
    }
}

/// Orders `s2` before `s10`; anything else after them, by name.
fn order_key(session_id: &str) -> (u64, String) {
    let n = session_id
        .strip_prefix('s')
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    (n, session_id.to_owned())
}

impl TopModel {
    pub fn new() -> TopModel {
        TopModel {
            sessions: BTreeMap::new(),
            events: VecDeque::new(),
            link: Link::Connecting,
            was_up: false,
            primed: false,
            preview: None,
        }
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The event pane's lines, oldest first.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &EventLine> + ExactSizeIterator {
        self.events.iter()
    }

    /// The preview being shown for `session_id`, if any.
    pub fn preview(&self, session_id: &str) -> Option<&Preview> {
        self.preview
            .as_ref()
            .filter(|(s, _)| s == session_id)
            .map(|(_, p)| p)
    }

    fn push(&mut self, at_ms: i64, session_id: Option<&str>, text: String, tone: Tone) {
        if self.events.len() == EVENT_LINES {
            self.events.pop_front();
        }
        self.events.push_back(EventLine {
            at_ms,
            session_id: session_id.map(str::to_owned),
            text,
            tone,
        });
    }

    /// A line of the view's own (an action refused, a reply's error).
    pub fn note(&mut self, now_ms: i64, session_id: Option<&str>, text: String, tone: Tone) {
        self.push(now_ms, session_id, text, tone);
    }

    /// The connection is up (subscribed; a snapshot follows).
    pub fn connected(&mut self, now_ms: i64, socket: &str) {
        let text = if self.was_up {
            "reconnected".to_owned()
        } else {
            format!("connected to {socket}")
        };
        self.link = Link::Up;
        self.was_up = true;
        self.primed = false;
        self.push(now_ms, None, text, Tone::Good);
    }

    /// The connection failed or was lost; `error` says why. One line per outage.
    pub fn disconnected(&mut self, now_ms: i64, error: &str) {
        match &mut self.link {
            Link::Down {
                attempts,
                error: e,
                retry_in_ms,
                ..
            } => {
                *attempts += 1;
                *e = error.to_owned();
                *retry_in_ms = None;
            }
            _ => {
                let text = if self.was_up {
                    "daemon disconnected — reconnecting…".to_owned()
                } else {
                    format!("cannot reach the daemon ({error}) — retrying…")
                };
                self.link = Link::Down {
                    since_ms: now_ms,
                    attempts: 1,
                    error: error.to_owned(),
                    retry_in_ms: None,
                };
                self.push(now_ms, None, text, Tone::Bad);
            }
        }
        // Nothing runs on a daemon we cannot see: states are shown as last known.
        self.primed = false;
    }

    /// The next connection attempt is in `ms`.
    pub fn retry_in(&mut self, ms: u64) {
        if let Link::Down { retry_in_ms, .. } = &mut self.link {
            *retry_in_ms = Some(ms);
        }
    }

    /// A `listSessions` answer: the sessions open now. Malformed members are skipped.
    pub fn apply_snapshot(&mut self, list: &Value, now_ms: i64) -> Result<(), String> {
        let items = list
            .as_array()
            .ok_or_else(|| "listSessions did not answer an array".to_owned())?;
        let mut next = BTreeMap::new();
        for item in items {
            let Some(id) = item.get("sessionId").and_then(Value::as_str) else {
                continue;
            };
            let key = order_key(id);
            let prev = self.sessions.get(&key);
            let view = session_from(item, prev, now_ms);
            if self.primed && prev.is_none() {
                let name = session_name(view.cwd.as_deref(), &view.path);
                self.push(now_ms, Some(id), format!("opened {name}"), Tone::Info);
            }
            next.insert(key, view);
        }
        if self.primed {
            let closed: Vec<String> = self
                .sessions
                .keys()
                .filter(|k| !next.contains_key(*k))
                .map(|(_, id)| id.clone())
                .collect();
            for id in closed {
                self.push(now_ms, Some(&id), "closed".into(), Tone::Info);
            }
        }
        self.sessions = next;
        self.primed = true;
        Ok(())
    }

    /// One event notification (`method`, `params`) received at `now_ms`.
    pub fn apply_event(&mut self, method: &str, params: &Value, now_ms: i64) -> Follow {
        let mut follow = Follow::default();
        if method == "subscription_dropped" {
            self.push(
                now_ms,
                None,
                "the daemon dropped events for this view (it fell behind); resubscribing".into(),
                Tone::Warn,
            );
            follow.resubscribe = true;
            follow.refresh = true;
            return follow;
        }
        let Some(id) = params.get("sessionId").and_then(Value::as_str) else {
            self.push(now_ms, None, method.to_owned(), Tone::Info);
            return follow;
        };
        let key = order_key(id);
        if !self.sessions.contains_key(&key) {
            follow.refresh = true;
        }
        let view = self.sessions.entry(key).or_default();
        let str_of = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or_default();
        let num_of = |k: &str| params.get(k).and_then(Value::as_f64);
        let (text, tone) = match method {
            "compaction_start" => {
                let reason = str_of("reason").to_owned();
                view.busy = true;
                let text = format!("compaction started ({reason})");
                view.compacting = Some(Compacting {
                    reason,
                    since_ms: Some(now_ms),
                    retry: None,
                });
                (text, Tone::Info)
            }
            "compaction_end" => {
                let reason = str_of("reason");
                let running = view.compacting.take();
                view.busy = false;
                let retry_note = if params.get("willRetry") == Some(&Value::Bool(true)) {
                    ", the request is retried"
                } else {
                    ""
                };
                if let Some(result) = params.get("result") {
                    let last = Last {
                        at_ms: Some(now_ms),
                        tokens_before: result.get("tokensBefore").and_then(Value::as_f64),
                        tokens_after: result.get("estimatedTokensAfter").and_then(Value::as_f64),
                        summarizer: result
                            .get("details")
                            .and_then(|d| d.get("summarizer"))
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        duration_ms: running
                            .and_then(|r| r.since_ms)
                            .map(|s| (now_ms - s).max(0) as u64),
                        cost: Cost::parse(result.get("cost")),
                    };
                    let text = format!(
                        "compacted ({reason}): {} → {} tokens{}{}{retry_note}",
                        opt_or_dash(last.tokens_before),
                        opt_or_dash(last.tokens_after),
                        last.duration_ms
                            .map(|d| format!(" in {}", duration(d)))
                            .unwrap_or_default(),
                        last.cost
                            .map(|c| format!(", {}", cost(c)))
                            .unwrap_or_default(),
                    );
                    if let Some(after) = last.tokens_after {
                        view.tokens = Some(after);
                    }
                    view.last = Some(last);
                    (text, Tone::Good)
                } else if params.get("aborted") == Some(&Value::Bool(true)) {
                    (format!("compaction aborted ({reason})"), Tone::Warn)
                } else {
                    let error = str_of("errorMessage");
                    (format!("compaction failed ({reason}): {error}"), Tone::Bad)
                }
            }
            "compaction_suppressed" => {
                let paused = params.get("paused") == Some(&Value::Bool(true));
                view.auto = Some(if paused {
                    Auto::Paused
                } else {
                    Auto::Suppressed
                });
                let text = format!(
                    "automatic compaction {} by the thrash breaker ({}: {} tokens after the last one, threshold {})",
                    if paused { "paused" } else { "suppressed" },
                    str_of("reason"),
                    opt_or_dash(num_of("tokensAfter")),
                    opt_or_dash(num_of("threshold")),
                );
                (text, Tone::Warn)
            }
            "compaction_undone" => (
                format!("compaction {} undone", short_id(str_of("compactionId"))),
                Tone::Info,
            ),
            "summary_edited" => (
                format!(
                    "summary of compaction {} edited",
                    short_id(str_of("compactionId"))
                ),
                Tone::Info,
            ),
            "summarization_retry_scheduled" => {
                let (attempt, max) = (
                    params.get("attempt").and_then(Value::as_u64).unwrap_or(0),
                    params
                        .get("maxAttempts")
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                );
                if let Some(c) = &mut view.compacting {
                    c.retry = Some((attempt, max));
                }
                let delay = params.get("delayMs").and_then(Value::as_u64).unwrap_or(0);
                (
                    format!(
                        "summarizer call failed; retry {attempt}/{max} in {}: {}",
                        duration(delay),
                        str_of("errorMessage")
                    ),
                    Tone::Warn,
                )
            }
            "summarization_retry_attempt_start" => ("retry attempt started".into(), Tone::Info),
            "summarization_retry_finished" => {
                if let Some(c) = &mut view.compacting {
                    c.retry = None;
                }
                return follow;
            }
            "speculation_started" => {
                let covers = str_of("coversThroughEntryId").to_owned();
                let tokens = num_of("tokens");
                let text = format!(
                    "speculation started: covers through {}{}",
                    short_id(&covers),
                    tokens
                        .map(|t| format!(", {} tokens", self::tokens(t)))
                        .unwrap_or_default()
                );
                view.speculation = Some(Speculation::Running { covers, tokens });
                (text, Tone::Info)
            }
            "speculation_ready" => {
                let covers = str_of("coversThroughEntryId").to_owned();
                let summary_tokens = num_of("summaryTokens");
                let ms = params.get("ms").and_then(Value::as_u64);
                let text = format!(
                    "speculation ready: covers through {}{}{}",
                    short_id(&covers),
                    summary_tokens
                        .map(|t| format!(", summary {} tokens", tokens(t)))
                        .unwrap_or_default(),
                    ms.map(|m| format!(" in {}", duration(m)))
                        .unwrap_or_default()
                );
                view.speculation = Some(Speculation::Ready {
                    covers,
                    summary_tokens,
                    ms,
                });
                (text, Tone::Good)
            }
            "speculation_discarded" => {
                view.speculation = None;
                let reason = str_of("reason");
                let text = if reason.is_empty() {
                    "speculation discarded".to_owned()
                } else {
                    format!("speculation discarded: {reason}")
                };
                (text, Tone::Info)
            }
            other => (other.to_owned(), Tone::Info),
        };
        self.push(now_ms, Some(id), text, tone);
        follow
    }

    /// The answer to the user's `compact`: errors are reported (success shows through events).
    pub fn compact_replied(
        &mut self,
        session_id: &str,
        reply: Result<&Value, &Value>,
        now_ms: i64,
    ) {
        if let Err(e) = reply {
            let text = format!("compact refused: {}", error_message(e));
            self.push(now_ms, Some(session_id), text, Tone::Bad);
        }
    }

    /// The answer to the user's `abortCompaction`.
    pub fn abort_replied(&mut self, session_id: &str, reply: Result<&Value, &Value>, now_ms: i64) {
        let (text, tone) = match reply {
            Ok(v) if v.get("aborted") == Some(&Value::Bool(true)) => {
                ("abort requested".to_owned(), Tone::Warn)
            }
            Ok(_) => (
                "nothing to abort: no compaction runs".to_owned(),
                Tone::Info,
            ),
            Err(e) => (format!("abort refused: {}", error_message(e)), Tone::Bad),
        };
        self.push(now_ms, Some(session_id), text, tone);
    }

    /// A preview was asked for `session_id` (shown as loading until its answer).
    pub fn preview_asked(&mut self, session_id: &str) {
        self.preview = Some((session_id.to_owned(), Preview::Loading));
    }

    /// The answer to `previewCompaction`.
    pub fn preview_replied(&mut self, session_id: &str, reply: Result<&Value, &Value>) {
        let preview = match reply {
            Ok(v) => Preview::Ready(preview_lines(v)),
            Err(e) => Preview::Failed(error_message(e)),
        };
        self.preview = Some((session_id.to_owned(), preview));
    }

    /// The rows the filter keeps, ordered by session id.
    pub fn rows(&self, filter: &str, now_ms: i64) -> Vec<Row> {
        let stale = !matches!(self.link, Link::Up);
        self.sessions
            .iter()
            .map(|((_, id), v)| row(id, v, stale, now_ms))
            .filter(|r| r.matches(filter))
            .collect()
    }

    /// How many sessions are open (before filtering).
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }
}

fn opt_or_dash(t: Option<f64>) -> String {
    t.map(tokens).unwrap_or_else(|| "?".into())
}

/// A JSON-RPC error object's message.
fn error_message(e: &Value) -> String {
    e.get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| e.to_string())
}

/// A session's view from its `SessionInfo`, keeping what only events told about it.
fn session_from(item: &Value, prev: Option<&SessionView>, now_ms: i64) -> SessionView {
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
    });
    if let (Some(last), Some(earlier)) = (&mut last, prev.and_then(|p| p.last.as_ref())) {
        last.fill_from(earlier);
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

fn row(id: &str, v: &SessionView, stale: bool, now_ms: i64) -> Row {
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

/// The lines of a `previewCompaction` answer: what would be summarized and what kept.
pub fn preview_lines(v: &Value) -> Vec<String> {
    if let Some(why) = v.get("nothingToCompact").and_then(Value::as_str) {
        return vec![format!("Nothing to compact: {why}")];
    }
    let stats = |k: &str| {
        let s = v.get(k);
        (
            s.and_then(|s| s.get("count"))
                .and_then(Value::as_u64)
                .unwrap_or(0),
            s.and_then(|s| s.get("estimatedTokens"))
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
        )
    };
    let mut out = Vec::new();
    if let Some(t) = v.get("tokensBefore").and_then(Value::as_f64) {
        out.push(format!("Context now: {} tokens", tokens(t)));
    }
    let (n, t) = stats("summarize");
    let previous = if v.get("hasPreviousSummary") == Some(&Value::Bool(true)) {
        ", updating the previous summary"
    } else {
        ""
    };
    out.push(format!(
        "Summarize: {n} messages, ~{} tokens{previous}",
        tokens(t)
    ));
    if v.get("isSplitTurn") == Some(&Value::Bool(true)) {
        let (n, t) = stats("turnPrefix");
        out.push(format!(
            "Split turn: its first {n} messages (~{} tokens) are summarized apart",
            tokens(t)
        ));
    }
    let (n, t) = stats("kept");
    out.push(format!(
        "Keep verbatim: {n} messages, ~{} tokens, from entry {}",
        tokens(t),
        v.get("firstKeptEntryId")
            .and_then(Value::as_str)
            .unwrap_or("?")
    ));
    let files = |k: &str| -> Vec<String> {
        v.get("fileLists")
            .and_then(|f| f.get(k))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    for (label, key) in [
        ("Files read", "readFiles"),
        ("Files modified", "modifiedFiles"),
    ] {
        let list = files(key);
        if list.is_empty() {
            continue;
        }
        const SHOWN: usize = 6;
        let more = list.len().saturating_sub(SHOWN);
        let mut line = format!(
            "{label}: {}",
            list.iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
        if more > 0 {
            line += &format!(" (+{more} more)");
        }
        out.push(line);
    }
    if let Some(s) = v.get("settings") {
        out.push(format!(
            "Settings: reserveTokens {}, keepRecentTokens {}",
            s.get("reserveTokens").and_then(Value::as_i64).unwrap_or(0),
            s.get("keepRecentTokens")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ));
    }
    out
}

/// A session's display name: the cwd's last component and the file, shortened. Pi names files
/// `<timestamp>_<uuid>.jsonl` with a time-ordered uuid (v7), whose first characters are the
/// same for sessions made within a minute: its last 8 (random) characters identify it.
pub fn session_name(cwd: Option<&str>, path: &str) -> String {
    let path = std::path::Path::new(path);
    let dir = cwd
        .map(std::path::Path::new)
        .or_else(|| path.parent())
        .and_then(|d| d.file_name())
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match stem.rsplit_once('_') {
        Some((_, uuid)) if uuid.len() >= 8 && uuid.is_char_boundary(uuid.len() - 8) => {
            uuid[uuid.len() - 8..].to_owned()
        }
        _ => ellipsize(&stem, 16),
    };
    format!("{dir}/{file}")
}

/// `s` cut to `max` characters, with `…` at the cut.
pub fn ellipsize(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// An entry id as shown: its first 8 characters.
pub fn short_id(id: &str) -> &str {
    match id.char_indices().nth(8) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

/// A token count: `950`, `4.1k`, `183.6k`, `1.25M`.
pub fn tokens(t: f64) -> String {
    let a = t.abs();
    if a < 1000.0 {
        format!("{}", t.round() as i64)
    } else if a < 1_000_000.0 {
        format!("{:.1}k", t / 1000.0)
    } else {
        format!("{:.2}M", t / 1_000_000.0)
    }
}

/// A duration: `830ms`, `1.2s`, `2m05s`.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// An age: `now`, `12s`, `5m`, `3h`, `2d`.
pub fn age(ms: i64) -> String {
    let s = ms / 1000;
    if s < 1 {
        "now".into()
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 86_400 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86_400)
    }
}

/// A cost: `$0.0123`, or `?` when the model's prices are unknown.
pub fn cost(c: Cost) -> String {
    match c {
        Cost::Usd(usd) if usd < 1.0 => format!("${usd:.4}"),
        Cost::Usd(usd) => format!("${usd:.2}"),
        Cost::Unpriced => "$?".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(id: &str, tokens: f64) -> Value {
        json!({
            "sessionId": id,
            "path": format!("/home/u/proj/sessions/2026-12-01T13-03-26-645Z_0000-{id:0>8}.jsonl"),
            "headerId": "h", "cwd": "/home/u/proj", "leafId": "l", "entryCount": 9,
            "persisted": true,
            "model": {"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 200000, "maxTokens": 64000},
            "thinkingLevel": "medium", "isCompacting": false,
            "contextTokens": tokens, "threshold": 183616, "autoCompaction": "on"
        })
    }

    fn model_with(list: Value) -> TopModel {
        let mut m = TopModel::new();
        m.connected(0, "/tmp/s.sock");
        m.apply_snapshot(&list, 0).expect("snapshot");
        m
    }

    fn texts(m: &TopModel) -> Vec<String> {
        m.events()
            .map(|e| match &e.session_id {
                Some(s) => format!("{s} {}", e.text),
                None => e.text.clone(),
            })
            .collect()
    }

    #[test]
    fn a_snapshot_gives_one_row_per_session_in_id_order() {
        let m = model_with(json!([info("s10", 50000.0), info("s2", 4123.0)]));
        let rows = m.rows("", 0);
        let ids: Vec<&str> = rows.iter().map(|r| r.session_id.as_str()).collect();
        assert_eq!(ids, ["s2", "s10"]);
        let r = &rows[0];
        assert_eq!(r.name, "proj/000000s2");
        assert_eq!(r.model.as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(r.tokens, Some(4123.0));
        assert_eq!(r.threshold, Some(183616.0));
        assert_eq!(r.window, Some(200000));
        assert_eq!(r.percent().map(|p| format!("{p:.1}")), Some("2.1".into()));
        assert_eq!(r.state, RowState::Idle);
        assert_eq!(r.last, None);
        assert!(!r.stale);
    }

    #[test]
    fn a_compaction_shows_in_its_row_and_in_the_event_pane() {
        let mut m = model_with(json!([info("s1", 150000.0), info("s2", 1000.0)]));
        let follow = m.apply_event(
            "compaction_start",
            &json!({"sessionId": "s1", "reason": "threshold"}),
            1_000,
        );
        assert_eq!(
            follow,
            Follow::default(),
            "a known session needs no refresh"
        );
        let r = &m.rows("", 3_500)[0];
        assert_eq!(
            r.state,
            RowState::Compacting {
                reason: "threshold".into(),
                elapsed_ms: Some(2_500),
                retry: None
            }
        );
        assert_eq!(r.state.label(), "compacting threshold 2.5s");
        assert_eq!(r.state.word(), "compacting:threshold:2.5s");
        m.apply_event(
            "summarization_retry_scheduled",
            &json!({"sessionId": "s1", "attempt": 1, "maxAttempts": 3, "delayMs": 2000, "errorMessage": "503"}),
            2_000,
        );
        assert_eq!(
            m.rows("", 4_000)[0].state.label(),
            "compacting threshold 3.0s (retry 1/3)"
        );
        m.apply_event(
            "compaction_end",
            &json!({"sessionId": "s1", "reason": "threshold", "aborted": false, "willRetry": false,
                    "result": {"summary": "…", "firstKeptEntryId": "e1", "tokensBefore": 150000,
                               "estimatedTokensAfter": 9000, "details": {"summarizer": "extractive"},
                               "cost": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "usd": 0.0125}}}),
            5_000,
        );
        let r = &m.rows("", 65_000)[0];
        assert_eq!(r.state, RowState::Idle);
        assert_eq!(r.tokens, Some(9000.0), "the context the compaction left");
        assert_eq!(
            r.last,
            Some(Last {
                at_ms: Some(5_000),
                tokens_before: Some(150000.0),
                tokens_after: Some(9000.0),
                summarizer: Some("extractive".into()),
                duration_ms: Some(4_000),
                cost: Some(Cost::Usd(0.0125)),
            })
        );
        assert_eq!(r.last_age_ms, Some(60_000));
        assert_eq!(
            texts(&m)[1..],
            [
                "s1 compaction started (threshold)",
                "s1 summarizer call failed; retry 1/3 in 2.0s: 503",
                "s1 compacted (threshold): 150.0k → 9.0k tokens in 4.0s, $0.0125",
            ]
        );
    }

    #[test]
    fn failures_aborts_and_unpriced_costs_read_as_such() {
        let mut m = model_with(json!([info("s1", 1000.0)]));
        m.apply_event(
            "compaction_start",
            &json!({"sessionId": "s1", "reason": "manual"}),
            0,
        );
        m.apply_event(
            "compaction_end",
            &json!({"sessionId": "s1", "reason": "manual", "aborted": true, "willRetry": false}),
            10,
        );
        m.apply_event(
            "compaction_start",
            &json!({"sessionId": "s1", "reason": "manual"}),
            20,
        );
        m.apply_event(
            "compaction_end",
            &json!({"sessionId": "s1", "reason": "manual", "aborted": false, "willRetry": false,
                    "errorMessage": "Compaction failed: Nothing to compact (session too small)"}),
            30,
        );
        assert_eq!(m.rows("", 40)[0].state, RowState::Idle);
        assert_eq!(m.rows("", 40)[0].last, None);
        m.apply_event(
            "compaction_end",
            &json!({"sessionId": "s1", "reason": "overflow", "aborted": false, "willRetry": true,
                    "result": {"tokensBefore": 5000, "estimatedTokensAfter": 700, "cost": {"usd": null}}}),
            50,
        );
        let last = m.rows("", 60)[0].last.clone().expect("last");
        assert_eq!(last.cost, Some(Cost::Unpriced));
        assert_eq!(last.duration_ms, None, "no start was seen");
        assert_eq!(
            texts(&m)[1..],
            [
                "s1 compaction started (manual)",
                "s1 compaction aborted (manual)",
                "s1 compaction started (manual)",
                "s1 compaction failed (manual): Compaction failed: Nothing to compact (session too small)",
                "s1 compacted (overflow): 5.0k → 700 tokens, $?, the request is retried",
            ]
        );
    }

    #[test]
    fn speculation_events_drive_the_state() {
        let mut m = model_with(json!([info("s1", 1000.0)]));
        m.apply_event(
            "speculation_started",
            &json!({"sessionId": "s1", "coversThroughEntryId": "abcdef0123", "tokens": 120000}),
            0,
        );
        assert_eq!(
            m.rows("", 0)[0].state.label(),
            "speculating ≤abcdef01 120.0k"
        );
        m.apply_event(
            "speculation_ready",
            &json!({"sessionId": "s1", "coversThroughEntryId": "abcdef0123", "summaryTokens": 2100, "ms": 830}),
            1,
        );
        let r = &m.rows("", 1)[0];
        assert_eq!(r.state.label(), "ready ≤abcdef01 → 2.1k");
        assert_eq!(r.state.word(), "ready:abcdef01:2.1k");
        m.apply_event(
            "speculation_discarded",
            &json!({"sessionId": "s1", "reason": "branch moved"}),
            2,
        );
        assert_eq!(m.rows("", 2)[0].state, RowState::Idle);
        // A compaction outranks a speculation in the state cell.
        m.apply_event(
            "speculation_started",
            &json!({"sessionId": "s1", "coversThroughEntryId": "x"}),
            3,
        );
        m.apply_event(
            "compaction_start",
            &json!({"sessionId": "s1", "reason": "idle"}),
            3,
        );
        assert_eq!(m.rows("", 3)[0].state.word(), "compacting:idle:0ms");
        assert_eq!(
            texts(&m)[1..4],
            [
                "s1 speculation started: covers through abcdef01, 120.0k tokens",
                "s1 speculation ready: covers through abcdef01, summary 2.1k tokens in 830ms",
                "s1 speculation discarded: branch moved",
            ]
        );
        // The snapshot's `speculation` field is read when present.
        let mut with = info("s1", 1000.0);
        with["speculation"] =
            json!({"state": "ready", "coversThroughEntryId": "feedbeef99", "tokens": 90000});
        let m = model_with(json!([with]));
        assert_eq!(m.rows("", 0)[0].state.word(), "ready:feedbeef");
    }

    #[test]
    fn the_thrash_breaker_and_auto_off_show_in_the_state() {
        let mut m = model_with(json!([info("s1", 190000.0)]));
        m.apply_event(
            "compaction_suppressed",
            &json!({"sessionId": "s1", "reason": "floor", "tokensBefore": 195000, "tokensAfter": 190000, "threshold": 183616, "paused": false}),
            0,
        );
        assert_eq!(m.rows("", 0)[0].state, RowState::Suppressed);
        m.apply_event(
            "compaction_suppressed",
            &json!({"sessionId": "s1", "reason": "floor", "tokensBefore": 195000, "tokensAfter": 190000, "threshold": 183616, "paused": true}),
            0,
        );
        assert_eq!(m.rows("", 0)[0].state.label(), "paused (thrash)");
        assert_eq!(
            texts(&m).last().map(String::as_str),
            Some("s1 automatic compaction paused by the thrash breaker (floor: 190.0k tokens after the last one, threshold 183.6k)")
        );
        // The next snapshot is authoritative: a manual compaction resumed it.
        m.apply_snapshot(&json!([info("s1", 1000.0)]), 1).unwrap();
        assert_eq!(m.rows("", 1)[0].state, RowState::Idle);
        let mut off = info("s1", 1000.0);
        off["autoCompaction"] = json!("off");
        m.apply_snapshot(&json!([off]), 2).unwrap();
        assert_eq!(m.rows("", 2)[0].state.word(), "idle:auto-off");
    }

    #[test]
    fn a_snapshot_reports_running_and_last_compactions_and_keeps_what_only_events_said() {
        let mut s1 = info("s1", 9000.0);
        s1["isCompacting"] = json!(true);
        s1["currentCompaction"] =
            json!({"reason": "manual", "startedAt": "2026-01-01T00:00:00.000Z", "elapsedMs": 1500});
        let mut s2 = info("s2", 3000.0);
        s2["lastCompaction"] = json!({"entryId": "c1", "timestamp": "1970-01-01T00:00:10.000Z",
            "tokensBefore": 40000, "tokensAfter": 3000, "summarizer": "extractive", "durationMs": 120});
        let mut m = TopModel::new();
        m.connected(0, "/tmp/s.sock");
        m.apply_snapshot(&json!([s1, s2]), 10_000).unwrap();
        let rows = m.rows("", 10_000);
        assert_eq!(rows[0].state.word(), "compacting:manual:1.5s");
        assert_eq!(rows[1].last_age_ms, Some(0));
        assert_eq!(
            rows[1].last.as_ref().and_then(|l| l.summarizer.as_deref()),
            Some("extractive")
        );
        // The cost only an event told survives a snapshot of the same compaction.
        m.apply_event(
            "compaction_end",
            &json!({"sessionId": "s2", "reason": "manual", "aborted": false, "willRetry": false,
                    "result": {"tokensBefore": 40000, "estimatedTokensAfter": 3000, "cost": {"usd": 0.5}}}),
            10_000,
        );
        let mut s2 = info("s2", 3000.0);
        s2["lastCompaction"] = json!({"entryId": "c1", "timestamp": "1970-01-01T00:00:10.000Z", "tokensBefore": 40000});
        m.apply_snapshot(&json!([info("s1", 9000.0), s2]), 11_000)
            .unwrap();
        let last = m.rows("", 11_000)[1].last.clone().expect("last");
        assert_eq!(last.cost, Some(Cost::Usd(0.5)));
        assert_eq!(last.tokens_after, Some(3000.0));
        assert_eq!(m.rows("", 11_000)[0].state, RowState::Idle);
    }

    #[test]
    fn sessions_opened_and_closed_later_are_announced_and_unknown_ones_refresh() {
        let mut m = model_with(json!([info("s1", 1.0)]));
        assert_eq!(
            texts(&m),
            ["connected to /tmp/s.sock"],
            "the first snapshot is silent"
        );
        let follow = m.apply_event(
            "compaction_start",
            &json!({"sessionId": "s7", "reason": "manual"}),
            0,
        );
        assert!(follow.refresh, "an unknown session asks for listSessions");
        let rows = m.rows("", 0);
        assert_eq!(rows.len(), 2, "its row shows at once");
        assert_eq!(
            (rows[1].name.as_str(), &rows[1].state.word()[..10]),
            ("…", "compacting")
        );
        m.apply_snapshot(&json!([info("s7", 1.0), info("s8", 1.0)]), 1)
            .unwrap();
        assert_eq!(
            texts(&m)[2..],
            ["s8 opened proj/000000s8", "s1 closed"],
            "s7 was already known from its event"
        );
        assert!(m.apply_snapshot(&json!({"not": "a list"}), 2).is_err());
        // A member without a session id is skipped, not fatal.
        m.apply_snapshot(&json!([{"path": "/x"}, info("s8", 1.0)]), 3)
            .unwrap();
        assert_eq!(m.rows("", 3).len(), 1);
    }

    #[test]
    fn losing_the_daemon_marks_rows_stale_and_says_so_once_then_reconnected() {
        let mut m = model_with(json!([info("s1", 1.0)]));
        m.disconnected(100, "connection reset");
        m.disconnected(200, "No such file or directory");
        m.retry_in(400);
        assert_eq!(
            m.link(),
            &Link::Down {
                since_ms: 100,
                attempts: 2,
                error: "No such file or directory".into(),
                retry_in_ms: Some(400)
            }
        );
        assert!(m.rows("", 300)[0].stale, "rows show what was last known");
        m.connected(500, "/tmp/s.sock");
        assert_eq!(m.link(), &Link::Up);
        // The first snapshot of the new connection replaces the sessions silently.
        m.apply_snapshot(&json!([info("s1", 2.0)]), 600).unwrap();
        assert!(!m.rows("", 600)[0].stale);
        assert_eq!(
            texts(&m),
            [
                "connected to /tmp/s.sock",
                "daemon disconnected — reconnecting…",
                "reconnected"
            ]
        );
        let mut fresh = TopModel::new();
        fresh.disconnected(0, "Connection refused");
        assert_eq!(
            texts(&fresh),
            ["cannot reach the daemon (Connection refused) — retrying…"]
        );
    }

    #[test]
    fn the_filter_matches_id_name_path_and_model() {
        let mut other = info("s3", 1.0);
        other["cwd"] = json!("/srv/api");
        other["model"]["id"] = json!("gpt-5");
        let m = model_with(json!([info("s1", 1.0), info("s2", 1.0), other]));
        let ids =
            |f: &str| -> Vec<String> { m.rows(f, 0).into_iter().map(|r| r.session_id).collect() };
        assert_eq!(ids(""), ["s1", "s2", "s3"]);
        assert_eq!(ids("API/"), ["s3"]);
        assert_eq!(ids("gpt"), ["s3"]);
        assert_eq!(ids("s2"), ["s2"]);
        assert_eq!(ids("sessions/2026"), ["s1", "s2", "s3"]);
        assert!(ids("nothing-like-this").is_empty());
    }

    #[test]
    fn replies_to_actions_are_reported() {
        let mut m = model_with(json!([info("s1", 1.0)]));
        m.compact_replied("s1", Ok(&json!({"summary": "x"})), 0);
        m.compact_replied(
            "s1",
            Err(&json!({"code": -32011, "message": "Already compacted"})),
            1,
        );
        m.abort_replied("s1", Ok(&json!({"aborted": false})), 2);
        m.abort_replied("s1", Ok(&json!({"aborted": true})), 3);
        assert_eq!(
            texts(&m)[1..],
            [
                "s1 compact refused: Already compacted",
                "s1 nothing to abort: no compaction runs",
                "s1 abort requested"
            ]
        );
        m.preview_asked("s1");
        assert_eq!(m.preview("s1"), Some(&Preview::Loading));
        assert_eq!(m.preview("s2"), None);
        m.preview_replied("s1", Ok(&json!({"nothingToCompact": "Already compacted"})));
        assert_eq!(
            m.preview("s1"),
            Some(&Preview::Ready(vec![
                "Nothing to compact: Already compacted".into()
            ]))
        );
    }

    #[test]
    fn a_preview_says_what_would_be_summarized_and_kept() {
        let lines = preview_lines(&json!({
            "firstKeptEntryId": "e42", "isSplitTurn": true, "tokensBefore": 12345,
            "hasPreviousSummary": true,
            "summarize": {"count": 30, "estimatedTokens": 9000},
            "turnPrefix": {"count": 2, "estimatedTokens": 400},
            "kept": {"count": 5, "estimatedTokens": 2900},
            "fileLists": {"readFiles": ["a", "b", "c", "d", "e", "f", "g"], "modifiedFiles": []},
            "settings": {"enabled": true, "reserveTokens": 16384, "keepRecentTokens": 20000}
        }));
        assert_eq!(
            lines,
            [
                "Context now: 12.3k tokens",
                "Summarize: 30 messages, ~9.0k tokens, updating the previous summary",
                "Split turn: its first 2 messages (~400 tokens) are summarized apart",
                "Keep verbatim: 5 messages, ~2.9k tokens, from entry e42",
                "Files read: a, b, c, d, e, f (+1 more)",
                "Settings: reserveTokens 16384, keepRecentTokens 20000",
            ]
        );
    }

    #[test]
    fn the_event_pane_keeps_the_newest_lines() {
        let mut m = model_with(json!([info("s1", 1.0)]));
        for i in 0..(EVENT_LINES + 10) {
            m.apply_event(
                "summary_edited",
                &json!({"sessionId": "s1", "compactionId": format!("c{i}")}),
                i as i64,
            );
        }
        assert_eq!(m.events().len(), EVENT_LINES);
        assert_eq!(
            m.events().last().map(|e| e.text.as_str()),
            Some(format!("summary of compaction c{} edited", EVENT_LINES + 9).as_str())
        );
    }

    #[test]
    fn names_and_numbers_are_shortened() {
        assert_eq!(
            session_name(
                Some("/home/u/work/compactd"),
                "/x/2026-12-01T13-03-26-645Z_01a231b3-f3b5-747f-bfb8-c1744ed7f516.jsonl"
            ),
            "compactd/4ed7f516"
        );
        assert_eq!(
            session_name(None, "/data/sessions/my-long-session-name-here.jsonl"),
            "sessions/my-long-session…"
        );
        assert_eq!(session_name(Some("/"), "/a.jsonl"), "//a");
        assert_eq!(tokens(950.0), "950");
        assert_eq!(tokens(183616.0), "183.6k");
        assert_eq!(tokens(1_250_000.0), "1.25M");
        assert_eq!(duration(830), "830ms");
        assert_eq!(duration(1250), "1.2s");
        assert_eq!(duration(125_000), "2m05s");
        assert_eq!(age(500), "now");
        assert_eq!(age(12_000), "12s");
        assert_eq!(age(7_200_000), "2h");
        assert_eq!(cost(Cost::Usd(0.01234)), "$0.0123");
        assert_eq!(cost(Cost::Usd(2.5)), "$2.50");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(short_id("0123456789"), "01234567");
    }
}
