//! Runs one compaction end to end: preparation → summarizer call(s) in Pi's order → the
//! `CompactionResult` → (for the file-level entry point) the appended `compaction` entry.
//!
//! This is the imperative shell around the pure core: it owns the async calls, cancellation and
//! the single file write, and nothing else. The daemon and the CLI both drive it.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::compaction::prepare::{prepare_branch, Preparation};
use crate::compaction::prompts::{history_prompt_text, turn_prefix_prompt_text, SYSTEM_PROMPT};
use crate::compaction::serialize::serialize_agent_messages;
use crate::compaction::summary::{
    check_reply, compaction_entry, file_details, join_split_turn, with_file_lists, CallKind,
    CompactionOutcome, CompactionResult,
};
use crate::compaction::tokens::CompactionSettings;
use crate::compaction::BranchIndex;
use crate::context::context_settings;
use crate::session::{ids, BranchView, Entry, SessionTree};
use crate::store;
use crate::summarizer::extractive::{summarize_history, summarize_turn_prefix, ExtractiveInput};
use crate::summarizer::redact::RedactionConfig;
use crate::summarizer::{
    retry_call, AssistantReply, LlmClient, LlmRequest, ModelSpec, RetryEvent, RetrySettings,
};

/// Receives the summarization retry events of the calls made inside its scope (the daemon turns
/// them into `summarization_retry_*` notifications). A task-local keeps `generate`'s signature
/// free of transport concerns.
pub type RetryObserver = std::sync::Arc<dyn Fn(&RetryEvent) + Send + Sync>;

tokio::task_local! {
    pub static RETRY_OBSERVER: RetryObserver;
}

/// Pi's message for an aborted compaction.
pub const CANCELLED: &str = "Compaction cancelled";

/// Who writes the summary.
#[derive(Clone)]
pub enum SummaryEngine {
    /// An LLM behind a provider client.
    Llm {
        client: Arc<dyn LlmClient>,
        model: ModelSpec,
        /// Pi's `settings.retry` for transient provider errors.
        retry: RetrySettings,
        /// Secret redaction applied to everything sent to the provider (beyond Pi).
        redaction: RedactionConfig,
        /// Summarize extractively when the LLM fails (beyond Pi; off by default).
        fallback_extractive: bool,
    },
    /// The embedded deterministic summarizer: no network, no key (beyond Pi). Its output is
    /// redacted like provider input, since it quotes the transcript.
    Extractive { redaction: RedactionConfig },
}

/// A compaction that did not produce an entry. The message is Pi's original text (no
/// `Compaction failed: ` prefix; that belongs to the event).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    #[error("{0}")]
    NothingToCompact(&'static str),
    #[error("Compaction cancelled")]
    Cancelled,
    #[error("{0}")]
    Summarization(String),
    #[error("{0}")]
    Store(String),
}

/// `maxTokens` of a call: `min(floor(factor × reserve), model.maxTokens > 0 ? model.maxTokens : ∞)`.
pub fn call_max_tokens(settings: &CompactionSettings, factor: f64, model_max_tokens: u64) -> u64 {
    let base = (factor * settings.reserve_tokens as f64).floor().max(0.0) as u64;
    if model_max_tokens > 0 {
        base.min(model_max_tokens)
    } else {
        base
    }
}

/// The reasoning level a summarization call uses: the session's current level, only when the
/// model reasons and the level is set and not `off` (compaction.md §6.2).
pub fn reasoning_for(model: &ModelSpec, thinking_level: Option<&str>) -> Option<String> {
    thinking_level
        .filter(|l| model.reasoning && !l.is_empty() && *l != "off")
        .map(str::to_owned)
}

/// The messages of a span, parsed from their entries (the extractive summarizer reads them all).
fn messages_of(prep: &[crate::compaction::prepare::PreparedMessage]) -> Vec<Value> {
    prep.iter().map(|m| m.message()).collect()
}

#[allow(clippy::too_many_arguments)]
async fn call_llm(
    client: &dyn LlmClient,
    model: &ModelSpec,
    retry: &RetrySettings,
    redaction: &RedactionConfig,
    prompt_text: String,
    max_tokens: u64,
    thinking_level: Option<&str>,
    cancel: &CancellationToken,
) -> AssistantReply {
    let request = LlmRequest {
        system_prompt: SYSTEM_PROMPT.to_owned(),
        prompt_text: redaction.apply(&prompt_text).into_owned(),
        max_tokens,
        reasoning: reasoning_for(model, thinking_level),
        session_id: Some(ids::new_session_id()),
        timestamp_ms: ids::now_ms(),
    };
    retry_call(|| client.complete(&request, cancel), retry, cancel, |event| {
        if let RetryEvent::Scheduled { attempt, max_attempts, delay_ms, error_message } = &event {
            tracing::warn!(attempt, max_attempts, delay_ms, error = %error_message, "summarization call failed; retrying");
        }
        let _ = RETRY_OBSERVER.try_with(|observe| observe(&event));
    })
    .await
}

/// Pi's `compact(preparation, …)`: generates the summary text and returns the result (nothing
/// is written). Calls are sequential: history first, then the turn prefix of a split turn.
pub async fn generate(
    prep: &Preparation,
    engine: &SummaryEngine,
    custom_instructions: Option<&str>,
    thinking_level: Option<&str>,
    cancel: &CancellationToken,
) -> Result<CompactionOutcome, CompactError> {
    let (client, model, retry, redaction) = match engine {
        SummaryEngine::Llm {
            client,
            model,
            retry,
            redaction,
            fallback_extractive,
        } => {
            if *fallback_extractive {
                return match generate_llm(
                    prep,
                    client.as_ref(),
                    model,
                    retry,
                    redaction,
                    custom_instructions,
                    thinking_level,
                    cancel,
                )
                .await
                {
                    Err(CompactError::Summarization(reason)) => {
                        tracing::warn!(%reason, "LLM summarizer failed; falling back to the extractive summarizer");
                        let mut outcome = crate::cpu::blocking(|| {
                            generate_extractive(prep, custom_instructions, redaction)
                        });
                        if let Some(d) = outcome.details.as_object_mut() {
                            d.insert("fallbackReason".into(), Value::from(reason));
                        }
                        Ok(outcome)
                    }
                    other => other,
                };
            }
            (client, model, retry, redaction)
        }
        SummaryEngine::Extractive { redaction } => {
            return Ok(crate::cpu::blocking(|| {
                generate_extractive(prep, custom_instructions, redaction)
            }))
        }
    };
    generate_llm(
        prep,
        client.as_ref(),
        model,
        retry,
        redaction,
        custom_instructions,
        thinking_level,
        cancel,
    )
    .await
}

/// The LLM half of [`generate`].
#[allow(clippy::too_many_arguments)]
async fn generate_llm(
    prep: &Preparation,
    client: &dyn LlmClient,
    model: &ModelSpec,
    retry: &RetrySettings,
    redaction: &RedactionConfig,
    custom_instructions: Option<&str>,
    thinking_level: Option<&str>,
    cancel: &CancellationToken,
) -> Result<CompactionOutcome, CompactError> {
    let history_max = call_max_tokens(&prep.settings, 0.8, model.max_tokens);
    let prefix_max = call_max_tokens(&prep.settings, 0.5, model.max_tokens);
    let history_text = || {
        let conversation =
            crate::cpu::blocking(|| serialize_agent_messages(prep.history_messages()));
        history_prompt_text(
            &conversation,
            prep.previous_summary.as_deref(),
            custom_instructions,
        )
    };
    // One summarization call: send, notice an abort, apply Pi's response checks.
    let call = |kind: CallKind, prompt: String, max_tokens: u64| async move {
        let reply = call_llm(
            client,
            model,
            retry,
            redaction,
            prompt,
            max_tokens,
            thinking_level,
            cancel,
        )
        .await;
        if cancel.is_cancelled() {
            return Err(CompactError::Cancelled);
        }
        let text = check_reply(kind, &reply).map_err(CompactError::Summarization)?;
        // Beyond Pi (proto-docs/gaps.md): a blank summary would replace the history with
        // nothing, so it is refused (and falls back to extractive when configured).
        if text.trim().is_empty() {
            return Err(CompactError::Summarization(format!(
                "{} failed: empty summary",
                kind.label()
            )));
        }
        Ok((text, reply.usage))
    };
    let (summary, usage) = if prep.is_split_turn && !prep.turn_prefix_messages.is_empty() {
        let history = if prep.messages_to_summarize.is_empty() {
            None
        } else {
            Some(call(CallKind::History, history_text(), history_max).await?)
        };
        let conversation =
            crate::cpu::blocking(|| serialize_agent_messages(prep.prefix_messages()));
        let (prefix, prefix_usage) = call(
            CallKind::TurnPrefix,
            turn_prefix_prompt_text(&conversation),
            prefix_max,
        )
        .await?;
        let usage = match &history {
            Some((_, h)) => h.combine(&prefix_usage),
            None => prefix_usage,
        };
        (
            join_split_turn(history.as_ref().map(|(t, _)| t.as_str()), &prefix),
            usage,
        )
    } else {
        call(CallKind::History, history_text(), history_max).await?
    };
    let usage = Some(usage);
    let (read_files, modified_files) = prep.file_ops.file_lists();
    Ok(CompactionOutcome {
        summary: with_file_lists(summary, &read_files, &modified_files),
        first_kept_entry_id: prep.first_kept_entry_id.clone(),
        tokens_before: prep.tokens_before,
        usage,
        details: file_details(&read_files, &modified_files),
        from_hook: false,
    })
}

/// The extractive engine's version of [`generate`]: the same history / split-turn layout and file
/// lists, written from the structured messages instead of by a model. `details.summarizer` says so.
pub fn generate_extractive(
    prep: &Preparation,
    custom_instructions: Option<&str>,
    redaction: &RedactionConfig,
) -> CompactionOutcome {
    let (read_files, modified_files) = prep.file_ops.file_lists();
    let history = || {
        summarize_history(&ExtractiveInput {
            messages: &messages_of(&prep.messages_to_summarize),
            previous_summary: prep.previous_summary.as_deref().filter(|s| !s.is_empty()),
            custom_instructions: custom_instructions.filter(|s| !s.is_empty()),
            read_files: &read_files,
            modified_files: &modified_files,
            max_tokens: call_max_tokens(&prep.settings, 0.8, 0),
        })
    };
    let summary = if prep.is_split_turn && !prep.turn_prefix_messages.is_empty() {
        let hist = (!prep.messages_to_summarize.is_empty()).then(history);
        let prefix = summarize_turn_prefix(
            &messages_of(&prep.turn_prefix_messages),
            call_max_tokens(&prep.settings, 0.5, 0),
        );
        join_split_turn(hist.as_deref(), &prefix)
    } else {
        history()
    };
    let mut details = file_details(&read_files, &modified_files);
    if let Some(o) = details.as_object_mut() {
        o.insert("summarizer".into(), Value::from("extractive"));
    }
    let summary = redaction.apply(&summary).into_owned();
    CompactionOutcome {
        summary: with_file_lists(summary, &read_files, &modified_files),
        first_kept_entry_id: prep.first_kept_entry_id.clone(),
        tokens_before: prep.tokens_before,
        usage: None,
        details,
        from_hook: false,
    }
}

/// What a successful manual compaction of a file produced.
#[derive(Debug, Clone)]
pub struct Compacted {
    /// The `CompactionResult` (with `estimatedTokensAfter`).
    pub result: CompactionResult,
    /// The appended entry.
    pub entry: Value,
    /// The tree after the append.
    pub tree: SessionTree,
}

/// Appends a compaction outcome as a new entry under the current leaf of `tree` (in memory),
/// returning the entry JSON and `estimatedTokensAfter`.
pub fn append_outcome(
    tree: &mut SessionTree,
    outcome: &CompactionOutcome,
    now_ms: i64,
) -> (Value, u64) {
    let id = ids::new_entry_id(|c| tree.contains_id(c));
    let parent = tree.leaf_id().map(str::to_owned);
    let entry = compaction_entry(&id, parent.as_deref(), &ids::iso_timestamp(now_ms), outcome);
    tree.push(Entry::from_value(entry.clone()));
    let branch = tree.branch();
    let view = BranchView {
        tree,
        positions: &branch,
    };
    (entry, BranchIndex::build(&view).context_total())
}

/// Pi's manual compaction of a session file (`AgentSession.compact()`): load (with Pi's
/// load-time repairs), prepare, summarize, and append the entry. On any failure the file is left
/// exactly as loading left it. The file is locked as a daemon locks it (a file a daemon holds is
/// refused), and a file another process wrote to during the summarizer call is not written.
pub async fn compact_file(
    path: &Path,
    settings: &CompactionSettings,
    engine: &SummaryEngine,
    custom_instructions: Option<&str>,
    cancel: &CancellationToken,
) -> Result<Compacted, CompactError> {
    let abs = store::absolute(path);
    let _lock = match store::try_lock(&abs) {
        Ok(Some(lock)) => lock,
        Ok(None) => {
            return Err(CompactError::Store(format!(
                "Session file is locked by another compactd process: {}",
                abs.display()
            )))
        }
        Err(store::StoreError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Err(CompactError::Store(
                store::StoreError::NotFound(abs).to_string(),
            ))
        }
        Err(e) => return Err(CompactError::Store(e.to_string())),
    };
    let limits = store::Limits::default();
    let (mut tree, _report, stamp) =
        store::load_with(&abs, true, &limits).map_err(|e| CompactError::Store(e.to_string()))?;
    let branch = tree.branch();
    let view = BranchView {
        tree: &tree,
        positions: &branch,
    };
    let index = BranchIndex::build(&view);
    let prep = prepare_branch(&view, &index, settings)
        .map_err(|reason| CompactError::NothingToCompact(reason.message()))?;
    let (thinking, _model) = context_settings(&view);
    let outcome = generate(
        &prep,
        engine,
        custom_instructions,
        thinking.as_str(),
        cancel,
    )
    .await?;
    if cancel.is_cancelled() {
        return Err(CompactError::Cancelled);
    }
    let (entry, estimated) = append_outcome(&mut tree, &outcome, ids::now_ms());
    let raw = tree
        .leaf()
        .map(|i| tree.entry(i).raw().to_vec())
        .unwrap_or_default();
    match store::read_tail(&abs, &stamp, &limits) {
        Ok(store::Tail::Unchanged) => {}
        Ok(_) => {
            return Err(CompactError::Store(format!(
                "Session file changed during compaction (another process wrote to it); nothing was written: {}",
                abs.display()
            )))
        }
        Err(e) => return Err(CompactError::Store(e.to_string())),
    }
    store::append_raw(
        &abs,
        &raw,
        limits
            .durability
            .syncs_entry(crate::session::EntryKind::Compaction),
    )
    .map_err(|e| CompactError::Store(e.to_string()))?;
    Ok(Compacted {
        result: CompactionResult::new(&outcome, estimated),
        entry,
        tree,
    })
}
