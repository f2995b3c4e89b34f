//! The recorder reproduces the recorded conformance cases: `scripts/record-conformance VERSION
//! --check` runs the real Pi (installed from npm by `scripts/pi-oracle`) on a few cases of each
//! set and finds every recorded file byte for byte as Pi makes it now, and a case whose
//! recording was changed is reported. The whole sets are checked by running the script without
//! `--case` (some minutes).

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::{conformance_cases, oracle, PiVersion};

/// Cases of each set that exercise the generator's and the harness's less common paths: a v1
/// session (migration ids), a compaction made earlier by Pi itself, a split turn, and under 1.6
/// entries only Pi 1.6's `SessionManager` writes.
fn sample(pi: PiVersion) -> &'static [&'static str] {
    match pi {
        PiVersion::V0_85 => &[
            "026-compacted-then-split-turn",
            "050-v1-session-no-ids",
            "051-malformed-lines",
        ],
        PiVersion::V1_6 => &[
            "050-v1-session-no-ids",
            "060-context-edit-around-compaction",
            "066-split-turn-only-new-since-compaction",
        ],
    }
}

/// `scripts/record-conformance VERSION args…` on the installed oracle and `cases`.
fn record(pi: PiVersion, oracle: &Path, cases: &Path, args: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/record-conformance");
    Command::new("bash")
        .arg(script)
        .arg(pi.as_str())
        .args(args)
        .env(oracle::env_var(pi), oracle)
        .env("CASES_DIR", cases)
        .output()
        .expect("run scripts/record-conformance")
}

fn check_args(cases: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec!["--check"];
    for case in cases {
        args.extend(["--case", case]);
    }
    args
}

#[test]
fn the_recorder_reproduces_recorded_cases_byte_for_byte() {
    for pi in PiVersion::ALL {
        let test = format!("recorder on Pi {}", pi.as_str());
        let Some(oracle) = oracle::Oracle::of(pi, &test) else {
            continue;
        };
        let cases = sample(pi);
        let out = record(pi, oracle.dir(), &conformance_cases(pi), &check_args(cases));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{test}: {}\n{stdout}\n{stderr}",
            out.status
        );
        let full = if pi == PiVersion::V0_85 {
            "0.85.0"
        } else {
            "1.6.0"
        };
        let tally = format!(
            "{n} of {n} cases reproduced byte for byte with Pi {full}",
            n = cases.len()
        );
        assert!(stdout.contains(&tally), "{test}: {stdout}");
    }
}

#[test]
fn a_recording_that_differs_from_pi_is_reported() {
    let pi = PiVersion::V1_6;
    let Some(oracle) = oracle::Oracle::of(pi, "a changed recording is reported") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let case = "060-context-edit-around-compaction";
    let from = conformance_cases(pi).join(case);
    let to = tmp.path().join(case);
    std::fs::create_dir(&to).expect("case dir");
    for file in [
        "case.json",
        "session.jsonl",
        "expected.json",
        "llm-requests.json",
    ] {
        std::fs::copy(from.join(file), to.join(file)).expect("copy case");
    }
    // One token of Pi's analysis changed: a recording nobody made.
    let expected = std::fs::read_to_string(to.join("expected.json")).expect("expected.json");
    let changed = expected.replacen("\"shouldCompact\":false", "\"shouldCompact\":true", 1);
    assert_ne!(changed, expected, "the case has shouldCompact false");
    std::fs::write(to.join("expected.json"), changed).expect("write");

    let out = record(pi, oracle.dir(), tmp.path(), &check_args(&[case]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "{case}/expected.json: differs from what Pi 1.6.0 makes now"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("session.jsonl") && !stderr.contains("llm-requests.json"),
        "only the changed file is reported: {stderr}"
    );
    assert!(stdout.contains("0 of 1 cases reproduced"), "{stdout}");
}
