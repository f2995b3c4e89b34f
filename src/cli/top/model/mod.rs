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
//!
//! The concepts live apart: `session` reads a `listSessions` member, `events` folds the typed
//! events of `rpc::events` in, `row` derives a row's cells and state, `preview` and `format`
//! say how things read.

mod events;
mod format;
mod preview;
mod row;
mod session;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

pub use events::Follow;
pub use format::{age, cost, duration, ellipsize, handoff, session_name, short_id, tokens};
pub use preview::{preview_lines, Preview};
pub use row::{Row, RowState};
use session::SessionView;
pub use session::{Auto, Compacting, Cost, Last, Speculation};

/// Event lines kept for the event pane (older ones scroll away).
pub const EVENT_LINES: usize = 500;

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
            let view = session::session_from(item, prev, now_ms);
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
            Ok(v) => Preview::Ready(preview_lines(v, Some(preview::FILES_IN_PANE))),
            Err(e) => Preview::Failed(error_message(e)),
        };
        self.preview = Some((session_id.to_owned(), preview));
    }

    /// The rows the filter keeps, ordered by session id.
    pub fn rows(&self, filter: &str, now_ms: i64) -> Vec<Row> {
        let stale = !matches!(self.link, Link::Up);
        self.sessions
            .iter()
            .map(|((_, id), v)| row::row(id, v, stale, now_ms))
            .filter(|r| r.matches(filter))
            .collect()
    }

    /// How many sessions are open (before filtering).
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }
}

/// A JSON-RPC error object's message.
fn error_message(e: &Value) -> String {
    e.get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| e.to_string())
}
