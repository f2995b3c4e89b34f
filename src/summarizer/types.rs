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
}

/// pi-ai's stop reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    Stop,
    Length,
    ToolUse,
    Error,
    Aborted,
}

/// Cost breakdown in Pi's key order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageCost {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
    pub total: f64,
}

/// pi-ai's `Usage`, serialized with Pi's key order; optional members are omitted when absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    #[serde(
        rename = "cacheWrite1h",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub cache_write_1h: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reasoning: Option<u64>,
    pub total_tokens: u64,
    pub cost: UsageCost,
}

impl Usage {
    /// Pi's `combineUsage`: field-wise sums; optional members present if either side has them.
    pub fn combine(&self, other: &Usage) -> Usage {
        fn opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }
        }
        Usage {
            input: self.input + other.input,
            output: self.output + other.output,
            cache_read: self.cache_read + other.cache_read,
            cache_write: self.cache_write + other.cache_write,
            cache_write_1h: opt(self.cache_write_1h, other.cache_write_1h),
            reasoning: opt(self.reasoning, other.reasoning),
            total_tokens: self.total_tokens + other.total_tokens,
            cost: UsageCost {
                input: self.cost.input + other.cost.input,
                output: self.cost.output + other.cost.output,
                cache_read: self.cost.cache_read + other.cost.cache_read,
                cache_write: self.cost.cache_write + other.cost.cache_write,
                total: self.cost.total + other.cost.total,
            },
        }
    }
}

/// The assistant message a provider produced, reduced to what summarization needs.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantReply {
    /// Text blocks in order (joined with `"\n"` by the caller).
    pub text_blocks: Vec<String>,
    /// Thinking text, if the provider streamed any (never part of the summary).
    pub thinking: Vec<String>,
    /// Whether the model emitted any tool call (a summary that calls a tool is rejected).
    pub has_tool_call: bool,
    pub usage: Usage,
    pub stop_reason: StopReason,
    /// Set when `stop_reason` is `Error` (and possibly `Aborted`).
    pub error_message: Option<String>,
    /// HTTP status of a failed request, when there was one (for retry classification / logs).
    pub http_status: Option<u16>,
    /// How long the provider asked us to wait before retrying (`Retry-After` on a failed
    /// request), in milliseconds; the retry loop waits at least this long.
    pub retry_after_ms: Option<u64>,
}

impl AssistantReply {
    /// A failed call, as pi-ai reports it: empty content, zero usage, `stopReason: "error"`.
    pub fn error(message: impl Into<String>, http_status: Option<u16>) -> Self {
        AssistantReply {
            text_blocks: Vec::new(),
            thinking: Vec::new(),
            has_tool_call: false,
            usage: Usage::default(),
            stop_reason: StopReason::Error,
            error_message: Some(message.into()),
            http_status,
            retry_after_ms: None,
        }
    }

    /// A call cut short by the cancellation token.
    pub fn aborted() -> Self {
        AssistantReply {
            text_blocks: Vec::new(),
            thinking: Vec::new(),
            has_tool_call: false,
            usage: Usage::default(),
            stop_reason: StopReason::Aborted,
            error_message: None,
            http_status: None,
            retry_after_ms: None,
        }
    }
}

/// The kind of a streamed content block, as every provider's parser classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    Text,
    Thinking,
    ToolCall,
}

impl AssistantReply {
    /// A completed reply assembled from the blocks a stream produced, in order.
    pub fn from_blocks(
        stop_reason: StopReason,
        usage: Usage,
        blocks: impl IntoIterator<Item = (BlockKind, String)>,
    ) -> AssistantReply {
        let mut reply = AssistantReply {
            text_blocks: Vec::new(),
            thinking: Vec::new(),
            has_tool_call: false,
            usage,
            stop_reason,
            error_message: None,
            http_status: None,
            retry_after_ms: None,
        };
        for (kind, text) in blocks {
            match kind {
                BlockKind::Text => reply.text_blocks.push(text),
                BlockKind::Thinking => reply.thinking.push(text),
                BlockKind::ToolCall => reply.has_tool_call = true,
            }
        }
        reply
    }
}

/// One LLM provider. Implementations stream the response and must return promptly once
/// `cancel` fires (with [`StopReason::Aborted`]).
pub trait LlmClient: Send + Sync {
    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, AssistantReply>;
}

/// pi-ai's provider-layer clamp of `maxTokens` (`clampMaxTokensToContext`): leave room for the
/// request itself plus a 4096-token safety margin, never below 1. The request estimate is
/// `ceil(len(system)/4) + ceil(len(prompt)/4)` in UTF-16 units, as pi-ai estimates a context
/// with a system prompt and one user text message.
pub fn clamp_max_tokens(model: &ModelSpec, request: &LlmRequest, max_tokens: u64) -> u64 {
    if model.context_window == 0 {
        return max_tokens.max(1);
    }
    let estimate = crate::json::utf16_len(&request.prompt_text).div_ceil(4)
        + crate::json::utf16_len(&request.system_prompt).div_ceil(4);
    let available = model.context_window as i128 - estimate as i128 - 4096;
    let clamped = available.max(1) as u64;
    max_tokens.min(clamped)
}
