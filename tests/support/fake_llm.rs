//! An in-process fake LLM speaking OpenAI chat-completions and Anthropic messages streaming,
//! replaying a conformance case's recorded replies in order, plus the compaction half of the
//! conformance check that drives compactd against it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use compactd::compaction::prepare_compaction;
use compactd::compaction::prompts::TURN_PREFIX_PROMPT;
use compactd::compaction::tokens::{estimate_context_tokens, should_compact, MessageFacts};
use compactd::compactor::{compact_file, SummaryEngine};
use compactd::context::{build_session_context, context_entries, convert_to_llm};
use compactd::report::estimate_json;
use compactd::summarizer::{Api, LlmClient, ModelSpec};

use super::{first_diff, json_eq, load_case, read_json, rename_strings, settings_of};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    OpenAiCompletions,
    AnthropicMessages,
}

impl Protocol {
    pub fn key(self) -> &'static str {
        match self {
            Protocol::OpenAiCompletions => "openai-completions",
            Protocol::AnthropicMessages => "anthropic-messages",
        }
    }
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

/// Shared state: queued (reply, finish) pairs and the requests seen.
#[derive(Default)]
pub struct FakeState {
    pub replies: Vec<(String, String)>,
    pub received: Vec<Received>,
    /// Delay before each reply (to test aborts mid-request).
    pub delay: std::time::Duration,
    /// Answer the first N requests with HTTP 500 (to test retries).
    pub fail_first: usize,
}

pub struct FakeLlm {
    pub port: u16,
    pub state: Arc<Mutex<FakeState>>,
    shutdown: CancellationToken,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn js_len(s: &str) -> usize {
    compactd::json::utf16_len(s)
}

async fn handle(
    State(state): State<Arc<Mutex<FakeState>>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let parsed: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(_) => {
            return Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .body(Body::from("{\"error\":{\"message\":\"bad json\"}}"))
                .unwrap_or_default()
        }
    };
    let delay = state.lock().delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    {
        let mut s = state.lock();
        if s.fail_first > 0 {
            s.fail_first -= 1;
            return Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .header("content-type", "application/json")
                .body(Body::from(
                    "{\"error\":{\"message\":\"internal server error\",\"type\":\"server_error\"}}",
                ))
                .unwrap_or_default();
        }
    }
    let (reply, finish) = {
        let mut s = state.lock();
        let kept = [
            "authorization",
            "x-api-key",
            "anthropic-version",
            "anthropic-beta",
            "content-type",
            "accept",
        ];
        let hs = kept
            .iter()
            .filter_map(|k| {
                headers
                    .get(*k)
                    .and_then(|v| v.to_str().ok())
                    .map(|v| (k.to_string(), v.to_owned()))
            })
            .collect();
        let path = uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let idx = s.received.len();
        s.received.push(Received {
            path,
            headers: hs,
            body: parsed.clone(),
        });
        s.replies
            .get(idx)
            .cloned()
            .unwrap_or_else(|| ("UNEXPECTED-EXTRA-REQUEST".into(), "stop".into()))
    };
    let messages = parsed.get("messages").cloned().unwrap_or(json!([]));
    let input = js_len(&compactd::json::stringify(&messages)).div_ceil(4);
    let output = js_len(&reply).div_ceil(4);
    let mut sse = String::new();
    if uri.path().starts_with("/v1/chat/completions") {
        let base = json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","created":0,"model":parsed["model"]});
        let mut c1 = base.clone();
        c1["choices"] =
            json!([{"index":0,"delta":{"role":"assistant","content":reply},"finish_reason":null}]);
        let mut c2 = base;
        c2["choices"] = json!([{"index":0,"delta":{},"finish_reason": if finish == "length" {"length"} else {"stop"}}]);
        c2["usage"] =
            json!({"prompt_tokens":input,"completion_tokens":output,"total_tokens":input+output});
        sse.push_str(&format!("data: {c1}\n\ndata: {c2}\n\ndata: [DONE]\n\n"));
    } else {
        let ev = |t: &str, mut o: Value| {
            o["type"] = json!(t);
            format!("event: {t}\ndata: {o}\n\n")
        };
        sse.push_str(&ev("message_start", json!({"message":{"id":"msg_fake","type":"message","role":"assistant","model":parsed["model"],"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":input,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}})));
        sse.push_str(&ev(
            "content_block_start",
            json!({"index":0,"content_block":{"type":"text","text":""}}),
        ));
        sse.push_str(&ev(
            "content_block_delta",
            json!({"index":0,"delta":{"type":"text_delta","text":reply}}),
        ));
        sse.push_str(&ev("content_block_stop", json!({"index":0})));
        sse.push_str(&ev("message_delta", json!({"delta":{"stop_reason": if finish == "length" {"max_tokens"} else {"end_turn"},"stop_sequence":null},"usage":{"output_tokens":output}})));
        sse.push_str(&ev("message_stop", json!({})));
    }
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(Body::from(sse))
        .unwrap_or_default()
}

/// Starts the fake on 127.0.0.1 with the given replies.
pub async fn start(replies: Vec<(String, String)>) -> FakeLlm {
    let state = Arc::new(Mutex::new(FakeState {
        replies,
        received: Vec::new(),
        delay: std::time::Duration::ZERO,
        fail_first: 0,
    }));
    let app = Router::new()
        .route("/v1/chat/completions", post(handle))
        .route("/v1/messages", post(handle))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    FakeLlm {
        port,
        state,
        shutdown,
    }
}

/// The fixtures' summarizer models, pointed at the fake.
pub fn fake_model(protocol: Protocol, port: u16) -> ModelSpec {
    match protocol {
        Protocol::OpenAiCompletions => ModelSpec {
            api: Api::OpenAiCompletions,
            provider: "fake-openai".into(),
            id: "fake-gpt".into(),
            base_url: format!("http://127.0.0.1:{port}/v1"),
            context_window: 200000,
            max_tokens: 32000,
            reasoning: false,
            api_key: Some("oracle-fake-key".into()),
            headers: Vec::new(),
        },
        Protocol::AnthropicMessages => ModelSpec {
            api: Api::AnthropicMessages,
            provider: "fake-anthropic".into(),
            id: "fake-claude".into(),
            base_url: format!("http://127.0.0.1:{port}"),
            context_window: 200000,
            max_tokens: 64000,
            reasoning: true,
            api_key: Some("oracle-fake-key".into()),
            headers: Vec::new(),
        },
    }
}

fn client_for(model: &ModelSpec) -> Arc<dyn LlmClient> {
    compactd::summarizer::client_for(model.clone(), reqwest::Client::new())
}

/// The user prompt text of a request body.
fn user_text(body: &Value) -> String {
    let msgs = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    msgs.iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn system_text(body: &Value) -> Option<String> {
    if let Some(s) = body.get("system") {
        return s
            .as_array()
            .and_then(|a| a.first())
            .and_then(|b| b["text"].as_str())
            .map(str::to_owned);
    }
    body["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "system" || m["role"] == "developer")?["content"]
        .as_str()
        .map(str::to_owned)
}

/// The part of a prompt that is interface, not prose: through `</conversation>\n\n`, plus the
/// `<previous-summary>` block when present.
fn prompt_interface(text: &str) -> String {
    let mut out = String::new();
    if let Some(end) = text.find("\n</conversation>\n\n") {
        let end = end + "\n</conversation>\n\n".len();
        out.push_str(&text[..end]);
        let rest = &text[end..];
        if rest.starts_with("<previous-summary>\n") {
            if let Some(p) = rest.find("\n</previous-summary>\n\n") {
                out.push_str(&rest[..p + "\n</previous-summary>\n\n".len()]);
            }
        }
    }
    out
}

/// Runs the compaction half of a case against the fake and returns the differences.
pub async fn check_compaction(dir: &Path, expected: &Value, protocol: Protocol) -> Vec<String> {
    let exp = &expected["compaction"];
    if exp.is_null() {
        return Vec::new();
    }
    let recorded = read_json(&dir.join("llm-requests.json"));
    let recorded = recorded[protocol.key()]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let replies = recorded
        .iter()
        .map(|r| {
            (
                r["reply"].as_str().unwrap_or("").to_owned(),
                r["finish"].as_str().unwrap_or("stop").to_owned(),
            )
        })
        .collect();
    let fake = start(replies).await;
    let model = fake_model(protocol, fake.port);
    let engine = SummaryEngine::Llm {
        client: client_for(&model),
        model,
        retry: compactd::summarizer::RetrySettings {
            enabled: false,
            ..Default::default()
        },
        // Pi parity: Pi sends the transcript as is (redaction is compactd's own addition).
        redaction: compactd::summarizer::redact::RedactionConfig::disabled(),
        fallback_extractive: false,
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("session.jsonl");
    std::fs::copy(dir.join("session.jsonl"), &file).expect("copy");
    let settings = settings_of(expected);
    let custom = expected["inputs"]["customInstructions"].as_str();
    // What Pi's own load leaves on disk (newline repair, migration rewrite): the baseline a
    // failed compaction must leave untouched.
    let baseline = {
        compactd::store::load(&file, true).expect("load");
        std::fs::read(&file).expect("read")
    };
    let outcome = compact_file(&file, &settings, &engine, custom, &CancellationToken::new()).await;
    let mut f = Vec::new();
    let received = fake.state.lock().received.clone();
    let primary = protocol == Protocol::OpenAiCompletions;
    // --- requests ---
    if received.len() != recorded.len() {
        f.push(format!(
            "requestCount: got {} expected {}",
            received.len(),
            recorded.len()
        ));
    }
    for (i, (got, want)) in received.iter().zip(&recorded).enumerate() {
        let kind = if user_text(&got.body).contains(TURN_PREFIX_PROMPT) {
            "turnPrefix"
        } else {
            "history"
        };
        if kind != want["kind"] {
            f.push(format!(
                "request[{i}].kind: got {kind} expected {}",
                want["kind"]
            ));
        }
        if got.path != want["path"].as_str().unwrap_or("") {
            f.push(format!(
                "request[{i}].path: got {} expected {}",
                got.path, want["path"]
            ));
        }
        for (k, v) in want["headers"].as_object().into_iter().flatten() {
            if got.headers.get(k).map(String::as_str) != v.as_str() {
                f.push(format!(
                    "request[{i}].headers.{k}: got {:?} expected {v}",
                    got.headers.get(k)
                ));
            }
        }
        let strip = |b: &Value| {
            let mut b = b.clone();
            if let Some(o) = b.as_object_mut() {
                o.remove("messages");
                o.remove("system");
            }
            b
        };
        if let Some(d) = first_diff(
            &strip(&got.body),
            &strip(&want["body"]),
            &format!("request[{i}].body"),
        ) {
            f.push(d);
        }
        let got_keys: Vec<&String> = got
            .body
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        let want_keys: Vec<&String> = want["body"]
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        if got_keys != want_keys {
            f.push(format!(
                "request[{i}].body key order: got {got_keys:?} expected {want_keys:?}"
            ));
        }
        if system_text(&got.body).is_none_or(|s| s.is_empty()) {
            f.push(format!("request[{i}]: no system prompt"));
        }
        let (gu, wu) = (user_text(&got.body), user_text(&want["body"]));
        let (gi, wi) = (prompt_interface(&gu), prompt_interface(&wu));
        if gi != wi || gi.is_empty() {
            let at = gi
                .bytes()
                .zip(wi.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(gi.len().min(wi.len()));
            f.push(format!(
                "request[{i}].prompt interface differs at byte {at} (len {} vs {})",
                gi.len(),
                wi.len()
            ));
        }
        if let Some(ci) = custom.filter(|c| !c.is_empty() && kind == "history") {
            if !gu.ends_with(&format!("\n\nAdditional focus: {ci}")) {
                f.push(format!("request[{i}]: custom instructions suffix missing"));
            }
        }
    }
    // --- outcome ---
    let exp_error = if primary {
        exp["error"].as_str().map(str::to_owned)
    } else {
        exp["otherApis"][protocol.key()]["error"]
            .as_str()
            .map(str::to_owned)
    };
    match (&outcome, exp_error) {
        (Err(e), Some(want)) => {
            if e.to_string() != want {
                f.push(format!("error: got {e} expected {want}"));
            }
            if std::fs::read(&file).ok() != Some(baseline) {
                f.push("a failed compaction changed the session file".into());
            }
            return f;
        }
        (Err(e), None) => {
            f.push(format!("compaction failed: {e}"));
            return f;
        }
        (Ok(_), Some(want)) => {
            f.push(format!("compaction succeeded but Pi failed with {want}"));
            return f;
        }
        (Ok(_), None) => {}
    }
    let Ok(done) = outcome else { return f };
    // Reload from disk, as Pi would, and map migrated ids back to the oracle's.
    let bytes = std::fs::read(&file).expect("read back");
    let compactd::session::ReadOutcome::Session(parsed) = compactd::session::read_session(&bytes)
    else {
        f.push("session no longer loads after compaction".into());
        return f;
    };
    let mut ids = HashMap::new();
    let n = parsed.entries.len();
    let (_, oracle_ids) = load_case(dir);
    if !oracle_ids.is_empty() {
        for (i, e) in parsed.entries.iter().enumerate().take(n.saturating_sub(1)) {
            if let Some(id) = &e.id {
                ids.insert(id.clone(), format!("c{:07x}", i + 1));
            }
        }
    }
    let mut result = done.result.clone();
    rename_strings(&mut result, &ids);
    let result = &result;
    let want_summary = if primary {
        &exp["result"]["summary"]
    } else {
        &exp["otherApis"][protocol.key()]["summary"]
    };
    if !json_eq(&result["summary"], want_summary) {
        f.push(first_diff(&result["summary"], want_summary, "result.summary").unwrap_or_default());
    }
    if !primary {
        return f;
    }
    for k in ["firstKeptEntryId", "tokensBefore", "details"] {
        if let Some(d) = first_diff(&result[k], &exp["result"][k], &format!("result.{k}")) {
            f.push(d);
        }
    }
    if let Some(d) = first_diff(
        &result["estimatedTokensAfter"],
        &exp["estimatedTokensAfter"],
        "estimatedTokensAfter",
    ) {
        f.push(d);
    }
    // Usage: same fake formula, but our prompt prose differs, so only the output side and shape.
    let (gu, wu) = (&result["usage"], &exp["result"]["usage"]);
    let gk: Vec<_> = gu
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let wk: Vec<_> = wu
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    if gk != wk || gu["output"] != wu["output"] {
        f.push(format!(
            "result.usage: got {gu} expected shape/output of {wu}"
        ));
    }
    // --- the entry, as written ---
    let mut entry = done.entry.clone();
    let mut want_entry = exp["entry"].clone();
    for e in [&mut entry, &mut want_entry] {
        if let Some(o) = e.as_object_mut() {
            o.remove("id");
            o.remove("timestamp");
            o.remove("usage");
        }
    }
    rename_strings(&mut entry, &ids);
    if let Some(d) = first_diff(&entry, &want_entry, "entry") {
        f.push(d);
    }
    let new_id = parsed
        .entries
        .last()
        .and_then(|e| e.id.clone())
        .unwrap_or_default();
    let keys: Vec<&String> = done
        .entry
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    let want_keys: Vec<&String> = exp["entry"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    if keys != want_keys {
        f.push(format!(
            "entry key order: got {keys:?} expected {want_keys:?}"
        ));
    }
    let tree = compactd::session::SessionTree::from_parsed(parsed);
    if tree.leaf_id() != Some(new_id.as_str()) {
        f.push("the compaction entry is not the leaf after reload".into());
    }
    let branch = tree.branch();
    let path = tree.refs(&branch);
    let mut ctx_ids: Vec<Value> = context_entries(&path)
        .iter()
        .skip(1)
        .map(|e| json!(e.id))
        .collect();
    let ctx = build_session_context(&path);
    let mut messages = ctx.messages.clone();
    let mut llm = convert_to_llm(&ctx.messages);
    let mut want_ids: Vec<Value> = exp["contextEntryIdsAfter"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !want_ids.is_empty() {
        want_ids.remove(0);
    }
    let mut ids_v = Value::Array(std::mem::take(&mut ctx_ids));
    rename_strings(&mut ids_v, &ids);
    if let Some(d) = first_diff(&ids_v, &Value::Array(want_ids), "contextEntryIdsAfter[1..]") {
        f.push(d);
    }
    // Timestamps of synthesized messages depend on the clock: compare the new summary message
    // without it, and the rest exactly.
    let mut want_messages = exp["contextAfter"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut want_llm = exp["nextContextLlm"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for list in [&mut messages, &mut want_messages, &mut llm, &mut want_llm] {
        if let Some(first) = list.first_mut().and_then(Value::as_object_mut) {
            first.remove("timestamp");
        }
    }
    if let Some(d) = first_diff(
        &Value::Array(messages),
        &Value::Array(want_messages),
        "contextAfter.messages",
    ) {
        f.push(d);
    }
    if let Some(d) = first_diff(
        &Value::Array(llm),
        &Value::Array(want_llm),
        "nextContextLlm",
    ) {
        f.push(d);
    }
    for k in ["thinkingLevel", "model"] {
        let got = if k == "model" {
            &ctx.model
        } else {
            &ctx.thinking_level
        };
        if let Some(d) = first_diff(got, &exp["contextAfter"][k], &format!("contextAfter.{k}")) {
            f.push(d);
        }
    }
    let est = estimate_context_tokens(ctx.messages.iter().map(MessageFacts::of));
    if let Some(d) = first_diff(&estimate_json(&est), &exp["estimateAfter"], "estimateAfter") {
        f.push(d);
    }
    let window = expected["inputs"]["contextWindow"]
        .as_i64()
        .unwrap_or(200000);
    if json!(should_compact(est.tokens, window, &settings)) != exp["shouldCompactAfter"] {
        f.push("shouldCompactAfter differs".into());
    }
    if json!(prepare_compaction(&path, &settings).is_err()) != exp["prepareAfterIsNull"] {
        f.push("prepareAfterIsNull differs".into());
    }
    f
}
