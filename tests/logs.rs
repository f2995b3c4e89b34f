//! Logs as an operator reads them (issue 35 item 6), through the real binary: every line of a
//! daemon has a timestamp and names its pid and socket (daemons started on demand share one log
//! file), each event is written once (`serve` used to print `listening on` twice, once without
//! a timestamp), and PostgreSQL's `NOTICE: relation … already exists, skipping` never reaches
//! the log when a daemon applies the schema again.

mod support;

use std::io::Read;
use std::process::Stdio;

use support::daemon_env::{Env, KillOnDrop, Stopper};
#[cfg(feature = "postgres")]
use support::postgres::Postgres;
use support::rpc_client::{Client, Framing};

/// Whether `line` starts with an RFC 3339 UTC timestamp (`2026-01-02T03:04:05.678Z`).
fn timestamped(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 20
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[10] == b'T'
        && line.split(' ').next().is_some_and(|t| t.ends_with('Z'))
}

/// Stops a `serve` child with SIGTERM and returns all it wrote on stderr.
fn stop_and_read(mut child: KillOnDrop) -> String {
    // SAFETY: kill(2) on the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        s.read_to_string(&mut err).expect("read stderr");
    }
    child.wait().expect("wait for serve");
    err
}

#[test]
fn serve_writes_each_event_once_with_a_timestamp_pid_and_socket() {
    let env = Env::new();
    let socket = env.path("run/s.sock");
    let child = env.serve_ready(&socket, &[], Stdio::piped());
    let pid = child.id();
    let mut c = Client::socket(&socket, Framing::Ndjson);
    c.ok("initialize", serde_json::json!({"clientName": "logs test"}));
    drop(c);
    // A second daemon on the same socket fails: its error is one timestamped line too.
    let second = env
        .command("serve")
        .arg("--socket")
        .arg(&socket)
        .output()
        .expect("second serve");
    assert_eq!(second.status.code(), Some(1));
    let second_err = String::from_utf8_lossy(&second.stderr);
    let lines: Vec<&str> = second_err.lines().collect();
    assert_eq!(lines.len(), 1, "{second_err}");
    assert!(timestamped(lines[0]), "{second_err}");
    assert!(lines[0].contains("already listening"), "{second_err}");
    assert!(
        lines[0].contains(" pid=") && !lines[0].contains(&format!("pid={} ", child.id())),
        "the second daemon names its own pid: {second_err}"
    );

    let err = stop_and_read(child);
    let tag = format!("pid={pid} socket={}", socket.display());
    assert!(!err.trim().is_empty());
    for line in err.lines() {
        assert!(timestamped(line), "no timestamp: {line:?}\n{err}");
        assert!(line.contains(&tag), "no {tag}: {line:?}");
    }
    let listening = err.lines().filter(|l| l.contains("listening")).count();
    assert_eq!(listening, 1, "the start is logged once:\n{err}");
    assert!(err.contains("client initialized"), "{err}");
}

#[test]
fn daemons_started_on_demand_share_a_log_and_each_line_says_whose() {
    let env = Env::new();
    let sockets = [env.path("run/a/a.sock"), env.path("run/b/b.sock")];
    let _stop = sockets.clone().map(Stopper);
    for s in &sockets {
        let out = env
            .command("start")
            .arg("--socket")
            .arg(s)
            .output()
            .expect("start");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for s in &sockets {
        let out = env
            .command("stop")
            .arg("--socket")
            .arg(s)
            .output()
            .expect("stop");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let log = env.log_text();
    for line in log.lines() {
        assert!(timestamped(line), "no timestamp: {line:?}\n{log}");
    }
    for s in &sockets {
        let tag = format!("socket={} ", s.display());
        let starts = log
            .lines()
            .filter(|l| l.contains(&tag) && l.contains("listening"))
            .count();
        assert_eq!(starts, 1, "{tag} started once, named on its lines:\n{log}");
    }
    assert!(log.lines().all(|l| l.contains(" pid=")), "{log}");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_notices_of_an_existing_schema_stay_out_of_the_log() {
    use std::process::Command;
    use std::time::Duration;
    let Some(pg) = Postgres::start("logs_postgres_notices") else {
        return;
    };
    let env = Env::new();
    env.write_config(&pg.config());
    // The first daemon creates the schema; the second applies it again over existing tables,
    // which the server answers with `already exists, skipping` notices.
    for name in ["one", "two"] {
        let socket = env.path(&format!("run/{name}.sock"));
        let child = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_compactd"))
                .args(["-v", "serve", "--socket"])
                .arg(&socket)
                .envs(env.vars())
                .env_remove("COMPACTD_LOG")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("serve"),
        );
        support::daemon_env::wait_for_socket(&socket);
        let latest = compactd::store::postgres::SCHEMA_VERSION.to_string();
        support::wait_until(Duration::from_secs(20), "the store is ready", || {
            pg.psql("SELECT max(version) FROM compactd_schema") == latest
        });
        let mut c = Client::socket(&socket, Framing::Ndjson);
        c.ok("listStoredSessions", serde_json::json!({}));
        drop(c);
        let err = stop_and_read(child);
        assert!(err.contains("session store ready"), "{err}");
        assert!(
            !err.contains("already exists") && !err.contains("NOTICE"),
            "a notice in the log:\n{err}"
        );
    }
}

/// `compactd mcp`'s log has compactd's own lines, not the MCP library's bookkeeping (whole Rust
/// structs of each handshake) at `info`; `-v` shows those too.
#[test]
fn the_mcp_librarys_lines_are_logged_at_debug_only() {
    use std::io::Write;
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let socket = env.path("run/mcp.sock");
    let _stop = Stopper(socket.clone());
    let handshake = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"logs test","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ];
    let mut runs = Vec::new();
    for verbose in [false, true] {
        let before = env.log_text().len();
        let mut cmd = env.command("mcp");
        if verbose {
            cmd.arg("-v");
        }
        let mut mcp = KillOnDrop(
            cmd.arg("--session")
                .arg(&file)
                .arg("--socket")
                .arg(&socket)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("mcp"),
        );
        let mut stdin = mcp.stdin.take().expect("stdin");
        for line in handshake {
            writeln!(stdin, "{line}").expect("write");
        }
        // The tools' list answers: the whole handshake went through.
        let mut answers = std::io::BufReader::new(mcp.stdout.take().expect("stdout"));
        let mut got = String::new();
        for _ in 0..2 {
            std::io::BufRead::read_line(&mut answers, &mut got).expect("read");
        }
        assert!(got.contains("search_history"), "{got}");
        drop(stdin);
        let _ = mcp.wait();
        runs.push(env.log_text()[before..].to_owned());
    }
    let library = |log: &str| log.lines().filter(|l| l.contains(" rmcp::")).count();
    assert_eq!(library(&runs[0]), 0, "rmcp at info:\n{}", runs[0]);
    assert!(library(&runs[1]) > 0, "-v shows rmcp's lines:\n{}", runs[1]);
}
