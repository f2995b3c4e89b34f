//! Runs every conformance case of both Pis through compactd under that Pi's rules — Pi 0.85.0's
//! (`tests/fixtures/conformance/pi-0.85/cases`, or `$COMPACTD_CONFORMANCE_DIR`) with
//! `piVersion` 0.85, Pi 1.6.0's (`pi-1.6`, or `$COMPACTD_CONFORMANCE_1_6_DIR`) with 1.6 — and
//! compares every field the fixture READMEs mark exact: the analysis (`inspect`), and the full
//! compaction against an in-process fake provider that replays each case's recorded replies,
//! both ways a compaction reaches compactd's one path: `compact` on a daemon, and
//! `compactd compact --no-daemon` as a user runs it. `COMPACTD_CONFORMANCE_ONLY=0.85|1.6` runs one set.

mod support;

use std::path::Path;

use compactd::report;
use serde_json::Value;

use support::{
    case_dirs, fake_llm, first_diff, load_case, read_json, rename_strings, settings_of, PiVersion,
    ANALYSIS_FIELDS,
};

fn check_analysis(dir: &Path, expected: &Value, pi: PiVersion) -> Vec<String> {
    let (tree, ids) = load_case(dir);
    let window = expected["inputs"]["contextWindow"]
        .as_i64()
        .unwrap_or(200000);
    let mut actual = report::inspect(&tree, window, &settings_of(expected), pi);
    rename_strings(&mut actual, &ids);
    let mut failures = Vec::new();
    for field in ANALYSIS_FIELDS {
        if let Some(d) = first_diff(&actual[field], &expected[field], field) {
            failures.push(d);
        }
    }
    failures
}

/// A plain `main` (the test is `harness = false`) so the closing line is always printed.
fn main() {
    // Pi's settings as the fixtures' harness had them: no settings files, so a session that
    // never set a thinking level summarizes with it off. Set before any thread starts.
    let agent = tempfile::tempdir().expect("temp dir");
    // And the additions beyond Pi that change what is written off for the CLI's runs too
    // (the daemon's are also set by `setSettingsOverrides`).
    std::fs::write(
        agent.path().join("settings.json"),
        r#"{"defaultThinkingLevel":"off","compaction":{"recallFooter":false,"speculativeAt":0}}"#,
    )
    .expect("settings.json");
    std::env::set_var("PI_CODING_AGENT_DIR", agent.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let only = std::env::var("COMPACTD_CONFORMANCE_ONLY").ok();
    let mut all_failed = Vec::new();
    for pi in PiVersion::ALL {
        if only.as_deref().is_some_and(|o| o != pi.as_str()) {
            continue;
        }
        all_failed.extend(run_set(&runtime, pi));
    }
    if !all_failed.is_empty() {
        eprintln!("failed cases: {all_failed:?}");
        std::process::exit(1);
    }
}

/// Every case of one Pi's set; returns the names of the cases that failed.
fn run_set(runtime: &tokio::runtime::Runtime, pi: PiVersion) -> Vec<String> {
    let cases = case_dirs(pi);
    assert!(!cases.is_empty(), "no conformance cases found");
    let mut passed = 0;
    let mut failed = Vec::new();
    for dir in &cases {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let expected = read_json(&dir.join("expected.json"));
        let mut failures = check_analysis(dir, &expected, pi);
        for route in [fake_llm::Route::Daemon, fake_llm::Route::Cli] {
            for protocol in [
                fake_llm::Protocol::OpenAiCompletions,
                fake_llm::Protocol::AnthropicMessages,
            ] {
                let found = runtime.block_on(fake_llm::check_compaction(
                    dir, &expected, protocol, pi, route,
                ));
                failures.extend(
                    found
                        .into_iter()
                        .map(|f| format!("[{} {}] {f}", route.key(), protocol.key())),
                );
            }
        }
        if failures.is_empty() {
            passed += 1;
        } else {
            eprintln!("FAIL {} {name}:", pi.as_str());
            for f in failures.iter().take(8) {
                eprintln!("    {f}");
            }
            failed.push(name);
        }
    }
    println!(
        "conformance (Pi {}): {passed} passed, {} failed",
        pi.as_str(),
        failed.len()
    );
    failed
        .into_iter()
        .map(|n| format!("{} {n}", pi.as_str()))
        .collect()
}
