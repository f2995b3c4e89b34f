//! The payloads of the compaction events and hook notifications the daemon sends (the
//! `x-notifications` and `x-hooks` of `proto-docs/openrpc.json`), typed so each is built in one
//! place with Pi's key order. `tests/openrpc.rs` checks what the daemon sends against the
//! document.

use serde::Serialize;

use super::results::{AgentMessage, CompactionResult, CompactionSettingsView, SessionEntry};
use crate::compaction::summary::js_number;

/// `compaction_start`: a compaction of the session started (Pi's `compaction_start`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionStart<'a> {
    pub session_id: &'a str,
    /// `manual`, `threshold` or `overflow`.
    pub reason: &'a str,
}

/// `compaction_end`: a compaction ended; `result` only when it succeeded.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionEnd<'a> {
    pub session_id: &'a str,
    pub reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<&'a CompactionResult>,
    pub aborted: bool,
    pub will_retry: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<&'a str>,
}

/// The `session_compact` hook notification: an entry was appended (Pi's `session_compact`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCompact<'a> {
    pub session_id: &'a str,
    pub compaction_entry: SessionEntry,
    pub from_extension: bool,
    pub reason: &'a str,
    pub will_retry: bool,
}

/// The `session_compact_failed` hook notification: a compaction ended without an entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCompactFailed<'a> {
    pub session_id: &'a str,
    pub reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<&'a str>,
    pub aborted: bool,
    /// Always false: a failed compaction is never retried.
    pub will_retry: bool,
    pub from_extension: bool,
}

/// The `session_before_compact` hook request: asked before a compaction summarizes.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionBeforeCompact<'a> {
    pub session_id: &'a str,
    pub preparation: CompactionPreparation,
    pub branch_entries: Vec<SessionEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<&'a str>,
    pub reason: &'a str,
    pub will_retry: bool,
}

/// Pi's `CompactionPreparation` (compaction.md §5 step 13) as hooks receive it, sets as arrays.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionPreparation {
    pub first_kept_entry_id: String,
    pub messages_to_summarize: Vec<AgentMessage>,
    pub turn_prefix_messages: Vec<AgentMessage>,
    pub is_split_turn: bool,
    #[serde(serialize_with = "js_number")]
    pub tokens_before: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_summary: Option<String>,
    pub file_ops: FileOps,
    pub settings: CompactionSettingsView,
}

/// The file operations of a preparation, each set as an array in first-seen order.
#[derive(Debug, Clone, Serialize)]
pub struct FileOps {
    pub read: Vec<String>,
    pub written: Vec<String>,
    pub edited: Vec<String>,
}

impl CompactionPreparation {
    /// The hooks' view of `prep` (every message parsed from its line now: CPU work).
    pub fn of(prep: &crate::compaction::Preparation) -> CompactionPreparation {
        let messages = |m: &[crate::compaction::prepare::PreparedMessage]| {
            m.iter().map(|x| AgentMessage(x.message())).collect()
        };
        let set = |s: &indexmap::IndexSet<String>| s.iter().cloned().collect();
        CompactionPreparation {
            first_kept_entry_id: prep.first_kept_entry_id.clone(),
            messages_to_summarize: messages(&prep.messages_to_summarize),
            turn_prefix_messages: messages(&prep.turn_prefix_messages),
            is_split_turn: prep.is_split_turn,
            tokens_before: prep.tokens_before,
            previous_summary: prep.previous_summary.clone(),
            file_ops: FileOps {
                read: set(&prep.file_ops.read),
                written: set(&prep.file_ops.written),
                edited: set(&prep.file_ops.edited),
            },
            settings: CompactionSettingsView::from(&prep.settings),
        }
    }
}

/// The `session_before_tree` hook request: asked before `navigateTree` moves the leaf.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionBeforeTree<'a> {
    pub session_id: &'a str,
    pub preparation: TreePreparation<'a>,
}

/// Pi's tree-navigation preparation (compaction.md §9).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TreePreparation<'a> {
    pub target_id: Option<&'a str>,
    pub old_leaf_id: Option<&'a str>,
    pub common_ancestor_id: Option<&'a str>,
    pub entries_to_summarize: Vec<SessionEntry>,
    pub user_wants_summary: bool,
    pub custom_instructions: Option<&'a str>,
    pub replace_instructions: bool,
    pub label: Option<&'a str>,
}

/// An event payload as the JSON the connections send.
pub fn payload(event: &impl Serialize) -> serde_json::Value {
    // Plain structs of strings, booleans and numbers always serialize.
    serde_json::to_value(event).unwrap_or_default()
}
