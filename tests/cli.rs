//! The `compactd` binary from the outside: `inspect` reproduces the fixtures from the command
//! line, `compact` works with no configuration (extractive), and bad input gets clear errors
//! without touching the file.

mod support;

use std::process::Command;

use serde_json::Value;

fn compactd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_compactd"))
}

fn run_json(cmd: &mut Command) -> (i32, Value) {
    let out = cmd.output().expect("run compactd");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn inspect_json_reproduces_every_fixture_analysis() {
    let mut failures = Vec::new();
    for dir in support::case_dirs() {
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
        support::conformance_dir().join(name).join("session.jsonl"),
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
    for h in [
        "## Goal",
        "## Constraints & Preferences",
        "## Progress",
        "### Done",
        "### In Progress",
        "### Blocked",
        "## Key Decisions",
        "## Next Steps",
        "## Critical Context",
    ] {
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
        assert!(
            msg.starts_with("Session file is not a valid pi session: /"),
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
