//! Pi's settings as a non-interactive process sees them (compaction.md §2): defaults ← global
//! `<agentDir>/settings.json` ← the project's `.pi/settings.json` when trusted ← in-memory
//! overrides. Files are re-read at every check, so editing them takes effect at once, as in Pi.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::compaction::tokens::CompactionSettings;
use crate::rpc::results;
use crate::rpc::types::SpeculativeAt;
use crate::summarizer::RetrySettings;
use serde::Deserialize;

pub use crate::config::agent_dir;

/// Reads a settings file: a UTF-8 BOM is stripped; a missing or unparsable file is `{}` (Pi
/// records the error and carries on). Settings are re-read at every check, which a busy daemon
/// does thousands of times a second: the parsed file of a settled file (unchanged for a second)
/// is reused while its identity, size and modification time stay the same (one `stat` instead
/// of open, read and parse).
pub fn read_settings_file(path: &Path) -> Value {
    use std::os::unix::fs::MetadataExt;
    type Stamp = (u64, u64, u64, i64, i64);
    static CACHE: std::sync::LazyLock<
        parking_lot::Mutex<std::collections::HashMap<PathBuf, (Stamp, Value)>>,
    > = std::sync::LazyLock::new(Default::default);
    let Ok(meta) = std::fs::metadata(path) else {
        CACHE.lock().remove(path);
        return json!({});
    };
    // A file changed in the last second may change again within the clock's granularity with
    // the same size: read it fresh until it has settled.
    let settled = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age > std::time::Duration::from_secs(1));
    if !settled {
        return parse_settings_file(path);
    }
    let stamp: Stamp = (
        meta.dev(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
    );
    if let Some((s, v)) = CACHE.lock().get(path) {
        if *s == stamp {
            return v.clone();
        }
    }
    let value = parse_settings_file(path);
    CACHE.lock().insert(path.to_owned(), (stamp, value.clone()));
    value
}

fn parse_settings_file(path: &Path) -> Value {
    let Ok(text) = std::fs::read_to_string(path) else {
        return json!({});
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) | Err(_) => {
            tracing::warn!(path = %path.display(), "settings file is not a JSON object; ignored");
            json!({})
        }
    }
}

/// Pi's `deepMerge`: objects merge recursively; arrays, scalars and `null` replace.
pub fn deep_merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match (b.get_mut(k), v) {
                    (Some(bv @ Value::Object(_)), Value::Object(_)) => deep_merge(bv, v),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Trust of a project for a non-interactive process (compaction.md §2.7 rules 4–6): the nearest
/// ancestor-or-self entry of `<agentDir>/trust.json` with a boolean value, else the global
/// `defaultProjectTrust` (`"always"` trusts; `"never"` and `"ask"` do not).
pub fn project_trusted(agent_dir: &Path, cwd: &Path, global: &Value) -> bool {
    let trust = read_settings_file(&agent_dir.join("trust.json"));
    let canonical = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_owned());
    let mut dir: Option<&Path> = Some(&canonical);
    while let Some(d) = dir {
        if let Some(Value::Bool(b)) = trust.get(d.to_string_lossy().as_ref()) {
            return *b;
        }
        dir = d.parent();
    }
    global.get("defaultProjectTrust").and_then(Value::as_str) == Some("always")
}

/// The effective settings of one session.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectiveSettings {
    pub compaction: CompactionSettings,
    pub branch_summary_reserve_tokens: i64,
    pub retry: RetrySettings,
    pub default_thinking_level: String,
    /// Beyond Pi: `compaction.fileListLimit`, the most paths each summary file block lists
    /// (`None`: unlimited, Pi's behaviour).
    pub file_list_limit: Option<usize>,
    /// Beyond Pi: `compaction.maxIneffectiveCompactions`, ineffective automatic compactions in
    /// a row before automatic compaction pauses (0: no thrash breaker, Pi's behaviour).
    pub max_ineffective_compactions: u32,
    /// Beyond Pi: `compaction.speculativeAt`, the fraction of the threshold at which a session
    /// with an LLM summarizer starts a speculative compaction (`0`: off, Pi's behaviour).
    /// `None` when no settings file or override sets a valid value: the default applies (see
    /// `lifecycle::speculation::start_rule`). `"auto"` adapts the start to the summarizer's
    /// latency and the context's growth (`daemon::speculation_lead`).
    pub speculative_at: Option<SpeculativeAt>,
    /// Beyond Pi: `compaction.idleCompactAt`, the fraction of the threshold from which a
    /// `prePrompt` check compacts a session whose provider cache has expired anyway (`None`:
    /// off, Pi's behaviour).
    pub idle_compact_at: Option<f64>,
    /// Beyond Pi: `compaction.cacheTtlSeconds`, how long the agent's provider keeps its prompt
    /// cache (default 300, Anthropic's and OpenAI's default).
    pub cache_ttl_seconds: u64,
    /// Beyond Pi: `compaction.calibratedEstimates`: trailing estimates use the model's learned
    /// ratio of reported to estimated tokens (default false: Pi's numbers stay exact).
    pub calibrated_estimates: bool,
    /// Beyond Pi: `compaction.recallFooter` (default true): every summary compactd writes ends
    /// with one line naming the recall tools and the entries it stands for.
    pub recall_footer: bool,
    /// Beyond Pi: `compaction.clearToolResults`, the second tier (`None`: off, Pi's
    /// behaviour; also when a settings file's block is invalid, as Pi ignores what it cannot
    /// read — `setSettingsOverrides` refuses it by name).
    pub clear_tool_results: Option<crate::clearing::ClearSettings>,
    /// Beyond Pi: `compaction.handoff`, what is done with each summary's handoff check
    /// (default `report`, or `[compaction] handoff` in compactd's config; a settings file's
    /// value that is none of `off`, `report`, `repair`, `retry` is the default).
    pub handoff: crate::handoff::Mode,
    /// Whose rules the session follows (its `piVersion`, else the daemon's): set by
    /// `Daemon::session_settings` from the session.
    pub pi_version: crate::session::PiVersion,
    /// The merged JSON, for `getSettings`.
    pub merged: Value,
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_f64)
        .filter(|f| f.is_finite())
        .map(|f| f as i64)
}

/// Computes the effective settings for a session whose header `cwd` is `cwd`.
///
/// `defaults` are what compactd's configuration sets before any settings file: the
/// summarization retry policy (`[summarizer] retry`, Pi's defaults unless configured; a settings
/// file's `retry` overrides it field by field, as Pi's `settings.retry` governs its
/// summarization calls) and `[compaction] handoff`.
pub fn effective(
    cwd: Option<&Path>,
    global_overrides: Option<&Value>,
    session_overrides: Option<&Value>,
    defaults: &Defaults,
) -> EffectiveSettings {
    let dir = agent_dir();
    let global = read_settings_file(&dir.join("settings.json"));
    let mut merged = global.clone();
    if let Some(cwd) = cwd {
        let project_file = cwd.join(".pi").join("settings.json");
        if project_file.is_file() && project_trusted(&dir, cwd, &global) {
            deep_merge(&mut merged, &read_settings_file(&project_file));
        }
    }
    for o in [global_overrides, session_overrides].into_iter().flatten() {
        deep_merge(&mut merged, &json!({ "compaction": o }));
    }
    from_merged(merged, defaults)
}

/// What compactd's configuration sets before any settings file (see [`effective`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Defaults {
    pub retry: RetrySettings,
    pub handoff: crate::handoff::Mode,
}

/// Reads the typed values (with Pi's `??` defaults) out of merged settings JSON. Values of the
/// wrong type fall back to the defaults.
pub fn from_merged(merged: Value, base: &Defaults) -> EffectiveSettings {
    let empty = Map::new();
    let c = merged
        .get("compaction")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let defaults = CompactionSettings::default();
    let compaction = CompactionSettings {
        enabled: c
            .get("enabled")
            .and_then(Value::as_bool)
            .unwrap_or(defaults.enabled),
        reserve_tokens: int(c.get("reserveTokens")).unwrap_or(defaults.reserve_tokens),
        keep_recent_tokens: int(c.get("keepRecentTokens")).unwrap_or(defaults.keep_recent_tokens),
    };
    let b = merged
        .get("branchSummary")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let r = merged
        .get("retry")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let rd = base.retry;
    let retry = RetrySettings {
        enabled: r
            .get("enabled")
            .and_then(Value::as_bool)
            .unwrap_or(rd.enabled),
        max_retries: int(r.get("maxRetries")).map_or(rd.max_retries, |n| n.clamp(0, 100) as u32),
        base_delay_ms: int(r.get("baseDelayMs")).map_or(rd.base_delay_ms, |n| n.max(0) as u64),
    };
    EffectiveSettings {
        compaction,
        branch_summary_reserve_tokens: int(b.get("reserveTokens")).unwrap_or(16384),
        retry,
        default_thinking_level: merged
            .get("defaultThinkingLevel")
            .and_then(Value::as_str)
            .unwrap_or("medium")
            .to_owned(),
        file_list_limit: c
            .get("fileListLimit")
            .and_then(Value::as_f64)
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| f as usize),
        max_ineffective_compactions: int(c.get("maxIneffectiveCompactions"))
            .map_or(super::thrash::DEFAULT_MAX_INEFFECTIVE, |n| {
                n.clamp(0, i64::from(MAX_INEFFECTIVE_COMPACTIONS)) as u32
            }),
        speculative_at: c
            .get("speculativeAt")
            .and_then(|v| SpeculativeAt::deserialize(v).ok())
            .filter(valid_speculative_at),
        idle_compact_at: c
            .get("idleCompactAt")
            .and_then(Value::as_f64)
            .filter(|f| valid_idle_compact_at(*f) && *f > 0.0),
        cache_ttl_seconds: c
            .get("cacheTtlSeconds")
            .and_then(Value::as_f64)
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map_or(DEFAULT_CACHE_TTL_SECONDS, |f| f as u64),
        calibrated_estimates: c
            .get("calibratedEstimates")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        recall_footer: c
            .get("recallFooter")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        clear_tool_results: crate::clearing::ClearSettings::from_json(
            c.get("clearToolResults"),
            crate::config::MAX_TOKEN_SETTING,
        )
        .ok()
        .flatten(),
        handoff: c
            .get("handoff")
            .and_then(Value::as_str)
            .and_then(crate::handoff::Mode::parse)
            .unwrap_or(base.handoff),
        pi_version: crate::session::PiVersion::default(),
        merged,
    }
}

/// `compaction.cacheTtlSeconds` unless set: the prompt-cache lifetime of Anthropic (5 minutes
/// unless the 1-hour cache is asked for) and OpenAI (5 to 10 minutes of inactivity).
pub const DEFAULT_CACHE_TTL_SECONDS: u64 = 300;

/// A `compaction.idleCompactAt` compactd accepts: a fraction of the threshold in (0, 1], or 0
/// for off.
pub fn valid_idle_compact_at(f: f64) -> bool {
    (0.0..=1.0).contains(&f)
}

/// A `compaction.speculativeAt` compactd accepts: a fraction of the threshold in (0, 1), 0 for
/// off, or `"auto"`. A settings file with anything else is read as if it did not set it (Pi's
/// settings are tolerant); `setSettingsOverrides` refuses it.
pub fn valid_speculative_at(at: &SpeculativeAt) -> bool {
    match at {
        SpeculativeAt::Fraction(f) => (0.0..1.0).contains(f),
        SpeculativeAt::Adaptive(_) => true,
    }
}

/// The most ineffective compactions in a row `compaction.maxIneffectiveCompactions` may ask
/// for (a settings file's larger value is read as this).
pub const MAX_INEFFECTIVE_COMPACTIONS: u32 = 1000;

/// The longest `compaction.cacheTtlSeconds` accepted: a day (providers keep a prompt cache
/// for at most an hour).
pub const MAX_CACHE_TTL_SECONDS: u64 = 86_400;

/// Why a `setSettingsOverrides` compaction block makes no sense, naming the setting as
/// `compaction.<name>` (`None`: every value is in its range). Pi's settings files are not
/// checked this way: Pi reads them unvalidated (compaction.md §2.2; a negative
/// `keepRecentTokens` flows into its arithmetic, a value of the wrong type falls back to the
/// default), and [`from_merged`] reads them as Pi does. An override is a client's request,
/// answered at once, so a value no session could mean (`keepRecentTokens: -5`, a cache
/// lifetime of a century) is refused instead of silently changing every check.
pub fn invalid_override(p: &crate::rpc::types::CompactionSettingsPatch) -> Option<String> {
    let max_tokens = crate::config::MAX_TOKEN_SETTING as i64;
    for (name, value) in [
        ("reserveTokens", p.reserve_tokens),
        ("keepRecentTokens", p.keep_recent_tokens),
    ] {
        if let Some(v) = value.filter(|v| !(0..=max_tokens).contains(v)) {
            return Some(format!(
                "compaction.{name} must be a number of tokens from 0 to {max_tokens} (got {v})"
            ));
        }
    }
    if let Some(v) = p
        .file_list_limit
        .filter(|v| *v > crate::config::MAX_TOKEN_SETTING)
    {
        return Some(format!(
            "compaction.fileListLimit must be a number of paths from 0 to {} (got {v})",
            crate::config::MAX_TOKEN_SETTING
        ));
    }
    if let Some(v) = p
        .max_ineffective_compactions
        .filter(|v| *v > MAX_INEFFECTIVE_COMPACTIONS)
    {
        return Some(format!(
            "compaction.maxIneffectiveCompactions must be from 0 (off) to {MAX_INEFFECTIVE_COMPACTIONS} (got {v})"
        ));
    }
    if let Some(v) = p.cache_ttl_seconds.filter(|v| *v > MAX_CACHE_TTL_SECONDS) {
        return Some(format!(
            "compaction.cacheTtlSeconds must be a number of seconds from 0 to {MAX_CACHE_TTL_SECONDS} (got {v})"
        ));
    }
    if let Some(f) = p.idle_compact_at.filter(|f| !valid_idle_compact_at(*f)) {
        return Some(format!(
            "compaction.idleCompactAt must be a fraction of the threshold in (0, 1], or 0 for off (got {f})"
        ));
    }
    if let Some(clear) = &p.clear_tool_results {
        let v = serde_json::to_value(clear).unwrap_or(Value::Null);
        if let Err(why) =
            crate::clearing::ClearSettings::from_json(Some(&v), crate::config::MAX_TOKEN_SETTING)
        {
            return Some(why);
        }
    }
    if let Some(SpeculativeAt::Fraction(f)) = p.speculative_at.filter(|a| !valid_speculative_at(a))
    {
        return Some(format!(
            "compaction.speculativeAt must be a fraction of the threshold in (0, 1), 0 for off, or \"auto\" (got {f})"
        ));
    }
    None
}

impl EffectiveSettings {
    /// These settings for a session following `version`'s rules on `model`: Pi 1.6 resolves
    /// each token setting through `compaction.modelOverrides["provider/modelId"]` first, then
    /// the ordinary setting, then the default (0.85 has no per-model settings). An override that
    /// is not a non-negative integer is ignored (Pi refuses the whole file; a daemon keeps
    /// serving).
    pub fn for_session(
        mut self,
        version: crate::session::PiVersion,
        model: Option<(&str, &str)>,
    ) -> EffectiveSettings {
        self.pi_version = version;
        let (true, Some((provider, id))) = (version.is_1_6(), model) else {
            return self;
        };
        let key = format!("{provider}/{id}");
        let overrides = self.merged["compaction"]["modelOverrides"][key.as_str()].clone();
        let token = |field: &str| {
            overrides
                .get(field)
                .and_then(Value::as_f64)
                .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= 9_007_199_254_740_991.0)
                .map(|f| f as i64)
        };
        if let Some(r) = token("reserveTokens") {
            self.compaction.reserve_tokens = r;
        }
        if let Some(k) = token("keepRecentTokens") {
            self.compaction.keep_recent_tokens = k;
        }
        self
    }

    /// `getSettings`' answer.
    pub fn report(&self) -> results::EffectiveSettings {
        let mut compaction = results::CompactionSettingsView::from(&self.compaction);
        compaction.file_list_limit = self.file_list_limit;
        compaction.max_ineffective_compactions = Some(self.max_ineffective_compactions);
        compaction.idle_compact_at = Some(self.idle_compact_at.unwrap_or(0.0));
        compaction.cache_ttl_seconds = Some(self.cache_ttl_seconds);
        compaction.calibrated_estimates = Some(self.calibrated_estimates);
        compaction.recall_footer = Some(self.recall_footer);
        compaction.handoff = Some(self.handoff);
        compaction.clear_tool_results =
            Some(
                self.clear_tool_results
                    .as_ref()
                    .map(|c| results::ClearToolResultsView {
                        at: c.at,
                        keep_recent_tokens: c.keep_recent_tokens,
                        clear_at_least: c.clear_at_least,
                        exclude_tools: c.exclude_tools.clone(),
                        cache_aware: c.cache_aware,
                        summarize_at: c.summarize_at,
                        summarize_originals: c.summarize_originals,
                    }),
            );
        results::EffectiveSettings {
            compaction,
            branch_summary: results::BranchSummarySettings {
                reserve_tokens: self.branch_summary_reserve_tokens,
            },
            retry: results::RetryView {
                enabled: self.retry.enabled,
                max_retries: self.retry.max_retries,
                base_delay_ms: self.retry.base_delay_ms,
            },
            default_thinking_level: self.default_thinking_level.clone(),
            pi_version: self.pi_version.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_defaults() {
        let mut base = json!({"compaction": {"enabled": true, "reserveTokens": 1}, "x": [1]});
        deep_merge(
            &mut base,
            &json!({"compaction": {"reserveTokens": 2, "keepRecentTokens": null}, "x": [2]}),
        );
        assert_eq!(
            base,
            json!({"compaction": {"enabled": true, "reserveTokens": 2, "keepRecentTokens": null}, "x": [2]})
        );
        let s = from_merged(base, &Defaults::default());
        assert_eq!(
            s.compaction,
            CompactionSettings {
                enabled: true,
                reserve_tokens: 2,
                keep_recent_tokens: 20000
            }
        );
        let wrong = from_merged(
            json!({"compaction": {"reserveTokens": "big", "handoff": "loud"}, "retry": {"maxRetries": 1}}),
            &Defaults::default(),
        );
        assert_eq!(wrong.compaction.reserve_tokens, 16384);
        assert_eq!(wrong.handoff, crate::handoff::Mode::Report);
        let repair = from_merged(
            json!({"compaction": {"handoff": "repair"}}),
            &Defaults {
                handoff: crate::handoff::Mode::Retry,
                ..Defaults::default()
            },
        );
        assert_eq!(repair.handoff, crate::handoff::Mode::Repair);
        let configured = from_merged(
            json!({}),
            &Defaults {
                handoff: crate::handoff::Mode::Off,
                ..Defaults::default()
            },
        );
        assert_eq!(configured.handoff, crate::handoff::Mode::Off);
        assert_eq!(wrong.retry.max_retries, 1);
        assert_eq!(
            from_merged(json!({"compaction": null}), &Defaults::default()).compaction,
            CompactionSettings::default()
        );
    }

    /// Pi's settings files are read as Pi reads them (compaction.md §2.2: not validated): a
    /// negative number flows into the arithmetic (Pi's `keepRecentTokens <= 0` case A3), a
    /// value of the wrong type is the default. Only `setSettingsOverrides` refuses what makes
    /// no sense ([`invalid_override`]).
    #[test]
    fn settings_files_are_read_as_pi_reads_them_and_overrides_are_checked() {
        let s = from_merged(
            json!({"compaction": {"keepRecentTokens": -5, "reserveTokens": "x"}}),
            &Defaults::default(),
        );
        assert_eq!(s.compaction.keep_recent_tokens, -5);
        assert_eq!(s.compaction.reserve_tokens, 16384);
        let patch = crate::rpc::types::CompactionSettingsPatch {
            keep_recent_tokens: Some(-5),
            ..Default::default()
        };
        assert_eq!(
            invalid_override(&patch).as_deref(),
            Some("compaction.keepRecentTokens must be a number of tokens from 0 to 1000000000 (got -5)")
        );
        assert_eq!(
            invalid_override(&crate::rpc::types::CompactionSettingsPatch::default()),
            None
        );
    }

    #[test]
    fn trust_store_nearest_ancestor_wins() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent");
        let proj = dir.path().join("p").join("sub");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::create_dir_all(&proj).unwrap();
        let p = std::fs::canonicalize(dir.path().join("p")).unwrap();
        let sub = std::fs::canonicalize(&proj).unwrap();
        std::fs::write(
            agent.join("trust.json"),
            serde_json::to_string(&json!({p.to_string_lossy(): true, sub.to_string_lossy(): null}))
                .unwrap(),
        )
        .unwrap();
        assert!(project_trusted(&agent, &proj, &json!({})));
        std::fs::write(agent.join("trust.json"), "{}").unwrap();
        assert!(!project_trusted(&agent, &proj, &json!({})));
        assert!(!project_trusted(
            &agent,
            &proj,
            &json!({"defaultProjectTrust": "ask"})
        ));
        assert!(project_trusted(
            &agent,
            &proj,
            &json!({"defaultProjectTrust": "always"})
        ));
    }
}
