//! An isolated environment for driving the real `compactd` binary: a temporary home with no user
//! configuration and no Pi settings, copies of conformance sessions, and helpers to start the
//! daemon over stdio or a socket with a given configuration. Shared by the black-box suites
//! (daemon flows, provider faults, crashes, load, dispatch fuzzing) so they all start the
//! daemon the same way.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};

use super::rpc_client::{Client, Framing};

pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["config", "agent", "run", "state"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("env dir");
        }
        Env { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn vars(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("XDG_CONFIG_HOME", self.path("config")),
            ("PI_CODING_AGENT_DIR", self.path("agent")),
            ("XDG_RUNTIME_DIR", self.path("run")),
            // Above `/run/user/<uid>` in the socket rule: the test's own daemons only.
            ("COMPACTD_RUNTIME_DIR", self.path("run")),
            ("XDG_STATE_HOME", self.path("state")),
        ]
    }

    /// The log `stdio` / `connect` write in this environment (`$XDG_STATE_HOME/compactd/…`).
    pub fn log_file(&self) -> PathBuf {
        self.path("state").join("compactd").join("compactd.log")
    }

    /// What the log file holds now (empty when nothing was logged yet).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_file()).unwrap_or_default()
    }

    /// A copy of a conformance case's session as `<case>.jsonl`.
    pub fn session(&self, case: &str) -> PathBuf {
        self.session_as(case, case)
    }

    /// A copy of a conformance case's session as `<name>.jsonl`.
    pub fn session_as(&self, case: &str, name: &str) -> PathBuf {
        let p = self.path(&format!("{name}.jsonl"));
        std::fs::copy(
            super::conformance_cases(super::PiVersion::V0_85)
                .join(case)
                .join("session.jsonl"),
            &p,
        )
        .expect("copy fixture");
        // The fixtures may be read-only; the copy is the test's to write.
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("make the copy writable");
        p
    }

    pub fn stdio(&self, args: &[&str], framing: Framing) -> Client {
        let vars = self.vars();
        let env: Vec<(&str, &Path)> = vars.iter().map(|(k, v)| (*k, v.as_path())).collect();
        Client::stdio(args, &env, framing)
    }

    /// [`Env::stdio`] running inside the temporary home (relative paths resolve there).
    pub fn stdio_inside(&self, args: &[&str], framing: Framing) -> Client {
        let vars = self.vars();
        let env: Vec<(&str, &Path)> = vars.iter().map(|(k, v)| (*k, v.as_path())).collect();
        Client::stdio_in(Some(self.dir.path()), args, &env, framing)
    }

    /// `compactd <sub>` in this environment, with no log settings inherited from the caller.
    pub fn command(&self, sub: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
        cmd.arg(sub)
            .env_remove("COMPACTD_LOG")
            .env_remove("NO_COLOR");
        for (k, v) in self.vars() {
            cmd.env(k, v);
        }
        cmd
    }

    /// `compactd stdio` with piped stdin and stdout, stderr to `stderr`, for suites that speak
    /// raw bytes rather than through [`Client`].
    pub fn spawn_stdio(&self, stderr: Stdio) -> KillOnDrop {
        KillOnDrop(
            self.command("stdio")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(stderr)
                .spawn()
                .expect("spawn compactd stdio"),
        )
    }

    /// `compactd serve` on `socket` with `extra` flags, stderr to `stderr`; returns once the
    /// socket accepts connections.
    pub fn serve_ready(&self, socket: &Path, extra: &[&str], stderr: Stdio) -> KillOnDrop {
        let child = KillOnDrop(
            self.command("serve")
                .arg("--socket")
                .arg(socket)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .expect("spawn compactd serve"),
        );
        wait_for_socket(socket);
        child
    }

    /// `compactd serve` on `socket` with `extra` flags and stderr piped; returns at once.
    pub fn serve(&self, socket: &Path, extra: &[&str]) -> KillOnDrop {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
        cmd.arg("serve")
            .arg("--socket")
            .arg(socket)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in self.vars() {
            cmd.env(k, v);
        }
        KillOnDrop(cmd.spawn().expect("spawn compactd serve"))
    }

    /// Configures the daemon to summarize with the fake OpenAI server on `port`.
    pub fn use_fake_summarizer(&self, port: u16, retry: &str) {
        self.write_config(&format!(
            "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"fake-gpt\"\nretry = {retry}\n"
        ));
    }

    pub fn write_config(&self, text: &str) {
        std::fs::create_dir_all(self.path("config/compactd")).expect("config dir");
        std::fs::write(self.path("config/compactd/config.toml"), text).expect("write config");
    }

    /// Back to the default (extractive) configuration.
    pub fn remove_config(&self) {
        let _ = std::fs::remove_file(self.path("config/compactd/config.toml"));
    }

    /// `compactd inspect --json FILE`: the analysis, or the failure's stderr.
    pub fn inspect(&self, file: &Path) -> Result<Value, String> {
        self.inspect_with(file, &[])
    }

    /// [`Env::inspect`] with more flags (`--pi-version 0.85`, say).
    pub fn inspect_with(&self, file: &Path, flags: &[&str]) -> Result<Value, String> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
        cmd.arg("inspect").arg("--json").args(flags).arg(file);
        for (k, v) in self.vars() {
            cmd.env(k, v);
        }
        let out = cmd.output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        compactd::json::parse_line(&String::from_utf8_lossy(&out.stdout))
            .map_err(|e| format!("inspect output: {e}"))
    }
}

impl Default for Env {
    fn default() -> Self {
        Env::new()
    }
}

/// Waits until `socket` accepts connections (the daemon is listening).
pub fn wait_for_socket(socket: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "daemon never listened on {}",
            socket.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The model the suites open sessions with.
pub fn model() -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 200000, "maxTokens": 64000})
}

/// `openSession` of `path`; returns the session id.
pub fn open(c: &mut Client, path: &Path) -> String {
    let info = c.ok("openSession", json!({"path": path, "model": model()}));
    info["sessionId"].as_str().expect("sessionId").to_owned()
}

/// Overrides the session's `compaction.keepRecentTokens` (how the suites make a small session
/// compactable) and checks the daemon took it.
pub fn keep_recent(c: &mut Client, session_id: &str, tokens: u64) {
    let applied = c.ok(
        "setSettingsOverrides",
        json!({"sessionId": session_id, "compaction": {"keepRecentTokens": tokens}}),
    );
    assert_eq!(applied["ok"], true, "{applied}");
}

/// Opens `file` on `c` with a small keep-recent (so a compaction has work) and a
/// `session_before_compact` hook on this connection that is asked and never answered, so the
/// next compaction stays parked in the hook until it times out (`hook_timeout_ms`) or is
/// cancelled. Returns the session id and a flag set once the hook was asked.
pub fn park_compactions(
    c: &mut Client,
    file: &Path,
    hook_timeout_ms: u64,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let asked = std::sync::Arc::new(AtomicBool::new(false));
    let a = asked.clone();
    c.on_request(move |method, _| {
        if method == "session_before_compact" {
            a.store(true, Ordering::SeqCst);
        }
        None
    });
    let sid = c.ok("openSession", json!({"path": file}))["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    keep_recent(c, &sid, 2000);
    c.ok(
        "registerHooks",
        json!({"hooks": ["session_before_compact"], "timeoutMs": hook_timeout_ms}),
    );
    (sid, asked)
}

/// Number of lines of a file (0 when it cannot be read).
pub fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Milliseconds since the epoch, for message timestamps.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Returns once the clock is past the millisecond it reads now: a message stamped after this is
/// strictly later than anything the daemon stamped before the call (Pi compares a reply's
/// timestamp with the last compaction's).
pub fn next_millisecond() {
    let t = now_ms();
    super::wait_until(
        std::time::Duration::from_secs(5),
        "the clock moves on",
        || now_ms() > t,
    );
}

/// Every line of a session file parsed, failing on any line that is not complete JSON or a
/// file that does not end with a newline (a half-written entry).
pub fn parsed_lines(path: &Path) -> Result<Vec<Value>, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        let tail = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(120)..]).into_owned();
        return Err(format!(
            "{}: no final newline; tail {tail:?}",
            path.display()
        ));
    }
    entry_lines(&bytes, |_| false).map_err(|e| format!("{} {e}", path.display()))
}

/// The JSON value of every complete line of `lines`; a line that is not JSON is an error unless
/// `allowed` accepts it (then it is left out).
pub fn entry_lines(lines: &[u8], allowed: impl Fn(&[u8]) -> bool) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (i, line) in lines.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) => out.push(v),
            Err(_) if allowed(line) => {}
            Err(e) => {
                return Err(format!(
                    "line {}: not JSON ({e}): {:?}",
                    i + 1,
                    String::from_utf8_lossy(&line[..line.len().min(200)])
                ))
            }
        }
    }
    Ok(out)
}

/// A spawned daemon (or any child a test starts) that is killed when the test ends, even by a
/// panic: a failing test leaves no process behind. Derefs to the [`Child`].
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// Waits for the child to exit and collects its piped output (what
    /// [`Child::wait_with_output`] does; for a child the test expects to end by itself).
    pub fn wait_with_output(self) -> std::io::Result<std::process::Output> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again, so the child is moved out exactly once.
        let child = unsafe { std::ptr::read(&me.0) };
        child.wait_with_output()
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pids of the `compactd serve` processes listening on `socket` (from /proc): daemons a test
/// started indirectly (`compactd start`, `connect`, a client library), which it holds no child of.
pub fn daemons_on(socket: &Path) -> Vec<u32> {
    let want = socket.to_string_lossy().into_owned();
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_daemon = args.iter().any(|a| a == "serve") && args.contains(&want);
        // A zombie (exited, not yet reaped) has an empty cmdline and is skipped.
        if is_daemon {
            pids.push(pid);
        }
    }
    pids
}

/// Stops the daemons a test started (SIGTERM) and waits until they are gone.
pub fn stop(pids: &[u32]) {
    for &pid in pids {
        // SAFETY: plain kill(2) of a process this test started.
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        }
    }
    // Gone, or a zombie nobody reaps (a container's init may not).
    let running = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with(|c| c != 'Z')))
            .unwrap_or(false)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pids.iter().any(running) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Stops every daemon on its socket (the test's own temporary path) when dropped, so a failing
/// assertion leaves no daemon behind: the guard of daemons a test starts without holding their
/// process ([`KillOnDrop`] holds those it spawns itself).
pub struct Stopper(pub PathBuf);

impl Drop for Stopper {
    fn drop(&mut self) {
        stop(&daemons_on(&self.0));
    }
}

/// A reply's usage reporting `input` context tokens.
pub fn usage(input: i64) -> Value {
    json!({"input": input, "output": 20, "cacheRead": 0, "cacheWrite": 0, "totalTokens": input + 20,
           "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}})
}

/// A new empty session of [`model`] with `dir` as its working and session directory: its id
/// and its file.
pub fn new_session(c: &mut Client, dir: &Path) -> (String, PathBuf) {
    let info = c.ok(
        "createSession",
        json!({"cwd": dir, "sessionDir": dir, "model": model()}),
    );
    let sid = info["sessionId"].as_str().unwrap().to_owned();
    let path = PathBuf::from(info["path"].as_str().unwrap());
    (sid, path)
}

/// A new session in `dir` with `turns` turns, each a user request, an assistant `read` of
/// `src/fNN.rs` and its result (about 300 tokens a turn), and a final reply.
pub fn tool_session(c: &mut Client, dir: &Path, turns: usize) -> (String, PathBuf) {
    let (sid, path) = new_session(c, dir);
    let t0 = now_ms() - 1_000_000;
    for i in 0..turns {
        let ts = t0 + i as i64 * 1000;
        let user = json!({"role": "user", "content": format!("turn {i}: look at file {i:02} {}", "please ".repeat(100)), "timestamp": ts});
        c.ok("appendMessage", json!({"sessionId": sid, "message": user}));
        let call = json!({"role": "assistant", "content": [{"type": "toolCall", "id": format!("call_{i}"), "name": "read", "arguments": {"path": format!("src/f{i:02}.rs")}}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage(1000 + i as i64 * 300), "stopReason": "toolUse", "timestamp": ts + 1});
        c.ok("appendMessage", json!({"sessionId": sid, "message": call}));
        let result = json!({"role": "toolResult", "toolCallId": format!("call_{i}"), "toolName": "read",
            "content": [{"type": "text", "text": format!("fn f{i}() {{}} {}", "// body ".repeat(60))}], "isError": false, "timestamp": ts + 2});
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": result}),
        );
    }
    let done = json!({"role": "assistant", "content": [{"type": "text", "text": "Read them all."}],
        "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage(1000 + turns as i64 * 300), "stopReason": "stop", "timestamp": t0 + turns as i64 * 1000});
    c.ok("appendMessage", json!({"sessionId": sid, "message": done}));
    (sid, path)
}
