//! What editors and shell pipelines hit first, driven against the real binary: end of input as
//! a half-close, empty params in every editor's spelling, field-path error messages, LSP's
//! cancellation code, subscribable advertised events, shutdown on SIGTERM/SIGINT, and the
//! default log output.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{park_compactions, Env};
use support::rpc_client::{Client, Framing};

const LONG: Duration = Duration::from_secs(60);

fn request(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string() + "\n"
}

/// The pipeline of issue 9.1: open, shrink keepRecentTokens so a compaction is possible, compact.
fn pipeline(path: &Path) -> String {
    [
        request(1, "openSession", json!({"path": path})),
        request(
            2,
            "setSettingsOverrides",
            json!({"sessionId": "s1", "compaction": {"keepRecentTokens": 2000}}),
        ),
        request(3, "compact", json!({"sessionId": "s1"})),
        request(4, "getContextUsage", json!({"sessionId": "s1"})),
    ]
    .concat()
}

fn replies(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn reply(all: &[Value], id: u64) -> &Value {
    all.iter()
        .find(|v| v["id"] == json!(id))
        .unwrap_or_else(|| panic!("no reply {id} in {all:?}"))
}

fn compactions(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"type\":\"compaction\""))
        .count()
}

#[test]
fn end_of_input_over_stdio_finishes_every_request_already_received() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let mut child = env.spawn_stdio(Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(pipeline(&file).as_bytes()).unwrap();
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    let all = replies(&out);
    let compact = reply(&all, 3);
    assert!(
        compact["result"]["summary"].is_string(),
        "compact answered after end of input: {compact}"
    );
    assert!(reply(&all, 4).get("result").is_some());
    assert_eq!(compactions(&file), 1, "the compaction entry was written");
}

#[test]
fn a_socket_half_close_still_gets_every_reply() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let socket = env.path("run/d.sock");
    let mut daemon = env.serve_ready(&socket, &[], Stdio::piped());
    let mut s = UnixStream::connect(&socket).unwrap();
    s.write_all(pipeline(&file).as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.set_read_timeout(Some(LONG)).unwrap();
    s.read_to_string(&mut out).unwrap();
    let all = replies(&out);
    assert!(reply(&all, 3)["result"]["summary"].is_string(), "{all:?}");
    assert_eq!(compactions(&file), 1);
    let _ = daemon.kill();
    let _ = daemon.wait();
}

/// Request ids in every numeric spelling a client may write, each with the id text its reply
/// must carry: the same digits. Integers between 2^53 and 2^64 were echoed through
/// `JSON.stringify`'s rounding (`9007199254740993` came back as `9007199254740992`, another
/// request's id).
const ODD_IDS: [&str; 9] = [
    "9007199254740993",
    "-9007199254740993",
    "18446744073709551615",
    "-9223372036854775808",
    "123456789012345678901234567890",
    "1.5",
    "-2.5e-3",
    "1.0",
    "-0",
];

/// One `listSessions` per id of [`ODD_IDS`], as raw NDJSON bytes, then a batch of them all.
fn odd_id_requests() -> String {
    let one = |id: &str| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"listSessions"}}"#);
    let mut text: String = ODD_IDS.iter().map(|id| one(id) + "\n").collect();
    let batch: Vec<String> = ODD_IDS.iter().map(|id| one(id)).collect();
    text.push_str(&format!("[{}]\n", batch.join(",")));
    text
}

/// The id texts of the replies in `out`, in order (a batch's members in its order), read from
/// the bytes: parsing them would round the very digits under test.
fn reply_id_texts(out: &str) -> Vec<String> {
    out.split("{\"jsonrpc\":\"2.0\",\"id\":")
        .skip(1)
        .map(|rest| rest.split(",\"result\"").next().unwrap_or(rest).to_owned())
        .collect()
}

fn assert_ids_echoed(out: &str) {
    let expected: Vec<&str> = ODD_IDS.iter().chain(ODD_IDS.iter()).copied().collect();
    assert_eq!(reply_id_texts(out), expected, "replies: {out}");
}

#[test]
fn request_ids_are_echoed_with_the_digits_the_client_wrote() {
    let env = Env::new();
    // Over stdio.
    let mut child = env.spawn_stdio(Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(odd_id_requests().as_bytes()).unwrap();
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_ids_echoed(&out);
    // Over the socket.
    let socket = env.path("run/d.sock");
    let mut daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut s = UnixStream::connect(&socket).unwrap();
    s.write_all(odd_id_requests().as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.set_read_timeout(Some(LONG)).unwrap();
    s.read_to_string(&mut out).unwrap();
    assert_ids_echoed(&out);
    let _ = daemon.kill();
    let _ = daemon.wait();
}

#[test]
fn empty_params_in_every_editor_spelling_and_field_path_errors() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    // Neovim sends `[]` for `{}`, Emacs sends `null`; both mean "no params".
    for params in [json!([]), Value::Null, json!({})] {
        assert_eq!(c.ok("initialize", params.clone())["serverName"], "compactd");
        assert_eq!(c.ok("subscribe", params.clone())["subscribed"], true);
        assert_eq!(c.ok("listSessions", params.clone()), json!([]));
    }
    c.send_value(&json!({"jsonrpc": "2.0", "id": 900, "method": "unsubscribe"}));
    assert_eq!(c.wait(900, LONG).unwrap()["unsubscribed"], true);
    // Required fields are named exactly (openSession's `path`, or beyond Pi `headerId`).
    let e = c.request("openSession", Value::Null).unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (
            Some(-32602),
            Some("Invalid params: missing field `path` (or `headerId`, with the postgres backend)")
        )
    );
    let e = c
        .request(
            "openSession",
            json!({"path": "/tmp/x.jsonl", "model": {"provider": "p", "id": "m", "maxTokens": 1}}),
        )
        .unwrap_err();
    assert_eq!(
        e["message"],
        "Invalid params: missing field `model.contextWindow`"
    );
    let e = c
        .request(
            "openSession",
            json!({"path": "/tmp/x.jsonl", "model": {"provider": "p", "id": "m", "contextWindow": "big", "maxTokens": 1}}),
        )
        .unwrap_err();
    let m = e["message"].as_str().unwrap();
    assert_eq!(
        m,
        "Invalid params: model.contextWindow: invalid type: string \"big\", expected i64"
    );
    assert!(!m.contains("line 1") && !m.contains("\\\""), "{m}");
    // Handler-level refusals carry the same prefix.
    let e = c
        .request("openSession", json!({"path": "relative.jsonl"}))
        .unwrap_err();
    assert_eq!(
        e["message"],
        "Invalid params: path must be an absolute path: relative.jsonl"
    );
    // A positional array is refused with a reason.
    let e = c.request("getBranch", json!(["s1"])).unwrap_err();
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("not a positional array"));
}

#[test]
fn every_advertised_event_is_subscribable_and_unknown_ones_are_refused() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let init = c.ok("initialize", json!({}));
    let events = init["capabilities"]["events"].as_array().unwrap().clone();
    assert!(events.contains(&json!("subscription_dropped")));
    for e in &events {
        c.ok("subscribe", json!({"events": [e]}));
    }
    c.ok("subscribe", json!({"events": events}));
    let e = c
        .request("subscribe", json!({"events": ["compaction_begin"]}))
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    assert!(e["message"].as_str().unwrap().contains("compaction_begin"));
}

/// [`park_compactions`] with a hook that waits far longer than any test, subscribed to the
/// session's events: a compaction stays running until it is cancelled. Returns (sessionId,
/// asked).
fn stalled_compaction_setup(c: &mut Client, file: &Path) -> (String, Arc<AtomicBool>) {
    let (sid, asked) = park_compactions(c, file, 600_000);
    c.ok("subscribe", json!({"sessionId": sid}));
    (sid, asked)
}

fn wait_until(flag: &AtomicBool) {
    support::wait_until(LONG, "the flag is set", || flag.load(Ordering::SeqCst));
}

#[test]
fn a_clients_own_cancel_answers_request_cancelled_and_an_abort_answers_cancelled() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, asked) = stalled_compaction_setup(&mut c, &file);
    let before = std::fs::read(&file).unwrap();
    let id = c.send("compact", json!({"sessionId": sid}));
    wait_until(&asked);
    c.notify("$/cancelRequest", json!({"id": id}));
    let e = c.wait(id, LONG).unwrap_err();
    assert_eq!(
        (
            e["code"].as_i64(),
            e["message"].as_str(),
            e["data"]["kind"].as_str()
        ),
        (
            Some(-32800),
            Some("Request cancelled"),
            Some("request_cancelled")
        )
    );
    let end = c.wait_notification("compaction_end", LONG).unwrap();
    assert_eq!(end["params"]["aborted"], true);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // abortCompaction keeps -32012.
    c.notifications.clear();
    asked.store(false, Ordering::SeqCst);
    let id = c.send("compact", json!({"sessionId": sid}));
    wait_until(&asked);
    assert_eq!(
        c.ok("abortCompaction", json!({"sessionId": sid}))["aborted"],
        true
    );
    let e = c.wait(id, LONG).unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (Some(-32012), Some("Compaction cancelled"))
    );
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Waits for the process to exit; returns its exit code and how long it took.
fn exit_within(child: &mut Child, limit: Duration) -> (Option<i32>, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), start.elapsed());
        }
        assert!(
            start.elapsed() < limit,
            "daemon did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigterm_aborts_running_compactions_answers_and_exits_cleanly() {
    for sig in ["TERM", "INT"] {
        let env = Env::new();
        let file = env.session("009-bash-executions");
        let socket = env.path("run/d.sock");
        let mut daemon = env.serve_ready(&socket, &[], Stdio::piped());
        let mut c = Client::socket(&socket, Framing::Ndjson);
        let (sid, asked) = stalled_compaction_setup(&mut c, &file);
        let before = std::fs::read(&file).unwrap();
        let id = c.send("compact", json!({"sessionId": sid}));
        wait_until(&asked);
        signal(&daemon, sig);
        let e = c.wait(id, LONG).unwrap_err();
        assert_eq!(e["code"], -32012, "{sig}: the running compact is answered");
        let end = c.wait_notification("compaction_end", LONG).unwrap();
        assert_eq!(end["params"]["aborted"], true);
        let (code, _) = exit_within(&mut daemon, Duration::from_secs(10));
        assert_eq!(code, Some(0), "{sig}: clean exit");
        assert!(!socket.exists(), "socket removed");
        assert_eq!(std::fs::read(&file).unwrap(), before);
    }
}

#[test]
fn stdio_handles_sigterm_like_serve() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let mut child = env.spawn_stdio(Stdio::null());
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut send = |v: String| {
        stdin.write_all(v.as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    send(request(1, "openSession", json!({"path": file})));
    send(request(
        2,
        "setSettingsOverrides",
        json!({"sessionId": "s1", "compaction": {"keepRecentTokens": 2000}}),
    ));
    send(request(
        3,
        "registerHooks",
        json!({"hooks": ["session_before_compact"], "timeoutMs": 600000}),
    ));
    send(request(4, "subscribe", json!({})));
    send(request(5, "compact", json!({"sessionId": "s1"})));
    let mut seen = Vec::new();
    let mut line = String::new();
    // Wait for the hook request: the compaction is now running.
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "eof: {seen:?}");
        let v: Value = serde_json::from_str(&line).unwrap();
        let hook = v["method"] == "session_before_compact";
        seen.push(v);
        if hook {
            break;
        }
    }
    signal(&child, "TERM");
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    seen.extend(replies(&rest));
    let (code, _) = exit_within(&mut child, Duration::from_secs(10));
    assert_eq!(code, Some(0), "SIGTERM is a clean exit, not 143");
    assert_eq!(reply(&seen, 5)["error"]["code"], -32012, "{seen:?}");
    assert!(seen
        .iter()
        .any(|v| v["method"] == "compaction_end" && v["params"]["aborted"] == true));
}

#[test]
fn an_idle_daemon_exits_promptly_on_sigterm() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let mut daemon = env.serve_ready(&socket, &[], Stdio::piped());
    signal(&daemon, "TERM");
    let (code, took) = exit_within(&mut daemon, Duration::from_secs(5));
    assert_eq!(code, Some(0));
    eprintln!("idle serve exited {took:?} after SIGTERM");
    // The brief's target is 200 ms; allow for a loaded CI machine but stay well under the
    // 1.3 s the daemon took before.
    assert!(took < Duration::from_millis(800), "took {took:?}");
    let mut child = env.spawn_stdio(Stdio::null());
    // Ready once it answers a request.
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(request(1, "initialize", json!({})).as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("\"serverName\""), "{line}");
    signal(&child, "TERM");
    let (code, took) = exit_within(&mut child, Duration::from_secs(5));
    eprintln!("idle stdio exited {took:?} after SIGTERM");
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_millis(800), "took {took:?}");
}

#[test]
fn default_logs_say_what_happened_without_colour_or_debug_dumps() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let small = env.session("003-tiny-nothing-to-compact");
    let mut child = env.spawn_stdio(Stdio::piped());
    let input = [
        pipeline(&file),
        request(5, "openSession", json!({"path": small})),
        request(6, "compact", json!({"sessionId": "s2"})),
        request(7, "noSuchMethod", json!({})),
    ]
    .concat();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    // Under an editor the log goes to the log file; stderr carries only real errors.
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "",
        "nothing on stderr without an error"
    );
    let log = env.log_text();
    for want in [
        "client connected",
        "session opened",
        &file.display().to_string(),
        "compacted",
        "tokens_before",
        "summarizer",
        "compaction refused",
        "Nothing to compact",
        "unknown method",
        "noSuchMethod",
        "session closed",
        "client disconnected",
    ] {
        assert!(log.contains(want), "log lacks {want:?}:\n{log}");
    }
    // A refusal is not a problem of the daemon's: INFO with the reason, never WARN.
    let refusal = log
        .lines()
        .find(|l| l.contains("compaction refused"))
        .unwrap_or_default();
    assert!(
        refusal.contains("INFO") && !refusal.contains("WARN"),
        "{refusal}"
    );
    // Token counts are whole numbers (`tokens_before=4742`, not `4742.0`).
    let compacted = log
        .lines()
        .find(|l| l.contains(" compacted"))
        .unwrap_or_default();
    let tokens = compacted
        .split("tokens_before=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default();
    assert!(
        !tokens.is_empty() && tokens.bytes().all(|b| b.is_ascii_digit()),
        "{compacted}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "no ANSI escapes off a terminal:\n{log}"
    );
    assert!(
        !log.contains("Object {") && !log.contains("String(\""),
        "no Debug dumps:\n{log}"
    );
}

#[test]
fn register_hooks_include_selects_what_the_hook_receives() {
    let env = Env::new();
    let file = env.session("037-large-200k");
    let socket = env.path("run/d.sock");
    let mut daemon = env.serve_ready(&socket, &[], Stdio::piped());
    let mut lean = Client::socket(&socket, Framing::Ndjson);
    let mut full = Client::socket(&socket, Framing::Ndjson);
    let seen_lean: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let seen_full: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    for (c, seen) in [
        (&mut lean, seen_lean.clone()),
        (&mut full, seen_full.clone()),
    ] {
        c.on_request(move |method, params| {
            if method == "session_before_compact" {
                *seen.lock().unwrap() = Some(params.to_string());
            }
            Some(Value::Null)
        });
    }
    let sid = lean.ok("openSession", json!({"path": file}))["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = lean
        .request(
            "registerHooks",
            json!({"hooks": ["session_before_compact"], "include": ["everything"]}),
        )
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    assert!(e["message"].as_str().unwrap().contains("branchEntries"));
    lean.ok(
        "registerHooks",
        json!({"hooks": ["session_before_compact"], "include": ["preparation"]}),
    );
    full.ok(
        "registerHooks",
        json!({"hooks": ["session_before_compact"]}),
    );
    lean.ok("compact", json!({"sessionId": sid}));
    let lean_text = seen_lean.lock().unwrap().clone().expect("lean hook asked");
    let full_text = seen_full.lock().unwrap().clone().expect("full hook asked");
    let lean_v: Value = serde_json::from_str(&lean_text).unwrap();
    let full_v: Value = serde_json::from_str(&full_text).unwrap();
    assert!(lean_v.get("branchEntries").is_none());
    assert_eq!(lean_v["preparation"], full_v["preparation"]);
    assert_eq!(lean_v["reason"], "manual");
    assert!(
        full_v["branchEntries"].is_array(),
        "the default is Pi's full payload"
    );
    eprintln!(
        "session_before_compact for a {} byte session: {} bytes in full, {} with include [\"preparation\"]",
        std::fs::metadata(&file).unwrap().len(),
        full_text.len(),
        lean_text.len()
    );
    assert!(lean_text.len() * 2 < full_text.len());
    let _ = daemon.kill();
    let _ = daemon.wait();
}

#[test]
fn a_hook_handler_that_never_replies_is_waited_for_visibly_in_the_log() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let mut child = env.spawn_stdio(Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    for r in [
        request(1, "openSession", json!({"path": file})),
        request(
            2,
            "setSettingsOverrides",
            json!({"sessionId": "s1", "compaction": {"keepRecentTokens": 2000}}),
        ),
        request(
            3,
            "registerHooks",
            json!({"hooks": ["session_before_compact"], "timeoutMs": 300}),
        ),
        request(4, "compact", json!({"sessionId": "s1"})),
    ] {
        stdin.write_all(r.as_bytes()).unwrap();
    }
    stdin.flush().unwrap();
    // The hook request arrives and is never answered (a Lua handler returning nil); the
    // compaction goes ahead after the timeout.
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0);
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 4 {
            assert!(v["result"]["summary"].is_string(), "{v}");
            break;
        }
    }
    drop(stdin);
    child.wait_with_output().unwrap();
    let log = env.log_text();
    assert!(
        log.contains("asking the client's hook handler") && log.contains("timeout_ms=300"),
        "{log}"
    );
    assert!(
        log.contains("hook handler sent no reply in time") && log.contains("e.g. with null"),
        "{log}"
    );
}

/// `setSettingsOverrides` accepted any number its type could hold: `keepRecentTokens: -5`
/// answered `ok: true` and changed every later check. Now a value out of its range is refused
/// with invalid_params naming `compaction.<setting>`, globally and per session, and nothing
/// changes.
#[test]
fn settings_overrides_out_of_range_are_refused_naming_the_setting() {
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = c.ok("openSession", json!({"path": file}))["sessionId"].clone();
    let before = c.ok("getSettings", json!({"sessionId": sid}));
    for (field, value) in [
        ("keepRecentTokens", json!(-5)),
        ("reserveTokens", json!(-1)),
        ("keepRecentTokens", json!(1_000_000_000_001_i64)),
        ("maxIneffectiveCompactions", json!(100_000)),
        ("cacheTtlSeconds", json!(3_153_600_000_u64)),
        ("fileListLimit", json!(1_000_000_000_000_u64)),
        ("speculativeAt", json!(1.5)),
        ("idleCompactAt", json!(-0.5)),
    ] {
        for target in [json!({"sessionId": sid}), json!({})] {
            let mut params = target.clone();
            params["compaction"] = json!({ field: value });
            let e = c.request("setSettingsOverrides", params).unwrap_err();
            assert_eq!(e["code"], -32602, "{field}: {e}");
            let msg = e["message"].as_str().unwrap_or_default();
            assert!(
                msg.contains(&format!("compaction.{field}")),
                "{field} = {value}: {msg}"
            );
        }
    }
    assert_eq!(
        c.ok("getSettings", json!({"sessionId": sid})),
        before,
        "nothing applied"
    );
    // The edges of each range are accepted.
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 0, "reserveTokens": 0,
               "cacheTtlSeconds": 86400, "maxIneffectiveCompactions": 1000}}),
    );
    let after = c.ok("getSettings", json!({"sessionId": sid}));
    assert_eq!(after["compaction"]["keepRecentTokens"], 0, "{after}");
}

#[test]
fn unknown_fields_are_refused_with_their_path_and_nothing_changes() {
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = c.ok("openSession", json!({"path": file}))["sessionId"].clone();
    let before = c.ok("getSettings", json!({"sessionId": sid}));
    // The typo of the issue: `keepRecent` instead of `keepRecentTokens`.
    let e = c
        .request(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": {"keepRecent": 10}}),
        )
        .unwrap_err();
    assert_eq!(e["code"], -32602, "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Invalid params: unknown field `compaction.keepRecent`, expected one of"),
        "{msg}"
    );
    assert!(
        msg.contains("`keepRecentTokens`"),
        "it names what is accepted: {msg}"
    );
    assert_eq!(
        c.ok("getSettings", json!({"sessionId": sid})),
        before,
        "nothing applied"
    );
    // A wrong type names its field.
    let e = c
        .request(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": {"keepRecentTokens": "ten"}}),
        )
        .unwrap_err();
    assert_eq!(
        e["message"],
        "Invalid params: compaction.keepRecentTokens: invalid type: string \"ten\", expected i64"
    );
    // Top-level and nested fields of any params type.
    for (method, params, field) in [
        (
            "compact",
            json!({"sessionId": sid, "wirte": false}),
            "wirte",
        ),
        (
            "getContextUsage",
            json!({"sessionId": sid, "session": "s1"}),
            "session",
        ),
        ("listSessions", json!({"all": true}), "all"),
        (
            "setModel",
            json!({"sessionId": sid, "model": {"provider": "p", "id": "m", "contextWindow": 1, "maxTokens": 1, "name": "M"}}),
            "model.name",
        ),
    ] {
        let e = c.request(method, params).unwrap_err();
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("Invalid params: unknown field `{field}`")),
            "{method}: {e}"
        );
    }
    // The right spelling works.
    assert_eq!(
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": {"keepRecentTokens": 10}})
        ),
        json!({"ok": true})
    );
}

#[test]
fn nothing_to_compact_says_why_and_what_to_change_in_preview_and_cli() {
    let env = Env::new();
    let small = env.session("003-tiny-nothing-to-compact");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = c.ok("openSession", json!({"path": small}))["sessionId"].clone();
    let p = c.ok("previewCompaction", json!({"sessionId": sid}));
    assert_eq!(
        p["nothingToCompact"],
        "Nothing to compact (session too small)"
    );
    assert_eq!(p["reason"], "within_keep_recent");
    assert_eq!(p["keepRecentTokens"], 20000);
    let hint = p["hint"].as_str().unwrap();
    assert!(
        hint.contains("compaction.keepRecentTokens (20000)"),
        "{hint}"
    );
    let below = p["recentTokens"].as_u64().unwrap();
    assert!(hint.contains(&format!("below {below}")), "{hint}");
    drop(c);
    // The CLI: Pi's message, then why.
    let out = env
        .command("compact")
        .arg(&small)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("compactd: Nothing to compact (session too small): the ")
            && err.contains("compaction.keepRecentTokens"),
        "{err}"
    );
    let out = env
        .command("compact")
        .arg(&small)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"], "Nothing to compact (session too small)");
    assert_eq!(v["reason"], "within_keep_recent");
    // Following the hint compacts.
    let out = env
        .command("compact")
        .arg(&small)
        .args(["--keep-recent-tokens", &(below / 2).to_string(), "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["summary"].is_string(), "{v}");
}

/// `--log-format json`: one JSON object per log line, each carrying the spans it happened in, so
/// a log shipper can follow one connection, one request and one compaction.
#[test]
fn json_log_lines_carry_the_connection_request_and_compaction_spans() {
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let mut c = env.stdio(&["--log-format", "json"], Framing::Ndjson);
    let sid = support::daemon_env::open(&mut c, &file);
    c.ok("compact", json!({"sessionId": sid}));
    drop(c.finish());
    let text = env.log_text();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let compacted = lines
        .iter()
        .find(|l| l["fields"]["message"] == "compacted")
        .unwrap_or_else(|| panic!("no `compacted` line in {text}"));
    let spans = compacted["spans"].as_array().expect("a span list");
    let named = |name: &str| {
        spans
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} span in {compacted}"))
    };
    assert!(named("connection")["id"].is_u64(), "{compacted}");
    let request = named("request");
    assert_eq!(request["method"], "compact");
    assert_eq!(request["session"], sid.as_str());
    assert!(request["id"].is_string(), "{compacted}");
    assert_eq!(named("compaction")["session"], sid.as_str());
    // Every line of the connection (after it got its id) carries its span.
    let connected = lines
        .iter()
        .position(|l| l["fields"]["message"] == "client connected")
        .expect("client connected");
    for l in &lines[connected..] {
        let in_connection = l["spans"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["name"] == "connection"));
        assert!(in_connection, "a line outside the connection span: {l}");
    }
}

/// A method whose `sessionId` is optional (`shouldCompact`, declared `Narrowed`) names the
/// session in its request span when it is given one, read from its typed params, and names
/// none when it is not.
#[test]
fn a_narrowed_request_names_its_session_in_its_span_only_when_given_one() {
    let env = Env::new();
    env.write_config("[log]\nlevel = \"debug\"\nformat = \"json\"\n");
    let file = env.session("005-medium-basic");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = support::daemon_env::open(&mut c, &file);
    c.ok("shouldCompact", json!({"sessionId": sid}));
    c.ok(
        "shouldCompact",
        json!({"contextTokens": 10, "contextWindow": 1000}),
    );
    drop(c.finish());
    let text = env.log_text();
    let sessions: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "request done")
        .filter_map(|l| {
            let spans = l["spans"].as_array()?.clone();
            let request = spans.into_iter().find(|s| s["name"] == "request")?;
            (request["method"] == "shouldCompact").then(|| request["session"].clone())
        })
        .collect();
    assert_eq!(
        sessions,
        vec![Value::from(sid.as_str()), Value::Null],
        "{text}"
    );
}
