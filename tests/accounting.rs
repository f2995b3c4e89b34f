//! Accounting (beyond Pi), through the real binary: what a compaction costs (`cost` on its
//! result, `compaction_end` and `checkCompaction`), the economics of a compaction due now
//! (`previewCompaction`), the session's spend (`getCostReport`), the idle gate, and estimates
//! calibrated by the usage providers report.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::daemon_env::Env;
use support::rpc_client::{Client, Framing};

const LONG: Duration = Duration::from_secs(60);

/// A daemon summarizing with the fake provider (model `fake-gpt`), with `extra` config.
fn daemon(env: &Env, port: u16, extra: &str) -> Client {
    env.write_config(&format!(
        "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"fake-gpt\"\nretry = {{ enabled = false }}\n{extra}"
    ));
    env.stdio(&[], Framing::Ndjson)
}

fn model(window: i64) -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": window, "maxTokens": 8000})
}

/// A session of `turns` request/reply turns (each request about 200 estimated tokens, each
/// reply reporting `usage_at(turn)` context tokens), with Pi's threshold at window − 2000.
fn session(c: &mut Client, env: &Env, window: i64, turns: usize, reply_ms: i64) -> String {
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let info = c.ok(
        "createSession",
        json!({"cwd": dir, "sessionDir": dir, "model": model(window)}),
    );
    let sid = info["sessionId"].as_str().unwrap().to_owned();
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"reserveTokens": 2000, "keepRecentTokens": 600, "speculativeAt": 0}}),
    );
    for i in 0..turns {
        reply(c, &sid, i, 1000 + 300 * i as i64, reply_ms);
    }
    sid
}

fn usage(input: i64, output: i64, cache_read: i64, cache_write: i64) -> Value {
    json!({"input": input, "output": output, "cacheRead": cache_read, "cacheWrite": cache_write,
           "totalTokens": input + output + cache_read + cache_write,
           "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}})
}

fn reply(c: &mut Client, sid: &str, i: usize, context: i64, at_ms: i64) {
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": format!("turn {i}: {}", "please refactor ".repeat(50)), "timestamp": at_ms}}),
    );
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": usage(context - 20, 20, 0, 0), "stopReason": "stop", "timestamp": at_ms + 1}}),
    );
}

fn now_ms() -> i64 {
    support::daemon_env::now_ms()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// `cost` is the provider's reported usage of the compaction's call, priced at the configured
/// price of the summarizer's model; without a price its dollars are null, never 0; the
/// extractive engine costs zero tokens at a known 0.
#[test]
fn a_compaction_reports_its_priced_cost() {
    let (rt, fake) = support::fake_llm::serve(&["SUMMARY-1", "SUMMARY-2"]);
    let env = Env::new();
    let mut c = daemon(
        &env,
        fake.port,
        "[prices.\"fake-gpt\"]\ninput = 2.0\noutput = 10.0\ncache_read = 0.2\ncache_write = 2.5\n",
    );
    let sid = session(&mut c, &env, 200_000, 8, now_ms());
    c.ok("subscribe", json!({"sessionId": sid}));
    let result = c.ok("compact", json!({"sessionId": sid}));
    let cost = &result["cost"];
    let u = &result["usage"];
    assert_eq!(cost["input"], u["input"], "{result}");
    assert_eq!(cost["output"], u["output"]);
    assert_eq!(cost["cacheRead"], 0);
    assert!(cost["input"].as_u64().unwrap() > 0);
    let want = f(&u["input"]) * 2.0 / 1e6 + f(&u["output"]) * 10.0 / 1e6;
    assert!((f(&cost["usd"]) - want).abs() < 1e-12, "{cost} != {want}");
    // Pi's fields are unchanged: usage is Pi's, cost is compactd's.
    assert!(u.get("cost").is_some());
    let end = c
        .wait_notification("compaction_end", LONG)
        .expect("compaction_end");
    assert_eq!(end["params"]["result"]["cost"], *cost);
    drop(c);

    // The same daemon configuration without a price for the model: usd is null.
    let env2 = Env::new();
    let mut c = daemon(&env2, fake.port, "");
    let sid = session(&mut c, &env2, 200_000, 8, now_ms());
    let result = c.ok("compact", json!({"sessionId": sid}));
    assert!(result["cost"]["input"].as_u64().unwrap() > 0);
    assert_eq!(result["cost"]["usd"], Value::Null, "{result}");
    drop(c);
    drop(rt);

    // The extractive engine: zero tokens, usd 0.
    let env3 = Env::new();
    let mut c = env3.stdio(&[], Framing::Ndjson);
    let sid = session(&mut c, &env3, 200_000, 8, now_ms());
    let result = c.ok("compact", json!({"sessionId": sid}));
    assert_eq!(
        result["cost"],
        json!({"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "usd": 0})
    );
}

/// `previewCompaction`'s economics on known numbers: Sonnet 4.5 list prices for the agent's
/// model, the extractive summarizer (free), a warm cache and a cold one.
#[test]
fn economics_of_a_compaction_due_now() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = session(&mut c, &env, 200_000, 10, now_ms());
    let p = c.ok("previewCompaction", json!({"sessionId": sid}));
    let e = &p["economics"];
    let kept = p["kept"]["estimatedTokens"].as_u64().unwrap();
    let summarized = p["summarize"]["estimatedTokens"].as_u64().unwrap()
        + p["turnPrefix"]["estimatedTokens"].as_u64().unwrap();
    // No previous summary: a typical summary's size, at most what is summarized.
    let summary = summarized.min(2000);
    assert_eq!(e["tokensBefore"], p["tokensBefore"]);
    assert_eq!(e["estimatedTokensAfter"].as_u64(), Some(kept + summary));
    let before = p["tokensBefore"].as_u64().unwrap();
    let saved = before - (kept + summary);
    assert_eq!(e["savedTokensPerRequest"].as_u64(), Some(saved));
    assert_eq!(e["cacheRewriteTokens"].as_u64(), Some(kept + summary));
    assert!(e["summarizationInputTokens"].as_u64().unwrap() > summarized);
    assert_eq!(e["cacheWarm"], true);
    assert_eq!(e["usd"]["summarization"], 0.0, "the extractive summarizer");
    let rewrite = (kept + summary) as f64 * 3.75 / 1e6;
    assert!(
        (f(&e["usd"]["cacheRewrite"]) - rewrite).abs() < 1e-12,
        "{e}"
    );
    let per = saved as f64 * 0.30 / 1e6;
    assert!((f(&e["usd"]["savedPerRequest"]) - per).abs() < 1e-12);
    assert_eq!(
        e["breakEvenRequests"].as_u64(),
        Some((rewrite / per).ceil() as u64)
    );

    // The same session an hour after its last reply: the cache is cold, the rewrite free.
    let env2 = Env::new();
    let mut c = env2.stdio(&[], Framing::Ndjson);
    let sid = session(&mut c, &env2, 200_000, 10, now_ms() - 3_600_000);
    let e = c.ok("previewCompaction", json!({"sessionId": sid}))["economics"].clone();
    assert_eq!(e["cacheWarm"], false);
    assert_eq!(e["usd"]["cacheRewrite"], 0.0);
    assert_eq!(e["breakEvenRequests"], 0);

    // An agent model without a price: its figures are null, never 0.
    let env3 = Env::new();
    let mut c = env3.stdio(&[], Framing::Ndjson);
    let sid = session(&mut c, &env3, 200_000, 10, now_ms());
    let path = c.ok("listSessions", json!({}))[0]["path"].clone();
    c.ok(
        "openSession",
        json!({"path": path, "model": {"provider": "acme", "id": "house-model", "contextWindow": 200000, "maxTokens": 8000}}),
    );
    let e = c.ok("previewCompaction", json!({"sessionId": sid}))["economics"].clone();
    assert_eq!(e["usd"]["cacheRewrite"], Value::Null);
    assert_eq!(e["usd"]["savedPerRequest"], Value::Null);
    assert_eq!(e["breakEvenRequests"], Value::Null);
}

/// The idle gate: at `prePrompt`, a reply older than `cacheTtlSeconds` and a context at
/// `idleCompactAt` × the threshold compact now, with reason `idle`; a fresh reply, a smaller
/// context, or the gate off, do nothing.
#[test]
fn the_idle_gate_compacts_when_the_cache_is_cold_anyway() {
    // Threshold 10 000 − 2 000 = 8 000; the last reply reports 1000 + 300 × 9 = 3 700 (46 %).
    let check = |idle_at: Option<f64>, reply_age_ms: i64| -> (Value, Vec<Value>) {
        let env = Env::new();
        let mut c = env.stdio(&[], Framing::Ndjson);
        let sid = session(&mut c, &env, 10_000, 10, now_ms() - reply_age_ms);
        if let Some(f) = idle_at {
            c.ok(
                "setSettingsOverrides",
                json!({"sessionId": sid, "compaction": {"reserveTokens": 2000, "keepRecentTokens": 600, "speculativeAt": 0, "idleCompactAt": f, "cacheTtlSeconds": 300}}),
            );
        }
        c.ok("subscribe", json!({"sessionId": sid}));
        let out = c.ok(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "prePrompt"}),
        );
        // postRun never takes the gate (the agent is not about to send a prompt after a pause).
        if out["action"] == "none" {
            let post = c.ok(
                "checkCompaction",
                json!({"sessionId": sid, "phase": "postRun"}),
            );
            assert_eq!(post["action"], "none");
        }
        (out, c.notifications.clone())
    };
    let (out, events) = check(Some(0.4), 600_000);
    assert_eq!(out["action"], "compacted", "{out}");
    assert_eq!(out["reason"], "idle");
    let start = events
        .iter()
        .find(|n| n["method"] == "compaction_start")
        .expect("compaction_start");
    assert_eq!(start["params"]["reason"], "idle");
    let end = events
        .iter()
        .find(|n| n["method"] == "compaction_end")
        .expect("compaction_end");
    assert_eq!(end["params"]["reason"], "idle");
    assert_eq!(
        check(Some(0.4), 60_000).0["action"],
        "none",
        "the cache is warm"
    );
    assert_eq!(check(Some(0.5), 600_000).0["action"], "none", "below 50 %");
    assert_eq!(check(None, 600_000).0["action"], "none", "off by default");
}

/// A model whose provider counts 1.3× compactd's chars/4 estimate: the ratio is learned from
/// the replies, shown by getContextUsage, and, with `calibratedEstimates`, moves the threshold
/// decision.
#[test]
fn calibration_converges_and_moves_the_threshold_decision() {
    let run = |calibrated: bool| -> (Value, Value) {
        let env = Env::new();
        let mut c = env.stdio(&[], Framing::Ndjson);
        let dir = env.path("project");
        std::fs::create_dir_all(&dir).unwrap();
        let info = c.ok(
            "createSession",
            json!({"cwd": dir, "sessionDir": dir, "model": model(12_000)}),
        );
        let sid = info["sessionId"].as_str().unwrap().to_owned();
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": {"reserveTokens": 2000, "keepRecentTokens": 600, "speculativeAt": 0, "calibratedEstimates": calibrated}}),
        );
        // Each turn adds a 400-char request (100 estimated tokens, 130 real ones); the reply
        // reports the real prompt size and its own 4-token text as 5 real tokens.
        let mut real: i64 = 0;
        for i in 0..12 {
            let text = format!("{i:03} {}", "x".repeat(396));
            c.ok(
                "appendMessage",
                json!({"sessionId": sid, "message": {"role": "user", "content": text, "timestamp": now_ms()}}),
            );
            real += 130;
            c.ok(
                "appendMessage",
                json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "Done!!!!!!!!!!!!"}],
                    "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
                    "usage": usage(real, 5, 0, 0), "stopReason": "stop", "timestamp": now_ms()}}),
            );
            real += 5;
        }
        let usage_now = c.ok("getContextUsage", json!({"sessionId": sid}));
        // Tool output the agent is about to send: 7 000 estimated tokens after the last
        // reply's 1 620. Uncalibrated 8 620 < 10 000; calibrated 1 620 + 1.3 × 7 000 = 10 720.
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": "y".repeat(28_000), "timestamp": now_ms()}}),
        );
        let mid = c.ok(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "midRun"}),
        );
        (usage_now, mid)
    };
    let (usage_now, mid) = run(false);
    let cal = &usage_now["calibration"];
    assert_eq!(cal["samples"], 11, "{usage_now}");
    assert!((f(&cal["ratio"]) - 1.3).abs() < 0.01, "{cal}");
    assert_eq!(cal["applied"], false);
    assert_eq!(
        mid["action"], "none",
        "Pi's estimate is under the threshold"
    );
    let (usage_now, mid) = run(true);
    assert_eq!(usage_now["calibration"]["applied"], true);
    assert_eq!(
        mid["action"], "compacted",
        "the calibrated estimate is over: {mid}"
    );
}

/// `getCostReport`: the agent's replies priced from the table, compactions at the summarizer's
/// configured price, a discarded speculation, and the cache rewrite the first reply after a
/// compaction reported.
#[test]
fn the_cost_report_adds_up_the_session() {
    let (rt, fake) = support::fake_llm::serve(&["SUMMARY-1", "SPECULATIVE", "SUMMARY-3"]);
    fake.state.lock().delay = Duration::from_millis(300);
    let env = Env::new();
    let mut c = daemon(
        &env,
        fake.port,
        "[prices.\"fake-gpt\"]\ninput = 1.0\noutput = 4.0\ncache_read = 0.1\ncache_write = 1.25\n",
    );
    let sid = session(&mut c, &env, 200_000, 8, now_ms());
    let compacted = c.ok("compact", json!({"sessionId": sid}));
    // The first reply after it writes the new prefix to the cache.
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "next", "timestamp": now_ms()}}),
    );
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": usage(200, 30, 0, 4000), "stopReason": "stop", "timestamp": now_ms()}}),
    );
    // A speculation, discarded by an abort.
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"reserveTokens": 2000, "keepRecentTokens": 600, "speculativeAt": 0.5}}),
    );
    c.ok("subscribe", json!({"sessionId": sid}));
    c.ok(
        "setModel",
        json!({"sessionId": sid, "model": model(12_000)}),
    );
    reply(&mut c, &sid, 99, 6000, now_ms());
    c.wait_notification("speculation_ready", LONG)
        .expect("speculation_ready");
    c.ok("abortCompaction", json!({"sessionId": sid}));
    let report = c.ok("getCostReport", json!({"sessionId": sid}));
    // Replies: 8 + 1 + 1 at Sonnet 4.5's list price.
    let agent = &report["agent"];
    assert_eq!(agent["count"], 10, "{report}");
    let replies_usd = {
        let base: f64 = (0..8).map(|i| (1000 + 300 * i - 20) as f64).sum();
        let inputs = base + 200.0 + 5980.0;
        let outputs = 20.0 * 9.0 + 30.0;
        inputs * 3.0 / 1e6 + outputs * 15.0 / 1e6 + 4000.0 * 3.75 / 1e6
    };
    assert!((f(&agent["usd"]) - replies_usd).abs() < 1e-9, "{agent}");
    let comp = &report["compactions"];
    assert_eq!(comp["count"], 1);
    assert_eq!(comp["input"], compacted["usage"]["input"]);
    let comp_usd =
        f(&compacted["usage"]["input"]) / 1e6 + f(&compacted["usage"]["output"]) * 4.0 / 1e6;
    assert!((f(&comp["usd"]) - comp_usd).abs() < 1e-12);
    let spec = &report["discardedSpeculations"];
    assert_eq!(spec["count"], 1);
    assert!(spec["input"].as_u64().unwrap() > 0);
    assert!(f(&spec["usd"]) > 0.0);
    let branch = c.ok("getBranch", json!({"sessionId": sid}));
    let compaction = branch
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "compaction")
        .expect("the compaction on the branch");
    let rewrite = &report["cacheRewrites"][0];
    assert_eq!(rewrite["compactionId"], compaction["id"]);
    assert_eq!(rewrite["tokens"], 4200);
    assert_eq!(rewrite["cold"], false);
    assert!((f(&rewrite["usd"]) - (4000.0 * 3.75 + 200.0 * 3.0) / 1e6).abs() < 1e-12);
    let total = f(&comp["usd"]) + f(&spec["usd"]) + f(&rewrite["usd"]);
    assert!((f(&report["compactionUsd"]) - total).abs() < 1e-12);
    drop(c);
    drop(rt);
}
