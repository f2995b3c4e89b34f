//! End-to-end tests against a real model: SmolLM2-135M behind llama.cpp's HTTP server
//! (`scripts/local_llm_server.py`, installed and started by `scripts/local-llm.sh`). They drive
//! both streaming protocols compactd speaks to that server, `openai-completions` and
//! `anthropic-messages`, over real HTTP: a plain call (streaming, usage, stop reason), a `length`
//! stop, cancellation mid-stream, and a compaction through the daemon's path on a copy of a
//! conformance session.
//!
//! The server is found through `COMPACTD_LOCAL_LLM` (e.g. `http://127.0.0.1:8091`, no `/v1`),
//! which `scripts/test-all` exports. When it is unset or `/health` does not answer, every test
//! prints why and passes without doing anything, so `cargo test` works on a fresh machine; under
//! `CI=true` (where the CI script starts the server) that is a failure instead.
//!
//! The model is tiny and weak: the assertions check structure (stop reasons, usage, that the
//! reply really was streamed, the stored entry), never what the model wrote. Every call goes
//! through a recording TCP proxy, so the tests can see the raw SSE stream the server sent and
//! check that the client assembled the reply from its deltas. For the two compactions the proxy
//! also sets greedy decoding (and, for the one that must succeed, a stop sequence at the first
//! blank line), so each takes one known path, a cap-length failure and a success, every run.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use compactd::compaction::summary::{check_reply, CallKind};
use compactd::compaction::tokens::CompactionSettings;
use compactd::summarizer::types::Api;
use compactd::summarizer::{
    client_for, AssistantReply, LlmClient, LlmRequest, ModelSpec, StopReason,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Pi's message for a history summary cut short by the token cap.
const LENGTH_ERROR: &str =
    "Summarization failed: generation hit the token cap and the summary is incomplete";
/// The same for the turn-prefix call of a split turn.
const PREFIX_LENGTH_ERROR: &str =
    "Turn prefix summarization failed: generation hit the token cap and the summary is incomplete";

/// The server's context size (`LLM_CTX`, default 8192): the real window, so pi-ai's
/// provider-layer clamp is exercised with the numbers the server actually has.
const CONTEXT_WINDOW: u64 = 8192;

/// Generous bound for any single call: the model is slow when the machine is busy.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// One model, one slot (`n_parallel = 1`): tests take turns.
static SERVER_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// Finding the server

/// The server root from `COMPACTD_LOCAL_LLM`, if it is set and healthy; otherwise prints why
/// the test is skipped and returns `None`.
async fn local_llm(test: &str) -> Option<String> {
    let Some(root) = std::env::var("COMPACTD_LOCAL_LLM")
        .ok()
        .map(|s| s.trim().trim_end_matches('/').to_owned())
        .filter(|s| !s.is_empty())
    else {
        support::skip_or_fail(
            test,
            "COMPACTD_LOCAL_LLM is not set (e.g. http://127.0.0.1:8091; \
             scripts/test-all starts the server and sets it)",
        );
        return None;
    };
    let health = reqwest::Client::new()
        .get(format!("{root}/health"))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    match health {
        Ok(r) if r.status().is_success() => Some(root),
        Ok(r) => {
            support::skip_or_fail(
                test,
                &format!("{root}/health answered {} (server not ready)", r.status()),
            );
            None
        }
        Err(e) => {
            support::skip_or_fail(test, &format!("{root}/health did not answer: {e}"));
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A recording proxy: sees exactly the bytes the server streamed back

/// Changes a request body on its way to the server (see [`stop_at_first_paragraph`]).
type Rewrite = fn(Api, &mut Value);

/// Forwards every connection to the server and records what the server sent.
struct Proxy {
    addr: std::net::SocketAddr,
    received: Arc<parking_lot::Mutex<Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        Proxy::start_with(upstream, None).await
    }

    /// A proxy that passes each request body through `rewrite` (for `api`) before sending it on.
    async fn start_with(upstream: &str, rewrite: Option<(Api, Rewrite)>) -> Proxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let received = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let sink = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let sink = sink.clone();
                tokio::spawn(async move {
                    let (mut client_rd, mut client_wr) = client.into_split();
                    let (mut server_rd, mut server_wr) = server.into_split();
                    let up = tokio::spawn(async move {
                        match rewrite {
                            None => {
                                let _ = tokio::io::copy(&mut client_rd, &mut server_wr).await;
                            }
                            Some((api, f)) => {
                                while let Some(req) = read_request(&mut client_rd).await {
                                    let out = rewritten(&req, api, f);
                                    if server_wr.write_all(&out).await.is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = server_wr.shutdown().await;
                    });
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match server_rd.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                sink.lock().extend_from_slice(&buf[..n]);
                                if client_wr.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = client_wr.shutdown().await;
                    up.abort();
                });
            }
        });
        Proxy {
            addr,
            received,
            task,
        }
    }

    fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.received.lock()).into_owned()
    }

    /// The SSE `data:` payloads the server sent, across all responses, in order.
    fn sse_data(&self) -> Vec<Value> {
        let raw = self.received.lock().clone();
        let mut payloads = Vec::new();
        for body in http_bodies(&raw) {
            for line in String::from_utf8_lossy(&body).lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    if let Ok(v) = serde_json::from_str::<Value>(data.trim()) {
                        payloads.push(v);
                    }
                }
            }
        }
        payloads
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One HTTP/1.1 request (head and `Content-Length` body) read from `rd`; `None` at the end.
async fn read_request(rd: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while find(&buf, b"\r\n\r\n").is_none() {
        match rd.read(&mut byte).await {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let at = buf.len();
    buf.resize(at + len, 0);
    rd.read_exact(&mut buf[at..]).await.ok()?;
    Some(buf)
}

/// `req` with its JSON body passed through `f` and its `Content-Length` set to match.
fn rewritten(req: &[u8], api: Api, f: Rewrite) -> Vec<u8> {
    let split = find(req, b"\r\n\r\n").map_or(req.len(), |i| i + 4);
    let (head, body) = req.split_at(split);
    let Ok(mut json) = serde_json::from_slice::<Value>(body) else {
        return req.to_vec();
    };
    f(api, &mut json);
    let body = json.to_string();
    let mut out = String::new();
    for line in String::from_utf8_lossy(head).split("\r\n") {
        if line.is_empty() {
            continue;
        }
        if line.to_ascii_lowercase().starts_with("content-length:") {
            out.push_str(&format!("content-length: {}\r\n", body.len()));
        } else {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// Makes the model stop at its first blank line, with greedy decoding: the server's `stop`
/// (OpenAI) / `stop_sequences` (Anthropic) end the generation with a normal stop, so a
/// compaction through the real model takes the success path every time, which a 135M model
/// writing Pi's six-section template within a budget does not reliably do by itself. (Greedy,
/// it opens with a newline and a `## Goal` line: a stop at the first newline would leave
/// nothing.)
fn stop_at_first_paragraph(api: Api, body: &mut Value) {
    greedy(api, body);
    match api {
        Api::OpenAiCompletions => body["stop"] = serde_json::json!(["\n\n"]),
        _ => body["stop_sequences"] = serde_json::json!(["\n\n"]),
    }
}

/// Greedy decoding: the same prompt gets the same reply every time.
fn greedy(_: Api, body: &mut Value) {
    body["temperature"] = Value::from(0.0);
}

/// Splits raw HTTP/1.1 response bytes into bodies, undoing chunked transfer encoding.
fn http_bodies(raw: &[u8]) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    let mut rest = raw;
    while let Some(end) = find(rest, b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
        rest = &rest[end + 4..];
        let mut body = Vec::new();
        if head.contains("transfer-encoding: chunked") {
            while let Some(eol) = find(rest, b"\r\n") {
                let size_text = String::from_utf8_lossy(&rest[..eol]);
                let size_text = size_text.split(';').next().unwrap_or("").trim();
                let Ok(size) = usize::from_str_radix(size_text, 16) else {
                    break;
                };
                rest = &rest[eol + 2..];
                let take = size.min(rest.len());
                body.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(len) = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            let take = len.min(rest.len());
            body.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        } else {
            body.extend_from_slice(rest);
            rest = &[];
        }
        bodies.push(body);
    }
    bodies
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The text deltas of a streamed reply, concatenated, as the protocol carries them.
fn streamed_text(api: Api, payloads: &[Value]) -> String {
    let mut text = String::new();
    for p in payloads {
        let piece = match api {
            Api::OpenAiCompletions => p["choices"][0]["delta"]["content"].as_str(),
            _ if p["type"] == "content_block_delta" && p["delta"]["type"] == "text_delta" => {
                p["delta"]["text"].as_str()
            }
            _ => None,
        };
        text.push_str(piece.unwrap_or(""));
    }
    text
}

/// Number of SSE events that carried a text delta.
fn delta_events(api: Api, payloads: &[Value]) -> usize {
    payloads
        .iter()
        .filter(|p| match api {
            Api::OpenAiCompletions => p["choices"][0]["delta"]["content"].is_string(),
            _ => p["type"] == "content_block_delta",
        })
        .count()
}

// ---------------------------------------------------------------------------------------------
// Model and requests

fn smollm(api: Api, root: &str, max_tokens: u64) -> ModelSpec {
    let (provider, base_url) = match api {
        Api::OpenAiCompletions => ("local-llama", format!("{root}/v1")),
        _ => ("local-anthropic", root.to_owned()),
    };
    ModelSpec {
        api,
        provider: provider.into(),
        id: "smollm2".into(),
        base_url,
        context_window: CONTEXT_WINDOW,
        max_tokens,
        reasoning: false,
        api_key: Some("local-test-key".into()),
        key_env: None,
        headers: vec![],
    }
}

fn request(system: &str, prompt: &str, max_tokens: u64) -> LlmRequest {
    LlmRequest {
        system_prompt: system.into(),
        prompt_text: prompt.into(),
        max_tokens,
        reasoning: None,
        session_id: None,
        timestamp_ms: 1_767_600_000_000,
        pi_version: compactd::pi_version::PiVersion::V0_85,
    }
}

async fn call(client: &dyn LlmClient, req: &LlmRequest) -> AssistantReply {
    let cancel = CancellationToken::new();
    tokio::time::timeout(CALL_TIMEOUT, client.complete(req, &cancel))
        .await
        .expect("call did not finish within 120 s")
}

fn assert_usage(what: &str, reply: &AssistantReply) {
    let u = &reply.usage;
    assert!(u.input > 0, "{what}: usage.input is 0: {reply:?}");
    assert!(u.output > 0, "{what}: usage.output is 0: {reply:?}");
    assert_eq!(
        u.total_tokens,
        u.input + u.output + u.cache_read + u.cache_write,
        "{what}: totalTokens inconsistent: {u:?}"
    );
}

fn label(api: Api) -> &'static str {
    api.as_str()
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// 1. A short streamed call: stop reason, usage, and the text assembled from the stream.
async fn plain_call(api: Api, root: &str) {
    let proxy = Proxy::start(root).await;
    let client = client_for(smollm(api, &proxy.root(), 0), reqwest::Client::new());
    let req = request(
        "You are a helpful assistant.",
        "Name three colours. Answer in one short line.",
        32,
    );
    let started = Instant::now();
    let reply = call(client.as_ref(), &req).await;
    let what = format!("{} plain call", label(api));
    eprintln!(
        "{what}: {:?} in {:.2?}, usage in={} cacheRead={} out={}",
        reply.stop_reason,
        started.elapsed(),
        reply.usage.input,
        reply.usage.cache_read,
        reply.usage.output
    );
    assert!(
        matches!(reply.stop_reason, StopReason::Stop | StopReason::Length),
        "{what}: unexpected stop reason: {reply:?}"
    );
    assert_eq!(reply.error_message, None, "{what}");
    assert!(!reply.has_tool_call, "{what}");
    assert_usage(&what, &reply);
    assert!(
        reply.usage.output <= 32,
        "{what}: more output than max_tokens: {:?}",
        reply.usage
    );
    let text = reply.text_blocks.join("");
    if reply.stop_reason == StopReason::Stop {
        assert!(!text.trim().is_empty(), "{what}: empty text on stop");
    }

    // The reply really was streamed, and the client's text is exactly the streamed deltas.
    let raw = proxy.text();
    assert!(
        raw.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{what}: response was not an event stream:\n{raw}"
    );
    let payloads = proxy.sse_data();
    let deltas = delta_events(api, &payloads);
    assert!(
        deltas >= 2,
        "{what}: expected several streamed deltas, got {deltas}:\n{raw}"
    );
    assert_eq!(
        text,
        streamed_text(api, &payloads),
        "{what}: assembled text differs from the streamed deltas"
    );
}

/// 2. A reply cut by `max_tokens`: `Length`, and Pi's exact summarization error.
async fn length_stop(api: Api, root: &str) {
    let proxy = Proxy::start(root).await;
    let client = client_for(smollm(api, &proxy.root(), 0), reqwest::Client::new());
    let req = request(
        "You are a helpful assistant.",
        "Write a long, detailed essay about the history of the Roman Empire.",
        2,
    );
    let started = Instant::now();
    let reply = call(client.as_ref(), &req).await;
    let what = format!("{} length stop", label(api));
    eprintln!(
        "{what}: {:?} in {:.2?}, usage in={} out={}",
        reply.stop_reason,
        started.elapsed(),
        reply.usage.input,
        reply.usage.output
    );
    assert_eq!(reply.stop_reason, StopReason::Length, "{what}: {reply:?}");
    assert!(reply.usage.input > 0, "{what}: {:?}", reply.usage);
    assert!(
        (1..=2).contains(&reply.usage.output),
        "{what}: output tokens outside 1..=2: {:?}",
        reply.usage
    );
    assert_eq!(
        check_reply(CallKind::History, &reply),
        Err(LENGTH_ERROR.to_owned()),
        "{what}"
    );
    assert!(!proxy.sse_data().is_empty(), "{what}: nothing streamed");
}

/// 3. Cancelling once the stream has started returns `Aborted` promptly.
async fn abort_mid_stream(api: Api, root: &str) {
    let proxy = Proxy::start(root).await;
    let client = client_for(smollm(api, &proxy.root(), 0), reqwest::Client::new());
    let req = request(
        "You are a helpful assistant.",
        "Write a very long, detailed essay of at least 2000 words about the history of the \
         Roman Empire, from its founding to its fall.",
        1024,
    );
    let cancel = CancellationToken::new();
    let what = format!("{} abort", label(api));
    let started = Instant::now();
    let canceller = {
        let cancel = cancel.clone();
        let received = proxy.received.clone();
        async move {
            // Wait until the server has streamed some generated text (not just headers).
            let deadline = Instant::now() + CALL_TIMEOUT;
            loop {
                let seen = {
                    let raw = received.lock();
                    let needle: &[u8] = match api {
                        Api::OpenAiCompletions => b"\"content\":\"",
                        _ => b"text_delta",
                    };
                    find(&raw, needle).is_some()
                };
                if seen || Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let at = Instant::now();
            cancel.cancel();
            at
        }
    };
    let (reply, cancelled_at) = tokio::join!(
        tokio::time::timeout(CALL_TIMEOUT, client.complete(&req, &cancel)),
        canceller
    );
    let reply = reply.expect("aborted call did not return within 120 s");
    let after_cancel = cancelled_at.elapsed();
    eprintln!(
        "{what}: {:?}; stream began after {:.2?}, returned {:.2?} after cancel",
        reply.stop_reason,
        cancelled_at.duration_since(started),
        after_cancel
    );
    assert_eq!(reply.stop_reason, StopReason::Aborted, "{what}: {reply:?}");
    assert!(
        after_cancel < Duration::from_secs(5),
        "{what}: took {after_cancel:?} to return after cancel"
    );
    assert!(cancel.is_cancelled());
}

/// JSON equality where numbers compare by value (`0` == `0.0`).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_json(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k, v), (l, w))| k == l && same_json(v, w))
        }
        _ => a == b,
    }
}

/// A copy of a conformance session in a temp dir.
fn session_copy(case: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let src = support::case_file(&format!("compact_file on {case}"), case, "session.jsonl")?;
    let dir = tempfile::tempdir().expect("tempdir");
    let dst = dir.path().join("session.jsonl");
    std::fs::copy(&src, &dst).expect("copy session");
    Some((dir, dst))
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("read session")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// How a `compact_file` run ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Compacted,
    LengthStop,
}

/// 4. `compact_file` end to end on a copy of a conformance session.
async fn compact_session(
    api: Api,
    root: &str,
    case: &str,
    model_cap: u64,
    settings: CompactionSettings,
    custom_instructions: Option<&str>,
    rewrite: Option<Rewrite>,
) -> Option<Outcome> {
    let (_dir, path) = session_copy(case)?;
    let proxy = Proxy::start_with(root, rewrite.map(|f| (api, f))).await;
    let model = smollm(api, &proxy.root(), model_cap);
    let config = support::compact::config_for(&model, true);
    // The baseline is the file as loading leaves it (Pi's load-time repairs are allowed).
    let (tree, _) = compactd::store::files::load(&path, true).expect("load session");
    let old_leaf = tree.leaf_id().map(str::to_owned);
    let baseline = std::fs::read(&path).expect("read session");
    let baseline_lines = lines_of(&path);

    let what = format!("{} compact_file {case}", label(api));
    let started = Instant::now();
    let result = tokio::time::timeout(
        CALL_TIMEOUT,
        support::compact::compact_file(config, &path, &settings, custom_instructions),
    )
    .await
    .expect("compact_file did not finish within 120 s");
    let elapsed = started.elapsed();

    // Whatever the outcome, the HTTP/stream/usage path worked: every response streamed and
    // ended with usage.
    let payloads = proxy.sse_data();
    assert!(
        delta_events(api, &payloads) >= 1,
        "{what}: nothing streamed:\n{}",
        proxy.text()
    );

    let usage_sent = payloads.iter().any(|p| match api {
        Api::OpenAiCompletions => p["usage"]["prompt_tokens"].as_u64().unwrap_or(0) > 0,
        _ => p["type"] == "message_start" && p["message"]["usage"].is_object(),
    });
    assert!(usage_sent, "{what}: the stream carried no usage");

    match result {
        Ok(done) => {
            let entry = &done.entry;
            eprintln!(
                "{what}: compacted in {elapsed:.2?}, usage {}, summary {} chars",
                entry["usage"],
                entry["summary"].as_str().map_or(0, str::len)
            );
            let after = lines_of(&path);
            assert_eq!(
                after.len(),
                baseline_lines.len() + 1,
                "{what}: expected exactly one appended line"
            );
            assert_eq!(
                after[..baseline_lines.len()],
                baseline_lines[..],
                "{what}: existing lines changed"
            );
            assert!(
                std::fs::read(&path).expect("read").starts_with(&baseline),
                "{what}: file is not the baseline plus an append"
            );
            let stored: Value = serde_json::from_str(after.last().expect("line")).expect("json");
            // Numbers compare by value: the line is written as Pi's JSON.stringify would (`0`
            // for a zero cost), the in-memory entry holds f64s.
            assert!(
                same_json(&stored, entry),
                "{what}: stored line differs from the entry:\n{stored}\n{entry}"
            );
            assert_eq!(stored["type"], "compaction", "{what}");
            assert_eq!(
                stored["parentId"].as_str(),
                old_leaf.as_deref(),
                "{what}: parentId is not the old leaf"
            );
            assert_eq!(stored["fromHook"], Value::Bool(false), "{what}");
            let details = &stored["details"];
            let list = |k: &str| -> Vec<String> {
                details[k]
                    .as_array()
                    .unwrap_or_else(|| panic!("{what}: details.{k} missing: {details}"))
                    .iter()
                    .map(|v| v.as_str().expect("path string").to_owned())
                    .collect()
            };
            let (read, modified) = (list("readFiles"), list("modifiedFiles"));
            let usage = &stored["usage"];
            assert!(
                usage["input"].as_u64().unwrap_or(0) > 0,
                "{what}: usage.input: {usage}"
            );
            assert!(
                usage["output"].as_u64().unwrap_or(0) > 0,
                "{what}: usage.output: {usage}"
            );
            let sum: u64 = ["input", "output", "cacheRead", "cacheWrite"]
                .iter()
                .map(|k| usage[*k].as_u64().unwrap_or(0))
                .sum();
            assert_eq!(usage["totalTokens"].as_u64(), Some(sum), "{what}: {usage}");
            let summary = stored["summary"].as_str().expect("summary string");
            let tail = compactd::compaction::file_ops::format_file_operations(&read, &modified);
            assert!(
                summary.ends_with(&tail),
                "{what}: summary does not end with the file lists {tail:?}"
            );
            assert!(
                summary.len() > tail.len(),
                "{what}: summary has no generated text"
            );
            assert_eq!(done.result["summary"], stored["summary"], "{what}");
            assert_eq!(
                done.result["firstKeptEntryId"], stored["firstKeptEntryId"],
                "{what}"
            );
            Some(Outcome::Compacted)
        }
        Err(r) if r.message == LENGTH_ERROR || r.message == PREFIX_LENGTH_ERROR => {
            eprintln!("{what}: length stop after {elapsed:.2?}");
            assert_eq!(
                std::fs::read(&path).expect("read"),
                baseline,
                "{what}: a failed compaction changed the file"
            );
            Some(Outcome::LengthStop)
        }
        Err(e) => panic!("{what}: unexpected failure after {elapsed:.2?}: {e:?}"),
    }
}

async fn run_protocol(api: Api) {
    let test = format!("local_llm {}", label(api));
    let Some(root) = local_llm(&test).await else {
        return;
    };
    let _turn = SERVER_LOCK.lock().await;
    let started = Instant::now();

    plain_call(api, &root).await;
    length_stop(api, &root).await;
    abort_mid_stream(api, &root).await;

    // 009 summarizes one history block (no split turn) whose file operations produce both
    // file-list blocks.
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: 80, // history maxTokens = floor(0.8 × 80) = 64
        // Cuts 009 at its second user message (the suffix from there estimates 5482 tokens, from
        // the next message 5432), so there is no split turn and one call; the summarized part
        // (about 900 estimated tokens) is small enough for a slow machine yet reads
        // `src/index.ts` and writes `scripts/bench.sh`.
        keep_recent_tokens: 5450,
    };
    // A tight model cap (8 tokens) and greedy decoding, whose reply is a template of far more
    // than 8 tokens: the summary hits the cap, a failure in Pi's semantics that must leave the
    // file untouched.
    let Some(capped) = compact_session(
        api,
        &root,
        "009-bash-executions",
        8,
        settings,
        None,
        Some(greedy),
    )
    .await
    else {
        return; // the conformance session is missing: `case_file` said so
    };
    assert_eq!(
        capped,
        Outcome::LengthStop,
        "{test}: a summary cut by the cap fails"
    );
    // A roomy cap, and the model made to stop at its first blank line (greedy, with a stop
    // sequence): the compaction must succeed, and its entry is checked in full.
    let Some(roomy) = compact_session(
        api,
        &root,
        "009-bash-executions",
        4096,
        settings,
        Some("Start with one short line naming the goal."),
        Some(stop_at_first_paragraph),
    )
    .await
    else {
        return;
    };
    assert_eq!(
        roomy,
        Outcome::Compacted,
        "{test}: a compaction whose model stops on its own succeeds"
    );
    eprintln!(
        "{test}: capped compaction {capped:?}, roomy compaction {roomy:?}; total {:.2?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_completions_against_local_llm() {
    run_protocol(Api::OpenAiCompletions).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_against_local_llm() {
    run_protocol(Api::AnthropicMessages).await;
}
