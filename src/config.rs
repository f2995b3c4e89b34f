//! The one configuration struct, loaded once from TOML (`$XDG_CONFIG_HOME/compactd/config.toml`,
//! or `--config FILE`). Every field has a default, so a fresh install needs no file at all: the
//! daemon then listens on the default socket and summarizes with the embedded extractive engine.
//!
//! API keys never live here: `api_key_env` names the environment variable that holds the key, so
//! a config file can be shared or committed without leaking credentials.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::compactor::SummaryEngine;
use crate::rpc::types::Model;
use crate::summarizer::extractive::ExtractiveSettings;
use crate::summarizer::redact::RedactionConfig;
use crate::summarizer::{Api, ModelSpec, RetrySettings};

/// The smallest `extractive_target_tokens` accepted: below it not even a short goal and the
/// section headings fit.
const MIN_EXTRACTIVE_TARGET_TOKENS: u64 = 200;

/// The largest token count a setting accepts: a thousand times the largest context window of
/// any model, so a larger value is a typo (or a unit mistake), not a choice.
pub const MAX_TOKEN_SETTING: u64 = 1_000_000_000;

/// Checks that the numeric setting `name` is within `range`; the error names the setting, the
/// value and the range.
fn in_range(
    name: &str,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
    unit: &str,
) -> Result<(), ConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(ConfigError::Invalid(format!(
        "{name} = {value} is out of range: {unit} from {} to {}",
        range.start(),
        range.end()
    )))
}

/// Checks a log filter (`[log] level` or `COMPACTD_LOG`): tracing's `EnvFilter` syntax, where
/// a bare word must be a level. `EnvFilter` reads a bare word as a target to log at every
/// level, so a misspelt level (`debg`, `verbose`) silently logged nothing of compactd's; a
/// target is written `target=level`. The error says why.
pub fn check_log_filter(spec: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    tracing_subscriber::EnvFilter::try_new(spec).map_err(|e| e.to_string())?;
    for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains('=') && !directive.contains('[');
        if bare && !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(directive)) {
            return Err(format!(
                "'{directive}' is not a level ({}); to filter a target write target=level",
                LEVELS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Errors loading or applying the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
    /// The summarizer's key variable is unset (Pi: `No API key found for <provider>.`).
    #[error("No API key found for {provider}. Set the environment variable {var}.")]
    MissingKey { provider: String, var: String },
}

/// Who writes summaries: the embedded extractive summarizer, or an LLM reached over one of
/// pi-ai's wire protocols. Parsed (and refused with a clear message) when the file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummarizerProvider {
    Extractive,
    Llm(Api),
}

impl SummarizerProvider {
    /// Parses a provider name as the configuration and `--provider` spell it.
    pub fn parse(name: &str) -> Option<SummarizerProvider> {
        match name {
            "extractive" => Some(SummarizerProvider::Extractive),
            other => Api::parse(other).map(SummarizerProvider::Llm),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SummarizerProvider::Extractive => "extractive",
            SummarizerProvider::Llm(api) => api.as_str(),
        }
    }

    /// The wire protocol, for an LLM.
    pub fn api(self) -> Option<Api> {
        match self {
            SummarizerProvider::Extractive => None,
            SummarizerProvider::Llm(api) => Some(api),
        }
    }
}

impl<'de> Deserialize<'de> for SummarizerProvider {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        SummarizerProvider::parse(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "summarizer.provider '{name}' is not one of extractive, openai-completions, anthropic-messages, openai-responses"
            ))
        })
    }
}

/// What runs when the LLM summarizer fails (beyond Pi; none by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Summarize extractively instead.
    Extractive,
}

impl<'de> Deserialize<'de> for Fallback {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        match name.as_str() {
            "extractive" => Ok(Fallback::Extractive),
            _ => Err(serde::de::Error::custom(format!(
                "summarizer.fallback '{name}' is not supported (only \"extractive\")"
            ))),
        }
    }
}

/// Logging: level filter (tracing `EnvFilter` syntax) and an optional file instead of stderr.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub level: Option<String>,
    /// The level `-v`/`-q` ask for on the command line: it wins over `COMPACTD_LOG` and
    /// `level` (the flag is the most explicit word). Not read from the file.
    #[serde(skip)]
    pub flag_level: Option<String>,
    pub file: Option<PathBuf>,
    /// `text` (default: one human-readable line per event) or `json` (one JSON object per
    /// line, with the spans the event happened in, for log shippers); `--log-format` overrides.
    pub format: LogFormat,
}

/// `[log] format` / `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Which summarizer runs (protocol.md §4).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SummarizerConfig {
    /// `extractive`, `openai-completions`, `anthropic-messages` or `openai-responses`.
    pub provider: SummarizerProvider,
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// The summarizer model's output cap (0: none), Pi's `model.maxTokens`.
    pub max_tokens: u64,
    /// The summarizer model's context window.
    pub context_window: u64,
    /// Whether the model reasons (the session's thinking level is then sent).
    pub reasoning: bool,
    /// Environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// A key given on the command line (`compactd compact --api-key`); never read from a file.
    #[serde(skip)]
    pub api_key: Option<GivenKey>,
    /// `"extractive"`: when the LLM summarizer fails, summarize extractively instead.
    pub fallback: Option<Fallback>,
    /// Seconds without stream progress before a call fails.
    pub idle_timeout_secs: u64,
    /// Pi's `settings.retry` for the summarization calls.
    pub retry: RetrySettings,
    /// The size the extractive summarizer aims for, in tokens (chars/4), under Pi's cap; what
    /// keeps its summaries flat over many compactions (must-keep facts may pass it).
    pub extractive_target_tokens: u64,
}

impl Default for SummarizerConfig {
    fn default() -> Self {
        SummarizerConfig {
            provider: SummarizerProvider::Extractive,
            base_url: None,
            model: None,
            max_tokens: 0,
            context_window: 200_000,
            reasoning: false,
            api_key_env: None,
            api_key: None,
            fallback: None,
            idle_timeout_secs: 120,
            retry: RetrySettings::default(),
            extractive_target_tokens: ExtractiveSettings::DEFAULT.target_tokens,
        }
    }
}

/// An API key given on the command line: kept out of `Debug` output (configurations are logged).
#[derive(Clone, PartialEq)]
pub struct GivenKey(pub String);

impl std::fmt::Debug for GivenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GivenKey(…)")
    }
}

/// How to reach one provider (used to summarize with the session's own model when no dedicated
/// summarizer is configured, as Pi compacts with the current model).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// Wire protocol: `openai-completions`, `anthropic-messages` or `openai-responses`.
    pub api: String,
    pub base_url: String,
    pub api_key_env: Option<String>,
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Unix socket path for `compactd serve`.
    pub socket: Option<PathBuf>,
    /// How long a daemon started on demand (by `connect`, `start`, `mcp` or a client library)
    /// stays with no client and no open session before it exits, in seconds (default 300; 0:
    /// never). A daemon started by hand or by the service manager stays.
    pub idle_exit_seconds: Option<u64>,
    pub log: LogConfig,
    pub summarizer: SummarizerConfig,
    pub redaction: RedactionConfig,
    /// Providers by the name sessions record in their model (`anthropic`, `openai`, …).
    pub providers: std::collections::BTreeMap<String, ProviderConfig>,
    pub storage: StorageConfig,
    /// `[limits]`: caps on what one client can make the daemon wait for.
    pub limits: LimitsConfig,
    /// Beyond Pi: `[prices."<model id>"]` or `[prices."<provider>/<model id>"]`, USD per
    /// million tokens (`input`, `output`, `cache_read`, `cache_write`), over the built-in table
    /// (`accounting::prices`).
    pub prices: crate::accounting::PriceTable,
    /// `[compat]`: which Pi's rules sessions follow unless a client says otherwise.
    pub compat: CompatConfig,
    /// `[compaction]`: compactd's defaults under Pi's settings files.
    pub compaction: CompactionConfig,
}

/// `[compaction]`: what a session's compactions do unless Pi's settings files (or
/// `setSettingsOverrides`) say otherwise. Beyond Pi only; Pi's own keys live in its files.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CompactionConfig {
    /// `compaction.handoff`: `off`, `report` (default), `repair` or `retry`.
    pub handoff: crate::handoff::Mode,
}

/// `[compat]`: compatibility with the Pi the user runs.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CompatConfig {
    /// `"1.6"` (the default: the Pi people run) or `"0.85"`: whose rules sessions follow (the
    /// context projection, estimates, cut points, summary requests, compaction entries). A
    /// session's `piVersion` (`setSettingsOverrides`, which the Pi extension sets to the Pi it
    /// runs in) and `--pi-version` win over it.
    pub pi_version: PiVersionSetting,
}

/// A Pi version as the configuration spells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PiVersionSetting(pub crate::pi_version::PiVersion);

impl<'de> Deserialize<'de> for PiVersionSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        crate::pi_version::PiVersion::parse(&text)
            .map(PiVersionSetting)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown Pi version '{text}' (expected \"1.6\" or \"0.85\")"
                ))
            })
    }
}

/// `idle_exit_seconds` unless set.
pub const DEFAULT_IDLE_EXIT_SECONDS: u64 = 300;

impl Config {
    /// How long a daemon started on demand waits idle before it exits (`None`: it stays).
    pub fn idle_exit(&self) -> Option<std::time::Duration> {
        let secs = self.idle_exit_seconds.unwrap_or(DEFAULT_IDLE_EXIT_SECONDS);
        (secs > 0).then(|| std::time::Duration::from_secs(secs))
    }

    /// The price of a summarizer's model (`None` for the extractive one: it costs nothing, and
    /// callers report it as free).
    pub fn summarizer_price(&self, engine: &SummaryEngine) -> Option<crate::accounting::Price> {
        let model = engine.model()?;
        self.prices.lookup(Some(&model.provider), &model.id)
    }

    /// What a summarizer's calls cost: `usage` priced at its model's price; the extractive
    /// engine reports zero tokens at a known price of 0.
    pub fn summarizer_cost(
        &self,
        engine: &SummaryEngine,
        usage: &crate::summarizer::Usage,
    ) -> crate::accounting::Cost {
        match engine.model() {
            None => crate::accounting::Cost::FREE,
            Some(_) => usage.cost(self.summarizer_price(engine)),
        }
    }
}

/// `[limits]`: caps on what one client can make the others wait for.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// The longest `registerHooks.timeoutMs` honoured (a larger one is lowered to it, with a
    /// warning): a hook that never answers, registered for every session, stalls every
    /// client's compactions by at most this long.
    pub max_hook_timeout_ms: u64,
}

/// Default cap of `registerHooks.timeoutMs`: 2 minutes (twice the default timeout).
pub const DEFAULT_MAX_HOOK_TIMEOUT_MS: u64 = 120_000;

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_hook_timeout_ms: DEFAULT_MAX_HOOK_TIMEOUT_MS,
        }
    }
}

/// `[storage]`: where sessions may live, how big they may be, how durable appends are.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// `flush`, `compactions` (default) or `always` (see `store::Durability`).
    pub durability: crate::store::Durability,
    /// Largest session file read, in bytes.
    pub max_session_bytes: u64,
    /// Directories session files must be inside. Default: Pi's agent directory, the user's
    /// home and the system temporary directory.
    pub allowed_roots: Option<Vec<PathBuf>>,
    /// Where sessions live: `files` (default: Pi's JSONL files) or `postgres` (beyond Pi: a
    /// database many daemons share; sessions are addressed by header id).
    pub backend: Backend,
    /// The database of the `postgres` backend (`postgresql://…` or `key=value` pairs); the
    /// environment's `COMPACTD_POSTGRES_URL` is used when this is not set.
    pub postgres_url: Option<String>,
    /// The deployment (tenant) a daemon of a shared store belongs to: it sees only the sessions
    /// of its namespace (`default` unless set; 1–64 letters, digits, `.`, `-` or `_`).
    pub namespace: Option<String>,
}

/// `[storage] backend`: the kinds of backend `store` has.
pub use crate::store::Kind as Backend;
pub use crate::store::POSTGRES_URL_ENV;

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            durability: crate::store::Durability::default(),
            max_session_bytes: crate::store::DEFAULT_MAX_BYTES,
            allowed_roots: None,
            backend: Backend::Files,
            postgres_url: None,
            namespace: None,
        }
    }
}

impl StorageConfig {
    /// The `postgres` backend's connection string: `postgres_url`, else the environment's
    /// [`POSTGRES_URL_ENV`]. `None` for the files backend.
    pub fn postgres_url(&self) -> Option<String> {
        if self.backend != Backend::Postgres {
            return None;
        }
        self.postgres_url.clone().or_else(|| {
            std::env::var(POSTGRES_URL_ENV)
                .ok()
                .filter(|u| !u.is_empty())
        })
    }

    /// The storage backend this configuration names, set up once by the one choice of a
    /// backend ([`crate::store::choose`]; nothing is connected yet: see
    /// [`crate::store::Backend::check`]). An error says why it cannot even be set up.
    pub fn backend(&self) -> Result<std::sync::Arc<dyn crate::store::Backend>, String> {
        let config = self.clone();
        crate::store::choose(crate::store::Choice {
            kind: self.backend,
            limits: self.limits(),
            roots: Box::new(move || config.roots()),
            roots_configured: self.allowed_roots.is_some(),
            sessions_dir: agent_dir().join("sessions"),
            postgres_url: self.postgres_url(),
            namespace: self.namespace().to_owned(),
        })
    }

    /// `[storage] namespace`, `default` unless set.
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }

    pub fn limits(&self) -> crate::store::Limits {
        crate::store::Limits {
            max_bytes: self.max_session_bytes,
            durability: self.durability,
        }
    }

    /// The allowed roots, canonicalized (roots that do not exist are dropped).
    pub fn roots(&self) -> Vec<PathBuf> {
        let roots: Vec<PathBuf> = match &self.allowed_roots {
            Some(r) => r.clone(),
            None => {
                let mut r = vec![agent_dir(), std::env::temp_dir()];
                if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
                    r.push(PathBuf::from(home));
                }
                r
            }
        };
        roots
            .iter()
            .filter_map(|r| std::fs::canonicalize(r).ok())
            .collect()
    }
}

/// Pi's agent directory (settings, sessions, trust): `$PI_CODING_AGENT_DIR` (with `~`
/// expanded) or `~/.pi/agent`.
pub fn agent_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    match std::env::var("PI_CODING_AGENT_DIR") {
        Ok(d) if !d.is_empty() => {
            if let Some(rest) = d.strip_prefix("~/") {
                home.join(rest)
            } else if d == "~" {
                home
            } else {
                PathBuf::from(d)
            }
        }
        _ => home.join(".pi").join("agent"),
    }
}

/// An XDG base directory (the XDG Base Directory specification): `$var` when it is set and not
/// empty, else `$HOME/<under_home>` (`.config`, `.local/state`, `.local/share`); `None` with
/// neither.
pub fn xdg_dir(var: &str, under_home: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(under_home))
        })
}

/// `$XDG_CONFIG_HOME/compactd/config.toml`, else `~/.config/compactd/config.toml`.
pub fn default_path() -> Option<PathBuf> {
    Some(
        xdg_dir("XDG_CONFIG_HOME", ".config")?
            .join("compactd")
            .join("config.toml"),
    )
}

/// The file [`Config::load`] reads: `explicit`, else the default path when a file is there;
/// `None` when the defaults apply.
pub fn file_in_use(explicit: Option<&Path>) -> Option<PathBuf> {
    match explicit {
        Some(p) => Some(p.to_owned()),
        None => default_path().filter(|p| p.exists()),
    }
}

/// The `socket` a configuration file names, read even when the file does not load as a whole
/// (a bad value elsewhere): `status` and `stop` need only the socket, so a broken edit never
/// leaves the running daemon unreachable. `None` when the file cannot be read, is not TOML, or
/// names no socket.
pub fn socket_despite_errors(explicit: Option<&Path>) -> Option<PathBuf> {
    let path = file_in_use(explicit)?;
    let text = std::fs::read_to_string(path).ok()?;
    let table: toml::Table = toml::from_str(&text).ok()?;
    table.get("socket")?.as_str().map(PathBuf::from)
}

impl Config {
    /// Parses TOML text.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Loads `explicit` (which must exist), else the default path if it exists, else defaults.
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, required) = match explicit {
            Some(p) => (p.to_owned(), true),
            None => match default_path() {
                Some(p) => (p, false),
                None => return Ok(Config::default()),
            },
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Config::from_toml(&text, &path),
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// Refuses a setting that makes no sense, naming it: every number must be in its range
    /// (checked here, once, so nothing downstream meets a negative price, a zero window or an
    /// hour-long retry base), and the log level must parse.
    fn validate(&self) -> Result<(), ConfigError> {
        let s = &self.summarizer;
        if let Some(level) = &self.log.level {
            check_log_filter(level)
                .map_err(|e| ConfigError::Invalid(format!("log.level {level:?}: {e}")))?;
        }
        if let Some(why) = self.prices.invalid() {
            return Err(ConfigError::Invalid(why));
        }
        in_range(
            "summarizer.context_window",
            s.context_window,
            1..=MAX_TOKEN_SETTING,
            "tokens",
        )?;
        in_range(
            "summarizer.max_tokens",
            s.max_tokens,
            0..=MAX_TOKEN_SETTING,
            "tokens (0: no cap)",
        )?;
        in_range(
            "summarizer.idle_timeout_secs",
            s.idle_timeout_secs,
            1..=86_400,
            "seconds",
        )?;
        in_range(
            "summarizer.retry.maxRetries",
            u64::from(s.retry.max_retries),
            0..=100,
            "retries",
        )?;
        in_range(
            "summarizer.retry.baseDelayMs",
            s.retry.base_delay_ms,
            0..=600_000,
            "milliseconds",
        )?;
        in_range(
            "storage.max_session_bytes",
            self.storage.max_session_bytes,
            1..=u64::MAX,
            "bytes",
        )?;
        in_range(
            "limits.max_hook_timeout_ms",
            self.limits.max_hook_timeout_ms,
            1..=86_400_000,
            "milliseconds",
        )?;
        for (name, p) in &self.providers {
            if Api::parse(&p.api).is_none() {
                return Err(ConfigError::Invalid(format!(
                    "providers.{name}.api '{}' is not a known protocol",
                    p.api
                )));
            }
        }
        if !self.storage.backend.built_in() {
            return Err(ConfigError::Invalid(crate::store::NO_POSTGRES.to_owned()));
        }
        if self.storage.backend == Backend::Postgres {
            let Some(url) = self.storage.postgres_url() else {
                return Err(ConfigError::Invalid(format!(
                    "storage.backend = 'postgres' needs storage.postgres_url or {POSTGRES_URL_ENV}"
                )));
            };
            crate::store::check_postgres_url(&url)
                .map_err(|e| ConfigError::Invalid(format!("storage.postgres_url: {e}")))?;
        }
        let namespace = self.storage.namespace();
        let valid = !namespace.is_empty()
            && namespace.len() <= 64
            && namespace
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        if !valid {
            return Err(ConfigError::Invalid(format!(
                "storage.namespace {namespace:?} must be 1 to 64 letters, digits, '.', '-' or '_'"
            )));
        }
        if s.extractive_target_tokens < MIN_EXTRACTIVE_TARGET_TOKENS {
            return Err(ConfigError::Invalid(format!(
                "summarizer.extractive_target_tokens = {} is below the minimum of {MIN_EXTRACTIVE_TARGET_TOKENS}",
                s.extractive_target_tokens
            )));
        }
        in_range(
            "summarizer.extractive_target_tokens",
            s.extractive_target_tokens,
            MIN_EXTRACTIVE_TARGET_TOKENS..=MAX_TOKEN_SETTING,
            "tokens",
        )?;
        if s.provider != SummarizerProvider::Extractive
            && (s.base_url.is_none() || s.model.is_none())
        {
            return Err(ConfigError::Invalid(format!(
                "summarizer.provider = '{}' needs base_url and model",
                s.provider.as_str()
            )));
        }
        Ok(())
    }

    /// The summarizer engine this configuration selects. Keys are read from the environment now,
    /// so a missing key is reported when a compaction needs it, with Pi's wording.
    pub fn engine(&self, http: reqwest::Client) -> Result<SummaryEngine, ConfigError> {
        self.summarizer.engine(&self.redaction, http)
    }

    /// The session model's provider, when the engine follows the session's model: no dedicated
    /// summarizer is configured and `[providers]` names the model's provider.
    fn session_provider<'m>(
        &self,
        model: Option<&'m Model>,
    ) -> Option<(&'m Model, &ProviderConfig, Api)> {
        if self.summarizer.provider != SummarizerProvider::Extractive {
            return None;
        }
        let m = model?;
        let p = self.providers.get(&m.provider)?;
        Some((m, p, Api::parse(&p.api)?))
    }

    /// What a session's engine depends on besides this (fixed) configuration: the session's
    /// model when the engine follows it, else nothing. Sessions with equal keys get equal engines,
    /// so the daemon builds one engine per key.
    pub fn engine_key(&self, model: Option<&Model>) -> EngineKey {
        EngineKey(self.session_provider(model).map(|(m, _, _)| m.clone()))
    }

    /// Which summarizer runs for sessions with this key (protocol.md §4): the configured
    /// summarizer model if any; else the session's current model when its provider is configured
    /// with a key (Pi's choice); else the extractive engine.
    pub fn engine_for(
        &self,
        key: &EngineKey,
        http: reqwest::Client,
    ) -> Result<SummaryEngine, ConfigError> {
        let Some((m, p, api)) = self.session_provider(key.0.as_ref()) else {
            return self.engine(http);
        };
        let api_key = match &p.api_key_env {
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Some(k),
                // Pi falls back to nothing here; compactd keeps compacting extractively.
                _ => return self.engine(http),
            },
            None => None,
        };
        let spec = ModelSpec {
            api,
            provider: m.provider.clone(),
            id: m.id.clone(),
            base_url: p.base_url.clone(),
            context_window: m.context_window.max(0) as u64,
            max_tokens: m.max_tokens.max(0) as u64,
            reasoning: m.reasoning.unwrap_or(false),
            api_key,
            key_env: p.api_key_env.clone(),
            headers: Vec::new(),
        };
        Ok(self.summarizer.llm_engine(spec, &self.redaction, http))
    }
}

/// The part of a session that decides its summarizer (see [`Config::engine_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EngineKey(Option<Model>);

impl SummarizerConfig {
    /// Builds the engine (see [`Config::engine`]): the key is looked up only for an LLM.
    pub fn engine(
        &self,
        redaction: &RedactionConfig,
        http: reqwest::Client,
    ) -> Result<SummaryEngine, ConfigError> {
        let api_key = match self.provider {
            SummarizerProvider::Llm(_) => self.api_key()?,
            SummarizerProvider::Extractive => None,
        };
        Ok(self.engine_with_key(api_key, redaction, http))
    }

    /// The key `api_key_env` names; unset or empty is Pi's `No API key found`.
    fn api_key(&self) -> Result<Option<String>, ConfigError> {
        if let Some(GivenKey(key)) = &self.api_key {
            return Ok(Some(key.clone()));
        }
        let Some(var) = &self.api_key_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(k) if !k.is_empty() => Ok(Some(k)),
            _ => Err(ConfigError::MissingKey {
                provider: self.provider.as_str().to_owned(),
                var: var.clone(),
            }),
        }
    }

    /// The one constructor of the engine a summarizer section describes, given its key: the
    /// daemon's configured summarizer and the CLI's flags both come through here, so both honour
    /// `retry`, `fallback` and `idle_timeout_secs`. A provider that is no LLM protocol
    /// (`extractive`) gives the extractive engine.
    pub fn engine_with_key(
        &self,
        api_key: Option<String>,
        redaction: &RedactionConfig,
        http: reqwest::Client,
    ) -> SummaryEngine {
        let Some(api) = self.provider.api() else {
            return SummaryEngine::Extractive {
                redaction: redaction.clone(),
                settings: self.extractive_settings(),
            };
        };
        let model = ModelSpec {
            api,
            provider: api.as_str().to_owned(),
            id: self.model.clone().unwrap_or_default(),
            base_url: self.base_url.clone().unwrap_or_default(),
            context_window: self.context_window,
            max_tokens: self.max_tokens,
            reasoning: self.reasoning,
            api_key,
            key_env: self.api_key_env.clone(),
            headers: Vec::new(),
        };
        self.llm_engine(model, redaction, http)
    }

    /// The extractive summarizer's settings from this section.
    pub fn extractive_settings(&self) -> ExtractiveSettings {
        ExtractiveSettings {
            target_tokens: self.extractive_target_tokens,
        }
    }

    /// An LLM engine for `model` with this section's call policy: its client (with the stream
    /// idle timeout), retries and extractive fallback. Also used for a session's own model.
    pub fn llm_engine(
        &self,
        model: ModelSpec,
        redaction: &RedactionConfig,
        http: reqwest::Client,
    ) -> SummaryEngine {
        let client = crate::summarizer::client_with_idle_timeout(
            model.clone(),
            http,
            std::time::Duration::from_secs(self.idle_timeout_secs.max(1)),
        );
        SummaryEngine::Llm {
            client,
            model,
            retry: self.retry,
            redaction: redaction.clone(),
            fallback_extractive: self.fallback == Some(Fallback::Extractive),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_extractive_default() {
        let c = Config::from_toml("", Path::new("c.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert!(matches!(
            c.engine(reqwest::Client::new()).unwrap(),
            SummaryEngine::Extractive { .. }
        ));
        assert!(c.redaction.enabled);
    }

    #[test]
    fn full_file_parses() {
        let text = r#"
socket = "/run/compactd.sock"
[log]
level = "debug"
[summarizer]
provider = "anthropic-messages"
base_url = "https://api.anthropic.com"
model = "claude-haiku"
max_tokens = 8192
context_window = 200000
reasoning = true
api_key_env = "COMPACTD_TEST_KEY_THAT_IS_SET"
fallback = "extractive"
retry = { enabled = true, maxRetries = 2, baseDelayMs = 500 }
[redaction]
enabled = false
"#;
        let c = Config::from_toml(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.summarizer.retry.max_retries, 2);
        assert!(!c.redaction.enabled);
        std::env::set_var("COMPACTD_TEST_KEY_THAT_IS_SET", "k");
        match c.engine(reqwest::Client::new()).unwrap() {
            SummaryEngine::Llm {
                model,
                fallback_extractive,
                ..
            } => {
                assert_eq!(model.api, Api::AnthropicMessages);
                assert_eq!(model.api_key.as_deref(), Some("k"));
                assert!(fallback_extractive);
            }
            SummaryEngine::Extractive { .. } => panic!("expected an LLM engine"),
        }
    }

    #[test]
    fn the_extractive_target_reaches_the_engine_and_is_validated() {
        assert_eq!(
            Config::default().summarizer.extractive_settings(),
            ExtractiveSettings::DEFAULT
        );
        let c = Config::from_toml(
            "[summarizer]\nextractive_target_tokens = 900\n",
            Path::new("c.toml"),
        )
        .unwrap();
        match c.engine(reqwest::Client::new()).unwrap() {
            SummaryEngine::Extractive { settings, .. } => assert_eq!(settings.target_tokens, 900),
            SummaryEngine::Llm { .. } => panic!("expected the extractive engine"),
        }
        let e = Config::from_toml(
            "[summarizer]\nextractive_target_tokens = 20\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("summarizer.extractive_target_tokens = 20 is below the minimum of 200"),
            "{e}"
        );
    }

    #[test]
    fn redaction_patterns_are_validated_at_load() {
        let c = Config::from_toml(
            "[redaction]\nallow = [\"^sk_test_\"]\ndeny = [\"\\\\bacme-[0-9a-f]{8}\\\\b\"]\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert!(c.redaction.enabled);
        assert_eq!(
            c.redaction
                .apply("k=sk_test_4eC39HqLyjWDarjtT1zdp7dc id acme-0badf00d"),
            "k=sk_test_4eC39HqLyjWDarjtT1zdp7dc id [REDACTED]"
        );
        let e = Config::from_toml("[redaction]\ndeny = [\"(unclosed\"]\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid config file c.toml"), "{e}");
        assert!(e.contains("invalid pattern [0] \"(unclosed\""), "{e}");
        let e = Config::from_toml("[redaction]\nallows = []\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("allows"), "{e}");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let e = Config::from_toml("[summarizer]\nprovider = \"gpt\"\n", Path::new("c.toml"))
            .unwrap_err();
        assert!(e.to_string().contains("summarizer.provider 'gpt'"), "{e}");
        let e = Config::from_toml("[summarizer]\nprovder = 1\n", Path::new("c.toml")).unwrap_err();
        assert!(e.to_string().contains("invalid config file c.toml"), "{e}");
        let e = Config::from_toml(
            "[summarizer]\nprovider = \"openai-completions\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("needs base_url and model"), "{e}");
        let missing = Config::from_toml(
            "[summarizer]\nprovider = \"openai-completions\"\nbase_url = \"http://x\"\nmodel = \"m\"\napi_key_env = \"COMPACTD_SURELY_UNSET_VAR\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let err = missing
            .engine(reqwest::Client::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with("No API key found for openai-completions."),
            "{err}"
        );
        assert!(!err.contains("sk-"), "never echo keys");
    }

    /// Numbers that make no sense were accepted: `[prices]` took negative, NaN and infinite
    /// rates (reported as negative dollars or `null`), a zero context window, a retry base of
    /// days. Each is refused at load, the error naming the setting.
    #[test]
    fn numbers_out_of_range_are_refused_naming_the_setting() {
        let price = |rates: &str| format!("[prices.\"gpt-x\"]\n{rates}\n");
        for (text, named) in [
            (
                price("input = -1.0\noutput = 1.0\ncache_read = 0.1\ncache_write = 1.0"),
                "prices.\"gpt-x\".input = -1",
            ),
            (
                price("input = 1.0\noutput = nan\ncache_read = 0.1\ncache_write = 1.0"),
                "prices.\"gpt-x\".output = NaN",
            ),
            (
                price("input = 1.0\noutput = 1.0\ncache_read = inf\ncache_write = 1.0"),
                "prices.\"gpt-x\".cache_read = inf",
            ),
            (
                price("input = 1.0\noutput = 1.0\ncache_read = 0.1\ncache_write = -inf"),
                "prices.\"gpt-x\".cache_write = -inf",
            ),
            (
                "[summarizer]\ncontext_window = 0\n".to_owned(),
                "summarizer.context_window = 0",
            ),
            (
                "[summarizer]\nmax_tokens = 10000000000\n".to_owned(),
                "summarizer.max_tokens = 10000000000",
            ),
            (
                "[summarizer]\nidle_timeout_secs = 0\n".to_owned(),
                "summarizer.idle_timeout_secs = 0",
            ),
            (
                "[summarizer]\nretry = { maxRetries = 1000 }\n".to_owned(),
                "summarizer.retry.maxRetries = 1000",
            ),
            (
                "[summarizer]\nretry = { baseDelayMs = 86400000 }\n".to_owned(),
                "summarizer.retry.baseDelayMs = 86400000",
            ),
            (
                "[summarizer]\nextractive_target_tokens = 99999999999\n".to_owned(),
                "summarizer.extractive_target_tokens = 99999999999",
            ),
            (
                "[storage]\nmax_session_bytes = 0\n".to_owned(),
                "storage.max_session_bytes = 0",
            ),
            (
                "[limits]\nmax_hook_timeout_ms = 0\n".to_owned(),
                "limits.max_hook_timeout_ms = 0",
            ),
        ] {
            let e = Config::from_toml(&text, Path::new("c.toml"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.starts_with(named), "{text}: {e:?}");
        }
        // A negative number for an unsigned setting is refused by its type, at its line.
        let e = Config::from_toml("[summarizer]\nmax_tokens = -5\n", Path::new("c.toml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("max_tokens = -5"), "{e}");
        // The edges are accepted, and a price of 0 is a price.
        let ok = Config::from_toml(
            &format!(
                "{}[summarizer]\ncontext_window = 1\nmax_tokens = 0\nidle_timeout_secs = 86400\n",
                price("input = 0.0\noutput = 1000000.0\ncache_read = 0.0\ncache_write = 0.0")
            ),
            Path::new("c.toml"),
        );
        assert!(ok.is_ok(), "{ok:?}");
    }

    /// `[log] level` that does not parse (or names no level) used to be ignored silently.
    #[test]
    fn a_log_level_that_does_not_parse_is_refused_with_the_reason() {
        for bad in ["debg", "verbose", "info,compactd=loud", "compactd[{"] {
            let e = Config::from_toml(&format!("[log]\nlevel = {bad:?}\n"), Path::new("c.toml"))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.starts_with(&format!("log.level {bad:?}: ")),
                "{bad}: {e:?}"
            );
        }
        for good in [
            "debug",
            "INFO",
            "warn,compactd=debug",
            "compactd::daemon=trace",
            "",
        ] {
            assert!(check_log_filter(good).is_ok(), "{good}");
        }
    }
}
