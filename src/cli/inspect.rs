//! `compactd inspect`: Pi's analysis of a session file, without writing anything.

use std::path::Path;

use serde_json::Value;

use crate::compaction::tokens::CompactionSettings;
use crate::report;
use crate::store;

/// Runs `inspect`; returns the process exit code.
pub fn run(path: &Path, json: bool, context_window: i64, settings: &CompactionSettings) -> i32 {
    let (tree, load) = match store::load(path, false) {
        Ok(t) => t,
        Err(e) => {
            super::print_error(json, &e.to_string());
            return 1;
        }
    };
    let out = report::inspect(&tree, context_window, settings);
    if json {
        println!("{}", crate::json::stringify(&out));
        return 0;
    }
    print!(
        "{}",
        human(&out, context_window, settings, load.skipped_lines)
    );
    0
}

fn human(r: &Value, window: i64, settings: &CompactionSettings, skipped: usize) -> String {
    let mut s = String::new();
    let sess = &r["session"];
    s.push_str(&format!(
        "session   {} (v{}, {} entries{})\n",
        sess["id"].as_str().unwrap_or("?"),
        sess["version"],
        sess["entryCount"],
        if skipped > 0 {
            format!(", {skipped} malformed lines skipped")
        } else {
            String::new()
        }
    ));
    let est = &r["estimate"];
    let threshold = window as f64 - settings.reserve_tokens as f64;
    s.push_str(&format!(
        "context   {} tokens ({} from usage + {} estimated), {} messages\n",
        est["tokens"],
        est["usageTokens"],
        est["trailingTokens"],
        r["context"]["messages"].as_array().map_or(0, Vec::len)
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
            let n = |k: &str| p.get(k).and_then(Value::as_array).map_or(0, Vec::len);
            s.push_str(&format!(
                "compact   would summarize {} messages{} and keep from entry {} (keepRecentTokens {})\n",
                n("messagesToSummarize"),
                if p.get("isSplitTurn") == Some(&Value::Bool(true)) {
                    format!(" + a split-turn prefix of {}", n("turnPrefixMessages"))
                } else {
                    String::new()
                },
                p.get("firstKeptEntryId").and_then(Value::as_str).unwrap_or("?"),
                settings.keep_recent_tokens
            ));
            let lists = &p["fileLists"];
            s.push_str(&format!(
                "files     {} read, {} modified\n",
                lists["readFiles"].as_array().map_or(0, Vec::len),
                lists["modifiedFiles"].as_array().map_or(0, Vec::len)
            ));
        }
        None => s.push_str(&format!(
            "compact   nothing to do: {}\n",
            r["preparationNullReason"].as_str().unwrap_or("")
        )),
    }
    s
}
