//! One line of a Pi session file: where its bytes are, plus the facts extracted from them once.
//!
//! A long-lived daemon holds sessions of hundreds of megabytes, so entries are not kept as
//! `serde_json::Value` trees (7-20x the file's size), nor, for a file read at open, as the
//! line's bytes: a daemon serving many long sessions would hold all of their history, most of
//! which is never read again. Each entry keeps the few facts every algorithm needs (type, id,
//! parent, projected role, token estimate, usage, stop reason and file-operation paths, see
//! [`super::facts`]) and its line as a [`Line`]: the bytes themselves (entries compactd builds,
//! lines another writer appended, rows of a database), or the line's span in the session file,
//! read back on demand through a [`LineSource`] the storage shell provides. Message bodies are
//! parsed from the bytes only when their content is needed (context output, serialization at
//! compaction time) and dropped after. Metadata entries (compactions, labels, model changes,
//! ...) are few and small; they also keep their parsed object, because the tree's algorithms
//! read their fields without a read of the file. Lines written by others are never
//! re-serialised, so Pi's bytes stay Pi's bytes.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::estimate::{self as tokens, PackedUsage};
use crate::json::stringify;

pub use super::vocab::{tool_call_ops, EntryKind, FileOpKind, Role, StopReason};

pub use super::ids::EntryId;

/// Where the lines of entries that keep no bytes are read back from: a session file's
/// descriptor, held from the read the entries were made from (so a file replaced by a rename
/// still reads as it was indexed). The core defines it and the storage shell implements it, so
/// the session model does no I/O of its own. Implementations read with positioned reads, never
/// through a memory map: another writer's truncation must be an error, not SIGBUS.
pub trait LineSource: Send + Sync + std::fmt::Debug {
    /// The `len` bytes at `offset`, or [`LineGone`] when they can no longer be read whole (the
    /// file was truncated, or the read failed). A failure is remembered by the source, so the
    /// session that owns it reports its file changed from then on.
    fn read(&self, offset: u64, len: usize) -> Result<Bytes, LineGone>;
}

/// An entry's line could not be read back from its session file: the file is shorter than when
/// it was read (another writer truncated it), or the read failed. The session reports
/// `file_changed` (it must be reopened) rather than working from empty data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an entry's line can no longer be read from the session file (truncated, or unreadable); reopen the session")]
pub struct LineGone;

/// An entry's line: its bytes, or where to read them.
#[derive(Debug, Clone)]
enum Line {
    /// The line exactly as read (no trailing newline), or as compactd serialized it; empty for
    /// a reader of facts only ([`Entry::without_bytes`]).
    Held(Bytes),
    /// `len` bytes at `offset` of the file `source` reads.
    Stored {
        source: Arc<dyn LineSource>,
        offset: u64,
        len: usize,
    },
}

impl PartialEq for Line {
    /// Held lines are equal by their bytes; stored ones by their place in the same source
    /// (comparing them by bytes would read the file).
    fn eq(&self, other: &Line) -> bool {
        match (self, other) {
            (Line::Held(a), Line::Held(b)) => a == b,
            (
                Line::Stored {
                    source: s,
                    offset: o,
                    len: l,
                },
                Line::Stored {
                    source: t,
                    offset: p,
                    len: m,
                },
            ) => std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(t)) && o == p && l == m,
            _ => false,
        }
    }
}

/// A session entry: its line plus the facts extracted from it at load.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The line's bytes or its span in the session file (see module docs).
    line: Line,
    /// The parsed object, kept only for metadata kinds (see module docs).
    meta: Option<Box<Value>>,
    pub kind: EntryKind,
    /// `id`, or `None` when missing or not a string.
    pub id: Option<EntryId>,
    /// `parentId`, or `None` for a root (null, missing or not a string).
    pub parent_id: Option<EntryId>,
    /// Role of the projected message, `None` for entries that project nothing (metadata).
    pub role: Option<Role>,
    /// `estimateTokens` of the projected message (0 when none).
    pub tokens: u64,
    /// `calculateContextTokens(usage)` when this is an assistant message with valid usage
    /// (compaction.md §3.3), else none: read through [`Entry::usage_tokens`].
    usage: PackedUsage,
    /// `stopReason` of a `message` entry's message, when it is one of pi-ai's.
    pub stop_reason: Option<StopReason>,
    /// `read`/`write`/`edit` tool calls of an assistant message, in block order.
    pub file_ops: Box<[(FileOpKind, Box<str>)]>,
    /// A tool result whose message has `nestedCalls` (Pi 1.6 codemode: the file operations of
    /// the calls its script made), read from the line at parse so that Pi 1.6's file lists
    /// need not read every tool result's line back from the file.
    pub nested_calls: bool,
}

/// Kinds whose parsed object is kept beside the bytes.
fn keeps_object(kind: EntryKind) -> bool {
    !matches!(
        kind,
        EntryKind::Message | EntryKind::Custom | EntryKind::Unknown | EntryKind::SessionHeader
    )
}

/// Parses a line as Pi's reader does: valid UTF-8 JSON straight from the bytes, anything else
/// decoded with replacement characters, trimmed, then parsed with the lone-surrogate policy of
/// [`crate::json::parse_line`]. `None` for blank lines, `Some(Err)` for malformed ones.
pub fn parse_line_bytes(piece: &[u8]) -> Option<Result<Value, ()>> {
    if let Ok(v) = serde_json::from_slice::<Value>(piece) {
        return Some(Ok(v));
    }
    let text = String::from_utf8_lossy(piece);
    if text.trim().is_empty() {
        return None;
    }
    Some(crate::json::parse_line(&text).map_err(|_| ()))
}

impl Entry {
    /// `calculateContextTokens(usage)` when this is an assistant message with valid usage
    /// (compaction.md §3.3), else `None`.
    pub fn usage_tokens(&self) -> Option<f64> {
        match self.role {
            Some(Role::System) => None,
            _ => self.usage.get(),
        }
    }

    /// Pi 1.6's `estimateTokens` of a system-role message (0.85 counts it as 0, which
    /// [`Entry::tokens`] keeps). A system message has no usage, so its slot holds this.
    pub fn system_tokens(&self) -> Option<u64> {
        match self.role {
            Some(Role::System) => self.usage.get().map(|t| t as u64),
            _ => None,
        }
    }

    /// The id as an owned `String`, for results and events that outlive the entry.
    pub fn id_owned(&self) -> Option<String> {
        self.id.as_deref().map(str::to_owned)
    }

    /// An entry compactd builds itself (or a migrated one): serialized with Pi's
    /// `JSON.stringify` order and numbers, facts taken from the value.
    pub fn from_value(value: Value) -> Entry {
        let raw = Bytes::from(stringify(&value));
        Self::from_parts(raw, value)
    }

    /// Facts from an already parsed value whose bytes are `raw`.
    fn from_parts(raw: Bytes, value: Value) -> Entry {
        let obj = value.as_object();
        let field = |k: &str| obj.and_then(|o| o.get(k));
        let kind = EntryKind::from_type(field("type").and_then(Value::as_str).unwrap_or(""));
        let id = field("id").and_then(Value::as_str).map(EntryId::from);
        let parent_id = field("parentId").and_then(Value::as_str).map(EntryId::from);
        let (role, tokens, mut usage_tokens) = projection_of(kind, obj);
        if role == Some(Role::System) {
            usage_tokens = field("message")
                .and_then(Value::as_object)
                .map(|m| system_tokens_of(m.clone()));
        }
        let mut nested_calls = false;
        let (stop_reason, file_ops) = match (kind, field("message")) {
            (EntryKind::Message, Some(m)) => {
                nested_calls = role == Some(Role::ToolResult)
                    && m.as_object().is_some_and(|o| o.contains_key("nestedCalls"));
                let stop = m
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .and_then(StopReason::parse);
                let ops: Box<[(FileOpKind, Box<str>)]> = if role == Some(Role::Assistant) {
                    tool_call_ops(m)
                        .into_iter()
                        .map(|(k, p)| (k, p.into_boxed_str()))
                        .collect()
                } else {
                    Box::default()
                };
                (stop, ops)
            }
            _ => (None, Box::default()),
        };
        Entry {
            line: Line::Held(raw),
            meta: keeps_object(kind).then(|| Box::new(value)),
            kind,
            id,
            parent_id,
            role,
            tokens,
            usage: PackedUsage::new(usage_tokens),
            stop_reason,
            file_ops,
            nested_calls,
        }
    }

    /// An entry read from a file line. The fast path extracts facts without building a value
    /// tree; a line the fast reader declines (invalid UTF-8, lone surrogates, deep nesting,
    /// anything not JSON) takes Pi's lenient path. `None` for blank lines, `Err` for malformed ones.
    pub fn from_line(raw: Bytes) -> Option<Result<Entry, ()>> {
        let Ok(f) = super::facts::parse_facts(&raw) else {
            return match parse_line_bytes(&raw)? {
                Ok(v) => Some(Ok(Self::from_parts(raw, v))),
                Err(()) => Some(Err(())),
            };
        };
        let kind = f.kind();
        if keeps_object(kind) {
            let value = match parse_line_bytes(&raw)? {
                Ok(v) => v,
                Err(()) => return Some(Err(())),
            };
            return Some(Ok(Self::from_parts(raw, value)));
        }
        let (role, tokens, usage_tokens, stop_reason, file_ops) = match (kind, &f.message) {
            (EntryKind::Message, Some(m)) => {
                let role = m.role();
                let ops = if role == Role::Assistant {
                    m.content
                        .file_ops
                        .iter()
                        .map(|(k, p)| (*k, p.clone().into_boxed_str()))
                        .collect()
                } else {
                    Box::default()
                };
                let usage = match role {
                    // A system message is rare: its 1.6 estimate is read from the whole line.
                    Role::System => parse_line_bytes(&raw)
                        .and_then(Result::ok)
                        .and_then(|v| v.get("message").and_then(Value::as_object).cloned())
                        .map(system_tokens_of),
                    _ => m.usage_tokens(),
                };
                (Some(role), m.tokens(), usage, m.stop(), ops)
            }
            _ => (None, 0, None, None, Box::default()),
        };
        let nested_calls =
            role == Some(Role::ToolResult) && f.message.as_ref().is_some_and(|m| m.nested_calls);
        Some(Ok(Entry {
            line: Line::Held(raw),
            meta: None,
            kind,
            id: f.id,
            parent_id: f.parent_id,
            role,
            tokens,
            usage: PackedUsage::new(usage_tokens),
            stop_reason,
            file_ops,
            nested_calls,
        }))
    }

    /// This entry without the line's bytes, for a reader that needs only the facts (`compactd
    /// inspect`'s overview), so a large file's bytes need not stay in memory. The facts and a
    /// metadata entry's object stay; a message's body is gone (`raw` is empty, `message()` is
    /// `None`).
    pub fn without_bytes(mut self) -> Entry {
        self.line = Line::Held(Bytes::new());
        self
    }

    /// This entry with its line left in the file: the `len` bytes it has now, found at `offset`
    /// of what `source` reads (the storage shell read them there), read back when asked for.
    pub fn stored_at(mut self, source: &Arc<dyn LineSource>, offset: u64) -> Entry {
        let len = match &self.line {
            Line::Held(b) => b.len(),
            Line::Stored { len, .. } => *len,
        };
        self.line = Line::Stored {
            source: Arc::clone(source),
            offset,
            len,
        };
        self
    }

    /// Whether the line is read back from the file when asked for (not held in memory).
    pub fn is_stored(&self) -> bool {
        matches!(self.line, Line::Stored { .. })
    }

    /// The line's bytes (what compactd writes for its own entries; others' bytes untouched):
    /// shared when held, read from the file when stored ([`LineGone`] if it no longer can be).
    pub fn raw(&self) -> Result<Bytes, LineGone> {
        match &self.line {
            Line::Held(b) => Ok(b.clone()),
            Line::Stored {
                source,
                offset,
                len,
            } => source.read(*offset, *len),
        }
    }

    /// The whole entry as a value: the kept object, or a parse of the bytes.
    pub fn try_value(&self) -> Result<Value, LineGone> {
        Ok(match &self.meta {
            Some(v) => (**v).clone(),
            None => parse_line_bytes(&self.raw()?)
                .and_then(Result::ok)
                .unwrap_or(Value::Null),
        })
    }

    /// [`Entry::try_value`] for the pure core, which has no error to return: a line that can
    /// no longer be read is `null` here, and its source remembers the failure, so the session
    /// reports `file_changed` for the request (the daemon checks it after reading: see
    /// `SessionState::check_lines`).
    pub fn value(&self) -> Value {
        self.try_value().unwrap_or(Value::Null)
    }

    /// The kept object of a metadata entry (`None` for message, custom and unknown entries,
    /// whose fields are read through [`Entry::value`]).
    pub fn obj(&self) -> Option<&Map<String, Value>> {
        self.meta.as_deref().and_then(Value::as_object)
    }

    /// A field of a metadata entry's object (see [`Entry::obj`]).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.obj().and_then(|o| o.get(key))
    }

    /// A string field of a metadata entry's object.
    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// The stored message of a `message` entry, parsed from the bytes.
    pub fn try_message(&self) -> Result<Option<Map<String, Value>>, LineGone> {
        if self.kind != EntryKind::Message {
            return Ok(None);
        }
        Ok(match self.try_value()? {
            Value::Object(mut o) => match o.shift_remove("message") {
                Some(Value::Object(m)) => Some(m),
                _ => None,
            },
            _ => None,
        })
    }

    /// [`Entry::try_message`] for the pure core: `None` when the line can no longer be read
    /// (remembered by its source, as for [`Entry::value`]).
    pub fn message(&self) -> Option<Map<String, Value>> {
        self.try_message().ok().flatten()
    }

    /// Whether this is a `message` entry whose message has `role`.
    pub fn is_message(&self, role: Role) -> bool {
        self.kind == EntryKind::Message && self.role == Some(role)
    }

    /// Whether the entry projects at least one context message (compaction.md §4).
    pub fn is_context_visible(&self) -> bool {
        self.role.is_some()
    }

    /// A cut point: not a compaction, projecting to a user, assistant, bashExecution, custom,
    /// branchSummary or compactionSummary message. Tool results never are.
    pub fn is_cut_point(&self) -> bool {
        self.kind != EntryKind::Compaction
            && matches!(
                self.role,
                Some(
                    Role::User
                        | Role::Assistant
                        | Role::BashExecution
                        | Role::Custom
                        | Role::BranchSummary
                        | Role::CompactionSummary
                )
            )
    }

    /// A turn start: a cut point that is not an assistant message.
    pub fn is_turn_start(&self) -> bool {
        self.is_cut_point() && self.role != Some(Role::Assistant)
    }
}

/// Pi 1.6's estimate of a system message as `sessionEntryToContextMessages` gives it (a missing
/// content is `""`), kept where a reply keeps its usage.
fn system_tokens_of(mut m: Map<String, Value>) -> f64 {
    if matches!(m.get("content"), None | Some(Value::Null)) {
        m.insert("content".into(), Value::from(""));
    }
    crate::estimate::system_message_tokens(&m) as f64
}

/// Role, token estimate and usage of the message an entry projects to (sessions.md §9.1).
fn projection_of(
    kind: EntryKind,
    obj: Option<&Map<String, Value>>,
) -> (Option<Role>, u64, Option<f64>) {
    match (kind, obj) {
        (EntryKind::Message, Some(o)) => match o.get("message") {
            Some(Value::Object(m)) => {
                let role = Role::from_message_role(m.get("role").and_then(Value::as_str));
                let usage = if role == Role::Assistant {
                    tokens::valid_usage_tokens(m)
                } else {
                    None
                };
                (Some(role), tokens::estimate_message(m), usage)
            }
            _ => (None, 0, None),
        },
        (EntryKind::CustomMessage, Some(o)) => (
            Some(Role::Custom),
            tokens::estimate_content(o.get("content")),
            None,
        ),
        (EntryKind::BranchSummary, Some(o)) => {
            if crate::json::truthy(o.get("summary")) {
                (
                    Some(Role::BranchSummary),
                    tokens::text_tokens(o.get("summary")),
                    None,
                )
            } else {
                (None, 0, None)
            }
        }
        (EntryKind::Compaction, Some(o)) => (
            Some(Role::CompactionSummary),
            tokens::text_tokens(o.get("summary")),
            None,
        ),
        _ => (None, 0, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every open session keeps one entry per line (575k for eight 100 MB sessions), each in
    /// an `Arc` allocation: 136 bytes plus the two counts is a 160-byte unit of glibc's, where
    /// the 144 bytes of an entry whose usage was an `Option<f64>` took a 176-byte one.
    #[test]
    fn an_entry_takes_at_most_136_bytes() {
        assert!(
            std::mem::size_of::<Entry>() <= 136,
            "Entry is {} bytes",
            std::mem::size_of::<Entry>()
        );
    }

    /// `nestedCalls` on a tool result is noted at parse, by the fast reader and by Pi's lenient
    /// path alike (a lone surrogate sends a line there); anywhere else it is not.
    #[test]
    fn a_tool_result_with_nested_calls_is_noted_at_parse() {
        let line = |role: &str, extra: &str, text: &str| {
            Bytes::from(format!(
                r#"{{"type":"message","id":"a","parentId":null,"message":{{"role":"{role}","toolCallId":"c","content":[{{"type":"text","text":"{text}"}}]{extra}}}}}"#
            ))
        };
        let nested = r#","nestedCalls":{"calls":[{"name":"read","arguments":{"path":"a.rs"}}]}"#;
        let parsed = |b: Bytes| Entry::from_line(b).and_then(Result::ok).expect("an entry");
        assert!(parsed(line("toolResult", nested, "ok")).nested_calls);
        assert!(parsed(line("toolResult", nested, r"\ud800")).nested_calls);
        assert!(!parsed(line("toolResult", "", "nestedCalls")).nested_calls);
        assert!(!parsed(line("user", nested, "ok")).nested_calls);
    }

    #[test]
    fn a_stored_entry_keeps_its_usage_and_reads_its_line_back() {
        #[derive(Debug)]
        struct Text(&'static [u8]);
        impl LineSource for Text {
            fn read(&self, offset: u64, len: usize) -> Result<Bytes, LineGone> {
                let at = offset as usize;
                self.0
                    .get(at..at + len)
                    .map(Bytes::from_static)
                    .ok_or(LineGone)
            }
        }
        let line: &'static [u8] = br#"{"type":"message","id":"a1","parentId":null,"message":{"role":"assistant","content":[],"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15}}}"#;
        let mut file = b"xx\n".to_vec();
        file.extend_from_slice(line);
        let source: Arc<dyn LineSource> = Arc::new(Text(file.leak()));
        let Some(Ok(e)) = Entry::from_line(Bytes::from_static(line)) else {
            panic!("the line parses");
        };
        let stored = e.stored_at(&source, 3);
        assert!(stored.is_stored());
        assert_eq!(stored.usage_tokens(), Some(15.0));
        assert_eq!(&stored.raw().unwrap()[..], line);
    }
}
