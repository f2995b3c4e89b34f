//! `compactd preview`: the protocol's `previewCompaction` for a session file, printed as `top`'s
//! preview pane shows it (or, with `--json`, the answer itself). It always asks a daemon, so
//! the answer is the method's own: the running daemon when it holds the file, else a daemon of
//! this process (`super::via_daemon`).

use std::path::Path;

use serde_json::{json, Value};

use super::{print_error, EXIT_FAILED};

/// Runs `preview`; returns the exit code. `socket`: the daemon to use when it holds the file
/// (`None`: `--no-daemon`). Nothing to compact is an answer, not a failure (exit 0).
pub fn run(
    socket: Option<&Path>,
    path: &Path,
    json: bool,
    full: bool,
    flags: super::via_daemon::Flags,
) -> i32 {
    let file = match std::fs::canonicalize(path) {
        Ok(f) => f,
        Err(e) => {
            print_error(json, &format!("session file {}: {e}", path.display()));
            return EXIT_FAILED;
        }
    };
    let work = async {
        let open = match super::via_daemon::session(socket, &file, flags).await {
            Ok(open) => open,
            Err((message, code)) => {
                print_error(json, &message);
                return code;
            }
        };
        let detail = if full { json!("full") } else { Value::Null };
        match open
            .call("previewCompaction", json!({ "detail": detail }))
            .await
        {
            Ok(answer) if json => {
                let text = crate::json::stringify(&answer);
                super::write_stdout(&format!("{}\n", super::printable::json(&text)))
            }
            Ok(answer) => super::write_stdout(&super::printable::text(&human(&answer))),
            Err(r) => {
                print_error(json, &r.message);
                EXIT_FAILED
            }
        }
    };
    match super::runtime::block_on(super::runtime::Shape::Client, work) {
        Ok(code) => code,
        Err(e) => {
            print_error(json, &e);
            EXIT_FAILED
        }
    }
}

/// The lines `top` shows for a preview with every file listed, the hint when there is nothing
/// to compact, and with `--full` what the JSON adds: the previous summary, the messages and the
/// summarizer's serialized input.
fn human(answer: &Value) -> String {
    let mut lines = super::top::model::preview_lines(answer, None);
    if let Some(hint) = answer["hint"].as_str() {
        lines.push(hint.to_owned());
    }
    if let Some(previous) = answer["previousSummary"].as_str() {
        lines.push(format!("\nPrevious summary:\n{previous}"));
    }
    for (key, title) in [
        ("messagesToSummarize", "Messages to summarize"),
        ("turnPrefixMessages", "Turn prefix messages"),
    ] {
        if let Some(messages) = answer[key].as_array().filter(|m| !m.is_empty()) {
            lines.push(format!("\n{title}:"));
            lines.extend(messages.iter().map(|m| {
                format!(
                    "  {} {}",
                    m["entryId"].as_str().unwrap_or("?"),
                    m["role"].as_str().unwrap_or("?")
                )
            }));
        }
        if let Some(text) = answer["serialized"][key].as_str().filter(|t| !t.is_empty()) {
            lines.push(format!("\n{title}, as the summarizer reads them:\n{text}"));
        }
    }
    lines.join("\n") + "\n"
}
