//! Speculative compaction (beyond Pi), from the outside: the real `compactd` binary over stdio
//! with a fake summarizer that takes seconds, driven like an agent loop. The summary is made in
//! the background once the context passes `speculativeAt` × the threshold, and the compaction
//! at the threshold installs it at once; every invalidation discards it; Pi 0.85.0 (the oracle)
//! loads what was written with every message appended meanwhile in its context.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{parsed_lines, Env};
use support::fake_llm::FakeLlm;
use support::oracle::Oracle;
use support::rpc_client::{Client, Framing};

const LONG: Duration = Duration::from_secs(60);
/// contextWindow − reserveTokens of the sessions below.
const THRESHOLD: i64 = 10_000;

fn model(id: &str) -> Value {
    json!({"provider": "anthropic", "id": id, "contextWindow": 12_000, "maxTokens": 4000})
}

/// A reply's usage reporting `tokens` context tokens.
fn usage(tokens: i64) -> Value {
    json!({"input": tokens - 50, "output": 50, "cacheRead": 0, "cacheWrite": 0, "totalTokens": tokens,
           "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}})
}

/// One agent session: the daemon, a fake summarizer that answers `SUMMARY-1`, `SUMMARY-2`, …
/// after `delay`, and a session in a temporary directory with Pi's threshold at 10 000 tokens.
struct Agent {
    /// The temporary home; the daemon runs in it until the test ends.
    _env: Env,
    c: Client,
    sid: String,
    path: PathBuf,
    fake: FakeLlm,
    _runtime: tokio::runtime::Runtime,
    turn: usize,
    t: i64,
}

impl Agent {
    fn start(delay: Duration, extra: Value) -> Agent {
        let replies: Vec<String> = (1..=20).map(|i| format!("SUMMARY-{i}")).collect();
        let texts: Vec<&str> = replies.iter().map(String::as_str).collect();
        let (runtime, fake) = support::fake_llm::serve(&texts);
        fake.state.lock().delay = delay;
        let env = Env::new();
        env.use_fake_summarizer(fake.port, "{ enabled = false }");
        let mut c = env.stdio(&[], Framing::Ndjson);
        let dir = env.path("project");
        std::fs::create_dir_all(&dir).unwrap();
        let info = c.ok(
            "createSession",
            json!({"cwd": dir, "sessionDir": dir, "model": model("claude-sonnet-4-5")}),
        );
        let sid = info["sessionId"].as_str().unwrap().to_owned();
        let path = PathBuf::from(info["path"].as_str().unwrap());
        let mut compaction = json!({"reserveTokens": 2000, "keepRecentTokens": 600});
        if let (Some(o), Some(e)) = (compaction.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": compaction}),
        );
        c.ok("subscribe", json!({"sessionId": sid}));
        Agent {
            _env: env,
            c,
            sid,
            path,
            fake,
            _runtime: runtime,
            turn: 0,
            t: support::daemon_env::now_ms(),
        }
    }

    /// One turn: a user request (about 200 estimated tokens) and the assistant's short reply,
    /// whose usage reports `tokens` context tokens. Returns the two entry ids. The request
    /// carries the turn's weight, so `keepRecentTokens: 600` cuts at a request (three turns
    /// kept) and a compaction is one summarization call, never a split turn.
    fn turn(&mut self, tokens: i64) -> (String, String) {
        let i = self.turn;
        self.turn += 1;
        // Real time, increasing: a reply must be later than the compaction before it (Pi's
        // stale guard compares timestamps).
        self.t = (self.t + 2).max(support::daemon_env::now_ms());
        let user = json!({"role": "user", "content": format!("turn {i}: please change module m{i:03} {}", "and its tests ".repeat(55)), "timestamp": self.t});
        let u = self.c.ok(
            "appendMessage",
            json!({"sessionId": self.sid, "message": user}),
        );
        let reply = json!({"role": "assistant", "content": [{"type": "text", "text": format!("Changed m{i:03}.")}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage(tokens), "stopReason": "stop", "timestamp": self.t + 1});
        let a = self.c.ok(
            "appendMessage",
            json!({"sessionId": self.sid, "message": reply}),
        );
        (
            u["entryId"].as_str().unwrap().to_owned(),
            a["entryId"].as_str().unwrap().to_owned(),
        )
    }

    /// The next notification `name` (taken, so the one after is the next call's).
    fn event(&mut self, name: &str) -> Value {
        if let Some(pos) = self
            .c
            .notifications
            .iter()
            .position(|n| n["method"] == name)
        {
            return self.c.notifications.remove(pos)["params"].clone();
        }
        let v = self
            .c
            .wait_notification(name, LONG)
            .unwrap_or_else(|| panic!("no {name} event; log: {:?}", self.c.log));
        if let Some(pos) = self.c.notifications.iter().position(|n| *n == v) {
            self.c.notifications.remove(pos);
        }
        v["params"].clone()
    }

    /// Whether a notification `name` has arrived (without waiting).
    fn saw(&self, name: &str) -> bool {
        self.c.notifications.iter().any(|n| n["method"] == name)
    }

    fn check(&mut self) -> Value {
        self.c.ok(
            "checkCompaction",
            json!({"sessionId": self.sid, "phase": "postRun"}),
        )
    }

    fn requests(&self) -> usize {
        let requests = self.fake.requests();
        // Every compaction here is one call: a split turn would make two.
        assert!(
            requests
                .iter()
                .all(|r| !r.raw_body.contains("PREFIX of a turn")),
            "a split turn"
        );
        requests.len()
    }

    /// The last summarization request's prompt text.
    fn last_prompt(&self) -> String {
        self.fake
            .requests()
            .last()
            .map(|r| r.raw_body.clone())
            .unwrap_or_default()
    }

    /// Turns until the assistant reply that starts a speculation (at 7 500 tokens), then its
    /// `speculation_started` event.
    fn until_speculating(&mut self) -> Value {
        for tokens in [4000, 5000, 6000, 7000] {
            self.turn(tokens);
            // As an agent does after every reply (the thrash breaker judges a compaction by
            // the first size reported after it).
            assert_eq!(self.check()["action"], "none");
        }
        assert!(!self.saw("speculation_started"), "started below 75 %");
        self.turn(7600);
        self.event("speculation_started")
    }

    fn entries(&self) -> Vec<Value> {
        parsed_lines(&self.path)
            .unwrap()
            .into_iter()
            .skip(1)
            .collect()
    }
}

/// Pi's context entry ids of `file` (None when the oracle is missing on a developer machine).
fn pi_context_ids(file: &Path) -> Option<Vec<String>> {
    let oracle = Oracle::find("speculation: Pi loads what compactd wrote")?;
    let pi = oracle
        .analyse(file)
        .unwrap_or_else(|e| panic!("Pi could not load the file: {e}"));
    Some(
        pi["session"]["contextEntryIds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect(),
    )
}

/// The whole cycle: the speculation starts at 75 % of the threshold, runs while the agent keeps
/// appending, and the check that crosses the threshold installs it in milliseconds with no new
/// request; every message appended since is in Pi's context of the file, and the context is
/// under the threshold afterwards.
#[test]
fn the_threshold_compaction_installs_the_ready_summary_at_once() {
    let mut a = Agent::start(Duration::from_secs(2), json!({}));
    let started = a.until_speculating();
    // The request goes out in the background: the turn that started it has returned, and the
    // summarizer (2 s a reply) has not answered. Whether the request has reached it yet is a
    // race with this client reading the event.
    assert!(a.requests() <= 1, "one summarization at most");
    assert!(
        !a.saw("speculation_ready"),
        "ready before the summarizer answered"
    );
    let covers = started["coversThroughEntryId"].as_str().unwrap().to_owned();
    assert!(started["tokens"].as_f64().unwrap() >= 7600.0);
    // The agent carries on while the summarizer works.
    let mut during = Vec::new();
    for tokens in [8000, 8500, 9000] {
        let t = Instant::now();
        let (u, r) = a.turn(tokens);
        assert!(t.elapsed() < Duration::from_millis(500));
        during.extend([u, r]);
        assert_eq!(a.check()["action"], "none");
    }
    let ready = a.event("speculation_ready");
    assert_eq!(ready["coversThroughEntryId"], covers.as_str());
    assert!(ready["ms"].as_u64().unwrap() >= 2000);
    assert_eq!(a.requests(), 1);
    let preview = a.c.ok("previewCompaction", json!({"sessionId": a.sid}));
    assert_eq!(preview["speculation"]["state"], "ready");
    assert_eq!(preview["speculation"]["wouldInstall"], true);
    assert_eq!(
        preview["speculation"]["coversThroughEntryId"],
        covers.as_str()
    );
    let (u, r) = a.turn(10_500);
    during.extend([u, r]);

    let t = Instant::now();
    let out = a.check();
    let took = t.elapsed();
    assert_eq!(out["action"], "compacted", "{out}");
    assert!(
        took < Duration::from_millis(300),
        "the crossing check took {took:?}"
    );
    assert_eq!(a.requests(), 1, "no summarization request during the check");
    assert!(out["result"]["summary"]
        .as_str()
        .unwrap()
        .starts_with("SUMMARY-1"));
    let after = out["result"]["estimatedTokensAfter"].as_i64().unwrap();
    assert!(after < THRESHOLD, "context after the install: {after}");
    let start = a.event("compaction_start");
    assert_eq!(start["reason"], "threshold");
    let end = a.event("compaction_end");
    assert_eq!(end["result"]["summary"], out["result"]["summary"]);

    // The file: one compaction, written under the leaf of now, cut where the speculation cut.
    let entries = a.entries();
    let last = entries.last().unwrap();
    assert_eq!(last["type"], "compaction");
    assert_eq!(last["parentId"], during.last().unwrap().as_str());
    assert_eq!(
        last["firstKeptEntryId"],
        preview["speculation"]["firstKeptEntryId"]
    );
    assert_eq!(
        last["details"]["speculative"]["coversThroughEntryId"],
        covers.as_str()
    );
    assert!(last["details"]["speculative"]["startedAt"].is_string());
    // The entry names who wrote it (beyond Pi: Pi's details hold only the file lists).
    assert_eq!(
        last["details"]["summarizer"],
        out["result"]["details"]["summarizer"]
    );
    assert!(
        last["details"]["summarizer"]
            .as_str()
            .is_some_and(|s| s.contains('/') && s != "extractive"),
        "provider/model: {}",
        last["details"]
    );
    assert!(last["tokensBefore"].as_f64().unwrap() >= 10_500.0);
    let compactions = entries.iter().filter(|e| e["type"] == "compaction").count();
    assert_eq!(compactions, 1);
    if let Some(ids) = pi_context_ids(&a.path) {
        for id in &during {
            assert!(
                ids.contains(id),
                "{id} appended during the speculation is in Pi's context"
            );
        }
        assert_eq!(
            ids[0],
            last["id"].as_str().unwrap(),
            "the summary comes first"
        );
    }
}

/// A compaction due while the speculation still runs waits for it instead of sending a second
/// request.
#[test]
fn a_compaction_due_during_the_speculation_waits_for_it() {
    let mut a = Agent::start(Duration::from_secs(2), json!({}));
    a.until_speculating();
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted");
    assert_eq!(a.requests(), 1, "one request for the cycle");
    assert!(out["result"]["summary"]
        .as_str()
        .unwrap()
        .starts_with("SUMMARY-1"));
    assert!(a.entries().last().unwrap()["details"]["speculative"].is_object());
}

/// A manual compact without instructions installs the ready summary; with instructions it
/// summarizes anew (the instructions shape the request).
#[test]
fn manual_compaction_uses_the_speculation_only_without_instructions() {
    let mut a = Agent::start(Duration::from_millis(300), json!({}));
    a.until_speculating();
    a.event("speculation_ready");
    let custom = a.c.ok(
        "compact",
        json!({"sessionId": a.sid, "customInstructions": "Focus on tests", "write": false}),
    );
    assert_eq!(a.requests(), 2, "instructions: a request of its own");
    assert!(custom["summary"].as_str().unwrap().starts_with("SUMMARY-2"));
    assert!(a.last_prompt().contains("Focus on tests"));
    let manual = a.c.ok("compact", json!({"sessionId": a.sid}));
    assert_eq!(a.requests(), 2, "the ready summary was installed");
    assert!(manual["summary"].as_str().unwrap().starts_with("SUMMARY-1"));
    assert!(manual["details"]["speculative"].is_object());
}

/// Many cycles of a long agent loop: each compaction is the one speculative request, installed
/// at the threshold; no cycle makes a second request.
#[test]
fn each_cycle_makes_one_request() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    for cycle in 1..=3 {
        a.until_speculating();
        a.event("speculation_ready");
        a.turn(10_500);
        let out = a.check();
        assert_eq!(out["action"], "compacted", "cycle {cycle} {out}");
        assert_eq!(a.requests(), cycle, "cycle {cycle}");
        let summary = out["result"]["summary"].as_str().unwrap();
        assert!(
            summary.starts_with(&format!("SUMMARY-{cycle}")),
            "{summary}"
        );
        if cycle > 1 {
            // Pi's incremental update: the previous summary went into the request.
            assert!(a.last_prompt().contains(&format!("SUMMARY-{}", cycle - 1)));
        }
    }
    if let Some(ids) = pi_context_ids(&a.path) {
        let last = a.entries().last().unwrap().clone();
        assert_eq!(ids[0], last["id"].as_str().unwrap());
    }
}

/// The tail grew past the threshold before the install (a huge message): the speculative
/// summary alone would leave the context over the threshold, so it is updated on top (Pi's
/// incremental update, the speculative summary as the previous one, summarizing what lies
/// between its cut and a cut made now) and that one entry is written: the context ends under
/// the threshold.
#[test]
fn an_install_still_over_the_threshold_is_updated_on_top() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    a.until_speculating();
    a.event("speculation_ready");
    // 12k estimated tokens after the speculation's cut: its kept tail alone is over.
    a.c.ok(
        "appendMessage",
        json!({"sessionId": a.sid, "message": {"role": "user", "content": "x".repeat(48_000)}}),
    );
    // Then more turns than the kept tail holds, so the update can summarize the big one.
    for tokens in [9000, 9100, 9200, 9300] {
        a.turn(tokens);
    }
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted", "{}", out["errorMessage"]);
    assert_eq!(a.requests(), 2, "the speculation, then the update on top");
    let prompt = a.last_prompt();
    assert!(
        prompt.contains("SUMMARY-1"),
        "built on the speculative summary"
    );
    assert!(prompt.contains("xxxx"), "summarizing the big message");
    assert!(
        !prompt.contains("turn 0:"),
        "not what the speculation covered"
    );
    assert!(out["result"]["summary"]
        .as_str()
        .unwrap()
        .starts_with("SUMMARY-2"));
    let after = out["result"]["estimatedTokensAfter"].as_i64().unwrap();
    assert!(after < THRESHOLD, "{after}");
    let end = a.event("compaction_end");
    assert_eq!(end["result"], out["result"]);
    let compactions: Vec<Value> = a
        .entries()
        .into_iter()
        .filter(|e| e["type"] == "compaction")
        .collect();
    assert_eq!(compactions.len(), 1, "one entry");
    assert_eq!(
        compactions[0]["details"]["speculative"]["updatedOnTop"],
        true
    );
    if let Some(ids) = pi_context_ids(&a.path) {
        assert_eq!(ids[0], compactions[0]["id"].as_str().unwrap());
    }
}

/// What each invalidation leaves: the discard event with its reason, and a compaction that
/// follows on the live branch with a request of its own.
fn discarded_then_live(a: &mut Agent, reason: &str) {
    let d = a.event("speculation_discarded");
    assert_eq!(d["reason"], reason, "{d}");
    let preview = a.c.ok("previewCompaction", json!({"sessionId": a.sid}));
    if let Some(s) = preview.get("speculation") {
        // Only a new speculation of the live branch may be there.
        assert_eq!(s["wouldInstall"], true, "{preview}");
    }
}

/// Abandoned-branch text must not reach the summarizer after a navigation away.
#[test]
fn a_navigation_away_discards_it() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    let (_, back_to) = a.turn(3000);
    a.until_speculating();
    a.event("speculation_ready");
    a.c.ok(
        "navigateTree",
        json!({"sessionId": a.sid, "targetId": back_to}),
    );
    discarded_then_live(&mut a, "navigated");
    // The live branch grows to the threshold again and compacts it.
    for tokens in [8000, 8500, 9000, 10_500] {
        a.turn(tokens);
    }
    let out = a.check();
    assert_eq!(out["action"], "compacted");
    let prompt = a.last_prompt();
    assert!(a.requests() >= 2);
    assert!(
        !prompt.contains("turn 3:"),
        "the abandoned branch is not summarized"
    );
    let last = a.entries().last().unwrap().clone();
    assert_eq!(last["type"], "compaction");
    if let Some(ids) = pi_context_ids(&a.path) {
        assert_eq!(ids[0], last["id"].as_str().unwrap());
    }
}

/// A first compaction whose kept tail alone is over 75 % of the threshold (a big message came
/// in during its speculation), then a speculation built on it, with nothing appended after the
/// compaction (so it can be undone or edited).
fn speculating_on_a_compaction(a: &mut Agent) {
    a.until_speculating();
    a.c.ok(
        "appendMessage",
        json!({"sessionId": a.sid, "message": {"role": "user", "content": "y".repeat(32_000)}}),
    );
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted");
    assert_eq!(a.requests(), 1);
    a.event("speculation_ready");
    let after = out["result"]["estimatedTokensAfter"].as_i64().unwrap();
    assert!((7500..THRESHOLD).contains(&after), "{after}");
    // A metadata entry (the agent names the session), then the agent's next check finds the
    // context at 75 % again. Pi prepares nothing while the last entry is a compaction, and a
    // metadata entry still leaves the compaction undoable.
    a.c.ok(
        "appendEntry",
        json!({"sessionId": a.sid, "entry": {"type": "session_info", "name": "cycle two"}}),
    );
    let next = a.c.ok(
        "checkCompaction",
        json!({"sessionId": a.sid, "phase": "prePrompt"}),
    );
    assert_eq!(next["action"], "none");
    a.event("speculation_started");
    a.event("speculation_ready");
    assert_eq!(a.requests(), 2);
    assert!(
        a.last_prompt().contains("SUMMARY-1"),
        "built on the compaction"
    );
}

#[test]
fn an_undo_discards_it() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    speculating_on_a_compaction(&mut a);
    a.c.ok("undoCompaction", json!({"sessionId": a.sid}));
    discarded_then_live(&mut a, "undone");
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted");
    assert_eq!(a.requests(), 3, "the live branch got a request of its own");
    assert!(
        !a.last_prompt().contains("SUMMARY-1"),
        "the undone compaction is not built on"
    );
}

#[test]
fn an_edit_discards_it() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    speculating_on_a_compaction(&mut a);
    a.c.ok(
        "editSummary",
        json!({"sessionId": a.sid, "summary": "## Goal\nEDITED-SUMMARY"}),
    );
    discarded_then_live(&mut a, "edited");
    a.turn(10_500);
    assert_eq!(a.check()["action"], "compacted");
    assert!(a.requests() >= 3);
    let prompt = a.last_prompt();
    assert!(
        prompt.contains("EDITED-SUMMARY"),
        "built on the edited summary"
    );
    assert!(!prompt.contains("SUMMARY-1"));
}

#[test]
fn a_model_change_discards_it() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    a.until_speculating();
    a.event("speculation_ready");
    a.c.ok(
        "setModel",
        json!({"sessionId": a.sid, "model": model("claude-opus-4-5")}),
    );
    discarded_then_live(&mut a, "modelChanged");
    a.turn(10_500);
    assert_eq!(a.check()["action"], "compacted");
    assert_eq!(a.requests(), 2);
    assert!(a.entries().last().unwrap()["summary"]
        .as_str()
        .unwrap()
        .starts_with("SUMMARY-2"));
}

#[test]
fn a_settings_change_discards_it() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    a.until_speculating();
    a.event("speculation_ready");
    let before = a.c.ok("previewCompaction", json!({"sessionId": a.sid}))["speculation"]
        ["firstKeptEntryId"]
        .clone();
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"reserveTokens": 2000, "keepRecentTokens": 1000}}),
    );
    discarded_then_live(&mut a, "settingsChanged");
    a.turn(10_500);
    assert_eq!(a.check()["action"], "compacted");
    let last = a.entries().last().unwrap().clone();
    assert_ne!(
        last["firstKeptEntryId"], before,
        "cut with the new settings"
    );
    assert!(last["summary"].as_str().unwrap().starts_with("SUMMARY-2"));
}

/// Another writer (Pi itself, say) appends a line that forks the branch before the cut.
#[test]
fn another_writers_fork_discards_it() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    let (early, _) = a.turn(3000);
    a.until_speculating();
    a.event("speculation_ready");
    let line = json!({"type": "message", "id": "f0f0f0f0", "parentId": early, "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "a fork by another writer", "timestamp": 1}});
    let mut text = line.to_string();
    text.push('\n');
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&a.path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let sync = a.c.ok("syncSession", json!({"sessionId": a.sid}));
    assert_eq!(sync["leafId"], "f0f0f0f0");
    discarded_then_live(&mut a, "forked");
}

#[test]
fn an_abort_discards_it() {
    let mut a = Agent::start(Duration::from_secs(2), json!({}));
    a.until_speculating();
    // Aborted mid-request: the provider has it.
    support::wait_until(LONG, "the provider has the request", || a.requests() > 0);
    let r = a.c.ok("abortCompaction", json!({"sessionId": a.sid}));
    assert_eq!(r["aborted"], false, "no compaction was running");
    assert_eq!(r["speculationDiscarded"], true);
    discarded_then_live(&mut a, "aborted");
    // One start per turn: no restart until the next reply.
    assert_eq!(a.check()["action"], "none");
    assert!(!a.saw("speculation_started"));
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted");
    assert!(out["result"]["summary"]
        .as_str()
        .unwrap()
        .starts_with("SUMMARY-2"));
}

/// A speculation whose provider fails (HTTP 500) while the compaction waits for it leaves
/// nothing behind; the compaction falls back to the normal path with a request of its own.
#[test]
fn a_failing_speculation_falls_back_to_the_normal_path() {
    let mut a = Agent::start(Duration::ZERO, json!({}));
    a.fake.push(
        support::fake_llm::Scripted::json(500, r#"{"error":{"message":"overloaded"}}"#)
            .delay(Duration::from_millis(500)),
    );
    a.until_speculating();
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted", "{out}");
    let d = a.event("speculation_discarded");
    assert_eq!(d["reason"], "failed");
    assert_eq!(
        a.requests(),
        2,
        "the failed speculation, then the normal request"
    );
    let compactions: Vec<Value> = a
        .entries()
        .into_iter()
        .filter(|e| e["type"] == "compaction")
        .collect();
    assert_eq!(compactions.len(), 1, "nothing else was written");
    assert!(compactions[0]["details"].get("speculative").is_none());
    assert!(compactions[0]["summary"]
        .as_str()
        .unwrap()
        .starts_with("SUMMARY-1"));
}

/// kill -9 while the summarizer works: every acknowledged append is in the file, which Pi
/// loads; nothing speculative was written.
#[test]
fn kill_9_during_a_speculation_loses_nothing() {
    let mut a = Agent::start(Duration::from_secs(5), json!({}));
    a.until_speculating();
    let mut acked = Vec::new();
    for tokens in [8000, 8500] {
        let (u, r) = a.turn(tokens);
        acked.extend([u, r]);
    }
    a.c.kill();
    let entries = a.entries();
    let ids: Vec<&str> = entries.iter().filter_map(|e| e["id"].as_str()).collect();
    for id in &acked {
        assert!(
            ids.contains(&id.as_str()),
            "acknowledged {id} is in the file"
        );
    }
    assert!(entries.iter().all(|e| e["type"] != "compaction"));
    if let Some(pi) = pi_context_ids(&a.path) {
        assert_eq!(
            pi.last().map(String::as_str),
            acked.last().map(String::as_str)
        );
    }
}

/// Hooks are asked when the speculation starts, with `speculative: true`; a hook's own summary
/// wins and is installed without any LLM request.
#[test]
fn a_hooks_own_summary_wins_over_the_speculation() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let seen = asked.clone();
    a.c.on_request(move |method, params| {
        seen.lock().unwrap().push(json!({"method": method, "params": params}));
        let kept = params["preparation"]["firstKeptEntryId"].clone();
        Some(json!({"compaction": {"summary": "HOOK-SUMMARY", "firstKeptEntryId": kept, "tokensBefore": 1}}))
    });
    a.c.ok(
        "registerHooks",
        json!({"sessionId": a.sid, "hooks": ["session_before_compact"]}),
    );
    a.until_speculating();
    a.event("speculation_ready");
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0]["params"]["speculative"], true);
    }
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted");
    assert_eq!(out["result"]["summary"], "HOOK-SUMMARY");
    assert_eq!(a.requests(), 0, "no LLM request at all");
    assert_eq!(asked.lock().unwrap().len(), 1, "asked once, at the start");
    let last = a.entries().last().unwrap().clone();
    assert_eq!(last["fromHook"], true);
}

/// A hook that cancels the speculation discards it; the compaction at the threshold asks the
/// hooks again, as Pi does.
#[test]
fn a_hook_that_cancels_discards_the_speculation() {
    let mut a = Agent::start(Duration::from_millis(200), json!({}));
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<bool>::new()));
    let seen = asked.clone();
    a.c.on_request(move |_, params| {
        let speculative = params["speculative"] == true;
        seen.lock().unwrap().push(speculative);
        Some(if speculative {
            json!({"cancel": true})
        } else {
            Value::Null
        })
    });
    a.c.ok(
        "registerHooks",
        json!({"sessionId": a.sid, "hooks": ["session_before_compact"]}),
    );
    a.until_speculating();
    let d = a.event("speculation_discarded");
    assert_eq!(d["reason"], "hookCancelled");
    assert_eq!(a.requests(), 0);
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted");
    // The next turn's reply started another speculation (asked, cancelled again); the
    // compaction at the threshold then asked as a normal one.
    assert_eq!(*asked.lock().unwrap(), vec![true, true, false]);
    assert_eq!(a.requests(), 1);
}

/// A hook registered while a speculation runs was not asked about it: it is asked before the
/// install (`speculative: false`, the speculation's cut), and its cancel writes no compaction.
/// (The install once wrote the speculative summary without asking it.)
#[test]
fn a_hook_registered_during_a_speculation_can_veto_its_install() {
    let mut a = Agent::start(Duration::from_millis(700), json!({}));
    a.until_speculating();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let seen = asked.clone();
    a.c.on_request(move |method, params| {
        seen.lock()
            .unwrap()
            .push(json!({"method": method, "params": params}));
        Some(json!({"cancel": true}))
    });
    a.c.ok(
        "registerHooks",
        json!({"sessionId": a.sid, "hooks": ["session_before_compact"]}),
    );
    let ready = a.event("speculation_ready");
    assert!(
        asked.lock().unwrap().is_empty(),
        "not asked before the install"
    );
    a.turn(10_500);
    let out = a.check();
    assert_ne!(out["action"], "compacted", "the hook vetoed it: {out}");
    {
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1, "asked once, at the install: {asked:?}");
        assert_eq!(asked[0]["method"], "session_before_compact");
        assert_ne!(
            asked[0]["params"]["speculative"], true,
            "as a normal compaction"
        );
        let kept = &asked[0]["params"]["preparation"]["firstKeptEntryId"];
        let covers = ready["coversThroughEntryId"].as_str().unwrap();
        let entries = a.entries();
        let at = entries.iter().position(|e| e["id"] == *kept).unwrap();
        assert_eq!(
            entries[at - 1]["id"],
            covers,
            "asked about the speculation's cut"
        );
    }
    assert!(
        a.entries().iter().all(|e| e["type"] != "compaction"),
        "no compaction written"
    );
    let end = a.event("compaction_end");
    assert_eq!(end["aborted"], true, "{end}");
    assert_eq!(a.requests(), 1, "only the speculation's request");
}

/// A hook registered while a speculation runs may supply its own summary at the install: it
/// replaces the speculative one.
#[test]
fn a_hook_registered_during_a_speculation_can_supply_the_summary() {
    let mut a = Agent::start(Duration::from_millis(700), json!({}));
    a.until_speculating();
    a.c.on_request(move |_, params| {
        let kept = params["preparation"]["firstKeptEntryId"].clone();
        Some(json!({"compaction": {"summary": "LATE-HOOK", "firstKeptEntryId": kept, "tokensBefore": 1}}))
    });
    a.c.ok(
        "registerHooks",
        json!({"sessionId": a.sid, "hooks": ["session_before_compact"]}),
    );
    a.event("speculation_ready");
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted", "{out}");
    assert_eq!(out["result"]["summary"], "LATE-HOOK");
    let last = a.entries().last().unwrap().clone();
    assert_eq!(last["type"], "compaction");
    assert_eq!(last["fromHook"], true);
    assert_eq!(a.requests(), 1, "only the speculation's request");
}

/// `speculativeAt` in getSettings and setSettingsOverrides; 0 turns speculation off and the
/// threshold compaction is Pi's, request for request.
#[test]
fn speculative_at_zero_is_pis_behaviour() {
    let mut a = Agent::start(Duration::from_millis(100), json!({"speculativeAt": 0}));
    let s = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(s["compaction"]["speculativeAt"], 0.0);
    for tokens in [4000, 6000, 8000, 9000] {
        a.turn(tokens);
        assert_eq!(a.check()["action"], "none");
    }
    assert_eq!(a.requests(), 0, "nothing in the background");
    a.turn(10_500);
    assert_eq!(a.check()["action"], "compacted");
    assert_eq!(a.requests(), 1);
    assert!(!a.saw("speculation_started"));
    let last = a.entries().last().unwrap().clone();
    assert!(last["details"].get("speculative").is_none());

    let bad = a.c.request(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"speculativeAt": 1.5}}),
    );
    let err = bad.expect_err("out of range");
    assert!(err["message"].as_str().unwrap().contains("speculativeAt"));
    a.c.ok(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"reserveTokens": 2000, "keepRecentTokens": 600, "speculativeAt": 0.5}}),
    );
    let s = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(s["compaction"]["speculativeAt"], 0.5);
}

/// `speculativeAt: "auto"`: an agent whose context grows fast against a summarizer not
/// measured yet (assumed slow) gets its speculation as soon as the context passes half the
/// threshold, well before the default 0.75 (a fraction would wait for it), and the compaction
/// at the threshold installs it with no second request. A word other than "auto" is refused.
#[test]
fn auto_speculation_starts_as_early_as_a_fast_agent_needs() {
    let mut a = Agent::start(Duration::from_millis(300), json!({"speculativeAt": "auto"}));
    let s = a.c.ok("getSettings", json!({"sessionId": a.sid}));
    assert_eq!(s["compaction"]["speculativeAt"], "auto");
    for tokens in [2000, 3000, 4000, 4900] {
        a.turn(tokens);
        assert_eq!(a.check()["action"], "none");
    }
    assert!(!a.saw("speculation_started"), "below half the threshold");
    a.turn(5600);
    assert_eq!(a.check()["action"], "none");
    let started = a.event("speculation_started");
    assert_eq!(started["tokens"], 5600.0, "{started}");
    a.event("speculation_ready");
    a.turn(10_500);
    let out = a.check();
    assert_eq!(out["action"], "compacted", "{out}");
    assert_eq!(a.requests(), 1, "only the speculation's request");
    let last = a.entries().last().unwrap().clone();
    assert!(last["details"].get("speculative").is_some(), "{last}");

    let bad = a.c.request(
        "setSettingsOverrides",
        json!({"sessionId": a.sid, "compaction": {"speculativeAt": "soon"}}),
    );
    assert!(bad.is_err(), "{bad:?}");
}

/// The extractive engine is instant: it never speculates, whatever the setting says.
#[test]
fn the_extractive_engine_never_speculates() {
    let env = Env::new();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let dir = env.path("project");
    std::fs::create_dir_all(&dir).unwrap();
    let info = c.ok(
        "createSession",
        json!({"cwd": dir, "sessionDir": dir, "model": model("claude-sonnet-4-5")}),
    );
    let sid = info["sessionId"].as_str().unwrap().to_owned();
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"reserveTokens": 2000, "keepRecentTokens": 600, "speculativeAt": 0.5}}),
    );
    let s = c.ok("getSettings", json!({"sessionId": sid}));
    assert_eq!(s["compaction"]["speculativeAt"], 0.0);
    c.ok("subscribe", json!({"sessionId": sid}));
    for (i, tokens) in [6000, 9000].into_iter().enumerate() {
        c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "user", "content": format!("turn {i} {}", "words ".repeat(80))}}));
        c.ok("appendMessage", json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}], "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage(tokens), "stopReason": "stop"}}));
    }
    c.ok("getContextUsage", json!({"sessionId": sid}));
    assert!(c
        .notifications
        .iter()
        .all(|n| n["method"] != "speculation_started"));
}

/// The session list shows a running speculation (for UIs such as `compactd top`).
#[test]
fn list_sessions_shows_the_speculation() {
    let mut a = Agent::start(Duration::from_secs(2), json!({}));
    let started = a.until_speculating();
    let list = a.c.ok("listSessions", json!({}));
    let s = &list[0]["speculation"];
    assert_eq!(s["state"], "running", "{list}");
    assert_eq!(s["coversThroughEntryId"], started["coversThroughEntryId"]);
    assert_eq!(s["wouldInstall"], true);
}
