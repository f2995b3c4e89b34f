//! One daemon holding many sessions: the release `compactd serve`, started with a soft limit of
//! 1024 open files (a desktop session's or a systemd service's default), opens small sessions
//! (a header and two turns each) until 100, 1,000 and 10,000 are open, and at each step reports
//! the daemon's resident memory, its open descriptors (and its soft limit, which it raises to the
//! hard one) and the latency of `shouldCompact {sessionId}` from closed-loop clients. The
//! 100-session figures are the baseline of the same run. Then open/close churn: the same sessions
//! closed and opened again, round after round, with the daemon's memory and descriptors after
//! each.
//!
//! Targets (issue 48): 10,000 sessions open under a soft limit of 1024, RSS at most 150 MB,
//! `shouldCompact` p99 with all of them open within 1.5x of its p99 with 100 open, and churn
//! without growth. Under `cargo test` (no `--bench`) a smoke version opens 60 sessions under a
//! soft limit of 32 and fails if any request fails.
//!
//! `COMPACTD_BENCH_SESSIONS=100,1000,10000` sets the steps; `COMPACTD_BENCH_CHURN=N` the churn
//! rounds (default 5).

mod common;

#[path = "../tests/support/small_sessions.rs"]
mod small_sessions;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{model, Conn, Daemon};
use common::{ms, percentile};
use small_sessions::write_small_sessions;

type Res<T> = Result<T, String>;

/// What the table reports of the daemon: its memory, its descriptors and its limit.
trait Measured {
    fn rss_mb(&self) -> f64;
    fn settled_rss_mb(&self, idle: Duration) -> f64;
    fn descriptors(&self) -> usize;
    fn soft_limit(&self) -> String;
}

impl Measured for Daemon {
    fn rss_mb(&self) -> f64 {
        self.rss_kb().0 as f64 / 1024.0
    }

    /// The resident size once it has settled: after `idle` (the reaper hands freed memory
    /// back once nothing was freed for 5 s), three readings 500 ms apart within 1 MB, at most
    /// 15 s more.
    fn settled_rss_mb(&self, idle: Duration) -> f64 {
        std::thread::sleep(idle);
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut last = self.rss_mb();
        let mut steady = 0;
        while steady < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            let now = self.rss_mb();
            steady = if (now - last).abs() < 1.0 {
                steady + 1
            } else {
                0
            };
            last = now;
        }
        last
    }

    fn descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, |d| d.count())
    }

    fn soft_limit(&self) -> String {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.child.id()))
            .unwrap_or_default();
        limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
            .unwrap_or_else(|| "?".into())
    }
}

/// A session a connection holds open: its file and its id.
type Held = (PathBuf, String);

/// Opens `files` spread over `conns` (their sessions stay open while the connection holds them);
/// returns what each connection now holds.
fn open_all(conns: &mut [Conn], files: &[PathBuf]) -> Res<Vec<Vec<Held>>> {
    let per = files.len().div_ceil(conns.len()).max(1);
    let mut held = Vec::new();
    for (conn, chunk) in conns.iter_mut().zip(files.chunks(per)) {
        let calls: Vec<(&str, Value)> = chunk
            .iter()
            .map(|f| ("openSession", json!({"path": f, "model": model()})))
            .collect();
        let opened = conn.calls(&calls)?;
        held.push(
            chunk
                .iter()
                .zip(&opened)
                .map(|(f, o)| {
                    let sid = o["sessionId"].as_str().unwrap_or_default().to_owned();
                    (f.clone(), sid)
                })
                .collect(),
        );
    }
    Ok(held)
}

/// p50 and p99 (ms) of `shouldCompact {sessionId}` from `clients` closed-loop connections, each
/// asking about open sessions in turn, for `time`; and the rate.
fn latency(socket: &Path, ids: &[String], clients: usize, time: Duration) -> Res<(f64, f64, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(ids.to_vec());
    let mut threads = Vec::new();
    for c in 0..clients {
        let mut conn = Conn::new(socket)?;
        let (stop, ids) = (stop.clone(), ids.clone());
        threads.push(std::thread::spawn(move || -> Res<Vec<f64>> {
            let mut times = Vec::new();
            let mut i = c * 7919;
            while !stop.load(Ordering::Relaxed) {
                let sid = &ids[i % ids.len()];
                i += 104_729;
                let t = Instant::now();
                conn.calls(&[("shouldCompact", json!({"sessionId": sid}))])?;
                times.push(ms(t.elapsed()));
            }
            Ok(times)
        }));
    }
    std::thread::sleep(time);
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in threads {
        all.extend(t.join().map_err(|_| "a client panicked")??);
    }
    let n = all.len() as f64;
    Ok((
        percentile(&mut all, 50.0),
        percentile(&mut all, 99.0),
        n / time.as_secs_f64(),
    ))
}

fn run() -> Res<()> {
    let bench = common::is_bench();
    let steps: Vec<usize> = if bench {
        std::env::var("COMPACTD_BENCH_SESSIONS")
            .ok()
            .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![100, 1_000, 10_000])
    } else {
        vec![20, 60]
    };
    let soft = if bench { 1024 } else { 32 };
    let rounds: usize = if bench {
        std::env::var("COMPACTD_BENCH_CHURN")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5)
    } else {
        2
    };
    let (clients, time) = if bench {
        (8, Duration::from_secs(3))
    } else {
        (2, Duration::from_millis(200))
    };
    // The daemon's reaper hands freed memory back 5 s after the last free.
    let release_wait = if bench {
        Duration::from_secs(6)
    } else {
        Duration::ZERO
    };
    let bin = common::target_dir()
        .join(if bench { "release" } else { "debug" })
        .join("compactd");
    let root = tempfile::tempdir().map_err(|e| e.to_string())?;
    let most = steps.iter().copied().max().unwrap_or(0);
    // Under the daemon's home: its allowed roots.
    let files = write_small_sessions(&root.path().join("home/sessions"), most)
        .map_err(|e| e.to_string())?;
    let d = Daemon::start_limited(&bin, root.path(), None, Some(soft))?;
    println!("{}", common::machine_note());
    println!(
        "daemon started with a soft limit of {soft} open files; its limit now: {} (pid {})",
        d.soft_limit(),
        d.child.id()
    );
    let idle_rss = d.settled_rss_mb(release_wait);
    let idle_fds = d.descriptors();
    println!("idle: RSS {idle_rss:.1} MB, {idle_fds} descriptors");
    let mut conns: Vec<Conn> = (0..8).map(|_| Conn::new(&d.socket)).collect::<Res<_>>()?;
    let mut open: Vec<Vec<Held>> = Vec::new();
    let mut opened = 0usize;
    let mut base_p99 = None;
    println!(
        "| sessions | open rate | RSS | per session | descriptors | per session | shouldCompact p50 | p99 | p99 ÷ at {} | rate |",
        steps[0]
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut last = (0.0, 0.0);
    for &n in &steps {
        let t = Instant::now();
        let more = open_all(&mut conns, &files[opened..n])?;
        let open_rate = (n - opened) as f64 / t.elapsed().as_secs_f64();
        for (i, held) in more.into_iter().enumerate() {
            if open.len() <= i {
                open.push(Vec::new());
            }
            open[i].extend(held);
        }
        opened = n;
        let rss = d.settled_rss_mb(release_wait);
        let fds = d.descriptors();
        let all: Vec<String> = open.iter().flatten().map(|(_, s)| s.clone()).collect();
        let (p50, p99, rate) = latency(&d.socket, &all, clients, time)?;
        let base = *base_p99.get_or_insert(p99);
        println!(
            "| {n} | {open_rate:.0}/s | {rss:.1} MB | {:.1} KB | {fds} | {:.2} | {p50:.3} ms | {p99:.3} ms | {:.2}x | {rate:.0}/s |",
            (rss - idle_rss) * 1024.0 / n as f64,
            (fds - idle_fds) as f64 / n as f64,
            p99 / base
        );
        last = (rss, p99 / base);
    }
    println!(
        "targets: {opened} sessions open under a soft limit of {soft} (raised to {}); RSS {:.1} MB (target <= 150 MB); p99 {:.2}x the {}-session p99 (target <= 1.5x)",
        d.soft_limit(),
        last.0,
        last.1,
        steps[0]
    );

    // Churn: a tenth of the sessions (at least one connection's worth) closed and opened again.
    let churned = open.len().div_ceil(10).max(1);
    let before = (d.settled_rss_mb(release_wait), d.descriptors());
    println!(
        "churn: {rounds} rounds of closing and reopening the sessions of {churned} of {} connections; before: RSS {:.1} MB, {} descriptors",
        open.len(),
        before.0,
        before.1
    );
    for round in 1..=rounds {
        for (conn, held) in conns.iter_mut().zip(open.iter_mut()).take(churned) {
            let close: Vec<(&str, Value)> = held
                .iter()
                .map(|(_, s)| ("closeSession", json!({"sessionId": s})))
                .collect();
            conn.calls(&close)?;
            let files: Vec<PathBuf> = held.iter().map(|(f, _)| f.clone()).collect();
            *held = open_all(std::slice::from_mut(conn), &files)?
                .into_iter()
                .flatten()
                .collect();
        }
        println!(
            "  round {round}: RSS {:.1} MB, {} descriptors",
            d.settled_rss_mb(release_wait),
            d.descriptors()
        );
    }
    let after = (d.settled_rss_mb(release_wait), d.descriptors());
    println!(
        "churn growth: RSS {:+.1} MB, descriptors {:+}",
        after.0 - before.0,
        after.1 as i64 - before.1 as i64
    );
    Ok(())
}

fn main() {
    let t = Instant::now();
    match run() {
        Ok(()) => println!("sessions finished in {:.1} s", t.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("sessions failed: {e}");
            std::process::exit(1);
        }
    }
}
