//! The daemon from the outside: the real `compactd` binary driven over stdio and a Unix socket,
//! in both framings, through the protocol's flows (open, append, usage, preview, compact, abort,
//! overflow recovery, events across clients, hooks) and its error paths.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon_env::{keep_recent, lines, model, now_ms, open, tool_session, Env};
use support::rpc_client::{frame, Client, Framing};

const LONG: Duration = Duration::from_secs(60);

#[test]
fn stdio_ndjson_open_append_usage_preview_compact_with_ordered_events() {
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let before = std::fs::read(&file).unwrap();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let init = c.ok("initialize", json!({"clientName": "test"}));
    assert_eq!(init["serverName"], "compactd");
    let sid = open(&mut c, &file);
    let usage = c.ok("getContextUsage", json!({"sessionId": sid}));
    assert_eq!(usage["contextWindow"], 200000);
    assert!(usage["tokens"].as_f64().unwrap() > 0.0);
    let appended = c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "Please also add tests."}}),
    );
    assert_eq!(appended["entryId"], appended["leafId"]);
    assert_eq!(appended["entryId"].as_str().map(str::len), Some(8));
    let after_usage = c.ok("getContextUsage", json!({"sessionId": sid}));
    assert_eq!(
        after_usage["tokens"].as_f64().unwrap(),
        usage["tokens"].as_f64().unwrap() + 6.0,
        "usage + ceil(22/4)"
    );
    assert_eq!(
        lines(&file),
        before
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count()
            + 1
    );
    let tiny = env.session("003-tiny-nothing-to-compact");
    let tiny_sid = open(&mut c, &tiny);
    let preview = c.ok("previewCompaction", json!({"sessionId": tiny_sid}));
    assert_eq!(
        preview["nothingToCompact"],
        "Nothing to compact (session too small)"
    );
    c.ok("closeSession", json!({"sessionId": tiny_sid}));
    keep_recent(&mut c, &sid, 2000);
    let preview = c.ok(
        "previewCompaction",
        json!({"sessionId": sid, "detail": "full"}),
    );
    assert!(
        preview["summarize"]["count"].as_u64().unwrap() > 0
            && preview["messagesToSummarize"].as_array().map(Vec::len)
                == preview["summarize"]["count"].as_u64().map(|n| n as usize),
        "{preview}"
    );
    c.ok("subscribe", json!({"sessionId": sid}));
    let id = c.send(
        "compact",
        json!({"sessionId": sid, "customInstructions": "focus on tests"}),
    );
    let result = c.wait(id, LONG).expect("compact");
    assert!(result["summary"].as_str().unwrap().contains("## Goal"));
    assert_eq!(result["firstKeptEntryId"], preview["firstKeptEntryId"]);
    // Events precede the reply, in order, with Pi's payload shapes.
    let methods: Vec<&str> = c.log.iter().filter_map(|m| m["method"].as_str()).collect();
    assert_eq!(methods, ["compaction_start", "compaction_end"]);
    let end = &c.notifications[1]["params"];
    assert_eq!(end["sessionId"], sid.as_str());
    assert_eq!(end["reason"], "manual");
    assert_eq!(end["aborted"], false);
    assert_eq!(end["result"]["summary"], result["summary"]);
    assert!(end.get("errorMessage").is_none());
    let reply_pos = c
        .log
        .iter()
        .position(|m| m.get("result").is_some_and(|r| r.get("summary").is_some()))
        .unwrap();
    let end_pos = c
        .log
        .iter()
        .position(|m| m["method"] == "compaction_end")
        .unwrap();
    assert!(
        end_pos < reply_pos,
        "compaction_end must come before the compact reply"
    );
    // The file gained exactly the compaction line; Pi's null-usage semantics after it.
    let text = std::fs::read_to_string(&file).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "compaction");
    assert!(text.as_bytes().starts_with(&before));
    let usage = c.ok("getContextUsage", json!({"sessionId": sid}));
    assert_eq!(
        usage,
        json!({"tokens": null, "contextWindow": 200000, "percent": null})
    );
    let ctx = c.ok("getContext", json!({"sessionId": sid, "format": "llm"}));
    assert!(ctx["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("The conversation history before this point was compacted"));
    let again = c.request("compact", json!({"sessionId": sid})).unwrap_err();
    assert_eq!(
        (again["code"].as_i64(), again["message"].as_str()),
        (Some(-32011), Some("Already compacted"))
    );
}

#[test]
fn lsp_framing_over_stdio_and_socket_with_two_clients() {
    let env = Env::new();
    let file = env.session("024-compacted-once");
    let mut c = env.stdio(&[], Framing::Lsp);
    let sid = open(&mut c, &file);
    let b = c.ok("getBranch", json!({"sessionId": sid}));
    assert!(b.as_array().unwrap().len() > 10);
    drop(c);

    let socket = env.path("run/d.sock");
    let mut server = env.serve(&socket, &[]);
    let mut a = Client::socket(&socket, Framing::Lsp);
    let mut b = Client::socket(&socket, Framing::Ndjson);
    let sid_a = open(&mut a, &file);
    let sid_b = open(&mut b, &file);
    assert_eq!(sid_a, sid_b, "one file, one session");
    b.ok("subscribe", json!({}));
    keep_recent(&mut a, &sid_a, 1000);
    let r = a.ok("compact", json!({"sessionId": sid_a}));
    assert!(r["summary"]
        .as_str()
        .unwrap()
        .contains("## Critical Context"));
    let start = b
        .wait_notification("compaction_start", LONG)
        .expect("other client sees compaction_start");
    assert_eq!(
        start["params"],
        json!({"sessionId": sid_a, "reason": "manual"})
    );
    let end = b
        .wait_notification("compaction_end", LONG)
        .expect("other client sees compaction_end");
    assert_eq!(end["params"]["result"]["summary"], r["summary"]);
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    // A second daemon on a live socket refuses; SIGTERM removes the socket file.
    let second = Command::new(env!("CARGO_BIN_EXE_compactd"))
        .args(["serve", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr).contains("already listening"));
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(server.id().to_string())
        .status();
    let _ = server.wait();
    assert!(!socket.exists(), "socket removed on SIGTERM");
    // A stale socket file is replaced.
    std::os::unix::net::UnixListener::bind(&socket)
        .map(drop)
        .unwrap();
    let mut server = env.serve(&socket, &[]);
    let mut c = Client::socket(&socket, Framing::Ndjson);
    assert_eq!(c.ok("initialize", json!({}))["serverName"], "compactd");
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn error_paths_answer_with_json_rpc_errors_and_keep_serving() {
    let env = Env::new();
    let mut c = env.stdio(&["--max-frame", "2000"], Framing::Ndjson);
    c.send_raw(b"{not json\n");
    let e = c.next_raw(LONG).unwrap();
    assert_eq!(
        (e["error"]["code"].as_i64(), &e["id"]),
        (Some(-32700), &Value::Null)
    );
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{{\"x\":\"{}\"}}}}\n",
        "a".repeat(5000)
    );
    c.send_raw(big.as_bytes());
    let e = c.next_raw(LONG).unwrap();
    assert_eq!(e["error"]["code"], -32600);
    assert!(e["error"]["message"].as_str().unwrap().contains("exceeds"));
    let e = c.request("noSuchMethod", json!({})).unwrap_err();
    assert_eq!(e["code"], -32601);
    let e = c
        .request("getContextUsage", json!({"sessionId": 5}))
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    let e = c
        .request("getContextUsage", json!({"sessionId": "nope"}))
        .unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["data"]["kind"].as_str()),
        (Some(-32001), Some("unknown_session"))
    );
    let e = c
        .request("openSession", json!({"path": "relative.jsonl"}))
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    let missing = env.path("missing.jsonl");
    let e = c
        .request("openSession", json!({"path": missing}))
        .unwrap_err();
    assert_eq!(e["code"], -32002);
    let bad = env.path("bad.jsonl");
    std::fs::write(&bad, "hello\n").unwrap();
    let e = c.request("openSession", json!({"path": bad})).unwrap_err();
    assert_eq!(e["code"], -32003);
    assert_eq!(
        e["message"],
        format!(
            "Session file is not a valid pi session: {}: none of its 1 non-blank line(s) is JSON (is it a Pi session file?)",
            std::fs::canonicalize(&bad).unwrap().display()
        )
    );
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "hello\n");
    c.send_value(&json!({"jsonrpc": "1.0", "id": 9, "method": "initialize"}));
    assert_eq!(c.wait(9, LONG).unwrap_err()["code"], -32600);
    // Batches: responses for requests only; a notification gets none.
    c.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"listSessions\"},{\"jsonrpc\":\"2.0\",\"method\":\"listSessions\"},{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"nope\"}]\n");
    let batch = c.next_raw(LONG).unwrap();
    let ids: Vec<i64> = batch
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [20, 21]);
    // Still serving.
    assert_eq!(c.ok("initialize", json!({}))["serverName"], "compactd");
    // A second daemon cannot take the same file (flock).
    let file = env.session("009-bash-executions");
    open(&mut c, &file);
    let mut other = env.stdio(&[], Framing::Ndjson);
    let e = other
        .request("openSession", json!({"path": file}))
        .unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["data"]["kind"].as_str()),
        (Some(-32004), Some("locked"))
    );
}

fn assistant_error(ts: i64, message: &str) -> Value {
    json!({"role": "assistant", "content": [], "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
           "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
           "stopReason": "error", "errorMessage": message, "timestamp": ts})
}

#[test]
fn overflow_compacts_and_retries_once_then_gives_up_with_pis_message() {
    let env = Env::new();
    let file = env.session("005-medium-basic");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 2000);
    c.ok("subscribe", json!({"sessionId": sid}));
    c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": "next step", "timestamp": now_ms()}}));
    c.ok("appendMessage", json!({"sessionId": sid, "message": assistant_error(now_ms(), "prompt is too long: 213462 tokens > 200000 maximum")}));
    let out = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "postRun"}),
    );
    assert_eq!(out["action"], "compacted", "{out}");
    assert_eq!(out["reason"], "overflow");
    assert_eq!(out["willRetry"], true);
    assert_eq!(out["contextChanged"], true);
    let end = c.wait_notification("compaction_end", LONG).unwrap();
    assert_eq!(end["params"]["willRetry"], true);
    let ctx = c.ok("getContext", json!({"sessionId": sid}));
    let last = ctx["messages"].as_array().unwrap().last().unwrap().clone();
    assert_ne!(
        last["stopReason"], "error",
        "the failed reply left the agent context"
    );
    // The retried turn overflows again: one attempt only, Pi's exact give-up message (its
    // timestamp is explicitly after the compaction's, so no clock wait is needed).
    c.ok("appendMessage", json!({"sessionId": sid, "message": assistant_error(now_ms() + 1000, "prompt is too long: 213462 tokens > 200000 maximum")}));
    let n_before = c.notifications.len();
    let out = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "postRun"}),
    );
    assert_eq!(out["action"], "failed");
    assert_eq!(
        out["errorMessage"],
        "Context overflow recovery failed after one compact-and-retry attempt. Try reducing context or switching to a larger-context model."
    );
    let new: Vec<Value> = c
        .log
        .iter()
        .filter(|m| m["method"].is_string())
        .skip(n_before)
        .cloned()
        .collect();
    assert!(
        new.iter().all(|m| m["method"] != "compaction_start"),
        "no compaction_start before the give-up"
    );
    // A new user message resets the flag; a stale (pre-compaction) error never triggers.
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "try again"}}),
    );
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": assistant_error(1, "prompt is too long")}),
    );
    let out = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "postRun"}),
    );
    assert_eq!(out["action"], "none");
    // midRun: threshold only, nothing due at this size.
    assert_eq!(
        c.ok(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "midRun"})
        )["action"],
        "none"
    );
}

#[test]
fn hooks_cancel_supply_and_time_out() {
    let env = Env::new();
    let file = env.session("024-compacted-once");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 1000);
    c.ok("registerHooks", json!({"sessionId": sid, "hooks": ["session_before_compact", "session_compact"], "timeoutMs": 800}));
    // 1. cancel
    c.on_request(|method, _| (method == "session_before_compact").then(|| json!({"cancel": true})));
    let lines_before = lines(&file);
    let e = c.request("compact", json!({"sessionId": sid})).unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (Some(-32012), Some("Compaction cancelled"))
    );
    assert_eq!(lines(&file), lines_before);
    // 2. supply a summary (validated: firstKeptEntryId on the branch)
    let branch = c.ok("getBranch", json!({"sessionId": sid}));
    let keep = branch
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "user")
        .unwrap()["id"]
        .clone();
    let k2 = keep.clone();
    c.on_request(move |method, params| {
        (method == "session_before_compact").then(|| {
            assert!(params["preparation"]["messagesToSummarize"].is_array());
            json!({"compaction": {"summary": "HOOK SUMMARY", "firstKeptEntryId": k2, "tokensBefore": 123}})
        })
    });
    let r = c.ok("compact", json!({"sessionId": sid}));
    assert_eq!(r["summary"], "HOOK SUMMARY");
    let last: Value = serde_json::from_str(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (last["fromHook"].as_bool(), last["firstKeptEntryId"].clone()),
        (Some(true), keep)
    );
    let notice = c
        .wait_notification("session_compact", LONG)
        .expect("session_compact notification");
    assert_eq!(notice["params"]["fromExtension"], true);
    // 3. a hook that never answers: timeout, compaction proceeds with the built-in summarizer.
    c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": "more work ".repeat(3000)}}));
    c.on_request(|_, _| None);
    let t = std::time::Instant::now();
    let r = c.ok("compact", json!({"sessionId": sid}));
    assert!(t.elapsed() >= Duration::from_millis(700));
    assert!(r["summary"].as_str().unwrap().contains("## Goal"));
}

#[test]
fn abort_mid_compaction_writes_nothing_and_a_second_compact_supersedes() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime.block_on(support::fake_llm::start(vec![
        ("S1".into(), "stop".into()),
        ("S2".into(), "stop".into()),
        ("S3".into(), "stop".into()),
    ]));
    fake.state.lock().delay = Duration::from_secs(3);
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let file = env.session("009-bash-executions");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 2000);
    c.ok("subscribe", json!({"sessionId": sid}));
    let id = c.send("compact", json!({"sessionId": sid}));
    c.wait_notification("compaction_start", LONG).unwrap();
    let info = c.ok("listSessions", json!({}));
    assert_eq!(info[0]["isCompacting"], true);
    // Appends are accepted while the summarizer runs (tests/continuity.rs covers the rest).
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "x"}}),
    );
    let before = std::fs::read(&file).unwrap();
    assert_eq!(
        c.ok("abortCompaction", json!({"sessionId": sid}))["aborted"],
        true
    );
    let e = c.wait(id, LONG).unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (Some(-32012), Some("Compaction cancelled"))
    );
    let end = c.wait_notification("compaction_end", LONG).unwrap();
    assert_eq!(end["params"]["aborted"], true);
    assert!(end["params"].get("errorMessage").is_none() && end["params"].get("result").is_none());
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "an aborted compaction writes nothing"
    );
    // A second compact while one runs supersedes it: the first is cancelled.
    c.notifications.clear();
    let first = c.send("compact", json!({"sessionId": sid}));
    c.wait_notification("compaction_start", LONG)
        .expect("the first compaction starts");
    let second = c.send("compact", json!({"sessionId": sid}));
    let e = c.wait(first, LONG).unwrap_err();
    assert_eq!(e["message"], "Compaction cancelled");
    fake.state.lock().delay = Duration::ZERO;
    let r = c.wait(second, LONG).expect("second compact");
    assert!(r["summary"].as_str().unwrap().starts_with('S'));
    // An editor cancels its own request with `$/cancelRequest`: the compaction is aborted as
    // by `abortCompaction`, and the request answers LSP's `RequestCancelled`.
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "more ".repeat(4000)}}),
    );
    fake.state.lock().delay = Duration::from_secs(3);
    let before = std::fs::read(&file).unwrap();
    c.notifications.clear();
    let third = c.send("compact", json!({"sessionId": sid}));
    c.wait_notification("compaction_start", LONG)
        .expect("the third compaction starts");
    c.notify("$/cancelRequest", json!({"id": third}));
    let e = c.wait(third, LONG).unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (Some(-32800), Some("Request cancelled"))
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
    drop(fake);
    drop(runtime);
}

#[test]
fn deferred_sessions_are_written_at_the_first_assistant_message() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let dir = env.path("sessions");
    let info = c.ok("createSession", json!({"cwd": env.dir.path(), "sessionDir": dir, "model": model(), "thinkingLevel": "high"}));
    let path = PathBuf::from(info["path"].as_str().unwrap());
    assert_eq!(info["persisted"], false);
    assert!(!path.exists());
    let sid = info["sessionId"].as_str().unwrap().to_owned();
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "hi"}}),
    );
    assert!(!path.exists(), "no file before the first assistant message");
    c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": {"input": 10, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 12}, "stopReason": "stop"}}));
    let text = std::fs::read_to_string(&path).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "session",
            "model_change",
            "thinking_level_change",
            "message",
            "message"
        ]
    );
    let label = c
        .request(
            "appendEntry",
            json!({"sessionId": sid, "entry": {"type": "label", "targetId": "zzzz", "label": "x"}}),
        )
        .unwrap_err();
    assert_eq!(label["message"], "Entry zzzz not found");
    let usage = c.ok("getContextUsage", json!({"sessionId": sid}));
    assert_eq!(usage["tokens"], 12);
    let leaf = c.ok("listSessions", json!({}))[0]["leafId"].clone();
    let e = c.request("appendEntry", json!({"sessionId": sid, "entry": {"type": "session_info", "name": "a\r\n\nb "}, "expectedLeafId": "other"})).unwrap_err();
    assert_eq!(e["code"], -32021);
    c.ok("appendEntry", json!({"sessionId": sid, "entry": {"type": "session_info", "name": "a\r\n\nb "}, "expectedLeafId": leaf}));
    let last: Value = serde_json::from_str(
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["name"], "a b");
    // Frames in Content-Length form on an NDJSON connection are not mixed: the raw helper works.
    let _ = frame(Framing::Ndjson, b"{}");
}

#[test]
fn navigate_tree_moves_the_leaf_labels_and_summarizes_the_abandoned_branch() {
    let env = Env::new();
    let file = env.session("023-chat-only-no-tools");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    let branch = c.ok("getBranch", json!({"sessionId": sid}));
    let entries = branch.as_array().unwrap();
    let old_leaf = entries.last().unwrap()["id"].clone();
    let users: Vec<&Value> = entries
        .iter()
        .filter(|e| e["type"] == "message" && e["message"]["role"] == "user")
        .collect();
    let target = users[2].clone();
    let lines_before = lines(&file);
    // To a user message: the leaf becomes its parent, its text goes back to the editor, the label
    // is written on the target (and advances the leaf, as in Pi).
    let r = c.ok(
        "navigateTree",
        json!({"sessionId": sid, "targetId": target["id"], "label": "retry here"}),
    );
    assert_eq!(r["cancelled"], false);
    assert_eq!(r["oldLeafId"], old_leaf);
    assert_eq!(
        r["editorText"].as_str(),
        target["message"]["content"]
            .as_str()
            .or(target["message"]["content"][0]["text"].as_str())
    );
    assert_eq!(lines(&file), lines_before + 1);
    let last: Value = serde_json::from_str(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (last["type"].as_str(), &last["targetId"], &last["parentId"]),
        (Some("label"), &target["id"], &target["parentId"])
    );
    assert_eq!(r["newLeafId"], last["id"]);
    // Work on the new branch, then go back to the old leaf with a summary of the branch we leave
    // (extractive by default).
    c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": "Try the other approach with a cache."}}));
    let r = c.ok(
        "navigateTree",
        json!({"sessionId": sid, "targetId": old_leaf, "summarize": true}),
    );
    let summary = r["summaryEntry"].clone();
    assert_eq!(summary["type"], "branch_summary");
    assert_eq!(summary["parentId"], old_leaf);
    assert_eq!(summary["fromHook"], false);
    assert!(summary["summary"].as_str().unwrap().starts_with("The user explored a different conversation branch before returning here.\nSummary of that exploration:\n\n"));
    assert!(summary["details"]["readFiles"].is_array());
    assert_eq!(r["newLeafId"], summary["id"]);
    let ctx = c.ok("getContext", json!({"sessionId": sid}));
    assert_eq!(
        ctx["messages"].as_array().unwrap().last().unwrap()["role"],
        "branchSummary"
    );
    let e = c
        .request(
            "navigateTree",
            json!({"sessionId": sid, "targetId": "nope"}),
        )
        .unwrap_err();
    assert_eq!(
        (e["code"].as_i64(), e["message"].as_str()),
        (Some(-32022), Some("Entry nope not found"))
    );
    // Navigating to the current leaf is a no-op.
    let leaf = r["newLeafId"].clone();
    let r = c.ok("navigateTree", json!({"sessionId": sid, "targetId": leaf}));
    assert_eq!(
        (r["newLeafId"].clone(), r["cancelled"].clone()),
        (leaf, json!(false))
    );
}

#[test]
fn pi_settings_files_are_read_fresh_and_project_trust_is_respected() {
    let env = Env::new();
    let project = env.path("project");
    std::fs::create_dir_all(project.join(".pi")).unwrap();
    std::fs::write(
        project.join(".pi/settings.json"),
        r#"{"compaction":{"keepRecentTokens":1234}}"#,
    )
    .unwrap();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let info = c.ok(
        "createSession",
        json!({"cwd": project, "sessionDir": env.path("s"), "model": model()}),
    );
    let sid = info["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(info["thinkingLevel"], "medium", "Pi's defaultThinkingLevel");
    let s = c.ok("getSettings", json!({"sessionId": sid}));
    assert_eq!(
        s["compaction"]["keepRecentTokens"], 20000,
        "an untrusted project's settings are ignored"
    );
    let canonical = std::fs::canonicalize(&project).unwrap();
    std::fs::write(
        env.path("agent/trust.json"),
        json!({canonical.to_string_lossy(): true}).to_string(),
    )
    .unwrap();
    let s = c.ok("getSettings", json!({"sessionId": sid}));
    assert_eq!(
        s["compaction"]["keepRecentTokens"], 1234,
        "trusted now, read fresh"
    );
    std::fs::write(
        env.path("agent/settings.json"),
        "\u{feff}{\"compaction\":{\"enabled\":false,\"reserveTokens\":100}}",
    )
    .unwrap();
    let s = c.ok("getSettings", json!({"sessionId": sid}));
    assert_eq!(
        (
            s["compaction"]["enabled"].as_bool(),
            s["compaction"]["reserveTokens"].as_i64()
        ),
        (Some(false), Some(100))
    );
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"reserveTokens": 7}}),
    );
    let s = c.ok("getSettings", json!({"sessionId": sid}));
    assert_eq!(s["compaction"]["reserveTokens"], 7);
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": null}),
    );
    assert_eq!(
        c.ok("getSettings", json!({"sessionId": sid}))["compaction"]["reserveTokens"],
        100
    );
    // enabled:false stops automatic compaction, even overflow recovery.
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "x".repeat(50_000)}}),
    );
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": assistant_error(now_ms() + 10, "prompt is too long")}),
    );
    assert_eq!(
        c.ok(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "postRun"})
        )["action"],
        "none"
    );
    let sc = c.ok(
        "shouldCompact",
        json!({"contextTokens": 101, "contextWindow": 116, "settings": {"reserveTokens": 16}}),
    );
    assert_eq!(
        (sc["shouldCompact"].as_bool(), sc["threshold"].as_i64()),
        (Some(true), Some(100))
    );
    let sc = c.ok("shouldCompact", json!({"sessionId": sid}));
    assert_eq!(sc["shouldCompact"], false, "disabled");
    let e = c.request("shouldCompact", json!({})).unwrap_err();
    assert_eq!(e["code"], -32602);
}

#[test]
fn transient_provider_errors_are_retried_with_events() {
    let env = Env::new();
    let (_runtime, fake) = support::fake_llm::serve(&["LLM SUMMARY"]);
    fake.state.lock().fail_first = 2;
    env.use_fake_summarizer(
        fake.port,
        "{ enabled = true, maxRetries = 3, baseDelayMs = 50 }",
    );
    let file = env.session("009-bash-executions");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 2000);
    c.ok("subscribe", json!({}));
    let r = c.ok("compact", json!({"sessionId": sid}));
    assert!(r["summary"].as_str().unwrap().starts_with("LLM SUMMARY"));
    let names: Vec<&str> = c
        .notifications
        .iter()
        .filter_map(|n| n["method"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "compaction_start",
            "summarization_retry_scheduled",
            "summarization_retry_attempt_start",
            "summarization_retry_scheduled",
            "summarization_retry_attempt_start",
            "summarization_retry_finished",
            "compaction_end"
        ]
    );
    let first = &c.notifications[1]["params"];
    assert_eq!(
        (
            first["attempt"].as_u64(),
            first["maxAttempts"].as_u64(),
            first["delayMs"].as_u64()
        ),
        (Some(1), Some(3), Some(50))
    );
    assert!(first["errorMessage"].as_str().unwrap().contains("500"));
    assert_eq!(c.notifications[3]["params"]["delayMs"], 100);
    assert_eq!(
        c.notifications[2]["params"],
        json!({"sessionId": sid, "source": "compaction", "reason": "manual"})
    );
    drop(fake);
}

#[test]
fn without_a_dedicated_summarizer_the_sessions_own_model_summarizes_through_its_provider() {
    let env = Env::new();
    let (_runtime, fake) = support::fake_llm::serve(&["FROM THE SESSION MODEL"]);
    env.write_config(&format!(
        "[providers.anthropic]\napi = \"anthropic-messages\"\nbase_url = \"http://127.0.0.1:{}\"\napi_key_env = \"COMPACTD_TEST_ANTHROPIC_KEY\"\n",
        fake.port
    ));
    let file = env.session("009-bash-executions");
    let vars = env.vars();
    let mut pairs: Vec<(&str, &Path)> = vars.iter().map(|(k, v)| (*k, v.as_path())).collect();
    pairs.push(("COMPACTD_TEST_ANTHROPIC_KEY", Path::new("test-key")));
    let mut c = Client::stdio(&[], &pairs, Framing::Ndjson);
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 2000);
    let r = c.ok("compact", json!({"sessionId": sid}));
    assert!(
        r["summary"]
            .as_str()
            .unwrap()
            .starts_with("FROM THE SESSION MODEL"),
        "{r}"
    );
    let received = fake.state.lock().received.clone();
    assert_eq!(received[0].path, "/v1/messages?beta=true");
    assert_eq!(received[0].body["model"], "claude-sonnet-4-5");
    assert_eq!(
        received[0].headers.get("x-api-key").map(String::as_str),
        Some("test-key")
    );
    // A session on another provider (not configured) compacts extractively.
    let other = env.session("024-compacted-once");
    let info = c.ok("openSession", json!({"path": other, "model": {"provider": "openai", "id": "gpt-5", "contextWindow": 400000, "maxTokens": 128000}}));
    let sid2 = info["sessionId"].as_str().unwrap().to_owned();
    keep_recent(&mut c, &sid2, 1000);
    let r = c.ok("compact", json!({"sessionId": sid2}));
    assert_eq!(r["details"]["summarizer"], "extractive");
    drop(fake);
}

#[test]
fn garbage_and_hostile_messages_never_take_the_daemon_down() {
    let env = Env::new();
    let file = env.session("009-bash-executions");
    let mut c = env.stdio(&["--max-frame", "100000"], Framing::Ndjson);
    let sid = open(&mut c, &file);
    let before = std::fs::read(&file).unwrap();
    let mut seed: u64 = 0x2545f4914f6cdd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let methods = [
        "openSession",
        "appendMessage",
        "appendEntry",
        "getContext",
        "compact",
        "checkCompaction",
        "navigateTree",
        "registerHooks",
        "subscribe",
        "setSettingsOverrides",
        "shouldCompact",
        "previewCompaction",
        "setModel",
    ];
    let values = [
        json!(null),
        json!(1),
        json!(-1.5e300),
        json!("x"),
        json!([]),
        json!({}),
        json!({"role": "user"}),
        json!({"type": "label"}),
        json!({"sessionId": sid}),
        json!({"sessionId": sid, "message": {"role": "assistant", "content": 5}}),
        json!({"sessionId": sid, "entry": {"type": "custom_message"}}),
        json!({"sessionId": sid, "phase": "bogus"}),
    ];
    let mut sent = 0;
    for i in 0..300 {
        let r = next();
        let msg = match r % 4 {
            0 => (0..(r % 64)).map(|_| (next() % 256) as u8).filter(|b| *b != b'\n').collect::<Vec<u8>>(),
            1 => json!({"jsonrpc": "2.0", "id": 10_000 + i, "method": methods[(r as usize / 7) % methods.len()], "params": values[(r as usize / 11) % values.len()]}).to_string().into_bytes(),
            2 => json!([{"jsonrpc": "2.0", "id": 20_000 + i, "method": methods[(r as usize / 5) % methods.len()], "params": {"sessionId": sid, "message": values[(r as usize / 3) % values.len()]}}]).to_string().into_bytes(),
            _ => json!({"jsonrpc": "2.0", "id": values[(r as usize / 13) % values.len()], "method": "getContextUsage", "params": {"sessionId": sid}}).to_string().into_bytes(),
        };
        c.send_raw(&[msg.as_slice(), b"\n"].concat());
        sent += 1;
    }
    assert_eq!(sent, 300);
    // Still alive and consistent: the session answers, and whatever was accepted is valid JSON.
    let usage = c.ok("getContextUsage", json!({"sessionId": sid}));
    assert!(usage.is_object() || usage.is_null());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.as_bytes().starts_with(&before),
        "existing bytes never change"
    );
    for line in text.lines() {
        serde_json::from_str::<Value>(line).expect("every line stays valid JSON");
    }
}

/// A closed big session is freed on a thread of its own (`cpu::discard`), but its file lock is
/// released before `closeSession` answers: the path opens again at once, in this daemon and in
/// another one, with the same context; and again after its last holder disconnects.
#[test]
fn a_big_session_closed_or_dropped_opens_again_at_once_with_its_lock_released() {
    let env = Env::new();
    let socket = env.path("d.sock");
    let mut daemon = env.serve(&socket, &[]);
    let mut c = Client::socket(&socket, Framing::Ndjson);
    // 400 turns: 1202 entries, above the size from which a session is freed off the worker.
    let (sid, file) = tool_session(&mut c, env.dir.path(), 400);
    assert!(lines(&file) > 1200);
    // The context as the file gives it (the daemon's calibration samples live in its memory).
    let tokens = |v: Value| (v["tokens"].clone(), v["percent"].clone());
    let usage = tokens(c.ok("getContextUsage", json!({"sessionId": sid})));
    c.ok("closeSession", json!({"sessionId": sid}));
    let again = open(&mut c, &file);
    assert_eq!(
        tokens(c.ok("getContextUsage", json!({"sessionId": again}))),
        usage
    );
    c.ok("closeSession", json!({"sessionId": again}));
    // Another daemon (its own process: the file lock decides) takes it right away.
    let mut second = env.stdio(&[], Framing::Ndjson);
    let sid2 = open(&mut second, &file);
    assert_eq!(
        tokens(second.ok("getContextUsage", json!({"sessionId": sid2}))),
        usage
    );
    second.ok("closeSession", json!({"sessionId": sid2}));
    // The last holder disconnects: the session goes (the daemon sees the disconnect a moment
    // after the socket closes), and the other daemon opens the path. A bare socket, so that
    // dropping it closes it.
    {
        use std::io::{BufRead, Write};
        let mut raw = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": "openSession",
                         "params": {"path": file, "model": model()}});
        raw.write_all(format!("{req}\n").as_bytes()).expect("send");
        let mut reply = String::new();
        std::io::BufReader::new(&raw)
            .read_line(&mut reply)
            .expect("reply");
        assert!(reply.contains("sessionId"), "{reply}");
        match second.request("openSession", json!({"path": file, "model": model()})) {
            Err(e) => assert_eq!(e["data"]["kind"], "locked", "held while connected: {e}"),
            Ok(info) => panic!("opened while another daemon holds it: {info}"),
        }
    }
    let reopened = (0..250)
        .find_map(|_| {
            match second.request("openSession", json!({"path": file, "model": model()})) {
                Ok(info) => info["sessionId"].as_str().map(str::to_owned),
                Err(e) => {
                    assert_eq!(e["data"]["kind"], "locked", "{e}");
                    std::thread::sleep(Duration::from_millis(20));
                    None
                }
            }
        })
        .expect("the path opens again once its last holder is gone");
    assert_eq!(
        tokens(second.ok("getContextUsage", json!({"sessionId": reopened}))),
        usage
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
}
