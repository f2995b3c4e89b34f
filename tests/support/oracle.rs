//! The Pi 0.85.0 oracle (`$COMPACTD_ORACLE`, installed by `scripts/test-all`) as a loader: does
//! Pi read a session file the way compactd does? Used by the suites that leave files behind a
//! crash or a load test. Absent oracle: skipped on a developer machine, a failure under CI.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

pub struct Oracle {
    node: PathBuf,
    dir: PathBuf,
}

impl Oracle {
    /// The oracle, or `None` after [`super::skip_or_fail`] naming `test`.
    pub fn find(test: &str) -> Option<Oracle> {
        let Some(dir) = std::env::var_os("COMPACTD_ORACLE").map(PathBuf::from) else {
            super::skip_or_fail(
                test,
                "COMPACTD_ORACLE is not set (Pi cannot load the files)",
            );
            return None;
        };
        let node = dir.join("node");
        if !node.is_file() {
            super::skip_or_fail(test, &format!("no node binary at {}", node.display()));
            return None;
        }
        Some(Oracle { node, dir })
    }

    /// Pi's analysis of `file` (`harness.mjs --no-compact`, the `expected.json` shape).
    pub fn analyse(&self, file: &Path) -> Result<Value, String> {
        let out = file.with_extension("pi.json");
        let run = Command::new(&self.node)
            .arg(self.dir.join("harness.mjs"))
            .arg(file)
            .arg("--no-compact")
            .arg("--out")
            .arg(&out)
            .output()
            .map_err(|e| format!("harness: {e}"))?;
        if !run.status.success() {
            return Err(format!(
                "Pi could not load {}: {}",
                file.display(),
                String::from_utf8_lossy(&run.stderr)
            ));
        }
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
