//! Resident memory of open sessions against their files (issue 33 item 1, "a memory-light
//! engine"), with the engine that held every file's bytes as the baseline in the same run
//! (`COMPACTD_HOLD_BYTES=1`): for 1, 8 and 64 open sessions of several sizes, a daemon's RSS
//! against the files it holds open; `getContext` of the largest session; the steady state
//! (append + checkCompaction) on it; and a compaction of one of eight large sessions.
//!
//! `cargo bench --bench memory` (with `COMPACTD_ORACLE` for Pi's generated sessions);
//! `COMPACTD_BENCH_MEMORY="1x100,8x100,64x10"` picks the (sessions x MB) cases. Without
//! `--bench` it is a smoke run on small synthetic files.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::{median, Oracle};

type Res<T> = Result<T, String>;
use serde_json::json;

/// The two engines compared: lines read back on demand (now) and every file's bytes held.
const ENGINES: [(&str, &str); 2] = [("spans", "0"), ("held", "1")];

fn mb(bytes: f64) -> f64 {
    bytes / 1048576.0
}

/// Copies of `src` for `n` sessions (each file is locked while open, so each needs its own).
fn copies(src: &Path, dir: &Path, n: usize) -> Res<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    (0..n)
        .map(|i| {
            let p = dir.join(format!("s{i:03}.jsonl"));
            std::fs::copy(src, &p).map_err(|e| e.to_string())?;
            Ok(p)
        })
        .collect()
}

/// A daemon of the engine `hold` ("1": bytes held) under `root`.
fn daemon(bin: &Path, root: &Path, hold: &str) -> Res<Daemon> {
    // The daemon inherits the variable; it is read once, at its first open.
    std::env::set_var("COMPACTD_HOLD_BYTES", hold);
    let d = Daemon::start(bin, root, None);
    std::env::remove_var("COMPACTD_HOLD_BYTES");
    d
}

/// RSS (MB) of a daemon holding `paths` open, each session's usage asked once: after the
/// opens, its peak, and once every session had one append (an open session's vectors grow then).
fn resident(bin: &Path, root: &Path, hold: &str, paths: &[PathBuf]) -> Res<(f64, f64, f64)> {
    let d = daemon(bin, root, hold)?;
    let mut c = d.connect()?;
    let mut sids = Vec::new();
    for p in paths {
        let sid = c.open(p)?;
        c.call("getContextUsage", json!({"sessionId": sid}))?;
        sids.push(sid);
    }
    // Freed piece buffers go back to the system once nothing was freed for five seconds (the
    // reaper's `malloc_trim`); both engines get the same wait.
    std::thread::sleep(Duration::from_secs(6));
    let (now, peak) = d.rss_kb();
    for (i, sid) in sids.iter().enumerate() {
        let msg = json!({"role": "user", "content": "one more request", "timestamp": 1_767_225_600_000u64 + i as u64});
        c.call("appendMessage", json!({"sessionId": sid, "message": msg}))?;
    }
    // The same wait: what a grown vector left behind is handed back too.
    std::thread::sleep(Duration::from_secs(6));
    let (appended, _) = d.rss_kb();
    Ok((
        now as f64 / 1024.0,
        peak as f64 / 1024.0,
        appended as f64 / 1024.0,
    ))
}

/// Median ms of `getContext` of `path` over `runs` calls, and the median ms of one steady step
/// (appendMessage + checkCompaction) over `steps`.
fn timings(d: &Daemon, path: &Path, runs: usize, steps: usize) -> Res<(f64, f64, usize)> {
    let mut c = d.connect()?;
    let sid = c.open(path)?;
    let mut ctx = Vec::new();
    let mut n = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let r = c.call("getContext", json!({"sessionId": sid}))?;
        ctx.push(t.elapsed().as_secs_f64() * 1000.0);
        n = r["messages"].as_array().map_or(0, Vec::len);
    }
    let mut steady = Vec::new();
    for i in 0..steps + 5 {
        let msg = json!({"role": "user", "content": format!("steady state request {i}"), "timestamp": 1_767_225_600_000u64 + i as u64});
        let t = Instant::now();
        c.call("appendMessage", json!({"sessionId": sid, "message": msg}))?;
        c.call(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "prePrompt"}),
        )?;
        if i >= 5 {
            steady.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok((median(ctx), median(steady), n))
}

fn run() -> Res<()> {
    let bench = common::is_bench();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_compactd"));
    let oracle = if bench { Oracle::find() } else { None };
    println!(
        "memory ({}, {}){}",
        bin.display(),
        common::machine_note(),
        if bench {
            ""
        } else {
            ": smoke run (debug build, figures mean nothing; use cargo bench)"
        }
    );
    let cases: Vec<(usize, u64)> = std::env::var("COMPACTD_BENCH_MEMORY")
        .ok()
        .unwrap_or_else(|| match bench {
            true => "1x1,8x1,64x1,1x10,8x10,64x10,1x100,8x100".into(),
            false => "1x1,3x1".into(),
        })
        .split(',')
        .filter_map(|c| {
            let (n, m) = c.trim().split_once('x')?;
            Some((n.parse().ok()?, m.parse().ok()?))
        })
        .collect();
    let tmp = tempfile::Builder::new()
        .prefix("compactd-memory-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let root = tmp.path();
    let file_of = |size: u64| -> Res<(String, PathBuf, u64)> {
        let (label, path) = match bench {
            true => common::session_file(oracle.as_ref(), size)?,
            false => (
                "synthetic smoke".into(),
                common::small_session_file("memory-smoke", 256 * 1024)?,
            ),
        };
        let len = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
        Ok((label, path, len))
    };
    println!("resident memory, sessions open (after 6 s idle):");
    println!("| sessions | file | files MB | spans RSS MB | = files x | over files MB | held RSS MB | = files x | spans peak MB | held peak MB | spans after an append each (6 s idle) MB | held after an append each MB | target (15 % + 64 MB) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, &(n, size)) in cases.iter().enumerate() {
        let (label, src, len) = file_of(size)?;
        let dir = root.join(format!("case{i}"));
        let paths = copies(&src, &dir.join("files"), n)?;
        let files = mb((len * n as u64) as f64);
        let mut got = Vec::new();
        for (name, hold) in ENGINES {
            got.push(resident(&bin, &dir.join(name), hold, &paths)?);
        }
        let [(s, sp, sa), (h, hp, ha)] = [got[0], got[1]];
        println!(
            "| {n} | {label} | {files:.1} | {s:.1} | {:.2} | {:.1} | {h:.1} | {:.2} | {sp:.1} | {hp:.1} | {sa:.1} | {ha:.1} | {} |",
            s / files,
            s - files,
            h / files,
            if s.max(sa) <= 0.15 * files + 64.0 { "met" } else { "missed" }
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    // The largest size of the run: getContext, the steady state, and a compaction of one of
    // eight such sessions open at once.
    let largest = cases.iter().map(|c| c.1).max().unwrap_or(1);
    let (label, src, _) = file_of(largest)?;
    let (runs, steps) = if bench { (7, 200) } else { (1, 5) };
    println!("{label}: getContext (median of {runs}), steady append + checkCompaction (median of {steps}), compaction of one of eight open:");
    let mut ctx = Vec::new();
    for (name, hold) in ENGINES {
        let dir = root.join(format!("timing-{name}"));
        let paths = copies(&src, &dir.join("files"), 8)?;
        let d = daemon(&bin, &dir.join("daemon"), hold)?;
        let mut c = d.connect()?;
        let mut sids = Vec::new();
        for p in &paths[1..] {
            sids.push(c.open(p)?);
        }
        let (context, steady, messages) = timings(&d, &paths[0], runs, steps)?;
        ctx.push(context);
        let t = Instant::now();
        let r = c.call("compact", json!({"sessionId": sids[0]}))?;
        let compact_ms = t.elapsed().as_secs_f64() * 1000.0;
        let kept = r["firstKeptEntryId"].as_str().unwrap_or("?").to_owned();
        let (now, peak) = d.rss_kb();
        println!(
            "  {name}: getContext {context:.1} ms ({messages} messages), steady {steady:.3} ms (target < 1 ms), compaction {compact_ms:.0} ms (first kept {kept}), RSS after {:.0} MB, peak {:.0} MB",
            now as f64 / 1024.0,
            peak as f64 / 1024.0
        );
        drop(c);
        drop(d);
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "  getContext spans / held: {:.2}x (target <= 2x)",
        ctx[0] / ctx[1]
    );
    Ok(())
}

fn main() {
    let t = Instant::now();
    match run() {
        Ok(()) => println!("memory finished in {:.1} s", t.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("memory failed: {e}");
            std::process::exit(1);
        }
    }
}
