//! `compactd service install|uninstall|status`: the daemon as a user service, so nobody starts
//! it by hand.
//!
//! - Linux (systemd): a socket unit and a service unit in `$XDG_CONFIG_HOME/systemd/user`. The
//!   socket unit listens on the daemon's socket; the first connection starts the service, which
//!   takes the listening socket from systemd (`LISTEN_FDS`, see `transport::unix`). When
//!   `systemctl --user` works, `install` reloads and enables `compactd.socket` (`--files-only`
//!   only writes the files); otherwise it says what to run.
//! - macOS (launchd): a LaunchAgent plist in `~/Library/LaunchAgents` that runs `compactd serve`
//!   at login and keeps it alive, loaded with `launchctl bootstrap` when present.
//!
//! The unit and plist texts are pure functions of the binary, socket and log paths, tested as
//! text (and with `systemd-analyze verify` where it exists).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{EXIT_FAILED, EXIT_OK};

/// The units' and the LaunchAgent's names.
pub const SOCKET_UNIT: &str = "compactd.socket";
pub const SERVICE_UNIT: &str = "compactd.service";
pub const LAUNCHD_LABEL: &str = "dev.compactd";

/// Which service manager to write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    /// This system's: launchd on macOS, systemd elsewhere.
    pub fn native() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }
}

/// A path as systemd reads it in `ExecStart=` / `ListenStream=`: `%` doubled, and the
/// argument quoted when it has spaces.
fn systemd_path(p: &Path) -> String {
    let s = p.display().to_string().replace('%', "%%");
    if s.contains(char::is_whitespace) {
        format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        s
    }
}

/// The socket unit. `socket` is where the daemon listens; under the directory a user unit's
/// `%t` names (`/run/user/<uid>`, else `$XDG_RUNTIME_DIR`) it is written with `%t` so the unit
/// stays right if that directory moves.
pub fn socket_unit(socket: &Path) -> String {
    let runtime = crate::transport::unix::standard_runtime_dir()
        .or_else(|| std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from));
    let listen = match runtime.as_deref().and_then(|r| socket.strip_prefix(r).ok()) {
        Some(rest) => format!("%t/{}", rest.display().to_string().replace('%', "%%")),
        None => systemd_path(socket),
    };
    format!(
        "# Written by `compactd service install`; `compactd service uninstall` removes it.\n\
         [Unit]\n\
         Description=compactd socket: the first connection starts the compaction daemon\n\
         \n\
         [Socket]\n\
         ListenStream={listen}\n\
         SocketMode=0600\n\
         DirectoryMode=0700\n\
         \n\
         [Install]\n\
         WantedBy=sockets.target\n"
    )
}

/// The service unit, started by the socket unit with the listening socket passed as fd 3.
pub fn service_unit(binary: &Path, config: Option<&Path>) -> String {
    let config = config
        .map(|c| format!(" --config {}", systemd_path(c)))
        .unwrap_or_default();
    format!(
        "# Written by `compactd service install`; `compactd service uninstall` removes it.\n\
         [Unit]\n\
         Description=compactd: LLM context compaction for Pi-format sessions\n\
         Requires={SOCKET_UNIT}\n\
         After={SOCKET_UNIT}\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={}{config} serve\n\
         Restart=on-failure\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        systemd_path(binary)
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The LaunchAgent plist: `compactd serve --socket SOCKET` at login, restarted when it exits,
/// its stderr in the log file.
pub fn launchd_plist(binary: &Path, socket: &Path, log: &Path, config: Option<&Path>) -> String {
    let mut args = vec![binary.display().to_string()];
    if let Some(c) = config {
        args.push("--config".into());
        args.push(c.display().to_string());
    }
    args.extend([
        "serve".into(),
        "--socket".into(),
        socket.display().to_string(),
    ]);
    let args: String = args
        .iter()
        .map(|a| format!("    <string>{}</string>\n", xml_escape(a)))
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `compactd service install`; `compactd service uninstall` removes it. -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \x20 <key>Label</key>\n\
         \x20 <string>{LAUNCHD_LABEL}</string>\n\
         \x20 <key>ProgramArguments</key>\n\
         \x20 <array>\n\
         {args}\
         \x20 </array>\n\
         \x20 <key>RunAtLoad</key>\n\
         \x20 <true/>\n\
         \x20 <key>KeepAlive</key>\n\
         \x20 <dict>\n\
         \x20   <key>SuccessfulExit</key>\n\
         \x20   <false/>\n\
         \x20 </dict>\n\
         \x20 <key>StandardErrorPath</key>\n\
         \x20 <string>{}</string>\n\
         \x20 <key>ProcessType</key>\n\
         \x20 <string>Background</string>\n\
         </dict>\n\
         </plist>\n",
        xml_escape(&log.display().to_string())
    )
}

/// `$XDG_CONFIG_HOME/systemd/user` (default `~/.config/systemd/user`).
pub fn systemd_dir() -> Result<PathBuf, String> {
    crate::config::xdg_dir("XDG_CONFIG_HOME", ".config")
        .map(|c| c.join("systemd").join("user"))
        .ok_or_else(|| "neither XDG_CONFIG_HOME nor HOME is set".to_owned())
}

/// `~/Library/LaunchAgents/dev.compactd.plist`.
pub fn launchd_file() -> Result<PathBuf, String> {
    std::env::var_os("HOME")
        .map(|h| {
            PathBuf::from(h)
                .join("Library/LaunchAgents")
                .join(format!("{LAUNCHD_LABEL}.plist"))
        })
        .ok_or_else(|| "HOME is not set".to_owned())
}

/// Runs a service-manager command; `None` when the tool is missing or not usable here (no user
/// manager running), with its complaint.
fn run_tool(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{program} {}: {}", args.join(" "), text.trim()))
    }
}

/// Whether a systemd user manager answers (`systemctl --user` works here).
fn systemctl_usable() -> bool {
    run_tool("systemctl", &["--user", "show-environment"]).is_ok()
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// What `install` and friends need to know.
pub struct Setup<'a> {
    pub manager: Manager,
    pub socket: PathBuf,
    pub config: Option<&'a Path>,
    pub log: PathBuf,
}

fn binary() -> Result<PathBuf, String> {
    std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot find this compactd binary: {e}"))
}

/// `compactd service install`; `enable`: also reload and enable (or load) through the service
/// manager.
pub fn install(setup: &Setup<'_>, enable: bool) -> i32 {
    match try_install(setup, enable) {
        Ok(text) => super::write_stdout(&text),
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

fn try_install(setup: &Setup<'_>, enable: bool) -> Result<String, String> {
    let bin = binary()?;
    let config = setup
        .config
        .map(std::path::absolute)
        .transpose()
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    match setup.manager {
        Manager::Systemd => {
            let dir = systemd_dir()?;
            let socket_file = dir.join(SOCKET_UNIT);
            let service_file = dir.join(SERVICE_UNIT);
            write_file(&socket_file, &socket_unit(&setup.socket))?;
            write_file(&service_file, &service_unit(&bin, config.as_deref()))?;
            out.push_str(&format!(
                "wrote {}\nwrote {}\n",
                socket_file.display(),
                service_file.display()
            ));
            if !enable {
                out.push_str(&format!(
                    "files only; enable with: systemctl --user daemon-reload && systemctl --user enable --now {SOCKET_UNIT}\n"
                ));
            } else if systemctl_usable() {
                run_tool("systemctl", &["--user", "daemon-reload"])?;
                run_tool("systemctl", &["--user", "enable", "--now", SOCKET_UNIT])?;
                out.push_str(&format!(
                    "enabled {SOCKET_UNIT}: the first connection to {} starts the daemon\n",
                    setup.socket.display()
                ));
            } else {
                out.push_str(&format!(
                    "systemctl --user is not available here (no user manager); once it is: systemctl --user daemon-reload && systemctl --user enable --now {SOCKET_UNIT}\n"
                ));
            }
        }
        Manager::Launchd => {
            let file = launchd_file()?;
            write_file(
                &file,
                &launchd_plist(&bin, &setup.socket, &setup.log, config.as_deref()),
            )?;
            out.push_str(&format!("wrote {}\n", file.display()));
            let domain = format!("gui/{}", uid());
            let path = file.display().to_string();
            if enable && run_tool("launchctl", &["bootstrap", &domain, &path]).is_ok() {
                out.push_str(&format!("loaded {LAUNCHD_LABEL} into {domain}\n"));
            } else {
                out.push_str(&format!(
                    "load it with: launchctl bootstrap {domain} {path}\n"
                ));
            }
        }
    }
    Ok(out)
}

/// This user's uid (for launchd's `gui/<uid>` domain).
fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// `compactd service uninstall`: stops and disables what `install` enabled (unless `!manage`),
/// removes the files.
pub fn uninstall(setup: &Setup<'_>, manage: bool) -> i32 {
    let mut out = String::new();
    let result: Result<(), String> = (|| {
        match setup.manager {
            Manager::Systemd => {
                let dir = systemd_dir()?;
                if manage && systemctl_usable() {
                    let _ = run_tool(
                        "systemctl",
                        &["--user", "disable", "--now", SOCKET_UNIT, SERVICE_UNIT],
                    );
                }
                for unit in [SOCKET_UNIT, SERVICE_UNIT] {
                    let f = dir.join(unit);
                    match std::fs::remove_file(&f) {
                        Ok(()) => out.push_str(&format!("removed {}\n", f.display())),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(format!("cannot remove {}: {e}", f.display())),
                    }
                }
                if manage && systemctl_usable() {
                    let _ = run_tool("systemctl", &["--user", "daemon-reload"]);
                }
            }
            Manager::Launchd => {
                let file = launchd_file()?;
                if manage {
                    let _ = run_tool(
                        "launchctl",
                        &["bootout", &format!("gui/{}/{LAUNCHD_LABEL}", uid())],
                    );
                }
                match std::fs::remove_file(&file) {
                    Ok(()) => out.push_str(&format!("removed {}\n", file.display())),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("cannot remove {}: {e}", file.display())),
                }
            }
        }
        if out.is_empty() {
            out.push_str("nothing installed\n");
        }
        Ok(())
    })();
    match result {
        Ok(()) => super::write_stdout(&out),
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

/// `compactd service status`: which files exist, what the service manager says, and whether a
/// daemon answers on the socket. Exit 0 when the daemon answers, 1 otherwise.
pub fn status(setup: &Setup<'_>) -> i32 {
    let mut out = String::new();
    let files: Vec<PathBuf> = match setup.manager {
        Manager::Systemd => match systemd_dir() {
            Ok(d) => vec![d.join(SOCKET_UNIT), d.join(SERVICE_UNIT)],
            Err(_) => Vec::new(),
        },
        Manager::Launchd => launchd_file().into_iter().collect(),
    };
    for f in &files {
        let state = if f.exists() {
            "installed"
        } else {
            "not installed"
        };
        out.push_str(&format!("{state}: {}\n", f.display()));
    }
    // The manager's own state when its tool answers here; otherwise a line that says so (a
    // status that promised the state and printed nothing left the reader guessing).
    match setup.manager {
        Manager::Systemd if systemctl_usable() => {
            for unit in [SOCKET_UNIT, SERVICE_UNIT] {
                let state = run_tool("systemctl", &["--user", "is-active", unit])
                    .unwrap_or_else(|e| e.rsplit(": ").next().unwrap_or("unknown").to_owned());
                out.push_str(&format!("{unit}: {}\n", state.trim()));
            }
        }
        Manager::Systemd => out.push_str(
            "systemd: state unknown (`systemctl --user` does not work here: no user manager or D-Bus session)\n",
        ),
        Manager::Launchd => {
            let label = format!("gui/{}/{LAUNCHD_LABEL}", uid());
            let state = match run_tool("launchctl", &["print", &label]) {
                Ok(_) => "loaded".to_owned(),
                Err(e) => format!("not loaded or unknown ({})", e.trim()),
            };
            out.push_str(&format!("launchd {label}: {state}\n"));
        }
    }
    let probe = super::launch::answers(&setup.socket);
    let answers = probe == Ok(true);
    out.push_str(&format!(
        "daemon on {}: {}\n",
        setup.socket.display(),
        match &probe {
            Ok(true) => "answers".to_owned(),
            Ok(false) => "not answering".to_owned(),
            Err(e) => format!("refused ({e})"),
        }
    ));
    let code = super::write_stdout(&out);
    if code != EXIT_OK {
        return code;
    }
    if answers {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_unit_listens_where_the_daemon_would() {
        let unit = socket_unit(Path::new("/srv/my sockets/compactd.sock"));
        assert!(
            unit.contains("\nListenStream=\"/srv/my sockets/compactd.sock\"\n"),
            "{unit}"
        );
        assert!(unit.contains("\nSocketMode=0600\n") && unit.contains("\nDirectoryMode=0700\n"));
        assert!(unit.contains("\n[Install]\nWantedBy=sockets.target\n"));
    }

    #[test]
    fn the_service_unit_runs_serve_and_needs_its_socket() {
        let unit = service_unit(
            Path::new("/opt/100%/compactd"),
            Some(Path::new("/etc/c.toml")),
        );
        assert!(
            unit.contains("\nExecStart=/opt/100%%/compactd --config /etc/c.toml serve\n"),
            "{unit}"
        );
        assert!(unit.contains("\nRequires=compactd.socket\nAfter=compactd.socket\n"));
        assert!(unit.contains("\nType=exec\n"));
        let plain = service_unit(Path::new("/usr/bin/compactd"), None);
        assert!(
            plain.contains("\nExecStart=/usr/bin/compactd serve\n"),
            "{plain}"
        );
    }

    #[test]
    fn the_launchd_plist_runs_serve_on_the_socket_with_escaped_paths() {
        let p = launchd_plist(
            Path::new("/Users/me/.cargo/bin/compactd"),
            Path::new("/tmp/compactd-501/compactd.sock"),
            Path::new("/Users/me/Library/Logs/a&b.log"),
            None,
        );
        assert!(p.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE plist"));
        assert!(
            p.contains("<key>Label</key>\n  <string>dev.compactd</string>"),
            "{p}"
        );
        assert!(p.contains(
            "<array>\n    <string>/Users/me/.cargo/bin/compactd</string>\n    <string>serve</string>\n    <string>--socket</string>\n    <string>/tmp/compactd-501/compactd.sock</string>\n  </array>"
        ), "{p}");
        assert!(p.contains("<key>RunAtLoad</key>\n  <true/>"));
        assert!(p.contains("<string>/Users/me/Library/Logs/a&amp;b.log</string>"));
        assert!(p.trim_end().ends_with("</dict>\n</plist>"));
        // Balanced: every opened element is closed.
        for tag in ["dict", "array", "plist"] {
            assert_eq!(
                p.matches(&format!("<{tag}")).count(),
                p.matches(&format!("</{tag}>")).count(),
                "{tag}"
            );
        }
    }
}
