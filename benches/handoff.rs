//! The verified handoff (`compaction.handoff`), measured: how much of what a session planted a
//! lossy summarizer loses, how much `repair` and `retry` bring back, whether the check's score
//! tells a good summary from a bad one, and what the check costs.
//!
//! The summarizer is a fake LLM that writes the extractive summary of the span and then loses,
//! each at the rate of the row, what LLM summaries are measured to lose: exact paths, commands
//! and numbers (said as "a file", "the command", "N"), the user's constraints and the open tasks
//! (their lines dropped). compactd appends Pi's file blocks as it does to any LLM summary. Its
//! retry follows the extra instructions as lossily as it wrote the first summary: it writes
//! the summary again (another draw) and states each item it was told it missed at the same
//! rate.
//!
//! Planted facts are the corpus's probes (`benches/quality/*.session` and the generated
//! sessions shaped like published ones, `generated`): what the corpus's author said a handoff
//! must keep, written before and independently of the check. A session compacted several times
//! is compacted by the extractive summarizer up to its last compaction, which is the one
//! measured.
//!
//! Printed per corpus and rate: the check's score, planted-fact recall as written, after
//! `repair`, after the `retry` call and after its repair; the Spearman rank correlation of the
//! score with the measured recall over every (session, rate, draw); and the time of the
//! obligations (the span's one pass) and of the check per 100k tokens of span, beside the
//! extractive summary of the same span in the same run.
//!
//! Under `cargo test --all-targets` (no `--bench`) it asserts the targets: at a rate of one in
//! two, `repair` brings planted-fact recall to at least 95 % on both corpora, and the rank
//! correlation over the summaries of one session is at least 0.8 on both (the pooled figure,
//! across sessions whose probes and obligations differ, is printed beside it).
//! `COMPACTD_HANDOFF_TIMING=1` runs the timing alone (for a profiler).

#[path = "../tests/support/compact.rs"]
mod compact;
mod corpus;
mod generated;

use std::path::Path;
use std::time::{Duration, Instant};

use compactd::compaction::file_ops::format_file_operations;
use compactd::compaction::prepare::{prepare_branch, Preparation};
use compactd::compaction::tokens::CompactionSettings;
use compactd::compaction::BranchIndex;
use compactd::compactor::{generate_extractive, step};
use compactd::handoff::{self, Mode, Owed};
use compactd::session::{BranchView, PiVersion};
use compactd::summarizer::extractive::ExtractiveSettings;
use compactd::summarizer::redact::RedactionConfig;
use regex::Regex;
use serde_json::Value;

use corpus::*;

/// The rates the fake summarizer loses things at.
const RATES: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];
/// Draws per (session, rate): each a different choice of what is lost.
const DRAWS: u64 = 3;

/// A small deterministic generator (64-bit LCG): the same draw always loses the same things.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }

    /// `true` with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// The fake LLM's loss (see the module doc): `body` (a summary without Pi's file blocks) with
/// each path, command and number said vaguely, and each constraint and open task left out, at
/// `rate`.
fn lossy(body: &str, rate: f64, rng: &mut Rng) -> String {
    static CODE: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"`[^`\n]+`").expect("code"));
    static PATH: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
        Regex::new(r"(?:[\w.~-]*/)+[\w.-]+\.\w+|\b[\w-]+\.(?:rs|ts|js|py|go|md|json|toml|yml|yaml|sql|sh|tf|txt)\b")
            .expect("path")
    });
    static NUMBER: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"\bv?\d+(?:\.\d+)+\b|\b\d{2,}\b").expect("number"));
    let mut out = Vec::new();
    let mut section = "";
    for line in body.lines() {
        if line.starts_with("## ") || line.starts_with("### ") {
            section = line;
            out.push(line.to_owned());
            continue;
        }
        let item = line
            .trim_start()
            .starts_with(['-', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
        let open = matches!(section, "## Next Steps" | "### In Progress");
        let rule = section == "## Constraints & Preferences";
        if item && (open || rule) && rng.chance(rate) {
            continue;
        }
        // Inline code: a path or a command line is lost at the rate; a name (a tool, a
        // function, a flag) is not what this summarizer loses. Outside code: paths, and
        // numbers on their own (a port, a count, a version; not one inside a name, `WEB-431`).
        let mut said = String::new();
        let mut rest = line;
        while !rest.is_empty() {
            let (plain, code, after) = match CODE.find(rest) {
                Some(m) => (&rest[..m.start()], m.as_str(), &rest[m.end()..]),
                None => (rest, "", ""),
            };
            let plain = PATH.replace_all(plain, |c: &regex::Captures| match rng.chance(rate) {
                true => "a file".to_owned(),
                false => c[0].to_owned(),
            });
            let plain = NUMBER.replace_all(&plain, |c: &regex::Captures| {
                let start = c.get(0).map_or(0, |m| m.start());
                let before = plain[..start].chars().next_back();
                let inside = before.is_some_and(|b| {
                    b.is_alphanumeric() || matches!(b, '-' | '_' | '#' | '/' | '.' | '(' | ',')
                });
                match !inside && rng.chance(rate) {
                    true => "N".to_owned(),
                    false => c[0].to_owned(),
                }
            });
            said.push_str(&plain);
            if !code.is_empty() {
                let path = PATH.is_match(code);
                let command = code.trim_matches('`').contains(' ');
                said.push_str(match (path || command) && rng.chance(rate) {
                    true if path && !command => "a file",
                    true => "the command",
                    false => code,
                });
            }
            rest = after;
        }
        let line = said;
        out.push(line);
    }
    out.join("\n")
}

/// One compaction measured: its obligations, the faithful (extractive) summary's body and Pi's
/// file blocks, the span's size, and the probes.
struct Case {
    name: String,
    owed: Owed,
    body: String,
    blocks: String,
    probes: Vec<Probe>,
    /// Estimated tokens of the span summarized.
    span_tokens: u64,
    prep: Preparation,
}

/// Planted-fact recall of `summary`: the share of the probes (facts, and facts that must sit in
/// a section) found anywhere in it.
fn recall(summary: &str, probes: &[Probe]) -> Option<f64> {
    let all = normalize(summary);
    let facts: Vec<&str> = probes
        .iter()
        .filter_map(|p| match p {
            Probe::Fact(t) | Probe::In(_, t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    if facts.is_empty() {
        return None;
    }
    let found = facts.iter().filter(|t| contains_any(&all, t)).count();
    Some(found as f64 / facts.len() as f64)
}

/// Compacts `script` up to its last compaction with the extractive summarizer, and reads what
/// the last one owes.
async fn case(script: &Script, dir: &Path) -> Result<Case, String> {
    let path = dir.join(format!("{}.jsonl", script.name));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: script.reserve_tokens,
        keep_recent_tokens: script.keep_recent_tokens,
    };
    write_session(&path, &script.segments[0])?;
    let mut base = script.segments[0].len() + 10;
    for (k, segment) in script.segments.iter().enumerate() {
        if k > 0 {
            append_segment(&path, segment, base)?;
            base += segment.len() + 10;
        }
        if k + 1 < script.segments.len() {
            // The earlier compactions as `compactd compact` makes them (the daemon's path, the
            // extractive summarizer).
            compact::compact_file(
                compactd::config::Config::default(),
                &path,
                &settings,
                script.focus.as_deref(),
            )
            .await
            .map_err(|e| format!("{}: {}", script.name, e.message))?;
        }
    }
    let (tree, _) = compactd::store::files::load(&path, false).map_err(|e| e.to_string())?;
    let branch = tree.branch();
    let view = BranchView {
        tree: &tree,
        positions: &branch,
    };
    let index = BranchIndex::build(&view);
    // The rules the daemon follows by default (Pi 1.6), as the earlier compactions did.
    let prep = prepare_branch(PiVersion::default(), &view, &index, &settings)
        .map_err(|e| e.message().to_owned())?;
    let previous = prep
        .boundaries
        .prev_compaction_index
        .and_then(|i| tree.entry(branch[i]).id_owned());
    let owed = step::owed_by(&prep, Mode::Repair, previous.as_deref()).ok_or("no obligations")?;
    let full = generate_extractive(
        &prep,
        script.focus.as_deref(),
        &RedactionConfig::default(),
        ExtractiveSettings::DEFAULT,
    );
    let (read, modified) = prep.file_ops.file_lists();
    let blocks = format_file_operations(&read, &modified);
    let body = full
        .summary
        .strip_suffix(blocks.as_str())
        .unwrap_or(&full.summary)
        .to_owned();
    Ok(Case {
        name: script.name.clone(),
        owed,
        body,
        blocks,
        probes: script.probes.clone(),
        span_tokens: prep.history.tokens + prep.turn_prefix.tokens,
        prep,
    })
}

/// One (session, rate, draw) measured.
struct Sample {
    /// The session's index.
    session: usize,
    rate: f64,
    score: f64,
    /// Planted-fact recall as written, after repair, after the retry call, after its repair.
    written: f64,
    repaired: f64,
    retried: f64,
    retried_repaired: f64,
}

fn measure(session: usize, c: &Case, rate: f64, draw: u64) -> Option<Sample> {
    let mut rng = Rng::new(draw * 1_000 + (rate * 100.0) as u64 + c.name.len() as u64 * 7);
    let written = format!("{}{}", lossy(&c.body, rate, &mut rng), c.blocks);
    let (repaired, report) = c.owed.finish(written.clone());
    // The retry: the same lossy writer, another draw, told what it missed.
    let told = handoff::repair::instructions(&report.missing);
    let mut again = lossy(&c.body, rate, &mut rng);
    for line in told.lines().skip(1) {
        if !rng.chance(rate) {
            again.push('\n');
            again.push_str(line);
        }
    }
    let again = format!("{again}{}", c.blocks);
    let (again_repaired, _) = c.owed.finish(again.clone());
    Some(Sample {
        session,
        rate,
        score: report.score,
        written: recall(&written, &c.probes)?,
        repaired: recall(&repaired, &c.probes)?,
        retried: recall(&again, &c.probes)?,
        retried_repaired: recall(&again_repaired, &c.probes)?,
    })
}

/// Spearman's rank correlation of two series (ties get their mean rank).
fn spearman(xs: &[f64], ys: &[f64]) -> f64 {
    fn ranks(v: &[f64]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            let mean = (i + j) as f64 / 2.0 + 1.0;
            for k in i..=j {
                r[idx[k]] = mean;
            }
            i = j + 1;
        }
        r
    }
    let (rx, ry) = (ranks(xs), ranks(ys));
    let n = xs.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let cov: f64 = rx
        .iter()
        .zip(&ry)
        .map(|(a, b)| (a - mean) * (b - mean))
        .sum();
    let vx: f64 = rx.iter().map(|a| (a - mean).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - mean).powi(2)).sum();
    if vx == 0.0 || vy == 0.0 {
        return 0.0;
    }
    cov / (vx * vy).sqrt()
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

/// What one corpus came to.
struct Outcome {
    /// Mean recall after repair at a rate of one in two.
    repaired_at_half: f64,
    correlation: f64,
}

fn evaluate(label: &str, cases: &[Case]) -> Outcome {
    let mut samples = Vec::new();
    for (k, c) in cases.iter().enumerate() {
        for rate in RATES {
            for draw in 0..DRAWS {
                samples.extend(measure(k, c, rate, draw));
            }
        }
    }
    let owed = mean(cases.iter().map(|c| c.owed.obligations.len() as f64));
    println!(
        "\n## {label} ({} sessions, {} samples, {owed:.1} obligations a compaction)",
        cases.len(),
        samples.len()
    );
    println!("| rate lost | score | recall as written | after repair | after the retry call | after retry + repair |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for rate in RATES {
        let at: Vec<&Sample> = samples.iter().filter(|s| s.rate == rate).collect();
        let pct =
            |f: &dyn Fn(&Sample) -> f64| format!("{:.1}%", 100.0 * mean(at.iter().map(|s| f(s))));
        println!(
            "| {:.0}% | {:.3} | {} | {} | {} | {} |",
            rate * 100.0,
            mean(at.iter().map(|s| s.score)),
            pct(&|s| s.written),
            pct(&|s| s.repaired),
            pct(&|s| s.retried),
            pct(&|s| s.retried_repaired),
        );
    }
    // Does a summary that scores lower keep less of what was planted? For one span (what the
    // check is for: judging a summary of the span it has), over the summaries of each
    // session, then averaged over the sessions whose recall varies; and pooled over everything.
    let mut within = Vec::new();
    for k in 0..cases.len() {
        let of: Vec<&Sample> = samples.iter().filter(|s| s.session == k).collect();
        let recalls: Vec<f64> = of.iter().map(|s| s.written).collect();
        if recalls.iter().any(|r| *r != recalls[0]) {
            let scores: Vec<f64> = of.iter().map(|s| s.score).collect();
            within.push(spearman(&scores, &recalls));
        }
    }
    let correlation = mean(within.iter().copied());
    let scores: Vec<f64> = samples.iter().map(|s| s.score).collect();
    let recalls: Vec<f64> = samples.iter().map(|s| s.written).collect();
    println!(
        "\nrank correlation of the score with measured recall (Spearman): {correlation:.3} over the summaries of one session (mean of {} sessions whose recall varies), {:.3} pooled over all {} samples",
        within.len(),
        spearman(&scores, &recalls),
        samples.len()
    );
    Outcome {
        repaired_at_half: mean(samples.iter().filter(|s| s.rate == 0.5).map(|s| s.repaired)),
        correlation,
    }
}

/// The median of `runs` timings of `f`.
fn median_time(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// The check's cost on the largest span: the obligations (the span's one pass), the check of a
/// summary against them, and, in the same run, the extractive summary of the same span.
fn timing(cases: &[Case], runs: usize) {
    let Some(c) = cases.iter().max_by_key(|c| c.span_tokens) else {
        return;
    };
    let per_100k = |d: Duration| d.as_secs_f64() * 1e3 * 100_000.0 / c.span_tokens.max(1) as f64;
    let owed = median_time(runs, || {
        std::hint::black_box(step::owed_by(&c.prep, Mode::Report, None));
    });
    let summary = format!("{}{}", c.body, c.blocks);
    let check = median_time(runs, || {
        std::hint::black_box(handoff::check(&summary, &c.owed.obligations, Mode::Report));
    });
    let extractive = median_time(runs, || {
        std::hint::black_box(generate_extractive(
            &c.prep,
            None,
            &RedactionConfig::default(),
            ExtractiveSettings::DEFAULT,
        ));
    });
    println!(
        "\n## time, `{}` ({} tokens of span, median of {runs})",
        c.name, c.span_tokens
    );
    println!("| step | per 100k tokens of span | against the extractive summary of the span |");
    println!("|---|---:|---:|");
    for (step, d) in [
        ("obligations (the span's pass)", owed),
        ("check of a summary", check),
        ("both", owed + check),
        ("extractive summary (same run)", extractive),
    ] {
        println!(
            "| {step} | {:.2} ms | {:.2}x |",
            per_100k(d),
            d.as_secs_f64() / extractive.as_secs_f64().max(1e-9)
        );
    }
}

/// A session of about `tokens` tokens: the generated sessions' messages one after the other
/// (first segments), then a last request, so everything before it is one span to summarize.
fn long_script(tokens: usize) -> Script {
    let mut messages: Vec<Value> = Vec::new();
    let mut size = 0usize;
    let scripts = generated::corpus();
    'fill: loop {
        for s in &scripts {
            for m in s.segments.iter().flatten() {
                size += m.to_string().len() / 4;
                messages.push(m.clone());
                if size >= tokens {
                    break 'fill;
                }
            }
        }
    }
    let mut all = load_corpus();
    let mut script = all.remove(0);
    script.name = format!("long-{}k", tokens / 1000);
    script.segments = vec![messages];
    script.keep_recent_tokens = 1;
    script
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let load = |scripts: Vec<Script>| -> Vec<Case> {
        scripts
            .iter()
            .map(|s| {
                runtime
                    .block_on(case(s, dir.path()))
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect()
    };
    // `COMPACTD_HANDOFF_TIMING=1`: the timing alone (for a profiler).
    if std::env::var_os("COMPACTD_HANDOFF_TIMING").is_some() {
        let long = load(vec![long_script(100_000)]);
        timing(&long, 41);
        return;
    }
    let corpus = load(load_corpus());
    let generated = load(generated::corpus());
    show_misses(&corpus);
    show_misses(&generated);
    let q = evaluate("quality corpus", &corpus);
    let g = evaluate("generated sessions shaped like published ones", &generated);
    let long = load(vec![long_script(if bench { 100_000 } else { 20_000 })]);
    timing(&long, if bench { 21 } else { 3 });
    if bench {
        return;
    }
    for (name, o) in [("the quality corpus", &q), ("the generated sessions", &g)] {
        assert!(
            o.repaired_at_half >= 0.95,
            "{name}: repair brings planted-fact recall to {:.1}% from a summarizer that loses half (at least 95%)",
            100.0 * o.repaired_at_half
        );
        assert!(
            o.correlation >= 0.8,
            "{name}: the score's rank correlation with measured recall is {:.3} (at least 0.8)",
            o.correlation
        );
    }
}

/// The probes a summary repaired at a rate of one still lacks (`COMPACTD_HANDOFF_MISSES=1`;
/// `COMPACTD_HANDOFF_SHOW=1` adds each faithful summary and its obligations): what no
/// obligation covers.
fn show_misses(cases: &[Case]) {
    if std::env::var_os("COMPACTD_HANDOFF_MISSES").is_none() {
        return;
    }
    for c in cases {
        let mut rng = Rng::new(1);
        let written = format!("{}{}", lossy(&c.body, 1.0, &mut rng), c.blocks);
        let (repaired, _) = c.owed.finish(written);
        let all = normalize(&repaired);
        for p in &c.probes {
            if let Probe::Fact(t) | Probe::In(_, t) = p {
                if !contains_any(&all, t) {
                    println!("{}: lost {t:?}", c.name);
                }
            }
        }
        if std::env::var_os("COMPACTD_HANDOFF_SHOW").is_some() {
            println!(
                "--- {}\n{}\n--- owed: {:?}",
                c.name,
                c.body,
                c.owed
                    .obligations
                    .iter()
                    .map(|o| (o.kind, o.text.clone()))
                    .collect::<Vec<_>>()
            );
        }
    }
}
