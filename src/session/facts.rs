//! The facts of one session line, read in a single borrowed pass over its bytes.
//!
//! Opening a session must cost little more than validating its JSON, so message lines are never
//! turned into `serde_json::Value` trees at load. Instead this visitor walks the line once and
//! keeps only what the algorithms need: type, id, parent, the projected role, the UTF-16
//! lengths behind Pi's token estimate, the usage numbers, the stop reason and the paths of
//! `read`/`write`/`edit` tool calls. Everything else is skipped with `IgnoredAny`, which still
//! validates it. The message itself stays as the line's bytes and is parsed only when needed.
//!
//! The semantics must be exactly those of the `Value`-based functions in
//! [`crate::estimate`] (which stays the definition): JSON's "last duplicate key wins",
//! lengths of `JSON.stringify` output, and zero for fields of the wrong type. A property test
//! checks both against each other.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::vocab::{EntryKind, FileOpKind, Role, StopReason};
use crate::estimate::ESTIMATED_IMAGE_CHARS;
use crate::json::measure::{raw_string_utf16_len, StringifyLen};
use crate::json::utf16_len;

/// What the fast pass extracts from one line.
#[derive(Debug, Default)]
pub struct LineFacts {
    /// The line is a JSON object (anything else becomes an `Unknown` entry without id).
    pub is_object: bool,
    pub kind: EntryKind,
    pub id: Option<String>,
    pub parent_id: Option<String>,
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
            Role::Other => 0,
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

/// Parses a line's facts; `Err` when it is not valid JSON for serde (the caller falls back to
/// the lenient `Value` path, which handles lone surrogates and invalid UTF-8 as Pi does).
pub fn parse_facts(bytes: &[u8]) -> Result<LineFacts, serde_json::Error> {
    serde_json::from_slice::<LineFacts>(bytes)
}

/// The visitor methods for JSON's scalars other than strings, all read as `$absent`.
macro_rules! scalars_are_absent {
    ($absent:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($absent)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($absent)
        }
    };
}

/// Drains an array (still validated) and reads it as `$absent`.
macro_rules! seq_is_absent {
    ($absent:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            while a.next_element::<IgnoredAny>()?.is_some() {}
            Ok($absent)
        }
    };
}

/// Drains an object (still validated) and reads it as `$absent`.
macro_rules! map_is_absent {
    ($absent:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
            while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($absent)
        }
    };
}

/// Every type but strings reads as `$absent` (visitors that handle strings themselves).
macro_rules! other_types_are_absent {
    ($absent:expr) => {
        scalars_are_absent!($absent);
        seq_is_absent!($absent);
        map_is_absent!($absent);
    };
}

/// Every type but objects reads as `$absent` (visitors that handle objects themselves).
macro_rules! other_types_are_absent_but_map {
    ($absent:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($absent)
        }
        scalars_are_absent!($absent);
        seq_is_absent!($absent);
    };
}

// ---------------------------------------------------------------------------------------------
// Small lenient readers: any JSON value is accepted; the wrong type reads as "absent".

/// A string field (`None` for any other type).
struct OptString(Option<String>);

impl<'de> Deserialize<'de> for OptString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OptString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<OptString, E> {
                Ok(OptString(Some(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<OptString, E> {
                Ok(OptString(Some(s)))
            }
            other_types_are_absent!(OptString(None));
        }
        d.deserialize_any(V)
    }
}

/// A string field matched against a known vocabulary without allocating (`None` for any other
/// type; unknown strings map to the vocabulary's catch-all).
struct Tag<T>(Option<T>);

trait FromTag: Sized {
    fn from_tag(s: &str) -> Self;
}

impl FromTag for EntryKind {
    fn from_tag(s: &str) -> Self {
        EntryKind::from_type(s)
    }
}

impl FromTag for Role {
    fn from_tag(s: &str) -> Self {
        Role::from_message_role(Some(s))
    }
}

impl FromTag for Option<StopReason> {
    fn from_tag(s: &str) -> Self {
        StopReason::parse(s)
    }
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

impl FromTag for BlockType {
    fn from_tag(s: &str) -> Self {
        match s {
            "text" => BlockType::Text,
            "image" => BlockType::Image,
            "thinking" => BlockType::Thinking,
            "toolCall" => BlockType::ToolCall,
            _ => BlockType::Other,
        }
    }
}

impl<'de, T: FromTag> Deserialize<'de> for Tag<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: FromTag> Visitor<'de> for V<T> {
            type Value = Tag<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Tag<T>, E> {
                Ok(Tag(Some(T::from_tag(s))))
            }
            other_types_are_absent!(Tag(None));
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A tool call's `name`: its UTF-16 length, and the file operation it stands for.
struct ToolName {
    len: u64,
    op: Option<FileOpKind>,
}

impl<'de> Deserialize<'de> for ToolName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ToolName, E> {
                let op = match s {
                    "read" => Some(FileOpKind::Read),
                    "write" => Some(FileOpKind::Write),
                    "edit" => Some(FileOpKind::Edit),
                    _ => None,
                };
                Ok(ToolName {
                    len: utf16_len(s) as u64,
                    op,
                })
            }
            other_types_are_absent!(ToolName { len: 0, op: None });
        }
        d.deserialize_any(V)
    }
}

/// The UTF-16 length of a string field (0 for any other type). The value is captured raw and
/// measured from its escapes, so long texts are validated but never unescaped into a copy.
struct StrLen(u64);

impl<'de> Deserialize<'de> for StrLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <&'de serde_json::value::RawValue>::deserialize(d)?;
        Ok(StrLen(raw_string_utf16_len(raw.get()).unwrap_or(0)))
    }
}

/// A number field as `Value::as_f64` reads it (`NaN` for any other type).
struct Num(f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Num, E> {
                Ok(Num(n as f64))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Num, E> {
                Ok(Num(n as f64))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Num, E> {
                Ok(Num(n))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Num, E> {
                Ok(Num(f64::NAN))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Num, E> {
                Ok(Num(f64::NAN))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
                Ok(Num(f64::NAN))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Num, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Num(f64::NAN))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Num, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Num(f64::NAN))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------------
// The line, the message, content blocks, usage.

impl<'de> Deserialize<'de> for LineFacts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LineFacts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<LineFacts, A::Error> {
                let mut out = LineFacts {
                    is_object: true,
                    ..LineFacts::default()
                };
                while let Some(key) = a.next_key::<Key>()? {
                    match key {
                        Key::Type => {
                            out.kind = a
                                .next_value::<Tag<EntryKind>>()?
                                .0
                                .unwrap_or(EntryKind::Unknown)
                        }
                        Key::Id => out.id = a.next_value::<OptString>()?.0,
                        Key::ParentId => out.parent_id = a.next_value::<OptString>()?.0,
                        Key::Message => out.message = a.next_value::<OptMessage>()?.0,
                        Key::Content => out.content_chars = a.next_value::<Content>()?.0.user_chars,
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
            other_types_are_absent_but_map!(LineFacts::default());
        }
        d.deserialize_any(V)
    }
}

/// The object keys the visitors look for, matched without allocating; every other key is
/// `Other` (its value is skipped). Matching on the decoded key keeps escaped keys
/// (`"\u0069d"`) exact.
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
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
                    "type" => Key::Type,
                    "id" => Key::Id,
                    "parentId" => Key::ParentId,
                    "message" => Key::Message,
                    "content" => Key::Content,
                    "role" => Key::Role,
                    "command" => Key::Command,
                    "output" => Key::Output,
                    "summary" => Key::Summary,
                    "usage" => Key::Usage,
                    "stopReason" => Key::StopReason,
                    "totalTokens" => Key::TotalTokens,
                    "input" => Key::Input,
                    "cacheRead" => Key::CacheRead,
                    "cacheWrite" => Key::CacheWrite,
                    "text" => Key::Text,
                    "thinking" => Key::Thinking,
                    "name" => Key::Name,
                    "arguments" => Key::Arguments,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// The `message` field: facts when it is an object.
struct OptMessage(Option<MessageFacts>);

impl<'de> Deserialize<'de> for OptMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OptMessage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<OptMessage, A::Error> {
                let mut m = MessageFacts::default();
                while let Some(key) = a.next_key::<Key>()? {
                    match key {
                        Key::Role => m.role = a.next_value::<Tag<Role>>()?.0,
                        Key::Content => m.content = a.next_value::<Content>()?.0,
                        Key::Command => m.command_len = a.next_value::<StrLen>()?.0,
                        Key::Output => m.output_len = a.next_value::<StrLen>()?.0,
                        Key::Summary => m.summary_len = a.next_value::<StrLen>()?.0,
                        Key::Usage => m.usage = a.next_value::<OptUsage>()?.0,
                        Key::StopReason => {
                            m.stop_reason = a.next_value::<Tag<Option<StopReason>>>()?.0.flatten()
                        }
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(OptMessage(Some(m)))
            }
            other_types_are_absent_but_map!(OptMessage(None));
        }
        d.deserialize_any(V)
    }
}

/// `usage`: numbers when it is an object.
struct OptUsage(Option<UsageFacts>);

impl<'de> Deserialize<'de> for OptUsage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OptUsage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<OptUsage, A::Error> {
                let mut u = UsageFacts::default();
                while let Some(key) = a.next_key::<Key>()? {
                    let slot = match key {
                        Key::TotalTokens => &mut u.total_tokens,
                        Key::Input => &mut u.input,
                        Key::Output => &mut u.output,
                        Key::CacheRead => &mut u.cache_read,
                        Key::CacheWrite => &mut u.cache_write,
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = a.next_value::<Num>()?.0;
                }
                Ok(OptUsage(Some(u)))
            }
            other_types_are_absent_but_map!(OptUsage(None));
        }
        d.deserialize_any(V)
    }
}

/// `content`: a string, or an array of blocks.
struct Content(ContentFacts);

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
                Ok(Content(ContentFacts {
                    user_chars: utf16_len(s) as u64,
                    ..ContentFacts::default()
                }))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Content, A::Error> {
                let mut c = ContentFacts::default();
                while let Some(b) = a.next_element::<Block>()? {
                    let b = b.0;
                    match b.block_type {
                        Some(BlockType::Text) => {
                            c.user_chars += b.text_len;
                            c.assistant_chars += b.text_len;
                        }
                        Some(BlockType::Image) => c.user_chars += ESTIMATED_IMAGE_CHARS,
                        Some(BlockType::Thinking) => c.assistant_chars += b.thinking_len,
                        Some(BlockType::ToolCall) => {
                            c.assistant_chars += b.name_len + b.arguments_len.unwrap_or(0);
                            if let (Some(kind), Some(path)) = (b.name_op, b.path) {
                                if !path.is_empty() {
                                    c.file_ops.push((kind, path));
                                }
                            }
                        }
                        _ => {}
                    }
                }
                Ok(Content(c))
            }
            scalars_are_absent!(Content(ContentFacts::default()));
            map_is_absent!(Content(ContentFacts::default()));
        }
        d.deserialize_any(V)
    }
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

struct Block(BlockFacts);

impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Block;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Block, A::Error> {
                let mut b = BlockFacts::default();
                while let Some(key) = a.next_key::<Key>()? {
                    match key {
                        Key::Type => b.block_type = a.next_value::<Tag<BlockType>>()?.0,
                        Key::Text => b.text_len = a.next_value::<StrLen>()?.0,
                        Key::Thinking => b.thinking_len = a.next_value::<StrLen>()?.0,
                        Key::Name => {
                            let name = a.next_value::<ToolName>()?;
                            b.name_len = name.len;
                            b.name_op = name.op;
                        }
                        Key::Arguments => {
                            let args = a.next_value_seed(StringifyLen::capturing_path())?;
                            b.arguments_len = Some(args.len);
                            b.path = args.path;
                        }
                        _ => {
                            a.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Block(b))
            }
            other_types_are_absent_but_map!(Block(BlockFacts::default()));
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeSeed;

    #[test]
    fn duplicate_keys_keep_the_last_value() {
        let text = r#"{"type":"message","id":"a","id":"b","message":{"role":"user","content":"xx","content":"yyyy"}}"#;
        let f = parse_facts(text.as_bytes()).unwrap();
        assert_eq!(f.id.as_deref(), Some("b"));
        assert_eq!(f.message.as_ref().unwrap().content.user_chars, 4);
        let args = r#"{"a":"1","a":"22"}"#;
        let mut de = serde_json::Deserializer::from_str(args);
        assert_eq!(StringifyLen::plain().deserialize(&mut de).unwrap().len, 10);
    }

    #[test]
    fn wrong_types_read_as_absent() {
        let f = parse_facts(br#"{"type":5,"id":{"x":1},"parentId":[1],"message":"m"}"#).unwrap();
        assert!(f.kind == EntryKind::Unknown && f.id.is_none() && f.parent_id.is_none());
        assert!(f.message.is_none());
        assert!(parse_facts(b"[1,2]").is_ok_and(|f| !f.is_object));
        assert!(parse_facts(b"{bad").is_err());
    }
}
