//! Speculative compaction, measured through the real daemon (`compactd serve`) and a fake
//! OpenAI-compatible summarizer that takes as long as a real model:
//!
//! 1. **Latency at the threshold.** An agent loop appends turns and calls `checkCompaction`
//!    after each reply, as agents do; the figure is the round trip of the check that crosses the
//!    threshold, which is what the agent waits for. Each provider time (2 s, 10 s and 30 s) runs
//!    twice in the same run, with speculation (`compaction.speculativeAt` 0.75, the default for
//!    an LLM summarizer) and without (`0`, Pi's behaviour), and the ratios are printed: with
//!    speculation against the provider's time (target < 5 %) and against the run without.
//!    The agent takes `PACE` per turn (its own model call) and each turn adds 2.5 % of the
//!    threshold, so the last quarter before the threshold lasts ten turns.
//! 2. **Tokens per 100 turns.** A long loop of 100 turns through several compactions, with and
//!    without speculation: the summarization tokens the provider reported in each, and the
//!    difference, which is what speculating costs (discarded speculations, and compactions that
//!    come sooner because a speculation cut earlier).
//!
//! All loops of one figure run at the same time on separate daemons (they mostly sleep), so the
//! whole benchmark takes about a minute. Under `cargo test` (no `--bench`) a smoke version with a
//! 100 ms provider runs in a few seconds and fails if any request fails or a compaction takes
//! more than one request; the latency targets (< 5 % of the provider's time, < 300 ms at 2 s)
//! fail the release benchmark only.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{Conn, Daemon, FakeProvider};

type Res<T> = Result<T, String>;

/// The session's model: threshold = 40 000 − 4 000 reserve = 36 000 tokens.
const WINDOW: i64 = 40_000;
const RESERVE: i64 = 4_000;
const THRESHOLD: i64 = WINDOW - RESERVE;
/// Tokens each turn adds (2.5 % of the threshold).
const TURN_TOKENS: i64 = 900;

/// Knobs of one run.
struct Plan {
    /// Provider times for the latency figure.
    delays: Vec<Duration>,
    /// The agent's own time per turn once the context is past 70 % of the threshold.
    pace: Duration,
    /// The provider time of the 100-turn loop.
    loop_delay: Duration,
    loop_pace: Duration,
    loop_turns: usize,
}

/// One agent on one daemon.
struct Agent {
    _daemon: Daemon,
    conn: Conn,
    sid: String,
    /// The context's size as the agent's provider would report it.
    context: i64,
    turn: usize,
}

impl Agent {
    fn start(bin: &Path, root: &Path, fake: &FakeProvider, speculative_at: f64) -> Res<Agent> {
        let daemon = Daemon::start(bin, root, Some(&fake.config()))?;
        let mut conn = daemon.connect()?;
        let dir = root.join("project");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let model = json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": WINDOW, "maxTokens": 8000});
        let info = conn.call(
            "createSession",
            json!({"cwd": dir, "sessionDir": dir, "model": model}),
        )?;
        let sid = info["sessionId"]
            .as_str()
            .ok_or("createSession without sessionId")?
            .to_owned();
        conn.call(
            "setSettingsOverrides",
            json!({"sessionId": sid, "compaction": {"reserveTokens": RESERVE, "keepRecentTokens": 4000, "speculativeAt": speculative_at}}),
        )?;
        Ok(Agent {
            _daemon: daemon,
            conn,
            sid,
            context: 1_000,
            turn: 0,
        })
    }

    /// One turn (a request of `TURN_TOKENS` estimated tokens and a short reply reporting the
    /// context's size), then the agent's check. Returns the check and how long it took.
    fn turn(&mut self) -> Res<(Value, Duration)> {
        let i = self.turn;
        self.turn += 1;
        let text = format!(
            "turn {i}: {}",
            "change the parser and its tests ".repeat(TURN_TOKENS as usize * 4 / 32)
        );
        self.context += TURN_TOKENS;
        let usage = json!({"input": self.context - 20, "output": 20, "cacheRead": 0, "cacheWrite": 0, "totalTokens": self.context,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}});
        self.conn.call(
            "appendMessage",
            json!({"sessionId": self.sid, "message": {"role": "user", "content": text}}),
        )?;
        self.conn.call(
            "appendMessage",
            json!({"sessionId": self.sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}],
                "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage, "stopReason": "stop",
                "timestamp": now_ms()}}),
        )?;
        let t = Instant::now();
        let out = self.conn.call(
            "checkCompaction",
            json!({"sessionId": self.sid, "phase": "postRun"}),
        )?;
        let took = t.elapsed();
        if out["action"] == "compacted" {
            self.context = out["result"]["estimatedTokensAfter"]
                .as_i64()
                .ok_or("compacted without estimatedTokensAfter")?;
        } else if out["action"] != "none" {
            return Err(format!("the check did not compact: {out}"));
        }
        Ok((out, took))
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The latency of the check that crosses the threshold: turns at full speed to 70 % of it,
/// then at the agent's pace until a check compacts.
fn latency(
    bin: &Path,
    root: &Path,
    delay: Duration,
    pace: Duration,
    speculative_at: f64,
) -> Res<Duration> {
    let fake = FakeProvider::slow(delay)?;
    let mut agent = Agent::start(bin, root, &fake, speculative_at)?;
    while agent.context < THRESHOLD * 7 / 10 {
        agent.turn()?;
    }
    loop {
        std::thread::sleep(pace);
        let (out, took) = agent.turn()?;
        if out["action"] == "compacted" {
            let requests = fake.requests.load(Ordering::Relaxed);
            if requests != 1 {
                return Err(format!(
                    "{requests} summarization requests for one compaction"
                ));
            }
            return Ok(took);
        }
        if agent.turn > 200 {
            return Err("the threshold was never crossed".into());
        }
    }
}

/// The 100-turn loop: (summarization tokens reported, requests, compactions).
fn long_loop(bin: &Path, root: &Path, plan: &Plan, speculative_at: f64) -> Res<(u64, u64, u64)> {
    let fake = FakeProvider::slow(plan.loop_delay)?;
    let mut agent = Agent::start(bin, root, &fake, speculative_at)?;
    let mut compactions = 0;
    for _ in 0..plan.loop_turns {
        std::thread::sleep(plan.loop_pace);
        let (out, _) = agent.turn()?;
        compactions += u64::from(out["action"] == "compacted");
    }
    Ok((
        fake.usage_tokens.load(Ordering::Relaxed),
        fake.requests.load(Ordering::Relaxed),
        compactions,
    ))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run() -> Res<()> {
    let bench = common::is_bench();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_compactd"));
    if !bin.exists() {
        println!("speculation: {} is not built; skipped", bin.display());
        return Ok(());
    }
    let plan = if bench {
        Plan {
            delays: [2, 10, 30].map(Duration::from_secs).to_vec(),
            pace: Duration::from_secs(4),
            loop_delay: Duration::from_millis(300),
            loop_pace: Duration::from_millis(60),
            loop_turns: 100,
        }
    } else {
        Plan {
            delays: vec![Duration::from_millis(100)],
            pace: Duration::from_millis(150),
            loop_delay: Duration::from_millis(20),
            loop_pace: Duration::from_millis(10),
            loop_turns: 60,
        }
    };
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = tmp.path();
    println!("{}", common::machine_note());
    println!(
        "latency of the check that crosses the threshold (agent pace {:.0} ms a turn, 2.5 % of the threshold a turn):",
        ms(plan.pace)
    );
    // Every loop at once: they mostly sleep.
    let results: Vec<(Duration, Res<Duration>, Res<Duration>)> = std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .delays
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                let (bin, pace) = (&bin, plan.pace);
                let with =
                    s.spawn(move || latency(bin, &root.join(format!("with-{i}")), d, pace, 0.75));
                let without =
                    s.spawn(move || latency(bin, &root.join(format!("without-{i}")), d, pace, 0.0));
                (d, with, without)
            })
            .collect();
        handles
            .into_iter()
            .map(|(d, w, wo)| {
                let join = |h: std::thread::ScopedJoinHandle<'_, Res<Duration>>| {
                    h.join().unwrap_or_else(|_| Err("a loop panicked".into()))
                };
                (d, join(w), join(wo))
            })
            .collect()
    });
    let mut missed = Vec::new();
    for (delay, with, without) in results {
        let (with, without) = (with?, without?);
        let share = with.as_secs_f64() / delay.as_secs_f64();
        println!(
            "  provider {:>5.0} ms: without speculation {:>8.1} ms, with {:>6.1} ms = {:.2} % of the provider's time, {:.4}x the run without",
            ms(delay),
            ms(without),
            ms(with),
            share * 100.0,
            with.as_secs_f64() / without.as_secs_f64()
        );
        if share >= 0.05 {
            missed.push(format!(
                "{:.0} ms provider: {:.1} % >= 5 %",
                ms(delay),
                share * 100.0
            ));
        }
        if delay == Duration::from_secs(2) && with >= Duration::from_millis(300) {
            missed.push(format!("2 s provider: {:.1} ms >= 300 ms", ms(with)));
        }
    }
    println!(
        "summarization tokens over {} turns (provider {:.0} ms, pace {:.0} ms):",
        plan.loop_turns,
        ms(plan.loop_delay),
        ms(plan.loop_pace)
    );
    let (with, without) = std::thread::scope(|s| {
        let w = s.spawn(|| long_loop(&bin, &root.join("loop-with"), &plan, 0.75));
        let wo = s.spawn(|| long_loop(&bin, &root.join("loop-without"), &plan, 0.0));
        (
            w.join().unwrap_or_else(|_| Err("a loop panicked".into())),
            wo.join().unwrap_or_else(|_| Err("a loop panicked".into())),
        )
    });
    let ((tw, rw, cw), (two, rwo, cwo)) = (with?, without?);
    let per100 = |t: u64| t as f64 * 100.0 / plan.loop_turns as f64;
    println!("  without speculation: {two} tokens, {rwo} requests, {cwo} compactions");
    println!("  with speculation:    {tw} tokens, {rw} requests, {cw} compactions");
    println!(
        "  cost of speculating: {:.0} tokens per 100 turns ({:+.1} % of the summarization tokens)",
        per100(tw) - per100(two),
        (tw as f64 / two.max(1) as f64 - 1.0) * 100.0
    );
    if cw == 0 || cwo == 0 {
        return Err("the long loop never compacted".into());
    }
    // A debug build under `cargo test` says nothing about speed: the targets hold the release
    // benchmark only.
    if bench && !missed.is_empty() {
        return Err(format!("latency targets missed: {}", missed.join("; ")));
    }
    Ok(())
}

fn main() {
    let t = Instant::now();
    match run() {
        Ok(()) => println!("speculation finished in {:.1} s", t.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("speculation failed: {e}");
            std::process::exit(1);
        }
    }
}
