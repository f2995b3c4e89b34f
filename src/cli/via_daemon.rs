//! The commands that act on one session file (`compact`, `preview`) through a daemon, so they
//! work while an agent's daemon holds the file (it holds Pi's lock; a second process would be
//! refused with `Session file is locked by another compactd process`) and the daemon's
//! subscribers see what they do (`compaction_start`/`compaction_end`, the new entry).
//!
//! [`holding`] finds the running daemon on the socket when it holds the file (`listSessions`
//! names it), connected as every client connects (`transport::unix::connect_own`), and takes a
//! hold on the session for the command's connection (`openSession`, which yields the same
//! session as the agent's). [`in_process`] gives `preview` the same thing without a daemon
//! running: a daemon of this process on one end of a socket pair, so either way the command
//! calls the protocol's method and prints its answer — one path, never a copy of a handler.
//! A file no daemon holds is compacted by the direct path (`compactor::compact_in`), as before.

use std::path::Path;

use serde_json::{json, Value};

use crate::transport::client::{DaemonClient, Refusal};

/// A session open in a daemon over this command's own connection.
pub struct Open {
    pub client: DaemonClient,
    pub session_id: String,
    /// The daemon's pid when it is another process (for messages), `None` for one in-process.
    pub daemon_pid: Option<u64>,
}

impl Open {
    /// Calls `method` on the session: `params` gets its `sessionId`.
    pub async fn call(&self, method: &str, mut params: Value) -> Result<Value, Refusal> {
        if let Value::Object(members) = &mut params {
            members.insert("sessionId".into(), json!(self.session_id));
        }
        self.client.call(method, params).await
    }
}

/// `openSession` of `file` on `client`.
async fn open(client: DaemonClient, file: &Path, daemon_pid: Option<u64>) -> Result<Open, Refusal> {
    let info = client
        .call("openSession", json!({ "path": file.to_string_lossy() }))
        .await?;
    let session_id = info["sessionId"].as_str().unwrap_or_default().to_owned();
    Ok(Open {
        client,
        session_id,
        daemon_pid,
    })
}

/// The daemon on `socket` when it holds `file` (canonical), with the session open for this
/// command. `Ok(None)`: no daemon answers there, or it does not hold the file (the command
/// goes its direct way). Call within a runtime.
pub async fn holding(socket: &Path, file: &Path) -> Result<Option<Open>, String> {
    use crate::transport::unix;
    let Some(stream) = unix::connect_own(socket)? else {
        return Ok(None);
    };
    let client = DaemonClient::over(unix::into_async(stream)?);
    let refused = |r: Refusal| format!("the daemon on {} refused: {r}", socket.display());
    let sessions = client
        .call("listSessions", json!({}))
        .await
        .map_err(refused)?;
    let held = sessions
        .as_array()
        .is_some_and(|all| all.iter().any(|s| s["path"].as_str() == file.to_str()));
    if !held {
        return Ok(None);
    }
    let init = client
        .call("initialize", json!({ "clientName": "compactd cli" }))
        .await
        .map_err(refused)?;
    let pid = init["daemon"]["pid"].as_u64();
    open(client, file, pid).await.map(Some).map_err(refused)
}

/// A daemon of this process with `file` open in it, for a command that runs without a daemon
/// holding the file. Call within a runtime.
pub async fn in_process(config: crate::config::Config, file: &Path) -> Result<Open, Refusal> {
    let daemon = crate::daemon::Daemon::new(config);
    let (ours, theirs) = tokio::net::UnixStream::pair().map_err(|e| Refusal {
        code: crate::rpc::ErrorKind::Io.code() as i64,
        message: format!("cannot make a socket pair: {e}"),
        data: json!({"kind": "io"}),
    })?;
    let (read, write) = theirs.into_split();
    tokio::spawn(crate::transport::connection::serve_connection(
        daemon,
        read,
        write,
        crate::transport::Options::default(),
    ));
    open(DaemonClient::over(ours), file, None).await
}

/// The flags a daemon holding the file cannot honour without changing the session for its
/// other clients: it compacts with the session's own settings and summarizer. Returns the
/// message naming the first such flag given.
pub fn refuse_flags(given: Option<&str>, file: &Path, socket: &Path) -> Result<(), String> {
    match given {
        None => Ok(()),
        Some(flag) => Err(format!(
            "the daemon on {} holds {} and runs it with the session's own settings and summarizer, so {flag} cannot apply; drop {flag} (a session's settings change with setSettingsOverrides or Pi's settings.json), or stop the daemon and pass --no-daemon",
            socket.display(),
            file.display()
        )),
    }
}
