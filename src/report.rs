//! The analysis `compactd inspect --json` prints: everything Pi computes about a session before
//! compacting it, in the field names and shapes of the conformance fixtures' `expected.json`.
//!
//! Pure: built from an in-memory [`SessionTree`], so the conformance test and the CLI share it.

use serde_json::{json, Map, Value};

use std::sync::Arc;

use crate::compaction::prepare::{
    indexed_boundaries, plan_compaction, NothingToCompactDetail, Plan, Preparation,
};
use crate::compaction::projection::{system_tokens, Projection};
use crate::compaction::summary::number;
use crate::compaction::tokens::{
    estimate_context_tokens, should_compact, CompactionSettings, ContextEstimate, MessageFacts,
};
use crate::compaction::BranchIndex;
use crate::compaction::{file_ops::format_file_operations, NothingToCompact};
use crate::context::{build_session_context, context_entries, context_settings};
use crate::session::{BranchView, Entry, PiVersion, SessionTree};

/// Context windows the fixtures evaluate `shouldCompact` against.
pub const WINDOWS: [i64; 7] = [8192, 32000, 128000, 200000, 272000, 400000, 1000000];

fn id_value(e: &Entry) -> Value {
    e.id.as_deref().map_or(Value::Null, Value::from)
}

fn opt_index(i: Option<usize>) -> Value {
    i.map_or(Value::from(-1), Value::from)
}

/// `estimateContextTokens` result as JSON.
pub fn estimate_json(e: &ContextEstimate) -> Value {
    json!({
        "tokens": number(e.tokens),
        "usageTokens": number(e.usage_tokens),
        "trailingTokens": e.trailing_tokens,
        "lastUsageIndex": e.last_usage_index,
    })
}

/// `[{entryId, role}]` of prepared messages.
fn prepared_ids(msgs: &[crate::compaction::prepare::PreparedMessage]) -> Value {
    Value::Array(
        msgs.iter()
            .map(|m| json!({"entryId": m.entry_id(), "role": m.role_value()}))
            .collect(),
    )
}

/// The `preparation` object of the fixtures.
pub fn preparation_json(prep: &Preparation) -> Value {
    let (read_files, modified_files) = prep.file_ops.file_lists();
    json!({
        "firstKeptEntryId": prep.first_kept_entry_id,
        "isSplitTurn": prep.is_split_turn,
        "tokensBefore": number(prep.tokens_before),
        "previousSummary": prep.previous_summary,
        "messagesToSummarize": prepared_ids(&prep.messages_to_summarize),
        "turnPrefixMessages": prepared_ids(&prep.turn_prefix_messages),
        "fileOps": prep.file_ops.to_json(),
        "fileLists": {"readFiles": read_files, "modifiedFiles": modified_files},
        "formattedFileOperations": format_file_operations(&read_files, &modified_files),
        "settings": prep.settings.to_json(),
    })
}

/// The lean analysis the human `inspect` prints: facts and the plan only, no message is parsed
/// (the `--json` analysis below materializes every context message, as the fixtures require).
#[derive(Debug, Clone)]
pub struct Overview {
    pub session_id: Option<String>,
    pub version: Value,
    pub entry_count: usize,
    pub leaf_id: Option<String>,
    pub estimate: ContextEstimate,
    pub context_messages: usize,
    /// `shouldCompact` for the context Pi would build now ([`Overview::now`]).
    pub should_compact: bool,
    pub compactions_on_branch: usize,
    /// Compactions anywhere in the tree.
    pub compactions: usize,
    /// Leaves of the tree (entries nothing else names as parent): 1 for a linear session.
    pub leaves: usize,
    pub plan: Result<Plan, NothingToCompact>,
    /// Why there is nothing to compact, and what to change (when `plan` is an error).
    pub nothing: Option<NothingToCompactDetail>,
    /// The context as Pi would build it now (see [`ContextNow`]).
    pub now: ContextNow,
}

/// The size of the context Pi would build now. Right after a compaction the last reply's usage
/// still counts the history the summary replaced, so Pi's `estimateContextTokens` over-reports
/// until the next reply; Pi's `getContextUsage` then says "unknown" (compaction.md §3.6). This
/// says what is known: the usage-based estimate when a reply follows the latest compaction,
/// else Pi's estimate of the rebuilt context (what `estimatedTokensAfter` reported).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextNow {
    /// Tokens of the context Pi would build now.
    pub tokens: f64,
    /// Whether a reply's usage after the latest compaction backs `tokens` (else it is the
    /// per-message estimate, and Pi reports the size as unknown).
    pub usage_known: bool,
}

/// Builds the [`Overview`] of the tree's current branch. O(path), no message parsed.
pub fn overview(
    tree: &SessionTree,
    context_window: i64,
    settings: &CompactionSettings,
    version: PiVersion,
) -> Overview {
    let branch = tree.branch();
    let view = BranchView {
        tree,
        positions: &branch,
    };
    let index = BranchIndex::build(&view);
    let (estimate, now, context_messages) = match version {
        PiVersion::V0_85 => {
            let estimate = index.context_estimate(&view);
            let messages = index
                .context_ranges()
                .into_iter()
                .filter(|r| r.start < r.end)
                .map(|r| index.range_sums(r).1)
                .sum();
            (estimate, context_now(&index, &estimate), messages)
        }
        PiVersion::V1_6 => {
            // Pi 1.6's estimate already leaves out usage the latest edit or compaction made
            // stale: what it says is what Pi reports.
            let proj = Projection::build(&view);
            let system = proj.current_system_message(&view);
            let estimate = proj.estimate(&view, system_tokens(system.as_ref()));
            let now = ContextNow {
                tokens: estimate.tokens,
                usage_known: estimate.last_usage_index.is_some(),
            };
            (estimate, now, proj.message_tokens().len())
        }
    };
    let plan = plan_compaction(version, &view, &index, settings);
    let leaves = tree.leaf_count().max(usize::from(!tree.is_empty()));
    Overview {
        session_id: tree
            .header
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        version: tree.header.get("version").cloned().unwrap_or(Value::Null),
        entry_count: tree.len(),
        leaf_id: tree.leaf_id().map(str::to_owned),
        estimate,
        context_messages,
        should_compact: should_compact(now.tokens, context_window, settings),
        compactions_on_branch: branch
            .iter()
            .filter(|&&i| tree.entry(i).kind == crate::session::EntryKind::Compaction)
            .count(),
        compactions: tree
            .entries()
            .iter()
            .filter(|e| e.kind == crate::session::EntryKind::Compaction)
            .count(),
        leaves,
        nothing: plan
            .as_ref()
            .err()
            .map(|n| n.detail(&view, &index, settings)),
        plan,
        now,
    }
}

fn context_now(index: &BranchIndex, estimate: &ContextEstimate) -> ContextNow {
    if index.usage_known() {
        ContextNow {
            tokens: estimate.tokens,
            usage_known: true,
        }
    } else {
        ContextNow {
            tokens: index.context_total() as f64,
            usage_known: false,
        }
    }
}

/// The `session` object of the analysis: the header, the branch and the context's entries.
fn session_json(tree: &SessionTree, path: &[&Entry], context: &[&Entry]) -> Value {
    let header = &tree.header;
    json!({
        "id": header.get("id").cloned().unwrap_or(Value::Null),
        "version": header.get("version").cloned().unwrap_or(Value::Null),
        "cwd": header.get("cwd").cloned().unwrap_or(Value::Null),
        "entryCount": tree.len(),
        "leafId": tree.leaf_id(),
        "branchEntryIds": path.iter().map(|e| id_value(e)).collect::<Vec<_>>(),
        "contextEntryIds": context.iter().map(|e| id_value(e)).collect::<Vec<_>>(),
    })
}

/// The members every analysis has after the estimate: the last usage on the branch and
/// `shouldCompact` against `context_window` and the fixtures' windows.
fn usage_and_thresholds(
    out: &mut Map<String, Value>,
    path: &[&Entry],
    estimate: &ContextEstimate,
    context_window: i64,
    settings: &CompactionSettings,
) {
    let last_usage = path
        .iter()
        .rev()
        .find(|e| e.usage_tokens().is_some())
        .map(|e| {
            (
                e.message().and_then(|m| m.get("usage").cloned()),
                e.usage_tokens(),
            )
        });
    out.insert(
        "lastAssistantUsage".into(),
        last_usage
            .as_ref()
            .and_then(|(u, _)| u.clone())
            .unwrap_or(Value::Null),
    );
    out.insert(
        "usageContextTokens".into(),
        last_usage.and_then(|(_, t)| t).map_or(Value::Null, number),
    );
    out.insert(
        "shouldCompact".into(),
        Value::from(should_compact(estimate.tokens, context_window, settings)),
    );
    let by_window: Map<String, Value> = WINDOWS
        .iter()
        .map(|w| {
            (
                w.to_string(),
                Value::from(should_compact(estimate.tokens, *w, settings)),
            )
        })
        .collect();
    out.insert("shouldCompactByWindow".into(), Value::Object(by_window));
}

/// The `preparation`, `preparationNullReason` and `serialized` members for a prepared plan.
fn preparation_members(
    out: &mut Map<String, Value>,
    prepared: Result<Preparation, NothingToCompact>,
) {
    match prepared {
        Ok(prep) => {
            out.insert("preparation".into(), preparation_json(&prep));
            out.insert("preparationNullReason".into(), Value::Null);
            let (history, prefix) = prep.serialized_inputs();
            out.insert(
                "serialized".into(),
                json!({"messagesToSummarize": history, "turnPrefixMessages": prefix}),
            );
        }
        Err(reason) => {
            out.insert("preparation".into(), Value::Null);
            out.insert(
                "preparationNullReason".into(),
                Value::from(NothingToCompact::message(reason)),
            );
            out.insert("serialized".into(), Value::Null);
        }
    }
}

/// Builds the full analysis of the tree's current branch under `version`'s rules.
pub fn inspect(
    tree: &SessionTree,
    context_window: i64,
    settings: &CompactionSettings,
    version: PiVersion,
) -> Value {
    match version {
        PiVersion::V0_85 => inspect_0_85(tree, context_window, settings),
        PiVersion::V1_6 => inspect_1_6(tree, context_window, settings),
    }
}

/// Pi 1.6's analysis: everything computed on the session's projection (the fixtures' 1.6
/// fields: `messageEntryIds`, `systemMessage`, `contextEdits`, `estimateUnprojected`,
/// `cutPoint.projected`).
fn inspect_1_6(tree: &SessionTree, context_window: i64, settings: &CompactionSettings) -> Value {
    let branch = tree.branch();
    let path: Vec<&Entry> = tree.refs(&branch);
    let proj = Projection::build(&path);
    let context: Vec<&Entry> = proj.entries.iter().map(|e| path[e.pos]).collect();
    let mut out = Map::new();
    out.insert("session".into(), session_json(tree, &path, &context));
    let (thinking_level, model) = context_settings(&path);
    let system = proj.current_system_message(&path);
    let edits: Vec<Value> = proj
        .edits
        .iter()
        .map(|e| {
            json!({
                "editId": id_value(path[e.edit_pos]),
                "targetId": e.target_id,
                "kind": if e.omit { "omit" } else { "replace" },
                "targetInContext": e.target_in_context,
            })
        })
        .collect();
    out.insert(
        "context".into(),
        json!({
            "thinkingLevel": thinking_level,
            "model": model,
            "messages": proj.messages(&path),
            "messageEntryIds": proj.message_entry_ids(&path),
            "systemMessage": system,
            "contextEdits": edits,
        }),
    );
    out.insert(
        "messageTokenEstimates".into(),
        Value::Array(proj.message_tokens().into_iter().map(Value::from).collect()),
    );
    let estimate = proj.estimate(&path, system_tokens(system.as_ref()));
    out.insert("estimate".into(), estimate_json(&estimate));
    out.insert(
        "estimateUnprojected".into(),
        estimate_json(&proj.unprojected_estimate()),
    );
    usage_and_thresholds(&mut out, &path, &estimate, context_window, settings);
    let n = path.len();
    let len = proj.entries.len();
    let newest = proj.newest_compaction();
    let start = newest.map_or(0, |p| p + 1);
    let cut = proj.cut_point(&path, start, len, settings.keep_recent_tokens);
    let to_branch = |i: usize| proj.entries.get(i).map_or(n, |e| e.pos);
    let id_at = |i: usize| {
        proj.entries
            .get(i)
            .map_or(Value::Null, |e| id_value(path[e.pos]))
    };
    out.insert(
        "cutPoint".into(),
        json!({
            "prevCompactionIndex": opt_index(newest.map(to_branch)),
            "boundaryStart": to_branch(start),
            "boundaryEnd": n,
            "firstKeptEntryIndex": to_branch(cut.first_kept_entry_index),
            "firstKeptEntryId": id_at(cut.first_kept_entry_index),
            "turnStartIndex": opt_index(cut.turn_start_index.map(to_branch)),
            "turnStartEntryId": cut.turn_start_index.map_or(Value::Null, id_at),
            "isSplitTurn": cut.is_split_turn,
            "projected": {
                "boundaryStart": start,
                "boundaryEnd": len,
                "firstKeptEntryIndex": cut.first_kept_entry_index,
                "turnStartIndex": opt_index(cut.turn_start_index),
            },
        }),
    );
    let prepared = crate::compaction::prepare::plan_projected(&path, &proj, settings)
        .map(|plan| Preparation::from_plan(plan, &path, |i| Arc::new(path[i].clone())));
    preparation_members(&mut out, prepared);
    Value::Object(out)
}

/// Pi 0.85's analysis.
fn inspect_0_85(tree: &SessionTree, context_window: i64, settings: &CompactionSettings) -> Value {
    let branch = tree.branch();
    let path: Vec<&Entry> = tree.refs(&branch);
    let ctx = build_session_context(&path);
    let mut out = Map::new();
    out.insert(
        "session".into(),
        session_json(tree, &path, &context_entries(&path)),
    );
    let facts: Vec<MessageFacts> = ctx.messages.iter().map(MessageFacts::of).collect();
    let estimate = estimate_context_tokens(facts.iter().copied());
    out.insert(
        "context".into(),
        json!({"thinkingLevel": ctx.thinking_level, "model": ctx.model, "messages": ctx.messages}),
    );
    out.insert(
        "messageTokenEstimates".into(),
        Value::Array(facts.iter().map(|f| Value::from(f.tokens)).collect()),
    );
    out.insert("estimate".into(), estimate_json(&estimate));
    usage_and_thresholds(&mut out, &path, &estimate, context_window, settings);
    let index = BranchIndex::build(&path);
    // Beyond the fixtures' fields: the context Pi would build now (stale usage after a
    // compaction is not counted; `usageKnown: false` is Pi's `getContextUsage` "unknown").
    let now = context_now(&index, &estimate);
    out.insert(
        "contextNow".into(),
        json!({"tokens": number(now.tokens), "usageKnown": now.usage_known}),
    );
    let b = indexed_boundaries(&path, &index, settings);
    out.insert(
        "cutPoint".into(),
        json!({
            "prevCompactionIndex": opt_index(b.prev_compaction_index),
            "boundaryStart": b.boundary_start,
            "boundaryEnd": b.boundary_end,
            "firstKeptEntryIndex": b.cut.first_kept_entry_index,
            "firstKeptEntryId": path.get(b.cut.first_kept_entry_index).map_or(Value::Null, |e| id_value(e)),
            "turnStartIndex": opt_index(b.cut.turn_start_index),
            "turnStartEntryId": b.cut.turn_start_index.and_then(|i| path.get(i)).map_or(Value::Null, |e| id_value(e)),
            "isSplitTurn": b.cut.is_split_turn,
        }),
    );
    let prepared = plan_compaction(PiVersion::V0_85, &path, &index, settings)
        .map(|plan| Preparation::from_plan(plan, &path, |i| Arc::new(path[i].clone())));
    preparation_members(&mut out, prepared);
    Value::Object(out)
}
