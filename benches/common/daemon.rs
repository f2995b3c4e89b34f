//! The daemon as the benchmarks drive it: the real `compactd serve` on a socket in a temporary
//! home, an NDJSON connection to it, and a fake OpenAI-compatible provider on 127.0.0.1 (at once,
//! or as slow as a real model).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

type Res<T> = Result<T, String>;

/// The model the benchmarks open sessions with.
pub fn model() -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 200000, "maxTokens": 64000})
}

/// A running daemon with its own HOME and XDG directories.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub env: Vec<(&'static str, PathBuf)>,
}

pub fn env_dirs(root: &Path) -> Res<Vec<(&'static str, PathBuf)>> {
    let vars = [
        ("HOME", "home"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_RUNTIME_DIR", "run"),
        // Above /run/user/<uid> in the socket rule: the bench's own daemons only.
        ("COMPACTD_RUNTIME_DIR", "run"),
        ("PI_CODING_AGENT_DIR", "agent"),
    ];
    let mut out = Vec::new();
    for (k, d) in vars {
        let p = root.join(d);
        std::fs::create_dir_all(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        out.push((k, p));
    }
    Ok(out)
}

impl Daemon {
    pub fn start(bin: &Path, root: &Path, config: Option<&str>) -> Res<Daemon> {
        Daemon::start_limited(bin, root, config, None)
    }

    /// [`Daemon::start`] with a soft limit of `soft_open_files` open files (the hard limit as
    /// this process has it), as a desktop session or a systemd service would start it.
    pub fn start_limited(
        bin: &Path,
        root: &Path,
        config: Option<&str>,
        soft_open_files: Option<u64>,
    ) -> Res<Daemon> {
        let env = env_dirs(root)?;
        if let Some(text) = config {
            let dir = root.join("config/compactd");
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("config.toml"), text).map_err(|e| e.to_string())?;
        }
        let socket = root.join("run/bench.sock");
        let log = std::fs::File::create(root.join("daemon.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .env("COMPACTD_LOG", "warn");
        // Extra `serve` flags for an A/B run (e.g. `--worker-threads 2`).
        if let Ok(extra) = std::env::var("COMPACTD_BENCH_SERVE_ARGS") {
            cmd.args(extra.split_whitespace());
        }
        for (k, v) in &env {
            cmd.env(k, v);
        }
        if let Some(soft) = soft_open_files {
            use std::os::unix::process::CommandExt;
            // SAFETY: getrlimit/setrlimit are async-signal-safe and touch no memory of the
            // parent.
            unsafe {
                cmd.pre_exec(move || {
                    let mut lim = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    lim.rlim_cur = (soft as libc::rlim_t).min(lim.rlim_max);
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let mut d = Daemon { child, socket, env };
        let deadline = Instant::now() + Duration::from_secs(30);
        while UnixStream::connect(&d.socket).is_err() {
            if Instant::now() > deadline {
                return Err("daemon did not listen within 30 s".into());
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                let log = std::fs::read_to_string(root.join("daemon.log")).unwrap_or_default();
                return Err(format!("daemon exited ({status}): {log}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(d)
    }

    pub fn connect(&self) -> Res<Conn> {
        Conn::new(&self.socket)
    }

    /// User + system CPU time of the daemon so far, in ms (clock-tick resolution; exited
    /// threads included).
    pub fn cpu_ms(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let tick = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        (tick(11) + tick(12)) * 1000.0 / hz
    }

    /// (VmRSS, VmHWM) in KiB.
    pub fn rss_kb(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One NDJSON connection.
pub struct Conn {
    reader: BufReader<UnixStream>,
    pub writer: UnixStream,
    next_id: u64,
    pub line: Vec<u8>,
}

impl Conn {
    pub fn new(socket: &Path) -> Res<Conn> {
        let s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(300)))
            .map_err(|e| e.to_string())?;
        let writer = s.try_clone().map_err(|e| e.to_string())?;
        Ok(Conn {
            reader: BufReader::with_capacity(1 << 16, s),
            writer,
            next_id: 1,
            line: Vec::with_capacity(4096),
        })
    }

    /// Reads the next response line (notifications and server requests are skipped).
    pub fn read_response(&mut self) -> Res<Value> {
        loop {
            self.read_line()?;
            let v: Value = serde_json::from_slice(&self.line)
                .map_err(|e| format!("bad response line: {e}"))?;
            if v.get("method").is_none() {
                return Ok(v);
            }
        }
    }

    pub fn read_line(&mut self) -> Res<()> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("daemon closed the connection".into());
        }
        Ok(())
    }

    pub fn call(&mut self, method: &str, params: Value) -> Res<Value> {
        let mut results = self.calls(&[(method, params)])?;
        results
            .pop()
            .ok_or_else(|| format!("{method}: no response"))
    }

    /// Sends every request of `calls` pipelined (at most 64 unanswered at once) and returns
    /// the results in order, or the first error.
    pub fn calls(&mut self, calls: &[(&str, Value)]) -> Res<Vec<Value>> {
        let mut out = Vec::with_capacity(calls.len());
        for chunk in calls.chunks(64) {
            let mut text = Vec::new();
            for (method, params) in chunk {
                let id = self.next_id;
                self.next_id += 1;
                serde_json::to_writer(
                    &mut text,
                    &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
                )
                .map_err(|e| e.to_string())?;
                text.push(b'\n');
            }
            self.writer
                .write_all(&text)
                .map_err(|e| format!("write: {e}"))?;
            for (method, _) in chunk {
                let v = self.read_response()?;
                if let Some(err) = v.get("error") {
                    return Err(format!("{method}: {err}"));
                }
                out.push(v.get("result").cloned().unwrap_or(Value::Null));
            }
        }
        Ok(out)
    }

    /// `openSession` of `path` with the benchmarks' model (a 200k window).
    pub fn open(&mut self, path: &Path) -> Res<String> {
        self.open_with(path, model())
    }

    pub fn open_with(&mut self, path: &Path, model: Value) -> Res<String> {
        let info = self.call("openSession", json!({"path": path, "model": model}))?;
        info["sessionId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("openSession without sessionId: {info}"))
    }
}

// ---------------------------------------------------------------- fake provider

/// A fake OpenAI-compatible server on 127.0.0.1 that answers every chat completion after
/// `delay` (at once by default), reporting usage as a provider would (prompt tokens: the
/// request's bytes / 4; 30 completion tokens, or the reply's bytes / 4 for a reply of the
/// caller's, see [`FakeProvider::replying`]).
pub struct FakeProvider {
    pub port: u16,
    pub requests: Arc<AtomicU64>,
    pub body_bytes: Arc<AtomicU64>,
    /// Prompt and completion tokens the fake reported, summed.
    pub usage_tokens: Arc<AtomicU64>,
}

/// What a connection of the fake counts.
struct Counters {
    requests: Arc<AtomicU64>,
    body_bytes: Arc<AtomicU64>,
    usage_tokens: Arc<AtomicU64>,
    delay: Duration,
    /// Writes the reply from the request's body; `None`: the fixed benchmark summary.
    reply: Option<ReplyFn>,
}

/// A reply written from a request's body (e.g. a summary that keeps what it was sent).
pub type ReplyFn = fn(&[u8]) -> String;

fn serve_fake_connection(mut s: TcpStream, c: &Counters) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut reader = BufReader::new(s.try_clone()?);
    loop {
        let mut len = 0usize;
        let mut first = true;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() && !first {
                break;
            }
            first = false;
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; len];
        reader.read_exact(&mut body)?;
        c.requests.fetch_add(1, Ordering::Relaxed);
        c.body_bytes.fetch_add(len as u64, Ordering::Relaxed);
        if !c.delay.is_zero() {
            std::thread::sleep(c.delay);
        }
        let (reply, output) = match c.reply {
            Some(write) => {
                let text = write(&body);
                let tokens = text.len() / 4;
                (text, tokens)
            }
            None => ("## Goal\nBenchmark summary.\n\n## Progress\n- Done: everything so far.\n\n## Next Steps\n1. Continue.".to_owned(), 30),
        };
        let input = len / 4;
        c.usage_tokens
            .fetch_add((input + output) as u64, Ordering::Relaxed);
        let c1 = json!({"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"fake-gpt","choices":[{"index":0,"delta":{"role":"assistant","content":reply},"finish_reason":null}]});
        let c2 = json!({"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"fake-gpt","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":input,"completion_tokens":output,"total_tokens":input + output}});
        let sse = format!("data: {c1}\n\ndata: {c2}\n\ndata: [DONE]\n\n");
        // One write of the whole response: several small writes would meet Nagle's algorithm
        // and delayed ACKs on loopback and add tens of milliseconds that are not compactd's.
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{sse}",
            sse.len()
        );
        s.write_all(response.as_bytes())?;
        s.flush()?;
    }
}

impl FakeProvider {
    pub fn start() -> Res<FakeProvider> {
        FakeProvider::slow(Duration::ZERO)
    }

    /// A fake that takes `delay` for every request.
    pub fn slow(delay: Duration) -> Res<FakeProvider> {
        FakeProvider::serve(delay, None)
    }

    /// A fake that takes `delay` and answers with `reply(request body)`, reporting the reply's
    /// bytes / 4 as its completion tokens: a summary's length then costs what it would.
    pub fn replying(delay: Duration, reply: ReplyFn) -> Res<FakeProvider> {
        FakeProvider::serve(delay, Some(reply))
    }

    fn serve(delay: Duration, reply: Option<ReplyFn>) -> Res<FakeProvider> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let counters = Arc::new(Counters {
            requests: Arc::new(AtomicU64::new(0)),
            body_bytes: Arc::new(AtomicU64::new(0)),
            usage_tokens: Arc::new(AtomicU64::new(0)),
            delay,
            reply,
        });
        let fake = FakeProvider {
            port,
            requests: counters.requests.clone(),
            body_bytes: counters.body_bytes.clone(),
            usage_tokens: counters.usage_tokens.clone(),
        };
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let c = counters.clone();
                std::thread::spawn(move || {
                    let _ = serve_fake_connection(s, &c);
                });
            }
        });
        Ok(fake)
    }

    /// The `[summarizer]` configuration that points the daemon at this fake.
    pub fn config(&self) -> String {
        format!(
            "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"fake-gpt\"\nretry = {{ enabled = false }}\n",
            self.port
        )
    }
}
