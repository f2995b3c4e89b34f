//! A small client of the daemon's socket, for compactd's own front ends that call the daemon on
//! behalf of someone else (`compactd mcp`, `compact`, `preview`, `status`, `stop`, `doctor`):
//! NDJSON requests, replies matched by id, events and other notifications handed to whoever
//! asked for them ([`DaemonClient::notifications`], else dropped), and any server→client request
//! (a hook nobody registered) answered "no result" so the daemon never waits on it.
//!
//! Every call has a deadline. A daemon that accepted the connection but does not answer (a
//! stopped process: the kernel still queues connections for it; or a wedged one) must not hang
//! its caller: past the deadline the call fails with a message naming the socket and the
//! daemon's pid (read from the connection's peer credentials, which name the process that
//! listens even when it never accepted). An error reply with a null id (a frame the daemon could
//! not read an id from) fails the calls it can belong to instead of leaving them waiting.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::oneshot;

use super::message::{response, Message, RequestId};
use crate::rpc::wire::Outgoing;

/// How long a call the daemon answers inline (everything but a compaction's work) may wait
/// for its answer: such a call takes milliseconds; a daemon silent this long is stopped or
/// wedged.
pub const INLINE_DEADLINE: Duration = Duration::from_secs(10);

/// How long a call the daemon runs as a task (`compact`, `checkCompaction`, `navigateTree`)
/// may wait: a real summarizer model, with retries, can take minutes.
pub const TASK_DEADLINE: Duration = Duration::from_secs(600);

/// The deadline of a call of `method` by its declared run mode.
pub fn deadline_for(method: &str) -> Duration {
    if super::dispatch::is_slow(method) {
        TASK_DEADLINE
    } else {
        INLINE_DEADLINE
    }
}

/// `data.kind` of the error a call gets when its deadline passes (client-side: the daemon never
/// sends it).
pub const TIMEOUT_KIND: &str = "timeout";

/// A JSON-RPC error reply: code, message and `data` as the daemon sent them.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub code: i64,
    pub message: String,
    pub data: Value,
}

impl Refusal {
    /// `error.data.kind` (`entry_not_found`, `unknown_session`, …; [`TIMEOUT_KIND`] for a call
    /// that got no answer in time).
    pub fn kind(&self) -> Option<&str> {
        self.data.get("kind").and_then(Value::as_str)
    }

    fn from_error(e: &Value) -> Refusal {
        Refusal {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            data: e.get("data").cloned().unwrap_or(Value::Null),
        }
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

/// A call waiting for its answer: where the answer goes, and the size of the request's frame
/// (what a null-id error names, see [`fail_unreadable`]).
struct Waiting {
    answer: oneshot::Sender<Result<Value, Refusal>>,
    frame_bytes: usize,
}

type Pending = Arc<Mutex<HashMap<u64, Waiting>>>;

/// Who answers on the other end: for messages about a daemon that does not answer.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    /// The socket connected to (`None` for a socket pair).
    pub socket: Option<PathBuf>,
    /// The daemon's process id, from the connection's peer credentials where the system tells.
    pub pid: Option<u32>,
}

impl Peer {
    /// The daemon at the other end of `stream`, connected to `socket`.
    pub fn of(stream: &tokio::net::UnixStream, socket: Option<&Path>) -> Peer {
        Peer {
            socket: socket.map(Path::to_owned),
            pid: stream
                .peer_cred()
                .ok()
                .and_then(|c| c.pid())
                .and_then(|p| u32::try_from(p).ok()),
        }
    }

    /// What a caller says when this daemon did not answer `method` within `deadline`: the
    /// socket, the pid and what to do about it.
    pub fn not_answering(&self, method: &str, deadline: Duration) -> String {
        let hint = match self.pid {
            Some(pid) => format!(
                "it may be stopped (resume it with `kill -CONT {pid}`) or wedged (`kill {pid}` ends it)"
            ),
            None => "it may be stopped or wedged".to_owned(),
        };
        format!(
            "{self} did not answer `{method}` within {}: {hint}",
            seconds(deadline)
        )
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.socket {
            Some(s) => write!(f, "the daemon on {}", s.display())?,
            None => write!(f, "the daemon")?,
        }
        match self.pid {
            Some(pid) => write!(f, " (pid {pid})"),
            None => Ok(()),
        }
    }
}

/// A notification the daemon sent: its method (an event's name) and params.
pub type Notification = (String, Value);

/// Where notifications go, once someone asked for them.
type Listener = Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<Notification>>>>;

/// How long a client's calls wait for their answers.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    /// [`deadline_for`] each call's method.
    ByMethod,
    /// This long, every call.
    Every(Duration),
    /// As long as it takes.
    None,
}

/// One connection to the daemon.
pub struct DaemonClient {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    listener: Listener,
    next: AtomicU64,
    peer: Peer,
    /// How long each call may wait for its answer.
    deadline: Deadline,
}

fn closed() -> Refusal {
    Refusal {
        code: crate::rpc::ErrorKind::Io.code() as i64,
        message: "the daemon closed the connection".into(),
        data: json!({"kind": "io"}),
    }
}

/// An error reply with a null id answers a frame the daemon could not read an id from (not
/// JSON, over the size limit, skipped for lack of buffer). It fails the waiting calls it can
/// belong to: those whose request frame has the size the daemon reports in
/// `data.frameBytes`, or, from a daemon that reports none, every waiting call.
fn fail_unreadable(pending: &Pending, error: &Value) {
    let refusal = Refusal::from_error(error);
    let size = refusal
        .data
        .get("frameBytes")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok());
    let mut table = pending.lock();
    let ids: Vec<u64> = table
        .iter()
        .filter(|(_, w)| size.is_none_or(|n| n == w.frame_bytes))
        .map(|(id, _)| *id)
        .collect();
    for id in ids {
        if let Some(w) = table.remove(&id) {
            let _ = w.answer.send(Err(refusal.clone()));
        }
    }
}

impl DaemonClient {
    /// Connects to the daemon's socket: only to a daemon of this user
    /// (`transport::unix::connect_own_async`).
    pub async fn connect(socket: &Path) -> Result<DaemonClient, String> {
        let stream = super::unix::connect_own_async(socket).await?;
        Ok(DaemonClient::over(stream).on_socket(socket))
    }

    /// Names the socket the stream is connected to, for messages.
    pub fn on_socket(mut self, socket: &Path) -> DaemonClient {
        self.peer.socket = Some(socket.to_owned());
        self
    }

    /// Gives every call this deadline instead of the one of its method's run mode.
    pub fn with_deadline(mut self, deadline: Duration) -> DaemonClient {
        self.deadline = Deadline::Every(deadline);
        self
    }

    /// Lets every call wait as long as it takes: for a daemon of this very process (a socket
    /// pair), which cannot be stopped or wedged apart from its caller, and whose opens of a
    /// huge file may take what they take.
    pub fn without_deadline(mut self) -> DaemonClient {
        self.deadline = Deadline::None;
        self
    }

    /// Who answers (socket and pid), for messages.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// A client over a stream connected (and checked) already. Call within a runtime: it
    /// starts the tasks that read answers and write replies.
    pub fn over(stream: tokio::net::UnixStream) -> DaemonClient {
        let peer = Peer::of(&stream, None);
        let (read, write) = stream.into_split();
        let pending: Pending = Arc::default();
        let listener: Listener = Arc::default();
        let writer = Arc::new(tokio::sync::Mutex::new(write));
        let client = DaemonClient {
            writer: writer.clone(),
            pending: pending.clone(),
            listener: listener.clone(),
            next: AtomicU64::new(1),
            peer,
            deadline: Deadline::ByMethod,
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
                let n = match id {
                    RequestId::Num(n) => n,
                    RequestId::Null => {
                        if let Err(e) = &result {
                            fail_unreadable(&pending, e);
                        }
                        continue;
                    }
                    _ => continue,
                };
                let Some(waiting) = n.as_u64().and_then(|n| pending.lock().remove(&n)) else {
                    continue;
                };
                let _ = waiting
                    .answer
                    .send(result.map_err(|e| Refusal::from_error(&e)));
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

    /// Calls `method` with `params`; the result, or the daemon's error reply, or a
    /// [`TIMEOUT_KIND`] error once the call's deadline passed with no answer.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, Refusal> {
        let deadline = match self.deadline {
            Deadline::ByMethod => deadline_for(method),
            Deadline::Every(d) => d,
            // Far enough that it never comes (tokio saturates a deadline past its clock).
            Deadline::None => Duration::MAX,
        };
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        let line = Outgoing::Request {
            id: &RequestId::Num(id.into()),
            method,
            params: &params,
        }
        .to_text();
        self.pending.lock().insert(
            id,
            Waiting {
                answer: tx,
                frame_bytes: line.len(),
            },
        );
        let answered = tokio::time::timeout(deadline, async {
            if write_line(&self.writer, &line).await.is_err() {
                return Err(closed());
            }
            rx.await.unwrap_or_else(|_| Err(closed()))
        })
        .await;
        match answered {
            Ok(answer) => {
                if answer.is_err() {
                    self.pending.lock().remove(&id);
                }
                answer
            }
            Err(_) => {
                self.pending.lock().remove(&id);
                Err(self.not_answering(method, deadline))
            }
        }
    }

    /// The error of a call whose deadline passed.
    fn not_answering(&self, method: &str, deadline: Duration) -> Refusal {
        Refusal {
            code: crate::rpc::ErrorKind::Io.code() as i64,
            message: self.peer.not_answering(method, deadline),
            data: json!({"kind": TIMEOUT_KIND}),
        }
    }
}

/// `5 s`, `1.5 s`, `250 ms`: a deadline as a person reads it.
pub fn seconds(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{} s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A client over one end of a socket pair, and the other end as the "daemon".
    fn pair() -> (DaemonClient, tokio::net::UnixStream) {
        let (ours, theirs) = tokio::net::UnixStream::pair().expect("socket pair");
        (DaemonClient::over(ours), theirs)
    }

    /// Reads `n` request lines from the daemon's end; their byte sizes without the newline.
    async fn sizes(daemon: &mut tokio::net::UnixStream, n: usize) -> Vec<usize> {
        let mut got = Vec::new();
        let mut text = Vec::new();
        while got.len() < n {
            let mut buf = [0u8; 4096];
            let k = daemon.read(&mut buf).await.expect("read");
            text.extend_from_slice(&buf[..k]);
            while let Some(i) = text.iter().position(|&b| b == b'\n') {
                got.push(i);
                text.drain(..=i);
            }
        }
        got
    }

    #[tokio::test]
    async fn an_answer_with_a_null_id_fails_the_call_of_its_frame_size_only() {
        let (client, mut daemon) = pair();
        let client = Arc::new(client.with_deadline(Duration::from_secs(30)));
        let small = tokio::spawn({
            let c = client.clone();
            async move { c.call("listSessions", json!({})).await }
        });
        let big = tokio::spawn({
            let c = client.clone();
            async move {
                c.call("listSessions", json!({"pad": "x".repeat(100)}))
                    .await
            }
        });
        let got = sizes(&mut daemon, 2).await;
        let big_size = *got.iter().max().expect("two sizes");
        let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600,
            "message": "Invalid request: too big", "data": {"kind": "invalid_request", "frameBytes": big_size}}});
        daemon
            .write_all(format!("{error}\n").as_bytes())
            .await
            .unwrap();
        let refused = big.await.unwrap().expect_err("the big call fails");
        assert_eq!(refused.code, -32600);
        assert!(!small.is_finished(), "the other call still waits");
        // Its own answer (ids start at 1; the small call was spawned first but either may have
        // taken id 1: answer both ids, the failed one's answer is ignored).
        for id in [1, 2] {
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": "ok"});
            daemon
                .write_all(format!("{answer}\n").as_bytes())
                .await
                .unwrap();
        }
        assert_eq!(small.await.unwrap(), Ok(json!("ok")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_fails_naming_the_daemon_and_what_to_do() {
        let (client, _daemon) = pair();
        let client = client
            .on_socket(Path::new("/run/c.sock"))
            .with_deadline(Duration::from_secs(5));
        let refused = client
            .call("initialize", json!({}))
            .await
            .expect_err("no answer");
        assert_eq!(refused.kind(), Some(TIMEOUT_KIND));
        let pid = std::process::id();
        assert!(
            refused.message.contains("the daemon on /run/c.sock")
                && refused.message.contains(&format!("(pid {pid})"))
                && refused.message.contains("within 5 s")
                && refused.message.contains(&format!("kill -CONT {pid}")),
            "{}",
            refused.message
        );
        assert!(client.pending.lock().is_empty(), "the call was forgotten");
    }

    #[test]
    fn deadlines_follow_the_run_mode() {
        assert_eq!(deadline_for("listSessions"), INLINE_DEADLINE);
        assert_eq!(deadline_for("compact"), TASK_DEADLINE);
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(seconds(Duration::from_millis(250)), "250 ms");
    }
}
