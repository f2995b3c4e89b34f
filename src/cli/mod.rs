//! The command-line front end. `main.rs` parses flags into [`Cli`]; each subcommand lives in its
//! own module and returns an exit code. Errors go to stderr (or as `{"error": …}` on stdout with
//! `--json`), never as a panic.

pub mod compact;
pub mod inspect;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::compaction::tokens::CompactionSettings;
use crate::compactor::SummaryEngine;
use crate::summarizer::{client_for, Api, ModelSpec};

#[derive(Debug, Parser)]
#[command(
    name = "compactd",
    version,
    about = "LLM context compaction for Pi-format coding-agent sessions"
)]
pub struct Cli {
    /// Configuration file (default: $XDG_CONFIG_HOME/compactd/config.toml when it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print Pi's analysis of a session (tokens, threshold, cut point, what would be summarized).
    /// Never writes the file.
    Inspect {
        session: PathBuf,
        /// One JSON object in the conformance fixtures' `expected.json` shape.
        #[arg(long)]
        json: bool,
        /// The agent model's context window (for `shouldCompact`).
        #[arg(long, default_value_t = 200000)]
        context_window: i64,
        #[command(flatten)]
        settings: SettingsArgs,
    },
    /// Run Pi's manual compaction on a session file and append the compaction entry.
    Compact {
        session: PathBuf,
        #[arg(long)]
        json: bool,
        /// Extra focus for the summary (Pi's `/compact <text>`).
        #[arg(long)]
        custom_instructions: Option<String>,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        model: ModelArgs,
    },
}

/// Pi's `compaction` settings block.
#[derive(Debug, Clone, Copy, Args)]
pub struct SettingsArgs {
    #[arg(long, default_value_t = 16384, allow_negative_numbers = true)]
    pub reserve_tokens: i64,
    #[arg(long, default_value_t = 20000, allow_negative_numbers = true)]
    pub keep_recent_tokens: i64,
}

impl SettingsArgs {
    pub fn settings(&self) -> CompactionSettings {
        CompactionSettings {
            enabled: true,
            reserve_tokens: self.reserve_tokens,
            keep_recent_tokens: self.keep_recent_tokens,
        }
    }
}

/// The summarizer model.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Summarizer: extractive (default, no network), openai-completions, anthropic-messages,
    /// openai-responses.
    #[arg(long)]
    pub provider: Option<String>,
    /// Base URL (OpenAI style: up to `/v1`; Anthropic: the host root).
    #[arg(long)]
    pub base_url: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// The summarizing model's output cap (0: none).
    #[arg(long, default_value_t = 0)]
    pub model_max_tokens: u64,
    /// The summarizing model's context window (pi-ai clamps each request against it).
    #[arg(long, default_value_t = 200000)]
    pub context_window: u64,
    /// Whether the model reasons (then the session's thinking level is sent).
    #[arg(long)]
    pub reasoning: bool,
    /// API key (prefer --api-key-env: command lines are visible to other users).
    #[arg(long, conflicts_with = "api_key_env")]
    pub api_key: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Send text to the provider without redacting secrets (redaction is on by default).
    #[arg(long)]
    pub no_redact: bool,
    /// When the LLM summarizer fails, summarize extractively instead of failing.
    #[arg(long)]
    pub fallback_extractive: bool,
}

impl ModelArgs {
    /// The summarizer these flags select: `--provider` wins, else the configuration file's
    /// `[summarizer]`, else the extractive default.
    pub fn engine(&self, config: &crate::config::Config) -> Result<SummaryEngine, String> {
        let Some(provider) = self.provider.as_deref() else {
            return config
                .engine(reqwest::Client::new())
                .map_err(|e| e.to_string());
        };
        if provider == "extractive" {
            return Ok(SummaryEngine::Extractive);
        }
        let api = Api::parse(provider).ok_or_else(|| {
            format!("unknown provider '{provider}' (expected openai-completions, anthropic-messages or openai-responses)")
        })?;
        let base_url = self
            .base_url
            .clone()
            .ok_or("--base-url is required with --provider")?;
        let id = self
            .model
            .clone()
            .ok_or("--model is required with --provider")?;
        let api_key = match (&self.api_key, &self.api_key_env) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(var)) => Some(
                std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))?,
            ),
            (None, None) => None,
        };
        let model = ModelSpec {
            api,
            provider: provider.to_owned(),
            id,
            base_url,
            context_window: self.context_window,
            max_tokens: self.model_max_tokens,
            reasoning: self.reasoning,
            api_key,
            headers: Vec::new(),
        };
        Ok(SummaryEngine::Llm {
            client: client_for(model.clone(), reqwest::Client::new()),
            model,
            retry: crate::summarizer::RetrySettings::default(),
            redaction: crate::summarizer::redact::RedactionConfig {
                enabled: !self.no_redact && config.redaction.enabled,
            },
            fallback_extractive: self.fallback_extractive,
        })
    }
}

/// Reports an error the way the caller asked for.
pub fn print_error(json: bool, message: &str) {
    if json {
        println!(
            "{}",
            crate::json::stringify(&serde_json::json!({ "error": message }))
        );
    } else {
        eprintln!("compactd: {message}");
    }
}

/// Runs the parsed command line; returns the exit code.
pub fn run(cli: Cli) -> i32 {
    let config = match crate::config::Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("compactd: {e}");
            return 2;
        }
    };
    match cli.command {
        Command::Inspect {
            session,
            json,
            context_window,
            settings,
        } => inspect::run(&session, json, context_window, &settings.settings()),
        Command::Compact {
            session,
            json,
            custom_instructions,
            settings,
            model,
        } => {
            let engine = match model.engine(&config) {
                Ok(e) => e,
                Err(msg) => {
                    print_error(json, &msg);
                    return 2;
                }
            };
            compact::run(
                &session,
                json,
                &settings.settings(),
                &engine,
                custom_instructions.as_deref(),
            )
        }
    }
}
