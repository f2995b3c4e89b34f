//! Continuity and control beyond Pi, from the outside: the real `compactd` binary over stdio,
//! a fake summarizer that takes seconds, and Pi 0.85.0 (the oracle in `$COMPACTD_ORACLE`)
//! loading every file these features change, to prove each stays a Pi session with the
//! intended context. Without the oracle the Pi half skips on a developer machine and fails
//! under `CI=true`.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{keep_recent, next_millisecond, now_ms, tool_session, usage, Env};
use support::oracle::Oracle;
use support::rpc_client::{Client, Framing};

const LONG: Duration = Duration::from_secs(60);

fn model(window: i64) -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": window, "maxTokens": 64000})
}

fn open(c: &mut Client, path: &Path) -> String {
    let info = c.ok(
        "openSession",
        json!({"path": path, "model": model(200_000)}),
    );
    info["sessionId"].as_str().expect("sessionId").to_owned()
}

/// The file's entries (header skipped).
fn entries(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Pi loads `file` with exactly the context compactd serves (`getContext`), and its leaf.
fn pi_agrees(c: &mut Client, sid: &str, file: &Path) -> Option<Value> {
    let oracle = Oracle::find("continuity: Pi loads what compactd wrote")?;
    let pi = oracle
        .analyse(file)
        .unwrap_or_else(|e| panic!("Pi could not load the file: {e}"));
    let ours = c.ok("getContext", json!({"sessionId": sid}));
    assert_eq!(pi["session"]["leafId"], ours["leafId"], "Pi's leaf");
    if let Some(d) = support::first_diff(&ours["messages"], &pi["context"]["messages"], "context") {
        panic!("Pi loads a different context: {d}");
    }
    Some(pi)
}

fn texts(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

/// Item 1: a compaction that takes seconds accepts every append meanwhile, in milliseconds;
/// the compaction is written under the leaf of its write time, so everything appended sits in
/// its kept tail, in compactd's context and in Pi's.
#[test]
fn appends_never_wait_for_a_compaction() {
    let env = Env::new();
    let (runtime, fake) = support::fake_llm::serve(&["SLOW-SUMMARY"]);
    fake.state.lock().delay = Duration::from_secs(3);
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let file = env.session("009-bash-executions");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    keep_recent(&mut c, &sid, 2000);
    c.ok("subscribe", json!({"sessionId": sid}));
    let planned = c.ok("previewCompaction", json!({"sessionId": sid}));
    let first_kept = planned["firstKeptEntryId"].as_str().unwrap().to_owned();
    let compact = c.send("compact", json!({"sessionId": sid}));
    c.wait_notification("compaction_start", LONG).unwrap();
    let mut ids = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..100 {
        let t = Instant::now();
        let r = c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": format!("during compaction {i}")}}),
        );
        slowest = slowest.max(t.elapsed());
        ids.push(r["entryId"].as_str().unwrap().to_owned());
    }
    // Reads answer meanwhile too, and the compaction is still running: every append above was
    // acknowledged while the summarizer was busy.
    let t = Instant::now();
    c.ok("getContextUsage", json!({"sessionId": sid}));
    assert!(t.elapsed() < Duration::from_millis(500));
    assert_eq!(c.ok("listSessions", json!({}))[0]["isCompacting"], true);
    assert!(
        slowest < Duration::from_millis(500),
        "an append waited {slowest:?}"
    );
    let result = c.wait(compact, LONG).expect("compact");
    assert_eq!(result["firstKeptEntryId"], first_kept.as_str());
    assert!(result["summary"]
        .as_str()
        .unwrap()
        .starts_with("SLOW-SUMMARY"));
    let end = c.wait_notification("compaction_end", LONG).unwrap();
    assert_eq!(end["params"]["aborted"], false);

    // The file: the compaction is the last entry, child of the 100th append.
    let all = entries(&file);
    let last = all.last().unwrap();
    assert_eq!(last["type"], "compaction");
    assert_eq!(last["parentId"], ids[99].as_str());
    assert_eq!(last["firstKeptEntryId"], first_kept.as_str());
    // Every append is in the context, after the summary, in order.
    let ctx = c.ok("getContext", json!({"sessionId": sid}));
    assert_eq!(ctx["messages"][0]["role"], "compactionSummary");
    let got: Vec<String> = texts(&ctx["messages"])
        .into_iter()
        .filter(|t| t.starts_with("during compaction "))
        .collect();
    let want: Vec<String> = (0..100).map(|i| format!("during compaction {i}")).collect();
    assert_eq!(got, want);
    if let Some(pi) = pi_agrees(&mut c, &sid, &file) {
        assert_eq!(pi["session"]["leafId"], last["id"]);
        let pi_got: Vec<String> = texts(&pi["context"]["messages"])
            .into_iter()
            .filter(|t| t.starts_with("during compaction "))
            .collect();
        assert_eq!(pi_got, want, "Pi's context after the compaction");
        assert_eq!(pi["context"]["messages"][0]["role"], "compactionSummary");
    }
    drop(fake);
    drop(runtime);
}

/// Item 1's limit: a branch summary (`navigateTree`) still makes appends wait, since the leaf
/// is about to move away from where they would land.
#[test]
fn appends_wait_only_for_a_branch_summary() {
    let env = Env::new();
    let (runtime, fake) = support::fake_llm::serve(&["BRANCH"]);
    fake.state.lock().delay = Duration::from_secs(2);
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let file = env.session("009-bash-executions");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    let branch = c.ok("getBranch", json!({"sessionId": sid}));
    let target = branch[2]["id"].as_str().unwrap().to_owned();
    let nav = c.send(
        "navigateTree",
        json!({"sessionId": sid, "targetId": target, "summarize": true}),
    );
    // The branch summary is running once the summarizer has its request.
    support::wait_until(LONG, "the branch summary started", || {
        !fake.state.lock().received.is_empty()
    });
    let e = c
        .request(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": "x"}}),
        )
        .unwrap_err();
    assert_eq!(e["code"], -32020);
    c.wait(nav, LONG).expect("navigateTree");
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "after"}}),
    );
    drop(fake);
    drop(runtime);
}

/// The lines of the `<tag>` block at the end of a summary.
fn block(summary: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>\n");
    let close = format!("\n</{tag}>");
    let Some(start) = summary.find(&open) else {
        return Vec::new();
    };
    let rest = &summary[start + open.len()..];
    let end = rest.find(&close).unwrap_or(rest.len());
    rest[..end].lines().map(str::to_owned).collect()
}

/// Item 5: `fileListLimit` cuts the summary's file blocks to the most recently touched paths
/// plus `(+K more)`, while `details` keeps every path; unset, the blocks are Pi's, complete.
#[test]
fn file_list_limit_bounds_the_summary_blocks_and_keeps_details_whole() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, file) = tool_session(&mut c, env.dir.path(), 30);
    keep_recent(&mut c, &sid, 1500);
    // Default: Pi's behaviour, every path listed.
    let full = c.ok("compact", json!({"sessionId": sid, "write": false}));
    let all: Vec<String> = full["details"]["readFiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert!(all.len() > 10, "too few summarized reads: {all:?}");
    assert_eq!(block(full["summary"].as_str().unwrap(), "read-files"), all);

    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 1500, "fileListLimit": 5}}),
    );
    assert_eq!(
        c.ok("getSettings", json!({"sessionId": sid}))["compaction"]["fileListLimit"],
        5
    );
    let r = c.ok("compact", json!({"sessionId": sid}));
    assert_eq!(r["details"]["readFiles"], full["details"]["readFiles"]);
    let mut want: Vec<String> = all[all.len() - 5..].to_vec();
    want.push(format!("(+{} more)", all.len() - 5));
    let summary = r["summary"].as_str().unwrap();
    assert_eq!(block(summary, "read-files"), want);
    // The entry on disk carries the bounded summary and the full details.
    let last = entries(&file).pop().unwrap();
    assert_eq!(last["type"], "compaction");
    assert_eq!(last["summary"], summary);
    assert_eq!(last["details"]["readFiles"], full["details"]["readFiles"]);
    if let Some(pi) = pi_agrees(&mut c, &sid, &file) {
        let pi_summary = pi["context"]["messages"][0]["summary"].as_str().unwrap();
        assert_eq!(block(pi_summary, "read-files"), want);
    }
}

/// Item 6: after a compaction Pi knows no usage until the next reply, and its pre-prompt check
/// ignores replies older than the compaction, so a switch to a smaller model (here with a long
/// paste waiting) would send a request known to overflow. `setModel` reports it and the next `checkCompaction` compacts.
#[test]
fn a_switch_to_a_smaller_model_is_reported_and_compacted_before_the_next_request() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, file) = tool_session(&mut c, env.dir.path(), 30);
    keep_recent(&mut c, &sid, 6000);
    c.ok("compact", json!({"sessionId": sid}));
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 1500, "reserveTokens": 500}}),
    );
    // The user pastes a long text; no reply yet, so no usage is known since the compaction.
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": format!("pasted: {}", "log line ".repeat(900))}}),
    );
    // A model whose window holds the context: nothing to report, nothing happens.
    let big = c.ok(
        "setModel",
        json!({"sessionId": sid, "model": model(200_000)}),
    );
    assert_eq!(big["shouldCompact"], false);
    assert_eq!(big["threshold"], 199_500.0);
    let none = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "prePrompt"}),
    );
    assert_eq!(none["action"], "none");
    let before = entries(&file).len();
    let small = json!({"provider": "anthropic", "id": "claude-small", "contextWindow": 4000, "maxTokens": 1000});
    let r = c.ok("setModel", json!({"sessionId": sid, "model": small}));
    assert_eq!(r["shouldCompact"], true, "{r}");
    assert_eq!(r["threshold"], 3500.0);
    assert!(r["tokens"].as_f64().unwrap() > 3500.0);
    assert_eq!(r["entryId"], r["leafId"]);
    let out = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "prePrompt"}),
    );
    assert_eq!(out["action"], "compacted", "{out}");
    assert_eq!(out["reason"], "threshold");
    let all = entries(&file);
    assert_eq!(all.len(), before + 2, "model_change, then the compaction");
    assert_eq!(all.last().unwrap()["type"], "compaction");
    let after = c.ok("getContextUsage", json!({"sessionId": sid}));
    assert_eq!(after["contextWindow"], 4000);
    // Reported once: the next check is Pi's own again.
    let again = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "prePrompt"}),
    );
    assert_eq!(again["action"], "none");
    if let Some(pi) = pi_agrees(&mut c, &sid, &file) {
        assert_eq!(pi["context"]["messages"][0]["role"], "compactionSummary");
        assert_eq!(pi["session"]["leafId"], all.last().unwrap()["id"]);
    }
}

/// Item 7: what a compaction summarized away is found by `searchHistory` (flagged
/// `compacted`) and returned verbatim by `getEntry`; searching writes nothing.
#[test]
fn history_recall_finds_and_returns_compacted_entries() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, file) = tool_session(&mut c, env.dir.path(), 30);
    keep_recent(&mut c, &sid, 1500);
    let r = c.ok("compact", json!({"sessionId": sid}));
    assert!(!r["summary"].as_str().unwrap().contains("fn f3()"));
    let before = std::fs::read(&file).unwrap();

    let hits = c.ok(
        "searchHistory",
        json!({"sessionId": sid, "query": "FN F3()"}),
    );
    let hits = hits.as_array().unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    let hit = &hits[0];
    assert_eq!(hit["role"], "toolResult");
    assert_eq!(hit["compacted"], true);
    assert_eq!(hit["onBranch"], true);
    assert!(hit["snippet"].as_str().unwrap().contains("fn f3()"));
    let id = hit["entryId"].as_str().unwrap();
    let stored = entries(&file).into_iter().find(|e| e["id"] == id).unwrap();
    assert_eq!(hit["timestamp"], stored["timestamp"]);
    assert_eq!(
        c.ok("getEntry", json!({"sessionId": sid, "entryId": id})),
        stored
    );

    // The kept tail is not compacted; regex hits come most recent first, bounded by limit.
    let kept = c.ok(
        "searchHistory",
        json!({"sessionId": sid, "query": "fn f29()"}),
    );
    assert_eq!(kept[0]["compacted"], false);
    let rx = c.ok(
        "searchHistory",
        json!({"sessionId": sid, "query": r"^turn 1\d:", "regex": true, "limit": 3}),
    );
    let texts: Vec<&str> = rx
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["snippet"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 3);
    assert!(
        texts[0].starts_with("turn 19:") && texts[2].starts_with("turn 17:"),
        "{texts:?}"
    );
    // The summary itself is searchable too.
    let s = c.ok(
        "searchHistory",
        json!({"sessionId": sid, "query": "src/f00.rs"}),
    );
    assert!(s
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["role"] == "compaction"));

    let e = c
        .request(
            "searchHistory",
            json!({"sessionId": sid, "query": "(", "regex": true}),
        )
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    let e = c
        .request("getEntry", json!({"sessionId": sid, "entryId": "nope"}))
        .unwrap_err();
    assert_eq!(e["code"], -32022);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "recall writes nothing"
    );
}

/// Appends `turns` more turns of the `tool_session` shape, reading `src/gNN.rs`.
fn more_turns(c: &mut Client, sid: &str, round: usize, turns: usize) {
    let t0 = now_ms() - 500_000 + (round * 10_000) as i64;
    for i in 0..turns {
        let ts = t0 + i as i64 * 100;
        c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": format!("round {round} turn {i} {}", "more ".repeat(150)), "timestamp": ts}}));
        c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": format!("done {round}.{i} {}", "ok ".repeat(150))}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage(5000), "stopReason": "stop", "timestamp": ts + 1}}));
    }
}

/// Item 2: pins survive ten successive compactions byte for byte, in compactd's context and in
/// Pi's; an unpinned text leaves the next summary; the model never sees the section, and one it
/// invents is replaced by compactd's.
#[test]
fn pins_survive_ten_compactions_verbatim() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime.block_on(support::fake_llm::start(vec![
        (
            "## Goal\nship it\n\n## Pinned\n\nmodel-invented pin".into(),
            "stop".into()
        );
        20
    ]));
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, file) = tool_session(&mut c, env.dir.path(), 10);
    keep_recent(&mut c, &sid, 800);
    let rules = "Never push to main.\n\n- run `cargo fmt`\n- keep   two  spaces   here\n";
    let p1 = c.ok(
        "pin",
        json!({"sessionId": sid, "text": rules, "label": "Rules"}),
    );
    let tasks = "TODO: [ ] parser  [x] reader";
    let p2 = c.ok("pin", json!({"sessionId": sid, "text": tasks}));
    let pins = c.ok("listPins", json!({"sessionId": sid}));
    assert_eq!(pins.as_array().unwrap().len(), 2);
    assert_eq!(pins[0]["text"], rules);
    assert_eq!(pins[0]["label"], "Rules");
    assert_eq!(pins[1]["pinId"], p2["pinId"]);
    // Pins are Pi custom entries.
    let entry = entries(&file)
        .into_iter()
        .find(|e| e["id"] == p1["pinId"])
        .unwrap();
    assert_eq!(
        (entry["type"].as_str(), entry["customType"].as_str()),
        (Some("custom"), Some("compactd.pin"))
    );
    for round in 0..10 {
        more_turns(&mut c, &sid, round, 3);
        if round == 7 {
            c.ok("unpin", json!({"sessionId": sid, "pinId": p2["pinId"]}));
        }
        let r = c.ok("compact", json!({"sessionId": sid}));
        let summary = r["summary"].as_str().unwrap();
        assert_eq!(
            summary.matches(rules).count(),
            1,
            "round {round}: {summary}"
        );
        assert_eq!(summary.matches("## Pinned").count(), 1, "round {round}");
        assert!(!summary.contains("model-invented pin"), "round {round}");
        assert_eq!(
            summary.contains(tasks),
            round < 7,
            "round {round}: the unpinned text leaves"
        );
        let ctx = c.ok("getContext", json!({"sessionId": sid}));
        assert_eq!(ctx["messages"][0]["summary"], summary);
        if let Some(pi) = pi_agrees(&mut c, &sid, &file) {
            let pi_summary = pi["context"]["messages"][0]["summary"].as_str().unwrap();
            assert!(pi_summary.contains(rules), "round {round}: Pi's context");
        }
    }
    // The model was never shown the pins: not in any request after the first compaction.
    let received = fake.state.lock().received.clone();
    assert!(received.len() >= 10);
    for req in &received {
        let body = req.body.to_string();
        assert!(
            !body.contains("Never push to main."),
            "a request carried a pin"
        );
    }
    assert_eq!(
        c.ok("listPins", json!({"sessionId": sid}))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let e = c
        .request("unpin", json!({"sessionId": sid, "pinId": p2["pinId"]}))
        .unwrap_err();
    assert_eq!(e["code"], -32022);
    let e = c
        .request("pin", json!({"sessionId": sid, "text": "  "}))
        .unwrap_err();
    assert_eq!(e["code"], -32602);
    drop(fake);
    drop(runtime);
}

/// Item 2 for navigation: the branch summary of the branch being left carries its live pins.
#[test]
fn branch_summaries_carry_the_pins_of_the_branch_left() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, file) = tool_session(&mut c, env.dir.path(), 4);
    let text = "Deploy only on Fridays.";
    c.ok("pin", json!({"sessionId": sid, "text": text}));
    let branch = c.ok("getBranch", json!({"sessionId": sid}));
    let target = branch[3]["id"].as_str().unwrap().to_owned();
    let r = c.ok(
        "navigateTree",
        json!({"sessionId": sid, "targetId": target, "summarize": true}),
    );
    let summary = r["summaryEntry"]["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!("## Pinned\n\n{text}")),
        "{summary}"
    );
    if let Some(pi) = pi_agrees(&mut c, &sid, &file) {
        let last = pi["context"]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["role"], "branchSummary");
        assert!(last["summary"].as_str().unwrap().contains(text));
    }
}

/// A reply whose usage reports `input` tokens (the agent's system prompt and tools included).
fn reply(text: &str, input: i64) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}], "api": "anthropic-messages", "provider": "anthropic",
           "model": "claude-sonnet-4-5", "usage": usage(input), "stopReason": "stop", "timestamp": now_ms()})
}

/// Item 4 with the pattern of an agent whose fixed overhead is above the threshold (every reply
/// reports 7500 input tokens against a 7000 threshold): without the breaker every check
/// compacts, with it two compactions run, one event says why, then automatic compaction pauses
/// until a manual compaction; overflow recovery still runs while paused.
#[test]
fn the_thrash_breaker_bounds_compactions_that_cannot_help() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, file) = tool_session(&mut c, env.dir.path(), 6);
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 300, "reserveTokens": 1000}}),
    );
    let m = json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 8000, "maxTokens": 1000});
    c.ok("setModel", json!({"sessionId": sid, "model": m}));
    c.ok("subscribe", json!({"sessionId": sid}));
    let mut actions = Vec::new();
    for i in 0..8 {
        next_millisecond();
        c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": format!("step {i} {}", "go ".repeat(300)), "timestamp": now_ms()}}));
        c.ok("appendMessage", json!({"sessionId": sid, "message": reply(&format!("did {i} {}", "ok ".repeat(300)), 7500)}));
        let out = c.ok(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "prePrompt"}),
        );
        actions.push(out["action"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        actions,
        [
            "compacted",
            "none",
            "compacted",
            "none",
            "none",
            "none",
            "none",
            "none"
        ]
    );
    let compactions = entries(&file)
        .iter()
        .filter(|e| e["type"] == "compaction")
        .count();
    assert_eq!(compactions, 2);
    let events: Vec<Value> = c
        .notifications
        .iter()
        .filter(|n| n["method"] == "compaction_suppressed")
        .map(|n| n["params"].clone())
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["paused"], false);
    assert_eq!(events[1]["paused"], true);
    assert_eq!(events[1]["reason"], "ineffective");
    assert_eq!(events[1]["threshold"], 7000);
    assert_eq!(events[1]["tokensAfter"], 7520);
    assert_eq!(events[1]["sessionId"], sid.as_str());
    // A monitor sees the pause in listSessions' status (`compactd top` shows it).
    let listed = c.ok("listSessions", json!({}));
    assert_eq!(listed[0]["autoCompaction"], "paused", "{listed}");
    // Overflow recovery is never suppressed.
    c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": "big", "timestamp": now_ms()}}));
    let mut err = reply("", 0);
    err["content"] = json!([]);
    err["stopReason"] = json!("error");
    err["errorMessage"] = json!("prompt is too long: 9100 tokens > 8000 maximum");
    c.ok("appendMessage", json!({"sessionId": sid, "message": err}));
    let out = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "postRun"}),
    );
    assert_eq!(
        (out["action"].as_str(), out["reason"].as_str()),
        (Some("compacted"), Some("overflow"))
    );
    // A manual compaction resumes automatic compaction.
    c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": format!("again {}", "go ".repeat(300)), "timestamp": now_ms()}}));
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": reply(&"ok ".repeat(300), 7500)}),
    );
    c.ok("compact", json!({"sessionId": sid}));
    assert_eq!(c.ok("listSessions", json!({}))[0]["autoCompaction"], "on");
    c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": format!("more {}", "go ".repeat(300)), "timestamp": now_ms()}}));
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": reply(&"ok ".repeat(300), 7500)}),
    );
    let out = c.ok(
        "checkCompaction",
        json!({"sessionId": sid, "phase": "prePrompt"}),
    );
    assert_eq!(out["action"], "compacted");
    pi_agrees(&mut c, &sid, &file);

    // With the breaker off (Pi's behaviour) every check compacts.
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 300, "reserveTokens": 1000, "maxIneffectiveCompactions": 0}}),
    );
    for i in 0..3 {
        next_millisecond();
        c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": format!("off {i} {}", "go ".repeat(300)), "timestamp": now_ms()}}));
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": reply(&"ok ".repeat(300), 7500)}),
        );
        let out = c.ok(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "prePrompt"}),
        );
        assert_eq!(out["action"], "compacted", "breaker off, check {i}");
    }
}

/// Item 3: `undoCompaction` brings back the exact pre-compaction context, persistently (Pi loads
/// the same); `editSummary` replaces the summary with a sibling compaction; both refuse when
/// the context moved on after the compaction.
#[test]
fn undo_and_edit_the_latest_compaction() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let (sid, file) = tool_session(&mut c, env.dir.path(), 10);
    keep_recent(&mut c, &sid, 800);
    let e = c
        .request("undoCompaction", json!({"sessionId": sid}))
        .unwrap_err();
    assert_eq!(e["code"], -32010, "nothing to undo");
    c.ok("subscribe", json!({"sessionId": sid}));
    let before = c.ok("getContext", json!({"sessionId": sid}));
    c.ok("compact", json!({"sessionId": sid}));
    let compaction = entries(&file).pop().unwrap();
    let undone = c.ok("undoCompaction", json!({"sessionId": sid}));
    assert_eq!(undone["undoneCompactionId"], compaction["id"]);
    let after = c.ok("getContext", json!({"sessionId": sid}));
    assert_eq!(
        after["messages"], before["messages"],
        "the pre-compaction context"
    );
    let all = entries(&file);
    let marker = all.last().unwrap();
    assert_eq!(marker["customType"], "compactd.undo_compaction");
    assert_eq!(marker["parentId"], compaction["parentId"]);
    assert!(
        all.iter().any(|e| e["id"] == compaction["id"]),
        "kept in the tree"
    );
    let ev = c.wait_notification("compaction_undone", LONG).unwrap();
    assert_eq!(ev["params"]["compactionId"], compaction["id"]);
    if let Some(pi) = pi_agrees(&mut c, &sid, &file) {
        assert_eq!(pi["context"]["messages"], before["messages"]);
    }
    // Persistent: a fresh daemon loads the same.
    drop(c);
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    assert_eq!(
        c.ok("getContext", json!({"sessionId": sid}))["messages"],
        before["messages"]
    );

    // Edit: a corrected sibling of the latest compaction.
    keep_recent(&mut c, &sid, 800);
    c.ok("subscribe", json!({"sessionId": sid}));
    c.ok("compact", json!({"sessionId": sid}));
    let original = entries(&file).pop().unwrap();
    let fixed = "## Goal\nThe user wants every file read; the reader is done.";
    let r = c.ok("editSummary", json!({"sessionId": sid, "summary": fixed}));
    let edited = entries(&file).pop().unwrap();
    assert_eq!(r["entry"], edited);
    assert_eq!(edited["type"], "compaction");
    assert_eq!(edited["summary"], fixed);
    assert_eq!(edited["parentId"], original["parentId"]);
    assert_eq!(edited["firstKeptEntryId"], original["firstKeptEntryId"]);
    assert_eq!(edited["tokensBefore"], original["tokensBefore"]);
    assert_eq!(edited["details"]["editedFrom"], original["id"]);
    assert_eq!(
        edited["details"]["readFiles"],
        original["details"]["readFiles"]
    );
    let ctx = c.ok("getContext", json!({"sessionId": sid}));
    assert_eq!(ctx["messages"][0]["summary"], fixed);
    let ev = c.wait_notification("summary_edited", LONG).unwrap();
    assert_eq!(ev["params"]["compactionId"], original["id"]);
    if let Some(pi) = pi_agrees(&mut c, &sid, &file) {
        assert_eq!(pi["context"]["messages"][0]["summary"], fixed);
    }
    // Refused once the conversation moved on past the compaction; nothing is written.
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "next"}}),
    );
    let bytes = std::fs::read(&file).unwrap();
    for (m, params) in [
        ("undoCompaction", json!({"sessionId": sid})),
        ("editSummary", json!({"sessionId": sid, "summary": "x"})),
    ] {
        let e = c.request(m, params).unwrap_err();
        assert_eq!(e["code"], -32021, "{m}: {e}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
}

/// Every summary compactd writes ends with the recall footer: the tools to reach the exact
/// text and the entries it stands for (from the branch's first message to the one before the
/// cut). The next compaction's summarizer never sees it, and the summary it writes carries one
/// footer, not two; `recallFooter: false` leaves summaries as Pi writes them.
#[test]
fn summaries_end_with_the_recall_footer() {
    let env = Env::new();
    let (runtime, fake) = support::fake_llm::serve(&["FIRST", "SECOND", "THIRD"]);
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let (sid, file) = tool_session(&mut c, &dir, 12);
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 800, "speculativeAt": 0}}),
    );
    let first = c.ok("compact", json!({"sessionId": sid}));
    let summary = first["summary"].as_str().unwrap();
    let footer = summary.lines().last().unwrap();
    assert!(footer.starts_with("[compactd recall] "), "{summary}");
    assert!(footer.contains("search_history") && footer.contains("get_entry"));
    let branch: Vec<Value> = entries(&file);
    let messages: Vec<&Value> = branch.iter().filter(|e| e["type"] == "message").collect();
    let kept_at = branch
        .iter()
        .position(|e| e["id"] == first["firstKeptEntryId"])
        .unwrap();
    let last_covered = branch[..kept_at]
        .iter()
        .rev()
        .find(|e| e["type"] == "message")
        .unwrap();
    assert!(
        footer.contains(&format!(
            "entries {} to {}",
            messages[0]["id"].as_str().unwrap(),
            last_covered["id"].as_str().unwrap()
        )),
        "{footer}"
    );
    // Pi's file blocks stay before it, as Pi writes them.
    assert!(summary.starts_with("FIRST"));

    // More work, then a second compaction: an update of the first.
    for i in 0..6 {
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": format!("more work {i} {}", "please ".repeat(100))}}),
        );
    }
    let second = c.ok("compact", json!({"sessionId": sid}));
    let prompt = fake.requests().last().unwrap().raw_body.clone();
    assert!(prompt.contains("FIRST"), "the previous summary is updated");
    assert!(
        !prompt.contains("[compactd recall]"),
        "the footer never reaches the summarizer"
    );
    let summary = second["summary"].as_str().unwrap();
    assert_eq!(summary.matches("[compactd recall]").count(), 1, "{summary}");

    // Off: Pi's summary, no footer.
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 800, "speculativeAt": 0, "recallFooter": false}}),
    );
    for i in 0..6 {
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": format!("even more {i} {}", "please ".repeat(100))}}),
        );
    }
    let third = c.ok("compact", json!({"sessionId": sid}));
    assert!(!third["summary"]
        .as_str()
        .unwrap()
        .contains("[compactd recall]"));
    drop(fake);
    drop(runtime);
}

/// A refusal keeps Pi's exact message and says why, in numbers, and what to change.
#[test]
fn nothing_to_compact_says_why() {
    let env = Env::new();
    let file = env.session("003-tiny-nothing-to-compact");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    let err = c
        .request("compact", json!({"sessionId": sid}))
        .expect_err("nothing to compact");
    assert_eq!(err["message"], "Nothing to compact (session too small)");
    let data = &err["data"];
    assert_eq!(data["kind"], "nothing_to_compact");
    assert_eq!(data["reason"], "within_keep_recent", "{err}");
    assert!(data["hint"].as_str().unwrap().contains("keepRecentTokens"));
    assert_eq!(data["keepRecentTokens"], 20000);
}
