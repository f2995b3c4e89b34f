//! Connected clients as the daemon sees them: an outbound queue, event subscriptions, hook
//! registrations, session holds, and server→client requests in flight (the `Peer`).
//!
//! One writer task per connection drains the queue, so everything a connection receives is in
//! the order it was queued: an event queued before a reply is written before it. Events are
//! counted; a subscriber that falls more than [`EVENT_BACKLOG_LIMIT`] events behind loses its
//! subscriptions (requests keep working) and gets `subscription_dropped` once it has caught up,
//! so a slow UI can never stall compaction or grow the daemon's memory without bound. Queued
//! bytes are counted too: the transport stops reading a connection's requests while more than
//! its limit of replies waits unread (see `transport::connection`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use crate::rpc::wire::RequestId;
use tokio::sync::{mpsc, oneshot, Notify};

pub type ConnId = u64;

/// Queued events past which a subscriber is dropped.
pub const EVENT_BACKLOG_LIMIT: usize = 1024;

/// One frame to write.
#[derive(Debug)]
pub struct Outbound {
    pub text: String,
    pub is_event: bool,
}

#[derive(Debug, Clone)]
pub struct Subscription {
    pub session_id: Option<String>,
    pub events: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct HookRegistration {
    pub session_id: Option<String>,
    pub hooks: Vec<String>,
    pub timeout: Duration,
    /// Registration order across the daemon (hooks are asked in that order).
    pub seq: u64,
    /// The optional payload members this connection wants (`None`: all of them).
    pub include: Option<Vec<String>>,
}

/// Members of a hook request that a registration may leave out (`registerHooks {include}`).
pub const OPTIONAL_HOOK_MEMBERS: [&str; 2] = ["preparation", "branchEntries"];

impl HookRegistration {
    /// `params` as this registration wants them: optional members not included are removed.
    pub fn shape(&self, params: &Value) -> Value {
        let (Some(include), Value::Object(o)) = (&self.include, params) else {
            return params.clone();
        };
        let mut o = o.clone();
        for m in OPTIONAL_HOOK_MEMBERS {
            if !include.iter().any(|i| i == m) {
                o.remove(m);
            }
        }
        Value::Object(o)
    }
}

/// Why a server→client request produced no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerError {
    Timeout,
    Disconnected,
    /// The client answered with a JSON-RPC error.
    Error(Value),
}

/// A connection's shared handle.
pub struct Connection {
    pub id: ConnId,
    tx: mpsc::UnboundedSender<Outbound>,
    event_backlog: AtomicUsize,
    dropped_notice_pending: AtomicBool,
    pub subscriptions: Mutex<Vec<Subscription>>,
    pub hooks: Mutex<Vec<HookRegistration>>,
    /// The daemon's own requests (hooks) awaiting an answer, by their id.
    pending: Mutex<HashMap<RequestId, oneshot::Sender<Result<Value, PeerError>>>>,
    next_request: AtomicU64,
    /// Session ids this connection holds open.
    pub holds: Mutex<HashSet<String>>,
    /// Bytes queued for the writer and not yet written.
    queued_bytes: AtomicUsize,
    /// Signalled each time the writer has written a frame.
    drained: Notify,
    /// The client can no longer send (end of input): daemon→client requests fail at once.
    input_closed: AtomicBool,
}

impl Connection {
    pub fn new(id: ConnId) -> (Connection, mpsc::UnboundedReceiver<Outbound>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Connection {
                id,
                tx,
                event_backlog: AtomicUsize::new(0),
                dropped_notice_pending: AtomicBool::new(false),
                subscriptions: Mutex::new(Vec::new()),
                hooks: Mutex::new(Vec::new()),
                pending: Mutex::new(HashMap::new()),
                next_request: AtomicU64::new(1),
                holds: Mutex::new(HashSet::new()),
                queued_bytes: AtomicUsize::new(0),
                drained: Notify::new(),
                input_closed: AtomicBool::new(false),
            },
            rx,
        )
    }

    /// Queues a reply (or any non-event message).
    pub fn send(&self, text: String) {
        self.queued_bytes.fetch_add(text.len(), Ordering::SeqCst);
        let _ = self.tx.send(Outbound {
            text,
            is_event: false,
        });
    }

    /// Whether this connection wants `event` of `session_id`.
    pub fn wants(&self, session_id: &str, event: &str) -> bool {
        self.subscriptions.lock().iter().any(|s| {
            s.session_id.as_deref().is_none_or(|id| id == session_id)
                && s.events
                    .as_ref()
                    .is_none_or(|evs| evs.iter().any(|e| e == event))
        })
    }

    /// Queues an event notification, applying the backlog limit.
    pub fn send_event(&self, method: &str, params: &Value) {
        let backlog = self.event_backlog.fetch_add(1, Ordering::SeqCst) + 1;
        if backlog > EVENT_BACKLOG_LIMIT {
            self.event_backlog.fetch_sub(1, Ordering::SeqCst);
            let had = !std::mem::take(&mut *self.subscriptions.lock()).is_empty();
            if had {
                tracing::warn!(
                    connection = self.id,
                    "subscriber is too slow; its subscriptions were removed"
                );
                self.dropped_notice_pending.store(true, Ordering::SeqCst);
            }
            return;
        }
        let text = crate::rpc::wire::notification(method, params);
        self.queued_bytes.fetch_add(text.len(), Ordering::SeqCst);
        let _ = self.tx.send(Outbound {
            text,
            is_event: true,
        });
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::SeqCst)
    }

    /// Waits until at most `limit` bytes are queued.
    pub async fn wait_drained(&self, limit: usize) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.queued_bytes() <= limit {
                return;
            }
            notified.await;
        }
    }

    /// Called by the writer after it wrote a frame; returns a notice to write when a dropped
    /// subscriber has drained its backlog.
    pub fn written(&self, out: &Outbound) -> Option<String> {
        self.queued_bytes
            .fetch_sub(out.text.len(), Ordering::SeqCst);
        self.drained.notify_waiters();
        if out.is_event {
            let left = self
                .event_backlog
                .fetch_sub(1, Ordering::SeqCst)
                .saturating_sub(1);
            if left == 0 && self.dropped_notice_pending.swap(false, Ordering::SeqCst) {
                use crate::rpc::events::{Message, SubscriptionDropped};
                let params = crate::rpc::events::payload(&SubscriptionDropped {});
                return Some(crate::rpc::wire::notification(
                    SubscriptionDropped::NAME,
                    &params,
                ));
            }
        }
        None
    }

    /// Sends a server→client request and waits for the answer (or the timeout).
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, PeerError> {
        if self.input_closed.load(Ordering::SeqCst) {
            return Err(PeerError::Disconnected);
        }
        let id = RequestId::Str(format!(
            "compactd-{}",
            self.next_request.fetch_add(1, Ordering::SeqCst)
        ));
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id.clone(), tx);
        self.send(
            crate::rpc::wire::Outgoing::Request {
                id: &id,
                method,
                params: &params,
            }
            .to_text(),
        );
        let outcome = tokio::time::timeout(timeout, rx).await;
        match outcome {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(PeerError::Disconnected),
            Err(_) => {
                self.pending.lock().remove(&id);
                self.send(crate::rpc::wire::cancel_request(&id));
                Err(PeerError::Timeout)
            }
        }
    }

    /// Sends `$/cancelRequest` for every request in flight (an abort).
    pub fn cancel_pending(&self) {
        let ids: Vec<RequestId> = self
            .pending
            .lock()
            .drain()
            .map(|(id, tx)| {
                let _ = tx.send(Err(PeerError::Disconnected));
                id
            })
            .collect();
        for id in ids {
            self.send(crate::rpc::wire::cancel_request(&id));
        }
    }

    /// Routes the client's answer (`id` as a string: the daemon's ids are strings) to the
    /// waiting request. Returns false when nothing was waiting for it.
    pub fn handle_response(&self, id: &RequestId, result: Result<Value, Value>) -> bool {
        let Some(tx) = self.pending.lock().remove(id) else {
            return false;
        };
        let _ = tx.send(result.map_err(PeerError::Error));
        true
    }

    /// The client can send nothing more: fail the daemon→client requests waiting for an
    /// answer, and any made from now on, instead of waiting for their timeouts.
    pub fn close_input(&self) {
        self.input_closed.store(true, Ordering::SeqCst);
        self.close();
    }

    /// The first hook registration for `hook` on `session_id`, if any.
    pub fn hook_registration(&self, session_id: &str, hook: &str) -> Option<HookRegistration> {
        self.hooks
            .lock()
            .iter()
            .filter(|h| {
                h.session_id.as_deref().is_none_or(|id| id == session_id)
                    && h.hooks.iter().any(|x| x == hook)
            })
            .min_by_key(|h| h.seq)
            .cloned()
    }

    /// Fails every request in flight (the connection is gone).
    pub fn close(&self) {
        for (_, tx) in self.pending.lock().drain() {
            let _ = tx.send(Err(PeerError::Disconnected));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_slow_subscriber_is_dropped_and_told_once_it_catches_up() {
        let (conn, mut rx) = Connection::new(1);
        conn.subscriptions.lock().push(Subscription {
            session_id: None,
            events: None,
        });
        for i in 0..EVENT_BACKLOG_LIMIT + 10 {
            conn.send_event("compaction_start", &json!({"i": i}));
        }
        assert!(
            conn.subscriptions.lock().is_empty(),
            "subscriptions removed past the limit"
        );
        assert!(!conn.wants("s1", "compaction_start"));
        conn.send("reply".into());
        let mut notices = 0;
        let mut events = 0;
        while let Ok(out) = rx.try_recv() {
            if out.is_event {
                events += 1;
            }
            if let Some(n) = conn.written(&out) {
                assert!(n.contains("subscription_dropped"));
                notices += 1;
            }
        }
        assert_eq!(events, EVENT_BACKLOG_LIMIT, "the backlog is bounded");
        assert_eq!(notices, 1, "one notice once drained");
    }

    #[tokio::test]
    async fn peer_requests_resolve_time_out_and_route_errors() {
        let (conn, mut rx) = Connection::new(1);
        let conn = std::sync::Arc::new(conn);
        let c2 = conn.clone();
        let answer =
            tokio::spawn(
                async move { c2.request("hook", json!({}), Duration::from_secs(5)).await },
            );
        let sent = rx.recv().await.unwrap();
        let id: Value = serde_json::from_str::<Value>(&sent.text).unwrap()["id"].clone();
        let id = RequestId::from_value(&id).unwrap();
        assert!(conn.handle_response(&id, Ok(json!({"cancel": true}))));
        assert_eq!(answer.await.unwrap(), Ok(json!({"cancel": true})));
        let timed_out = conn
            .request("hook", json!({}), Duration::from_millis(20))
            .await;
        assert_eq!(timed_out, Err(PeerError::Timeout));
        let _request = rx.recv().await.unwrap();
        let cancel = rx.recv().await.unwrap();
        assert!(cancel.text.contains("$/cancelRequest"));
        let unknown = RequestId::Str("unknown".into());
        assert!(!conn.handle_response(&unknown, Ok(json!(1))));
        conn.close_input();
        let after = conn
            .request("hook", json!({}), Duration::from_secs(5))
            .await;
        assert_eq!(
            after,
            Err(PeerError::Disconnected),
            "no wait once input is closed"
        );
    }
}
