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

use super::entry::{parse_line_bytes, Entry};
use super::ids::new_entry_id_in;

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

/// Maps `f` over the `\n`-separated lines of `bytes` on up to `available_parallelism` threads,
/// keeping file order. Each line is a shared slice, no copy, handed to `f` to keep: all slices
/// share one reference count, which the threads then touch once per line, not three times.
/// `None` results are dropped, `Some(Err)` results are counted. Opening a 100 MB session is
/// dominated by JSON parsing, which splits cleanly by line; each thread finds the lines of its
/// own part, so no single-threaded pass over the whole file precedes the parallel one. The
/// threads run at a lower priority (`cpu::lower_own_priority`): other clients' requests,
/// microseconds each, go first.
fn par_parse<T: Send>(
    bytes: &Bytes,
    f: impl Fn(Bytes) -> Option<Result<T, ()>> + Sync,
) -> (Vec<T>, usize) {
    let run = |part: Bytes| {
        let mut out = Vec::with_capacity(part.len() / 1024 + 1);
        let mut bad = 0usize;
        for line in lines(&part) {
            match f(line) {
                Some(Ok(v)) => out.push(v),
                Some(Err(())) => bad += 1,
                None => {}
            }
        }
        (out, bad)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    if threads < 2 || bytes.len() < 1 << 20 {
        return run(bytes.clone());
    }
    // Parts of roughly equal bytes, each ending just after a newline (the last at the end), so
    // every line lies in exactly one part.
    let target = bytes.len() / threads + 1;
    let mut parts = Vec::with_capacity(threads);
    let mut start = 0usize;
    while start < bytes.len() {
        let nominal = (start + target).min(bytes.len());
        let end = match memchr::memchr(b'\n', &bytes[nominal..]) {
            Some(i) if nominal < bytes.len() => nominal + i + 1,
            _ => bytes.len(),
        };
        parts.push(bytes.slice(start..end));
        start = end;
    }
    let results: Vec<(Vec<T>, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                scope.spawn(|| {
                    crate::cpu::lower_own_priority();
                    run(part)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut out = Vec::with_capacity(results.iter().map(|(v, _)| v.len()).sum());
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

/// The pieces of `bytes` between newlines, as shared slices: every line, and the piece after
/// the last newline when `bytes` does not end with one (a part that ends with its newline
/// yields no empty last piece).
fn lines(bytes: &Bytes) -> impl Iterator<Item = Bytes> + '_ {
    let mut start = 0usize;
    let mut newlines = memchr::memchr_iter(b'\n', bytes);
    std::iter::from_fn(move || match newlines.next() {
        Some(nl) => {
            let line = bytes.slice(start..nl);
            start = nl + 1;
            Some(line)
        }
        None if start < bytes.len() => {
            let rest = bytes.slice(start..);
            start = bytes.len();
            Some(rest)
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
    // Pi repairs a trailing piece after the last newline that is not empty ("pending").
    let needs_newline_repair = !bytes.is_empty() && !bytes.ends_with(b"\n");
    // The first line that parses must be the header; the rest starts after its line.
    let mut skipped = 0usize;
    let mut header: Option<(usize, Value)> = None;
    let mut offset = 0usize;
    for line in lines(&bytes) {
        offset += line.len() + 1;
        match parse_line_bytes(&line) {
            None => {}
            Some(Err(())) => skipped += 1,
            Some(Ok(v)) => {
                header = Some((offset.min(bytes.len()), v));
                break;
            }
        }
    }
    let Some((rest_at, header)) = header else {
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
    let rest = bytes.slice(rest_at..);
    let original_version = header_version(&header);
    if original_version >= CURRENT_VERSION as f64 {
        // The common case: no migration, so entries are built on the parsing threads from their
        // bytes, without value trees; a later `session` line is skipped there too.
        let (entries, bad) = par_parse(&rest, |line| match Entry::from_line(line)? {
            Ok(e) if is_session_entry(&e) => None,
            other => Some(other.map(Arc::new)),
        });
        return ReadOutcome::Session(ParsedSession {
            header,
            entries,
            needs_newline_repair,
            migrated: false,
            skipped_lines: skipped + bad,
            original_version,
        });
    }
    let (rest_values, bad) = par_parse(&rest, |p| parse_line_bytes(&p));
    let mut values = Vec::with_capacity(rest_values.len() + 1);
    values.push(header);
    values.extend(rest_values);
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

    /// A session over 1 MB (so the lines are parsed on several threads where there are cores),
    /// read entry for entry as a one-line-at-a-time reader would: same entries in file order,
    /// same skipped count, whatever lines sit at the parts' edges.
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
        assert!(text.len() > 2 << 20, "{} bytes", text.len());
        let s = session(&text);
        let ids: Vec<String> = s.entries.iter().filter_map(|e| e.id.clone()).collect();
        assert_eq!(ids, expected_ids);
        assert_eq!(s.skipped_lines, expected_bad);
        assert!(s.needs_newline_repair);
        assert!(!session(&format!("{text}\n")).needs_newline_repair);
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
