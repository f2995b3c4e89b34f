//! `compactd inspect`: Pi's analysis of a session file, without writing anything.

use std::path::Path;

use crate::compaction::tokens::CompactionSettings;
use crate::report::{self, Overview};
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
    if json {
        let out = report::inspect(&tree, context_window, settings);
        println!("{}", crate::json::stringify(&out));
        return 0;
    }
    let o = report::overview(&tree, context_window, settings);
    print!("{}", human(&o, context_window, settings, load.skipped_lines));
    0
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn human(o: &Overview, window: i64, settings: &CompactionSettings, skipped: usize) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "session   {} (v{}, {}{})\n",
        o.session_id.as_deref().unwrap_or("?"),
        o.version,
        plural(o.entry_count, "entry", "entries"),
        if skipped > 0 {
            format!(", {} skipped", plural(skipped, "malformed line", "malformed lines"))
        } else {
            String::new()
        }
    ));
    s.push_str(&format!(
        "branch    leaf {}, {} on it, {} in the tree\n",
        o.leaf_id.as_deref().unwrap_or("(none)"),
        plural(o.compactions_on_branch, "compaction", "compactions"),
        plural(o.leaves, "branch", "branches"),
    ));
    let est = &o.estimate;
    let threshold = window as f64 - settings.reserve_tokens as f64;
    s.push_str(&format!(
        "context   {} tokens ({} from usage + {} estimated), {}\n",
        crate::json::js_number(est.tokens),
        crate::json::js_number(est.usage_tokens),
        est.trailing_tokens,
        plural(o.context_messages, "message", "messages"),
    ));
    s.push_str(&format!(
        "threshold {threshold} (window {window} - reserve {}): {}\n",
        settings.reserve_tokens,
        if o.should_compact {
            "compaction due"
        } else {
            "below threshold"
        }
    ));
    match &o.plan {
        Ok(p) => {
            s.push_str(&format!(
                "compact   would summarize {}{} and keep from entry {} (keepRecentTokens {})\n",
                plural(p.history.count, "message", "messages"),
                if p.is_split_turn {
                    format!(" + a split-turn prefix of {}", plural(p.turn_prefix.count, "message", "messages"))
                } else {
                    String::new()
                },
                p.first_kept_entry_id,
                settings.keep_recent_tokens
            ));
            let (read, modified) = p.file_ops.file_lists();
            s.push_str(&format!(
                "files     {} read, {} modified\n",
                read.len(),
                modified.len()
            ));
        }
        Err(reason) => s.push_str(&format!("compact   nothing to do: {}\n", reason.message())),
    }
    s
}
