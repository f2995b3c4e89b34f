//! `compactd inspect`: Pi's analysis of a session file, without writing anything.
//!
//! The analysis itself is `report::inspect` (the `--json` output, in the fixtures' shape). The
//! human summary adds facts about the file that the analysis does not carry: the version the
//! file was written in (a v1/v2 file is migrated in memory, and would be rewritten by a
//! writing command), the compactions already in it and how many branches its tree has.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use crate::compaction::tokens::CompactionSettings;
use crate::report;
use crate::session::{EntryKind, SessionTree};
use crate::store;

/// Facts about the file itself, for the human summary.
struct FileFacts {
    /// `version` of the header as written (absent: 1).
    original_version: u64,
    migrated: bool,
    skipped_lines: usize,
    compactions: usize,
    compactions_on_branch: usize,
    /// Leaves of the tree: 1 for a linear session.
    branches: usize,
}

fn file_facts(path: &Path, tree: &SessionTree, load: &store::LoadReport) -> FileFacts {
    let first_line = std::fs::read(store::absolute(path)).ok().and_then(|b| {
        let line = b.split(|&c| c == b'\n').next()?.to_vec();
        serde_json::from_slice::<Value>(&line).ok()
    });
    let original_version = first_line
        .as_ref()
        .and_then(|h| h.get("version"))
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let entries = tree.entries();
    let parents: HashSet<&str> = entries
        .iter()
        .filter_map(|e| e.parent_id.as_deref())
        .collect();
    let branches = entries
        .iter()
        .filter(|e| e.id.as_deref().is_some_and(|id| !parents.contains(id)))
        .count();
    let branch = tree.branch();
    FileFacts {
        original_version,
        migrated: load.migrated,
        skipped_lines: load.skipped_lines,
        compactions: entries
            .iter()
            .filter(|e| e.kind == EntryKind::Compaction)
            .count(),
        compactions_on_branch: branch
            .iter()
            .filter(|&&i| tree.entry(i).kind == EntryKind::Compaction)
            .count(),
        branches: branches.max(usize::from(!entries.is_empty())),
    }
}

/// `1 entry`, `2 entries`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn n(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_f64().map(|f| f.max(0.0) as u64))
        .unwrap_or(0)
}

/// Runs `inspect`; returns the process exit code.
pub fn run(path: &Path, json: bool, context_window: i64, settings: &CompactionSettings) -> i32 {
    let (tree, load) = match store::load(path, false) {
        Ok(t) => t,
        Err(e) => {
            super::print_error(json, &e.to_string());
            return super::EXIT_FAILED;
        }
    };
    let out = report::inspect(&tree, context_window, settings);
    if json {
        return super::write_stdout(&format!("{}\n", crate::json::stringify(&out)));
    }
    let facts = file_facts(path, &tree, &load);
    super::write_stdout(&human(&out, context_window, settings, &facts))
}

fn human(r: &Value, window: i64, settings: &CompactionSettings, f: &FileFacts) -> String {
    let mut s = String::new();
    let sess = &r["session"];
    let mut notes = vec![count(n(&sess["entryCount"]), "entry", "entries")];
    if f.skipped_lines > 0 {
        notes.push(format!(
            "{} skipped",
            count(f.skipped_lines as u64, "malformed line", "malformed lines")
        ));
    }
    let version = if f.migrated {
        format!(
            "v{} file, read as v{}: compact or openSession would migrate and rewrite it",
            f.original_version, sess["version"]
        )
    } else {
        format!("v{}", f.original_version)
    };
    s.push_str(&format!(
        "session   {} ({version}; {})\n",
        sess["id"].as_str().unwrap_or("?"),
        notes.join(", ")
    ));
    s.push_str(&format!(
        "history   {} ({} on the current branch), {}\n",
        count(
            f.compactions as u64,
            "earlier compaction",
            "earlier compactions"
        ),
        f.compactions_on_branch,
        count(f.branches as u64, "branch", "branches")
    ));
    let est = &r["estimate"];
    let threshold = window as f64 - settings.reserve_tokens as f64;
    s.push_str(&format!(
        "context   {} tokens ({} from usage + {} estimated), {}\n",
        est["tokens"],
        est["usageTokens"],
        est["trailingTokens"],
        count(
            r["context"]["messages"].as_array().map_or(0, Vec::len) as u64,
            "message",
            "messages"
        )
    ));
    s.push_str(&format!(
        "threshold {threshold} (window {window} - reserve {}): {}\n",
        settings.reserve_tokens,
        if r["shouldCompact"] == true {
            "compaction due"
        } else {
            "below threshold"
        }
    ));
    match r["preparation"].as_object() {
        Some(p) => {
            let len = |k: &str| p.get(k).and_then(Value::as_array).map_or(0, Vec::len) as u64;
            s.push_str(&format!(
                "compact   would summarize {}{} and keep from entry {} (keepRecentTokens {})\n",
                count(len("messagesToSummarize"), "message", "messages"),
                if p.get("isSplitTurn") == Some(&Value::Bool(true)) {
                    format!(
                        " + a split-turn prefix of {}",
                        count(len("turnPrefixMessages"), "message", "messages")
                    )
                } else {
                    String::new()
                },
                p.get("firstKeptEntryId")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                settings.keep_recent_tokens
            ));
            let lists = &p["fileLists"];
            let files = |k: &str| lists[k].as_array().map_or(0, Vec::len) as u64;
            s.push_str(&format!(
                "files     {} read, {} modified\n",
                count(files("readFiles"), "file", "files"),
                files("modifiedFiles")
            ));
        }
        None => s.push_str(&format!(
            "compact   nothing to do: {}\n",
            r["preparationNullReason"].as_str().unwrap_or("")
        )),
    }
    s
}
