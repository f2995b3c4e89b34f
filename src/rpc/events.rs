//! The payloads of the compaction events and hook notifications the daemon sends (the
//! `x-notifications` and `x-hooks` of `proto-docs/openrpc.json`), typed so each is built in one
//! place with Pi's key order. `tests/openrpc.rs` checks what the daemon sends against the
//! document.

use serde::Serialize;

use super::results::{CompactionResult, SessionEntry};

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

/// An event payload as the JSON the connections send.
pub fn payload(event: &impl Serialize) -> serde_json::Value {
    // Plain structs of strings, booleans and numbers always serialize.
    serde_json::to_value(event).unwrap_or_default()
}
