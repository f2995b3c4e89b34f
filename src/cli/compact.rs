//! `compactd compact`: Pi's manual compaction of one session file, appending the entry.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::compaction::tokens::CompactionSettings;
use crate::compactor::{compact_file, SummaryEngine};

/// Runs `compact`; returns the process exit code. On failure the file is left as loading left
/// it (Pi's own load-time repairs only) and the error is Pi's original message.
pub fn run(
    path: &Path,
    json: bool,
    settings: &CompactionSettings,
    engine: &SummaryEngine,
    custom_instructions: Option<&str>,
) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            super::print_error(json, &format!("cannot start the async runtime: {e}"));
            return 1;
        }
    };
    let cancel = CancellationToken::new();
    let ctrl_c = cancel.clone();
    let outcome = runtime.block_on(async move {
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                ctrl_c.cancel();
            }
        });
        compact_file(path, settings, engine, custom_instructions, &cancel).await
    });
    match outcome {
        Ok(done) => {
            if json {
                println!("{}", crate::json::stringify(&done.result));
            } else {
                let r = &done.result;
                println!(
                    "compacted: {} tokens before, ~{} after; kept from entry {}\n\n{}",
                    r["tokensBefore"],
                    r["estimatedTokensAfter"],
                    r["firstKeptEntryId"].as_str().unwrap_or("?"),
                    r["summary"].as_str().unwrap_or("")
                );
            }
            0
        }
        Err(e) => {
            super::print_error(json, &e.to_string());
            1
        }
    }
}
