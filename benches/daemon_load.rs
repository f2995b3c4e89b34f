//! Load generator for the daemon: starts the real `compactd serve --socket` (the binary cargo
//! builds beside this bench: release under `cargo bench`, debug under `cargo test`) with temporary
//! HOME/XDG directories and drives it over its Unix socket with NDJSON requests, as agents do.
//! Every figure is printed with a baseline measured in the same run (the IgnoredAny floor on the
//! same file, a pure request's round trip, the 1 MB figure, Pi's `bench.mjs`).
//!
//! Figures: cold open + usage + preview; `compactd inspect` wall time and max RSS; steady-state
//! append + usage + shouldCompact + preview; `shouldCompact` throughput with 1/8/64 pipelined
//! connections and latency with 64 closed-loop ones; compaction with the extractive engine and
//! with a fake OpenAI-compatible provider on 127.0.0.1 that answers at once; daemon RSS; and
//! isolation of a small session's `getContextUsage` from a 100 MB open + compaction.
//!
//! Sizes come from `COMPACTD_BENCH_SIZES` (MB, default 1,10,100); compactions use
//! `COMPACTD_BENCH_COMPACT_SIZES` (default 1,10: about 200k and 2M tokens). Every loop is bounded
//! in count and time. Under `cargo test` (no `--bench`) a smoke version runs on a small synthetic
//! session in a few seconds and fails if any request fails.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{Conn, Daemon, FakeProvider};
use common::{median, ms, percentile, Oracle};

type Res<T> = Result<T, String>;

/// Knobs of one run: the full benchmark or the smoke version.
struct Plan {
    cold_runs: usize,
    steady_iters: usize,
    steady_time: Duration,
    socket_time: Duration,
    connections: Vec<usize>,
    closed_loop: usize,
    compact_runs: usize,
    many_sessions: usize,
    isolation_baseline: Duration,
    /// How long to wait after a compaction for the allocator's free memory to go back.
    release_wait: Duration,
}

/// A copy of `src` under `dir` (sessions are appended to, so every scenario gets its own).
fn copy_session(src: &Path, dir: &Path, name: &str) -> Res<PathBuf> {
    let p = dir.join(format!("{name}.jsonl"));
    std::fs::copy(src, &p).map_err(|e| format!("copy {}: {e}", src.display()))?;
    Ok(p)
}

#[derive(Clone)]
struct SizeFile {
    mb: u64,
    label: String,
    path: PathBuf,
    bytes: u64,
    floor_ms: f64,
}

fn pct(v: &mut [f64]) -> (f64, f64) {
    (percentile(v, 50.0), percentile(v, 99.0))
}

// ---------------------------------------------------------------- cold open and inspect

/// Per-run ratios' median: each run's pair is measured back to back, so drifts of the machine's
/// load hit both sides.
fn median_ratio(num: &[f64], den: &[f64]) -> f64 {
    median(num.iter().zip(den).map(|(n, d)| n / d).collect())
}

/// Cold figures, interleaved run by run: the floor (wall and CPU), the daemon's cold
/// open + usage + preview (wall and the daemon's CPU), `compactd inspect` (wall, peak RSS) and
/// one Pi `bench.mjs` run, so each ratio compares measurements taken moments apart.
fn cold(
    d: &Daemon,
    bin: &Path,
    oracle: Option<&Oracle>,
    f: &SizeFile,
    dir: &Path,
    plan: &Plan,
) -> Res<()> {
    let bytes = std::fs::read(&f.path).map_err(|e| e.to_string())?;
    let (mut floor, mut floor_cpu) = (Vec::new(), Vec::new());
    let (mut total, mut open_only, mut cpu) = (Vec::new(), Vec::new(), Vec::new());
    let (mut insp, mut insp_rss) = (Vec::new(), None::<u64>);
    let (mut pi_work, mut pi_wall, mut pi_rss) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..plan.cold_runs {
        let (t, c) = (Instant::now(), common::cpu_time());
        std::hint::black_box(common::floor_parse(std::hint::black_box(&bytes)));
        floor.push(ms(t.elapsed()));
        floor_cpu.push(ms(common::cpu_time() - c));

        let path = copy_session(&f.path, dir, &format!("cold-{}-{r}", f.mb))?;
        let mut conn = d.connect()?;
        let c0 = d.cpu_ms();
        let t = Instant::now();
        let sid = conn.open(&path)?;
        let t_open = ms(t.elapsed());
        let usage = conn.call("getContextUsage", json!({"sessionId": sid}))?;
        let preview = conn.call("previewCompaction", json!({"sessionId": sid}))?;
        total.push(ms(t.elapsed()));
        cpu.push(d.cpu_ms() - c0);
        open_only.push(t_open);
        if usage.get("tokens").is_none() || preview.get("firstKeptEntryId").is_none() {
            return Err(format!("unexpected cold replies: {usage} / {preview}"));
        }
        conn.call("closeSession", json!({"sessionId": sid}))?;
        drop(conn);
        let _ = std::fs::remove_file(&path);

        let args = [std::ffi::OsStr::new("inspect"), f.path.as_os_str()];
        let (w, rss) = run_measured(bin, &args, &d.env, dir)?;
        insp.push(w);
        insp_rss = insp_rss.max(rss);

        if let Some(o) = oracle {
            let p = o.bench(&f.path, 1)?;
            pi_work.push(p.work_ms);
            pi_wall.push(p.process_wall_ms);
            pi_rss.push(p.rss_mb);
        }
    }
    let (fl, flc) = (median(floor.clone()), median(floor_cpu.clone()));
    let (t, o, c) = (
        median(total.clone()),
        median(open_only),
        median(cpu.clone()),
    );
    let w = median(insp.clone());
    println!(
        "  floor {fl:.1} ms wall, {flc:.1} ms CPU (medians of {} runs interleaved with the figures below)",
        plan.cold_runs
    );
    let pi = if pi_work.is_empty() {
        String::new()
    } else {
        format!(
            "; Pi bench.mjs workMs {:.1} = {:.1}x compactd (target >= 10x)",
            median(pi_work.clone()),
            median_ratio(&pi_work, &total)
        )
    };
    // The daemon's CPU time comes in clock ticks (10 ms): a ratio only when that is precise.
    let cpu_note = if flc >= 20.0 {
        format!(
            "daemon CPU {c:.0} ms = {:.2}x the floor's CPU",
            median_ratio(&cpu, &floor_cpu)
        )
    } else {
        format!("daemon CPU {c:.0} ms (clock ticks, too coarse for a ratio)")
    };
    println!(
        "  cold openSession+getContextUsage+previewCompaction: {t:.1} ms (open alone {o:.1}) = {:.2}x floor (target <= 1.5x); {cpu_note}{pi}",
        median_ratio(&total, &floor),
    );
    let rss = insp_rss
        .map(|kb| {
            format!(
                "max RSS {:.1} MB = {:.2}x file",
                kb as f64 / 1024.0,
                kb as f64 * 1024.0 / f.bytes as f64
            )
        })
        .unwrap_or_else(|| format!("max RSS not measured ({GNU_TIME} missing)"));
    let pi = if pi_wall.is_empty() {
        String::new()
    } else {
        format!(
            "; Pi processWallMs {:.1} = {:.1}x compactd (target >= 10x), Pi RSS {:.0} MB",
            median(pi_wall.clone()),
            median_ratio(&pi_wall, &insp),
            median(pi_rss)
        )
    };
    println!(
        "  compactd inspect (whole process): {w:.1} ms = {:.2}x floor (target <= 1.5x), {rss}{pi}",
        median_ratio(&insp, &floor),
    );
    Ok(())
}

/// GNU time, which reports a child's own peak RSS. (`wait4`'s `ru_maxrss` for a child spawned
/// from this process is at least this process's peak at the exec, which holds the session bytes,
/// so it cannot be used directly.)
const GNU_TIME: &str = "/usr/bin/time";

/// Runs `bin args` to completion (stdout discarded); returns (wall ms, max RSS KiB if known).
fn run_measured(
    bin: &Path,
    args: &[&std::ffi::OsStr],
    env: &[(&'static str, PathBuf)],
    scratch: &Path,
) -> Res<(f64, Option<u64>)> {
    let rss_file = scratch.join("time-rss.txt");
    let timed = Path::new(GNU_TIME).exists();
    let mut cmd = if timed {
        let mut c = Command::new(GNU_TIME);
        c.arg("-f").arg("%M").arg("-o").arg(&rss_file).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let out = cmd.output().map_err(|e| format!("spawn: {e}"))?;
    let wall = ms(t.elapsed());
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let rss = timed
        .then(|| std::fs::read_to_string(&rss_file).ok())
        .flatten()
        .and_then(|t| t.lines().last().and_then(|l| l.trim().parse().ok()));
    Ok((wall, rss))
}

// ---------------------------------------------------------------- steady state

/// p50 of a pure request (no session state): the socket + dispatch floor of one round trip.
fn ping_p50(c: &mut Conn, n: usize) -> Res<f64> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.call(
            "shouldCompact",
            json!({"contextTokens": 1000, "contextWindow": 200000}),
        )?;
        v.push(ms(t.elapsed()));
    }
    Ok(percentile(&mut v, 50.0))
}

/// Returns the p50 of the four-request step.
fn steady(
    d: &Daemon,
    f: &SizeFile,
    dir: &Path,
    plan: &Plan,
    ping: f64,
    one_mb: Option<f64>,
) -> Res<f64> {
    let path = copy_session(&f.path, dir, &format!("steady-{}", f.mb))?;
    let mut c = d.connect()?;
    let sid = c.open(&path)?;
    let mut step = Vec::new();
    let mut per: [Vec<f64>; 4] = Default::default();
    let deadline = Instant::now() + plan.steady_time;
    let warmup = 5;
    for i in 0..plan.steady_iters + warmup {
        if Instant::now() > deadline {
            break;
        }
        let msg = json!({"role": "user", "content": format!("steady state request {i}: please continue"), "timestamp": 1_767_225_600_000u64 + i as u64});
        let t0 = Instant::now();
        c.call("appendMessage", json!({"sessionId": sid, "message": msg}))?;
        let t1 = Instant::now();
        c.call("getContextUsage", json!({"sessionId": sid}))?;
        let t2 = Instant::now();
        c.call("shouldCompact", json!({"sessionId": sid}))?;
        let t3 = Instant::now();
        let p = c.call("previewCompaction", json!({"sessionId": sid}))?;
        let t4 = Instant::now();
        if p.get("firstKeptEntryId").is_none() && p.get("nothingToCompact").is_none() {
            return Err(format!("unexpected preview: {p}"));
        }
        if i >= warmup {
            step.push(ms(t4 - t0));
            for (k, (a, b)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4)]
                .into_iter()
                .enumerate()
            {
                per[k].push(ms(b - a));
            }
        }
    }
    let n = step.len();
    let (p50, p99) = pct(&mut step);
    let per: Vec<String> = ["append", "usage", "shouldCompact", "preview"]
        .iter()
        .zip(per.iter_mut())
        .map(|(name, v)| {
            format!(
                "{name} {:.3}/{:.3}",
                percentile(v, 50.0),
                percentile(v, 99.0)
            )
        })
        .collect();
    let vs_one = one_mb
        .map(|b| format!(", {:.2}x the 1 MB p50 (target <= 2x)", p50 / b))
        .unwrap_or_default();
    println!(
        "  steady append+usage+shouldCompact+preview ({n} steps): p50 {p50:.3} ms (target < 1 ms), p99 {p99:.3} ms; per request p50/p99 ms: {}; = {:.1}x four pure round trips ({:.3} ms each){vs_one}",
        per.join(", "),
        p50 / (4.0 * ping),
        ping
    );
    c.call("closeSession", json!({"sessionId": sid}))?;
    let _ = std::fs::remove_file(&path);
    Ok(p50)
}

// ---------------------------------------------------------------- socket throughput / latency

/// `shouldCompact` requests with `depth` in flight per connection for `time`; returns req/s.
fn pipelined(
    d: &Daemon,
    session: &Path,
    conns: usize,
    depth: usize,
    time: Duration,
    pure: bool,
) -> Res<(f64, f64)> {
    let barrier = Arc::new(Barrier::new(conns + 1));
    let errors = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..conns {
        let mut c = d.connect()?;
        let sid = c.open(session)?;
        let params = if pure {
            json!({"contextTokens": 1000, "contextWindow": 200000}).to_string()
        } else {
            json!({"sessionId": sid}).to_string()
        };
        let (barrier, errors) = (barrier.clone(), errors.clone());
        handles.push(std::thread::spawn(move || -> u64 {
            barrier.wait();
            let start = Instant::now();
            let mut done = 0u64;
            let mut batch = Vec::with_capacity(depth * 96);
            let mut id = 1_000_000u64;
            while start.elapsed() < time && done < 5_000_000 {
                batch.clear();
                for _ in 0..depth {
                    id += 1;
                    let _ = writeln!(
                        batch,
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"shouldCompact\",\"params\":{params}}}"
                    );
                }
                if c.writer.write_all(&batch).is_err() {
                    errors.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                for _ in 0..depth {
                    if c.read_line().is_err() {
                        errors.fetch_add(1, Ordering::Relaxed);
                        return done;
                    }
                    if memchr::memmem::find(&c.line, b"\"error\"").is_some() {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    done += 1;
                }
            }
            done
        }));
    }
    barrier.wait();
    let c0 = d.cpu_ms();
    let start = Instant::now();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    let secs = start.elapsed().as_secs_f64();
    let cpu_us = (d.cpu_ms() - c0) * 1e3 / total.max(1) as f64;
    let e = errors.load(Ordering::Relaxed);
    if e > 0 {
        return Err(format!("{e} shouldCompact requests failed"));
    }
    Ok((total as f64 / secs, cpu_us))
}

/// Closed-loop clients (one request in flight each, `request` bytes and the line that answers
/// them) for `time`; (p50, p99, req/s). The client writes pre-built request bytes and only scans
/// each reply, to take as little of the machine's CPU from the server as it can.
fn closed_loop(clients: Vec<(Conn, String)>, time: Duration) -> Res<(f64, f64, f64)> {
    let barrier = Arc::new(Barrier::new(clients.len() + 1));
    let mut handles = Vec::new();
    for (mut c, request) in clients {
        let barrier = barrier.clone();
        handles.push(std::thread::spawn(move || -> Res<Vec<f64>> {
            barrier.wait();
            let start = Instant::now();
            let mut lat = Vec::with_capacity(4096);
            while start.elapsed() < time && lat.len() < 1_000_000 {
                let t = Instant::now();
                c.writer
                    .write_all(request.as_bytes())
                    .map_err(|e| format!("write: {e}"))?;
                c.read_line()?;
                lat.push(ms(t.elapsed()));
                if memchr::memmem::find(&c.line, b"\"error\"").is_some() {
                    return Err(format!(
                        "request failed: {}",
                        String::from_utf8_lossy(&c.line)
                    ));
                }
            }
            Ok(lat)
        }));
    }
    barrier.wait();
    let start = Instant::now();
    let mut all = Vec::new();
    for h in handles {
        all.extend(
            h.join()
                .map_err(|_| "client thread panicked".to_string())??,
        );
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = all.len() as f64 / secs;
    let (p50, p99) = pct(&mut all);
    Ok((p50, p99, rate))
}

/// `conns` connections to the daemon, each with the session open and a `shouldCompact` request
/// for it (`pure`: the session-less form, `{contextTokens, contextWindow}`).
fn should_compact_clients(
    d: &Daemon,
    session: &Path,
    conns: usize,
    pure: bool,
) -> Res<Vec<(Conn, String)>> {
    (0..conns)
        .map(|_| {
            let mut c = d.connect()?;
            let sid = c.open(session)?;
            let params = if pure {
                json!({"contextTokens": 150000, "contextWindow": 200000})
            } else {
                json!({"sessionId": sid})
            };
            let request = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"shouldCompact\",\"params\":{params}}}\n"
            );
            Ok((c, request))
        })
        .collect()
}

/// A reference for closed-loop round trips on this machine: a Unix-socket server in this process that
/// answers each line with a reply of the size `shouldCompact`'s has, one thread per connection
/// (no parsing, no dispatch). Returns `conns` connected clients.
fn echo_clients(dir: &Path, conns: usize, reply_len: usize) -> Res<Vec<(Conn, String)>> {
    use std::io::{BufRead, Write};
    let path = dir.join(format!("echo-{conns}.sock"));
    let _ = std::fs::remove_file(&path);
    let listener =
        std::os::unix::net::UnixListener::bind(&path).map_err(|e| format!("bind: {e}"))?;
    let mut reply = vec![b'x'; reply_len];
    reply.push(b'\n');
    std::thread::spawn(move || {
        for stream in listener.incoming().take(conns) {
            let Ok(stream) = stream else { return };
            let reply = reply.clone();
            std::thread::spawn(move || {
                let Ok(mut writer) = stream.try_clone() else {
                    return;
                };
                let mut reader = std::io::BufReader::new(stream);
                let mut line = Vec::new();
                while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                    line.clear();
                    if writer.write_all(&reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (0..conns)
        .map(|_| Ok((Conn::new(&path)?, "{\"ping\":1}\n".to_string())))
        .collect()
}

fn socket(d: &Daemon, f: &SizeFile, dir: &Path, plan: &Plan) -> Res<()> {
    let path = copy_session(&f.path, dir, "socket")?;
    let mut holder = d.connect()?;
    let sid = holder.open(&path)?;
    println!(
        "socket figures on the {} session ({} pipelined per connection, {:.1} s per setting):",
        f.label,
        32,
        plan.socket_time.as_secs_f64()
    );
    for &n in &plan.connections {
        let (session, cpu) = pipelined(d, &path, n, 32, plan.socket_time, false)?;
        let (pure, pure_cpu) = pipelined(d, &path, n, 32, plan.socket_time, true)?;
        let target = if n == 8 { " (target >= 100000/s)" } else { "" };
        // Daemon CPU per request bounds the rate the daemon alone could reach on every core,
        // whatever the client threads and other load take.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        println!(
            "  shouldCompact {{sessionId}}, {n} pipelined connections: {session:.0}/s{target} = {:.2}x the pure shouldCompact {{contextTokens}} rate {pure:.0}/s; daemon CPU {cpu:.1} us/request (pure {pure_cpu:.1}), i.e. at most {:.0}/s on {cores} cores",
            session / pure,
            cores * 1e6 / cpu.max(1e-3)
        );
    }
    let n = plan.closed_loop;
    let (p50, p99, rate) = closed_loop(
        should_compact_clients(d, &path, n, false)?,
        plan.socket_time,
    )?;
    let (u50, u99, urate) =
        closed_loop(should_compact_clients(d, &path, n, true)?, plan.socket_time)?;
    let (e50, e99, erate) = closed_loop(echo_clients(dir, n, 200)?, plan.socket_time)?;
    let (q50, q99, qrate) = closed_loop(
        should_compact_clients(d, &path, 1, false)?,
        plan.socket_time,
    )?;
    println!(
        "  {n} closed-loop connections: p50 {p50:.3} ms, p99 {p99:.3} ms (target < 2 ms), {rate:.0}/s; same clients, pure shouldCompact {{contextTokens}}: p50 {u50:.3}, p99 {u99:.3}, {urate:.0}/s; a reference server in this process (a thread per connection answering each line with 200 bytes, no parsing): p50 {e50:.3}, p99 {e99:.3}, {erate:.0}/s, the daemon's p99 = {:.2}x its; one connection alone: p50 {q50:.3} ms, p99 {q99:.3} ms, {qrate:.0}/s",
        p99 / e99
    );
    holder.call("closeSession", json!({"sessionId": sid}))?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

// ---------------------------------------------------------------- compaction

fn compaction(
    d: &Daemon,
    engine: &str,
    f: &SizeFile,
    dir: &Path,
    plan: &Plan,
    fake: Option<&FakeProvider>,
) -> Res<()> {
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut tokens = 0.0;
    let before = fake.map(|p| {
        (
            p.requests.load(Ordering::Relaxed),
            p.body_bytes.load(Ordering::Relaxed),
        )
    });
    for r in 0..plan.compact_runs {
        let path = copy_session(&f.path, dir, &format!("compact-{engine}-{}-{r}", f.mb))?;
        let mut c = d.connect()?;
        let sid = c.open(&path)?;
        let c0 = d.cpu_ms();
        let t = Instant::now();
        let res = c.call("compact", json!({"sessionId": sid}))?;
        times.push(ms(t.elapsed()));
        cpu.push(d.cpu_ms() - c0);
        tokens = res["tokensBefore"].as_f64().unwrap_or(f64::NAN);
        if res
            .get("summary")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(format!("compact returned no summary: {res}"));
        }
        c.call("closeSession", json!({"sessionId": sid}))?;
        let _ = std::fs::remove_file(&path);
    }
    let t = median(times);
    let sent = match (fake, before) {
        (Some(p), Some((r0, b0))) => {
            let reqs = p.requests.load(Ordering::Relaxed) - r0;
            let bytes = p.body_bytes.load(Ordering::Relaxed) - b0;
            if reqs == 0 {
                return Err("the fake provider received no request".into());
            }
            format!(
                ", {} requests of {:.1} MB each to the fake",
                reqs / plan.compact_runs as u64,
                bytes as f64 / reqs as f64 / 1e6
            )
        }
        _ => String::new(),
    };
    let target = if fake.is_some() && tokens < 500_000.0 {
        " (target < 20 ms)"
    } else {
        ""
    };
    println!(
        "  compact, {engine} ({:.0} tokens before): {t:.1} ms{target} = {:.2}x the floor parse of the file ({:.1} ms); daemon CPU {:.0} ms (10 ms ticks){sent}",
        tokens,
        t / f.floor_ms,
        f.floor_ms,
        median(cpu)
    );
    Ok(())
}

// ---------------------------------------------------------------- RSS

fn rss(bin: &Path, root: &Path, largest: &SizeFile, one: &SizeFile, plan: &Plan) -> Res<()> {
    let mb = |kb: u64| kb as f64 / 1024.0;
    {
        let d = Daemon::start(bin, &root.join("rss-one"), None)?;
        let (idle, _) = d.rss_kb();
        let path = copy_session(&largest.path, root, "rss-one")?;
        let mut c = d.connect()?;
        let sid = c.open(&path)?;
        c.call("getContextUsage", json!({"sessionId": sid}))?;
        c.call("previewCompaction", json!({"sessionId": sid}))?;
        let (now, peak) = d.rss_kb();
        let file = largest.bytes as f64 / 1048576.0;
        println!(
            "  RSS, one {} session open: {:.1} MB (peak {:.1} MB; idle daemon {:.1} MB) = file {file:.1} MB + {:.1} MB (target <= file + 64 MB)",
            largest.label,
            mb(now),
            mb(peak),
            mb(idle),
            mb(now) - file
        );
        // The peak while the same session is compacted (extractively) and after.
        c.call("compact", json!({"sessionId": sid}))?;
        let (after, peak) = d.rss_kb();
        // The summary's temporaries were freed at once; the allocator hands them back to the
        // system once nothing was freed for 5 s (`cpu::ReleaseWhenDone`).
        std::thread::sleep(plan.release_wait);
        let (settled, _) = d.rss_kb();
        println!(
            "  RSS after compacting it: {:.1} MB, {:.0} s later {:.1} MB = file + {:.1} MB; peak during open + compaction {:.1} MB = file + {:.1} MB",
            mb(after),
            plan.release_wait.as_secs_f64(),
            mb(settled),
            mb(settled) - file,
            mb(peak),
            mb(peak) - file
        );
        drop(c);
        let _ = std::fs::remove_file(&path);
    }
    let d = Daemon::start(bin, &root.join("rss-many"), None)?;
    let dir = root.join("many");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut c = d.connect()?;
    let mut total = 0u64;
    for i in 0..plan.many_sessions {
        let path = copy_session(&one.path, &dir, &format!("s{i:03}"))?;
        total += one.bytes;
        let sid = c.open(&path)?;
        c.call("getContextUsage", json!({"sessionId": sid}))?;
    }
    let (now, peak) = d.rss_kb();
    let files = total as f64 / 1048576.0;
    println!(
        "  RSS, {} sessions of {} open: {:.1} MB (peak {:.1} MB) = files {files:.1} MB + {:.1} MB (target <= files + 64 MB)",
        plan.many_sessions,
        one.label,
        mb(now),
        mb(peak),
        mb(now) - files
    );
    Ok(())
}

// ---------------------------------------------------------------- isolation

fn isolation(d: &Daemon, small: &SizeFile, big: &SizeFile, dir: &Path, plan: &Plan) -> Res<()> {
    let small_path = copy_session(&small.path, dir, "iso-small")?;
    let big_path = copy_session(&big.path, dir, "iso-big")?;
    let mut a = d.connect()?;
    let sid = a.open(&small_path)?;
    // One request per millisecond, so the probing client does not itself load the machine.
    // Each sample is (start, latency ms).
    let probe =
        |a: &mut Conn, until: &dyn Fn() -> bool, cap: Duration| -> Res<Vec<(Instant, f64)>> {
            let start = Instant::now();
            let mut lat = Vec::new();
            while !until() && start.elapsed() < cap && lat.len() < 1_000_000 {
                let t = Instant::now();
                a.call("getContextUsage", json!({"sessionId": sid}))?;
                lat.push((t, ms(t.elapsed())));
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(lat)
        };
    let mut base: Vec<f64> = probe(&mut a, &|| false, plan.isolation_baseline)?
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let stolen_before = common::stolen();
    let mut b = d.connect()?;
    let flag = done.clone();
    let worker = std::thread::spawn(move || -> Res<(Instant, Instant, Instant)> {
        let t = Instant::now();
        let out = (|| {
            let sid = b.open(&big_path)?;
            let opened = Instant::now();
            b.call("compact", json!({"sessionId": sid}))?;
            let _ = std::fs::remove_file(&big_path);
            Ok((t, opened, Instant::now()))
        })();
        flag.store(true, Ordering::SeqCst);
        out
    });
    let during = probe(
        &mut a,
        &|| done.load(Ordering::SeqCst),
        Duration::from_secs(300),
    )?;
    let (t0, opened, end) = worker.join().map_err(|_| "worker panicked".to_string())??;
    let stolen = common::stolen().saturating_sub(stolen_before);
    let (b50, b99) = pct(&mut base);
    let phase = |from: Instant, to: Instant| {
        // A probe belongs to the phase it started in.
        let mut v: Vec<f64> = during
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, l)| *l)
            .collect();
        let max = v.iter().copied().fold(0.0, f64::max);
        let n = v.len();
        let (p50, p99) = pct(&mut v);
        (n, p50, p99, max)
    };
    let mut all: Vec<f64> = during.iter().map(|(_, l)| *l).collect();
    let max_all = all.iter().copied().fold(0.0, f64::max);
    let (d50, d99) = pct(&mut all);
    println!(
        "  small session getContextUsage while another client opens ({:.0} ms) and compacts ({:.0} ms) the {} session: p99 {d99:.3} ms, p50 {d50:.3}, max {max_all:.1} ({} probes at 1/ms); alone p99 {b99:.3} ms, p50 {b50:.3}; added p99 {:.3} ms (target < 10 ms); CPU time stolen by the host meanwhile {:.0} ms",
        ms(opened - t0),
        ms(end - opened),
        big.label,
        all.len(),
        d99 - b99,
        ms(stolen)
    );
    // Probes that started before the worker's clock did still overlapped the open.
    let first = during.first().map_or(t0, |(t, _)| (*t).min(t0));
    for (name, from, to) in [("open", first, opened), ("compact", opened, end)] {
        let (n, p50, p99, max) = phase(from, to);
        println!(
            "    during {name}: {n} probes, p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.1} ms"
        );
    }
    a.call("closeSession", json!({"sessionId": sid}))?;
    Ok(())
}

// ---------------------------------------------------------------- main

fn run() -> Res<()> {
    let bench = common::is_bench();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_compactd"));
    if !bin.exists() {
        println!("daemon_load: {} is not built; skipped", bin.display());
        return Ok(());
    }
    let plan = if bench {
        Plan {
            cold_runs: 5,
            steady_iters: 300,
            steady_time: Duration::from_secs(15),
            socket_time: Duration::from_secs(2),
            connections: vec![1, 8, 64],
            closed_loop: 64,
            compact_runs: 3,
            many_sessions: 100,
            isolation_baseline: Duration::from_secs(2),
            release_wait: Duration::from_secs(6),
        }
    } else {
        Plan {
            cold_runs: 1,
            steady_iters: 10,
            steady_time: Duration::from_secs(2),
            socket_time: Duration::from_millis(150),
            connections: vec![1, 4],
            closed_loop: 4,
            compact_runs: 1,
            many_sessions: 3,
            isolation_baseline: Duration::from_millis(100),
            release_wait: Duration::ZERO,
        }
    };
    println!(
        "daemon_load ({}, {}){}",
        bin.display(),
        common::machine_note(),
        if bench {
            ""
        } else {
            ": smoke run (debug build, timings mean nothing; use cargo bench)"
        }
    );
    let oracle = if bench { Oracle::find() } else { None };
    if bench && oracle.is_none() {
        println!("COMPACTD_ORACLE not set or incomplete: synthetic sessions, no Pi figures");
    }
    let tmp = tempfile::Builder::new()
        .prefix("compactd-load-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let root = tmp.path();
    let sessions = root.join("sessions");
    std::fs::create_dir_all(&sessions).map_err(|e| e.to_string())?;

    let load_file = |mb: u64| -> Res<SizeFile> {
        let (label, path) = if bench {
            common::session_file(oracle.as_ref(), mb)?
        } else {
            (
                "synthetic smoke".to_string(),
                common::small_session_file("smoke-256k", 256 * 1024)?,
            )
        };
        let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
        let floor_ms = common::floor_ms(&bytes, if bench { 3 } else { 1 });
        Ok(SizeFile {
            mb,
            label,
            path,
            bytes: bytes.len() as u64,
            floor_ms,
        })
    };
    let size_list = if bench { common::sizes() } else { vec![1] };
    let compact_sizes: Vec<u64> = if bench {
        std::env::var("COMPACTD_BENCH_COMPACT_SIZES")
            .ok()
            .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![1, 10])
    } else {
        vec![1]
    };
    let mut files = Vec::new();
    for &mb in &size_list {
        files.push(load_file(mb)?);
    }
    let mut extra = Vec::new();
    for &mb in &compact_sizes {
        if !size_list.contains(&mb) {
            extra.push(load_file(mb)?);
        }
    }

    let d = Daemon::start(&bin, &root.join("main"), None)?;
    let smallest = &files[0];
    let largest = &files[files.len() - 1];
    // `COMPACTD_BENCH_ISOLATION=N`: only the isolation phase, N times in one daemon, to hunt a
    // rare stall (one run's worst probe tells little).
    if let Some(runs) = std::env::var("COMPACTD_BENCH_ISOLATION")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        for run in 1..=runs {
            println!("isolation, run {run} of {runs}:");
            isolation(&d, smallest, largest, &sessions, &plan)?;
        }
        return Ok(());
    }
    // `COMPACTD_BENCH_SOCKET=N`: only the socket phase, N times in one daemon (its p99 moves
    // from run to run on a shared machine).
    if let Some(runs) = std::env::var("COMPACTD_BENCH_SOCKET")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        for run in 1..=runs {
            println!("socket, run {run} of {runs}:");
            socket(&d, smallest, &sessions, &plan)?;
        }
        return Ok(());
    }
    let mut pinger = d.connect()?;
    let ping = ping_p50(&mut pinger, if bench { 2000 } else { 20 })?;
    let mut one_mb = None;
    for f in &files {
        println!("{} ({} bytes):", f.label, f.bytes);
        cold(&d, &bin, oracle.as_ref(), f, &sessions, &plan)?;
        let p50 = steady(&d, f, &sessions, &plan, ping, one_mb)?;
        if f.mb == 1 {
            one_mb = Some(p50);
        }
    }
    socket(&d, smallest, &sessions, &plan)?;

    let fake = FakeProvider::start()?;
    let fake_daemon = Daemon::start(&bin, &root.join("fake"), Some(&fake.config()))?;
    // The same provider with redaction off: how much of the overhead is the secret scan.
    let fake_plain = Daemon::start(
        &bin,
        &root.join("fake-plain"),
        Some(&format!("{}[redaction]\nenabled = false\n", fake.config())),
    )?;
    println!("compaction (median of {}):", plan.compact_runs);
    for mb in compact_sizes {
        let Some(f) = files.iter().chain(extra.iter()).find(|f| f.mb == mb) else {
            continue;
        };
        println!(" {}:", f.label);
        compaction(&d, "extractive", f, &sessions, &plan, None)?;
        compaction(
            &fake_daemon,
            "fake provider",
            f,
            &sessions,
            &plan,
            Some(&fake),
        )?;
        compaction(
            &fake_plain,
            "fake provider, redaction off",
            f,
            &sessions,
            &plan,
            Some(&fake),
        )?;
    }
    drop(fake_daemon);
    drop(fake_plain);
    println!("memory:");
    // Many sessions are 1 MB each, whatever sizes this run has (the engine issue's target).
    let one_mb_file = match files.iter().chain(extra.iter()).find(|f| f.mb == 1) {
        Some(f) => f.clone(),
        None => load_file(1)?,
    };
    rss(&bin, root, largest, &one_mb_file, &plan)?;
    println!("isolation:");
    isolation(&d, smallest, largest, &sessions, &plan)?;
    Ok(())
}

fn main() {
    let t = Instant::now();
    match run() {
        Ok(()) => println!("daemon_load finished in {:.1} s", t.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("daemon_load failed: {e}");
            std::process::exit(1);
        }
    }
}
