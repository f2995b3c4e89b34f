//! Crash safety: `kill -9` of the real daemon at random moments, during streams of appends,
//! during an extractive compaction, and during an LLM compaction whose provider stalls.
//!
//! After every kill the session file must hold every append the daemon acknowledged, in the
//! order sent, each exactly once; no complete line may be malformed, and only the line being
//! written at the kill may be cut (never an acknowledged one; Linux can stop a write between
//! two pages: see `split_torn`), and the next daemon must repair it; every parent must precede
//! its child; an acknowledged compaction must be there and an unacknowledged LLM compaction must
//! not; `compactd inspect --json` must load the file, the next daemon must open it (the lock
//! died with the process), and Pi (the oracle) must load it exactly as compactd does.
//!
//! Short form (CI): [`SHORT_KILLS`] kills in a few seconds. Long form: `COMPACTD_LONG_TESTS=1`
//! runs [`LONG_KILLS`].

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use support::daemon_env::{entry_lines, keep_recent, now_ms, open, parsed_lines, Env};
use support::fake_llm;
use support::oracle::Oracle;
use support::rpc_client::{Client, Framing};

const SHORT_KILLS: usize = 15;
const LONG_KILLS: usize = 150;
const LONG: Duration = Duration::from_secs(60);

fn long_form() -> bool {
    std::env::var("COMPACTD_LONG_TESTS").as_deref() == Ok("1")
}

/// A deterministic xorshift, so a failing iteration can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The marker text of message `n`, unique in the file.
fn marker(n: usize) -> String {
    format!("crash-msg-{n:06}")
}

/// Message `n`: users and assistants alternate; ~300 characters so compactions have work.
fn message(n: usize) -> Value {
    let text = format!("{} {}", marker(n), "lorem ipsum dolor sit amet ".repeat(11));
    if n.is_multiple_of(2) {
        json!({"role": "user", "content": text, "timestamp": now_ms()})
    } else {
        json!({"role": "assistant", "content": [{"type": "text", "text": text}],
               "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
               "usage": {"input": 10, "output": 80, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 90,
                         "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
               "stopReason": "stop", "timestamp": now_ms()})
    }
}

/// The marker of an entry written by this suite, if it is one.
fn marker_of(entry: &Value) -> Option<String> {
    let m = &entry["message"];
    let text = m["content"]
        .as_str()
        .or_else(|| m["content"][0]["text"].as_str())?;
    text.strip_prefix("crash-msg-")
        .map(|rest| format!("crash-msg-{}", &rest[..rest.len().min(6)]))
}

/// What the suite sent and what the daemon acknowledged, across all daemon lives.
#[derive(Default)]
struct Ledger {
    /// Markers in the order their appends were sent.
    sent: Vec<String>,
    /// Acknowledged appends: marker → entry id.
    acked: HashMap<String, String>,
    /// Acknowledged compaction entry ids.
    compactions: Vec<String>,
    kills: usize,
    kills_in_llm_compaction: usize,
    kills_in_extractive_compaction: usize,
    pi_checks: usize,
    /// Lines a kill cut mid-write (see [`split_torn`]): each must be an unacknowledged append
    /// and, once the next daemon repaired it, stays in the file as one malformed line.
    torn: Vec<Vec<u8>>,
}

impl Ledger {
    /// Sends appends `from..to`, pipelined, tolerating a daemon that dies meanwhile; returns the
    /// request ids with their markers.
    fn send_appends(
        &mut self,
        c: &mut Client,
        sid: &str,
        from: usize,
        to: usize,
    ) -> Vec<(u64, String)> {
        let mut ids = Vec::new();
        for n in from..to {
            let Some(id) = c.try_send(
                "appendMessage",
                json!({"sessionId": sid, "message": message(n)}),
            ) else {
                break;
            };
            self.sent.push(marker(n));
            ids.push((id, marker(n)));
        }
        ids
    }

    /// Sends appends `from..to` and waits for every answer (the daemon is not killed
    /// meanwhile), recording the acknowledgements.
    fn appends_answered(&mut self, c: &mut Client, sid: &str, from: usize, to: usize) {
        let appends = self.send_appends(c, sid, from, to);
        for (id, _) in &appends {
            c.wait(*id, LONG).expect("append");
        }
        self.record(&c.log.clone(), &appends, None);
    }

    /// Records the acknowledgements among `responses`.
    fn record(&mut self, responses: &[Value], appends: &[(u64, String)], compact: Option<u64>) {
        let by_id: HashMap<u64, &String> = appends.iter().map(|(i, m)| (*i, m)).collect();
        for r in responses {
            let Some(id) = r["id"].as_u64() else { continue };
            let Some(result) = r.get("result") else {
                continue;
            };
            if let Some(m) = by_id.get(&id) {
                let entry = result["entryId"].as_str().expect("entryId").to_owned();
                self.acked.insert((*m).clone(), entry);
            } else if Some(id) == compact {
                // A compaction's reply carries the result, not the entry id: find it in the file.
                self.compactions.push(String::new());
            }
        }
    }
}

/// The file's bytes split at the end of its last complete line: the lines, and what follows.
///
/// A kill can cut the line being written. Linux copies a write into the page cache a page at a
/// time and checks for a fatal signal before each page, so SIGKILL can stop a line that
/// crosses a page boundary of the file part-way (no system call appends a line whole under
/// SIGKILL). Such a line was never acknowledged; the next daemon repairs it on open as Pi
/// does (a newline ends it, and it reads as one malformed line, skipped by every reader).
fn split_torn(bytes: &[u8]) -> (&[u8], &[u8]) {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes.split_at(complete)
}

/// The entries of the complete lines `lines`; a line that is not JSON must be a torn line of
/// an earlier kill that a daemon repaired (`torn`).
fn entries_of(lines: &[u8], torn: &[Vec<u8>]) -> Result<Vec<Value>, String> {
    entry_lines(lines, |line| torn.iter().any(|t| t.as_slice() == line))
        .map_err(|e| format!("{e} (no kill tore it)"))
}

/// Everything a file must satisfy after a kill; returns the file's entries. A line the kill
/// cut mid-write is recorded in the ledger (it must start like an entry and must not be an
/// acknowledged append).
fn verify(env: &Env, file: &Path, ledger: &mut Ledger, oracle: Option<&Oracle>) -> Vec<Value> {
    let bytes = std::fs::read(file).expect("read the session file");
    let (lines, tail) = split_torn(&bytes);
    if !tail.is_empty() {
        const START: &[u8] = b"{\"type\":";
        assert!(
            tail.starts_with(START) || START.starts_with(tail),
            "after kill {}: the unfinished last line does not start an entry: {:?}",
            ledger.kills,
            String::from_utf8_lossy(&tail[..tail.len().min(120)])
        );
        ledger.torn.push(tail.to_vec());
    }
    let entries = entries_of(lines, &ledger.torn)
        .unwrap_or_else(|e| panic!("after kill {}: {e}", ledger.kills));
    let mut ids = HashSet::new();
    let mut seen_markers = Vec::new();
    for (i, e) in entries.iter().enumerate().skip(1) {
        let id = e["id"]
            .as_str()
            .unwrap_or_else(|| panic!("line {}: no id: {e}", i + 1));
        assert!(ids.insert(id.to_owned()), "duplicate entry id {id}");
        if let Some(p) = e["parentId"].as_str() {
            assert!(
                ids.contains(p),
                "line {}: parent {p} does not precede its child",
                i + 1
            );
        }
        if let Some(m) = marker_of(e) {
            seen_markers.push(m);
        }
    }
    // The appends on file are the sent ones, in order, each once (a prefix-closed subsequence:
    // only unacknowledged appends may be missing).
    let mut unique = HashSet::new();
    for m in &seen_markers {
        assert!(unique.insert(m.clone()), "append {m} written twice");
    }
    let position: HashMap<&String, usize> = ledger
        .sent
        .iter()
        .enumerate()
        .map(|(i, m)| (m, i))
        .collect();
    let mut last = None;
    for m in &seen_markers {
        let p = position
            .get(m)
            .unwrap_or_else(|| panic!("{m} on file but never sent"));
        assert!(last < Some(*p), "append {m} out of order");
        last = Some(*p);
    }
    let by_id: HashMap<&str, &Value> = entries
        .iter()
        .filter_map(|e| e["id"].as_str().map(|id| (id, e)))
        .collect();
    for (m, id) in &ledger.acked {
        let e = by_id
            .get(id.as_str())
            .copied()
            .unwrap_or_else(|| panic!("acknowledged append {m} (entry {id}) lost"));
        assert_eq!(
            marker_of(e).as_ref(),
            Some(m),
            "entry {id} holds another append"
        );
    }
    let compactions = entries.iter().filter(|e| e["type"] == "compaction").count();
    assert!(
        compactions >= ledger.compactions.len(),
        "{} compactions acknowledged, {compactions} on file",
        ledger.compactions.len()
    );
    let ours = env
        .inspect(file)
        .unwrap_or_else(|e| panic!("compactd inspect cannot load the file: {e}"));
    let last_id = entries.last().and_then(|e| e["id"].as_str());
    assert_eq!(
        ours["session"]["leafId"].as_str(),
        last_id,
        "leaf is the last entry"
    );
    if let Some(o) = oracle {
        o.agrees(file, &ours).unwrap_or_else(|e| panic!("{e}"));
    }
    entries
}

/// Kills the daemon after `delay`, from another thread while requests are still being written.
fn kill_after(c: &Client, delay: Duration) -> std::thread::JoinHandle<()> {
    let pid = c.pid().expect("spawned daemon");
    std::thread::spawn(move || {
        // The behaviour under test: a kill at an arbitrary moment of the work, not a wait.
        std::thread::sleep(delay);
        let _ = std::process::Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status();
    })
}

#[test]
fn kill_9_during_appends_and_compactions_loses_nothing_acknowledged() {
    let kills = if long_form() { LONG_KILLS } else { SHORT_KILLS };
    let oracle = Oracle::find("crash: Pi loads the file after kills");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // A provider that never answers: the LLM compaction is always in flight when killed.
    let fake = rt.block_on(fake_llm::start(vec![("NEVER".into(), "stop".into()); 4]));
    fake.state.lock().delay = Duration::from_secs(3600);
    let env = Env::new();
    let file = env.session_as("009-bash-executions", "crash");
    let mut ledger = Ledger::default();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut next = 0usize;
    for i in 0..kills {
        let mode = i % 3;
        if mode == 2 {
            env.write_config(&format!(
                "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"fake-gpt\"\nretry = {{ enabled = false }}\n",
                fake.port
            ));
        } else {
            env.remove_config();
        }
        let mut c = env.stdio(&[], Framing::Ndjson);
        // The previous daemon died holding the session: its lock must be gone.
        let sid = open(&mut c, &file);
        keep_recent(&mut c, &sid, 1000);
        match mode {
            0 => {
                // A stream of appends, killed part-way.
                let killer = kill_after(&c, Duration::from_millis(5 + rng.below(60)));
                let appends = ledger.send_appends(&mut c, &sid, next, next + 300);
                next += 300;
                killer.join().expect("killer");
                let responses = c.drain(Duration::from_millis(200));
                ledger.record(&responses, &appends, None);
            }
            1 => {
                // Appends, an extractive compaction, more appends; killed somewhere in there.
                let before = ledger.send_appends(&mut c, &sid, next, next + 20);
                next += 20;
                for (id, _) in &before {
                    let _ = c.wait(*id, LONG);
                }
                let mut responses: Vec<Value> = c.log.clone();
                // Spread over the compaction's duration (150-300 ms in a debug build): before, during, after.
                let killer = kill_after(&c, Duration::from_millis((i as u64 / 3 * 97) % 500));
                let compact = c.try_send("compact", json!({"sessionId": sid}));
                let mut appends = ledger.send_appends(&mut c, &sid, next, next + 100);
                next += 100;
                appends.extend(before);
                killer.join().expect("killer");
                responses.extend(c.drain(Duration::from_millis(200)));
                ledger.record(&responses, &appends, compact);
                ledger.kills_in_extractive_compaction += 1;
            }
            _ => {
                // An LLM compaction stuck on its provider: killed while it waits.
                ledger.appends_answered(&mut c, &sid, next, next + 20);
                next += 20;
                c.ok("subscribe", json!({"sessionId": sid}));
                let settled = std::fs::read(&file).expect("read");
                let compact = c.send("compact", json!({"sessionId": sid}));
                c.wait_notification("compaction_start", LONG)
                    .expect("compaction_start");
                // A random moment of the stalled compaction to kill it at (behaviour, not a
                // wait: the start was already seen).
                std::thread::sleep(Duration::from_millis(rng.below(50)));
                c.kill();
                let responses = c.drain(Duration::from_millis(100));
                assert!(
                    !responses.iter().any(|r| r["id"] == compact),
                    "the stalled compaction cannot have answered"
                );
                assert_eq!(
                    std::fs::read(&file).expect("read"),
                    settled,
                    "a compaction in flight at the kill wrote to the file"
                );
                ledger.kills_in_llm_compaction += 1;
            }
        }
        c.kill();
        ledger.kills += 1;
        // Pi is slow to start: it checks every fifth file and the last one.
        let check_pi = i % 5 == 4 || i + 1 == kills;
        verify(
            &env,
            &file,
            &mut ledger,
            oracle.as_ref().filter(|_| check_pi),
        );
        ledger.pi_checks += usize::from(check_pi && oracle.is_some());
        if ledger.kills % 25 == 0 {
            eprintln!(
                "crash: {} kills, {} appends acknowledged so far",
                ledger.kills,
                ledger.acked.len()
            );
        }
    }
    // One more daemon life: it opens the file and appends after the last kill.
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    let r = c.ok(
        "appendMessage",
        json!({"sessionId": sid, "message": message(next)}),
    );
    ledger.sent.push(marker(next));
    ledger.acked.insert(
        marker(next),
        r["entryId"].as_str().expect("entryId").to_owned(),
    );
    drop(c);
    let last = std::fs::read(&file).expect("read the session file");
    assert!(
        split_torn(&last).1.is_empty(),
        "the last daemon left a torn line unrepaired"
    );
    let on_file = verify(&env, &file, &mut ledger, oracle.as_ref())
        .iter()
        .filter(|e| e["type"] == "compaction")
        .count();
    ledger.pi_checks += usize::from(oracle.is_some());
    println!(
        "crash: {} kills survived ({} during extractive compaction, {} during a stalled LLM compaction); {} appends sent, {} acknowledged, all present; {} compactions acknowledged, {on_file} on file; {} unacknowledged lines cut mid-write and repaired; Pi loaded the file {} times",
        ledger.kills,
        ledger.kills_in_extractive_compaction,
        ledger.kills_in_llm_compaction,
        ledger.sent.len(),
        ledger.acked.len(),
        ledger.compactions.len(),
        ledger.torn.len(),
        ledger.pi_checks
    );
    assert!(
        ledger.acked.len() > kills,
        "too few appends were acknowledged to prove anything"
    );
}

/// What a kill that cuts a line mid-write leaves (a page's worth of it on file, no newline:
/// see [`split_torn`]), made on purpose, since real kills land there rarely: the suite's checks
/// take it as an unacknowledged line, the next daemon repairs it without touching a byte before
/// it, appends after it, and neither compactd nor Pi loses an acknowledged entry.
#[test]
fn a_line_cut_by_a_kill_is_repaired_by_the_next_daemon_and_nothing_acknowledged_is_lost() {
    let oracle = Oracle::find("crash: Pi loads a file with a line cut by a kill");
    let env = Env::new();
    let file = env.session_as("009-bash-executions", "torn");
    let mut ledger = Ledger::default();
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    ledger.appends_answered(&mut c, &sid, 0, 3);
    c.kill();
    ledger.kills += 1;
    // The next line the daemon would have written, cut part-way.
    let intact = std::fs::read(&file).expect("read the session file");
    let (lines, _) = split_torn(&intact);
    let last_line = lines[..lines.len() - 1]
        .rsplit(|&b| b == b'\n')
        .next()
        .expect("a last line");
    let cut = last_line[..last_line.len() / 2].to_vec();
    let mut torn = intact.clone();
    torn.extend_from_slice(&cut);
    std::fs::write(&file, &torn).expect("write the cut line");
    verify(&env, &file, &mut ledger, oracle.as_ref());
    assert_eq!(ledger.torn, vec![cut.clone()], "the cut line is recorded");

    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    ledger.appends_answered(&mut c, &sid, 3, 5);
    drop(c);
    let after = std::fs::read(&file).expect("read the session file");
    assert!(
        after.starts_with(&torn) && after.get(torn.len()) == Some(&b'\n'),
        "the repair adds a newline after the cut line and changes nothing before it"
    );
    assert!(split_torn(&after).1.is_empty(), "every line is whole again");
    verify(&env, &file, &mut ledger, oracle.as_ref());
    assert_eq!(ledger.acked.len(), 5, "all five appends acknowledged");
    // The suite's checks do fail on a malformed line no kill made.
    let mut foreign = after.clone();
    foreign.extend_from_slice(b"{\"type\":\"message\",\"id\":\n");
    let (lines, _) = split_torn(&foreign);
    assert!(entries_of(lines, &ledger.torn).is_err());
}

/// Sends `signal` (a `kill -s` name) to `pid`, and returns once the process took it (handled
/// it, or died of it): what the caller checks next is then the signal's effect.
fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args(["-s", name, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -s {name} {pid}");
    let signo = match name {
        "HUP" => libc::SIGHUP,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        other => panic!("no signal number for {other}"),
    };
    support::wait_until(
        Duration::from_secs(10),
        &format!("process {pid} takes SIG{name}"),
        || !support::signal_pending(pid, signo),
    );
}

/// SIGHUP (a closed terminal, a log rotation's `kill -HUP`), SIGUSR1 and SIGUSR2 terminate a
/// process by default; the daemon ignores them (logged), over stdio and on a socket, and keeps
/// its sessions and its clients.
#[test]
fn hup_and_usr_signals_never_kill_the_daemon() {
    let env = Env::new();
    let file = env.session_as("005-medium-basic", "signals");
    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    let pid = c.pid().expect("spawned daemon");
    for name in ["HUP", "USR1", "USR2"] {
        signal(pid, name);
        let r = c.request(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": format!("after {name}"), "timestamp": now_ms()}}),
        );
        assert!(r.is_ok(), "stdio daemon answers after SIG{name}: {r:?}");
    }
    let socket = env.path("run/signals.sock");
    let mut daemon = env.serve_ready(&socket, &[], std::process::Stdio::null());
    let mut s = Client::socket(&socket, Framing::Ndjson);
    s.ok("listSessions", json!({}));
    for name in ["HUP", "USR1", "USR2"] {
        signal(daemon.0.id(), name);
        assert!(
            daemon.0.try_wait().expect("wait").is_none(),
            "serve survives SIG{name}"
        );
        s.ok("listSessions", json!({}));
    }
}

/// A small tmpfs mounted at a directory for the test's life (unmounted, lazily, on drop).
struct SmallDisk {
    dir: std::path::PathBuf,
}

impl SmallDisk {
    /// Mounts a `size` tmpfs at `dir`, or `None` after skip-or-fail when mounting is not
    /// permitted (not root, no `CAP_SYS_ADMIN`).
    fn mount(test: &str, dir: &Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).expect("mount point");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk {
                dir: dir.to_path_buf(),
            }),
            Ok(o) => {
                support::skip_or_fail(
                    test,
                    &format!(
                        "cannot mount a tmpfs: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ),
                );
                None
            }
            Err(e) => {
                support::skip_or_fail(test, &format!("cannot run mount: {e}"));
                None
            }
        }
    }

    /// Fills every free byte with `filler`: page-sized writes, then single bytes into the last
    /// page, until the file system says ENOSPC.
    fn fill(&self, filler: &Path) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(filler)
            .expect("filler");
        let page = vec![b'x'; 4096];
        loop {
            match f.write(&page) {
                Ok(n) if n == page.len() => {}
                Ok(_) => break,
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                    break;
                }
            }
        }
        while f.write(b"x").is_ok_and(|n| n == 1) {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

/// Pads `file` with one valid Pi `custom` entry (under `parent`) so its length leaves `slack`
/// bytes free in its last page: any later line needs a new page, which a full disk refuses.
fn pad_to_page(file: &Path, parent: &str, slack: u64) {
    use std::io::Write;
    let len = std::fs::metadata(file).unwrap().len();
    let mk = |n: usize| {
        json!({"type":"custom","customType":"pad","data":"p".repeat(n),"id":"pad00001","parentId":parent,"timestamp":"2026-01-01T00:00:00.000Z"}).to_string() + "\n"
    };
    let base = mk(0).len() as u64;
    let target = (len + base + slack).div_ceil(4096) * 4096 + 4096 - slack;
    let line = mk((target - len - base) as usize);
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    f.write_all(line.as_bytes()).unwrap();
    assert_eq!(std::fs::metadata(file).unwrap().len() % 4096, 4096 - slack);
}

fn io_enospc(err: &Value) {
    assert_eq!(err["data"]["kind"], "io", "{err}");
    let msg = err["message"].as_str().unwrap_or("");
    assert!(msg.contains("ENOSPC"), "the error names ENOSPC: {msg}");
}

/// Disk full, on a small tmpfs: an append that does not fit (a 64 KiB message, written partly
/// into the file's last page before ENOSPC), a compaction, a new session's first write and a
/// migration's backup all fail with an `io` error naming ENOSPC and leave every file
/// byte-identical (the old append left the fragment, which the next line — ours or another
/// writer's — was glued onto). Once space is back the next writes work and every line parses.
#[test]
fn a_full_disk_leaves_files_byte_identical_and_the_next_write_works() {
    const TEST: &str = "crash: disk full on a small tmpfs";
    let env = Env::new();
    let Some(disk) = SmallDisk::mount(TEST, &env.path("small"), "2m") else {
        return;
    };
    let file = disk.dir.join("full.jsonl");
    std::fs::copy(env.session("005-medium-basic"), &file).unwrap();
    let last = parsed_lines(&file).unwrap().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    pad_to_page(&file, &last, 1000);
    let v1 = disk.dir.join("old.jsonl");
    let mut old = String::from("{\"type\":\"session\",\"id\":\"x\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n");
    for i in 0..40 {
        old.push_str(&format!("{{\"type\":\"message\",\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{i} {}\",\"timestamp\":1}}}}\n", "v1 ".repeat(100)));
    }
    std::fs::write(&v1, &old).unwrap();

    let mut c = env.stdio(&[], Framing::Ndjson);
    let sid = open(&mut c, &file);
    let created = c.ok(
        "createSession",
        json!({"cwd": "/w", "sessionDir": disk.dir.join("new"), "model": support::daemon_env::model()}),
    );
    let new_sid = created["sessionId"].as_str().unwrap().to_owned();
    let new_path = std::path::PathBuf::from(created["path"].as_str().unwrap());
    c.ok(
        "appendMessage",
        json!({"sessionId": new_sid, "message": {"role": "user", "content": "hi", "timestamp": now_ms()}}),
    );
    let filler = disk.dir.join("filler");
    disk.fill(&filler);
    let before = std::fs::read(&file).unwrap();

    let big = json!({"role": "user", "content": "z".repeat(64 * 1024), "timestamp": now_ms()});
    let err = c
        .request("appendMessage", json!({"sessionId": sid, "message": big}))
        .expect_err("a full disk refuses the append");
    let after = std::fs::read(&file).unwrap();
    assert!(
        after == before,
        "byte-identical after a failed append ({} bytes before, {} after)",
        before.len(),
        after.len()
    );
    io_enospc(&err);
    let err = c
        .request("compact", json!({"sessionId": sid}))
        .expect_err("a full disk refuses the compaction entry");
    assert!(
        err["message"].as_str().unwrap_or("").contains("ENOSPC"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "byte-identical after a failed compaction"
    );
    let reply = json!({"role": "assistant", "content": [{"type": "text", "text": "y".repeat(8192)}],
        "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
        "usage": support::daemon_env::usage(100), "stopReason": "stop", "timestamp": now_ms()});
    let err = c
        .request(
            "appendMessage",
            json!({"sessionId": new_sid, "message": reply}),
        )
        .expect_err("a full disk refuses the new session's first write");
    io_enospc(&err);
    assert!(!new_path.exists(), "no half-written new file is left");
    let err = c
        .request(
            "openSession",
            json!({"path": v1, "model": support::daemon_env::model()}),
        )
        .expect_err("a full disk refuses the migration");
    assert_eq!(err["data"]["kind"], "io", "{err}");
    assert!(
        err["message"].as_str().unwrap_or("").contains("ENOSPC"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&v1).unwrap(),
        old,
        "the v1 file is untouched"
    );
    let strays: Vec<_> = std::fs::read_dir(&disk.dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".bak") || n.ends_with(".tmp"))
        .collect();
    assert!(
        strays.is_empty(),
        "no partial backup or temp file: {strays:?}"
    );

    // Space is back: another writer's complete line lands whole, and our writes work again.
    std::fs::remove_file(&filler).unwrap();
    let theirs = json!({"type":"message","id":"pi000001","parentId":"pad00001","timestamp":"2026-01-01T00:00:00.000Z",
        "message":{"role":"user","content":"from pi","timestamp":2}})
    .to_string();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        writeln!(f, "{theirs}").unwrap();
    }
    let r = c.ok("appendMessage", json!({"sessionId": sid, "message": big}));
    let ours = r["entryId"].as_str().unwrap().to_owned();
    c.ok("compact", json!({"sessionId": sid}));
    c.ok(
        "appendMessage",
        json!({"sessionId": new_sid, "message": reply}),
    );
    c.ok(
        "openSession",
        json!({"path": v1, "model": support::daemon_env::model()}),
    );
    let entries = parsed_lines(&file).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read(&file).unwrap();
    assert_eq!(
        &text[..before.len()],
        &before[..],
        "nothing before was rewritten"
    );
    let i = entries
        .iter()
        .position(|e| e["id"] == "pi000001")
        .expect("their line, whole");
    assert_eq!(entries[i + 1]["id"], json!(ours));
    assert_eq!(entries[i + 1]["parentId"], "pi000001");
    assert_eq!(entries.last().unwrap()["type"], "compaction");
    parsed_lines(&new_path).unwrap_or_else(|e| panic!("{e}"));
    drop(c);
}
