//! The transport under hostile or careless clients, against the real binary: lying
//! `Content-Length` headers, clients that never read, too many requests or connections, huge
//! frames from many clients at once, file-descriptor exhaustion, and the socket's surroundings
//! (directory ownership and mode, a regular file where the socket should be).

mod support;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{keep_recent, park_compactions, wait_for_socket, Env, KillOnDrop};
use support::rpc_client::{Client, Framing};
use support::{settled_rss_kib, unread_by_peer, wait_for, wait_until, NotYet};

const LONG: Duration = Duration::from_secs(60);

/// `compactd serve` on `socket` with `extra` flags, its stderr in `log`, once it listens.
fn serve(env: &Env, socket: &Path, extra: &[&str], log: &Path) -> KillOnDrop {
    let log = File::create(log).expect("log file");
    env.serve_ready(socket, extra, Stdio::from(log))
}

fn stop(child: KillOnDrop) {
    drop(child);
}

fn lsp(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// Reads LSP frames until EOF.
fn read_lsp_all(r: impl Read) -> Vec<Value> {
    let mut r = BufReader::new(r);
    let mut out = Vec::new();
    loop {
        let mut len = None;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return out;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some(v) = h.strip_prefix("Content-Length:") {
                len = v.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0u8; len.expect("length")];
        r.read_exact(&mut body).unwrap();
        out.push(serde_json::from_slice(&body).unwrap());
    }
}

#[test]
fn a_content_length_over_the_limit_is_refused_and_the_connection_closed() {
    let env = Env::new();
    let mut child = KillOnDrop(
        env.command("stdio")
            .args(["--max-frame", "100000"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.stdin.take().unwrap();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#;
    stdin.write_all(&lsp(init)).unwrap();
    stdin
        .write_all(b"Content-Length: 18446744073709551615\r\n\r\n")
        .unwrap();
    // Would have been swallowed as part of the "body"; now it is never read.
    stdin
        .write_all(&lsp(r#"{"jsonrpc":"2.0","id":2,"method":"listSessions"}"#))
        .unwrap();
    stdin.flush().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || read_lsp_all(stdout));
    let status = wait_for(Duration::from_secs(20), "the connection is closed", || {
        child.try_wait().unwrap().ok_or_default()
    });
    drop(stdin);
    assert!(status.success());
    let replies = reader.join().unwrap();
    assert_eq!(replies.len(), 2, "{replies:?}");
    assert_eq!(replies[0]["id"], 1);
    let e = &replies[1]["error"];
    assert_eq!(e["code"], -32600);
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("18446744073709551615") && m.contains("100000") && m.contains("closing"),
        "{m}"
    );
}

#[test]
fn a_short_content_length_gives_a_parse_error_and_the_stream_resynchronises() {
    let env = Env::new();
    let mut child = env.spawn_stdio(Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let first = r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#;
    // The header claims 20 bytes of a 46-byte body.
    stdin
        .write_all(format!("Content-Length: 20\r\n\r\n{first}").as_bytes())
        .unwrap();
    stdin
        .write_all(&lsp(r#"{"jsonrpc":"2.0","id":2,"method":"listSessions"}"#))
        .unwrap();
    drop(stdin);
    let replies = read_lsp_all(child.stdout.take().unwrap());
    assert!(child.wait().unwrap().success());
    assert_eq!(replies[0]["error"]["code"], -32700, "{replies:?}");
    let last = replies.last().unwrap();
    assert_eq!(
        (last["id"].clone(), last["result"].clone()),
        (json!(2), json!([])),
        "the next frame is answered: {replies:?}"
    );
}

#[test]
fn a_client_that_never_reads_cannot_grow_the_daemons_memory() {
    let env = Env::new();
    let file = env.session("037-large-200k");
    let socket = env.path("run/d.sock");
    let daemon = serve(
        &env,
        &socket,
        &["--max-queued-bytes", "2000000"],
        &env.path("log"),
    );
    let mut c = Client::socket(&socket, Framing::Ndjson);
    let sid = c.ok("openSession", json!({"path": file}))["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let branch_bytes = c
        .ok("getBranch", json!({"sessionId": sid}))
        .to_string()
        .len();
    assert!(branch_bytes > 500_000, "a big reply: {branch_bytes}");
    let base = settled_rss_kib(daemon.id(), Duration::from_millis(50), LONG);
    // A raw connection that sends 120 getBranch requests and reads nothing.
    let mut raw = UnixStream::connect(&socket).unwrap();
    raw.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut sent = 0;
    for i in 0..120 {
        let line = json!({"jsonrpc":"2.0","id":i,"method":"getBranch","params":{"sessionId":sid}})
            .to_string()
            + "\n";
        if raw.write_all(line.as_bytes()).is_err() {
            break; // the daemon stopped reading: backpressure reached the client
        }
        sent += 1;
    }
    // Once the daemon stopped reading this client, what it holds no longer changes.
    let grown = settled_rss_kib(daemon.id(), Duration::from_millis(500), LONG).saturating_sub(base);
    // Unbounded, 120 queued replies of ~1 MB each took well over 120 MB.
    assert!(
        grown < 60_000,
        "daemon RSS grew by {grown} KiB with {sent} unread replies"
    );
    // Nothing is lost: reading now drains every reply.
    raw.set_read_timeout(Some(LONG)).unwrap();
    let mut r = BufReader::new(raw.try_clone().unwrap());
    let writer = std::thread::spawn(move || {
        for i in sent..120 {
            let line =
                json!({"jsonrpc":"2.0","id":i,"method":"getBranch","params":{"sessionId":sid}})
                    .to_string()
                    + "\n";
            raw.set_write_timeout(None).unwrap();
            raw.write_all(line.as_bytes()).unwrap();
        }
    });
    let mut answered = 0;
    let mut line = String::new();
    while answered < 120 {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0);
        let v: Value = serde_json::from_str(&line).unwrap();
        assert!(v["result"].is_array());
        answered += 1;
    }
    writer.join().unwrap();
    stop(daemon);
}

#[test]
fn slow_requests_past_the_in_flight_limit_are_refused_clearly() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let socket = env.path("run/d.sock");
    let daemon = serve(&env, &socket, &["--max-in-flight", "1"], &env.path("log"));
    let mut c = Client::socket(&socket, Framing::Ndjson);
    let (sid, first) = park_a_compaction(&mut c, &file, 600_000);
    let e = c
        .request(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "postRun"}),
        )
        .unwrap_err();
    assert_eq!(e["code"], -32040);
    assert_eq!(e["data"]["kind"], "overloaded");
    assert!(e["message"].as_str().unwrap().contains("limit 1"), "{e}");
    // Fast requests still work meanwhile.
    assert!(c.ok("listSessions", json!({})).is_array());
    c.ok("abortCompaction", json!({"sessionId": sid}));
    assert_eq!(c.wait(first, LONG).unwrap_err()["code"], -32012);
    stop(daemon);
}

#[test]
fn many_clients_sending_huge_frames_share_one_buffer_budget() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = serve(
        &env,
        &socket,
        &["--max-buffered-bytes", "1000000"],
        &env.path("log"),
    );
    let pad = "x".repeat(700_000);
    let body = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"clientName":"{pad}"}}}}"#
        )
    };
    let mut a = UnixStream::connect(&socket).unwrap();
    let mut b = UnixStream::connect(&socket).unwrap();
    a.write_all(body(1).as_bytes()).unwrap(); // no newline yet: held in the budget
    wait_until(LONG, "the daemon read a's unfinished frame", || {
        unread_by_peer(&a) == 0
    });
    b.write_all(body(2).as_bytes()).unwrap();
    b.write_all(b"\n").unwrap();
    b.set_read_timeout(Some(LONG)).unwrap();
    let mut line = String::new();
    BufReader::new(b.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1000000 bytes of incoming frames"),
        "{v}"
    );
    // The first frame completes normally.
    a.write_all(b"\n").unwrap();
    a.set_read_timeout(Some(LONG)).unwrap();
    let mut line = String::new();
    BufReader::new(a.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["result"]["serverName"], "compactd", "{v}");
    // And b, now that the budget is free, is served too.
    b.write_all(format!("{}\n", body(3)).as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(b).read_line(&mut line).unwrap();
    assert!(line.contains("serverName"), "{line}");
    stop(daemon);
}

#[test]
fn connections_past_the_limit_are_refused_with_a_reason() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = serve(&env, &socket, &["--max-connections", "2"], &env.path("log"));
    // A served connection. The readiness probe's connection may still hold a slot for a moment
    // on a loaded machine (then this one is refused): connect again until one is served.
    let hold = || {
        wait_for(LONG, "a connection is served", || {
            let mut s = UnixStream::connect(&socket).unwrap();
            let mut line = String::new();
            let sent = s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\n");
            if sent.is_ok() {
                let _ = BufReader::new(s.try_clone().unwrap()).read_line(&mut line);
            }
            line.contains("serverName").then_some(s).ok_or(line)
        })
    };
    let a = hold();
    let _b = hold();
    let c = UnixStream::connect(&socket).unwrap();
    c.set_read_timeout(Some(LONG)).unwrap();
    let mut text = String::new();
    BufReader::new(c).read_to_string(&mut text).unwrap();
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["error"]["data"]["kind"], "overloaded");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("limit of 2 connections"));
    drop(a);
    // Once a slot is free, a new client is served.
    wait_until(LONG, "a new client is served", || {
        initialize_raw(&socket).contains("serverName")
    });
    stop(daemon);
}

/// One `initialize` on a fresh connection; returns the reply line (empty on failure).
fn initialize_raw(socket: &Path) -> String {
    let Ok(mut s) = UnixStream::connect(socket) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\"}\n");
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn running_out_of_file_descriptors_backs_off_instead_of_spinning() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let log = env.path("log");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -n 64 && exec \"{}\" serve --socket \"{}\"",
            env!("CARGO_BIN_EXE_compactd"),
            socket.display()
        ))
        .env("XDG_CONFIG_HOME", env.path("config"))
        .env("PI_CODING_AGENT_DIR", env.path("agent"))
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap());
    let daemon = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    // Hold more connections than the daemon has descriptors for.
    let held: Vec<UnixStream> = (0..100)
        .filter_map(|_| UnixStream::connect(&socket).ok())
        .collect();
    wait_until(LONG, "the daemon ran out of descriptors", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("accept failed"))
    });
    let t0 = cpu_ticks(daemon.id());
    // The behaviour under test: the CPU the daemon uses over a fixed interval while out of
    // descriptors (a spinning accept loop would take the whole of it).
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(daemon.id()) - t0;
    let text = std::fs::read_to_string(&log).unwrap();
    let lines = text.matches("accept failed").count();
    assert!(lines >= 1, "the exhaustion is logged:\n{text}");
    assert!(lines <= 3, "logged once per interval, not {lines} times");
    // Spinning took a whole core (200 ticks in 2 s); backing off takes almost nothing.
    assert!(used < 40, "{used} CPU ticks in 2 s");
    drop(held);
    // Once descriptors are free again, clients are served.
    wait_until(LONG, "a new client is served", || {
        initialize_raw(&socket).contains("serverName")
    });
    stop(daemon);
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn the_socket_directory_is_never_chmodded_and_only_stale_sockets_are_removed() {
    let env = Env::new();
    // An existing, shared-readable directory keeps its mode.
    let dir = env.path("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.join("d.sock");
    let daemon = serve(&env, &socket, &[], &env.path("log"));
    assert_eq!(
        mode(&dir),
        0o755,
        "the daemon did not create it, so it keeps its mode"
    );
    assert_eq!(mode(&socket), 0o600);
    stop(daemon);
    // The killed daemon left a stale socket: it is replaced.
    assert!(socket.exists());
    let daemon = serve(&env, &socket, &[], &env.path("log2"));
    stop(daemon);
    // A regular file where the socket should be is refused and left alone.
    let file = dir.join("notes.txt");
    std::fs::write(&file, "precious").unwrap();
    let out = env
        .command("serve")
        .arg("--socket")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    // A directory others may write into (not sticky) is refused.
    let open = env.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = env
        .command("serve")
        .arg("--socket")
        .arg(open.join("d.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lets other users"));
    assert_eq!(mode(&open), 0o777);
}

#[test]
fn the_default_socket_directory_is_created_private_or_verified() {
    let env = Env::new();
    let runtime = env.path("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let private = runtime.join("compactd");
    let serve = || {
        KillOnDrop(
            env.command("serve")
                .env("COMPACTD_RUNTIME_DIR", &runtime)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    };
    // Missing: created 0700.
    let daemon = serve();
    wait_for_socket(&private.join("compactd.sock"));
    assert_eq!(mode(&private), 0o700);
    stop(daemon);
    // Pre-created by someone with a permissive mode: refused with the reason, not chmodded.
    std::fs::remove_dir_all(&private).unwrap();
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = serve().wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mode 0755"), "{err}");
    assert_eq!(mode(&private), 0o755);
    // Owned by another user (checkable only as root, who can chown).
    if uid == 0 {
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&private, Some(65534), None).unwrap();
        let out = serve().wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
}

/// [`park_compactions`] on `c`, then starts `compact` and returns once the hook was asked (the
/// compaction is then parked in the hook).
fn park_a_compaction(c: &mut Client, file: &Path, hook_timeout_ms: u64) -> (String, u64) {
    let (sid, asked) = park_compactions(c, file, hook_timeout_ms);
    let first = c.send("compact", json!({"sessionId": sid}));
    wait_until(LONG, "the hook is asked", || asked.load(Ordering::SeqCst));
    (sid, first)
}

/// `--max-in-flight` used to count only slow requests with ids: slow methods sent as
/// notifications, or wrapped in one-element batches, each started a task with no limit (every
/// `checkCompaction` of a session waits for its running compaction, so they pile up). Now all
/// three count: past the limit a notification is dropped (logged), a batch's requests answer
/// `overloaded`, and so does the next slow request.
#[test]
fn the_in_flight_limit_holds_for_notifications_and_batches() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let socket = env.path("run/d.sock");
    let daemon = serve(&env, &socket, &["--max-in-flight", "3"], &env.path("log"));
    let mut c = Client::socket(&socket, Framing::Ndjson);
    let (sid, first) = park_a_compaction(&mut c, &file, 60_000);
    let check = json!({"sessionId": sid, "phase": "postRun"});
    for _ in 0..20 {
        c.notify("checkCompaction", check.clone());
    }
    let mut batch_ids = Vec::new();
    for i in 0..5u64 {
        let id = 500 + i;
        batch_ids.push(id);
        c.send_value(&json!([{"jsonrpc":"2.0","id":id,"method":"checkCompaction","params":check}]));
    }
    // Every batch past the limit is answered at once, as an array of `overloaded` errors.
    let mut overloaded = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while overloaded < 5 && Instant::now() < deadline {
        let Some(v) = c.next_raw(Duration::from_millis(200)) else {
            continue;
        };
        if let Some(items) = v.as_array() {
            for item in items {
                assert_eq!(item["error"]["data"]["kind"], "overloaded", "{item}");
                assert!(batch_ids.contains(&item["id"].as_u64().unwrap()));
                overloaded += 1;
            }
        }
    }
    assert_eq!(
        overloaded, 5,
        "every batch past the limit answered overloaded"
    );
    let e = c
        .request("checkCompaction", check.clone())
        .expect_err("the limit is reached");
    assert_eq!(e["data"]["kind"], "overloaded", "{e}");
    assert!(c.ok("listSessions", json!({})).is_array());
    c.ok("abortCompaction", json!({"sessionId": sid}));
    assert_eq!(c.wait(first, LONG).unwrap_err()["code"], -32012);
    // Once the parked work ends the slots are free again.
    wait_for(LONG, "the slots are free again", || {
        match c.request("checkCompaction", check.clone()) {
            Ok(_) => Ok(()),
            Err(e) if e["data"]["kind"] == "overloaded" => Err(e.to_string()),
            Err(e) => panic!("{e}"),
        }
    });
    stop(daemon);
}

/// An LSP header announcing a large body used to reserve that many bytes of the daemon-wide
/// budget (and allocate them) before a byte of the body arrived: one stalled header-only frame
/// of the budget's size locked every other client out (`Busy`). Now the budget is charged as
/// the bytes arrive.
#[test]
fn header_only_lsp_frames_reserve_no_budget() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = serve(
        &env,
        &socket,
        &["--max-buffered-bytes", "1000000", "--max-frame", "1000000"],
        &env.path("log"),
    );
    let mut stalled = Vec::new();
    for _ in 0..3 {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.write_all(b"Content-Length: 1000000\r\n\r\n{").unwrap();
        stalled.push(s);
    }
    wait_until(LONG, "the daemon read every stalled header", || {
        stalled.iter().all(|s| unread_by_peer(s) == 0)
    });
    let mut s = UnixStream::connect(&socket).unwrap();
    s.write_all(&lsp(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
    ))
    .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    s.set_read_timeout(Some(LONG)).unwrap();
    let replies = read_lsp_all(s);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(
        replies[0]["result"]["serverName"], "compactd",
        "{:?}",
        replies[0]
    );
    drop(stalled);
    stop(daemon);
}

/// Slowloris: connections that send half a frame and stall used to hold their connection slot
/// forever, so `--max-connections` of them locked every new client out. Now a started frame
/// that gets no byte for `--frame-idle-timeout-ms` closes its connection (an idle connection
/// between frames is kept).
#[test]
fn half_frames_that_stall_are_closed_after_the_idle_timeout() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = serve(
        &env,
        &socket,
        &["--max-connections", "6", "--frame-idle-timeout-ms", "500"],
        &env.path("log"),
    );
    // An idle connection with a whole frame behind it, kept.
    let mut idle = Client::socket(&socket, Framing::Ndjson);
    idle.ok("initialize", json!({}));
    let mut lorises = Vec::new();
    for i in 0..5 {
        let half: &[u8] = if i % 2 == 0 {
            b"{\"jsonrpc\":\"2.0\",\"id\":1,"
        } else {
            b"Content-Length: 100\r\n\r\n{\"json"
        };
        // The readiness probe's connection may still hold a slot for a moment on a loaded
        // machine (the daemon then refuses and closes): connect again until one is taken.
        let s = stalled_half_frame(&socket, half);
        lorises.push(s);
    }
    // The stalled ones are closed after the idle timeout (500 ms; read_to_end ends at the
    // daemon's close, and fails if that takes longer than 5 s).
    for mut s in lorises {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let end = s.read_to_end(&mut rest);
        assert!(
            end.is_ok(),
            "the daemon closed the stalled connection: {end:?}"
        );
    }
    // Their slots are free again (a connection's slot is released as its task ends, just
    // after the close): a new client is served.
    wait_until(LONG, "a slot is free for a new client", || {
        initialize_raw(&socket).contains("serverName")
    });
    let mut fresh = Client::socket(&socket, Framing::Ndjson);
    let r = fresh.request("initialize", json!({}));
    assert!(r.is_ok(), "a new client is served: {r:?}");
    assert!(
        idle.request("initialize", json!({})).is_ok(),
        "the idle client is kept"
    );
    let log = std::fs::read_to_string(env.path("log")).unwrap_or_default();
    assert!(log.contains("got no byte for 500 ms"), "logged: {log}");
    stop(daemon);
}

/// A client that never reads its replies: the default per-connection queue was 64 MiB, and
/// nothing bounded the sum over connections (256 × 64 MiB). Now the default is 8 MiB and
/// `--max-queued-total-bytes` (default 64 MiB) bounds all connections together.
#[test]
fn unread_replies_are_bounded_per_connection_by_default_and_daemon_wide() {
    let env = Env::new();
    let file = env.session("037-large-200k");
    let grow = |extra: &[&str], clients: usize| -> u64 {
        let socket = env.path("run/q.sock");
        let _ = std::fs::remove_file(&socket);
        let daemon = serve(&env, &socket, extra, &env.path("log"));
        let mut c = Client::socket(&socket, Framing::Ndjson);
        let sid = c.ok("openSession", json!({"path": file}))["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        c.ok("getBranch", json!({"sessionId": sid}));
        let base = settled_rss_kib(daemon.id(), Duration::from_millis(50), LONG);
        let mut raws = Vec::new();
        for _ in 0..clients {
            let mut raw = UnixStream::connect(&socket).unwrap();
            raw.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
            for i in 0..120 {
                let line =
                    json!({"jsonrpc":"2.0","id":i,"method":"getBranch","params":{"sessionId":sid}})
                        .to_string()
                        + "\n";
                if raw.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
            raws.push(raw);
        }
        // Replies of a debug build take a while each: wait until the daemon stops growing
        // (it has stopped reading these clients).
        let last = settled_rss_kib(daemon.id(), Duration::from_millis(500), LONG);
        let grown = last.saturating_sub(base);
        drop(raws);
        stop(daemon);
        grown
    };
    let one = grow(&[], 1);
    assert!(
        one < 40_000,
        "one client that never reads grew the daemon by {one} KiB under the defaults"
    );
    let many = grow(
        &[
            "--max-queued-bytes",
            "30000000",
            "--max-queued-total-bytes",
            "8000000",
        ],
        4,
    );
    println!(
        "unread replies: one client +{one} KiB (defaults), four clients +{many} KiB (8 MB total)"
    );
    assert!(
        many < 50_000,
        "four clients that never read grew the daemon by {many} KiB under an 8 MB total"
    );
}

/// `registerHooks.timeoutMs` had no cap: a hook registered for every session that never answers
/// stalled every client's compactions for as long as it asked. Now `[limits]
/// max_hook_timeout_ms` caps it (default 120000 ms).
#[test]
fn hook_timeouts_are_capped_by_the_configuration() {
    let env = Env::new();
    env.write_config("[limits]\nmax_hook_timeout_ms = 1000\n");
    let file = env.session("009-bash-executions");
    let socket = env.path("run/d.sock");
    let daemon = serve(&env, &socket, &[], &env.path("log"));
    let mut hog = Client::socket(&socket, Framing::Ndjson);
    hog.on_request(|_, _| None);
    hog.ok(
        "registerHooks",
        json!({"hooks": ["session_before_compact"], "timeoutMs": 3_600_000u64}),
    );
    let mut other = Client::socket(&socket, Framing::Ndjson);
    let sid = other.ok("openSession", json!({"path": file}))["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    keep_recent(&mut other, &sid, 2000);
    let started = Instant::now();
    let id = other.send("compact", json!({"sessionId": sid}));
    let r = other.wait(id, Duration::from_secs(30));
    assert!(r.is_ok(), "compacted without the hook: {r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited {:?}",
        started.elapsed()
    );
    env.remove_config();
    stop(daemon);
}

/// Connects and sends `half` a frame; returns the stream once the daemon took it in (its
/// bytes read and the connection not refused), retrying while a slot is still held by a
/// connection that just closed.
fn stalled_half_frame(socket: &Path, half: &[u8]) -> UnixStream {
    wait_for(
        Duration::from_secs(10),
        "a slot for a stalled connection",
        || {
            let mut s = UnixStream::connect(socket).unwrap();
            if s.write_all(half).is_ok() {
                // Taken in (read) or refused (closed, the refusal written first): either way the
                // daemon no longer holds our bytes unread.
                wait_until(LONG, "the daemon took or refused the half frame", || {
                    unread_by_peer(&s) == 0
                });
                if still_open(&s) {
                    return Ok(s);
                }
            }
            Err(String::new())
        },
    )
}

/// Whether the daemon keeps `s` open with nothing written to it (a read would block).
fn still_open(s: &UnixStream) -> bool {
    let mut probe = [0u8; 1];
    s.set_nonblocking(true).unwrap();
    let r = (&*s).read(&mut probe);
    s.set_nonblocking(false).unwrap();
    matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Connections that each send half a frame and stall filled `--max-connections` for the whole
/// idle timeout (30 s by default), and every new client was refused until then. Now, at the
/// limit, the connection whose partial request is oldest is closed and the new client served
/// within 2 s; a connection idle between frames is never chosen.
#[test]
fn at_the_connection_limit_the_oldest_half_frame_makes_room() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = serve(
        &env,
        &socket,
        &[
            "--max-connections",
            "4",
            "--frame-idle-timeout-ms",
            "60000",
            "--frame-timeout-ms",
            "60000",
        ],
        &env.path("log"),
    );
    // An idle connection with a whole frame behind it, never chosen.
    let mut idle = Client::socket(&socket, Framing::Ndjson);
    idle.ok("initialize", json!({}));
    let lorises: Vec<UnixStream> = [
        b"{\"jsonrpc\":\"2.0\",\"id\":1,".as_slice(),
        b"Content-Length: 100\r\n\r\n{\"json",
        b"Content-Length: 10",
    ]
    .into_iter()
    .map(|half| stalled_half_frame(&socket, half))
    .collect();
    assert!(lorises.iter().all(still_open), "every slot is taken");

    let started = Instant::now();
    let mut reply = String::new();
    while started.elapsed() < Duration::from_secs(2) && !reply.contains("serverName") {
        reply = initialize_raw(&socket);
        if !reply.contains("serverName") {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let log = || std::fs::read_to_string(env.path("log")).unwrap_or_default();
    assert!(
        reply.contains("serverName"),
        "a new client is served within 2 s at the limit: {reply:?}; log: {}",
        log()
    );
    // The first half frame, the oldest, was closed; the others are kept.
    let mut first = lorises.into_iter();
    let mut oldest = first.next().unwrap();
    oldest
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    let end = oldest.read_to_end(&mut rest);
    assert!(
        end.is_ok(),
        "the oldest half frame's connection was closed: {end:?}; log: {}",
        log()
    );
    let kept: Vec<UnixStream> = first.collect();
    assert!(kept.iter().all(still_open), "the others are kept");
    assert!(
        idle.request("initialize", json!({})).is_ok(),
        "the idle client is kept"
    );
    // Log lines are written by a background thread: wait for it.
    wait_until(LONG, "the eviction is logged", || {
        log().contains("closing the connection whose partial request is oldest")
    });
    stop(daemon);
}

/// Sends `frame` a byte every `every` until the daemon closes the connection; returns when
/// that happened (`None`: the frame was all sent).
fn trickle(mut s: UnixStream, frame: &[u8], every: Duration) -> Option<Instant> {
    for b in frame {
        if s.write_all(&[*b]).is_err() || !still_open(&s) {
            return Some(Instant::now());
        }
        std::thread::sleep(every);
    }
    None
}

/// Clients that trickle a byte every 50 ms never stall, and the idle timeout restarted with
/// every byte: at the connection limit, eviction (which looked only for 500 ms of silence)
/// found nothing to close, and they locked every new client out for as long as they kept
/// trickling. Now a request has a time budget from its first byte (`--frame-timeout-ms`) and,
/// at the limit, the connection whose partial request is oldest is closed whatever its byte
/// rate: a new client is served within 2 s, and every trickler is closed once its budget runs
/// out.
#[test]
fn trickling_clients_at_the_connection_limit_cannot_lock_others_out() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let budget = Duration::from_secs(4);
    let daemon = serve(
        &env,
        &socket,
        &[
            "--max-connections",
            "4",
            "--frame-timeout-ms",
            &budget.as_millis().to_string(),
        ],
        &env.path("log"),
    );
    let frame = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"clientName\":\"{}\"}}}}\n",
        "x".repeat(10_000)
    );
    let started = Instant::now();
    let tricklers: Vec<_> = (0..4)
        .map(|_| {
            let s = stalled_half_frame(&socket, b"{");
            let rest = frame.as_bytes()[1..].to_vec();
            std::thread::spawn(move || trickle(s, &rest, Duration::from_millis(50)))
        })
        .collect();
    // Every slot is held by a trickler whose bytes keep coming.
    std::thread::sleep(Duration::from_millis(600));

    let asked = Instant::now();
    let mut reply = String::new();
    while asked.elapsed() < Duration::from_secs(2) && !reply.contains("serverName") {
        reply = initialize_raw(&socket);
    }
    let log = || std::fs::read_to_string(env.path("log")).unwrap_or_default();
    assert!(
        reply.contains("serverName"),
        "a new client is served within 2 s while tricklers hold every slot: {reply:?}; log: {}",
        log()
    );
    // The others run out of budget: each is closed about `budget` after its first byte, not
    // after the 10 s its frame would take, nor the 30 s idle timeout.
    for t in tricklers {
        let closed = t.join().unwrap().expect("the daemon closed the trickler");
        assert!(
            closed.duration_since(started) < budget + Duration::from_secs(3),
            "closed {:?} after the first byte; log: {}",
            closed.duration_since(started),
            log()
        );
    }
    wait_until(LONG, "the budget's end is logged", || {
        log().contains("ms after its first byte")
    });
    stop(daemon);
}
