//! A daemon that accepted connections but never answers (stopped with SIGSTOP: the kernel keeps
//! queueing connections for it; or wedged) against every client of its socket, through the real
//! binary: `status`, `stop`, `doctor`, `top --once`, `connect`, `start` and `mcp` each give up
//! within a bounded time with exit 1 and a message naming the socket and the daemon's pid, and
//! `connect` ends its bridge when the daemon it joined stops answering. Before, each of them
//! waited forever.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::daemon_env::{Env, KillOnDrop};
use support::wait_until;

/// The longest any client may take to give up (their deadlines are 5 to 10 s; the rest is
/// slack for a loaded machine).
const GIVE_UP_WITHIN: Duration = Duration::from_secs(30);

/// A daemon on a socket; resumed (it may have been stopped) and killed when dropped.
struct Daemon {
    child: KillOnDrop,
}

impl Daemon {
    fn running(env: &Env, socket: &Path) -> Daemon {
        Daemon {
            child: env.serve_ready(socket, &[], Stdio::null()),
        }
    }

    fn stopped(env: &Env, socket: &Path) -> Daemon {
        let daemon = Daemon::running(env, socket);
        daemon.stop();
        daemon
    }

    /// SIGSTOP, and waits until every thread has stopped: until then a thread may still
    /// answer a request.
    fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let pid = self.pid();
        wait_until(GIVE_UP_WITHIN, "the daemon has stopped", || {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .expect("the daemon's threads")
                .filter_map(Result::ok)
                .all(|t| {
                    std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
                        stat.rfind(')')
                            .and_then(|i| stat.get(i + 2..i + 3))
                            .is_some_and(|state| state == "T")
                    })
                })
        });
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn signal(&self, signo: i32) {
        // SAFETY: kill(2) on the child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(self.pid() as i32, signo) }, 0);
    }
}

impl Drop for Daemon {
    /// Resumed, so that `KillOnDrop` then kills a running process.
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
    }
}

/// Waits for `child` at most `within`; its output, or a panic naming `what` (after killing it).
fn finish_within(mut child: Child, within: Duration, what: &str) -> (Output, Duration) {
    let started = Instant::now();
    loop {
        if let Some(_status) = child.try_wait().expect("try_wait") {
            return (child.wait_with_output().expect("output"), started.elapsed());
        }
        if started.elapsed() > within {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} still waits on a stopped daemon after {within:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that `out` failed (exit 1) with a message naming the socket and the pid.
fn names_socket_and_pid(what: &str, out: &Output, socket: &Path, pid: u32) {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{what}: {text}");
    assert!(
        text.contains(&socket.display().to_string()) && text.contains(&format!("pid {pid}")),
        "{what} names the socket and the pid: {text}"
    );
    assert!(text.contains("did not answer"), "{what} says why: {text}");
}

fn spawn(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn compactd")
}

#[test]
fn status_stop_doctor_and_top_give_up_on_a_stopped_daemon() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = Daemon::stopped(&env, &socket);
    // All at once: each waits out its own deadline.
    let clients: Vec<(&str, Child)> = [
        ("status", vec![]),
        ("stop", vec![]),
        ("doctor", vec![]),
        ("top", vec!["--once"]),
    ]
    .into_iter()
    .map(|(sub, extra)| {
        let mut cmd = env.command(sub);
        cmd.arg("--socket").arg(&socket).args(extra);
        (sub, spawn(cmd))
    })
    .collect();
    for (sub, child) in clients {
        let (out, _) = finish_within(child, GIVE_UP_WITHIN, sub);
        names_socket_and_pid(sub, &out, &socket, daemon.pid());
    }
}

#[test]
fn connect_start_and_mcp_never_join_a_stopped_daemon() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let session = env.path("s.jsonl");
    std::fs::write(
        &session,
        "{\"type\":\"session\",\"version\":3,\"id\":\"h1\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/tmp\"}\n",
    )
    .unwrap();
    let daemon = Daemon::stopped(&env, &socket);
    let mut connect = env.command("connect");
    connect.arg("--socket").arg(&socket);
    let mut start = env.command("start");
    start.arg("--socket").arg(&socket);
    let mut mcp = env.command("mcp");
    mcp.arg("--session")
        .arg(&session)
        .arg("--socket")
        .arg(&socket);
    // `connect` keeps its input open, as an editor does.
    let connect = connect
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn connect");
    let clients = [
        ("connect", connect),
        ("start", spawn(start)),
        ("mcp", spawn(mcp)),
    ];
    for (sub, child) in clients {
        let (out, _) = finish_within(child, GIVE_UP_WITHIN, sub);
        names_socket_and_pid(sub, &out, &socket, daemon.pid());
    }
}

/// `compactd connect` to the daemon on `socket`, its input kept open as an editor keeps it.
struct Bridge {
    child: Child,
    input: std::process::ChildStdin,
    replies: BufReader<std::process::ChildStdout>,
}

impl Bridge {
    fn start(env: &Env, socket: &Path) -> Bridge {
        let mut child = env
            .command("connect")
            .arg("--socket")
            .arg(socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn connect");
        let input = child.stdin.take().expect("stdin");
        let replies = BufReader::new(child.stdout.take().expect("stdout"));
        Bridge {
            child,
            input,
            replies,
        }
    }

    fn send(&mut self, line: &str) {
        self.input.write_all(line.as_bytes()).unwrap();
        self.input.write_all(b"\n").unwrap();
    }

    /// Sends `initialize` and asserts the daemon answered through the bridge.
    fn initialize(&mut self, id: u64) {
        self.send(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"initialize\",\"params\":{{}}}}"
        ));
        let mut line = String::new();
        self.replies.read_line(&mut line).unwrap();
        assert!(line.contains("serverName"), "bridged and answered: {line}");
    }

    /// Ends the input and waits for the bridge to exit.
    fn finish(self, what: &str) -> Output {
        let Bridge { child, input, .. } = self;
        drop(input);
        finish_within(child, GIVE_UP_WITHIN, what).0
    }
}

#[test]
fn connect_ends_its_bridge_when_the_daemon_it_joined_stops_answering() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = Daemon::running(&env, &socket);
    let mut bridge = Bridge::start(&env, &socket);
    bridge.initialize(1);
    daemon.stop();
    bridge.send("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"listSessions\",\"params\":{}}");
    // The input stays open: the bridge must end on its own.
    let (out, _) = finish_within(bridge.child, GIVE_UP_WITHIN, "connect's bridge");
    names_socket_and_pid("connect's bridge", &out, &socket, daemon.pid());
}

/// A live daemon is never mistaken for a stopped one: a client that sent something and heard
/// nothing back for longer than the bridge's watch period (here a notification nobody
/// answers; a compaction with a slow model is the same silence) keeps its bridge, because the
/// daemon answers the watch's probe meanwhile.
#[test]
fn a_slow_answer_from_a_live_daemon_keeps_the_bridge() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let _daemon = Daemon::running(&env, &socket);
    let mut bridge = Bridge::start(&env, &socket);
    bridge.send("{\"jsonrpc\":\"2.0\",\"method\":\"initialized\",\"params\":{}}");
    // Silence for 8 s, longer than the bridge's 5 s watch.
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        bridge.child.try_wait().unwrap().is_none(),
        "the bridge stays while the daemon answers its probe"
    );
    bridge.initialize(1);
    let out = bridge.finish("connect after its input ended");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
