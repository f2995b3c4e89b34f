//! The connection shell of `compactd top`: the Unix socket, JSON-RPC requests and their
//! replies, the subscription, the `listSessions` poll, and reconnection with backoff. It feeds
//! [`TopModel`] and never draws.
//!
//! Events are never lost to a slow terminal: a reader task takes frames off the socket as fast
//! as the daemon sends them and hands them to the connection loop over a bounded channel; the
//! loop applies each one to the shared model at once (microseconds) and only marks the view
//! dirty. The terminal thread draws the latest model when it can, so a slow terminal skips
//! frames while the model stays current. Should the loop itself ever fall behind, the bounded
//! channel pushes back on the socket and the daemon's own backlog limit applies: it drops the
//! subscription and says so (`subscription_dropped`), and the loop subscribes again and
//! refreshes, rather than anything being silently missed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::BufReader;
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::model::{Tone, TopModel};
use crate::rpc::wire::{Outgoing, RequestId};
use crate::transport::client::{deadline_for, Peer};
use crate::transport::framing::{write_frame, Frame, FrameBudget, FrameReader, Framing};
use crate::transport::message::Message;

/// How often sessions are listed (sessions opened elsewhere appear within this).
pub const POLL: Duration = Duration::from_secs(1);
/// First and longest wait between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Largest frame accepted from the daemon (a `compaction_end` carries a whole summary).
const MAX_FRAME: usize = 64 * 1024 * 1024;
/// Frames read off the socket and not yet applied.
const FRAME_QUEUE: usize = 256;
/// Actions asked by the user and not yet sent.
pub const COMMAND_QUEUE: usize = 16;

/// An action for the daemon, asked by the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Compact(String),
    Preview(String),
    Abort(String),
}

/// The model shared with the terminal thread, with a flag saying it changed since last drawn.
#[derive(Default)]
pub struct Shared {
    pub model: Mutex<TopModel>,
    dirty: AtomicBool,
}

impl Shared {
    /// Changes the model and marks it for drawing.
    pub fn update<R>(&self, f: impl FnOnce(&mut TopModel) -> R) -> R {
        let out = f(&mut self.model.lock());
        self.dirty.store(true, Ordering::SeqCst);
        out
    }

    /// Whether the model changed since the last call.
    pub fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::SeqCst)
    }
}

/// Epoch milliseconds now (the model is given every time it needs).
pub fn now_ms() -> i64 {
    crate::session::ids::now_ms()
}

/// What a request in flight was for.
#[derive(Debug, Clone)]
enum Pending {
    /// `initialize` / `subscribe`: must succeed for the view to be live.
    Setup(&'static str),
    List,
    Compact(String),
    Preview(String),
    Abort(String),
}

/// A request in flight: what it was for, its method and when it was sent (each has a
/// deadline: a daemon that stops answering is reported and the view reconnects).
struct Sent {
    what: Pending,
    method: String,
    at: tokio::time::Instant,
}

/// The writing half with its request ids.
struct Rpc {
    writer: OwnedWriteHalf,
    next_id: u64,
    pending: HashMap<u64, Sent>,
    /// Who answers, for the message when it does not.
    peer: Peer,
}

impl Rpc {
    async fn call(&mut self, method: &str, params: Value, what: Pending) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let body = Outgoing::Request {
            id: &RequestId::Num(id.into()),
            method,
            params: &params,
        }
        .to_text();
        write_frame(&mut self.writer, Framing::Ndjson, body.as_bytes())
            .await
            .map_err(|e| format!("cannot write to the daemon: {e}"))?;
        self.pending.insert(
            id,
            Sent {
                what,
                method: method.to_owned(),
                at: tokio::time::Instant::now(),
            },
        );
        Ok(())
    }

    fn listing(&self) -> bool {
        self.pending
            .values()
            .any(|p| matches!(p.what, Pending::List))
    }

    /// Why the connection is given up when a request went past its deadline
    /// (`transport::client::deadline_for` its method) with no answer: the daemon is stopped or
    /// wedged, and the view says so (socket and pid) instead of showing stale numbers.
    fn overdue(&self) -> Result<(), String> {
        match self
            .pending
            .values()
            .find(|p| p.at.elapsed() >= deadline_for(&p.method))
        {
            Some(p) => Err(self.peer.not_answering(&p.method, deadline_for(&p.method))),
            None => Ok(()),
        }
    }

    async fn list(&mut self) -> Result<(), String> {
        if self.listing() {
            return Ok(());
        }
        self.call("listSessions", json!({}), Pending::List).await
    }
}

/// Runs until `stop`: connects, serves the connection, and reconnects with backoff whenever it
/// is lost. Every change goes to `shared`.
pub async fn run(
    socket: PathBuf,
    shared: Arc<Shared>,
    mut commands: mpsc::Receiver<Command>,
    stop: CancellationToken,
) {
    let label = socket.display().to_string();
    let mut backoff = BACKOFF_MIN;
    loop {
        let outcome = tokio::select! {
            c = crate::transport::unix::connect_own_async(&socket) => c,
            _ = stop.cancelled() => return,
        };
        match outcome {
            Ok(stream) => {
                backoff = BACKOFF_MIN;
                match serve(stream, &socket, &shared, &mut commands, &stop, &label).await {
                    Ok(()) => return,
                    Err(why) => shared.update(|m| m.disconnected(now_ms(), &why)),
                }
            }
            Err(why) => shared.update(|m| m.disconnected(now_ms(), &why)),
        }
        shared.update(|m| m.retry_in(backoff.as_millis() as u64));
        let wake = tokio::time::sleep(backoff);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                _ = &mut wake => break,
                _ = stop.cancelled() => return,
                c = commands.recv() => match c {
                    None => return,
                    Some(c) => shared.update(|m| m.note(now_ms(), command_session(&c), "not connected to the daemon: not sent".into(), Tone::Bad)),
                },
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

fn command_session(c: &Command) -> Option<&str> {
    match c {
        Command::Compact(s) | Command::Preview(s) | Command::Abort(s) => Some(s),
    }
}

/// Reads frames into `tx` until the stream ends (then the channel closes).
async fn read_frames(
    reader: tokio::net::unix::OwnedReadHalf,
    tx: mpsc::Sender<std::io::Result<Frame>>,
) {
    let mut frames = FrameReader::new(
        BufReader::new(reader),
        Some(Framing::Ndjson),
        MAX_FRAME,
        FrameBudget::new(MAX_FRAME),
    );
    loop {
        match frames.next().await {
            Ok(Some(f)) => {
                if tx.send(Ok(f)).await.is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
    }
}

/// One connection: subscribe, list, then apply what arrives and send what the user asks, until
/// the connection fails (`Err`: why) or the view stops (`Ok`).
async fn serve(
    stream: UnixStream,
    socket: &Path,
    shared: &Shared,
    commands: &mut mpsc::Receiver<Command>,
    stop: &CancellationToken,
    label: &str,
) -> Result<(), String> {
    let peer = Peer::of(&stream, Some(socket));
    let (reader, writer) = stream.into_split();
    let (tx, mut frames) = mpsc::channel(FRAME_QUEUE);
    let reading = tokio::spawn(read_frames(reader, tx));
    let _stop_reading = AbortOnDrop(reading);
    let mut rpc = Rpc {
        writer,
        next_id: 1,
        pending: HashMap::new(),
        peer,
    };
    rpc.call(
        "initialize",
        json!({"clientName": "compactd top"}),
        Pending::Setup("initialize"),
    )
    .await?;
    rpc.call("subscribe", json!({}), Pending::Setup("subscribe"))
        .await?;
    rpc.list().await?;
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    poll.tick().await;
    let mut announced = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            frame = frames.recv() => match frame {
                Some(Ok(Frame::Message(bytes))) => {
                    handle(&bytes, shared, &mut rpc, &mut announced, label).await?;
                }
                Some(Ok(other)) => shared.update(|m| m.note(now_ms(), None, format!("unreadable message from the daemon skipped ({other:?})"), Tone::Warn)),
                Some(Err(e)) => return Err(format!("connection lost: {e}")),
                None => return Err("the daemon closed the connection".into()),
            },
            command = commands.recv() => match command {
                None => return Ok(()),
                Some(Command::Compact(id)) => rpc.call("compact", json!({"sessionId": id}), Pending::Compact(id)).await?,
                Some(Command::Preview(id)) => rpc.call("previewCompaction", json!({"sessionId": id}), Pending::Preview(id)).await?,
                Some(Command::Abort(id)) => rpc.call("abortCompaction", json!({"sessionId": id}), Pending::Abort(id)).await?,
            },
            _ = poll.tick() => {
                rpc.overdue()?;
                rpc.list().await?;
            }
        }
    }
}

/// Aborts a task when dropped (the reader of a connection that ended).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Applies one message from the daemon.
async fn handle(
    bytes: &[u8],
    shared: &Shared,
    rpc: &mut Rpc,
    announced: &mut bool,
    label: &str,
) -> Result<(), String> {
    let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
        shared.update(|m| {
            m.note(
                now_ms(),
                None,
                "a message from the daemon was not JSON; skipped".into(),
                Tone::Warn,
            )
        });
        return Ok(());
    };
    match Message::parse(value) {
        Ok(Message::Notification { method, params }) => {
            let params = params.unwrap_or(Value::Null);
            let follow = shared.update(|m| m.apply_event(&method, &params, now_ms()));
            if follow.resubscribe {
                rpc.call("subscribe", json!({}), Pending::Setup("subscribe"))
                    .await?;
            }
            if follow.refresh {
                rpc.list().await?;
            }
        }
        Ok(Message::Response { id, result }) => {
            let Some(Sent { what, .. }) = id_number(&id).and_then(|n| rpc.pending.remove(&n))
            else {
                return Ok(());
            };
            let now = now_ms();
            let reply = result.as_ref();
            match what {
                Pending::Setup(method) => {
                    if let Err(e) = reply {
                        return Err(format!("{method} refused: {e}"));
                    }
                    if method == "subscribe" && !*announced {
                        *announced = true;
                        shared.update(|m| m.connected(now, label));
                    }
                }
                Pending::List => match reply {
                    Ok(list) => {
                        if let Err(e) = shared.update(|m| m.apply_snapshot(list, now)) {
                            shared.update(|m| m.note(now, None, e, Tone::Bad));
                        }
                    }
                    Err(e) => {
                        shared.update(|m| {
                            m.note(now, None, format!("listSessions refused: {e}"), Tone::Bad)
                        });
                    }
                },
                Pending::Compact(s) => shared.update(|m| m.compact_replied(&s, reply, now)),
                Pending::Preview(s) => shared.update(|m| m.preview_replied(&s, reply)),
                Pending::Abort(s) => shared.update(|m| m.abort_replied(&s, reply, now)),
            }
        }
        // `top` registers no hooks; the daemon sends it no requests.
        Ok(Message::Request { .. }) | Err(_) => {}
    }
    Ok(())
}

fn id_number(id: &crate::transport::message::RequestId) -> Option<u64> {
    id.to_value().as_u64()
}

/// `--once`: one `listSessions` answer from the daemon at `socket`, within `timeout` (past
/// it, an error naming the socket and the daemon's pid).
pub async fn snapshot(socket: &Path, timeout: Duration) -> Result<Value, String> {
    let peer = std::sync::OnceLock::new();
    let work = async {
        let stream = crate::transport::unix::connect_own_async(socket).await?;
        let _ = peer.set(Peer::of(&stream, Some(socket)));
        let (reader, mut writer) = stream.into_split();
        let body = Outgoing::Request {
            id: &RequestId::Num(1.into()),
            method: "listSessions",
            params: &json!({}),
        }
        .to_text();
        write_frame(&mut writer, Framing::Ndjson, body.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut frames = FrameReader::new(
            BufReader::new(reader),
            Some(Framing::Ndjson),
            MAX_FRAME,
            FrameBudget::new(MAX_FRAME),
        );
        loop {
            match frames.next().await.map_err(|e| e.to_string())? {
                None => return Err("the daemon closed the connection".to_owned()),
                Some(Frame::Message(bytes)) => {
                    let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
                        continue;
                    };
                    if let Ok(Message::Response { id, result }) = Message::parse(v) {
                        if id_number(&id) == Some(1) {
                            return result.map_err(|e| format!("listSessions refused: {e}"));
                        }
                    }
                }
                Some(_) => {}
            }
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| match peer.get() {
            Some(peer) => peer.not_answering("listSessions", timeout),
            None => format!("no answer within {} s", timeout.as_secs()),
        })?
}
