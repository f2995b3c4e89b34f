//! Sessions on PostgreSQL, shared by many daemons (`[storage] backend = "postgres"`), through the
//! real binary: two `compactd serve` processes on one real database server (started per test,
//! see `support::postgres`). Appends from both interleave without loss into one tree, threshold
//! crossings at the same moment make one compaction, a daemon killed mid-compaction releases
//! its lease, events reach subscribers on the other daemon, export and import are byte for byte,
//! and a database that is missing or goes away is a clear `storage_unavailable` that loses
//! nothing acknowledged.
#![cfg(feature = "postgres")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::daemon_env::{model, usage, Env, KillOnDrop};
use support::postgres::Postgres;
use support::rpc_client::{Client, Framing};

/// One daemon on the database: its environment (config, agent dir), process and socket.
struct Daemon {
    env: Env,
    _child: KillOnDrop,
    socket: PathBuf,
}

impl Daemon {
    fn start(pg: &Postgres, extra_config: &str) -> Daemon {
        let env = Env::new();
        env.write_config(&format!("{}{extra_config}", pg.config()));
        let socket = env.path("run/compactd.sock");
        let child = env.serve_ready(&socket, &[], Stdio::null());
        Daemon {
            env,
            _child: child,
            socket,
        }
    }

    fn client(&self) -> Client {
        Client::socket(&self.socket, Framing::Ndjson)
    }

    fn pid(&self) -> u32 {
        self._child.0.id()
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text, "timestamp": 1_700_000_000_000i64})
}

fn assistant(text: &str, input: i64) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}],
        "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
        "usage": usage(input), "stopReason": "stop", "timestamp": 1_700_000_000_001i64})
}

/// `turns` user/assistant pairs of about 600 tokens each, the last reply reporting `last_input`.
fn fill(c: &mut Client, sid: &str, turns: usize, last_input: i64) {
    for i in 0..turns {
        let body = format!(
            "turn {i}: {}",
            "please look at the parser again ".repeat(60)
        );
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": user(&body)}),
        );
        let input = if i + 1 == turns {
            last_input
        } else {
            1000 + i as i64 * 600
        };
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": assistant(&format!("done with turn {i}"), input)}),
        );
    }
}

/// `compactd export` of a stored session, in `env`.
fn export(env: &Env, header_id: &str) -> Vec<u8> {
    let out = env
        .command("export")
        .arg(header_id)
        .output()
        .expect("run compactd export");
    assert!(
        out.status.success(),
        "export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn lines_of(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("every exported line is JSON"))
        .collect()
}

fn create(c: &mut Client, cwd: &Path) -> (String, String) {
    let info = c.ok("createSession", json!({"cwd": cwd, "model": model()}));
    assert_eq!(
        info["path"].as_str().map(|p| p.starts_with("postgres:")),
        Some(true),
        "a stored session's location: {info}"
    );
    (
        info["sessionId"].as_str().expect("sessionId").to_owned(),
        info["headerId"].as_str().expect("headerId").to_owned(),
    )
}

fn open(c: &mut Client, header_id: &str) -> String {
    let info = c.ok(
        "openSession",
        json!({"headerId": header_id, "model": model()}),
    );
    info["sessionId"].as_str().expect("sessionId").to_owned()
}

#[test]
fn two_daemons_interleave_appends_into_one_tree() {
    let test = "two_daemons_interleave_appends_into_one_tree";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let (a, b) = (Daemon::start(&pg, ""), Daemon::start(&pg, ""));
    let mut ca = a.client();
    let (sid_a, header_id) = create(&mut ca, a.env.dir.path());
    let mut cb = b.client();
    let sid_b = open(&mut cb, &header_id);
    const EACH: usize = 1000;
    let writer = |mut c: Client, sid: String, who: &'static str| {
        std::thread::spawn(move || {
            for i in 0..EACH {
                c.ok(
                    "appendMessage",
                    json!({"sessionId": sid, "message": user(&format!("{who} {i}"))}),
                );
            }
            c
        })
    };
    let ta = writer(ca, sid_a.clone(), "from-a");
    let tb = writer(cb, sid_b.clone(), "from-b");
    let mut ca = ta.join().expect("daemon a's writer");
    let mut cb = tb.join().expect("daemon b's writer");

    let exported = export(&a.env, &header_id);
    let lines = lines_of(&exported);
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["id"], header_id.as_str());
    // One tree, and a chain: every entry's parent is the line before it (each daemon read the
    // other's appends before writing its own).
    for w in lines[1..].windows(2) {
        assert_eq!(
            w[1]["parentId"], w[0]["id"],
            "one chain: {} after {}",
            w[1], w[0]
        );
    }
    let texts: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    for who in ["from-a", "from-b"] {
        let mine: Vec<&&str> = texts.iter().filter(|t| t.starts_with(who)).collect();
        assert_eq!(mine.len(), EACH, "every append of {who} is stored once");
        for (i, t) in mine.iter().enumerate() {
            assert_eq!(**t, format!("{who} {i}"), "{who}'s appends in its order");
        }
    }
    // Both daemons' trees are the store's: same leaf, same count.
    let sync_a = ca.ok("syncSession", json!({"sessionId": sid_a}));
    let sync_b = cb.ok("syncSession", json!({"sessionId": sid_b}));
    let leaf = lines.last().expect("entries")["id"].clone();
    assert_eq!(sync_a["leafId"], leaf);
    assert_eq!(sync_b["leafId"], leaf);
    assert_eq!(sync_a["entryCount"], (lines.len() - 1) as u64);
    assert_eq!(sync_b["entryCount"], (lines.len() - 1) as u64);

    // Pi loads the export with the same context compactd builds.
    let Some(oracle) = support::oracle::Oracle::find(test) else {
        return;
    };
    let file = a.env.path("export.jsonl");
    std::fs::write(&file, &exported).expect("write export");
    let pi = oracle.analyse(&file).expect("Pi loads the export");
    assert_eq!(
        pi["session"]["leafId"], leaf,
        "Pi's leaf: {}",
        pi["session"]
    );
    let context = cb.ok("getContext", json!({"sessionId": sid_b}));
    assert_eq!(
        context["messages"].as_array().map(Vec::len),
        Some(2 * EACH),
        "every append is in the context"
    );
    assert!(
        context["messages"] == pi["context"]["messages"],
        "Pi's context is compactd's"
    );
}

#[test]
fn export_and_import_are_byte_for_byte_and_compact_alike() {
    let test = "export_and_import_are_byte_for_byte_and_compact_alike";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let d = Daemon::start(&pg, "");
    let file = d.env.session("005-medium-basic");
    let original = std::fs::read(&file).expect("read fixture copy");
    let out = d.env.command("import").arg(&file).output().expect("import");
    assert!(
        out.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header_id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(export(&d.env, &header_id), original, "export of the import");
    assert_eq!(
        std::fs::read(&file).expect("reread"),
        original,
        "import never writes the file"
    );
    // Importing it again is refused: one session per header id.
    let again = d.env.command("import").arg(&file).output().expect("import");
    assert!(!again.status.success());
    // The refusal names the session it collides with, and how to get it.
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(
        said.contains(&format!("the store already holds session {header_id}"))
            && said.contains(&format!("compactd export {header_id}")),
        "{said}"
    );

    // The stored copy compacts as the file does (extractive, nothing written).
    let mut c = d.client();
    let sid = open(&mut c, &header_id);
    let stored = c.ok("compact", json!({"sessionId": sid, "write": false}));
    let files = Env::new();
    let fcopy = files.session("005-medium-basic");
    let mut fc = files.stdio(&[], Framing::Ndjson);
    let fsid = support::daemon_env::open(&mut fc, &fcopy);
    let filed = fc.ok("compact", json!({"sessionId": fsid, "write": false}));
    for key in ["summary", "firstKeptEntryId", "tokensBefore", "details"] {
        assert_eq!(stored[key], filed[key], "{key} of the stored copy");
    }
    let listed = c.ok(
        "listStoredSessions",
        json!({"cwd": lines_of(&original)[0]["cwd"]}),
    );
    assert_eq!(listed["sessions"][0]["headerId"], header_id.as_str());
}

/// The fake OpenAI-compatible summarizer on `port` (no retries).
fn summarizer_config(port: u16) -> String {
    format!(
        "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"fake-gpt\"\nretry = {{ enabled = false }}\n"
    )
}

fn small_model() -> Value {
    json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 16000, "maxTokens": 4000})
}

fn compactions(lines: &[Value]) -> usize {
    lines.iter().filter(|l| l["type"] == "compaction").count()
}

#[test]
fn simultaneous_threshold_crossings_make_one_compaction() {
    let test = "simultaneous_threshold_crossings_make_one_compaction";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    // A summarizer that takes a second, so the two checks really overlap.
    let (_rt, fake) = support::fake_llm::serve(&["## Goal\nShip it.", "## Goal\nAgain."]);
    fake.state.lock().delay = Duration::from_secs(1);
    let summarizer = summarizer_config(fake.port);
    let (a, b) = (
        Daemon::start(&pg, &summarizer),
        Daemon::start(&pg, &summarizer),
    );
    let mut ca = a.client();
    let (sid_a, header_id) = over_threshold(&mut ca, a.env.dir.path());
    let mut cb = b.client();
    let sid_b = open(&mut cb, &header_id);
    cb.ok(
        "setModel",
        json!({"sessionId": sid_b, "model": small_model()}),
    );
    settle_overrides(&mut cb, &sid_b);
    let check = |mut c: Client, sid: String| {
        std::thread::spawn(move || {
            let r = c.ok(
                "checkCompaction",
                json!({"sessionId": sid, "phase": "postRun"}),
            );
            (c, r)
        })
    };
    let (ta, tb) = (check(ca, sid_a.clone()), check(cb, sid_b.clone()));
    let (mut ca, ra) = ta.join().expect("check on a");
    let (mut cb, rb) = tb.join().expect("check on b");
    let compacted = [&ra, &rb]
        .iter()
        .filter(|r| r["action"] != "none" && r["action"].is_string())
        .count();
    assert_eq!(compacted, 1, "one of the two checks compacts: {ra} / {rb}");
    let lines = lines_of(&export(&a.env, &header_id));
    assert_eq!(compactions(&lines), 1, "one compaction entry in the store");
    // Both daemons see it.
    for (c, sid) in [(&mut ca, &sid_a), (&mut cb, &sid_b)] {
        let branch = c.ok("getBranch", json!({"sessionId": sid}));
        let n = branch
            .as_array()
            .expect("branch")
            .iter()
            .filter(|e| e["type"] == "compaction")
            .count();
        assert_eq!(n, 1, "the compaction is on {sid}'s branch");
    }
}

/// A new stored session on `c`, over the threshold of [`small_model`] (its settings fixed
/// first, so no speculation starts while it fills).
fn over_threshold(c: &mut Client, cwd: &Path) -> (String, String) {
    let (sid, header_id) = create(c, cwd);
    c.ok(
        "setModel",
        json!({"sessionId": sid, "model": small_model()}),
    );
    settle_overrides(c, &sid);
    fill(c, &sid, 12, 13_000);
    (sid, header_id)
}

/// A small reserve and kept tail, and no speculation (the tests count summarizer requests).
fn settle_overrides(c: &mut Client, sid: &str) {
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"reserveTokens": 4000, "keepRecentTokens": 2000, "speculativeAt": 0}}),
    );
}

#[test]
fn a_daemon_killed_mid_compaction_releases_its_lease() {
    let test = "a_daemon_killed_mid_compaction_releases_its_lease";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    // Daemon a summarizes with a provider that answers only after a minute; b is extractive.
    let (_rt, fake) = support::fake_llm::serve(&["## Goal\nNever arrives."]);
    fake.state.lock().delay = Duration::from_secs(60);
    let a = Daemon::start(&pg, &summarizer_config(fake.port));
    let b = Daemon::start(&pg, "");
    let mut ca = a.client();
    let (sid_a, header_id) = over_threshold(&mut ca, a.env.dir.path());
    ca.ok("subscribe", json!({"sessionId": sid_a}));
    let mut cb = b.client();
    let sid_b = open(&mut cb, &header_id);
    settle_overrides(&mut cb, &sid_b);
    // A subscriber on b, from before a starts.
    let mut watcher = b.client();
    let sid_w = open(&mut watcher, &header_id);
    watcher.ok("subscribe", json!({"sessionId": sid_w}));
    ca.send("compact", json!({"sessionId": sid_a}));
    assert!(
        ca.wait_notification("compaction_start", Duration::from_secs(10))
            .is_some(),
        "a started compacting"
    );
    // a is waiting on its summarizer, holding the lease; b's subscriber sees its start.
    assert!(
        watcher
            .wait_notification("compaction_start", Duration::from_secs(10))
            .is_some(),
        "a's start reached b's subscriber"
    );
    let pid = a.pid() as i32;
    // SAFETY: kill(2) on the daemon process this test spawned.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let started = Instant::now();
    let done = cb
        .request("compact", json!({"sessionId": sid_b}))
        .expect("b compacts once a's lease is gone");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "b took over within seconds (took {took:?})"
    );
    assert!(done["summary"].as_str().is_some_and(|s| !s.is_empty()));
    let lines = lines_of(&export(&b.env, &header_id));
    assert_eq!(
        compactions(&lines),
        1,
        "only b's compaction; nothing of a's"
    );
    assert_eq!(
        lines.last().expect("entries")["type"],
        "compaction",
        "the entry is whole and last"
    );
    // Failover ends what it started: b's subscriber gets a's end (aborted, with the reason)
    // before b's own start, then b's end.
    support::wait_until(
        Duration::from_secs(10),
        "b's own end reached its subscriber",
        || {
            watcher.wait_notification("no-such-event", Duration::from_millis(50));
            watcher
                .notifications
                .iter()
                .filter(|n| n["method"] == "compaction_end")
                .count()
                >= 2
        },
    );
    let seen: Vec<&Value> = watcher
        .notifications
        .iter()
        .filter(|n| {
            n["method"]
                .as_str()
                .is_some_and(|m| m.starts_with("compaction_"))
        })
        .collect();
    let names: Vec<&str> = seen.iter().filter_map(|n| n["method"].as_str()).collect();
    assert_eq!(
        names,
        [
            "compaction_start",
            "compaction_end",
            "compaction_start",
            "compaction_end"
        ],
        "{seen:?}"
    );
    let orphan = &seen[1]["params"];
    assert_eq!(orphan["aborted"], true, "{orphan}");
    assert_eq!(orphan["reason"], "manual", "a's start's reason: {orphan}");
    assert!(
        orphan["errorMessage"]
            .as_str()
            .is_some_and(|m| m.contains("stopped before it finished")),
        "{orphan}"
    );
    assert_eq!(seen[3]["params"]["aborted"], false);
    assert!(seen[3]["params"]["result"]["summary"].is_string());
}

#[test]
fn events_reach_subscribers_on_every_daemon() {
    let test = "events_reach_subscribers_on_every_daemon";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let (a, b) = (Daemon::start(&pg, ""), Daemon::start(&pg, ""));
    let mut ca = a.client();
    let (sid_a, header_id) = over_threshold(&mut ca, a.env.dir.path());
    let mut cb = b.client();
    let sid_b = open(&mut cb, &header_id);
    cb.ok("subscribe", json!({"sessionId": sid_b}));
    let result = ca.ok("compact", json!({"sessionId": sid_a}));
    let start = cb
        .wait_notification("compaction_start", Duration::from_secs(10))
        .expect("b's subscriber gets compaction_start");
    let end = cb
        .wait_notification("compaction_end", Duration::from_secs(10))
        .expect("b's subscriber gets compaction_end");
    assert_eq!(start["params"]["sessionId"], sid_b.as_str(), "under b's id");
    assert_eq!(end["params"]["sessionId"], sid_b.as_str());
    assert_eq!(end["params"]["result"]["summary"], result["summary"]);
    // And b reads the compaction in: its context now starts with the summary.
    support::wait_for(Duration::from_secs(10), "b reads a's compaction in", || {
        let ctx = cb.ok("getContext", json!({"sessionId": sid_b}));
        let first = &ctx["messages"][0];
        (first["role"] == "compactionSummary")
            .then_some(())
            .ok_or(first.to_string())
    });
}

/// A server that refuses the connection says why in the error (its own `FATAL`), and the error
/// says what to change: a role that does not exist, a wrong password, a missing database.
#[test]
fn a_refused_connection_says_the_servers_reason_and_the_fix() {
    let test = "a_refused_connection_says_the_servers_reason_and_the_fix";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    pg.require_password("compactd_pw", "right");
    let host = pg.socket_dir().display().to_string();
    for (url, cause, fix) in [
        (
            format!("host={host} user=nobody dbname=postgres"),
            "role \"nobody\" does not exist",
            "Fix: create the role (`createuser NAME`",
        ),
        (
            format!("host={host} user=compactd_pw password=wrong dbname=postgres"),
            "password authentication failed for user \"compactd_pw\"",
            "Fix: check the password in [storage] postgres_url",
        ),
        (
            format!("host={host} user=postgres dbname=nowhere"),
            "database \"nowhere\" does not exist",
            "Fix: create the database (`createdb NAME`)",
        ),
    ] {
        let env = Env::new();
        env.write_config(&format!(
            "[storage]\nbackend = \"postgres\"\npostgres_url = \"{url}\"\n"
        ));
        let socket = env.path("run/compactd.sock");
        let _daemon = env.serve_ready(&socket, &[], Stdio::null());
        let mut c = Client::socket(&socket, Framing::Ndjson);
        let err = c
            .request("createSession", json!({"cwd": env.dir.path()}))
            .expect_err("refused");
        assert_eq!(err["data"]["kind"], "storage_unavailable", "{err}");
        let said = err["message"].as_str().unwrap_or_default();
        assert!(
            said.contains(cause) && said.contains(fix) && said.contains(&format!("host {host}")),
            "{url}: {said}"
        );
        assert!(!said.ends_with("db error"), "{said}");
    }
}

#[test]
fn a_missing_or_lost_database_is_storage_unavailable_and_loses_nothing() {
    let test = "a_missing_or_lost_database_is_storage_unavailable_and_loses_nothing";
    let Some(mut pg) = Postgres::start(test) else {
        return;
    };
    // A connection string that does not parse: the daemon refuses to start, saying why.
    let env = Env::new();
    env.write_config("[storage]\nbackend = \"postgres\"\npostgres_url = \"postgresql://[::1\"\n");
    let out = env
        .command("serve")
        .arg("--socket")
        .arg(env.path("run/x.sock"))
        .output()
        .expect("serve");
    assert!(!out.status.success(), "a bad URL is fatal");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("postgres_url"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A database that is down at start-up: the daemon serves, and says storage_unavailable.
    let nowhere = tempfile::tempdir().expect("tempdir");
    let env = Env::new();
    env.write_config(&format!(
        "[storage]\nbackend = \"postgres\"\npostgres_url = \"host={} user=postgres dbname=postgres connect_timeout=2\"\n",
        nowhere.path().display()
    ));
    let socket = env.path("run/compactd.sock");
    let _down = env.serve_ready(&socket, &[], Stdio::null());
    let mut c = Client::socket(&socket, Framing::Ndjson);
    let err = c
        .request("createSession", json!({"cwd": env.dir.path()}))
        .expect_err("no database");
    assert_eq!(err["data"]["kind"], "storage_unavailable", "{err}");
    // The system's reason, where compactd tried, and what to do: not only "error connecting".
    let said = err["message"].as_str().unwrap_or_default();
    for part in [
        format!(
            "host {} user postgres database postgres",
            nowhere.path().display()
        ),
        "No such file or directory".into(),
        "Fix: start the PostgreSQL server".into(),
    ] {
        assert!(said.contains(&part), "{part:?} missing from {said:?}");
    }

    // A database that goes away mid-run: the write fails clearly, and everything acknowledged
    // before is still there when it is back; the next write works. A crash of the server is
    // the store losing what it had not flushed: only `durability = "always"` waits for every
    // commit's flush (the other levels lose the newest messages there, as a power loss loses
    // a file's unsynced lines; storage.md).
    let d = Daemon::start(&pg, "durability = \"always\"\n");
    let mut c = d.client();
    let (sid, header_id) = create(&mut c, d.env.dir.path());
    for i in 0..20 {
        c.ok(
            "appendMessage",
            json!({"sessionId": sid, "message": user(&format!("kept {i}"))}),
        );
    }
    pg.kill_server();
    let err = c
        .request(
            "appendMessage",
            json!({"sessionId": sid, "message": user("while down")}),
        )
        .expect_err("the database is down");
    assert_eq!(err["data"]["kind"], "storage_unavailable", "{err}");
    pg.start_server();
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": user("after")}),
    );
    let texts: Vec<String> = lines_of(&export(&d.env, &header_id))
        .iter()
        .filter_map(|l| l["message"]["content"].as_str().map(str::to_owned))
        .collect();
    let mut want: Vec<String> = (0..20).map(|i| format!("kept {i}")).collect();
    want.push("after".into());
    assert_eq!(
        texts, want,
        "every acknowledged append, and nothing that failed"
    );
}

/// A create the database rejects, raced against hundreds of appends to other sessions on the
/// same daemon (and creates that succeed): no acknowledged append is lost, no other request
/// fails, and the rejected create is `invalid_params`. The daemon is then killed with SIGKILL
/// right after the last answer: every acknowledged append is in the store. (A create once ran
/// its transaction on the one shared, pipelined client: other sessions' appends landed inside
/// it, its rollback discarded them, and appends sent while it was aborted failed.)
#[test]
fn a_rejected_create_loses_no_other_sessions_appends() {
    let test = "a_rejected_create_loses_no_other_sessions_appends";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let d = Daemon::start(&pg, "");
    const WRITERS: usize = 4;
    const EACH: usize = 100;
    let mut sessions = Vec::new();
    for _ in 0..WRITERS {
        let mut c = d.client();
        let (sid, header_id) = create(&mut c, d.env.dir.path());
        sessions.push((c, sid, header_id));
    }
    // The database itself refuses some sessions, slowly: the trigger waits before raising, so
    // the failing transaction stays open while the other sessions append.
    pg.psql(
        "CREATE FUNCTION test_reject() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.cwd LIKE '%reject-me%' THEN
             PERFORM pg_sleep(0.02);
             RAISE EXCEPTION 'this test refuses the session' USING ERRCODE = '22023';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER test_reject BEFORE INSERT ON compactd_sessions
           FOR EACH ROW EXECUTE FUNCTION test_reject();",
    );
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creator = {
        let (socket, dir, done) = (d.socket.clone(), d.env.dir.path().to_owned(), done.clone());
        std::thread::spawn(move || {
            let mut c = Client::socket(&socket, Framing::Ndjson);
            let (mut rejected, mut created) = (0, Vec::new());
            let mut i = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) || i < 10 {
                i += 1;
                if i % 3 == 0 {
                    let info = c.ok("createSession", json!({"cwd": dir, "model": model()}));
                    created.push(info["headerId"].as_str().expect("headerId").to_owned());
                    continue;
                }
                let err = c
                    .request(
                        "createSession",
                        json!({"cwd": dir.join(format!("reject-me-{i}")), "model": model()}),
                    )
                    .expect_err("the database refuses this session");
                assert_eq!(err["data"]["kind"], "invalid_params", "{err}");
                assert!(
                    err["message"].as_str().is_some_and(
                        |m| m.contains("cannot store") && m.contains("refuses the session")
                    ),
                    "the database's reason: {err}"
                );
                rejected += 1;
            }
            (rejected, created)
        })
    };
    let writers: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(w, (mut c, sid, header_id))| {
            std::thread::spawn(move || {
                for i in 0..EACH {
                    // `ok` fails the test on any error: no other client's request may fail.
                    c.ok(
                        "appendMessage",
                        json!({"sessionId": sid, "message": user(&format!("w{w} {i}"))}),
                    );
                }
                header_id
            })
        })
        .collect();
    let header_ids: Vec<String> = writers
        .into_iter()
        .map(|t| t.join().expect("a writer"))
        .collect();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (rejected, created) = creator.join().expect("the creator");
    assert!(
        rejected >= 6,
        "creates were rejected during the appends: {rejected}"
    );
    // Killed right after the answers: what was acknowledged must already be committed.
    unsafe {
        libc::kill(d.pid() as i32, libc::SIGKILL);
    }
    for (w, header_id) in header_ids.iter().enumerate() {
        let texts: Vec<String> = lines_of(&export(&d.env, header_id))
            .iter()
            .filter_map(|l| l["message"]["content"].as_str().map(str::to_owned))
            .collect();
        let want: Vec<String> = (0..EACH).map(|i| format!("w{w} {i}")).collect();
        assert_eq!(
            texts, want,
            "every acknowledged append of writer {w}, in order"
        );
    }
    for header_id in &created {
        let lines = lines_of(&export(&d.env, header_id));
        assert_eq!(
            lines[0]["id"],
            header_id.as_str(),
            "an acknowledged create is stored"
        );
    }
}

/// A psql session holding the append lock of `header` (the lock another daemon takes to append
/// after a lost race; advisory locks of a session and of a transaction share one space), once
/// the server granted it; dropping it lets go.
fn hold_append_lock(pg: &Postgres, header: &str) -> support::postgres::Session {
    let mut holder = pg.session();
    holder.send(&format!(
        "SELECT pg_advisory_lock(hashtextextended('compactd-append:default/{header}', 0));"
    ));
    support::wait_until(Duration::from_secs(10), "psql holds the lock", || {
        pg.psql(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND pid <> pg_backend_pid()",
        ) == "1"
    });
    holder
}

/// A session whose append lock is held elsewhere (another daemon appending after a lost race)
/// holds up no other session's appends (as it would if appends shared one connection and
/// queued behind the waiting one): the held session's append waits for the lock, then lands in
/// order.
#[test]
fn a_held_append_lock_holds_up_no_other_sessions_appends() {
    let test = "a_held_append_lock_holds_up_no_other_sessions_appends";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let d = Daemon::start(&pg, "");
    let mut held_client = d.client();
    let (held_sid, held_header) = create(&mut held_client, d.env.dir.path());
    let mut free = d.client();
    let (free_sid, free_header) = create(&mut free, d.env.dir.path());
    held_client.ok(
        "appendMessage",
        json!({"sessionId": held_sid, "message": user("before")}),
    );
    let holder = hold_append_lock(&pg, &held_header);
    let waiting = std::thread::spawn(move || {
        held_client.ok(
            "appendMessage",
            json!({"sessionId": held_sid, "message": user("while held")}),
        );
        held_client
    });
    support::wait_until(
        Duration::from_secs(10),
        "the held session's append waits for the lock",
        || {
            pg.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                == "1"
        },
    );
    // Every other session's append goes through meanwhile.
    let others = std::thread::spawn(move || {
        for i in 0..20 {
            free.ok(
                "appendMessage",
                json!({"sessionId": free_sid, "message": user(&format!("free {i}"))}),
            );
        }
    });
    support::wait_until(
        Duration::from_secs(10),
        "the other session's appends are answered while the lock is held",
        || others.is_finished(),
    );
    others.join().expect("the other session's writer");
    assert!(!waiting.is_finished(), "the held session's append waits");
    drop(holder);
    waiting.join().expect("the held session's writer");
    let texts = |header: &str| -> Vec<String> {
        lines_of(&export(&d.env, header))
            .iter()
            .filter_map(|l| l["message"]["content"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(texts(&held_header), ["before", "while held"]);
    let want: Vec<String> = (0..20).map(|i| format!("free {i}")).collect();
    assert_eq!(texts(&free_header), want);
}

/// An append whose write waits on the database keeps its turn at the session's gate but not the
/// session's state (`daemon::gate`): readers of the session are answered meanwhile, from the
/// state before the append, and a second append to it waits its turn and lands after it.
#[test]
fn an_append_waiting_on_the_database_holds_up_no_reader_and_keeps_its_turn() {
    let test = "an_append_waiting_on_the_database_holds_up_no_reader_and_keeps_its_turn";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let d = Daemon::start(&pg, "");
    let mut first = d.client();
    let (sid, header) = create(&mut first, d.env.dir.path());
    first.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": user("before")}),
    );
    let mut reader = d.client();
    let usage_before = reader.ok("getContextUsage", json!({"sessionId": sid}));
    let holder = hold_append_lock(&pg, &header);
    let waiting_on_lock =
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
    let sid_first = sid.clone();
    let held = std::thread::spawn(move || {
        first.ok(
            "appendMessage",
            json!({"sessionId": sid_first, "message": user("while held")}),
        )
    });
    support::wait_until(
        Duration::from_secs(10),
        "the append waits for the session's lock in the database",
        || pg.psql(waiting_on_lock) == "1",
    );
    // Readers of the same session answer while its append waits on the server.
    let sid_reader = sid.clone();
    let reads = std::thread::spawn(move || {
        let should = reader.ok("shouldCompact", json!({"sessionId": sid_reader}));
        let usage = reader.ok("getContextUsage", json!({"sessionId": sid_reader}));
        (reader, should, usage)
    });
    support::wait_until(
        Duration::from_secs(10),
        "shouldCompact and getContextUsage answer while the append waits",
        || reads.is_finished(),
    );
    let (mut reader, should, usage) = reads.join().expect("the reader");
    assert_eq!(should["shouldCompact"], json!(false), "{should}");
    assert_eq!(
        usage, usage_before,
        "the reader sees the session as before the unacknowledged append"
    );
    // A second append to the session waits for the first one's turn.
    let mut second = d.client();
    let sid_second = sid.clone();
    let after = std::thread::spawn(move || {
        second.ok(
            "appendMessage",
            json!({"sessionId": sid_second, "message": user("after")}),
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!held.is_finished(), "the first append waits for the lock");
    assert!(!after.is_finished(), "the second append waits its turn");
    drop(holder);
    let held_entry = held.join().expect("the first writer");
    let after_entry = after.join().expect("the second writer");
    let lines = lines_of(&export(&d.env, &header));
    let texts: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(texts, ["before", "while held", "after"]);
    let after_line = lines
        .iter()
        .find(|l| l["id"] == after_entry["entryId"])
        .expect("the second append is stored");
    assert_eq!(
        after_line["parentId"], held_entry["entryId"],
        "the second append lands under the first: {after_line}"
    );
    let usage_after = reader.ok("getContextUsage", json!({"sessionId": sid}));
    assert!(
        usage_after["tokens"].as_f64() > usage_before["tokens"].as_f64(),
        "both appends count once they are answered: {usage_before} then {usage_after}"
    );
}

/// Appends of many sessions at once, which one daemon gathers into shared statements: every
/// append lands exactly once, in its session's order, under the entry before it, and its
/// answer names the entry that was stored.
#[test]
fn many_sessions_appending_at_once_keep_each_sessions_order() {
    let test = "many_sessions_appending_at_once_keep_each_sessions_order";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let d = Daemon::start(&pg, "");
    let writers: Vec<_> = (0..8)
        .map(|k| {
            let mut c = d.client();
            let (sid, header) = create(&mut c, d.env.dir.path());
            std::thread::spawn(move || {
                let ids: Vec<String> = (0..100)
                    .map(|i| {
                        let r = c.ok(
                            "appendMessage",
                            json!({"sessionId": sid, "message": user(&format!("{k}:{i}"))}),
                        );
                        r["entryId"].as_str().expect("entryId").to_owned()
                    })
                    .collect();
                (header, ids)
            })
        })
        .collect();
    for (k, w) in writers.into_iter().enumerate() {
        let (header, ids) = w.join().expect("a writer");
        let lines = lines_of(&export(&d.env, &header));
        let entries = &lines[1..];
        let texts: Vec<&str> = entries
            .iter()
            .filter_map(|l| l["message"]["content"].as_str())
            .collect();
        let want: Vec<String> = (0..100).map(|i| format!("{k}:{i}")).collect();
        assert_eq!(texts, want, "session {k}");
        let stored: Vec<&str> = entries
            .iter()
            .filter(|l| l["message"]["role"] == "user")
            .filter_map(|l| l["id"].as_str())
            .collect();
        assert_eq!(
            stored, ids,
            "session {k}: the answers name the stored entries"
        );
        for pair in entries.windows(2) {
            assert_eq!(pair[1]["parentId"], pair[0]["id"], "session {k}");
        }
    }
}

/// A value the database cannot store is the request's fault, named: `invalid_params`, not
/// `storage_unavailable`.
#[test]
fn a_value_the_database_cannot_store_is_invalid_params() {
    let test = "a_value_the_database_cannot_store_is_invalid_params";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let d = Daemon::start(&pg, "");
    let mut c = d.client();
    let err = c
        .request(
            "createSession",
            json!({"cwd": "/tmp/nul\u{0}here", "model": model()}),
        )
        .expect_err("a NUL in the cwd");
    assert_eq!(err["data"]["kind"], "invalid_params", "{err}");
    assert!(
        err["message"]
            .as_str()
            .is_some_and(|m| m.contains("cwd") && m.contains("NUL")),
        "names the field: {err}"
    );
    // The daemon and the store go on.
    let (sid, _) = create(&mut c, d.env.dir.path());
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": user("still fine")}),
    );
}

/// A retry after an unknown outcome never writes twice, whichever daemon it reaches: the try
/// on daemon a was committed (its answer, as far as the client knows, lost), and the retry with
/// the same `entryId` on daemon b answers with that entry.
#[test]
fn a_retry_on_another_daemon_writes_once() {
    let test = "a_retry_on_another_daemon_writes_once";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let (a, b) = (Daemon::start(&pg, ""), Daemon::start(&pg, ""));
    let mut ca = a.client();
    let (sid_a, header_id) = create(&mut ca, a.env.dir.path());
    let mut cb = b.client();
    let sid_b = open(&mut cb, &header_id);
    let message = json!({"role": "user", "content": "deploy", "timestamp": 5});
    let first = ca.ok(
        "appendMessage",
        json!({"sessionId": sid_a, "message": message, "entryId": "deploy-1"}),
    );
    let retry = cb.ok(
        "appendMessage",
        json!({"sessionId": sid_b, "message": message, "entryId": "deploy-1"}),
    );
    assert_eq!(first["entryId"], "deploy-1");
    assert_eq!(retry["entryId"], "deploy-1", "{retry}");
    let lines = lines_of(&export(&a.env, &header_id));
    let written = lines.iter().filter(|l| l["id"] == "deploy-1").count();
    assert_eq!(written, 1, "stored once: {lines:?}");
    // The next append on b goes after it.
    let next = cb.ok(
        "appendMessage",
        json!({"sessionId": sid_b, "message": user("next")}),
    );
    let lines = lines_of(&export(&a.env, &header_id));
    let last = lines.last().expect("entries");
    assert_eq!(last["id"], next["entryId"]);
    assert_eq!(last["parentId"], "deploy-1");
}

/// Tenants on one database: a daemon sees only its namespace's sessions (listing, opening,
/// exporting, events), and within it the allowed roots apply to a stored session's cwd as they
/// apply to a file's path.
#[test]
fn one_tenant_cannot_see_another_tenants_sessions() {
    let test = "one_tenant_cannot_see_another_tenants_sessions";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let acme = Daemon::start(&pg, "namespace = \"acme\"\n");
    let globex = Daemon::start(&pg, "namespace = \"globex\"\n");
    let mut ca = acme.client();
    let (_sid, header_id) = create(&mut ca, acme.env.dir.path());
    let mut cg = globex.client();
    let listed = cg.ok("listStoredSessions", json!({}));
    assert_eq!(
        listed["sessions"],
        json!([]),
        "globex lists none of acme's: {listed}"
    );
    let err = cg
        .request(
            "openSession",
            json!({"headerId": header_id, "model": model()}),
        )
        .expect_err("globex cannot open acme's session");
    assert_eq!(err["data"]["kind"], "not_found", "{err}");
    let out = globex
        .env
        .command("export")
        .arg(&header_id)
        .output()
        .expect("export");
    assert!(
        !out.status.success(),
        "globex's export of acme's session fails"
    );
    assert!(out.stdout.is_empty(), "and prints none of it");
    let mine = ca.ok("listStoredSessions", json!({}));
    assert_eq!(mine["sessions"][0]["headerId"], header_id.as_str());
    assert!(!export(&acme.env, &header_id).is_empty());

    // Roots: a daemon confined to one directory creates, lists and opens only sessions whose
    // cwd is under it.
    let root = tempfile::tempdir().expect("root");
    let inside = root.path().join("project");
    std::fs::create_dir_all(&inside).expect("project dir");
    let confined = Daemon::start(
        &pg,
        &format!(
            "namespace = \"acme\"\nallowed_roots = [\"{}\"]\n",
            root.path().display()
        ),
    );
    let mut cc = confined.client();
    let err = cc
        .request("createSession", json!({"cwd": "/etc", "model": model()}))
        .expect_err("a session for /etc");
    assert_eq!(err["data"]["kind"], "path_not_allowed", "{err}");
    let (_, inside_id) = create(&mut cc, &inside);
    let listed = cc.ok("listStoredSessions", json!({}));
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|s| s["headerId"].as_str())
        .collect();
    assert_eq!(
        ids,
        [inside_id.as_str()],
        "only the session under its root: {listed}"
    );
    let err = cc
        .request(
            "openSession",
            json!({"headerId": header_id, "model": model()}),
        )
        .expect_err("acme's other session's cwd is outside this daemon's root");
    assert_eq!(err["data"]["kind"], "path_not_allowed", "{err}");
}

/// Whatever a tenant does with another tenant's header id, the answer is the one an id nobody
/// holds gets. `compactd import` under globex of a file carrying acme's header id answered "the
/// store already holds a session with this header id": no data crossed, but globex learned that
/// acme had it. Header ids are now unique per namespace: the import succeeds as for a new id,
/// and each tenant's session of that id is its own (appends, exports, events, compactions).
/// Opening and exporting a header id only another tenant holds answer as for one nobody holds.
#[test]
fn a_tenant_learns_nothing_of_another_tenants_header_ids() {
    let test = "a_tenant_learns_nothing_of_another_tenants_header_ids";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    let acme = Daemon::start(&pg, "namespace = \"acme\"\n");
    let globex = Daemon::start(&pg, "namespace = \"globex\"\n");
    let mut ca = acme.client();
    let (sid_a, header_id) = create(&mut ca, acme.env.dir.path());
    fill(&mut ca, &sid_a, 3, 2000);
    let acme_copy = export(&acme.env, &header_id);

    // Open and export of acme's id from globex: word for word what an unknown id gets.
    let unknown = "0199aaaa-0000-7000-8000-000000000000";
    let mut cg = globex.client();
    let open_err = |c: &mut Client, id: &str| {
        let e = c
            .request("openSession", json!({"headerId": id, "model": model()}))
            .expect_err("not globex's");
        serde_json::to_string(&e).unwrap().replace(id, "<id>")
    };
    assert_eq!(open_err(&mut cg, &header_id), open_err(&mut cg, unknown));
    let export_err = |id: &str| {
        let out = globex
            .env
            .command("export")
            .arg(id)
            .output()
            .expect("export");
        assert!(!out.status.success() && out.stdout.is_empty());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).replace(id, "<id>"),
        )
    };
    assert_eq!(export_err(&header_id), export_err(unknown));

    // Import of a file with acme's id into globex: as for an id nobody holds.
    let file = globex.env.path("from-acme.jsonl");
    std::fs::write(&file, &acme_copy).unwrap();
    let out = globex
        .env
        .command("import")
        .arg(&file)
        .output()
        .expect("import");
    assert!(
        out.status.success(),
        "globex imports a session whose id acme holds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), header_id);
    // A second import into globex is refused as in any namespace holding the id.
    let again = globex
        .env
        .command("import")
        .arg(&file)
        .output()
        .expect("import");
    assert!(String::from_utf8_lossy(&again.stderr).contains("already holds"));

    // Two sessions of one id, one per tenant, each its own.
    ca.ok("subscribe", json!({"sessionId": sid_a}));
    let sid_g = open(&mut cg, &header_id);
    cg.ok(
        "appendMessage",
        json!({"sessionId": sid_g, "message": user("globex only")}),
    );
    settle_keep_recent(&mut cg, &sid_g);
    let compacted = cg.ok("compact", json!({"sessionId": sid_g}));
    assert!(compacted["summary"].is_string(), "{compacted}");
    assert_eq!(
        export(&acme.env, &header_id),
        acme_copy,
        "acme's session is untouched"
    );
    let globex_copy = lines_of(&export(&globex.env, &header_id));
    assert_eq!(globex_copy.len(), lines_of(&acme_copy).len() + 2);
    assert!(
        ca.wait_notification("compaction_start", Duration::from_secs(3))
            .is_none(),
        "acme hears nothing of globex's compaction"
    );
    // And acme still appends to its own.
    ca.ok(
        "appendMessage",
        json!({"sessionId": sid_a, "message": user("acme only")}),
    );
    let acme_now = lines_of(&export(&acme.env, &header_id));
    assert_eq!(acme_now.len(), lines_of(&acme_copy).len() + 1);
    assert_eq!(acme_now.last().unwrap()["message"]["content"], "acme only");
}

/// A keepRecentTokens small enough that a few turns compact.
fn settle_keep_recent(c: &mut Client, sid: &str) {
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": 200}}),
    );
}

/// A database written by an earlier compactd (schema 2: header ids unique across namespaces)
/// is migrated in place at start-up: every session and entry kept, each in its namespace.
#[test]
fn a_schema_two_database_is_migrated_with_every_session_kept() {
    let test = "a_schema_two_database_is_migrated_with_every_session_kept";
    let Some(pg) = Postgres::start(test) else {
        return;
    };
    pg.psql(
        "CREATE TABLE compactd_schema (version integer PRIMARY KEY);
         CREATE TABLE compactd_sessions (header_id text PRIMARY KEY, cwd text NOT NULL,
             header bytea NOT NULL, created timestamptz NOT NULL DEFAULT now(),
             namespace text NOT NULL DEFAULT 'default');
         CREATE TABLE compactd_entries (
             header_id text NOT NULL REFERENCES compactd_sessions ON DELETE CASCADE,
             seq bigint NOT NULL, id text, parent_id text, type text NOT NULL,
             line bytea NOT NULL, PRIMARY KEY (header_id, seq));
         CREATE TABLE compactd_events (id bigserial PRIMARY KEY, header_id text NOT NULL,
             origin text NOT NULL, name text NOT NULL, payload text NOT NULL,
             at timestamptz NOT NULL DEFAULT now(), namespace text NOT NULL DEFAULT 'default');
         INSERT INTO compactd_schema VALUES (1), (2);
         INSERT INTO compactd_sessions (header_id, cwd, header, namespace) VALUES
             ('h-acme', '/w', convert_to('{\"type\":\"session\",\"version\":3,\"id\":\"h-acme\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}', 'UTF8'), 'acme');
         INSERT INTO compactd_entries VALUES ('h-acme', 1, 'e1', NULL, 'message',
             convert_to('{\"type\":\"message\",\"id\":\"e1\",\"parentId\":null,\"timestamp\":\"2025-01-01T00:00:01.000Z\",\"message\":{\"role\":\"user\",\"content\":\"kept\",\"timestamp\":1}}', 'UTF8'));",
    );
    let acme = Daemon::start(&pg, "namespace = \"acme\"\n");
    let lines = lines_of(&export(&acme.env, "h-acme"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1]["message"]["content"], "kept");
    let mut c = acme.client();
    let sid = open(&mut c, "h-acme");
    c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": user("after the migration")}),
    );
    assert_eq!(lines_of(&export(&acme.env, "h-acme")).len(), 3);
    assert_eq!(
        pg.psql("SELECT max(version) FROM compactd_schema"),
        compactd::store::postgres::SCHEMA_VERSION.to_string()
    );
    assert_eq!(
        pg.psql("SELECT namespace FROM compactd_entries WHERE seq = 1"),
        "acme"
    );
}
