//! `compactd stdio`: one client on stdin/stdout. stdout carries protocol bytes only.

use std::sync::Arc;

use super::connection::serve_connection;
use super::framing::Framing;
use crate::daemon::Daemon;

pub async fn serve_stdio(daemon: Arc<Daemon>, framing: Option<Framing>, max_frame: usize) {
    serve_connection(
        daemon,
        tokio::io::stdin(),
        tokio::io::stdout(),
        framing,
        max_frame,
    )
    .await;
}
