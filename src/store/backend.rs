//! The two interfaces storage is used through, whatever holds the lines: [`Backend`], chosen
//! once at start-up (files, or a PostgreSQL database many daemons share), which finds, opens,
//! creates and lists sessions, leases a compaction and carries events between daemons; and
//! [`SessionStorage`], one open session's lines.
//!
//! The daemon keeps the parsed tree in memory and asks a session's storage for three things
//! only: the complete lines other writers added since it last looked, one more line after the
//! head it knows, and the first write of a deferred session. Everything else (Pi's tree, the
//! branch, the context) stays in the pure core, so every backend behaves the same by
//! construction. No handler, no event path and no daemon method names a backend, and the layers
//! above name a session only by its opaque [`SessionRef`]: a new backend is a module under
//! `store` and one arm in [`super::choose`].

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{SessionRef, StoreError};
use crate::session::{Entry, SessionTree};

/// How a client names a session to open: a file's path, or a stored session's header id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Address<'a> {
    pub path: Option<&'a str>,
    pub header_id: Option<&'a str>,
}

/// What opening a session found (made once per open, so its size does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Opened {
    /// The session's lines, read, and the storage that follows them.
    Loaded {
        storage: Box<dyn SessionStorage>,
        tree: SessionTree,
    },
    /// Nothing there yet: `storage` creates it at its first write (Pi's deferred write), if
    /// the client asked to create it.
    Missing { storage: Box<dyn SessionStorage> },
}

/// A new session: where it lives and the storage that will write it.
pub struct NewSession {
    /// Its name (the registry key).
    pub location: SessionRef,
    pub storage: Box<dyn SessionStorage>,
    /// Whether it is written at once (a shared store: other daemons can open it by header id
    /// from the moment it is created) rather than at its first reply, as Pi writes a file.
    pub write_now: bool,
}

/// A session as `listStoredSessions` and `compactd export` see it.
#[derive(Debug, Clone)]
pub struct StoredSummary {
    pub header_id: String,
    pub cwd: String,
    pub created_ms: i64,
    pub entries: i64,
}

/// An event another daemon published, to be delivered to this daemon's subscribers.
#[derive(Debug, Clone)]
pub struct RemoteEvent {
    /// The session it is about.
    pub location: SessionRef,
    pub name: String,
    pub payload: Value,
}

/// What receives other daemons' events.
pub type Deliver = Arc<dyn Fn(RemoteEvent) + Send + Sync>;

/// The right to compact a session while other daemons may share it; released when dropped
/// (and when the daemon holding it dies).
pub struct Lease {
    pub guard: Box<dyn Send + Sync>,
    /// The start event's payload of a compaction another daemon began under this lease and
    /// never ended, because it died: the new holder ends it for every subscriber.
    pub orphaned: Option<Value>,
}

/// The events that open and close a compaction, as the daemon names them (the store knows no
/// event by name).
#[derive(Debug, Clone, Copy)]
pub struct Unfinished {
    pub start: &'static str,
    pub end: &'static str,
}

/// How a backend came out of `compactd doctor`'s check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Works, but worth knowing.
    Note,
    Fail,
}

/// A backend's own report on itself (`compactd doctor`): what it found, and for a failure what
/// to do about it.
#[derive(Debug, Clone)]
pub struct Health {
    pub verdict: Verdict,
    pub text: String,
    pub fix: Option<String>,
}

/// Where sessions live, chosen once at start-up (`[storage] backend`). Methods that may block
/// (disk, network) are called through `cpu::blocking`.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Whether the store can be used now (a database reached, its schema applied), so a
    /// daemon reports it at start-up rather than at its first client's call.
    fn check(&self) -> Result<(), StoreError>;

    /// Where the sessions are, in a few words (`compactd doctor`'s paths).
    fn describe(&self) -> String;

    /// [`Backend::check`] as `compactd doctor` reports it: what was reached, and what to do
    /// when it was not.
    fn health(&self) -> Health;

    /// The location of the session `address` names (its registry key), checked before anything
    /// is read: an address this backend does not take, or a path outside the allowed roots, is
    /// refused here.
    fn locate(&self, address: Address<'_>) -> Result<SessionRef, StoreError>;

    /// Opens the session at `location` (from [`Backend::locate`]). An empty file is given a
    /// header as Pi gives it one, under `cwd` (else the file's directory).
    fn open(&self, location: &SessionRef, cwd: Option<&str>) -> Result<Opened, StoreError>;

    /// Where a new session with `header` lives (`session_dir`: a client's directory for
    /// files), and its storage; nothing is written yet.
    fn create(&self, header: &Value, session_dir: Option<&str>) -> Result<NewSession, StoreError>;

    /// The sessions of the store, newest first, of one working directory or all.
    fn list(&self, cwd: Option<String>) -> Result<Vec<StoredSummary>, StoreError>;

    /// Takes the compaction lease of the session at `location`, waiting while another daemon
    /// holds it (until `cancel`: `None`). `None` too where no other daemon can write. The
    /// lease reports a compaction (opened and closed by `unfinished`'s events) that a daemon
    /// which died holding it never ended.
    fn lease(
        &self,
        location: &SessionRef,
        cancel: CancellationToken,
        unfinished: Unfinished,
    ) -> BoxFuture<'static, Result<Option<Lease>, StoreError>>;

    /// Hands an event of the session at `location` to the other daemons sharing it (in order,
    /// never blocking); nothing where no other daemon can see the session.
    fn publish(&self, location: &SessionRef, name: &str, payload: &Value);

    /// Starts delivering other daemons' events to `deliver`.
    fn start_events(&self, deliver: Deliver);

    /// A session of the store as Pi JSONL, byte for byte (`compactd export`).
    fn export(&self, header_id: &str) -> Result<Vec<u8>, StoreError>;

    /// Stores a session read from a Pi file (`compactd import`), its header line as the file
    /// has it; returns its header id.
    fn import(&self, header_line: &[u8], tree: &SessionTree) -> Result<String, StoreError>;
}

/// Re-parents an entry after other writers' lines (given) were read in: returns the entry to
/// write in its place, or why it may not be written.
pub type Rebase<'a> = dyn FnMut(&[u8]) -> Result<Entry, StoreError> + 'a;

/// The first try of an append, in flight ([`SessionStorage::first_try`]): the head it was
/// written at, or `None` if another writer took its place.
pub type FirstTry = BoxFuture<'static, Result<Option<i64>, StoreError>>;

/// A session's lines, wherever they live. Every method may block (disk, network): the daemon
/// calls them through `cpu::blocking`, so an async worker hands its other tasks on meanwhile.
pub trait SessionStorage: Send + std::fmt::Debug {
    /// The session's name, for logs, errors and the registry.
    fn location(&self) -> &SessionRef;

    /// Appends to `into` the complete lines (each ending in `\n`) that other writers added
    /// since the last call, in order. Lines already put in `into` stay there even when an
    /// error follows, so the caller can index them.
    fn catch_up(&mut self, into: &mut Vec<u8>) -> Result<(), StoreError>;

    /// Reads what must be read before a write under the head this storage knows: a file, which
    /// cannot refuse a write under a stale head, catches up with other writers; a store whose
    /// write checks the head itself reads nothing.
    fn before_write(&mut self, into: &mut Vec<u8>) -> Result<(), StoreError>;

    /// Writes `entry`'s line as the next line after the head this storage last saw. When
    /// another writer extended the head first, the storage reads their lines, holds the head
    /// so the race cannot be lost again, and writes what `rebase` makes of them instead
    /// (returned). [`StoreError::Conflict`] only when that write still could not be made.
    fn append(
        &mut self,
        entry: &Entry,
        rebase: &mut Rebase<'_>,
    ) -> Result<Option<Entry>, StoreError>;

    /// The first try of `entry`'s append as a future that holds no thread while it waits (a
    /// database round trip), for a storage whose writes travel; `None` where the caller should
    /// call [`SessionStorage::append`] (a file, whose write is immediate; a write the storage
    /// makes differently). The future answers the head the entry was written at (then record it
    /// with [`SessionStorage::first_try_landed`]), or `None` when another writer took its place
    /// (then [`SessionStorage::append_after_lost`] reads theirs and writes it after them).
    fn first_try(&mut self, _entry: &Entry) -> Result<Option<FirstTry>, StoreError> {
        Ok(None)
    }

    /// Records that the first try of [`SessionStorage::first_try`] wrote at `head`.
    fn first_try_landed(&mut self, _head: i64) {}

    /// [`SessionStorage::append`] after its first try was lost: reads the other writers'
    /// lines and writes what `rebase` makes of them.
    fn append_after_lost(
        &mut self,
        entry: &Entry,
        rebase: &mut Rebase<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        self.append(entry, rebase)
    }

    /// Pi's deferred first write of a new session: the header and every entry so far, created
    /// exclusively (never over an existing session).
    fn create(&mut self, header: &Value, entries: &[&Entry]) -> Result<(), StoreError>;

    /// Reads the whole session anew (after it was replaced behind compactd's back).
    fn reload(&mut self) -> Result<SessionTree, StoreError>;

    /// Whether every entry line read back from the storage so far came whole. Entries of a file
    /// keep only their spans and read their bytes on demand (`crate::store::FileLines`); a
    /// truncation the stamp check has not seen yet shows there first, and a request that read
    /// through it must report `file_changed` rather than what it made of the missing bytes.
    /// Storages whose entries hold their bytes are always intact.
    fn lines_intact(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A backend that could not be set up (its database's runtime would not start, say): every
/// session method reports why, and the daemon keeps serving everything else.
#[derive(Debug, Clone)]
pub struct Unusable(pub String);

impl Unusable {
    fn error(&self) -> StoreError {
        StoreError::Unavailable(self.0.clone())
    }
}

impl Backend for Unusable {
    fn check(&self) -> Result<(), StoreError> {
        Err(self.error())
    }

    fn describe(&self) -> String {
        format!("unusable ({})", self.0)
    }

    fn health(&self) -> Health {
        Health {
            verdict: Verdict::Fail,
            text: self.error().to_string(),
            fix: Some(
                "check [storage] in the config file (compactd doctor shows which one is in use)"
                    .into(),
            ),
        }
    }

    fn locate(&self, _address: Address<'_>) -> Result<SessionRef, StoreError> {
        Err(self.error())
    }

    fn open(&self, _location: &SessionRef, _cwd: Option<&str>) -> Result<Opened, StoreError> {
        Err(self.error())
    }

    fn create(&self, _header: &Value, _dir: Option<&str>) -> Result<NewSession, StoreError> {
        Err(self.error())
    }

    fn list(&self, _cwd: Option<String>) -> Result<Vec<StoredSummary>, StoreError> {
        Err(self.error())
    }

    fn lease(
        &self,
        _location: &SessionRef,
        _cancel: CancellationToken,
        _unfinished: Unfinished,
    ) -> BoxFuture<'static, Result<Option<Lease>, StoreError>> {
        let e = self.error();
        Box::pin(async move { Err(e) })
    }

    fn publish(&self, _location: &SessionRef, _name: &str, _payload: &Value) {}

    fn start_events(&self, _deliver: Deliver) {}

    fn export(&self, _header_id: &str) -> Result<Vec<u8>, StoreError> {
        Err(self.error())
    }

    fn import(&self, _header_line: &[u8], _tree: &SessionTree) -> Result<String, StoreError> {
        Err(self.error())
    }
}
