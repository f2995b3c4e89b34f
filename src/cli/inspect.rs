//! `compactd inspect`: Pi's analysis of a session file, without writing anything.
//!
//! `--json` prints the full analysis (`report::inspect`, the fixtures' shape, which materializes
//! every context message). The human summary uses the lean `report::overview` (facts and the
//! plan only, no message parsed) plus facts about the file that the analysis does not carry:
//! the version the file was written in (a v1/v2 file is migrated in memory, and would be
//! rewritten by a writing command), the compactions already in it and how many branches its
//! tree has.

use std::path::Path;

use crate::compaction::tokens::CompactionSettings;
use crate::report::{self, Overview};
use crate::session::PiVersion;
use crate::store;

/// `1 entry`, `2 entries`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Runs `inspect`; returns the process exit code.
pub fn run(
    path: &Path,
    json: bool,
    context_window: i64,
    settings: &CompactionSettings,
    version: PiVersion,
) -> i32 {
    // The overview needs only the facts; the full analysis needs the messages.
    // Pi 1.6 replays system messages into the context's estimate: a file that has any is read
    // whole, so their text is there to replay.
    let loaded = store::read_session_file(path, !json).and_then(|(tree, load)| {
        let system = |t: &crate::session::SessionTree| {
            t.entries()
                .iter()
                .any(|e| e.role == Some(crate::session::Role::System))
        };
        match !json && version.is_1_6() && system(&tree) {
            true => store::read_session_file(path, false),
            false => Ok((tree, load)),
        }
    });
    let (tree, load) = match loaded {
        Ok(t) => t,
        Err(e) => {
            super::print_error(json, &e.to_string());
            return super::EXIT_FAILED;
        }
    };
    // Under Pi 0.85's rules, a file that shows what only Pi 1.6 writes is probably misread.
    if !version.is_1_6() {
        if let Some(sign) = crate::session::signs_of_1_6(tree.entries().iter().map(|e| &**e)) {
            crate::print_err!("warning: {}", crate::session::misread_message(sign));
        }
    }
    // The session's own strings (its id, entry ids, a reason quoting them) are made printable.
    let text = if json {
        let out = report::inspect(&tree, context_window, settings, version);
        let text = crate::json::stringify(&out);
        format!("{}\n", super::printable::json(&text))
    } else {
        let o = report::overview(&tree, context_window, settings, version);
        super::printable::text(&human(&o, &load, context_window, settings)).into_owned()
    };
    // The process ends after this: the system takes the session's memory back at once, without
    // freeing its entries one by one (about 10 ms for a 100 MB session).
    std::mem::forget(tree);
    super::write_stdout(&text)
}

fn human(
    o: &Overview,
    load: &store::LoadReport,
    window: i64,
    settings: &CompactionSettings,
) -> String {
    let mut s = String::new();
    let mut notes = vec![count(o.entry_count, "entry", "entries")];
    if let Some(skipped) = load.skipped_text() {
        notes.push(skipped);
    }
    let original = crate::json::js_number(load.original_version);
    let version = if load.migrated {
        format!(
            "v{original} file, read as v{}: compact or openSession would migrate and rewrite it",
            o.version
        )
    } else {
        format!("v{original}")
    };
    s.push_str(&format!(
        "session   {} ({version}; {})\n",
        o.session_id.as_deref().unwrap_or("?"),
        notes.join(", ")
    ));
    s.push_str(&format!(
        "history   {} ({} on the current branch), {}\n",
        count(o.compactions, "earlier compaction", "earlier compactions"),
        o.compactions_on_branch,
        count(o.leaves, "branch", "branches")
    ));
    let est = &o.estimate;
    let threshold = crate::compaction::tokens::threshold(window, settings);
    if o.now.usage_known {
        s.push_str(&format!(
            "context   {} tokens ({} from usage + {} estimated), {}\n",
            crate::json::js_number(est.tokens),
            crate::json::js_number(est.usage_tokens),
            est.trailing_tokens,
            count(o.context_messages, "message", "messages"),
        ));
    } else {
        // Right after a compaction: the last usage still counts what the summary replaced.
        s.push_str(&format!(
            "context   ~{} tokens estimated, {} (as Pi builds it now; the last reply's usage, {} tokens, predates the latest compaction, so Pi reports the size as unknown until the next reply)\n",
            crate::json::js_number(o.now.tokens),
            count(o.context_messages, "message", "messages"),
            crate::json::js_number(est.usage_tokens),
        ));
    }
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
                count(p.history.count, "message", "messages"),
                if p.is_split_turn {
                    format!(
                        " + a split-turn prefix of {}",
                        count(p.turn_prefix.count, "message", "messages")
                    )
                } else {
                    String::new()
                },
                p.first_kept_entry_id,
                settings.keep_recent_tokens
            ));
            let (read, modified) = p.file_ops.file_lists();
            s.push_str(&format!(
                "files     {} read, {} modified\n",
                count(read.len(), "file", "files"),
                modified.len()
            ));
        }
        Err(reason) => {
            s.push_str(&format!("compact   nothing to do: {}\n", reason.message()));
            if let Some(d) = &o.nothing {
                s.push_str(&format!("          {}\n", d.hint));
            }
        }
    }
    s
}
