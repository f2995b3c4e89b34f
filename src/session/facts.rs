//! The facts of one session line, read in a single borrowed pass over its bytes.
//!
//! Opening a session must cost little more than validating its JSON, so message lines are never
//! turned into `serde_json::Value` trees at load. Instead these readers walk the line once with
//! the validating cursor of [`crate::json::scan`] and keep only what the algorithms need: type,
//! id, parent, the projected role, the UTF-16 lengths behind Pi's token estimate (measured from
//! each string's literal during the walk), the usage numbers, the stop reason and the paths of
//! `read`/`write`/`edit` tool calls. Everything else is skipped, and still validated. The
//! message itself stays as the line's bytes and is parsed only when needed. A line the cursor
//! declines is read by the general `Value` path ([`super::entry::Entry::from_line`]).
//!
//! The semantics must be exactly those of the `Value`-based functions in
//! [`crate::estimate`] (which stays the definition): JSON's "last duplicate key wins",
//! lengths of `JSON.stringify` output, and zero for fields of the wrong type. Property tests
//! check both against each other, and that the cursor accepts no line the general path
//! rejects.

use super::vocab::{EntryKind, FileOpKind, Role, StopReason};
use crate::estimate::ESTIMATED_IMAGE_CHARS;
use crate::json::measure::{number_f64, stringify_len};
use crate::json::scan::{Cursor, Literal, Scan};

pub use crate::json::scan::Declined;

/// What the fast pass extracts from one line.
#[derive(Debug, Default)]
pub struct LineFacts {
    /// The line is a JSON object (anything else becomes an `Unknown` entry without id).
    pub is_object: bool,
    pub kind: EntryKind,
    pub id: Option<super::ids::EntryId>,
    pub parent_id: Option<super::ids::EntryId>,
    /// The `message` field, when it is an object.
    pub message: Option<MessageFacts>,
    /// The top-level `content` field (custom messages), counted as user content.
    pub content_chars: u64,
}

impl LineFacts {
    pub fn kind(&self) -> EntryKind {
        self.kind
    }
}

/// Facts of a `message` object. Which lengths count depends on the role, which may come after
/// the content in key order, so every reading is collected and combined at the end.
#[derive(Debug, Default)]
pub struct MessageFacts {
    /// `None` when `role` is missing or not a string (which counts as an unknown role).
    pub role: Option<Role>,
    pub content: ContentFacts,
    pub command_len: u64,
    pub output_len: u64,
    pub summary_len: u64,
    /// `usage` when it is an object (anything else is never valid usage).
    pub usage: Option<UsageFacts>,
    pub stop_reason: Option<StopReason>,
    /// The message has a `nestedCalls` member (a Pi 1.6 codemode tool result whose calls carry
    /// file operations): noted while the line is scanned, so a later reader need not search
    /// the line again.
    pub nested_calls: bool,
}

/// `usage` numbers as `Value::as_f64` reads them (`NaN` when missing or not a number).
#[derive(Debug, Clone, Copy)]
pub struct UsageFacts {
    pub total_tokens: f64,
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

impl Default for UsageFacts {
    fn default() -> Self {
        UsageFacts {
            total_tokens: f64::NAN,
            input: f64::NAN,
            output: f64::NAN,
            cache_read: f64::NAN,
            cache_write: f64::NAN,
        }
    }
}

impl UsageFacts {
    /// `calculateContextTokens(usage)`.
    pub fn context_tokens(&self) -> f64 {
        if self.total_tokens != 0.0 && !self.total_tokens.is_nan() {
            return self.total_tokens;
        }
        self.input + self.output + self.cache_read + self.cache_write
    }
}

/// Content read both ways: as user-like content and as assistant blocks.
#[derive(Debug, Default)]
pub struct ContentFacts {
    /// `content_chars` (string length, or text blocks plus images).
    pub user_chars: u64,
    /// Text, thinking and `name + JSON.stringify(arguments)` of tool calls (arrays only).
    pub assistant_chars: u64,
    /// `read`/`write`/`edit` tool calls with a non-empty string `arguments.path`, in order.
    pub file_ops: Vec<(FileOpKind, String)>,
}

impl MessageFacts {
    pub fn role(&self) -> Role {
        self.role.unwrap_or(Role::Other)
    }

    /// `estimateTokens(message)`.
    pub fn tokens(&self) -> u64 {
        let chars = match self.role() {
            Role::User | Role::ToolResult | Role::Custom => self.content.user_chars,
            Role::Assistant => self.content.assistant_chars,
            Role::BashExecution => self.command_len + self.output_len,
            Role::BranchSummary | Role::CompactionSummary => self.summary_len,
            // Pi 0.85's estimate; 1.6 counts a system message (`compaction::projection`).
            Role::System | Role::Other => 0,
        };
        chars.div_ceil(4)
    }

    /// Valid usage of an assistant message (compaction.md §3.3).
    pub fn usage_tokens(&self) -> Option<f64> {
        if self.role() != Role::Assistant {
            return None;
        }
        if matches!(
            self.stop_reason,
            Some(StopReason::Aborted | StopReason::Error)
        ) {
            return None;
        }
        let tokens = self.usage?.context_tokens();
        (tokens > 0.0).then_some(tokens)
    }

    pub fn stop(&self) -> Option<StopReason> {
        self.stop_reason
    }
}

/// Parses a line's facts; `Declined` when the line is not valid UTF-8 JSON the cursor reads
/// (the caller falls back to the general `Value` path, which decides whether it is malformed
/// and handles lone surrogates, invalid UTF-8 and deep nesting as Pi does).
pub fn parse_facts(bytes: &[u8]) -> Result<LineFacts, Declined> {
    let mut c = Cursor::new(bytes);
    c.ws();
    let facts = if c.peek() == Some(b'{') {
        line(&mut c)?
    } else {
        c.skip()?;
        LineFacts::default()
    };
    if !c.at_end() {
        return Err(Declined);
    }
    Ok(facts)
}

/// The object keys the readers look for; every other key is `Other` (its value is skipped).
/// Matching on the decoded key keeps escaped keys (`"\u0069d"`) exact.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Type,
    Id,
    ParentId,
    Message,
    Content,
    Role,
    Command,
    Output,
    Summary,
    Usage,
    StopReason,
    TotalTokens,
    Input,
    CacheRead,
    CacheWrite,
    Text,
    Thinking,
    Name,
    Arguments,
    NestedCalls,
    Other,
}

fn key(lit: &Literal) -> Key {
    if lit.escaped {
        return key_of(lit.decoded().as_bytes());
    }
    key_of(lit.inner())
}

fn key_of(name: &[u8]) -> Key {
    match name {
        b"type" => Key::Type,
        b"id" => Key::Id,
        b"parentId" => Key::ParentId,
        b"message" => Key::Message,
        b"content" => Key::Content,
        b"role" => Key::Role,
        b"command" => Key::Command,
        b"output" => Key::Output,
        b"summary" => Key::Summary,
        b"usage" => Key::Usage,
        b"stopReason" => Key::StopReason,
        b"totalTokens" => Key::TotalTokens,
        b"input" => Key::Input,
        b"cacheRead" => Key::CacheRead,
        b"cacheWrite" => Key::CacheWrite,
        b"text" => Key::Text,
        b"thinking" => Key::Thinking,
        b"name" => Key::Name,
        b"arguments" => Key::Arguments,
        b"nestedCalls" => Key::NestedCalls,
        _ => Key::Other,
    }
}

// ---------------------------------------------------------------------------------------------
// Small lenient readers: any JSON value is accepted; the wrong type reads as "absent".

/// A string field matched against a vocabulary (`None` for any other type).
fn tag<T>(c: &mut Cursor, of: impl FnOnce(&str) -> T) -> Scan<Option<T>> {
    Ok(c.string_or_skip()?.map(|lit| of(&lit.decoded())))
}

/// A string field (`None` for any other type).
fn opt_string(c: &mut Cursor) -> Scan<Option<super::ids::EntryId>> {
    Ok(c.string_or_skip()?.map(|lit| lit.decoded().as_ref().into()))
}

/// The UTF-16 length of a string field (0 for any other type), measured from its literal, so
/// long texts are validated but never unescaped into a copy.
fn str_len(c: &mut Cursor) -> Scan<u64> {
    Ok(c.string_or_skip()?.map_or(0, |lit| lit.utf16_len()))
}

/// A number field as `Value::as_f64` reads it (`NaN` for any other type).
fn num(c: &mut Cursor) -> Scan<f64> {
    match c.peek() {
        Some(b'-' | b'0'..=b'9') => number_f64(c.number()?),
        _ => {
            c.skip()?;
            Ok(f64::NAN)
        }
    }
}

/// Reads an object's members with `member`, or skips any other value (`false`).
fn object_or_skip<'a>(
    c: &mut Cursor<'a>,
    member: impl FnMut(&mut Cursor<'a>, Literal<'a>) -> Scan<()>,
) -> Scan<bool> {
    if c.peek() == Some(b'{') {
        c.object(member)?;
        Ok(true)
    } else {
        c.skip()?;
        Ok(false)
    }
}

// ---------------------------------------------------------------------------------------------
// The line, the message, content blocks, usage.

fn line(c: &mut Cursor) -> Scan<LineFacts> {
    let mut out = LineFacts {
        is_object: true,
        ..LineFacts::default()
    };
    c.object(|c, k| {
        match key(&k) {
            Key::Type => out.kind = tag(c, EntryKind::from_type)?.unwrap_or(EntryKind::Unknown),
            Key::Id => out.id = opt_string(c)?,
            Key::ParentId => out.parent_id = opt_string(c)?,
            Key::Message => out.message = message(c)?,
            Key::Content => out.content_chars = content(c)?.user_chars,
            _ => c.skip()?,
        }
        Ok(())
    })?;
    Ok(out)
}

/// The `message` field: facts when it is an object.
fn message(c: &mut Cursor) -> Scan<Option<MessageFacts>> {
    let mut m = MessageFacts::default();
    let is_object = object_or_skip(c, |c, k| {
        match key(&k) {
            Key::Role => m.role = tag(c, |s| Role::from_message_role(Some(s)))?,
            Key::Content => m.content = content(c)?,
            Key::Command => m.command_len = str_len(c)?,
            Key::Output => m.output_len = str_len(c)?,
            Key::Summary => m.summary_len = str_len(c)?,
            Key::Usage => m.usage = usage(c)?,
            Key::StopReason => m.stop_reason = tag(c, StopReason::parse)?.flatten(),
            Key::NestedCalls => {
                m.nested_calls = true;
                c.skip()?
            }
            _ => c.skip()?,
        }
        Ok(())
    })?;
    Ok(is_object.then_some(m))
}

/// `usage`: numbers when it is an object.
fn usage(c: &mut Cursor) -> Scan<Option<UsageFacts>> {
    let mut u = UsageFacts::default();
    let is_object = object_or_skip(c, |c, k| {
        let slot = match key(&k) {
            Key::TotalTokens => &mut u.total_tokens,
            Key::Input => &mut u.input,
            Key::Output => &mut u.output,
            Key::CacheRead => &mut u.cache_read,
            Key::CacheWrite => &mut u.cache_write,
            _ => return c.skip(),
        };
        *slot = num(c)?;
        Ok(())
    })?;
    Ok(is_object.then_some(u))
}

/// A content block's `type`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BlockType {
    Text,
    Image,
    Thinking,
    ToolCall,
    Other,
}

impl BlockType {
    fn of(s: &str) -> BlockType {
        match s {
            "text" => BlockType::Text,
            "image" => BlockType::Image,
            "thinking" => BlockType::Thinking,
            "toolCall" => BlockType::ToolCall,
            _ => BlockType::Other,
        }
    }
}

/// `content`: a string, or an array of blocks.
fn content(c: &mut Cursor) -> Scan<ContentFacts> {
    let mut out = ContentFacts::default();
    match c.peek() {
        Some(b'"') => out.user_chars = c.string()?.utf16_len(),
        Some(b'[') => c.array(|c| {
            let b = block(c)?;
            match b.block_type {
                Some(BlockType::Text) => {
                    out.user_chars += b.text_len;
                    out.assistant_chars += b.text_len;
                }
                Some(BlockType::Image) => out.user_chars += ESTIMATED_IMAGE_CHARS,
                Some(BlockType::Thinking) => out.assistant_chars += b.thinking_len,
                Some(BlockType::ToolCall) => {
                    out.assistant_chars += b.name_len + b.arguments_len.unwrap_or(0);
                    if let (Some(kind), Some(path)) = (b.name_op, b.path) {
                        if !path.is_empty() {
                            out.file_ops.push((kind, path));
                        }
                    }
                }
                _ => {}
            }
            Ok(())
        })?,
        _ => c.skip()?,
    }
    Ok(out)
}

/// One content block's readings.
#[derive(Default)]
struct BlockFacts {
    block_type: Option<BlockType>,
    text_len: u64,
    thinking_len: u64,
    name_len: u64,
    /// The file operation a `read`/`write`/`edit` tool name stands for.
    name_op: Option<FileOpKind>,
    /// `JSON.stringify(arguments).length` when `arguments` is present.
    arguments_len: Option<u64>,
    /// `arguments.path` when `arguments` is an object whose `path` is a string.
    path: Option<String>,
}

/// A content block: its readings when it is an object (anything else counts for nothing).
fn block(c: &mut Cursor) -> Scan<BlockFacts> {
    let mut b = BlockFacts::default();
    object_or_skip(c, |c, k| {
        match key(&k) {
            Key::Type => b.block_type = tag(c, BlockType::of)?,
            Key::Text => b.text_len = str_len(c)?,
            Key::Thinking => b.thinking_len = str_len(c)?,
            Key::Name => {
                let name = c.string_or_skip()?;
                b.name_len = name.map_or(0, |lit| lit.utf16_len());
                b.name_op = name.and_then(|lit| match &*lit.decoded() {
                    "read" => Some(FileOpKind::Read),
                    "write" => Some(FileOpKind::Write),
                    "edit" => Some(FileOpKind::Edit),
                    _ => None,
                });
            }
            Key::Arguments => {
                let (len, path) = stringify_len(c, true)?;
                b.arguments_len = Some(len);
                b.path = path;
            }
            _ => c.skip()?,
        }
        Ok(())
    })?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_keep_the_last_value() {
        let text = r#"{"type":"message","id":"a","id":"b","message":{"role":"user","content":"xx","content":"yyyy"}}"#;
        let f = parse_facts(text.as_bytes()).unwrap();
        assert_eq!(f.id.as_deref(), Some("b"));
        assert_eq!(f.message.as_ref().unwrap().content.user_chars, 4);
        let args = r#"{"type":"message","message":{"role":"assistant","content":[{"type":"toolCall","name":"x","arguments":{"a":"1","a":"22"}}]}}"#;
        let f = parse_facts(args.as_bytes()).unwrap();
        // "x" (1) + {"a":"22"} (10)
        assert_eq!(f.message.unwrap().content.assistant_chars, 11);
    }

    #[test]
    fn wrong_types_read_as_absent() {
        let f = parse_facts(br#"{"type":5,"id":{"x":1},"parentId":[1],"message":"m"}"#).unwrap();
        assert!(f.kind == EntryKind::Unknown && f.id.is_none() && f.parent_id.is_none());
        assert!(f.message.is_none());
        assert!(parse_facts(b"[1,2]").is_ok_and(|f| !f.is_object));
        assert!(parse_facts(b"{bad").is_err());
    }

    #[test]
    fn lines_the_cursor_does_not_read_are_declined_for_the_general_path() {
        for line in [
            &b"{\"id\":\"\xff\"}"[..],
            br#"{"id":"\ud83d"}"#,
            br#"{"type":"message"} x"#,
            br#"{"a":1,}"#,
        ] {
            assert_eq!(parse_facts(line).map(|_| ()), Err(Declined), "{line:?}");
        }
        assert!(parse_facts(b" \t{\"id\":\"a\"}\r\n ").is_ok());
    }
}
