//! File descriptors of a daemon holding many sessions, through the real binary: each open
//! session holds one descriptor (its lock and its lines share it; two before, so the 507th
//! `openSession` failed under the common soft limit of 1024), the daemon raises its soft limit to
//! the hard one when it starts, and when descriptors do run out the error says so and names the
//! limit (before: a bare `Too many open files`).

mod support;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use serde_json::json;
use support::daemon_env::{model, wait_for_socket, Env, KillOnDrop};
use support::rpc_client::{Client, Framing};

/// `compactd serve` on `socket`, started with open-file limits `soft` and `hard`.
fn serve_limited(env: &Env, socket: &Path, soft: u64, hard: u64) -> Child {
    let mut cmd = env.command("serve");
    cmd.arg("--socket")
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setrlimit(2) is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn compactd serve");
    wait_for_socket(socket);
    child
}

/// `n` small sessions (a header and two turns each) in `dir`.
fn small_sessions(dir: &Path, n: usize) -> Vec<PathBuf> {
    support::small_sessions::write_small_sessions(dir, n).expect("write the sessions")
}

fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/<pid>/fd")
        .count()
}

/// The soft limit on open files of `pid`, from `/proc/<pid>/limits`.
fn soft_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    line.split_whitespace()
        .nth(3)
        .and_then(|v| v.parse().ok())
        .expect("a number")
}

/// The hard limit this test process may give its child: what it has, at most 4096.
fn hard_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is valid for getrlimit(2) to write.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_max.min(4096)
}

/// Started with a soft limit of 64 (and a higher hard one), the daemon raises it to the hard
/// limit and holds 150 sessions open, one descriptor each.
#[test]
fn the_soft_limit_is_raised_and_each_session_holds_one_descriptor() {
    let hard = hard_limit();
    if hard < 512 {
        eprintln!("SKIPPED: this process's hard limit on open files is {hard}");
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI needs a hard limit of 512"
        );
        return;
    }
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = KillOnDrop(serve_limited(&env, &socket, 64, hard));
    let pid = daemon.0.id();
    assert_eq!(soft_limit(pid), hard, "raised to the hard limit");
    let files = small_sessions(&env.path("sessions"), 150);
    let mut c = Client::socket(&socket, Framing::Ndjson);
    c.ok("initialize", json!({}));
    let before = descriptors(pid);
    let mut ids = Vec::new();
    for f in &files {
        let info = c.ok("openSession", json!({"path": f, "model": model()}));
        ids.push(info["sessionId"].as_str().unwrap().to_owned());
    }
    let held = descriptors(pid) - before;
    assert!(
        held <= files.len() + 4,
        "{held} descriptors for {} open sessions",
        files.len()
    );
    // Each still reads and writes its file.
    let sid = &ids[149];
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": {"role": "user", "content": "one more"}}),
    );
    let ctx = c.ok("getContext", json!({"sessionId": sid}));
    assert_eq!(ctx["messages"].as_array().map(Vec::len), Some(5));
    // Closed sessions give their descriptors back.
    for sid in &ids {
        c.ok("closeSession", json!({"sessionId": sid}));
    }
    assert!(descriptors(pid) <= before + 2, "{}", descriptors(pid));
}

/// With no higher hard limit to raise to, the daemon runs out of descriptors: the refused
/// `openSession` says so (`overloaded`) and names the limit, and once sessions are closed,
/// opening works again.
#[test]
fn running_out_of_descriptors_is_an_error_naming_the_limit() {
    let env = Env::new();
    let socket = env.path("run/d.sock");
    let daemon = KillOnDrop(serve_limited(&env, &socket, 64, 64));
    let pid = daemon.0.id();
    assert_eq!(soft_limit(pid), 64);
    let files = small_sessions(&env.path("sessions"), 80);
    let mut c = Client::socket(&socket, Framing::Ndjson);
    let mut ids = Vec::new();
    let mut refused = None;
    for f in &files {
        match c.request("openSession", json!({"path": f, "model": model()})) {
            Ok(info) => ids.push(info["sessionId"].as_str().unwrap().to_owned()),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let err = refused.expect("64 descriptors run out before 80 sessions");
    assert!(ids.len() > 20, "only {} sessions opened", ids.len());
    assert_eq!(err["data"]["kind"], "overloaded", "{err}");
    let message = err["message"].as_str().unwrap_or("");
    assert!(
        message.contains("limit of 64 open files") && message.contains("ulimit -n"),
        "{message}"
    );
    // Closing sessions frees descriptors: the next open works.
    for sid in ids.drain(..10) {
        c.ok("closeSession", json!({"sessionId": sid}));
    }
    let info = c.ok(
        "openSession",
        json!({"path": files[files.len() - 1], "model": model()}),
    );
    assert!(info["sessionId"].is_string());
}
