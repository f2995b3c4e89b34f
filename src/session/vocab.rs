//! The names Pi's session files use, as enums: entry types, message roles, the file operations
//! of tool calls, and pi-ai's stop reasons. Both the entry model ([`super::entry`]) and the
//! one-pass fact reader ([`super::facts`]) match against them.

use serde_json::Value;

/// The `type` discriminator of a session entry (sessions.md §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    /// Pi 1.6: hides or replaces an earlier message in the context from here on.
    ContextEdit,
    /// Pi 1.6: model-attributed usage that is not part of the context (`cache_warm`, …).
    Usage,
    /// A `session` header line after the first (Pi's loader skips it; never in a tree).
    SessionHeader,
    /// Any other type: kept, projected to nothing.
    #[default]
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
            "context_edit" => EntryKind::ContextEdit,
            "usage" => EntryKind::Usage,
            "session" => EntryKind::SessionHeader,
            _ => EntryKind::Unknown,
        }
    }

    /// The `type` a kind is read from (`"unknown"` for any other type: a shared store's
    /// `type` column, for queries, not for reading the entry back).
    pub fn type_name(self) -> &'static str {
        match self {
            EntryKind::Message => "message",
            EntryKind::ThinkingLevelChange => "thinking_level_change",
            EntryKind::ModelChange => "model_change",
            EntryKind::Compaction => "compaction",
            EntryKind::BranchSummary => "branch_summary",
            EntryKind::Custom => "custom",
            EntryKind::CustomMessage => "custom_message",
            EntryKind::Label => "label",
            EntryKind::SessionInfo => "session_info",
            EntryKind::ContextEdit => "context_edit",
            EntryKind::Usage => "usage",
            EntryKind::SessionHeader => "session",
            EntryKind::Unknown => "unknown",
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
    /// Pi 1.6's system prompt and tools (a `message` entry with role `system`): estimated as 0
    /// by Pi 0.85 (an unknown role to it), counted by Pi 1.6, never summarized.
    System,
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
            Some("system") => Role::System,
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
            Role::System => "system",
            Role::Other => "other",
        }
    }
}

/// Kind of a file operation recorded by a `read`, `write` or `edit` tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileOpKind {
    Read,
    Write,
    Edit,
}

/// The `read`/`write`/`edit` tool calls of an assistant message whose `arguments.path` is a
/// non-empty string, in block order (the facts an entry keeps; see `session::facts`).
pub fn tool_call_ops(m: &Value) -> Vec<(FileOpKind, String)> {
    let mut out = Vec::new();
    let Some(m) = m.as_object() else { return out };
    if m.get("role").and_then(Value::as_str) != Some("assistant") {
        return out;
    }
    let Some(Value::Array(blocks)) = m.get("content") else {
        return out;
    };
    for b in blocks {
        if b.get("type").and_then(Value::as_str) != Some("toolCall") {
            continue;
        }
        let Some(path) = b
            .get("arguments")
            .and_then(|a| a.get("path"))
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        else {
            continue;
        };
        let kind = match b.get("name").and_then(Value::as_str) {
            Some("read") => FileOpKind::Read,
            Some("write") => FileOpKind::Write,
            Some("edit") => FileOpKind::Edit,
            _ => continue,
        };
        out.push((kind, path.to_owned()));
    }
    out
}

/// pi-ai's stop reasons: how an assistant message ended, as sessions store it and as a
/// summarizer's reply reports it (`crate::compaction::reply` uses this same type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    Stop,
    Length,
    ToolUse,
    Error,
    Aborted,
}

impl StopReason {
    /// The one mapping from pi-ai's names; `None` for any other string.
    pub fn parse(s: &str) -> Option<StopReason> {
        match s {
            "stop" => Some(StopReason::Stop),
            "length" => Some(StopReason::Length),
            "toolUse" => Some(StopReason::ToolUse),
            "error" => Some(StopReason::Error),
            "aborted" => Some(StopReason::Aborted),
            _ => None,
        }
    }
}
