//! The second tier through the real binary (beyond Pi, `compaction.clearToolResults`): the
//! setting, a clearing pass and its `compactd.clear` entry, the projection `getContext` returns,
//! the estimate the decisions use, `clearAtLeast` and a stable prefix between passes, the
//! originals through `getEntry` and in a summarizing compaction's input, Pi's own view of the
//! file (the oracle), and a kill -9 during passes.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon_env::{parsed_lines, Env};
use support::oracle::Oracle;
use support::rpc_client::{Client, Framing};

/// A model with a small window: threshold 40000 − 4000 = 36000.
fn model() -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 40000, "maxTokens": 4000})
}

/// A tool output of about `tokens` tokens that names `fact`.
fn output(fact: &str, tokens: usize) -> String {
    let mut s = format!("{fact}\n");
    while s.len() < tokens * 4 {
        s.push_str("let value = compute(input); // line of the file\n");
    }
    s.truncate(tokens * 4);
    s
}

struct Agent {
    c: Client,
    sid: String,
    path: PathBuf,
    turn: usize,
    /// Entry id of each turn's tool result.
    results: Vec<String>,
}

impl Agent {
    fn start(env: &Env) -> Agent {
        Agent::start_with(
            env,
            model(),
            json!({"reserveTokens": 4000, "clearToolResults": {
                "at": 0.3, "keepRecentTokens": 6000, "clearAtLeast": 4000, "excludeTools": ["memory"],
                "cacheAware": false}}),
        )
    }

    /// A session of `model` with the compaction settings `compaction`.
    fn start_with(env: &Env, model: Value, compaction: Value) -> Agent {
        let mut c = env.stdio(&[], Framing::Ndjson);
        let info = c.ok(
            "createSession",
            json!({"cwd": env.dir.path(), "sessionDir": env.dir.path(), "model": model}),
        );
        let sid = info["sessionId"].as_str().unwrap().to_owned();
        let path = PathBuf::from(info["path"].as_str().unwrap());
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": compaction}),
        );
        Agent {
            c,
            sid,
            path,
            turn: 0,
            results: Vec::new(),
        }
    }

    fn usage_now(&mut self) -> i64 {
        self.c.ok("getContextUsage", json!({"sessionId": self.sid}))["tokens"]
            .as_f64()
            .unwrap_or(0.0) as i64
    }

    /// One turn: a request, a call of `tool` on `path`, its ~2500-token output naming
    /// `FACT-<turn>`, and a reply whose usage is exactly the context it was sent (the
    /// projection's estimate, as a provider would count what it received).
    fn turn(&mut self, tool: &str, path: &str) {
        let i = self.turn;
        self.turn += 1;
        let ts = support::daemon_env::now_ms();
        let user = json!({"role": "user", "content": format!("turn {i}: look at {path}"), "timestamp": ts});
        self.c.ok(
            "appendMessage",
            json!({"sessionId": self.sid, "message": user}),
        );
        let input = self.usage_now();
        let call = json!({"role": "assistant", "content": [{"type": "toolCall", "id": format!("call_{i}"), "name": tool, "arguments": {"path": path}}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": support::daemon_env::usage(input), "stopReason": "toolUse", "timestamp": ts + 1});
        self.c.ok(
            "appendMessage",
            json!({"sessionId": self.sid, "message": call}),
        );
        let result = json!({"role": "toolResult", "toolCallId": format!("call_{i}"), "toolName": tool,
            "content": [{"type": "text", "text": output(&format!("FACT-{i}"), 2500)}], "details": {"lines": 200}, "isError": false, "timestamp": ts + 2});
        let r = self.c.ok(
            "appendMessage",
            json!({"sessionId": self.sid, "message": result}),
        );
        self.results.push(r["entryId"].as_str().unwrap().to_owned());
        let input = self.usage_now();
        let reply = json!({"role": "assistant", "content": [{"type": "text", "text": format!("Done with turn {i}.")}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": support::daemon_env::usage(input), "stopReason": "stop", "timestamp": ts + 3});
        self.c.ok(
            "appendMessage",
            json!({"sessionId": self.sid, "message": reply}),
        );
    }

    /// A long user message (about 1200 tokens of conversation no pass can clear), then a turn
    /// reading the next file.
    fn talk_then_read(&mut self) {
        let ts = support::daemon_env::now_ms();
        let talk = json!({"role": "user", "content": "x ".repeat(2400), "timestamp": ts});
        self.c.ok(
            "appendMessage",
            json!({"sessionId": self.sid, "message": talk}),
        );
        let path = format!("f{}", self.turn);
        self.turn("read", &path);
    }

    fn check(&mut self) -> Value {
        self.c.ok(
            "checkCompaction",
            json!({"sessionId": self.sid, "phase": "postRun"}),
        )
    }

    fn context(&mut self) -> Vec<Value> {
        self.c.ok("getContext", json!({"sessionId": self.sid}))["messages"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The message of tool result `entry_id` in `context`.
    fn result_in<'a>(&self, context: &'a [Value], entry_id: &str) -> &'a Value {
        let i = self.results.iter().position(|r| r == entry_id).unwrap();
        context
            .iter()
            .find(|m| m["toolCallId"] == format!("call_{i}"))
            .unwrap_or_else(|| panic!("no result of call_{i} in the context"))
    }

    fn passes(&self) -> Vec<Value> {
        parsed_lines(&self.path)
            .unwrap()
            .into_iter()
            .filter(|l| l["type"] == "custom" && l["customType"] == "compactd.clear")
            .collect()
    }
}

fn is_placeholder(m: &Value, entry_id: &str) -> bool {
    let content = m["content"].as_array().unwrap();
    content.len() == 1
        && content[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("entry {entry_id}")) && t.contains("get_entry"))
}

fn text_of(m: &Value) -> String {
    m["content"][0]["text"].as_str().unwrap_or("").to_owned()
}

#[test]
fn settings_are_reported_and_refused_by_name() {
    let env = Env::new();
    let mut a = Agent::start(&env);
    let s = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(
        s["compaction"]["clearToolResults"],
        json!({"at": 0.3, "keepRecentTokens": 6000, "clearAtLeast": 4000, "excludeTools": ["memory"],
            "cacheAware": false, "summarizeAt": 1})
    );
    for (bad, name) in [
        (json!({"at": 1.5}), "compaction.clearToolResults.at"),
        (
            json!({"keepRecentTokens": -5}),
            "compaction.clearToolResults.keepRecentTokens",
        ),
        (json!({"clearAtLeast": "many"}), "clearAtLeast"),
        (json!({"keep": 1}), "compaction.clearToolResults.keep"),
        (
            json!({"cacheAware": 1}),
            "compaction.clearToolResults.cacheAware",
        ),
        (
            json!({"summarizeAt": 1.01}),
            "compaction.clearToolResults.summarizeAt",
        ),
    ] {
        let e =
            a.c.request(
                "setSettingsOverrides",
                json!({"sessionId": a.sid, "compaction": {"clearToolResults": bad}}),
            )
            .unwrap_err();
        assert_eq!(e["code"], -32602, "{e}");
        assert!(e["message"].as_str().unwrap().contains(name), "{e}");
    }
    // The refused overrides changed nothing; null turns it off.
    let s = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(s["compaction"]["clearToolResults"]["at"], 0.3);
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"clearToolResults": null}}),
    );
    let s = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(s["compaction"]["clearToolResults"], Value::Null);

    // Pi's settings file: its block is read, members filled with the defaults.
    std::fs::write(
        env.path("agent").join("settings.json"),
        r#"{"compaction": {"clearToolResults": {"at": 0.6}}}"#,
    )
    .unwrap();
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": null}),
    );
    let s = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(
        s["compaction"]["clearToolResults"],
        json!({"at": 0.6, "keepRecentTokens": 20000, "clearAtLeast": 10000, "excludeTools": [],
            "cacheAware": true, "summarizeAt": 1})
    );
}

#[test]
fn a_pass_clears_old_output_reversibly_and_the_prefix_stays_stable() {
    let env = Env::new();
    let mut a = Agent::start(&env);
    a.c.ok("subscribe", json!({"sessionId": a.sid}));
    // Turns 0–7: read f0..f5 and f1 again (turn 6), a `memory` call at turn 3, read f7.
    for (tool, path) in [
        ("read", "f0"),
        ("read", "f1"),
        ("read", "f2"),
        ("memory", "notes"),
        ("read", "f4"),
        ("read", "f5"),
        ("read", "f1"),
        ("read", "f7"),
    ] {
        a.turn(tool, path);
    }
    let before = a.context();
    let usage_before = a.usage_now();
    let out = a.check();
    assert_eq!(out["action"], "none", "{out}");
    assert_eq!(out["contextChanged"], true, "{out}");
    let r = a.results.clone();
    // The superseded read of f1 first, then the old ones outside the newest 6000 tokens
    // (r7, r6, r5 stay), never the excluded `memory` (r3).
    let cleared = &out["cleared"];
    assert_eq!(
        cleared["entryIds"],
        json!([r[1], r[0], r[2], r[4]]),
        "{out}"
    );
    let freed = cleared["tokensFreed"].as_u64().unwrap();
    assert!(freed > 9000 && freed < 10000, "{out}");

    // One custom entry in the file, as Pi's custom entries are written.
    let passes = a.passes();
    assert_eq!(passes.len(), 1);
    assert_eq!(passes[0]["data"]["entryIds"], cleared["entryIds"]);
    assert_eq!(passes[0]["data"]["tokensFreed"], freed);

    // The event.
    let ev =
        a.c.wait_notification("context_cleared", Duration::from_secs(5))
            .expect("context_cleared");
    assert_eq!(ev["params"]["entryIds"], cleared["entryIds"]);
    assert_eq!(ev["params"]["tokensFreed"], freed);
    assert_eq!(ev["params"]["tokensBefore"], usage_before);
    let after = ev["params"]["tokensAfter"].as_f64().unwrap();
    assert!(after < usage_before as f64 - 9000.0, "{ev}");

    // The projection: cleared outputs are one short text naming the entry, calls keep their
    // results (id, tool name, isError), the newest and the excluded outputs are verbatim.
    let ctx = a.context();
    assert_eq!(ctx.len(), before.len());
    for id in [&r[0], &r[1], &r[2], &r[4]] {
        let m = a.result_in(&ctx, id);
        assert!(is_placeholder(m, id), "{m}");
        assert_eq!(m["role"], "toolResult");
        assert_eq!(m["isError"], false);
        assert!(m.get("details").is_none(), "{m}");
        assert!(m["toolName"].is_string());
    }
    for (i, id) in [(3, &r[3]), (5, &r[5]), (6, &r[6]), (7, &r[7])] {
        let m = a.result_in(&ctx, id);
        assert!(text_of(m).starts_with(&format!("FACT-{i}")), "{m}");
    }
    // The llm format projects the same.
    let llm =
        a.c.ok("getContext", json!({"sessionId": a.sid, "format": "llm"}))["messages"].clone();
    assert!(llm.to_string().contains(&format!("entry {}", r[0])));
    assert!(!llm.to_string().contains("FACT-0"));

    // The estimate counts the projection until a reply reports usage.
    let usage = a.c.ok("getContextUsage", json!({"sessionId": a.sid}));
    assert_eq!(usage["tokens"].as_f64().unwrap(), after, "{usage}");

    // The session closed and opened again (the projection rebuilt from the path, not kept up
    // to date pass by pass) projects and counts the same.
    a.c.ok("closeSession", json!({"sessionId": a.sid}));
    a.sid =
        a.c.ok("openSession", json!({"path": a.path, "model": model()}))["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"reserveTokens": 4000, "clearToolResults": {
            "at": 0.3, "keepRecentTokens": 6000, "clearAtLeast": 4000, "excludeTools": ["memory"],
                "cacheAware": false}}}),
    );
    assert_eq!(a.context(), ctx);
    assert_eq!(
        a.c.ok("getContextUsage", json!({"sessionId": a.sid}))["tokens"],
        usage["tokens"]
    );

    // getEntry gives the original back.
    let e =
        a.c.ok("getEntry", json!({"sessionId": a.sid, "entryId": r[0]}));
    assert!(e["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("FACT-0"));

    // A turn later only r5 is clearable (2500 tokens < clearAtLeast 4000): no pass, and the
    // context only grew at its end.
    a.turn("read", "f8");
    let out = a.check();
    assert!(out.get("cleared").is_none(), "{out}");
    assert_eq!(a.passes().len(), 1);
    let grown = a.context();
    assert_eq!(
        &grown[..ctx.len()],
        &ctx[..],
        "the prefix changed between passes"
    );

    // Another turn: r5 and r6 free enough together.
    a.turn("read", "f9");
    let out = a.check();
    assert_eq!(out["cleared"]["entryIds"], json!([r[5], r[6]]), "{out}");
    assert_eq!(a.passes().len(), 2);

    // What clearing saved: each reply after a pass left its tokens out.
    a.turn("read", "f10");
    let report = a.c.ok("getCostReport", json!({"sessionId": a.sid}));
    let clearing = &report["clearing"];
    // Dollars are rounded where they are summed: no float noise.
    let agent_usd = report["agent"]["usd"].as_f64().unwrap();
    assert_eq!(agent_usd, (agent_usd * 1e9).round() / 1e9, "{report}");
    assert!(report["agent"]["usd"].to_string().len() <= 12, "{report}");
    assert_eq!(clearing["passes"], 2, "{report}");
    let freed2 = out["cleared"]["tokensFreed"].as_u64().unwrap();
    assert_eq!(clearing["tokensFreed"], freed + freed2);
    // Replies after pass 1: turns 8 and 9 (two each); after both: turn 10 (two).
    assert_eq!(
        clearing["tokensNotSent"],
        4 * freed + 2 * (freed + freed2),
        "{report}"
    );
    // Priced at claude-sonnet-4-5's cache reads ($0.30/M), less the rewrites the passes caused
    // (this fake agent reports no cache reads, so every reply after a pass rewrote it all).
    let expected = clearing["tokensNotSent"].as_f64().unwrap() * 0.30 / 1e6
        - clearing["cacheRewriteUsd"].as_f64().unwrap();
    assert!(
        (clearing["usdSaved"].as_f64().unwrap() - expected).abs() < 1e-8,
        "{report}"
    );

    // Pi loads the file and sees every original output (its context ignores the custom
    // entries), and agrees with compactd's Pi-exact analysis of it.
    if let Some(oracle) =
        Oracle::find("a_pass_clears_old_output_reversibly_and_the_prefix_stays_stable")
    {
        let pi = oracle.analyse(&a.path).expect("Pi loads the file");
        let messages = pi["context"]["messages"].as_array().unwrap();
        for i in [0, 1, 2, 4, 5, 6] {
            let m = messages
                .iter()
                .find(|m| m["toolCallId"] == format!("call_{i}"))
                .unwrap();
            assert!(text_of(m).starts_with(&format!("FACT-{i}")), "{m}");
        }
        let ours = env.inspect(&a.path).expect("inspect");
        oracle.agrees(&a.path, &ours).unwrap();
    }
}

#[test]
fn summarizing_after_clearing_reads_the_originals_and_keeps_the_tail_projected() {
    let env = Env::new();
    let mut a = Agent::start(&env);
    for i in 0..9 {
        a.turn("read", &format!("f{i}"));
    }
    let out = a.check();
    assert!(out["cleared"].is_object(), "{out}");
    assert_eq!(out["action"], "none");
    let first = a.passes()[0]["data"]["entryIds"].clone();
    let r0 = a.results[0].clone();
    assert!(first.as_array().unwrap().contains(&json!(r0)));

    // The threshold comes down under the projected context: the summary's input holds the
    // original outputs.
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"reserveTokens": 35000, "keepRecentTokens": 12000,
            "clearToolResults": {"at": 0.3, "keepRecentTokens": 6000, "clearAtLeast": 4000}}}),
    );
    let preview = a.c.ok(
        "previewCompaction",
        json!({"sessionId": a.sid, "detail": "full"}),
    );
    let serialized = preview["serialized"].to_string();
    assert!(
        serialized.contains("FACT-0"),
        "the summarizer must see the original output"
    );
    assert!(preview["clearing"].is_object(), "{}", preview["clearing"]);
    let out = a.check();
    assert_eq!(out["action"], "compacted", "{out}");
    let kept_from = out["result"]["firstKeptEntryId"]
        .as_str()
        .unwrap()
        .to_owned();

    // The kept tail stays projected: a cleared result kept after the cut is still short.
    let ctx = a.context();
    assert_eq!(ctx[0]["role"], "compactionSummary");
    let lines = parsed_lines(&a.path).unwrap();
    let kept_at = lines.iter().position(|l| l["id"] == kept_from).unwrap();
    let cleared: Vec<String> = a
        .passes()
        .iter()
        .flat_map(|p| p["data"]["entryIds"].as_array().unwrap().clone())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let kept_cleared: Vec<&String> = cleared
        .iter()
        .filter(|id| lines.iter().position(|l| l["id"] == **id).unwrap() > kept_at)
        .collect();
    for id in &kept_cleared {
        assert!(is_placeholder(a.result_in(&ctx, id), id));
    }
    assert!(
        !kept_cleared.is_empty(),
        "the kept tail should hold cleared outputs: {cleared:?}"
    );
    // The summary entry is Pi's: the file still loads as a Pi session with both tiers in it.
    let summary = out["result"]["summary"].as_str().unwrap();
    assert!(!summary.contains("Output cleared by compactd"), "{summary}");
}

/// claude-sonnet-4-5 (priced: cache reads $0.30/M, writes $3.75/M) with a window of 100000:
/// threshold 96000.
fn wide_model() -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 100000, "maxTokens": 4000})
}

#[test]
fn a_pass_waits_while_the_cache_is_warm_until_it_pays_back() {
    let env = Env::new();
    let settings = |ttl: u64| {
        json!({"reserveTokens": 4000, "cacheTtlSeconds": ttl, "clearToolResults": {
            "at": 0.1, "keepRecentTokens": 6000, "clearAtLeast": 4000}})
    };
    let mut a = Agent::start_with(&env, wide_model(), settings(3600));
    let preview = |a: &mut Agent| {
        a.c.ok("previewCompaction", json!({"sessionId": a.sid}))["clearing"].clone()
    };
    // Up to `at` (9600 tokens): no pass.
    let mut turns = 0;
    while a.usage_now() < 9_600 {
        a.turn("read", &format!("f{turns}"));
        turns += 1;
        assert!(a.check().get("cleared").is_none());
    }
    // Then a pass frees enough, but the cache is warm (the last reply is seconds old) and the
    // outputs it would clear have been read by a few requests only: it waits.
    let mut p = preview(&mut a);
    while p["tokensFreed"].as_u64().unwrap() < 4000 {
        a.turn("read", &format!("g{turns}"));
        turns += 1;
        let out = a.check();
        assert!(out.get("cleared").is_none(), "{out}");
        p = preview(&mut a);
    }
    assert!(p["tokensFreed"].as_u64().unwrap() >= 4000, "{p}");
    assert_eq!(
        (p["due"].clone(), p["waitsForCache"].clone()),
        (json!(false), json!(true)),
        "{p}"
    );
    // The same pass with cacheAware off is due at once (the decision is the cache's alone).
    let mut plain = settings(3600);
    plain["clearToolResults"]["cacheAware"] = json!(false);
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": plain}),
    );
    let p = preview(&mut a);
    assert_eq!(
        (p["due"].clone(), p["waitsForCache"].clone()),
        (json!(true), json!(false)),
        "{p}"
    );
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": settings(3600)}),
    );

    // Turn after turn, the reads add up until the pass pays for its rewrite (about 11.5 ×
    // the rewritten tokens, at these prices): it then clears a larger batch, well before the
    // threshold.
    let waited_from = p["tokensFreed"].as_u64().unwrap();
    let mut waited = 0;
    let pass = loop {
        a.turn("read", &format!("h{waited}"));
        waited += 1;
        let out = a.check();
        if let Some(pass) = out.get("cleared") {
            break pass.clone();
        }
        assert!(
            waited < 12,
            "no pass after {waited} more turns: {}",
            preview(&mut a)
        );
    };
    assert!(waited >= 2, "the pass did not wait ({waited} turns)");
    let freed = pass["tokensFreed"].as_u64().unwrap();
    assert!(
        freed > waited_from + 4000,
        "a larger batch: {freed} vs {waited_from}"
    );
    assert!(pass["tokensBefore"].as_f64().unwrap() < 96_000.0, "{pass}");
    assert_eq!(a.passes().len(), 1);

    // A cold cache (its lifetime is over: the next request writes everything anyway) makes a
    // pass free: it runs as soon as it frees enough.
    let mut i = 0;
    while preview(&mut a)["waitsForCache"] != json!(true) {
        a.turn("read", &format!("k{i}"));
        i += 1;
        assert!(a.check().get("cleared").is_none(), "waits while warm");
        assert!(i < 10, "never weighed again: {}", preview(&mut a));
    }
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": settings(0)}),
    );
    let p = preview(&mut a);
    assert_eq!(
        (p["due"].clone(), p["waitsForCache"].clone()),
        (json!(true), json!(false)),
        "{p}"
    );
    let out = a.check();
    assert!(
        out["cleared"]["tokensFreed"].as_u64().unwrap_or(0) >= 4000,
        "{out} {p}"
    );
}

#[test]
fn with_summarize_at_a_summary_follows_once_clearing_is_not_enough() {
    let env = Env::new();
    // Threshold 36000; clearing from 0.3 (10800), a summary from 0.6 (21600).
    let mut a = Agent::start_with(
        &env,
        model(),
        json!({"reserveTokens": 4000, "keepRecentTokens": 4000, "clearToolResults": {
            "at": 0.3, "keepRecentTokens": 3000, "clearAtLeast": 2000, "cacheAware": false,
            "summarizeAt": 0.6}}),
    );
    // Long user messages: conversation that no pass can clear.
    let mut passes = 0;
    let out = loop {
        a.talk_then_read();
        let before = a.usage_now();
        let out = a.check();
        passes += usize::from(out.get("cleared").is_some());
        if out["action"] == "compacted" {
            assert!(
                (21_600..36_000).contains(&before) || out.get("cleared").is_some(),
                "compacted at {before}: {out}"
            );
            break out;
        }
        assert!(
            before < 21_600 || out.get("cleared").is_some(),
            "no summary at {before}: {out}"
        );
        assert!(a.turn < 20, "never summarized");
    };
    assert!(passes >= 1, "clearing ran first");
    assert_eq!(out["reason"], "threshold", "{out}");
    assert!(
        a.usage_now() < 21_600,
        "the summary brought the context under summarizeAt"
    );
    // Off (the default, 1): the same context waits for Pi's threshold.
    let mut b = Agent::start_with(
        &env,
        model(),
        json!({"reserveTokens": 4000, "keepRecentTokens": 4000, "clearToolResults": {
            "at": 0.3, "keepRecentTokens": 3000, "clearAtLeast": 2000, "cacheAware": false}}),
    );
    while b.turn < a.turn {
        b.talk_then_read();
        let out = b.check();
        assert_ne!(
            out["action"], "compacted",
            "compacted below the threshold: {out}"
        );
    }
}

#[test]
fn settings_off_change_nothing() {
    let env = Env::new();
    let mut a = Agent::start(&env);
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"reserveTokens": 4000}}),
    );
    for i in 0..9 {
        a.turn("read", &format!("f{i}"));
    }
    let ctx = a.context();
    let out = a.check();
    assert!(out.get("cleared").is_none(), "{out}");
    assert!(a.passes().is_empty());
    assert_eq!(a.context(), ctx);
    let preview = a.c.ok("previewCompaction", json!({"sessionId": a.sid}));
    assert!(preview.get("clearing").is_none(), "{preview}");
}

/// kill -9 while passes are written: every line of the file is whole and Pi loads it.
#[test]
fn a_kill_during_passes_leaves_a_file_pi_loads() {
    let Some(oracle) = Oracle::find("a_kill_during_passes_leaves_a_file_pi_loads") else {
        return;
    };
    for round in 0..3u64 {
        let env = Env::new();
        let mut a = Agent::start(&env);
        for i in 0..8 {
            a.turn("read", &format!("f{i}"));
        }
        // The check is sent, and the daemon killed a little later each round.
        a.c.send(
            "checkCompaction",
            json!({"sessionId": a.sid, "phase": "postRun"}),
        );
        std::thread::sleep(Duration::from_micros(200 * round));
        a.c.kill();
        let lines = parsed_lines(&a.path).expect("whole lines after kill -9");
        assert!(lines.len() > 30);
        let pi = oracle.analyse(&a.path).expect("Pi loads the file");
        assert!(pi["context"]["messages"].as_array().unwrap().len() >= 32);
        reopen_reads(&env, &a.path);
    }
}

/// A new daemon opens the file and projects it (with or without the pass).
fn reopen_reads(env: &Env, path: &Path) {
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = c.ok("openSession", json!({"path": path, "model": model()}))["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let ctx = c.ok("getContext", json!({"sessionId": sid}));
    assert!(ctx["messages"].as_array().unwrap().len() >= 32);
}
