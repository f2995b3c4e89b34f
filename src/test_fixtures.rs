//! Where the test inputs live and what a test does when one is missing, shared by the library's
//! unit tests and (through `#[path]`) by every integration suite, so all of them agree.
//!
//! A suite must never pass while testing nothing: a missing input may be skipped on a developer
//! machine, but when `CI=true` (the CI script installs everything) a missing input fails.
//! Standard library only (and the version enum its includer provides), so the integration suites
//! can include this file as it is.
#![allow(dead_code)]

use std::path::PathBuf;

/// Whether this run is CI (`CI=true`), where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Reports a test that cannot run because `what` is missing: panics under CI, otherwise prints
/// a `SKIPPED` line so the skip is visible. Callers return right after.
pub fn skip_or_fail(test: &str, what: &str) {
    if in_ci() {
        panic!("{test}: {what} (CI=true: a missing test input is a failure, not a skip)");
    }
    eprintln!("SKIPPED {test}: {what}");
}

/// The Pi release a set of recorded conformance cases comes from is the rules' own version
/// (`compactd::pi_version::PiVersion`: one enum for the rules and the recordings, so a suite
/// runs a set under the rules it records), which the including module provides: the crate root
/// in the library, the suites' `support` module in the integration suites.
use super::PiVersion;

/// The environment variable that points `pi`'s lookup at other cases (newer recordings,
/// held-out cases): `COMPACTD_CONFORMANCE_DIR` for 0.85 (its name from before there were two
/// sets), `COMPACTD_CONFORMANCE_1_6_DIR` for 1.6.
pub fn cases_env_var(pi: PiVersion) -> &'static str {
    match pi {
        PiVersion::V0_85 => "COMPACTD_CONFORMANCE_DIR",
        PiVersion::V1_6 => "COMPACTD_CONFORMANCE_1_6_DIR",
    }
}

/// The conformance cases recorded from Pi `pi`: the directory named by [`cases_env_var`]
/// when it is set, else the copy the repository carries,
/// `tests/fixtures/conformance/pi-<version>/cases` (found from `CARGO_MANIFEST_DIR`, never from
/// an absolute path). The one place every suite, the library's unit tests and the client suites
/// (through the environment `tests/clients.rs` passes them) learn where the cases are.
pub fn conformance_cases(pi: PiVersion) -> PathBuf {
    match std::env::var_os(cases_env_var(pi)).filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/conformance")
            .join(format!("pi-{}", pi.as_str()))
            .join("cases"),
    }
}

/// A file of one Pi 0.85.0 case (`case/name`), or `None` after [`skip_or_fail`] when it is
/// absent.
pub fn case_file(test: &str, case: &str, name: &str) -> Option<PathBuf> {
    let p = conformance_cases(PiVersion::V0_85).join(case).join(name);
    if p.is_file() {
        Some(p)
    } else {
        skip_or_fail(
            test,
            &format!(
                "{} not found (is {} right?)",
                p.display(),
                cases_env_var(PiVersion::V0_85)
            ),
        );
        None
    }
}

/// Every Pi 0.85.0 case directory holding `marker` (see [`cases_of`]).
pub fn cases_with(test: &str, marker: &str) -> Vec<PathBuf> {
    cases_of(PiVersion::V0_85, test, marker)
}

/// Every case directory of Pi `pi`'s set holding `marker`, sorted; empty only after
/// [`skip_or_fail`] (the cases are missing altogether), so a caller iterating over them never
/// silently checks nothing.
pub fn cases_of(pi: PiVersion, test: &str, marker: &str) -> Vec<PathBuf> {
    let dir = conformance_cases(pi);
    let mut cases: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join(marker).is_file())
            .collect(),
        Err(e) => {
            skip_or_fail(
                test,
                &format!(
                    "no Pi {} conformance cases at {}: {e} (is {} right?)",
                    pi.as_str(),
                    dir.display(),
                    cases_env_var(pi)
                ),
            );
            return Vec::new();
        }
    };
    assert!(
        !cases.is_empty(),
        "{test}: {} has no case with a {marker}",
        dir.display()
    );
    cases.sort();
    cases
}
