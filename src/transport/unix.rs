//! `compactd serve`: a Unix domain socket for many concurrent clients.
//!
//! Where the socket lives is a security boundary: whoever can replace it receives every client's
//! requests. So the daemon creates a missing socket directory itself (mode 0700) and otherwise
//! checks the one it finds: the default per-user directory must be ours and private, any other
//! directory must be ours or root's and not writable by others (unless sticky, like `/tmp`).
//! It never changes the mode of a directory it did not create. An existing path is removed only
//! when it is a socket nobody answers on (stale); a live socket means another daemon owns it,
//! and any other file type is refused, never deleted. The socket itself is mode 0600 and is
//! removed on shutdown.
//!
//! The accept loop stays calm when the process runs out of file descriptors (it backs off and
//! logs once per interval instead of spinning) and refuses connections past a configurable
//! limit with a JSON-RPC error naming the limit.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

use super::connection::serve_connection;
use super::Options;
use crate::daemon::Daemon;
use tracing::Instrument;

fn current_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

/// The per-user runtime directory the default socket lives under, chosen by one rule that every
/// client library repeats (Python `_wire.default_socket_path`, TypeScript `defaultSocketPath`,
/// the Neovim plugin, the Pi extension), so that whatever environment a client's host passes it
/// finds the daemon its user already runs:
/// 1. `$COMPACTD_RUNTIME_DIR`, when set: an explicit choice (tests, unusual set-ups);
/// 2. `/run/user/<uid>`, the standard per-user runtime directory (systemd-logind's), when it is a
///    directory of ours: what `$XDG_RUNTIME_DIR` names in a desktop session, but found without
///    it, since MCP hosts, service managers and editors pass their children a reduced
///    environment (the MCP SDK's `stdio_client` keeps only HOME, PATH, SHELL, TERM, USER and
///    LOGNAME);
/// 3. `$XDG_RUNTIME_DIR`, when set (systems without `/run/user`).
///
/// `None` when none applies: then the default socket is under `/tmp` (see
/// [`default_socket_dir`]).
pub fn runtime_dir() -> Option<PathBuf> {
    let set = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    set("COMPACTD_RUNTIME_DIR")
        .or_else(standard_runtime_dir)
        .or_else(|| set("XDG_RUNTIME_DIR"))
}

/// `/run/user/<uid>` when it is a directory of ours (not a link): the per-user runtime
/// directory systemd-logind makes, and what a user unit's `%t` names.
pub fn standard_runtime_dir() -> Option<PathBuf> {
    let uid = current_uid();
    let standard = PathBuf::from(format!("/run/user/{uid}"));
    std::fs::symlink_metadata(&standard)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid)
        .then_some(standard)
}

/// The per-user directory used when no socket is configured: `<runtime_dir>/compactd`, else
/// `/tmp/compactd-<uid>` (not `$TMPDIR`, which reduced environments drop too).
pub fn default_socket_dir() -> PathBuf {
    match runtime_dir() {
        Some(dir) => dir.join("compactd"),
        None => PathBuf::from(format!("/tmp/compactd-{}", current_uid())),
    }
}

/// `<default_socket_dir>/compactd.sock`.
pub fn default_socket_path() -> PathBuf {
    default_socket_dir().join("compactd.sock")
}

/// Creates `dir` (and missing parents) with mode 0700, or checks the one that exists.
/// `private`: the directory must be owned by us with no group/other permissions.
fn prepare_dir(dir: &Path, private: bool) -> Result<(), String> {
    let uid = current_uid();
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            // Verify what is there now (another user may have won a race).
            let m = std::fs::symlink_metadata(dir)
                .map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
            if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
                return Err(format!(
                    "refusing socket directory {}: it changed while being created",
                    dir.display()
                ));
            }
            Ok(())
        }
        Err(e) => Err(format!("cannot stat {}: {e}", dir.display())),
        Ok(m) => {
            if m.file_type().is_symlink() && private {
                return Err(format!(
                    "refusing socket directory {}: it is a symbolic link",
                    dir.display()
                ));
            }
            let m = if m.file_type().is_symlink() {
                std::fs::metadata(dir).map_err(|e| format!("cannot stat {}: {e}", dir.display()))?
            } else {
                m
            };
            if !m.is_dir() {
                return Err(format!(
                    "refusing socket directory {}: not a directory",
                    dir.display()
                ));
            }
            let mode = m.mode() & 0o7777;
            if private {
                if m.uid() != uid {
                    return Err(format!(
                        "refusing socket directory {}: owned by uid {}, not by this user (uid {uid}); another user may have created it to intercept clients",
                        dir.display(),
                        m.uid()
                    ));
                }
                if mode & 0o077 != 0 {
                    return Err(format!(
                        "refusing socket directory {}: mode {mode:04o} lets other users in (expected 0700; fix it with chmod 700 or remove it)",
                        dir.display()
                    ));
                }
            } else {
                if m.uid() != uid && m.uid() != 0 {
                    return Err(format!(
                        "refusing socket directory {}: owned by uid {}, neither this user (uid {uid}) nor root",
                        dir.display(),
                        m.uid()
                    ));
                }
                if mode & 0o022 != 0 && mode & 0o1000 == 0 {
                    return Err(format!(
                        "refusing socket directory {}: mode {mode:04o} lets other users replace the socket (not sticky)",
                        dir.display()
                    ));
                }
            }
            Ok(())
        }
    }
}

/// Creates the directory of `socket` (mode 0700) or checks the one that exists, by the rules
/// above. Errors are messages for the user.
pub fn prepare_socket_dir(socket: &Path) -> Result<(), String> {
    let dir = socket_dir(socket);
    prepare_dir(dir, dir == default_socket_dir())
}

/// The directory `socket` is in (`.` for a bare name).
fn socket_dir(socket: &Path) -> &Path {
    socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Checks the socket's directory as a client, before connecting to anything in it: the rules
/// `serve` applies before binding there, nothing created. A directory that does not exist holds
/// no daemon to join.
pub fn check_socket_dir(socket: &Path) -> Result<(), String> {
    let dir = socket_dir(socket);
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        _ => prepare_dir(dir, dir == default_socket_dir()),
    }
}

/// The user id of the process at the other end of a connected Unix socket (`SO_PEERCRED` on
/// Linux, `getpeereid` elsewhere): who runs the daemon, whatever the socket file says.
pub fn peer_uid(fd: std::os::fd::RawFd) -> std::io::Result<u32> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid for writes of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(cred.uid)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let (mut uid, mut gid) = (0, 0);
        // SAFETY: `uid` and `gid` are valid for writes.
        if unsafe { libc::getpeereid(fd, &mut uid, &mut gid) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(uid)
    }
}

/// Refuses a daemon another user runs: its clients' bytes (sessions, keys in prompts) would go
/// to that user.
pub fn check_peer(fd: std::os::fd::RawFd, socket: &Path) -> Result<(), String> {
    let uid = current_uid();
    match peer_uid(fd) {
        Ok(peer) if peer == uid => Ok(()),
        Ok(peer) => Err(format!(
            "refusing the daemon on {}: it runs as uid {peer}, not as this user (uid {uid}); another user may be listening there to intercept clients",
            socket.display()
        )),
        Err(e) => Err(format!(
            "cannot tell who runs the daemon on {}: {e}",
            socket.display()
        )),
    }
}

/// Connects to the daemon on `socket` as every compactd client does: the directory checked
/// first, the peer's user checked after ([`check_socket_dir`], [`check_peer`]). `Ok(None)`:
/// nothing listens there.
pub fn connect_own(socket: &Path) -> Result<Option<std::os::unix::net::UnixStream>, String> {
    use std::os::fd::AsRawFd;
    check_socket_dir(socket)?;
    let stream = match std::os::unix::net::UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(format!("cannot connect to {}: {e}", socket.display())),
    };
    check_peer(stream.as_raw_fd(), socket)?;
    Ok(Some(stream))
}

/// [`connect_own`] for async clients: the connected stream, or why there is none.
pub async fn connect_own_async(socket: &Path) -> Result<UnixStream, String> {
    let socket = socket.to_owned();
    let std_stream = tokio::task::spawn_blocking(move || match connect_own(&socket) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(format!("no compactd is listening on {}", socket.display())),
        Err(e) => Err(e),
    })
    .await
    .map_err(|e| format!("cannot connect: {e}"))??;
    into_async(std_stream)
}

/// A stream [`connect_own`] made, for a tokio runtime (call within one).
pub fn into_async(stream: std::os::unix::net::UnixStream) -> Result<UnixStream, String> {
    stream
        .set_nonblocking(true)
        .map_err(|e| format!("cannot connect: {e}"))?;
    UnixStream::from_std(stream).map_err(|e| format!("cannot connect: {e}"))
}

/// Binds the socket, handling stale files. Errors are messages for the user.
pub async fn bind(path: &Path) -> Result<UnixListener, String> {
    prepare_socket_dir(path)?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).await.is_ok() {
                return Err(format!(
                    "another compactd is already listening on {}",
                    path.display()
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot remove stale socket {}: {e}", path.display()))?;
        }
        Ok(_) => {
            return Err(format!(
                "{} exists and is not a socket; not touching it (choose another --socket)",
                path.display()
            ))
        }
        Err(_) => {}
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot set permissions on {}: {e}", path.display()))?;
    Ok(listener)
}

/// The listening socket systemd passed (socket activation, `sd_listen_fds(3)`): `LISTEN_PID` is
/// this process and `LISTEN_FDS` is 1, so fd 3 is the socket. The variables are removed so that
/// no child inherits them. `None` when the daemon was not socket-activated. Call it before the
/// runtime's threads start (it edits the environment); hand the listener to [`adopt_listener`]
/// inside the runtime.
pub fn inherited_listener() -> Result<Option<std::os::unix::net::UnixListener>, String> {
    use std::os::fd::{FromRawFd, RawFd};
    const SD_LISTEN_FDS_START: RawFd = 3;
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(None);
    };
    if pid.trim().parse::<u32>().ok() != Some(std::process::id()) {
        return Ok(None);
    }
    match fds.trim().parse::<u32>() {
        Ok(1) => {}
        Ok(0) => return Ok(None),
        _ => {
            return Err(format!(
                "LISTEN_FDS={fds}: compactd takes exactly one socket (one ListenStream= in the .socket unit)"
            ))
        }
    }
    // SAFETY: the service manager handed this process fd 3 as its listening socket (LISTEN_PID
    // names us); nothing else in the process owns it.
    let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(SD_LISTEN_FDS_START) };
    // A passed fd that is not a Unix socket fails here instead of at the first accept.
    listener.local_addr().map_err(|e| {
        format!("the socket passed by the service manager (fd 3) is not a Unix socket: {e}")
    })?;
    // SAFETY: plain fcntl on an fd this process owns: no child started later inherits it.
    unsafe {
        libc::fcntl(SD_LISTEN_FDS_START, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    Ok(Some(listener))
}

/// An inherited listener as the runtime's (inside the runtime).
pub fn adopt_listener(listener: std::os::unix::net::UnixListener) -> Result<UnixListener, String> {
    listener
        .set_nonblocking(true)
        .and_then(|()| UnixListener::from_std(listener))
        .map_err(|e| format!("cannot use the passed socket: {e}"))
}

/// Resolves on the first SIGINT or SIGTERM.
pub fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Keeps SIGHUP, SIGUSR1 and SIGUSR2 from killing the daemon (their default action is to
/// terminate): a closed terminal, `logrotate`'s `postrotate kill -HUP`, or a stray `kill -USR1`
/// aimed at another process must not drop every client's sessions. Each is logged and
/// otherwise ignored. Log files are opened in append mode, so `copytruncate` rotation needs no
/// reopen. Call inside the runtime, before serving.
pub fn ignore_benign_signals() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    for (kind, name) in [
        (SignalKind::hangup(), "SIGHUP"),
        (SignalKind::user_defined1(), "SIGUSR1"),
        (SignalKind::user_defined2(), "SIGUSR2"),
    ] {
        let mut stream = signal(kind)?;
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                tracing::info!(signal = name, "signal received and ignored");
            }
        });
    }
    Ok(())
}

/// Accept errors that mean "out of resources": wait for some to be freed.
fn is_resource_exhaustion(e: &std::io::Error) -> bool {
    // EMFILE 24, ENFILE 23, ENOBUFS 105, ENOMEM 12.
    matches!(e.raw_os_error(), Some(24 | 23 | 105 | 12))
}

/// How often a repeated accept failure is logged.
const ACCEPT_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// The slots of the connections being served, by connection number: what the listener looks
/// through, at the limit, for the connection whose partial request is oldest.
#[derive(Default)]
struct Slots {
    table: parking_lot::Mutex<std::collections::HashMap<u64, Arc<super::Slot>>>,
}

/// How old a partial request must be before its connection may be closed to make room: a
/// client writing even a large frame at a local socket's speed finishes it well within this,
/// so a burst of new connections cannot cut off one that is still sending at full speed.
const MIN_AGE_TO_EVICT: Duration = Duration::from_millis(500);

/// What the listener can do for a new client when every slot is taken.
#[derive(Debug, PartialEq, Eq)]
enum Room {
    /// A connection was closed: the one whose partial request was this old.
    Made(Duration),
    /// A partial request will be old enough to close after this wait.
    After(Duration),
    /// Every connection is idle between frames or busy with whole requests: nothing to close.
    None,
}

impl Slots {
    /// Closes the connection whose partial request is oldest (the slowest to arrive, whatever
    /// its byte rate: a client trickling a byte at a time is as slow as one that stopped), if
    /// that request is [`MIN_AGE_TO_EVICT`] old; it leaves the table at once, so it is chosen
    /// once. A connection idle between frames is never chosen. When partial requests exist but
    /// are younger, says how long until the oldest is old enough.
    fn make_room(&self) -> Room {
        let mut table = self.table.lock();
        let Some((id, age)) = table
            .iter()
            .filter_map(|(id, s)| Some((*id, s.progress.age()?)))
            .max_by_key(|(_, age)| *age)
        else {
            return Room::None;
        };
        if age < MIN_AGE_TO_EVICT {
            return Room::After(MIN_AGE_TO_EVICT - age);
        }
        match table.remove(&id) {
            Some(slot) => {
                slot.evict.cancel();
                Room::Made(age)
            }
            None => Room::None,
        }
    }
}

/// Refuses a connection past the limit with one JSON-RPC error line, then closes it.
async fn refuse(mut stream: UnixStream, limit: usize) {
    let e = crate::rpc::RpcError::new(
        crate::rpc::ErrorKind::Overloaded,
        format!("compactd is serving its limit of {limit} connections; try again later"),
    );
    let text = super::message::response(&super::message::RequestId::Null, &Err(e));
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(text.as_bytes()).await;
        let _ = stream.write_all(b"\n").await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// What serving a connection needs, shared by the accept loop and the admissions that wait
/// for room.
struct Served {
    daemon: Arc<Daemon>,
    opts: Options,
    max_connections: usize,
    /// Connections being served.
    active: AtomicUsize,
    slots: Slots,
    next_slot: std::sync::atomic::AtomicU64,
}

impl Served {
    /// Takes a slot for a new connection (counted at once, so a burst of accepts cannot all
    /// pass the limit check) and returns the task that serves it.
    fn serve(self: &Arc<Self>, stream: UnixStream) -> impl std::future::Future<Output = ()> {
        self.active.fetch_add(1, Ordering::SeqCst);
        let slot = Arc::new(super::Slot::default());
        let id = self.next_slot.fetch_add(1, Ordering::SeqCst);
        self.slots.table.lock().insert(id, slot.clone());
        let mut opts = self.opts.clone();
        opts.slot = Some(slot);
        let this = self.clone();
        async move {
            let (r, w) = stream.into_split();
            serve_connection(this.daemon.clone(), r, w, opts)
                .instrument(super::connection::span())
                .await;
            this.slots.table.lock().remove(&id);
            this.active.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// A new client at the limit: closes the connection whose partial request is oldest to
    /// serve it, after waiting (at most [`MIN_AGE_TO_EVICT`]) for one to be old enough; past
    /// that, refuses it. The count is over the limit only until the closed one's task ends.
    async fn admit_at_limit(self: Arc<Self>, stream: UnixStream) {
        let mut room = self.slots.make_room();
        if let Room::After(wait) = room {
            tokio::time::sleep(wait).await;
            room = self.slots.make_room();
        }
        match room {
            Room::Made(age) => {
                tracing::warn!(
                    limit = self.max_connections,
                    request_age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX),
                    "connection limit reached; closing the connection whose partial request is oldest"
                );
                self.serve(stream).await;
            }
            Room::After(_) | Room::None => {
                tracing::warn!(
                    limit = self.max_connections,
                    "connection refused: limit reached"
                );
                refuse(stream, self.max_connections).await;
            }
        }
    }
}

/// Accepts connections until SIGINT/SIGTERM, then lets every connection finish (running
/// compactions are aborted and answer), and removes the socket file `path` (`None` for a socket
/// the service manager owns: it stays for the next activation).
pub async fn serve_unix(
    daemon: Arc<Daemon>,
    listener: UnixListener,
    path: Option<PathBuf>,
    opts: Options,
    max_connections: usize,
    idle_exit: Option<Duration>,
) -> Result<(), String> {
    let signals = shutdown_signal().map_err(|e| e.to_string())?;
    ignore_benign_signals().map_err(|e| e.to_string())?;
    tokio::pin!(signals);
    // With `idle_exit`: checked every second; idle is no connection and no open session.
    let mut idle_tick = tokio::time::interval(Duration::from_secs(1));
    let mut idle_since: Option<Instant> = None;
    let served = Arc::new(Served {
        daemon: daemon.clone(),
        opts,
        max_connections,
        active: AtomicUsize::new(0),
        slots: Slots::default(),
        next_slot: std::sync::atomic::AtomicU64::new(0),
    });
    let active = |l: &Served| l.active.load(Ordering::SeqCst);
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff = Duration::from_millis(10);
    let mut last_log: Option<Instant> = None;
    let mut suppressed = 0u64;
    loop {
        while connections.try_join_next().is_some() {}
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff = Duration::from_millis(10);
                    // At the limit, the connection whose partial request is oldest makes
                    // room (slowloris clients, sending half a frame and then nothing or a
                    // byte now and then, held every slot and refused everyone else).
                    if active(&served) >= max_connections {
                        connections.spawn(served.clone().admit_at_limit(stream));
                    } else {
                        connections.spawn(served.serve(stream));
                    }
                }
                Err(e) => {
                    let now = Instant::now();
                    if last_log.is_none_or(|t| now.duration_since(t) >= ACCEPT_LOG_INTERVAL) {
                        tracing::warn!(error = %e, repeated = suppressed, "accept failed; backing off");
                        last_log = Some(now);
                        suppressed = 0;
                    } else {
                        suppressed += 1;
                    }
                    if is_resource_exhaustion(&e) {
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = &mut signals => break,
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(1));
                    }
                }
            },
            _ = &mut signals => break,
            _ = idle_tick.tick(), if idle_exit.is_some() => {
                let idle = active(&served) == 0 && daemon.sessions().is_empty();
                let since = *idle_since.get_or_insert_with(Instant::now);
                if !idle {
                    idle_since = None;
                } else if idle_exit.is_some_and(|limit| since.elapsed() >= limit) {
                    tracing::info!(
                        idle_secs = since.elapsed().as_secs(),
                        "no client and no open session; the daemon started on demand exits"
                    );
                    break;
                }
            }
        }
    }
    tracing::info!("shutting down");
    daemon.shutdown.cancel();
    if let Some(path) = &path {
        let _ = std::fs::remove_file(path);
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    tracing::info!("shut down");
    Ok(())
}
