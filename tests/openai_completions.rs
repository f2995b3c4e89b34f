//! Wire-level tests of the OpenAI chat-completions client against an in-process server: the
//! exact bodies Pi recorded in the conformance cases, usage and stop-reason parsing, HTTP errors,
//! retries, broken and stalled streams, and cancellation.

mod support;

use std::time::{Duration, Instant};

use compactd::summarizer::overflow::{is_context_overflow, ReplyFacts};
use compactd::summarizer::retry::{retry_call, RetryEvent, RetrySettings};
use compactd::summarizer::types::Api;
use compactd::summarizer::{
    AssistantReply, LlmClient, LlmRequest, ModelSpec, OpenAiCompletionsClient, StopReason,
};
use serde_json::{json, Value};
use support::fake_llm::{data, js_len, Ending, MockServer, Scripted};
use support::recorded_requests;
use support::wait_until_async;
use tokio_util::sync::CancellationToken;

fn fake_gpt(base: &str) -> ModelSpec {
    ModelSpec {
        api: Api::OpenAiCompletions,
        provider: "fake-openai".into(),
        id: "fake-gpt".into(),
        base_url: format!("{base}/v1"),
        context_window: 200_000,
        max_tokens: 32_000,
        reasoning: false,
        api_key: Some("oracle-fake-key".into()),
        key_env: None,
        headers: vec![],
    }
}

fn request(prompt: &str, max_tokens: u64) -> LlmRequest {
    LlmRequest {
        system_prompt: "You write summaries.".into(),
        prompt_text: prompt.into(),
        max_tokens,
        reasoning: None,
        session_id: None,
        timestamp_ms: 0,
        pi_version: compactd::pi_version::PiVersion::V0_85,
    }
}

/// A chunk in the shape the fake LLM and OpenAI send.
fn chunk(delta: Value, finish: Option<&str>, usage: Option<Value>) -> String {
    let mut c = json!({
        "id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0, "model": "fake-gpt",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    if let Some(u) = usage {
        c["usage"] = u;
    }
    data(&c)
}

/// The fake LLM's reply stream for `reply` (usage as fake-llm.mjs computes it).
fn fake_reply(body: &Value, reply: &str, finish: &str) -> Scripted {
    let msgs = compactd::json::stringify(&body["messages"]);
    let input = js_len(&msgs).div_ceil(4);
    let output = js_len(reply).div_ceil(4);
    Scripted::sse(vec![
        chunk(json!({"role": "assistant", "content": reply}), None, None),
        chunk(
            json!({}),
            Some(finish),
            Some(
                json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}),
            ),
        ),
        "data: [DONE]\n\n".into(),
    ])
}

fn client(server: &MockServer) -> OpenAiCompletionsClient {
    OpenAiCompletionsClient::new(fake_gpt(&server.base()))
}

#[tokio::test]
async fn replays_every_recorded_conformance_request_exactly() {
    let recorded = recorded_requests("openai-completions");
    let server = MockServer::start().await;
    let c = client(&server);
    for (case, rec) in &recorded {
        let body = &rec["body"];
        let req = LlmRequest {
            system_prompt: body["messages"][0]["content"]
                .as_str()
                .expect("system")
                .into(),
            prompt_text: body["messages"][1]["content"][0]["text"]
                .as_str()
                .expect("prompt")
                .into(),
            max_tokens: body["max_completion_tokens"].as_u64().expect("max"),
            reasoning: None,
            session_id: None,
            timestamp_ms: 0,
            pi_version: compactd::pi_version::PiVersion::V0_85,
        };
        let reply_text = rec["reply"].as_str().expect("reply").to_string();
        let finish = rec["finish"].as_str().expect("finish").to_string();
        let (rt, fin) = (reply_text.clone(), finish.clone());
        server.push_fn(move |r| fake_reply(&r.body, &rt, &fin));
        let reply = c.complete(&req, &CancellationToken::new()).await;

        let sent = server.requests().pop().expect("request");
        assert_eq!(sent.method, rec["method"], "{case}");
        assert_eq!(sent.path, rec["path"], "{case}");
        // Exact body, key order included.
        assert_eq!(
            sent.raw_body,
            compactd::json::stringify(body),
            "{case}: body differs"
        );
        for (name, value) in rec["headers"].as_object().expect("headers") {
            assert_eq!(sent.header(name), value.as_str(), "{case}: header {name}");
        }
        assert_eq!(reply.text_blocks, vec![reply_text.clone()], "{case}");
        let expected_stop = if finish == "length" {
            StopReason::Length
        } else {
            StopReason::Stop
        };
        assert_eq!(reply.stop_reason, expected_stop, "{case}");
        let input = js_len(&compactd::json::stringify(&body["messages"])).div_ceil(4) as u64;
        let output = js_len(&reply_text).div_ceil(4) as u64;
        assert_eq!(reply.usage.input, input, "{case}");
        assert_eq!(reply.usage.output, output, "{case}");
        assert_eq!(reply.usage.reasoning, Some(0), "{case}");
        assert_eq!(reply.usage.total_tokens, input + output, "{case}");
    }
    eprintln!("compared {} recorded requests", recorded.len());
}

#[tokio::test]
async fn usage_with_cache_and_reasoning_and_length_stop() {
    let server = MockServer::start().await;
    server.push(Scripted::sse(vec![
        chunk(json!({"role": "assistant", "content": ""}), None, None),
        chunk(json!({"content": "Hello"}), None, None),
        chunk(json!({"content": " world"}), None, None),
        chunk(json!({}), Some("length"), None),
        data(&json!({"id": "x", "choices": [], "usage": {
            "prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
            "prompt_tokens_details": {"cached_tokens": 400},
            "completion_tokens_details": {"reasoning_tokens": 20}
        }})),
        "data: [DONE]\n\n".into(),
    ]));
    let reply = client(&server)
        .complete(&request("hi", 100), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Length);
    assert_eq!(reply.text_blocks, vec!["Hello world".to_string()]);
    assert_eq!(reply.usage.input, 600);
    assert_eq!(reply.usage.cache_read, 400);
    assert_eq!(reply.usage.output, 50);
    assert_eq!(reply.usage.reasoning, Some(20));
    assert_eq!(reply.usage.total_tokens, 1050);
    assert_eq!(reply.usage.cache_write_1h, None);
    let sent = &server.requests()[0];
    assert_eq!(sent.body["max_completion_tokens"], 100);
    assert_eq!(sent.path, "/v1/chat/completions");
}

#[tokio::test]
async fn tool_calls_and_content_filter() {
    let server = MockServer::start().await;
    server.push(Scripted::sse(vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                "function": {"name": "read", "arguments": "{}"}}]}),
            None,
            None,
        ),
        chunk(json!({}), Some("tool_calls"), None),
        "data: [DONE]\n\n".into(),
    ]));
    server.push(Scripted::sse(vec![
        chunk(json!({"content": "partial"}), None, None),
        chunk(json!({}), Some("content_filter"), None),
    ]));
    let c = client(&server);
    let reply = c
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert!(reply.has_tool_call);
    assert_eq!(reply.stop_reason, StopReason::ToolUse);
    let reply = c
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(
        reply.error_message.as_deref(),
        Some("Provider finish_reason: content_filter")
    );
}

#[tokio::test]
async fn rate_limit_then_success_through_retry() {
    let server = MockServer::start().await;
    server.push(Scripted::json(
        429,
        r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#,
    ));
    server.push_fn(|r| fake_reply(&r.body, "SUMMARY", "stop"));
    let c = client(&server);
    let req = request("x", 10);
    let cancel = CancellationToken::new();
    let mut events = Vec::new();
    let reply = retry_call(
        || c.complete(&req, &cancel),
        &RetrySettings {
            enabled: true,
            max_retries: 2,
            base_delay_ms: 10,
        },
        &cancel,
        |e| events.push(e),
    )
    .await;
    assert_eq!(reply.stop_reason, StopReason::Stop);
    assert_eq!(reply.text_blocks, vec!["SUMMARY".to_string()]);
    assert_eq!(server.requests().len(), 2);
    match &events[0] {
        RetryEvent::Scheduled {
            attempt,
            delay_ms,
            error_message,
            ..
        } => {
            assert_eq!((*attempt, *delay_ms), (1, 10));
            assert!(error_message.starts_with("429 "), "{error_message}");
            assert!(error_message.contains("Rate limit reached"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        events.last(),
        Some(RetryEvent::Finished { success: true, .. })
    ));
}

#[tokio::test]
async fn context_overflow_400_is_classified() {
    let server = MockServer::start().await;
    let body = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    server.push(Scripted::json(400, body));
    let reply = client(&server)
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(reply.http_status, Some(400));
    let msg = reply.error_message.clone().unwrap_or_default();
    assert!(msg.starts_with("400 "), "{msg}");
    assert!(msg.contains("context_length_exceeded"), "{msg}");
    assert!(is_context_overflow(&ReplyFacts::from(&reply), 128_000));
    // Not retryable: overflow is handled by compaction, not backoff.
    assert!(!compactd::summarizer::is_retryable_assistant_error(
        reply.stop_reason,
        reply.error_message.as_deref()
    ));
}

#[tokio::test]
async fn empty_400_matches_the_no_body_pattern() {
    let server = MockServer::start().await;
    server.push(Scripted::json(400, ""));
    let reply = client(&server)
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(
        reply.error_message.as_deref(),
        Some("400 status code (no body)")
    );
    assert!(is_context_overflow(&ReplyFacts::from(&reply), 0));
}

#[tokio::test]
async fn stream_cut_midway_is_an_error() {
    let server = MockServer::start().await;
    server.push(
        Scripted::sse(vec![chunk(json!({"content": "par"}), None, None)]).ending(Ending::Cut),
    );
    server.push(Scripted::sse(vec![chunk(
        json!({"content": "par"}),
        None,
        None,
    )]));
    let c = client(&server);
    let reply = c
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error, "{reply:?}");
    assert!(reply.text_blocks.is_empty());
    assert!(compactd::summarizer::is_retryable_assistant_error(
        reply.stop_reason,
        reply.error_message.as_deref()
    ));
    // Clean close but no finish_reason.
    let reply = c
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(
        reply.error_message.as_deref(),
        Some("Stream ended without finish_reason")
    );
}

#[tokio::test]
async fn abort_mid_stream_returns_promptly() {
    let server = MockServer::start().await;
    server.push(
        Scripted::sse(vec![chunk(json!({"content": "a"}), None, None)]).ending(Ending::Stall),
    );
    let c = client(&server);
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
    let reply = c.complete(&request("x", 10), &cancel).await;
    assert_eq!(reply.stop_reason, StopReason::Aborted);
    assert_eq!(reply.error_message, None);
    assert!(start.elapsed() < Duration::from_secs(2));
    // Already-cancelled token: no request at all.
    let reply = c.complete(&request("x", 10), &cancel).await;
    assert_eq!(reply, AssistantReply::aborted());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stalled_stream_times_out() {
    let server = MockServer::start().await;
    server.push(
        Scripted::sse(vec![chunk(json!({"content": "a"}), None, None)]).ending(Ending::Stall),
    );
    let c = client(&server).with_idle_timeout(Duration::from_millis(300));
    let start = Instant::now();
    let reply = c
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(reply.error_message.as_deref(), Some("Request timed out"));
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn connection_refused_is_a_retryable_error() {
    // Bind then drop a listener to get a port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let c = OpenAiCompletionsClient::new(fake_gpt(&format!("http://127.0.0.1:{port}")));
    let reply = c
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    let msg = reply.error_message.clone().unwrap_or_default();
    assert!(msg.starts_with("Connection error"), "{msg}");
    assert!(compactd::summarizer::is_retryable_assistant_error(
        reply.stop_reason,
        Some(&msg)
    ));
}

#[tokio::test]
async fn no_api_key_sends_no_authorization_and_extra_headers_pass_through() {
    let server = MockServer::start().await;
    server.push_fn(|r| fake_reply(&r.body, "ok", "stop"));
    let mut model = fake_gpt(&server.base());
    model.api_key = None;
    model.headers = vec![("x-extra".into(), "1".into())];
    let reply = OpenAiCompletionsClient::new(model)
        .complete(&request("x", 10), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Stop);
    let sent = &server.requests()[0];
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.header("x-extra"), Some("1"));
}
