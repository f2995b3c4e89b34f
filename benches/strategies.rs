//! The strategies side by side (issue 32 item 6): one long tool-heavy agent loop, the same for
//! every strategy, run through the real daemon (`compactd serve`), each strategy on its own
//! daemon at the same time:
//!
//! - **(a) Pi's policy**: summarize at the threshold; no clearing, no speculation.
//! - **(b) clearing then summarizing**: `clearToolResults {at: 0.3, keepRecentTokens: 3000,
//!   clearAtLeast: 10000, summarizeAt: 0.5}` (`cacheAware` on, its default); no speculation.
//!   The newest output stays verbatim until the reply that reads it (a pass runs at a check,
//!   after the reply), and about one more after it.
//! - **(c) clearing + speculation + idle gate**: (b) with `speculativeAt` 0.75 (of the point
//!   where the summary comes, half the threshold) and `idleCompactAt` 0.4.
//! - **(d) clearing with the setting's defaults**: `clearToolResults {}` (`at` 0.5,
//!   `keepRecentTokens` 20000, `clearAtLeast` 10000, `cacheAware`, `summarizeAt` 1), to show
//!   what the choices of (b) are worth.
//! - **(e) (b), the summary reading the placeholders**: (b) with `summarizeOriginals: false`,
//!   so a summary reads the cleared outputs as the projection shows them (Pi 1.6 summarizes its
//!   own projection) instead of their originals: what the default `true` is worth.
//!
//! **Both Pis' rules**: the whole comparison runs under Pi 0.85's rules and then Pi 1.6's
//! (`piVersion`; `COMPACTD_BENCH_PI_VERSION=0.85` or `1.6` runs one): under 1.6 a pass is Pi's
//! own `context_edit`s, usage recorded before an edit no longer counts, and the cut is found on
//! the projection.
//!
//! **The loop** is generated once from a seed, so every strategy sees the same messages: each
//! turn is a user message, an assistant tool call (`read` 1–6k tokens, `grep` 0.3–2k, `bash`
//! builds and listings 0.3–3k, test runs 2–8k; about a third of the reads read a file read
//! before, with the same arguments and the same output, so superseded outputs exist, and
//! commands are re-run), the tool result and an assistant reply. Forty facts
//! (`FACT-0042: the … is 7311`) are planted, most in tool outputs at a random line, the rest in
//! user messages. Every `PAUSE_EVERY` turns the user is away for longer than the prompt cache
//! lives.
//!
//! **The agent's provider** is simulated here: before each of its two model calls a turn
//! (the tool call and the reply), the agent takes the daemon's projection
//! (`getContext {format: "llm"}`), and reports it as that message's usage: the prompt is the
//! JSON bytes / 4 of what a provider is sent of those messages (role and content, a tool
//! result's call id and tool name; not the session's bookkeeping such as `usage` and
//! `timestamp`), not `getContextUsage`, which is the daemon's own estimate;
//! of it, `cacheRead` is the longest common byte prefix with the previous request's JSON / 4
//! (nothing once the cache lifetime has passed since that request) and `cacheWrite` the rest,
//! as Anthropic's prompt caching bills it; `output` is the message's bytes / 4. Priced at
//! Claude Sonnet 4.5's list price ($3/M input, $3.75/M cache write, $0.30/M cache read, $15/M
//! output); the same prices are configured for the summarizer, whose calls the daemon prices
//! (`getCostReport`: compactions and discarded speculations).
//!
//! **The summarizer** is the benchmarks' fake OpenAI-compatible provider with a delay; its
//! summary is about 1.5k tokens and, to be fair to summarizing, lists every planted fact it was
//! sent (the request's `FACT-` lines, the previous summary's included). Pi's serialization cuts
//! each tool result to 2000 characters for the summarizer, so a fact further down a long output
//! never reaches it: that is Pi's behaviour, left as it is.
//!
//! **Time** is compressed: the cache lifetime (`cacheTtlSeconds`) is 20 s, the summarizer
//! takes 2 s (a real one takes 10–30 s against a 300 s cache), a pause 21 s. The agent-visible
//! wait is the sum of the `checkCompaction` round trips (`prePrompt` before each user message,
//! `postRun` after each reply).
//!
//! At the end, each planted fact is looked for in the final projection, and when absent, through
//! the recall lane (`searchHistory {query: "FACT-0042"}`, then `getEntry` of its hits).
//!
//! Under `cargo test` (no `--bench`) a 60-turn version with a 50 ms summarizer and a 1 s cache
//! runs in seconds and fails if any request fails, a planted fact is lost, (a) never summarizes
//! or (b) never clears. The issue's target is checked and printed by the release run, which
//! does not fail on it: it is a measurement.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::daemon::{Conn, Daemon, FakeProvider};

type Res<T> = Result<T, String>;

/// The agent's model: threshold = 100 000 − 16 384 = 83 616 tokens.
const WINDOW: i64 = 100_000;
const RESERVE: i64 = 16_384;
const SEED: u64 = 0x32_2026;
const FACTS: usize = 40;

/// Claude Sonnet 4.5, US dollars per million tokens.
const USD_INPUT: f64 = 3.0;
const USD_CACHE_WRITE: f64 = 3.75;
const USD_CACHE_READ: f64 = 0.30;
const USD_OUTPUT: f64 = 15.0;

/// (b)'s `clearToolResults`: clearing from 0.3 of the threshold, the newest 3000 tokens of
/// output verbatim, passes batched for the cache (`cacheAware`, the default), and a summary
/// once the conversation alone keeps the context at half the threshold.
/// `COMPACTD_BENCH_CLEARING` (the JSON of a `clearToolResults`) replaces it.
const CLEARING: &str =
    r#"{"at": 0.3, "keepRecentTokens": 3000, "clearAtLeast": 10000, "summarizeAt": 0.5}"#;

/// Knobs of one run (the release benchmark or the smoke test).
struct Plan {
    turns: usize,
    summarizer_delay: Duration,
    cache_ttl: Duration,
    pause: Duration,
    pause_every: usize,
}

// ------------------------------------------------------------------ the loop

/// splitmix64: deterministic, and enough for picking sizes and words.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.range(0, items.len() - 1)]
    }
}

const WORDS: &[&str] = &[
    "parser", "session", "config", "router", "cache", "worker", "queue", "handler", "token",
    "buffer", "stream", "index", "schema", "client", "server", "ledger", "retry", "budget",
    "frame", "socket", "upload", "billing", "metrics", "policy", "tenant", "invoice", "search",
    "render", "layout", "storage", "journal", "snapshot",
];

const CRATES: &[&str] = &["core", "api", "store", "billing", "search", "cli"];

const SUBJECTS: &[&str] = &[
    "port of the staging API",
    "retry limit of the uploader",
    "maximum batch size of the indexer",
    "timeout of the billing webhook in seconds",
    "shard count of the search cluster",
    "build number of the last green release",
    "rate limit per tenant",
    "schema version of the ledger",
];

/// One turn of the loop.
struct Turn {
    user: String,
    call_text: String,
    tool: &'static str,
    args: Value,
    output: String,
    reply: String,
    pause_before: bool,
}

/// Lines of a tool's output until `tokens` × 4 bytes, in the style of `kind`.
fn output_text(rng: &mut Rng, kind: &str, tokens: usize) -> String {
    let mut out = String::with_capacity(tokens * 4 + 100);
    let mut n = 0;
    while out.len() < tokens * 4 {
        n += 1;
        let (a, b) = (rng.pick(WORDS), rng.pick(WORDS));
        let line = match kind {
            "read" => match n % 6 {
                0 => format!("pub fn {a}_{b}(input: &{}) -> Result<{}, Error> {{", cap(a), cap(b)),
                1 => format!("    let {a} = self.{b}.get(&key).ok_or(Error::Missing({n}))?;"),
                2 => format!("    // The {a} is checked before the {b}: a stale {a} would be written back."),
                3 => format!("    if {a}.len() > {} {{ return Err(Error::TooLarge); }}", rng.range(8, 4096)),
                4 => format!("    self.{a}.insert({b}.id, {b}.clone());"),
                _ => "}".to_owned(),
            },
            "grep" => format!(
                "src/{a}/{b}.rs:{}:    let {a} = {b}::open(&path)?;",
                rng.range(1, 900)
            ),
            "test" => match n % 9 {
                0 => format!("   Compiling {a}-{b} v0.{}.{}", rng.range(1, 9), rng.range(0, 20)),
                8 => format!(
                    "---- {a}::tests::{b}_roundtrip stdout ----\nthread '{a}::tests::{b}_roundtrip' panicked at src/{a}.rs:{}:9:\nassertion `left == right` failed",
                    rng.range(10, 600)
                ),
                _ => format!("test {a}::tests::{b}_case_{n} ... ok"),
            },
            _ => match n % 4 {
                0 => format!("   Compiling {a}-{b} v0.{}.{}", rng.range(1, 9), rng.range(0, 20)),
                1 => format!("warning: unused variable: `{a}_{b}`\n  --> src/{a}/{b}.rs:{}:13", rng.range(1, 700)),
                2 => format!("src/{a}/{b}.rs"),
                _ => format!("{:07x} {a}: rework the {b} path", rng.next() & 0xfff_ffff),
            },
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn cap(w: &str) -> String {
    let mut c = w.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// Prose of about `tokens` tokens.
fn prose(rng: &mut Rng, tokens: usize) -> String {
    let mut out = String::new();
    while out.len() < tokens * 4 {
        let (a, b) = (rng.pick(WORDS), rng.pick(WORDS));
        out.push_str(&format!(
            "The {a} now hands the {b} over before it flushes, so a retry no longer sees a half-written {b}. "
        ));
    }
    out.trim_end().to_owned()
}

/// Puts `fact` on a line of its own at a random line of `text`.
fn plant(rng: &mut Rng, text: &str, fact: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let at = rng.range(0, lines.len());
    let mut out = String::with_capacity(text.len() + fact.len() + 8);
    for (i, l) in lines.iter().enumerate() {
        if i == at {
            out.push_str(fact);
            out.push('\n');
        }
        out.push_str(l);
        out.push('\n');
    }
    if at == lines.len() {
        out.push_str(fact);
        out.push('\n');
    }
    out
}

/// The loop and its planted facts, from `seed`.
fn script(plan: &Plan, seed: u64) -> (Vec<Turn>, Vec<String>) {
    let mut rng = Rng(seed);
    let facts: Vec<String> = (0..FACTS)
        .map(|k| {
            let subject = rng.pick(SUBJECTS);
            format!("FACT-{k:04}: the {subject} is {}", rng.range(1000, 9999))
        })
        .collect();
    // Fact k goes to a turn spread over the loop (the last turns left out: a fact there would
    // be in every context trivially), in the tool output two times in three.
    let mut planted: BTreeMap<usize, Vec<(usize, bool)>> = BTreeMap::new();
    let span = plan.turns.saturating_sub(10).max(1);
    for k in 0..FACTS {
        let turn = k * span / FACTS + rng.range(0, (span / FACTS).saturating_sub(1));
        let in_output = !rng.chance(1.0 / 3.0);
        planted.entry(turn).or_default().push((k, in_output));
    }
    let mut files: Vec<(String, String)> = Vec::new();
    let mut turns = Vec::with_capacity(plan.turns);
    for i in 0..plan.turns {
        let (a, b) = (rng.pick(WORDS), rng.pick(WORDS));
        let r = rng.next() % 100;
        let (tool, args, call_text, mut output, file) = if r < 45 {
            let repeat = !files.is_empty() && rng.chance(0.35);
            let idx = if repeat {
                rng.range(0, files.len() - 1)
            } else {
                let path = format!("src/{a}/{b}_{i}.rs");
                let tokens = rng.range(1000, 6000);
                let text = output_text(&mut rng, "read", tokens);
                files.push((path, text));
                files.len() - 1
            };
            let (path, text) = files[idx].clone();
            let call = format!("Let me read `{path}`.");
            ("read", json!({"path": path}), call, text, Some(idx))
        } else if r < 65 {
            let pattern = format!("{a}::open");
            let tokens = rng.range(300, 2000);
            let call = format!("Searching for `{pattern}`.");
            let text = output_text(&mut rng, "grep", tokens);
            (
                "grep",
                json!({"pattern": pattern, "path": "src"}),
                call,
                text,
                None,
            )
        } else if r < 80 {
            let command = rng.pick(&[
                "cargo build",
                "git log --oneline -40",
                "ls -R src",
                "cargo clippy",
            ]);
            let tokens = rng.range(300, 3000);
            let call = format!("Running `{command}`.");
            let text = output_text(&mut rng, "bash", tokens);
            ("bash", json!({"command": command}), call, text, None)
        } else {
            let command = format!("cargo test -p {}", rng.pick(CRATES));
            let tokens = rng.range(2000, 8000);
            let call = format!("Running the tests: `{command}`.");
            let text = output_text(&mut rng, "test", tokens);
            ("bash", json!({"command": command}), call, text, None)
        };
        let user_tokens = rng.range(20, 80);
        let mut user = format!("Next, the {a} {b}: {}", prose(&mut rng, user_tokens));
        for &(k, in_output) in planted.get(&i).map_or(&[][..], Vec::as_slice) {
            if in_output {
                output = plant(&mut rng, &output, &facts[k]);
                // The file now says so: a later read of it returns the same text.
                if let Some(idx) = file {
                    files[idx].1 = output.clone();
                }
            } else {
                user.push_str(&format!("\nKeep in mind:\n{}\n", facts[k]));
            }
        }
        let reply_tokens = rng.range(60, 250);
        turns.push(Turn {
            user,
            call_text,
            tool,
            args,
            output,
            reply: prose(&mut rng, reply_tokens),
            pause_before: i > 0 && i % plan.pause_every == 0,
        });
    }
    (turns, facts)
}

/// The fake summarizer's reply: a summary of about 1.5k tokens that lists every `FACT-` line it
/// was sent (in the request's JSON a line ends at an escaped newline, a quote or a tag).
fn summarize(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut facts: BTreeMap<String, String> = BTreeMap::new();
    for (i, _) in text.match_indices("FACT-") {
        let rest = &text[i..];
        let end = rest.find(['\\', '"', '<']).unwrap_or(rest.len());
        let fact = rest[..end].trim_end();
        if let Some(id) = fact.get(..9) {
            facts.insert(id.to_owned(), fact.to_owned());
        }
    }
    let mut out = String::from(
        "## Goal\nFinish the service refactor the user asked for, one module at a time.\n\n## Constraints & Preferences\n- Keep the public API stable.\n\n## Progress\n### Done\n",
    );
    let mut n = 0;
    while out.len() < 4800 {
        n += 1;
        out.push_str(&format!(
            "- [x] Step {n}: reworked a module's flush path and re-ran its tests, which pass now.\n"
        ));
    }
    out.push_str("\n## Next Steps\n1. Continue with the next module.\n\n## Critical Context\n");
    for fact in facts.values() {
        out.push_str(&format!("- {fact}\n"));
    }
    out
}

// ------------------------------------------------------------------ one strategy

/// One strategy's settings.
#[derive(Clone)]
struct Strategy {
    name: &'static str,
    /// `compaction.clearToolResults` as JSON text, `None`: off.
    clear: Option<String>,
    /// `clearToolResults.summarizeOriginals`: the summary reads the cleared outputs' originals
    /// (`true`) or their placeholders, as Pi 1.6 summarizes its own projection.
    originals: bool,
    speculative_at: f64,
    idle_compact_at: f64,
}

/// What a run counted.
#[derive(Default)]
struct Tally {
    compactions: u64,
    idle_compactions: u64,
    passes: u64,
    tokens_cleared: u64,
    wait: Duration,
    max_wait: Duration,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    agent_usd: f64,
}

struct Outcome {
    tally: Tally,
    summarizer_usd: f64,
    summarizer_calls: u64,
    discarded: u64,
    in_context: usize,
    recalled: usize,
    lost: Vec<String>,
}

/// One agent on one daemon, with its provider's cache as the agent sees it.
struct Agent {
    conn: Conn,
    sid: String,
    ttl: Duration,
    /// The previous request's messages, serialized, and when it was sent.
    prev: Vec<u8>,
    last_request: Option<Instant>,
    tally: Tally,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What a provider is sent of the messages: each one's role and content, and a tool result's
/// call id and tool name. The bookkeeping the session keeps beside them (`usage` with its
/// `cost`, `timestamp`, `api`, `provider`, `model`, `stopReason`) never reaches a model, and at
/// some 170 tokens a turn it would count as context that no strategy can clear or summarize.
fn provider_view(messages: &Value) -> Value {
    let keep = ["role", "content", "toolCallId", "toolName"];
    let view = messages.as_array().map_or(Vec::new(), |all| {
        all.iter()
            .map(|m| {
                let kept = keep
                    .iter()
                    .filter_map(|k| m.get(*k).map(|v| ((*k).to_owned(), v.clone())));
                Value::Object(kept.collect())
            })
            .collect()
    });
    Value::Array(view)
}

impl Agent {
    /// A model call: what the provider would be sent (the daemon's projection), and the usage it
    /// would report for it and for an answer of `output` tokens.
    fn model_call(&mut self, output: u64) -> Res<Value> {
        let ctx = self.conn.call(
            "getContext",
            json!({"sessionId": self.sid, "format": "llm"}),
        )?;
        let bytes =
            serde_json::to_vec(&provider_view(&ctx["messages"])).map_err(|e| e.to_string())?;
        let warm = self.last_request.is_some_and(|t| t.elapsed() < self.ttl);
        let prefix = if warm {
            self.prev
                .iter()
                .zip(&bytes)
                .take_while(|(x, y)| x == y)
                .count()
        } else {
            0
        };
        let total = bytes.len() as u64 / 4;
        let read = (prefix as u64 / 4).min(total);
        let write = total - read;
        self.prev = bytes;
        self.last_request = Some(Instant::now());
        let usd = |tokens: u64, price: f64| tokens as f64 * price / 1e6;
        let (cr, cw, out) = (
            usd(read, USD_CACHE_READ),
            usd(write, USD_CACHE_WRITE),
            usd(output, USD_OUTPUT),
        );
        self.tally.cache_read += read;
        self.tally.cache_write += write;
        self.tally.output += output;
        self.tally.agent_usd += cr + cw + out;
        Ok(
            json!({"input": 0, "output": output, "cacheRead": read, "cacheWrite": write,
            "totalTokens": read + write + output,
            "cost": {"input": 0, "output": out, "cacheRead": cr, "cacheWrite": cw, "total": cr + cw + out}}),
        )
    }

    fn append(&mut self, message: Value) -> Res<()> {
        self.conn.call(
            "appendMessage",
            json!({"sessionId": self.sid, "message": message}),
        )?;
        Ok(())
    }

    /// `checkCompaction` at `phase`, timed: the agent waits for it.
    fn check(&mut self, phase: &str) -> Res<()> {
        let t = Instant::now();
        let out = self.conn.call(
            "checkCompaction",
            json!({"sessionId": self.sid, "phase": phase}),
        )?;
        let took = t.elapsed();
        self.tally.wait += took;
        self.tally.max_wait = self.tally.max_wait.max(took);
        if let Some(pass) = out.get("cleared") {
            self.tally.passes += 1;
            self.tally.tokens_cleared += pass["tokensFreed"].as_u64().unwrap_or(0);
        }
        match out["action"].as_str() {
            Some("compacted") => {
                self.tally.compactions += 1;
                self.tally.idle_compactions += u64::from(out["reason"] == "idle");
                Ok(())
            }
            Some("none") => Ok(()),
            _ => Err(format!("checkCompaction {phase}: {out}")),
        }
    }

    fn turn(&mut self, i: usize, t: &Turn, pause: Duration) -> Res<()> {
        if t.pause_before {
            std::thread::sleep(pause);
        }
        self.check("prePrompt")?;
        self.append(json!({"role": "user", "content": [{"type": "text", "text": t.user}], "timestamp": now_ms()}))?;
        let call_id = format!("call_{i}");
        let call_tokens = (t.call_text.len() + t.args.to_string().len() + 40) as u64 / 4;
        let usage = self.model_call(call_tokens)?;
        self.append(json!({"role": "assistant",
            "content": [{"type": "text", "text": t.call_text},
                        {"type": "toolCall", "id": call_id, "name": t.tool, "arguments": t.args}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": usage, "stopReason": "toolUse", "timestamp": now_ms()}))?;
        self.append(json!({"role": "toolResult", "toolCallId": call_id, "toolName": t.tool,
            "content": [{"type": "text", "text": t.output}], "isError": false, "timestamp": now_ms()}))?;
        let usage = self.model_call(t.reply.len() as u64 / 4)?;
        self.append(
            json!({"role": "assistant", "content": [{"type": "text", "text": t.reply}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": usage, "stopReason": "stop", "timestamp": now_ms()}),
        )?;
        self.check("postRun")
    }
}

/// Runs the loop under one strategy on a daemon of its own.
fn run(
    bin: &Path,
    root: &Path,
    pi: &str,
    plan: &Plan,
    turns: &[Turn],
    facts: &[String],
    s: Strategy,
) -> Res<Outcome> {
    let fake = FakeProvider::replying(plan.summarizer_delay, summarize)?;
    let config = format!(
        "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"claude-sonnet-4-5\"\nretry = {{ enabled = false }}\n[prices.\"claude-sonnet-4-5\"]\ninput = {USD_INPUT}\noutput = {USD_OUTPUT}\ncache_read = {USD_CACHE_READ}\ncache_write = {USD_CACHE_WRITE}\n",
        fake.port
    );
    let daemon = Daemon::start(bin, root, Some(&config))?;
    let mut conn = daemon.connect()?;
    let dir = root.join("project");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let model = json!({"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": WINDOW, "maxTokens": 16384});
    let info = conn.call(
        "createSession",
        json!({"cwd": dir, "sessionDir": dir, "model": model}),
    )?;
    let sid = info["sessionId"]
        .as_str()
        .ok_or("createSession without sessionId")?
        .to_owned();
    let clear: Value = match &s.clear {
        Some(text) => {
            let mut clear: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
            clear["summarizeOriginals"] = s.originals.into();
            clear
        }
        None => Value::Null,
    };
    conn.call(
        "setSettingsOverrides",
        json!({"sessionId": sid, "piVersion": pi, "compaction": {"reserveTokens": RESERVE, "keepRecentTokens": 20000,
            "speculativeAt": s.speculative_at, "idleCompactAt": s.idle_compact_at,
            "cacheTtlSeconds": plan.cache_ttl.as_secs(), "clearToolResults": clear}}),
    )?;
    let mut agent = Agent {
        conn,
        sid,
        ttl: plan.cache_ttl,
        prev: Vec::new(),
        last_request: None,
        tally: Tally::default(),
    };
    for (i, t) in turns.iter().enumerate() {
        agent
            .turn(i, t, plan.pause)
            .map_err(|e| format!("turn {i}: {e}"))?;
    }
    // The facts: in the final projection, else through the recall lane.
    let ctx = agent.conn.call(
        "getContext",
        json!({"sessionId": agent.sid, "format": "llm"}),
    )?;
    let ctx = ctx["messages"].to_string();
    let (mut in_context, mut recalled, mut lost) = (0, 0, Vec::new());
    for fact in facts {
        if ctx.contains(fact.as_str()) {
            in_context += 1;
            continue;
        }
        let id = &fact[..9];
        let hits = agent.conn.call(
            "searchHistory",
            json!({"sessionId": agent.sid, "query": id, "limit": 5}),
        )?;
        let mut found = false;
        for hit in hits.as_array().map_or(&[][..], Vec::as_slice) {
            let entry = agent.conn.call(
                "getEntry",
                json!({"sessionId": agent.sid, "entryId": hit["entryId"]}),
            )?;
            if entry.to_string().contains(fact.as_str()) {
                found = true;
                break;
            }
        }
        if found {
            recalled += 1;
        } else {
            lost.push(id.to_owned());
        }
    }
    let report = agent
        .conn
        .call("getCostReport", json!({"sessionId": agent.sid}))?;
    let usd = |v: &Value| {
        v["usd"]
            .as_f64()
            .ok_or_else(|| format!("an unpriced spend in {report}"))
    };
    let summarizer_usd = usd(&report["compactions"])? + usd(&report["discardedSpeculations"])?;
    Ok(Outcome {
        tally: agent.tally,
        summarizer_usd,
        summarizer_calls: fake.requests.load(Ordering::Relaxed),
        discarded: report["discardedSpeculations"]["count"]
            .as_u64()
            .unwrap_or(0),
        in_context,
        recalled,
        lost,
    })
}

// ------------------------------------------------------------------ report

fn main() {
    let t = Instant::now();
    match bench() {
        Ok(()) => println!("strategies finished in {:.1} s", t.elapsed().as_secs_f64()),
        Err(e) => {
            eprintln!("strategies failed: {e}");
            std::process::exit(1);
        }
    }
}

/// The strategies compared, (b)'s and (c)'s clearing from `COMPACTD_BENCH_CLEARING` when set.
fn strategies() -> [Strategy; 5] {
    let clearing = std::env::var("COMPACTD_BENCH_CLEARING").unwrap_or_else(|_| CLEARING.to_owned());
    [
        Strategy {
            name: "(a) Pi: summarize at the threshold",
            clear: None,
            originals: true,
            speculative_at: 0.0,
            idle_compact_at: 0.0,
        },
        Strategy {
            name: "(b) clearing, then summarizing",
            clear: Some(clearing.clone()),
            originals: true,
            speculative_at: 0.0,
            idle_compact_at: 0.0,
        },
        Strategy {
            name: "(c) clearing + speculation + idle gate",
            clear: Some(clearing.clone()),
            originals: true,
            speculative_at: 0.75,
            idle_compact_at: 0.4,
        },
        Strategy {
            name: "(d) clearing with the setting's defaults",
            clear: Some("{}".to_owned()),
            originals: true,
            speculative_at: 0.0,
            idle_compact_at: 0.0,
        },
        Strategy {
            name: "(e) (b), the summary reading the placeholders",
            clear: Some(clearing),
            originals: false,
            speculative_at: 0.0,
            idle_compact_at: 0.0,
        },
    ]
}

fn bench() -> Res<()> {
    let release = common::is_bench();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_compactd"));
    if !bin.exists() {
        println!("strategies: {} is not built; skipped", bin.display());
        return Ok(());
    }
    let plan = if release {
        Plan {
            turns: 320,
            summarizer_delay: Duration::from_secs(2),
            cache_ttl: Duration::from_secs(20),
            pause: Duration::from_secs(21),
            pause_every: 50,
        }
    } else {
        Plan {
            turns: 60,
            summarizer_delay: Duration::from_millis(50),
            cache_ttl: Duration::from_secs(1),
            pause: Duration::from_millis(1200),
            pause_every: 30,
        }
    };
    // Another loop of the same kind, to see how much a figure owes to this one.
    let seed = match std::env::var("COMPACTD_BENCH_SEED") {
        Ok(v) => v
            .parse::<u64>()
            .map_err(|e| format!("COMPACTD_BENCH_SEED={v}: {e}"))?,
        Err(_) => SEED,
    };
    let (turns, facts) = script(&plan, seed);
    let tool_tokens: usize = turns.iter().map(|t| t.output.len() / 4).sum();
    println!("{}", common::machine_note());
    println!(
        "seed {seed}: {} turns ({} tool-output tokens in all, {} planted facts), window {WINDOW}, reserve {RESERVE}; summarizer {:.2} s a call; cache lifetime {} s, a {:.0} s pause every {} turns",
        plan.turns,
        tool_tokens,
        facts.len(),
        plan.summarizer_delay.as_secs_f64(),
        plan.cache_ttl.as_secs(),
        plan.pause.as_secs_f64(),
        plan.pause_every
    );
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    for pi in versions()? {
        compare(&bin, tmp.path(), pi, &plan, &turns, &facts, release)?;
    }
    Ok(())
}

/// `COMPACTD_BENCH_PI_VERSION` (`0.85` or `1.6`), or both: each Pi's rules change what a
/// clearing pass is (a custom entry compactd projects, Pi 1.6's own `context_edit`s) and how
/// the cut and the estimate read it.
fn versions() -> Res<Vec<&'static str>> {
    match std::env::var("COMPACTD_BENCH_PI_VERSION").ok().as_deref() {
        None | Some("") => Ok(vec!["0.85", "1.6"]),
        Some("0.85") => Ok(vec!["0.85"]),
        Some("1.6") => Ok(vec!["1.6"]),
        Some(other) => Err(format!("COMPACTD_BENCH_PI_VERSION={other}: 0.85 or 1.6")),
    }
}

/// Every strategy on the loop under `pi`'s rules: the table, the ratios to (a), the issue's
/// target, and (not `release`) the smoke checks.
fn compare(
    bin: &Path,
    tmp: &Path,
    pi: &str,
    plan: &Plan,
    turns: &[Turn],
    facts: &[String],
    release: bool,
) -> Res<()> {
    let strategies = strategies();
    println!();
    println!("### Pi {pi}'s rules");
    // Every strategy at once, each on its own daemon: they mostly wait.
    let outcomes: Vec<Res<Outcome>> = std::thread::scope(|sc| {
        let handles: Vec<_> = strategies
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let s = s.clone();
                let root = tmp.join(format!("pi-{pi}-strategy-{i}"));
                sc.spawn(move || run(bin, &root, pi, plan, turns, facts, s))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a run panicked".into())))
            .collect()
    });
    let mut done = Vec::new();
    for (s, o) in strategies.iter().zip(outcomes) {
        done.push(o.map_err(|e| format!("{}: {e}", s.name))?);
    }
    println!();
    println!("| strategy | summarizing compactions | clearing passes | agent-visible wait | agent $ | summarization $ | total $ | facts in context | + recalled | of |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (s, o) in strategies.iter().zip(&done) {
        let t = &o.tally;
        println!(
            "| {} | {}{} | {} | {:.1} s | ${:.2} | ${:.2} | **${:.2}** | {} | {} | {} |",
            s.name,
            t.compactions,
            if t.idle_compactions > 0 {
                format!(" ({} idle)", t.idle_compactions)
            } else {
                String::new()
            },
            t.passes,
            t.wait.as_secs_f64(),
            t.agent_usd,
            o.summarizer_usd,
            t.agent_usd + o.summarizer_usd,
            o.in_context,
            o.recalled,
            facts.len()
        );
    }
    println!();
    for (s, o) in strategies.iter().zip(&done) {
        let t = &o.tally;
        println!(
            "{}: agent tokens cache read {} / cache write {} / output {}; summarizer calls {} (discarded speculations {}); tokens cleared {}; longest wait {:.2} s{}",
            &s.name[..3],
            t.cache_read,
            t.cache_write,
            t.output,
            o.summarizer_calls,
            o.discarded,
            t.tokens_cleared,
            t.max_wait.as_secs_f64(),
            if o.lost.is_empty() {
                String::new()
            } else {
                format!("; LOST facts {}", o.lost.join(", "))
            }
        );
    }
    let total = |o: &Outcome| o.tally.agent_usd + o.summarizer_usd;
    let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
    let (a, b, c, d, e) = (&done[0], &done[1], &done[2], &done[3], &done[4]);
    println!();
    for (name, o) in [
        ("(b)/(a)", b),
        ("(c)/(a)", c),
        ("(d)/(a)", d),
        ("(e)/(a)", e),
    ] {
        println!(
            "{name}: summarizing compactions {:.2}x, dollars {:.3}x, agent-visible wait {:.3}x",
            ratio(o.tally.compactions as f64, a.tally.compactions as f64),
            ratio(total(o), total(a)),
            ratio(o.tally.wait.as_secs_f64(), a.tally.wait.as_secs_f64())
        );
    }
    let half = 2 * b.tally.compactions <= a.tally.compactions;
    let cheaper = total(b) <= 0.75 * total(a);
    let facts_kept = b.lost.is_empty();
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!(
        "target (issue 32): (b) at most half of (a)'s summarizing compactions: {} ({} vs {}); at least 25 % cheaper: {} ({:+.1} %); every planted fact in context or recalled: {} ({} + {} of {})",
        verdict(half),
        b.tally.compactions,
        a.tally.compactions,
        verdict(cheaper),
        (ratio(total(b), total(a)) - 1.0) * 100.0,
        verdict(facts_kept),
        b.in_context,
        b.recalled,
        facts.len()
    );
    if !release {
        // The smoke version checks that every lane did its part, not the figures.
        if let Some((s, o)) = strategies
            .iter()
            .zip(&done)
            .find(|(_, o)| !o.lost.is_empty())
        {
            return Err(format!(
                "Pi {pi}, {}: facts lost: {}",
                s.name,
                o.lost.join(", ")
            ));
        }
        if a.tally.compactions == 0 {
            return Err(format!("Pi {pi}: (a) never summarized"));
        }
        if [b, c, d, e].iter().any(|o| o.tally.passes == 0) {
            return Err(format!("Pi {pi}: (b), (c), (d) or (e) never cleared"));
        }
    }
    Ok(())
}
