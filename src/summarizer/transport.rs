//! HTTP and server-sent-event plumbing shared by the streaming providers.
//!
//! Every provider does the same three things around its protocol-specific parsing: send one POST,
//! turn a non-2xx answer into the error text pi-ai would show, and read SSE events while watching
//! the cancellation token and an idle timer. Keeping that here means the abort, timeout and
//! error-string behaviour (which the retry and overflow classifiers depend on) is identical for
//! all protocols.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::types::AssistantReply;

/// Default for how long a stream may stay silent (no bytes at all) before we give up on it.
/// Providers routinely pause while thinking, so this is generous; it exists so a dead
/// connection cannot hang a compaction forever.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a call ended early. Converted into an [`AssistantReply`] at the client boundary, because
/// clients never return Rust errors (see the module docs of `summarizer`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    Aborted,
    Error {
        message: String,
        status: Option<u16>,
    },
}

impl Failure {
    pub(crate) fn error(message: impl Into<String>) -> Self {
        Failure::Error {
            message: message.into(),
            status: None,
        }
    }

    pub(crate) fn into_reply(self) -> AssistantReply {
        match self {
            Failure::Aborted => AssistantReply::aborted(),
            Failure::Error { message, status } => AssistantReply::error(message, status),
        }
    }
}

/// The message a timed-out wait produces. Worded so `is_retryable_assistant_error` sees a
/// timeout (pi-ai's SDKs say "Request timed out." too).
pub(crate) const TIMEOUT_MESSAGE: &str = "Request timed out";

pub(crate) type SseStream =
    Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<reqwest::Error>>> + Send>>;

/// Waits for `fut` unless the token fires or `idle` elapses first.
async fn guarded<F: std::future::Future>(
    fut: F,
    cancel: &CancellationToken,
    idle: Duration,
) -> Result<F::Output, Failure> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Failure::Aborted),
        r = tokio::time::timeout(idle, fut) => r.map_err(|_| Failure::error(TIMEOUT_MESSAGE)),
    }
}

/// Sends the request and, on a 2xx answer, returns its body as an SSE event stream.
///
/// A non-2xx answer becomes an error carrying the status and the provider's message, formatted
/// the way the official SDKs format it (`"<status> <message or JSON body>"`), so provider error
/// text such as "prompt is too long" or `context_length_exceeded` reaches the overflow
/// classifier unchanged.
pub(crate) async fn open_sse(
    request: reqwest::RequestBuilder,
    cancel: &CancellationToken,
    idle: Duration,
) -> Result<SseStream, Failure> {
    if cancel.is_cancelled() {
        return Err(Failure::Aborted);
    }
    let response = guarded(request.send(), cancel, idle)
        .await?
        .map_err(|e| Failure::error(describe_transport_error(&e, "Connection error")))?;
    let status = response.status();
    if !status.is_success() {
        let text = guarded(response.text(), cancel, idle)
            .await?
            .unwrap_or_default();
        return Err(Failure::Error {
            message: format_http_error(status.as_u16(), &text),
            status: Some(status.as_u16()),
        });
    }
    Ok(Box::pin(response.bytes_stream().eventsource()))
}

/// Next SSE event; `Ok(None)` at a clean end of stream.
pub(crate) async fn next_event(
    stream: &mut SseStream,
    cancel: &CancellationToken,
    idle: Duration,
) -> Result<Option<Event>, Failure> {
    match guarded(stream.next(), cancel, idle).await? {
        None => Ok(None),
        Some(Ok(event)) => Ok(Some(event)),
        Some(Err(EventStreamError::Transport(e))) => Err(Failure::error(describe_transport_error(
            &e,
            "Network error: stream terminated",
        ))),
        Some(Err(e)) => Err(Failure::error(format!(
            "Network error: stream terminated: {e}"
        ))),
    }
}

/// Human-readable transport failure. Timeouts say "timed out" and everything else starts with
/// `prefix` ("Connection error" / "Network error"), both retryable wordings in pi-ai's list.
/// reqwest error texts carry the URL but never headers, so no key can leak here.
fn describe_transport_error(e: &reqwest::Error, prefix: &str) -> String {
    if e.is_timeout() {
        return TIMEOUT_MESSAGE.to_string();
    }
    let mut text = format!("{prefix}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The message the OpenAI and Anthropic SDKs build for an HTTP error: the status, then the
/// body's top-level `message` when it has one, else the whole JSON body re-serialized, else the
/// raw text; `"<status> status code (no body)"` when there is nothing (a wording pi-ai's
/// overflow patterns match for Cerebras).
pub fn format_http_error(status: u16, body: &str) -> String {
    let msg = match serde_json::from_str::<Value>(body) {
        Ok(v) if crate::json::truthy(Some(&v)) => {
            let inner = v.get("message");
            if crate::json::truthy(inner) {
                match inner {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => crate::json::stringify(other),
                    None => String::new(),
                }
            } else {
                crate::json::stringify(&v)
            }
        }
        _ => body.to_string(),
    };
    if msg.is_empty() {
        format!("{status} status code (no body)")
    } else {
        format!("{status} {msg}")
    }
}

/// `base` joined with `path` without doubling the slash users often leave on base URLs.
/// A JSON POST to an OpenAI-style endpoint: bearer auth when a key is set, the model's extra
/// headers, and the body serialized as `JSON.stringify` would.
pub(crate) fn openai_style_post(
    http: &reqwest::Client,
    model: &super::types::ModelSpec,
    path: &str,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut builder = http
        .post(join_url(&model.base_url, path))
        .header("content-type", "application/json")
        .header("accept", "application/json");
    if let Some(key) = model.api_key.as_deref().filter(|k| !k.is_empty()) {
        builder = builder.header("authorization", format!("Bearer {key}"));
    }
    for (name, value) in &model.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder.body(crate::json::stringify(body))
}

/// Declares a provider client struct (model, shared HTTP pool, idle timeout) with its
/// constructors, so the three protocols differ only in what they put on the wire.
macro_rules! provider_client {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub struct $name {
            pub model: $crate::summarizer::types::ModelSpec,
            pub http: reqwest::Client,
            /// Longest silence tolerated while waiting for headers or the next bytes of the stream.
            pub idle_timeout: std::time::Duration,
        }

        impl $name {
            pub fn new(model: $crate::summarizer::types::ModelSpec) -> Self {
                Self::with_http(model, reqwest::Client::new())
            }

            pub fn with_http(model: $crate::summarizer::types::ModelSpec, http: reqwest::Client) -> Self {
                $name { model, http, idle_timeout: $crate::summarizer::transport::DEFAULT_IDLE_TIMEOUT }
            }

            pub fn with_idle_timeout(mut self, idle: std::time::Duration) -> Self {
                self.idle_timeout = idle;
                self
            }
        }
    };
}
pub(crate) use provider_client;

pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!("{}{}", base.trim_end_matches('/'), path)
}

/// Reads a non-negative integer the way pi-ai's `x || 0` does: missing, null, zero or non-numbers
/// give 0; fractional values truncate.
pub(crate) fn count(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f > 0.0).map(|f| f as u64))
            .unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_error_formats_like_the_sdks() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert_eq!(format_http_error(400, openai), format!("400 {openai}"));
        assert_eq!(
            format_http_error(429, r#"{"message":"slow down"}"#),
            "429 slow down"
        );
        assert_eq!(format_http_error(400, ""), "400 status code (no body)");
        assert_eq!(format_http_error(502, "Bad Gateway"), "502 Bad Gateway");
    }

    #[test]
    fn count_is_lenient() {
        assert_eq!(count(None), 0);
        assert_eq!(count(Some(&Value::Null)), 0);
        assert_eq!(count(Some(&serde_json::json!(12))), 12);
        assert_eq!(count(Some(&serde_json::json!(-3))), 0);
        assert_eq!(count(Some(&serde_json::json!("7"))), 0);
    }
}
