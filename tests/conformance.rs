//! Runs every Pi 0.85.0 conformance case (`../shared/conformance/cases`, or
//! `$COMPACTD_CONFORMANCE_DIR`) through compactd and compares every field the fixture README
//! marks exact: the analysis (`inspect`), and the full compaction against an in-process fake
//! OpenAI-compatible server that replays each case's recorded replies.

mod support;

use std::path::Path;

use compactd::report;
use serde_json::Value;

use support::{
    case_dirs, fake_llm, first_diff, load_case, read_json, rename_strings, settings_of,
    ANALYSIS_FIELDS,
};

fn check_analysis(dir: &Path, expected: &Value) -> Vec<String> {
    let (tree, ids) = load_case(dir);
    let window = expected["inputs"]["contextWindow"]
        .as_i64()
        .unwrap_or(200000);
    let mut actual = report::inspect(&tree, window, &settings_of(expected));
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
    std::fs::write(
        agent.path().join("settings.json"),
        r#"{"defaultThinkingLevel":"off"}"#,
    )
    .expect("settings.json");
    std::env::set_var("PI_CODING_AGENT_DIR", agent.path());
    let cases = case_dirs();
    assert!(!cases.is_empty(), "no conformance cases found");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut passed = 0;
    let mut failed = Vec::new();
    for dir in &cases {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let expected = read_json(&dir.join("expected.json"));
        let mut failures = check_analysis(dir, &expected);
        for protocol in [
            fake_llm::Protocol::OpenAiCompletions,
            fake_llm::Protocol::AnthropicMessages,
        ] {
            let found = runtime.block_on(fake_llm::check_compaction(dir, &expected, protocol));
            failures.extend(
                found
                    .into_iter()
                    .map(|f| format!("[{}] {f}", protocol.key())),
            );
        }
        if failures.is_empty() {
            passed += 1;
        } else {
            eprintln!("FAIL {name}:");
            for f in failures.iter().take(8) {
                eprintln!("    {f}");
            }
            failed.push(name);
        }
    }
    println!("conformance: {passed} passed, {} failed", failed.len());
    if !failed.is_empty() {
        eprintln!("failed cases: {failed:?}");
        std::process::exit(1);
    }
}
