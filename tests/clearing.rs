//! The second tier through the real binary (beyond Pi, `compaction.clearToolResults`): the
//! setting, a clearing pass and its record (a `compactd.clear` entry under Pi 0.85's rules, Pi's
//! own `context_edit` replacements under 1.6's), the projection `getContext` returns, the
//! estimate the decisions use, `clearAtLeast` and a stable prefix between passes, the originals
//! through `getEntry` and in a summarizing compaction's input (or the placeholders, with
//! `summarizeOriginals` off), Pi's own view of the file (the oracle of each version: 1.6 sees the
//! cleared outputs replaced with no extension), a restoring edit, and a kill -9 during passes.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon_env::{parsed_lines, Env};
use support::oracle::Oracle;
use support::rpc_client::{Client, Framing};
use support::PiVersion;

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
    /// Whose rules the session follows (`piVersion`).
    pi: PiVersion,
    sid: String,
    path: PathBuf,
    turn: usize,
    /// Entry id of each turn's tool result.
    results: Vec<String>,
}

/// The settings most scenarios clear with.
fn clearing_settings() -> Value {
    json!({"reserveTokens": 4000, "clearToolResults": {
        "at": 0.3, "keepRecentTokens": 6000, "clearAtLeast": 4000, "excludeTools": ["memory"],
        "cacheAware": false}})
}

impl Agent {
    fn start(env: &Env) -> Agent {
        Agent::start_as(env, PiVersion::default())
    }

    /// [`Agent::start`] under `pi`'s rules.
    fn start_as(env: &Env, pi: PiVersion) -> Agent {
        Agent::start_under(env, pi, model(), clearing_settings())
    }

    /// A session of `model` with the compaction settings `compaction` (the default rules).
    fn start_with(env: &Env, model: Value, compaction: Value) -> Agent {
        Agent::start_under(env, PiVersion::default(), model, compaction)
    }

    /// A session of `model` under `pi`'s rules with the compaction settings `compaction`.
    fn start_under(env: &Env, pi: PiVersion, model: Value, compaction: Value) -> Agent {
        let mut c = env.stdio(&[], Framing::Ndjson);
        let info = c.ok(
            "createSession",
            json!({"cwd": env.dir.path(), "sessionDir": env.dir.path(), "model": model}),
        );
        let sid = info["sessionId"].as_str().unwrap().to_owned();
        let path = PathBuf::from(info["path"].as_str().unwrap());
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": compaction, "piVersion": pi.as_str()}),
        );
        Agent {
            c,
            pi,
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

    /// The entry ids each pass in the file cleared, in its order: under 0.85 each
    /// `compactd.clear` entry's list; under 1.6 each run of consecutive clearing edits (one
    /// `context_edit` per output, its content replaced by the placeholder naming its target).
    fn passes(&self) -> Vec<Vec<String>> {
        let lines = parsed_lines(&self.path).unwrap();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        };
        match self.pi {
            PiVersion::V0_85 => lines
                .iter()
                .filter(|l| l["type"] == "custom" && l["customType"] == "compactd.clear")
                .map(|l| strings(&l["data"]["entryIds"]))
                .collect(),
            PiVersion::V1_6 => {
                let mut passes: Vec<Vec<String>> = Vec::new();
                let mut in_run = false;
                for l in &lines {
                    let target = l["targetId"].as_str().unwrap_or_default();
                    let clearing = l["type"] == "context_edit"
                        && l["replacement"]["content"].as_array().is_some_and(|c| {
                            c.len() == 1 && is_placeholder(&l["replacement"], target)
                        });
                    match (clearing, in_run, passes.last_mut()) {
                        (true, true, Some(run)) => run.push(target.to_owned()),
                        (true, _, _) => passes.push(vec![target.to_owned()]),
                        _ => {}
                    }
                    in_run = clearing;
                }
                passes
            }
        }
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
            "cacheAware": false, "summarizeAt": 1, "summarizeOriginals": true})
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
            "cacheAware": true, "summarizeAt": 1, "summarizeOriginals": true})
    );
}

#[test]
fn a_pass_clears_old_output_reversibly_and_the_prefix_stays_stable_under_0_85() {
    a_pass_clears_old_output_reversibly(PiVersion::V0_85);
}

#[test]
fn a_pass_clears_old_output_reversibly_and_the_prefix_stays_stable_under_1_6() {
    a_pass_clears_old_output_reversibly(PiVersion::V1_6);
}

fn a_pass_clears_old_output_reversibly(pi: PiVersion) {
    let env = Env::new();
    let mut a = Agent::start_as(&env, pi);
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

    // The record: under 0.85 one custom entry, as Pi's custom entries are written; under 1.6
    // Pi's own edits, one per output, in the pass's order.
    let passes = a.passes();
    assert_eq!(passes.len(), 1);
    assert_eq!(json!(passes[0]), cleared["entryIds"]);
    let lines = parsed_lines(&a.path).unwrap();
    match pi {
        PiVersion::V0_85 => {
            let entry = lines
                .iter()
                .find(|l| l["customType"] == "compactd.clear")
                .unwrap();
            assert_eq!(entry["data"]["tokensFreed"], freed);
            assert!(lines.iter().all(|l| l["type"] != "context_edit"));
        }
        PiVersion::V1_6 => {
            let edits: Vec<&Value> = lines
                .iter()
                .filter(|l| l["type"] == "context_edit")
                .collect();
            assert_eq!(edits.len(), 4);
            for e in &edits {
                let keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
                assert_eq!(
                    keys,
                    [
                        "type",
                        "id",
                        "parentId",
                        "timestamp",
                        "targetId",
                        "replacement"
                    ]
                );
            }
            // Each under the one before: a chain at the end of the branch.
            for w in edits.windows(2) {
                assert_eq!(w[1]["parentId"], w[0]["id"]);
            }
            assert!(lines.iter().all(|l| l["customType"] != "compactd.clear"));
        }
    }

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
        // 0.85's projection drops `details`; Pi 1.6's edit replaces the content only.
        assert_eq!(m.get("details").is_none(), pi == PiVersion::V0_85, "{m}");
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
        json!({"sessionId": a.sid, "compaction": clearing_settings(), "piVersion": pi.as_str()}),
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
    assert_eq!(json!(a.passes()[1]), out["cleared"]["entryIds"]);

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

    // The Pi of the session's version loads the file: Pi 0.85 sees every original output (its
    // context ignores the custom entries), Pi 1.6 sees the cleared ones replaced, by its own
    // edits, with no extension. Either agrees with compactd's Pi-exact analysis of it.
    let cleared_calls = [0, 1, 2, 4, 5, 6];
    if let Some(oracle) = Oracle::of(pi, "a_pass_clears_old_output_reversibly") {
        let seen = oracle.analyse(&a.path).expect("Pi loads the file");
        let messages = seen["context"]["messages"].as_array().unwrap();
        for i in cleared_calls {
            let m = messages
                .iter()
                .find(|m| m["toolCallId"] == format!("call_{i}"))
                .unwrap();
            match pi {
                PiVersion::V0_85 => assert!(text_of(m).starts_with(&format!("FACT-{i}")), "{m}"),
                PiVersion::V1_6 => assert!(is_placeholder(m, &r[i]), "{m}"),
            }
        }
        let ours = env
            .inspect_with(&a.path, &["--pi-version", pi.as_str()])
            .expect("inspect");
        oracle.agrees(&a.path, &ours).unwrap();
    }
    if pi == PiVersion::V1_6 {
        restored_by_a_later_edit(&mut a, &r[0]);
    }
}

/// Under 1.6 a cleared output comes back by a later edit of the same target (Pi's latest edit
/// wins): another writer (Pi, a tool) appends one that puts the original content back; the
/// daemon reads it, projects the original, counts it, and never clears it again.
fn restored_by_a_later_edit(a: &mut Agent, target: &str) {
    let entry =
        a.c.ok("getEntry", json!({"sessionId": a.sid, "entryId": target}));
    let original = entry["message"]["content"].clone();
    assert!(text_of(&entry["message"]).starts_with("FACT-0"));
    let before = a.usage_now();
    let lines = parsed_lines(&a.path).unwrap();
    let leaf = lines.last().unwrap()["id"].clone();
    let edit = json!({"type": "context_edit", "id": "restore1", "parentId": leaf,
        "timestamp": "2026-12-07T00:00:00.000Z", "targetId": target, "replacement": {"content": original}});
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&a.path)
        .unwrap();
    std::io::Write::write_all(&mut file, format!("{edit}\n").as_bytes()).unwrap();
    drop(file);
    a.c.ok("syncSession", json!({"sessionId": a.sid}));
    let ctx = a.context();
    let i = a.results.iter().position(|r| r == target).unwrap();
    let m = ctx
        .iter()
        .find(|m| m["toolCallId"] == format!("call_{i}"))
        .unwrap();
    assert!(text_of(m).starts_with("FACT-0"), "restored: {m}");
    let after = a.usage_now();
    assert!(
        after > before + 2000,
        "the estimate counts the output again: {before} → {after}"
    );
    // More turns and passes: the restored output stays.
    for k in 0..3 {
        a.turn("read", &format!("r{k}"));
        a.check();
    }
    assert!(
        a.passes()
            .iter()
            .flatten()
            .filter(|id| *id == target)
            .count()
            == 1
    );
    let ctx = a.context();
    let m = ctx
        .iter()
        .find(|m| m["toolCallId"] == format!("call_{i}"))
        .unwrap();
    assert!(text_of(m).starts_with("FACT-0"), "still restored: {m}");
}

#[test]
fn summarizing_after_clearing_reads_the_originals_and_keeps_the_tail_projected_under_0_85() {
    summarizing_after_clearing(PiVersion::V0_85, true);
}

#[test]
fn summarizing_after_clearing_reads_the_originals_and_keeps_the_tail_projected_under_1_6() {
    summarizing_after_clearing(PiVersion::V1_6, true);
}

/// `summarizeOriginals: false`: the summary reads the placeholders, as Pi 1.6 summarizes its
/// own projection (and under 0.85 too, where Pi would have read the originals).
#[test]
fn summarizing_the_projection_reads_the_placeholders_under_both() {
    summarizing_after_clearing(PiVersion::V0_85, false);
    summarizing_after_clearing(PiVersion::V1_6, false);
}

/// Clears, then summarizes with the summary reading the originals or the projection.
fn summarizing_after_clearing(pi: PiVersion, originals: bool) {
    let env = Env::new();
    let mut a = Agent::start_as(&env, pi);
    for i in 0..9 {
        a.turn("read", &format!("f{i}"));
    }
    let out = a.check();
    assert!(out["cleared"].is_object(), "{out}");
    assert_eq!(out["action"], "none");
    let first = a.passes()[0].clone();
    let r0 = a.results[0].clone();
    assert!(first.contains(&r0));

    // The threshold comes down under the projected context: the summary's input holds the
    // original outputs (or, with `summarizeOriginals` off, their placeholders). Pi 1.6 finds
    // its cut on the projection (7.8k tokens here, 7.3k of them the three uncleared outputs), so
    // it keeps less to have something to summarize, and still a cleared output or more.
    let keep = match pi {
        PiVersion::V0_85 => 12000,
        PiVersion::V1_6 => 7600,
    };
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"reserveTokens": 35000, "keepRecentTokens": keep,
            "clearToolResults": {"at": 0.3, "keepRecentTokens": 6000, "clearAtLeast": 4000,
            "summarizeOriginals": originals}}}),
    );
    let settings = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(
        settings["compaction"]["clearToolResults"]["summarizeOriginals"],
        originals
    );
    let preview = a.c.ok(
        "previewCompaction",
        json!({"sessionId": a.sid, "detail": "full"}),
    );
    let serialized = preview["serialized"].to_string();
    assert_eq!(
        serialized.contains("FACT-0"),
        originals,
        "the summarizer sees the original output only with summarizeOriginals: {preview}"
    );
    assert_eq!(
        serialized.contains(&format!("get_entry or getEntry returns entry {r0}")),
        !originals,
        "{serialized}"
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
    let cleared: Vec<String> = a.passes().into_iter().flatten().collect();
    let kept_cleared: Vec<&String> = cleared
        .iter()
        .filter(|id| lines.iter().position(|l| l["id"] == **id).unwrap() > kept_at)
        .collect();
    for id in &kept_cleared {
        assert!(is_placeholder(a.result_in(&ctx, id), id));
    }
    assert!(
        !kept_cleared.is_empty(),
        "the kept tail should hold cleared outputs: {cleared:?}, kept from {kept_from}"
    );
    // The summary entry is Pi's: the file still loads as a Pi session with both tiers in it.
    let summary = out["result"]["summary"].as_str().unwrap();
    if originals {
        assert!(!summary.contains("Output cleared by compactd"), "{summary}");
    }
    if let Some(oracle) = Oracle::of(pi, "summarizing_after_clearing") {
        let ours = env
            .inspect_with(&a.path, &["--pi-version", pi.as_str()])
            .expect("inspect");
        oracle.agrees(&a.path, &ours).unwrap();
    }
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

/// kill -9 while passes are written (under 1.6 a pass is several edits): every line of the
/// file is whole and the Pi of the session's version loads it.
#[test]
fn a_kill_during_passes_leaves_a_file_pi_loads() {
    for pi in PiVersion::ALL {
        a_kill_during_passes(pi);
    }
}

fn a_kill_during_passes(pi: PiVersion) {
    let Some(oracle) = Oracle::of(pi, "a_kill_during_passes_leaves_a_file_pi_loads") else {
        return;
    };
    for round in 0..3u64 {
        let env = Env::new();
        let mut a = Agent::start_as(&env, pi);
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
