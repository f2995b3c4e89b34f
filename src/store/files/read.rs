//! Reading session files: only regular files, up to the size limit, every walk confined
//! ([`super::confined`]); large files read in parallel pieces and parsed where they were read;
//! what another writer appended since a [`FileStamp`] read incrementally ([`read_tail`]).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::confined::{self, FileStamp};
use super::open::open_regular;
use super::write::{backup_original, confined_err, rewrite};
use super::{FileLines, Limits};
use crate::session::{reader, ReadOutcome, SessionTree};
use crate::store::{io_err, StoreError};

/// What loading found and (when writing is allowed) fixed.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub skipped_lines: usize,
    /// The line numbers (from 1) of the first skipped lines (`reader::REPORTED_SKIPS`).
    pub skipped_line_numbers: Vec<u64>,
    pub needed_newline_repair: bool,
    pub migrated: bool,
    /// The header's version as read (before migration).
    pub original_version: f64,
    /// Where the original was kept when a migration rewrote the file.
    pub backup: Option<PathBuf>,
    /// The file the entries read their lines back from (`None` when they hold their bytes):
    /// the session's storage keeps it to learn of a line that could not be read.
    pub lines: Option<Arc<FileLines>>,
}

impl LoadReport {
    /// The skipped lines for a person: `2 malformed lines skipped (lines 3, 9)`, the numbers
    /// of the first ones when there are more; `None` when none was.
    pub fn skipped_text(&self) -> Option<String> {
        let n = self.skipped_lines;
        if n == 0 {
            return None;
        }
        let what = if n == 1 {
            "1 malformed line skipped".to_owned()
        } else {
            format!("{n} malformed lines skipped")
        };
        let numbers: Vec<String> = self
            .skipped_line_numbers
            .iter()
            .map(u64::to_string)
            .collect();
        Some(match numbers.len() {
            0 => what,
            1 if n == 1 => format!("{what} (line {})", numbers[0]),
            k if k < n => format!("{what} (lines {}, …)", numbers.join(", ")),
            _ => format!("{what} (lines {})", numbers.join(", ")),
        })
    }
}

/// The line numbers (from 1) of the lines beginning at `offsets` (ascending) in the file at
/// `path`: its newlines before each, counted in one read up to the last. Empty when the file
/// cannot be read (the count of skipped lines still says how many).
fn line_numbers(path: &Path, offsets: &[u64]) -> Vec<u64> {
    let Some(&last) = offsets.last() else {
        return Vec::new();
    };
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    let mut head = Vec::new();
    if file.take(last).read_to_end(&mut head).is_err() {
        return Vec::new();
    }
    let mut newlines = 0u64;
    let mut counted = 0usize;
    offsets
        .iter()
        .map(|&at| {
            let upto = (at as usize).min(head.len());
            newlines += memchr::memchr_iter(b'\n', &head[counted..upto]).count() as u64;
            counted = upto;
            newlines + 1
        })
        .collect()
}

/// Below this many expected bytes (one piece) a file is read by one `read` loop and parsed on
/// the calling thread; from there on, by [`read_pieces`].
const PARALLEL_READ_MIN: u64 = reader::PIECE_BYTES as u64;

/// Reads at most `limit` bytes from `f`'s current position.
fn read_capped(
    f: &mut File,
    path: &Path,
    expected: u64,
    limit: u64,
) -> Result<Vec<u8>, StoreError> {
    let mut pieces = read_capped_with(f, path, expected, limit, |_, piece| piece)?;
    if pieces.len() == 1 {
        return Ok(pieces.pop().unwrap_or_default());
    }
    let mut bytes = Vec::with_capacity(pieces.iter().map(Vec::len).sum());
    pieces.iter().for_each(|p| bytes.extend_from_slice(p));
    Ok(bytes)
}

/// Reads at most `limit` bytes from `f`'s current position, as consecutive pieces, each handed
/// to `then` with where it begins in the file by the thread that read it (one piece for a
/// small file).
fn read_capped_with<T: Send>(
    mut f: &File,
    path: &Path,
    expected: u64,
    limit: u64,
    then: impl Fn(u64, Vec<u8>) -> T + Sync,
) -> Result<Vec<T>, StoreError> {
    let expected = expected.min(limit);
    let mut total = 0u64;
    let mut out = Vec::new();
    let start = f.stream_position().map_err(io_err(path))?;
    if expected >= PARALLEL_READ_MIN {
        for (len, piece) in read_pieces(f, start, expected as usize, &then).map_err(io_err(path))? {
            total += len as u64;
            out.push(piece);
        }
        // What the file grew by meanwhile (or the end-of-file check) is read as usual.
        f.seek(SeekFrom::Start(start + total))
            .map_err(io_err(path))?;
    }
    let mut rest = Vec::with_capacity((expected - total.min(expected)) as usize);
    f.take(limit + 1 - total)
        .read_to_end(&mut rest)
        .map_err(io_err(path))?;
    total += rest.len() as u64;
    if total > limit {
        return Err(StoreError::TooLarge {
            path: path.to_owned(),
            size: total,
            limit,
        });
    }
    if !rest.is_empty() || out.is_empty() {
        out.push(then(start + total - rest.len() as u64, rest));
    }
    Ok(out)
}

/// Reads up to `len` bytes of `f` from `start` in pieces of [`reader::PIECE_BYTES`] on up to
/// eight threads (`pread`; each thread takes the next piece when it is done with one), and
/// hands each piece to `then` on the thread that read it, while its bytes are still in that
/// core's cache: the reader parses each piece there, so reading and parsing overlap. Each
/// piece's fresh pages are populated in one call just before it is read into them: opening a
/// large session is otherwise dominated by the kernel, one thread taking a fault for every
/// 4 KiB page of fresh memory while copying the page cache into it (measured on a 100 MB
/// file: 108 ms for one `read` into fresh memory, 43 + 26 ms for populate-then-read). A
/// mapping of the file itself would avoid the copy, but entries keep slices of the buffers for
/// the session's life, and a file another writer truncates would turn those reads into
/// SIGBUS. Returns each piece's length and result, up to the first short piece (the file ended
/// there).
///
/// [`reader::PIECE_BYTES`]: crate::session::reader::PIECE_BYTES
fn read_pieces<T: Send>(
    f: &File,
    start: u64,
    len: usize,
    then: &(impl Fn(u64, Vec<u8>) -> T + Sync),
) -> std::io::Result<Vec<(usize, T)>> {
    use crate::session::reader::PIECE_BYTES;
    let n = len.div_ceil(PIECE_BYTES);
    let read = crate::cpu::par_map_ordered(n, |i| -> std::io::Result<(usize, bool, T)> {
        let at = i * PIECE_BYTES;
        let want = (len - at).min(PIECE_BYTES);
        let mut buf = match SPARE_PIECE.take() {
            // A buffer given back by the last piece's parse: its pages are in already.
            Some(mut spare) => {
                spare.clear();
                spare.reserve_exact(want);
                spare
            }
            None => {
                let mut fresh = Vec::with_capacity(want);
                populate(fresh.spare_capacity_mut());
                fresh
            }
        };
        while buf.len() < want {
            let offset = start + (at + buf.len()) as u64;
            match read_at_into(f, &mut buf, want, offset) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let filled = buf.len();
        Ok((filled, filled < want, then(start + at as u64, buf)))
    });
    // A buffer given back on this thread (when the pieces were read here) is not kept.
    SPARE_PIECE.take();
    let mut out = Vec::with_capacity(n);
    for piece in read {
        let (got, short, piece) = piece?;
        out.push((got, piece));
        if short {
            break;
        }
    }
    Ok(out)
}

/// Reads from `f` at `offset` into `buf`'s spare capacity, up to a length of `want`, and
/// returns how many bytes came (0 at the end of the file). The bytes land in memory nothing has
/// written yet: a piece buffer is neither zeroed first nor written twice (`calloc` has to clear
/// memory the allocator reuses, which was 7% of a warm 100 MB open).
pub(super) fn read_at_into(
    f: &File,
    buf: &mut Vec<u8>,
    want: usize,
    offset: u64,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let room = want
        .saturating_sub(buf.len())
        .min(buf.capacity() - buf.len());
    let offset = libc::off_t::try_from(offset)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let spare = buf.spare_capacity_mut();
    // SAFETY: `pread` writes at most `room` bytes, which is within the spare capacity, into
    // memory this function borrows mutably, and reads nothing from it.
    let got = unsafe { libc::pread(f.as_raw_fd(), spare.as_mut_ptr().cast(), room, offset) };
    let got = usize::try_from(got).map_err(|_| std::io::Error::last_os_error())?;
    // SAFETY: the kernel initialized the first `got` (<= `room`) bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + got) };
    Ok(got)
}

/// Faults in the whole pages of `buf` in one call (`MADV_POPULATE_WRITE`, Linux 5.14), instead
/// of one fault per page as they are first written. A hint: on older kernels the call fails and
/// the pages fault in as usual.
fn populate(buf: &mut [std::mem::MaybeUninit<u8>]) {
    const PAGE: usize = 4096;
    let addr = buf.as_mut_ptr() as usize;
    let begin = addr.next_multiple_of(PAGE);
    let end = (addr + buf.len()) & !(PAGE - 1);
    if end > begin {
        // SAFETY: the range lies inside `buf`, which this function borrows mutably; populating
        // for write maps the pages without changing their contents.
        unsafe {
            libc::madvise(
                begin as *mut libc::c_void,
                end - begin,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }
}

/// How long a torn last line must stay unchanged before compactd repairs it (it may be another
/// writer's line still being written).
pub const TORN_LINE_SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

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
    load_with(&resolved(path), write, &Limits::default()).map(|(t, r, _)| (t, r))
}

/// A path a user named on the command line, made absolute and with its links resolved once
/// (as a backend's `locate` does): the reads then walk it without following any.
fn resolved(path: &Path) -> PathBuf {
    confined::resolve(&absolute(path))
}

/// What a read of the file at `abs` gives, as the tree and the load report.
fn loaded(abs: &Path, outcome: ReadOutcome) -> Result<(SessionTree, LoadReport), StoreError> {
    let parsed = match outcome {
        ReadOutcome::Session(p) => p,
        ReadOutcome::NotASession(why) => {
            return Err(StoreError::NotASession(abs.to_owned(), format!(": {why}")))
        }
        ReadOutcome::Empty => return Err(StoreError::Empty(abs.to_owned())),
    };
    let report = LoadReport {
        skipped_lines: parsed.skipped_lines,
        skipped_line_numbers: line_numbers(abs, &parsed.skipped_at),
        needed_newline_repair: parsed.needs_newline_repair,
        migrated: parsed.migrated,
        original_version: parsed.original_version,
        backup: None,
        lines: None,
    };
    Ok((SessionTree::from_parsed(parsed), report))
}

/// [`load`] for a reader of facts only (`compactd inspect`'s overview), nothing written: the
/// entries keep no bytes ([`crate::session::Entry::without_bytes`]), so a large file is read
/// through one buffer per thread, reused piece after piece, and never held (a fresh process
/// otherwise spends much of its time faulting in, and at exit freeing, memory for the whole
/// file). A file of an older version is loaded whole, as [`load`] does: its migration needs
/// every line.
pub fn load_facts(path: &Path) -> Result<(SessionTree, LoadReport), StoreError> {
    let limits = Limits::default();
    let abs = resolved(path);
    let (f, meta) = open_regular(&abs, &limits)?;
    let pieces = read_capped_with(&f, &abs, meta.len(), limits.max_bytes, |at, piece| {
        let (parsed, buffer) = reader::parse_piece_facts(piece.into(), at);
        if let Some(buffer) = buffer {
            SPARE_PIECE.set(Some(buffer));
        }
        parsed
    })?;
    match reader::read_fact_pieces(pieces) {
        Some(outcome) => loaded(&abs, outcome),
        None => load(path, false),
    }
}

thread_local! {
    /// A piece buffer given back after parsing ([`load_facts`]), for this thread's next piece.
    static SPARE_PIECE: std::cell::Cell<Option<Vec<u8>>> = const { std::cell::Cell::new(None) };
}

/// [`load`] under explicit limits, also returning what was seen of the file. `path` is the
/// path a backend located (absolute, links resolved when it was checked), read without
/// following a link ([`open_regular`]).
pub fn load_with(
    path: &Path,
    write: bool,
    limits: &Limits,
) -> Result<(SessionTree, LoadReport, FileStamp), StoreError> {
    let abs = absolute(path);
    let (f, meta) = open_regular(&abs, limits)?;
    load_open(&abs, &f, &meta, write, limits)
}

/// [`load_with`] through `f`, the file at `abs` opened already (with `meta`, its metadata
/// then), for a caller that locked it first: the entries' lines are read back through a
/// duplicate of `f` ([`FileLines`]), which shares its open file and so its lock, so the caller
/// can close `f` and the session holds one descriptor.
pub fn load_open(
    abs: &Path,
    f: &File,
    meta: &fs::Metadata,
    write: bool,
    limits: &Limits,
) -> Result<(SessionTree, LoadReport, FileStamp), StoreError> {
    if meta.len() > limits.max_bytes {
        return Err(StoreError::TooLarge {
            path: abs.to_owned(),
            size: meta.len(),
            limit: limits.max_bytes,
        });
    }
    let (abs, meta) = (abs.to_owned(), meta.clone());
    let (outcome, read, len, lines) = match hold_bytes() {
        // The spans keep a descriptor of their own; `f` stays for the torn-line check below.
        false => match read_spans(f.try_clone().map_err(io_err(&abs))?, &abs, &meta, limits)? {
            Ok((outcome, len, lines)) => (outcome, Vec::new(), len, Some(lines)),
            // An older version's migration needs every line's bytes: read it whole.
            Err(()) => {
                let (f, meta) = open_regular(&abs, limits)?;
                read_held(&f, &abs, &meta, limits)
                    .map(|(outcome, read, len)| (outcome, read, len, None))?
            }
        },
        true => read_held(f, &abs, &meta, limits)
            .map(|(outcome, read, len)| (outcome, read, len, None))?,
    };
    let (tree, mut report) = loaded(&abs, outcome)?;
    report.lines = lines;
    let mut stamp = FileStamp::of(&meta, len);
    if write {
        if report.migrated {
            report.backup = Some(backup_original(
                &abs,
                report.original_version,
                &read.concat(),
                &meta,
            )?);
            stamp = rewrite(&abs, &tree, &meta)?;
        } else if report.needed_newline_repair {
            // The torn last line may be another writer's line still being written: repair it
            // only once it has stayed unchanged for a moment.
            std::thread::sleep(TORN_LINE_SETTLE);
            // The file read (its growth); that it is still the one at the path is checked by
            // the append below, on the descriptor it writes to.
            let now = f.metadata().map_err(io_err(&abs))?;
            if FileStamp::of(&now, now.len()) != stamp {
                return Err(StoreError::Busy(abs));
            }
            // The newline goes to the file that was read (checked on the descriptor written
            // to, reached without following a link), or nowhere.
            confined::append_line(&abs, b"", false, Some(&stamp)).map_err(|e| match e {
                confined::AppendError::Replaced => StoreError::Busy(abs.clone()),
                confined::AppendError::Io(e) => confined_err(&abs)(e),
            })?;
            stamp.len += 1;
        }
    }
    Ok((tree, report, stamp))
}

/// Whether sessions keep their files' bytes in memory, as compactd did before it read lines
/// back on demand (`COMPACTD_HOLD_BYTES=1`): the memory bench's baseline, in the same run.
fn hold_bytes() -> bool {
    static HOLD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HOLD.get_or_init(|| std::env::var_os("COMPACTD_HOLD_BYTES").is_some_and(|v| v == "1"))
}

/// Reads and parses a file whose entries keep slices of the pieces read (the whole file held):
/// what it reads as, the pieces' bytes (a migration's backup copies them) and the length read.
fn read_held(
    f: &File,
    abs: &Path,
    meta: &fs::Metadata,
    limits: &Limits,
) -> Result<(ReadOutcome, Vec<bytes::Bytes>, u64), StoreError> {
    // Each piece is parsed by the thread that read it (see `read_pieces`).
    let pieces = read_capped_with(f, abs, meta.len(), limits.max_bytes, |at, piece| {
        reader::parse_piece(piece.into(), at)
    })?;
    let read: Vec<bytes::Bytes> = pieces.iter().filter_map(|p| p.bytes().cloned()).collect();
    let len = pieces.iter().map(|p| p.len() as u64).sum();
    Ok((reader::read_pieces(pieces), read, len))
}

/// What [`read_spans`] read: the outcome, the length read and where the lines are read back
/// from; `Err(())` for a file of an older version.
type Spans = Result<(ReadOutcome, u64, Arc<FileLines>), ()>;

/// Reads and parses a file whose entries keep only their lines' spans, read back on demand
/// through `f` (kept as the [`FileLines`] returned): the file is read through one buffer per
/// thread, reused piece after piece, and never held. `Err(())` for a file of an older version,
/// whose migration needs every line (read it with [`read_held`]).
fn read_spans(
    f: File,
    abs: &Path,
    meta: &fs::Metadata,
    limits: &Limits,
) -> Result<Spans, StoreError> {
    let lines = Arc::new(FileLines::new(f));
    let source: Arc<dyn crate::session::LineSource> = lines.clone();
    let pieces = read_capped_with(
        lines.file(),
        abs,
        meta.len(),
        limits.max_bytes,
        |at, piece| {
            let (parsed, buffer) = reader::parse_piece_spans(piece.into(), at, &source);
            if let Some(buffer) = buffer {
                SPARE_PIECE.set(Some(buffer));
            }
            parsed
        },
    )?;
    let len = pieces.iter().map(|p| p.len() as u64).sum();
    Ok(reader::read_fact_pieces(pieces)
        .map(|outcome| (outcome, len, lines))
        .ok_or(()))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    Unchanged,
    /// The bytes appended since (complete lines and possibly a partial last one).
    Grown(Vec<u8>),
    /// Another file now has this name (rename over it, or delete and recreate).
    Replaced,
    /// Shorter than compactd last saw it.
    Truncated,
}

/// Reads what was appended to `path` since `stamp`.
pub fn read_tail(path: &Path, stamp: &FileStamp, limits: &Limits) -> Result<Tail, StoreError> {
    let (mut f, meta) = match open_regular(path, limits) {
        Ok(x) => x,
        // A link on the way now (refused, never followed) is no longer the file last seen.
        Err(
            StoreError::NotFound(_) | StoreError::NotRegular { .. } | StoreError::NotAllowed(_),
        ) => return Ok(Tail::Replaced),
        Err(e) => return Err(e),
    };
    let now = FileStamp::of(&meta, meta.len());
    if (now.dev, now.ino) != (stamp.dev, stamp.ino) {
        return Ok(Tail::Replaced);
    }
    if now.len < stamp.len {
        return Ok(Tail::Truncated);
    }
    if now.len == stamp.len {
        return Ok(Tail::Unchanged);
    }
    f.seek(SeekFrom::Start(stamp.len)).map_err(io_err(path))?;
    let bytes = read_capped(&mut f, path, now.len - stamp.len, limits.max_bytes)?;
    Ok(Tail::Grown(bytes))
}

#[cfg(test)]
mod tests {
    use super::super::{append_raw, try_lock};
    use super::*;

    /// Appends `"\n"` if the file is non-empty and does not end with one (a test's other writer).
    fn ensure_trailing_newline(path: &Path) -> Result<(), StoreError> {
        use std::io::Write;
        let mut f = fs::OpenOptions::new()
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

    /// Bytes whose every position is distinguishable, so a part read at the wrong offset shows.
    fn numbered(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    /// [`read_pieces`]'s pieces, joined.
    /// The pieces read in parallel, joined; each must say where in the file it begins.
    fn read_parallel(f: &File, start: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let pieces = read_pieces(f, start, len, &|at, piece| (at, piece))?;
        let mut next = start;
        for (len, (at, piece)) in &pieces {
            assert_eq!(*len, piece.len());
            assert_eq!(*at, next, "where a piece begins");
            next += *len as u64;
        }
        Ok(pieces.into_iter().flat_map(|(_, (_, p))| p).collect())
    }

    #[test]
    fn a_parallel_read_matches_a_plain_read_at_any_start_and_length() {
        use crate::session::reader::PIECE_BYTES;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        let data = numbered(3 * PIECE_BYTES + 4096 + 17);
        fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        for (start, len) in [
            (0, data.len()),
            (5, 10_001),
            (4096, 1),
            (0, 0),
            (PIECE_BYTES - 3, 2 * PIECE_BYTES + 7),
            (1, 3 * PIECE_BYTES),
        ] {
            let got = read_parallel(&f, start as u64, len).unwrap();
            assert!(got == data[start..start + len], "start {start}, len {len}");
        }
        // A file shorter than expected (truncated since its size was read): what is there.
        let got = read_parallel(&f, 100, data.len()).unwrap();
        assert!(got == data[100..]);
    }

    /// The overview `inspect` prints, from a full load and from a load of facts only.
    fn overviews(path: &Path) -> (String, String) {
        let settings = crate::compaction::tokens::CompactionSettings::default();
        let show = |(tree, mut report): (SessionTree, LoadReport)| {
            // Where the lines are read back from is not part of what a read found.
            report.lines = None;
            let mut o = crate::report::overview(
                &tree,
                200_000,
                &settings,
                crate::session::PiVersion::V0_85,
            );
            if report.migrated {
                // A migration gives fresh random ids.
                o.leaf_id = None;
            }
            format!("{o:?} {report:?}")
        };
        let full = load(path, false)
            .map(show)
            .unwrap_or_else(|e| e.to_string());
        let facts = load_facts(path).map(show).unwrap_or_else(|e| e.to_string());
        (full, facts)
    }

    /// Every conformance session (recorded from Pi), a session of many pieces with tool calls,
    /// a compaction and a torn last line, and files of an older version or none: the overview
    /// from facts only is the overview from the whole file.
    #[test]
    fn the_overview_from_facts_only_is_the_overview_from_the_whole_file() {
        let cases = crate::test_fixtures::cases_with(
            "the_overview_from_facts_only_is_the_overview_from_the_whole_file",
            "session.jsonl",
        );
        for case in &cases {
            let path = case.join("session.jsonl");
            let (full, facts) = overviews(&path);
            assert_eq!(full, facts, "{}", path.display());
        }
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.jsonl");
        let mut text = String::from(
            "{\"type\":\"session\",\"version\":3,\"id\":\"h\",\"timestamp\":\"t\",\"cwd\":\"/p\"}\n",
        );
        let mut parent = String::from("null");
        let mut i = 0;
        while text.len() < 3 * crate::session::reader::PIECE_BYTES + 1000 {
            let id = format!("e{i:06}");
            let body = "line of output é\\n".repeat((i * 7919) % 400);
            let line = match i % 5 {
                0 => format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\",\"message\":{{\"role\":\"user\",\"content\":\"{body}\",\"timestamp\":1}}}}"),
                1 => format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\",\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"toolCall\",\"id\":\"c{i}\",\"name\":\"read\",\"arguments\":{{\"path\":\"src/f{}.rs\"}}}}],\"usage\":{{\"input\":{i},\"output\":5,\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":{}}},\"stopReason\":\"toolUse\",\"timestamp\":1}}}}", i % 7, i + 5),
                2 => format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\",\"message\":{{\"role\":\"toolResult\",\"toolCallId\":\"c{}\",\"toolName\":\"read\",\"content\":[{{\"type\":\"text\",\"text\":\"{body}\"}}],\"isError\":false,\"timestamp\":1}}}}", i - 1),
                3 if i == 503 => format!("{{\"type\":\"compaction\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\",\"summary\":\"s\",\"firstKeptEntryId\":\"e000500\",\"tokensBefore\":9}}"),
                _ => format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\",\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"{body}\"}}],\"stopReason\":\"stop\",\"timestamp\":1}}}}"),
            };
            text.push_str(&line);
            text.push('\n');
            parent = format!("\"{id}\"");
            i += 1;
        }
        text.push_str("{\"type\":\"message\",\"id\":\"torn\"");
        fs::write(&big, &text).unwrap();
        let (full, facts) = overviews(&big);
        assert!(full.starts_with("Overview"), "{full}");
        assert_eq!(full, facts);
        let older = dir.path().join("v2.jsonl");
        fs::write(
            &older,
            format!(
                "{{\"type\":\"session\",\"version\":2,\"id\":\"h\"}}\n{}",
                &text[text.find('\n').unwrap() + 1..]
            ),
        )
        .unwrap();
        let (full, facts) = overviews(&older);
        assert!(full.starts_with("Overview"), "{full}");
        assert_eq!(full, facts);
        for (name, bytes) in [("empty", ""), ("other", "{\"type\":\"message\"}\n")] {
            let p = dir.path().join(name);
            fs::write(&p, bytes).unwrap();
            let (full, facts) = overviews(&p);
            assert_eq!(full, facts, "{name}");
        }
    }

    #[test]
    fn a_large_file_read_in_parallel_keeps_what_it_grew_by_and_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        let data = numbered(PARALLEL_READ_MIN as usize + 12_345);
        fs::write(&p, &data).unwrap();
        let mut f = File::open(&p).unwrap();
        // Sized as it was before it grew by 12 345 bytes: the growth is read too.
        let got = read_capped(&mut f, &p, PARALLEL_READ_MIN, u64::MAX - 1).unwrap();
        assert!(got == data, "bytes differ from the file");
        // Over the limit: refused, however it was read.
        let mut f = File::open(&p).unwrap();
        let limit = PARALLEL_READ_MIN + 10;
        assert!(matches!(
            read_capped(&mut f, &p, data.len() as u64, limit),
            Err(StoreError::TooLarge { .. })
        ));
    }

    #[test]
    fn append_repairs_missing_newline_and_keeps_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let original = "{\"type\":\"session\",\"version\":3,\"id\":\"x\"}\n{\"type\":\"label\",\"id\":\"a\",\"parentId\":null}";
        fs::write(&p, original).unwrap();
        ensure_trailing_newline(&p).unwrap();
        append_raw(&p, br#"{"type":"label","id":"b","parentId":"a"}"#, false).unwrap();
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

    /// Reads walk the checked path as writes do: a directory or the file itself swapped for a
    /// link (after the roots were checked) is refused (`path_not_allowed`), never read through,
    /// and a catch-up sees the file last seen gone (`Replaced`); the same path without a link
    /// reads as before.
    #[test]
    fn reads_never_follow_a_link_in_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        let outside = base.join("outside");
        fs::create_dir_all(&outside).unwrap();
        let text = "{\"type\":\"session\",\"version\":3,\"id\":\"x\",\"cwd\":\"/w\"}\n";
        fs::write(outside.join("s.jsonl"), text).unwrap();
        let limits = Limits::default();
        let (_, _, stamp) = load_with(&outside.join("s.jsonl"), false, &limits).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("dir-link")).unwrap();
        std::os::unix::fs::symlink(outside.join("s.jsonl"), base.join("file-link")).unwrap();
        for through in [base.join("dir-link/s.jsonl"), base.join("file-link")] {
            let err = load_with(&through, false, &limits).unwrap_err();
            assert!(
                matches!(&err, StoreError::NotAllowed(m) if m.contains("symbolic link")),
                "{}: {err}",
                through.display()
            );
            assert!(matches!(try_lock(&through), Err(StoreError::NotAllowed(_))));
            assert_eq!(
                read_tail(&through, &stamp, &limits).unwrap(),
                Tail::Replaced
            );
        }
        // A command-line path is resolved once, as `locate` does, then read the same way.
        assert!(load(&base.join("dir-link/s.jsonl"), false).is_ok());
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
