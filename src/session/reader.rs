//! Reading a Pi session file (sessions.md §2.1, §8): split on `\n`, skip blank and malformed
//! lines, require a `session` header first, migrate old versions in memory.
//!
//! This is pure: it takes the file's bytes and returns what Pi would hold in memory plus what
//! Pi would then write (a newline repair, or a full rewrite after migration). The storage shell
//! (`crate::store`) performs those writes.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use bytes::Bytes;

use super::entry::{parse_line_bytes, Entry, LineSource};
use super::ids::new_entry_id_in;
use super::vocab::EntryKind;

/// The current session format version.
pub const CURRENT_VERSION: i64 = 3;

/// A session file as Pi holds it after `SessionManager.open`.
#[derive(Debug, Clone)]
pub struct ParsedSession {
    /// The header object (`type: "session"`).
    pub header: Value,
    /// Every non-header entry, in file order (shared handles, made on the parsing threads:
    /// the tree keeps them as they are).
    pub entries: Vec<Arc<Entry>>,
    /// The file did not end with `\n` after its last non-blank piece: Pi appends one newline.
    pub needs_newline_repair: bool,
    /// A version migration ran: Pi rewrites the whole file.
    pub migrated: bool,
    /// Lines that were not valid JSON (skipped, as Pi does; reported for diagnostics).
    pub skipped_lines: usize,
    /// Where the first [`REPORTED_SKIPS`] of them begin in the file (byte offsets), so a report
    /// can name their lines.
    pub skipped_at: Vec<u64>,
    /// The header's version as read, before any migration (1 when missing).
    pub original_version: f64,
}

/// How many skipped lines a read names (the count covers them all).
pub const REPORTED_SKIPS: usize = 10;

/// Counts a skipped line beginning at `at`, keeping the first [`REPORTED_SKIPS`] offsets.
fn note_skip(count: &mut usize, at: &mut Vec<u64>, offset: u64) {
    *count += 1;
    if at.len() < REPORTED_SKIPS {
        at.push(offset);
    }
}

/// What a file's bytes turned out to be.
#[derive(Debug, Clone)]
pub enum ReadOutcome {
    /// No line parsed (0-byte or blank file): Pi re-initialises it.
    Empty,
    /// Lines parsed, but the first is not a `session` header with a string id; why, in words.
    NotASession(String),
    Session(ParsedSession),
}

/// Bytes per piece when a large file is parsed in pieces. Small enough that a piece the storage
/// shell has just read is still in the cache when the same thread parses it, and that the
/// threads share the work evenly (each takes the next piece when done); large enough that the
/// lines crossing pieces' edges, joined and parsed one by one after, stay few.
pub const PIECE_BYTES: usize = 2 << 20;

/// A piece of a file with its lines parsed: those that begin and end inside it (blank lines
/// left out). The bytes before its first newline and after its last belong to lines it shares
/// with its neighbours; [`join_pieces`] parses those.
struct Piece<T> {
    /// Where the piece begins in the file (0 for bytes not read from a file).
    at: u64,
    /// The bytes before its first `\n`: all of them when it has none (it lies inside a line).
    head: Bytes,
    /// The bytes after its last `\n`; `None` when it has none.
    tail: Option<Bytes>,
    /// Each line parsed, or where a malformed one begins in the file.
    lines: Vec<Result<T, u64>>,
    len: usize,
    last_byte: Option<u8>,
    /// The whole piece, unless its entries keep no slices of it ([`Piece::detach`]).
    bytes: Option<Bytes>,
}

impl<T> Piece<T> {
    /// The piece without its buffer: its edges copied, nothing else kept.
    fn detach(mut self) -> (Piece<T>, Option<Bytes>) {
        self.head = Bytes::copy_from_slice(&self.head);
        self.tail = self.tail.map(|t| Bytes::copy_from_slice(&t));
        let bytes = self.bytes.take();
        (self, bytes)
    }

    /// Where the piece's tail begins in the file.
    fn tail_at(&self) -> u64 {
        self.at + (self.len - self.tail.as_ref().map_or(0, Bytes::len)) as u64
    }
}

/// A line parser: the line's bytes and where the line begins in the file.
trait LineFn<T>: Fn(Bytes, u64) -> Option<Result<T, ()>> {}
impl<T, F: Fn(Bytes, u64) -> Option<Result<T, ()>>> LineFn<T> for F {}

fn parse_piece_with<T>(bytes: Bytes, at: u64, f: &impl LineFn<T>) -> Piece<T> {
    let edges = memchr::memchr(b'\n', &bytes).zip(memchr::memrchr(b'\n', &bytes));
    let mut lines = Vec::new();
    let (head, tail) = match edges {
        Some((first, last)) => {
            let inner = bytes.slice(first + 1..last + 1);
            let inner_at = at + first as u64 + 1;
            lines.reserve(inner.len() / 1024 + 1);
            lines.extend(lines_of(&inner).filter_map(|(o, l)| {
                let line_at = inner_at + o as u64;
                f(l, line_at).map(|r| r.map_err(|()| line_at))
            }));
            (bytes.slice(..first), Some(bytes.slice(last + 1..)))
        }
        None => (bytes.clone(), None),
    };
    Piece {
        at,
        head,
        tail,
        lines,
        len: bytes.len(),
        last_byte: bytes.last().copied(),
        bytes: Some(bytes),
    }
}

/// Every line of the pieces, in file order, to `take`: each piece's own lines as parsed, and
/// the lines across their edges joined (copied, when a line spans pieces) and parsed with `f`.
fn join_pieces<T>(pieces: Vec<Piece<T>>, f: impl LineFn<T>, mut take: impl FnMut(Result<T, u64>)) {
    // The parts of the line being joined, which began in an earlier piece, and where it began.
    let mut open: Vec<Bytes> = Vec::new();
    let mut open_at = 0u64;
    let joined = |open: &mut Vec<Bytes>, at: u64| -> Option<Result<T, u64>> {
        let line = match open.len() {
            0 => return None,
            1 => open.pop().unwrap_or_default(),
            _ => {
                let mut line = Vec::with_capacity(open.iter().map(Bytes::len).sum());
                open.drain(..)
                    .for_each(|part| line.extend_from_slice(&part));
                Bytes::from(line)
            }
        };
        f(line, at).map(|r| r.map_err(|()| at))
    };
    for mut piece in pieces {
        let tail_at = piece.tail_at();
        if open.is_empty() {
            open_at = piece.at;
        }
        open.push(std::mem::take(&mut piece.head));
        let Some(tail) = piece.tail else {
            continue;
        };
        if let Some(r) = joined(&mut open, open_at) {
            take(r);
        }
        piece.lines.into_iter().for_each(&mut take);
        open.push(tail);
        open_at = tail_at;
    }
    if let Some(r) = joined(&mut open, open_at) {
        take(r);
    }
}

/// `bytes` in pieces of [`PIECE_BYTES`] (shared slices), each parsed with `f` on
/// [`crate::cpu::par_map_ordered`]'s threads (one piece, a small file, on this thread).
fn parse_in_pieces<T: Send>(bytes: &Bytes, f: impl LineFn<T> + Sync) -> Vec<Piece<T>> {
    let n = bytes.len().div_ceil(PIECE_BYTES);
    crate::cpu::par_map_ordered(n, |i| {
        let end = ((i + 1) * PIECE_BYTES).min(bytes.len());
        parse_piece_with(
            bytes.slice(i * PIECE_BYTES..end),
            (i * PIECE_BYTES) as u64,
            &f,
        )
    })
}

/// What the entries of a parsed piece keep of their lines.
#[derive(Clone, Debug)]
enum Keep {
    /// Slices of the piece's buffer (the buffer is held as long as they are).
    Bytes,
    /// Nothing: facts only (`compactd inspect`'s overview).
    Facts,
    /// Their spans in the file `source` reads back (a session a daemon keeps open).
    Spans(Arc<dyn LineSource>),
}

impl Keep {
    /// An entry from a line beginning at `at`, shared (made on the parsing thread, kept as it
    /// is by the tree). A `session` line keeps its bytes in every mode: the header check reads
    /// it.
    fn entry(&self, line: Bytes, at: u64) -> Option<Result<Arc<Entry>, ()>> {
        Some(Entry::from_line(line)?.map(|e| {
            Arc::new(match self {
                _ if is_session_entry(&e) => e,
                Keep::Bytes => e,
                Keep::Facts => e.without_bytes(),
                Keep::Spans(source) => e.stored_at(source, at),
            })
        }))
    }
}

/// A piece of a session file read as a current-version session (see [`read_pieces`]).
pub struct ParsedPiece(Piece<Arc<Entry>>, Keep);

impl ParsedPiece {
    /// The piece's bytes, exactly as read (`None` for a piece whose entries keep none).
    pub fn bytes(&self) -> Option<&Bytes> {
        self.0.bytes.as_ref()
    }

    pub fn len(&self) -> usize {
        self.0.len
    }

    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
}

/// Parses the lines of one piece of a session file (consecutive pieces, in any order and on
/// any thread, then go to [`read_pieces`]). The storage shell reads a large file piece by
/// piece on several threads and parses each piece right after reading it, so reading and
/// parsing overlap and each piece is parsed while its bytes are still in the cache. The
/// entries keep slices of `bytes`. `at` is where the piece begins in the file (so a skipped
/// line can be named).
pub fn parse_piece(bytes: Bytes, at: u64) -> ParsedPiece {
    ParsedPiece(
        parse_piece_with(bytes, at, &|l, at| Keep::Bytes.entry(l, at)),
        Keep::Bytes,
    )
}

/// A piece whose entries keep none of its bytes (their edges copied), so nothing it returns
/// refers to `bytes`. The buffer comes back (when nothing else holds it) to be read into
/// again: a large file is then read through one buffer per thread, and never held.
fn detached(bytes: Bytes, at: u64, keep: Keep) -> (ParsedPiece, Option<Vec<u8>>) {
    let (piece, bytes) = parse_piece_with(bytes, at, &|l, a| keep.entry(l, a)).detach();
    let buffer = bytes.and_then(|b| b.try_into_mut().ok()).map(Vec::from);
    (ParsedPiece(piece, keep), buffer)
}

/// [`parse_piece`] for a reader of facts only: its entries keep no bytes (see [`detached`]).
pub fn parse_piece_facts(bytes: Bytes, at: u64) -> (ParsedPiece, Option<Vec<u8>>) {
    detached(bytes, at, Keep::Facts)
}

/// [`parse_piece`] for a session kept open: each entry keeps its line's span in the file
/// (the piece begins at `at`), read back through `source` when asked for, and the piece's
/// buffer comes back as [`parse_piece_facts`]' does. Memory then holds the facts, not the file.
pub fn parse_piece_spans(
    bytes: Bytes,
    at: u64,
    source: &Arc<dyn LineSource>,
) -> (ParsedPiece, Option<Vec<u8>>) {
    detached(bytes, at, Keep::Spans(Arc::clone(source)))
}

fn is_session_line(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("session")
}

/// The lines of `bytes` as shared slices, each with where it begins in `bytes`: every line,
/// and what follows the last newline when `bytes` does not end with one (bytes that end with
/// their newline yield no empty last line).
fn lines_of(bytes: &Bytes) -> impl Iterator<Item = (usize, Bytes)> + '_ {
    let mut start = 0usize;
    let mut newlines = memchr::memchr_iter(b'\n', bytes);
    std::iter::from_fn(move || match newlines.next() {
        Some(nl) => {
            let line = bytes.slice(start..nl);
            let at = start;
            start = nl + 1;
            Some((at, line))
        }
        None if start < bytes.len() => {
            let rest = bytes.slice(start..);
            let at = start;
            start = bytes.len();
            Some((at, rest))
        }
        None => None,
    })
}

/// Parses a session file's bytes as Pi's `loadEntriesFromFile` + `_loadEntries` do (copies them
/// once; the storage shell hands over its buffer with [`read_session_bytes`] instead).
pub fn read_session(bytes: &[u8]) -> ReadOutcome {
    read_session_bytes(Bytes::copy_from_slice(bytes))
}

/// [`read_session`] over an owned buffer: entries keep slices of it (see [`Entry`]), so the
/// file's bytes are held once and never copied.
pub fn read_session_bytes(bytes: Bytes) -> ReadOutcome {
    read_pieces(
        parse_in_pieces(&bytes, |l, at| Keep::Bytes.entry(l, at))
            .into_iter()
            .map(|p| ParsedPiece(p, Keep::Bytes))
            .collect(),
    )
}

/// The session that consecutive parsed pieces of a file (from [`parse_piece`]) make, as
/// [`read_session_bytes`] reads the same bytes. The pieces are parsed as a current-version
/// session, the common case; when the header turns out older, the file's bytes are read again
/// as values and migrated.
pub fn read_pieces(pieces: Vec<ParsedPiece>) -> ReadOutcome {
    let raw: Vec<Bytes> = pieces.iter().filter_map(|p| p.0.bytes.clone()).collect();
    assemble(pieces).unwrap_or_else(
        |Older {
             needs_newline_repair,
         }| {
            let mut all = Vec::with_capacity(raw.iter().map(Bytes::len).sum());
            raw.iter().for_each(|b| all.extend_from_slice(b));
            read_migrating(Bytes::from(all), needs_newline_repair)
        },
    )
}

/// [`read_pieces`] over pieces whose entries keep no bytes ([`parse_piece_facts`],
/// [`parse_piece_spans`]): `None` when the file is of an older version, whose migration needs
/// every line's bytes (read it whole instead).
pub fn read_fact_pieces(pieces: Vec<ParsedPiece>) -> Option<ReadOutcome> {
    assemble(pieces).ok()
}

/// The header is of an older version: the file must be read as values and migrated.
struct Older {
    needs_newline_repair: bool,
}

fn assemble(pieces: Vec<ParsedPiece>) -> Result<ReadOutcome, Older> {
    if pieces.iter().all(ParsedPiece::is_empty) {
        // Pi re-initialises only a 0-byte file.
        return Ok(ReadOutcome::Empty);
    }
    // Pi repairs a trailing piece after the last newline that is not empty ("pending").
    let needs_newline_repair = pieces
        .iter()
        .rev()
        .find_map(|p| p.0.last_byte)
        .is_some_and(|b| b != b'\n');
    let capacity = pieces.iter().map(|p| p.0.lines.len() + 1).sum();
    // Lines across edges keep what the pieces' lines keep.
    let keep = pieces.first().map_or(Keep::Bytes, |p| p.1.clone());
    // The first line that parses must be the header; a later `session` line is skipped.
    let mut header: Option<Arc<Entry>> = None;
    let mut entries = Vec::with_capacity(capacity);
    let mut skipped = 0usize;
    let mut skipped_at = Vec::new();
    let pieces = pieces.into_iter().map(|p| p.0).collect();
    join_pieces(
        pieces,
        |l, at| keep.entry(l, at),
        |line| match line {
            Err(offset) => note_skip(&mut skipped, &mut skipped_at, offset),
            Ok(e) if header.is_none() => header = Some(e),
            Ok(e) if is_session_entry(&e) => {}
            Ok(e) => entries.push(e),
        },
    );
    // A `session` line keeps its bytes in every mode (see `Keep::entry`).
    let first_kind = header.as_ref().map(|h| h.kind);
    let header = header
        .and_then(|h| h.raw().ok())
        .and_then(|h| parse_line_bytes(&h))
        .and_then(Result::ok)
        .filter(|h| is_session_line(h) && h.get("id").is_some_and(Value::is_string));
    let Some(header) = header else {
        return Ok(ReadOutcome::NotASession(not_a_session(first_kind, skipped)));
    };
    let original_version = header_version(&header);
    if original_version < CURRENT_VERSION as f64 {
        return Err(Older {
            needs_newline_repair,
        });
    }
    Ok(ReadOutcome::Session(ParsedSession {
        header,
        entries,
        needs_newline_repair,
        migrated: false,
        skipped_lines: skipped,
        skipped_at,
        original_version,
    }))
}

/// An older version's file: every line parsed as a value, migrated in memory (Pi then
/// rewrites the file), entries made from the migrated values.
fn read_migrating(bytes: Bytes, needs_newline_repair: bool) -> ReadOutcome {
    let pieces = parse_in_pieces(&bytes, |line, _| parse_line_bytes(&line));
    let mut values = Vec::new();
    let mut skipped = 0usize;
    let mut skipped_at = Vec::new();
    join_pieces(
        pieces,
        |line, _| parse_line_bytes(&line),
        |line| match line {
            Ok(v) => values.push(v),
            Err(offset) => note_skip(&mut skipped, &mut skipped_at, offset),
        },
    );
    let original_version = values.first().map_or(1.0, header_version);
    let migrated = migrate(&mut values);
    let mut iter = values.into_iter();
    let header = iter.next().unwrap_or(Value::Null);
    // Migrated entries are serialized anew: the file is rewritten with exactly these lines.
    let entries = iter
        .filter(|v| !is_session_line(v))
        .map(|v| Arc::new(Entry::from_value(v)))
        .collect();
    ReadOutcome::Session(ParsedSession {
        header,
        entries,
        needs_newline_repair,
        migrated,
        skipped_lines: skipped,
        skipped_at,
        original_version,
    })
}

/// Why a file whose first JSON line is an entry of `first` (`None`: no line is JSON) is no
/// session. Read from the entry's kind, which every reading mode keeps.
fn not_a_session(first: Option<EntryKind>, skipped: usize) -> String {
    match first {
        None => {
            format!("none of its {skipped} non-blank line(s) is JSON (is it a Pi session file?)")
        }
        Some(EntryKind::SessionHeader) => {
            "its `session` header has no string `id` (Pi cannot name the session)".to_owned()
        }
        Some(EntryKind::Unknown) => {
            "its first JSON line is no `session` header (Pi expects the header first)".to_owned()
        }
        Some(kind) => format!(
            "its first JSON line is a `{}` entry, where Pi expects the `session` header",
            kind.type_name()
        ),
    }
}

/// A later `session` line is skipped, as Pi's loader skips it.
fn is_session_entry(e: &Entry) -> bool {
    e.kind == super::entry::EntryKind::SessionHeader
}

/// The header's version (missing means 1).
pub fn header_version(header: &Value) -> f64 {
    header.get("version").and_then(Value::as_f64).unwrap_or(1.0)
}

/// Runs Pi's v1→v2→v3 migrations over all file objects (header first). Returns whether any ran.
pub fn migrate(values: &mut [Value]) -> bool {
    let version = values
        .iter()
        .find(|v| v.get("type").and_then(Value::as_str) == Some("session"))
        .map_or(1.0, header_version);
    if version >= CURRENT_VERSION as f64 {
        return false;
    }
    if version < 2.0 {
        migrate_v1_to_v2(values);
    }
    if version < 3.0 {
        migrate_v2_to_v3(values);
    }
    true
}

fn is_header(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("session")
}

/// v1 → v2: fresh ids, a linear parent chain, `firstKeptEntryIndex` → `firstKeptEntryId`.
fn migrate_v1_to_v2(values: &mut [Value]) {
    let mut taken: HashSet<String> = HashSet::new();
    let mut prev: Option<String> = None;
    for i in 0..values.len() {
        if is_header(&values[i]) {
            if let Some(o) = values[i].as_object_mut() {
                o.insert("version".into(), Value::from(2));
            }
            continue;
        }
        let id = new_entry_id_in(&mut taken);
        let keep_index = values[i]
            .get("firstKeptEntryIndex")
            .filter(|v| v.is_number())
            .and_then(Value::as_f64);
        let is_compaction = values[i].get("type").and_then(Value::as_str) == Some("compaction");
        // The target's id as it is at this moment: migrated if it comes earlier, original (usually
        // absent) if later, exactly as Pi's in-place loop sees it.
        let target_id: Option<Value> = match keep_index {
            Some(f) if is_compaction && f >= 0.0 && f.fract() == 0.0 => {
                let t = f as usize;
                values
                    .get(t)
                    .filter(|tv| !is_header(tv))
                    .map(|tv| tv.get("id").cloned().unwrap_or(Value::Null))
            }
            _ => None,
        };
        let Some(o) = values[i].as_object_mut() else {
            continue;
        };
        o.insert("id".into(), Value::from(id.clone()));
        o.insert(
            "parentId".into(),
            prev.clone().map_or(Value::Null, Value::from),
        );
        prev = Some(id);
        if is_compaction && keep_index.is_some() {
            match target_id {
                Some(Value::Null) | None => {}
                Some(tid) => {
                    o.insert("firstKeptEntryId".into(), tid);
                }
            }
            o.shift_remove("firstKeptEntryIndex");
        }
    }
}

/// v2 → v3: `hookMessage` messages become `custom`.
fn migrate_v2_to_v3(values: &mut [Value]) {
    for v in values.iter_mut() {
        if is_header(v) {
            if let Some(o) = v.as_object_mut() {
                o.insert("version".into(), Value::from(3));
            }
            continue;
        }
        if v.get("type").and_then(Value::as_str) != Some("message") {
            continue;
        }
        if let Some(m) = v.get_mut("message").and_then(Value::as_object_mut) {
            if m.get("role").and_then(Value::as_str) == Some("hookMessage") {
                m.insert("role".into(), Value::from("custom"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(text: &str) -> ParsedSession {
        match read_session(text.as_bytes()) {
            ReadOutcome::Session(s) => s,
            other => panic!("not a session: {other:?}"),
        }
    }

    /// A session of more than one piece (so its lines are parsed on several threads where there
    /// are cores), read entry for entry as a one-line-at-a-time reader would: same entries in
    /// file order, same skipped count, whatever lines sit at the pieces' edges.
    #[test]
    fn a_large_session_parsed_in_parts_matches_a_line_by_line_read() {
        let mut text = String::from("{\"type\":\"session\",\"version\":3,\"id\":\"h\",\"timestamp\":\"t\",\"cwd\":\"/p\"}\n");
        let mut expected_ids = Vec::new();
        let mut expected_bad = 0;
        let mut parent = String::from("null");
        for i in 0..6000 {
            match i % 97 {
                13 => text.push_str("\n   \n"),
                14 => {
                    text.push_str("{not json\n");
                    expected_bad += 1;
                }
                15 => text.push_str("{\"type\":\"session\",\"version\":3,\"id\":\"later\"}\n"),
                _ => {
                    let id = format!("e{i:05}");
                    // Lines of very different lengths, so part edges fall anywhere.
                    let body = "x".repeat((i * 7919) % 900);
                    text.push_str(&format!(
                        "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"t\",\"message\":{{\"role\":\"user\",\"content\":\"{body}\",\"timestamp\":1}}}}\n"
                    ));
                    parent = format!("\"{id}\"");
                    expected_ids.push(id);
                }
            }
        }
        // The last line has no newline: still read, and flagged for repair.
        text.push_str("{\"type\":\"label\",\"id\":\"last\",\"parentId\":null}");
        expected_ids.push("last".into());
        assert!(text.len() > PIECE_BYTES, "{} bytes", text.len());
        let s = session(&text);
        let ids: Vec<String> = s.entries.iter().filter_map(|e| e.id_owned()).collect();
        assert_eq!(ids, expected_ids);
        assert_eq!(s.skipped_lines, expected_bad);
        assert!(s.needs_newline_repair);
        assert!(!session(&format!("{text}\n")).needs_newline_repair);
    }

    /// What a read reports, to compare two reads of the same bytes: each entry's bytes, or
    /// (`facts`) everything but its bytes.
    fn summary(outcome: ReadOutcome, facts: bool) -> String {
        match outcome {
            ReadOutcome::Session(s) => {
                let entries: Vec<String> = s
                    .entries
                    .iter()
                    .map(|e| match (s.migrated, facts) {
                        // A migration gives fresh random ids: then only the kinds can be compared.
                        (true, _) => format!("{:?}", e.kind),
                        (false, false) => String::from_utf8_lossy(&e.raw().unwrap()).into_owned(),
                        (false, true) => format!(
                            "{:?} {:?} {:?} {:?} {} {:?} {:?} {:?} {:?}",
                            e.kind,
                            e.id,
                            e.parent_id,
                            e.role,
                            e.tokens,
                            e.usage_tokens(),
                            e.stop_reason,
                            e.file_ops,
                            e.str_field("summary"),
                        ),
                    })
                    .collect();
                format!(
                    "session {} {entries:?} repair {} migrated {} skipped {} at {:?} v{}",
                    s.header,
                    s.needs_newline_repair,
                    s.migrated,
                    s.skipped_lines,
                    s.skipped_at,
                    s.original_version
                )
            }
            other => format!("{other:?}"),
        }
    }

    /// A file in memory, as a source of lines' bytes.
    #[derive(Debug)]
    struct Memory(Bytes);

    impl LineSource for Memory {
        fn read(&self, offset: u64, len: usize) -> Result<Bytes, super::super::LineGone> {
            let at = offset as usize;
            (at + len <= self.0.len())
                .then(|| self.0.slice(at..at + len))
                .ok_or(super::super::LineGone)
        }
    }

    fn text_strategy() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let line = prop_oneof![
            Just(String::new()),
            Just("   ".to_owned()),
            Just("{not json".to_owned()),
            Just("{\"type\":\"session\",\"version\":3,\"id\":\"later\"}".to_owned()),
            Just("{\"type\":\"session\",\"version\":2,\"id\":\"old\"}".to_owned()),
            (0usize..200, 0u8..20).prop_map(|(len, id)| format!(
                "{{\"type\":\"message\",\"id\":\"e{id}\",\"parentId\":null,\"message\":{{\"role\":\"user\",\"content\":\"{}\"}}}}",
                "é".repeat(len)
            )),
        ];
        (
            prop_oneof![
                Just("{\"type\":\"session\",\"version\":3,\"id\":\"h\"}\n"),
                Just("{\"type\":\"session\",\"id\":\"h\"}\n"),
                Just("\n{bad\n{\"type\":\"session\",\"version\":3,\"id\":\"h\"}\n"),
                Just("[1]\n"),
                Just(""),
            ],
            proptest::collection::vec(line, 0..30),
            any::<bool>(),
        )
            .prop_map(|(head, lines, newline)| {
                let mut text = format!("{head}{}", lines.join("\n"));
                if newline && !lines.is_empty() {
                    text.push('\n');
                }
                text
            })
    }

    proptest::proptest! {
        /// Cut anywhere into pieces (a line across several pieces, pieces without a newline,
        /// empty pieces), a file reads exactly as it does whole.
        #[test]
        fn a_file_read_in_pieces_reads_as_it_does_whole(
            text in text_strategy(),
            cuts in proptest::collection::vec(0usize..10_000, 0..12),
        ) {
            let bytes = Bytes::from(text.into_bytes());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.push(0);
            cuts.push(bytes.len());
            cuts.sort_unstable();
            let pieces = cuts
                .windows(2)
                .map(|w| parse_piece(bytes.slice(w[0]..w[1]), w[0] as u64))
                .collect();
            let whole = summary(read_pieces(vec![parse_piece(bytes.clone(), 0)]), false);
            proptest::prop_assert_eq!(summary(read_pieces(pieces), false), whole.clone());
            proptest::prop_assert_eq!(summary(read_session_bytes(bytes.clone()), false), whole.clone());
            // Pieces of facts only: the same facts, or `None` for an older version.
            let facts = cuts
                .windows(2)
                .map(|w| parse_piece_facts(Bytes::copy_from_slice(&bytes[w[0]..w[1]]), w[0] as u64).0)
                .collect();
            let full = read_session_bytes(bytes.clone());
            // Pieces of spans: every entry reads back exactly its bytes, facts the same.
            let source: Arc<dyn LineSource> = Arc::new(Memory(bytes.clone()));
            let spans: Vec<ParsedPiece> = cuts
                .windows(2)
                .map(|w| parse_piece_spans(Bytes::copy_from_slice(&bytes[w[0]..w[1]]), w[0] as u64, &source).0)
                .collect();
            if let Some(spans) = read_fact_pieces(spans) {
                if let ReadOutcome::Session(s) = &spans {
                    proptest::prop_assert!(s.entries.iter().all(|e| e.is_stored()));
                }
                let facts_of_spans = summary(spans.clone(), true);
                proptest::prop_assert_eq!(summary(spans, false), whole.clone());
                proptest::prop_assert_eq!(facts_of_spans, summary(read_session_bytes(bytes.clone()), true));
            }
            match read_fact_pieces(facts) {
                Some(facts) => proptest::prop_assert_eq!(summary(facts, true), summary(full, true)),
                None => proptest::prop_assert!(matches!(full, ReadOutcome::Session(s) if s.migrated)),
            }
        }
    }

    #[test]
    fn a_piece_of_facts_gives_its_buffer_back_and_keeps_no_bytes() {
        let text = "{\"type\":\"session\",\"version\":3,\"id\":\"h\"}\n{\"type\":\"message\",\"id\":\"a\",\"parentId\":null,\"message\":{\"role\":\"user\",\"content\":\"hello\"}}\n{\"type\":\"mess";
        let (piece, buffer) = parse_piece_facts(Bytes::from(text.as_bytes().to_vec()), 0);
        assert_eq!(buffer.as_deref(), Some(text.as_bytes()));
        let Some(ReadOutcome::Session(s)) = read_fact_pieces(vec![piece]) else {
            panic!("not a session");
        };
        assert_eq!(s.entries.len(), 1);
        assert!(s.entries[0].raw().unwrap().is_empty());
        assert_eq!(s.entries[0].tokens, 2);
        assert_eq!(s.skipped_lines, 1);
    }

    /// The line-by-line reader the pieces must agree with: every line through the general
    /// path, the first parsed one the header.
    #[test]
    fn one_piece_reads_as_a_line_by_line_read() {
        let text = "\n{bad\n{\"type\":\"session\",\"version\":3,\"id\":\"h\"}\n{\"type\":\"label\",\"id\":\"a\",\"parentId\":null}\n{\"type\":\"session\",\"version\":3,\"id\":\"x\"}\n{x\n{\"type\":\"label\",\"id\":\"b\",\"parentId\":\"a\"}";
        let s = session(text);
        let ids: Vec<_> = s.entries.iter().map(|e| e.id.clone().unwrap()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(s.skipped_lines, 2);
        assert_eq!(s.header["id"], "h");
        assert!(s.needs_newline_repair);
    }

    #[test]
    fn skips_blank_and_malformed_lines_and_flags_missing_newline() {
        let s = session(
            "{\"type\":\"session\",\"version\":3,\"id\":\"s\"}\n\n{bad\n{\"type\":\"label\",\"id\":\"a\",\"parentId\":null}\n{\"type\":\"x\",\"id\":\"b\"}",
        );
        assert_eq!(s.entries.len(), 2);
        assert_eq!(s.skipped_lines, 1);
        assert!(s.needs_newline_repair);
        assert!(!s.migrated);
        let ok = session("{\"type\":\"session\",\"version\":3,\"id\":\"s\"}\n");
        assert!(!ok.needs_newline_repair);
    }

    #[test]
    fn rejects_non_sessions_and_recognises_empty_files() {
        assert!(matches!(read_session(b""), ReadOutcome::Empty));
        let why = |bytes: &[u8]| match read_session(bytes) {
            ReadOutcome::NotASession(why) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            why(b"  \n\n"),
            "none of its 0 non-blank line(s) is JSON (is it a Pi session file?)"
        );
        assert_eq!(
            why(b"{\"type\":\"message\"}\n"),
            "its first JSON line is a `message` entry, where Pi expects the `session` header"
        );
        assert_eq!(
            why(b"[1]\n{\"type\":\"session\",\"id\":\"s\"}\n"),
            "its first JSON line is no `session` header (Pi expects the header first)"
        );
        assert_eq!(
            why(b"{\"type\":\"session\",\"id\":5}\n"),
            "its `session` header has no string `id` (Pi cannot name the session)"
        );
        assert_eq!(
            why(b"\x00\xff binary"),
            "none of its 1 non-blank line(s) is JSON (is it a Pi session file?)"
        );
    }

    #[test]
    fn migrates_v1_ids_chain_and_first_kept_index() {
        let s = session(concat!(
            "{\"type\":\"session\",\"id\":\"s\",\"timestamp\":\"t\",\"cwd\":\"/\"}\n",
            "{\"type\":\"message\",\"timestamp\":\"t\",\"message\":{\"role\":\"hookMessage\",\"content\":\"x\"}}\n",
            "{\"type\":\"message\",\"timestamp\":\"t\",\"message\":{\"role\":\"user\",\"content\":\"y\"}}\n",
            "{\"type\":\"compaction\",\"timestamp\":\"t\",\"summary\":\"s\",\"firstKeptEntryIndex\":2,\"tokensBefore\":1}\n",
        ));
        assert!(s.migrated);
        assert_eq!(s.header["version"], 3);
        let ids: Vec<_> = s.entries.iter().map(|e| e.id_owned().unwrap()).collect();
        assert_eq!(s.entries[0].parent_id, None);
        assert_eq!(s.entries[1].parent_id.as_deref(), Some(ids[0].as_str()));
        assert_eq!(
            s.entries[2].value()["firstKeptEntryId"],
            Value::from(ids[1].clone())
        );
        assert!(s.entries[2].value().get("firstKeptEntryIndex").is_none());
        assert_eq!(s.entries[0].value()["message"]["role"], "custom");
        let keys: Vec<_> = s.entries[0]
            .value()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["type", "timestamp", "message", "id", "parentId"]);
    }
}
