//! The real Pi as an oracle: Pi 0.85.0 or 1.6.0 with the repository's oracle scripts
//! (`tests/oracle/pi-<version>`) beside it. Does Pi read a session file the way compactd does,
//! what does it compute on a generated session? Used by the round-trip suite and by the suites
//! that leave files behind a crash or a load test.
//!
//! Where it comes from: `$COMPACTD_ORACLE` (0.85) or `$COMPACTD_ORACLE_1_6` (1.6) when set
//! (`scripts/test-all` installs both and exports them), else `scripts/pi-oracle <version>`
//! installs it from the npm registry into `target/` (once per test process; nothing when it is
//! in place). One that cannot be had is skipped with the reason on a developer machine and a
//! failure under CI.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use super::PiVersion;

pub struct Oracle {
    node: PathBuf,
    dir: PathBuf,
    pi: PiVersion,
}

/// The environment variable that names an installed oracle of `pi`.
pub fn env_var(pi: PiVersion) -> &'static str {
    match pi {
        PiVersion::V0_85 => "COMPACTD_ORACLE",
        PiVersion::V1_6 => "COMPACTD_ORACLE_1_6",
    }
}

/// The installed oracle folder of `pi`, or why there is none. Installs it at most once per
/// process (the suites' tests run in parallel and would otherwise race on `npm ci`).
pub fn installed(pi: PiVersion) -> Result<PathBuf, String> {
    static FOUND: OnceLock<Mutex<HashMap<PiVersion, Result<PathBuf, String>>>> = OnceLock::new();
    let mut found = FOUND
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    found.entry(pi).or_insert_with(|| locate(pi)).clone()
}

fn locate(pi: PiVersion) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(env_var(pi)).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if dir.join("node").is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "{} names {}, which has no node binary",
                env_var(pi),
                dir.display()
            ))
        };
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pi-oracle");
    let out = Command::new("bash")
        .arg(&script)
        .arg(pi.as_str())
        .output()
        .map_err(|e| format!("bash {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last() {
        Some(dir) if out.status.success() => Ok(PathBuf::from(dir)),
        _ => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
            Err(format!(
                "Pi {} could not be installed by scripts/pi-oracle ({}): {}",
                pi.as_str(),
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ))
        }
    }
}

impl Oracle {
    /// The oracle of the Pi whose rules compactd follows by default (Pi 1.6.0): what a suite
    /// that checks "Pi loads what compactd wrote" asks, or `None` after
    /// [`super::skip_or_fail`] naming `test`.
    pub fn find(test: &str) -> Option<Oracle> {
        Self::of(PiVersion::V1_6, test)
    }

    /// The oracle of `pi`, or `None` after [`super::skip_or_fail`] naming `test` and the reason.
    pub fn of(pi: PiVersion, test: &str) -> Option<Oracle> {
        match installed(pi) {
            Ok(dir) => Some(Oracle {
                node: dir.join("node"),
                dir,
                pi,
            }),
            Err(why) => {
                super::skip_or_fail(test, &why);
                None
            }
        }
    }

    /// The oracle's folder (its scripts, `node_modules` with Pi, the `node` link).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The Node 22 binary Pi runs under.
    pub fn node(&self) -> &Path {
        &self.node
    }

    /// Which Pi this is.
    pub fn version(&self) -> PiVersion {
        self.pi
    }

    /// Runs one of the oracle's scripts; its stdout, or its stderr as the error.
    pub fn run(&self, script: &str, args: &[String]) -> Result<String, String> {
        let out = Command::new(&self.node)
            .arg(self.dir.join(script))
            .args(args)
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "Pi {} {script} {args:?} failed: {}",
                self.pi.as_str(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `gen.mjs`: writes a session of `scenario` with `seed` to `out` and returns the harness
    /// options the scenario wants.
    pub fn generate(&self, scenario: &str, seed: u32, out: &Path) -> Result<Value, String> {
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

    /// Pi's analysis of `file` (`harness.mjs --no-compact`, the `expected.json` shape) with the
    /// harness's defaults.
    pub fn analyse(&self, file: &Path) -> Result<Value, String> {
        self.analyse_with(file, &[])
    }

    /// Pi's analysis of `file` with more harness options (`--context-window N`, …).
    pub fn analyse_with(&self, file: &Path, options: &[String]) -> Result<Value, String> {
        let out = file.with_extension("pi.json");
        let mut args = vec![file.display().to_string(), "--no-compact".into()];
        args.extend_from_slice(options);
        args.extend(["--out".into(), out.display().to_string()]);
        self.run("harness.mjs", &args)
            .map_err(|e| format!("Pi could not load {}: {e}", file.display()))?;
        let text = std::fs::read_to_string(&out).map_err(|e| format!("harness out: {e}"))?;
        let _ = std::fs::remove_file(&out);
        // Pi's output may escape lone surrogates (ids it read): parsed as compactd reads them.
        compactd::json::parse_line(&text).map_err(|e| format!("harness out: {e}"))
    }

    /// Pi loads `file` and agrees with compactd's `inspect` on every analysis field.
    pub fn agrees(&self, file: &Path, ours: &Value) -> Result<(), String> {
        let pi = self.analyse(file)?;
        let diffs: Vec<String> = super::ANALYSIS_FIELDS
            .iter()
            .filter_map(|f| super::first_diff(&ours[*f], &pi[*f], f))
            .collect();
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "Pi and compactd disagree on {}: {diffs:?}",
                file.display()
            ))
        }
    }
}
