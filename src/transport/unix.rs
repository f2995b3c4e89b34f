//! `compactd serve`: a Unix domain socket for many concurrent clients.
//!
//! The socket lives in a per-user directory (mode 0700) and is itself mode 0600. A leftover
//! socket file that nobody answers on is replaced; a live one means another daemon owns it, and
//! this one exits with a clear message instead of stealing it. The file is removed on shutdown.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{UnixListener, UnixStream};

use super::connection::serve_connection;
use super::framing::Framing;
use crate::daemon::Daemon;

/// `$XDG_RUNTIME_DIR/compactd/compactd.sock`, else `<tmp>/compactd-<uid>/compactd.sock`.
pub fn default_socket_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("compactd").join("compactd.sock"),
        None => {
            let uid = std::fs::metadata("/proc/self")
                .map(|m| m.uid())
                .unwrap_or(0);
            std::env::temp_dir()
                .join(format!("compactd-{uid}"))
                .join("compactd.sock")
        }
    }
}

/// Binds the socket, handling stale files. Errors are messages for the user.
pub async fn bind(path: &Path) -> Result<UnixListener, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            return Err(format!(
                "another compactd is already listening on {}",
                path.display()
            ));
        }
        std::fs::remove_file(path)
            .map_err(|e| format!("cannot remove stale socket {}: {e}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot set permissions on {}: {e}", path.display()))?;
    Ok(listener)
}

/// Accepts connections until SIGINT/SIGTERM, then removes the socket file.
pub async fn serve_unix(
    daemon: Arc<Daemon>,
    listener: UnixListener,
    path: PathBuf,
    framing: Option<Framing>,
    max_frame: usize,
) -> Result<(), String> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let d = daemon.clone();
                    tokio::spawn(async move {
                        let (r, w) = stream.into_split();
                        serve_connection(d, r, w, framing, max_frame).await;
                    });
                }
                Err(e) => tracing::warn!(error = %e, "accept failed"),
            },
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    let _ = std::fs::remove_file(&path);
    tracing::info!(socket = %path.display(), "shut down");
    Ok(())
}
