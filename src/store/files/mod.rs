//! The files backend (`[storage] backend = "files"`, the default): Pi's JSONL session files,
//! addressed by path, confined to the allowed roots, each held under the shared lock while a
//! daemon has it open. No other daemon shares a file session, so there is no lease to take and
//! no event to carry between daemons.
//!
//! Its parts: [`read`] (regular files only, up to a size limit, large files read in parallel
//! pieces, other writers' appends read incrementally), [`write`] (the migration rewrite, appended
//! lines, the shared lock), [`confined`] (no walk follows a link; what compactd last saw of a file,
//! [`FileStamp`]), [`SessionFile`] (one open session's file) and [`FileLines`] (entries' lines read
//! back on demand).

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::backend::{
    Address, Backend, Deliver, Health, Lease, NewSession, Opened, StoredSummary, Verdict,
};
use super::{absolute_param, SessionRef, StoreError};
use crate::session::SessionTree;

pub mod confined;
mod lines;
pub mod lock_holder;
mod open;
mod read;
mod session_file;
mod write;

pub use confined::FileStamp;
pub use lines::FileLines;
pub use open::open_regular;
pub use read::{
    absolute, load, load_facts, load_open, load_with, read_tail, LoadReport, Tail, TORN_LINE_SETTLE,
};
pub use session_file::{Lock, SessionFile, Unloaded};
pub use write::{append_raw, lock_file, open_locked, rewrite, try_lock};

const FILES_NOT_STORED: &str = "headerId addresses a session in a shared store, and this daemon keeps sessions in files ([storage] backend = \"files\"): open one by path";
const NOT_A_STORE: &str = "sessions are kept in files ([storage] backend = \"files\"); listing, exporting and importing stored sessions need a shared store: set [storage] backend = \"postgres\" in the config file, with the database in storage.postgres_url or COMPACTD_POSTGRES_URL (the variable alone does not select PostgreSQL)";

/// The storage limits and guarantees in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: u64,
    pub durability: super::Durability,
}

/// Default largest session file compactd reads (2 GiB).
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_BYTES,
            durability: super::Durability::default(),
        }
    }
}

/// The allowed roots, resolved at each check (a root made after start-up counts).
pub type Roots = Box<dyn Fn() -> Vec<PathBuf> + Send + Sync>;

/// Session files under a set of allowed roots.
pub struct Files {
    limits: Limits,
    roots: Roots,
    /// Pi's session directory (`<agent dir>/sessions`), where new sessions go by default.
    sessions_dir: PathBuf,
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Files")
            .field("limits", &self.limits)
            .field("sessions_dir", &self.sessions_dir)
            .finish_non_exhaustive()
    }
}

impl Files {
    pub fn new(limits: Limits, roots: Roots, sessions_dir: PathBuf) -> Files {
        Files {
            limits,
            roots,
            sessions_dir,
        }
    }

    /// Refuses a session path outside the configured roots, before anything is read or
    /// created. The nearest existing ancestor is resolved (links cannot lead outside the
    /// roots), and `..` through directories that do not exist yet is taken as the kernel will
    /// once they do.
    fn check_allowed(&self, path: &Path) -> Result<(), StoreError> {
        check_roots(&(self.roots)(), path, "Session path")
    }

    /// Pi's first write to an existing empty file: a fresh header, appended (not renamed over,
    /// so the file and its lock stay the same inode).
    fn initialise_empty(
        &self,
        path: &Path,
        cwd: Option<&str>,
        lock: Option<Lock>,
    ) -> Result<Opened, StoreError> {
        let cwd = cwd.map(str::to_owned).unwrap_or_else(|| {
            path.parent()
                .map_or("/".into(), |d| d.to_string_lossy().into_owned())
        });
        let header = crate::session::new_header(&cwd);
        let line = crate::json::stringify(&header);
        let stamp = append_raw(
            path,
            line.as_bytes(),
            self.limits.durability.syncs_new_file(),
        )?;
        let file = SessionFile::opened(path.to_owned(), self.limits, stamp, lock);
        Ok(Opened::Loaded {
            storage: Box::new(file),
            tree: SessionTree::new(header, Vec::new()),
        })
    }
}

/// Refuses `path` (`what` names it in the error) unless it is under one of `roots`: the
/// nearest existing ancestor resolved (links cannot lead outside the roots), and `..` through
/// directories that do not exist yet taken as the kernel will once they do.
pub fn check_roots(roots: &[PathBuf], path: &Path, what: &str) -> Result<(), StoreError> {
    let resolved = confined::resolve(path);
    if path.is_absolute() && roots.iter().any(|r| resolved.starts_with(r)) {
        return Ok(());
    }
    let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    Err(StoreError::NotAllowed(format!(
        "{what} is outside the allowed roots ({}): {}",
        list.join(", "),
        resolved.display()
    )))
}

impl Backend for Files {
    fn check(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn describe(&self) -> String {
        self.sessions_dir.display().to_string()
    }

    fn health(&self) -> Health {
        let roots: Vec<String> = (self.roots)()
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        let text = format!("session files (allowed roots: {})", roots.join(", "));
        let env = super::POSTGRES_URL_ENV;
        match std::env::var(env).is_ok_and(|v| !v.is_empty()) {
            // Set for a shared store, but the configuration still names files.
            true => Health {
                verdict: Verdict::Note,
                text: format!("{text}; {env} is set but unused: PostgreSQL also needs [storage] backend = \"postgres\""),
                fix: None,
            },
            false => Health {
                verdict: Verdict::Ok,
                text,
                fix: None,
            },
        }
    }

    fn locate(&self, address: Address<'_>) -> Result<SessionRef, StoreError> {
        let path = match (address.path, address.header_id) {
            (Some(path), None) => path,
            (_, Some(_)) => return Err(StoreError::Invalid(FILES_NOT_STORED.into())),
            (None, None) => {
                return Err(StoreError::Invalid(
                    "missing field `path` (or `headerId`, with the postgres backend)".into(),
                ))
            }
        };
        let path = confined::resolve(&absolute_param(path, "path")?);
        self.check_allowed(&path)?;
        Ok(SessionRef::at(&path))
    }

    fn open(&self, location: &SessionRef, cwd: Option<&str>) -> Result<Opened, StoreError> {
        let path = location.as_path();
        match SessionFile::load_locked(path, &self.limits) {
            Ok((file, tree)) => Ok(Opened::Loaded {
                storage: Box::new(file),
                tree,
            }),
            Err(Unloaded::Missing) => Ok(Opened::Missing {
                storage: Box::new(SessionFile::new(path.to_owned(), self.limits)),
            }),
            Err(Unloaded::Empty(lock)) => self.initialise_empty(path, cwd, lock),
            Err(Unloaded::Failed(e)) => Err(e),
        }
    }

    fn create(&self, header: &Value, session_dir: Option<&str>) -> Result<NewSession, StoreError> {
        let field = |key: &str| header.get(key).and_then(Value::as_str).unwrap_or("");
        let dir = match session_dir {
            Some(d) => absolute_param(d, "sessionDir")?,
            None => self
                .sessions_dir
                .join(crate::session::dir_name_of_cwd(field("cwd"))),
        };
        let ts = field("timestamp").replace([':', '.'], "-");
        let path = confined::resolve(&dir.join(format!("{ts}_{}.jsonl", field("id"))));
        self.check_allowed(&path)?;
        Ok(NewSession {
            storage: Box::new(SessionFile::new(path.clone(), self.limits)),
            location: SessionRef::at(&path),
            write_now: false,
        })
    }

    fn list(&self, _cwd: Option<String>) -> Result<Vec<StoredSummary>, StoreError> {
        Err(StoreError::Invalid(NOT_A_STORE.into()))
    }

    fn lease(
        &self,
        _location: &SessionRef,
        _cancel: CancellationToken,
        _unfinished: super::backend::Unfinished,
    ) -> BoxFuture<'static, Result<Option<Lease>, StoreError>> {
        // The file's lock already keeps every other daemon out.
        Box::pin(async { Ok(None) })
    }

    fn publish(&self, _location: &SessionRef, _name: &str, _payload: &Value) {}

    fn start_events(&self, _deliver: Deliver) {}

    fn export(&self, _header_id: &str) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::Invalid(NOT_A_STORE.into()))
    }

    fn import(&self, _header_line: &[u8], _tree: &SessionTree) -> Result<String, StoreError> {
        Err(StoreError::Invalid(NOT_A_STORE.into()))
    }
}
