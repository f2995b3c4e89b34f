//! Runs every Pi 0.85.0 conformance case (`../shared/conformance/cases`, or
//! `$COMPACTD_CONFORMANCE_DIR`) through compactd and compares every field the fixture README
//! marks exact: the analysis (`inspect`), and the full compaction against an in-process fake
//! OpenAI-compatible server that replays each case's recorded replies.

mod common;
mod fake_llm;

use std::collections::HashMap;
use std::path::Path;

use compactd::compaction::tokens::CompactionSettings;
use compactd::report;
use compactd::session::{read_session, ReadOutcome, SessionTree};
use serde_json::Value;

use common::{case_dirs, first_diff, read_json, rename_strings};

/// Fields of `expected.json` produced by the analysis, compared exactly.
const ANALYSIS_FIELDS: [&str; 13] = [
    "session",
    "context",
    "messageTokenEstimates",
    "estimate",
    "lastAssistantUsage",
    "usageContextTokens",
    "shouldCompact",
    "shouldCompactByWindow",
    "cutPoint",
    "preparation",
    "preparationNullReason",
    "serialized",
    "session",
];

pub fn settings_of(expected: &Value) -> CompactionSettings {
    let s = &expected["inputs"]["settings"];
    CompactionSettings {
        enabled: s["enabled"].as_bool().unwrap_or(true),
        reserve_tokens: s["reserveTokens"].as_i64().unwrap_or(16384),
        keep_recent_tokens: s["keepRecentTokens"].as_i64().unwrap_or(20000),
    }
}

/// Loads a case's session; for v1 files (whose migration draws random ids) also returns the map
/// from compactd's ids to the oracle's deterministic `c0000001…` ids, in generation order.
pub fn load_case(dir: &Path) -> (SessionTree, HashMap<String, String>) {
    let bytes = std::fs::read(dir.join("session.jsonl")).expect("session.jsonl");
    let ReadOutcome::Session(parsed) = read_session(&bytes) else {
        panic!("{}: not a session", dir.display());
    };
    let mut ids = HashMap::new();
    if parsed.migrated {
        let first: Value = serde_json::from_slice(bytes.split(|&b| b == b'\n').next().unwrap_or(b"{}")).unwrap_or(Value::Null);
        let was_v1 = first.get("version").and_then(Value::as_f64).unwrap_or(1.0) < 2.0;
        if was_v1 {
            for (i, e) in parsed.entries.iter().enumerate() {
                if let Some(id) = &e.id {
                    ids.insert(id.clone(), format!("c{:07x}", i + 1));
                }
            }
        }
    }
    (SessionTree::from_parsed(parsed), ids)
}

fn check_analysis(dir: &Path, expected: &Value) -> Vec<String> {
    let (tree, ids) = load_case(dir);
    let window = expected["inputs"]["contextWindow"].as_i64().unwrap_or(200000);
    let mut actual = report::inspect(&tree, window, &settings_of(expected));
    rename_strings(&mut actual, &ids);
    let mut failures = Vec::new();
    for field in ANALYSIS_FIELDS {
        if let Some(d) = first_diff(&actual[field], &expected[field], field) {
            failures.push(d);
        }
    }
    failures.dedup();
    failures
}

/// A plain `main` (the test is `harness = false`) so the closing line is always printed.
fn main() {
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
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let expected = read_json(&dir.join("expected.json"));
        let mut failures = check_analysis(dir, &expected);
        failures.extend(runtime.block_on(fake_llm::check_compaction(dir, &expected, fake_llm::Protocol::OpenAiCompletions)));
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
