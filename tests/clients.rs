//! Runs the client packages' own end-to-end suites against this build's binary:
//! `clients/typescript` (`npm ci` + `npm test`, vscode-jsonrpc over stdio and a Unix socket) and
//! `clients/python` (`pytest`, Content-Length over stdio and NDJSON over a socket).
//!
//! A missing toolchain (node/npm, python3) prints a `SKIPPED` line and passes. pytest, when not
//! importable, is installed into a venv under the target directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_compactd");
const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// Per-command limit; the whole test stays well under it in practice (~10 s warm).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(240);

fn clients_dir() -> PathBuf {
    Path::new(MANIFEST_DIR).join("clients")
}

fn conformance_dir() -> PathBuf {
    std::env::var_os("COMPACTD_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(MANIFEST_DIR).join("../shared/conformance/cases"))
}

/// Whether `program args…` runs and exits 0 (a probe for a tool).
fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a command with the test environment, killing it past [`COMMAND_TIMEOUT`].
fn run(dir: &Path, program: &str, args: &[&str]) -> Output {
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("COMPACTD_BIN", BIN)
        .env("COMPACTD_CONFORMANCE_DIR", conformance_dir())
        .env("NO_UPDATE_NOTIFIER", "1")
        .env("npm_config_update_notifier", "false")
        .env("npm_config_fund", "false")
        .env("npm_config_audit", "false")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {program}: {e}"));
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
            panic!("{program} {args:?} timed out after {COMMAND_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    println!(
        "$ {program} {} ({:.1}s, {})",
        args.join(" "),
        started.elapsed().as_secs_f64(),
        output.status
    );
    output
}

/// Runs a command and fails the test with its output if it does not succeed.
fn run_ok(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = run(dir, program, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}

fn prerequisites() -> Option<&'static str> {
    if !conformance_dir().is_dir() {
        return Some("conformance cases not found (set COMPACTD_CONFORMANCE_DIR)");
    }
    None
}

#[test]
fn typescript_client_suite() {
    if let Some(why) = prerequisites() {
        println!("SKIPPED typescript client suite: {why}");
        return;
    }
    if !works("node", &["--version"]) || !works("npm", &["--version"]) {
        println!("SKIPPED typescript client suite: node/npm not found");
        return;
    }
    let dir = clients_dir().join("typescript");
    if dir.join("package-lock.json").exists() {
        run_ok(&dir, "npm", &["ci", "--no-audit", "--no-fund"]);
    } else {
        run_ok(&dir, "npm", &["install", "--no-audit", "--no-fund"]);
    }
    let out = run_ok(&dir, "npm", &["test"]);
    println!("{out}");
    assert!(
        !out.contains("# SKIPPED"),
        "the suite skipped itself although the binary exists:\n{out}"
    );
    assert!(
        out.contains("# fail 0"),
        "unexpected node --test summary:\n{out}"
    );
}

/// A Python with pytest: `python3` itself, else a venv under the target directory.
fn python_with_pytest() -> Result<PathBuf, String> {
    if works("python3", &["-c", "import pytest"]) {
        return Ok(PathBuf::from("python3"));
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("clients-venv");
    let python = venv.join("bin").join("python3");
    if works(python.to_str().unwrap_or(""), &["-c", "import pytest"]) {
        return Ok(python);
    }
    let here = Path::new(MANIFEST_DIR);
    let venv_s = venv.to_string_lossy().into_owned();
    let out = run(here, "python3", &["-m", "venv", &venv_s]);
    if !out.status.success() {
        return Err(format!(
            "python3 -m venv failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let py = python.to_string_lossy().into_owned();
    run_ok(here, &py, &["-m", "pip", "install", "--quiet", "pytest"]);
    Ok(python)
}

#[test]
fn python_client_suite() {
    if let Some(why) = prerequisites() {
        println!("SKIPPED python client suite: {why}");
        return;
    }
    if !works("python3", &["--version"]) {
        println!("SKIPPED python client suite: python3 not found");
        return;
    }
    let python = match python_with_pytest() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIPPED python client suite: {why}");
            return;
        }
    };
    let py = python.to_string_lossy().into_owned();
    let out = run_ok(
        Path::new(MANIFEST_DIR),
        &py,
        &[
            "-m",
            "pytest",
            "clients/python/tests",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
        ],
    );
    println!("{out}");
    assert!(
        !out.contains("skipped"),
        "pytest skipped tests although the binary exists:\n{out}"
    );
    assert!(out.contains(" passed"), "unexpected pytest summary:\n{out}");
}
