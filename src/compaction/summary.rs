//! Turning summarizer replies into Pi's `CompactionResult` and `compaction` entry
//! (compaction.md §6.2 response checks, §6.6 assembly, §7 persistence).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::file_ops::format_file_operations;
use super::prompts::{NO_PRIOR_HISTORY, SPLIT_TURN_JOINER};
use super::reply::{AssistantReply, StopReason, Usage};

/// Which summarization call a reply belongs to; names Pi's error label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    History,
    TurnPrefix,
    Branch,
}

impl CallKind {
    pub fn label(self) -> &'static str {
        match self {
            CallKind::History => "Summarization",
            CallKind::TurnPrefix => "Turn prefix summarization",
            CallKind::Branch => "Branch summarization",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::History => "history",
            CallKind::TurnPrefix => "turnPrefix",
            CallKind::Branch => "branch",
        }
    }
}

/// Pi's response checks after retries: error, length stop and tool calls are refused with Pi's
/// exact messages; otherwise the text blocks joined with `"\n"` (aborted replies pass, and the
/// caller notices the abort).
pub fn check_reply(kind: CallKind, reply: &AssistantReply) -> Result<String, String> {
    let label = kind.label();
    match reply.stop_reason {
        StopReason::Error => {
            let msg = reply
                .error_message
                .as_deref()
                .filter(|m| !m.is_empty())
                .unwrap_or("Unknown error");
            return Err(format!("{label} failed: {msg}"));
        }
        StopReason::Length => {
            return Err(format!(
                "{label} failed: generation hit the token cap and the summary is incomplete"
            ))
        }
        _ => {}
    }
    if reply.has_tool_call {
        return Err(format!("{label} attempted to call a tool"));
    }
    Ok(reply.text_blocks.join("\n"))
}

/// Joins the history and turn-prefix texts of a split turn.
pub fn join_split_turn(history: Option<&str>, prefix: &str) -> String {
    format!(
        "{}{SPLIT_TURN_JOINER}{prefix}",
        history.unwrap_or(NO_PRIOR_HISTORY)
    )
}

/// Pi's `CompactionResult` (before `estimatedTokensAfter` is known).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionOutcome {
    pub summary: String,
    pub first_kept_entry_id: String,
    pub tokens_before: f64,
    pub usage: Option<Usage>,
    /// `{readFiles, modifiedFiles}` plus any extra fields (e.g. `summarizer`).
    pub details: Value,
    /// True when the content came from a hook/extension.
    pub from_hook: bool,
}

/// `details` as Pi writes it.
pub fn file_details(read_files: &[String], modified_files: &[String]) -> Value {
    serde_json::json!({ "readFiles": read_files, "modifiedFiles": modified_files })
}

/// Appends the file-list blocks to a generated summary.
pub fn with_file_lists(
    summary: String,
    read_files: &[String],
    modified_files: &[String],
) -> String {
    summary + &format_file_operations(read_files, modified_files)
}

/// A number as Pi would hold it: integral values print without a fraction.
pub fn number(f: f64) -> Value {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        Value::from(f as i64)
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

/// The `compaction` entry line, keys in Pi's order; `usage`/`details` omitted when absent.
pub fn compaction_entry(
    id: &str,
    parent_id: Option<&str>,
    timestamp: &str,
    outcome: &CompactionOutcome,
) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), Value::from("compaction"));
    o.insert("id".into(), Value::from(id));
    o.insert(
        "parentId".into(),
        parent_id.map_or(Value::Null, Value::from),
    );
    o.insert("timestamp".into(), Value::from(timestamp));
    o.insert("summary".into(), Value::from(outcome.summary.clone()));
    o.insert(
        "firstKeptEntryId".into(),
        Value::from(outcome.first_kept_entry_id.clone()),
    );
    o.insert("tokensBefore".into(), number(outcome.tokens_before));
    if !outcome.details.is_null() {
        o.insert("details".into(), outcome.details.clone());
    }
    if let Some(u) = &outcome.usage {
        o.insert("usage".into(), usage_json(u));
    }
    o.insert("fromHook".into(), Value::from(outcome.from_hook));
    Value::Object(o)
}

/// A compaction entry as Pi 1.6 writes it: with the context's replayed system message as its
/// `systemMessage` checkpoint (stamped with the entry's own time), so the context rebuilt after
/// it still starts with the system prompt and tools. Without a system message, unchanged.
pub fn with_system_message(mut entry: Value, system: Option<&Value>, timestamp: &str) -> Value {
    if let (Some(Value::Object(system)), Some(o)) = (system, entry.as_object_mut()) {
        let mut checkpoint = system.clone();
        let ms = crate::session::ids::timestamp_value_ms(Some(&Value::from(timestamp)));
        checkpoint.insert("timestamp".into(), ms.map_or(Value::Null, Value::from));
        o.insert("systemMessage".into(), Value::Object(checkpoint));
    }
    entry
}

/// The `branch_summary` entry line of tree navigation (compaction.md §9), keys in Pi's order;
/// `details` and `usage` omitted when absent.
pub fn branch_summary_entry(
    id: &str,
    parent_id: Option<&str>,
    timestamp: &str,
    from_id: &str,
    summary: &BranchSummary,
) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), Value::from("branch_summary"));
    o.insert("id".into(), Value::from(id));
    o.insert(
        "parentId".into(),
        parent_id.map_or(Value::Null, Value::from),
    );
    o.insert("timestamp".into(), Value::from(timestamp));
    o.insert("fromId".into(), Value::from(from_id));
    o.insert("summary".into(), Value::from(summary.text.clone()));
    if !summary.details.is_null() {
        o.insert("details".into(), summary.details.clone());
    }
    if let Some(u) = &summary.usage {
        o.insert("usage".into(), usage_json(u));
    }
    o.insert("fromHook".into(), Value::from(summary.from_hook));
    Value::Object(o)
}

/// A finished branch summary, as its entry records it.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchSummary {
    pub text: String,
    /// `{readFiles, modifiedFiles}`, or what a hook supplied (`Null`: omitted).
    pub details: Value,
    pub usage: Option<Usage>,
    pub from_hook: bool,
}

/// A `Usage` as JSON in Pi's key order.
pub fn usage_json(u: &Usage) -> Value {
    serde_json::to_value(u).unwrap_or(Value::Null)
}

/// Serializes a number as Pi holds it: an integral value without a fraction (`1234`, not
/// `1234.0`), so in-process consumers of the JSON see the same value the wire shows.
pub fn js_number<S: Serializer>(f: &f64, s: S) -> Result<S::Ok, S::Error> {
    number(*f).serialize(s)
}

/// Pi's `CompactionResult` plus compactd's `estimatedTokensAfter`: the outcome of a compaction
/// (`compact`, `checkCompaction.result`, `compaction_end.result`, `compactd compact`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionResult {
    pub summary: String,
    pub first_kept_entry_id: String,
    #[serde(serialize_with = "js_number")]
    pub tokens_before: f64,
    /// Estimated tokens of the agent context rebuilt after the entry was appended (beyond Pi).
    pub estimated_tokens_after: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Usage")]
    pub usage: Option<Usage>,
    /// The file lists, plus `summarizer: "extractive"` when the embedded summarizer wrote it;
    /// a hook-supplied compaction carries whatever details the hook returned.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Value")]
    pub details: Option<Value>,
    /// Beyond Pi: what the compaction's summarization calls cost (history, turn prefix and
    /// retries), priced at the summarizer's model; `usd` is null for an unknown price.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "crate::accounting::Cost")]
    pub cost: Option<crate::accounting::Cost>,
    /// Beyond Pi: the summary's handoff check (`compaction.handoff` not `off`): what it owed,
    /// what it carried, what it missed, and what a repair appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "crate::handoff::Report")]
    pub handoff: Option<crate::handoff::Report>,
}

impl CompactionResult {
    /// The result of `outcome` once its entry is appended and the context re-estimated.
    pub fn new(outcome: &CompactionOutcome, estimated_tokens_after: u64) -> CompactionResult {
        CompactionResult {
            summary: outcome.summary.clone(),
            first_kept_entry_id: outcome.first_kept_entry_id.clone(),
            tokens_before: outcome.tokens_before,
            estimated_tokens_after,
            usage: outcome.usage,
            details: (!outcome.details.is_null()).then(|| outcome.details.clone()),
            cost: None,
            handoff: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(stop: StopReason, text: &str) -> AssistantReply {
        AssistantReply {
            text_blocks: vec![text.to_owned(), "b".into()],
            thinking: vec!["t".into()],
            has_tool_call: false,
            usage: Usage::default(),
            stop_reason: stop,
            error_message: None,
            http_status: None,
            retry_after_ms: None,
        }
    }

    #[test]
    fn pi_error_strings() {
        assert_eq!(
            check_reply(CallKind::History, &reply(StopReason::Stop, "a")),
            Ok("a\nb".into())
        );
        assert_eq!(
            check_reply(CallKind::History, &reply(StopReason::Length, "a")),
            Err(
                "Summarization failed: generation hit the token cap and the summary is incomplete"
                    .into()
            )
        );
        assert_eq!(
            check_reply(CallKind::TurnPrefix, &reply(StopReason::Error, "a")),
            Err("Turn prefix summarization failed: Unknown error".into())
        );
        let mut tool = reply(StopReason::ToolUse, "a");
        tool.has_tool_call = true;
        assert_eq!(
            check_reply(CallKind::Branch, &tool),
            Err("Branch summarization attempted to call a tool".into())
        );
        assert_eq!(
            join_split_turn(None, "P"),
            "No prior history.\n\n---\n\n**Turn Context (split turn):**\n\nP"
        );
    }
}
