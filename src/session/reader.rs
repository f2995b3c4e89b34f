//! Reading a Pi session file (sessions.md §2.1, §8): split on `\n`, skip blank and malformed
//! lines, require a `session` header first, migrate old versions in memory.
//!
//! This is pure: it takes the file's bytes and returns what Pi would hold in memory plus what
//! Pi would then write (a newline repair, or a full rewrite after migration). The storage shell
//! (`crate::store`) performs those writes.

use std::collections::HashSet;

use serde_json::Value;

use bytes::Bytes;

use super::entry::{parse_line_bytes, Entry};
use super::ids::new_entry_id_in;

/// The current session format version.
pub const CURRENT_VERSION: i64 = 3;

/// A session file as Pi holds it after `SessionManager.open`.
#[derive(Debug, Clone)]
pub struct ParsedSession {
    /// The header object (`type: "session"`).
    pub header: Value,
    /// Every non-header entry, in file order.
    pub entries: Vec<Entry>,
    /// The file did not end with `\n` after its last non-blank piece: Pi appends one newline.
    pub needs_newline_repair: bool,
    /// A version migration ran: Pi rewrites the whole file.
    pub migrated: bool,
    /// Lines that were not valid JSON (skipped, as Pi does; reported for diagnostics).
    pub skipped_lines: usize,
    /// The header's version as read, before any migration (1 when missing).
    pub original_version: f64,
}

/// What a file's bytes turned out to be.
#[derive(Debug, Clone)]
pub enum ReadOutcome {
    /// No line parsed (0-byte or blank file): Pi re-initialises it.
    Empty,
    /// Lines parsed, but the first is not a `session` header with a string id.
    NotASession,
    Session(ParsedSession),
}

/// Maps `f` over `items` on up to `available_parallelism` threads, keeping order; `None` results
/// are dropped, `Some(Err)` results are counted. Opening a 100 MB session is dominated by JSON
/// parsing, which splits cleanly by line.
fn par_parse<T: Send>(
    items: &[Bytes],
    f: impl Fn(&Bytes) -> Option<Result<T, ()>> + Sync,
) -> (Vec<T>, usize) {
    let run = |chunk: &[Bytes]| {
        let mut out = Vec::with_capacity(chunk.len());
        let mut bad = 0usize;
        for piece in chunk {
            match f(piece) {
                Some(Ok(v)) => out.push(v),
                Some(Err(())) => bad += 1,
                None => {}
            }
        }
        (out, bad)
    };
    let total: usize = items.iter().map(|p| p.len()).sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if threads < 2 || total < 1 << 20 {
        return run(items);
    }
    // Chunks of roughly equal bytes, so one long line does not serialize the work.
    let target = total / threads + 1;
    let mut chunks: Vec<&[Bytes]> = Vec::with_capacity(threads);
    let (mut start, mut acc) = (0usize, 0usize);
    for (i, p) in items.iter().enumerate() {
        acc += p.len();
        if acc >= target {
            chunks.push(&items[start..=i]);
            start = i + 1;
            acc = 0;
        }
    }
    if start < items.len() {
        chunks.push(&items[start..]);
    }
    let results: Vec<(Vec<T>, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks.iter().map(|c| scope.spawn(|| run(c))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut out = Vec::with_capacity(items.len());
    let mut bad = 0;
    for (v, b) in results {
        out.extend(v);
        bad += b;
    }
    (out, bad)
}

fn is_session_line(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("session")
}

/// Splits a file's bytes on `\n` into shared slices (no copy).
fn split_lines(bytes: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(bytes.len() / 512 + 1);
    let mut start = 0usize;
    for nl in memchr::memchr_iter(b'\n', bytes) {
        out.push(bytes.slice(start..nl));
        start = nl + 1;
    }
    out.push(bytes.slice(start..));
    out
}

/// Parses a session file's bytes as Pi's `loadEntriesFromFile` + `_loadEntries` do (copies them
/// once; the storage shell hands over its buffer with [`read_session_bytes`] instead).
pub fn read_session(bytes: &[u8]) -> ReadOutcome {
    read_session_bytes(Bytes::copy_from_slice(bytes))
}

/// [`read_session`] over an owned buffer: entries keep slices of it (see [`Entry`]), so the
/// file's bytes are held once and never copied.
pub fn read_session_bytes(bytes: Bytes) -> ReadOutcome {
    let pieces = split_lines(&bytes);
    // Pi repairs a trailing piece after the last newline that is not empty ("pending").
    let needs_newline_repair = pieces.last().is_some_and(|p| !p.is_empty());
    // The first line that parses must be the header.
    let mut skipped = 0usize;
    let mut header: Option<(usize, Value)> = None;
    for (i, piece) in pieces.iter().enumerate() {
        match parse_line_bytes(piece) {
            None => {}
            Some(Err(())) => skipped += 1,
            Some(Ok(v)) => {
                header = Some((i, v));
                break;
            }
        }
    }
    let Some((header_at, header)) = header else {
        // Pi re-initialises only a 0-byte file; anything else without a header is refused.
        return if bytes.is_empty() {
            ReadOutcome::Empty
        } else {
            ReadOutcome::NotASession
        };
    };
    let header_ok = is_session_line(&header) && header.get("id").is_some_and(Value::is_string);
    if !header_ok {
        return ReadOutcome::NotASession;
    }
    let rest = &pieces[header_at + 1..];
    let original_version = header_version(&header);
    if original_version >= CURRENT_VERSION as f64 {
        // The common case: no migration, so entries are built on the parsing threads from their
        // bytes, without value trees.
        let (entries, bad) = par_parse(rest, |piece| {
            Entry::from_line(piece.clone()).map(|r| r.map(|e| (!is_session_entry(&e)).then_some(e)))
        });
        return ReadOutcome::Session(ParsedSession {
            header,
            entries: entries.into_iter().flatten().collect(),
            needs_newline_repair,
            migrated: false,
            skipped_lines: skipped + bad,
            original_version,
        });
    }
    let (rest_values, bad) = par_parse(rest, |p| parse_line_bytes(p));
    let mut values = Vec::with_capacity(rest_values.len() + 1);
    values.push(header);
    values.extend(rest_values);
    let migrated = migrate(&mut values);
    let mut iter = values.into_iter();
    let header = iter.next().unwrap_or(Value::Null);
    // Migrated entries are serialized anew: the file is rewritten with exactly these lines.
    let entries = iter
        .filter(|v| !is_session_line(v))
        .map(Entry::from_value)
        .collect();
    ReadOutcome::Session(ParsedSession {
        header,
        entries,
        needs_newline_repair,
        migrated,
        skipped_lines: skipped + bad,
        original_version,
    })
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
        assert!(matches!(read_session(b"  \n\n"), ReadOutcome::NotASession));
        assert!(matches!(
            read_session(b"{\"type\":\"message\"}\n"),
            ReadOutcome::NotASession
        ));
        assert!(matches!(
            read_session(b"{\"type\":\"session\",\"id\":5}\n"),
            ReadOutcome::NotASession
        ));
        assert!(matches!(
            read_session(b"\x00\xff binary"),
            ReadOutcome::NotASession
        ));
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
        let ids: Vec<_> = s.entries.iter().map(|e| e.id.clone().unwrap()).collect();
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
