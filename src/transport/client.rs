//! A small client of the daemon's socket, for compactd's own front ends that call the daemon on
//! behalf of someone else (`compactd mcp`, `compact`, `preview`): NDJSON requests, replies
//! matched by id, events and other notifications handed to whoever asked for them
//! ([`DaemonClient::notifications`], else dropped), and any server→client request (a hook nobody
//! registered) answered "no result" so the daemon never waits on it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::oneshot;

use super::message::{response, Message, RequestId};
use crate::rpc::wire::Outgoing;

/// A JSON-RPC error reply: code, message and `data` as the daemon sent them.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: i64,
    pub message: String,
    pub data: Value,
}

impl Refusal {
    /// `error.data.kind` (`entry_not_found`, `unknown_session`, …).
    pub fn kind(&self) -> Option<&str> {
        self.data.get("kind").and_then(Value::as_str)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

async fn write_line(
    writer: &tokio::sync::Mutex<OwnedWriteHalf>,
    line: &str,
) -> std::io::Result<()> {
    let mut w = writer.lock().await;
    w.write_all(line.as_bytes()).await?;
    w.write_all(b"\n").await?;
    w.flush().await
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, Refusal>>>>>;

/// A notification the daemon sent: its method (an event's name) and params.
pub type Notification = (String, Value);

/// Where notifications go, once someone asked for them.
type Listener = Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<Notification>>>>;

/// One connection to the daemon.
pub struct DaemonClient {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    listener: Listener,
    next: AtomicU64,
}

fn closed() -> Refusal {
    Refusal {
        code: crate::rpc::ErrorKind::Io.code() as i64,
        message: "the daemon closed the connection".into(),
        data: json!({"kind": "io"}),
    }
}

impl DaemonClient {
    /// Connects to the daemon's socket: only to a daemon of this user
    /// (`transport::unix::connect_own_async`).
    pub async fn connect(socket: &Path) -> Result<DaemonClient, String> {
        let stream = super::unix::connect_own_async(socket).await?;
        Ok(DaemonClient::over(stream))
    }

    /// A client over a stream connected (and checked) already. Call within a runtime: it
    /// starts the tasks that read answers and write replies.
    pub fn over(stream: tokio::net::UnixStream) -> DaemonClient {
        let (read, write) = stream.into_split();
        let pending: Pending = Arc::default();
        let listener: Listener = Arc::default();
        let writer = Arc::new(tokio::sync::Mutex::new(write));
        let client = DaemonClient {
            writer: writer.clone(),
            pending: pending.clone(),
            listener: listener.clone(),
            next: AtomicU64::new(1),
        };
        let (answers_tx, mut answers_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(value) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let (id, result) = match Message::parse(value) {
                    Ok(Message::Response { id, result }) => (id, result),
                    Ok(Message::Request { id, .. }) => {
                        // A request to us: no hook is registered, so "no result".
                        let _ = answers_tx.send(response(&id, &Ok(Value::Null)));
                        continue;
                    }
                    Ok(Message::Notification { method, params }) => {
                        if let Some(tx) = listener.lock().as_ref() {
                            let _ = tx.send((method, params.unwrap_or(Value::Null)));
                        }
                        continue;
                    }
                    _ => continue,
                };
                let RequestId::Num(n) = id else { continue };
                let Some(tx) = n.as_u64().and_then(|n| pending.lock().remove(&n)) else {
                    continue;
                };
                let reply = result.map_err(|e| Refusal {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    data: e.get("data").cloned().unwrap_or(Value::Null),
                });
                let _ = tx.send(reply);
            }
            // The connection is gone: every waiting call fails.
            pending.lock().clear();
        });
        tokio::spawn(async move {
            while let Some(line) = answers_rx.recv().await {
                if write_line(&writer, &line).await.is_err() {
                    break;
                }
            }
        });
        client
    }

    /// The notifications (events) the daemon sends from now on, in order; a second call takes
    /// them over from the first.
    pub fn notifications(&self) -> tokio::sync::mpsc::UnboundedReceiver<Notification> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self.listener.lock() = Some(tx);
        rx
    }

    /// Calls `method` with `params`; the result, or the daemon's error reply.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, Refusal> {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        let line = Outgoing::Request {
            id: &RequestId::Num(id.into()),
            method,
            params: &params,
        }
        .to_text();
        if write_line(&self.writer, &line).await.is_err() {
            self.pending.lock().remove(&id);
            return Err(closed());
        }
        rx.await.unwrap_or_else(|_| Err(closed()))
    }
}
