//! A verified handoff (beyond Pi, `compaction.handoff`), from the outside: the real `compactd`
//! binary over stdio with a fake LLM summarizer whose summaries carry all, some or none of what
//! the span owes. A faithful summary scores 1 and is installed as written; a lossy one is
//! scored below and, in `repair` mode, repaired with each missing obligation naming its entry;
//! `retry` makes exactly one more call; a hook's summary and a speculation's are checked too;
//! Pi (the oracle) loads every repaired entry; and `report` mode writes what Pi writes.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon_env::{now_ms, parsed_lines, usage, Env};
use support::fake_llm::FakeLlm;
use support::oracle::Oracle;
use support::rpc_client::{Client, Framing};

const LONG: Duration = Duration::from_secs(60);

/// A summary that carries everything the session of [`Session::build`] owes, in Pi's layout.
const FAITHFUL: &str = "## Goal
Add a --json flag to the report command in src/report.rs and serve the docs on port 8080.

## Constraints & Preferences
- Never commit directly to main.

## Progress
### Done
- [x] Edited src/report.rs; `cargo test --test report` passes.

### In Progress
(none)

### Blocked
- `npm run lint` fails: error: Unexpected token in src/report.ts

## Key Decisions
(none)

## Next Steps
1. Look at the lint error next, then update the README.

## Critical Context
(none)";

/// A summary that keeps the goal's gist and drops everything exact.
const LOSSY: &str = "## Goal
Add an output flag to the report command.

## Next Steps
1. Keep going.";

/// The session every test compacts, and the entries the obligations come from.
struct Session {
    _env: Env,
    c: Client,
    sid: String,
    path: PathBuf,
    fake: FakeLlm,
    _runtime: tokio::runtime::Runtime,
    /// The user's request (the identifiers, the rule), the edit's call, the test run's call,
    /// the lint run's result.
    request: String,
    edit: String,
    test_run: String,
    lint_result: String,
    /// The assistant's reply saying what it does next.
    last_reply: String,
}

fn append(c: &mut Client, sid: &str, message: Value) -> String {
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": message}),
    )["entryId"]
        .as_str()
        .expect("entryId")
        .to_owned()
}

fn assistant(content: Value, stop: &str, ts: i64) -> Value {
    json!({"role": "assistant", "content": content, "api": "anthropic-messages", "provider": "anthropic",
           "model": "claude-sonnet-4-5", "usage": usage(1200), "stopReason": stop, "timestamp": ts})
}

fn tool_result(id: &str, tool: &str, text: &str, error: bool, ts: i64) -> Value {
    json!({"role": "toolResult", "toolCallId": id, "toolName": tool,
           "content": [{"type": "text", "text": text}], "isError": error, "timestamp": ts})
}

impl Session {
    /// A daemon whose summarizer is a fake LLM answering `replies` in turn, a session built as
    /// an agent would (a request with identifiers and a rule, an edit, a passing test run, a
    /// failing lint, a new request kept verbatim), and `compaction` overrides on top of a
    /// keep-recent that cuts right before the last request.
    fn build(replies: &[&str], compaction: Value) -> Session {
        let (runtime, fake) = support::fake_llm::serve(replies);
        let env = Env::new();
        env.use_fake_summarizer(fake.port, "{ enabled = false }");
        Session::build_in(env, runtime, fake, compaction)
    }

    fn build_in(
        env: Env,
        runtime: tokio::runtime::Runtime,
        fake: FakeLlm,
        compaction: Value,
    ) -> Session {
        let mut c = env.stdio(&[], Framing::Ndjson);
        let dir = env.path("project");
        std::fs::create_dir_all(&dir).unwrap();
        let (sid, path) = support::daemon_env::new_session(&mut c, &dir);
        let t = now_ms() - 100_000;
        let request = append(
            &mut c,
            &sid,
            json!({"role": "user", "timestamp": t, "content":
                "Add a --json flag to the report command in src/report.rs and serve the docs on port 8080. Never commit directly to main."}),
        );
        let edit = append(
            &mut c,
            &sid,
            assistant(
                json!([{"type": "text", "text": "I'll add the flag."},
                       {"type": "toolCall", "id": "c1", "name": "edit",
                        "arguments": {"path": "src/report.rs", "oldText": "fn run()", "newText": "fn run(json: bool)"}}]),
                "toolUse",
                t + 1,
            ),
        );
        append(
            &mut c,
            &sid,
            tool_result("c1", "edit", "Edited src/report.rs", false, t + 2),
        );
        let test_run = append(
            &mut c,
            &sid,
            assistant(
                json!([{"type": "toolCall", "id": "c2", "name": "bash", "arguments": {"command": "cargo test --test report"}}]),
                "toolUse",
                t + 3,
            ),
        );
        append(
            &mut c,
            &sid,
            tool_result("c2", "bash", "test result: ok. 3 passed", false, t + 4),
        );
        append(
            &mut c,
            &sid,
            assistant(
                json!([{"type": "toolCall", "id": "c3", "name": "bash", "arguments": {"command": "npm run lint"}}]),
                "toolUse",
                t + 5,
            ),
        );
        let lint_result = append(
            &mut c,
            &sid,
            tool_result(
                "c3",
                "bash",
                "error: Unexpected token in src/report.ts\n\nCommand exited with code 2",
                true,
                t + 6,
            ),
        );
        let last_reply = append(
            &mut c,
            &sid,
            assistant(
                json!([{"type": "text", "text": "The lint step fails; I will look at it next."}]),
                "stop",
                t + 7,
            ),
        );
        append(
            &mut c,
            &sid,
            json!({"role": "user", "timestamp": t + 8, "content":
                "Now update the README with the new flag and an example of its JSON output, please."}),
        );
        // A keep-recent that cuts right before the last request, unless the test says.
        let mut overrides = compaction;
        if overrides.get("keepRecentTokens").is_none() {
            overrides["keepRecentTokens"] = json!(10);
        }
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": overrides}),
        );
        c.ok("subscribe", json!({"sessionId": sid}));
        Session {
            _env: env,
            c,
            sid,
            path,
            fake,
            _runtime: runtime,
            request,
            edit,
            test_run,
            lint_result,
            last_reply,
        }
    }

    fn compact(&mut self) -> Value {
        self.c.ok("compact", json!({"sessionId": self.sid}))
    }

    /// The compaction entry the last compaction wrote.
    fn written(&self) -> Value {
        let lines = parsed_lines(&self.path).expect("a readable session file");
        lines
            .into_iter()
            .rev()
            .find(|l| l["type"] == "compaction")
            .expect("a compaction entry")
    }
}

/// `summary` as compactd installs an LLM's summary of the session: Pi's file block, then the
/// recall footer.
fn installed(summary: &str) -> String {
    let blocks =
        compactd::compaction::file_ops::format_file_operations(&[], &["src/report.rs".to_owned()]);
    format!("{summary}{blocks}")
}

fn without_footer(summary: &str) -> &str {
    compactd::compaction::recall::strip_recall_footer(summary)
}

/// Pi (the oracle) loads `file` and agrees with compactd's analysis of it.
fn pi_loads(env_file: &Path, test: &str) {
    let Some(oracle) = Oracle::find(test) else {
        return;
    };
    let ours = support::daemon_env::Env::new()
        .inspect(env_file)
        .expect("compactd inspects the file");
    oracle
        .agrees(env_file, &ours)
        .unwrap_or_else(|e| panic!("Pi and compactd disagree on {}: {e}", env_file.display()));
}

#[test]
fn the_preview_lists_what_the_handoff_owes_with_each_entry() {
    let mut s = Session::build(&[FAITHFUL], json!({}));
    // The plain preview (what the Pi extension and `top` ask all the time) does not read the
    // span; `detail: "full"` does.
    let plain = s.c.ok("previewCompaction", json!({"sessionId": s.sid}));
    assert!(plain.get("handoff").is_none(), "{plain}");
    let preview = s.c.ok(
        "previewCompaction",
        json!({"sessionId": s.sid, "detail": "full"}),
    );
    let handoff = &preview["handoff"];
    assert_eq!(handoff["mode"], "report", "{preview}");
    let owed = items(&handoff["owed"]);
    let want = |kind: &str, text: &str, id: &str| (kind.to_owned(), text.to_owned(), id.to_owned());
    // The flag, the path and the port the request gave are owed by the request itself (a
    // summary carries it only with them, exactly), not on lines of their own.
    assert_eq!(
        owed,
        vec![
            want(
                "request",
                "Add a --json flag to the report command in src/report.rs and serve the docs on port 8080. Never commit directly to main.",
                &s.request
            ),
            want("constraint", "Never commit directly to main.", &s.request),
            want("openTask", "I will look at it next.", &s.last_reply),
            want(
                "failure",
                "`npm run lint` failed: error: Unexpected token in src/report.ts",
                &s.lint_result
            ),
            want("file", "src/report.rs (edited)", &s.edit),
            want("command", "cargo test --test report", &s.test_run),
        ],
        "{preview}"
    );
}

/// A list of `HandoffItem`s as (kind, text, entry id).
fn items(list: &Value) -> Vec<(String, String, String)> {
    list.as_array()
        .unwrap_or_else(|| panic!("a list of obligations: {list}"))
        .iter()
        .map(|m| {
            (
                m["kind"].as_str().unwrap().to_owned(),
                m["text"].as_str().unwrap().to_owned(),
                m["entryId"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// The missing obligations of a result's handoff.
fn missing(result: &Value) -> Vec<(String, String, String)> {
    items(&result["handoff"]["missing"])
}

/// The line the repair section states an obligation in.
fn repair_line(kind: &str, text: &str, id: &str) -> String {
    let label = match kind {
        "request" => "Latest request",
        "constraint" => "Constraint",
        "openTask" => "Open task",
        "failure" => "Unresolved failure",
        "file" => "Modified file",
        "identifier" => "Identifier",
        "command" => "Verification command",
        other => panic!("unknown kind {other}"),
    };
    let text = match kind {
        "file" | "command" => format!("`{text}`"),
        // An identifier is stated with the words around it: `8080` (in "…port 8080…").
        "identifier" => {
            let id = text.split(" (in \"").next().unwrap_or(text);
            format!("`{id}`{}", &text[id.len()..])
        }
        _ => text.to_owned(),
    };
    format!("- {label}: {text} (entry {id})")
}

#[test]
fn a_faithful_summary_scores_one_and_is_installed_unchanged() {
    let mut s = Session::build(&[FAITHFUL], json!({"handoff": "repair"}));
    let r = s.compact();
    let h = &r["handoff"];
    assert_eq!(h["score"], 1.0, "{h}");
    assert_eq!(h["mode"], "repair");
    assert_eq!(h["repaired"], 0);
    assert_eq!(missing(&r), vec![]);
    let owed: u64 = h["byKind"]
        .as_object()
        .unwrap()
        .values()
        .map(|k| k["owed"].as_u64().unwrap())
        .sum();
    assert_eq!(owed, 6, "{h}");
    let entry = s.written();
    assert_eq!(
        without_footer(entry["summary"].as_str().unwrap()),
        installed(FAITHFUL)
    );
    assert!(entry["details"].get("handoff").is_none(), "{entry}");
    assert_eq!(s.fake.requests().len(), 1, "no extra call");
}

#[test]
fn a_lossy_summary_is_repaired_with_each_missing_obligation_and_its_entry() {
    let mut s = Session::build(&[LOSSY], json!({"handoff": "repair"}));
    s.c.ok(
        "registerHooks",
        json!({"sessionId": s.sid, "hooks": ["session_compact"]}),
    );
    let r = s.compact();
    let h = &r["handoff"];
    let score = h["score"].as_f64().unwrap();
    assert!(score < 0.5, "{h}");
    let lost = missing(&r);
    assert_eq!(h["repaired"].as_u64(), Some(lost.len() as u64));
    // What was lost names where it came from: the request, the test run, the lint.
    let ids: Vec<&str> = lost.iter().map(|(_, _, id)| id.as_str()).collect();
    for (what, id) in [
        ("request", &s.request),
        ("test run", &s.test_run),
        ("lint", &s.lint_result),
    ] {
        assert!(
            ids.contains(&id.as_str()),
            "{what}'s entry {id} in {lost:?}"
        );
    }
    let kinds: Vec<&str> = lost.iter().map(|(k, ..)| k.as_str()).collect();
    for kind in ["request", "constraint", "openTask", "failure", "command"] {
        assert!(kinds.contains(&kind), "{kind} missing from {lost:?}");
    }
    // The modified file (and the path the user gave) are in Pi's file block after the summary:
    // carried, whatever the summary's prose says.
    assert!(
        !lost
            .iter()
            .any(|(_, t, id)| t.contains("src/report.rs") && *id == s.edit),
        "{lost:?}"
    );
    assert!(
        !lost.iter().any(|(_, t, _)| t == "src/report.rs"),
        "{lost:?}"
    );
    // The entry: the LLM's summary and Pi's file block as written, then the section listing
    // every missing obligation with its entry id, then the recall footer.
    let entry = s.written();
    let summary = entry["summary"].as_str().unwrap();
    assert_eq!(r["summary"].as_str(), Some(summary));
    let body = without_footer(summary);
    assert_ne!(body, summary, "the recall footer stays last");
    let section = body
        .strip_prefix(&installed(LOSSY))
        .expect("the summary as written comes first");
    assert!(
        section.starts_with("\n\n## Handoff check: also carried over\n"),
        "{section}"
    );
    for (kind, text, id) in &lost {
        let line = repair_line(kind, text, id);
        assert!(section.contains(&line), "{line:?} in {section}");
    }
    let file_ids: Vec<String> = parsed_lines(&s.path)
        .unwrap()
        .iter()
        .filter_map(|l| l["id"].as_str().map(str::to_owned))
        .collect();
    assert!(lost.iter().all(|(_, _, id)| file_ids.contains(id)));
    assert_eq!(entry["details"]["handoff"]["score"], h["score"]);
    assert_eq!(entry["details"]["handoff"]["repaired"], h["repaired"]);
    // The repaired summary carries everything: checking it again finds nothing missing.
    let again = compactd::handoff::repair::read_section(body);
    assert_eq!(again.len(), lost.len());
    // Events and hooks carry the same check.
    let end =
        s.c.wait_notification("compaction_end", LONG)
            .expect("compaction_end");
    assert_eq!(end["params"]["result"]["handoff"], *h);
    let notice =
        s.c.wait_notification("session_compact", LONG)
            .expect("session_compact");
    assert_eq!(notice["params"]["handoff"], *h);
    pi_loads(
        &s.path,
        "a_lossy_summary_is_repaired_with_each_missing_obligation_and_its_entry",
    );
}

#[test]
fn report_mode_scores_and_writes_the_summary_as_written() {
    let mut s = Session::build(&[LOSSY], json!({}));
    let r = s.compact();
    let h = &r["handoff"];
    assert_eq!(h["mode"], "report");
    assert_eq!(h["repaired"], 0);
    assert!(h["score"].as_f64().unwrap() < 0.5, "{h}");
    assert!(!missing(&r).is_empty());
    let entry = s.written();
    assert_eq!(
        without_footer(entry["summary"].as_str().unwrap()),
        installed(LOSSY)
    );
    assert!(entry["details"].get("handoff").is_none(), "{entry}");
    // The log line states the check.
    support::wait_until(LONG, "the compaction's log line", || {
        s._env.log_text().contains(" compacted ")
    });
    let log = s._env.log_text();
    let line = log
        .lines()
        .find(|l| l.contains(" compacted "))
        .unwrap_or_else(|| panic!("a compaction line in {log}"));
    assert!(
        line.contains(&format!("handoff={} (", h["score"])),
        "{line}"
    );
    // The cost report's row and listSessions say the same.
    let report = s.c.ok("getCostReport", json!({"sessionId": s.sid}));
    let rows = report["perCompaction"].as_array().expect("perCompaction");
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(rows[0]["compactionId"], entry["id"]);
    assert_eq!(rows[0]["handoffScore"], h["score"]);
    let sessions = s.c.ok("listSessions", json!({}));
    assert_eq!(
        sessions[0]["lastCompaction"]["handoffScore"], h["score"],
        "{sessions}"
    );
}

/// A summary that carries the rule and the port but still not the rest.
const BETTER: &str = "## Goal
Add the --json flag to the report command and serve the docs on port 8080.

## Constraints & Preferences
- Never commit directly to main.";

#[test]
fn retry_makes_exactly_one_more_call_then_repairs() {
    let mut s = Session::build(&[LOSSY, BETTER, FAITHFUL], json!({"handoff": "retry"}));
    let r = s.compact();
    let requests = s.fake.requests();
    assert_eq!(requests.len(), 2, "one call, then exactly one more");
    let first_prompt = &requests[0].raw_body;
    let second_prompt = &requests[1].raw_body;
    assert!(!first_prompt.contains("The previous attempt at this summary"));
    assert!(
        second_prompt.contains("The previous attempt at this summary left out the items below"),
        "{second_prompt}"
    );
    for item in [
        "- Latest request: Add a --json flag to the report command",
        "- Constraint: Never commit directly to main.",
        "- Verification command: cargo test --test report",
    ] {
        assert!(second_prompt.contains(item), "{item} in the retry's prompt");
    }
    let h = &r["handoff"];
    let first = h["firstScore"].as_f64().expect("firstScore");
    let score = h["score"].as_f64().unwrap();
    assert!(first < score && score < 1.0, "{h}");
    // What the retried summary still missed is repaired.
    let entry = s.written();
    let body = without_footer(entry["summary"].as_str().unwrap()).to_owned();
    assert!(body.starts_with(&installed(BETTER)), "{body}");
    for (kind, text, id) in missing(&r) {
        assert!(
            body.contains(&repair_line(&kind, &text, &id)),
            "{kind} {text}"
        );
    }
    assert!(
        !body.contains("- Constraint: Never commit"),
        "the retry carried the rule itself"
    );
    pi_loads(&s.path, "retry_makes_exactly_one_more_call_then_repairs");

    // A faithful first summary needs no second call.
    let mut s = Session::build(&[FAITHFUL, LOSSY], json!({"handoff": "retry"}));
    let r = s.compact();
    assert_eq!(s.fake.requests().len(), 1);
    assert_eq!(r["handoff"]["score"], 1.0);
    assert!(r["handoff"].get("firstScore").is_none());
}

#[test]
fn a_hooks_summary_is_checked_and_repaired_too() {
    let mut s = Session::build(&[], json!({"handoff": "repair"}));
    let keep = s.c.ok("previewCompaction", json!({"sessionId": s.sid}))["firstKeptEntryId"].clone();
    s.c.ok(
        "registerHooks",
        json!({"sessionId": s.sid, "hooks": ["session_before_compact", "session_compact"]}),
    );
    s.c.on_request(move |method, _| {
        (method == "session_before_compact").then(|| {
            json!({"compaction": {"summary": "HOOK: add the report flag; port 8080.", "firstKeptEntryId": keep, "tokensBefore": 123}})
        })
    });
    let r = s.compact();
    assert!(s.fake.requests().is_empty(), "the hook wrote the summary");
    let h = &r["handoff"];
    assert!(h["score"].as_f64().unwrap() < 1.0, "{h}");
    let lost = missing(&r);
    assert!(
        !lost.iter().any(|(_, t, _)| t == "8080"),
        "the hook kept the port"
    );
    let entry = s.written();
    assert_eq!(entry["fromHook"], true);
    let summary = entry["summary"].as_str().unwrap();
    let section = summary
        .strip_prefix("HOOK: add the report flag; port 8080.")
        .expect("the hook's summary first");
    for (kind, text, id) in &lost {
        assert!(section.contains(&repair_line(kind, text, id)), "{text}");
    }
    let notice =
        s.c.wait_notification("session_compact", LONG)
            .expect("session_compact");
    assert_eq!(notice["params"]["fromExtension"], true);
    assert_eq!(notice["params"]["handoff"], *h);
    pi_loads(&s.path, "a_hooks_summary_is_checked_and_repaired_too");
}

#[test]
fn a_speculative_summary_carries_its_score_to_the_compaction_that_installs_it() {
    let (runtime, fake) = support::fake_llm::serve(&[LOSSY, LOSSY, LOSSY]);
    let env = Env::new();
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    // The session's model: a 12k window, so the context of the last reply (6k) is past half
    // of the 10k threshold and a speculation starts (speculativeAt 0.5).
    let mut s = Session::build_in(
        env,
        runtime,
        fake,
        json!({"handoff": "repair", "reserveTokens": 2000, "speculativeAt": 0.5}),
    );
    s.c.ok(
        "setModel",
        json!({"sessionId": s.sid, "model": {"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 12000, "maxTokens": 4000}}),
    );
    // The reply whose usage crosses half the threshold starts the speculation.
    let mut reply = assistant(
        json!([{"type": "text", "text": "I will write the README section for the flag now."}]),
        "stop",
        now_ms(),
    );
    reply["usage"] = usage(6000);
    let sid = s.sid.clone();
    append(&mut s.c, &sid, reply);
    let ready =
        s.c.wait_notification("speculation_ready", LONG)
            .expect("a speculation");
    let spec_score = ready["params"]["handoffScore"]
        .as_f64()
        .unwrap_or_else(|| panic!("the speculation's score: {ready}"));
    assert!(spec_score < 1.0, "{ready}");
    let calls = s.fake.requests().len();
    let view = s.c.ok("previewCompaction", json!({"sessionId": s.sid}));
    assert_eq!(
        view["speculation"]["handoffScore"],
        ready["params"]["handoffScore"]
    );
    let r = s.compact();
    assert!(r["details"]["speculative"].is_object(), "installed: {r}");
    assert_eq!(s.fake.requests().len(), calls, "no call at the install");
    let h = &r["handoff"];
    assert_eq!(h["score"].as_f64(), Some(spec_score), "{h}");
    assert_eq!(h["repaired"].as_u64(), Some(missing(&r).len() as u64));
    let entry = s.written();
    for (kind, text, id) in missing(&r) {
        assert!(
            entry["summary"]
                .as_str()
                .unwrap()
                .contains(&repair_line(&kind, &text, &id)),
            "{text}"
        );
    }
    pi_loads(
        &s.path,
        "a_speculative_summary_carries_its_score_to_the_compaction_that_installs_it",
    );
}

#[test]
fn the_mode_comes_from_the_config_pi_settings_and_overrides() {
    let env = Env::new();
    env.write_config("[compaction]\nhandoff = \"off\"\n");
    std::fs::write(
        env.path("agent/settings.json"),
        r#"{"compaction": {"handoff": "repair"}}"#,
    )
    .unwrap();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let dir = env.path("p");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = c.ok("createSession", json!({"cwd": dir, "sessionDir": dir}))["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mode = |c: &mut Client| {
        c.ok("getSettings", json!({"sessionId": sid}))["compaction"]["handoff"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(mode(&mut c), "repair", "Pi's settings file over the config");
    std::fs::write(env.path("agent/settings.json"), "{}").unwrap();
    // Pi's files are re-read at every check; a settled file is cached by its stamp.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(mode(&mut c), "off", "the config's default");
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"handoff": "retry"}}),
    );
    assert_eq!(mode(&mut c), "retry", "an override over both");
    let e = c
        .request(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": {"handoff": "loud"}}),
        )
        .unwrap_err();
    assert_eq!(e["data"]["kind"], "invalid_params", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("compaction.handoff"),
        "{e}"
    );
    // `off`: no check at all.
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"handoff": "off", "keepRecentTokens": 10}}),
    );
    let reply = assistant(
        json!([{"type": "text", "text": "Ported."}]),
        "stop",
        now_ms(),
    );
    for message in [
        json!({"role": "user", "content": "Port the parser to nom and keep port 8080."}),
        reply,
        json!({"role": "user", "content": "Now the lexer, please, all of it, the same way."}),
    ] {
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": message}),
        );
    }
    let r = c.ok("compact", json!({"sessionId": sid}));
    assert!(r.get("handoff").is_none(), "{r}");
    let preview = c.request("previewCompaction", json!({"sessionId": sid}));
    if let Ok(p) = preview {
        assert!(p.get("handoff").is_none(), "{p}");
    }
}

/// Compacts every conformance case of Pi `pi` that Pi compacted (its recorded replies replayed
/// by the fake LLM) through the daemon under that Pi's rules, in `mode`, and returns each
/// case's name, the entry written (its id, parent and timestamp left out) and whether the result
/// carried a handoff check.
fn compact_cases(pi: support::PiVersion, mode: &str) -> Vec<(String, Value, bool)> {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let fake = runtime.block_on(support::fake_llm::start(Vec::new()));
    let env = Env::new();
    env.use_fake_summarizer(fake.port, "{ enabled = false }");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let mut out = Vec::new();
    for dir in support::case_dirs(pi) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let expected = support::read_json(&dir.join("expected.json"));
        let exp = &expected["compaction"];
        if exp.is_null() || !exp["error"].is_null() {
            continue;
        }
        let recorded = support::read_json(&dir.join("llm-requests.json"))["openai-completions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        {
            let mut state = fake.state.lock();
            *state = Default::default();
            state.replies = recorded
                .iter()
                .map(|r| {
                    let text = r["reply"].as_str().unwrap_or("").to_owned();
                    (text, r["finish"].as_str().unwrap_or("stop").to_owned())
                })
                .collect();
            state.reply_kinds = recorded
                .iter()
                .map(|r| r["kind"].as_str().unwrap_or("history").to_owned())
                .collect();
        }
        let file = env.path(&format!("{}-{name}-{mode}.jsonl", pi.as_str()));
        std::fs::copy(dir.join("session.jsonl"), &file).expect("copy the case");
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("make the copy writable");
        let sid = c.ok("openSession", json!({"path": file}))["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        let settings = support::settings_of(&expected);
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "piVersion": pi.as_str(), "compaction": {
                "enabled": settings.enabled,
                "reserveTokens": settings.reserve_tokens,
                "keepRecentTokens": settings.keep_recent_tokens,
                "recallFooter": false,
                "handoff": mode}}),
        );
        let mut params = json!({"sessionId": sid});
        if let Some(custom) = expected["inputs"]["customInstructions"].as_str() {
            params["customInstructions"] = json!(custom);
        }
        let result = c.ok("compact", params);
        assert_eq!(
            result["summary"],
            exp["result"]["summary"],
            "{name} (Pi {}, {mode}): the summary is Pi's",
            pi.as_str()
        );
        c.ok("closeSession", json!({"sessionId": sid}));
        // The entry is the file's last line (a case may hold lines Pi skips as malformed).
        let text = std::fs::read_to_string(&file).unwrap();
        let mut entry: Value =
            serde_json::from_str(text.lines().last().unwrap()).expect("the compaction entry");
        assert_eq!(entry["type"], "compaction", "{name}");
        // A v1 file's migration draws random ids: the kept entry is named by its line.
        let kept = entry["firstKeptEntryId"].as_str().unwrap_or("").to_owned();
        let line = text
            .lines()
            .position(|l| l.contains(&format!("\"id\":\"{kept}\"")));
        entry["firstKeptEntryId"] = json!(line);
        if let Some(o) = entry.as_object_mut() {
            for k in ["id", "parentId", "timestamp"] {
                o.remove(k);
            }
            // Pi 1.6's checkpoint is stamped with the time of writing too.
            if let Some(system) = o.get_mut("systemMessage").and_then(Value::as_object_mut) {
                system.remove("timestamp");
            }
        }
        out.push((name, entry, result.get("handoff").is_some()));
    }
    out
}

/// `report` mode writes exactly what `off` writes (what Pi writes, beyond compactd's own
/// `details.summarizer`): on every conformance case of both Pis, under that Pi's rules, the
/// summary is Pi's and the entries of the two modes are the same, while only `report` carries
/// a check.
#[test]
fn conformance_is_unchanged_in_report_mode() {
    for pi in support::PiVersion::ALL {
        let off = compact_cases(pi, "off");
        let report = compact_cases(pi, "report");
        assert!(
            off.len() >= 20,
            "{} cases of Pi {} compacted",
            off.len(),
            pi.as_str()
        );
        assert_eq!(off.len(), report.len());
        for ((name, a, checked_off), (_, b, checked)) in off.iter().zip(&report) {
            assert_eq!(
                a,
                b,
                "{name} (Pi {}): the entry report mode writes",
                pi.as_str()
            );
            assert!(!checked_off && *checked, "{name}: only report mode checks");
        }
    }
}
