//! CPU-heavy work inside the async daemon: parsing a big session, serializing a span for the
//! summarizer, the extractive summary. Run directly on an async worker, such work would stall
//! every connection scheduled there; [`blocking`] hands the worker's other tasks to another
//! thread for its duration (`block_in_place`), so a 100 MB open or compaction never delays a
//! small session's `getContextUsage`. Outside a multi-threaded runtime (the CLI's, tests) it just
//! runs the work.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f`, letting the runtime move other tasks off this worker meanwhile.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}
