//! The `compactd` binary from the outside: `inspect` reproduces the fixtures from the command
//! line, `compact` works with no configuration (extractive), and bad input gets clear errors
//! without touching the file.

mod support;

use std::process::Command;

use serde_json::Value;

fn compactd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compactd"));
    // Never pick up the developer's own configuration.
    cmd.env("XDG_CONFIG_HOME", "/nonexistent/compactd-test-config");
    cmd
}

fn run_json(cmd: &mut Command) -> (i32, Value) {
    let out = cmd.output().expect("run compactd");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (out.status.code().unwrap_or(-1), v)
}

/// `compactd inspect --json --pi-version V` gives Pi V's analysis of every case of V's set.
#[test]
fn inspect_json_reproduces_every_fixture_analysis() {
    let mut failures = Vec::new();
    let sets = support::PiVersion::ALL.map(|pi| (pi, support::case_dirs(pi)));
    for (pi, dir) in sets
        .iter()
        .flat_map(|(pi, dirs)| dirs.iter().map(move |d| (*pi, d.clone())))
    {
        let expected = support::read_json(&dir.join("expected.json"));
        let s = support::settings_of(&expected);
        let window = expected["inputs"]["contextWindow"]
            .as_i64()
            .unwrap_or(200000);
        let (code, mut actual) = run_json(
            compactd()
                .arg("inspect")
                .arg(dir.join("session.jsonl"))
                .arg("--json")
                .args(["--pi-version", pi.as_str()])
                .args(["--context-window", &window.to_string()])
                .args(["--reserve-tokens", &s.reserve_tokens.to_string()])
                .args(["--keep-recent-tokens", &s.keep_recent_tokens.to_string()]),
        );
        assert_eq!(code, 0);
        let (_, ids) = support::load_case(&dir);
        if !ids.is_empty() {
            // A v1 file migrates with random ids; compare the structure through the id order.
            let order: Vec<String> = actual["session"]["branchEntryIds"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let map = order
                .iter()
                .enumerate()
                .map(|(i, id)| (id.clone(), format!("c{:07x}", i + 1)))
                .collect();
            support::rename_strings(&mut actual, &map);
        }
        for field in [
            "session",
            "context",
            "estimate",
            "cutPoint",
            "preparation",
            "preparationNullReason",
            "serialized",
            "shouldCompact",
        ] {
            if let Some(d) = support::first_diff(&actual[field], &expected[field], field) {
                failures.push(format!("{}: {d}", dir.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

fn copy_case(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("session.jsonl");
    std::fs::copy(
        support::conformance_cases(support::PiVersion::V0_85)
            .join(name)
            .join("session.jsonl"),
        &file,
    )
    .expect("copy");
    (tmp, file)
}

#[test]
fn compact_without_configuration_writes_an_extractive_six_section_summary() {
    let (_tmp, file) = copy_case("009-bash-executions");
    let before = std::fs::read(&file).expect("read");
    let (code, result) = run_json(
        compactd()
            .arg("compact")
            .arg(&file)
            .arg("--json")
            .args(["--keep-recent-tokens", "2000"]),
    );
    assert_eq!(code, 0, "{result}");
    let summary = result["summary"].as_str().expect("summary");
    let mut at = 0;
    for h in compactd::compaction::prompts::HISTORY_HEADINGS {
        let pos = summary[at..]
            .find(h)
            .unwrap_or_else(|| panic!("missing {h} after byte {at}:\n{summary}"));
        at += pos + h.len();
    }
    assert_eq!(result["details"]["summarizer"], "extractive");
    assert!(result["estimatedTokensAfter"].as_u64().is_some());
    let after = std::fs::read(&file).expect("read");
    assert!(after.starts_with(&before), "pre-existing bytes changed");
    let last_line = String::from_utf8_lossy(&after[before.len()..]).to_string();
    let entry: Value = serde_json::from_str(last_line.trim()).expect("appended line is JSON");
    assert_eq!(entry["type"], "compaction");
    assert_eq!(entry["fromHook"], false);
    assert_eq!(entry["summary"], result["summary"]);
    // Compacting again right away: Pi's exact refusal, file unchanged.
    let (code, err) = run_json(compactd().arg("compact").arg(&file).arg("--json"));
    assert_eq!(code, 1);
    assert_eq!(err["error"], "Already compacted");
    assert_eq!(std::fs::read(&file).expect("read"), after);
}

#[test]
fn small_sessions_and_bad_files_get_pi_errors_and_stay_untouched() {
    let (_tmp, file) = copy_case("003-tiny-nothing-to-compact");
    let before = std::fs::read(&file).expect("read");
    let (code, err) = run_json(compactd().arg("compact").arg(&file).arg("--json"));
    assert_eq!(
        (code, err["error"].as_str()),
        (1, Some("Nothing to compact (session too small)"))
    );
    assert_eq!(std::fs::read(&file).expect("read"), before);

    let tmp = tempfile::tempdir().expect("tempdir");
    let bad = tmp.path().join("bad.jsonl");
    std::fs::write(&bad, b"{\"type\":\"message\"}\nnot json\n\xff\xfe").expect("write");
    for sub in ["inspect", "compact"] {
        let (code, err) = run_json(compactd().arg(sub).arg(&bad).arg("--json"));
        assert_eq!(code, 1);
        let msg = err["error"].as_str().unwrap_or("");
        // Why, too: the first JSON line is an entry, not the header.
        assert!(
            msg.starts_with("Session file is not a valid pi session: /")
                && msg.ends_with(": its first JSON line is a `message` entry, where Pi expects the `session` header"),
            "{msg}"
        );
    }
    assert_eq!(
        std::fs::read(&bad).expect("read"),
        b"{\"type\":\"message\"}\nnot json\n\xff\xfe"
    );
    let (code, err) = run_json(
        compactd()
            .arg("inspect")
            .arg(tmp.path().join("missing.jsonl"))
            .arg("--json"),
    );
    assert_eq!(code, 1);
    assert!(err["error"].as_str().unwrap_or("").contains("not found"));
    let out = compactd()
        .args(["compact", "x.jsonl", "--provider", "nope"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown provider"));
}

/// `compactd compact FILE --json` with extra flags, summarizing through the fake OpenAI server on
/// `port`.
fn compact_via_fake(file: &std::path::Path, port: u16, extra: &[&str]) -> Command {
    let mut cmd = compactd();
    cmd.arg("compact")
        .arg(file)
        .arg("--json")
        .args(["--provider", "openai-completions", "--model", "fake-gpt"])
        .args(["--base-url", &format!("http://127.0.0.1:{port}/v1")])
        .args(extra);
    cmd
}

/// Runs `compactd compact` against the in-process fake OpenAI server with canned replies.
fn compact_against_fake(
    replies: Vec<(String, String)>,
    extra: &[&str],
    config: Option<&str>,
) -> (i32, Value, Vec<u8>, Vec<u8>) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let fake = runtime.block_on(support::fake_llm::start(replies));
    let (tmp, file) = copy_case("009-bash-executions");
    let before = std::fs::read(&file).expect("read");
    let mut cmd = match config {
        Some(text) => {
            let cfg = tmp.path().join("config.toml");
            std::fs::write(&cfg, text.replace("PORT", &fake.port.to_string()))
                .expect("write config");
            let mut cmd = compactd();
            cmd.arg("compact")
                .arg(&file)
                .arg("--json")
                .arg("--config")
                .arg(cfg);
            cmd
        }
        None => compact_via_fake(&file, fake.port, &[]),
    };
    cmd.args(["--keep-recent-tokens", "2000"])
        .args(extra)
        .env("COMPACTD_TEST_KEY", "k");
    let (code, v) = run_json(&mut cmd);
    let after = std::fs::read(&file).expect("read");
    drop(fake);
    (code, v, before, after)
}

#[test]
fn a_length_stop_fails_with_pis_message_and_writes_nothing() {
    let (code, v, before, after) =
        compact_against_fake(vec![("partial".into(), "length".into())], &[], None);
    assert_eq!(code, 1);
    assert_eq!(
        v["error"],
        "Summarization failed: generation hit the token cap and the summary is incomplete"
    );
    assert_eq!(before, after);
}

#[test]
fn fallback_to_extractive_when_the_llm_fails() {
    let (code, v, before, after) = compact_against_fake(
        vec![("partial".into(), "length".into())],
        &["--fallback-extractive"],
        None,
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["details"]["summarizer"], "extractive");
    assert!(v["details"]["fallbackReason"]
        .as_str()
        .unwrap_or("")
        .contains("token cap"));
    assert!(v["summary"]
        .as_str()
        .unwrap_or("")
        .contains("## Critical Context"));
    assert!(after.len() > before.len() && after.starts_with(&before));
}

#[test]
fn the_config_file_selects_the_summarizer() {
    let config = "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:PORT/v1\"\nmodel = \"fake-gpt\"\napi_key_env = \"COMPACTD_TEST_KEY\"\n";
    let (code, v, _, after) = compact_against_fake(
        vec![("LLM SUMMARY".into(), "stop".into())],
        &[],
        Some(config),
    );
    assert_eq!(code, 0, "{v}");
    assert!(v["summary"]
        .as_str()
        .unwrap_or("")
        .starts_with("LLM SUMMARY"));
    // The same entry the daemon writes: the summarizer named beside Pi's file lists, and the
    // recall footer last.
    assert_eq!(
        v["details"]["summarizer"], "openai-completions/fake-gpt",
        "{v}"
    );
    assert!(
        v["summary"]
            .as_str()
            .unwrap_or("")
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("[compactd recall] ")),
        "{v}"
    );
    assert!(String::from_utf8_lossy(&after).contains("LLM SUMMARY"));
    let bad = "[summarizer]\nprovider = \"nope\"\n";
    let (tmp, file) = copy_case("009-bash-executions");
    let cfg = tmp.path().join("bad.toml");
    std::fs::write(&cfg, bad).expect("write");
    let out = compactd()
        .arg("compact")
        .arg(&file)
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("summarizer.provider 'nope'"));
}

#[test]
fn compact_flags_keep_the_configured_retry_policy() {
    // Two failures, one retry allowed: the CLI gives up after the second request. With Pi's
    // default policy (3 retries, 2 s base) it would wait 2 s + 4 s and succeed on the third.
    let (_runtime, fake) = support::fake_llm::serve(&["LLM SUMMARY"]);
    fake.state.lock().fail_first = 2;
    let (tmp, file) = copy_case("009-bash-executions");
    let before = std::fs::read(&file).expect("read");
    let cfg = tmp.path().join("config.toml");
    std::fs::write(
        &cfg,
        "[summarizer]\nretry = { enabled = true, maxRetries = 1, baseDelayMs = 1 }\n",
    )
    .expect("write config");
    let started = std::time::Instant::now();
    let (code, v) = run_json(
        compact_via_fake(&file, fake.port, &["--keep-recent-tokens", "2000"])
            .arg("--config")
            .arg(&cfg),
    );
    assert_eq!(code, 1, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("Summarization failed"),
        "{v}"
    );
    assert_eq!(fake.state.lock().received.len(), 2, "one call, one retry");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(std::fs::read(&file).expect("read"), before);
}

/// A session as an agent writes it: the user's goal and constraint, reads and edits, a failing
/// command, more work after it.
fn crafted_session() -> String {
    use serde_json::json;
    let mut lines = vec![
        json!({"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/work/app"}),
    ];
    let mut parent: Option<String> = None;
    let mut n = 0;
    let mut push = |lines: &mut Vec<Value>, message: Value| {
        n += 1;
        let id = format!("e{n:07}");
        lines.push(json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:01.000Z","message":message}));
        parent = Some(id);
    };
    let usage = json!({"input":100,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":110,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}});
    let assistant = |content: Value| json!({"role":"assistant","content":content,"api":"anthropic-messages","provider":"anthropic","model":"m","usage":usage,"stopReason":"toolUse","timestamp":1});
    push(
        &mut lines,
        json!({"role":"user","content":"Add a --dry-run flag to the deploy CLI. Do not use unsafe code and keep the public API unchanged.","timestamp":1}),
    );
    push(
        &mut lines,
        assistant(
            json!([{"type":"toolCall","id":"t1","name":"read","arguments":{"path":"src/deploy.rs"}}]),
        ),
    );
    push(
        &mut lines,
        json!({"role":"toolResult","toolCallId":"t1","toolName":"read","content":[{"type":"text","text":"fn deploy() {}"}],"isError":false,"timestamp":1}),
    );
    push(
        &mut lines,
        assistant(
            json!([{"type":"toolCall","id":"t2","name":"edit","arguments":{"path":"src/cli.rs","oldText":"a","newText":"b"}}]),
        ),
    );
    push(
        &mut lines,
        json!({"role":"toolResult","toolCallId":"t2","toolName":"edit","content":[{"type":"text","text":"ok"}],"isError":false,"timestamp":1}),
    );
    push(
        &mut lines,
        json!({"role":"bashExecution","command":"cargo test","output":"error[E0425]: cannot find value `dry_run` in this scope","exitCode":101,"cancelled":false,"truncated":false,"timestamp":1}),
    );
    for i in 0..30 {
        push(
            &mut lines,
            json!({"role":"user","content":format!("Continue with step {i}: {}", "details ".repeat(200)),"timestamp":1}),
        );
        push(
            &mut lines,
            assistant(
                json!([{"type":"text","text":format!("Working on step {i}. {}", "more ".repeat(200))}]),
            ),
        );
    }
    lines.iter().map(|l| l.to_string() + "\n").collect()
}

#[test]
fn the_extractive_summary_tells_a_resumed_model_what_it_needs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("s.jsonl");
    std::fs::write(&file, crafted_session()).expect("write");
    let (code, v) = run_json(
        compactd()
            .arg("compact")
            .arg(&file)
            .arg("--json")
            .args(["--keep-recent-tokens", "3000"]),
    );
    assert_eq!(code, 0, "{v}");
    let summary = v["summary"].as_str().unwrap_or("");
    for needle in [
        "Add a --dry-run flag to the deploy CLI",
        "Do not use unsafe code",
        "src/cli.rs",
        "cannot find value `dry_run` in this scope",
        "cargo test",
    ] {
        assert!(
            summary.contains(needle),
            "summary lacks {needle:?}:\n{summary}"
        );
    }
    let goal = summary
        .split("## Constraints & Preferences")
        .next()
        .unwrap_or("");
    assert!(
        goal.contains("--dry-run"),
        "the goal section names the user's request"
    );
    let constraints = summary
        .split("## Constraints & Preferences")
        .nth(1)
        .and_then(|s| s.split("## Progress").next())
        .unwrap_or("");
    assert!(
        constraints.contains("unsafe"),
        "the constraint is under Constraints & Preferences:\n{constraints}"
    );
    let body = compactd::compaction::recall::strip_recall_footer(summary);
    assert!(
        body.len() < summary.len(),
        "the recall footer ends it:\n{summary}"
    );
    assert!(
        body.ends_with("<modified-files>\nsrc/cli.rs\n</modified-files>"),
        "{summary}"
    );
}

/// Secrets an agent session may well contain.
const SECRETS: [&str; 6] = [
    "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678",
    "sk-ant-api03-ZyXwVu9876543210AbCdEfGhIjKl",
    "ghp_1234567890abcdefABCDEF1234567890abcd",
    "AKIAIOSFODNN7EXAMPLE",
    "hunter2-S3cr3t-pa55word",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
];

fn secret_session() -> String {
    use serde_json::json;
    let mut lines = vec![json!({"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}).to_string()];
    let mut parent = Value::Null;
    for i in 0..12 {
        let text = format!(
            "step {i}: export OPENAI_API_KEY={}\nAuthorization: Bearer {}\ncurl -H 'x' {} ; DB_PASSWORD={} ; token {} ; AWS {}\n{}",
            SECRETS[0], SECRETS[5], SECRETS[2], SECRETS[4], SECRETS[1], SECRETS[3], "filler ".repeat(400)
        );
        let id = format!("e{i:07}");
        lines.push(json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":text,"timestamp":1}}).to_string());
        parent = json!(id);
    }
    lines.join("\n") + "\n"
}

#[test]
fn secrets_never_reach_a_provider_or_a_stored_summary() {
    let (runtime, fake) = support::fake_llm::serve(&["SUMMARY"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("s.jsonl");
    std::fs::write(&file, secret_session()).expect("write");
    let (code, v) = run_json(&mut compact_via_fake(
        &file,
        fake.port,
        &["--keep-recent-tokens", "500"],
    ));
    assert_eq!(code, 0, "{v}");
    let received = fake.state.lock().received.clone();
    assert!(!received.is_empty());
    for r in &received {
        let body = r.body.to_string();
        for s in SECRETS {
            assert!(!body.contains(s), "secret {s} reached the provider");
        }
        assert!(body.contains("[REDACTED]"));
    }
    // The extractive summary quotes the transcript: it is redacted too.
    std::fs::write(&file, secret_session()).expect("write");
    let (code, v) = run_json(
        compactd()
            .arg("compact")
            .arg(&file)
            .arg("--json")
            .args(["--keep-recent-tokens", "500"]),
    );
    assert_eq!(code, 0, "{v}");
    let stored = std::fs::read_to_string(&file).expect("read");
    let entry = stored.lines().last().unwrap_or("");
    assert!(entry.contains("\"type\":\"compaction\""));
    for s in SECRETS {
        assert!(!entry.contains(s), "secret {s} stored in the summary");
    }
    // --no-redact sends the transcript as Pi would.
    let fake2 = runtime.block_on(support::fake_llm::start(vec![(
        "SUMMARY".into(),
        "stop".into(),
    )]));
    std::fs::write(&file, secret_session()).expect("write");
    let (code, _) = run_json(&mut compact_via_fake(
        &file,
        fake2.port,
        &["--keep-recent-tokens", "500", "--no-redact"],
    ));
    assert_eq!(code, 0);
    assert!(fake2.state.lock().received[0]
        .body
        .to_string()
        .contains(SECRETS[0]));
}

#[test]
fn fallback_and_redaction_flags_apply_to_the_configured_summarizer() {
    // The configured LLM summarizer cannot be reached (a refused port, no retries).
    let (tmp, file) = copy_case("009-bash-executions");
    let port = support::fake_llm::refused_port();
    let cfg = tmp.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\nretry = {{ enabled = false, maxRetries = 0, baseDelayMs = 1 }}\n"
        ),
    )
    .expect("write config");
    let run = |extra: &[&str]| {
        run_json(
            compactd()
                .arg("compact")
                .arg(&file)
                .arg("--json")
                .args(["--keep-recent-tokens", "2000", "--no-redact"])
                .args(extra)
                .arg("--config")
                .arg(&cfg),
        )
    };
    let (code, v) = run(&[]);
    assert_eq!(code, 1, "without the flag the failure stands: {v}");
    let (code, v) = run(&["--fallback-extractive"]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["details"]["fallbackReason"].is_string(),
        "the extractive fallback wrote it: {v}"
    );
}

/// `inspect`, `compact` and error messages printed the session's strings (its id, entry ids, a
/// summary quoting it) as they were: an escape sequence in them cleared the screen, set the
/// window title or wrote the clipboard of whoever read the output. Now every such string is
/// made printable (visible escapes), in text and in JSON output alike.
#[test]
fn session_strings_reach_the_terminal_only_as_printable_text() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostile.jsonl");
    support::write_hostile_session(&file);

    let out = compactd().arg("inspect").arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    support::assert_printable("inspect", &text);
    assert!(
        text.contains(r"\x1b]52;c;aGVsbG8=\x07\x1b[2J\x1b]0;title\x07\u{9b}31m\x7f\x0d"),
        "the escapes are visible: {text}"
    );

    let out = compactd()
        .arg("inspect")
        .arg(&file)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    support::assert_printable("inspect --json", &text);
    // The same JSON value: the session's id as the file has it.
    let v: Value = serde_json::from_str(&text).unwrap();
    let id = v["session"]["id"].as_str().unwrap_or_default();
    assert!(id.ends_with(support::HOSTILE), "{id:?}");

    let out = compactd().arg("compact").arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    support::assert_printable("compact", &text);
    support::assert_printable("compact's stderr", &String::from_utf8_lossy(&out.stderr));

    // An error quoting a path the user was handed.
    let missing = dir.path().join(format!("gone{}.jsonl", support::HOSTILE));
    let out = compactd().arg("inspect").arg(&missing).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("compactd: ") && err.contains("gone"),
        "{err}"
    );
    support::assert_printable("inspect's error", &err);
}

/// Runs `cmd` to its end, killing it if it is still running after `limit` (a daemon that
/// started instead of refusing its configuration).
fn output_within(mut cmd: Command, limit: std::time::Duration) -> std::process::Output {
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn compactd");
    let deadline = std::time::Instant::now() + limit;
    let mut pause = std::time::Duration::from_millis(1);
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// A configuration that makes no sense, or a log filter that does not parse, was accepted
/// (prices reported negative dollars or `null`; a bad `COMPACTD_LOG` or `[log] level` fell back
/// to the default silently). Now the command refuses to start: exit 2, the setting and the
/// reason on stderr.
#[test]
fn nonsense_settings_and_log_filters_are_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let session = support::conformance_cases(support::PiVersion::V0_85)
        .join("005-medium-basic/session.jsonl");
    for (text, named) in [
        (
            "[prices.\"gpt-x\"]\ninput = -3.0\noutput = 1.0\ncache_read = 0.1\ncache_write = 1.0\n",
            "prices.\"gpt-x\".input = -3",
        ),
        (
            "[prices.\"gpt-x\"]\ninput = nan\noutput = 1.0\ncache_read = 0.1\ncache_write = 1.0\n",
            "prices.\"gpt-x\".input = NaN",
        ),
        ("[log]\nlevel = \"verbose\"\n", "log.level \"verbose\": "),
        ("[log]\nlevel = \"info,x=[\"\n", "log.level \"info,x=[\": "),
    ] {
        std::fs::write(&config, text).unwrap();
        for command in [vec!["inspect", "--json"], vec!["serve", "--socket"]] {
            let mut cmd = compactd();
            cmd.arg("--config").arg(&config).args(&command);
            if command[0] == "serve" {
                cmd.arg(dir.path().join("d.sock"));
            } else {
                cmd.arg(&session);
            }
            let out = output_within(cmd, std::time::Duration::from_secs(30));
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command:?} {text}: {err}");
            assert!(err.contains(named), "{command:?} {text}: {err}");
        }
    }
    for bad in ["verbose", "info,compactd=loud"] {
        let out = compactd()
            .env("COMPACTD_LOG", bad)
            .arg("inspect")
            .arg(&session)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.starts_with(&format!("compactd: COMPACTD_LOG {bad:?}: ")),
            "{bad}: {err}"
        );
    }
    // A filter that parses still works.
    let out = compactd()
        .env("COMPACTD_LOG", "warn,compactd=debug")
        .arg("inspect")
        .arg(&session)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}
