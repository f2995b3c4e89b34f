//! Benchmarks against baselines measured in the same run (never absolute thresholds):
//!
//! 1. Opening a big session: compactd's full open (parse every line, extract entry facts, index
//!    the tree, build the live context) vs. a bare `serde_json` parse of every line. Target: at
//!    most 1.5x.
//! 2. A check after an append: append one message to the in-memory session and answer
//!    `getContextUsage`/`shouldCompact` from the incremental context. Target: under 1 ms, reported
//!    as a ratio to the bare parse of that one line.
//!
//! `cargo bench --bench session_open` runs it at 100 MB (override with `COMPACTD_BENCH_MB`).
//! Under `cargo test` (no `--bench` argument) it runs a 1 MB smoke version so the code stays
//! exercised without slowing the test suite.

use std::time::{Duration, Instant};

use compactd::compaction::tokens::CompactionSettings;
use compactd::live_context::LiveContext;
use compactd::session::{read_session, Entry, ReadOutcome, SessionTree};
use serde_json::{json, Value};

/// A deterministic xorshift generator (no dependency, same session every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[(self.next() % words.len() as u64) as usize]
    }
    fn text(&mut self, approx: usize) -> String {
        const WORDS: [&str; 16] = [
            "fn",
            "let",
            "parser",
            "session",
            "token",
            "compaction",
            "result",
            "error",
            "buffer",
            "stream",
            "ünïcode",
            "async",
            "await",
            "json",
            "window",
            "cut",
        ];
        let mut s = String::with_capacity(approx + 16);
        while s.len() < approx {
            s.push_str(self.pick(&WORDS));
            s.push(if self.next().is_multiple_of(9) {
                '\n'
            } else {
                ' '
            });
        }
        s
    }
}

/// A tool-heavy single-branch session of about `bytes` bytes, shaped like Pi's (read/edit/bash
/// turns with ~3 KB results, usage on every assistant message).
fn synthetic_session(bytes: usize) -> String {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut out = String::with_capacity(bytes + 4096);
    out.push_str(&json!({"type":"session","version":3,"id":"bench","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}).to_string());
    out.push('\n');
    let mut parent: Option<String> = None;
    let mut n = 0u64;
    let mut push = |out: &mut String, message: Value| {
        n += 1;
        let id = format!("{n:08x}");
        let line = json!({"type":"message","id":id,"parentId":parent,"timestamp":"2026-01-01T00:00:01.000Z","message":message});
        out.push_str(&line.to_string());
        out.push('\n');
        parent = Some(id);
    };
    while out.len() < bytes {
        push(
            &mut out,
            json!({"role":"user","content":[{"type":"text","text":rng.text(300)}],"timestamp":1}),
        );
        for _ in 0..4 {
            let tool = rng.pick(&["read", "edit", "bash", "write"]);
            let call_id = format!("toolu_{}", rng.next());
            push(
                &mut out,
                json!({"role":"assistant","content":[{"type":"text","text":rng.text(120)},{"type":"toolCall","id":call_id,"name":tool,"arguments":{"path":format!("src/m{}.rs", rng.next() % 50),"command":rng.text(40)}}],"api":"anthropic-messages","provider":"anthropic","model":"claude","usage":{"input":100,"output":50,"cacheRead":1000,"cacheWrite":10,"totalTokens":1160 + (rng.next() % 1000),"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"toolUse","timestamp":1}),
            );
            push(
                &mut out,
                json!({"role":"toolResult","toolCallId":call_id,"toolName":tool,"content":[{"type":"text","text":rng.text(3000)}],"isError":false,"timestamp":1}),
            );
        }
    }
    out
}

/// Baseline: serde_json parses every line into a `Value` and keeps them (what "opening" means:
/// the parsed document exists afterwards). Dropped inside the timed window, like compactd's.
fn bare_parse(text: &str) -> Vec<Value> {
    text.split('\n')
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// A second, stricter baseline: parse and drop each line at once (allocator memory stays hot).
fn parse_and_drop(text: &str) -> usize {
    text.split('\n')
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .count()
}

fn compactd_open(text: &str) -> (SessionTree, LiveContext) {
    let ReadOutcome::Session(parsed) = read_session(text.as_bytes()) else {
        panic!("benchmark session does not parse");
    };
    let tree = SessionTree::from_parsed(parsed);
    let branch = tree.branch();
    let live = LiveContext::from_path(&tree.refs(&branch));
    (tree, live)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let mb: usize = if bench {
        std::env::var("COMPACTD_BENCH_MB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100)
    } else {
        1
    };
    let runs = if bench { 5 } else { 1 };
    let text = synthetic_session(mb * 1024 * 1024);
    let lines = text.lines().count();

    let parse = time(runs, || bare_parse(&text));
    let parse_drop = time(runs, || parse_and_drop(&text));
    let open = time(runs, || compactd_open(&text));
    let ratio = open.as_secs_f64() / parse.as_secs_f64();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !bench {
        // Under `cargo test`: a debug build on 1 MB exercises the code; its timings mean nothing.
        println!("session_open smoke run ({mb} MB, debug): opened {} entries, checks run; use `cargo bench` to measure", lines - 1);
    }
    let report = |line: String| {
        if bench {
            println!("{line}");
        }
    };
    report(format!(
        "open {mb} MB ({lines} lines, {threads} cores): serde_json parse-and-keep {:.1} ms, compactd open {:.1} ms, ratio {ratio:.2}x (target <= 1.5x); vs parse-and-drop {:.1} ms: {:.2}x",
        parse.as_secs_f64() * 1e3,
        open.as_secs_f64() * 1e3,
        parse_drop.as_secs_f64() * 1e3,
        open.as_secs_f64() / parse_drop.as_secs_f64()
    ));

    let (mut tree, mut live) = compactd_open(&text);
    let settings = CompactionSettings::default();
    let message = json!({"role":"user","content":"one more request from the user","timestamp":2});
    let iterations = if bench { 20_000 } else { 200 };
    let mut total = Duration::ZERO;
    let mut line_parse = Duration::ZERO;
    for i in 0..iterations {
        let parent = tree.leaf_id().map(str::to_owned);
        let line = json!({"type":"message","id":format!("z{i:07x}"),"parentId":parent,"timestamp":"2026-01-01T00:00:02.000Z","message":message}).to_string();
        let t = Instant::now();
        std::hint::black_box(serde_json::from_str::<Value>(&line).ok());
        line_parse += t.elapsed();
        let t = Instant::now();
        let entry = Entry::from_value(serde_json::from_str(&line).unwrap_or(Value::Null));
        let idx = tree.push(entry);
        live.push_entry(tree.entry(idx));
        std::hint::black_box((live.estimate(), live.should_compact(200_000, &settings)));
        total += t.elapsed();
    }
    let per = total / iterations as u32;
    let per_parse = line_parse / iterations as u32;
    report(format!(
        "append + usage/shouldCompact check: {:.2} us per op over {iterations} ops ({:.2}x a bare parse of the line; target < 1 ms)",
        per.as_secs_f64() * 1e6,
        per.as_secs_f64() / per_parse.as_secs_f64().max(1e-9)
    ));
    if bench && per > Duration::from_millis(1) {
        eprintln!("warning: check after append exceeds 1 ms");
    }
}
