//! The one fake LLM provider of the test suites, an in-process HTTP server on 127.0.0.1.
//!
//! Provider code is only trustworthy when it meets the real wire formats and their failures, and
//! the daemon's fault handling only when a provider misbehaves on cue. Every request is
//! recorded (method, path, headers, exact body). Each one is answered by the first of:
//! 1. a scripted response queued by the test ([`FakeLlm::push`], [`Scripted`]): exact bytes,
//!    status, pacing and how the body ends (clean, cut, stalled);
//! 2. an injected fault ([`FakeLlm::inject`], [`Fault`]): refused-like status codes, slow
//!    headers, a stream that stalls, is cut, is malformed or is huge;
//! 3. the replay list given to [`start`]: recorded (reply, finish) pairs streamed in the
//!    protocol the request path names (OpenAI chat completions or Anthropic messages), as the
//!    conformance cases recorded them; `fail_first` and `delay` shape it.
//!
//! It also holds the compaction half of the conformance check that drives compactd against it.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use futures_util::stream::{self, StreamExt};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio_util::sync::{CancellationToken, DropGuard};

use compactd::compaction::prepare_compaction;
use compactd::compaction::prompts::{TURN_PREFIX_PROMPT, TURN_PREFIX_PROMPT_1_6};
use compactd::compaction::tokens::{estimate_context_tokens, should_compact, MessageFacts};
use compactd::context::{build_session_context, context_entries, convert_to_llm};
use compactd::pi_version::PiVersion;
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

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Every header, names lower-cased.
    pub headers: HashMap<String, String>,
    pub raw_body: String,
    /// The body parsed as JSON (`null` when it is not JSON).
    pub body: Value,
    /// When it arrived (to check waits between retries).
    pub at: std::time::Instant,
}

/// The name the replay half used for a recorded request.
pub type Received = Recorded;

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// How a scripted response body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Normal end of body.
    Clean,
    /// The connection is torn down mid-body.
    Cut,
    /// The server keeps the connection open and never sends another byte.
    Stall,
}

/// An exact response: status, content type, body chunks, pacing and ending.
#[derive(Debug, Clone)]
pub struct Scripted {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(String, String)>,
    pub chunks: Vec<String>,
    /// Pause before each chunk (to test abort mid-stream).
    pub chunk_delay: Duration,
    pub ending: Ending,
}

impl Scripted {
    pub fn sse(chunks: Vec<String>) -> Self {
        Scripted {
            status: 200,
            content_type: "text/event-stream",
            headers: Vec::new(),
            chunks,
            chunk_delay: Duration::ZERO,
            ending: Ending::Clean,
        }
    }

    pub fn json(status: u16, body: &str) -> Self {
        Scripted {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            chunks: vec![body.to_string()],
            chunk_delay: Duration::ZERO,
            ending: Ending::Clean,
        }
    }

    pub fn ending(mut self, ending: Ending) -> Self {
        self.ending = ending;
        self
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.chunk_delay = d;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A provider failure to inject into the next request (after any scripted responses). Stream
/// faults speak the protocol of the request path, so the client parses real events up to the
/// point of failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status, an optional `Retry-After` value and an SDK-style JSON error.
    Status {
        status: u16,
        retry_after: Option<String>,
    },
    /// Wait this long before sending the status line and headers, then reply normally.
    SlowHeaders(Duration),
    /// Send the first events of a normal reply, then never another byte.
    StallMidStream,
    /// Send the first events of a normal reply, then tear the connection down.
    Truncated,
    /// Send the first events of a normal reply, then an event whose data is not JSON.
    MalformedSse,
    /// A well-formed stream whose text deltas add up to this many bytes.
    Huge(usize),
    /// The next reply, but stopped by the token cap (`length` / `max_tokens`).
    Length,
}

impl Fault {
    /// `429` with `Retry-After: <value>`.
    pub fn rate_limited(retry_after: &str) -> Fault {
        Fault::Status {
            status: 429,
            retry_after: Some(retry_after.into()),
        }
    }
}

type Responder = Box<dyn Fn(&Recorded) -> Scripted + Send + Sync>;

/// Shared state: what to answer and what was asked.
#[derive(Default)]
pub struct FakeState {
    /// Replayed (reply, finish) pairs, in order.
    pub replies: Vec<(String, String)>,
    /// Every request received, in order.
    pub received: Vec<Recorded>,
    /// Delay before each replayed reply (to test aborts mid-request).
    pub delay: Duration,
    /// Answer the next N replay requests with HTTP 500 (to test retries).
    pub fail_first: usize,
    /// History and turn-prefix calls answered (not failed), to keep a split turn's calls in
    /// Pi's order.
    pub histories_answered: usize,
    pub prefixes_answered: usize,
    /// Faults for the next requests, in order.
    pub faults: VecDeque<Fault>,
    /// How many requests the replay list has answered.
    served: usize,
    /// The kind (`history`, `turnPrefix`) of each replayed reply, when known (the conformance
    /// cases record it): a request then gets the first reply not given yet of its own kind,
    /// since a split turn's two calls are in flight at once and arrive in either order.
    pub reply_kinds: Vec<String>,
    /// Which replies were given, when `reply_kinds` is known.
    given: Vec<bool>,
    script: VecDeque<Responder>,
    /// Started with [`FakeLlm::start`]: unscripted requests get a 500, not a replay.
    scripted_only: bool,
    /// Scripted [`Ending::Stall`] responses that sent every chunk and now stall.
    stalled: usize,
}

/// A running fake; stops when the last clone is dropped.
#[derive(Clone)]
pub struct FakeLlm {
    pub port: u16,
    pub addr: Option<SocketAddr>,
    pub state: Arc<Mutex<FakeState>>,
    _stop: Arc<DropGuard>,
}

/// The scripted server's historical name.
pub type MockServer = FakeLlm;

impl FakeLlm {
    /// A server that answers only what the test scripts (anything else: 500).
    pub async fn start() -> FakeLlm {
        let fake = start(Vec::new()).await;
        fake.state.lock().scripted_only = true;
        fake
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Queues a fixed response.
    pub fn push(&self, r: Scripted) {
        self.push_fn(move |_| r.clone());
    }

    /// Queues a response computed from the request.
    pub fn push_fn(&self, f: impl Fn(&Recorded) -> Scripted + Send + Sync + 'static) {
        self.state.lock().script.push_back(Box::new(f));
    }

    /// Queues faults for the next requests.
    pub fn inject(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().faults.extend(faults);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().received.clone()
    }

    /// How many [`Ending::Stall`] responses have handed every chunk to the connection and now
    /// stall: a test that aborts "mid-stream" waits for this, not for a guessed delay.
    pub fn stalled(&self) -> usize {
        self.state.lock().stalled
    }
}

/// Starts the fake on 127.0.0.1 with the given replay list.
pub async fn start(replies: Vec<(String, String)>) -> FakeLlm {
    let state = Arc::new(Mutex::new(FakeState {
        replies,
        ..FakeState::default()
    }));
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    FakeLlm {
        port: addr.port(),
        addr: Some(addr),
        state,
        _stop: Arc::new(shutdown.drop_guard()),
    }
}

/// For the blocking suites: the fake on a runtime of its own, answering each text in turn with
/// stop reason `stop`. Keep the runtime alive as long as the fake is used.
pub fn serve(texts: &[&str]) -> (tokio::runtime::Runtime, FakeLlm) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let replies = texts
        .iter()
        .map(|t| (t.to_string(), "stop".to_owned()))
        .collect();
    let fake = runtime.block_on(start(replies));
    (runtime, fake)
}

/// A loopback port nothing listens on (bound, then released): connecting is refused.
pub fn refused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// What one request gets.
enum Answer {
    Scripted(Scripted),
    Fault(Fault, (String, String)),
    Replay(String, String),
    Fail500,
    Unscripted,
}

async fn handle(
    State(state): State<Arc<Mutex<FakeState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let parsed: Value = serde_json::from_str(&raw_body).unwrap_or(Value::Null);
    // compactd sends a split turn's two calls at once; a turn-prefix call waits (at most 3 s)
    // until its sibling history call has been answered, so the suites' scripted and listed
    // replies and failures are given in Pi's order, as when the calls were sequential (the
    // concurrency itself is unit-tested in the compactor).
    let prefix = request_kind(&parsed) == "turnPrefix";
    if prefix {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while {
            let s = state.lock();
            s.histories_answered <= s.prefixes_answered
        } && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    let recorded = Recorded {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    v.to_str().unwrap_or("").to_string(),
                )
            })
            .collect(),
        body: parsed,
        raw_body,
        at: std::time::Instant::now(),
    };
    let (answer, delay) = {
        let mut s = state.lock();
        s.received.push(recorded.clone());
        let answer = if let Some(f) = s.script.pop_front() {
            if prefix {
                s.prefixes_answered += 1;
            } else {
                s.histories_answered += 1;
            }
            Answer::Scripted(f(&recorded))
        } else if let Some(fault) = s.faults.pop_front() {
            let next = s
                .replies
                .get(s.served)
                .cloned()
                .unwrap_or_else(|| ("FAULT-REPLY".into(), "stop".into()));
            Answer::Fault(fault, next)
        } else if s.scripted_only {
            Answer::Unscripted
        } else if s.fail_first > 0 {
            s.fail_first -= 1;
            Answer::Fail500
        } else {
            let kind = request_kind(&recorded.body);
            let st = &mut *s;
            let idx = if st.reply_kinds.is_empty() {
                st.served
            } else {
                st.given.resize(st.reply_kinds.len(), false);
                let idx = (0..st.reply_kinds.len())
                    .find(|&i| !st.given[i] && st.reply_kinds[i] == kind)
                    .unwrap_or(st.reply_kinds.len());
                if let Some(given) = st.given.get_mut(idx) {
                    *given = true;
                }
                idx
            };
            s.served += 1;
            if kind == "turnPrefix" {
                s.prefixes_answered += 1;
            } else {
                s.histories_answered += 1;
            }
            let (r, f) = s
                .replies
                .get(idx)
                .cloned()
                .unwrap_or_else(|| ("UNEXPECTED-EXTRA-REQUEST".into(), "stop".into()));
            Answer::Replay(r, f)
        };
        (answer, s.delay)
    };
    let anthropic = !uri.path().starts_with("/v1/chat/completions");
    match answer {
        Answer::Scripted(s) => scripted(s, state.clone()),
        Answer::Unscripted => Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("no scripted response"))
            .unwrap_or_default(),
        Answer::Fail500 => error_response(500, None),
        Answer::Replay(reply, finish) => {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            sse_response(Body::from(
                reply_events(&recorded.body, &reply, &finish, anthropic).concat(),
            ))
        }
        Answer::Fault(fault, (reply, finish)) => {
            let events = reply_events(&recorded.body, &reply, &finish, anthropic);
            // The events that carry the first text: everything before the finishing ones.
            let head: Vec<Result<Bytes, std::io::Error>> = events
                .iter()
                .take(if anthropic { 3 } else { 1 })
                .map(|e| Ok(Bytes::from(e.clone())))
                .collect();
            match fault {
                Fault::Status {
                    status,
                    retry_after,
                } => error_response(status, retry_after.as_deref()),
                Fault::SlowHeaders(d) => {
                    tokio::time::sleep(d).await;
                    sse_response(Body::from(events.concat()))
                }
                Fault::StallMidStream => sse_response(Body::from_stream(
                    stream::iter(head).chain(stream::pending()),
                )),
                // The pause lets the headers and first events reach the client first, so the
                // cut really happens mid-stream.
                Fault::Truncated => sse_response(Body::from_stream(stream::iter(head).chain(
                    stream::once(async {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Err(std::io::Error::other("connection cut"))
                    }),
                ))),
                Fault::MalformedSse => {
                    let mut chunks = head;
                    chunks.push(Ok(Bytes::from(if anthropic {
                        "event: content_block_delta\ndata: {\"index\":0,\"delta\":{\"type\"\n\n"
                    } else {
                        "data: {\"choices\":[{\"delta\":{\"content\":\"x\"\n\n"
                    })));
                    sse_response(Body::from_stream(stream::iter(chunks)))
                }
                Fault::Huge(total) => huge_response(&recorded.body, total, anthropic),
                Fault::Length => sse_response(Body::from(
                    reply_events(&recorded.body, &reply, "length", anthropic).concat(),
                )),
            }
        }
    }
}

fn scripted(s: Scripted, state: Arc<Mutex<FakeState>>) -> Response {
    let delay = s.chunk_delay;
    let chunks = stream::iter(s.chunks).then(move |c| async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok::<Bytes, std::io::Error>(Bytes::from(c))
    });
    let body = match s.ending {
        Ending::Clean => Body::from_stream(chunks),
        Ending::Cut => Body::from_stream(
            chunks.chain(stream::once(async { Err(std::io::Error::other("cut")) })),
        ),
        Ending::Stall => {
            // Polled only once every chunk was handed over: the stall has begun.
            let stall = stream::once(async move {
                state.lock().stalled += 1;
            })
            .filter_map(|()| async { None::<Result<Bytes, std::io::Error>> });
            Body::from_stream(chunks.chain(stall).chain(stream::pending()))
        }
    };
    let mut b = Response::builder()
        .status(s.status)
        .header("content-type", s.content_type);
    for (k, v) in &s.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(body).expect("response")
}

fn sse_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .body(body)
        .unwrap_or_default()
}

/// An error status with the SDKs' JSON error shape and an optional `Retry-After`.
fn error_response(status: u16, retry_after: Option<&str>) -> Response {
    let mut b = Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(v) = retry_after {
        b = b.header("retry-after", v);
    }
    let (message, kind) = match status {
        429 => ("rate limited, slow down", "server_error"),
        503 => ("service unavailable", "server_error"),
        // What OpenAI says to a wrong key: nothing a retry can fix.
        401 => ("Incorrect API key provided.", "invalid_request_error"),
        403 => ("You are not allowed to use this model.", "permission_error"),
        _ => ("internal server error", "server_error"),
    };
    b.body(Body::from(
        json!({"error": {"message": message, "type": kind}}).to_string(),
    ))
    .unwrap_or_default()
}

/// A 200 stream of text deltas adding up to `total` bytes, produced lazily (64 KiB per event).
fn huge_response(request: &Value, total: usize, anthropic: bool) -> Response {
    const PIECE: usize = 64 * 1024;
    let piece = "x".repeat(PIECE);
    let event = if anthropic {
        Bytes::from(format!(
            "event: content_block_delta\ndata: {}\n\n",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":piece}})
        ))
    } else {
        Bytes::from(data(
            &json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","created":0,"model":request["model"],"choices":[{"index":0,"delta":{"content":piece},"finish_reason":null}]}),
        ))
    };
    let events = reply_events(request, "", "stop", anthropic);
    let (first, rest) = if anthropic {
        (events[..2].concat(), events[2..].concat())
    } else {
        (String::new(), events[1..].concat())
    };
    let body = stream::once(async move { Ok::<Bytes, std::io::Error>(Bytes::from(first)) })
        .chain(stream::iter(
            std::iter::repeat_n(event, total.div_ceil(PIECE)).map(Ok),
        ))
        .chain(stream::once(async move { Ok(Bytes::from(rest)) }));
    sse_response(Body::from_stream(body))
}

/// A complete reply as SSE events, in the protocol of the request (usage from the fixtures'
/// formula: ceil(len/4) of the messages and of the reply).
fn reply_events(request: &Value, reply: &str, finish: &str, anthropic: bool) -> Vec<String> {
    let messages = request.get("messages").cloned().unwrap_or(json!([]));
    let input = js_len(&compactd::json::stringify(&messages)).div_ceil(4);
    let output = js_len(reply).div_ceil(4);
    if !anthropic {
        let base = json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","created":0,"model":request["model"]});
        let mut c1 = base.clone();
        c1["choices"] =
            json!([{"index":0,"delta":{"role":"assistant","content":reply},"finish_reason":null}]);
        let mut c2 = base;
        c2["choices"] = json!([{"index":0,"delta":{},"finish_reason": if finish == "length" {"length"} else {"stop"}}]);
        c2["usage"] =
            json!({"prompt_tokens":input,"completion_tokens":output,"total_tokens":input+output});
        return vec![data(&c1), data(&c2), "data: [DONE]\n\n".into()];
    }
    let ev = |t: &str, mut o: Value| {
        o["type"] = json!(t);
        event(t, &o)
    };
    vec![
        ev(
            "message_start",
            json!({"message":{"id":"msg_fake","type":"message","role":"assistant","model":request["model"],"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":input,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}),
        ),
        ev(
            "content_block_start",
            json!({"index":0,"content_block":{"type":"text","text":""}}),
        ),
        ev(
            "content_block_delta",
            json!({"index":0,"delta":{"type":"text_delta","text":reply}}),
        ),
        ev("content_block_stop", json!({"index":0})),
        ev(
            "message_delta",
            json!({"delta":{"stop_reason": if finish == "length" {"max_tokens"} else {"end_turn"},"stop_sequence":null},"usage":{"output_tokens":output}}),
        ),
        ev("message_stop", json!({})),
    ]
}

/// `data: <json>\n\n`, the OpenAI chunk framing.
pub fn data(v: &Value) -> String {
    format!("data: {}\n\n", serde_json::to_string(v).expect("json"))
}

/// `event: <name>\ndata: <json>\n\n`, the Anthropic / Responses framing.
pub fn event(name: &str, v: &Value) -> String {
    format!(
        "event: {name}\ndata: {}\n\n",
        serde_json::to_string(v).expect("json")
    )
}

/// JavaScript `str.length` (UTF-16 units).
pub fn js_len(s: &str) -> usize {
    compactd::json::utf16_len(s)
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
            key_env: None,
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
            key_env: None,
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
    // Pi 1.6's turn prefix: `# Conversation\n…\n\n# Instructions\n`, then the prose.
    if text.starts_with("# Conversation\n") {
        let marker = "\n\n# Instructions\n";
        return text
            .find(marker)
            .map_or(String::new(), |at| text[..at + marker.len()].to_owned());
    }
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

/// Which compaction call a request is: `turnPrefix` or `history`.
pub fn request_kind(body: &Value) -> &'static str {
    let text = user_text(body);
    if text.contains(TURN_PREFIX_PROMPT) || text.contains(TURN_PREFIX_PROMPT_1_6) {
        "turnPrefix"
    } else {
        "history"
    }
}

/// Runs the compaction half of a case against the fake and returns the differences.
/// How a conformance compaction reaches compactd's one compaction path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `compact` on a daemon of the test's own process.
    Daemon,
    /// `compactd compact --no-daemon --json` as a user runs it.
    Cli,
}

impl Route {
    pub fn key(self) -> &'static str {
        match self {
            Route::Daemon => "daemon",
            Route::Cli => "cli",
        }
    }
}

pub async fn check_compaction(
    dir: &Path,
    expected: &Value,
    protocol: Protocol,
    version: PiVersion,
    route: Route,
) -> Vec<String> {
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
    fake.state.lock().reply_kinds = recorded
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("history").to_owned())
        .collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("session.jsonl");
    std::fs::copy(dir.join("session.jsonl"), &file).expect("copy");
    let settings = settings_of(expected);
    let custom = expected["inputs"]["customInstructions"].as_str();
    // The daemon's own path, in this process: `compact` on the session, summarized by the
    // fixtures' model on the fake, with every addition beyond Pi that would change what is
    // written turned off (the recall footer, speculation, redaction).
    let model = fake_model(protocol, fake.port);
    // What Pi's own load leaves on disk (newline repair, migration rewrite): the baseline a
    // failed compaction must leave untouched.
    let baseline = {
        let copy = tmp.path().join("baseline.jsonl");
        std::fs::copy(&file, &copy).expect("copy");
        compactd::store::files::load(&copy, true).expect("load");
        std::fs::read(&copy).expect("read")
    };
    let outcome: Result<Value, String> = match route {
        Route::Daemon => {
            let mut config = super::compact::config_for(&model, false);
            config.compat.pi_version = compactd::config::PiVersionSetting(version);
            let open = match compactd::cli::via_daemon::in_process(config, &file).await {
                Ok(open) => open,
                Err(r) => return vec![format!("openSession: {r}")],
            };
            if let Err(r) = open
                .call("setSettingsOverrides", super::compact::pi_exact(&settings))
                .await
            {
                return vec![format!("setSettingsOverrides: {r}")];
            }
            open.call("compact", json!({ "customInstructions": custom }))
                .await
                .map_err(|r| r.message)
        }
        Route::Cli => {
            let config = tmp.path().join("compactd.toml");
            let text = super::compact::config_text(&model, false, version, Some(FAKE_KEY_ENV));
            std::fs::write(&config, text).expect("write config");
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_compactd"));
            cmd.arg("--config")
                .arg(&config)
                .arg("compact")
                .arg(&file)
                .args(["--json", "--no-daemon"])
                .args([
                    "--keep-recent-tokens",
                    &settings.keep_recent_tokens.to_string(),
                ])
                .args(["--reserve-tokens", &settings.reserve_tokens.to_string()])
                .env(FAKE_KEY_ENV, model.api_key.clone().unwrap_or_default())
                .env_remove("COMPACTD_LOG");
            if let Some(c) = custom {
                cmd.args(["--custom-instructions", c]);
            }
            let out = tokio::task::spawn_blocking(move || cmd.output())
                .await
                .expect("join")
                .expect("run compactd compact");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            match (out.status.code(), v.get("error").and_then(Value::as_str)) {
                (Some(0), _) => Ok(v),
                (_, Some(e)) => Err(e.to_owned()),
                (code, _) => Err(format!(
                    "exit {code:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )),
            }
        }
    };
    let mut f = Vec::new();
    // A split turn's two calls are sent at once and arrive in either order: each recorded
    // request is compared with the first received one of its kind.
    let received = {
        let mut pending = fake.state.lock().received.clone();
        let mut paired = Vec::new();
        for want in &recorded {
            if let Some(at) = pending
                .iter()
                .position(|r| want["kind"].as_str() == Some(request_kind(&r.body)))
            {
                paired.push(pending.remove(at));
            }
        }
        paired.extend(pending);
        paired
    };
    let primary = protocol == Protocol::OpenAiCompletions;
    // --- requests ---
    // compactd sends a split turn's turn-prefix call together with its history call; when
    // Pi's history call failed, Pi never sent the other one. That one request more is the
    // only difference allowed, and only when the compaction failed as Pi's did.
    let sent_alongside_a_failure = exp["error"].is_string()
        && received.len() == recorded.len() + 1
        && received
            .last()
            .is_some_and(|r| request_kind(&r.body) == "turnPrefix")
        && recorded.iter().all(|r| r["kind"] != "turnPrefix");
    if received.len() != recorded.len() && !sent_alongside_a_failure {
        f.push(format!(
            "requestCount: got {} expected {}",
            received.len(),
            recorded.len()
        ));
    }
    for (i, (got, want)) in received.iter().zip(&recorded).enumerate() {
        let kind = request_kind(&got.body);
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
        // Pi 1.6 gives the turn prefix the instructions too.
        let focused = kind == "history" || version.is_1_6();
        if let Some(ci) = custom.filter(|c| !c.is_empty() && focused) {
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
            if *e != want {
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
    let mut entry_written = super::compact::last_line(&std::fs::read(&file).expect("read back"));
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
                ids.insert(id.to_string(), format!("c{:07x}", i + 1));
            }
        }
    }
    let mut result = done;
    rename_strings(&mut result, &ids);
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
    // Beyond Pi, the daemon names the summarizer in `details.summarizer` (Pi reads only the
    // file lists of `details`); everything else is Pi's.
    for v in [&mut result, &mut entry_written] {
        if let Some(d) = v["details"].as_object_mut() {
            d.remove("summarizer");
        }
    }
    let result = &result;
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
    let mut entry = entry_written.clone();
    let mut want_entry = exp["entry"].clone();
    for e in [&mut entry, &mut want_entry] {
        if let Some(o) = e.as_object_mut() {
            o.remove("id");
            o.remove("timestamp");
            o.remove("usage");
            // The checkpoint is stamped with the entry's own clock.
            if let Some(Value::Object(system)) = o.get_mut("systemMessage") {
                system.remove("timestamp");
            }
        }
    }
    rename_strings(&mut entry, &ids);
    if let Some(d) = first_diff(&entry, &want_entry, "entry") {
        f.push(d);
    }
    let new_id = parsed
        .entries
        .last()
        .and_then(|e| e.id_owned())
        .unwrap_or_default();
    let keys: Vec<&String> = entry_written
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
    // The new entry's id is the oracle's in what follows.
    if let Some(theirs) = exp["entry"]["id"].as_str() {
        ids.insert(new_id.clone(), theirs.to_owned());
    }
    let branch = tree.branch();
    let path = tree.refs(&branch);
    let after = After::of(version, &path);
    let mut ids_v = Value::Array(after.context_ids.iter().skip(1).cloned().collect());
    rename_strings(&mut ids_v, &ids);
    let mut want_ids: Vec<Value> = exp["contextEntryIdsAfter"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !want_ids.is_empty() {
        want_ids.remove(0);
    }
    if let Some(d) = first_diff(&ids_v, &Value::Array(want_ids), "contextEntryIdsAfter[1..]") {
        f.push(d);
    }
    // Timestamps of the messages the new entry projects depend on the clock: compare them
    // without it, and the rest exactly.
    let synthesized = after.synthesized;
    let mut messages = after.messages;
    let mut llm = after.llm;
    let mut want_messages = exp["contextAfter"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut want_llm = exp["nextContextLlm"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for list in [&mut messages, &mut want_messages, &mut llm, &mut want_llm] {
        for m in list.iter_mut().take(synthesized) {
            if let Some(o) = m.as_object_mut() {
                o.remove("timestamp");
            }
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
    for (k, got) in [
        ("thinkingLevel", &after.thinking_level),
        ("model", &after.model),
    ] {
        if let Some(d) = first_diff(got, &exp["contextAfter"][k], &format!("contextAfter.{k}")) {
            f.push(d);
        }
    }
    if version.is_1_6() {
        let mut entry_ids = Value::Array(after.message_entry_ids);
        rename_strings(&mut entry_ids, &ids);
        if let Some(d) = first_diff(
            &entry_ids,
            &exp["contextAfter"]["messageEntryIds"],
            "contextAfter.messageEntryIds",
        ) {
            f.push(d);
        }
        let mut want_system = exp["contextAfter"]["systemMessage"].clone();
        let mut got_system = after.system.unwrap_or(Value::Null);
        for s in [&mut got_system, &mut want_system] {
            if let Some(o) = s.as_object_mut() {
                o.remove("timestamp");
            }
        }
        if let Some(d) = first_diff(&got_system, &want_system, "contextAfter.systemMessage") {
            f.push(d);
        }
    }
    let est = after.estimate;
    if let Some(d) = first_diff(&estimate_json(&est), &exp["estimateAfter"], "estimateAfter") {
        f.push(d);
    }
    let window = expected["inputs"]["contextWindow"]
        .as_i64()
        .unwrap_or(200000);
    if json!(should_compact(est.tokens, window, &settings)) != exp["shouldCompactAfter"] {
        f.push("shouldCompactAfter differs".into());
    }
    if json!(prepare_compaction(version, &path, &settings).is_err()) != exp["prepareAfterIsNull"] {
        f.push("prepareAfterIsNull differs".into());
    }
    f
}

/// The variable a CLI run reads the fake's key from.
const FAKE_KEY_ENV: &str = "COMPACTD_FAKE_KEY";

/// A daemon configuration whose summarizer is the fixtures' model for `protocol` on the fake at
/// `port`, sent as Pi sends it: no retries (the fake's replies are a script), no redaction
/// (Pi sends the transcript as is; redaction is compactd's own addition).
pub fn fake_config(protocol: Protocol, port: u16) -> compactd::config::Config {
    super::compact::config_for(&fake_model(protocol, port), false)
}

/// The context Pi rebuilds after a compaction, under `version`'s rules.
struct After {
    /// Context entry ids (`buildContextEntries`), the new compaction first.
    context_ids: Vec<Value>,
    messages: Vec<Value>,
    llm: Vec<Value>,
    /// How many leading messages the new entry projects (their timestamps are its clock).
    synthesized: usize,
    thinking_level: Value,
    model: Value,
    estimate: compactd::compaction::tokens::ContextEstimate,
    message_entry_ids: Vec<Value>,
    system: Option<Value>,
}

impl After {
    fn of(version: PiVersion, path: &[&compactd::session::Entry]) -> After {
        match version {
            PiVersion::V0_85 => {
                let ctx = build_session_context(path);
                let estimate = estimate_context_tokens(ctx.messages.iter().map(MessageFacts::of));
                After {
                    context_ids: context_entries(path)
                        .iter()
                        .map(|e| json!(e.id.as_deref()))
                        .collect(),
                    llm: convert_to_llm(&ctx.messages),
                    synthesized: 1,
                    messages: ctx.messages,
                    thinking_level: ctx.thinking_level,
                    model: ctx.model,
                    estimate,
                    message_entry_ids: Vec::new(),
                    system: None,
                }
            }
            PiVersion::V1_6 => {
                use compactd::compaction::projection::{system_tokens, Projection};
                let proj = Projection::build(path);
                let messages = proj.messages(path);
                let system = proj.current_system_message(path);
                let (thinking_level, model) = compactd::context::context_settings(path);
                After {
                    context_ids: proj
                        .entries
                        .iter()
                        .map(|e| json!(path[e.pos].id.as_deref()))
                        .collect(),
                    llm: compactd::context::convert_to_llm_in(version, &messages),
                    synthesized: proj.entries.first().map_or(0, |e| e.part.count()),
                    messages,
                    thinking_level,
                    model,
                    estimate: proj.estimate(path, system_tokens(system.as_ref())),
                    message_entry_ids: proj
                        .message_entry_ids(path)
                        .into_iter()
                        .map(|id| json!(id))
                        .collect(),
                    system,
                }
            }
        }
    }
}
