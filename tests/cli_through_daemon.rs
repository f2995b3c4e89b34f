//! The CLI through the running daemon (issue 35 item 2), with the real binary: while a daemon
//! holds a session file (an agent has it open), `compactd compact FILE` and `compactd preview
//! FILE` go through that daemon — the compaction entry is appended once, the daemon's
//! subscribers see `compaction_start`/`compaction_end`, and the output has the shape of the
//! direct path's — while `--no-daemon` gives today's locked error, and a settings flag the
//! daemon's session would not honour is refused with what to do.

mod support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use support::daemon_env::{keep_recent, lines, open, parsed_lines, Env, KillOnDrop};
use support::rpc_client::{Client, Framing};

const LONG: Duration = Duration::from_secs(30);

fn run(env: &Env, sub: &str, args: &[&str], file: &Path) -> Output {
    env.command(sub)
        .args(args)
        .arg(file)
        .output()
        .expect("run compactd")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn compactions(file: &Path) -> usize {
    parsed_lines(file)
        .expect("session lines")
        .iter()
        .filter(|l| l["type"] == "compaction")
        .count()
}

/// The top-level member names of a JSON object.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
    k.sort();
    k
}

/// A daemon on the default socket of `env` with `files` open on one client that keeps the
/// compaction small and subscribes to the sessions' events.
fn daemon_holding(env: &Env, files: &[&Path]) -> (KillOnDrop, Client, Vec<String>) {
    let socket = env.path("run/compactd/compactd.sock");
    let daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut agent = Client::socket(&socket, Framing::Ndjson);
    let mut ids = Vec::new();
    for f in files {
        let sid = open(&mut agent, f);
        keep_recent(&mut agent, &sid, 2000);
        agent.ok("subscribe", json!({"sessionId": sid}));
        ids.push(sid);
    }
    (daemon, agent, ids)
}

#[test]
fn compact_goes_through_the_daemon_that_holds_the_file() {
    let env = Env::new();
    let human = env.session_as("009-bash-executions", "human");
    let as_json = env.session_as("009-bash-executions", "json");
    let direct = env.session_as("009-bash-executions", "direct");
    let (daemon, mut agent, _) = daemon_holding(&env, &[&human, &as_json]);
    let before = lines(&human);

    // Told not to use the daemon: the file's lock refuses, as before, naming who holds it (the
    // daemon's pid and socket, from the kernel's lock table), and nothing is written.
    let out = run(&env, "compact", &["--no-daemon"], &human);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let holder = format!(
        "locked by another compactd process: {} (held by pid {}, the daemon on {})",
        human.display(),
        daemon.id(),
        env.path("run/compactd/compactd.sock").display()
    );
    assert!(
        text(&out.stderr).contains(&holder),
        "{}\nwanted: {holder}",
        text(&out.stderr)
    );
    // A flag the daemon's session would not honour is refused, saying what to do.
    let out = run(&env, "compact", &["--keep-recent-tokens", "2000"], &human);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--keep-recent-tokens cannot apply")
            && text(&out.stderr).contains("setSettingsOverrides"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(lines(&human), before, "nothing written");

    // Through the daemon: the direct path's output, the entry appended once, events seen.
    let out = run(&env, "compact", &[], &human);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("compacted: ")
            && text(&out.stdout).contains(" tokens before, ~"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(lines(&human), before + 1);
    assert_eq!(compactions(&human), 1);
    let start = agent
        .wait_notification("compaction_start", LONG)
        .expect("the daemon's subscriber sees compaction_start");
    let end = agent
        .wait_notification("compaction_end", LONG)
        .expect("the daemon's subscriber sees compaction_end");
    assert_eq!(start["params"]["reason"], "manual", "{start}");
    assert!(end["params"]["result"].is_object(), "{end}");

    // --json: the same members as the direct path's answer.
    let out = run(&env, "compact", &["--json"], &as_json);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let through: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let out = run(
        &env,
        "compact",
        &["--json", "--keep-recent-tokens", "2000"],
        &direct,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let directly: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(keys(&through), keys(&directly));
    assert_eq!(through["firstKeptEntryId"], directly["firstKeptEntryId"]);
    assert_eq!(compactions(&as_json), 1);

    // A refusal through the daemon reads as the direct path's.
    let out = run(&env, "compact", &["--json"], &human);
    assert_eq!(out.status.code(), Some(1));
    let refused: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(refused["error"], "Already compacted", "{refused}");
    assert!(refused["hint"].is_string(), "{refused}");
    assert_eq!(compactions(&human), 1, "appended once");
}

#[test]
fn preview_answers_as_the_daemon_that_holds_the_file_or_one_of_its_own() {
    let env = Env::new();
    let held = env.session("009-bash-executions");
    let free = env.session_as("009-bash-executions", "free");
    let (_daemon, mut agent, ids) = daemon_holding(&env, &[&held]);

    let out = run(&env, "preview", &["--json"], &held);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let through: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let own = agent.ok("previewCompaction", json!({"sessionId": ids[0]}));
    assert_eq!(through, own, "the daemon's own answer");
    assert_eq!(through["settings"]["keepRecentTokens"], 2000);

    let out = run(&env, "preview", &[], &held);
    assert_eq!(out.status.code(), Some(0));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("Summarize: ") && shown.contains("Keep verbatim: "),
        "{shown}"
    );
    // As complete as --json: what it would save and cost, and every file.
    for part in [
        "After: ~",
        "fewer on every request",
        "Summarizer input: ~",
        "Prompt cache: ",
        "Pays for itself: ",
    ] {
        assert!(shown.contains(part), "{part:?} in {shown}");
    }
    let json = run(&env, "preview", &["--json"], &held);
    let answer: Value = serde_json::from_slice(&json.stdout).expect("preview --json");
    for file in answer["fileLists"]["readFiles"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(
            answer["fileLists"]["modifiedFiles"]
                .as_array()
                .into_iter()
                .flatten(),
        )
    {
        let file = file.as_str().unwrap_or_default();
        assert!(shown.contains(file), "{file} in {shown}");
    }

    let out = run(&env, "preview", &["--no-daemon"], &held);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("locked by another compactd process"));

    // A file no daemon holds: a daemon of this process answers, with the flags applied.
    let out = run(
        &env,
        "preview",
        &["--json", "--keep-recent-tokens", "2000"],
        &free,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(keys(&answer), keys(&own));
    assert_eq!(answer["firstKeptEntryId"], own["firstKeptEntryId"]);
    let out = run(&env, "preview", &[], &free);
    assert!(
        text(&out.stdout).starts_with("Nothing to compact: "),
        "{}",
        text(&out.stdout)
    );
}

/// `inspect` takes no lock and never writes: while a daemon holds the file it reads it as Pi
/// would, and says the same as once the daemon has let it go.
#[test]
fn inspect_reads_a_file_a_daemon_holds_as_it_reads_it_free() {
    let env = Env::new();
    let file = env.session_as("009-bash-executions", "held");
    let (daemon, agent, _) = daemon_holding(&env, &[&file]);
    let held = run(&env, "inspect", &["--json"], &file);
    assert_eq!(held.status.code(), Some(0), "{}", text(&held.stderr));
    let human_held = run(&env, "inspect", &[], &file);
    assert_eq!(
        human_held.status.code(),
        Some(0),
        "{}",
        text(&human_held.stderr)
    );
    drop(agent);
    drop(daemon);
    let free = run(&env, "inspect", &["--json"], &file);
    assert_eq!(text(&held.stdout), text(&free.stdout));
    assert_eq!(
        text(&human_held.stdout),
        text(&run(&env, "inspect", &[], &file).stdout)
    );
}

/// One path for every compaction (issue 45): `compact --no-daemon` compacts in a daemon of its
/// own process, so it writes the entry the running daemon writes for the same session and
/// settings — the recall footer and `details.summarizer` included — byte for byte but for the
/// new entry's id and timestamp.
#[test]
fn compact_without_a_daemon_writes_the_entry_the_daemon_writes() {
    let env = Env::new();
    let by_cli = env.session_as("005-medium-basic", "cli");
    let by_daemon = env.session_as("005-medium-basic", "daemon");
    let out = run(
        &env,
        "compact",
        &["--no-daemon", "--json", "--keep-recent-tokens", "2000"],
        &by_cli,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let socket = env.path("run/compactd/compactd.sock");
    let _daemon = env.serve_ready(&socket, &[], Stdio::null());
    let mut agent = Client::socket(&socket, Framing::Ndjson);
    let sid = open(&mut agent, &by_daemon);
    keep_recent(&mut agent, &sid, 2000);
    agent.ok("compact", json!({"sessionId": sid}));

    let last = |f: &Path| {
        let mut entry = parsed_lines(f)
            .expect("session lines")
            .pop()
            .expect("an entry");
        let o = entry.as_object_mut().expect("an object");
        o.remove("id");
        o.remove("timestamp");
        entry
    };
    let (cli, daemon) = (last(&by_cli), last(&by_daemon));
    assert_eq!(cli["type"], "compaction", "{cli}");
    assert!(
        cli["summary"]
            .as_str()
            .unwrap_or("")
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("[compactd recall] ")),
        "the CLI's summary ends with the recall footer: {cli}"
    );
    assert_eq!(
        cli, daemon,
        "the CLI and the daemon wrote different entries"
    );
    let (cli_lines, daemon_lines) = (parsed_lines(&by_cli), parsed_lines(&by_daemon));
    let (cli_lines, daemon_lines) = (cli_lines.expect("lines"), daemon_lines.expect("lines"));
    assert_eq!(
        cli_lines[..cli_lines.len() - 1],
        daemon_lines[..daemon_lines.len() - 1],
        "everything before the entry is unchanged in both"
    );
}
