//! The storage shell: reading session files from disk and appending to them safely.
//!
//! Guarantees (protocol.md §5): nothing is ever deleted or rewritten except Pi's own full writes
//! (the migration rewrite, done here atomically through a temporary file and a rename); every
//! other write is one appended line. Before appending, the file's last byte is checked so a
//! missing final newline (Pi ≤ 0.84.3, or a torn write) is repaired instead of gluing two
//! entries together.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::json::stringify;
use crate::session::{read_session_bytes, ReadOutcome, SessionTree};

/// Errors of the storage shell, with Pi's message where Pi has one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("Session file not found: {0}")]
    NotFound(PathBuf),
    #[error("Session file is not a valid pi session: {0}")]
    NotASession(PathBuf),
    #[error("Session file is empty: {0}")]
    Empty(PathBuf),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What loading found and (when writing is allowed) fixed.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub skipped_lines: usize,
    pub needed_newline_repair: bool,
    pub migrated: bool,
}

/// The absolute form of a path, without requiring it to exist.
pub fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_owned())
    }
}

/// Reads and parses a session file. With `write` false nothing on disk changes (used by
/// `inspect`); with `write` true, Pi's load-time writes happen: the newline repair and the full
/// rewrite after a migration.
pub fn load(path: &Path, write: bool) -> Result<(SessionTree, LoadReport), StoreError> {
    let abs = absolute(path);
    let bytes = match fs::read(&abs) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::NotFound(abs))
        }
        Err(e) => return Err(io_err(&abs)(e)),
    };
    let parsed = match read_session_bytes(bytes.into()) {
        ReadOutcome::Session(p) => p,
        ReadOutcome::NotASession => return Err(StoreError::NotASession(abs)),
        ReadOutcome::Empty => return Err(StoreError::Empty(abs)),
    };
    let report = LoadReport {
        skipped_lines: parsed.skipped_lines,
        needed_newline_repair: parsed.needs_newline_repair,
        migrated: parsed.migrated,
    };
    let tree = SessionTree::from_parsed(parsed);
    if write {
        if report.migrated {
            rewrite(&abs, &tree)?;
        } else if report.needed_newline_repair {
            ensure_trailing_newline(&abs)?;
        }
    }
    Ok((tree, report))
}

/// Replaces the file with header + entries, atomically (temp file in the same directory, fsync,
/// rename). Used only for Pi's migration rewrite.
pub fn rewrite(path: &Path, tree: &SessionTree) -> Result<(), StoreError> {
    let mut text: Vec<u8> = Vec::new();
    text.extend_from_slice(stringify(&tree.header).as_bytes());
    text.push(b'\n');
    for e in tree.entries() {
        text.extend_from_slice(e.raw());
        text.push(b'\n');
    }
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "session.jsonl".into());
    let tmp = dir.join(format!(".{file_name}.compactd-{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        if let Ok(meta) = fs::metadata(path) {
            let _ = f.set_permissions(meta.permissions());
        }
        f.write_all(&text)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err(path))
}

/// Appends `"\n"` if the file is non-empty and does not end with one.
pub fn ensure_trailing_newline(path: &Path) -> Result<(), StoreError> {
    let mut f = OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
        .map_err(io_err(path))?;
    let len = f.metadata().map_err(io_err(path))?.len();
    if len == 0 {
        return Ok(());
    }
    f.seek(SeekFrom::Start(len - 1)).map_err(io_err(path))?;
    let mut last = [0u8; 1];
    f.read_exact(&mut last).map_err(io_err(path))?;
    if last[0] != b'\n' {
        f.write_all(b"\n").map_err(io_err(path))?;
    }
    Ok(())
}

/// Appends one entry's line (one `write` call on an `O_APPEND` descriptor), after repairing a
/// missing final newline. The line is flushed to the OS before returning.
pub fn append_line(path: &Path, raw: &[u8]) -> Result<(), StoreError> {
    ensure_trailing_newline(path)?;
    let mut line = Vec::with_capacity(raw.len() + 1);
    line.extend_from_slice(raw);
    line.push(b'\n');
    let mut f = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(&line).map_err(io_err(path))?;
    f.flush().map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_repairs_missing_newline_and_keeps_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let original = "{\"type\":\"session\",\"version\":3,\"id\":\"x\"}\n{\"type\":\"label\",\"id\":\"a\",\"parentId\":null}";
        fs::write(&p, original).unwrap();
        append_line(&p, br#"{"type":"label","id":"b","parentId":"a"}"#).unwrap();
        let after = fs::read_to_string(&p).unwrap();
        assert!(after.starts_with(original));
        assert_eq!(
            &after[original.len()..],
            "\n{\"type\":\"label\",\"id\":\"b\",\"parentId\":\"a\"}\n"
        );
    }

    #[test]
    fn inspect_load_never_writes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let original = "{\"type\":\"session\",\"id\":\"x\"}\n{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"a\"}}";
        fs::write(&p, original).unwrap();
        let (tree, report) = load(&p, false).unwrap();
        assert!(report.migrated && report.needed_newline_repair);
        assert_eq!(tree.len(), 1);
        assert_eq!(fs::read_to_string(&p).unwrap(), original);
        load(&p, true).unwrap();
        let rewritten = fs::read_to_string(&p).unwrap();
        assert!(rewritten.ends_with('\n') && rewritten.contains("\"version\":3"));
    }

    #[test]
    fn non_sessions_are_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        fs::write(&p, "hello world\n").unwrap();
        let err = load(&p, true).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("Session file is not a valid pi session: /"));
        assert_eq!(fs::read_to_string(&p).unwrap(), "hello world\n");
    }
}
