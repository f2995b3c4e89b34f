//! `compactd top` against a real daemon: `--once`'s plain snapshot (its exact columns on a
//! known daemon state, the error without a daemon), and the live view in a real terminal.
//!
//! The terminal is `tmux`: `top` runs in a detached session of a fixed size, `capture-pane`
//! reads the screen and `send-keys` types. Every wait polls the screen against a deadline.
//! Without tmux the terminal tests skip on a developer machine and fail under `CI=true`
//! (`scripts/test-all` installs it).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{tool_session, Env};
use support::rpc_client::{Client, Framing};
use support::NotYet;

const BIN: &str = env!("CARGO_BIN_EXE_compactd");
/// Long enough for a loaded CI machine to start a process; the one-second promise of the
/// issue is measured separately.
const START: Duration = Duration::from_secs(30);

fn model(window: i64) -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": window, "maxTokens": 4000})
}

/// A session in `<env>/<name>` with `turns` tool turns and a model of `window` tokens.
fn session(env: &Env, c: &mut Client, name: &str, turns: usize, window: i64) -> (String, PathBuf) {
    let dir = env.path(name);
    std::fs::create_dir_all(&dir).expect("session dir");
    let (sid, path) = tool_session(c, &dir, turns);
    c.ok(
        "setModel",
        json!({"sessionId": sid, "model": model(window)}),
    );
    (sid, path)
}

/// Small enough settings for the test sessions to compact.
fn small_settings(c: &mut Client) {
    c.ok(
        "setSettingsOverrides",
        json!({"compaction": {"reserveTokens": 2000, "keepRecentTokens": 600}}),
    );
}

/// `getContextUsage`'s percentage as `top` prints it.
fn percent(c: &mut Client, sid: &str) -> String {
    let u = c.ok("getContextUsage", json!({"sessionId": sid}));
    format!(
        "{:.1}%",
        u["percent"].as_f64().expect("a model and a known size")
    )
}

/// Whether the branch of `sid` ends with a compaction entry.
fn ends_compacted(c: &mut Client, sid: &str) -> bool {
    let branch = c.ok("getBranch", json!({"sessionId": sid}));
    branch
        .as_array()
        .and_then(|b| b.last())
        .is_some_and(|e| e["type"] == "compaction")
}

/// A detached tmux server of its own (its socket in the test's directory) running one command
/// in a window of a fixed size; killed when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn available() -> bool {
        Command::new("tmux")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket).arg("-f").arg("/dev/null");
        c
    }

    /// Starts `args` (a shell command line) in a `width` × `height` window.
    fn start(env: &Env, width: u16, height: u16, line: &str, vars: &[(&str, &str)]) -> Tmux {
        // A socket of its own per server: a test that starts a second one right after dropping
        // the first must not reach the first while it is still shutting down ("server exited
        // unexpectedly").
        static SERVERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SERVERS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let t = Tmux {
            socket: env.path(&format!("tmux-{n}.sock")),
        };
        let mut c = t.cmd();
        c.args(["new-session", "-d", "-s", "top"])
            .args(["-x", &width.to_string(), "-y", &height.to_string()])
            .arg(line)
            .env("TERM", "xterm-256color")
            .env_remove("NO_COLOR")
            .env_remove("TMUX");
        for (k, v) in env.vars() {
            c.env(k, v);
        }
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.output().expect("run tmux");
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen as text (`escapes`: with the attributes as escape sequences).
    fn screen(&self, escapes: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", "top"];
        if escapes {
            args.push("-e");
        }
        self.run(&args)
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Polls the screen until `ok` holds; panics with the last screen after `limit`.
    fn wait(&self, what: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
        support::wait_for(limit, &format!("{what} is on screen"), || {
            let s = self.screen(false);
            if ok(&s) {
                Ok(s)
            } else {
                Err(format!("the screen:\n{s}"))
            }
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self
            .cmd()
            .arg("kill-server")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The line of the table that shows `sid`.
fn row<'a>(screen: &'a str, sid: &str) -> Option<&'a str> {
    screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(sid))
}

/// The shell command line that runs `top` and records its exit code in `status`.
fn top_line(socket: &Path, status: &Path) -> String {
    format!(
        "'{BIN}' top --socket '{}'; echo $? > '{}'",
        socket.display(),
        status.display()
    )
}

fn tmux_or_skip(test: &str) -> bool {
    if Tmux::available() {
        return true;
    }
    support::skip_or_fail(test, "tmux is not installed (scripts/test-all installs it)");
    false
}

#[test]
fn the_live_view_in_a_real_terminal() {
    if !tmux_or_skip("compactd top in tmux") {
        return;
    }
    let env = Env::new();
    let (_runtime, fake) = support::fake_llm::serve(&[
        "## Goal\nOne.",
        "## Goal\nTwo.",
        "## Goal\nThree.",
        "## Goal\nFour.",
    ]);
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let socket = env.path("run/top.sock");
    let daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut holder = Client::socket(&socket, Framing::Ndjson);
    small_settings(&mut holder);
    let (s1, _) = session(&env, &mut holder, "alpha", 8, 10_000);
    let (s2, _) = session(&env, &mut holder, "beta", 10, 20_000);
    let (s3, _) = session(&env, &mut holder, "gamma", 12, 40_000);
    let pct: Vec<(String, String)> = [&s1, &s2, &s3]
        .iter()
        .map(|s| ((*s).clone(), percent(&mut holder, s)))
        .collect();

    let status = env.path("top.status");
    let tmux = Tmux::start(&env, 160, 40, &top_line(&socket, &status), &[]);
    // The three rows, each with its percentage.
    let screen = tmux.wait("three rows with their percentages", START, |s| {
        pct.iter()
            .all(|(sid, p)| row(s, sid).is_some_and(|l| l.contains(p.as_str())))
    });
    assert!(screen.contains("3 sessions · connected"), "{screen}");
    assert!(row(&screen, &s1).is_some_and(|l| l.contains("alpha/") && l.contains("idle")));

    // A compaction started by another client shows in the event pane and in its row within a
    // second of its start.
    let mut other = Client::socket(&socket, Framing::Ndjson);
    other.ok("subscribe", json!({}));
    fake.state.lock().delay = Duration::from_secs(3);
    let compact = other.send("compact", json!({"sessionId": s2}));
    other
        .wait_notification("compaction_start", Duration::from_secs(10))
        .expect("compaction_start");
    let started = Instant::now();
    let screen = tmux.wait("the running compaction", Duration::from_secs(5), |s| {
        s.contains(&format!("{s2} compaction started (manual)"))
            && row(s, &s2).is_some_and(|l| l.contains("compacting manual"))
    });
    let seen = started.elapsed();
    assert!(
        seen < Duration::from_secs(1),
        "shown {seen:?} after it started:\n{screen}"
    );
    let result = other
        .wait(compact, Duration::from_secs(30))
        .expect("compact");
    let before = result["tokensBefore"].as_f64().expect("tokensBefore");
    tmux.wait("the finished compaction", Duration::from_secs(5), |s| {
        s.contains(&format!("{s2} compacted (manual)"))
            && row(s, &s2).is_some_and(|l| {
                l.contains("idle")
                    && l.contains(&format!("{:.1}k→", before / 1000.0))
                    && l.contains("fake-gpt")
            })
    });

    // `c` then `y` compacts the selected session (the third row).
    fake.state.lock().delay = Duration::ZERO;
    tmux.keys(&["j", "j", "c"]);
    tmux.wait("the confirmation", Duration::from_secs(5), |s| {
        s.contains(&format!("Compact {s3} (gamma/"))
    });
    assert!(!ends_compacted(&mut holder, &s3), "nothing before the y");
    tmux.keys(&["y"]);
    tmux.wait(
        "the compaction from the keys",
        Duration::from_secs(20),
        |s| s.contains(&format!("{s3} compacted (manual)")),
    );
    assert!(ends_compacted(&mut holder, &s3), "the daemon compacted it");
    assert!(!ends_compacted(&mut holder, &s1));

    // `p` previews the first session, `a` aborts its running compaction.
    tmux.keys(&["g", "p"]);
    tmux.wait("the preview", Duration::from_secs(5), |s| {
        s.contains(&format!("preview of {s1}"))
            && s.contains("Summarize: ")
            && s.contains("Keep verbatim: ")
    });
    tmux.keys(&["Escape"]);
    fake.state.lock().delay = Duration::from_secs(20);
    let compact = other.send("compact", json!({"sessionId": s1}));
    tmux.wait("the compaction to abort", Duration::from_secs(5), |s| {
        row(s, &s1).is_some_and(|l| l.contains("compacting manual"))
    });
    tmux.keys(&["a"]);
    let end = other
        .wait(compact, Duration::from_secs(10))
        .expect_err("aborted");
    assert_eq!(end["data"]["kind"], "cancelled", "{end}");
    tmux.wait("the abort", Duration::from_secs(5), |s| {
        s.contains(&format!("{s1} compaction aborted (manual)"))
            && row(s, &s1).is_some_and(|l| l.contains("idle"))
    });
    fake.state.lock().delay = Duration::ZERO;

    // `/` filters the rows.
    tmux.keys(&["/", "b", "e", "t", "a", "Enter"]);
    tmux.wait("the filter", Duration::from_secs(5), |s| {
        row(s, &s2).is_some() && row(s, &s1).is_none() && s.contains("1 of 3 sessions")
    });
    tmux.keys(&["Escape"]);

    // The terminal's size is followed.
    tmux.run(&["resize-window", "-t", "top", "-x", "100", "-y", "24"]);
    tmux.wait("the smaller window", Duration::from_secs(5), |s| {
        s.lines().count() <= 24
            && s.lines().all(|l| l.chars().count() <= 100)
            && row(s, &s3).is_some()
            && s.contains("compactd top")
    });

    // A daemon restart is reported, and the view comes back with the new daemon's sessions.
    drop(holder);
    drop(other);
    drop(daemon);
    tmux.wait("the disconnection", Duration::from_secs(10), |s| {
        s.contains("daemon disconnected — reconnecting…")
    });
    let _daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut holder = Client::socket(&socket, Framing::Ndjson);
    let (n1, _) = session(&env, &mut holder, "delta", 4, 10_000);
    let p = percent(&mut holder, &n1);
    tmux.wait("the reconnection", START, |s| {
        s.contains("reconnected")
            && s.contains("1 session · connected")
            && row(s, &n1).is_some_and(|l| l.contains("delta/") && l.contains(&p))
    });

    // `q` quits with success.
    tmux.keys(&["q"]);
    let code = support::wait_for(Duration::from_secs(10), "top quits on q", || {
        let code = std::fs::read_to_string(&status).unwrap_or_default();
        (!code.trim().is_empty()).then_some(code).ok_or_default()
    });
    assert_eq!(code.trim(), "0");
}

/// SGR parameters that set a colour (foreground, background, 256-colour and RGB forms).
fn has_colour(screen: &str) -> bool {
    let mut rest = screen;
    while let Some(i) = rest.find("\u{1b}[") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find('m') else { break };
        let params = &rest[..end];
        if params.chars().all(|c| c.is_ascii_digit() || c == ';') {
            let colour = params.split(';').any(|p| {
                matches!(
                    p.parse::<u32>(),
                    Ok(30..=38 | 40..=48 | 90..=97 | 100..=107)
                )
            });
            if colour {
                return true;
            }
        }
        rest = &rest[end..];
    }
    false
}

#[test]
fn no_color_is_honoured_in_a_real_terminal() {
    if !tmux_or_skip("compactd top NO_COLOR in tmux") {
        return;
    }
    let env = Env::new();
    let socket = env.path("run/top.sock");
    let _daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut holder = Client::socket(&socket, Framing::Ndjson);
    small_settings(&mut holder);
    let (sid, _) = session(&env, &mut holder, "alpha", 8, 10_000);
    for (no_color, coloured) in [("", true), ("1", false)] {
        let status = env.path("top.status");
        let tmux = Tmux::start(
            &env,
            120,
            30,
            &top_line(&socket, &status),
            &[("NO_COLOR", no_color)],
        );
        tmux.wait("the row", START, |s| {
            row(s, &sid).is_some() && s.contains("connected")
        });
        let screen = tmux.screen(true);
        assert_eq!(
            has_colour(&screen),
            coloured,
            "NO_COLOR={no_color:?}: {screen:?}"
        );
        assert!(
            screen.contains("\u{1b}["),
            "emphasis (bold, reverse) stays: {screen:?}"
        );
    }
}

/// Splits a `--once` line into its cells (columns are two or more spaces apart).
fn cells(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Where each cell of `line` starts (in characters).
fn starts(line: &str) -> Vec<usize> {
    let chars: Vec<char> = line.chars().collect();
    (0..chars.len())
        .filter(|&i| {
            chars[i] != ' ' && (i == 0 || (i >= 2 && chars[i - 1] == ' ' && chars[i - 2] == ' '))
        })
        .collect()
}

#[test]
fn once_prints_a_plain_snapshot_of_a_known_state() {
    let env = Env::new();
    let socket = env.path("run/top.sock");
    let _daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut c = Client::socket(&socket, Framing::Ndjson);
    small_settings(&mut c);
    let (s1, p1) = session(&env, &mut c, "alpha", 8, 10_000);
    let (s2, p2) = session(&env, &mut c, "beta", 10, 20_000);
    let compacted = c.ok("compact", json!({"sessionId": s2}));
    let sessions = c.ok("listSessions", json!({}));
    let by_id = |sid: &str| -> Value {
        sessions
            .as_array()
            .and_then(|a| a.iter().find(|s| s["sessionId"] == sid))
            .cloned()
            .expect("listed")
    };
    let uuid8 = |p: &Path| -> String {
        let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
        let uuid = stem.rsplit_once('_').unwrap().1;
        uuid[uuid.len() - 8..].to_owned()
    };
    let int = |v: &Value| format!("{}", v.as_f64().expect("a number").round() as i64);

    let out = env
        .command("top")
        .args(["--once", "--socket"])
        .arg(&socket)
        .stdin(Stdio::null())
        .output()
        .expect("run top --once");
    assert!(
        out.status.success(),
        "top --once: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(!text.contains('\u{1b}'), "no escape codes: {text:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two rows:\n{text}");
    assert_eq!(
        cells(lines[0]),
        [
            "SID",
            "SESSION",
            "MODEL",
            "TOKENS",
            "THRESHOLD",
            "WINDOW",
            "USED",
            "STATE",
            "COMPACTED",
            "BEFORE",
            "AFTER",
            "BY",
            "TOOK",
            "COST",
            "HANDOFF"
        ]
    );
    // Aligned: every row's cells start where the header's do.
    for l in &lines[1..] {
        assert_eq!(starts(l), starts(lines[0]), "aligned:\n{text}");
    }
    let i1 = by_id(&s1);
    let usage = c.ok("getContextUsage", json!({"sessionId": s1}));
    assert_eq!(
        i1["contextTokens"], usage["tokens"],
        "getContextUsage's figure"
    );
    assert_eq!(
        cells(lines[1]),
        [
            s1.clone(),
            format!("alpha/{}", uuid8(&p1)),
            "claude-sonnet-4-5".into(),
            int(&i1["contextTokens"]),
            "8000".into(),
            "10000".into(),
            percent(&mut c, &s1),
            "idle".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]
    );
    let i2 = by_id(&s2);
    let row2 = cells(lines[2]);
    assert_eq!(
        row2[..8],
        [
            s2.clone(),
            format!("beta/{}", uuid8(&p2)),
            "claude-sonnet-4-5".into(),
            int(&i2["contextTokens"]),
            "18000".into(),
            "20000".into(),
            format!("{:.1}%", i2["contextTokens"].as_f64().unwrap() / 200.0),
            "idle".into(),
        ]
    );
    // The compaction: its age, tokens before and after, summarizer, duration; an extractive
    // one is free (shown so whether its cost came from an event or not).
    assert!(
        row2[8] == "now-ago" || (row2[8].ends_with("s-ago") && row2[8].len() <= 7),
        "{row2:?}"
    );
    assert_eq!(row2[9], int(&compacted["tokensBefore"]));
    assert_eq!(row2[10], int(&compacted["estimatedTokensAfter"]));
    assert_eq!(row2[11], "extractive");
    assert!(
        row2[12].ends_with("ms") || row2[12].ends_with('s'),
        "{row2:?}"
    );
    assert_eq!(row2[13], "free");
    // The handoff check of the summary (`compaction.handoff` is `report` by default).
    let score = compacted["handoff"]["score"]
        .as_f64()
        .expect("a handoff score");
    assert_eq!(row2[14], format!("{}%", (score * 100.0).round() as i64));
    assert_eq!(
        i2["lastCompaction"]["handoffScore"],
        compacted["handoff"]["score"]
    );
    // The daemon's status fields behind those cells.
    assert_eq!(i2["lastCompaction"]["summarizer"], "extractive");
    assert!(i2["lastCompaction"]["durationMs"].is_u64());
    assert_eq!(i2["autoCompaction"], "on");
    assert!(i2.get("currentCompaction").is_none());
}

#[test]
fn once_without_a_daemon_fails_clearly_and_top_needs_a_terminal() {
    let env = Env::new();
    let socket = env.path("run/none.sock");
    let out = env
        .command("top")
        .args(["--once", "--socket"])
        .arg(&socket)
        .output()
        .expect("run top --once");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the daemon at") && err.contains("none.sock"),
        "{err}"
    );
    // The live view without a terminal points at --once (usage error).
    let out = env
        .command("top")
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .output()
        .expect("run top");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--once"));
}

#[test]
fn list_sessions_reports_the_running_and_the_last_compaction() {
    let env = Env::new();
    let (_runtime, fake) = support::fake_llm::serve(&["## Goal\nSlow."]);
    fake.state.lock().delay = Duration::from_secs(2);
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let socket = env.path("run/top.sock");
    let _daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut c = Client::socket(&socket, Framing::Ndjson);
    small_settings(&mut c);
    let (sid, _) = session(&env, &mut c, "alpha", 8, 10_000);
    let id = c.send("compact", json!({"sessionId": sid}));
    let running = support::wait_for(Duration::from_secs(10), "a currentCompaction", || {
        let list = c.ok("listSessions", json!({}));
        list[0]
            .get("currentCompaction")
            .cloned()
            .ok_or(list.to_string())
    });
    assert_eq!(running["reason"], "manual");
    assert!(running["startedAt"]
        .as_str()
        .is_some_and(|s| s.ends_with('Z')));
    assert!(running["elapsedMs"].as_u64().is_some_and(|ms| ms < 2_000));
    let result = c.wait(id, Duration::from_secs(30)).expect("compact");
    let list = c.ok("listSessions", json!({}));
    let s = &list[0];
    assert!(s.get("currentCompaction").is_none(), "{s}");
    assert_eq!(s["isCompacting"], false);
    let last = &s["lastCompaction"];
    assert_eq!(last["tokensBefore"], result["tokensBefore"]);
    assert_eq!(last["tokensAfter"], result["estimatedTokensAfter"]);
    assert_eq!(last["summarizer"], "openai-completions/fake-gpt", "{s}");
    assert_eq!(
        s["contextTokens"], last["tokensAfter"],
        "the size the compaction left"
    );
    assert!(
        last["durationMs"].as_u64().is_some_and(|ms| ms >= 2_000),
        "from start to end: {s}"
    );
    // Undoing the compaction leaves no compaction on the branch.
    c.ok("undoCompaction", json!({"sessionId": sid}));
    let list = c.ok("listSessions", json!({}));
    assert!(list[0].get("lastCompaction").is_none(), "{}", list[0]);
    // Automatic compaction switched off reads as such.
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"enabled": false}}),
    );
    assert_eq!(c.ok("listSessions", json!({}))[0]["autoCompaction"], "off");
    // openSession's answer stays the plain SessionInfo.
    let path = c.ok("listSessions", json!({}))[0]["path"].clone();
    let opened = c.ok("openSession", json!({"path": path}));
    assert!(opened.get("contextTokens").is_none(), "{opened}");
}

/// The connection shell alone (no screen draws, nobody takes the model's dirty flag): every
/// event of a burst is applied, in order, and none is dropped by the daemon.
#[test]
fn the_connection_applies_every_event_of_a_burst_without_a_screen() {
    use compactd::cli::top::client::{self, Shared};
    use std::sync::Arc;
    let env = Env::new();
    let socket = env.path("run/top.sock");
    let _daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut c = Client::socket(&socket, Framing::Ndjson);
    small_settings(&mut c);
    // Too small to compact: every `compact` is a start and a failed end.
    let (tiny, _) = session(&env, &mut c, "tiny", 0, 10_000);
    let (real, _) = session(&env, &mut c, "real", 8, 10_000);

    let shared = Arc::new(Shared::default());
    let stop = tokio_util::sync::CancellationToken::new();
    let (_commands, receiver) = tokio::sync::mpsc::channel(client::COMMAND_QUEUE);
    let net = {
        let (shared, stop, socket) = (shared.clone(), stop.clone(), socket.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(client::run(socket, shared, receiver, stop));
        })
    };
    support::wait_until(START, "the sessions show", || {
        shared.model.lock().rows("", 0).len() >= 2
    });
    const BURST: usize = 600;
    for _ in 0..BURST {
        c.request("compact", json!({"sessionId": tiny}))
            .expect_err("nothing to compact");
    }
    c.ok("compact", json!({"sessionId": real}));
    let last = format!("{real} compacted (manual)");
    support::wait_until(START, "the burst is applied", || {
        shared.model.lock().events().last().is_some_and(|e| {
            format!("{} {}", e.session_id.as_deref().unwrap_or(""), e.text).starts_with(&last)
        })
    });
    stop.cancel();
    net.join().expect("the connection thread");
    let m = shared.model.lock();
    let lines: Vec<String> = m
        .events()
        .map(|e| format!("{} {}", e.session_id.as_deref().unwrap_or("-"), e.text))
        .collect();
    // The newest lines the pane keeps: the burst's last pairs, in order, then the real one.
    let keep = compactd::cli::top::model::EVENT_LINES;
    assert_eq!(lines.len(), keep);
    for (i, l) in lines[..keep - 2].iter().enumerate() {
        let expected = if i % 2 == 0 {
            format!("{tiny} compaction started (manual)")
        } else {
            format!("{tiny} compaction failed (manual): Compaction failed: Nothing to compact (session too small)")
        };
        assert_eq!(l, &expected, "line {i} of {lines:#?}");
    }
    assert_eq!(
        lines[keep - 2],
        format!("{real} compaction started (manual)")
    );
    assert!(lines[keep - 1].starts_with(&last));
    assert!(
        !lines.iter().any(|l| l.contains("dropped")),
        "the daemon never dropped this subscriber"
    );
}

/// `top --once` printed model ids, cwds and session names as they were, escape sequences
/// included (a screen clear, a title set, an OSC 52 clipboard write), and so did the daemon's
/// log lines on stderr. Now every cell and every log line is printable.
#[test]
fn once_and_the_daemons_log_print_session_strings_only_as_printable_text() {
    let env = Env::new();
    let socket = env.path("run/top.sock");
    let log = env.path("serve.log");
    let daemon = env.serve_ready(
        &socket,
        &[],
        Stdio::from(std::fs::File::create(&log).expect("log file")),
    );
    let file = env.path(&format!("hostile{}.jsonl", support::HOSTILE));
    support::write_hostile_session(&file);
    let mut c = Client::socket(&socket, Framing::Ndjson);
    let hostile_model = json!({"provider": format!("p{}", support::HOSTILE),
        "id": format!("m{}", support::HOSTILE), "contextWindow": 200000, "maxTokens": 4000});
    let opened = c.ok("openSession", json!({"path": file, "model": hostile_model}));
    assert!(opened["sessionId"].is_string(), "{opened}");
    // A request naming an unknown session (a client's string) is logged too.
    let _ = c.request(
        "getContextUsage",
        json!({"sessionId": format!("nope{}", support::HOSTILE)}),
    );

    let out = env
        .command("top")
        .args(["--once", "--socket"])
        .arg(&socket)
        .stdin(Stdio::null())
        .output()
        .expect("run top --once");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    support::assert_printable("top --once", &text);
    assert!(
        text.contains(r"m\x1b]52;c;aGVsbG8=\x07\x1b[2J\x1b]0;title\x07\u{9b}31m\x7f"),
        "the model id, its escapes visible: {text}"
    );
    assert_eq!(text.lines().count(), 2, "one header, one row: {text}");

    drop(c);
    drop(daemon);
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("hostile"), "the open was logged: {logged}");
    support::assert_printable("serve's log", &logged);
}
