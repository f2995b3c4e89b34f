//! Provider-neutral request and reply types shared by every LLM client.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A boxed future, so [`LlmClient`] stays object-safe (`Arc<dyn LlmClient>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The wire protocol a model is reached with (pi-ai's `api` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Api {
    #[serde(rename = "openai-completions")]
    OpenAiCompletions,
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl Api {
    /// The protocol name as Pi writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAiCompletions => "openai-completions",
            Api::AnthropicMessages => "anthropic-messages",
            Api::OpenAiResponses => "openai-responses",
        }
    }

    /// Parses Pi's protocol name.
    pub fn parse(name: &str) -> Option<Api> {
        match name {
            "openai-completions" => Some(Api::OpenAiCompletions),
            "anthropic-messages" => Some(Api::AnthropicMessages),
            "openai-responses" => Some(Api::OpenAiResponses),
            _ => None,
        }
    }
}

/// Everything needed to call one model (pi-ai's `Model` plus resolved auth).
#[derive(Clone)]
pub struct ModelSpec {
    pub api: Api,
    /// Provider name as recorded in sessions (`anthropic`, `openai`, ...); informational.
    pub provider: String,
    /// Model id sent in the request body.
    pub id: String,
    /// Base URL. OpenAI-style: ends before `/chat/completions` (e.g. `https://api.openai.com/v1`);
    /// Anthropic: the host root (`https://api.anthropic.com`), `/v1/messages` is appended.
    pub base_url: String,
    /// The model's context window in tokens (pi-ai clamps `max_tokens` against it).
    pub context_window: u64,
    /// The model's own output cap; `0` means "no cap from the model".
    pub max_tokens: u64,
    /// Whether the model supports reasoning / extended thinking.
    pub reasoning: bool,
    /// API key, if any. Never logged.
    pub api_key: Option<String>,
    /// The environment variable the key was read from, if it came from one: named when the
    /// provider refuses the key (401/403), since that is where the user fixes it.
    pub key_env: Option<String>,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSpec")
            .field("api", &self.api)
            .field("provider", &self.provider)
            .field("id", &self.id)
            .field("base_url", &self.base_url)
            .field("context_window", &self.context_window)
            .field("max_tokens", &self.max_tokens)
            .field("reasoning", &self.reasoning)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("key_env", &self.key_env)
            .finish()
    }
}

/// One summarization call: a system prompt and exactly one user message, no tools
/// (compaction.md §6.2).
#[derive(Debug, Clone)]
pub struct LlmRequest {
    pub system_prompt: String,
    pub prompt_text: String,
    /// The caller's `maxTokens` before pi-ai's provider-layer clamp.
    pub max_tokens: u64,
    /// Thinking level (`minimal`, `low`, `medium`, `high`, `xhigh`, `max`) when reasoning is on.
    pub reasoning: Option<String>,
    /// Routing id (pi-ai `sessionId`); a fresh UUIDv7 per call for compaction.
    pub session_id: Option<String>,
    /// Epoch milliseconds stamped on the user message.
    pub timestamp_ms: i64,
    /// Whose pi-ai fits `max_tokens` into the window ([`clamp_max_tokens`]).
    pub pi_version: crate::pi_version::PiVersion,
}

pub use crate::compaction::reply::{AssistantReply, BlockKind, StopReason, Usage, UsageCost};

/// One LLM provider. Implementations stream the response and must return promptly once
/// `cancel` fires (with [`StopReason::Aborted`]).
pub trait LlmClient: Send + Sync {
    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, AssistantReply>;
}

/// pi-ai's provider-layer clamp of `maxTokens` (`clampMaxTokensToContext`), as the request's
/// Pi version has it.
///
/// 0.85 leaves room for the request itself plus a 4096-token margin, never below 1, estimating
/// the request as `ceil(len(system)/4) + ceil(len(prompt)/4)` (UTF-16 units).
///
/// 1.6 estimates at 3.5 characters a token and keeps a margin of 15% of the input (at least 4096
/// tokens: OpenRouter counts prose up to 12% above the provider), unless that leaves less than
/// 32768 tokens of output; then only the 4096 margin is kept and the output is capped at 32768.
pub fn clamp_max_tokens(model: &ModelSpec, request: &LlmRequest, max_tokens: u64) -> u64 {
    if model.context_window == 0 {
        return max_tokens.max(1);
    }
    let len = |s: &str| crate::json::utf16_len(s) as u64;
    let window = model.context_window as i128;
    let room = if request.pi_version.is_1_6() {
        let tokens = |chars: u64| (chars as f64 / 3.5).ceil() as i128;
        let input = tokens(len(&request.system_prompt)) + tokens(len(&request.prompt_text));
        let margin = 4096.max((input as f64 * 0.15).ceil() as i128);
        let room = window - input - margin;
        if room < 32_768 {
            32_768.min(window - input - 4096)
        } else {
            room
        }
    } else {
        let input = len(&request.prompt_text).div_ceil(4) + len(&request.system_prompt).div_ceil(4);
        window - input as i128 - 4096
    };
    max_tokens.min(room.max(1) as u64)
}
