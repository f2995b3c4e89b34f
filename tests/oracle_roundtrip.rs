//! Differential round trip against the real Pi 0.85.0 (the oracle in `$COMPACTD_ORACLE`):
//! generate sessions with `gen.mjs`, compare compactd's analysis with `harness.mjs --no-compact`
//! field by field, then compact a copy with compactd and check that Pi loads the result the way
//! compactd does (leaf, context entries, context messages, "Already compacted").
//!
//! Skips (with a printed message) when `COMPACTD_ORACLE` is unset or its node binary is missing,
//! and fails instead when `CI=true` (CI installs the oracle).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde_json::Value;

use compactd::compaction::prepare_compaction;
use compactd::compaction::tokens::CompactionSettings;
use compactd::context::{build_session_context, context_entries};
use compactd::session::{read_session, ReadOutcome, SessionTree};

use support::fake_llm::{self, Protocol};
use support::first_diff;

const SCENARIOS: [&str; 8] = [
    "medium-basic",
    "tool-heavy-file-ops",
    "split-turn-with-history",
    "split-turn-at-parallel-tools",
    "compacted-twice",
    "branch-with-summary",
    "metadata-before-cut",
    "null-and-odd-content",
];
/// Not the fixtures' seeds (1000–1050).
const SEEDS: [u32; 3] = [7101, 7202, 7303];

struct Oracle {
    node: PathBuf,
    dir: PathBuf,
}

fn oracle() -> Option<Oracle> {
    let Some(dir) = std::env::var_os("COMPACTD_ORACLE").map(PathBuf::from) else {
        support::skip_or_fail("oracle roundtrip", "COMPACTD_ORACLE is not set");
        return None;
    };
    let node = dir.join("node");
    if !node.is_file() {
        support::skip_or_fail(
            "oracle roundtrip",
            &format!("no node binary at {}", node.display()),
        );
        return None;
    }
    Some(Oracle { node, dir })
}

impl Oracle {
    fn run(&self, script: &str, args: &[String]) -> Result<String, String> {
        let out = Command::new(&self.node)
            .arg(self.dir.join(script))
            .args(args)
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{script} {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `gen.mjs`: writes the session and returns the scenario's harness options.
    fn generate(&self, scenario: &str, seed: u32, out: &Path) -> Result<Value, String> {
        let stdout = self.run(
            "gen.mjs",
            &[
                "--scenario".into(),
                scenario.into(),
                "--seed".into(),
                seed.to_string(),
                "--out".into(),
                out.display().to_string(),
            ],
        )?;
        serde_json::from_str(stdout.trim()).map_err(|e| format!("gen options: {e}: {stdout}"))
    }

    /// `harness.mjs FILE --no-compact` with the given settings.
    fn analyse(&self, file: &Path, window: i64, s: &CompactionSettings) -> Result<Value, String> {
        let out = file.with_extension("pi.json");
        self.run(
            "harness.mjs",
            &[
                file.display().to_string(),
                "--no-compact".into(),
                "--context-window".into(),
                window.to_string(),
                "--reserve-tokens".into(),
                s.reserve_tokens.to_string(),
                "--keep-recent-tokens".into(),
                s.keep_recent_tokens.to_string(),
                "--out".into(),
                out.display().to_string(),
            ],
        )?;
        let text = std::fs::read_to_string(&out).map_err(|e| format!("harness out: {e}"))?;
        serde_json::from_str(&text).map_err(|e| format!("harness out: {e}"))
    }
}

fn load(file: &Path) -> Result<SessionTree, String> {
    let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
    match read_session(&bytes) {
        ReadOutcome::Session(p) => Ok(SessionTree::from_parsed(p)),
        other => Err(format!("{}: not a session: {other:?}", file.display())),
    }
}

fn compare_analysis(pi: &Value, ours: &Value, what: &str, failures: &mut Vec<String>) {
    for f in support::ANALYSIS_FIELDS {
        if let Some(d) = first_diff(&ours[f], &pi[f], f) {
            failures.push(format!("{what}: {d}"));
        }
    }
}

/// A case's failures (empty when it passed), or the error that stopped it.
type CaseResult = Result<Vec<String>, String>;

/// One scenario × seed; returns the failures (empty when it passed).
#[allow(clippy::too_many_arguments)]
fn run_case(
    oracle: &Oracle,
    rt: &tokio::runtime::Runtime,
    config: &compactd::config::Config,
    dir: &Path,
    scenario: &str,
    seed: u32,
    compacted: &AtomicUsize,
) -> CaseResult {
    let mut failures = Vec::new();
    let file = dir.join(format!("{scenario}-{seed}.jsonl"));
    let opts = oracle.generate(scenario, seed, &file)?;
    let defaults = CompactionSettings::default();
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: opts["reserveTokens"]
            .as_i64()
            .unwrap_or(defaults.reserve_tokens),
        keep_recent_tokens: opts["keepRecentTokens"]
            .as_i64()
            .unwrap_or(defaults.keep_recent_tokens),
    };
    let window = opts["contextWindow"].as_i64().unwrap_or(200_000);

    // 1. The analysis of the generated session.
    let pi = oracle.analyse(&file, window, &settings)?;
    let tree = load(&file)?;
    let ours = compactd::report::inspect(&tree, window, &settings);
    compare_analysis(&pi, &ours, "original", &mut failures);

    // 2. compactd compacts a copy; Pi must load it as compactd does.
    let copy = dir.join(format!("{scenario}-{seed}.compacted.jsonl"));
    std::fs::copy(&file, &copy).map_err(|e| e.to_string())?;
    let branch = tree.branch();
    let prepared = prepare_compaction(&tree.refs(&branch), &settings).is_ok();
    let res = rt.block_on(support::compact::compact_file(
        config.clone(),
        &copy,
        &settings,
        None,
    ));
    let done = match res {
        Ok(done) => done,
        Err(r)
            if !prepared
                && matches!(r.kind(), Some("nothing_to_compact" | "already_compacted")) =>
        {
            let m = r.message.as_str();
            if pi["preparationNullReason"].as_str() != Some(m) {
                failures.push(format!(
                    "refusal {m:?} but Pi says {}",
                    pi["preparationNullReason"]
                ));
            }
            return Ok(failures);
        }
        Err(e) => return Err(format!("compact: {e}")),
    };
    compacted.fetch_add(1, Ordering::SeqCst);
    let new_id = done.entry["id"].as_str().unwrap_or_default().to_owned();
    let pi_after = oracle.analyse(&copy, window, &settings)?;
    let reloaded = load(&copy)?;
    let rb = reloaded.branch();
    let path = reloaded.refs(&rb);
    if pi_after["session"]["leafId"].as_str() != Some(new_id.as_str()) {
        failures.push(format!(
            "after: Pi leafId {} but compactd appended {new_id}",
            pi_after["session"]["leafId"]
        ));
    }
    if reloaded.leaf_id() != Some(new_id.as_str()) {
        failures.push(format!(
            "after: compactd reload leaf {:?} != {new_id}",
            reloaded.leaf_id()
        ));
    }
    let ctx_ids: Vec<Value> = context_entries(&path)
        .iter()
        .map(|e| e.id.as_deref().map_or(Value::Null, Value::from))
        .collect();
    if let Some(d) = first_diff(
        &Value::Array(ctx_ids),
        &pi_after["session"]["contextEntryIds"],
        "contextEntryIds",
    ) {
        failures.push(format!("after: {d}"));
    }
    let messages = Value::Array(build_session_context(&path).messages);
    if let Some(d) = first_diff(
        &messages,
        &pi_after["context"]["messages"],
        "context.messages",
    ) {
        failures.push(format!("after: {d}"));
    }
    match pi_after["context"]["messages"][0]["summary"].as_str() {
        Some(s) if s.contains("SUMMARY") => {}
        other => failures.push(format!(
            "after: Pi's first context message is not our summary: {other:?}"
        )),
    }
    if pi_after["preparationNullReason"].as_str() != Some("Already compacted") {
        failures.push(format!(
            "after: Pi preparationNullReason {}",
            pi_after["preparationNullReason"]
        ));
    }
    // The whole analysis of the compacted file agrees too.
    let ours_after = compactd::report::inspect(&reloaded, window, &settings);
    compare_analysis(&pi_after, &ours_after, "after", &mut failures);
    Ok(failures)
}

#[test]
fn oracle_roundtrip() {
    let Some(oracle) = oracle() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = rt.block_on(fake_llm::start(vec![
        (
            "SUMMARY-FROM-FAKE".into(),
            "stop".into()
        );
        1024
    ]));
    let config = fake_llm::fake_config(Protocol::OpenAiCompletions, fake.port);
    let tmp = tempfile::tempdir().expect("tempdir");
    let cases: Vec<(&str, u32)> = SCENARIOS
        .iter()
        .flat_map(|s| SEEDS.iter().map(move |seed| (*s, *seed)))
        .collect();
    let next = AtomicUsize::new(0);
    let compacted = AtomicUsize::new(0);
    let results: Mutex<Vec<(String, CaseResult)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(scenario, seed)) = cases.get(i) else {
                    break;
                };
                let r = run_case(
                    &oracle,
                    &rt,
                    &config,
                    tmp.path(),
                    scenario,
                    seed,
                    &compacted,
                );
                results.lock().push((format!("{scenario} seed {seed}"), r));
            });
        }
    });
    let mut results = results.into_inner();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut passed = 0;
    let mut failed = 0;
    for (name, r) in &results {
        match r {
            Ok(f) if f.is_empty() => passed += 1,
            Ok(f) => {
                failed += 1;
                println!("FAIL {name}:");
                for line in f.iter().take(10) {
                    println!("    {line}");
                }
            }
            Err(e) => {
                failed += 1;
                println!("ERROR {name}: {e}");
            }
        }
    }
    let compacted = compacted.into_inner();
    println!(
        "oracle roundtrip: {passed} passed, {failed} failed ({compacted} compacted by compactd and reloaded by Pi)"
    );
    assert_eq!(failed, 0, "oracle roundtrip: {failed} case(s) failed");
    assert_eq!(passed, cases.len());
    assert!(
        compacted > 0,
        "no case compacted: the Pi-loads check never ran"
    );
}
