//! The daemon's log lines as protocol notifications, for clients that ask
//! (`initialize {logNotifications: true}`): each line the daemon logs goes to them as
//! `window/logMessage {type, message}` (LSP's shape: type 1 error, 2 warning, 3 info, 4 debug).
//!
//! Why: an editor runs `compactd stdio` / `compactd connect` and reads its stderr as errors
//! (Neovim tags every stderr line `[ERROR]` in `lsp.log`), so the daemon logs to a file there and
//! stderr carries only real errors. A client that wants the log in its own log view asks for it
//! on the connection instead, at the daemon's log level and tagged with the real level.
//!
//! Never blocking, never growing without bound: a line is queued on the listener's outbound queue
//! (which no log call waits on), and dropped for a listener that already has more than
//! [`UNREAD_LIMIT`] bytes unread, as the file writer drops lines when its reader stalls. A line
//! logged while a line is being relayed on the same thread is not relayed (no feedback loop).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use super::connections::{ConnId, Connection};
use crate::rpc::events::{self, LogMessage};

/// Unread bytes past which a listener misses log lines until it catches up.
pub const UNREAD_LIMIT: usize = 1 << 20;

/// A connection that asked for log lines.
type Listener = (ConnId, Weak<Connection>);

/// The connections that asked.
static LISTENERS: LazyLock<Mutex<Vec<Listener>>> = LazyLock::new(|| Mutex::new(Vec::new()));
/// Whether any connection listens: the layer's fast path when none does (the common case).
static ANY: AtomicBool = AtomicBool::new(false);

thread_local! {
    static RELAYING: Cell<bool> = const { Cell::new(false) };
}

/// Sends this connection the daemon's log lines from now on (`on`), or stops (`!on`).
pub fn listen(conn: &Arc<Connection>, on: bool) {
    let mut l = LISTENERS.lock();
    l.retain(|(id, weak)| *id != conn.id && weak.strong_count() > 0);
    if on {
        l.push((conn.id, Arc::downgrade(conn)));
    }
    ANY.store(!l.is_empty(), Ordering::SeqCst);
}

/// Forgets a connection that went away.
pub fn forget(id: ConnId) {
    let mut l = LISTENERS.lock();
    l.retain(|(i, weak)| *i != id && weak.strong_count() > 0);
    ANY.store(!l.is_empty(), Ordering::SeqCst);
}

/// LSP's `MessageType` of a tracing level.
pub fn message_type(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        _ => 4,
    }
}

/// The text of one log line: `message key=value …`, as the file shows it (without time and
/// level, which the client has).
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.fields.push_str(&format!(" {}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message.push_str(&format!("{value:?}"));
        } else {
            self.fields
                .push_str(&format!(" {}={value:?}", field.name()));
        }
    }
}

/// The frame of one notification.
pub fn notification(level: &Level, target: &str, text: &str) -> String {
    let message = format!("{target}: {text}");
    let params = events::payload(&LogMessage {
        kind: message_type(level),
        message: &message,
    });
    crate::rpc::wire::notification(events::LOG_MESSAGE, &params)
}

/// The tracing layer that relays log lines; install it beside the file or stderr writer, with
/// the same level filter.
pub struct RelayLayer;

impl<S: Subscriber> Layer<S> for RelayLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if !ANY.load(Ordering::Relaxed) || RELAYING.with(Cell::get) {
            return;
        }
        RELAYING.with(|r| r.set(true));
        let mut line = Line::default();
        event.record(&mut line);
        let meta = event.metadata();
        let text = notification(
            meta.level(),
            meta.target(),
            &format!("{}{}", line.message, line.fields),
        );
        let targets: Vec<Arc<Connection>> = LISTENERS
            .lock()
            .iter()
            .filter_map(|(_, w)| w.upgrade())
            .collect();
        for conn in targets {
            if conn.queued_bytes() <= UNREAD_LIMIT {
                conn.send(text.clone());
            }
        }
        RELAYING.with(|r| r.set(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn listeners_get_log_lines_with_their_level_and_fields_and_others_do_not() {
        let (listener, mut rx) = Connection::new(9001);
        let listener = Arc::new(listener);
        let (other, mut other_rx) = Connection::new(9002);
        let other = Arc::new(other);
        let subscriber = tracing_subscriber::registry().with(RelayLayer);
        tracing::subscriber::with_default(subscriber, || {
            listen(&listener, true);
            tracing::info!(session = "s1", tokens_before = 4742, "compacted");
            tracing::warn!("careful");
            listen(&listener, false);
            tracing::info!("not relayed");
        });
        let first: serde_json::Value =
            serde_json::from_str(&rx.try_recv().expect("a line").text).unwrap();
        assert_eq!(first["method"], "window/logMessage");
        assert_eq!(first["params"]["type"], 3);
        let msg = first["params"]["message"].as_str().unwrap();
        assert!(
            msg.ends_with("compacted session=s1 tokens_before=4742"),
            "{msg}"
        );
        let second: serde_json::Value =
            serde_json::from_str(&rx.try_recv().expect("a second line").text).unwrap();
        assert_eq!(second["params"]["type"], 2);
        assert!(rx.try_recv().is_err(), "nothing after unlisten");
        assert!(
            other_rx.try_recv().is_err(),
            "a connection that did not ask gets nothing"
        );
        drop(other);
        forget(9001);
    }
}
