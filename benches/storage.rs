//! The postgres backend against the files backend, in one run, through the real daemon
//! (`compactd serve`) and a real PostgreSQL server this benchmark starts itself (`initdb` into a
//! temporary directory, Unix socket; the server's settings at their defaults, `fsync` on, and
//! compactd's default durability on both sides: message appends are not flushed before the
//! reply, on files nor on the database, whose `synchronous_commit` follows the setting):
//!
//! 1. **Appends.** Per daemon one client appending user messages back to back (`appendMessage`,
//!    one round trip each): appends per second over all daemons, and p50/p99 per append, with
//!    1, 2 and 4 daemons, on one shared session and on a session each. The baseline is the
//!    files backend: one daemon, one session file (several daemons cannot share a file: the
//!    lock refuses the second), and 1/2/4 daemons with a file each. One daemon with four
//!    clients on sessions of their own, on files and on the database (target ≥ 0.7x files);
//!    two daemons on one session (target p99 < 5 ms). With `COMPACTD_BENCH_BASELINE_BIN` the
//!    database rows, and the four-client files row of each round, are also measured for a
//!    binary built before the change, in the same run.
//! 2. **Cold open.** A 10 MB session opened by a daemon that has never seen it: `openSession
//!    {path}` of the file against `openSession {headerId}` of its imported copy, median of 5
//!    fresh daemons each.
//!
//! Under `cargo test` (no `--bench`) a smoke version runs 50 appends per daemon and a 1 MB open
//! and fails if anything is lost; the figures are printed by `cargo bench --bench storage`.
//! `COMPACTD_BENCH_ONLY=targets` measures only the rows the targets name (files and PostgreSQL
//! with one daemon and four clients, two daemons on one session), for repeated runs;
//! `COMPACTD_BENCH_APPENDS=N` makes every client append N messages instead of 8000. The
//! four-client comparison runs in rounds (files, then each binary, the order turning every
//! round; `COMPACTD_BENCH_ROUNDS`, 9 by default: single rounds on a shared two-core machine
//! range from 0.5x to 1.0x) and is judged on the median ratio.

mod common;

#[path = "../tests/support/postgres.rs"]
mod pg;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};

use common::daemon::{Conn, Daemon};

type Res<T> = Result<T, String>;

/// What `pg` calls when the server binaries are missing (it then returns `None`).
fn skip_or_fail(test: &str, what: &str) {
    eprintln!("storage bench ({test}): {what}");
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_compactd"))
}

/// A binary built before the change being measured (`COMPACTD_BENCH_BASELINE_BIN`), whose
/// PostgreSQL figures are measured in the same run.
fn baseline_bin() -> Option<PathBuf> {
    std::env::var_os("COMPACTD_BENCH_BASELINE_BIN")
        .map(PathBuf::from)
        .filter(|p| p.exists())
}

fn user(i: usize) -> Value {
    json!({"role": "user", "content": format!("append {i}: {}", "some typical prompt text ".repeat(8)), "timestamp": 1_700_000_000_000i64})
}

/// One measured run: every daemon's client appends `each` messages to its session.
struct Appends {
    per_second: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Runs `each` appends on every `(conn, sid)` at once, one thread per connection.
fn append_run(conns: Vec<(Conn, String)>, each: usize) -> Res<(Appends, Vec<(Conn, String)>)> {
    let started = Instant::now();
    let handles: Vec<_> = conns
        .into_iter()
        .map(|(mut c, sid)| {
            std::thread::spawn(move || -> Res<(Vec<f64>, Conn, String)> {
                let mut lat = Vec::with_capacity(each);
                for i in 0..each {
                    let t = Instant::now();
                    c.call(
                        "appendMessage",
                        json!({"sessionId": sid, "message": user(i)}),
                    )?;
                    lat.push(common::ms(t.elapsed()));
                }
                Ok((lat, c, sid))
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut back = Vec::new();
    for h in handles {
        let (lat, c, sid) = h.join().map_err(|_| "a client thread panicked")??;
        all.extend(lat);
        back.push((c, sid));
    }
    let wall = started.elapsed().as_secs_f64();
    let n = all.len();
    Ok((
        Appends {
            per_second: n as f64 / wall,
            p50_ms: common::percentile(&mut all, 50.0),
            p99_ms: common::percentile(&mut all, 99.0),
        },
        back,
    ))
}

struct Home {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn home() -> Res<Home> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().to_owned();
    Ok(Home { _dir: dir, root })
}

/// `n` daemons of `bin` on `config`, each in a home of its own.
fn daemons(bin: &Path, n: usize, config: &str) -> Res<Vec<(Home, Daemon)>> {
    (0..n)
        .map(|_| {
            let h = home()?;
            let d = Daemon::start(bin, &h.root, Some(config))?;
            Ok((h, d))
        })
        .collect()
}

fn create(c: &mut Conn, cwd: &Path, dir: Option<&Path>) -> Res<(String, String)> {
    let mut params = json!({"cwd": cwd, "model": common::daemon::model()});
    if let Some(d) = dir {
        params["sessionDir"] = json!(d);
    }
    let info = c.call("createSession", params)?;
    let sid = info["sessionId"].as_str().ok_or("no sessionId")?.to_owned();
    let hid = info["headerId"].as_str().ok_or("no headerId")?.to_owned();
    Ok((sid, hid))
}

/// Checks every append reached the store: `expected` user messages in the session.
fn count_users(c: &mut Conn, sid: &str) -> Res<usize> {
    c.call("syncSession", json!({"sessionId": sid}))?;
    let ctx = c.call("getContext", json!({"sessionId": sid}))?;
    Ok(ctx["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "user").count()))
}

/// `[storage]` of the database daemons: `durability` as `COMPACTD_BENCH_DURABILITY` says
/// (compactd's default, `compactions`, unless set), on the files side too.
fn config(pg: &pg::Postgres) -> String {
    format!("{}{}", pg.config(), durability())
}

fn durability() -> String {
    std::env::var("COMPACTD_BENCH_DURABILITY")
        .map(|d| format!("durability = \"{d}\"\n"))
        .unwrap_or_default()
}

/// `n` daemons of `bin`, `clients` connections each, appending to one shared session or
/// to a session per connection; checks every append reached the store.
fn postgres_appends(
    bin: &Path,
    pg: &pg::Postgres,
    n: usize,
    clients: usize,
    shared: bool,
    each: usize,
) -> Res<Appends> {
    let ds = daemons(bin, n, &config(pg))?;
    let mut conns = Vec::new();
    let mut header: Option<String> = None;
    for (h, d) in &ds {
        for _ in 0..clients {
            let mut c = d.connect()?;
            let sid = match (&header, shared) {
                (Some(hid), true) => {
                    let info = c.call(
                        "openSession",
                        json!({"headerId": hid, "model": common::daemon::model()}),
                    )?;
                    info["sessionId"].as_str().ok_or("no sessionId")?.to_owned()
                }
                _ => {
                    let (sid, hid) = create(&mut c, &h.root, None)?;
                    header.get_or_insert(hid);
                    sid
                }
            };
            conns.push((c, sid));
        }
    }
    let (figures, mut back) = append_run(conns, each)?;
    let want = if shared { n * clients * each } else { each };
    let (c, sid) = back.first_mut().ok_or("no connection")?;
    let got = count_users(c, sid)?;
    if got != want {
        return Err(format!("{got} of {want} appends in the store"));
    }
    Ok(figures)
}

/// `n` daemons, `clients` connections each, every connection appending to a file of its own.
fn file_appends(bin: &Path, n: usize, clients: usize, each: usize) -> Res<Appends> {
    let files = format!("[storage]\n{}", durability());
    let ds = daemons(bin, n, &files)?;
    let mut conns = Vec::new();
    for (h, d) in &ds {
        for k in 0..clients {
            let mut c = d.connect()?;
            let (sid, _) = create(&mut c, &h.root, Some(&h.root.join(format!("sessions-{k}"))))?;
            // The first assistant reply creates the file (Pi's deferred write).
            c.call("appendMessage", json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": {"input": 10, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 11, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}, "stopReason": "stop", "timestamp": 1_700_000_000_000i64}}))?;
            conns.push((c, sid));
        }
    }
    let (figures, mut back) = append_run(conns, each)?;
    let (c, sid) = back.first_mut().ok_or("no connection")?;
    let got = count_users(c, sid)?;
    if got != each {
        return Err(format!("{got} of {each} appends in the file"));
    }
    Ok(figures)
}

/// Median wall time of `openSession` with `params` on `runs` fresh daemons.
fn cold_open(config: &str, params: Value, runs: usize) -> Res<f64> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let h = home()?;
        let d = Daemon::start(&bin(), &h.root, Some(config))?;
        let mut c = d.connect()?;
        let t = Instant::now();
        let info = c.call("openSession", params.clone())?;
        times.push(common::ms(t.elapsed()));
        if info["entryCount"].as_u64().unwrap_or(0) == 0 {
            return Err(format!("opened nothing: {info}"));
        }
    }
    Ok(common::median(times))
}

fn main() {
    let bench = common::is_bench();
    // The server at its defaults (fsync on): what a deployment pays for a commit.
    let Some(pg) = pg::Postgres::start_at_defaults("storage bench") else {
        if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1") {
            eprintln!("storage bench: no PostgreSQL under CI=true");
            std::process::exit(1);
        }
        return;
    };
    let result = run(&pg, bench);
    // The server stops with its handle: `exit` would leave it running.
    drop(pg);
    if let Err(e) = result {
        eprintln!("storage bench failed: {e}");
        std::process::exit(1);
    }
}

/// Appends per client in a run: 8000 when benchmarking, or `COMPACTD_BENCH_APPENDS` (longer
/// runs average out a noisy machine and leave time to profile); 50 as a test.
fn appends_per_client(bench: bool) -> usize {
    count("COMPACTD_BENCH_APPENDS", bench, 8000, 50)
}

/// Rounds of the four-client comparison: 9 when benchmarking, or `COMPACTD_BENCH_ROUNDS`; 1
/// as a test.
fn rounds(bench: bool) -> usize {
    count("COMPACTD_BENCH_ROUNDS", bench, 9, 1)
}

/// A count a benchmark run may take from `var` (a positive whole number), else `in_bench`;
/// `in_test` under `cargo test`, whatever `var` says.
fn count(var: &str, bench: bool, in_bench: usize, in_test: usize) -> usize {
    let asked = std::env::var(var).ok().and_then(|n| n.parse().ok());
    match asked {
        _ if !bench => in_test,
        Some(n) if n > 0 => n,
        _ => in_bench,
    }
}

/// Whether only the rows the targets name are measured (`COMPACTD_BENCH_ONLY=targets`).
fn targets_only() -> bool {
    std::env::var("COMPACTD_BENCH_ONLY").is_ok_and(|v| v == "targets")
}

fn run(pg: &pg::Postgres, bench: bool) -> Res<()> {
    let each = appends_per_client(bench);
    let all = !targets_only();
    println!("{}", common::machine_note());
    println!("appends: {each} per daemon, one client per daemon, back to back");
    println!(
        "{:<34} {:>10} {:>9} {:>9}",
        "", "appends/s", "p50 ms", "p99 ms"
    );
    let line = |name: &str, a: &Appends| {
        println!(
            "{name:<34} {:>10.0} {:>9.3} {:>9.3}",
            a.per_second, a.p50_ms, a.p99_ms
        );
    };
    let base = file_appends(&bin(), 1, 1, each)?;
    line("files, 1 daemon (baseline)", &base);
    for n in [2, 4].into_iter().filter(|_| all) {
        line(
            &format!("files, {n} daemons, a file each"),
            &file_appends(&bin(), n, 1, each)?,
        );
    }
    let mut binaries = vec![("", bin())];
    if let Some(b) = baseline_bin() {
        binaries.insert(0, ("before the change: ", b));
    } else {
        println!("(COMPACTD_BENCH_BASELINE_BIN unset: no run of the binary before the change)");
    }
    let mut missed = Vec::new();
    for (label, binary) in &binaries {
        for n in [1, 2, 4].into_iter().filter(|&n| all || n == 2) {
            let a = postgres_appends(binary, pg, n, 1, true, each)?;
            line(&format!("{label}postgres, {n} daemon(s), one session"), &a);
            println!(
                "{:<34} {:>10.2}x",
                "  vs the files baseline",
                a.per_second / base.per_second
            );
            if label.is_empty() && n == 2 && a.p99_ms >= 5.0 {
                missed.push(format!(
                    "2 daemons, one session: p99 {:.2} ms >= 5 ms",
                    a.p99_ms
                ));
            }
        }
        for n in [2, 4].into_iter().filter(|_| all) {
            let a = postgres_appends(binary, pg, n, 1, false, each)?;
            line(&format!("{label}postgres, {n} daemons, a session each"), &a);
        }
    }
    // Four clients, files against the database: on a shared machine the rate drifts by tens
    // of percent between runs seconds apart, so each round measures files and then every
    // binary back to back (the order turning each round), and the target is judged on the
    // median of the rounds' ratios.
    let rounds = rounds(bench);
    println!("4 clients, a session each, 1 daemon: {rounds} rounds, files then the database");
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); binaries.len()];
    let mut files_ratios = Vec::new();
    for round in 0..rounds {
        let four = file_appends(&bin(), 1, 4, each)?;
        line(&format!("round {}: files", round + 1), &four);
        // The change must not slow the files backend either: the binary before it on files,
        // in the same round.
        if let Some(before) = baseline_bin() {
            let old = file_appends(&before, 1, 4, each)?;
            line(
                &format!("round {}: before the change: files", round + 1),
                &old,
            );
            println!(
                "{:<34} {:>10.2}x",
                "  files, this change vs before",
                four.per_second / old.per_second
            );
            files_ratios.push(four.per_second / old.per_second);
        }
        let mut order: Vec<usize> = (0..binaries.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (label, binary) = &binaries[i];
            let a = postgres_appends(binary, pg, 1, 4, false, each)?;
            let ratio = a.per_second / four.per_second;
            line(&format!("round {}: {label}postgres", round + 1), &a);
            println!("{:<34} {:>10.2}x", "  vs files in this round", ratio);
            ratios[i].push(ratio);
        }
    }
    if !files_ratios.is_empty() {
        println!(
            "files, 4 clients, this change vs before: median {:.2}x",
            common::median(files_ratios.clone())
        );
    }
    if let [before, after] = ratios.as_slice() {
        let faster = before.iter().zip(after).filter(|(b, a)| a > b).count();
        println!("the change is faster in {faster} of {rounds} rounds (paired, same files run)");
    }
    for ((label, _), r) in binaries.iter().zip(ratios) {
        let median = common::median(r.clone());
        println!(
            "{label}postgres, 1 daemon, 4 clients: median {median:.2}x files (rounds: {})",
            r.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        if label.is_empty() && median < 0.7 {
            missed.push(format!("1 daemon, 4 clients: {median:.2}x files < 0.7x"));
        }
    }

    if !all {
        return missed_targets(bench, &missed);
    }
    // Cold open of a stored session against the same session as a file.
    let mb = if bench { 10 } else { 1 };
    let h = home()?;
    let file = h.root.join("cold.jsonl");
    std::fs::write(&file, common::synthetic_session(mb << 20)).map_err(|e| e.to_string())?;
    let importer = Daemon::start(&bin(), &h.root, Some(&pg.config()))?;
    let out = std::process::Command::new(bin())
        .arg("import")
        .arg(&file)
        .envs(importer.env.iter().map(|(k, v)| (*k, v)))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("import: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let header_id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let runs = if bench { 5 } else { 1 };
    let model = common::daemon::model();
    let from_file = cold_open("", json!({"path": file, "model": model}), runs)?;
    let from_pg = cold_open(
        &pg.config(),
        json!({"headerId": header_id, "model": model}),
        runs,
    )?;
    println!("cold open of a {mb} MB session, median of {runs} fresh daemons:");
    println!("  file      {from_file:>8.1} ms (baseline)");
    println!(
        "  postgres  {from_pg:>8.1} ms ({:.2}x the file)",
        from_pg / from_file
    );
    missed_targets(bench, &missed)
}

/// A bench run fails when a target was missed.
fn missed_targets(bench: bool, missed: &[String]) -> Res<()> {
    if bench && !missed.is_empty() {
        return Err(format!("targets missed: {}", missed.join("; ")));
    }
    Ok(())
}
