//! The summarizer layer: everything that turns a prompt into summary text.
//!
//! The pure compaction core (`crate::compaction`) decides *what* to summarize and builds the
//! prompt texts; this layer decides *who* writes the summary (an LLM provider over HTTP, or the
//! embedded extractive summarizer) and handles the transport concerns: streaming, usage
//! accounting, stop reasons, retries and cancellation.
//!
//! Every provider implements [`LlmClient`]. Like pi-ai, a client never returns a Rust error for
//! a provider failure: failures come back as an [`AssistantReply`] whose `stop_reason` is
//! [`StopReason::Error`] with an `error_message`, so the retry policy and Pi's error strings work
//! the same whatever went wrong (HTTP status, broken stream, timeout).

pub mod anthropic_messages;
pub mod extractive;
pub mod openai_completions;
pub mod openai_responses;
pub mod overflow;
pub mod redact;
pub mod retry;
pub mod transport;
pub mod types;

pub use anthropic_messages::AnthropicMessagesClient;
pub use openai_completions::OpenAiCompletionsClient;
pub use openai_responses::OpenAiResponsesClient;
pub use overflow::{
    is_context_overflow, is_recoverable_length, is_retryable_assistant_error, ReplyFacts,
};
pub use retry::{retry_call, RetryEvent, RetrySettings};
pub use transport::{format_http_error, DEFAULT_IDLE_TIMEOUT};
pub use types::{
    Api, AssistantReply, BoxFuture, LlmClient, LlmRequest, ModelSpec, StopReason, Usage, UsageCost,
};

/// The streaming client for `model.api`, sharing `http`'s connection pool. The daemon keeps
/// these behind `Arc<dyn LlmClient>` so the summarizer does not care which protocol it talks.
pub fn client_for(model: ModelSpec, http: reqwest::Client) -> std::sync::Arc<dyn LlmClient> {
    client_with_idle_timeout(model, http, DEFAULT_IDLE_TIMEOUT)
}

/// [`client_for`] with a stream idle timeout: no bytes for this long fails the call.
pub fn client_with_idle_timeout(
    model: ModelSpec,
    http: reqwest::Client,
    idle: std::time::Duration,
) -> std::sync::Arc<dyn LlmClient> {
    match model.api {
        Api::OpenAiCompletions => std::sync::Arc::new(
            OpenAiCompletionsClient::with_http(model, http).with_idle_timeout(idle),
        ),
        Api::AnthropicMessages => std::sync::Arc::new(
            AnthropicMessagesClient::with_http(model, http).with_idle_timeout(idle),
        ),
        Api::OpenAiResponses => std::sync::Arc::new(
            OpenAiResponsesClient::with_http(model, http).with_idle_timeout(idle),
        ),
    }
}
