//! Who writes a summary, and the one place that asks them: the engine dispatch (an LLM behind a
//! provider, or the extractive summarizer) and the summarizer calls of a compaction in Pi's
//! order ([`generate`]), and [`step`], the one summarization step every compaction takes
//! (hooks, engine, retries, cost).
//!
//! It also writes the branch summaries of tree navigation ([`summarize_branch`]): both kinds of
//! summary share one engine dispatch and one provider call (redaction, retries reported to the
//! caller's [`OnRetry`], Pi's reply checks), so there is one place that calls providers.
//!
//! This is a shell around the pure core that owns the async calls and cancellation, and
//! nothing else: it reads and writes no session (the daemon's lifecycle does, through `store`).

pub mod step;

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::compaction::prepare::Preparation;
use crate::compaction::prompts::{
    branch_prompt_text, history_prompt_text, turn_prefix_prompt_text, SPLIT_TURN_JOINER,
    SYSTEM_PROMPT,
};
use crate::compaction::serialize::{serialize_agent_messages, serialize_conversation};
use crate::compaction::summary::{
    check_reply, file_details, join_split_turn, with_file_lists, CallKind, CompactionOutcome,
};
use crate::compaction::tokens::CompactionSettings;
use crate::context::convert_to_llm;
use crate::session::{ids, PiVersion};
use crate::summarizer::extractive::{
    summarize_history, summarize_turn_prefix, ExtractiveInput, ExtractiveSettings, Messages,
};
use crate::summarizer::redact::RedactionConfig;
use crate::summarizer::{
    retry_call, AssistantReply, LlmClient, LlmRequest, ModelSpec, RetryEvent, RetrySettings,
    StopReason, Usage,
};

/// Receives the retry events of the summarization calls a function makes (the daemon turns them
/// into `summarization_retry_*` notifications, the CLI into its progress line). It is an explicit
/// argument, not ambient state, so every caller says what happens to them.
pub type OnRetry<'a> = dyn Fn(&RetryEvent) + Send + Sync + 'a;

/// An [`OnRetry`] for callers with nobody to tell about retries.
pub fn ignore_retries(_: &RetryEvent) {}

/// Sums the usage every provider call of a summary reported, failed attempts and retries
/// included: what the summary cost (beyond Pi; Pi's `usage` field counts the successful calls).
#[derive(Debug, Default)]
pub struct Meter(parking_lot::Mutex<Usage>);

impl Meter {
    pub fn add(&self, usage: &Usage) {
        let mut total = self.0.lock();
        *total = total.combine(usage);
    }

    pub fn total(&self) -> Usage {
        *self.0.lock()
    }
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
    Extractive {
        redaction: RedactionConfig,
        /// Its size target (`[summarizer] extractive_target_tokens`).
        settings: ExtractiveSettings,
    },
}

impl SummaryEngine {
    /// How logs and status reports name this engine: `provider/model`, or `extractive`.
    pub fn label(&self) -> String {
        match self {
            SummaryEngine::Llm { model, .. } => format!("{}/{}", model.provider, model.id),
            SummaryEngine::Extractive { .. } => "extractive".to_owned(),
        }
    }

    /// The model an LLM engine calls; `None` for an engine that calls none (extractive), which
    /// costs nothing and takes no time worth speculating for.
    pub fn model(&self) -> Option<&ModelSpec> {
        match self {
            SummaryEngine::Llm { model, .. } => Some(model),
            SummaryEngine::Extractive { .. } => None,
        }
    }

    /// This engine with `retry` as its retry policy: itself when it already has it (or writes
    /// extractively), else a copy sharing its client.
    pub fn with_retry(self: &Arc<Self>, retry: &RetrySettings) -> Arc<SummaryEngine> {
        match &**self {
            SummaryEngine::Llm {
                client,
                model,
                retry: current,
                redaction,
                fallback_extractive,
            } if current != retry => Arc::new(SummaryEngine::Llm {
                client: client.clone(),
                model: model.clone(),
                retry: *retry,
                redaction: redaction.clone(),
                fallback_extractive: *fallback_extractive,
            }),
            _ => self.clone(),
        }
    }
}

/// A compaction that did not produce an entry. The message is Pi's original text (no
/// `Compaction failed: ` prefix; that belongs to the event).
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error("{0}")]
    NothingToCompact(&'static str),
    #[error("Compaction cancelled")]
    Cancelled,
    #[error("{0}")]
    Summarization(String),
}

/// What a summarization call asks for: its output cap before pi-ai fits it into the window, and
/// whose pi-ai fits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    pub max_tokens: u64,
    pub version: PiVersion,
}

impl Cap {
    /// A compaction call's cap: Pi 0.85's `floor(factor × reserveTokens)` under the model's cap;
    /// Pi 1.6 asks for none of its own, so pi-ai uses the model's output limit (#9512: the old
    /// cap is why reasoning models ran out of tokens mid-summary).
    pub fn compaction(
        version: PiVersion,
        settings: &CompactionSettings,
        factor: f64,
        model: &ModelSpec,
    ) -> Cap {
        let max_tokens = match version {
            PiVersion::V0_85 => call_max_tokens(settings, factor, model.max_tokens),
            PiVersion::V1_6 => model.max_tokens,
        };
        Cap {
            max_tokens,
            version,
        }
    }
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

/// An LLM engine's provider together with everything one call to it needs. [`Provider::ask`] is
/// the only place compactd calls a provider, for compactions and branch summaries alike.
#[derive(Clone, Copy)]
struct Provider<'a> {
    client: &'a dyn LlmClient,
    model: &'a ModelSpec,
    retry: &'a RetrySettings,
    redaction: &'a RedactionConfig,
    cancel: &'a CancellationToken,
    on_retry: &'a OnRetry<'a>,
    meter: &'a Meter,
}

impl<'a> Provider<'a> {
    /// The provider an LLM engine calls through, with whether it falls back to the extractive
    /// summarizer; for the extractive engine, which calls none, its redaction and settings.
    fn of(
        engine: &'a SummaryEngine,
        cancel: &'a CancellationToken,
        on_retry: &'a OnRetry<'a>,
        meter: &'a Meter,
    ) -> Result<(Self, bool), (&'a RedactionConfig, ExtractiveSettings)> {
        match engine {
            SummaryEngine::Extractive {
                redaction,
                settings,
            } => Err((redaction, *settings)),
            SummaryEngine::Llm {
                client,
                model,
                retry,
                redaction,
                fallback_extractive,
            } => Ok((
                Provider {
                    client: client.as_ref(),
                    model,
                    retry,
                    redaction,
                    cancel,
                    on_retry,
                    meter,
                },
                *fallback_extractive,
            )),
        }
    }

    /// One summarization call: the prompt redacted, sent with Pi's retries (each retry logged
    /// and reported to `on_retry`), an abort noticed, and Pi's reply checks for `kind` applied.
    /// Returns the summary text and the call's usage.
    async fn ask(
        &self,
        kind: CallKind,
        prompt_text: &str,
        cap: Cap,
        reasoning: Option<String>,
    ) -> Result<(String, Usage), CompactError> {
        let request = LlmRequest {
            system_prompt: SYSTEM_PROMPT.to_owned(),
            prompt_text: self.redaction.apply(prompt_text).into_owned(),
            max_tokens: cap.max_tokens,
            reasoning,
            session_id: Some(ids::new_session_id()),
            timestamp_ms: ids::now_ms(),
            pi_version: cap.version,
        };
        let reply = retry_call(
            || async {
                let reply = self.client.complete(&request, self.cancel).await;
                self.meter.add(&reply.usage);
                reply
            },
            self.retry,
            self.cancel,
            |event| {
                if let RetryEvent::Scheduled {
                    attempt,
                    max_attempts,
                    delay_ms,
                    error_message,
                } = &event
                {
                    // One line per failed try of this call, naming the call (a split turn's
                    // two run at once) and counting tries: `attempt` tries failed so far, of
                    // the first one and `max_attempts` retries.
                    tracing::warn!(
                        call = %kind.as_str(),
                        attempt,
                        max_attempts,
                        delay_ms,
                        error = %error_message,
                        "{} call failed (try {attempt} of {}); retrying in {} ms",
                        kind.label(),
                        max_attempts + 1,
                        delay_ms
                    );
                }
                (self.on_retry)(&event);
            },
        )
        .await;
        if self.cancel.is_cancelled() {
            return Err(CompactError::Cancelled);
        }
        let reply = explain_refused_key(reply, self.model);
        let text = check_reply(kind, &reply).map_err(CompactError::Summarization)?;
        Ok((text, reply.usage))
    }
}

/// A provider that refuses the key (401, 403) answers in its own words, often a JSON body that
/// never says "key": the error then says so first, and where the key comes from.
fn explain_refused_key(mut reply: AssistantReply, model: &ModelSpec) -> AssistantReply {
    let Some(status @ (401 | 403)) = reply.http_status else {
        return reply;
    };
    if reply.stop_reason != StopReason::Error {
        return reply;
    }
    let fix = match (&model.key_env, &model.api_key) {
        (Some(var), _) => format!("check the key in `{var}`"),
        (None, Some(_)) => "check the API key compactd was given (--api-key)".to_owned(),
        (None, None) => "no API key was sent: set `api_key_env` in [summarizer] (or in the provider's [providers] entry) to the variable that holds it".to_owned(),
    };
    let said = reply.error_message.take().unwrap_or_default();
    reply.error_message = Some(format!(
        "authentication failed ({status}) — {fix}; the provider said: {said}"
    ));
    reply
}

/// Marks an outcome the extractive engine wrote because the LLM failed (`details.fallbackReason`).
fn mark_fallback(mut outcome: CompactionOutcome, reason: String) -> CompactionOutcome {
    if let Some(d) = outcome.details.as_object_mut() {
        d.insert("fallbackReason".into(), Value::from(reason));
    }
    outcome
}

/// The one engine dispatch of every summary: the extractive engine runs `extractive` (on a
/// lower-priority thread of its own, [`crate::cpu::background`]); an LLM engine runs `llm`
/// against its [`Provider`]. When the LLM
/// fails to summarize, an engine configured to fall back runs `extractive` instead (with the
/// default extractive settings) and passes the result and the failure to `fallback`; a summary
/// kind that never falls back passes `None`.
#[allow(clippy::too_many_arguments)]
async fn dispatch<'a, T, Fut>(
    engine: &'a SummaryEngine,
    cancel: &'a CancellationToken,
    on_retry: &'a OnRetry<'a>,
    meter: &'a Meter,
    extractive: impl FnOnce(&'a RedactionConfig, ExtractiveSettings) -> T + Send,
    llm: impl FnOnce(Provider<'a>) -> Fut,
    fallback: Option<fn(T, String) -> T>,
) -> Result<T, CompactError>
where
    Fut: Future<Output = Result<T, CompactError>>,
    T: Send,
{
    // However the summary ends (written, failed, cancelled), its temporaries (message values,
    // serialized text) were freed on other threads: the allocator gets them back once idle.
    let _release = crate::cpu::ReleaseWhenDone;
    let (provider, fallback_extractive) = match Provider::of(engine, cancel, on_retry, meter) {
        Ok(llm) => llm,
        Err((redaction, settings)) => {
            return Ok(crate::cpu::background(|| extractive(redaction, settings)))
        }
    };
    let redaction = provider.redaction;
    match (
        llm(provider).await,
        fallback.filter(|_| fallback_extractive),
    ) {
        (Err(CompactError::Summarization(reason)), Some(mark)) => {
            tracing::warn!(%reason, "LLM summarizer failed; falling back to the extractive summarizer");
            Ok(mark(
                crate::cpu::background(|| extractive(redaction, ExtractiveSettings::DEFAULT)),
                reason,
            ))
        }
        (other, _) => other,
    }
}

/// Pi's `compact(preparation, …)`: generates the summary text and returns the result (nothing
/// is written). A split turn's two calls (history, turn prefix) are sent at once and joined in
/// Pi's order, so the result is the one Pi's sequential calls give. The calls' retries are
/// reported to `on_retry` (a split turn's two calls may interleave theirs), and every call's
/// usage is added to `meter`.
#[allow(clippy::too_many_arguments)]
pub async fn generate(
    prep: &Preparation,
    engine: &SummaryEngine,
    custom_instructions: Option<&str>,
    thinking_level: Option<&str>,
    cancel: &CancellationToken,
    on_retry: &OnRetry<'_>,
    meter: &Meter,
) -> Result<CompactionOutcome, CompactError> {
    dispatch(
        engine,
        cancel,
        on_retry,
        meter,
        |redaction, settings| generate_extractive(prep, custom_instructions, redaction, settings),
        |provider| generate_llm(prep, provider, custom_instructions, thinking_level),
        Some(mark_fallback),
    )
    .await
}

/// The LLM half of [`generate`].
async fn generate_llm(
    prep: &Preparation,
    provider: Provider<'_>,
    custom_instructions: Option<&str>,
    thinking_level: Option<&str>,
) -> Result<CompactionOutcome, CompactError> {
    let model = provider.model;
    let version = prep.edits.version;
    let history_max = Cap::compaction(version, &prep.settings, 0.8, model);
    let prefix_max = Cap::compaction(version, &prep.settings, 0.5, model);
    let history_text = || history_prompt(prep, custom_instructions);
    let reasoning = reasoning_for(model, thinking_level);
    let (summary, usage) = if prep.is_split_turn && !prep.turn_prefix_messages.is_empty() {
        // The two requests of a split turn are independent (neither prompt holds the other's
        // answer), so they are in flight at once: the summary takes the longer of the two
        // calls, not their sum. Both prompts are built first, so the requests are exactly the
        // ones Pi sends one after the other, and the answers are joined in Pi's order.
        let history_prompt = (!prep.messages_to_summarize.is_empty()).then(history_text);
        let conversation =
            crate::cpu::blocking(|| serialize_agent_messages(version, prep.prefix_messages()));
        let prefix_prompt = turn_prefix_prompt_text(version, &conversation, custom_instructions);
        // A failed history call stops the turn prefix's (the summary fails with its error, as
        // Pi's sequential calls fail on the first); a failed turn-prefix call waits for the
        // history call, whose failure Pi would have met first. An abort reaches both through
        // the parent token.
        let aborted = provider.cancel;
        let sibling = aborted.child_token();
        let prefix_provider = Provider {
            cancel: &sibling,
            ..provider
        };
        let stopping = |r: Result<(String, Usage), CompactError>| {
            if r.is_err() {
                sibling.cancel();
            }
            r
        };
        let (history, prefix) = futures_util::future::join(
            async {
                match history_prompt {
                    Some(prompt) => Some(stopping(
                        compaction_call(
                            provider,
                            CallKind::History,
                            prompt,
                            history_max,
                            reasoning.clone(),
                        )
                        .await,
                    )),
                    None => None,
                }
            },
            compaction_call(
                prefix_provider,
                CallKind::TurnPrefix,
                prefix_prompt,
                prefix_max,
                reasoning.clone(),
            ),
        )
        .await;
        let (history, (prefix, prefix_usage)) = split_turn_results(history, prefix, aborted)?;
        let usage = match &history {
            Some((_, h)) => h.combine(&prefix_usage),
            None => prefix_usage,
        };
        // Pi 1.6 carries the previous summary on when the split turn is all that is new.
        let carried = match version {
            PiVersion::V1_6 => prep.previous_summary.as_deref(),
            PiVersion::V0_85 => None,
        };
        let history = history.as_ref().map(|(t, _)| t.as_str()).or(carried);
        (join_split_turn(history, &prefix), usage)
    } else {
        compaction_call(
            provider,
            CallKind::History,
            history_text(),
            history_max,
            reasoning,
        )
        .await?
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

/// The user message of a compaction's history call (Pi's prompt over the serialized span).
fn history_prompt(prep: &Preparation, custom_instructions: Option<&str>) -> String {
    let version = prep.edits.version;
    let conversation =
        crate::cpu::blocking(|| serialize_agent_messages(version, prep.history_messages()));
    history_prompt_text(
        &conversation,
        prep.previous_summary.as_deref(),
        custom_instructions,
    )
}

/// Beyond Pi (`compaction.handoff: "retry"`): one more history call for a summary an LLM engine
/// wrote, its prompt Pi's with `instructions` (what the first summary missed) added to the
/// user's focus; the answer replaces the first summary's history part (a split turn keeps its
/// turn-prefix part and its file blocks stay). Its usage is added to the outcome's and to
/// `meter`. `Ok(None)`: no such call can be made (the extractive engine, a split turn with no
/// history before it).
#[allow(clippy::too_many_arguments)]
pub async fn retry_history(
    prep: &Preparation,
    engine: &SummaryEngine,
    first: &CompactionOutcome,
    custom_instructions: Option<&str>,
    instructions: &str,
    thinking_level: Option<&str>,
    cancel: &CancellationToken,
    on_retry: &OnRetry<'_>,
    meter: &Meter,
) -> Result<Option<CompactionOutcome>, CompactError> {
    let Ok((provider, _)) = Provider::of(engine, cancel, on_retry, meter) else {
        return Ok(None);
    };
    if prep.messages_to_summarize.is_empty() {
        return Ok(None);
    }
    let model = provider.model;
    let focus = match custom_instructions.filter(|c| !c.is_empty()) {
        Some(c) => format!("{c}\n\n{instructions}"),
        None => instructions.to_owned(),
    };
    let (text, usage) = compaction_call(
        provider,
        CallKind::History,
        history_prompt(prep, Some(&focus)),
        Cap::compaction(prep.edits.version, &prep.settings, 0.8, model),
        reasoning_for(model, thinking_level),
    )
    .await?;
    let (read_files, modified_files) = prep.file_ops.file_lists();
    let summary = match first.summary.split_once(SPLIT_TURN_JOINER) {
        Some((_, prefix)) if prep.is_split_turn => format!("{text}{SPLIT_TURN_JOINER}{prefix}"),
        _ => with_file_lists(text, &read_files, &modified_files),
    };
    Ok(Some(CompactionOutcome {
        summary,
        usage: Some(first.usage.map_or(usage, |u| u.combine(&usage))),
        ..first.clone()
    }))
}

/// One compaction call: Pi's checks, then compactd's refusal of a blank summary.
async fn compaction_call(
    provider: Provider<'_>,
    kind: CallKind,
    prompt: String,
    cap: Cap,
    reasoning: Option<String>,
) -> Result<(String, Usage), CompactError> {
    let (text, usage) = provider.ask(kind, &prompt, cap, reasoning).await?;
    // Beyond Pi (proto-docs/gaps.md): a blank summary would replace the history with
    // nothing, so it is refused (and falls back to extractive when configured).
    if text.trim().is_empty() {
        return Err(CompactError::Summarization(format!(
            "{} failed: empty summary",
            kind.label()
        )));
    }
    Ok((text, usage))
}

/// The outcome of a split turn's two concurrent calls, as the sequential calls would have
/// ended: an abort is `Cancelled`; otherwise the history call's failure comes first (Pi sends
/// it first), then the turn prefix's. Only the history call's failure stops the other, so the
/// history call always ends on its own and its failure is the one reported, whatever the
/// timing.
#[allow(clippy::type_complexity)]
fn split_turn_results(
    history: Option<Result<(String, Usage), CompactError>>,
    prefix: Result<(String, Usage), CompactError>,
    cancel: &CancellationToken,
) -> Result<(Option<(String, Usage)>, (String, Usage)), CompactError> {
    if cancel.is_cancelled() {
        return Err(CompactError::Cancelled);
    }
    match (history, prefix) {
        (Some(Err(e)), _) | (_, Err(e)) => Err(e),
        (Some(Ok(h)), Ok(p)) => Ok((Some(h), p)),
        (None, Ok(p)) => Ok((None, p)),
    }
}

/// The extractive engine's version of [`generate`]: the same history / split-turn layout and file
/// lists, written from the structured messages instead of by a model. `details.summarizer` says so.
pub fn generate_extractive(
    prep: &Preparation,
    custom_instructions: Option<&str>,
    redaction: &RedactionConfig,
    settings: ExtractiveSettings,
) -> CompactionOutcome {
    let (read_files, modified_files) = prep.file_ops.file_lists();
    let split_turn = prep.is_split_turn && !prep.turn_prefix_messages.is_empty();
    let prefix_messages = match split_turn {
        true => Messages::Entries(&prep.turn_prefix_messages),
        false => Messages::Parsed(&[]),
    };
    let history = || {
        summarize_history(&ExtractiveInput {
            messages: Messages::Entries(&prep.messages_to_summarize),
            previous_summary: prep.previous_summary.as_deref().filter(|s| !s.is_empty()),
            custom_instructions: custom_instructions.filter(|s| !s.is_empty()),
            turn_prefix: prefix_messages,
            max_tokens: call_max_tokens(&prep.settings, 0.8, 0),
            settings,
        })
    };
    let summary = if split_turn {
        let hist = (!prep.messages_to_summarize.is_empty()).then(history);
        let prefix = summarize_turn_prefix(
            prefix_messages,
            call_max_tokens(&prep.settings, 0.5, 0),
            settings,
        );
        // Pi 1.6 carries the previous summary on when the split turn is all that is new.
        let carried = match prep.edits.version {
            PiVersion::V1_6 => prep.previous_summary.as_deref(),
            PiVersion::V0_85 => None,
        };
        join_split_turn(hist.as_deref().or(carried), &prefix)
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

/// The output cap of a branch summary (Pi's fixed budget, lowered to the model's own cap).
pub const BRANCH_MAX_TOKENS: u64 = 4096;

/// What a branch summary is written from (compaction.md §9): the branch's messages as
/// `prepareBranchEntries` chose them, its file lists, and the caller's instructions.
#[derive(Debug, Clone, Copy)]
pub struct BranchInputs<'a> {
    pub messages: &'a [Value],
    pub read_files: &'a [String],
    pub modified_files: &'a [String],
    pub custom_instructions: Option<&'a str>,
    /// The custom instructions replace Pi's branch prompt instead of adding a focus to it.
    pub replace_instructions: bool,
    /// Whose rules write it: Pi 1.6 sends the session's thinking level and no output cap of
    /// its own (0.85: none, and at most 4096 tokens).
    pub version: PiVersion,
    pub thinking_level: Option<&'a str>,
}

/// A summary body as an engine wrote it, before the caller frames it.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOutcome {
    pub text: String,
    /// The provider's usage (`None` from the extractive engine).
    pub usage: Option<Usage>,
}

/// Summarizes a branch being left (Pi's `generateBranchSummary`) through the same engine
/// dispatch, provider call, redaction and retries as a compaction; retries go to `on_retry`.
/// Unlike a compaction, a failed LLM branch summary never falls back to the extractive engine
/// (`fallback` is a compaction setting): it fails the navigation.
pub async fn summarize_branch(
    engine: &SummaryEngine,
    inputs: &BranchInputs<'_>,
    cancel: &CancellationToken,
    on_retry: &OnRetry<'_>,
) -> Result<SummaryOutcome, CompactError> {
    dispatch(
        engine,
        cancel,
        on_retry,
        &Meter::default(),
        |redaction, settings| extractive_branch(inputs, redaction, settings),
        |provider| llm_branch(inputs, provider),
        None,
    )
    .await
}

/// The extractive half of [`summarize_branch`]: the branch as a history summary, redacted.
fn extractive_branch(
    inputs: &BranchInputs<'_>,
    redaction: &RedactionConfig,
    settings: ExtractiveSettings,
) -> SummaryOutcome {
    let text = summarize_history(&ExtractiveInput {
        messages: inputs.messages.into(),
        previous_summary: None,
        custom_instructions: inputs.custom_instructions,
        turn_prefix: Messages::Parsed(&[]),
        max_tokens: BRANCH_MAX_TOKENS,
        settings,
    });
    SummaryOutcome {
        text: redaction.apply(&text).into_owned(),
        usage: None,
    }
}

/// The LLM half of [`summarize_branch`]: one call with Pi's branch prompt (reasoning as the version sends it).
async fn llm_branch(
    inputs: &BranchInputs<'_>,
    provider: Provider<'_>,
) -> Result<SummaryOutcome, CompactError> {
    let conversation = serialize_conversation(inputs.version, &convert_to_llm(inputs.messages));
    let prompt = branch_prompt_text(
        &conversation,
        inputs.custom_instructions,
        inputs.replace_instructions,
    );
    let (max_tokens, reasoning) = match inputs.version {
        PiVersion::V0_85 => (
            match provider.model.max_tokens {
                0 => BRANCH_MAX_TOKENS,
                cap => cap.min(BRANCH_MAX_TOKENS),
            },
            None,
        ),
        PiVersion::V1_6 => (
            provider.model.max_tokens,
            reasoning_for(provider.model, inputs.thinking_level),
        ),
    };
    let cap = Cap {
        max_tokens,
        version: inputs.version,
    };
    let (text, usage) = provider
        .ask(CallKind::Branch, &prompt, cap, reasoning)
        .await?;
    Ok(SummaryOutcome {
        text,
        usage: Some(usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionTree;
    use crate::summarizer::{Api, AssistantReply, BoxFuture, StopReason};
    use parking_lot::Mutex;
    use serde_json::json;

    /// A provider that fails with a retryable error for its first `failures` calls, then
    /// answers `summary`. Records the prompts it was sent.
    struct FlakyClient {
        failures: usize,
        prompts: Mutex<Vec<String>>,
    }

    impl LlmClient for FlakyClient {
        fn complete<'a>(
            &'a self,
            request: &'a LlmRequest,
            _cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, AssistantReply> {
            Box::pin(async move {
                let mut prompts = self.prompts.lock();
                prompts.push(request.prompt_text.clone());
                if prompts.len() <= self.failures {
                    // A provider may bill a call that then fails.
                    let mut failed = AssistantReply::error("503 overloaded", Some(503));
                    failed.usage.input = 100;
                    return failed;
                }
                let mut reply = AssistantReply {
                    text_blocks: vec!["summary".into()],
                    stop_reason: StopReason::Stop,
                    error_message: None,
                    ..AssistantReply::aborted()
                };
                reply.usage.input = 200;
                reply.usage.output = 10;
                reply
            })
        }
    }

    /// An LLM engine over `client` retrying after 1 ms, with redaction of a fake secret.
    fn flaky_engine(client: Arc<FlakyClient>) -> SummaryEngine {
        SummaryEngine::Llm {
            client,
            model: ModelSpec {
                api: Api::OpenAiCompletions,
                provider: "fake".into(),
                id: "flaky".into(),
                base_url: "http://127.0.0.1:9/v1".into(),
                context_window: 200_000,
                max_tokens: 0,
                reasoning: false,
                api_key: None,
                key_env: None,
                headers: Vec::new(),
            },
            retry: RetrySettings {
                enabled: true,
                max_retries: 3,
                base_delay_ms: 1,
            },
            redaction: RedactionConfig::default(),
            fallback_extractive: false,
        }
    }

    /// The events one retry produces, in Pi's order.
    fn one_retry() -> Vec<RetryEvent> {
        vec![
            RetryEvent::Scheduled {
                attempt: 1,
                max_attempts: 3,
                delay_ms: 1,
                error_message: "503 overloaded".into(),
            },
            RetryEvent::AttemptStart,
            RetryEvent::Finished {
                success: true,
                attempt: 1,
                error_message: None,
            },
        ]
    }

    #[tokio::test]
    async fn branch_summaries_report_retries_to_the_callback_and_redact_the_prompt() {
        let client = Arc::new(FlakyClient {
            failures: 1,
            prompts: Mutex::new(Vec::new()),
        });
        let engine = flaky_engine(client.clone());
        let messages = vec![json!({
            "role": "user",
            "content": "deploy with OPENAI_API_KEY=sk-proj-4eC39HqLyjWDarjtT1zdp7dcAbCdEf",
            "timestamp": 1
        })];
        let inputs = branch_inputs(&messages);
        let events = Mutex::new(Vec::new());
        let outcome = summarize_branch(&engine, &inputs, &CancellationToken::new(), &|e| {
            events.lock().push(e.clone())
        })
        .await;
        assert_eq!(outcome.expect("summarized").text, "summary");
        assert_eq!(*events.lock(), one_retry());
        let prompts = client.prompts.lock();
        assert_eq!(prompts.len(), 2, "one failure, one retry");
        assert!(prompts[0].starts_with("<conversation>\n"), "{}", prompts[0]);
        assert!(
            !prompts[0].contains("4eC39HqLyjWDarjtT1zdp7dc"),
            "{}",
            prompts[0]
        );
    }

    /// A branch summary's inputs: `messages` only, no file lists or instructions.
    fn branch_inputs(messages: &[Value]) -> BranchInputs<'_> {
        BranchInputs {
            messages,
            read_files: &[],
            modified_files: &[],
            custom_instructions: None,
            replace_instructions: false,
            version: PiVersion::V0_85,
            thinking_level: None,
        }
    }

    /// A summary's temporaries die on other threads, so every summary, whichever engine wrote
    /// it and however it ended, asks for the allocator's free memory to be handed back.
    #[tokio::test]
    async fn every_summary_asks_for_freed_memory_to_be_released() {
        let messages = vec![json!({"role": "user", "content": "fix the build", "timestamp": 1})];
        let inputs = branch_inputs(&messages);
        let extractive = SummaryEngine::Extractive {
            redaction: RedactionConfig::default(),
            settings: ExtractiveSettings::DEFAULT,
        };
        let failing = flaky_engine(Arc::new(FlakyClient {
            failures: usize::MAX,
            prompts: Mutex::new(Vec::new()),
        }));
        let cancelled = CancellationToken::new();
        cancelled.cancel();
        for (engine, cancel, ends) in [
            (&extractive, CancellationToken::new(), "written"),
            (&failing, cancelled, "failed"),
        ] {
            let before = crate::cpu::releases_asked_here();
            let outcome = summarize_branch(engine, &inputs, &cancel, &ignore_retries).await;
            assert_eq!(outcome.is_ok(), ends == "written", "{ends}");
            assert_eq!(crate::cpu::releases_asked_here(), before + 1, "{ends}");
        }
    }

    /// Pi's preparation of the session `bytes`, keeping `keep_recent_tokens`.
    fn prepared(bytes: &[u8], keep_recent_tokens: i64) -> Preparation {
        let crate::session::ReadOutcome::Session(parsed) = crate::session::read_session(bytes)
        else {
            panic!("not a session");
        };
        let tree = SessionTree::from_parsed(parsed);
        let branch = tree.branch();
        let settings = CompactionSettings {
            enabled: true,
            reserve_tokens: 16384,
            keep_recent_tokens,
        };
        crate::compaction::prepare_compaction(PiVersion::V0_85, &tree.refs(&branch), &settings)
            .expect("prepared")
    }

    #[tokio::test]
    async fn compactions_report_retries_to_the_callback() {
        let Some(fixture) = crate::test_fixtures::case_file(
            "compactions_report_retries_to_the_callback",
            "009-bash-executions",
            "session.jsonl",
        ) else {
            return;
        };
        let prep = prepared(&std::fs::read(&fixture).expect("read fixture"), 2000);
        let client = Arc::new(FlakyClient {
            failures: 1,
            prompts: Mutex::new(Vec::new()),
        });
        let engine = flaky_engine(client.clone());
        let events = Mutex::new(Vec::new());
        let done = generate(
            &prep,
            &engine,
            None,
            None,
            &CancellationToken::new(),
            &|e| events.lock().push(e.clone()),
            &Meter::default(),
        )
        .await
        .expect("compacted after one retry");
        assert!(done.summary.starts_with("summary"));
        assert_eq!(*events.lock(), one_retry());
        let prompts = client.prompts.lock();
        assert!(prompts.len() >= 2, "one failure, then the calls");
        // A split turn's other call may come between the failure and its retry.
        assert!(
            prompts[1..].contains(&prompts[0]),
            "the retry resends the failed call"
        );
    }

    #[tokio::test]
    async fn the_meter_counts_every_attempt_and_the_usage_field_only_the_answer() {
        let Some(fixture) = crate::test_fixtures::case_file(
            "the_meter_counts_every_attempt_and_the_usage_field_only_the_answer",
            "009-bash-executions",
            "session.jsonl",
        ) else {
            return;
        };
        let prep = prepared(&std::fs::read(&fixture).expect("read fixture"), 2000);
        let calls = if prep.is_split_turn { 2 } else { 1 };
        let client = Arc::new(FlakyClient {
            failures: 1,
            prompts: Mutex::new(Vec::new()),
        });
        let meter = Meter::default();
        let outcome = generate(
            &prep,
            &flaky_engine(client),
            None,
            None,
            &CancellationToken::new(),
            &ignore_retries,
            &meter,
        )
        .await
        .expect("summarized after a retry");
        // Pi's usage: the answering calls; the meter: the failed attempt too.
        assert_eq!(outcome.usage.map(|u| u.input), Some(200 * calls));
        assert_eq!(meter.total().input, 200 * calls + 100);
        assert_eq!(meter.total().output, 10 * calls);
    }

    /// How a [`SplitClient`] answers one of a split turn's two calls.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Answer {
        /// With the call's name, once both calls are in flight (a sequential caller never
        /// gets there: its first call fails with "not concurrent").
        WhenBothStarted,
        /// With the call's name, at once.
        Accept,
        /// A failure no retry helps (HTTP 400).
        Refuse,
        /// Only when the call is cancelled (given up after 10 s).
        Never,
        /// A failure (HTTP 400, "refused late") 200 ms in, unless cancelled first.
        RefuseLate,
    }

    /// A provider for a split turn's calls (told apart by their output caps) that records
    /// which calls started, which saw their cancel, and answers as told.
    struct SplitClient {
        prefix_max_tokens: u64,
        history: Answer,
        prefix: Answer,
        both: tokio::sync::Barrier,
        started: Mutex<Vec<CallKind>>,
        cancelled: Mutex<Vec<CallKind>>,
        all_started: tokio::sync::Notify,
    }

    impl SplitClient {
        fn new(prefix_max_tokens: u64, history: Answer, prefix: Answer) -> SplitClient {
            SplitClient {
                prefix_max_tokens,
                history,
                prefix,
                both: tokio::sync::Barrier::new(2),
                started: Mutex::new(Vec::new()),
                cancelled: Mutex::new(Vec::new()),
                all_started: tokio::sync::Notify::new(),
            }
        }
    }

    impl LlmClient for SplitClient {
        fn complete<'a>(
            &'a self,
            request: &'a LlmRequest,
            cancel: &'a CancellationToken,
        ) -> BoxFuture<'a, AssistantReply> {
            Box::pin(async move {
                let kind = if request.max_tokens == self.prefix_max_tokens {
                    CallKind::TurnPrefix
                } else {
                    CallKind::History
                };
                {
                    let mut started = self.started.lock();
                    started.push(kind);
                    if started.len() == 2 {
                        self.all_started.notify_one();
                    }
                }
                let answer = match kind {
                    CallKind::TurnPrefix => self.prefix,
                    _ => self.history,
                };
                let text = match answer {
                    Answer::Accept => kind.label().to_owned(),
                    Answer::Refuse => return AssistantReply::error("400 bad request", Some(400)),
                    Answer::RefuseLate => {
                        tokio::select! {
                            _ = cancel.cancelled() => {
                                self.cancelled.lock().push(kind);
                                return AssistantReply::aborted();
                            }
                            _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {
                                return AssistantReply::error("400 refused late", Some(400));
                            }
                        }
                    }
                    Answer::Never => {
                        // Bounded, so a caller that never cancels fails the test, not hangs it.
                        tokio::select! {
                            _ = cancel.cancelled() => self.cancelled.lock().push(kind),
                            _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {}
                        }
                        return AssistantReply::aborted();
                    }
                    Answer::WhenBothStarted => {
                        let waited = tokio::select! {
                            _ = self.both.wait() => true,
                            _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => false,
                        };
                        if !waited {
                            return AssistantReply::error("not concurrent", Some(400));
                        }
                        kind.label().to_owned()
                    }
                };
                let mut reply = AssistantReply {
                    text_blocks: vec![text],
                    stop_reason: StopReason::Stop,
                    error_message: None,
                    ..AssistantReply::aborted()
                };
                reply.usage.input = if kind == CallKind::TurnPrefix { 7 } else { 200 };
                reply.usage.output = 10;
                reply
            })
        }
    }

    /// A split turn with history (case 004, keeping 2000 tokens), or `None` when the cases
    /// are missing (skipped, or failed under CI).
    fn split_turn_preparation(test: &str) -> Option<Preparation> {
        let fixture =
            crate::test_fixtures::case_file(test, "004-small-keep-recent-2k", "session.jsonl")?;
        let bytes = std::fs::read(&fixture).expect("read fixture");
        let crate::session::ReadOutcome::Session(parsed) = crate::session::read_session(&bytes)
        else {
            panic!("not a session");
        };
        let tree = SessionTree::from_parsed(parsed);
        let branch = tree.branch();
        let settings = CompactionSettings {
            enabled: true,
            reserve_tokens: 16384,
            keep_recent_tokens: 2000,
        };
        let prep =
            crate::compaction::prepare_compaction(PiVersion::V0_85, &tree.refs(&branch), &settings)
                .expect("prepared");
        assert!(
            prep.is_split_turn
                && !prep.turn_prefix_messages.is_empty()
                && !prep.messages_to_summarize.is_empty(),
            "case 004 no longer splits a turn with history before it"
        );
        Some(prep)
    }

    async fn generate_split(
        prep: &Preparation,
        history: Answer,
        prefix: Answer,
        cancel: &CancellationToken,
    ) -> (
        Result<CompactionOutcome, CompactError>,
        Arc<SplitClient>,
        Meter,
    ) {
        let client = Arc::new(SplitClient::new(
            call_max_tokens(&prep.settings, 0.5, 0),
            history,
            prefix,
        ));
        let mut engine = flaky_engine(Arc::new(FlakyClient {
            failures: 0,
            prompts: Mutex::new(Vec::new()),
        }));
        if let SummaryEngine::Llm { client: c, .. } = &mut engine {
            *c = client.clone();
        }
        let meter = Meter::default();
        let outcome = generate(prep, &engine, None, None, cancel, &ignore_retries, &meter).await;
        (outcome, client, meter)
    }

    /// A split turn's two calls are in flight at once (each answers only when the other has
    /// started), and the summary joins their answers in Pi's order, as the sequential calls
    /// did; Pi's usage and the meter count both calls.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_split_turns_calls_are_sent_at_once_and_joined_in_pis_order() {
        let Some(prep) =
            split_turn_preparation("a_split_turns_calls_are_sent_at_once_and_joined_in_pis_order")
        else {
            return;
        };
        let (outcome, client, meter) = generate_split(
            &prep,
            Answer::WhenBothStarted,
            Answer::WhenBothStarted,
            &CancellationToken::new(),
        )
        .await;
        let outcome = outcome.expect("both calls answered");
        let joined = join_split_turn(
            Some(CallKind::History.label()),
            CallKind::TurnPrefix.label(),
        );
        assert!(
            outcome.summary.starts_with(&joined),
            "{:?} does not start with {joined:?}",
            outcome.summary
        );
        assert_eq!(client.started.lock().len(), 2);
        assert_eq!(outcome.usage.map(|u| u.input), Some(207));
        assert_eq!(meter.total().input, 207);
    }

    /// A call that fails stops its sibling at once (the summary fails either way) and its
    /// failure is the one reported, whichever of the two it is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_call_of_a_split_turn_stops_the_other_and_is_reported() {
        let Some(prep) =
            split_turn_preparation("a_failed_call_of_a_split_turn_stops_the_other_and_is_reported")
        else {
            return;
        };
        // A failed history call stops the turn prefix's; a failed turn-prefix call stops
        // nothing: the history call's own failure, found later, is the one reported (Pi sends
        // the history call first and fails on it), and the prefix's when the history answers.
        for (history, prefix, reported, stopped) in [
            (
                Answer::Refuse,
                Answer::Never,
                "bad request",
                vec![CallKind::TurnPrefix],
            ),
            (Answer::RefuseLate, Answer::Refuse, "refused late", vec![]),
            (Answer::Accept, Answer::Refuse, "bad request", vec![]),
        ] {
            let (outcome, client, _) =
                generate_split(&prep, history, prefix, &CancellationToken::new()).await;
            match outcome {
                Err(CompactError::Summarization(m)) => assert!(m.contains(reported), "{m}"),
                other => panic!("{history:?}/{prefix:?}: {other:?}"),
            }
            assert_eq!(*client.cancelled.lock(), stopped, "{history:?}/{prefix:?}");
        }
    }

    /// An abort reaches both calls of a split turn.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abort_cancels_both_calls_of_a_split_turn() {
        let Some(prep) = split_turn_preparation("an_abort_cancels_both_calls_of_a_split_turn")
        else {
            return;
        };
        let cancel = CancellationToken::new();
        let client = Arc::new(SplitClient::new(
            call_max_tokens(&prep.settings, 0.5, 0),
            Answer::Never,
            Answer::Never,
        ));
        let mut engine = flaky_engine(Arc::new(FlakyClient {
            failures: 0,
            prompts: Mutex::new(Vec::new()),
        }));
        if let SummaryEngine::Llm { client: c, .. } = &mut engine {
            *c = client.clone();
        }
        let meter = Meter::default();
        // Aborted once both calls are in flight (or after 10 s: a sequential caller never gets
        // there, its first call waits for the abort).
        let abort = async {
            let both = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                client.all_started.notified(),
            )
            .await
            .is_ok();
            cancel.cancel();
            both
        };
        let (outcome, both) = tokio::join!(
            generate(&prep, &engine, None, None, &cancel, &ignore_retries, &meter),
            abort
        );
        assert!(both, "the two calls were not in flight at once");
        assert!(
            matches!(outcome, Err(CompactError::Cancelled)),
            "{outcome:?}"
        );
        let mut cancelled = client.cancelled.lock().clone();
        cancelled.sort_by_key(|k| k.label());
        assert_eq!(cancelled.len(), 2, "{cancelled:?}");
    }

    /// The extractive summarizer reads a span's entries one at a time (`Messages::Entries`)
    /// exactly as it reads them parsed whole: on every conformance session, under settings
    /// that cut most of them (and split some turns), both the history and the turn prefix.
    #[test]
    fn summaries_read_from_entries_equal_summaries_read_from_parsed_messages() {
        let settings = CompactionSettings {
            enabled: true,
            reserve_tokens: 16384,
            keep_recent_tokens: 500,
        };
        // Read from entries, a cut text names the entry holding its rest; parsed messages
        // carry no entry id, so theirs only says how much is left. Everything else is equal.
        let unnamed = regex::Regex::new(r"\[(\d+) more chars in entry [^\]]+\]").expect("pattern");
        let mut compared = 0;
        let cases = crate::test_fixtures::cases_with(
            "summaries_read_from_entries_equal_summaries_read_from_parsed_messages",
            "session.jsonl",
        );
        if cases.is_empty() {
            return; // skipped (the cases are missing), as cases_with said
        }
        for case in cases {
            let bytes = std::fs::read(case.join("session.jsonl")).expect("read session");
            let crate::session::ReadOutcome::Session(parsed) = crate::session::read_session(&bytes)
            else {
                continue;
            };
            let tree = SessionTree::from_parsed(parsed);
            let branch = tree.branch();
            let path = tree.refs(&branch);
            let Ok(prep) =
                crate::compaction::prepare_compaction(PiVersion::V0_85, &path, &settings)
            else {
                continue;
            };
            let values = |m: &[crate::compaction::prepare::PreparedMessage]| -> Vec<Value> {
                m.iter().map(|m| m.message()).collect()
            };
            let (history, prefix) = (
                values(&prep.messages_to_summarize),
                values(&prep.turn_prefix_messages),
            );
            let input = |messages, turn_prefix| ExtractiveInput {
                messages,
                previous_summary: prep.previous_summary.as_deref(),
                custom_instructions: None,
                turn_prefix,
                // Room for every item: a cut text read from entries names its entry (longer
                // than the parsed reading's note), which under a tight budget leaves out other
                // items; the comparison is of what both readings find.
                max_tokens: 1_000_000,
                settings: ExtractiveSettings {
                    target_tokens: 1_000_000,
                },
            };
            let from_entries = summarize_history(&input(
                Messages::Entries(&prep.messages_to_summarize),
                Messages::Entries(&prep.turn_prefix_messages),
            ));
            let from_values = summarize_history(&input((&history).into(), (&prefix).into()));
            let from_entries = unnamed.replace_all(&from_entries, "[…${1} more chars]");
            assert_eq!(from_entries, from_values, "{}", case.display());
            let prefix_from_entries = summarize_turn_prefix(
                Messages::Entries(&prep.turn_prefix_messages),
                2000,
                ExtractiveSettings::DEFAULT,
            );
            assert_eq!(
                unnamed.replace_all(&prefix_from_entries, "[…${1} more chars]"),
                summarize_turn_prefix(&prefix, 2000, ExtractiveSettings::DEFAULT),
                "{}",
                case.display()
            );
            compared += usize::from(!history.is_empty()) + usize::from(!prefix.is_empty());
        }
        assert!(compared >= 40, "only {compared} spans compared");
    }

    /// A session of `n` rounds of an edit and a successful test run, as Pi writes it.
    fn many_runs_session(n: usize) -> String {
        let mut lines = vec![json!({"type": "session", "version": 3, "id": "019b0000-0000-7000-8000-0000000000aa", "timestamp": "2026-01-05T09:00:00.000Z", "cwd": "/w"}).to_string()];
        let mut parent: Option<String> = None;
        let mut push = |m: Value, lines: &mut Vec<String>| {
            let id = format!("{:08x}", lines.len());
            lines.push(json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-05T09:00:01.000Z", "message": m}).to_string());
            parent = Some(id);
        };
        push(
            json!({"role": "user", "content": "Make every module's tests pass.", "timestamp": 1}),
            &mut lines,
        );
        for i in 0..n {
            push(
                json!({"role": "assistant", "content": [{"type": "toolCall", "id": format!("c{i}"), "name": "bash", "arguments": {"command": format!("cargo test -p module{i}")}}], "api": "anthropic-messages", "provider": "anthropic", "model": "m", "stopReason": "toolUse", "timestamp": 2}),
                &mut lines,
            );
            push(
                json!({"role": "toolResult", "toolCallId": format!("c{i}"), "toolName": "bash", "content": [{"type": "text", "text": "test result: ok"}], "isError": false, "timestamp": 3}),
                &mut lines,
            );
        }
        push(
            json!({"role": "user", "content": "thanks", "timestamp": 4}),
            &mut lines,
        );
        lines.join("\n") + "\n"
    }

    #[tokio::test]
    async fn the_extractive_engine_aims_at_its_configured_size() {
        let prep = prepared(many_runs_session(200).as_bytes(), 1);
        let mut sizes = Vec::new();
        for target_tokens in [250, 4000] {
            let engine = SummaryEngine::Extractive {
                redaction: RedactionConfig::default(),
                settings: ExtractiveSettings { target_tokens },
            };
            let done = generate(
                &prep,
                &engine,
                None,
                None,
                &CancellationToken::new(),
                &ignore_retries,
                &Meter::default(),
            )
            .await
            .expect("compacted");
            let summary = done.summary;
            assert!(
                summary.contains("Make every module's tests pass."),
                "{summary}"
            );
            sizes.push(crate::json::utf16_len(&summary));
        }
        assert!(sizes[0] <= 250 * 4, "{sizes:?}");
        assert!(
            sizes[1] > 250 * 4,
            "the larger target keeps more: {sizes:?}"
        );
    }
}
