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

impl Status {
    /// Follows one of [`PROGRESS_EVENTS`]: a scheduled retry shows its countdown until the next
    /// attempt starts.
    fn observe(&mut self, name: &str, params: &serde_json::Value) {
        use crate::rpc::events::Event;
        match Event::parse(name, params) {
            Ok(Event::RetryScheduled(e)) => {
                self.retry = Some((
                    e.attempt,
                    e.max_attempts,
                    Instant::now() + Duration::from_millis(e.delay_ms),
                    e.error_message.to_owned(),
                ))
            }
            Ok(Event::RetryAttemptStart(_) | Event::RetryFinished(_)) => self.retry = None,
            _ => {}
        }
    }
}

/// How the progress line names the summarizer of `session_id` in this process's daemon.
fn summarizer_name(daemon: &crate::daemon::Daemon, session_id: &str) -> String {
    match daemon.engine_label(session_id) {
        Some(label) if label == "extractive" => "the extractive summarizer".to_owned(),
        Some(label) => label,
        None => "the session's summarizer".to_owned(),
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

/// What `compact` was asked to do.
pub struct Request<'a> {
    pub path: &'a Path,
    pub json: bool,
    pub custom_instructions: Option<&'a str>,
    /// The daemon to go through when it holds the file (`None`: `--no-daemon`).
    pub socket: Option<&'a Path>,
}

/// Runs `compact`; returns the process exit code. The compaction is the protocol's `compact`
/// of the session, in the daemon that holds the file or else in one of this process
/// (`super::via_daemon`): one path for every compaction compactd writes. On failure the file
/// is left as loading left it (Pi's own load-time repairs only) and the error is Pi's original
/// message; a refusal says why, with the numbers and the setting to change.
pub fn run(request: Request<'_>, flags: super::via_daemon::Flags) -> i32 {
    let json = request.json;
    let file = match std::fs::canonicalize(request.path) {
        Ok(f) => f,
        Err(e) => {
            super::print_error(
                json,
                &format!("session file {}: {e}", request.path.display()),
            );
            return super::EXIT_FAILED;
        }
    };
    let work = async {
        let open = match super::via_daemon::session(request.socket, &file, flags).await {
            Ok(open) => open,
            Err((message, code)) => {
                super::print_error(json, &message);
                return code;
            }
        };
        compact_open(&open, json, request.custom_instructions).await
    };
    match super::runtime::block_on(super::runtime::Shape::Client, work) {
        Ok(code) => code,
        Err(e) => {
            super::print_error(json, &e);
            super::EXIT_FAILED
        }
    }
}

/// The events that move the progress line: a retry being waited for, and the next attempt.
const PROGRESS_EVENTS: [&str; 3] = [
    "summarization_retry_scheduled",
    "summarization_retry_attempt_start",
    "summarization_retry_finished",
];

/// Calls `compact` on `open`'s session and prints its answer; on a terminal, a progress line
/// follows the daemon's retry events meanwhile. Ctrl-C asks the daemon to abort.
async fn compact_open(open: &super::via_daemon::Open, json: bool, custom: Option<&str>) -> i32 {
    use super::via_daemon::Which;
    let pb = progress_bar(json);
    let summarizer = match &open.daemon {
        Which::Own(daemon) => summarizer_name(daemon, &open.session_id),
        Which::Running { pid, socket } => format!(
            "through the daemon (pid {}) on {}",
            pid.unwrap_or_default(),
            socket.display()
        ),
    };
    let status = Arc::new(Mutex::new(Status {
        summarizer,
        retry: None,
    }));
    pb.set_message(status.lock().render());
    pb.tick();
    let mut events = open.client.notifications();
    let subscribed = open
        .call(
            "subscribe",
            serde_json::json!({ "events": PROGRESS_EVENTS }),
        )
        .await;
    if let Err(r) = subscribed {
        tracing::debug!("no progress events: {r}");
    }
    let progress = {
        let status = status.clone();
        let pb = pb.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    event = events.recv() => match event {
                        Some((name, params)) => status.lock().observe(&name, &params),
                        None => std::future::pending::<()>().await,
                    },
                    _ = tick.tick() => {}
                }
                pb.set_message(status.lock().render());
            }
        }
    };
    let compact = open.call(
        "compact",
        serde_json::json!({ "customInstructions": custom }),
    );
    let reply = tokio::select! {
        reply = compact => reply,
        () = progress => unreachable!("the progress loop never ends"),
        _ = tokio::signal::ctrl_c() => {
            // The daemon ends the compaction with Pi's "Compaction cancelled".
            let _ = open.call("abortCompaction", serde_json::json!({})).await;
            Err(crate::transport::client::Refusal {
                code: crate::rpc::ErrorKind::Cancelled.code() as i64,
                message: crate::compactor::CANCELLED.to_owned(),
                data: serde_json::json!({"kind": "cancelled"}),
            })
        }
    };
    pb.finish_and_clear();
    match reply {
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
