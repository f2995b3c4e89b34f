//! Wire-level tests of the Anthropic Messages client against an in-process server: the exact
//! requests recorded in the conformance cases (thinking on and off), usage including
//! `cacheWrite1h`, stop reasons, error bodies and events, broken streams and cancellation.

mod support;

use std::time::{Duration, Instant};

use compactd::summarizer::overflow::{is_context_overflow, ReplyFacts};
use compactd::summarizer::retry::{retry_call, RetrySettings};
use compactd::summarizer::types::Api;
use compactd::summarizer::{
    is_retryable_assistant_error, AnthropicMessagesClient, LlmClient, LlmRequest, ModelSpec,
    StopReason,
};
use serde_json::{json, Value};
use support::fake_llm::{event, js_len, Ending, MockServer, Scripted};
use support::recorded_requests;
use support::wait_until_async;
use tokio_util::sync::CancellationToken;

fn fake_claude(base: &str) -> ModelSpec {
    ModelSpec {
        api: Api::AnthropicMessages,
        provider: "fake-anthropic".into(),
        id: "fake-claude".into(),
        base_url: base.into(),
        context_window: 200_000,
        max_tokens: 64_000,
        reasoning: true,
        api_key: Some("oracle-fake-key".into()),
        key_env: None,
        headers: vec![],
    }
}

fn request(prompt: &str, max_tokens: u64, reasoning: Option<&str>) -> LlmRequest {
    LlmRequest {
        system_prompt: "You write summaries.".into(),
        prompt_text: prompt.into(),
        max_tokens,
        reasoning: reasoning.map(str::to_string),
        session_id: None,
        timestamp_ms: 0,
        pi_version: compactd::pi_version::PiVersion::V0_85,
    }
}

fn message_start(input: u64, extra_usage: Value) -> String {
    let mut usage = json!({"input_tokens": input, "output_tokens": 1,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    if let (Some(u), Some(extra)) = (usage.as_object_mut(), extra_usage.as_object()) {
        for (k, v) in extra {
            u.insert(k.clone(), v.clone());
        }
    }
    event(
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "fake-claude", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": usage}}),
    )
}

fn text_block(index: u64, text: &str) -> Vec<String> {
    vec![
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": text}}),
        ),
        event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ),
    ]
}

fn message_end(stop: &str, output: u64) -> Vec<String> {
    vec![
        event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": output}}),
        ),
        event("message_stop", &json!({"type": "message_stop"})),
    ]
}

/// The fake LLM's reply stream (usage as fake-llm.mjs computes it).
fn fake_reply(body: &Value, reply: &str, finish: &str) -> Scripted {
    let input = js_len(&compactd::json::stringify(&body["messages"])).div_ceil(4) as u64;
    let output = js_len(reply).div_ceil(4) as u64;
    let mut chunks = vec![message_start(input, json!({}))];
    chunks.extend(text_block(0, reply));
    chunks.extend(message_end(
        if finish == "length" {
            "max_tokens"
        } else {
            "end_turn"
        },
        output,
    ));
    Scripted::sse(chunks)
}

fn level_for_budget(budget: u64) -> &'static str {
    match budget {
        1024 => "minimal",
        2048 => "low",
        8192 => "medium",
        _ => "high",
    }
}

#[tokio::test]
async fn replays_every_recorded_conformance_request_exactly() {
    let recorded = recorded_requests("anthropic-messages");
    let server = MockServer::start().await;
    let c = AnthropicMessagesClient::new(fake_claude(&server.base()));
    let mut with_thinking = 0;
    for (case, rec) in &recorded {
        let body = &rec["body"];
        let max = body["max_tokens"].as_u64().expect("max_tokens");
        let (reasoning, base) = match body["thinking"]["type"].as_str() {
            Some("enabled") => {
                with_thinking += 1;
                let budget = body["thinking"]["budget_tokens"].as_u64().expect("budget");
                (Some(level_for_budget(budget)), max - budget)
            }
            _ => (None, max),
        };
        let req = LlmRequest {
            system_prompt: body["system"][0]["text"].as_str().expect("system").into(),
            prompt_text: body["messages"][0]["content"][0]["text"]
                .as_str()
                .expect("prompt")
                .into(),
            max_tokens: base,
            reasoning: reasoning.map(str::to_string),
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
        assert_eq!(
            sent.raw_body,
            compactd::json::stringify(body),
            "{case}: body differs"
        );
        let expected_headers = rec["headers"].as_object().expect("headers");
        for (name, value) in expected_headers {
            assert_eq!(sent.header(name), value.as_str(), "{case}: header {name}");
        }
        if !expected_headers.contains_key("anthropic-beta") {
            assert_eq!(sent.header("anthropic-beta"), None, "{case}");
        }
        assert_eq!(reply.text_blocks, vec![reply_text.clone()], "{case}");
        let input = js_len(&compactd::json::stringify(&body["messages"])).div_ceil(4) as u64;
        let output = js_len(&reply_text).div_ceil(4) as u64;
        assert_eq!(reply.usage.input, input, "{case}");
        assert_eq!(reply.usage.output, output, "{case}");
        assert_eq!(reply.usage.cache_write_1h, Some(0), "{case}");
        assert_eq!(reply.usage.reasoning, None, "{case}");
        assert_eq!(reply.usage.total_tokens, input + output, "{case}");
        let expected_stop = if finish == "length" {
            StopReason::Length
        } else {
            StopReason::Stop
        };
        assert_eq!(reply.stop_reason, expected_stop, "{case}");
    }
    eprintln!(
        "compared {} recorded requests ({with_thinking} with thinking)",
        recorded.len()
    );
}

#[tokio::test]
async fn usage_thinking_and_cache_fields() {
    let server = MockServer::start().await;
    let mut chunks = vec![
        message_start(
            100,
            json!({"cache_read_input_tokens": 30, "cache_creation_input_tokens": 20,
                "cache_creation": {"ephemeral_1h_input_tokens": 5, "ephemeral_5m_input_tokens": 15}}),
        ),
        event("ping", &json!({"type": "ping"})),
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        ),
        event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "signature_delta", "signature": "sig"}}),
        ),
        event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
    ];
    chunks.extend(text_block(1, "Sum"));
    chunks.push(event(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 42, "output_tokens_details": {"thinking_tokens": 12}}}),
    ));
    chunks.push(event("message_stop", &json!({"type": "message_stop"})));
    server.push(Scripted::sse(chunks));
    let reply = AnthropicMessagesClient::new(fake_claude(&server.base()))
        .complete(&request("x", 100, Some("low")), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Length);
    assert_eq!(reply.text_blocks, vec!["Sum".to_string()]);
    assert_eq!(reply.thinking, vec!["hmm".to_string()]);
    let u = reply.usage;
    assert_eq!(
        (u.input, u.output, u.cache_read, u.cache_write),
        (100, 42, 30, 20)
    );
    assert_eq!(u.cache_write_1h, Some(5));
    assert_eq!(u.reasoning, Some(12));
    assert_eq!(u.total_tokens, 192);
    let sent = &server.requests()[0];
    assert_eq!(sent.body["max_tokens"], 2148);
    assert_eq!(
        sent.body["thinking"],
        // pi-ai keeps 1024 answer tokens: min(2048, 2148 - 1024).
        json!({"type": "enabled", "budget_tokens": 1124, "display": "summarized"})
    );
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
}

#[tokio::test]
async fn tool_use_is_flagged() {
    let server = MockServer::start().await;
    let mut chunks = vec![message_start(10, json!({}))];
    chunks.push(event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}}),
    ));
    chunks.push(event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
    ));
    chunks.push(event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    chunks.extend(message_end("tool_use", 5));
    server.push(Scripted::sse(chunks));
    let reply = AnthropicMessagesClient::new(fake_claude(&server.base()))
        .complete(&request("x", 100, None), &CancellationToken::new())
        .await;
    assert!(reply.has_tool_call);
    assert_eq!(reply.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn prompt_too_long_400_is_overflow() {
    let server = MockServer::start().await;
    server.push(Scripted::json(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"},"request_id":"req_1"}"#,
    ));
    let reply = AnthropicMessagesClient::new(fake_claude(&server.base()))
        .complete(&request("x", 100, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(reply.http_status, Some(400));
    let msg = reply.error_message.clone().unwrap_or_default();
    assert!(msg.starts_with("400 {\"type\":\"error\""), "{msg}");
    assert!(is_context_overflow(&ReplyFacts::from(&reply), 200_000));
}

#[tokio::test]
async fn overloaded_529_then_success_through_retry() {
    let server = MockServer::start().await;
    server.push(Scripted::json(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ));
    server.push_fn(|r| fake_reply(&r.body, "OK", "stop"));
    let c = AnthropicMessagesClient::new(fake_claude(&server.base()));
    let req = request("x", 100, None);
    let cancel = CancellationToken::new();
    let settings = RetrySettings {
        enabled: true,
        max_retries: 1,
        base_delay_ms: 5,
    };
    let reply = retry_call(|| c.complete(&req, &cancel), &settings, &cancel, |_| {}).await;
    assert_eq!(reply.stop_reason, StopReason::Stop);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn error_event_mid_stream() {
    let server = MockServer::start().await;
    let data = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    server.push(Scripted::sse(vec![
        message_start(10, json!({})),
        format!("event: error\ndata: {data}\n\n"),
    ]));
    let reply = AnthropicMessagesClient::new(fake_claude(&server.base()))
        .complete(&request("x", 100, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert_eq!(reply.error_message.as_deref(), Some(data));
    assert!(is_retryable_assistant_error(
        reply.stop_reason,
        reply.error_message.as_deref()
    ));
}

#[tokio::test]
async fn stream_without_message_stop_is_an_error() {
    let server = MockServer::start().await;
    let mut chunks = vec![message_start(10, json!({}))];
    chunks.extend(text_block(0, "partial"));
    server.push(Scripted::sse(chunks.clone()));
    server.push(Scripted::sse(chunks).ending(Ending::Cut));
    let c = AnthropicMessagesClient::new(fake_claude(&server.base()));
    let reply = c
        .complete(&request("x", 100, None), &CancellationToken::new())
        .await;
    assert_eq!(
        reply.error_message.as_deref(),
        Some("Anthropic stream ended before message_stop")
    );
    let reply = c
        .complete(&request("x", 100, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.stop_reason, StopReason::Error);
    assert!(is_retryable_assistant_error(
        reply.stop_reason,
        reply.error_message.as_deref()
    ));
}

#[tokio::test]
async fn abort_and_idle_timeout() {
    let server = MockServer::start().await;
    server.push(Scripted::sse(vec![message_start(10, json!({}))]).ending(Ending::Stall));
    server.push(Scripted::sse(vec![message_start(10, json!({}))]).ending(Ending::Stall));
    let c = AnthropicMessagesClient::new(fake_claude(&server.base()))
        .with_idle_timeout(Duration::from_millis(300));
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
    let reply = c.complete(&request("x", 100, None), &cancel).await;
    assert_eq!(reply.stop_reason, StopReason::Aborted);
    assert!(start.elapsed() < Duration::from_millis(290));
    let reply = c
        .complete(&request("x", 100, None), &CancellationToken::new())
        .await;
    assert_eq!(reply.error_message.as_deref(), Some("Request timed out"));
}
