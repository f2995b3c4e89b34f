//! `compactd connect` and `compactd start`: one shared daemon for editors, agents and UIs.
//!
//! `connect` is what an editor spawns instead of `compactd stdio`: it starts or joins the daemon
//! on the socket (see `launch`) and bridges its stdin/stdout to it byte for byte, so an editor
//! plugin and an agent see the same sessions (`openSession` of a file another client holds
//! yields the same `sessionId`, events included). `start` does only the first half and exits,
//! for client libraries that then connect to the socket themselves.

use std::path::{Path, PathBuf};

use super::launch::{self, Daemon};
use super::{EXIT_FAILED, EXIT_OK};

/// Where a started daemon's messages go: the configured log file, else the default one.
fn daemon_log(config: &crate::config::Config) -> PathBuf {
    config
        .log
        .file
        .clone()
        .unwrap_or_else(super::logging::default_log_file)
}

/// `compactd start`: prints the socket and whether the daemon was started or already running.
pub fn start(
    socket: Option<PathBuf>,
    config_path: Option<&Path>,
    config: &crate::config::Config,
) -> i32 {
    let socket = launch::socket_path(socket, config);
    match launch::ensure_daemon(
        &socket,
        config_path,
        &daemon_log(config),
        config.idle_exit(),
    ) {
        Ok(Daemon::Joined) => {
            super::write_stdout(&format!("compactd is running on {}\n", socket.display()))
        }
        Ok(Daemon::Started(pid)) => super::write_stdout(&format!(
            "compactd started (pid {pid}) on {}; log: {}\n",
            socket.display(),
            daemon_log(config).display()
        )),
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

/// How long the client may wait with no byte from the daemon before `connect` asks, on a
/// connection of its own, whether the daemon still answers.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The bridge's watch: a daemon that stops answering (stopped, wedged) ends the bridge with a
/// message naming the socket and its pid, instead of leaving the editor waiting forever. The
/// probe is `initialize` as `compactd status` asks it, under the same deadline.
fn watch_over(socket: &Path) -> Option<crate::transport::bridge::Watch> {
    let socket = socket.to_owned();
    Some(crate::transport::bridge::Watch {
        every: WATCH_EVERY,
        probe: Box::new(move || {
            let socket = socket.clone();
            Box::pin(async move {
                let asked = tokio::task::spawn_blocking(move || {
                    super::lifecycle::ask(&socket, "compactd connect").and_then(|init| {
                        init.map(|_| ()).ok_or_else(|| {
                            format!("no daemon answers on {} any more", socket.display())
                        })
                    })
                });
                asked
                    .await
                    .map_err(|e| format!("cannot ask the daemon: {e}"))?
            })
        }),
    })
}

/// `compactd connect`: start or join, then bridge stdin/stdout to the socket until the daemon
/// closes the connection. Exit 0 only for a normal end (the client closed its input, the daemon
/// answered and closed, and still runs); a daemon that went away is exit 1 with a message.
pub fn connect(
    socket: Option<PathBuf>,
    config_path: Option<&Path>,
    config: &crate::config::Config,
) -> i32 {
    let socket = launch::socket_path(socket, config);
    if let Err(e) = launch::ensure_daemon(
        &socket,
        config_path,
        &daemon_log(config),
        config.idle_exit(),
    ) {
        crate::print_err!("{e}");
        return EXIT_FAILED;
    }
    // The blocking thread reading stdin never returns on its own: `block_on` does not wait for it.
    let outcome = super::runtime::block_on(super::runtime::Shape::Client, async {
        let stream = crate::transport::unix::connect_own_async(&socket).await?;
        tracing::info!(socket = %socket.display(), "bridging stdio to the daemon");
        let watch = watch_over(&socket);
        crate::transport::bridge::pump(stream, tokio::io::stdin(), tokio::io::stdout(), watch)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut => e.to_string(),
                _ => format!("connection to {} failed: {e}", socket.display()),
            })
    })
    .and_then(|o| o);
    match outcome {
        Ok(pumped) if pumped.input_ended && launch::answers(&socket) == Ok(true) => {
            tracing::info!(
                sent = pumped.sent,
                received = pumped.received,
                "the daemon closed the connection"
            );
            EXIT_OK
        }
        // The daemon's side ended while the client's input was open, or after the input ended
        // the daemon no longer answers on its socket: it went away (died, was stopped, or
        // dropped this client), maybe with requests unanswered. An editor takes exit 0 for a
        // normal shutdown of its server, and would neither restart it nor tell its user.
        Ok(pumped) => {
            let why = if launch::answers(&socket) == Ok(true) {
                "the daemon closed the connection before the client ended its input"
            } else if pumped.input_ended {
                "the daemon exited before it closed the connection"
            } else {
                "the daemon exited while the client was connected"
            };
            tracing::warn!(
                sent = pumped.sent,
                received = pumped.received,
                input_ended = pumped.input_ended,
                "{why}"
            );
            crate::print_err!("{why} ({})", socket.display());
            EXIT_FAILED
        }
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}
