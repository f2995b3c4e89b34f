//! Tree navigation with optional branch summaries (compaction.md §9): move the leaf to another
//! entry, summarizing the branch being left so the model keeps what was learned there.

use std::collections::HashSet;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::handlers::Ctx;
use super::lifecycle::finish::finish_text;
use super::lifecycle::speculation::{self, DiscardReason};
use super::session::label_entry;
use super::settings::EffectiveSettings;
use crate::compaction::branch::{prepare_branch_entries, NO_CONTENT};
use crate::compaction::prompts::BRANCH_SUMMARY_PREAMBLE;
use crate::compaction::summary::{branch_summary_entry, BranchSummary};
use crate::compactor::{
    ignore_retries, summarize_branch, BranchInputs, CompactError, SummaryOutcome, CANCELLED,
};
use crate::rpc::errors::{ErrorKind, RpcError, COMPACTING_MESSAGE};
use crate::rpc::events::{self, SessionBeforeTree};
use crate::rpc::results::{BranchSummaryEntry, NavigateTreeResult, SessionEntry};
use crate::rpc::types::NavigateTreeParams;
use crate::session::{Entry, EntryKind, Role};

/// The text of a user / custom message target, for the editor.
fn editor_text(e: &Entry) -> Option<String> {
    let content = match e.kind {
        EntryKind::Message if e.role == Some(Role::User) => e.message()?.get("content")?.clone(),
        EntryKind::CustomMessage => e.get("content")?.clone(),
        _ => return None,
    };
    Some(crate::compaction::serialize::content_text(
        Some(&content),
        "",
    ))
}

/// A failed branch summary as `navigateTree` reports it.
fn branch_error(e: CompactError) -> RpcError {
    match e {
        CompactError::Cancelled => RpcError::new(ErrorKind::Cancelled, CANCELLED),
        other => RpcError::new(ErrorKind::SummarizationFailed, other.to_string()),
    }
}

struct Plan {
    old_leaf: Option<String>,
    target: Option<usize>,
    target_id: Option<String>,
    common_ancestor: Option<String>,
    entries: Vec<Entry>,
    context_window: i64,
    /// Whose rules the branch summary follows, and the session's thinking level (Pi 1.6 sends
    /// it).
    rules: crate::session::PiVersion,
    thinking_level: String,
}

async fn branch_summary(
    ctx: &Ctx,
    session: &super::Session,
    plan: &Plan,
    custom: Option<&str>,
    replace: bool,
    settings: &EffectiveSettings,
    cancel: &CancellationToken,
) -> Result<BranchSummary, RpcError> {
    let window = if plan.context_window > 0 {
        plan.context_window
    } else {
        128_000
    };
    let budget = window - settings.branch_summary_reserve_tokens;
    let (messages, ops) = prepare_branch_entries(plan.rules, &plan.entries, budget);
    let (read, modified) = ops.file_lists();
    let details = json!({"readFiles": read, "modifiedFiles": modified});
    if messages.is_empty() {
        return Ok(BranchSummary {
            text: NO_CONTENT.to_owned(),
            details,
            usage: None,
            from_hook: false,
        });
    }
    let engine = ctx.daemon.session_engine(session, settings)?;
    let inputs = BranchInputs {
        messages: &messages,
        read_files: &read,
        modified_files: &modified,
        custom_instructions: custom,
        replace_instructions: replace,
        version: plan.rules,
        thinking_level: Some(plan.thinking_level.as_str()),
    };
    // navigateTree reports no retries: the `summarization_retry_*` events describe compactions
    // (`source: "compaction"`), so a branch summary's retries are only logged.
    let SummaryOutcome { text, usage } =
        summarize_branch(&engine, &inputs, cancel, &ignore_retries)
            .await
            .map_err(branch_error)?;
    // Finished as compactions are: the pins live at the branch being left, and the file
    // blocks limited to the most recently touched paths with `fileListLimit`.
    let recent: Vec<&str> = plan
        .entries
        .iter()
        .rev()
        .flat_map(|e| e.file_ops.iter().rev().map(|(_, p)| &**p))
        .collect();
    let (pins, used) = super::pins::live_pins(&session.lock_state());
    // Beyond Pi: the recall footer names the abandoned entries (still in the file).
    let ids = || plan.entries.iter().filter_map(|e| e.id.as_deref());
    let recall = match (settings.recall_footer, ids().next(), ids().last()) {
        (true, Some(first), Some(last)) => Some((first, last)),
        _ => None,
    };
    let body = finish_text(
        &text,
        &read,
        &modified,
        &recent,
        settings.file_list_limit,
        used.then_some(pins.as_slice()),
        recall,
    );
    Ok(BranchSummary {
        text: format!("{BRANCH_SUMMARY_PREAMBLE}{body}"),
        details,
        usage,
        from_hook: false,
    })
}

/// Marks the session as navigating until dropped (also on an early return or a cancelled
/// request), so appends are refused only while a branch summary runs.
struct NavigatingFlag<'a>(&'a super::Session);

impl<'a> NavigatingFlag<'a> {
    fn set(session: &'a super::Session) -> NavigatingFlag<'a> {
        session
            .navigating
            .store(true, std::sync::atomic::Ordering::SeqCst);
        NavigatingFlag(session)
    }
}

impl Drop for NavigatingFlag<'_> {
    fn drop(&mut self) {
        self.0
            .navigating
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What the client asked for besides the target, as the hooks may change it.
struct Instructions {
    custom: Option<String>,
    replace: bool,
    label: Option<String>,
}

/// `navigateTree`: plan (holding the compaction slot, so no compaction slips in between the
/// plan and the write) → ask the `session_before_tree` hooks → summarize the branch being
/// left when asked → move the leaf and write the summary and label.
pub async fn navigate(ctx: &Ctx, p: NavigateTreeParams) -> Result<NavigateTreeResult, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    if session.is_compacting() {
        return Err(RpcError::new(ErrorKind::Compacting, COMPACTING_MESSAGE));
    }
    let _slot = session.slot.lock().await;
    let _lease = super::shared_store::lease(&ctx.daemon, &session).await?;
    let plan = match plan(&session, p.target_id.as_deref())? {
        Ok(plan) => plan,
        Err(stayed) => return Ok(stayed),
    };
    let mut wanted = Instructions {
        custom: p.custom_instructions.clone(),
        replace: p.replace_instructions,
        label: p.label.clone(),
    };
    let cancel = ctx.daemon.run_token();
    *session.running.lock() = Some(cancel.clone());
    let _navigating = NavigatingFlag::set(&session);
    let outcome = async {
        let Some(hook_summary) =
            ask_hooks(ctx, &session, &plan, p.summarize, &mut wanted, &cancel).await
        else {
            return Ok(None);
        };
        let summary = match hook_summary {
            Some(s) => Some(s),
            None if p.summarize && !plan.entries.is_empty() => {
                let settings = ctx.daemon.session_settings(&session);
                let custom = wanted.custom.as_deref();
                let s = branch_summary(
                    ctx,
                    &session,
                    &plan,
                    custom,
                    wanted.replace,
                    &settings,
                    &cancel,
                );
                Some(s.await?)
            }
            None => None,
        };
        Ok::<_, RpcError>(Some(summary))
    }
    .await;
    *session.running.lock() = None;
    let summary = match outcome {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(NavigateTreeResult::stayed(plan.old_leaf, true)),
        Err(e) if e.kind == ErrorKind::Cancelled => {
            return Ok(NavigateTreeResult {
                aborted: Some(true),
                ..NavigateTreeResult::stayed(plan.old_leaf, true)
            })
        }
        Err(e) => return Err(e),
    };
    let result = move_leaf(&session, plan, summary, wanted.label)?;
    // A speculation of the branch left behind no longer applies.
    let settings = ctx.daemon.session_settings(&session);
    speculation::revalidate(&ctx.daemon, &session, &settings, DiscardReason::Navigated);
    Ok(result)
}

/// The navigation to `target_id` (`None`: the root) as it stands now: the branch being left
/// from the common ancestor on. `Err` with the answer when there is nowhere to go (the target
/// is the leaf).
fn plan(
    session: &super::Session,
    target_id: Option<&str>,
) -> Result<Result<Plan, NavigateTreeResult>, RpcError> {
    let state = session.lock_state();
    let target = match target_id {
        Some(id) => Some(state.tree.index_of(id).ok_or_else(|| {
            RpcError::new(ErrorKind::EntryNotFound, format!("Entry {id} not found"))
        })?),
        None => None,
    };
    let old_leaf = state.tree.leaf_id().map(str::to_owned);
    if target_id.is_some() && target_id == old_leaf.as_deref() {
        return Ok(Err(NavigateTreeResult::stayed(old_leaf, false)));
    }
    let old_path = state.tree.branch();
    let target_path = state.tree.path_to(target);
    let on_old: HashSet<usize> = old_path.iter().copied().collect();
    let common = target_path
        .iter()
        .rev()
        .find(|i| on_old.contains(i))
        .copied();
    let start = common
        .and_then(|c| old_path.iter().position(|&i| i == c))
        .map_or(0, |p| p + 1);
    let entries = old_path[start..]
        .iter()
        .map(|&i| state.tree.entry(i).clone())
        .collect();
    Ok(Ok(Plan {
        old_leaf,
        target,
        target_id: target_id.map(str::to_owned),
        common_ancestor: common.and_then(|c| state.tree.entry(c).id_owned()),
        entries,
        context_window: state.context_window().unwrap_or(0),
        rules: state.rules,
        thinking_level: state.thinking_level.clone(),
    }))
}

/// Asks the `session_before_tree` hooks, in order. `None`: a hook cancelled the navigation.
/// Otherwise the summary a hook supplied (when one is wanted), with `wanted` updated by the
/// hooks' instructions and label.
async fn ask_hooks(
    ctx: &Ctx,
    session: &super::Session,
    plan: &Plan,
    summarize: bool,
    wanted: &mut Instructions,
    cancel: &CancellationToken,
) -> Option<Option<BranchSummary>> {
    if !ctx.daemon.has_hook::<SessionBeforeTree>(&session.id) {
        return Some(None);
    }
    let request = events::payload(&SessionBeforeTree {
        session_id: &session.id,
        preparation: events::TreePreparation {
            target_id: plan.target_id.as_deref(),
            old_leaf_id: plan.old_leaf.as_deref(),
            common_ancestor_id: plan.common_ancestor.as_deref(),
            entries_to_summarize: plan
                .entries
                .iter()
                .map(|e| SessionEntry(e.value()))
                .collect(),
            user_wants_summary: summarize,
            custom_instructions: wanted.custom.as_deref(),
            replace_instructions: wanted.replace,
            label: wanted.label.as_deref(),
        },
    });
    let (answers, _) = ctx
        .daemon
        .ask_hooks::<SessionBeforeTree>(&session.id, request, &[], cancel, |r| r.cancel)
        .await;
    let mut supplied = None;
    for a in answers {
        if a.cancel {
            return None;
        }
        if let Some(s) = a.summary.filter(|_| summarize) {
            supplied = Some(BranchSummary {
                text: s.summary,
                details: s.details.unwrap_or(Value::Null),
                usage: s.usage,
                from_hook: true,
            });
        }
        if let Some(c) = a.custom_instructions {
            wanted.custom = Some(c);
        }
        if let Some(r) = a.replace_instructions {
            wanted.replace = r;
        }
        if let Some(l) = a.label {
            wanted.label = Some(l);
        }
    }
    Some(supplied)
}

/// Moves the leaf to the target (a user or custom message target: to its parent, its text
/// going back to the editor) and writes the branch summary and the label, unless the session
/// moved meanwhile.
fn move_leaf(
    session: &super::Session,
    plan: Plan,
    summary: Option<BranchSummary>,
    label: Option<String>,
) -> Result<NavigateTreeResult, RpcError> {
    let mut state = session.lock_state();
    if state.tree.leaf_id().map(str::to_owned) != plan.old_leaf {
        return Err(RpcError::new(
            ErrorKind::LeafMoved,
            "the session changed during navigation",
        ));
    }
    let target_entry = plan.target.map(|i| state.tree.entry(i).clone());
    let editor = target_entry.as_ref().and_then(editor_text);
    let new_leaf = match (&target_entry, editor.is_some()) {
        (Some(t), true) => t
            .parent_id
            .as_deref()
            .and_then(|pid| state.tree.index_of(pid)),
        (Some(_), false) => plan.target,
        (None, _) => None,
    };
    let from_id = plan.old_leaf.clone().unwrap_or_else(|| "root".into());
    let mut summary_entry = None;
    state.tree.set_leaf(new_leaf);
    state.refresh_branch();
    let label = label.filter(|l| !l.is_empty());
    if let Some(summary) = summary {
        let idx = state.append_with(|id, parent, ts| {
            branch_summary_entry(id, parent, ts, &from_id, &summary)
        })?;
        let entry_value = state.tree.entry(idx).value();
        let summary_id = state.tree.entry(idx).id.clone().unwrap_or_default();
        if let Some(l) = label {
            state.append_with(|id, parent, ts| label_entry(id, parent, ts, &summary_id, &l))?;
        }
        summary_entry = Some(BranchSummaryEntry(entry_value));
    } else if let (Some(l), Some(tid)) = (label, &plan.target_id) {
        state.append_with(|id, parent, ts| label_entry(id, parent, ts, tid, &l))?;
    }
    state.rebuild_agent_context();
    Ok(NavigateTreeResult {
        summary_entry,
        new_leaf_id: state.tree.leaf_id().map(str::to_owned),
        old_leaf_id: plan.old_leaf,
        cancelled: false,
        aborted: None,
        editor_text: editor,
    })
}
