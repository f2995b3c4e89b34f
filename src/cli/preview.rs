//! `compactd preview`: the protocol's `previewCompaction` for a session file, printed as `top`'s
//! preview pane shows it (or, with `--json`, the answer itself). It always asks a daemon, so
//! the answer is the method's own: the running daemon when it holds the file, else a daemon of
//! this process (`super::via_daemon`).

use std::path::Path;

use serde_json::{json, Value};

use super::{print_error, SettingsArgs, EXIT_FAILED, EXIT_USAGE};

/// Runs `preview`; returns the exit code. `socket`: the daemon to use when it holds the file
/// (`None`: `--no-daemon`). Nothing to compact is an answer, not a failure (exit 0).
pub fn run(
    config: crate::config::Config,
    socket: Option<&Path>,
    path: &Path,
    json: bool,
    full: bool,
    settings: &SettingsArgs,
) -> i32 {
    let file = match std::fs::canonicalize(path) {
        Ok(f) => f,
        Err(e) => {
            print_error(json, &format!("session file {}: {e}", path.display()));
            return EXIT_FAILED;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            print_error(json, &format!("cannot start the async runtime: {e}"));
            return EXIT_FAILED;
        }
    };
    runtime.block_on(async {
        let held = match socket {
            Some(socket) => match super::via_daemon::holding(socket, &file).await {
                Ok(held) => held.map(|open| (open, socket)),
                Err(e) => {
                    tracing::warn!("{e}; previewing with a daemon of this process");
                    None
                }
            },
            None => None,
        };
        let open = match held {
            Some((open, socket)) => {
                if let Err(e) = super::via_daemon::refuse_flags(settings.given(), path, socket) {
                    print_error(json, &e);
                    return EXIT_USAGE;
                }
                open
            }
            None => {
                let open = match super::via_daemon::in_process(config, &file).await {
                    Ok(open) => open,
                    Err(r) => {
                        print_error(json, &r.message);
                        return EXIT_FAILED;
                    }
                };
                // This process's daemon is its own: the flags apply to its one session.
                if settings.given().is_some() {
                    let set = json!({ "compaction": settings.overrides() });
                    if let Err(r) = open.call("setSettingsOverrides", set).await {
                        print_error(json, &r.message);
                        return EXIT_USAGE;
                    }
                }
                open
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
    })
}

/// The lines `top` shows for a preview, and the hint when there is nothing to compact.
fn human(answer: &Value) -> String {
    let mut lines = super::top::model::preview_lines(answer);
    if let Some(hint) = answer["hint"].as_str() {
        lines.push(hint.to_owned());
    }
    lines.join("\n") + "\n"
}
