//! The files backend (`[storage] backend = "files"`, the default): Pi's JSONL session files,
//! addressed by path, confined to the allowed roots, each held under the shared lock while a
//! daemon has it open. No other daemon shares a file session, so there is no lease to take and
//! no event to carry between daemons.

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::backend::{Address, Backend, Deliver, Lease, NewSession, Opened, StoredSummary};
use super::{absolute_param as absolute, load_with, try_lock, Limits, SessionFile, StoreError};
use crate::session::SessionTree;

const FILES_NOT_STORED: &str = "headerId addresses a session in a shared store, and this daemon keeps sessions in files ([storage] backend = \"files\"): open one by path";
const NOT_A_STORE: &str = "sessions are kept in files ([storage] backend = \"files\"); listing, exporting and importing stored sessions need a shared store: set [storage] backend = \"postgres\" in the config file, with the database in storage.postgres_url or COMPACTD_POSTGRES_URL (the variable alone does not select PostgreSQL)";

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

    /// Session files anywhere, at the default limits, new sessions in Pi's default directory:
    /// for a caller without a configuration (the library's `compactor::compact_file`).
    pub fn unconfined() -> Files {
        Files::new(
            Limits::default(),
            Box::new(|| vec![PathBuf::from("/")]),
            PathBuf::from("/"),
        )
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
        lock: Option<std::fs::File>,
    ) -> Result<Opened, StoreError> {
        let cwd = cwd.map(str::to_owned).unwrap_or_else(|| {
            path.parent()
                .map_or("/".into(), |d| d.to_string_lossy().into_owned())
        });
        let header = crate::session::new_header(&cwd);
        let line = crate::json::stringify(&header);
        let stamp = super::append_raw(
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
    let resolved = crate::confined::resolve(path);
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

/// `--<cwd>--`: the directory name of Pi's default session directory for `cwd`.
pub fn encoded_cwd(cwd: &str) -> String {
    let trimmed = cwd.strip_prefix(['/', '\\']).unwrap_or(cwd);
    format!("--{}--", trimmed.replace(['/', '\\', ':'], "-"))
}

impl Backend for Files {
    fn check(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn locate(&self, address: Address<'_>) -> Result<PathBuf, StoreError> {
        let path = match (address.path, address.header_id) {
            (Some(path), None) => path,
            (_, Some(_)) => return Err(StoreError::Invalid(FILES_NOT_STORED.into())),
            (None, None) => {
                return Err(StoreError::Invalid(
                    "missing field `path` (or `headerId`, with the postgres backend)".into(),
                ))
            }
        };
        let path = crate::confined::resolve(&absolute(path, "path")?);
        self.check_allowed(&path)?;
        Ok(path)
    }

    fn open(&self, path: &Path, cwd: Option<&str>) -> Result<Opened, StoreError> {
        // The shared lock convention (proto-docs/storage.md): taken before the file is read, so
        // a file another compactd process holds is refused before anything is done with it.
        let lock = match try_lock(path) {
            Ok(Some(f)) => Some(f),
            Ok(None) => {
                let holder = super::lock_holder::describe(path);
                return Err(StoreError::Locked(path.to_owned(), holder));
            }
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        match load_with(path, true, &self.limits) {
            Ok((tree, report, stamp)) => {
                if let Some(skipped) = report.skipped_text() {
                    tracing::warn!(path = %path.display(), lines = ?report.skipped_line_numbers, "{skipped}");
                }
                if let Some(b) = &report.backup {
                    tracing::info!(path = %path.display(), backup = %b.display(), "migrated to v3; original kept");
                }
                // A migration's rewrite made a new inode: the lock must be on it.
                let lock = if report.migrated {
                    try_lock(path)?
                } else {
                    lock
                };
                let file = SessionFile::opened(path.to_owned(), self.limits, stamp, lock)
                    .with_lines(report.lines);
                Ok(Opened::Loaded {
                    storage: Box::new(file),
                    tree,
                })
            }
            Err(StoreError::NotFound(_)) => Ok(Opened::Missing {
                storage: Box::new(SessionFile::new(path.to_owned(), self.limits)),
            }),
            Err(StoreError::Empty(_)) => self.initialise_empty(path, cwd, lock),
            Err(e) => Err(e),
        }
    }

    fn create(&self, header: &Value, session_dir: Option<&str>) -> Result<NewSession, StoreError> {
        let field = |key: &str| header.get(key).and_then(Value::as_str).unwrap_or("");
        let dir = match session_dir {
            Some(d) => absolute(d, "sessionDir")?,
            None => self.sessions_dir.join(encoded_cwd(field("cwd"))),
        };
        let ts = field("timestamp").replace([':', '.'], "-");
        let path = crate::confined::resolve(&dir.join(format!("{ts}_{}.jsonl", field("id"))));
        self.check_allowed(&path)?;
        Ok(NewSession {
            storage: Box::new(SessionFile::new(path.clone(), self.limits)),
            location: path,
            write_now: false,
        })
    }

    fn list(&self, _cwd: Option<String>) -> Result<Vec<StoredSummary>, StoreError> {
        Err(StoreError::Invalid(NOT_A_STORE.into()))
    }

    fn lease(
        &self,
        _location: &Path,
        _cancel: CancellationToken,
        _unfinished: super::backend::Unfinished,
    ) -> BoxFuture<'static, Result<Option<Lease>, StoreError>> {
        // The file's lock already keeps every other daemon out.
        Box::pin(async { Ok(None) })
    }

    fn publish(&self, _location: &Path, _name: &str, _payload: &Value) {}

    fn start_events(&self, _deliver: Deliver) {}

    fn export(&self, _header_id: &str) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::Invalid(NOT_A_STORE.into()))
    }

    fn import(&self, _header_line: &[u8], _tree: &SessionTree) -> Result<String, StoreError> {
        Err(StoreError::Invalid(NOT_A_STORE.into()))
    }
}
