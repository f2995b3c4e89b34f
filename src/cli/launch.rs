//! Start or join the one daemon of a socket, as gopls `-remote=auto` does: `compactd connect`
//! (what editors spawn) and `compactd start` (what client libraries run before connecting) use
//! the running daemon when one answers on the socket, and otherwise start one in the
//! background and wait until it answers.
//!
//! Two starters racing (an editor and an agent opening at the same moment) end with exactly one
//! daemon: starting is serialized by an exclusive `flock` on `<socket>.lock` in the socket's
//! private directory, and whoever takes the lock second finds the first one's daemon answering
//! and joins it. A started daemon is detached: its own session (`setsid`), no terminal, stdin
//! and stdout on `/dev/null`, stderr appended to the log file, so closing the editor (or a
//! signal to its process group) leaves it running for the other clients.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started daemon may take to answer on its socket.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a starter waits for another starter's lock.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`ensure_daemon`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Daemon {
    /// A daemon already answered on the socket.
    Joined,
    /// This call started the daemon with this pid.
    Started(u32),
}

/// Whether a daemon of this user answers on `socket` now; an error when the socket's directory
/// or the daemon answering there is another user's (it is never joined).
pub fn answers(socket: &Path) -> Result<bool, String> {
    crate::transport::unix::connect_own(socket).map(|s| s.is_some())
}

/// Whether a daemon answers on `socket` and can be joined: it must answer `initialize` within
/// `lifecycle::ASK_DEADLINE`, so a client never joins a stopped or wedged daemon and waits on
/// it forever (the kernel accepts connections for a stopped process); such a daemon is an
/// error naming the socket and its pid.
fn joinable(socket: &Path) -> Result<bool, String> {
    Ok(super::lifecycle::ask(socket, "compactd start")?.is_some())
}

/// `<socket>.lock`, beside the socket.
fn lock_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Takes the start lock, waiting for another starter at most [`LOCK_TIMEOUT`].
fn take_lock(socket: &Path) -> Result<std::fs::File, String> {
    crate::transport::unix::prepare_socket_dir(socket)?;
    let path = lock_path(socket);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open the start lock {}: {e}", path.display()))?;
    let deadline = Instant::now() + LOCK_TIMEOUT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "another compactd has been starting for {}s (lock {}); giving up",
                    LOCK_TIMEOUT.as_secs(),
                    path.display()
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()))
            }
        }
    }
}

/// Joins the daemon on `socket`, or starts `compactd serve --socket <socket>` detached (with
/// `config`, when one was given on the command line) and waits until it answers. The started
/// daemon's stderr is appended to `log`.
///
/// A daemon started here exits once it has had no client and no open session for
/// `idle_exit` (`None`: it stays), as gopls's daemon does: nobody started it by hand to keep.
pub fn ensure_daemon(
    socket: &Path,
    config: Option<&Path>,
    log: &Path,
    idle_exit: Option<Duration>,
) -> Result<Daemon, String> {
    if joinable(socket)? {
        return Ok(Daemon::Joined);
    }
    let _lock = take_lock(socket)?;
    // Another starter may have finished while this one waited for the lock.
    if joinable(socket)? {
        return Ok(Daemon::Joined);
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the compactd binary to start: {e}"))?;
    let stderr = super::logging::open_log(log)
        .map_err(|e| format!("cannot open the log file {}: {e}", log.display()))?;
    let mut cmd = Command::new(&exe);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.arg("serve").arg("--socket").arg(socket);
    if let Some(idle) = idle_exit {
        cmd.arg("--exit-when-idle")
            .arg(idle.as_secs().max(1).to_string());
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(stderr))
        // Systemd's activation variables are for the process systemd started, not for this one.
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDNAMES");
    // SAFETY: `setsid` is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {} serve: {e}", exe.display()))?;
    let pid = child.id();
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if answers(socket)? {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "compactd serve exited ({status}) before listening on {}; its messages are in {}",
                socket.display(),
                log.display()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "compactd serve (pid {pid}) did not answer on {} within {}s; see {}",
                socket.display(),
                START_TIMEOUT.as_secs(),
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Reap the daemon if it exits while this process still runs (a long `connect`), so it never
    // lingers as a zombie; when this process exits first, init adopts it.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    tracing::info!(pid, socket = %socket.display(), "started the daemon");
    Ok(Daemon::Started(pid))
}

/// The socket a command talks to: `--socket`, else the configuration's, else the default.
pub fn socket_path(flag: Option<PathBuf>, config: &crate::config::Config) -> PathBuf {
    flag.or_else(|| config.socket.clone())
        .unwrap_or_else(crate::transport::unix::default_socket_path)
}
