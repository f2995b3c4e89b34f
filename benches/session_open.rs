//! In-process benchmark of opening a session, every figure a ratio to a baseline measured in the
//! same run:
//!
//! - the floor: a validating parse of every line into `serde::de::IgnoredAny`, single-threaded,
//!   keeping nothing (the least any reader of the file must do);
//! - a second reference: a parse of every line into a kept `serde_json::Value` (what a value-tree
//!   session model pays);
//! - compactd's open: `read_session_bytes` + `SessionTree::from_parsed` + the branch +
//!   `BranchIndex::build` + `plan_compaction` + the context estimate (what the daemon's
//!   `openSession` + `getContextUsage` + `previewCompaction` compute, without the socket), as wall
//!   time and as CPU time (the reader parses on several threads);
//! - Pi 0.85.0's `bench.mjs` on the same file (`workMs`: load + context + prepare), when the oracle
//!   is installed (`COMPACTD_ORACLE`);
//! - a steady-state step: append one user message at the leaf, extend the index, re-plan and
//!   re-estimate, against the floor parse of that one line.
//!
//! Sessions: `gen.mjs --big N` for N in `COMPACTD_BENCH_SIZES` (default 1,10,100), generated
//! once into `target/bench-data/`; without the oracle, a synthetic session of the same size.
//! Under `cargo test` (no `--bench`) a 1 MB synthetic smoke run checks the code path in seconds.

mod common;

use std::time::Instant;

use bytes::Bytes;
use serde_json::{json, Value};

use common::{cpu_time, median, ms, Oracle};
use compactd::compaction::{plan_compaction, BranchIndex, CompactionSettings};
use compactd::context::context_positions;
use compactd::live_context::LiveContext;
use compactd::session::{read_session_bytes, BranchView, Entry, ReadOutcome, SessionTree};

/// What an open leaves in memory.
struct Opened {
    tree: SessionTree,
    branch: Vec<usize>,
    index: BranchIndex,
}

/// compactd's open of a file already in memory (the buffer is shared, not copied).
fn compactd_open(bytes: &Bytes, settings: &CompactionSettings) -> Result<(Opened, f64), String> {
    let ReadOutcome::Session(parsed) = read_session_bytes(bytes.clone()) else {
        return Err("benchmark session does not parse".into());
    };
    let tree = SessionTree::from_parsed(parsed);
    let branch = tree.branch();
    let view = BranchView {
        tree: &tree,
        positions: &branch,
    };
    let index = BranchIndex::build(&view);
    let plan = plan_compaction(&view, &index, settings);
    std::hint::black_box(&plan);
    let tokens = index.context_estimate(&view).tokens;
    Ok((
        Opened {
            tree,
            branch,
            index,
        },
        tokens,
    ))
}

/// Wall ms of each phase of one open as the daemon does it (file read from the page cache, the
/// reader, the tree, the branch, the index, the agent context of `SessionState::loaded`, the
/// plan, the estimate): where the time over the floor goes.
fn phases(
    path: &std::path::Path,
    settings: &CompactionSettings,
) -> Result<Vec<(&'static str, f64)>, String> {
    let mut out = Vec::new();
    let mut t = Instant::now();
    let mut lap = |name: &'static str, out: &mut Vec<(&'static str, f64)>| {
        out.push((name, ms(t.elapsed())));
        t = Instant::now();
    };
    let bytes = Bytes::from(std::fs::read(path).map_err(|e| e.to_string())?);
    lap("fs::read", &mut out);
    let ReadOutcome::Session(parsed) = read_session_bytes(bytes) else {
        return Err("benchmark session does not parse".into());
    };
    lap("read_session_bytes", &mut out);
    let tree = SessionTree::from_parsed(parsed);
    lap("from_parsed", &mut out);
    let branch = tree.branch();
    lap("branch", &mut out);
    let view = BranchView {
        tree: &tree,
        positions: &branch,
    };
    let index = BranchIndex::build(&view);
    lap("BranchIndex::build", &mut out);
    let agent: Vec<usize> = context_positions(&view)
        .into_iter()
        .map(|p| branch[p])
        .filter(|&i| tree.entry(i).role.is_some())
        .collect();
    let mut live = LiveContext::default();
    for &i in &agent {
        live.push_entry(tree.entry(i));
    }
    std::hint::black_box(&live);
    lap("agent context (context_positions + LiveContext)", &mut out);
    std::hint::black_box(plan_compaction(&view, &index, settings).ok());
    lap("plan_compaction", &mut out);
    std::hint::black_box(index.context_estimate(&view));
    lap("context_estimate", &mut out);
    drop((live, agent, index, branch));
    drop(tree);
    lap("drop", &mut out);
    Ok(out)
}

/// Parse-into-`Value` reference: every line parsed and kept.
fn value_parse(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .collect()
}

/// Median wall ms of `runs` calls; the result is dropped outside the timed window.
fn time_ms<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                let out = std::hint::black_box(f());
                let d = ms(t.elapsed());
                drop(out);
                d
            })
            .collect(),
    )
}

fn steady_state(
    opened: &mut Opened,
    settings: &CompactionSettings,
    iterations: usize,
) -> (f64, f64) {
    let message = json!({"role":"user","content":"one more request from the user","timestamp":2});
    let mut samples = Vec::with_capacity(iterations);
    let mut floor = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let parent = opened.tree.leaf_id().map(str::to_owned);
        let line = json!({"type":"message","id":format!("z{i:07x}"),"parentId":parent,"timestamp":"2026-01-01T00:00:02.000Z","message":message}).to_string();
        let raw = Bytes::from(line.into_bytes());
        let t = Instant::now();
        std::hint::black_box(common::floor_parse(&raw));
        floor.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let Some(Ok(entry)) = Entry::from_line(raw) else {
            continue;
        };
        let idx = opened.tree.push(entry);
        opened.branch.push(idx);
        let view = BranchView {
            tree: &opened.tree,
            positions: &opened.branch,
        };
        opened.index.push(&view);
        std::hint::black_box(plan_compaction(&view, &opened.index, settings).ok());
        std::hint::black_box(opened.index.context_estimate(&view).tokens);
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (median(samples), median(floor))
}

fn main() {
    let bench = common::is_bench();
    let settings = CompactionSettings::default();
    let oracle = if bench { Oracle::find() } else { None };
    let sizes = if bench { common::sizes() } else { vec![1] };
    println!(
        "session_open ({}){}",
        common::machine_note(),
        if bench {
            ""
        } else {
            ": smoke run (debug build, timings mean nothing; use cargo bench)"
        }
    );
    if bench && oracle.is_none() {
        println!("COMPACTD_ORACLE not set or incomplete: synthetic sessions, no Pi figures");
    }
    for mb in sizes {
        let (label, path) = match common::session_file(oracle.as_ref(), mb) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("session {mb} MB: {e}");
                std::process::exit(1);
            }
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                std::process::exit(1);
            }
        };
        let runs = if !bench {
            1
        } else if mb >= 50 {
            3
        } else {
            5
        };
        let lines = common::floor_parse(&bytes);
        let floor = common::floor_ms(&bytes, runs);
        let floor_cpu = median(
            (0..runs)
                .map(|_| {
                    let c = cpu_time();
                    std::hint::black_box(common::floor_parse(&bytes));
                    ms(cpu_time() - c)
                })
                .collect(),
        );
        let value = time_ms(runs, || value_parse(&bytes));
        let utf8 = time_ms(runs, || common::floor_utf8_parse(&bytes));
        let mut wall = Vec::new();
        let mut cpu = Vec::new();
        let mut tokens = 0.0;
        for _ in 0..runs {
            let (t, c) = (Instant::now(), cpu_time());
            let out = compactd_open(&bytes, &settings);
            let (w, cp) = (ms(t.elapsed()), ms(cpu_time() - c));
            match out {
                Ok((opened, tok)) => {
                    tokens = tok;
                    drop(opened);
                }
                Err(e) => {
                    eprintln!("{label}: {e}");
                    std::process::exit(1);
                }
            }
            wall.push(w);
            cpu.push(cp);
        }
        let (open, open_cpu) = (median(wall), median(cpu));
        println!(
            "{label} ({} bytes, {lines} lines, {tokens} tokens):\n  floor (IgnoredAny, 1 thread) {floor:.1} ms | floor + UTF-8 check {utf8:.1} ms = {:.2}x floor | Value parse-and-keep {value:.1} ms = {:.2}x floor\n  compactd open+index+plan+estimate {open:.1} ms wall = {:.2}x floor (target <= 1.5x), {open_cpu:.1} ms CPU = {:.2}x the floor's CPU {floor_cpu:.1} ms",
            bytes.len(),
            utf8 / floor,
            value / floor,
            open / floor,
            open_cpu / floor_cpu,
        );
        if bench {
            let mut runs_of: Vec<Vec<(&'static str, f64)>> = Vec::new();
            for _ in 0..runs {
                match phases(&path, &settings) {
                    Ok(p) => runs_of.push(p),
                    Err(e) => {
                        eprintln!("{label}: {e}");
                        std::process::exit(1);
                    }
                }
            }
            let names: Vec<&str> = runs_of[0].iter().map(|(n, _)| *n).collect();
            let parts: Vec<String> = names
                .iter()
                .enumerate()
                .map(|(k, n)| {
                    let m = median(runs_of.iter().map(|r| r[k].1).collect());
                    format!("{n} {m:.1} ({:.2}x)", m / floor)
                })
                .collect();
            println!(
                "  daemon-style open by phase, ms (x floor): {}",
                parts.join(", ")
            );
        }
        if let Some(o) = &oracle {
            match o.bench(&path, 3) {
                Ok(pi) => println!(
                    "  Pi bench.mjs (3 runs): workMs {:.1} (open {:.1}), processWallMs {:.1}, rss {} MB; Pi/compactd {:.1}x (target >= 10x), Pi/floor {:.1}x",
                    pi.work_ms,
                    pi.open_ms,
                    pi.process_wall_ms,
                    pi.rss_mb,
                    pi.work_ms / open,
                    pi.work_ms / floor
                ),
                Err(e) => println!("  Pi bench.mjs failed: {e}"),
            }
        }
        let Ok((mut opened, _)) = compactd_open(&bytes, &settings) else {
            std::process::exit(1);
        };
        let iterations = if bench { 20_000 } else { 200 };
        let (step, line_floor) = steady_state(&mut opened, &settings, iterations);
        println!(
            "  in-process append + index push + plan + estimate: p50 {step:.2} us over {iterations} appends = {:.1}x the floor parse of the line ({line_floor:.2} us)",
            step / line_floor.max(1e-3)
        );
    }
}
