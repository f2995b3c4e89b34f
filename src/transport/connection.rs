//! One client connection, whatever the byte stream: read frames, classify each into a typed
//! [`Message`] (or a batch of them), dispatch, and write replies in the client's framing through
//! the connection's single writer task.
//!
//! End of input is a half-close: every request already received runs to completion and its
//! reply (and every event) is written before the connection closes, so
//! `printf '<open>\n<compact>\n' | compactd stdio` answers the compact. Shutdown (SIGTERM/SIGINT)
//! stops reading, lets the aborted compactions answer, and flushes. Memory per connection is
//! bounded: at most `max_in_flight` slow requests run at once (more are refused with
//! `overloaded`), and reading pauses while more than `max_queued` reply bytes wait unread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::task::JoinSet;

use super::dispatch::{self, Dispatcher};
use super::framing::{push_frame, write_frame, Frame, FrameReader, Framing};
use super::message::{response, Invalid, Message, RequestId};
use super::Options;
use crate::daemon::connections::Connection;
use crate::daemon::handlers::Ctx;
use crate::daemon::Daemon;
use crate::rpc::{ErrorKind, RpcError};

/// A slow request that is running, so `$/cancelRequest` can find it.
struct InFlight {
    session_id: Option<String>,
    /// The client cancelled it: an error reply becomes LSP's `RequestCancelled`.
    cancelled: bool,
}

type InFlightTable = Arc<Mutex<HashMap<RequestId, InFlight>>>;

/// One running slow task of a connection (a slow request, a slow notification, or a batch
/// with a slow member), counted against `--max-in-flight` until dropped.
struct SlowSlot(Arc<AtomicUsize>);

impl SlowSlot {
    /// Takes a slot when fewer than `max` are taken.
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<SlowSlot> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| SlowSlot(count.clone()))
    }
}

impl Drop for SlowSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the read loop needs to hand messages out.
struct Loop {
    daemon: Arc<Daemon>,
    conn: Arc<Connection>,
    dispatcher: Arc<Dispatcher>,
    in_flight: InFlightTable,
    tasks: JoinSet<()>,
    max_in_flight: usize,
    /// Slow tasks running (requests, notifications and batches alike), at most
    /// `max_in_flight`.
    slow: Arc<AtomicUsize>,
}

fn error_text(id: &RequestId, e: RpcError) -> String {
    response(id, &Err(e))
}

/// The error reply to a frame the daemon could not read an id from (`id: null`), with the
/// frame's size in `data.frameBytes`: a client with several requests waiting can tell which of
/// them it answers (the one whose frame had that size) and fail it, instead of waiting for an
/// answer that will never come.
fn unreadable(e: RpcError, frame_bytes: usize) -> String {
    error_text(
        &RequestId::Null,
        e.with_detail(serde_json::json!({ "frameBytes": frame_bytes })),
    )
}

impl Loop {
    fn new(daemon: &Arc<Daemon>, conn: &Arc<Connection>, opts: &Options) -> Loop {
        Loop {
            daemon: daemon.clone(),
            conn: conn.clone(),
            dispatcher: Arc::new(Dispatcher::new(Ctx {
                daemon: daemon.clone(),
                conn: conn.clone(),
            })),
            in_flight: Arc::new(Mutex::new(HashMap::new())),
            tasks: JoinSet::new(),
            max_in_flight: opts.max_in_flight.max(1),
            slow: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Handles one frame: its messages, or the error a bad frame gets (a `Content-Length` over
    /// the limit also closes the connection: what follows cannot be framed).
    async fn frame(&mut self, frame: Frame, opts: &Options) -> Next {
        let max_frame = opts.max_frame;
        let frame_error = |message: String, n: usize| {
            unreadable(RpcError::new(ErrorKind::InvalidRequest, message), n)
        };
        match frame {
            Frame::Message(bytes) => match super::message::parse_frame(&bytes) {
                Ok((v, raw)) => self.value(v, raw, bytes.len()).await,
                Err(e) => self.conn.send(unreadable(
                    RpcError::new(ErrorKind::ParseError, format!("Parse error: {e}")),
                    bytes.len(),
                )),
            },
            Frame::Oversized(n) => self.conn.send(frame_error(
                format!("Invalid request: frame of {n} bytes exceeds the {max_frame}-byte limit"),
                n,
            )),
            Frame::Busy(n) => self.conn.send(frame_error(format!(
                "Invalid request: frame of {n} bytes skipped: the daemon is already buffering its limit of {} bytes of incoming frames; retry later",
                opts.budget.limit()
            ), n)),
            Frame::TooLarge(n) => {
                tracing::warn!(length = n, limit = max_frame, "Content-Length over the limit; closing the connection");
                self.conn.send(frame_error(format!(
                    "Invalid request: Content-Length {n} exceeds the {max_frame}-byte limit; closing the connection"
                ), n));
                return Next::Close;
            }
            Frame::BadHeader(why) => self.conn.send(error_text(
                &RequestId::Null,
                RpcError::new(ErrorKind::InvalidRequest, format!("Invalid request: {why}")),
            )),
        }
        Next::Read
    }

    /// Runs `work` in a task of this connection, inside its span (the connection's, and the
    /// request's where there is one).
    fn spawn_task(&mut self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(tracing::Instrument::in_current_span(work));
    }

    /// A client's `$/cancelRequest`: marks the request and aborts the work it started (as
    /// `abortCompaction` would); its reply then is -32800 `RequestCancelled`.
    fn cancel(&self, params: Option<&Value>) {
        let Some(id) = params
            .and_then(|p| p.get("id"))
            .and_then(RequestId::from_value)
        else {
            return;
        };
        let session_id = match self.in_flight.lock().get_mut(&id) {
            Some(f) => {
                f.cancelled = true;
                f.session_id.clone()
            }
            None => return,
        };
        tracing::debug!(request = %crate::rpc::for_log(&id.to_string()), "request cancelled by the client");
        if let Some(sid) = session_id {
            self.daemon.abort_session(&sid);
        }
    }

    fn log_unknown(&self, method: &str) {
        if dispatch::handler(method).is_none() {
            tracing::info!(method = %crate::rpc::for_log(method), "unknown method");
        }
    }

    /// Runs one message; a reply is returned for requests (None for anything else).
    async fn one(&mut self, msg: Result<Message, Invalid>) -> Option<String> {
        match msg {
            Err(Invalid { id, error }) => Some(error_text(&id, error)),
            Ok(Message::Response { id, result }) => {
                if !self.conn.handle_response(&id, result) {
                    tracing::debug!(id = %crate::rpc::for_log(&id.to_string()), "response to an unknown request ignored");
                }
                None
            }
            Ok(Message::Notification { method, params }) => {
                if method == "$/cancelRequest" {
                    self.cancel(params.as_ref());
                    return None;
                }
                self.log_unknown(&method);
                if dispatch::handler(&method).is_some() {
                    let _ = self.dispatcher.call(None, &method, params).await;
                }
                None
            }
            Ok(Message::Request { id, method, params }) => {
                if method == "$/cancelRequest" {
                    self.cancel(params.as_ref());
                    return Some(response(&id, &Ok(Value::Null)));
                }
                self.log_unknown(&method);
                let reply = self.dispatcher.call(Some(&id), &method, params).await;
                Some(response(&id, &reply))
            }
        }
    }

    /// Starts a slow request in its own task, tracked for `$/cancelRequest`.
    fn spawn_slow(&mut self, id: RequestId, method: String, params: Option<Value>) {
        let slot = {
            let mut table = self.in_flight.lock();
            if table.contains_key(&id) {
                self.conn.send(error_text(
                    &id,
                    RpcError::new(
                        ErrorKind::InvalidRequest,
                        format!("Invalid request: id {id} is already used by a request in flight"),
                    ),
                ));
                return;
            }
            let Some(slot) = SlowSlot::take(&self.slow, self.max_in_flight) else {
                self.conn.send(error_text(&id, self.overloaded()));
                return;
            };
            // The work a cancel or a disconnect aborts: the session the method's declared
            // scope names.
            let session_id = dispatch::session_of(&method, params.as_ref());
            table.insert(
                id.clone(),
                InFlight {
                    session_id,
                    cancelled: false,
                },
            );
            slot
        };
        let dispatcher = self.dispatcher.clone();
        let conn = self.conn.clone();
        let table = self.in_flight.clone();
        self.spawn_task(async move {
            let _slot = slot;
            let reply = dispatcher.call(Some(&id), &method, params).await;
            let cancelled = table.lock().remove(&id).is_some_and(|f| f.cancelled);
            let reply = match reply {
                Err(_) if cancelled => Err(RpcError::new(
                    ErrorKind::RequestCancelled,
                    "Request cancelled",
                )),
                r => r,
            };
            conn.send(response(&id, &reply));
        });
    }

    fn overloaded(&self) -> RpcError {
        RpcError::new(
            ErrorKind::Overloaded,
            format!(
                "Too many requests in flight on this connection (limit {}); wait for replies before sending more",
                self.max_in_flight
            ),
        )
    }

    /// Handles one frame's JSON (`frame_bytes` long): a message or a batch.
    async fn value(&mut self, value: Value, raw: super::message::RawIds, frame_bytes: usize) {
        let raw_id = |i: usize| raw.get(i).and_then(|r| r.as_deref());
        match value {
            Value::Array(items) => {
                if items.is_empty() {
                    self.conn.send(error_text(
                        &RequestId::Null,
                        RpcError::new(ErrorKind::InvalidRequest, "Invalid request: empty batch"),
                    ));
                    return;
                }
                let msgs: Vec<Result<Message, Invalid>> = items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| Message::parse_raw(v, raw_id(i)))
                    .collect();
                let slow = msgs.iter().any(|m| {
                    matches!(m, Ok(Message::Request { method, .. } | Message::Notification { method, .. }) if dispatch::is_slow(method))
                });
                if slow {
                    // A batch with a slow member runs in its own task (answered as one array),
                    // which counts against the limit like a slow request; past it, each
                    // request of the batch is answered `overloaded`.
                    let Some(slot) = SlowSlot::take(&self.slow, self.max_in_flight) else {
                        let errors: Vec<String> = msgs
                            .into_iter()
                            .filter_map(|m| match m {
                                Ok(Message::Request { id, .. }) => {
                                    Some(error_text(&id, self.overloaded()))
                                }
                                Err(Invalid { id, error }) => Some(error_text(&id, error)),
                                Ok(_) => None,
                            })
                            .collect();
                        if !errors.is_empty() {
                            self.conn.send(format!("[{}]", errors.join(",")));
                        }
                        return;
                    };
                    let mut worker = Loop {
                        daemon: self.daemon.clone(),
                        conn: self.conn.clone(),
                        dispatcher: self.dispatcher.clone(),
                        in_flight: self.in_flight.clone(),
                        tasks: JoinSet::new(),
                        max_in_flight: self.max_in_flight,
                        slow: self.slow.clone(),
                    };
                    let conn = self.conn.clone();
                    self.spawn_task(async move {
                        let _slot = slot;
                        if let Some(r) = worker.batch(msgs).await {
                            conn.send(r);
                        }
                    });
                } else if let Some(r) = self.batch(msgs).await {
                    self.conn.send(r);
                }
            }
            other => {
                let msg = Message::parse_raw(other, raw_id(0));
                match msg {
                    Ok(Message::Request { id, method, params }) if dispatch::is_slow(&method) => {
                        self.spawn_slow(id, method, params);
                    }
                    Err(Invalid {
                        id: RequestId::Null,
                        error,
                    }) => self.conn.send(unreadable(error, frame_bytes)),
                    Ok(Message::Notification { method, params }) if dispatch::is_slow(&method) => {
                        // Counted like a slow request; past the limit it is dropped (a
                        // notification has no reply to carry the error).
                        let Some(slot) = SlowSlot::take(&self.slow, self.max_in_flight) else {
                            tracing::warn!(method = %crate::rpc::for_log(&method), limit = self.max_in_flight, "slow notification dropped: too many in flight on this connection");
                            return;
                        };
                        let dispatcher = self.dispatcher.clone();
                        self.spawn_task(async move {
                            let _slot = slot;
                            let _ = dispatcher.call(None, &method, params).await;
                        });
                    }
                    msg => {
                        if let Some(r) = self.one(msg).await {
                            self.conn.send(r);
                        }
                    }
                }
            }
        }
    }

    async fn batch(&mut self, msgs: Vec<Result<Message, Invalid>>) -> Option<String> {
        let mut responses = Vec::new();
        for m in msgs {
            if let Some(r) = self.one(m).await {
                responses.push(r);
            }
        }
        (!responses.is_empty()).then(|| format!("[{}]", responses.join(",")))
    }
}

/// The span a connection is served in (`serve_connection` records its id).
pub fn span() -> tracing::Span {
    tracing::info_span!("connection", id = tracing::field::Empty)
}

/// Serves one connection until the client closes its input (or the daemon shuts down), then
/// finishes what it received.
pub async fn serve_connection<R, W>(daemon: Arc<Daemon>, reader: R, writer: W, opts: Options)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (conn, rx) = daemon.connect();
    // The caller's `connection` span (every line of this connection carries it) gets its id.
    tracing::Span::current().record("id", conn.id);
    tracing::info!("client connected");
    let framing = Arc::new(Mutex::new(opts.framing));
    let mut writer_task = spawn_writer(writer, rx, Arc::downgrade(&conn), framing.clone());
    let mut lp = Loop::new(&daemon, &conn, &opts);
    let mut frames = FrameReader::new(
        BufReader::with_capacity(64 * 1024, reader),
        opts.framing,
        opts.max_frame,
        opts.budget.clone(),
    )
    .with_idle_timeout(opts.frame_idle_timeout)
    .with_deadline(opts.frame_deadline)
    .with_progress(opts.slot.as_ref().map(|s| s.progress.clone()));
    let shutdown = daemon.shutdown.clone();
    let evict = opts
        .slot
        .as_ref()
        .map(|s| s.evict.clone())
        .unwrap_or_default();
    let mut paused_logged = false;
    let mut writer_done = false;
    loop {
        // Reap finished slow requests so the set does not grow.
        while lp.tasks.try_join_next().is_some() {}
        let own = conn.queued_bytes();
        // Past the daemon-wide budget, every connection with replies still unread waits until
        // it has read them all (a client that reads drains at once; one that never reads stays
        // paused).
        let total_over = own > 0 && daemon.queued_reply_bytes() > opts.max_queued_total;
        if own > opts.max_queued || total_over {
            let resume_at = if total_over { 0 } else { opts.max_queued };
            if !paused_logged {
                tracing::warn!(
                    queued = own,
                    limit = opts.max_queued,
                    total_limit = opts.max_queued_total,
                    "client is not reading its replies; reading its requests is paused"
                );
                paused_logged = true;
            }
            tokio::select! {
                _ = conn.wait_drained(resume_at) => {}
                _ = shutdown.cancelled() => break,
                _ = &mut writer_task => {
                    writer_done = true;
                    break;
                }
            }
            continue;
        }
        paused_logged = false;
        let frame = tokio::select! {
            f = frames.next() => f,
            _ = shutdown.cancelled() => break,
            _ = evict.cancelled() => {
                tracing::warn!("the oldest partial request with every connection slot taken; closed to serve a new client");
                break;
            }
        };
        let frame = match frame {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                tracing::warn!(error = %e, "a request that does not arrive in time; closing the connection");
                break;
            }
            Err(e) => {
                tracing::debug!(error = %e, "read failed; closing");
                break;
            }
        };
        if framing.lock().is_none() {
            *framing.lock() = frames.framing();
        }
        if lp.frame(frame, &opts).await == Next::Close {
            break;
        }
    }
    finish(daemon, conn, lp, writer_task, writer_done).await;
}

/// Writes the connection's queued messages in its framing (detected from the first frame, or
/// forced), and the notice a message leaves behind (`subscription_dropped`). It holds only a
/// weak handle: the queue closes when the last strong one (daemon table, dispatcher, running
/// slow requests) is gone, which ends it.
fn spawn_writer<W>(
    writer: W,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<crate::daemon::connections::Outbound>,
    conn: std::sync::Weak<Connection>,
    framing: Arc<Mutex<Option<Framing>>>,
) -> tokio::task::JoinHandle<()>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut writer = writer;
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut batch = Vec::new();
        while let Some(first) = rx.recv().await {
            // Everything already queued goes out in one write (up to a bound), so a client
            // pipelining requests costs one syscall per batch of replies, not two per reply.
            // A large frame is written from its own text, never copied into the buffer.
            let f = framing.lock().unwrap_or(Framing::Ndjson);
            let ok = if first.text.len() >= WRITE_BATCH_BYTES {
                let ok = write_frame(&mut writer, f, first.text.as_bytes())
                    .await
                    .is_ok();
                batch.push(first);
                ok
            } else {
                buf.clear();
                push_frame(&mut buf, f, first.text.as_bytes());
                batch.push(first);
                while buf.len() < WRITE_BATCH_BYTES {
                    let Ok(out) = rx.try_recv() else { break };
                    push_frame(&mut buf, f, out.text.as_bytes());
                    batch.push(out);
                }
                writer.write_all(&buf).await.is_ok() && writer.flush().await.is_ok()
            };
            if buf.capacity() > 4 * WRITE_BATCH_BYTES {
                // One large frame in a batch: do not keep its size per connection.
                buf = Vec::with_capacity(64 * 1024);
            }
            // The connection is held only to account for what was written, never across a
            // write that may wait on the client.
            let notices: Vec<String> = match conn.upgrade() {
                Some(c) => batch.drain(..).filter_map(|out| c.written(&out)).collect(),
                None => {
                    batch.clear();
                    Vec::new()
                }
            };
            if !ok {
                break;
            }
            for notice in notices {
                if write_frame(&mut writer, f, notice.as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    })
}

/// Bytes of queued frames the writer gathers into one write.
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// What the connection does after a frame.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Read,
    Close,
}

/// After the input ends: hook requests fail at once (nothing more can arrive), what was
/// received is finished (or, when the client is gone entirely and writes fail, its work is
/// aborted), the daemon forgets the connection, and queued replies get a moment to drain.
async fn finish(
    daemon: Arc<Daemon>,
    conn: Arc<Connection>,
    mut lp: Loop,
    mut writer_task: tokio::task::JoinHandle<()>,
    mut writer_done: bool,
) {
    conn.close_input();
    writer_done |= writer_task.is_finished();
    loop {
        if writer_done {
            let sessions: Vec<String> = lp
                .in_flight
                .lock()
                .values()
                .filter_map(|f| f.session_id.clone())
                .collect();
            for sid in sessions {
                daemon.abort_session(&sid);
            }
            while lp.tasks.join_next().await.is_some() {}
            break;
        }
        tokio::select! {
            next = lp.tasks.join_next() => if next.is_none() { break },
            _ = &mut writer_task => writer_done = true,
        }
    }
    daemon.disconnect(&conn);
    tracing::info!("client disconnected");
    drop(lp);
    // Let queued replies drain before the stream is dropped.
    drop(conn);
    if !writer_done {
        let limit = if daemon.shutdown.is_cancelled() { 2 } else { 5 };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(limit), writer_task).await;
    }
}
