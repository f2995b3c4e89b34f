//! Differential round trip against the real Pi, 0.85.0 and 1.6.0 (`support::oracle`), compactd
//! following that Pi's rules: generate sessions with `gen.mjs` (other seeds than the fixtures',
//! and for 1.6 its own scenarios: edits, system messages, overflows, codemode), compare
//! compactd's analysis with `harness.mjs --no-compact` field by field, then compact a copy with
//! compactd's own path and check that Pi loads the result the way compactd does (leaf, context
//! entries, context messages, "Already compacted", every analysis field).
//!
//! Skips (with a printed message) when the oracle cannot be installed, and fails instead when
//! `CI=true`.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde_json::Value;

use compactd::compaction::prepare_compaction;
use compactd::compaction::tokens::CompactionSettings;
use compactd::session::{read_session, ReadOutcome, SessionTree};

use support::fake_llm::{self, Protocol};
use support::first_diff;
use support::oracle::Oracle;
use support::PiVersion;

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
/// Pi 1.6's own scenarios, beside the ones above.
const SCENARIOS_1_6: [&str; 9] = [
    "system-message-tools-changed",
    "context-edit-omit",
    "context-edit-replace",
    "context-edit-around-compaction",
    "overflow-last-tool-result",
    "overflow-recovery-omission",
    "split-turn-only-new-since-compaction",
    "recompaction-keeps-pre-compaction-entries",
    "codemode-nested-calls",
];
/// Not the fixtures' seeds (1000–1070).
const SEEDS: [u32; 3] = [7101, 7202, 7303];

/// `harness.mjs --no-compact` on `file` with these settings.
fn analyse(
    oracle: &Oracle,
    file: &Path,
    window: i64,
    s: &CompactionSettings,
) -> Result<Value, String> {
    oracle.analyse_with(
        file,
        &[
            "--context-window".into(),
            window.to_string(),
            "--reserve-tokens".into(),
            s.reserve_tokens.to_string(),
            "--keep-recent-tokens".into(),
            s.keep_recent_tokens.to_string(),
        ],
    )
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
    pi: PiVersion,
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
    let theirs = analyse(oracle, &file, window, &settings)?;
    let tree = load(&file)?;
    let ours = compactd::report::inspect(&tree, window, &settings, pi);
    compare_analysis(&theirs, &ours, "original", &mut failures);

    // 2. compactd compacts a copy; Pi must load it as compactd does.
    let copy = dir.join(format!("{scenario}-{seed}.compacted.jsonl"));
    std::fs::copy(&file, &copy).map_err(|e| e.to_string())?;
    let branch = tree.branch();
    let prepared = prepare_compaction(pi, &tree.refs(&branch), &settings).is_ok();
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
            if theirs["preparationNullReason"].as_str() != Some(m) {
                failures.push(format!(
                    "refusal {m:?} but Pi says {}",
                    theirs["preparationNullReason"]
                ));
            }
            return Ok(failures);
        }
        Err(e) => return Err(format!("compact: {e}")),
    };
    compacted.fetch_add(1, Ordering::SeqCst);
    let new_id = done.entry["id"].as_str().unwrap_or_default().to_owned();
    let pi_after = analyse(oracle, &copy, window, &settings)?;
    let reloaded = load(&copy)?;
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
    // The context's entries and messages are compared with the rest of the analysis below;
    // here, that Pi's context leads with compactd's summary (after a 1.6 checkpoint).
    let summary = pi_after["context"]["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "compactionSummary"))
        .and_then(|m| m["summary"].as_str());
    match summary {
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
    let ours_after = compactd::report::inspect(&reloaded, window, &settings, pi);
    compare_analysis(&pi_after, &ours_after, "after", &mut failures);
    Ok(failures)
}

#[test]
fn oracle_roundtrip_0_85() {
    roundtrip(PiVersion::V0_85, &SCENARIOS);
}

#[test]
fn oracle_roundtrip_1_6() {
    let all: Vec<&str> = SCENARIOS.iter().chain(&SCENARIOS_1_6).copied().collect();
    roundtrip(PiVersion::V1_6, &all);
}

fn roundtrip(pi: PiVersion, scenarios: &[&str]) {
    let test = format!("oracle roundtrip {}", pi.as_str());
    let Some(oracle) = Oracle::of(pi, &test) else {
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
    let mut config = fake_llm::fake_config(Protocol::OpenAiCompletions, fake.port);
    config.compat.pi_version = compactd::config::PiVersionSetting(pi);
    let tmp = tempfile::tempdir().expect("tempdir");
    let cases: Vec<(&str, u32)> = scenarios
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
                    pi,
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
        "oracle roundtrip (Pi {}): {passed} passed, {failed} failed ({compacted} compacted by compactd and reloaded by Pi)",
        pi.as_str()
    );
    assert_eq!(failed, 0, "oracle roundtrip: {failed} case(s) failed");
    assert_eq!(passed, cases.len());
    assert!(
        compacted > 0,
        "no case compacted: the Pi-loads check never ran"
    );
}

/// A session Pi 1.6.0 wrote itself (system messages, a tool set that changed), compacted by
/// `compactd compact` under 1.6's rules, then resumed in the real Pi 1.6.0 agent with one more
/// prompt: Pi sends the system prompt, compactd's summary as the first user message, the kept
/// tail and the new prompt, appends its turn after compactd's entry, and compacts nothing itself.
#[test]
fn a_session_pi_1_6_wrote_is_compacted_by_compactd_and_resumed_in_pi_1_6() {
    let test = "a_session_pi_1_6_wrote_is_compacted_by_compactd_and_resumed_in_pi_1_6";
    let Some(oracle) = Oracle::of(PiVersion::V1_6, test) else {
        return;
    };
    let env = support::daemon_env::Env::new();
    let file = env.path("written-by-pi.jsonl");
    let options = oracle
        .generate("system-message-tools-changed", 7404, &file)
        .expect("gen");
    let keep = options["keepRecentTokens"]
        .as_u64()
        .unwrap_or(4000)
        .to_string();
    let out = env
        .command("compact")
        .arg(&file)
        .args(["--no-daemon", "--json", "--pi-version", "1.6"])
        .args(["--keep-recent-tokens", keep.as_str()])
        .output()
        .expect("compactd compact");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).expect("compact --json");
    let summary = result["summary"].as_str().expect("a summary").to_owned();
    let kept = result["firstKeptEntryId"]
        .as_str()
        .expect("a cut")
        .to_owned();
    let written = support::daemon_env::parsed_lines(&file).expect("lines");
    let entry = written.last().expect("an entry");
    assert_eq!(entry["type"], "compaction");
    assert!(
        entry["systemMessage"].is_object(),
        "a 1.6 compaction carries the system checkpoint: {entry}"
    );

    let pi = oracle
        .analyse(&file)
        .expect("Pi analyses the compacted file");
    let home = env.path("pi-home");
    let resumed: Value = serde_json::from_str(
        oracle
            .run(
                "resume.mjs",
                &[file.display().to_string(), home.display().to_string()],
            )
            .expect("Pi 1.6 resumes the file")
            .trim(),
    )
    .expect("resume.mjs prints JSON");
    let roles: Vec<&str> = resumed["request"]["roles"]
        .as_array()
        .expect("roles")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let texts: Vec<&str> = resumed["request"]["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(roles.first(), Some(&"system"), "{roles:?}");
    assert!(!texts[0].is_empty(), "the system prompt is sent");
    assert_eq!(roles.get(1), Some(&"user"), "{roles:?}");
    let first_line = summary.lines().next().unwrap_or_default();
    assert!(
        texts[1].contains(first_line) && texts[1].contains("[compactd recall]"),
        "Pi's first user message is compactd's summary: {}",
        texts[1]
    );
    assert_eq!(texts.last(), Some(&"resume check"));
    // The kept tail: Pi's own analysis of the compacted file (before it resumed) has it after
    // the summary, and the request carries exactly that context plus the new prompt.
    let context = pi["context"]["messages"].as_array().expect("context");
    // Pi's system messages travel as one system prompt, its tool results as `tool` messages.
    let sent: Vec<&str> = roles.iter().skip(1).copied().collect();
    let built: Vec<&str> = context
        .iter()
        .filter_map(|m| m["role"].as_str())
        .filter(|r| *r != "system")
        .map(|r| match r {
            "compactionSummary" => "user",
            "toolResult" => "tool",
            r => r,
        })
        .chain(["user"])
        .collect();
    assert_eq!(sent, built, "the request is Pi's context and the prompt");
    let entry_ids: Vec<&str> = pi["session"]["contextEntryIds"]
        .as_array()
        .expect("contextEntryIds")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        entry_ids.contains(&kept.as_str()),
        "the kept tail starts at {kept}: {entry_ids:?}"
    );
    let appended: Vec<&str> = resumed["appended"]
        .as_array()
        .expect("appended")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        appended.contains(&"message:user") && appended.contains(&"message:assistant"),
        "{appended:?}"
    );
    assert!(
        !appended.contains(&"compaction"),
        "Pi compacted again: {appended:?}"
    );
}
