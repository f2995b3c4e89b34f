//! `compactd status` and `compactd stop`: the running daemon of a socket, as gopls users know
//! it. Both ask the daemon itself (`initialize`'s `daemon` member: pid, uptime, load, the files
//! it uses) over a connection checked as every client's is (`transport::unix::connect_own`), so
//! they never report on, or signal, another user's daemon.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::EXIT_FAILED;

/// How long `stop` waits for the daemon to finish its connections and go.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// How long `status`, `stop`, `doctor` and the starters wait for the daemon's `initialize`
/// answer: it takes milliseconds; a daemon that accepted the connection and is silent this long
/// is stopped or wedged, and the command says so instead of waiting forever.
pub const ASK_DEADLINE: Duration = Duration::from_secs(5);

/// `initialize`'s answer from the daemon on `socket`, or why there is none (`Ok(None)`: nothing
/// listens there; an error naming the socket and the pid when it does not answer within
/// [`ASK_DEADLINE`]). `doctor` and the starters (`launch`) ask the same way.
pub fn ask(socket: &Path, client: &str) -> Result<Option<Value>, String> {
    use crate::transport::{client::DaemonClient, unix};
    let Some(stream) = unix::connect_own(socket)? else {
        return Ok(None);
    };
    super::runtime::block_on(super::runtime::Shape::Client, async {
        let c = DaemonClient::over(unix::into_async(stream)?)
            .on_socket(socket)
            .with_deadline(ASK_DEADLINE);
        let answer = c
            .call("initialize", json!({ "clientName": client }))
            .await
            .map_err(|r| match r.kind() {
                Some(crate::transport::client::TIMEOUT_KIND) => r.message,
                _ => format!("the daemon refused: {r}"),
            })?;
        Ok(Some(answer))
    })?
}

fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// What `status` prints of an `initialize` answer.
fn describe(socket: &Path, init: &Value) -> String {
    let d = &init["daemon"];
    let text = |v: &Value| {
        v.as_str()
            .map(|s| crate::cli::printable::line(s).into_owned())
    };
    let connections = d["connections"].as_u64().unwrap_or(1);
    let mut out = format!(
        "compactd {} on {}\n",
        text(&init["version"]).unwrap_or_default(),
        socket.display()
    );
    out += &format!("pid: {}\n", d["pid"]);
    out += &format!(
        "uptime: {}\n",
        duration(d["uptimeMs"].as_u64().unwrap_or(0))
    );
    out += &format!("sessions open: {}\n", d["sessions"].as_u64().unwrap_or(0));
    out += &format!("clients: {}\n", connections.saturating_sub(1));
    out += &format!(
        "config: {}\n",
        text(&d["configFile"]).unwrap_or_else(|| "none (the defaults)".into())
    );
    out += &format!(
        "log: {}\n",
        text(&d["logFile"]).unwrap_or_else(|| {
            "its stderr, which is no file (a terminal, a pipe or the service manager's journal)"
                .into()
        })
    );
    out += &match d["idleExitSeconds"].as_u64() {
        Some(s) => format!("started on demand: exits after {s}s with no client and no session\n"),
        None => "stays until stopped\n".into(),
    };
    out
}

/// `compactd status`: the daemon on the socket, or exit 1 when none answers.
pub fn status(socket: &Path) -> i32 {
    match ask(socket, "compactd status") {
        Ok(Some(init)) => super::write_stdout(&describe(socket, &init)),
        Ok(None) => {
            crate::print_err!("no daemon answers on {}", socket.display());
            EXIT_FAILED
        }
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

/// `compactd stop`: SIGTERM to the daemon on the socket (running compactions are aborted and
/// answer, connections finish), then waits until it no longer answers. Nothing running is no
/// error.
pub fn stop(socket: &Path) -> i32 {
    let init = match ask(socket, "compactd stop") {
        Ok(Some(init)) => init,
        Ok(None) => {
            return super::write_stdout(&format!("no daemon is running on {}\n", socket.display()))
        }
        Err(e) => {
            crate::print_err!("{e}");
            return EXIT_FAILED;
        }
    };
    let Some(pid) = init["daemon"]["pid"]
        .as_u64()
        .and_then(|p| i32::try_from(p).ok())
    else {
        crate::print_err!("the daemon on {} did not say its pid", socket.display());
        return EXIT_FAILED;
    };
    // SAFETY: kill(2) with a pid the daemon reported over a connection checked to be this
    // user's; a daemon gone meanwhile makes it fail with ESRCH, which is handled.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            crate::print_err!("cannot stop pid {pid}: {e}");
            return EXIT_FAILED;
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    // Gone: nothing answers on the socket and the process has exited (a zombie its parent has
    // not reaped yet has exited too).
    let gone = || {
        // SAFETY: signal 0 only checks that the process exists.
        let exists = unsafe { libc::kill(pid, 0) } == 0;
        let exited = !exists || zombie(pid);
        exited && matches!(crate::transport::unix::connect_own(socket), Ok(None))
    };
    while !gone() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !gone() {
        crate::print_err!(
            "the daemon (pid {pid}) is still running after {}s",
            STOP_TIMEOUT.as_secs()
        );
        return EXIT_FAILED;
    }
    super::write_stdout(&format!(
        "stopped the daemon (pid {pid}) on {}\n",
        socket.display()
    ))
}

/// Whether `pid` has exited and waits to be reaped (its state in `/proc` is `Z`); false where
/// there is no `/proc`.
fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat.get(stat.rfind(')')? + 2..)?;
            after.chars().next()
        })
        == Some('Z')
}

/// The socket `status` and `stop` talk to.
pub fn socket_of(flag: Option<PathBuf>, config: &crate::config::Config) -> PathBuf {
    super::launch::socket_path(flag, config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_names_what_the_daemon_reports() {
        let init = json!({"version": "0.1.0", "daemon": {"pid": 42, "uptimeMs": 125_000,
            "connections": 3, "sessions": 2, "logFile": "/l/compactd.log", "idleExitSeconds": 300}});
        let text = describe(Path::new("/run/c.sock"), &init);
        for want in [
            "compactd 0.1.0 on /run/c.sock",
            "pid: 42",
            "uptime: 2m 5s",
            "sessions open: 2",
            "clients: 2",
            "config: none (the defaults)",
            "log: /l/compactd.log",
            "exits after 300s",
        ] {
            assert!(text.contains(want), "{want:?} in {text}");
        }
        assert_eq!(duration(3_725_000), "1h 2m");
    }
}
