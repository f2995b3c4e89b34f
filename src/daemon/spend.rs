//! Beyond Pi: money, for a session. What a compaction due now would cost and save
//! (`previewCompaction`'s `economics`) and what the session spent (`getCostReport`), from the
//! pure arithmetic of `accounting`, the session's entries, and the configured prices.

use serde_json::Value;

use super::handlers::Ctx;
use super::session::SessionState;
use super::settings::EffectiveSettings;
use super::{Daemon, Session};

/// The summarization spend of speculations that were discarded (beyond Pi: reported so the cost
/// of speculating is visible).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wasted {
    pub speculations: u64,
    pub cost: Cost,
}

impl Default for Wasted {
    fn default() -> Self {
        Wasted {
            speculations: 0,
            cost: Cost::FREE,
        }
    }
}
use crate::accounting::economics::{Economics, Inputs};
use crate::accounting::{Cost, Price};
use crate::compaction::prepare::Plan;
use crate::compaction::prompts::{
    initial_prompt, update_prompt, SYSTEM_PROMPT, TURN_PREFIX_PROMPT,
};
use crate::compactor::SummaryEngine;
use crate::rpc::errors::RpcError;
use crate::rpc::results::{CacheRewrite, ClearingSpend, CompactionRow, CostReport, SessionSpend};
use crate::rpc::types::SessionParams;
use crate::session::{ids, EntryKind, Role};
use crate::summarizer::Usage;

/// A summary's tokens when nothing better is known: a structured summary of a long session
/// rarely runs past this (Pi's own summaries of 100k-token histories are 1–3k tokens).
const TYPICAL_SUMMARY_TOKENS: u64 = 2_000;

fn tokens_of(text: &str) -> u64 {
    (crate::json::utf16_len(text) as f64 / 4.0).ceil() as u64
}

/// The timestamp (ms) of the context's last assistant reply.
fn last_reply_ms(state: &SessionState) -> Option<f64> {
    state
        .last_assistant()
        .and_then(|m| m.get("timestamp").and_then(Value::as_f64))
}

/// Whether the agent's provider cache has expired: the last reply is older than
/// `cacheTtlSeconds` by the daemon's clock.
pub fn cache_cold(state: &SessionState, settings: &EffectiveSettings) -> bool {
    last_reply_ms(state)
        .is_some_and(|t| ids::now_ms() as f64 - t >= settings.cache_ttl_seconds as f64 * 1000.0)
}

/// The price of the session's own model (its requests read and write the prompt cache).
pub fn agent_price(daemon: &Daemon, state: &SessionState) -> Option<Price> {
    let m = state.model.as_ref()?;
    daemon.config.prices.lookup(Some(&m.provider), &m.id)
}

/// A summarizer's price, the extractive one at zero.
fn summarizer_price(daemon: &Daemon, engine: Option<&SummaryEngine>) -> Option<Price> {
    let engine = engine?;
    match engine.model() {
        None => Some(Price {
            input: 0.0,
            output: 0.0,
            cache_read: 0.0,
            cache_write: 0.0,
        }),
        Some(_) => daemon.config.summarizer_price(engine),
    }
}

/// `previewCompaction`'s economics of `plan`. The summary's size is a ready speculation's own,
/// else the previous summary's (summaries keep their size from one compaction to the next),
/// else a typical summary's; the summarization prompt is the spans' estimate plus the previous
/// summary and Pi's prompt text.
#[allow(clippy::too_many_arguments)]
pub fn economics(
    daemon: &Daemon,
    engine: Option<&SummaryEngine>,
    state: &SessionState,
    settings: &EffectiveSettings,
    plan: &Plan,
    kept_tokens: u64,
    speculative_summary_tokens: Option<u64>,
) -> Economics {
    let summarized = plan.history.tokens + plan.turn_prefix.tokens;
    let previous = plan.previous_summary.as_deref().map(tokens_of);
    let summary_tokens = speculative_summary_tokens
        .or(previous)
        .unwrap_or(TYPICAL_SUMMARY_TOKENS.min(summarized));
    let instructions = if previous.is_some() {
        update_prompt()
    } else {
        initial_prompt()
    };
    let mut prompt =
        summarized + previous.unwrap_or(0) + tokens_of(SYSTEM_PROMPT) + tokens_of(&instructions);
    if plan.is_split_turn {
        prompt += tokens_of(SYSTEM_PROMPT) + tokens_of(TURN_PREFIX_PROMPT);
    }
    Economics::of(&Inputs {
        tokens_before: plan.tokens_before.max(0.0) as u64,
        kept_tokens,
        summary_tokens,
        summarization_input_tokens: prompt,
        summarizer_price: summarizer_price(daemon, engine),
        agent_price: agent_price(daemon, state),
        cache_cold: cache_cold(state, settings),
    })
}

/// The usage an entry's JSON reports (`usage` of a message or a compaction).
fn usage_of(v: Option<&Value>) -> Option<Usage> {
    v.and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok())
}

/// What `usage` cost: the cost its writer recorded (`usage.cost.total`, when it filled it, as
/// Pi does with its model registry's prices), else its tokens at `price`. Nothing spent is a
/// known 0.
fn spent(usage: &Usage, price: Option<Price>) -> Cost {
    let recorded = usage.cost.total;
    let mut cost = if recorded > 0.0 {
        Cost {
            usd: Some(recorded),
            ..usage.cost(None)
        }
    } else {
        usage.cost(price)
    };
    if cost.tokens() == 0 && cost.usd.is_none() {
        cost.usd = Some(0.0);
    }
    cost
}

/// An assistant reply's spend, priced at the table's price for the reply's own model.
fn reply_cost(daemon: &Daemon, message: &serde_json::Map<String, Value>) -> Option<Cost> {
    let usage = usage_of(message.get("usage"))?;
    let price = message.get("model").and_then(Value::as_str).and_then(|id| {
        daemon
            .config
            .prices
            .lookup(message.get("provider").and_then(Value::as_str), id)
    });
    Some(spent(&usage, price))
}

/// `getCostReport` (beyond Pi): what the session spent, from every entry of its file (all
/// branches: they were all paid for).
pub fn get_cost_report(ctx: &Ctx, p: SessionParams) -> Result<CostReport, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let settings = ctx.daemon.session_settings(&session);
    let engine = ctx.daemon.session_engine(&session, &settings).ok();
    let wasted = session.speculation.wasted();
    Ok(crate::cpu::blocking(|| {
        report(&ctx.daemon, &session, &settings, engine.as_deref(), wasted)
    }))
}

fn report(
    daemon: &Daemon,
    session: &Session,
    settings: &EffectiveSettings,
    engine: Option<&SummaryEngine>,
    wasted: Wasted,
) -> CostReport {
    let state = session.lock_state();
    let mut agent = SessionSpend::default();
    let mut compactions = SessionSpend::default();
    let mut rewrites = Vec::new();
    let mut rows = Vec::new();
    let summarizer = summarizer_price(daemon, engine);
    let agent_prices = agent_price(daemon, &state);
    let ttl_ms = settings.cache_ttl_seconds as f64 * 1000.0;
    let entries = state.tree.entries();
    // The last assistant reply seen and its timestamp, to judge whether the cache was warm
    // when a compaction was made.
    let mut last_reply_ms: Option<f64> = None;
    let mut pending: Option<(String, f64)> = None; // a compaction waiting for the next reply
    let mut clearing = ClearingSpend::default();
    // Tokens the clearing passes since the latest compaction took out of every request, and a
    // pass waiting for the next reply (its cache rewrite).
    let mut cleared_tokens = 0u64;
    let mut pass_pending: Option<f64> = None;
    // Under 1.6 a pass is a run of clearing edits (one per output): the run so far.
    let edits_pass = state.rules.is_1_6();
    let mut in_pass = false;
    let rewrite = |usage: &Usage, cold: bool| -> Option<f64> {
        agent_prices.map(|p| {
            if cold {
                0.0
            } else {
                crate::accounting::cost::round_usd(
                    crate::accounting::cost::usd(usage.cache_write, p.cache_write)
                        + crate::accounting::cost::usd(usage.input, p.input),
                )
            }
        })
    };
    for e in entries.iter() {
        let was_in_pass = std::mem::take(&mut in_pass);
        match e.kind {
            EntryKind::Message if e.role == Some(Role::Assistant) => {
                let Some(m) = e.message() else { continue };
                if let Some(c) = reply_cost(daemon, &m) {
                    agent.add(&c);
                }
                let ts = m.get("timestamp").and_then(Value::as_f64);
                let usage = usage_of(m.get("usage")).unwrap_or_default();
                if let Some((id, compacted_ms)) = pending.take() {
                    // The first request after a compaction writes the new prefix to the cache;
                    // the provider reports it as its cache write and uncached input.
                    let cold = last_reply_ms.is_some_and(|r| compacted_ms - r >= ttl_ms);
                    rewrites.push(CacheRewrite {
                        compaction_id: id,
                        tokens: usage.cache_write + usage.input,
                        cold,
                        usd: rewrite(&usage, cold),
                    });
                }
                // Beyond Pi, the second tier: every request after a pass leaves its tokens out;
                // the first one rewrites the cache from the first cleared output on.
                clearing.tokens_not_sent += cleared_tokens;
                if let Some(cleared_ms) = pass_pending.take() {
                    let cold = last_reply_ms.is_some_and(|r| cleared_ms - r >= ttl_ms);
                    clearing.cache_rewrite_usd = clearing
                        .cache_rewrite_usd
                        .zip(rewrite(&usage, cold))
                        .map(|(a, b)| crate::accounting::cost::round_usd(a + b));
                }
                last_reply_ms = ts.or(last_reply_ms);
            }
            EntryKind::Custom if !edits_pass => {
                if crate::clearing::pass_ids(e).is_none() {
                    continue;
                }
                let v = e.value();
                let freed = v["data"]["tokensFreed"].as_u64().unwrap_or(0);
                clearing.passes += 1;
                clearing.tokens_freed += freed;
                cleared_tokens += freed;
                pass_pending = ids::timestamp_value_ms(v.get("timestamp")).map(|t| t as f64);
            }
            EntryKind::ContextEdit if edits_pass && crate::clearing::is_clearing_edit(e) => {
                let v = e.value();
                let target = v["targetId"]
                    .as_str()
                    .and_then(|id| state.tree.index_of(id))
                    .map(|i| state.tree.entry(i));
                let freed = target.map_or(0, crate::clearing::frees_when_cleared);
                if !was_in_pass {
                    clearing.passes += 1;
                }
                in_pass = true;
                clearing.tokens_freed += freed;
                cleared_tokens += freed;
                pass_pending = ids::timestamp_value_ms(v.get("timestamp")).map(|t| t as f64);
            }
            EntryKind::Compaction => {
                let v = e.value();
                let usage = usage_of(v.get("usage"));
                let from_hook = v.get("fromHook").and_then(Value::as_bool) == Some(true);
                let extractive = v["details"]["summarizer"] == "extractive";
                // compactd's own summaries are priced at its summarizer's model; a hook's at an
                // unknown one unless it recorded its cost.
                let cost = match usage {
                    Some(u) if !from_hook => spent(&u, summarizer),
                    Some(u) => spent(&u, None),
                    None if extractive => Cost::FREE,
                    None => Cost::default(),
                };
                compactions.add(&cost);
                if let Some(id) = e.id_owned() {
                    let summarizer = v["details"]["summarizer"]
                        .as_str()
                        .map(str::to_owned)
                        .or_else(|| from_hook.then(|| "hook".to_owned()));
                    rows.push(CompactionRow {
                        handoff_score: state.handoff_score(&id),
                        compaction_id: id,
                        summarizer,
                        input: cost.input,
                        output: cost.output,
                        usd: cost.usd,
                    });
                }
                // The compaction replaced what the passes before it had cleared (a kept tail's
                // cleared outputs are not counted further: a lower bound).
                cleared_tokens = 0;
                let at = ids::timestamp_value_ms(v.get("timestamp")).map(|t| t as f64);
                pending = e.id_owned().zip(at);
            }
            _ => {}
        }
    }
    let rewrite_usd: Option<f64> = rewrites.iter().map(|r| r.usd).try_fold(0.0, |acc, u| {
        u.map(|u| crate::accounting::cost::round_usd(acc + u))
    });
    let speculations = SessionSpend {
        count: wasted.speculations,
        input: wasted.cost.input,
        output: wasted.cost.output,
        cache_read: wasted.cost.cache_read,
        cache_write: wasted.cost.cache_write,
        usd: wasted.cost.usd,
    };
    let compaction_total = [compactions.usd, speculations.usd, rewrite_usd]
        .into_iter()
        .try_fold(0.0, |acc, u| {
            u.map(|u| crate::accounting::cost::round_usd(acc + u))
        });
    // The tokens left out would have been the cheapest input there is, cache reads: what
    // clearing saved is at least that, less the rewrites it caused.
    clearing.usd_saved = agent_prices
        .map(|p| crate::accounting::cost::usd(clearing.tokens_not_sent, p.cache_read))
        .zip(clearing.cache_rewrite_usd)
        .map(|(saved, rewrites)| crate::accounting::cost::round_usd(saved - rewrites));
    CostReport {
        clearing,
        agent,
        compactions,
        discarded_speculations: speculations,
        cache_rewrites: rewrites,
        compaction_usd: compaction_total,
        per_compaction: rows,
    }
}
