//! Where the test inputs live and what a test does when one is missing, shared by the library's
//! unit tests and (through `#[path]`) by every integration suite, so all of them agree.
//!
//! A suite must never pass while testing nothing: a missing input may be skipped on a developer
//! machine, but when `CI=true` (the CI script installs everything) a missing input fails.
//! Standard library only, so the integration suites can include this file as it is.
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

/// The conformance cases: `$COMPACTD_CONFORMANCE_DIR`, else `../shared/conformance/cases` beside
/// the crate (found from `CARGO_MANIFEST_DIR`, never from an absolute path).
pub fn conformance_dir() -> PathBuf {
    match std::env::var_os("COMPACTD_CONFORMANCE_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance/cases"),
    }
}

/// A file of one case (`case/name`), or `None` after [`skip_or_fail`] when it is absent.
pub fn case_file(test: &str, case: &str, name: &str) -> Option<PathBuf> {
    let p = conformance_dir().join(case).join(name);
    if p.is_file() {
        Some(p)
    } else {
        skip_or_fail(
            test,
            &format!("{} not found (set COMPACTD_CONFORMANCE_DIR)", p.display()),
        );
        None
    }
}

/// Every case directory holding `marker`, sorted; empty only after [`skip_or_fail`] (the cases
/// are missing altogether), so a caller iterating over them never silently checks nothing.
pub fn cases_with(test: &str, marker: &str) -> Vec<PathBuf> {
    let dir = conformance_dir();
    let mut cases: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join(marker).is_file())
            .collect(),
        Err(e) => {
            skip_or_fail(
                test,
                &format!("no conformance cases at {}: {e}", dir.display()),
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
