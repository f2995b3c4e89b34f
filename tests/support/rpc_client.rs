//! A small blocking JSON-RPC client for integration tests: talks to a real `compactd` over
//! stdio or a Unix socket, in either framing, records notifications, and answers server→client
//! requests (hooks) with a test-supplied function.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Ndjson,
    Lsp,
}

type HookFn = Arc<dyn Fn(&str, &Value) -> Option<Value> + Send + Sync>;

pub struct Client {
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    framing: Framing,
    rx: Receiver<Value>,
    next_id: u64,
    pub notifications: Vec<Value>,
    /// Every message in arrival order (for ordering assertions).
    pub log: Vec<Value>,
    /// The result of every successful [`Client::request`], with its method: real responses
    /// the OpenRPC suite validates against the published result schemas.
    pub results: Vec<(String, Value)>,
    pending: VecDeque<Value>,
    hook: Arc<Mutex<Option<HookFn>>>,
    child: Option<Child>,
}

fn read_frame(r: &mut BufReader<Box<dyn Read + Send>>, framing: Framing) -> Option<Vec<u8>> {
    match framing {
        Framing::Ndjson => {
            let mut line = Vec::new();
            loop {
                line.clear();
                if r.read_until(b'\n', &mut line).ok()? == 0 {
                    return None;
                }
                if line.iter().any(|b| !b.is_ascii_whitespace()) {
                    return Some(line);
                }
            }
        }
        Framing::Lsp => {
            let mut len = None;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).ok()? == 0 {
                    return None;
                }
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some(v) = h.strip_prefix("Content-Length:") {
                    len = v.trim().parse::<usize>().ok();
                }
            }
            let mut body = vec![0u8; len?];
            r.read_exact(&mut body).ok()?;
            Some(body)
        }
    }
}

pub fn frame(framing: Framing, body: &[u8]) -> Vec<u8> {
    match framing {
        Framing::Ndjson => [body, b"\n"].concat(),
        Framing::Lsp => [
            format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
            body,
        ]
        .concat(),
    }
}

impl Client {
    fn start(
        reader: Box<dyn Read + Send>,
        writer: Box<dyn Write + Send>,
        framing: Framing,
        child: Option<Child>,
    ) -> Client {
        let (tx, rx) = channel();
        let writer = Arc::new(Mutex::new(writer));
        let hook: Arc<Mutex<Option<HookFn>>> = Arc::new(Mutex::new(None));
        let (w2, h2) = (writer.clone(), hook.clone());
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            while let Some(bytes) = read_frame(&mut r, framing) {
                // Replies may escape lone surrogates (ids compactd read from a file, echoed as
                // Pi writes them): read as compactd reads them.
                let Ok(v) = compactd::json::parse_line(&String::from_utf8_lossy(&bytes)) else {
                    continue;
                };
                // Server→client requests (hooks) are answered here, so a test blocked in
                // `request` still serves them.
                if v.get("method").is_some() && v.get("id").is_some() {
                    let f = h2.lock().unwrap().clone();
                    if let Some(f) = f {
                        if let Some(result) = f(v["method"].as_str().unwrap_or(""), &v["params"]) {
                            let body =
                                json!({"jsonrpc":"2.0","id":v["id"],"result":result}).to_string();
                            let _ = w2
                                .lock()
                                .unwrap()
                                .write_all(&frame(framing, body.as_bytes()));
                            let _ = w2.lock().unwrap().flush();
                        }
                    }
                }
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Client {
            writer,
            framing,
            rx,
            next_id: 1,
            notifications: Vec::new(),
            log: Vec::new(),
            results: Vec::new(),
            pending: VecDeque::new(),
            hook,
            child,
        }
    }

    /// Spawns `compactd stdio` with extra args and environment.
    pub fn stdio(args: &[&str], env: &[(&str, &Path)], framing: Framing) -> Client {
        Client::stdio_in(None, args, env, framing)
    }

    /// [`Client::stdio`] with the daemon's working directory set (so relative paths a test
    /// sends cannot land in the checkout).
    pub fn stdio_in(
        cwd: Option<&Path>,
        args: &[&str],
        env: &[(&str, &Path)],
        framing: Framing,
    ) -> Client {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        cmd.arg("stdio")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // `stdio` logs to a file under the state dir: keep it inside the target directory
            // unless the caller gives one.
            .env("XDG_STATE_HOME", env!("CARGO_TARGET_TMPDIR"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn compactd stdio");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        Client::start(Box::new(stdout), Box::new(stdin), framing, Some(child))
    }

    /// Talks to any compactd process over its stdin/stdout (`compactd connect`, …): `cmd` is
    /// spawned with both piped.
    pub fn process(mut cmd: Command, framing: Framing) -> Client {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn compactd");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        Client::start(Box::new(stdout), Box::new(stdin), framing, Some(child))
    }

    /// Closes this client's sending side (the daemon's half-close) and waits for the process
    /// it spawned, if any: its exit status and stderr (when piped).
    pub fn finish(mut self) -> Option<std::process::Output> {
        *self.writer.lock().unwrap() = Box::new(std::io::sink());
        self.child
            .take()
            .map(|c| c.wait_with_output().expect("wait"))
    }

    pub fn socket(path: &Path, framing: Framing) -> Client {
        let deadline = Instant::now() + Duration::from_secs(20);
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => {
                    panic!("cannot connect to {}: {e}", path.display())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        Client::over(stream, framing)
    }

    /// A client over a connected socket (the caller may keep a clone of it, to watch what the
    /// daemon has read: [`super::unread_by_peer`]).
    pub fn over(stream: UnixStream, framing: Framing) -> Client {
        let reader = stream.try_clone().expect("clone");
        Client::start(Box::new(reader), Box::new(stream), framing, None)
    }

    /// Answers server→client requests with `f(method, params)` (None: never answer).
    pub fn on_request(
        &mut self,
        f: impl Fn(&str, &Value) -> Option<Value> + Send + Sync + 'static,
    ) {
        *self.hook.lock().unwrap() = Some(Arc::new(f));
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let mut w = self.writer.lock().unwrap();
        w.write_all(bytes).expect("write");
        w.flush().expect("flush");
    }

    pub fn send_value(&mut self, v: &Value) {
        let body = v.to_string();
        let bytes = frame(self.framing, body.as_bytes());
        self.send_raw(&bytes);
    }

    /// Sends a request and returns its id without waiting.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_value(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        id
    }

    /// [`Client::send`] that reports a dead peer (`None`) instead of panicking, for suites
    /// that kill the daemon while requests are still being written.
    pub fn try_send(&mut self, method: &str, params: Value) -> Option<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        let bytes = frame(self.framing, body.as_bytes());
        let mut w = self.writer.lock().unwrap();
        w.write_all(&bytes).ok()?;
        w.flush().ok()?;
        Some(id)
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send_value(&json!({"jsonrpc":"2.0","method":method,"params":params}));
    }

    fn next_message(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(v) = self.pending.pop_front() {
            return Some(v);
        }
        match self.rx.recv_timeout(timeout) {
            Ok(v) => {
                self.log.push(v.clone());
                if v.get("method").is_some() && v.get("id").is_none() {
                    self.notifications.push(v.clone());
                }
                Some(v)
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits for the response with `id`: `Ok(result)` or `Err(error)`.
    pub fn wait(&mut self, id: u64, timeout: Duration) -> Result<Value, Value> {
        let deadline = Instant::now() + timeout;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(v) = self.next_message(left) else {
                panic!(
                    "no response to request {id} within {timeout:?}; log: {:?}",
                    self.log
                );
            };
            if v.get("id") == Some(&json!(id)) && v.get("method").is_none() {
                self.pending.extend(skipped);
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
                };
            }
            if v.get("method").is_none() && v.get("id").is_some() {
                skipped.push(v);
            }
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.send(method, params);
        let reply = self.wait(id, Duration::from_secs(60));
        if let Ok(result) = &reply {
            self.results.push((method.to_owned(), result.clone()));
        }
        reply
    }

    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        self.request(method, params.clone())
            .unwrap_or_else(|e| panic!("{method} {params} failed: {e}"))
    }

    /// Waits until a notification named `method` arrives (or the timeout).
    pub fn wait_notification(&mut self, method: &str, timeout: Duration) -> Option<Value> {
        if let Some(n) = self.notifications.iter().find(|n| n["method"] == method) {
            return Some(n.clone());
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.next_message(left)?;
            if v.get("method").and_then(Value::as_str) == Some(method) && v.get("id").is_none() {
                return Some(v);
            }
            if v.get("method").is_none() {
                self.pending.push_back(v);
            }
        }
    }

    /// The daemon's process id, when this client spawned it.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `kill -9` of the spawned daemon (no cleanup runs), then reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every message still to be read until the stream ends or `quiet` passes with nothing new
    /// (after [`Client::kill`]: what the daemon wrote before it died).
    pub fn drain(&mut self, quiet: Duration) -> Vec<Value> {
        let mut out: Vec<Value> = self.pending.drain(..).collect();
        while let Some(v) = self.next_message(quiet) {
            out.push(v);
        }
        out
    }

    /// Reads whatever arrives within `d` (one message at most) — for raw error responses.
    pub fn next_raw(&mut self, d: Duration) -> Option<Value> {
        self.next_message(d)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
