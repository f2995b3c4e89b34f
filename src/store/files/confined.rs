//! Reads and writes confined to the path that was checked: no link is ever followed, and a
//! failed write leaves the file as it was.
//!
//! The daemon checks a session's path against `[storage] allowed_roots` once, when the session is
//! opened or created, on the path [`resolve`] made: every existing component canonical (no links
//! left), the rest normalised. Later writes must not be redirected by what changed since: a
//! session directory replaced by a symbolic link, a link planted where a migration's backup or
//! temporary file will go, a file renamed over the session. So every write here walks the stored
//! path from `/` one component at a time with `O_NOFOLLOW` (a link anywhere fails with `ELOOP`
//! or `ENOTDIR`), holding each directory's descriptor, and creates or renames only relative to
//! the descriptor of the directory it walked to (`openat`, `mkdirat`, `renameat`). Appends compare
//! the identity (device, inode) of the descriptor they write to with what the caller last saw,
//! so the check and the write are one open file. Reads take the same walk ([`open_read`]): a
//! session directory swapped for a link after the check cannot make the daemon read, and hand a
//! client, a file outside the roots.
//!
//! Disk full: an append that fails (`ENOSPC`, `EDQUOT`, a failed `fdatasync`) truncates the file
//! back to the length it had before the write, so no fragment of a line stays behind for another
//! writer's next line to be glued onto; a new file that cannot be written whole is removed.

use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// What compactd last saw of a file: its identity and the length it has read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
}

impl FileStamp {
    /// The stamp of an open file as it is now.
    pub fn of_file(f: &File) -> std::io::Result<FileStamp> {
        let meta = f.metadata()?;
        Ok(FileStamp::of(&meta, meta.len()))
    }

    pub(super) fn of(meta: &fs::Metadata, len: u64) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len,
        }
    }
}

/// The absolute form of `path` the daemon checks and stores: the longest existing prefix is
/// canonicalized (its links resolved), and the components after it, which do not exist yet, are
/// normalised lexically (`.` dropped, `..` takes off the previous component). `..` after a
/// directory that does not exist is exactly what the kernel would resolve once the directory is
/// created, so checking the result against the roots checks where a write would land.
pub fn resolve(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(&existing) {
            existing = c;
            break;
        }
        // Split off the last component, whatever it is (`file_name` is `None` for `..`).
        let mut comps = existing.components();
        let Some(last) = comps.next_back() else {
            break;
        };
        let parent = comps.as_path().to_path_buf();
        if parent.as_os_str().is_empty() || parent == existing {
            break;
        }
        rest.push(last.as_os_str().to_owned());
        existing = parent;
    }
    let mut out = existing;
    for name in rest.iter().rev() {
        match Path::new(name).components().next() {
            Some(Component::CurDir) => {}
            Some(Component::ParentDir) => {
                out.pop();
            }
            _ => out.push(name),
        }
    }
    out
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
fn open_at(dir: &OwnedFd, name: &CString, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid C string and `dir` an open descriptor; the result is checked.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    // SAFETY: `fd` was just returned by `openat` and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The directory a file of `path` lives in, opened by walking from `/` without following a
/// link, and the file's name in it. With `create`, missing directories are made on the way
/// (mode 0777 less the umask, as `create_dir_all`). `path` must be absolute with only normal
/// components (what [`resolve`] returns).
pub fn parent_dir(path: &Path, create: bool) -> io::Result<(OwnedFd, CString)> {
    let not_plain = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "not an absolute path of plain components: {}",
                path.display()
            ),
        )
    };
    let mut comps = path.components();
    if comps.next() != Some(Component::RootDir) {
        return Err(not_plain());
    }
    let names: Vec<&OsStr> = comps
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(not_plain()),
        })
        .collect::<io::Result<_>>()?;
    let Some((file, dirs)) = names.split_last() else {
        return Err(not_plain());
    };
    let root = File::open("/")?;
    let mut dir: OwnedFd = root.into();
    for name in dirs {
        let c = cstr(name)?;
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        dir = match open_at(&dir, &c, flags, 0) {
            Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                // SAFETY: valid descriptor and C string; the result is checked.
                let made = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o777) };
                if made < 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(e);
                    }
                }
                open_at(&dir, &c, flags, 0)?
            }
            other => other?,
        };
    }
    Ok((dir, cstr(file)?))
}

/// Opens the file at `path` for reading through the same walk as every write: no link is
/// followed on the way or at the file itself (`ELOOP` or `ENOTDIR`, see [`refuses_a_link`]), so a
/// read lands on the file under the checked path or nowhere, whatever was swapped in since the
/// check. `O_NONBLOCK`: a FIFO planted at the name cannot block the open; `O_NOCTTY`: a terminal
/// never becomes the daemon's.
pub fn open_read(path: &Path) -> io::Result<File> {
    let (dir, name) = parent_dir(path, false)?;
    let fd = open_at(
        &dir,
        &name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )?;
    Ok(File::from(fd))
}

/// Whether a walk failed because a component of the path is a symbolic link (or not a
/// directory), as opposed to the file being absent or unreadable.
pub fn refuses_a_link(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR))
}

/// Removes the file at `path`, found by the walk, when `stale` says so of it (opened for
/// reading, never through a link); `Ok(false)` when it is absent or kept.
pub fn remove_if(path: &Path, stale: impl FnOnce(&File) -> bool) -> io::Result<bool> {
    let (dir, name) = parent_dir(path, false)?;
    let fd = match open_at(
        &dir,
        &name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    ) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(false),
        other => other?,
    };
    if !stale(&File::from(fd)) {
        return Ok(false);
    }
    // SAFETY: valid descriptor and C string; the result is checked.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })?;
    Ok(true)
}

/// Names the errno of a failed write in its message (`ENOSPC`, …), so a client sees at once
/// that the disk is full rather than a bare OS string.
pub fn describe(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::EDQUOT) => "EDQUOT",
        Some(libc::EFBIG) => "EFBIG",
        Some(libc::EIO) => "EIO",
        Some(libc::EROFS) => "EROFS",
        Some(libc::ELOOP) => "ELOOP: a path component is a symbolic link",
        Some(libc::ENOTDIR) => "ENOTDIR: a path component is not a directory",
        Some(libc::EACCES) => "EACCES",
        _ => return e.to_string(),
    };
    format!("{e} ({name})")
}

/// Why an append did not happen. Nothing of the line is in the file in either case.
#[derive(Debug)]
pub enum AppendError {
    /// The file at the path is not the one last seen (renamed over, recreated, or reached
    /// through a link now): nothing was written.
    Replaced,
    Io(io::Error),
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppendError::Replaced => f.write_str("the file at the path is not the one last seen"),
            AppendError::Io(e) => f.write_str(&describe(e)),
        }
    }
}

/// Appends `raw` and a newline to the file at `path` in one write, through a descriptor whose
/// identity is compared with `expect` (the caller's stamp) before anything is written. The walk
/// follows no link: a session directory swapped for a link refuses the write. On any failure
/// after the write began (short write, `ENOSPC`, a failed `fdatasync`) the file is truncated back
/// to its length before, so it is byte-identical to what it was.
pub fn append_line(
    path: &Path,
    raw: &[u8],
    sync: bool,
    expect: Option<&FileStamp>,
) -> Result<FileStamp, AppendError> {
    let (dir, name) = parent_dir(path, false).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR | libc::ENOENT) if expect.is_some() => {
            AppendError::Replaced
        }
        _ => AppendError::Io(e),
    })?;
    let fd = open_at(
        &dir,
        &name,
        // Read too: a failed append is taken back by what it left at the end (`take_back`).
        libc::O_RDWR | libc::O_APPEND | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOENT) if expect.is_some() => AppendError::Replaced,
        _ => AppendError::Io(e),
    })?;
    let mut f = File::from(fd);
    let before = FileStamp::of_file(&f).map_err(AppendError::Io)?;
    let meta = f.metadata().map_err(AppendError::Io)?;
    if !meta.file_type().is_file() {
        return Err(AppendError::Replaced);
    }
    if let Some(want) = expect {
        if (before.dev, before.ino) != (want.dev, want.ino) {
            return Err(AppendError::Replaced);
        }
    }
    let mut line = Vec::with_capacity(raw.len() + 1);
    line.extend_from_slice(raw);
    line.push(b'\n');
    let written = f
        .write_all(&line)
        .and_then(|()| if sync { f.sync_data() } else { Ok(()) });
    if let Err(e) = written {
        // Take our fragment back off: whatever part of the line reached the file would
        // otherwise be the start of the next line anyone appends.
        if let Err(t) = take_back(&f, before.len, &line) {
            tracing::error!(path = %path.display(), error = %t, "could not take a failed append back");
        }
        return Err(AppendError::Io(e));
    }
    FileStamp::of_file(&f).map_err(AppendError::Io)
}

/// Removes the fragment of `line` a failed append left at the end of `f` (which was `before`
/// bytes long when the append began), keeping every complete line another writer appended in
/// that instant: the file is cut where the fragment starts, not at `before`. `O_APPEND` put
/// the fragment at the end when it was written; when it is no longer there (another writer
/// appended after it), cutting would take their line too, so the file is left as it is and the
/// error says so (a reader skips the torn line, as Pi does).
fn take_back(f: &File, before: u64, line: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let now = f.metadata()?.len();
    if now <= before {
        return Ok(());
    }
    let len = usize::try_from(now - before).map_err(io::Error::other)?;
    let mut tail = vec![0; len];
    f.read_exact_at(&mut tail, before)?;
    for k in (1..=line.len().min(tail.len())).rev() {
        let start = tail.len() - k;
        if tail[start..] == line[..k] && (start == 0 || tail[start - 1] == b'\n') {
            return f.set_len(before + start as u64);
        }
    }
    Err(io::Error::other(
        "the failed line's fragment is no longer at the end (another writer appended after it); left as it is",
    ))
}

/// Creates `path` exclusively (`O_EXCL|O_NOFOLLOW`, making missing directories without following
/// links) and writes `bytes` whole, synced when `sync`. A file that cannot be written whole is
/// removed again: it was ours (exclusive create), and a half file would be a half line.
pub fn create_new(path: &Path, bytes: &[u8], sync: bool, mode: u32) -> io::Result<File> {
    let (dir, name) = parent_dir(path, true)?;
    let fd = open_at(
        &dir,
        &name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY,
        mode,
    )?;
    let mut f = File::from(fd);
    let written = f
        .write_all(bytes)
        .and_then(|()| if sync { f.sync_all() } else { Ok(()) });
    if let Err(e) = written {
        drop(f);
        // SAFETY: valid descriptor and C string; failure only leaves the file behind.
        unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
        return Err(e);
    }
    Ok(f)
}

/// Creates the first free name of `base`, `base.2`, `base.3`, … beside it exclusively and writes
/// `bytes` whole (removed again on failure). A name taken by anything, a planted link included,
/// is skipped, never followed or replaced. Returns the path made.
pub fn create_numbered(base: &Path, bytes: &[u8], mode: u32) -> io::Result<PathBuf> {
    let mut candidate = base.to_path_buf();
    for n in 2..10_000u32 {
        match create_new(&candidate, bytes, true, mode) {
            Ok(_) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let mut name = base.as_os_str().to_owned();
                name.push(format!(".{n}"));
                candidate = PathBuf::from(name);
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("no free name beside {}", base.display()),
    ))
}

/// Replaces `path` with `bytes` atomically: an exclusively created temporary file with a random
/// name in the same directory (never a link's target), synced, then `renameat` over the file
/// through the same directory descriptor, and the directory synced. On failure the temporary
/// file is removed and `path` is untouched. Returns the new file's stamp.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<FileStamp> {
    let (dir, name) = parent_dir(path, false)?;
    let tmp_name = format!(
        ".{}.compactd-{}.tmp",
        String::from_utf8_lossy(name.as_bytes()),
        uuid::Uuid::new_v4().simple()
    );
    let tmp = cstr(OsStr::new(&tmp_name))?;
    let fd = open_at(
        &dir,
        &tmp,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY,
        mode,
    )?;
    let mut f = File::from(fd);
    let result = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        let stamp = FileStamp::of_file(&f)?;
        // SAFETY: valid descriptors and C strings; the result is checked.
        cvt(unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
            )
        })?;
        Ok(stamp)
    })();
    match result {
        Ok(stamp) => {
            // The rename is durable once the directory is; a failure here loses nothing.
            // SAFETY: valid descriptor.
            unsafe { libc::fsync(dir.as_raw_fd()) };
            Ok(stamp)
        }
        Err(e) => {
            drop(f);
            // SAFETY: valid descriptor and C string.
            unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed append is taken back to where its fragment starts: a line another writer
    /// appended in the same instant, before the fragment, stays (it was once cut back to the
    /// length before the append, taking that line with it). A fragment with another line after
    /// it is left alone rather than cut with that line.
    #[test]
    fn taking_a_failed_append_back_keeps_another_writers_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.jsonl");
        let ours = b"{\"type\":\"message\",\"id\":\"ours\"}\n";
        let cases: [(&[u8], &[u8], bool); 4] = [
            // Another writer's line, then our fragment: theirs stays.
            (
                b"{\"id\":\"theirs\"}\n{\"type\":\"mes",
                b"{\"id\":\"theirs\"}\n",
                true,
            ),
            // Only our fragment: back to the length before.
            (b"{\"type\":\"message\",\"id", b"", true),
            // Our whole line (the sync failed): taken back whole.
            (ours, b"", true),
            // Another line after our fragment: nothing is cut.
            (
                b"{\"type\":\"mes{\"id\":\"theirs\"}\n",
                b"{\"type\":\"mes{\"id\":\"theirs\"}\n",
                false,
            ),
        ];
        for (after, kept, ok) in cases {
            let mut text = b"{\"type\":\"session\"}\n".to_vec();
            let before = text.len() as u64;
            text.extend_from_slice(after);
            std::fs::write(&path, &text).expect("write");
            let f = File::options()
                .read(true)
                .write(true)
                .open(&path)
                .expect("open");
            assert_eq!(take_back(&f, before, ours).is_ok(), ok);
            let mut want = b"{\"type\":\"session\"}\n".to_vec();
            want.extend_from_slice(kept);
            assert_eq!(
                String::from_utf8_lossy(&std::fs::read(&path).expect("read")),
                String::from_utf8_lossy(&want)
            );
        }
    }

    #[test]
    fn resolve_takes_dot_dot_through_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let p = base.join("a/b/../../../x.jsonl");
        assert_eq!(resolve(&p), base.parent().unwrap().join("x.jsonl"));
        assert_eq!(
            resolve(&base.join("a/./b/c.jsonl")),
            base.join("a/b/c.jsonl")
        );
    }

    #[test]
    fn writes_never_follow_a_link_in_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let outside = base.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("link")).unwrap();
        let err = create_new(&base.join("link/s.jsonl"), b"x\n", false, 0o644).unwrap_err();
        assert!(matches!(
            err.raw_os_error(),
            Some(libc::ENOTDIR | libc::ELOOP)
        ));
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
        // A planted link at the backup's name is skipped, not followed.
        let target = outside.join("victim");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, base.join("s.bak")).unwrap();
        let made = create_numbered(&base.join("s.bak"), b"copy", 0o644).unwrap();
        assert_eq!(made, base.join("s.bak.2"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
