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
//! - Pi's `bench.mjs` on the same file (`workMs`: load + context + prepare), when the oracle
//!   is installed (`COMPACTD_ORACLE`: point it at the Pi whose rules are measured);
//! - under Pi 1.6's rules (`COMPACTD_BENCH_PI_VERSION`, default 1.6; `0.85` for the old ones)
//!   the open also builds Pi 1.6's projection (edits, system messages, the newest compaction),
//!   as the daemon's agent context does, and plans on it;
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
use compactd::compaction::projection::Projection;
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
    let rules = common::pi_version();
    if rules.is_1_6() {
        std::hint::black_box(Projection::build(&view));
    }
    let plan = plan_compaction(rules, &view, &index, settings);
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

/// Wall ms of each phase of one open (file read from the page cache, the reader, the tree, the
/// branch, the index, the agent context of `SessionState::loaded`, the plan, the estimate):
/// where the time over the floor goes. The daemon reads and parses in one step, each piece
/// parsed by the thread that read it (`store::files::load`, timed first); the phases after it are
/// the daemon's.
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
    let loaded = compactd::store::files::load(path, false).map_err(|e| e.to_string())?;
    lap(
        "store::files::load (read + parse + tree, as the daemon)",
        &mut out,
    );
    drop(loaded);
    lap("its drop", &mut out);
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
    let rules = common::pi_version();
    if rules.is_1_6() {
        std::hint::black_box(Projection::build(&view));
        lap("agent context (Pi 1.6's Projection::build)", &mut out);
    }
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
    std::hint::black_box(plan_compaction(rules, &view, &index, settings).ok());
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
    common::lines(bytes)
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
        std::hint::black_box(
            plan_compaction(common::pi_version(), &view, &opened.index, settings).ok(),
        );
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
        "session_open ({}; Pi {}'s rules){}",
        common::machine_note(),
        common::pi_version().as_str(),
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
        let runs = if !bench { 1 } else { 5 };
        let lines = common::floor_parse(&bytes);
        // Run by run, interleaved: floor, references, compactd, one Pi run; ratios are medians of
        // per-run ratios, so a change in the machine's load hits both sides of each.
        let (mut floor, mut floor_cpu, mut utf8, mut value) = (vec![], vec![], vec![], vec![]);
        let (mut wall, mut cpu, mut pi_work, mut pi_open) = (vec![], vec![], vec![], vec![]);
        let mut phase_runs: Vec<Vec<(&'static str, f64)>> = Vec::new();
        let mut tokens = 0.0;
        for _ in 0..runs {
            let (t, c) = (Instant::now(), cpu_time());
            std::hint::black_box(common::floor_parse(std::hint::black_box(&bytes)));
            floor.push(ms(t.elapsed()));
            floor_cpu.push(ms(cpu_time() - c));
            utf8.push(time_ms(1, || common::floor_utf8_parse(&bytes)));
            value.push(time_ms(1, || value_parse(&bytes)));
            let (t, c) = (Instant::now(), cpu_time());
            let out = compactd_open(&bytes, &settings);
            wall.push(ms(t.elapsed()));
            cpu.push(ms(cpu_time() - c));
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
            if bench {
                match phases(&path, &settings) {
                    Ok(p) => phase_runs.push(p),
                    Err(e) => {
                        eprintln!("{label}: {e}");
                        std::process::exit(1);
                    }
                }
            }
            if let Some(o) = &oracle {
                match o.bench(&path, 1) {
                    Ok(pi) => {
                        pi_work.push(pi.work_ms);
                        pi_open.push(pi.open_ms);
                    }
                    Err(e) => {
                        eprintln!("Pi bench.mjs failed: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        let ratio = |a: &[f64], b: &[f64]| median(a.iter().zip(b).map(|(x, y)| x / y).collect());
        let (fl, flc) = (median(floor.clone()), median(floor_cpu.clone()));
        let (open, open_cpu) = (median(wall.clone()), median(cpu.clone()));
        println!(
            "{label} ({} bytes, {lines} lines, {tokens} tokens), medians of {runs} interleaved runs:\n  floor (IgnoredAny, 1 thread) {fl:.1} ms wall, {flc:.1} ms CPU | floor + UTF-8 check {:.1} ms = {:.2}x floor | Value parse-and-keep {:.1} ms = {:.2}x floor\n  compactd open+index+plan+estimate {open:.1} ms wall = {:.2}x floor (target <= 1.5x), {open_cpu:.1} ms CPU = {:.2}x the floor's CPU",
            bytes.len(),
            median(utf8.clone()),
            ratio(&utf8, &floor),
            median(value.clone()),
            ratio(&value, &floor),
            ratio(&wall, &floor),
            ratio(&cpu, &floor_cpu),
        );
        if !phase_runs.is_empty() {
            let parts: Vec<String> = phase_runs[0]
                .iter()
                .enumerate()
                .map(|(k, (n, _))| {
                    let m = median(phase_runs.iter().map(|r| r[k].1).collect());
                    format!("{n} {m:.1} ({:.2}x)", m / fl)
                })
                .collect();
            println!(
                "  daemon-style open by phase, ms (x floor): {}",
                parts.join(", ")
            );
        }
        if !pi_work.is_empty() {
            println!(
                "  Pi bench.mjs ({runs} runs, one per round): workMs {:.1} (open {:.1}); Pi/compactd {:.1}x (target >= 10x), Pi/floor {:.1}x",
                median(pi_work.clone()),
                median(pi_open),
                ratio(&pi_work, &wall),
                ratio(&pi_work, &floor),
            );
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
