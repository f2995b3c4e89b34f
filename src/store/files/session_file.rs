//! A session kept in one JSONL file: what compactd last saw of it (its [`FileStamp`]), the
//! shared advisory lock, and the three writes Pi makes (the deferred first write, one appended
//! line per entry, the torn-line repair).
//!
//! Other writers may append to the same file (Pi itself, another tool): their complete lines are
//! read in before every write, a partial last line is waited for and repaired only once it has
//! stopped growing, and a file replaced or truncated behind compactd's back refuses every write
//! until the session is reopened, so nothing is ever written under a parent the file no longer
//! has.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    confined, load_open, lock_file, open_locked, read_tail, try_lock, FileLines, FileStamp, Limits,
    Tail, TORN_LINE_SETTLE,
};
use crate::store::backend::{Rebase, SessionStorage};
use crate::store::{io_err, SessionRef, StoreError};
use serde_json::Value;

use crate::session::{Entry, SessionTree};

/// How long a partial last line may keep growing before a write gives up (`file_busy`).
const BUSY_AFTER: Duration = Duration::from_secs(1);

/// How an open session holds the shared lock on its file: on a descriptor of its own, or on
/// the one its entries read their lines back through (a duplicate of the descriptor the lock
/// was taken on, so it shares that open file and its lock). The second costs no descriptor: a
/// daemon holding ten thousand sessions holds ten thousand descriptors, not twenty.
#[derive(Debug)]
pub enum Lock {
    Own(File),
    Lines(Arc<FileLines>),
}

/// Why [`SessionFile::load_locked`] loaded nothing.
#[derive(Debug)]
pub enum Unloaded {
    /// No file at the path (yet).
    Missing,
    /// The file is empty: Pi's first write gives it a header (the lock, when taken, is kept).
    Empty(Option<Lock>),
    Failed(StoreError),
}

/// One session file as compactd sees it.
#[derive(Debug)]
pub struct SessionFile {
    path: PathBuf,
    /// `path` as the session's name.
    name: SessionRef,
    limits: Limits,
    /// What compactd last read or wrote of the file (`None` until it exists).
    stamp: Option<FileStamp>,
    /// The file was replaced or truncated behind compactd's back.
    changed: bool,
    /// The advisory lock compactd processes share on the file (proto-docs/storage.md).
    lock: Option<Lock>,
    /// The file the session's entries read their lines back from (see [`FileLines`]): a line
    /// it could not read means the file changed.
    lines: Option<Arc<FileLines>>,
}

impl SessionFile {
    /// A file that does not exist yet (a deferred session), or one about to be adopted.
    pub fn new(path: PathBuf, limits: Limits) -> SessionFile {
        SessionFile {
            name: SessionRef::at(&path),
            path,
            limits,
            stamp: None,
            changed: false,
            lock: None,
            lines: None,
        }
    }

    /// A file compactd has read up to `stamp`, holding `lock` (taken before it was read, or
    /// again after a migration rewrote it as a new inode).
    pub fn opened(
        path: PathBuf,
        limits: Limits,
        stamp: FileStamp,
        lock: Option<Lock>,
    ) -> SessionFile {
        SessionFile {
            stamp: Some(stamp),
            lock,
            ..SessionFile::new(path, limits)
        }
    }

    /// Opens the file at `path`, takes the shared lock on it (proto-docs/storage.md: before the
    /// file is read, so a file another compactd process holds is refused before anything is done
    /// with it) and reads the session through that descriptor: Pi's load with its repairs and
    /// migration. The session then holds one descriptor, which carries the lock and its lines.
    pub fn load_locked(
        path: &Path,
        limits: &Limits,
    ) -> Result<(SessionFile, SessionTree), Unloaded> {
        let fail = Unloaded::Failed;
        let (f, meta) = match open_locked(path) {
            Ok(Some(opened)) => opened,
            Ok(None) => {
                let holder = super::lock_holder::describe(path);
                return Err(fail(StoreError::Locked(path.to_owned(), holder)));
            }
            Err(StoreError::NotFound(_)) => return Err(Unloaded::Missing),
            Err(e) => return Err(fail(e)),
        };
        let (tree, report, stamp) = match load_open(path, &f, &meta, true, limits) {
            Ok(loaded) => loaded,
            Err(StoreError::Empty(_)) => return Err(Unloaded::Empty(Some(Lock::Own(f)))),
            Err(e) => return Err(fail(e)),
        };
        if let Some(skipped) = report.skipped_text() {
            tracing::warn!(path = %path.display(), lines = ?report.skipped_line_numbers, "{skipped}");
        }
        if let Some(b) = &report.backup {
            tracing::info!(path = %path.display(), backup = %b.display(), "migrated to v3; original kept");
        }
        let lock = match &report.lines {
            // A migration's rewrite made a new inode: the lock must be on it.
            _ if report.migrated => {
                drop(f);
                try_lock(path).map_err(fail)?.map(Lock::Own)
            }
            // The lines' descriptor shares the locked open file: `f` is not needed.
            Some(lines) => Some(Lock::Lines(lines.clone())),
            None => Some(Lock::Own(f)),
        };
        let file =
            SessionFile::opened(path.to_owned(), *limits, stamp, lock).with_lines(report.lines);
        Ok((file, tree))
    }

    /// Lets go of the shared lock at once (see [`Lock`]'s `Drop`).
    fn unlock(&mut self) {
        self.lock = None;
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the file the entries read their lines from (a [`super::LoadReport`]'s).
    pub fn with_lines(mut self, lines: Option<Arc<FileLines>>) -> SessionFile {
        self.lines = lines;
        self
    }

    /// Whether an entry's line could not be read back: the file was truncated behind compactd's
    /// back, which refuses every write until the session is reopened, as a truncation the stamp
    /// check sees does.
    fn lines_failed(&mut self) -> bool {
        if self.lines.as_ref().is_some_and(|l| l.failed()) {
            self.changed = true;
        }
        self.changed
    }
}

impl SessionFile {
    /// The storage error of a refused append: the file at the path is no longer the one last
    /// seen (`file_changed`, and later writes are refused until a reopen), or the write failed
    /// and was taken back (`io`, naming the errno, e.g. ENOSPC).
    fn append_error(&mut self, e: confined::AppendError) -> StoreError {
        match e {
            confined::AppendError::Replaced => {
                self.changed = true;
                StoreError::Changed(self.path.clone())
            }
            confined::AppendError::Io(e) if crate::descriptors::exhausted(&e) => {
                io_err(&self.path)(e)
            }
            confined::AppendError::Io(e) => StoreError::Write(format!(
                "Could not append to {}: {}; nothing was written",
                self.path.display(),
                confined::describe(&e)
            )),
        }
    }
}

impl SessionStorage for SessionFile {
    fn location(&self) -> &SessionRef {
        &self.name
    }

    /// Complete lines another writer appended are handed over at once. A partial last line may
    /// still be growing: it is waited for, and repaired (Pi's newline repair: it then reads as
    /// one malformed line, which is skipped) only once it has stayed unchanged for
    /// [`TORN_LINE_SETTLE`]; one still growing after [`BUSY_AFTER`] is [`StoreError::Busy`].
    fn catch_up(&mut self, into: &mut Vec<u8>) -> Result<(), StoreError> {
        let Some(mut stamp) = self.stamp else {
            return Ok(());
        };
        if self.lines_failed() {
            return Err(StoreError::Changed(self.path.clone()));
        }
        let mut last_partial: Option<usize> = None;
        let deadline = Instant::now() + BUSY_AFTER;
        loop {
            let tail = crate::cpu::blocking(|| read_tail(&self.path, &stamp, &self.limits))?;
            let bytes = match tail {
                Tail::Unchanged => return Ok(()),
                Tail::Replaced | Tail::Truncated => {
                    self.changed = true;
                    return Err(StoreError::Changed(self.path.clone()));
                }
                Tail::Grown(b) => b,
            };
            let complete = memchr::memrchr(b'\n', &bytes).map_or(0, |i| i + 1);
            if complete > 0 {
                into.extend_from_slice(&bytes[..complete]);
                stamp.len += complete as u64;
                self.stamp = Some(stamp);
                last_partial = None;
            }
            let partial = bytes.len() - complete;
            if partial == 0 {
                return Ok(());
            }
            if last_partial == Some(partial) {
                let after = confined::append_line(&self.path, b"", false, Some(&stamp))
                    .map_err(|e| self.append_error(e))?;
                stamp.len += partial as u64 + 1;
                if (after.dev, after.ino, after.len) != (stamp.dev, stamp.ino, stamp.len) {
                    stamp.len = after.len.min(stamp.len);
                }
                self.stamp = Some(stamp);
                tracing::warn!(path = %self.path.display(), bytes = partial, "repaired a torn last line");
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(StoreError::Busy(self.path.clone()));
            }
            last_partial = Some(partial);
            crate::cpu::blocking(|| std::thread::sleep(TORN_LINE_SETTLE));
        }
    }

    /// A file cannot refuse a write under a stale head: what other writers added is read first.
    fn before_write(&mut self, into: &mut Vec<u8>) -> Result<(), StoreError> {
        self.catch_up(into)
    }

    /// One appended line, fsynced as `[storage] durability` says for `kind`. Another writer's
    /// line may land next to it; then the next catch-up reads from before this line again (the
    /// daemon recognises its own line and skips it). A file has no head to lose a race on, so
    /// `rebase` is never called.
    fn append(
        &mut self,
        entry: &Entry,
        _rebase: &mut Rebase<'_>,
    ) -> Result<Option<Entry>, StoreError> {
        let line = entry.raw()?;
        let line = &line[..];
        let sync = self.limits.durability.syncs_entry(entry.kind);
        let before = self.stamp.map_or(0, |s| s.len);
        // Written through a descriptor checked against the stamp (same device and inode), found
        // without following a link: see `super::confined`.
        let stamp = self.stamp;
        let after =
            crate::cpu::blocking(|| confined::append_line(&self.path, line, sync, stamp.as_ref()))
                .map_err(|e| self.append_error(e))?;
        let expected = before + line.len() as u64 + 1;
        self.stamp = Some(FileStamp {
            len: if after.len == expected {
                after.len
            } else {
                before
            },
            ..after
        });
        Ok(None)
    }

    /// Exclusive create (never over an existing file), then the shared lock on the new file.
    fn create(&mut self, header: &Value, entries: &[&Entry]) -> Result<(), StoreError> {
        let header = crate::json::stringify(header);
        // Entries another file holds (a fork's branch) are read from there first.
        let lines = entries
            .iter()
            .map(|e| e.raw())
            .collect::<Result<Vec<_>, _>>()?;
        let mut text =
            Vec::with_capacity(header.len() + 1 + lines.iter().map(|l| l.len() + 1).sum::<usize>());
        for line in std::iter::once(header.as_bytes()).chain(lines.iter().map(|l| &l[..])) {
            text.extend_from_slice(line);
            text.push(b'\n');
        }
        let path = self.path.clone();
        let sync = self.limits.durability.syncs_new_file();
        // Directories made and the file created without following a link (the checked path may
        // have been redirected since `createSession`); a file not written whole is removed.
        let f = crate::cpu::blocking(|| confined::create_new(&path, &text, sync, 0o666)).map_err(
            |e| {
                if crate::descriptors::exhausted(&e) {
                    return io_err(&path)(e);
                }
                StoreError::Write(format!(
                    "cannot create {}: {}; nothing was written",
                    path.display(),
                    confined::describe(&e)
                ))
            },
        )?;
        self.stamp = Some(FileStamp {
            len: text.len() as u64,
            ..FileStamp::of_file(&f).map_err(io_err(&self.path))?
        });
        // The lock on the descriptor that created the file: no second open, no second
        // descriptor.
        self.lock = lock_file(&f, &self.path)?.then_some(Lock::Own(f));
        Ok(())
    }

    /// An entry whose line could not be read back is `file_changed` (see [`FileLines`]).
    fn lines_intact(&self) -> Result<(), StoreError> {
        match self.lines.as_ref().is_some_and(|l| l.failed()) {
            true => Err(StoreError::Changed(self.path.clone())),
            false => Ok(()),
        }
    }

    /// The file read again, under a lock taken again: the old one is let go first (on the same
    /// file it would refuse the new one, another open file of the same inode).
    fn reload(&mut self) -> Result<SessionTree, StoreError> {
        self.unlock();
        let (file, tree) =
            crate::cpu::blocking(|| SessionFile::load_locked(&self.path, &self.limits)).map_err(
                |e| match e {
                    Unloaded::Missing => StoreError::NotFound(self.path.clone()),
                    Unloaded::Empty(_) => StoreError::Empty(self.path.clone()),
                    Unloaded::Failed(e) => e,
                },
            )?;
        *self = file;
        Ok(tree)
    }
}

impl Drop for Lock {
    /// The lock goes with the session, at once: `flock`'s unlock releases the open file's lock
    /// whatever descriptors of it remain (the lines' one may live on in entries a session
    /// freed later holds, see `SessionState`'s `Drop`).
    fn drop(&mut self) {
        if let Lock::Lines(lines) = self {
            let _ = lines.file().unlock();
        }
    }
}
