//! Summary quality you can measure: runs every summarizer over a corpus of realistic
//! coding-agent sessions and checks, with probes, what each summary kept and how it placed it.
//!
//! Why a probe benchmark: a summary is only useful if the model resuming the work can act on it.
//! That boils down to checkable facts: the goal, the constraints, the decisions, the files, the
//! open error and the next step must survive; a fixed error or an abandoned approach must not be
//! presented as open; a decision belongs under Key Decisions and the open failure under Blocked.
//!
//! The corpus lives in `benches/quality/*.session` (a compact script format described in
//! `benches/README.md`); each script is turned into a Pi-format JSONL session in a temporary
//! directory and compacted through the daemon's own path (`compact` in a daemon of the bench's
//! process, as `compactd compact` runs it), as a user's session would be, with the recall
//! footer off (a fixed line that says nothing about the summary). A script with `compact` markers is compacted after each segment (repeated
//! compactions): its probes are checked against the last summary, and every summary's size is
//! checked against the output budget.
//!
//! Summarizers: the embedded extractive one always; the local SmolLM2 through llama.cpp when
//! `COMPACTD_LOCAL_LLM` names its server root (e.g. `http://127.0.0.1:8091`); the configured
//! provider (compactd's config file, `COMPACTD_CONFIG` or the default path) when it names an
//! LLM whose key is present.
//!
//! Precision beside recall: every summary also goes through the precision lint (`precision`),
//! which counts the items a person would strike out (repeats, walls of text, blobs, read-only
//! exploration as progress, searches that found nothing as blockers, fragments as decisions,
//! error text as constraints, small talk as goals), on the corpus and on sessions generated in
//! code shaped like published ones (`generated`), where noise comes from volume.
//!
//! `cargo bench --bench quality` prints the tables. Under `cargo test --all-targets` (no
//! `--bench` argument) only the extractive part runs, and it asserts the targets: fact recall of
//! at least 95% (all of it on the generated sessions), zero fixed errors or abandoned approaches
//! presented as open, every placement probe in its section, no noise probe hit, at most one
//! noise item per summary on average and none with more than five, and bounded sizes over
//! repeated compactions. `COMPACTD_QUALITY_LINT=<name part>` lists the noise items found.

#[path = "../tests/support/compact.rs"]
mod compact;
mod corpus;
mod generated;
mod precision;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use compactd::compaction::file_ops::format_file_operations;
use compactd::compaction::tokens::CompactionSettings;
use compactd::config::Config;
use compactd::summarizer::{Api, ModelSpec};
use serde_json::Value;

use corpus::*;

/// Where a stale item would be presented as open work.
const OPEN_SECTIONS: [&str; 2] = ["blocked", "next"];

fn count_of(hay: &str, alternatives: &str) -> usize {
    alternatives
        .split(" || ")
        .map(|a| hay.matches(&normalize(a)).count())
        .max()
        .unwrap_or(0)
}

/// The bodies of every section that counts as `name`, concatenated and normalized.
fn section_text(summary: &str, name: &str) -> String {
    let Some((_, headings)) = SECTIONS.iter().find(|(n, _)| *n == name) else {
        return String::new();
    };
    let mut out = String::new();
    let mut inside = false;
    for line in summary.lines() {
        if line.starts_with("## ")
            || line.starts_with("### ")
            || line.starts_with("**Turn Context")
            || line.starts_with("<read-files>")
            || line.starts_with("<modified-files>")
        {
            inside = headings.contains(&line.trim_end());
            continue;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    normalize(&out)
}

/// The score of one summary against its probes.
#[derive(Default, Clone)]
struct Score {
    facts: usize,
    facts_found: usize,
    placements: usize,
    placed: usize,
    stale_open: usize,
    noise: usize,
    misses: Vec<String>,
}

fn score(summary: &str, probes: &[Probe]) -> Score {
    let all = normalize(summary);
    let mut s = Score::default();
    for p in probes {
        match p {
            Probe::Fact(t) => {
                s.facts += 1;
                if contains_any(&all, t) {
                    s.facts_found += 1;
                } else {
                    s.misses.push(format!("missing fact: {t}"));
                }
            }
            Probe::In(sec, t) => {
                s.facts += 1;
                s.placements += 1;
                if contains_any(&all, t) {
                    s.facts_found += 1;
                } else {
                    s.misses.push(format!("missing fact: {t}"));
                }
                if contains_any(&section_text(summary, sec), t) {
                    s.placed += 1;
                } else {
                    s.misses.push(format!("not under {sec}: {t}"));
                }
            }
            Probe::Stale(t) => {
                if OPEN_SECTIONS
                    .iter()
                    .any(|sec| contains_any(&section_text(summary, sec), t))
                {
                    s.stale_open += 1;
                    s.misses.push(format!("presented as open: {t}"));
                }
            }
            Probe::NotIn(sec, t) => {
                if contains_any(&section_text(summary, sec), t) {
                    s.noise += 1;
                    s.misses.push(format!("noise under {sec}: {t}"));
                }
            }
            Probe::Once(t) => {
                if count_of(&all, t) > 1 {
                    s.noise += 1;
                    s.misses.push(format!("repeated: {t}"));
                }
            }
        }
    }
    s
}

/// The size of one summary in tokens (chars/4): its body (the sections), and the whole text
/// with Pi's file blocks, which list every path the session touched (the daemon cuts them to
/// `fileListLimit`; `details` keeps the lists).
#[derive(Clone, Copy, Debug)]
struct Size {
    body: usize,
    total: usize,
}

impl Size {
    fn of(summary: &str, details: Option<&Value>) -> Size {
        let list = |k: &str| -> Vec<String> {
            details
                .and_then(|d| d[k].as_array())
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let blocks = format_file_operations(&list("readFiles"), &list("modifiedFiles"));
        let body = summary.strip_suffix(blocks.as_str()).unwrap_or(summary);
        Size {
            body: body.chars().count().div_ceil(4),
            total: summary.chars().count().div_ceil(4),
        }
    }
}

/// The result of compacting one script with one summarizer.
struct Run {
    score: Score,
    /// Summary size after each compaction.
    sizes: Vec<Size>,
    /// The output budget in tokens for the history summary (0.8 × reserve).
    budget: usize,
    elapsed: Duration,
    failed: Option<String>,
    summary: String,
    /// The precision lint's findings on each summary, in order.
    lints: Vec<Vec<precision::Finding>>,
}

async fn run_script(script: &Script, config: &Config, dir: &Path) -> Run {
    let path = dir.join(format!("{}.jsonl", script.name));
    let settings = CompactionSettings {
        enabled: true,
        reserve_tokens: script.reserve_tokens,
        keep_recent_tokens: script.keep_recent_tokens,
    };
    let budget = (script.reserve_tokens as f64 * 0.8) as usize;
    let mut run = Run {
        score: Score::default(),
        sizes: Vec::new(),
        budget,
        elapsed: Duration::ZERO,
        failed: None,
        summary: String::new(),
        lints: Vec::new(),
    };
    if let Err(e) = write_session(&path, &script.segments[0]) {
        run.failed = Some(e);
        return run;
    }
    let mut base = script.segments[0].len() + 10;
    for (k, segment) in script.segments.iter().enumerate() {
        if k > 0 {
            if let Err(e) = append_segment(&path, segment, base) {
                run.failed = Some(e);
                return run;
            }
            base += segment.len() + 10;
        }
        let started = Instant::now();
        let result =
            compact::compact_file(config.clone(), &path, &settings, script.focus.as_deref()).await;
        run.elapsed += started.elapsed();
        match result {
            Ok(c) => {
                let summary = c.result["summary"].as_str().unwrap_or_default().to_owned();
                if std::env::var("COMPACTD_QUALITY_SHOW_ROUNDS")
                    .is_ok_and(|v| script.name.contains(v.as_str()))
                {
                    println!("[{}] round {}:\n{summary}\n", script.name, k + 1);
                }
                run.sizes
                    .push(Size::of(&summary, Some(&c.result["details"])));
                run.lints.push(precision::lint(&summary));
                run.summary = summary;
            }
            Err(e) => {
                run.failed = Some(format!("compaction {} failed: {e}", k + 1));
                return run;
            }
        }
    }
    run.score = score(&run.summary, &script.probes);
    run
}

/// Totals over the corpus for one summarizer.
#[derive(Default)]
struct Totals {
    score: Score,
    tokens: Vec<usize>,
    elapsed: Duration,
    failures: Vec<String>,
    repeated: Vec<Repeated>,
    /// Noise items by kind (`precision::Kind::ALL` order), over every summary.
    noise_by_kind: [usize; 8],
    /// Noise items of each summary (every compaction of every session).
    noise_per_summary: Vec<usize>,
}

/// A session compacted five times or more, each compaction an update of the last summary.
struct Repeated {
    name: String,
    sizes: Vec<Size>,
    /// Pi's output cap for the summary, in tokens.
    budget: usize,
    recall: f64,
    stale: usize,
}

/// How large a summary's body may get after its first three compactions: a quarter more than
/// the largest of those three, plus room for one new must-keep fact quoted at length (an open
/// error, about 250 tokens). Without consolidation a body grows by every command, request and
/// done item of every compaction, and passes this within a few rounds.
fn grows_at_most(sizes: &[Size]) -> Option<usize> {
    let settled = sizes.iter().take(3).map(|s| s.body).max()?;
    Some(settled + settled / 4 + 250)
}

/// The typical growth per compaction after the first three (the median of the increments), in
/// tokens: near zero for a flat summary, whatever one compaction adds. Measured from eight
/// compactions on (fewer increments say little).
fn median_growth(sizes: &[Size]) -> Option<i64> {
    if sizes.len() < 8 {
        return None;
    }
    let mut steps: Vec<i64> = sizes
        .windows(2)
        .skip(2)
        .map(|w| w[1].body as i64 - w[0].body as i64)
        .collect();
    steps.sort_unstable();
    steps.get(steps.len() / 2).copied()
}

impl Totals {
    fn recall(&self) -> f64 {
        ratio(self.score.facts_found, self.score.facts)
    }
    fn placement(&self) -> f64 {
        ratio(self.score.placed, self.score.placements)
    }
    fn noise_mean(&self) -> f64 {
        ratio(
            self.noise_per_summary.iter().sum(),
            self.noise_per_summary.len(),
        )
    }
    fn noise_max(&self) -> usize {
        self.noise_per_summary.iter().copied().max().unwrap_or(0)
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

async fn evaluate(label: &str, config: &Config, corpus: &[Script], verbose: bool) -> Totals {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut t = Totals::default();
    for script in corpus {
        let run = run_script(script, config, dir.path()).await;
        t.elapsed += run.elapsed;
        if let Some(f) = &run.failed {
            t.failures.push(format!("{}: {f}", script.name));
            // A failed compaction keeps nothing: every fact of the session is lost.
            let s = score("", &script.probes);
            add(&mut t.score, &s);
            continue;
        }
        add(&mut t.score, &run.score);
        t.tokens.extend(run.sizes.iter().map(|s| s.total));
        for (round, findings) in run.lints.iter().enumerate() {
            let c = precision::counts(findings);
            for (k, n) in c.iter().enumerate() {
                t.noise_by_kind[k] += n;
            }
            t.noise_per_summary.push(findings.len());
            // `COMPACTD_QUALITY_LINT=<name part>` prints the noise items of matching sessions.
            if let Ok(only) = std::env::var("COMPACTD_QUALITY_LINT") {
                if script.name.contains(&only) && !findings.is_empty() {
                    println!(
                        "[{label}] {} round {}: {} noise items",
                        script.name,
                        round + 1,
                        findings.len()
                    );
                    for f in findings {
                        let text: String = f.item.chars().take(160).collect();
                        println!(
                            "    {} ({}): {}",
                            f.kind.name(),
                            f.section,
                            text.replace('\n', " / ")
                        );
                    }
                }
            }
        }
        if run.sizes.len() >= 5 {
            t.repeated.push(Repeated {
                name: script.name.clone(),
                sizes: run.sizes.clone(),
                budget: run.budget,
                recall: ratio(run.score.facts_found, run.score.facts),
                stale: run.score.stale_open,
            });
        }
        if verbose && !run.score.misses.is_empty() {
            println!("[{label}] {} ({}):", script.name, script.title);
            for m in &run.score.misses {
                println!("    {m}");
            }
        }
        // `COMPACTD_QUALITY_SHOW=<name part>` prints the final summaries of matching sessions.
        if let Ok(show) = std::env::var("COMPACTD_QUALITY_SHOW") {
            if script.name.contains(&show) {
                println!(
                    "[{label}] {} final summary:\n{}\n",
                    script.name, run.summary
                );
            }
        }
    }
    t
}

fn add(total: &mut Score, s: &Score) {
    total.facts += s.facts;
    total.facts_found += s.facts_found;
    total.placements += s.placements;
    total.placed += s.placed;
    total.stale_open += s.stale_open;
    total.noise += s.noise;
}

fn print_table(label: &str, corpus: &[Script], t: &Totals, timed: bool) {
    let mean = if t.tokens.is_empty() {
        0
    } else {
        t.tokens.iter().sum::<usize>() / t.tokens.len()
    };
    let max = t.tokens.iter().copied().max().unwrap_or(0);
    println!(
        "\n## {label} ({} sessions, {} probes)",
        corpus.len(),
        corpus.iter().map(|s| s.probes.len()).sum::<usize>()
    );
    println!("| metric | value |");
    println!("|---|---|");
    println!(
        "| fact recall | {:.1}% ({}/{}) |",
        100.0 * t.recall(),
        t.score.facts_found,
        t.score.facts
    );
    println!("| stale items presented as open | {} |", t.score.stale_open);
    println!(
        "| section placement | {:.1}% ({}/{}) |",
        100.0 * t.placement(),
        t.score.placed,
        t.score.placements
    );
    println!(
        "| noise (greetings as goal, repeats, listings as progress) | {} |",
        t.score.noise
    );
    println!("| summary tokens (chars/4), mean / max | {mean} / {max} |");
    println!(
        "| noise items per summary (precision lint), mean / max | {:.2} / {} ({} summaries) |",
        t.noise_mean(),
        t.noise_max(),
        t.noise_per_summary.len()
    );
    for (k, kind) in precision::Kind::ALL.iter().enumerate() {
        println!("| noise: {} | {} |", kind.name(), t.noise_by_kind[k]);
    }
    if timed {
        println!(
            "| time, whole corpus | {:.1} ms |",
            t.elapsed.as_secs_f64() * 1e3
        );
    }
    println!("| failed compactions | {} |", t.failures.len());
    for f in &t.failures {
        println!("  - {f}");
    }
    for r in &t.repeated {
        let within_cap = r.sizes.iter().all(|s| s.total <= r.budget);
        let limit = grows_at_most(&r.sizes).unwrap_or(0);
        let growth = median_growth(&r.sizes)
            .map(|g| format!("{g} tokens"))
            .unwrap_or_else(|| "not measured (fewer than 8)".to_string());
        println!(
            "\nrepeated compactions `{}`: {} in a row, facts surviving {:.0}%, stale items {}, {} Pi's cap of {} tokens; body at most {} tokens (limit {limit}), median growth per compaction after the third {growth}",
            r.name,
            r.sizes.len(),
            100.0 * r.recall,
            r.stale,
            if within_cap { "within" } else { "OVER" },
            r.budget,
            r.sizes.iter().map(|s| s.body).max().unwrap_or(0),
        );
        let row = |f: &dyn Fn(&Size) -> usize| {
            r.sizes
                .iter()
                .map(|s| f(s).to_string())
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let rounds: Vec<String> = (1..=r.sizes.len()).map(|n| n.to_string()).collect();
        println!("| compaction | {} |", rounds.join(" | "));
        println!("|---|{}", "---:|".repeat(r.sizes.len()));
        println!("| body tokens | {} |", row(&|s| s.body));
        println!("| with file blocks | {} |", row(&|s| s.total));
    }
}

/// The local SmolLM2 through llama.cpp, when `COMPACTD_LOCAL_LLM` names its server root.
fn local_summarizer() -> Option<Config> {
    let root = std::env::var("COMPACTD_LOCAL_LLM")
        .ok()
        .filter(|v| !v.trim().is_empty())?;
    let model = ModelSpec {
        api: Api::OpenAiCompletions,
        provider: "local-llama".into(),
        id: "smollm2".into(),
        base_url: format!("{}/v1", root.trim_end_matches('/')),
        context_window: 8192,
        // A 135M model on a busy CPU writes a few tokens a second: keep its summaries short.
        max_tokens: std::env::var("COMPACTD_LOCAL_LLM_MAX_TOKENS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(256),
        reasoning: false,
        api_key: Some("local".into()),
        key_env: None,
        headers: vec![],
    };
    Some(compact::config_for(&model, true))
}

/// The configured provider (compactd's config file), when it names an LLM whose key is present.
fn configured_summarizer() -> Option<(String, Config)> {
    let explicit = std::env::var_os("COMPACTD_CONFIG").map(PathBuf::from);
    let config = Config::load(explicit.as_deref()).ok()?;
    match config.engine(reqwest::Client::new()) {
        Ok(engine) if engine.label() != "extractive" => {
            Some((format!("configured provider {}", engine.label()), config))
        }
        _ => None,
    }
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let verbose = !bench || std::env::var_os("COMPACTD_QUALITY_VERBOSE").is_some();
    let mut corpus = load_corpus();
    // `COMPACTD_QUALITY_ONLY=<name part>` restricts a `--bench` run to matching sessions (a slow
    // LLM on a busy machine); the test-mode run always covers the whole corpus.
    if let (true, Ok(only)) = (bench, std::env::var("COMPACTD_QUALITY_ONLY")) {
        corpus.retain(|s| only.split(',').any(|o| s.name.contains(o.trim())));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let extractive = Config::default();
    let t = runtime.block_on(evaluate("extractive", &extractive, &corpus, verbose));
    print_table("extractive", &corpus, &t, bench);
    // Sessions generated in code, shaped like published ones (see `generated`): where noise
    // comes from volume. The extractive summarizer only: they are long for a local model.
    let generated = generated::corpus();
    let g = runtime.block_on(evaluate(
        "extractive/generated",
        &extractive,
        &generated,
        verbose,
    ));
    print_table("extractive, generated sessions", &generated, &g, bench);

    if bench {
        if let Some(config) = local_summarizer() {
            let t = runtime.block_on(evaluate("smollm2", &config, &corpus, verbose));
            print_table("local SmolLM2 (llama.cpp)", &corpus, &t, true);
        } else {
            println!(
                "\n(local SmolLM2 skipped: set COMPACTD_LOCAL_LLM to the llama.cpp server root)"
            );
        }
        if let Some((label, config)) = configured_summarizer() {
            let t = runtime.block_on(evaluate(&label, &config, &corpus, verbose));
            print_table(&label, &corpus, &t, true);
        } else {
            println!("(configured provider skipped: no LLM summarizer with a key in the config)");
        }
        return;
    }

    // Test mode: the extractive targets are asserted.
    // Precision: at most one noise item per summary on average, none with more than five, on
    // the script corpus and on the generated sessions; and the generated sessions keep every
    // fact too.
    for (name, totals) in [("the corpus", &t), ("the generated sessions", &g)] {
        assert!(
            totals.noise_mean() <= 1.0 && totals.noise_max() <= 5,
            "{name}: {:.2} noise items per summary (at most 1), {} at most (at most 5); set COMPACTD_QUALITY_LINT=<name part> to list them",
            totals.noise_mean(),
            totals.noise_max()
        );
    }
    assert!(g.failures.is_empty(), "generated: {:?}", g.failures);
    assert!(
        (g.recall() - 1.0).abs() < f64::EPSILON,
        "generated sessions: fact recall {:.1}%",
        100.0 * g.recall()
    );
    assert_eq!(g.score.stale_open, 0, "generated sessions: stale items");
    assert_eq!(g.score.noise, 0, "generated sessions: noise probes");

    assert!(
        corpus.len() >= 20,
        "the corpus has {} sessions, fewer than 20",
        corpus.len()
    );
    assert!(
        t.failures.is_empty(),
        "failed compactions: {:?}",
        t.failures
    );
    assert!(
        t.recall() >= 0.95,
        "fact recall {:.1}% is below 95%",
        100.0 * t.recall()
    );
    assert_eq!(
        t.score.stale_open, 0,
        "fixed errors or abandoned approaches presented as open"
    );
    assert_eq!(
        t.score.placed, t.score.placements,
        "placement probes outside their section"
    );
    assert_eq!(t.score.noise, 0, "noise in the summaries");
    assert!(
        !t.repeated.is_empty(),
        "the corpus has no repeated-compaction session"
    );
    assert!(
        t.repeated.iter().any(|r| r.sizes.len() >= 10),
        "the corpus has no session compacted ten times"
    );
    // Bounded growth over repeated compactions, on the corpus and on the generated sessions.
    for r in t.repeated.iter().chain(&g.repeated) {
        let name = &r.name;
        assert!(
            r.sizes.iter().all(|s| s.total <= r.budget),
            "{name}: sizes {:?} exceed {}",
            r.sizes,
            r.budget
        );
        let target =
            compactd::summarizer::extractive::ExtractiveSettings::DEFAULT.target_tokens as usize;
        assert!(
            r.sizes.iter().all(|s| s.body <= target),
            "{name}: bodies {:?} exceed the extractive target of {target} tokens",
            r.sizes
        );
        let limit = grows_at_most(&r.sizes).unwrap_or(0);
        assert!(
            r.sizes.iter().all(|s| s.body <= limit),
            "{name}: the body keeps growing over repeated compactions: {:?} (at most {limit})",
            r.sizes
        );
        let settled = r.sizes.iter().take(3).map(|s| s.body).max().unwrap_or(0) as i64;
        let growth = median_growth(&r.sizes).unwrap_or(0);
        assert!(
            growth * 10 <= settled,
            "{name}: a typical compaction adds {growth} tokens (more than a tenth of {settled}): {:?}",
            r.sizes
        );
        assert!(
            (r.recall - 1.0).abs() < f64::EPSILON,
            "{name}: facts lost over repeated compactions"
        );
    }
}
