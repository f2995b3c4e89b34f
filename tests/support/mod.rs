//! Shared helpers for integration tests: locating fixtures (and failing in CI when they are
//! missing), comparing JSON with useful diffs, the fake provider and the RPC client.
#![allow(dead_code)]

pub mod compact;
pub mod daemon_env;
pub mod fake_llm;
pub mod oracle;
pub mod other_user;
pub mod postgres;
pub mod rpc_client;
pub mod small_sessions;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use compactd::compaction::tokens::CompactionSettings;
use compactd::session::{read_session, ReadOutcome, SessionTree};

use serde_json::Value;

/// Fields of `expected.json` that the analysis (`compactd::report::inspect`) produces, all
/// compared exactly with Pi.
pub const ANALYSIS_FIELDS: [&str; 12] = [
    "session",
    "context",
    "messageTokenEstimates",
    "estimate",
    "lastAssistantUsage",
    "usageContextTokens",
    "shouldCompact",
    "shouldCompactByWindow",
    "cutPoint",
    "preparation",
    "preparationNullReason",
    "serialized",
];

/// The version of Pi's rules, and of the recordings made under them.
pub use compactd::pi_version::PiVersion;

#[path = "../../src/test_fixtures.rs"]
mod fixtures;
#[allow(unused_imports)]
pub use fixtures::{
    case_file, cases_env_var, cases_of, cases_with, conformance_cases, in_ci, skip_or_fail,
};

/// Every case directory of Pi `pi`'s set with an `expected.json`, sorted; never empty (an absent
/// or empty cases directory fails here, in CI and on a developer machine alike, since these
/// suites need it).
pub fn case_dirs(pi: PiVersion) -> Vec<PathBuf> {
    let dir = conformance_cases(pi);
    let cases = cases_of(
        pi,
        &format!("Pi {} conformance cases", pi.as_str()),
        "expected.json",
    );
    assert!(
        !cases.is_empty(),
        "no conformance cases in {}",
        dir.display()
    );
    cases
}

/// Every request of `api` that Pi 0.85.0 sent while its cases were recorded, with its case
/// name; never empty when the cases exist (a fixture comparison over nothing would prove
/// nothing), empty after [`skip_or_fail`] when they do not.
pub fn recorded_requests(api: &str) -> Vec<(String, Value)> {
    let test = format!("recorded {api} requests");
    let cases = cases_of(PiVersion::V0_85, &test, "llm-requests.json");
    if cases.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for case in cases {
        let v = read_json(&case.join("llm-requests.json"));
        if let Some(reqs) = v.get(api).and_then(Value::as_array) {
            let name = case
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for r in reqs {
                out.push((name.clone(), r.clone()));
            }
        }
    }
    assert!(
        !out.is_empty(),
        "no recorded {api} requests in {}",
        conformance_cases(PiVersion::V0_85).display()
    );
    out
}

pub fn read_json(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Deep JSON equality where numbers compare by value (`1` == `1.0`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// The first path at which two values differ, for failure messages.
pub fn first_diff(a: &Value, b: &Value, at: &str) -> Option<String> {
    if json_eq(a, b) {
        return None;
    }
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if let Some(d) = first_diff(p, q, &format!("{at}[{i}]")) {
                    return Some(d);
                }
            }
            Some(format!("{at}: array length {} vs {}", x.len(), y.len()))
        }
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => {
                        if let Some(d) = first_diff(v, w, &format!("{at}.{k}")) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{at}.{k}: missing on the right")),
                }
            }
            for k in y.keys() {
                if !x.contains_key(k) {
                    return Some(format!("{at}.{k}: missing on the left"));
                }
            }
            None
        }
        _ => {
            let s = |v: &Value| {
                let t = v.to_string();
                if t.len() > 300 {
                    format!(
                        "{}…",
                        &t[..t.char_indices().nth(300).map_or(t.len(), |(i, _)| i)]
                    )
                } else {
                    t
                }
            };
            Some(format!("{at}: got {} expected {}", s(a), s(b)))
        }
    }
}

/// Replaces every string equal to a key of `map` by its value (for random migration ids).
pub fn rename_strings(v: &mut Value, map: &std::collections::HashMap<String, String>) {
    match v {
        Value::String(s) => {
            if let Some(r) = map.get(s.as_str()) {
                *s = r.clone();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rename_strings(x, map)),
        Value::Object(o) => o.values_mut().for_each(|x| rename_strings(x, map)),
        _ => {}
    }
}

pub fn settings_of(expected: &Value) -> CompactionSettings {
    let s = &expected["inputs"]["settings"];
    CompactionSettings {
        enabled: s["enabled"].as_bool().unwrap_or(true),
        reserve_tokens: s["reserveTokens"].as_i64().unwrap_or(16384),
        keep_recent_tokens: s["keepRecentTokens"].as_i64().unwrap_or(20000),
    }
}

/// Loads a case's session; for v1 files (whose migration draws random ids) also returns the map
/// from compactd's ids to the oracle's deterministic `c0000001…` ids, in generation order.
pub fn load_case(dir: &Path) -> (SessionTree, HashMap<String, String>) {
    let bytes = std::fs::read(dir.join("session.jsonl")).expect("session.jsonl");
    let ReadOutcome::Session(parsed) = read_session(&bytes) else {
        panic!("{}: not a session", dir.display());
    };
    let mut ids = HashMap::new();
    if parsed.migrated {
        let first: Value =
            serde_json::from_slice(bytes.split(|&b| b == b'\n').next().unwrap_or(b"{}"))
                .unwrap_or(Value::Null);
        let was_v1 = first.get("version").and_then(Value::as_f64).unwrap_or(1.0) < 2.0;
        if was_v1 {
            for (i, e) in parsed.entries.iter().enumerate() {
                if let Some(id) = &e.id {
                    ids.insert(id.to_string(), format!("c{:07x}", i + 1));
                }
            }
        }
    }
    (SessionTree::from_parsed(parsed), ids)
}

/// Waits until `condition` holds, polling it (every millisecond at first, backing off to 50 ms),
/// and panics naming `what` if it still does not after `timeout`. For what a test cannot be
/// told about directly (a log line, a process's state, a socket's queue): a fixed sleep is
/// either too short on a loaded machine or wasted time on an idle one.
pub fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    wait_for(timeout, what, || condition().then_some(()).ok_or_default());
}

/// What [`wait_for`]'s attempt found when it was not there yet (printed if time runs out).
pub trait NotYet<T> {
    fn ok_or_default(self) -> Result<T, String>;
}

impl<T> NotYet<T> for Option<T> {
    fn ok_or_default(self) -> Result<T, String> {
        self.ok_or_else(String::new)
    }
}

/// Polls `attempt` until it gives a value, as [`wait_until`] does; when `timeout` passes first,
/// panics naming `what` and what the last attempt found (its `Err`).
pub fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut attempt: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match attempt() {
            Ok(v) => return v,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting until {what}{}",
                if last.is_empty() {
                    String::new()
                } else {
                    format!("; last seen: {last}")
                }
            ),
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// [`wait_until`] inside an async test: the pauses yield to the runtime (the fake provider may
/// run on the same thread).
pub async fn wait_until_async(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Waits until a process's memory settles: its resident set changed by less than 1 MiB over
/// four readings `every` apart (so the work it was given is done, and what it holds now is
/// what it keeps). Returns that resident size in KiB; panics after `timeout`.
pub fn settled_rss_kib(pid: u32, every: Duration, timeout: Duration) -> u64 {
    let rss = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let mut last = rss();
    let mut steady = 0;
    wait_until(timeout, &format!("process {pid}'s memory settles"), || {
        std::thread::sleep(every);
        let now = rss();
        steady = if now.abs_diff(last) < 1024 {
            steady + 1
        } else {
            0
        };
        last = now;
        steady >= 4
    });
    last
}

/// Bytes written on `s` that its peer has not read yet (`TIOCOUTQ`: data sent on a Unix socket
/// stays charged to the sender until the reader takes it, or closes). Zero once the daemon
/// read a request: it is then being handled.
pub fn unread_by_peer(s: &impl std::os::fd::AsRawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: an open descriptor, and a pointer to the int TIOCOUTQ writes.
    let r = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    assert_eq!(r, 0, "TIOCOUTQ: {}", std::io::Error::last_os_error());
    usize::try_from(n).unwrap_or(0)
}

/// Whether signal `signo` is still pending for process `pid` (its `ShdPnd` mask): once it is
/// not, the process took it (handled, ignored, or died of it). A process that is gone has
/// nothing pending.
pub fn signal_pending(pid: u32, signo: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("ShdPnd:")
                .or_else(|| l.strip_prefix("SigPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & (1 << (signo - 1)) != 0)
}

/// Terminal commands a session or a client may smuggle into a string: an OSC 52 clipboard
/// write, a screen clear, a window-title set, a C1 CSI (U+009B) with its SGR, DEL and a
/// carriage return.
pub const HOSTILE: &str = "\u{1b}]52;c;aGVsbG8=\u{7}\u{1b}[2J\u{1b}]0;title\u{7}\u{9b}31m\u{7f}\r";

/// Writes to `path` the session of conformance case `024-compacted-once` with [`HOSTILE`]
/// appended to its header's id and cwd, to every entry id and parent id, and to its compaction's
/// summary and first kept entry id.
pub fn write_hostile_session(path: &Path) {
    let text = std::fs::read_to_string(
        conformance_cases(PiVersion::V0_85).join("024-compacted-once/session.jsonl"),
    )
    .expect("fixture session");
    let mut out = String::new();
    for line in text.lines() {
        let mut v: Value = serde_json::from_str(line).expect("fixture line");
        let Some(obj) = v.as_object_mut() else {
            continue;
        };
        for key in ["id", "parentId", "firstKeptEntryId", "cwd", "summary"] {
            if let Some(Value::String(s)) = obj.get_mut(key) {
                s.push_str(HOSTILE);
            }
        }
        out.push_str(&serde_json::to_string(&v).expect("serialize"));
        out.push('\n');
    }
    std::fs::write(path, out).expect("write hostile session");
}

/// Asserts that `text` (what `what` printed) holds no character a terminal acts on: no C0
/// control but newline, no DEL, no C1.
pub fn assert_printable(what: &str, text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| (c < ' ' && c != '\n') || ('\u{7f}'..='\u{9f}').contains(&c))
        .collect();
    assert!(
        bad.is_empty(),
        "{what} printed control characters {bad:?}: {text:?}"
    );
}
