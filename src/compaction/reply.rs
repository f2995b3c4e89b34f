//! What a summarization call returns, as plain data: the assistant's reply, its stop reason and
//! its usage (pi-ai's shapes). They live in the core because the core's response checks and
//! results read them; the summarizer's providers build them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::session::StopReason;

/// Cost breakdown in Pi's key order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageCost {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
    pub total: f64,
}

/// pi-ai's `Usage`, serialized with Pi's key order; optional members are omitted when absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    #[schemars(with = "u64")]
    pub cache_write_1h: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    #[schemars(with = "u64")]
    pub reasoning: Option<u64>,
    pub total_tokens: u64,
    pub cost: UsageCost,
}

impl Usage {
    /// The tokens this usage reports, priced at `price` (beyond Pi: compactd's accounting).
    pub fn cost(&self, price: Option<crate::accounting::Price>) -> crate::accounting::Cost {
        crate::accounting::Cost::of(
            self.input,
            self.output,
            self.cache_read,
            self.cache_write,
            price,
        )
    }

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
