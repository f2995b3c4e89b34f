//! The daemon as a user service, through the real binary: `compactd service install` writes a
//! systemd socket unit and service unit that `systemd-analyze verify` accepts, `uninstall`
//! removes them, `status` reports files and the daemon; and the activation path itself — `serve`
//! handed a listening socket as fd 3 with `LISTEN_FDS=1` and `LISTEN_PID` set to its own pid,
//! exactly as systemd starts it — serves on that socket and leaves the socket file (systemd's)
//! in place when it stops.
//!
//! `install` and `uninstall` run with `--files-only` here, so a developer's real user manager
//! is never touched. `systemd-analyze` is part of systemd, not of this project's toolchain: the
//! verification runs where it is installed and is skipped (with a message, in CI too) where it
//! is not, because CI machines need not have systemd at all.

mod support;

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::daemon_env::{Env, KillOnDrop};
use support::rpc_client::{Client, Framing};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");

#[test]
fn install_writes_units_that_systemd_accepts_and_uninstall_removes_them() {
    let env = Env::new();
    let sock = env.path("run").join("compactd").join("compactd.sock");
    let units = env.path("config").join("systemd").join("user");
    let service = |args: &[&str]| {
        env.command("service")
            .args(args)
            .args(["--manager", "systemd"])
            .output()
            .expect("run compactd service")
    };
    let out = service(&["install", "--files-only"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("wrote ") && said.contains("files only; enable with"),
        "{said}"
    );
    let socket_unit = std::fs::read_to_string(units.join("compactd.socket")).unwrap();
    let service_unit = std::fs::read_to_string(units.join("compactd.service")).unwrap();
    // The default socket is under the runtime directory: written with systemd's %t.
    assert!(
        socket_unit.contains("\nListenStream=%t/compactd/compactd.sock\n"),
        "{socket_unit}"
    );
    let bin = std::fs::canonicalize(BIN).unwrap();
    assert!(
        service_unit.contains(&format!("\nExecStart={} serve\n", bin.display())),
        "{service_unit}"
    );

    let status = service(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("installed: ") && !text.contains("not installed"),
        "{text}"
    );
    assert!(
        text.contains(&format!("daemon on {}: not answering", sock.display())),
        "{text}"
    );
    assert_eq!(status.status.code(), Some(1), "no daemon answers");

    verify_with_systemd(&env, &units);

    let out = service(&["uninstall", "--files-only"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!units.join("compactd.socket").exists() && !units.join("compactd.service").exists());
    let out = service(&["uninstall", "--files-only"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "nothing installed\n");
}

/// `systemd-analyze --user verify` on the written units: no complaint at all.
fn verify_with_systemd(env: &Env, units: &std::path::Path) {
    let probe = Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        // Deliberately not a CI failure: systemd is not part of the machines this runs on.
        println!("SKIPPED systemd-analyze verify: systemd-analyze is not installed here");
        return;
    }
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(units.join("compactd.socket"))
        .arg(units.join("compactd.service"))
        .env("XDG_RUNTIME_DIR", env.path("run"))
        .env("XDG_CONFIG_HOME", env.path("config"))
        .output()
        .expect("systemd-analyze");
    let complaints = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify: {complaints}"
    );
}

/// `compactd serve` started the way systemd starts a socket-activated service: the listening
/// socket on fd 3, `LISTEN_FDS=1`, and `LISTEN_PID` = the service's own pid (a shell sets it
/// from `$$` and execs the daemon, keeping the pid).
fn activated(
    env: &Env,
    listener: &std::os::unix::net::UnixListener,
    listen_pid: &str,
) -> KillOnDrop {
    let fd = listener.as_raw_fd();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "LISTEN_FDS=1 LISTEN_PID={listen_pid} exec \"$0\" serve --socket \"$1\""
        ))
        .arg(BIN)
        .arg(env.path("unused.sock"))
        .envs(env.vars())
        .env_remove("COMPACTD_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("serve.log")).unwrap());
    // SAFETY: dup2 and fcntl are async-signal-safe; they put the listener on fd 3 without
    // close-on-exec (when it already is fd 3, dup2 would keep the flag: clear it instead).
    unsafe {
        cmd.pre_exec(move || {
            let ok = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if ok < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    KillOnDrop(cmd.spawn().expect("spawn the activated daemon"))
}

fn stop(mut child: KillOnDrop) -> std::process::ExitStatus {
    // SAFETY: plain kill(2) of the daemon this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let mut status = None;
    support::wait_until(Duration::from_secs(10), "the daemon stopped", || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    status.expect("stopped")
}

#[test]
fn serve_takes_the_socket_systemd_passes_and_leaves_it_in_place() {
    let env = Env::new();
    let path = env.path("run").join("activated.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let daemon = activated(&env, &listener, "$$");
    // The first connection is served by the daemon on the passed socket (nothing was bound by
    // the daemon itself: `--socket` named another path).
    let mut c = Client::socket(&path, Framing::Ndjson);
    let file = env.session("005-medium-basic");
    let info = c.ok("openSession", json!({"path": file}));
    assert_eq!(info["sessionId"], "s1");
    drop(c);
    assert!(
        !env.path("unused.sock").exists(),
        "the daemon bound nothing itself"
    );
    assert_eq!(stop(daemon).code(), Some(0));
    let log = std::fs::read_to_string(env.path("serve.log")).unwrap();
    assert!(
        log.contains("listening on the socket the service manager passed"),
        "{log}"
    );
    assert!(
        path.exists(),
        "the socket file is systemd's: it stays for the next start"
    );
}

#[test]
fn a_listen_pid_of_another_process_is_ignored() {
    let env = Env::new();
    let path = env.path("run").join("not-for-us.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // LISTEN_PID=1: the variables were meant for another process; the daemon binds its own.
    let daemon = activated(&env, &listener, "1");
    let own = env.path("unused.sock");
    support::wait_until(
        Duration::from_secs(20),
        "the daemon bound its own socket",
        || own.exists(),
    );
    let mut c = Client::socket(&own, Framing::Ndjson);
    assert_eq!(c.ok("listSessions", json!({})), json!([]));
    drop(c);
    assert_eq!(stop(daemon).code(), Some(0));
    assert!(!own.exists(), "its own socket is removed on shutdown");
}
