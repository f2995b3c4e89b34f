//! The one interface the daemon reads and writes a session through, whatever holds its lines:
//! a file ([`super::SessionFile`]) or a PostgreSQL database (`super::postgres`).
//!
//! The daemon keeps the parsed tree in memory and asks its storage for three things only: the
//! complete lines other writers added since it last looked, one more line after the head it
//! knows, and the first write of a deferred session. Everything else (Pi's tree, the branch,
//! the context) stays in the pure core, so both backends behave the same by construction.

use std::path::Path;

use serde_json::Value;

use super::StoreError;
use crate::session::{Entry, SessionTree};

/// A session's lines, wherever they live. Every method may block (disk, network): the daemon
/// calls them through `cpu::blocking`, so an async worker hands its other tasks on meanwhile.
pub trait SessionStorage: Send + std::fmt::Debug {
    /// Where the session lives, for logs, errors and the registry: the file's path, or
    /// `postgres:<header id>` for a stored session.
    fn location(&self) -> &Path;

    /// Appends to `into` the complete lines (each ending in `\n`) that other writers added
    /// since the last call, in order. Lines already put in `into` stay there even when an
    /// error follows, so the caller can index them.
    fn catch_up(&mut self, into: &mut Vec<u8>) -> Result<(), StoreError>;

    /// Writes `entry`'s line as the next line after the head this storage last saw.
    /// [`StoreError::Conflict`] when another writer extended the head first: catch up and
    /// retry under the new head.
    fn append(&mut self, entry: &Entry) -> Result<(), StoreError>;

    /// Pi's deferred first write of a new session: the header and every entry so far, created
    /// exclusively (never over an existing session).
    fn create(&mut self, header: &Value, entries: &[&Entry]) -> Result<(), StoreError>;

    /// Reads the whole session anew (after it was replaced behind compactd's back).
    fn reload(&mut self) -> Result<SessionTree, StoreError>;

    /// Whether [`SessionStorage::append`] itself refuses to write under a stale head (a shared
    /// store's versioned insert): then a write needs no catch-up first, only after a
    /// [`StoreError::Conflict`]. A file has no such check, so its writes catch up first.
    fn append_checks_head(&self) -> bool {
        false
    }

    /// Holds (`true`) or releases (`false`) the right to catch up and append with no other
    /// writer in between: a shared store's way out of a lost race that could otherwise repeat
    /// (another daemon appending faster than this one can catch up). A no-op for a file.
    fn exclusive(&mut self, _on: bool) -> Result<(), StoreError> {
        Ok(())
    }

    /// The header id a shared store addresses the session by; `None` for a file (addressed by
    /// its path).
    fn header_id(&self) -> Option<&str> {
        None
    }
}
