//! The storage shell: where sessions live and how their lines are read and written.
//!
//! Everything above this module holds two interfaces and one opaque name: [`Backend`], chosen
//! once at start-up from `[storage]` ([`choose`]), which finds, opens, creates and lists
//! sessions; [`SessionStorage`], one open session's lines; and [`SessionRef`], a session's name
//! in its backend (the registry key, shown to clients as the session's `path`). Which backend
//! holds the lines is decided here and nowhere else: session files ([`files`], Pi's JSONL,
//! the default) or a PostgreSQL database many daemons share (`postgres`, behind the Cargo
//! feature of that name). Guarantees common to both (protocol.md §5, proto-docs/storage.md):
//! nothing is ever deleted or rewritten except Pi's own migration rewrite, other writers' lines
//! are read, never rewritten, and a write that fails leaves nothing behind.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::session::SessionTree;

mod backend;
pub mod files;
#[cfg(feature = "postgres")]
pub mod postgres;

pub use backend::{
    Address, Backend, Deliver, FirstTry, Health, Lease, NewSession, Opened, Rebase, RemoteEvent,
    SessionStorage, StoredSummary, Unfinished, Unusable, Verdict,
};
pub use files::{Limits, LoadReport, DEFAULT_MAX_BYTES};

/// A session's name in its backend, opaque to every layer above storage: the checked path of a
/// session file, or `postgres:<header id>` for a stored session. The daemon keys its registry by
/// it and logs it; clients see it as the session's `path`. Only a backend makes one (from what
/// it located or created), so a name can never be taken for another backend's.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionRef(Arc<OsStr>);

impl SessionRef {
    /// The name of the session at `path` (a file's checked path, or a stored session's
    /// `postgres:<id>` form).
    pub(in crate::store) fn at(path: &Path) -> SessionRef {
        SessionRef(Arc::from(path.as_os_str()))
    }

    /// The name as the path its backend made it from.
    pub(in crate::store) fn as_path(&self) -> &Path {
        Path::new(&*self.0)
    }

    /// A name for a test's stand-in storage.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str) -> SessionRef {
        SessionRef::at(Path::new(name))
    }

    /// The name as text, for clients and logs (a file name that is not UTF-8 is shown with
    /// replacement characters).
    pub fn display(&self) -> std::path::Display<'_> {
        self.as_path().display()
    }

    /// [`SessionRef::display`] as an owned string (the `path` members of results).
    pub fn to_text(&self) -> String {
        self.as_path().to_string_lossy().into_owned()
    }

    /// Whether this names the session file at `path` (a client's `path`, compared as given).
    pub fn names_file(&self, path: &Path) -> bool {
        self.as_path() == path
    }
}

impl std::fmt::Debug for SessionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_path())
    }
}

impl std::fmt::Display for SessionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_path().display().fmt(f)
    }
}

/// `[storage] backend`: which backend holds the sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Pi's JSONL session files (the default).
    #[default]
    Files,
    /// A PostgreSQL database many daemons share (beyond Pi); needs the `postgres` feature.
    Postgres,
}

impl Kind {
    /// Whether the backend's appends wait on a network round trip rather than on the CPU: a
    /// daemon then runs one async worker per core instead of leaving a core to its clients
    /// (`cli::RuntimeArgs::workers`).
    pub fn appends_wait_on_round_trips(self) -> bool {
        self == Kind::Postgres
    }

    /// Whether this build has the backend (`postgres` is a Cargo feature).
    pub fn built_in(self) -> bool {
        match self {
            Kind::Files => true,
            Kind::Postgres => cfg!(feature = "postgres"),
        }
    }
}

/// What [`choose`] needs of `[storage]` (the configuration builds it).
pub struct Choice {
    pub kind: Kind,
    pub limits: Limits,
    /// The allowed roots, resolved at each check (a root made after start-up counts).
    pub roots: files::Roots,
    /// Whether `[storage] allowed_roots` was set (a shared store checks cwds only then).
    pub roots_configured: bool,
    /// Pi's session directory (`<agent dir>/sessions`), where new session files go by default.
    pub sessions_dir: PathBuf,
    /// The PostgreSQL connection string, when the configuration names one.
    pub postgres_url: Option<String>,
    /// The deployment (tenant) whose sessions a shared store shows.
    pub namespace: String,
}

/// The environment variable that names the `postgres` backend's database.
pub const POSTGRES_URL_ENV: &str = "COMPACTD_POSTGRES_URL";

/// The one choice of a backend: the backend `choice.kind` names, set up (nothing is connected
/// yet: see [`Backend::check`]). An error says why it cannot even be set up.
pub fn choose(choice: Choice) -> Result<Arc<dyn Backend>, String> {
    match choice.kind {
        Kind::Files => Ok(Arc::new(files::Files::new(
            choice.limits,
            choice.roots,
            choice.sessions_dir,
        ))),
        Kind::Postgres => open_postgres(choice),
    }
}

#[cfg(feature = "postgres")]
fn open_postgres(choice: Choice) -> Result<Arc<dyn Backend>, String> {
    let url = choice.postgres_url.ok_or_else(|| {
        format!("storage.backend = 'postgres' needs storage.postgres_url or {POSTGRES_URL_ENV}")
    })?;
    let roots = choice.roots_configured.then_some(choice.roots);
    postgres::Postgres::open(&url, &choice.namespace, roots, choice.limits.durability)
        .map(|p| Arc::new(p) as Arc<dyn Backend>)
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(_choice: Choice) -> Result<Arc<dyn Backend>, String> {
    Err(NO_POSTGRES.to_owned())
}

/// Why `backend = "postgres"` is refused by a build without the `postgres` feature.
pub const NO_POSTGRES: &str = "storage.backend = 'postgres' needs a compactd built with the `postgres` feature (on by default; this build left it out): cargo install --locked --path . --features postgres";

/// Checks a PostgreSQL connection string without connecting (the configuration's validation).
pub fn check_postgres_url(url: &str) -> Result<(), String> {
    #[cfg(feature = "postgres")]
    return postgres::parse_url(url).map(|_| ());
    #[cfg(not(feature = "postgres"))]
    {
        let _ = url;
        Err(NO_POSTGRES.to_owned())
    }
}

/// A Pi session file named on a command line (`compactd inspect`, `compactd import`), read
/// whatever backend holds the daemon's sessions: nothing on disk changes. `facts_only` keeps no
/// entry's bytes (an overview of a large file never holds it).
pub fn read_session_file(
    path: &Path,
    facts_only: bool,
) -> Result<(SessionTree, LoadReport), StoreError> {
    match facts_only {
        true => files::load_facts(path),
        false => files::load(path, false),
    }
}

/// Errors of the storage shell, with Pi's message where Pi has one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("Session file not found: {0}")]
    NotFound(PathBuf),
    /// The file is no Pi session; the text says why (`reader::ReadOutcome::NotASession`).
    #[error("Session file is not a valid pi session: {}{}", .0.display(), .1)]
    NotASession(PathBuf, String),
    #[error("Session file is empty: {0}")]
    Empty(PathBuf),
    #[error("Not a regular file ({kind}): {path}")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error("Session file is larger than the {limit}-byte limit ({size} bytes): {path}")]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error(
        "Session file is being written by another process (its last line is still growing): {0}"
    )]
    Busy(PathBuf),
    /// The file was replaced or truncated behind compactd's back: nothing is written to it
    /// until the session is reopened.
    #[error("Session file was replaced or truncated by another process; reopen the session: {0}")]
    Changed(PathBuf),
    /// An entry's line could no longer be read back from the file it was indexed from (a
    /// truncation the stamp check had not seen yet): as [`StoreError::Changed`].
    #[error(transparent)]
    LineGone(#[from] crate::session::LineGone),
    /// Another writer extended the session's head first (a shared store): catch up, retry.
    #[error("Another writer appended to the session first: {0}")]
    Conflict(PathBuf),
    /// A write that failed and was taken back (the message names the errno, e.g. ENOSPC).
    #[error("{0}")]
    Write(String),
    /// The database holding the sessions cannot be reached.
    #[error("Session store unavailable: {0}")]
    Unavailable(String),
    /// A session path outside `[storage] allowed_roots` (`path_not_allowed`).
    #[error("{0}")]
    NotAllowed(String),
    /// Another compactd process holds the session file's lock; the text after the path names
    /// that process and its socket when they can be told (`files::lock_holder::describe`).
    #[error("Session file is locked by another compactd process: {}{}", .0.display(), .1)]
    Locked(PathBuf, String),
    /// An entry that cannot be written where the session now is (another writer moved the leaf
    /// elsewhere): `leaf_moved`.
    #[error("{0}")]
    Moved(String),
    /// A value the store cannot hold (a NUL in a database text column), the message naming the
    /// field: the request's input, not the store, is at fault.
    #[error("{0}")]
    Invalid(String),
    /// A stored session that does not exist.
    #[error("Stored session not found: {0}")]
    NoSuchStored(String),
    /// The daemon (or the system) ran out of file descriptors; the message names the limit
    /// (`overloaded`).
    #[error("{0}")]
    NoDescriptors(String),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// The session `location` does not exist (and the client did not ask to create it).
    pub fn not_found(location: &SessionRef) -> StoreError {
        StoreError::NotFound(location.as_path().to_owned())
    }
}

/// `p`, a path a client sent as `what`, when it is absolute; else why not (`invalid_params`):
/// a relative path would be resolved against the daemon's working directory, not the client's.
pub fn absolute_param(p: &str, what: &str) -> Result<PathBuf, StoreError> {
    let path = PathBuf::from(p);
    if !path.is_absolute() {
        return Err(StoreError::Invalid(format!(
            "{what} must be an absolute path: {p}"
        )));
    }
    Ok(path)
}

/// The storage error of an I/O failure on `path` (out of file descriptors: an error naming the
/// limit, see [`crate::descriptors`]).
pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| {
        if crate::descriptors::exhausted(&source) {
            return StoreError::NoDescriptors(crate::descriptors::exhausted_message(&source, path));
        }
        StoreError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// When appended lines are forced to stable storage (`[storage] durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Written to the OS before the reply; a power loss may drop the newest lines.
    Flush,
    /// Compaction and branch-summary entries (and new files) are fsynced before the reply.
    #[default]
    Compactions,
    /// Every acknowledged line is fsynced before the reply.
    Always,
}

impl Durability {
    /// Whether an appended entry of `kind` is fsynced before the reply.
    pub fn syncs_entry(self, kind: crate::session::EntryKind) -> bool {
        use crate::session::EntryKind;
        match self {
            Durability::Always => true,
            Durability::Compactions => {
                matches!(kind, EntryKind::Compaction | EntryKind::BranchSummary)
            }
            Durability::Flush => false,
        }
    }

    /// Whether a new file (its header, or a deferred session's first write) is fsynced.
    pub fn syncs_new_file(self) -> bool {
        self != Durability::Flush
    }
}
