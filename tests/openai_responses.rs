//! Wire-level tests of the OpenAI Responses client against an in-process server speaking the
//! Responses streaming events: text and usage, `max_output_tokens` incompletes, failures, HTTP
//! errors with retry, broken streams and cancellation.

mod support;

use std::time::{Duration, Instant};

use compactd::summarizer::overflow::{is_context_overflow, ReplyFacts};
use compactd::summarizer::retry::{retry_call, RetrySettings};
use compactd::summarizer::types::Api;
use compactd::summarizer::{
    is_retryable_assistant_error, LlmClient, LlmRequest, ModelSpec, OpenAiResponsesClient,
    StopReason,
};
use serde_json::{json, Value};
use support::fake_llm::{event, Ending, MockServer, Scripted};
use support::wait_until_async;
use tokio_util::sync::CancellationToken;

fn model(base: &str) -> ModelSpec {
    ModelSpec {
        api: Api::OpenAiResponses,
        provider: "openai".into(),
        id: "gpt-test".into(),
        base_url: format!("{base}/v1"),
        context_window: 200_000,
        max_tokens: 32_000,
        reasoning: true,
        api_key: Some("sk-test".into()),
        key_env: None,
        headers: vec![],
    }
}

fn request(max_tokens: u64, reasoning: Option<&str>) -> LlmRequest {
    LlmRequest {
        system_prompt: "You write summaries.".into(),
        prompt_text: "Summarize this.".into(),
        max_tokens,
        reasoning: reasoning.map(str::to_string),
        session_id: None,
        timestamp_ms: 0,
        pi_version: compactd::pi_version::PiVersion::V0_85,
    }
}

fn ev(v: Value) -> String {
    let name = v["type"].as_str().unwrap_or("message").to_string();
    event(&name, &v)
}

/// A full successful stream: a reasoning item, a message item with two deltas, then `terminal`.
fn stream_with(terminal: Value) -> Vec<String> {
    vec![
        ev(
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}),
        ),
        ev(
            json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        ),
        ev(
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "thinking"}),
        ),
        ev(
            json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thought"}]}}),
        ),
        ev(
            json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
        ev(
            json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Hello"}),
        ),
        ev(
            json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": " there"}),
        ),
        ev(
            json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"type": "message", "id": "msg_1", "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello there"}]}}),
        ),
        ev(terminal),
    ]
}

fn usage() -> Value {
    json!({"input_tokens": 500, "input_tokens_details": {"cached_tokens": 100},
        "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 25}, "total_tokens": 540})
}

#[tokio::test]
async fn completed_stream_text_usage_and_request_shape() {
    let server = MockServer::start().await;
    server.push(Scripted::sse(stream_with(
        json!({"type": "response.completed",
        "response": {"id": "resp_1", "status": "completed", "usage": usage()}}),
    )));
    let reply = OpenAiResponsesClient::new(model(&server.base()))
        .complete(&request(1000, Some("medium")), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Stop, "{reply:?}");
    assert_eq!(reply.text_blocks, vec!["Hello there".to_string()]);
    assert_eq!(reply.thinking, vec!["thought".to_string()]);
    let u = reply.usage;
    assert_eq!(
        (u.input, u.cache_read, u.output, u.total_tokens),
        (400, 100, 40, 540)
    );
    assert_eq!(u.reasoning, Some(25));

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(
        sent.raw_body,
        r#"{"model":"gpt-test","input":[{"role":"developer","content":"You write summaries."},{"role":"user","content":[{"type":"input_text","text":"Summarize this."}]}],"stream":true,"store":false,"max_output_tokens":1000,"reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"]}"#
    );
}

#[tokio::test]
async fn incomplete_max_output_tokens_is_length() {
    let server = MockServer::start().await;
    server.push(Scripted::sse(stream_with(
        json!({"type": "response.incomplete",
        "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "usage": usage()}}),
    )));
    server.push(Scripted::sse(stream_with(
        json!({"type": "response.incomplete",
        "response": {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}}),
    )));
    let c = OpenAiResponsesClient::new(model(&server.base()));
    let reply = c
        .complete(&request(10, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Length);
    assert_eq!(reply.text_blocks, vec!["Hello there".to_string()]);
    let reply = c
        .complete(&request(10, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(
        reply.error_message.as_deref(),
        Some("Response incomplete: content_filter")
    );
}

#[tokio::test]
async fn failed_and_error_events() {
    let server = MockServer::start().await;
    server.push(Scripted::sse(vec![ev(json!({"type": "response.failed",
        "response": {"status": "failed", "error": {"code": "server_error", "message": "The server had an error"}}}))]));
    server.push(Scripted::sse(vec![ev(
        json!({"type": "error", "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model.", "param": null}),
    )]));
    let c = OpenAiResponsesClient::new(model(&server.base()));
    let reply = c
        .complete(&request(10, None), &CancellationToken::new())
        .await;
    assert_eq!(
        reply.error_message.as_deref(),
        Some("server_error: The server had an error")
    );
    assert!(is_retryable_assistant_error(
        reply.stop_reason,
        reply.error_message.as_deref()
    ));
    let reply = c
        .complete(&request(10, None), &CancellationToken::new())
        .await;
    assert_eq!(
        reply.error_message.as_deref(),
        Some("Error Code context_length_exceeded: Your input exceeds the context window of this model.")
    );
    assert!(is_context_overflow(&ReplyFacts::from(&reply), 200_000));
}

#[tokio::test]
async fn http_errors_are_prefixed_and_retried() {
    let server = MockServer::start().await;
    server.push(Scripted::json(
        500,
        r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}"#,
    ));
    server.push(Scripted::sse(stream_with(
        json!({"type": "response.completed",
        "response": {"status": "completed", "usage": usage()}}),
    )));
    server.push(Scripted::json(
        400,
        r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
    ));
    let c = OpenAiResponsesClient::new(model(&server.base()));
    let req = request(10, None);
    let cancel = CancellationToken::new();
    let mut scheduled = Vec::new();
    let reply = retry_call(
        || c.complete(&req, &cancel),
        &RetrySettings {
            enabled: true,
            max_retries: 2,
            base_delay_ms: 5,
        },
        &cancel,
        |e| scheduled.push(e),
    )
    .await;
    assert_eq!(reply.stop_reason, StopReason::Stop);
    assert!(matches!(
        &scheduled[0],
        compactd::summarizer::RetryEvent::Scheduled { error_message, .. }
            if error_message.starts_with("OpenAI API error (500): 500 ")
    ));
    let reply = c.complete(&req, &cancel).await;
    assert_eq!(reply.http_status, Some(400));
    assert!(is_context_overflow(&ReplyFacts::from(&reply), 200_000));
}

#[tokio::test]
async fn missing_terminal_event_cut_abort_and_timeout() {
    let server = MockServer::start().await;
    let partial: Vec<String> = stream_with(json!({}))[..6].to_vec();
    server.push(Scripted::sse(partial.clone()));
    server.push(Scripted::sse(partial.clone()).ending(Ending::Cut));
    server.push(Scripted::sse(partial.clone()).ending(Ending::Stall));
    server.push(Scripted::sse(partial).ending(Ending::Stall));
    let c = OpenAiResponsesClient::new(model(&server.base()))
        .with_idle_timeout(Duration::from_millis(300));
    let reply = c
        .complete(&request(10, None), &CancellationToken::new())
        .await;
    assert_eq!(
        reply.error_message.as_deref(),
        Some("OpenAI Responses stream ended before a terminal response event")
    );
    assert!(is_retryable_assistant_error(
        reply.stop_reason,
        reply.error_message.as_deref()
    ));
    let reply = c
        .complete(&request(10, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert!(is_retryable_assistant_error(
        reply.stop_reason,
        reply.error_message.as_deref()
    ));

    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    // Cancelled once the server sent its first events and stalls: mid-stream.
    let stalls = server.clone();
    tokio::spawn(async move {
        wait_until_async(Duration::from_secs(10), "the stream stalls", || {
            stalls.stalled() >= 1
        })
        .await;
        c2.cancel();
    });
    let start = Instant::now();
    let reply = c.complete(&request(10, None), &cancel).await;
    assert_eq!(reply.stop_reason, StopReason::Aborted);
    assert!(start.elapsed() < Duration::from_millis(290));

    let reply = c
        .complete(&request(10, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.error_message.as_deref(), Some("Request timed out"));
}
