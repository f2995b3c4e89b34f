//! A session file's lines read back on demand: the [`LineSource`] of the entries of a file a
//! daemon keeps open, which keep only their lines' spans (see `crate::session::entry`).
//!
//! Reads are positioned (`pread`) on the descriptor the entries were indexed from, never through
//! a memory map: another writer's truncation must be an error here, not SIGBUS. Holding that
//! descriptor also keeps the bytes the index describes when the file is replaced by a rename
//! (the old inode lives on). A truncation shows as a short read: [`LineGone`], and the source
//! remembers it ([`FileLines::failed`]) so the session reports its file changed until reopened.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::session::{LineGone, LineSource};

/// How much is read at once when a line is not in the last window read: a walk along a branch
/// (a context, a compaction's span, a search) reads consecutive lines, so one read serves some
/// forty lines of a typical session instead of one system call each.
const WINDOW: usize = 64 << 10;

/// One open session file's lines (see the module docs).
#[derive(Debug)]
pub struct FileLines {
    file: File,
    /// A line could not be read whole: the file no longer has the bytes it was indexed from.
    failed: AtomicBool,
    /// The last window read: where it begins and its bytes (the small, bounded cache of recently
    /// read bytes: one window per open session).
    window: Mutex<Option<(u64, Bytes)>>,
}

impl FileLines {
    pub fn new(file: File) -> FileLines {
        FileLines {
            file,
            failed: AtomicBool::new(false),
            window: Mutex::new(None),
        }
    }

    /// The descriptor the lines are read from (the session is read through it first).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether a line could not be read whole since the file was read: it was truncated (or a
    /// read failed), and the index no longer describes it.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// The bytes of `[start, start + want)` that the file has (fewer at its end).
    fn read_window(&self, start: u64, want: usize) -> Vec<u8> {
        let mut buf = Vec::with_capacity(want);
        while buf.len() < want {
            let Some(at) = start.checked_add(buf.len() as u64) else {
                break;
            };
            match super::read::read_at_into(&self.file, &mut buf, want, at) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "reading a session line back failed");
                    break;
                }
            }
        }
        // The window is kept until the next read: a small file's (or a file's end) need not
        // keep 64 KiB, ten thousand small sessions would hold 640 MB of it.
        if buf.len() < buf.capacity() / 2 {
            buf.shrink_to_fit();
        }
        buf
    }
}

impl LineSource for FileLines {
    fn read(&self, offset: u64, len: usize) -> Result<Bytes, LineGone> {
        let end = offset.checked_add(len as u64).ok_or(LineGone)?;
        let previous = {
            let window = self.window.lock();
            match &*window {
                Some((at, bytes)) if offset >= *at && end <= at + bytes.len() as u64 => {
                    let from = (offset - at) as usize;
                    return Ok(bytes.slice(from..from + len));
                }
                Some((at, _)) => Some(*at),
                None => None,
            }
        };
        // A walk backwards (a search, newest first) reads the window that ends at this line.
        let want = len.max(WINDOW);
        let start = match previous {
            Some(at) if offset < at => end.saturating_sub(want as u64),
            _ => offset,
        };
        let buf = self.read_window(start, want);
        let from = (offset - start) as usize;
        if buf.len() < from + len {
            self.failed.store(true, Ordering::Relaxed);
            return Err(LineGone);
        }
        let bytes = Bytes::from(buf);
        let line = bytes.slice(from..from + len);
        *self.window.lock() = Some((start, bytes));
        Ok(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(text: &[u8]) -> (tempfile::TempDir, std::path::PathBuf, FileLines) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, text).unwrap();
        let lines = FileLines::new(File::open(&path).unwrap());
        (dir, path, lines)
    }

    #[test]
    fn reads_any_span_forwards_and_backwards_through_its_windows() {
        let text: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (_d, _p, lines) = file_of(&text);
        let spans = [
            (0u64, 10usize),
            (5, 100),
            (70_000, 3),
            (200_000, 90_000),
            (299_990, 10),
        ];
        for (at, len) in spans.iter().chain(spans.iter().rev()) {
            let got = lines.read(*at, *len).unwrap();
            assert_eq!(&got[..], &text[*at as usize..*at as usize + len]);
        }
        // Backwards, line by line: every read still gives its own bytes.
        for at in (0..1000u64).rev().map(|i| i * 97) {
            assert_eq!(
                &lines.read(at, 50).unwrap()[..],
                &text[at as usize..at as usize + 50]
            );
        }
        assert!(!lines.failed());
    }

    #[test]
    fn a_truncated_file_is_an_error_remembered_not_empty_bytes() {
        let (_d, path, lines) = file_of(&[b'x'; 200_000]);
        assert_eq!(lines.read(150_000, 10).unwrap().len(), 10);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1000)
            .unwrap();
        assert_eq!(lines.read(10, 10).map(|b| b.len()), Ok(10));
        assert_eq!(lines.read(100_000, 10), Err(LineGone));
        assert!(lines.failed());
        assert_eq!(lines.read(u64::MAX - 2, 10), Err(LineGone));
    }

    #[test]
    fn a_file_replaced_by_a_rename_still_reads_as_it_was_indexed() {
        let (dir, path, lines) = file_of(b"old line one\nold line two\n");
        let other = dir.path().join("new.jsonl");
        std::fs::File::create(&other)
            .unwrap()
            .write_all(b"NEW\n")
            .unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(&lines.read(13, 12).unwrap()[..], b"old line two");
        assert!(!lines.failed());
    }
}
