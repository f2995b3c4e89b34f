//! `prepareCompaction` (compaction.md §5): everything a compaction needs, computed from the
//! branch path without calling any model.

use serde_json::Value;

use super::cut_point::{find_cut_point, CutPoint};
use super::file_ops::FileOps;
use super::tokens::{estimate_context_tokens, CompactionSettings, ContextEstimate, MessageFacts};
use crate::context::{context_entries, project_entry};
use crate::json::truthy;
use crate::session::{Entry, EntryKind};

/// Pi's exact refusal texts for a manual compaction with nothing to do.
pub const ALREADY_COMPACTED: &str = "Already compacted";
pub const NOTHING_TO_COMPACT: &str = "Nothing to compact (session too small)";

/// Why `prepareCompaction` returned `undefined`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NothingToCompact {
    /// The last path entry is a compaction.
    AlreadyCompacted,
    /// Nothing to summarize (small session, A2, an empty path, or a first kept entry without id).
    TooSmall,
}

impl NothingToCompact {
    pub fn message(self) -> &'static str {
        match self {
            NothingToCompact::AlreadyCompacted => ALREADY_COMPACTED,
            NothingToCompact::TooSmall => NOTHING_TO_COMPACT,
        }
    }
}

/// One message picked for summarization, with the entry it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedMessage {
    /// Index into the path the preparation was made from.
    pub path_index: usize,
    pub entry_id: Option<String>,
    pub message: Value,
}

impl PreparedMessage {
    pub fn role(&self) -> &str {
        self.message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// The boundaries `prepareCompaction` worked with (reported by `inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundaries {
    pub prev_compaction_index: Option<usize>,
    pub boundary_start: usize,
    pub boundary_end: usize,
    pub cut: CutPoint,
}

/// Pi's `CompactionPreparation`.
#[derive(Debug, Clone, PartialEq)]
pub struct Preparation {
    pub first_kept_entry_id: String,
    pub messages_to_summarize: Vec<PreparedMessage>,
    pub turn_prefix_messages: Vec<PreparedMessage>,
    pub is_split_turn: bool,
    pub tokens_before: f64,
    pub previous_summary: Option<String>,
    pub file_ops: FileOps,
    pub settings: CompactionSettings,
    pub boundaries: Boundaries,
}

/// Boundaries of the span a compaction of `path` would summarize: after the previous
/// compaction's kept start, through the end of the path.
pub fn compaction_boundaries(path: &[&Entry], settings: &CompactionSettings) -> Boundaries {
    let prev = path.iter().rposition(|e| e.kind == EntryKind::Compaction);
    let boundary_start = match prev {
        Some(p) => {
            let first_kept = path[p].str_field("firstKeptEntryId");
            path.iter()
                .position(|e| e.id.as_deref().is_some_and(|id| Some(id) == first_kept))
                .unwrap_or(p + 1)
        }
        None => 0,
    };
    let boundary_end = path.len();
    let cut = find_cut_point(
        path,
        boundary_start,
        boundary_end,
        settings.keep_recent_tokens,
    );
    Boundaries {
        prev_compaction_index: prev,
        boundary_start,
        boundary_end,
        cut,
    }
}

/// `estimateContextTokens(buildSessionContext(path).messages)` without materializing messages.
pub fn estimate_path_context(path: &[&Entry]) -> ContextEstimate {
    estimate_context_tokens(
        context_entries(path)
            .into_iter()
            .filter(|e| e.role.is_some())
            .map(|e| MessageFacts {
                tokens: e.tokens,
                usage_tokens: e.usage_tokens,
            }),
    )
}

fn collect_messages(path: &[&Entry], range: std::ops::Range<usize>) -> Vec<PreparedMessage> {
    range
        .filter(|&i| path[i].kind != EntryKind::Compaction)
        .filter_map(|i| {
            project_entry(path[i]).map(|message| PreparedMessage {
                path_index: i,
                entry_id: path[i].id.clone(),
                message,
            })
        })
        .collect()
}

/// `prepareCompaction(pathEntries, settings)`.
pub fn prepare_compaction(
    path: &[&Entry],
    settings: &CompactionSettings,
) -> Result<Preparation, NothingToCompact> {
    if path.last().is_some_and(|e| e.kind == EntryKind::Compaction) {
        return Err(NothingToCompact::AlreadyCompacted);
    }
    let b = compaction_boundaries(path, settings);
    let previous_summary = b
        .prev_compaction_index
        .and_then(|p| path[p].str_field("summary"))
        .map(str::to_owned);
    let tokens_before = estimate_path_context(path).tokens;
    let cut = b.cut;
    let first_kept_id = path
        .get(cut.first_kept_entry_index)
        .and_then(|e| e.id.clone())
        .filter(|id| !id.is_empty())
        .ok_or(NothingToCompact::TooSmall)?;
    let history_end = match (cut.is_split_turn, cut.turn_start_index) {
        (true, Some(ts)) => ts,
        _ => cut.first_kept_entry_index,
    };
    let messages_to_summarize =
        collect_messages(path, b.boundary_start..history_end.max(b.boundary_start));
    let turn_prefix_messages = match (cut.is_split_turn, cut.turn_start_index) {
        (true, Some(ts)) => collect_messages(path, ts..cut.first_kept_entry_index),
        _ => Vec::new(),
    };
    if messages_to_summarize.is_empty() && turn_prefix_messages.is_empty() {
        return Err(NothingToCompact::TooSmall);
    }
    let mut file_ops = FileOps::default();
    if let Some(p) = b.prev_compaction_index {
        let prev = path[p];
        if !truthy(prev.get("fromHook")) && truthy(prev.get("details")) {
            if let Some(details) = prev.get("details").and_then(Value::as_object) {
                file_ops.add_from_details(details);
            }
        }
    }
    for m in messages_to_summarize
        .iter()
        .chain(turn_prefix_messages.iter())
    {
        file_ops.add_from_message(&m.message);
    }
    Ok(Preparation {
        first_kept_entry_id: first_kept_id,
        messages_to_summarize,
        turn_prefix_messages,
        is_split_turn: cut.is_split_turn,
        tokens_before,
        previous_summary,
        file_ops,
        settings: *settings,
        boundaries: b,
    })
}
