//! The README's first-run instructions, run as written: the quick-start shell block (between
//! `<!-- quickstart -->` markers) is extracted and executed with bash in an empty directory,
//! with a fresh HOME and the built `compactd` on PATH, against the daemon it starts itself.
//! It needs `socat`; without it the test skips on a developer machine and fails in CI. The
//! block's sample replies (`# -> …` lines) must match the real replies of the same ids, `…` and
//! `...` standing for any text.

use std::path::PathBuf;
use std::process::Command;

#[path = "../src/test_fixtures.rs"]
mod fixtures;
use compactd::pi_version::PiVersion;
use fixtures::skip_or_fail;

fn readme() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md");
    std::fs::read_to_string(p).expect("README.md")
}

/// The shell code of the quick-start block.
fn quickstart() -> String {
    let text = readme();
    let start = text
        .find("<!-- quickstart -->")
        .expect("README has a <!-- quickstart --> block");
    let end = text[start..]
        .find("<!-- /quickstart -->")
        .map(|i| start + i)
        .expect("quickstart block is closed");
    let block = &text[start..end];
    let code_start = block.find("```bash\n").expect("a bash fence") + "```bash\n".len();
    let code_end = block.rfind("```").expect("closing fence");
    block[code_start..code_end].to_owned()
}

/// Whether `real` reads as `sample`, where `…` and `...` in the sample stand for any text: the
/// pieces between them appear in order, the first at the start and the last at the end.
fn matches_sample(sample: &str, real: &str) -> bool {
    let pieces: Vec<&str> = sample.split("...").flat_map(|p| p.split('…')).collect();
    let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
        return false;
    };
    if pieces.len() == 1 {
        return real == *first;
    }
    let Some(mut rest) = real.strip_prefix(first) else {
        return false;
    };
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The `# -> ` sample replies of the block, each with the request id it names.
fn samples(script: &str) -> Vec<(u64, String)> {
    script
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("# -> "))
        .map(|s| {
            let id = s
                .split("\"id\":")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a sample reply names its id: {s}"));
            (id, s.to_owned())
        })
        .collect()
}

#[test]
fn sample_matching_treats_ellipses_as_any_text() {
    assert!(matches_sample(
        r#"{"a":"x…","b":…}"#,
        r#"{"a":"xyz","b":3}"#
    ));
    assert!(!matches_sample(
        r###"{"a":"## Goal\n…"}"###,
        r#"{"a":"No prior history."}"#
    ));
    assert!(!matches_sample(r#"{"id":1,...}"#, r#"{"id":2,"x":1}"#));
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool} >/dev/null"))
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_install_section_puts_compactd_on_path() {
    let text = readme();
    assert!(
        text.contains("cargo install --locked --path ."),
        "an install step"
    );
    // `--locked` works: Cargo.lock is current with Cargo.toml (cargo would refuse otherwise).
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--locked", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::null())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "Cargo.lock is stale, so `cargo install --locked` fails: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("~/.cargo/bin"), "says where the binary lands");
    for client in ["clients/python/README.md", "clients/typescript/README.md"] {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(client);
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(
            t.contains("COMPACTD_BIN") && t.contains("PATH"),
            "{client} says how the binary is found"
        );
    }
}

#[test]
fn the_quickstart_block_runs_as_written_on_a_fresh_machine() {
    if !have("socat") {
        skip_or_fail(
            "the_quickstart_block_runs_as_written_on_a_fresh_machine",
            "socat is not installed (scripts/test-all installs it)",
        );
        return;
    }
    let script = quickstart();
    for line in script.lines().filter(|l| !l.trim_start().starts_with('#')) {
        assert!(
            !line.contains("\"sessionId\":\"s1\""),
            "session ids are daemon-wide; the README must read them from a reply: {line}"
        );
        assert!(!line.contains("/abs/"), "no placeholder paths: {line}");
    }
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_compactd"))
        .parent()
        .unwrap()
        .to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("timeout")
        .args(["120", "bash", "-e", "-c", &script])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "quick start failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let replies: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert!(replies.len() >= 4, "{stdout}");
    for r in &replies {
        assert!(r.get("error").is_none(), "an error reply: {r}");
    }
    assert_eq!(replies[0]["result"]["serverName"], "compactd");
    assert!(replies[1]["result"]["sessionId"].is_string());
    // Each sample reply the README shows reads as the real reply of its request.
    let shown = samples(&script);
    assert!(shown.len() >= 3, "the block shows sample replies");
    for (id, sample) in &shown {
        let real = stdout
            .lines()
            .find(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .is_ok_and(|v| v["id"].as_u64() == Some(*id))
            })
            .unwrap_or_else(|| panic!("no reply with id {id}:\n{stdout}"));
        assert!(
            matches_sample(sample, real),
            "the README's sample reply does not match the real one\nsample: {sample}\nreal:   {real}"
        );
    }
    let last = replies.last().unwrap();
    assert!(
        last["result"]["summary"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "the last reply is the compaction: {last}"
    );
    // The session file it wrote is in the working directory, with the compaction entry.
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.contains("\"type\":\"compaction\""));
}
