//! The commands that act on one session file (`compact`, `preview`) always go through a
//! daemon, so there is one path for every compaction and every preview: the protocol's own
//! method, never a copy of its handler.
//!
//! [`session`] finds the running daemon on the socket when it holds the file (`listSessions`
//! names it; connected as every client connects, `transport::unix::connect_own`) and takes a
//! hold on the session for the command's connection (`openSession`, which yields the same
//! session as the agent's): the command then works while an agent's daemon holds the file (it
//! holds Pi's lock; a second process would be refused with `Session file is locked by another
//! compactd process`), and the daemon's subscribers see what it does. Otherwise it starts a
//! daemon of this process on one end of a socket pair ([`in_process`]), configured by the
//! command's flags, and opens the file there.

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::transport::client::{DaemonClient, Refusal};

/// A session open in a daemon over this command's own connection.
pub struct Open {
    pub client: DaemonClient,
    pub session_id: String,
    /// Which daemon: another process on a socket, or this process's own.
    pub daemon: Which,
}

/// The daemon a command's session is open in.
pub enum Which {
    /// The running daemon on `socket` (its pid from `initialize`).
    Running {
        pid: Option<u64>,
        socket: std::path::PathBuf,
    },
    /// A daemon of this process.
    Own(Arc<crate::daemon::Daemon>),
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
async fn open(client: DaemonClient, file: &Path, daemon: Which) -> Result<Open, Refusal> {
    let info = client
        .call("openSession", json!({ "path": file.to_string_lossy() }))
        .await?;
    let session_id = info["sessionId"].as_str().unwrap_or_default().to_owned();
    Ok(Open {
        client,
        session_id,
        daemon,
    })
}

/// The daemon on `socket` when it holds `file` (canonical), with the session open for this
/// command. `Ok(None)`: no daemon answers there, or it does not hold the file. Call within a
/// runtime.
pub async fn holding(socket: &Path, file: &Path) -> Result<Option<Open>, String> {
    use crate::transport::unix;
    let Some(stream) = unix::connect_own(socket)? else {
        return Ok(None);
    };
    let client = DaemonClient::over(unix::into_async(stream)?).on_socket(socket);
    let refused = |r: Refusal| match r.kind() {
        Some(crate::transport::client::TIMEOUT_KIND) => r.message,
        _ => format!("the daemon on {} refused: {r}", socket.display()),
    };
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
    let daemon = Which::Running {
        pid: init["daemon"]["pid"].as_u64(),
        socket: socket.to_owned(),
    };
    open(client, file, daemon).await.map(Some).map_err(refused)
}

/// A daemon of this process with `file` open in it. Call within a runtime.
pub async fn in_process(config: crate::config::Config, file: &Path) -> Result<Open, Refusal> {
    let daemon = crate::daemon::Daemon::new(config);
    let (ours, theirs) = tokio::net::UnixStream::pair().map_err(|e| Refusal {
        code: crate::rpc::ErrorKind::Io.code() as i64,
        message: format!("cannot make a socket pair: {e}"),
        data: json!({"kind": "io"}),
    })?;
    let (read, write) = theirs.into_split();
    tokio::spawn(crate::transport::connection::serve_connection(
        daemon.clone(),
        read,
        write,
        crate::transport::Options::default(),
    ));
    open(
        DaemonClient::over(ours).without_deadline(),
        file,
        Which::Own(daemon),
    )
    .await
}

/// What a command gives besides the file: the first settings or summarizer flag given (the
/// running daemon cannot honour one), the session settings the flags set
/// (`setSettingsOverrides`' `compaction` member), and the configuration of this process's own
/// daemon (the flags' summarizer applied).
pub struct Flags {
    pub given: Option<&'static str>,
    pub compaction: Value,
    pub config: crate::config::Config,
}

/// Why a command could not get its session: the message and the exit code.
pub type Failed = (String, i32);

/// The session `file` in the daemon that should act on it: the running daemon on `socket`
/// when it holds the file (a flag it cannot honour is refused, exit 2), else a daemon of this
/// process configured by `flags` (`socket`: `None` under `--no-daemon`). Call within a runtime.
pub async fn session(socket: Option<&Path>, file: &Path, flags: Flags) -> Result<Open, Failed> {
    let held = match socket {
        Some(socket) => match holding(socket, file).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!("{e}; using a daemon of this process");
                None
            }
        },
        None => None,
    };
    if let Some(open) = held {
        if let (Some(flag), Which::Running { socket, .. }) = (flags.given, &open.daemon) {
            return Err((refused_flag(flag, file, socket), super::EXIT_USAGE));
        }
        return Ok(open);
    }
    let open = in_process(flags.config, file)
        .await
        .map_err(|r| (r.message, super::EXIT_FAILED))?;
    // This process's daemon is its own: the flags apply to its one session.
    let mut overrides = serde_json::Map::new();
    if flags.compaction.as_object().is_some_and(|o| !o.is_empty()) {
        overrides.insert("compaction".into(), flags.compaction);
    }
    if !overrides.is_empty() {
        open.call("setSettingsOverrides", Value::Object(overrides))
            .await
            .map_err(|r| (r.message, super::EXIT_USAGE))?;
    }
    Ok(open)
}

/// The message refusing `flag`: a daemon holding the file compacts it with the session's own
/// settings and summarizer, which a flag would change for its other clients.
fn refused_flag(flag: &str, file: &Path, socket: &Path) -> String {
    format!(
        "the daemon on {} holds {} and runs it with the session's own settings and summarizer, so {flag} cannot apply; drop {flag} (a session's settings change with setSettingsOverrides or Pi's settings.json), or stop the daemon and pass --no-daemon",
        socket.display(),
        file.display()
    )
}
