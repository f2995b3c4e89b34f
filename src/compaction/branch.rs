//! What a branch summary is written from (compaction.md §9): Pi's `prepareBranchEntries`, the
//! messages of the branch being left (newest first within the token budget) and its file
//! operations.

use serde_json::{json, Value};

use std::collections::HashMap;

use super::file_ops::FileOps;
use crate::context::project_entry;
use crate::estimate::estimate_message_in;
use crate::json::truthy;
use crate::session::{ids, Entry, EntryKind, PiVersion, Role};

/// Pi's text when a branch has nothing to summarize.
pub const NO_CONTENT: &str = "No content to summarize";

/// `prepareBranchEntries` under `version`'s rules: messages (newest kept first within the
/// budget) and file operations. Pi 1.6 honours the latest `context_edit` of each entry among
/// those being left (an omitted message is not summarized, a replaced one is summarized as
/// replaced) and counts system messages in the budget.
pub fn prepare_branch_entries(
    version: PiVersion,
    entries: &[Entry],
    budget: i64,
) -> (Vec<Value>, FileOps) {
    let mut edits: HashMap<&str, &Entry> = HashMap::new();
    if version.is_1_6() {
        for e in entries.iter().filter(|e| e.kind == EntryKind::ContextEdit) {
            if let Some(target) = e.str_field("targetId") {
                edits.insert(target, e);
            }
        }
    }
    let edit_of = |e: &Entry| e.id.as_deref().and_then(|id| edits.get(id).copied());
    let mut ops = FileOps::default();
    for e in entries {
        if e.kind == EntryKind::BranchSummary && !truthy(e.get("fromHook")) {
            if let Some(d) = e.get("details").and_then(Value::as_object) {
                ops.add_from_details(d);
            }
        }
    }
    let mut messages: Vec<Value> = Vec::new();
    let mut total: i64 = 0;
    for e in entries.iter().rev() {
        let message = match e.kind {
            EntryKind::Message | EntryKind::CustomMessage if e.role != Some(Role::ToolResult) => {
                match edit_of(e) {
                    Some(edit) => project_entry(e).and_then(|m| {
                        super::projection::edited(m, e.role.unwrap_or(Role::Other), edit)
                    }),
                    None => project_entry(e),
                }
            }
            EntryKind::CustomMessage | EntryKind::Compaction => project_entry(e),
            EntryKind::BranchSummary => Some(json!({
                "role": "branchSummary",
                "summary": e.get("summary").cloned().unwrap_or(Value::Null),
                "fromId": e.get("fromId").cloned().unwrap_or(Value::Null),
                "timestamp": ids::timestamp_value_ms(e.get("timestamp")),
            })),
            _ => None,
        };
        let Some(m) = message else { continue };
        ops.add_from_message(&m);
        let tokens = m.as_object().map_or(0, |o| estimate_message_in(o, version)) as i64;
        if budget > 0 && total + tokens > budget {
            let summary_like = matches!(e.kind, EntryKind::Compaction | EntryKind::BranchSummary);
            if summary_like && (total as f64) < 0.9 * budget as f64 {
                messages.insert(0, m);
            }
            break;
        }
        total += tokens;
        messages.insert(0, m);
    }
    (messages, ops)
}
