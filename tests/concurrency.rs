//! Load: many clients on one real daemon (`compactd serve`, a Unix socket), each running a random
//! mix of appends, reads, compactions and aborts on shared sessions and on sessions of its own.
//!
//! What must hold afterwards, with nothing lost and nothing invented:
//! - no deadlock: every client finishes within a bound;
//! - every acknowledged append is on file exactly once, under the entry id its reply named, and
//!   nothing refused or unacknowledged is (the entries on file are exactly the acknowledged
//!   appends and compactions);
//! - each client's appends to a session appear in the order the client made them, and the new
//!   entries form one linear branch (each parent is the entry before);
//! - per session, `compaction_start`/`compaction_end` alternate, and the successful ends match
//!   the acknowledged compactions;
//! - a sequential replay of the acknowledged operations (same messages, same compactions, in
//!   file order, one request at a time, on a fresh copy) produces the same file, compared by
//!   entry type, parent position and content (ids and timestamps are generated, so not compared);
//! - Pi (the oracle) loads the shared sessions exactly as compactd does.
//!
//! Short form (CI): [`SHORT_OPS`] operations per client. Long form: `COMPACTD_LONG_TESTS=1`
//! runs [`LONG_OPS`] (64 × 1000).

mod support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::daemon_env::{now_ms, open, parsed_lines, Env};
use support::oracle::Oracle;
use support::rpc_client::{Client, Framing};
use support::{settled_rss_kib, unread_by_peer, wait_until};

const CLIENTS: usize = 64;
const SHARED: usize = 4;
const SHORT_OPS: usize = 40;
const LONG_OPS: usize = 1000;
const KEEP_RECENT: i64 = 1000;
const CASE: &str = "009-bash-executions";

fn long_form() -> bool {
    std::env::var("COMPACTD_LONG_TESTS").as_deref() == Ok("1")
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// What one client did and was told.
#[derive(Default)]
struct Report {
    /// Acknowledged appends in the client's order: (session path, marker, entry id).
    appends: Vec<(PathBuf, String, String)>,
    /// Acknowledged compactions per session path.
    compactions: HashMap<PathBuf, usize>,
    /// The session id each shared file got when this client opened it.
    shared_ids: Vec<String>,
    ops: usize,
    refused: usize,
    aborts: usize,
}

fn marker_of(entry: &Value) -> Option<&str> {
    let m = &entry["message"];
    let text = m["content"]
        .as_str()
        .or_else(|| m["content"][0]["text"].as_str())?;
    text.split_whitespace()
        .next()
        .filter(|w| w.starts_with("load-"))
}

fn message(marker: &str, assistant: bool) -> Value {
    let text = format!("{marker} {}", "the quick brown fox jumps ".repeat(8));
    if assistant {
        json!({"role": "assistant", "content": [{"type": "text", "text": text}],
               "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
               "usage": {"input": 10, "output": 60, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 70,
                         "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
               "stopReason": "stop", "timestamp": now_ms()})
    } else {
        json!({"role": "user", "content": text, "timestamp": now_ms()})
    }
}

/// One client's run: `ops` random operations on the shared sessions and its own.
fn run_client(socket: &Path, me: usize, ops: usize, shared: &[PathBuf], own: PathBuf) -> Report {
    let mut c = Client::socket(socket, Framing::Ndjson);
    let mut rng = Rng(0x2545f4914f6cdd1d ^ (me as u64 + 1).wrapping_mul(0x9e3779b97f4a7c15));
    let mut sids: Vec<(PathBuf, String)> = Vec::new();
    for p in shared.iter().chain(std::iter::once(&own)) {
        let sid = open(&mut c, p);
        c.ok(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": {"keepRecentTokens": KEEP_RECENT}}),
        );
        sids.push((p.clone(), sid));
    }
    let mut report = Report {
        shared_ids: sids[..shared.len()]
            .iter()
            .map(|(_, s)| s.clone())
            .collect(),
        ..Report::default()
    };
    for k in 0..ops {
        // Half the work on the client's own session, half on a shared one.
        let (path, sid) = if rng.below(2) == 0 {
            sids[sids.len() - 1].clone()
        } else {
            sids[rng.below(shared.len() as u64) as usize].clone()
        };
        report.ops += 1;
        match rng.below(100) {
            0..=64 => {
                let marker = format!("load-{me:02}-{k:05}");
                let r = c.request(
                    "appendMessage",
                    json!({"sessionId": sid, "message": message(&marker, rng.below(3) == 0)}),
                );
                match r {
                    Ok(v) => {
                        let id = v["entryId"].as_str().expect("entryId").to_owned();
                        report.appends.push((path, marker, id));
                    }
                    Err(e) => {
                        // Only "a compaction is running" may refuse an append.
                        assert_eq!(e["code"], -32020, "client {me}: append refused: {e}");
                        report.refused += 1;
                    }
                }
            }
            65..=84 => {
                let r = c.request("getContextUsage", json!({"sessionId": sid}));
                assert!(r.is_ok(), "client {me}: getContextUsage: {r:?}");
            }
            85..=89 => {
                let r = c.request("listSessions", json!({}));
                assert!(
                    r.as_ref().is_ok_and(Value::is_array),
                    "client {me}: listSessions: {r:?}"
                );
            }
            90..=95 => match c.request("compact", json!({"sessionId": sid})) {
                Ok(v) => {
                    assert!(v["summary"].is_string(), "client {me}: {v}");
                    *report.compactions.entry(path).or_default() += 1;
                }
                Err(e) => {
                    let msg = e["message"].as_str().unwrap_or_default();
                    assert!(
                        msg == "Compaction cancelled"
                            || msg == "Already compacted"
                            || msg.starts_with("Nothing to compact")
                            || e["code"] == -32020,
                        "client {me}: compact: {e}"
                    );
                }
            },
            _ => {
                // Start a compaction and abort it at once: either outcome is fine, but the
                // reply must come and say which.
                let id = c.send("compact", json!({"sessionId": sid}));
                let a = c.request("abortCompaction", json!({"sessionId": sid}));
                assert!(a.is_ok(), "client {me}: abort: {a:?}");
                report.aborts += 1;
                match c.wait(id, Duration::from_secs(120)) {
                    Ok(v) => {
                        assert!(v["summary"].is_string(), "client {me}: {v}");
                        *report.compactions.entry(path).or_default() += 1;
                    }
                    Err(e) => assert!(e["message"].is_string(), "client {me}: {e}"),
                }
            }
        }
    }
    report
}

/// An entry reduced to what a replay must reproduce: type, parent position, content.
fn shape(entries: &[Value], from: usize) -> Vec<Value> {
    let index: HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e["id"].as_str().map(|id| (id, i)))
        .collect();
    let pos = |v: &Value| v.as_str().and_then(|id| index.get(id).copied());
    entries[from..]
        .iter()
        .map(|e| {
            let mut o = e.clone();
            if let Some(m) = o.as_object_mut() {
                m.remove("id");
                m.remove("timestamp");
                let parent = pos(&e["parentId"]);
                m.insert("parentId".into(), json!(parent));
                if e["type"] == "compaction" {
                    // Appends are accepted while a compaction runs (continuity issue): its
                    // summary, cut and size come from the branch when it started, while its
                    // line lands after the appends made meanwhile. A replay in file order
                    // compacts later, over more messages, so only the entry's place is
                    // compared; `compactions_are_sound` checks its content.
                    for k in ["summary", "firstKeptEntryId", "tokensBefore", "details"] {
                        m.remove(k);
                    }
                }
            }
            o
        })
        .collect()
}

/// Every compaction's content is sound on its own: a non-empty summary, and a first kept entry
/// that is an earlier entry of the compaction's own branch.
fn compactions_are_sound(entries: &[Value], file: &Path) {
    let index: HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e["id"].as_str().map(|id| (id, i)))
        .collect();
    for (i, e) in entries.iter().enumerate() {
        if e["type"] != "compaction" {
            continue;
        }
        assert!(
            e["summary"].as_str().is_some_and(|s| !s.trim().is_empty()),
            "{}: entry {i} has an empty summary",
            file.display()
        );
        let kept = e["firstKeptEntryId"]
            .as_str()
            .and_then(|id| index.get(id).copied());
        let mut on_branch = false;
        let mut at = e["parentId"].as_str().and_then(|id| index.get(id).copied());
        let mut steps = 0;
        while let Some(p) = at.filter(|_| steps <= entries.len()) {
            steps += 1;
            if Some(p) == kept {
                on_branch = true;
                break;
            }
            at = entries[p]["parentId"]
                .as_str()
                .and_then(|id| index.get(id).copied());
        }
        assert!(
            on_branch,
            "{}: entry {i}'s firstKeptEntryId is not on its branch",
            file.display()
        );
    }
}

/// Replays the new entries of `file` (appends and compactions, in file order, one at a time)
/// on a fresh copy of the original, and returns the replayed file's entries.
fn replay(env: &Env, c: &mut Client, file: &Path, original: usize, name: &str) -> Vec<Value> {
    let entries = parsed_lines(file).expect("parse");
    let copy = env.session_as(CASE, &format!("replay-{name}"));
    let sid = open(c, &copy);
    c.ok(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"keepRecentTokens": KEEP_RECENT}}),
    );
    for e in &entries[original..] {
        match e["type"].as_str() {
            Some("message") => {
                c.ok(
                    "appendMessage",
                    json!({"sessionId": sid, "message": e["message"]}),
                );
            }
            Some("compaction") => {
                c.ok("compact", json!({"sessionId": sid}));
            }
            other => panic!("{name}: unexpected entry type {other:?} on file"),
        }
    }
    c.ok("closeSession", json!({"sessionId": sid}));
    parsed_lines(&copy).expect("parse replay")
}

#[test]
fn many_clients_mixed_operations_lose_nothing_and_match_a_sequential_replay() {
    let ops = if long_form() { LONG_OPS } else { SHORT_OPS };
    let env = Env::new();
    let original = std::fs::read(env.session_as(CASE, "original")).expect("read");
    let original_lines = original
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let shared: Vec<PathBuf> = (0..SHARED)
        .map(|i| env.session_as(CASE, &format!("shared-{i}")))
        .collect();
    let own: Vec<PathBuf> = (0..CLIENTS)
        .map(|i| env.session_as(CASE, &format!("own-{i:02}")))
        .collect();
    let socket = env.path("run/load.sock");
    std::fs::create_dir_all(env.path("run")).expect("run dir");
    let server = env.serve(&socket, &[]);
    // One observer sees every session's events.
    let mut observer = Client::socket(&socket, Framing::Ndjson);
    observer.ok("subscribe", json!({}));

    let started = Instant::now();
    let bound = Duration::from_secs(if long_form() { 1800 } else { 150 });
    let (tx, rx) = mpsc::channel();
    for (me, own_path) in own.iter().enumerate() {
        let (tx, socket, shared, own_path) =
            (tx.clone(), socket.clone(), shared.clone(), own_path.clone());
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(|| run_client(&socket, me, ops, &shared, own_path));
            let _ = tx.send((me, r));
        });
    }
    drop(tx);
    let mut reports: Vec<Report> = Vec::new();
    for _ in 0..CLIENTS {
        let left = bound.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok((_, Ok(r))) => reports.push(r),
            Ok((me, Err(p))) => std::panic::resume_unwind(Box::new(format!(
                "client {me} failed: {:?}",
                p.downcast_ref::<String>()
                    .map(String::as_str)
                    .or(p.downcast_ref::<&str>().copied())
            ))),
            Err(_) => panic!(
                "deadlock or stall: {} of {CLIENTS} clients finished within {bound:?}",
                reports.len()
            ),
        }
    }
    let elapsed = started.elapsed();
    let events = observer.drain(Duration::from_millis(500));
    drop(server);

    // Opened at the same moment by every client, each shared file is still one session.
    for r in &reports {
        assert_eq!(
            r.shared_ids, reports[0].shared_ids,
            "concurrent opens of one file gave different sessions"
        );
    }
    // Per file: what the clients were told.
    let mut acked: HashMap<PathBuf, Vec<(usize, String, String)>> = HashMap::new();
    let mut compacted: HashMap<PathBuf, usize> = HashMap::new();
    for (me, r) in reports.iter().enumerate() {
        for (p, m, id) in &r.appends {
            acked
                .entry(p.clone())
                .or_default()
                .push((me, m.clone(), id.clone()));
        }
        for (p, n) in &r.compactions {
            *compacted.entry(p.clone()).or_default() += n;
        }
    }
    let mut files_checked = 0;
    let mut replay_client = env.stdio(&[], Framing::Ndjson);
    for (i, file) in shared.iter().chain(own.iter()).enumerate() {
        let bytes = std::fs::read(file).expect("read");
        assert!(
            bytes.starts_with(&original),
            "{}: original bytes changed",
            file.display()
        );
        let entries = parsed_lines(file).unwrap_or_else(|e| panic!("{e}"));
        let new = &entries[original_lines..];
        // One linear branch.
        for (k, e) in new.iter().enumerate() {
            let prev = &entries[original_lines + k - 1];
            assert_eq!(
                e["parentId"],
                prev["id"],
                "{}: entry {} does not continue the branch",
                file.display(),
                original_lines + k
            );
        }
        let ids: HashSet<&str> = entries[1..]
            .iter()
            .filter_map(|e| e["id"].as_str())
            .collect();
        assert_eq!(
            ids.len(),
            entries.len() - 1,
            "{}: duplicate ids",
            file.display()
        );
        // Exactly the acknowledged appends, under their ids, in each client's order.
        let on_file: Vec<(&str, &str)> = new
            .iter()
            .filter(|e| e["type"] == "message")
            .map(|e| {
                (
                    marker_of(e).unwrap_or_else(|| panic!("foreign message {e}")),
                    e["id"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        let mine = acked.get(file).cloned().unwrap_or_default();
        let want: HashMap<&str, &str> = mine
            .iter()
            .map(|(_, m, id)| (m.as_str(), id.as_str()))
            .collect();
        assert_eq!(
            on_file.len(),
            want.len(),
            "{}: {} appends on file, {} acknowledged",
            file.display(),
            on_file.len(),
            want.len()
        );
        for (m, id) in &on_file {
            assert_eq!(want.get(m), Some(id), "{}: append {m}", file.display());
        }
        let pos: HashMap<&str, usize> = on_file
            .iter()
            .enumerate()
            .map(|(i, (m, _))| (*m, i))
            .collect();
        for me in 0..CLIENTS {
            let order: Vec<usize> = mine
                .iter()
                .filter(|(c, _, _)| *c == me)
                .map(|(_, m, _)| pos[m.as_str()])
                .collect();
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "{}: client {me}'s appends out of order",
                file.display()
            );
        }
        let compactions = new.iter().filter(|e| e["type"] == "compaction").count();
        assert_eq!(
            compactions,
            compacted.get(file).copied().unwrap_or(0),
            "{}: compactions on file vs acknowledged",
            file.display()
        );
        // Sequential replay: shared files always, own files a sample (all in the long form).
        if i < SHARED || long_form() || i % 8 == 0 {
            let replayed = replay(
                &env,
                &mut replay_client,
                file,
                original_lines,
                &format!("{i}"),
            );
            let (a, b) = (
                shape(&entries, original_lines),
                shape(&replayed, original_lines),
            );
            assert_eq!(a.len(), b.len(), "{}: replay length", file.display());
            compactions_are_sound(&entries, file);
            for (k, (x, y)) in a.iter().zip(&b).enumerate() {
                if let Some(d) = support::first_diff(x, y, &format!("entry {}", original_lines + k))
                {
                    panic!("{}: the replay differs: {d}", file.display());
                }
            }
            files_checked += 1;
        }
    }
    // Pi loads the shared files (the busiest ones) exactly as compactd does.
    if let Some(oracle) = Oracle::find("concurrency: Pi loads the shared files") {
        for file in &shared {
            let ours = env
                .inspect(file)
                .unwrap_or_else(|e| panic!("inspect {}: {e}", file.display()));
            oracle.agrees(file, &ours).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // Events: per session, starts and ends alternate; successful ends = acknowledged compactions.
    let mut per_session: HashMap<String, Vec<&Value>> = HashMap::new();
    for e in &events {
        if e["method"]
            .as_str()
            .is_some_and(|m| m.starts_with("compaction_"))
        {
            per_session
                .entry(
                    e["params"]["sessionId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
                .or_default()
                .push(e);
        }
    }
    let mut ok_ends = 0;
    for (sid, list) in &per_session {
        let mut open = false;
        for e in list {
            match e["method"].as_str() {
                Some("compaction_start") => {
                    assert!(!open, "session {sid}: compaction_start while one runs");
                    open = true;
                }
                Some("compaction_end") => {
                    assert!(open, "session {sid}: compaction_end without a start");
                    open = false;
                    if e["params"]["result"].is_object() {
                        ok_ends += 1;
                    }
                }
                _ => {}
            }
        }
        assert!(!open, "session {sid}: a compaction never ended");
    }
    let total_compactions: usize = compacted.values().sum();
    assert_eq!(
        ok_ends, total_compactions,
        "successful compaction_end events vs acknowledged"
    );
    let total_ops: usize = reports.iter().map(|r| r.ops).sum();
    let total_appends: usize = reports.iter().map(|r| r.appends.len()).sum();
    let refused: usize = reports.iter().map(|r| r.refused).sum();
    let aborts: usize = reports.iter().map(|r| r.aborts).sum();
    println!(
        "concurrency: {CLIENTS} clients x {ops} ops = {total_ops} operations in {elapsed:.1?}: {total_appends} appends acknowledged (all on file once, in order), {refused} refused during compactions, {total_compactions} compactions, {aborts} aborts; {} files checked, {files_checked} matched a sequential replay",
        SHARED + CLIENTS
    );
}

/// Swaps the names of `a` and `b` atomically (`renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &Path, b: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (ca, cb) = (
        std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap(),
        std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: two valid C strings; the result is checked.
    unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        ) == 0
    }
}

/// A rename race: another process keeps swapping the session file with a different file
/// (`RENAME_EXCHANGE`) while a client appends, reopening whenever it is told the file changed.
/// The stamp check and the write used to open the path separately, so a swap between the two
/// put an acknowledged entry into the other file, under a parent that file does not have. Now
/// the check is made on the descriptor written to. Afterwards every acknowledged entry is on
/// file exactly once, in a file that holds its parent before it.
#[test]
fn a_rename_race_never_puts_an_acknowledged_entry_in_the_wrong_file() {
    let env = Env::new();
    let a = env.session_as(CASE, "race-a");
    let b = env.session_as(CASE, "race-b");
    // Diverge the two, so an entry in the wrong file has no parent there.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&b).unwrap();
        writeln!(f, "{}", json!({"type":"label","id":"bonly001","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","targetId":"x","label":"b"})).unwrap();
    }
    let mut c = env.stdio(&[], Framing::Ndjson);
    let mut sid = open(&mut c, &a);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (a, b, stop) = (a.clone(), b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if exchange(&a, &b) {
                    n += 1;
                }
                // Pacing, not waiting: the swaps go on throughout the appends.
                std::thread::sleep(Duration::from_micros(200));
            }
            n
        })
    };
    let mut acked: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(6);
    let mut i = 0;
    while Instant::now() < deadline && acked.len() < 400 {
        i += 1;
        let r = c.request(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": format!("race {i}"), "timestamp": now_ms()}}),
        );
        match r {
            Ok(v) => acked.push(v["entryId"].as_str().unwrap().to_owned()),
            Err(e) if e["data"]["kind"] == "file_changed" => {
                sid = open(&mut c, &a);
            }
            Err(e) if e["data"]["kind"] == "file_busy" => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 10, "the race ran ({swaps} swaps)");
    assert!(acked.len() > 20, "appends got through ({})", acked.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for file in [&a, &b] {
        let entries = parsed_lines(file).unwrap_or_else(|e| panic!("{e}"));
        let mut ids: HashSet<String> = HashSet::new();
        for e in &entries {
            let id = e["id"].as_str().unwrap_or("").to_owned();
            if acked.contains(&id) {
                *seen.entry(id.clone()).or_default() += 1;
                let parent = e["parentId"].as_str().unwrap_or("");
                assert!(
                    ids.contains(parent),
                    "{}: entry {id} is written under parent {parent}, which this file does not hold before it",
                    file.display()
                );
            }
            ids.insert(id);
        }
    }
    for id in &acked {
        assert_eq!(
            seen.get(id),
            Some(&1),
            "acknowledged entry {id} on file once"
        );
    }
}

/// A field of `/proc/<pid>/status` in KiB (`VmHWM` is the peak resident size).
fn proc_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `searchHistory` over a session with one very large entry (a 24 MB tool output): the search
/// used to build each entry's value tree, its text, and a lowered copy with a char-offset table
/// (~19x the entry at the peak), all while holding the session's lock, so an append from another
/// client waited for the whole search. Now the text is read from the line's bytes and matched
/// without copies, outside the lock: the daemon's peak memory grows by a small multiple of the
/// entry, and the append is answered while the search still runs.
#[test]
fn search_history_over_huge_entries_is_bounded_and_never_delays_appends() {
    let env = Env::new();
    let file = env.session_as(CASE, "huge");
    let last = parsed_lines(&file).unwrap().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    {
        use std::io::Write;
        let text = "output line with words ".repeat(24 * 1024 * 1024 / 23);
        let line = json!({"type":"message","id":"huge0001","parentId":last,"timestamp":"2026-01-01T00:00:00.000Z",
            "message":{"role":"toolResult","toolCallId":"call_huge","toolName":"bash","content":[{"type":"text","text":text}],"isError":false,"timestamp":1}});
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
    let socket = env.path("run/h.sock");
    let daemon = env.serve_ready(&socket, &[], std::process::Stdio::null());
    let pid = daemon.0.id();
    let stream = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    let searcher_socket = stream.try_clone().expect("clone");
    let mut searcher = Client::over(stream, Framing::Ndjson);
    let sid = open(&mut searcher, &file);
    let mut writer = Client::socket(&socket, Framing::Ndjson);
    let sid2 = open(&mut writer, &file);
    assert_eq!(sid, sid2);
    // The peak so far, once the opens' work is over.
    settled_rss_kib(pid, Duration::from_millis(50), Duration::from_secs(60));
    let base = proc_kib(pid, "VmHWM:");
    let (tx, rx) = mpsc::channel();
    let search_id = searcher.send(
        "searchHistory",
        json!({"sessionId": sid, "query": "NO SUCH NEEDLE anywhere"}),
    );
    let search = std::thread::spawn(move || {
        let r = searcher.wait(search_id, Duration::from_secs(60));
        tx.send(Instant::now()).unwrap();
        r
    });
    // The daemon read the search request: it runs from now on.
    wait_until(
        Duration::from_secs(60),
        "the daemon read the search",
        || unread_by_peer(&searcher_socket) == 0,
    );
    let appended = writer.request(
        "appendMessage",
        json!({"sessionId": sid2, "message": {"role": "user", "content": "during the search", "timestamp": now_ms()}}),
    );
    let append_done = Instant::now();
    assert!(appended.is_ok(), "{appended:?}");
    let hits = search.join().unwrap().expect("search answered");
    let search_done = rx.recv().unwrap();
    assert_eq!(hits, json!([]), "nothing matches");
    assert!(
        append_done < search_done,
        "the append was answered while the search ran ({:?} before its end)",
        search_done.saturating_duration_since(append_done)
    );
    let grown = proc_kib(pid, "VmHWM:").saturating_sub(base);
    println!("searchHistory over a 24 MB entry: peak RSS +{grown} KiB; append answered {:?} before the search ended", search_done.saturating_duration_since(append_done));
    assert!(
        grown < 120_000,
        "peak memory grew by {grown} KiB searching a 24 MB entry"
    );
    // The hit path still works on the huge entry.
    let hits = writer.ok(
        "searchHistory",
        json!({"sessionId": sid2, "query": "OUTPUT LINE", "limit": 1}),
    );
    assert_eq!(hits[0]["entryId"], "huge0001", "{hits}");
}
