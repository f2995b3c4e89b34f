//! The command line as a newcomer meets it: progress on a terminal (and nothing extra
//! otherwise), one exit-code scheme, help that names the real default socket, `inspect`'s facts
//! about the file (original version, earlier compactions, branches, plurals), and a closed
//! output pipe (`compactd inspect … | head`) ending the command quietly.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;
use support::daemon_env::{Env, KillOnDrop};
use support::rpc_client::{Client, Framing};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_compactd")
}

fn case(name: &str) -> PathBuf {
    support::conformance_cases(support::PiVersion::V0_85)
        .join(name)
        .join("session.jsonl")
}

/// A writable copy of a fixture in `dir`.
fn copy(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(format!("{name}.jsonl"));
    std::fs::write(&p, std::fs::read(case(name)).unwrap()).unwrap();
    p
}

fn compactd(dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env("XDG_CONFIG_HOME", dir.join("config"))
        .env("PI_CODING_AGENT_DIR", dir.join("agent"))
        .env_remove("COMPACTD_LOG");
    c
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool} >/dev/null"))
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `args` under a pseudo-terminal (util-linux `script`) for at most `secs`; returns what
/// the terminal showed. `None` when `script` is missing (a failure in CI).
fn on_terminal(dir: &Path, args: &str, secs: u32) -> Option<String> {
    if !have("script") {
        support::skip_or_fail(
            "on_terminal",
            "no util-linux `script` for a pseudo-terminal",
        );
        return None;
    }
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .args(["script", "-qec", &format!("{} {args}", bin()), "/dev/null"])
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("PI_CODING_AGENT_DIR", dir.join("agent"))
        .env("COMPACTD_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn compact_shows_progress_on_a_terminal_and_nothing_extra_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let file = copy(dir.path(), "009-bash-executions");
    let args = format!("compact {} --keep-recent-tokens 2000", file.display());
    if let Some(shown) = on_terminal(dir.path(), &args, 30) {
        assert!(
            shown.contains("compacting [") && shown.contains("the extractive summarizer"),
            "{shown}"
        );
        assert!(shown.contains("compacted:"), "{shown}");
    }
    // A provider that refuses connections: the retry and its countdown are shown.
    let file = copy(dir.path(), "009-bash-executions");
    let refused = format!(
        "compact {} --keep-recent-tokens 2000 --provider openai-completions --base-url http://127.0.0.1:9/v1 --model m",
        file.display()
    );
    if let Some(shown) = on_terminal(dir.path(), &refused, 3) {
        assert!(
            shown.contains("try 1 of 4 failed") && shown.contains("retrying in"),
            "{shown}"
        );
    }
    // --json on a terminal: only the JSON.
    let file = copy(dir.path(), "009-bash-executions");
    let args = format!("compact {} --keep-recent-tokens 2000", file.display());
    if let Some(shown) = on_terminal(dir.path(), &format!("{args} --json"), 30) {
        assert!(!shown.contains("compacting ["), "{shown}");
    }
    // stderr not a terminal: nothing on stderr at all.
    let file = copy(dir.path(), "009-bash-executions");
    let out = compactd(dir.path())
        .args([
            "compact",
            file.to_str().unwrap(),
            "--keep-recent-tokens",
            "2000",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn exit_codes_follow_one_documented_scheme() {
    let dir = tempfile::tempdir().unwrap();
    let code = |args: &[&str]| {
        compactd(dir.path())
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    let big = copy(dir.path(), "009-bash-executions");
    let tiny = copy(dir.path(), "003-tiny-nothing-to-compact");
    let missing = dir.path().join("missing.jsonl");
    assert_eq!(
        code(&[
            "compact",
            big.to_str().unwrap(),
            "--keep-recent-tokens",
            "2000"
        ]),
        Some(0)
    );
    assert_eq!(code(&["inspect", tiny.to_str().unwrap()]), Some(0));
    // 1: the operation was refused or failed.
    assert_eq!(
        code(&["compact", tiny.to_str().unwrap()]),
        Some(1),
        "nothing to compact"
    );
    assert_eq!(
        code(&[
            "compact",
            big.to_str().unwrap(),
            "--keep-recent-tokens",
            "2000"
        ]),
        Some(1),
        "already compacted"
    );
    assert_eq!(code(&["inspect", missing.to_str().unwrap()]), Some(1));
    // 2: usage or configuration.
    assert_eq!(code(&["inspect"]), Some(2));
    assert_eq!(
        code(&["compact", big.to_str().unwrap(), "--no-such-flag"]),
        Some(2)
    );
    assert_eq!(
        code(&[
            "compact",
            big.to_str().unwrap(),
            "--provider",
            "openai-completions"
        ]),
        Some(2)
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "this is = = not toml").unwrap();
    assert_eq!(
        code(&[
            "--config",
            bad.to_str().unwrap(),
            "inspect",
            tiny.to_str().unwrap()
        ]),
        Some(2)
    );
    // The scheme is in the help.
    let help = compactd(dir.path()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Exit codes: 0 success; 1")
            && help.contains("2 usage or configuration error"),
        "{help}"
    );
}

#[test]
fn serve_help_names_the_real_default_socket() {
    let out = Command::new(bin())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("RUNTIME/compactd/compactd.sock")
            && help.contains("/run/user/$UID when it exists")
            && help.contains("$XDG_RUNTIME_DIR"),
        "{help}"
    );
    assert!(help.contains("/tmp/compactd-$UID/compactd.sock"), "{help}");
    assert!(help.contains("Exit codes"), "{help}");
}

#[test]
fn inspect_reports_original_version_earlier_compactions_branches_with_plurals() {
    let dir = tempfile::tempdir().unwrap();
    let show = |name: &str| {
        let out = compactd(dir.path())
            .arg("inspect")
            .arg(case(name))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let v1 = show("050-v1-session-no-ids");
    assert!(
        v1.contains("v1 file, read as v3") && v1.contains("would migrate"),
        "{v1}"
    );
    assert!(
        v1.contains("1 earlier compaction (") && !v1.contains("1 earlier compactions"),
        "{v1}"
    );
    let twice = show("025-compacted-twice");
    assert!(twice.contains("(v3;"), "{twice}");
    assert!(
        twice.contains("2 earlier compactions (2 on the current branch), 1 branch\n"),
        "{twice}"
    );
    assert!(twice.contains("prefix of 1 message and"), "{twice}");
    let branched = show("035-branched-compaction-on-other-branch");
    assert!(
        branched.contains("1 earlier compaction (0 on the current branch), 2 branches"),
        "{branched}"
    );
    assert!(branched.contains("0 files read"), "{branched}");
}

#[test]
fn inspect_into_a_closed_pipe_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    for extra in [None, Some("--json")] {
        let mut child = compactd(dir.path())
            .arg("inspect")
            .arg(case("037-large-200k"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // `| head` that has already exited
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.is_empty(), "{err}");
    }
}

#[test]
fn daemon_logs_are_coloured_only_on_a_terminal_without_no_color() {
    if !have("script") {
        support::skip_or_fail(
            "daemon_logs_are_coloured_only_on_a_terminal_without_no_color",
            "no util-linux `script` for a pseudo-terminal",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |no_color: Option<&str>, socket: &str| {
        let mut c = Command::new("timeout");
        c.args([
            "10",
            "script",
            "-qec",
            // A daemon on a socket logs to stderr (`stdio` logs to a file).
            // The inner `timeout` stops the daemon itself: stopping only
            // `script` can leave it listening, and the next run then finds
            // "another compactd is already listening".
            &format!(
                "timeout 2 {} serve --socket {}/{socket}",
                bin(),
                dir.path().display()
            ),
            "/dev/null",
        ])
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_RUNTIME_DIR", dir.path().join("run"))
        .env("COMPACTD_RUNTIME_DIR", dir.path().join("run"))
        .env_remove("COMPACTD_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let plain = run(Some("1"), "plain.sock");
    assert!(
        plain.contains("INFO") && plain.contains("listening"),
        "{plain}"
    );
    assert!(
        !plain.contains('\u{1b}'),
        "NO_COLOR is respected: {plain:?}"
    );
    let coloured = run(None, "coloured.sock");
    assert!(coloured.contains("listening"), "{coloured}");
    assert!(
        coloured.contains("\u{1b}["),
        "a terminal gets colour: {coloured:?}"
    );
}

/// `compactd completions SHELL` prints a completion script generated from the CLI itself, so
/// every subcommand is in it, the newest included.
#[test]
fn completions_name_every_subcommand() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = env.command("completions").arg(shell).output().expect("run");
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8_lossy(&out.stdout);
        for sub in [
            "serve", "connect", "start", "status", "stop", "inspect", "compact", "top", "mcp",
        ] {
            assert!(script.contains(sub), "{shell} completes {sub}");
        }
    }
    let bad = env
        .command("completions")
        .arg("tcsh")
        .output()
        .expect("run");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// `-q` and `-v` on any subcommand: errors only, or debug lines, over `COMPACTD_LOG`.
#[test]
fn quiet_and_verbose_set_the_log_level_on_every_command() {
    let env = Env::new();
    let serve = |flag: &str| {
        let socket = env.path(&format!("run/{}.sock", flag.trim_start_matches('-')));
        let child = KillOnDrop(
            env.command("serve")
                .arg("--socket")
                .arg(&socket)
                .arg(flag)
                .env("COMPACTD_LOG", "info")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("serve"),
        );
        let mut c = Client::socket(&socket, Framing::Ndjson);
        c.ok("listSessions", json!({}));
        drop(c);
        // SAFETY: kill(2) on the daemon this test spawned.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let out = child.wait_with_output().expect("wait");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let quiet = serve("-q");
    assert!(!quiet.contains("INFO"), "-q logs errors only: {quiet}");
    let verbose = serve("-v");
    assert!(verbose.contains("DEBUG"), "-v logs debug lines: {verbose}");
    for sub in [
        "inspect", "compact", "top", "status", "stop", "export", "import", "mcp",
    ] {
        let out = env
            .command(sub)
            .args(["-q", "--help"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{sub} takes -q");
        let out = env
            .command(sub)
            .args(["-vv", "--help"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{sub} takes -vv");
    }
}

#[test]
fn each_error_that_names_an_option_says_all_it_needs() {
    let env = Env::new();
    // mcp without a target names both ways to give one.
    let out = env.command("mcp").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--session") && err.contains("--cwd"), "{err}");

    // The database variable alone does not select PostgreSQL, and the error says so.
    let out = env
        .command("export")
        .arg("0000")
        .env("COMPACTD_POSTGRES_URL", "host=/nowhere dbname=x")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("backend = \"postgres\"") && err.contains("alone does not select PostgreSQL"),
        "{err}"
    );

    // service status says what the manager's state is, or why it cannot tell (no systemctl).
    let empty = tempfile::tempdir().unwrap();
    let out = env
        .command("service")
        .args(["status", "--manager", "systemd"])
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("systemd: state unknown (`systemctl --user` does not work here"),
        "{shown}"
    );
}

/// Skipped malformed lines are named by their line numbers: in `inspect`'s summary line and in
/// the daemon's log when it opens the file.
#[test]
fn skipped_malformed_lines_are_named_by_line() {
    let env = Env::new();
    let file = env.path("torn.jsonl");
    std::fs::write(
        &file,
        "{\"type\":\"session\",\"version\":3,\"id\":\"torn\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}\n\
         {not json\n\
         \n\
         {\"type\":\"message\",\"id\":\"a1\",\"parentId\":null,\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"hi\",\"timestamp\":1}}\n\
         also not json\n",
    )
    .unwrap();
    let out = env.command("inspect").arg(&file).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("2 malformed lines skipped (lines 2, 5)"),
        "{shown}"
    );
    let mut c = env.stdio(&[], Framing::Ndjson);
    c.ok("openSession", json!({"path": file}));
    // End of input: the daemon finishes and flushes its log before it exits.
    let out = c.finish().expect("the daemon's exit");
    assert!(out.status.success(), "{out:?}");
    let log = env.log_text();
    assert!(
        log.contains("2 malformed lines skipped (lines 2, 5)"),
        "{log}"
    );
}

/// Every argument of every command says what it is in `--help`: clap's command tree walked,
/// positionals and flags alike (its own `--help` and `--version` aside).
#[test]
fn every_cli_argument_is_described() {
    fn walk(cmd: &clap::Command, path: &str, bare: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            let described = arg
                .get_help()
                .or(arg.get_long_help())
                .is_some_and(|h| !h.to_string().trim().is_empty());
            if !described {
                bare.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), bare);
        }
    }
    let cli = <compactd::cli::Cli as clap::CommandFactory>::command();
    let mut bare = Vec::new();
    walk(&cli, "compactd", &mut bare);
    assert!(
        bare.is_empty(),
        "arguments without a description: {bare:#?}"
    );
}
