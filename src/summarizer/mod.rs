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

pub mod extractive;
pub mod redact;
pub mod types;

pub use types::{
    Api, AssistantReply, BoxFuture, LlmClient, LlmRequest, ModelSpec, StopReason, Usage, UsageCost,
};
