//! One line of a Pi session file, parsed once and kept as read.
//!
//! Pi keeps entries as plain parsed objects and never rewrites a line, so compactd does the
//! same: the whole JSON object stays in [`Entry::value`] (key order preserved, unknown fields
//! kept), and the few facts every algorithm needs (type, id, parent, projected role, token
//! estimate, usage) are extracted once at load into plain fields. That makes path walks, cut
//! points and usage checks cheap on sessions of hundreds of megabytes without re-reading JSON.

use serde_json::{Map, Value};

use crate::compaction::tokens;

/// The `type` discriminator of a session entry (sessions.md §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Message,
    ThinkingLevelChange,
    ModelChange,
    Compaction,
    BranchSummary,
    Custom,
    CustomMessage,
    Label,
    SessionInfo,
    /// Any other type: kept, projected to nothing.
    Unknown,
}

impl EntryKind {
    pub fn from_type(t: &str) -> EntryKind {
        match t {
            "message" => EntryKind::Message,
            "thinking_level_change" => EntryKind::ThinkingLevelChange,
            "model_change" => EntryKind::ModelChange,
            "compaction" => EntryKind::Compaction,
            "branch_summary" => EntryKind::BranchSummary,
            "custom" => EntryKind::Custom,
            "custom_message" => EntryKind::CustomMessage,
            "label" => EntryKind::Label,
            "session_info" => EntryKind::SessionInfo,
            _ => EntryKind::Unknown,
        }
    }
}

/// The role of the one message an entry projects to (sessions.md §9.1), if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    ToolResult,
    BashExecution,
    Custom,
    BranchSummary,
    CompactionSummary,
    /// A `message` entry with a role Pi does not know; projected but estimated as 0.
    Other,
}

impl Role {
    pub fn from_message_role(role: Option<&str>) -> Role {
        match role {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("toolResult") => Role::ToolResult,
            Some("bashExecution") => Role::BashExecution,
            Some("custom") => Role::Custom,
            Some("branchSummary") => Role::BranchSummary,
            Some("compactionSummary") => Role::CompactionSummary,
            _ => Role::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolResult => "toolResult",
            Role::BashExecution => "bashExecution",
            Role::Custom => "custom",
            Role::BranchSummary => "branchSummary",
            Role::CompactionSummary => "compactionSummary",
            Role::Other => "other",
        }
    }
}

/// A parsed session entry plus the facts extracted from it at load.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The entry exactly as parsed (or as migrated).
    pub value: Value,
    pub kind: EntryKind,
    /// `id`, or `None` when missing or not a string.
    pub id: Option<String>,
    /// `parentId`, or `None` for a root (null, missing or not a string).
    pub parent_id: Option<String>,
    /// Role of the projected message, `None` for entries that project nothing (metadata).
    pub role: Option<Role>,
    /// `estimateTokens` of the projected message (0 when none).
    pub tokens: u64,
    /// `calculateContextTokens(usage)` when this is an assistant message with valid usage
    /// (compaction.md §3.3), else `None`.
    pub usage_tokens: Option<f64>,
}

impl Entry {
    /// Extracts the cached facts from a parsed entry object.
    pub fn from_value(value: Value) -> Entry {
        let obj = value.as_object();
        let field = |k: &str| obj.and_then(|o| o.get(k));
        let kind = EntryKind::from_type(field("type").and_then(Value::as_str).unwrap_or(""));
        let id = field("id").and_then(Value::as_str).map(str::to_owned);
        let parent_id = field("parentId").and_then(Value::as_str).map(str::to_owned);
        let mut entry = Entry {
            value,
            kind,
            id,
            parent_id,
            role: None,
            tokens: 0,
            usage_tokens: None,
        };
        entry.refresh_projection();
        entry
    }

    /// Recomputes role, token estimate and usage (after a migration changed the value).
    pub fn refresh_projection(&mut self) {
        let (role, tokens, usage) = {
            let obj = self.value.as_object();
            match (self.kind, obj) {
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
        };
        self.role = role;
        self.tokens = tokens;
        self.usage_tokens = usage;
    }

    /// The entry object (entries are always objects; see `reader`).
    pub fn obj(&self) -> Option<&Map<String, Value>> {
        self.value.as_object()
    }

    /// A field of the entry object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.value.as_object().and_then(|o| o.get(key))
    }

    /// A string field of the entry object.
    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// The stored message of a `message` entry.
    pub fn message(&self) -> Option<&Map<String, Value>> {
        if self.kind != EntryKind::Message {
            return None;
        }
        self.get("message").and_then(Value::as_object)
    }

    /// `type` as written in the file.
    pub fn type_name(&self) -> &str {
        self.str_field("type").unwrap_or("")
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

    /// The message role of a `message` entry (for file-op and model tracking).
    pub fn message_role(&self) -> Option<&str> {
        self.message()
            .and_then(|m| m.get("role"))
            .and_then(Value::as_str)
    }
}
