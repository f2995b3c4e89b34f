//! A compactd daemon another user runs (`nobody`, through `runuser`), listening on a socket in a
//! directory both users may use (root-owned, sticky, world-writable, as /tmp): what no client
//! may join. Only root can run it; elsewhere [`start`] says why not.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::daemon_env::KillOnDrop;

/// The other user's running daemon; stopped and its files removed on drop.
pub struct OtherUsersDaemon {
    /// Its socket, `<dir>/shared/compactd.sock`.
    pub socket: PathBuf,
    /// The copy of the binary it runs (no other process runs this path).
    bin: PathBuf,
    _daemon: KillOnDrop,
    _dir: tempfile::TempDir,
}

impl Drop for OtherUsersDaemon {
    /// `runuser` runs the daemon as its child: killing `runuser` (the guard) leaves the daemon
    /// running, so every process started from this test's copy of the binary is killed too.
    fn drop(&mut self) {
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        for p in procs.flatten() {
            let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else {
                continue;
            };
            let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
            if argv0 == self.bin.as_os_str().as_encoded_bytes() {
                // SAFETY: kill(2) of a process this test started (through runuser).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Starts `nobody`'s daemon, or says why it cannot (not root, no `runuser`).
pub fn start() -> Result<OtherUsersDaemon, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 || Command::new("runuser").arg("--help").output().is_err() {
        return Err("needs root and runuser to run a daemon as another user".into());
    }
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("shared dir");
    mode(&shared, 0o1777);
    let home = dir.path().join("other-home");
    std::fs::create_dir(&home).expect("home");
    mode(&home, 0o777);
    mode(dir.path(), 0o755);
    let socket = shared.join("compactd.sock");
    // The other user runs a copy of the binary from here: the checkout may sit in a directory
    // only this user can enter.
    let bin = dir.path().join("compactd");
    std::fs::copy(env!("CARGO_BIN_EXE_compactd"), &bin).expect("copy the binary");
    mode(&bin, 0o755);
    let h = home.display();
    let daemon = Command::new("runuser")
        .args(["-u", "nobody", "--", "env"])
        .arg(format!("HOME={h}"))
        .arg(format!("XDG_STATE_HOME={h}/state"))
        .arg(format!("XDG_CONFIG_HOME={h}/config"))
        .arg(format!("PI_CODING_AGENT_DIR={h}/agent"))
        .arg(&bin)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("runuser");
    let daemon = KillOnDrop(daemon);
    super::wait_until(
        Duration::from_secs(20),
        "the other user's daemon listens",
        || std::os::unix::net::UnixStream::connect(&socket).is_ok(),
    );
    Ok(OtherUsersDaemon {
        socket,
        bin,
        _daemon: daemon,
        _dir: dir,
    })
}
