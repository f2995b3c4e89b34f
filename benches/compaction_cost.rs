//! What compaction costs over a long session, in US dollars at Anthropic's prices, measured
//! through the real daemon (`compactd serve`) and a fake summarizer that reports usage as a
//! provider does: the same simulated 300-turn session three ways, at the same time on separate
//! daemons:
//!
//! 1. Pi's behaviour: compaction at the threshold only;
//! 2. with the idle gate (`idleCompactAt` 0.5): a compaction when the user comes back from a
//!    break longer than the cache lifetime, since the cache must be rewritten anyway;
//! 3. with the idle gate and speculation (`speculativeAt` 0.75).
//!
//! The session: each turn adds 1.5 % of the threshold; every 50 turns the user takes a break
//! longer than the cache lifetime. Time is compressed: the cache lifetime is 2 s
//! (`cacheTtlSeconds`), a turn 40 ms, a break 3 s. The agent's replies report cache use as
//! Anthropic does: a warm request reads the previous prompt from the cache and writes what is
//! new; after a compaction or a break it writes everything. The total comes from
//! `getCostReport`'s `compactionUsd`: the summarization calls (Claude Sonnet 4.5's price
//! configured for the summarizer), discarded speculations, and each compaction's cache rewrite
//! (nothing when the cache was cold). Under `cargo test` a smoke version of 80 turns (one break) runs.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{Conn, Daemon, FakeProvider};

type Res<T> = Result<T, String>;

const WINDOW: i64 = 40_000;
const RESERVE: i64 = 4_000;
const THRESHOLD: i64 = WINDOW - RESERVE;
const TURN_TOKENS: i64 = THRESHOLD * 15 / 1000;
const TTL: Duration = Duration::from_secs(2);

struct Plan {
    turns: usize,
    break_every: usize,
    turn_time: Duration,
    break_time: Duration,
}

/// One way of running the session.
#[derive(Clone, Copy)]
struct Way {
    name: &'static str,
    idle_compact_at: f64,
    speculative_at: f64,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn usage(input: i64, cache_read: i64, cache_write: i64) -> Value {
    json!({"input": input, "output": 50, "cacheRead": cache_read, "cacheWrite": cache_write,
           "totalTokens": input + 50 + cache_read + cache_write,
           "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}})
}

/// Runs the session one way; returns (compaction USD, compactions, the report).
fn run(bin: &Path, root: &Path, plan: &Plan, way: Way) -> Res<(f64, u64, Value)> {
    let fake = FakeProvider::slow(Duration::from_millis(150))?;
    let config = format!(
        "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"claude-sonnet-4-5\"\nretry = {{ enabled = false }}\n[prices.\"claude-sonnet-4-5\"]\ninput = 3.0\noutput = 15.0\ncache_read = 0.30\ncache_write = 3.75\n",
        fake.port
    );
    let daemon = Daemon::start(bin, root, Some(&config))?;
    let mut c: Conn = daemon.connect()?;
    let dir = root.join("project");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let model = json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": WINDOW, "maxTokens": 8000});
    let info = c.call(
        "createSession",
        json!({"cwd": dir, "sessionDir": dir, "model": model}),
    )?;
    let sid = info["sessionId"].as_str().ok_or("no sessionId")?.to_owned();
    c.call(
        "setSettingsOverrides",
        json!({"sessionId": sid, "compaction": {"reserveTokens": RESERVE, "keepRecentTokens": 3000,
            "idleCompactAt": way.idle_compact_at, "speculativeAt": way.speculative_at, "cacheTtlSeconds": TTL.as_secs()}}),
    )?;
    // The agent's view of its provider's cache: the prompt it last sent, and when.
    let mut context: i64 = 1_000;
    let mut cached: i64 = 0;
    let mut last_request = Instant::now();
    let mut compactions = 0;
    let mut absorb = |out: &Value, context: &mut i64, cached: &mut i64| -> Res<()> {
        match out["action"].as_str() {
            Some("compacted") => {
                compactions += 1;
                *context = out["result"]["estimatedTokensAfter"]
                    .as_i64()
                    .ok_or("no estimatedTokensAfter")?;
                // The prefix changed: nothing of it is in the cache any more.
                *cached = 0;
                Ok(())
            }
            Some("none") => Ok(()),
            _ => Err(format!("a check failed: {out}")),
        }
    };
    for turn in 0..plan.turns {
        if turn > 0 && turn % plan.break_every == 0 {
            std::thread::sleep(plan.break_time);
        }
        // Before the prompt: Pi's check, and (beyond Pi) the idle gate.
        let pre = c.call(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "prePrompt"}),
        )?;
        absorb(&pre, &mut context, &mut cached)?;
        std::thread::sleep(plan.turn_time);
        let text = format!(
            "turn {turn}: {}",
            "refactor the module ".repeat(TURN_TOKENS as usize * 4 / 20)
        );
        c.call(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "user", "content": text, "timestamp": now_ms()}}),
        )?;
        context += TURN_TOKENS;
        if last_request.elapsed() >= TTL {
            cached = 0;
        }
        let reply_usage = usage(0, cached, context - cached);
        last_request = Instant::now();
        cached = context;
        c.call(
            "appendMessage",
            json!({"sessionId": sid, "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}],
                "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
                "usage": reply_usage, "stopReason": "stop", "timestamp": now_ms()}}),
        )?;
        let post = c.call(
            "checkCompaction",
            json!({"sessionId": sid, "phase": "postRun"}),
        )?;
        absorb(&post, &mut context, &mut cached)?;
    }
    let report = c.call("getCostReport", json!({"sessionId": sid}))?;
    let usd = report["compactionUsd"]
        .as_f64()
        .ok_or_else(|| format!("no compactionUsd: {report}"))?;
    Ok((usd, compactions, report))
}

fn main() {
    let t = Instant::now();
    let bench = common::is_bench();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_compactd"));
    if !bin.exists() {
        println!("compaction_cost: {} is not built; skipped", bin.display());
        return;
    }
    let plan = if bench {
        Plan {
            turns: 300,
            break_every: 50,
            turn_time: Duration::from_millis(40),
            break_time: Duration::from_secs(3),
        }
    } else {
        Plan {
            turns: 80,
            break_every: 50,
            turn_time: Duration::from_millis(5),
            break_time: Duration::from_millis(2200),
        }
    };
    let ways = [
        Way {
            name: "threshold only (Pi)",
            idle_compact_at: 0.0,
            speculative_at: 0.0,
        },
        Way {
            name: "idle gate",
            idle_compact_at: 0.5,
            speculative_at: 0.0,
        },
        Way {
            name: "idle gate + speculation",
            idle_compact_at: 0.5,
            speculative_at: 0.75,
        },
    ];
    let tmp = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("compaction_cost failed: {e}");
            std::process::exit(1);
        }
    };
    let results: Vec<Res<(f64, u64, Value)>> = std::thread::scope(|s| {
        let handles: Vec<_> = ways
            .iter()
            .enumerate()
            .map(|(i, way)| {
                let (bin, plan, root) = (&bin, &plan, tmp.path().join(format!("way-{i}")));
                let way = *way;
                s.spawn(move || run(bin, &root, plan, way))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a run panicked".into())))
            .collect()
    });
    println!(
        "compaction cost over {} turns (break every {} turns, Claude Sonnet 4.5 prices):",
        plan.turns, plan.break_every
    );
    let mut failed = false;
    let mut totals = Vec::new();
    for (way, r) in ways.iter().zip(results) {
        match r {
            Ok((usd, compactions, report)) => {
                let cold = report["cacheRewrites"]
                    .as_array()
                    .map_or(0, |a| a.iter().filter(|r| r["cold"] == true).count());
                println!(
                    "  {:<24} ${:.4} ({} compactions, {} of their cache rewrites cold; summarization ${:.4}, rewrites ${:.4}, discarded speculations {} ${:.4})",
                    way.name,
                    usd,
                    compactions,
                    cold,
                    report["compactions"]["usd"].as_f64().unwrap_or(f64::NAN),
                    report["cacheRewrites"]
                        .as_array()
                        .map_or(0.0, |a| a.iter().filter_map(|r| r["usd"].as_f64()).sum()),
                    report["discardedSpeculations"]["count"],
                    report["discardedSpeculations"]["usd"].as_f64().unwrap_or(f64::NAN),
                );
                if compactions == 0 {
                    eprintln!("  {} never compacted", way.name);
                    failed = true;
                }
                totals.push(usd);
            }
            Err(e) => {
                eprintln!("  {}: {e}", way.name);
                failed = true;
            }
        }
    }
    if let [pi, idle, _] = totals[..] {
        println!("  idle gate / threshold only: {:.3}x", idle / pi);
    }
    if failed {
        std::process::exit(1);
    }
    println!(
        "compaction_cost finished in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}
