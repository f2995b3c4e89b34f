//! The one way the command line starts a Tokio runtime: a client command's (one thread: it
//! waits on a socket or a daemon of its own process), `compactd mcp`'s (two workers: stdio and
//! the daemon link), or a daemon's (its worker count, and a blocking pool whose idle threads
//! stay). A runtime that cannot start is one message, the same everywhere.

use std::future::Future;
use std::time::Duration;

/// How long an idle thread of a daemon's blocking pool is kept (tokio's default is 10 s):
/// `cpu::blocking` hands a worker's tasks to one of them, and finding one ready is cheaper
/// than creating one in the middle of a big open.
const BLOCKING_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(600);

/// What a runtime is for.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// A client command: everything on the calling thread.
    Client,
    /// A bridge between two streams (`compactd mcp`): a worker for each.
    Bridge,
    /// A daemon with this many async workers.
    Daemon { workers: usize },
}

/// A runtime of `shape`, or the message saying why it could not start.
pub fn build(shape: Shape) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = match shape {
        Shape::Client => tokio::runtime::Builder::new_current_thread(),
        Shape::Bridge => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
        Shape::Daemon { workers } => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(workers.max(1))
                .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE);
            b
        }
    };
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// Runs `work` to completion on a runtime of `shape`, then shuts the runtime down without
/// waiting for a blocking thread still reading stdin (it never returns on its own).
pub fn block_on<F: Future>(shape: Shape, work: F) -> Result<F::Output, String> {
    let runtime = build(shape)?;
    let out = runtime.block_on(work);
    runtime.shutdown_timeout(Duration::from_millis(10));
    Ok(out)
}
