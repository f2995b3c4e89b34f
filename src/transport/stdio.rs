//! `compactd stdio`: one client on stdin/stdout. stdout carries protocol bytes only.
//!
//! SIGTERM and SIGINT shut down as `serve` does: reading stops, running compactions are aborted
//! (each ends with `compaction_end {aborted: true}` and its request gets an error reply), queued
//! output is flushed, and the process exits 0. SIGHUP, SIGUSR1 and SIGUSR2 are logged and
//! ignored.

use std::sync::Arc;

use super::connection::serve_connection;
use super::Options;
use crate::daemon::Daemon;
use tracing::Instrument;

pub async fn serve_stdio(daemon: Arc<Daemon>, opts: Options) -> Result<(), String> {
    let signals = super::unix::shutdown_signal().map_err(|e| e.to_string())?;
    super::unix::ignore_benign_signals().map_err(|e| e.to_string())?;
    let d = daemon.clone();
    tokio::spawn(async move {
        signals.await;
        tracing::info!("signal received; shutting down");
        d.shutdown.cancel();
    });
    serve_connection(daemon, tokio::io::stdin(), tokio::io::stdout(), opts)
        .instrument(super::connection::span())
        .await;
    Ok(())
}
