//! `compactd doctor`: what a newcomer (or a bug report) needs to know about this installation,
//! checked the way the daemon itself would check it, with what to do about each failure.
//!
//! Each check calls the code path the daemon runs, never a copy of it: the configuration is
//! loaded by `Config::load`, the socket directory checked by
//! `transport::unix::check_socket_dir` (the rules `serve` applies before binding), the daemon
//! asked as `status` asks it (a connection checked to be this user's), keys looked up as the
//! engine looks them up, and PostgreSQL reached through the configured backend's own start-up
//! check (connect and apply the schema). No provider is called: a key's presence is what can be
//! checked without spending anything.
//!
//! The rendering ([`render`]) is pure; [`run`] gathers the findings.

use std::path::{Path, PathBuf};

use crate::config::{Config, SummarizerProvider};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Works.
    Ok,
    /// Works, but worth knowing (a fallback will be taken, nothing runs yet).
    Note,
    /// Broken: the command exits 1.
    Fail,
}

/// One line of the report: what was checked, what was found, and for a failure what to do.
#[derive(Debug, Clone)]
pub struct Finding {
    pub verdict: Verdict,
    pub subject: &'static str,
    pub text: String,
    pub fix: Option<String>,
}

impl Finding {
    fn ok(subject: &'static str, text: impl Into<String>) -> Finding {
        Finding {
            verdict: Verdict::Ok,
            subject,
            text: text.into(),
            fix: None,
        }
    }

    fn note(subject: &'static str, text: impl Into<String>) -> Finding {
        Finding {
            verdict: Verdict::Note,
            ..Finding::ok(subject, text)
        }
    }

    fn fail(subject: &'static str, text: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding {
            verdict: Verdict::Fail,
            fix: Some(fix.into()),
            ..Finding::ok(subject, text)
        }
    }
}

/// The report: the paths in use, then one line per finding (a failure's fix on the next line),
/// then a count of failures.
pub fn render(paths: &[(&str, String)], findings: &[Finding]) -> String {
    let mut out = format!("compactd {} doctor\n\npaths\n", env!("CARGO_PKG_VERSION"));
    for (name, value) in paths {
        out += &format!("  {name:<9} {value}\n");
    }
    out += "\nchecks\n";
    for f in findings {
        let tag = match f.verdict {
            Verdict::Ok => "ok",
            Verdict::Note => "note",
            Verdict::Fail => "FAIL",
        };
        // A long error (a TOML parse error quotes the line) stays under its own column.
        let text = f.text.trim_end().replace('\n', &format!("\n{:20}", ""));
        out += &format!("  {tag:<5} {:<11} {text}\n", f.subject);
        if let Some(fix) = &f.fix {
            out += &format!("        {:<11} fix: {fix}\n", "");
        }
    }
    let failed = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Fail)
        .count();
    out += &match failed {
        0 => "\nno problem found\n".to_owned(),
        1 => "\n1 check failed\n".to_owned(),
        n => format!("\n{n} checks failed\n"),
    };
    out
}

/// The configuration: which file, and whether it loads and validates.
fn config_check(explicit: Option<&Path>) -> (Config, Finding, String) {
    let file = crate::config::file_in_use(explicit);
    let shown = match &file {
        Some(f) => f.display().to_string(),
        None => match crate::config::default_path() {
            Some(d) => format!("none (defaults; would be read from {})", d.display()),
            None => "none (defaults)".to_owned(),
        },
    };
    match Config::load(explicit) {
        Ok(config) => {
            let text = match &file {
                Some(f) => format!("{} loads and is valid", f.display()),
                None => "no file: the defaults apply".to_owned(),
            };
            (config, Finding::ok("config", text), shown)
        }
        Err(e) => (
            // The rest is checked with the defaults, and the daemon looked for on the socket
            // the file names (it started with the config that worked).
            Config {
                socket: crate::config::socket_despite_errors(explicit),
                ..Config::default()
            },
            Finding::fail(
                "config",
                e.to_string(),
                "correct the setting named (the remaining checks use the defaults and the file's socket meanwhile)",
            ),
            shown,
        ),
    }
}

/// The socket's directory, by the rules `serve` applies before binding there.
fn socket_dir_check(socket: &Path) -> Finding {
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match crate::transport::unix::check_socket_dir(socket) {
        Ok(()) if dir.exists() => Finding::ok(
            "socket dir",
            format!("{} passes serve's ownership and mode checks", dir.display()),
        ),
        Ok(()) => Finding::ok(
            "socket dir",
            format!(
                "{} does not exist yet; the first daemon creates it (mode 0700)",
                dir.display()
            ),
        ),
        Err(e) => Finding::fail(
            "socket dir",
            e,
            format!(
                "make {} yours with mode 0700, or choose another socket (--socket, or `socket` in the config)",
                dir.display()
            ),
        ),
    }
}

/// Whether a daemon of this user answers on the socket, asked as `compactd status` asks.
fn daemon_check(socket: &Path) -> Finding {
    match super::lifecycle::ask(socket, "compactd doctor") {
        Ok(Some(init)) => {
            let version = init["version"].as_str().unwrap_or("?");
            let d = &init["daemon"];
            let pid = &d["pid"];
            // What the running daemon uses, which may differ from what this command reads
            // (it started with another environment, or before an edit).
            let uses = |key: &str, none: &str| {
                d[key]
                    .as_str()
                    .map_or_else(|| none.to_owned(), |s| super::printable::line(s).into_owned())
            };
            let text = format!(
                "pid {pid}, compactd {}, answers on {}; it uses config {} and logs to {}",
                super::printable::line(version),
                socket.display(),
                uses("configFile", "none (the defaults)"),
                uses("logFile", "its stderr (no file)")
            );
            if version == env!("CARGO_PKG_VERSION") {
                Finding::ok("daemon", text)
            } else {
                Finding::note(
                    "daemon",
                    format!(
                        "{text}; this binary is {}: `compactd stop` and start it again to run this one",
                        env!("CARGO_PKG_VERSION")
                    ),
                )
            }
        }
        Ok(None) => Finding::note(
            "daemon",
            format!(
                "none running on {} (`compactd start`, `connect` and `mcp` start one on demand)",
                socket.display()
            ),
        ),
        Err(e) => Finding::fail(
            "daemon",
            e,
            "stop whatever listens there, or choose another socket (--socket, or `socket` in the config)",
        ),
    }
}

/// `var` as the engine reads it: set and not empty.
fn key_present(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.is_empty())
}

/// The summarizer's key, and the keys of `[providers]` (used for a session's own model when no
/// summarizer model is configured). The daemon reads them from its own environment: a service
/// manager's may differ from this shell's.
fn key_checks(config: &Config) -> Vec<Finding> {
    let s = &config.summarizer;
    let mut out = Vec::new();
    match s.provider {
        SummarizerProvider::Extractive => out.push(Finding::ok(
            "summarizer",
            "extractive (no network, no key); sessions whose provider is in [providers] summarize with their own model",
        )),
        SummarizerProvider::Llm(_) => {
            let what = format!(
                "{} {} at {}",
                s.provider.as_str(),
                s.model.as_deref().unwrap_or("?"),
                s.base_url.as_deref().unwrap_or("?")
            );
            out.push(match &s.api_key_env {
                Some(var) if key_present(var) => {
                    Finding::ok("summarizer", format!("{what}; its key {var} is set"))
                }
                Some(var) => Finding::fail(
                    "summarizer",
                    format!("{what}; its key {var} is not set, so every compaction fails (No API key found)"),
                    format!("export {var}=<key> where the daemon starts (a service: its unit's environment), or point summarizer.api_key_env at the variable that holds it"),
                ),
                None => Finding::note(
                    "summarizer",
                    format!("{what}; summarizer.api_key_env is not set, so requests carry no key (right for a local server)"),
                ),
            });
        }
    }
    for (name, p) in &config.providers {
        let used = s.provider == SummarizerProvider::Extractive;
        let finding = match &p.api_key_env {
            _ if !used => Finding::note(
                "provider",
                format!("{name}: unused while [summarizer] names a model"),
            ),
            Some(var) if key_present(var) => {
                Finding::ok("provider", format!("{name} ({}): key {var} is set", p.api))
            }
            Some(var) => Finding::fail(
                "provider",
                format!("{name} ({}): key {var} is not set, so its sessions are summarized extractively", p.api),
                format!("export {var}=<key> where the daemon starts, or remove [providers.{name}]"),
            ),
            None => Finding::ok("provider", format!("{name} ({}): no key needed", p.api)),
        };
        out.push(finding);
    }
    out
}

/// The session store, as the configured backend checks and describes itself (PostgreSQL is
/// reached and its schema applied by its own start-up check; files need nothing reached).
fn storage_check(backend: &Result<std::sync::Arc<dyn crate::store::Backend>, String>) -> Finding {
    use crate::store::Verdict as Health;
    let backend = match backend {
        Ok(b) => b,
        Err(e) => {
            return Finding::fail(
                "storage",
                e.clone(),
                "fix [storage] in the config file (compactd doctor shows which one is in use)",
            )
        }
    };
    let health = backend.health();
    Finding {
        verdict: match health.verdict {
            Health::Ok => Verdict::Ok,
            Health::Note => Verdict::Note,
            Health::Fail => Verdict::Fail,
        },
        subject: "storage",
        text: health.text,
        fix: health.fix,
    }
}

/// Where the daemon logs, as `serve` and the on-demand starters decide it.
fn log_path(config: &Config) -> String {
    match &config.log.file {
        Some(f) => f.display().to_string(),
        None => format!(
            "{} (editors' commands and daemons started on demand; `serve` by hand logs to stderr)",
            super::logging::default_log_file().display()
        ),
    }
}

/// Where sessions are, as the backend says.
fn sessions_path(backend: &Result<std::sync::Arc<dyn crate::store::Backend>, String>) -> String {
    match backend {
        Ok(b) => b.describe(),
        Err(e) => format!("(none: {e})"),
    }
}

/// `compactd doctor`: prints the paths and every check; exit 1 when one failed.
pub fn run(config_flag: Option<&Path>, socket_flag: Option<PathBuf>) -> i32 {
    let (config, config_finding, config_shown) = config_check(config_flag);
    let socket = super::launch::socket_path(socket_flag, &config);
    let mut findings = vec![config_finding, socket_dir_check(&socket)];
    findings.push(daemon_check(&socket));
    findings.extend(key_checks(&config));
    let backend = config.storage.backend();
    findings.push(storage_check(&backend));
    let paths = [
        ("config", config_shown),
        ("socket", socket.display().to_string()),
        ("log", log_path(&config)),
        ("sessions", sessions_path(&backend)),
    ];
    let text = render(&paths, &findings);
    let code = super::write_stdout(&super::printable::text(&text));
    if findings.iter().any(|f| f.verdict == Verdict::Fail) {
        super::EXIT_FAILED
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_carries_its_fix_and_counts() {
        let text = render(
            &[("config", "/c.toml".into())],
            &[
                Finding::ok("config", "/c.toml loads"),
                Finding::fail("summarizer", "K is not set", "export K=<key>"),
            ],
        );
        assert!(text.contains("  config    /c.toml\n"), "{text}");
        assert!(text.contains("FAIL  summarizer  K is not set\n"), "{text}");
        assert!(text.contains("fix: export K=<key>\n"), "{text}");
        assert!(text.ends_with("1 check failed\n"), "{text}");
    }
}
