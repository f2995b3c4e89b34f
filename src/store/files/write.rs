//! Writing session files: Pi's migration rewrite (atomic, the original kept beside it), appended
//! lines, and the shared lock compactd processes take on a session file.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::confined::{self, FileStamp};
use super::open::open_regular;
use super::Limits;
use crate::json::stringify;
use crate::session::SessionTree;
use crate::store::{io_err, StoreError};

/// Writes the bytes a migration is about to rewrite (exactly what was read) to
/// `<file>.v<N>.bak` (beyond Pi, which keeps no copy), never replacing an existing file and
/// never following a link planted at that name (`O_EXCL|O_NOFOLLOW`, see [`confined`]);
/// a backup that cannot be written whole is removed, and the migration does not happen.
pub(super) fn backup_original(
    path: &Path,
    version: f64,
    bytes: &[u8],
    meta: &fs::Metadata,
) -> Result<PathBuf, StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let base = PathBuf::from(format!("{}.v{}.bak", path.display(), version));
    confined::create_numbered(&base, bytes, meta.permissions().mode() & 0o7777)
        .map_err(confined_err(path))
}

/// A [`StoreError::Io`] whose message names the errno (`ENOSPC`, `ELOOP`, …).
pub(super) fn confined_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| {
        if crate::descriptors::exhausted(&e) {
            return io_err(path)(e);
        }
        StoreError::Io {
            path: path.to_owned(),
            source: std::io::Error::new(e.kind(), confined::describe(&e)),
        }
    }
}

/// Replaces the file with header + entries, atomically (a temporary file created exclusively
/// in the same directory, never through a link, synced, then renamed over the file; see
/// [`confined::replace`]), with the mode of the file read (`read`). Used only for Pi's
/// migration rewrite. On failure the file is
/// untouched and no temporary file is left. Returns the new file's stamp.
pub fn rewrite(
    path: &Path,
    tree: &SessionTree,
    read: &fs::Metadata,
) -> Result<FileStamp, StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let mut text: Vec<u8> = Vec::new();
    text.extend_from_slice(stringify(&tree.header).as_bytes());
    text.push(b'\n');
    for e in tree.entries() {
        text.extend_from_slice(&e.raw()?);
        text.push(b'\n');
    }
    let mode = read.permissions().mode() & 0o7777;
    confined::replace(path, &text, mode).map_err(confined_err(path))
}

/// Appends `raw` and a newline without looking at the file first (the caller knows it ends
/// with a newline).
/// The walk to the file follows no link, and a failed write is taken back off the file
/// ([`confined::append_line`]).
pub fn append_raw(path: &Path, raw: &[u8], sync: bool) -> Result<FileStamp, StoreError> {
    confined::append_line(path, raw, sync, None).map_err(|e| match e {
        confined::AppendError::Io(e) => confined_err(path)(e),
        confined::AppendError::Replaced => StoreError::NotRegular {
            path: path.to_owned(),
            kind: "not a regular file",
        },
    })
}

/// Takes the advisory lock compactd processes share on a session (proto-docs/storage.md):
/// `flock` on the session file itself, so no lock file is ever created beside it. `Ok(None)`
/// when another holder has it. An empty `<file>.lock` left by compactd before 0.2 is removed
/// when nothing holds it.
pub fn try_lock(path: &Path) -> Result<Option<File>, StoreError> {
    open_locked(path).map(|locked| locked.map(|(f, _)| f))
}

/// [`try_lock`], also returning the file's metadata when it was opened: a reader of the
/// session reads through this very descriptor (its open file carries the lock, and a
/// duplicate of it keeps both), so the open session holds one descriptor, not one for its lock
/// and one for its lines.
pub fn open_locked(path: &Path) -> Result<Option<(File, fs::Metadata)>, StoreError> {
    let (f, meta) = open_regular(
        path,
        &Limits {
            max_bytes: u64::MAX,
            ..Limits::default()
        },
    )?;
    if !lock_file(&f, path)? {
        return Ok(None);
    }
    Ok(Some((f, meta)))
}

/// Takes the shared lock on `f`, the session file at `path` (false: another holder has it),
/// and removes an empty `<file>.lock` of compactd before 0.2 that nothing holds.
pub fn lock_file(f: &File, path: &Path) -> Result<bool, StoreError> {
    match f.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
        Err(std::fs::TryLockError::Error(e)) => return Err(io_err(path)(e)),
    }
    let mut old = path.as_os_str().to_owned();
    old.push(".lock");
    // Found by the same walk, never through a link; a failure only leaves it behind.
    let _ = confined::remove_if(Path::new(&old), |l| {
        l.metadata()
            .is_ok_and(|m| m.file_type().is_file() && m.len() == 0)
            && l.try_lock().is_ok()
    });
    Ok(true)
}
