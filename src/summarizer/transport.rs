//! HTTP and server-sent-event plumbing shared by the streaming providers.
//!
//! Every provider does the same three things around its protocol-specific parsing: send one POST,
//! turn a non-2xx answer into the error text pi-ai would show, and read SSE events while watching
//! the cancellation token and an idle timer. Keeping that here means the abort, timeout and
//! error-string behaviour (which the retry and overflow classifiers depend on) is identical for
//! all protocols. It is also where a hostile or broken provider is contained: response bodies
//! are bounded ([`MAX_RESPONSE_BYTES`]), error bodies too, and a `Retry-After` the provider sends
//! with a failure is read here so the retry loop can honour it.

use std::pin::Pin;
use std::time::{Duration, SystemTime};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::types::{
    AssistantReply, BlockKind, BoxFuture, LlmClient, LlmRequest, StopReason, Usage,
};

/// Default for how long a stream may stay silent (no bytes at all) before we give up on it.
/// Providers routinely pause while thinking, so this is generous; it exists so a dead
/// connection cannot hang a compaction forever.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Most bytes one streamed response may have. A summary is capped by `max_tokens` (tens of
/// thousands of tokens, a few MB of SSE even one token per event), so anything beyond this is a
/// broken or hostile server, and reading it would only grow memory.
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// Most bytes of an error body kept for the error message.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The message for a response over [`MAX_RESPONSE_BYTES`]. Worded so neither the retry nor the
/// overflow classifier matches it: the same request would only fail the same way again.
pub const TOO_LARGE_MESSAGE: &str =
    "Provider response too large (over 32 MiB); the stream was dropped";

/// Why a call ended early. Converted into an [`AssistantReply`] at the client boundary, because
/// clients never return Rust errors (see the module docs of `summarizer`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallFailure {
    Aborted,
    Error {
        message: String,
        status: Option<u16>,
        /// The wait the provider asked for before a retry (`Retry-After`), if it sent one.
        retry_after: Option<Duration>,
    },
}

/// One wire protocol's streaming call. Each provider implements only this; the blanket
/// [`LlmClient`] impl below turns a [`CallFailure`] into pi-ai's error reply the same way for all.
pub(crate) trait StreamingProvider: Send + Sync {
    fn stream(
        &self,
        request: &LlmRequest,
        cancel: &CancellationToken,
    ) -> impl std::future::Future<Output = Result<AssistantReply, CallFailure>> + Send;

    /// The error text of an HTTP failure with `status`, as pi-ai words it for this protocol
    /// (by default the provider's own message).
    fn http_error_message(&self, _status: u16, message: String) -> String {
        message
    }
}

impl<T: StreamingProvider> LlmClient for T {
    fn complete<'a>(
        &'a self,
        request: &'a LlmRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, AssistantReply> {
        Box::pin(async move {
            match self.stream(request, cancel).await {
                Ok(reply) => reply,
                Err(CallFailure::Error {
                    message,
                    status: Some(status),
                    retry_after,
                }) => CallFailure::Error {
                    message: self.http_error_message(status, message),
                    status: Some(status),
                    retry_after,
                }
                .into_reply(),
                Err(failure) => failure.into_reply(),
            }
        })
    }
}

/// The reply pi-ai builds from a finished stream: no stop reason is a failure (`missing` says
/// which protocol), an `error`/`aborted` stop a failure with the provider's message, anything
/// else the blocks in order.
pub(crate) fn completed_reply(
    stop_reason: Option<StopReason>,
    missing: &str,
    error_message: Option<String>,
    usage: Usage,
    blocks: impl IntoIterator<Item = (BlockKind, String)>,
) -> Result<AssistantReply, CallFailure> {
    let Some(stop_reason) = stop_reason else {
        return Err(CallFailure::error(missing));
    };
    if matches!(stop_reason, StopReason::Error | StopReason::Aborted) {
        return Err(CallFailure::error(
            error_message.unwrap_or_else(|| "An unknown error occurred".to_string()),
        ));
    }
    Ok(AssistantReply::from_blocks(stop_reason, usage, blocks))
}

/// The JSON of one SSE event's data; `what` names the event in the error (`stream chunk`, …).
pub(crate) fn parse_event(data: &str, what: &str) -> Result<Value, CallFailure> {
    serde_json::from_str(data).map_err(|e| {
        CallFailure::error(format!(
            "Could not parse {what}: {e}; data={}",
            excerpt(data, 200)
        ))
    })
}

/// [`parse_event`] for OpenAI-style streams, which also send blank and `[DONE]` events
/// (`Ok(None)`).
pub(crate) fn event_json(data: &str, what: &str) -> Result<Option<Value>, CallFailure> {
    let data = data.trim();
    if data.is_empty() || data == "[DONE]" {
        return Ok(None);
    }
    parse_event(data, what).map(Some)
}

impl CallFailure {
    pub(crate) fn error(message: impl Into<String>) -> Self {
        CallFailure::Error {
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }

    pub(crate) fn into_reply(self) -> AssistantReply {
        match self {
            CallFailure::Aborted => AssistantReply::aborted(),
            CallFailure::Error {
                message,
                status,
                retry_after,
            } => AssistantReply {
                retry_after_ms: retry_after
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                ..AssistantReply::error(message, status)
            },
        }
    }
}

/// Why reading a response body failed: the transport, or the body outgrew its bound.
#[derive(Debug)]
pub(crate) enum BodyError {
    Http(reqwest::Error),
    TooLarge,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Http(e) => e.fmt(f),
            BodyError::TooLarge => f.write_str(TOO_LARGE_MESSAGE),
        }
    }
}

impl std::error::Error for BodyError {}

/// The message a timed-out wait produces. Worded so `is_retryable_assistant_error` sees a
/// timeout (pi-ai's SDKs say "Request timed out." too).
pub(crate) const TIMEOUT_MESSAGE: &str = "Request timed out";

pub(crate) type SseStream =
    Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError>>> + Send>>;

/// Waits for `fut` unless the token fires or `idle` elapses first.
async fn guarded<F: std::future::Future>(
    fut: F,
    cancel: &CancellationToken,
    idle: Duration,
) -> Result<F::Output, CallFailure> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(CallFailure::Aborted),
        r = tokio::time::timeout(idle, fut) => r.map_err(|_| CallFailure::error(TIMEOUT_MESSAGE)),
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
) -> Result<SseStream, CallFailure> {
    if cancel.is_cancelled() {
        return Err(CallFailure::Aborted);
    }
    let response = guarded(request.send(), cancel, idle)
        .await?
        .map_err(|e| CallFailure::error(describe_transport_error(&e, "Connection error")))?;
    let status = response.status();
    if !status.is_success() {
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let text = guarded(error_body(response), cancel, idle).await?;
        return Err(CallFailure::Error {
            message: format_http_error(status.as_u16(), &text),
            status: Some(status.as_u16()),
            retry_after,
        });
    }
    Ok(Box::pin(
        limit_body(response.bytes_stream(), MAX_RESPONSE_BYTES).eventsource(),
    ))
}

/// The body as a stream that fails with [`BodyError::TooLarge`] once more than `limit` bytes
/// arrived (so memory stays bounded whatever the server sends).
fn limit_body<S>(body: S, limit: usize) -> impl Stream<Item = Result<bytes::Bytes, BodyError>>
where
    S: Stream<Item = Result<bytes::Bytes, reqwest::Error>>,
{
    let mut seen = 0usize;
    body.map(move |chunk| {
        let chunk = chunk.map_err(BodyError::Http)?;
        seen = seen.saturating_add(chunk.len());
        if seen > limit {
            Err(BodyError::TooLarge)
        } else {
            Ok(chunk)
        }
    })
}

/// At most [`MAX_ERROR_BODY_BYTES`] of an error response, lossily decoded; a body that fails
/// midway keeps what arrived.
async fn error_body(mut response: reqwest::Response) -> String {
    let mut kept: Vec<u8> = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = MAX_ERROR_BODY_BYTES - kept.len();
        kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if kept.len() >= MAX_ERROR_BODY_BYTES {
            break;
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// The wait a failed response asks for: `retry-after-ms` (milliseconds, as the OpenAI and
/// Anthropic SDKs read it), else `Retry-After` as delta-seconds or an HTTP-date (RFC 9110
/// §10.2.3). A date in the past means no wait; unreadable values are ignored.
pub(crate) fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: SystemTime,
) -> Option<Duration> {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    if let Some(ms) = value("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64((ms / 1000.0).min(1e9)));
        }
    }
    let v = value("retry-after")?;
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs.min(1e9)));
        }
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// At most `max` characters of `text` (on a char boundary), for quoting provider data in error
/// messages without copying megabytes into them.
pub(crate) fn excerpt(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// Next SSE event; `Ok(None)` at a clean end of stream.
pub(crate) async fn next_event(
    stream: &mut SseStream,
    cancel: &CancellationToken,
    idle: Duration,
) -> Result<Option<Event>, CallFailure> {
    match guarded(stream.next(), cancel, idle).await? {
        None => Ok(None),
        Some(Ok(event)) => Ok(Some(event)),
        Some(Err(EventStreamError::Transport(BodyError::TooLarge))) => {
            Err(CallFailure::error(TOO_LARGE_MESSAGE))
        }
        Some(Err(EventStreamError::Transport(BodyError::Http(e)))) => Err(CallFailure::error(
            describe_transport_error(&e, "Network error: stream terminated"),
        )),
        Some(Err(e)) => Err(CallFailure::error(format!(
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
    fn retry_after_reads_milliseconds_seconds_and_http_dates() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        let h = |pairs: &[(&'static str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, HeaderValue::from_str(v).expect("value"));
            }
            m
        };
        assert_eq!(retry_after(&h(&[]), now), None);
        assert_eq!(
            retry_after(&h(&[("retry-after", "7")]), now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&h(&[("retry-after", " 1.5 ")]), now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(&h(&[("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT")]), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(&h(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]), now),
            Some(Duration::ZERO),
            "a date in the past: no wait"
        );
        assert_eq!(
            retry_after(&h(&[("retry-after-ms", "250"), ("retry-after", "9")]), now),
            Some(Duration::from_millis(250)),
            "retry-after-ms wins"
        );
        for junk in ["soon", "-3", "NaN", "Sun, 99 Foo"] {
            assert_eq!(
                retry_after(&h(&[("retry-after", junk)]), now),
                None,
                "{junk}"
            );
        }
    }

    #[test]
    fn too_large_is_neither_retryable_nor_an_overflow() {
        use crate::summarizer::overflow::{is_context_overflow, is_retryable_error_text};
        assert!(!is_retryable_error_text(TOO_LARGE_MESSAGE));
        assert!(!is_context_overflow(
            &crate::summarizer::ReplyFacts {
                stop_reason: crate::summarizer::StopReason::Error,
                error_message: Some(TOO_LARGE_MESSAGE),
                input: 0,
                cache_read: 0,
                output: 0,
            },
            0
        ));
        assert_eq!(excerpt("héllo", 2), "hé");
        assert_eq!(excerpt("hi", 10), "hi");
    }

    #[tokio::test]
    async fn body_over_the_bound_fails_after_the_limit() {
        let chunks = (0..10).map(|_| Ok(bytes::Bytes::from(vec![b'x'; 100])));
        let out: Vec<_> = limit_body(futures_util::stream::iter(chunks), 450)
            .collect()
            .await;
        assert_eq!(out.iter().filter(|r| r.is_ok()).count(), 4);
        assert!(matches!(out[4], Err(BodyError::TooLarge)));
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
