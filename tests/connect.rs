//! `compactd connect` and `compactd start` through the real binary: joining a running daemon in
//! both framings (bytes unchanged), starting one when none answers (detached, in its own
//! session, logging to its file, alive after the starter exits), two starters racing (exactly
//! one daemon), and logs under an editor (the log file, not stderr).
//!
//! Every daemon a test starts is found through its own log (`started the daemon pid=N`) or the
//! child it spawned, and stopped by pid at the end.

mod support;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{daemons_on, stop, Env, Stopper};
use support::rpc_client::{Client, Framing};

fn socket(env: &Env) -> PathBuf {
    env.path("run").join("compactd").join("compactd.sock")
}

fn connect(env: &Env) -> Command {
    let mut cmd = env.command("connect");
    cmd.stderr(Stdio::piped());
    cmd
}

/// The session id of a process (field 6 of /proc/PID/stat).
fn session_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(3)?.parse().ok()
}

/// Pids the log says were started by a starter.
fn started_pids(log: &str) -> Vec<u32> {
    log.lines()
        .filter(|l| l.contains("started the daemon"))
        .filter_map(|l| {
            // The last `pid=`: the event's field (the line's tag names the starter's own pid).
            l.rsplit("pid=")
                .next()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[test]
fn connect_joins_a_running_daemon_in_both_framings_with_bytes_unchanged() {
    let env = Env::new();
    let sock = socket(&env);
    let _stop = Stopper(sock.clone());
    let mut daemon = env.serve_ready(&sock, &[], Stdio::null());
    let file = env.session("005-medium-basic");

    // The agent, straight on the socket, opens the session.
    let mut agent = Client::socket(&sock, Framing::Ndjson);
    let sid = agent.ok("openSession", json!({"path": file}))["sessionId"].clone();

    // An editor through `connect`, LSP framing: the same session, the same id.
    let mut editor = Client::process(connect(&env), Framing::Lsp);
    let listed = editor.ok("listSessions", json!({}));
    assert_eq!(
        listed[0]["sessionId"], sid,
        "one daemon, one session: {listed}"
    );
    let opened = editor.ok("openSession", json!({"path": file}));
    assert_eq!(opened["sessionId"], sid);
    let out = editor.finish().expect("a process");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "stderr: errors only"
    );

    // Raw bytes: an LSP frame comes back as exactly one LSP frame, an NDJSON line as a line.
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"listSessions","params":{}}"#;
    for (sent, expect_prefix) in [
        (
            format!("Content-Length: {}\r\n\r\n{body}", body.len()),
            "Content-Length: ",
        ),
        (format!("{body}\n"), r#"{"jsonrpc":"2.0","id":7,"#),
    ] {
        let mut child = connect(&env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sent.as_bytes())
            .unwrap();
        let mut got = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut got)
            .unwrap();
        assert!(child.wait().unwrap().success());
        assert!(got.starts_with(expect_prefix), "{sent:?} -> {got:?}");
        let body = match got.split_once("\r\n\r\n") {
            Some((header, body)) => {
                assert_eq!(header, format!("Content-Length: {}", body.len()));
                body.to_owned()
            }
            None => {
                assert!(
                    got.ends_with('\n') && got.matches('\n').count() == 1,
                    "{got:?}"
                );
                got.trim_end().to_owned()
            }
        };
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["result"][0]["sessionId"], sid, "{sent:?} -> {got:?}");
    }
    assert_eq!(
        daemons_on(&sock),
        vec![daemon.id()],
        "no second daemon was started"
    );
    drop(agent);
    let _ = daemon.kill();
    let _ = daemon.wait();
}

#[test]
fn connect_starts_a_detached_daemon_that_outlives_it_and_logs_to_its_file() {
    let env = Env::new();
    let sock = socket(&env);
    let _stop = Stopper(sock.clone());
    assert!(daemons_on(&sock).is_empty());
    let mut editor = Client::process(connect(&env), Framing::Lsp);
    let init = editor.ok(
        "initialize",
        json!({"clientName": "test-editor", "logNotifications": true}),
    );
    assert_eq!(init["serverName"], "compactd");
    // Through the bridge, the daemon's log lines arrive as notifications, tagged INFO (3).
    let file = env.session("005-medium-basic");
    editor.ok("openSession", json!({"path": file}));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen: Vec<Value> = Vec::new();
    while Instant::now() < deadline {
        seen.extend(editor.drain(Duration::from_millis(200)));
        seen.append(&mut editor.notifications);
        if seen.iter().any(|n| {
            n["method"] == "window/logMessage"
                && n["params"]["type"] == 3
                && n["params"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("session opened")
        }) {
            break;
        }
    }
    assert!(
        seen.iter().any(|n| n["method"] == "window/logMessage"
            && n["params"]["type"] == 3
            && n["params"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("session opened")),
        "an INFO log line through the bridge: {seen:?}"
    );
    let out = editor.finish().expect("a process");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "nothing on stderr"
    );

    let log = env.log_text();
    let pids = started_pids(&log);
    assert_eq!(pids.len(), 1, "one daemon started:\n{log}");
    // The starter is gone; the daemon still answers, in a session of its own.
    assert_eq!(daemons_on(&sock), pids);
    assert_ne!(
        session_of(pids[0]),
        session_of(std::process::id()),
        "setsid'd"
    );
    let mut later = Client::socket(&sock, Framing::Ndjson);
    assert_eq!(later.ok("listSessions", json!({})), json!([]));
    drop(later);
    // Both the bridge and the daemon logged to the file (INFO lines are not on any stderr).
    assert!(log.contains("listening"), "{log}");
    assert!(log.contains("bridging stdio to the daemon"), "{log}");
    assert!(
        env.log_text().contains("client initialized"),
        "{}",
        env.log_text()
    );
    // Joining now starts nothing.
    let out = env.command("start").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("compactd is running on "));
    assert_eq!(started_pids(&env.log_text()), pids);
    stop(&pids);
    assert!(daemons_on(&sock).is_empty());
}

#[test]
fn racing_starters_end_with_exactly_one_daemon() {
    let env = Env::new();
    let sock = socket(&env);
    let _stop = Stopper(sock.clone());
    let file = env.session("005-medium-basic");
    // Two editors and two `start`s at the same moment, no daemon yet.
    let editors: Vec<_> = (0..2)
        .map(|_| Client::process(connect(&env), Framing::Lsp))
        .collect();
    let starts: Vec<_> = (0..2)
        .map(|_| env.command("start").stdout(Stdio::piped()).spawn().unwrap())
        .collect();
    let mut ids = Vec::new();
    for mut e in editors {
        ids.push(e.ok("openSession", json!({"path": file}))["sessionId"].clone());
        // Still holding it: the other editor's openSession got the same session.
        ids.push(e.ok("listSessions", json!({}))[0]["sessionId"].clone());
        let out = e.finish().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let mut said = String::new();
    for s in starts {
        let out = s.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        said.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    let log = env.log_text();
    // A winning `connect` logs the start; a winning `start` says it on stdout.
    let mut pids = started_pids(&log);
    pids.extend(said.lines().filter_map(|l| {
        l.strip_prefix("compactd started (pid ")?
            .split(')')
            .next()?
            .parse::<u32>()
            .ok()
    }));
    assert_eq!(
        pids.len(),
        1,
        "exactly one starter started a daemon:\n{log}\n{said}"
    );
    assert_eq!(daemons_on(&sock), pids, "and exactly one runs");
    assert_eq!(said.lines().count(), 2, "{said}");
    assert!(ids.iter().all(|i| i.is_string()), "{ids:?}");
}

#[test]
fn a_daemon_that_cannot_start_is_a_clear_error_on_stderr() {
    let env = Env::new();
    // A socket directory that is a file: `serve` refuses it, and so does the starter.
    let blocker = env.path("blocker");
    std::fs::write(&blocker, "not a directory").unwrap();
    let out = env
        .command("connect")
        .arg("--socket")
        .arg(blocker.join("compactd.sock"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("compactd: ") && err.contains("blocker"),
        "{err}"
    );

    // A daemon that exits at once (here: a regular file where the socket goes, which `serve`
    // never deletes) is reported with where its messages are.
    let sock = socket(&env);
    std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
    std::fs::set_permissions(
        sock.parent().unwrap(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    std::fs::write(&sock, "a file").unwrap();
    let out = env.command("start").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exited") && err.contains("before listening"),
        "{err}"
    );
    assert!(err.contains(&env.log_file().display().to_string()), "{err}");
    assert!(
        env.log_text().contains("is not a socket"),
        "{}",
        env.log_text()
    );
    assert_eq!(
        std::fs::read_to_string(&sock).unwrap(),
        "a file",
        "left alone"
    );
}

/// Waits (with a deadline) for `child` to exit; its exit status.
fn exit_status_within(
    child: &mut std::process::Child,
    limit: Duration,
) -> std::process::ExitStatus {
    let mut status = None;
    support::wait_until(limit, "connect exits", || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    status.expect("exited")
}

/// `connect` used to exit 0 when the daemon it bridged to died, exactly as when its editor
/// closed stdin, so an editor took a crashed daemon for a normal shutdown. Now a daemon that
/// goes away under an open input (killed, or stopped) is exit 1 with a message on stderr; the
/// normal end stays exit 0.
#[test]
fn connect_exits_non_zero_when_its_daemon_dies() {
    for signal in [libc::SIGKILL, libc::SIGTERM] {
        let env = Env::new();
        let sock = socket(&env);
        let _stop = Stopper(sock.clone());
        let mut daemon = env.serve_ready(&sock, &[], Stdio::null());
        let mut editor = connect(&env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = editor.stdin.take().unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"listSessions","params":{}}"#;
        stdin.write_all(format!("{body}\n").as_bytes()).unwrap();
        // The bridge is up once the daemon's answer came through it.
        let mut stdout = std::io::BufReader::new(editor.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        assert!(line.starts_with(r#"{"jsonrpc":"2.0","id":1,"#), "{line}");
        // SAFETY: plain kill(2) of the daemon this test spawned.
        unsafe {
            libc::kill(daemon.id() as i32, signal);
        }
        let _ = daemon.wait();
        let status = exit_status_within(&mut editor, Duration::from_secs(20));
        let mut err = String::new();
        editor
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(1), "signal {signal}: stderr {err:?}");
        assert!(
            err.starts_with("compactd: ") && err.contains("the daemon"),
            "signal {signal}: {err:?}"
        );
        drop(stdin);
    }

    // The normal end: the editor closes its input, the daemon answers and stays up.
    let env = Env::new();
    let sock = socket(&env);
    let _stop = Stopper(sock.clone());
    let mut daemon = env.serve_ready(&sock, &[], Stdio::null());
    let mut editor = connect(&env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"listSessions","params":{}}"#;
    editor
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{body}\n").as_bytes())
        .unwrap();
    let out = editor.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(r#"{"jsonrpc":"2.0","id":1,"#));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let _ = daemon.kill();
    let _ = daemon.wait();
}

/// A daemon another user runs is never joined, even on a socket path given explicitly in a
/// directory both may use (root-owned, sticky, world-writable): `connect`, `start`, `top --once`
/// and `mcp`'s link refuse it by the peer's credentials and say so, and nothing is bridged.
/// Runs the other user's daemon with `runuser` (root only: skipped elsewhere, a failure under
/// CI=true, which runs as root).
#[test]
fn a_daemon_of_another_user_is_never_joined() {
    let other = match support::other_user::start() {
        Ok(other) => other,
        Err(why) => return support::skip_or_fail("a_daemon_of_another_user_is_never_joined", &why),
    };
    let socket = &other.socket;
    let env = Env::new();
    for args in [
        vec!["connect", "--socket"],
        vec!["start", "--socket"],
        vec!["top", "--once", "--socket"],
    ] {
        let mut cmd = env.command(args[0]);
        let out = cmd
            .args(&args[1..])
            .arg(socket)
            .stdin(Stdio::null())
            .output()
            .expect("run compactd");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{args:?} joined another user's daemon: {err}"
        );
        assert!(
            err.contains("runs as uid") && err.contains("not as this user"),
            "{args:?} says why: {err}"
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?} bridged nothing: {:?}",
            out.stdout
        );
    }
}

/// A daemon's lifecycle as gopls users know it: one started on demand (`start`) exits once it
/// has had no client and no session for `idle_exit_seconds`, but not while a client holds it;
/// `status` shows the running daemon (pid, sessions, clients, the files it uses); `stop` ends
/// one started by hand, which otherwise stays.
#[test]
fn an_on_demand_daemon_leaves_when_idle_and_status_and_stop_work() {
    let env = Env::new();
    env.write_config("idle_exit_seconds = 2\n");
    let socket = socket(&env);
    let started = env
        .command("start")
        .arg("--socket")
        .arg(&socket)
        .output()
        .expect("start");
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let pids = daemons_on(&socket);
    assert_eq!(pids.len(), 1, "one daemon started");
    // A client with a session keeps it.
    let stream = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    let held = stream.try_clone().expect("clone");
    let mut c = Client::over(stream, Framing::Ndjson);
    let path = env.session("005-medium-basic");
    support::daemon_env::open(&mut c, &path);
    let status = env
        .command("status")
        .arg("--socket")
        .arg(&socket)
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}");
    for want in [
        format!("pid: {}", pids[0]),
        "sessions open: 1".into(),
        "clients: 1".into(),
        "exits after 2s".into(),
        format!("log: {}", env.path("state/compactd/compactd.log").display()),
    ] {
        assert!(text.contains(&want), "{want:?} in {text}");
    }
    std::thread::sleep(Duration::from_secs(3)); // the behaviour under test: idle time passing
    assert_eq!(daemons_on(&socket), pids, "a held daemon stays");
    held.shutdown(std::net::Shutdown::Both)
        .expect("close the client");
    drop(c);
    support::wait_until(Duration::from_secs(15), "the idle daemon exits", || {
        daemons_on(&socket).is_empty()
    });
    let none = env
        .command("status")
        .arg("--socket")
        .arg(&socket)
        .output()
        .expect("status");
    assert_eq!(none.status.code(), Some(1), "no daemon: exit 1");
    assert!(String::from_utf8_lossy(&none.stderr).contains("no daemon answers"));

    // One started by hand has no idle exit, and `stop` ends it.
    let hand = env.path("run/hand.sock");
    let _serve = env.serve_ready(&hand, &[], Stdio::null());
    let status = env
        .command("status")
        .arg("--socket")
        .arg(&hand)
        .output()
        .expect("status");
    assert!(String::from_utf8_lossy(&status.stdout).contains("stays until stopped"));
    let stop = env
        .command("stop")
        .arg("--socket")
        .arg(&hand)
        .output()
        .expect("stop");
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert!(String::from_utf8_lossy(&stop.stdout).contains("stopped the daemon"));
    assert!(daemons_on(&hand).is_empty(), "gone when stop returns");
    let again = env
        .command("stop")
        .arg("--socket")
        .arg(&hand)
        .output()
        .expect("stop");
    assert!(again.status.success(), "nothing running is no error");
}
