//! Shared pieces of the benchmarks: where their session files come from (the Pi oracle's
//! `gen.mjs --big`, generated once into `target/bench-data/`, or a synthetic session when the
//! oracle is absent), the floor every figure is divided by (a validating parse of every line into
//! `serde::de::IgnoredAny`, single-threaded, keeping nothing), Pi's own timing (`bench.mjs`) on the
//! same file, and small statistics helpers. Everything is measured in the run that prints it.
#![allow(dead_code)]

pub mod daemon;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::de::IgnoredAny;
use serde_json::{json, Value};

/// `cargo bench` passes `--bench`; `cargo test --all-targets` runs the same executable without
/// it, where only a quick smoke version runs.
pub fn is_bench() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Whose rules the in-process benches follow: `COMPACTD_BENCH_PI_VERSION` (`0.85` or `1.6`),
/// by default the daemon's default (1.6). Point `COMPACTD_ORACLE` at the same Pi's oracle for
/// its timings beside them.
pub fn pi_version() -> compactd::pi_version::PiVersion {
    use compactd::pi_version::PiVersion;
    match std::env::var("COMPACTD_BENCH_PI_VERSION").ok().as_deref() {
        Some("0.85") => PiVersion::V0_85,
        _ => PiVersion::V1_6,
    }
}

/// The cargo target directory: the bench executable sits in `<target>/<profile>/deps/`.
pub fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// Generated session files are kept here between runs.
pub fn data_dir() -> PathBuf {
    let dir = target_dir().join("bench-data");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Session sizes in MB (`COMPACTD_BENCH_SIZES=1,10,100`, the default).
pub fn sizes() -> Vec<u64> {
    std::env::var("COMPACTD_BENCH_SIZES")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|s| s.trim().parse().ok())
                .filter(|&n| n > 0)
                .collect::<Vec<u64>>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![1, 10, 100])
}

/// The installed Pi oracle (`COMPACTD_ORACLE`, as `scripts/test-all` exports it).
pub struct Oracle {
    pub dir: PathBuf,
}

impl Oracle {
    pub fn find() -> Option<Oracle> {
        let dir = PathBuf::from(std::env::var_os("COMPACTD_ORACLE")?);
        (dir.join("node").exists()
            && dir.join("gen.mjs").exists()
            && dir.join("bench.mjs").exists())
        .then_some(Oracle { dir })
    }

    fn node(&self) -> Command {
        Command::new(self.dir.join("node"))
    }

    /// `gen.mjs --big MB --seed 43` into the data directory, once.
    pub fn big_session(&self, mb: u64) -> Result<PathBuf, String> {
        let path = data_dir().join(format!("big-{mb}mb-seed43.jsonl"));
        if path.exists() {
            return Ok(path);
        }
        let tmp = path.with_extension("partial");
        let out = self
            .node()
            .arg(self.dir.join("gen.mjs"))
            .args(["--big", &mb.to_string(), "--seed", "43", "--out"])
            .arg(&tmp)
            .output()
            .map_err(|e| format!("gen.mjs: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "gen.mjs --big {mb} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::fs::rename(&tmp, &path).map_err(|e| e.to_string())?;
        Ok(path)
    }

    /// Pi's `bench.mjs --file F --runs N`: one JSON object with per-phase medians.
    pub fn bench(&self, file: &Path, runs: usize) -> Result<PiBench, String> {
        let out = self
            .node()
            .arg(self.dir.join("bench.mjs"))
            .arg("--file")
            .arg(file)
            .args(["--runs", &runs.to_string()])
            .output()
            .map_err(|e| format!("bench.mjs: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "bench.mjs failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let v: Value =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("bench.mjs output: {e}"))?;
        let m = |k: &str| v["median"][k].as_f64().unwrap_or(f64::NAN);
        Ok(PiBench {
            work_ms: m("workMs"),
            open_ms: m("openMs"),
            process_wall_ms: m("processWallMs"),
            rss_mb: m("rssMB"),
            entries: v["entries"].as_u64().unwrap_or(0),
            tokens: v["tokens"].as_f64().unwrap_or(f64::NAN),
        })
    }
}

/// Pi's medians from `bench.mjs`.
#[derive(Debug, Clone, Copy)]
pub struct PiBench {
    pub work_ms: f64,
    pub open_ms: f64,
    pub process_wall_ms: f64,
    pub rss_mb: f64,
    pub entries: u64,
    pub tokens: f64,
}

/// A session file of about `mb` MB: Pi's generator when the oracle is installed, else the
/// synthetic session below (written once). The label says which.
pub fn session_file(oracle: Option<&Oracle>, mb: u64) -> Result<(String, PathBuf), String> {
    match oracle {
        Some(o) => Ok((format!("gen.mjs --big {mb}"), o.big_session(mb)?)),
        None => {
            let path = data_dir().join(format!("synthetic-{mb}mb.jsonl"));
            if !path.exists() {
                std::fs::write(&path, synthetic_session(mb as usize * 1024 * 1024))
                    .map_err(|e| e.to_string())?;
            }
            Ok((format!("synthetic {mb} MB"), path))
        }
    }
}

/// A synthetic session of about `bytes` bytes written to the data directory (smoke runs).
pub fn small_session_file(name: &str, bytes: usize) -> Result<PathBuf, String> {
    let path = data_dir().join(format!("{name}.jsonl"));
    if !path.exists() {
        std::fs::write(&path, synthetic_session(bytes)).map_err(|e| e.to_string())?;
    }
    Ok(path)
}

/// The `\n`-separated pieces of `bytes`, found with `memchr` as any reader of a large file would
/// find them (a byte-by-byte split costs about as much again as the parse it feeds).
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut ends = memchr::memchr_iter(b'\n', bytes).chain(std::iter::once(bytes.len()));
    std::iter::from_fn(move || {
        let end = ends.next()?;
        let line = bytes.get(start..end)?;
        start = end + 1;
        Some(line)
    })
}

/// The floor: a validating parse of every non-blank line into `IgnoredAny`, single-threaded,
/// keeping nothing. Returns the number of lines that parsed.
pub fn floor_parse(bytes: &[u8]) -> usize {
    lines(bytes)
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .filter(|l| serde_json::from_slice::<IgnoredAny>(l).is_ok())
        .count()
}

/// The floor plus UTF-8 validation of every line (`IgnoredAny` skips strings without checking
/// their encoding; a reader that produces strings cannot). A reference, not the floor.
pub fn floor_utf8_parse(bytes: &[u8]) -> usize {
    lines(bytes)
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .filter_map(|l| std::str::from_utf8(l).ok())
        .filter(|l| serde_json::from_str::<IgnoredAny>(l).is_ok())
        .count()
}

/// Median wall time of `runs` calls of the floor over `bytes`.
pub fn floor_ms(bytes: &[u8], runs: usize) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(floor_parse(std::hint::black_box(bytes)));
                ms(t.elapsed())
            })
            .collect(),
    )
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The `p`-th percentile (0..=100, nearest rank) of unsorted samples.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// User + system CPU time of this process so far.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// The machine's load average and core count, printed with every run (figures from a busy
/// machine are only comparable within their run).
pub fn machine_note() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!(
        "{} cores, load average {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        load.join(" ")
    )
}

/// CPU time the hypervisor gave to others while this machine's cores wanted it (the `steal`
/// column of `/proc/stat`, summed over cores), so far; zero outside a VM or where unreadable.
/// Printed beside latency figures: tens of milliseconds of it in a second mean the spikes
/// measured then are the host's, not the daemon's.
pub fn stolen() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(8))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

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
/// turns with ~3 KB results, usage on every assistant message). Used when the oracle is absent.
pub fn synthetic_session(bytes: usize) -> String {
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
