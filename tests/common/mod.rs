//! An in-process scripted HTTP server for provider tests.
//!
//! Provider clients are only trustworthy if they are exercised against the real wire formats,
//! including the ugly cases (HTTP errors, streams that are cut or stall). Each test queues the
//! responses it wants; the server records every request so tests can compare the exact body and
//! headers a client sent.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use futures_util::stream::{self, StreamExt};
use serde_json::Value;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub raw_body: String,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
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

#[derive(Debug, Clone)]
pub struct Scripted {
    pub status: u16,
    pub content_type: &'static str,
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
            chunks,
            chunk_delay: Duration::ZERO,
            ending: Ending::Clean,
        }
    }

    pub fn json(status: u16, body: &str) -> Self {
        Scripted {
            status,
            content_type: "application/json",
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
}

type Responder = Box<dyn Fn(&Recorded) -> Scripted + Send + Sync>;

#[derive(Default)]
struct Inner {
    requests: Vec<Recorded>,
    script: VecDeque<Responder>,
}

#[derive(Clone, Default)]
pub struct MockServer {
    inner: Arc<Mutex<Inner>>,
    pub addr: Option<SocketAddr>,
}

impl MockServer {
    pub async fn start() -> MockServer {
        let mut server = MockServer::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        server.addr = Some(listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(server.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        server
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr.expect("started"))
    }

    /// Queues a fixed response.
    pub fn push(&self, r: Scripted) {
        self.push_fn(move |_| r.clone());
    }

    /// Queues a response computed from the request.
    pub fn push_fn(&self, f: impl Fn(&Recorded) -> Scripted + Send + Sync + 'static) {
        self.inner
            .lock()
            .expect("lock")
            .script
            .push_back(Box::new(f));
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.lock().expect("lock").requests.clone()
    }
}

async fn handle(
    State(server): State<MockServer>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let recorded = Recorded {
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
        raw_body,
    };
    let responder = {
        let mut inner = server.inner.lock().expect("lock");
        inner.requests.push(recorded.clone());
        inner.script.pop_front()
    };
    let Some(responder) = responder else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("no scripted response"))
            .expect("response");
    };
    let s = responder(&recorded);
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
        Ending::Stall => Body::from_stream(chunks.chain(stream::pending())),
    };
    Response::builder()
        .status(s.status)
        .header("content-type", s.content_type)
        .body(body)
        .expect("response")
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
    s.encode_utf16().count()
}

/// Where the conformance cases live; tests that need them are skipped when absent.
pub fn conformance_cases() -> Option<std::path::PathBuf> {
    let dir = std::env::var("COMPACTD_CONFORMANCE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from("/work/shared/conformance/cases"));
    dir.is_dir().then_some(dir)
}

/// Every recorded request of `api` across all cases, with its case name.
pub fn recorded_requests(api: &str) -> Vec<(String, Value)> {
    let Some(dir) = conformance_cases() else {
        eprintln!("conformance cases not found; skipping fixture comparison");
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("read cases")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    cases.sort();
    for case in cases {
        let Ok(text) = std::fs::read_to_string(case.join("llm-requests.json")) else {
            continue;
        };
        let v: Value = serde_json::from_str(&text).expect("llm-requests.json parses");
        if let Some(reqs) = v.get(api).and_then(Value::as_array) {
            let name = case
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for r in reqs {
                out.push((name.clone(), r.clone()));
            }
        }
    }
    out
}
