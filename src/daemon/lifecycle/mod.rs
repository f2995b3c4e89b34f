//! Pi's compaction lifecycle as a service (compaction.md §8, overflow.md §5): manual `compact`,
//! the automatic threshold and overflow paths behind `checkCompaction`, abort, and (beyond Pi)
//! speculative compaction.
//!
//! - [`runner`]: the one path every compaction takes (start, speculation or prepare → hooks →
//!   summarize, finish, write, end);
//! - [`auto`]: the automatic glue (`checkCompaction`: facts, the pure decision, the thrash
//!   breaker, overflow retries);
//! - [`announce`]: events, hook notifications and the log line;
//! - [`finish`]: what compactd adds to a summary, and the write;
//! - [`summarize`]: the one summarization step (hooks, engine, cost) every path calls, and
//!   when the hooks are asked on each;
//! - [`hooks`]: asking `session_before_compact`;
//! - [`speculation`]: summaries made before the threshold and installed when it is crossed.
//!
//! Order of operations per compaction: wait for the session's compaction slot, snapshot the
//! branch under the state lock, prepare, ask hooks, summarize (no lock held), then re-take the
//! lock to append the entry. Appends are accepted meanwhile (beyond Pi, which makes the user
//! wait): they land after the leaf as usual, and the entry is written under the leaf at write
//! time, so they sit in the kept tail between `firstKeptEntryId` and the compaction. Only a
//! moved leaf (another process's write elsewhere in the tree) refuses the write.

mod announce;
mod auto;
pub mod clearing;
pub mod finish;
mod hooks;
mod prepare;
mod runner;
pub mod speculation;
mod summarize;

pub use auto::check;
pub(crate) use prepare::{strip_additions, summary_input};
pub use runner::{abort, compact};

use crate::compaction::prepare::{NothingToCompact, NothingToCompactDetail};
use crate::rpc::errors::{ErrorKind, RpcError};

/// Why a compaction produced no entry.
#[derive(Debug, Clone)]
enum CompactionFailure {
    /// Pi's refusal, and (beyond Pi) why, in numbers, and what to change.
    Nothing(NothingToCompact, Box<NothingToCompactDetail>),
    Cancelled,
    Error(ErrorKind, String),
}

impl CompactionFailure {
    fn message(&self) -> String {
        match self {
            CompactionFailure::Nothing(n, _) => n.message().to_owned(),
            CompactionFailure::Cancelled => crate::compactor::CANCELLED.to_owned(),
            CompactionFailure::Error(_, m) => m.clone(),
        }
    }

    /// Nothing to compact, or an abort: the daemon did its job.
    fn is_refusal(&self) -> bool {
        matches!(
            self,
            CompactionFailure::Nothing(..) | CompactionFailure::Cancelled
        )
    }

    fn to_rpc(&self) -> RpcError {
        match self {
            CompactionFailure::Nothing(n, detail) => RpcError::nothing_to_compact(*n, detail),
            CompactionFailure::Cancelled => RpcError::new(ErrorKind::Cancelled, self.message()),
            CompactionFailure::Error(kind, m) => RpcError::new(*kind, m.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::Daemon;
    use serde_json::json;
    use std::sync::Arc;

    /// `compact` (with `write: false`, so it can repeat) on a copy of a conformance session,
    /// opened in a daemon with the default (extractive) configuration.
    #[tokio::test]
    async fn compactions_share_the_one_cached_engine() {
        let test = "compactions_share_the_one_cached_engine";
        let Some(fixture) =
            crate::test_fixtures::case_file(test, "005-medium-basic", "session.jsonl")
        else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, std::fs::read(&fixture).expect("read fixture")).expect("copy");
        let daemon = Daemon::new(crate::config::Config::default());
        // Pi's defaults whatever settings files the machine has.
        *daemon.global_overrides.lock() =
            Some(json!({"enabled": true, "reserveTokens": 16384, "keepRecentTokens": 20000}));
        let (conn, _events) = daemon.connect();
        let location = daemon
            .storage
            .locate(crate::store::Address {
                path: path.to_str(),
                header_id: None,
            })
            .expect("a temporary file is allowed");
        let (session, _) = daemon
            .open_or_insert(&location, &conn, || {
                let crate::store::Opened::Loaded { storage, tree } = daemon
                    .storage
                    .open(&location, None)
                    .map_err(super::super::session::store_error)?
                else {
                    panic!("the copy exists");
                };
                Ok(super::super::session::SessionState::loaded(
                    storage,
                    tree,
                    None,
                    "off",
                    None,
                    crate::session::PiVersion::V0_85,
                ))
            })
            .expect("open");
        let mut engines = Vec::new();
        for _ in 0..2 {
            let result = compact(&daemon, &session, None, false).await;
            assert!(result.is_ok(), "{:?}", result.err().map(|e| e.message));
            let cache = daemon.engines.lock();
            assert_eq!(cache.len(), 1, "the compactions built one engine");
            engines.extend(cache.values().cloned());
        }
        assert!(Arc::ptr_eq(&engines[0], &engines[1]), "and both used it");
    }
}
