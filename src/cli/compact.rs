//! `compactd compact`: Pi's manual compaction of one session file, appending the entry.
//!
//! A call to a real provider can take many seconds (two calls for a split turn, retries with
//! backoff), so on a terminal the command shows progress on stderr: which summarizer runs, the
//! elapsed time and, while a retry waits, the failed attempt and a countdown. With `--json`, or
//! when stderr is not a terminal (an editor, a pipe, CI), nothing extra is printed.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::compaction::tokens::CompactionSettings;
use crate::compactor::{compact_in, SummaryEngine};
use crate::summarizer::RetryEvent;

/// What the progress line says; the ticker re-renders it (the countdown moves).
struct Status {
    summarizer: String,
    retry: Option<(u32, u32, Instant, String)>,
}

impl Status {
    /// The spinner's line; a provider's error message is made printable (it is the server's
    /// text).
    fn render(&self) -> String {
        super::printable::line(&self.render_raw()).into_owned()
    }

    fn render_raw(&self) -> String {
        match &self.retry {
            None => format!("summarizing with {}", self.summarizer),
            Some((attempt, max, at, error)) => {
                let left = at.saturating_duration_since(Instant::now()).as_secs_f32();
                // `attempt` tries failed so far, of the first and `max` retries.
                format!(
                    "{}: try {attempt} of {} failed ({error}); retrying in {left:.0}s",
                    self.summarizer,
                    max + 1
                )
            }
        }
    }
}

fn summarizer_name(engine: &SummaryEngine) -> String {
    match engine {
        SummaryEngine::Extractive { .. } => "the extractive summarizer".to_owned(),
        SummaryEngine::Llm { model, .. } => format!("{}/{}", model.provider, model.id),
    }
}

/// A spinner on stderr when a person is watching, else a hidden bar that prints nothing.
fn progress_bar(json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} compacting [{elapsed}] {msg}") {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// Runs `compact`; returns the process exit code. On failure the file is left as loading left
/// it (Pi's own load-time repairs only) and the error is Pi's original message.
pub fn run(
    config: &crate::config::Config,
    path: &Path,
    json: bool,
    settings: &CompactionSettings,
    engine: &SummaryEngine,
    custom_instructions: Option<&str>,
) -> i32 {
    // The daemon's storage, as configured: the same backend opens and writes the file.
    let backend = match config.storage.backend() {
        Ok(b) => b,
        Err(e) => {
            super::print_error(json, &e);
            return super::EXIT_USAGE;
        }
    };
    let price = |engine: &SummaryEngine, usage: &crate::summarizer::Usage| {
        config.summarizer_cost(engine, usage)
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            super::print_error(json, &format!("cannot start the async runtime: {e}"));
            return super::EXIT_FAILED;
        }
    };
    let pb = progress_bar(json);
    let status = Arc::new(Mutex::new(Status {
        summarizer: summarizer_name(engine),
        retry: None,
    }));
    pb.set_message(status.lock().render());
    pb.tick();
    let cancel = CancellationToken::new();
    let ctrl_c = cancel.clone();
    // The countdown of a retry being waited for, shown until the next attempt starts.
    let on_retry = |e: &RetryEvent| {
        let mut s = status.lock();
        match e {
            RetryEvent::Scheduled {
                attempt,
                max_attempts,
                delay_ms,
                error_message,
            } => {
                s.retry = Some((
                    *attempt,
                    *max_attempts,
                    Instant::now() + Duration::from_millis(*delay_ms),
                    error_message.clone(),
                ))
            }
            RetryEvent::AttemptStart | RetryEvent::Finished { .. } => s.retry = None,
        }
        pb.set_message(s.render());
    };
    let outcome = runtime.block_on(async {
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                ctrl_c.cancel();
            }
        });
        let ticker = {
            let status = status.clone();
            let pb = pb.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    pb.set_message(status.lock().render());
                }
            })
        };
        let r = compact_in(
            &*backend,
            path,
            settings,
            Arc::new(engine.clone()),
            &price,
            custom_instructions,
            &cancel,
            &on_retry,
        )
        .await;
        ticker.abort();
        r
    });
    pb.finish_and_clear();
    match outcome {
        Ok(done) => print_compacted(
            json,
            &serde_json::to_value(&done.result).unwrap_or_default(),
        ),
        Err(e @ crate::compactor::CompactError::NothingToCompact(_)) => {
            let detail = refusal_detail(path, settings)
                .and_then(|d| serde_json::to_value(&d).ok())
                .and_then(|d| match d {
                    serde_json::Value::Object(m) => Some(m),
                    _ => None,
                });
            print_refused(json, &e.to_string(), detail)
        }
        Err(e) => {
            super::print_error(json, &e.to_string());
            super::EXIT_FAILED
        }
    }
}

/// Prints a compaction's result (`CompactionResult` as the protocol serializes it), the same
/// whether this process or the daemon compacted. The summary quotes the session (and a model
/// wrote it): made printable.
fn print_compacted(json: bool, result: &serde_json::Value) -> i32 {
    if json {
        let text = crate::json::stringify(result);
        return super::write_stdout(&format!("{}\n", super::printable::json(&text)));
    }
    let text = |k: &str| result[k].as_str().unwrap_or_default();
    super::write_stdout(&super::printable::text(&format!(
        "compacted: {} tokens before, ~{} after; kept from entry {}\n\n{}\n",
        crate::json::js_number(result["tokensBefore"].as_f64().unwrap_or(0.0)),
        result["estimatedTokensAfter"].as_u64().unwrap_or(0),
        text("firstKeptEntryId"),
        text("summary")
    )))
}

/// Prints Pi's refusal (`Nothing to compact …`, `Already compacted`) with why and what to
/// change (`detail`: the reason, the numbers and the hint); exit 1.
fn print_refused(
    json: bool,
    message: &str,
    detail: Option<serde_json::Map<String, serde_json::Value>>,
) -> i32 {
    match detail {
        Some(d) if json => {
            let mut out = serde_json::Map::new();
            out.insert("error".into(), message.into());
            out.extend(d);
            let text = crate::json::stringify(&serde_json::Value::Object(out));
            super::write_stdout(&format!("{}\n", super::printable::json(&text)));
        }
        Some(d) => crate::print_err!(
            "{message}: {}",
            d.get("hint")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        ),
        None => super::print_error(json, message),
    }
    super::EXIT_FAILED
}

/// `compact` through the daemon on `socket` when it holds `path` (see `super::via_daemon`):
/// `Some(exit code)` when it did, `None` when the direct path should run (no daemon there, or
/// it does not hold the file). `given`: a settings or summarizer flag on the command line,
/// which the daemon's session would not honour (refused, exit 2).
pub fn through_daemon(
    socket: &Path,
    path: &Path,
    json: bool,
    given: Option<&str>,
    custom_instructions: Option<&str>,
) -> Option<i32> {
    let file = std::fs::canonicalize(path).ok()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let open = match super::via_daemon::holding(socket, &file).await {
            Ok(Some(open)) => open,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!("{e}; compacting the file directly");
                return None;
            }
        };
        if let Err(e) = super::via_daemon::refuse_flags(given, path, socket) {
            super::print_error(json, &e);
            return Some(super::EXIT_USAGE);
        }
        let pb = progress_bar(json);
        pb.set_message(format!(
            "through the daemon (pid {}) on {}",
            open.daemon_pid.unwrap_or_default(),
            socket.display()
        ));
        // Interrupted (Ctrl-C), this process ends and its connection with it: the daemon
        // aborts the compaction that connection asked for.
        let reply = open
            .call(
                "compact",
                serde_json::json!({ "customInstructions": custom_instructions }),
            )
            .await;
        pb.finish_and_clear();
        Some(match reply {
            Ok(result) => print_compacted(json, &result),
            Err(r) if matches!(r.kind(), Some("nothing_to_compact" | "already_compacted")) => {
                let detail = match r.data {
                    serde_json::Value::Object(mut m) => {
                        m.remove("kind");
                        Some(m)
                    }
                    _ => None,
                };
                print_refused(json, &r.message, detail)
            }
            Err(r) => {
                super::print_error(json, &r.message);
                super::EXIT_FAILED
            }
        })
    })
}

/// Why Pi refused, with the numbers and the setting to change (beyond Pi's exact message): the
/// file is read again, without writing, only on this error path.
fn refusal_detail(
    path: &Path,
    settings: &CompactionSettings,
) -> Option<crate::compaction::prepare::NothingToCompactDetail> {
    let (tree, _) = crate::store::load(path, false).ok()?;
    crate::report::overview(&tree, 0, settings).nothing
}
