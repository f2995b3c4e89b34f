//! The command-line front end. `main.rs` parses flags into [`Cli`] and sets up logging
//! ([`logging`]); each subcommand lives in its own module and returns an exit code: `serve` and
//! `stdio` here, `connect` and `start` in [`connect`] (start-or-join in [`launch`]), `status`
//! and `stop` in [`lifecycle`], `doctor`, `service`, `inspect`, `compact` and `preview` (both
//! through the daemon holding the file: [`via_daemon`]), and `mcp` (the server is
//! `crate::mcp`). Errors go to stderr (or as `{"error": …}` on stdout with
//! `--json`), never as a panic.

pub mod compact;
pub mod connect;
pub mod doctor;
pub mod inspect;
pub mod launch;
pub mod lifecycle;
pub mod logging;
pub mod pi;
pub mod preview;
pub mod printable;
pub mod runtime;
pub mod service;
pub mod stored;
pub mod top;
pub mod via_daemon;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::compaction::tokens::CompactionSettings;
use crate::config::{Backend, Fallback, SummarizerProvider};

/// The exit-code scheme, shown in `--help` and kept by every subcommand.
pub const EXIT_CODES: &str =
    "Exit codes: 0 success; 1 the operation failed (compaction refused or \
failed, session file unreadable, daemon could not serve); 2 usage or configuration error.";

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: the operation failed (compaction refused or failed, unreadable file, cannot serve).
pub const EXIT_FAILED: i32 = 1;
/// Exit code: usage or configuration error.
pub const EXIT_USAGE: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "compactd",
    version,
    about = "LLM context compaction for Pi-format coding-agent sessions",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Configuration file (default: $XDG_CONFIG_HOME/compactd/config.toml when it exists).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Log lines as `text` (default) or `json` (one object per line, with the connection,
    /// request, session and compaction spans they happened in); overrides `[log] format`.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<crate::config::LogFormat>,
    /// More log lines: `-v` debug, `-vv` trace (over `COMPACTD_LOG` and `[log] level`).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Errors only in the log (over `COMPACTD_LOG` and `[log] level`).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon on a Unix socket (many clients).
    #[command(after_help = EXIT_CODES)]
    Serve {
        /// Socket path (default: the config's `socket`, else RUNTIME/compactd/compactd.sock
        /// where RUNTIME is $COMPACTD_RUNTIME_DIR, else /run/user/$UID when it exists, else
        /// $XDG_RUNTIME_DIR; else /tmp/compactd-$UID/compactd.sock; the directory is created mode
        /// 0700 and must stay private).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Most simultaneous connections; more are refused with an `overloaded` error.
        #[arg(long, default_value_t = crate::transport::DEFAULT_MAX_CONNECTIONS)]
        max_connections: usize,
        /// Exit once no client has been connected and no session open for this many seconds
        /// (what a daemon started on demand is given; by default a daemon stays).
        #[arg(long, value_name = "SECS")]
        exit_when_idle: Option<u64>,
        #[command(flatten)]
        transport: TransportArgs,
        #[command(flatten)]
        runtime: RuntimeArgs,
        #[command(flatten)]
        compat: CompatArgs,
    },
    /// Serve one client on stdin/stdout with a daemon of its own. Logs go to the log file
    /// (default $XDG_STATE_HOME/compactd/compactd.log); stderr carries only errors.
    #[command(after_help = EXIT_CODES)]
    Stdio {
        #[command(flatten)]
        transport: TransportArgs,
        #[command(flatten)]
        runtime: RuntimeArgs,
        #[command(flatten)]
        compat: CompatArgs,
    },
    /// Join the daemon on the socket, or start one in the background and join it, and bridge
    /// stdin/stdout to it unchanged (what an editor spawns: editors and agents share one
    /// daemon and its sessions). Logs as `stdio` does.
    #[command(after_help = EXIT_CODES)]
    Connect {
        /// Socket path (default: as for `serve`).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Start the daemon in the background unless one answers on the socket; print the socket.
    #[command(after_help = EXIT_CODES)]
    Start {
        /// Socket path (default: as for `serve`).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell) on stdout,
    /// e.g. `compactd completions bash > ~/.local/share/bash-completion/completions/compactd`.
    #[command(after_help = EXIT_CODES)]
    Completions {
        /// The shell the script is for.
        shell: clap_complete::Shell,
    },
    /// Show the daemon on the socket: pid, uptime, sessions, clients, version, and the config
    /// and log files it uses; exit 1 when none answers.
    #[command(after_help = EXIT_CODES)]
    Status {
        /// Socket path (default: as for `serve`).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Stop the daemon on the socket (running compactions are aborted and answer) and wait
    /// until it is gone; nothing running is no error.
    #[command(after_help = EXIT_CODES)]
    Stop {
        /// Socket path (default: as for `serve`).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Check the installation and print the paths in use: the config file (loaded and
    /// validated), the socket directory, the daemon on the socket, the summarizer's and
    /// providers' keys, PostgreSQL when configured; exit 1 when a check fails, each failure
    /// with what to do.
    #[command(after_help = EXIT_CODES)]
    Doctor {
        /// Socket path (default: as for `serve`).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Install, remove or show the daemon as a user service (systemd socket activation; a
    /// launchd agent on macOS).
    #[command(after_help = EXIT_CODES)]
    Service {
        #[command(subcommand)]
        action: ServiceAction,
        /// The service manager (default: launchd on macOS, systemd elsewhere).
        #[arg(long, value_enum, global = true)]
        manager: Option<service::Manager>,
        /// Socket path the service listens on (default: as for `serve`).
        #[arg(long, global = true)]
        socket: Option<PathBuf>,
    },
    /// Put compactd into Pi (1.6 and later) in one step: install the compactd extension as a Pi
    /// package (`pi install`) and register the recall tools' MCP server (`pi mcp add compactd
    /// -- compactd mcp --cwd .`); or take both out again.
    #[command(after_help = EXIT_CODES)]
    Pi {
        #[command(subcommand)]
        action: PiAction,
        /// The `pi` command to run (default: `pi` on PATH).
        #[arg(long, global = true, default_value = "pi")]
        pi: PathBuf,
        /// Pi's project settings (`.pi/` of the current directory) instead of the user's.
        #[arg(long, short, global = true)]
        local: bool,
    },
    /// An MCP server on stdin/stdout giving a model the recall tools of one Pi session
    /// (`search_history`, `get_entry`), backed by the daemon (started or joined as `connect`
    /// does).
    #[command(after_help = EXIT_CODES)]
    #[command(group(clap::ArgGroup::new("target").required(true).args(["session", "cwd"])))]
    Mcp {
        /// The session file.
        #[arg(long, conflicts_with = "cwd")]
        session: Option<PathBuf>,
        /// Use this working directory's most recent Pi session (looked up at every call).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Socket path (default: as for `serve`).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Print Pi's analysis of a session (tokens, threshold, cut point, what would be summarized).
    /// Never writes the file.
    #[command(after_help = EXIT_CODES)]
    Inspect {
        /// The Pi session file (`.jsonl`); only read.
        session: PathBuf,
        /// One JSON object in the conformance fixtures' `expected.json` shape.
        #[arg(long)]
        json: bool,
        /// The agent model's context window (for `shouldCompact`).
        #[arg(long, default_value_t = 200000)]
        context_window: i64,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        compat: CompatArgs,
    },
    /// Run Pi's manual compaction on a session file and append the compaction entry. When the
    /// daemon on the socket holds the file, it compacts it (with the session's settings and
    /// summarizer; its subscribers see the events) unless --no-daemon.
    #[command(after_help = EXIT_CODES)]
    Compact {
        /// The Pi session file (`.jsonl`) to compact; the entry is appended to it.
        session: PathBuf,
        /// Print the result (`CompactionResult`, or `{"error": …}`) as one JSON object, and no
        /// progress.
        #[arg(long)]
        json: bool,
        /// Extra focus for the summary (Pi's `/compact <text>`).
        #[arg(long)]
        custom_instructions: Option<String>,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        model: ModelArgs,
        #[command(flatten)]
        daemon: DaemonArgs,
        #[command(flatten)]
        compat: CompatArgs,
    },
    /// What a compaction would do now (`previewCompaction`: what would be summarized and what
    /// kept, the cost), without calling a model or writing anything. Asks the daemon on the
    /// socket when it holds the file (unless --no-daemon), else a daemon of this process.
    #[command(after_help = EXIT_CODES)]
    Preview {
        /// The Pi session file (`.jsonl`); only read.
        session: PathBuf,
        /// The `previewCompaction` answer as one JSON object.
        #[arg(long)]
        json: bool,
        /// Add the messages and the serialized summarizer input (`detail: "full"`).
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        daemon: DaemonArgs,
        #[command(flatten)]
        compat: CompatArgs,
    },
    /// Write a session of the shared store (`[storage] backend = "postgres"`) as Pi JSONL, byte
    /// for byte.
    #[command(after_help = EXIT_CODES)]
    Export {
        /// The session's header id.
        header_id: String,
        /// Write to this new file (never overwritten) instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Load a Pi session file into the shared store, byte for byte; prints its header id.
    #[command(after_help = EXIT_CODES)]
    Import {
        /// The Pi session file (`.jsonl`) to load; never written.
        file: PathBuf,
    },
    /// A live terminal view of every session open in the running daemon: context against the
    /// threshold, what is compacting, the last compaction, events as they arrive. Keys: c
    /// compact (after y), p preview, a abort, / filter, q quit.
    #[command(after_help = EXIT_CODES)]
    Top {
        /// The daemon's socket (default: the config's `socket`, else the daemon's default).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Print one plain-text snapshot (aligned columns, no escape codes) and exit.
        #[arg(long)]
        once: bool,
    },
}

/// `compactd service …`.
#[derive(Debug, Clone, Copy, Subcommand)]
pub enum ServiceAction {
    /// Write the unit files (systemd: socket + service; launchd: a LaunchAgent) and enable them.
    Install {
        /// Only write the files; never call systemctl or launchctl.
        #[arg(long)]
        files_only: bool,
    },
    /// Disable and remove what `install` wrote.
    Uninstall {
        /// Only remove the files; never call systemctl or launchctl.
        #[arg(long)]
        files_only: bool,
    },
    /// Show the files, the service manager's state (or why it cannot be asked here) and
    /// whether the daemon answers (exit 1 when it does not).
    Status,
}

/// What `compactd pi` does.
#[derive(Debug, Clone, Copy, Subcommand)]
pub enum PiAction {
    /// Install the compactd extension as a Pi package and register the MCP server.
    Install,
    /// Remove both (and the package's files).
    Uninstall,
}

/// Framing options shared by both transports.
#[derive(Debug, Clone, Copy, Args)]
pub struct TransportArgs {
    /// Force a framing instead of detecting it per connection.
    #[arg(long, value_parser = ["ndjson", "lsp"])]
    pub framing: Option<&'static str>,
    /// Largest accepted frame in bytes.
    #[arg(long, default_value_t = crate::transport::DEFAULT_MAX_FRAME)]
    pub max_frame: usize,
    /// Slow requests (compact, checkCompaction, navigateTree) one connection may have running.
    #[arg(long, default_value_t = crate::transport::DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// Unread reply bytes per connection past which the daemon stops reading its requests.
    #[arg(long, default_value_t = crate::transport::DEFAULT_MAX_QUEUED)]
    pub max_queued_bytes: usize,
    /// Unread reply bytes over all connections past which each connection with unread replies
    /// is paused until its own queue drains.
    #[arg(long, default_value_t = crate::transport::DEFAULT_MAX_QUEUED_TOTAL)]
    pub max_queued_total_bytes: usize,
    /// Bytes of incoming frames all connections together may be buffering.
    #[arg(long, default_value_t = crate::transport::DEFAULT_MAX_BUFFERED)]
    pub max_buffered_bytes: usize,
    /// Milliseconds a started frame may go without a byte before the connection is closed
    /// (0: never).
    #[arg(long, default_value_t = crate::transport::DEFAULT_FRAME_IDLE_TIMEOUT.as_millis() as u64)]
    pub frame_idle_timeout_ms: u64,
    /// Milliseconds one request may take to arrive, from its first byte to its last, before
    /// the connection is closed (0: no limit).
    #[arg(long, default_value_t = crate::transport::DEFAULT_FRAME_DEADLINE.as_millis() as u64)]
    pub frame_timeout_ms: u64,
}

impl TransportArgs {
    fn options(&self) -> crate::transport::Options {
        crate::transport::Options {
            framing: match self.framing {
                Some("ndjson") => Some(crate::transport::Framing::Ndjson),
                Some("lsp") => Some(crate::transport::Framing::Lsp),
                _ => None,
            },
            max_frame: self.max_frame,
            max_in_flight: self.max_in_flight,
            max_queued: self.max_queued_bytes,
            max_queued_total: self.max_queued_total_bytes,
            budget: crate::transport::FrameBudget::new(self.max_buffered_bytes),
            frame_idle_timeout: (self.frame_idle_timeout_ms > 0)
                .then(|| std::time::Duration::from_millis(self.frame_idle_timeout_ms)),
            frame_deadline: (self.frame_timeout_ms > 0)
                .then(|| std::time::Duration::from_millis(self.frame_timeout_ms)),
            slot: None,
        }
    }
}

/// The daemon's async runtime.
#[derive(Debug, Clone, Copy, Args)]
pub struct RuntimeArgs {
    /// Async worker threads (0: one fewer than the cores, at least one; as many as the cores
    /// when sessions are kept in PostgreSQL).
    #[arg(long, default_value_t = 0)]
    pub worker_threads: usize,
}

impl RuntimeArgs {
    /// The worker count. Requests take microseconds of a worker, and the daemon's clients (the
    /// agent, the editor) usually run on the same machine: one core is left to them and to the
    /// bulk work that runs on threads of its own (a big session's read and parse, the
    /// extractive summary). On two cores one worker also answers sooner than two
    /// (`benches/daemon_load.rs`, 64 clients in closed loop, two runs each): a p99 of
    /// 1.50–1.78 ms against 2.10–2.49 ms on a 1 MB session, 2.16–2.48 ms against 3.10–3.73 ms
    /// on a 100 MB one, with less daemon CPU per request; 8 pipelined connections get
    /// 123–171k requests/s from one worker, 180–245k from two.
    ///
    /// A daemon whose sessions live in PostgreSQL runs one worker per core. Its appends are
    /// latency-bound, not CPU-bound: each one's answer comes back from the database's own
    /// thread and waits for a worker to finish it (the entry taken into the session, the
    /// reply), and with a single worker that is the one reading the other clients' next
    /// requests. Four clients appending to their own sessions through one daemon
    /// (`benches/storage.rs`, nine paired rounds in one run, 2 cores, the files daemon at its
    /// own default beside them): 0.78x files with two workers against 0.63x with one, faster
    /// in 8 of 9 rounds.
    pub fn workers(&self, backend: Backend) -> usize {
        if self.worker_threads > 0 {
            return self.worker_threads;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        match backend.appends_wait_on_round_trips() {
            false => cores.saturating_sub(1).max(1),
            true => cores,
        }
    }
}

/// Whose rules apply: the Pi the sessions were written by.
#[derive(Debug, Clone, Copy, Args)]
pub struct CompatArgs {
    /// Follow Pi 0.85 or Pi 1.6 (its context projection, estimates, cut points, summary
    /// requests and compaction entries) [default: the config's [compat] pi_version, else 1.6].
    #[arg(long, value_name = "VERSION", value_parser = parse_pi_version)]
    pub pi_version: Option<crate::session::PiVersion>,
}

impl CompatArgs {
    /// `config` with the flag applied (`[compat] pi_version`).
    pub fn apply(&self, config: &mut crate::config::Config) {
        if let Some(v) = self.pi_version {
            config.compat.pi_version = crate::config::PiVersionSetting(v);
        }
    }

    /// The flag's name when it was given (a running daemon's session keeps its own rules).
    pub fn given(&self) -> Option<&'static str> {
        self.pi_version.map(|_| "--pi-version")
    }
}

fn parse_pi_version(s: &str) -> Result<crate::session::PiVersion, String> {
    crate::session::PiVersion::parse(s)
        .ok_or_else(|| format!("unknown Pi version '{s}' (expected 1.6 or 0.85)"))
}

/// Which daemon a command on one session file goes through.
#[derive(Debug, Clone, Args)]
pub struct DaemonArgs {
    /// The daemon's socket (default: as for `serve`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Never go through the running daemon, even when it holds the file (then the file's
    /// lock refuses the command).
    #[arg(long)]
    pub no_daemon: bool,
}

/// Pi's `compaction` settings block.
#[derive(Debug, Clone, Copy, Args)]
pub struct SettingsArgs {
    /// Pi's compaction.reserveTokens [default: 16384].
    #[arg(long, allow_negative_numbers = true)]
    pub reserve_tokens: Option<i64>,
    /// Pi's compaction.keepRecentTokens [default: 20000].
    #[arg(long, allow_negative_numbers = true)]
    pub keep_recent_tokens: Option<i64>,
}

impl SettingsArgs {
    pub fn settings(&self) -> CompactionSettings {
        CompactionSettings {
            enabled: true,
            reserve_tokens: self.reserve_tokens.unwrap_or(16384),
            keep_recent_tokens: self.keep_recent_tokens.unwrap_or(20000),
        }
    }

    /// The first of these flags given on the command line.
    pub fn given(&self) -> Option<&'static str> {
        if self.reserve_tokens.is_some() {
            Some("--reserve-tokens")
        } else if self.keep_recent_tokens.is_some() {
            Some("--keep-recent-tokens")
        } else {
            None
        }
    }

    /// The flags given as `setSettingsOverrides`' `compaction` member.
    pub fn overrides(&self) -> serde_json::Value {
        let mut o = serde_json::Map::new();
        if let Some(r) = self.reserve_tokens {
            o.insert("reserveTokens".into(), r.into());
        }
        if let Some(k) = self.keep_recent_tokens {
            o.insert("keepRecentTokens".into(), k.into());
        }
        serde_json::Value::Object(o)
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
    /// The summarizing model's id, as the provider names it (`claude-sonnet-4-5`, `gpt-4.1`).
    #[arg(long)]
    pub model: Option<String>,
    /// The summarizing model's output cap (0: none) [default: 0].
    #[arg(long)]
    pub model_max_tokens: Option<u64>,
    /// The summarizing model's context window (pi-ai clamps each request against it)
    /// [default: 200000].
    #[arg(long)]
    pub context_window: Option<u64>,
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
    /// The first of these flags given on the command line.
    pub fn given(&self) -> Option<&'static str> {
        [
            (self.provider.is_some(), "--provider"),
            (self.base_url.is_some(), "--base-url"),
            (self.model.is_some(), "--model"),
            (self.model_max_tokens.is_some(), "--model-max-tokens"),
            (self.context_window.is_some(), "--context-window"),
            (self.reasoning, "--reasoning"),
            (self.api_key.is_some(), "--api-key"),
            (self.api_key_env.is_some(), "--api-key-env"),
            (self.no_redact, "--no-redact"),
            (self.fallback_extractive, "--fallback-extractive"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// Applies the flags to `config`, the configuration of this process's own daemon: the
    /// summarizer they select (`--provider` wins, else the configuration file's `[summarizer]`,
    /// else the extractive default, with the configuration's call policy: `retry`,
    /// `idle_timeout_secs`), `--no-redact` and `--fallback-extractive` for whichever
    /// summarizer runs. A key named but not set is refused here, before anything runs.
    pub fn configure(&self, config: &mut crate::config::Config) -> Result<(), String> {
        if self.no_redact {
            config.redaction.enabled = false;
        }
        if let Some(provider) = self.provider.as_deref() {
            let mut summarizer = self.summarizer(provider, &config.summarizer)?;
            if let SummarizerProvider::Llm(_) = summarizer.provider {
                summarizer.api_key = self.api_key()?.map(crate::config::GivenKey);
            }
            config.summarizer = summarizer;
        } else if self.fallback_extractive {
            config.summarizer.fallback = Some(Fallback::Extractive);
        }
        Ok(())
    }

    /// The `[summarizer]` section the flags describe: the model from the flags, the call policy
    /// (`retry`, `idle_timeout_secs`) from the configuration's section.
    fn summarizer(
        &self,
        provider: &str,
        configured: &crate::config::SummarizerConfig,
    ) -> Result<crate::config::SummarizerConfig, String> {
        let kind = match SummarizerProvider::parse(provider) {
            Some(SummarizerProvider::Extractive) => {
                return Ok(crate::config::SummarizerConfig {
                    provider: SummarizerProvider::Extractive,
                    ..configured.clone()
                })
            }
            Some(llm) => llm,
            None => return Err(format!("unknown provider '{provider}' (expected openai-completions, anthropic-messages or openai-responses)")),
        };
        let base_url = self
            .base_url
            .clone()
            .ok_or("--base-url is required with --provider")?;
        let model = self
            .model
            .clone()
            .ok_or("--model is required with --provider")?;
        Ok(crate::config::SummarizerConfig {
            provider: kind,
            base_url: Some(base_url),
            model: Some(model),
            max_tokens: self.model_max_tokens.unwrap_or(0),
            context_window: self.context_window.unwrap_or(200_000),
            reasoning: self.reasoning,
            api_key_env: self.api_key_env.clone(),
            fallback: self.fallback_extractive.then_some(Fallback::Extractive),
            ..configured.clone()
        })
    }

    /// The key from `--api-key`, else from the variable `--api-key-env` names, else none.
    fn api_key(&self) -> Result<Option<String>, String> {
        match (&self.api_key, &self.api_key_env) {
            (Some(k), _) => Ok(Some(k.clone())),
            (None, Some(var)) => std::env::var(var)
                .map(Some)
                .map_err(|_| format!("environment variable {var} is not set")),
            (None, None) => Ok(None),
        }
    }
}

/// Writes command output to stdout. A reader that went away (`compactd inspect … | head`) is
/// not an error: the command exits quietly with success. Returns the exit code.
pub fn write_stdout(text: &str) -> i32 {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => {
            crate::print_err!("cannot write output: {e}");
            EXIT_FAILED
        }
    }
}

/// Reports an error the way the caller asked for, made printable (it may quote a path or a
/// session's content).
pub fn print_error(json: bool, message: &str) {
    if json {
        let text = crate::json::stringify(&serde_json::json!({ "error": message }));
        write_stdout(&format!("{}\n", printable::json(&text)));
    } else {
        crate::print_err!("{message}");
    }
}

/// Whether `command` needs nothing of the configuration but the socket (`status`, `stop`): it
/// then runs even when the rest of the file does not load.
pub fn needs_only_the_socket(command: &Command) -> bool {
    matches!(command, Command::Status { .. } | Command::Stop { .. })
}

/// How `command` logs (see [`logging`]).
pub fn log_mode(command: &Command) -> logging::LogMode {
    match command {
        Command::Serve { .. } => logging::LogMode::Daemon,
        Command::Stdio { .. } | Command::Connect { .. } | Command::Mcp { .. } => {
            logging::LogMode::Editor
        }
        Command::Top { .. } | Command::Completions { .. } => logging::LogMode::Silent,
        _ => logging::LogMode::OneShot,
    }
}

/// The tag on `command`'s log lines (see [`logging::Tag`]): a daemon's and an editor's
/// commands name their pid and socket; one-shot commands log to the terminal that ran them.
pub fn log_tag(command: &Command, config: &crate::config::Config) -> Option<logging::Tag> {
    let socket = |flag: &Option<PathBuf>| Some(launch::socket_path(flag.clone(), config));
    match command {
        Command::Serve { socket: s, .. }
        | Command::Connect { socket: s }
        | Command::Mcp { socket: s, .. } => Some(logging::Tag::new(socket(s))),
        Command::Stdio { .. } => Some(logging::Tag::new(None)),
        _ => None,
    }
}

/// Runs the parsed command line with the loaded configuration; returns the exit code.
pub fn run(cli: Cli, mut config: crate::config::Config) -> i32 {
    let config_path = cli.config.as_deref();
    match cli.command {
        Command::Serve {
            socket,
            max_connections,
            exit_when_idle,
            transport,
            runtime,
            compat,
        } => {
            compat.apply(&mut config);
            // Socket activation: systemd passed the listening socket (read before the runtime).
            // A daemon reports through its log only (its stderr is a log: a terminal, the
            // service manager's journal, or the file an on-demand daemon's stderr goes to).
            let inherited = match crate::transport::unix::inherited_listener() {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!("{e}");
                    return EXIT_FAILED;
                }
            };
            // Where this daemon's log goes: the configured file, else its stderr when that is a
            // file (a daemon started on demand appends there), else no file (a terminal, a pipe,
            // the service manager's journal).
            let log_file = config.log.file.clone().or_else(logging::stderr_file);
            let config_file = crate::config::file_in_use(config_path);
            daemon_main(config, runtime, |daemon| async move {
                let path = launch::socket_path(socket, &daemon.config);
                let (listener, owned) = match inherited {
                    Some(l) => {
                        let l = crate::transport::unix::adopt_listener(l)?;
                        let at = l
                            .local_addr()
                            .ok()
                            .and_then(|a| a.as_pathname().map(std::path::Path::to_path_buf))
                            .unwrap_or(path);
                        tracing::info!(socket = %at.display(), "listening on the socket the service manager passed");
                        (l, None)
                    }
                    None => {
                        let l = crate::transport::unix::bind(&path).await?;
                        tracing::info!(socket = %path.display(), "listening");
                        (l, Some(path))
                    }
                };
                daemon.describe(crate::daemon::ProcessInfo {
                    socket: owned.clone(),
                    config_file: config_file.clone(),
                    log_file: log_file.clone(),
                    idle_exit_seconds: exit_when_idle.filter(|s| *s > 0),
                });
                crate::transport::unix::serve_unix(
                    daemon,
                    listener,
                    owned,
                    transport.options(),
                    max_connections.max(1),
                    exit_when_idle
                        .filter(|s| *s > 0)
                        .map(std::time::Duration::from_secs),
                )
                .await
            })
        }
        Command::Connect { socket } => connect::connect(socket, config_path, &config),
        Command::Start { socket } => connect::start(socket, config_path, &config),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "compactd",
                &mut out,
            );
            write_stdout(&String::from_utf8_lossy(&out))
        }
        Command::Status { socket } => lifecycle::status(&lifecycle::socket_of(socket, &config)),
        Command::Stop { socket } => lifecycle::stop(&lifecycle::socket_of(socket, &config)),
        Command::Doctor { socket } => doctor::run(config_path, socket),
        Command::Service {
            action,
            manager,
            socket,
        } => {
            let setup = service::Setup {
                manager: manager.unwrap_or_else(service::Manager::native),
                socket: launch::socket_path(socket, &config),
                config: config_path,
                log: config
                    .log
                    .file
                    .clone()
                    .unwrap_or_else(logging::default_log_file),
            };
            match action {
                ServiceAction::Install { files_only } => service::install(&setup, !files_only),
                ServiceAction::Uninstall { files_only } => service::uninstall(&setup, !files_only),
                ServiceAction::Status => service::status(&setup),
            }
        }
        Command::Pi { action, pi, local } => {
            let setup = pi::Setup { pi: &pi, local };
            match action {
                PiAction::Install => pi::install(&setup),
                PiAction::Uninstall => pi::uninstall(&setup),
            }
        }
        Command::Mcp {
            session,
            cwd,
            socket,
        } => mcp(session, cwd, socket, config_path, &config),
        Command::Stdio {
            transport,
            runtime,
            compat,
        } => {
            compat.apply(&mut config);
            daemon_main(config, runtime, |daemon| async move {
                crate::transport::stdio::serve_stdio(daemon, transport.options()).await
            })
        }
        Command::Inspect {
            session,
            json,
            context_window,
            settings,
            compat,
        } => {
            compat.apply(&mut config);
            inspect::run(
                &session,
                json,
                context_window,
                &settings.settings(),
                config.compat.pi_version.0,
            )
        }
        Command::Compact {
            session,
            json,
            custom_instructions,
            settings,
            model,
            daemon,
            compat,
        } => {
            let socket = (!daemon.no_daemon).then(|| launch::socket_path(daemon.socket, &config));
            let mut own = config;
            compat.apply(&mut own);
            if let Err(msg) = model.configure(&mut own) {
                print_error(json, &msg);
                return EXIT_USAGE;
            }
            let flags = via_daemon::Flags {
                given: settings
                    .given()
                    .or_else(|| model.given())
                    .or_else(|| compat.given()),
                compaction: settings.overrides(),
                config: own,
            };
            compact::run(
                compact::Request {
                    path: &session,
                    json,
                    custom_instructions: custom_instructions.as_deref(),
                    socket: socket.as_deref(),
                },
                flags,
            )
        }
        Command::Preview {
            session,
            json,
            full,
            settings,
            daemon,
            compat,
        } => {
            let socket = (!daemon.no_daemon).then(|| launch::socket_path(daemon.socket, &config));
            compat.apply(&mut config);
            let flags = via_daemon::Flags {
                given: settings.given().or_else(|| compat.given()),
                compaction: settings.overrides(),
                config,
            };
            preview::run(socket.as_deref(), &session, json, full, flags)
        }
        Command::Export { header_id, output } => {
            stored::export(&config, &header_id, output.as_deref())
        }
        Command::Import { file } => stored::import(&config, &file),
        Command::Top { socket, once } => {
            let path = socket
                .or_else(|| config.socket.clone())
                .unwrap_or_else(crate::transport::unix::default_socket_path);
            top::run(&path, once)
        }
    }
}

/// `compactd mcp`: checks the target, starts or joins the daemon, serves MCP on stdio.
fn mcp(
    session: Option<PathBuf>,
    cwd: Option<PathBuf>,
    socket: Option<PathBuf>,
    config_path: Option<&std::path::Path>,
    config: &crate::config::Config,
) -> i32 {
    let target = match (session, cwd) {
        (Some(file), _) => match std::fs::canonicalize(&file) {
            Ok(f) => crate::mcp::Target::File(f),
            Err(e) => {
                crate::print_err!("session file {}: {e}", file.display());
                return EXIT_FAILED;
            }
        },
        (None, Some(dir)) => match std::path::absolute(&dir) {
            Ok(d) => crate::mcp::Target::LatestOf(d),
            Err(e) => {
                crate::print_err!("{}: {e}", dir.display());
                return EXIT_USAGE;
            }
        },
        (None, None) => {
            crate::print_err!("mcp needs --session FILE or --cwd DIR");
            return EXIT_USAGE;
        }
    };
    let socket = launch::socket_path(socket, config);
    let log = config
        .log
        .file
        .clone()
        .unwrap_or_else(logging::default_log_file);
    if let Err(e) = launch::ensure_daemon(&socket, config_path, &log, config.idle_exit()) {
        crate::print_err!("{e}");
        return EXIT_FAILED;
    }
    match runtime::block_on(runtime::Shape::Bridge, crate::mcp::serve(target, socket))
        .and_then(|served| served)
    {
        Ok(()) => EXIT_OK,
        Err(e) => {
            crate::print_err!("{e}");
            EXIT_FAILED
        }
    }
}

/// Starts the runtime and the daemon, runs `body`, and maps its error to exit code 1.
fn daemon_main<F, Fut>(config: crate::config::Config, runtime: RuntimeArgs, body: F) -> i32
where
    F: FnOnce(std::sync::Arc<crate::daemon::Daemon>) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    // Every open session holds a descriptor: the common soft limit of 1024 would stop the
    // daemon at about a thousand sessions where its hard limit allows far more.
    let raised = crate::descriptors::raise_soft_limit();
    let workers = runtime.workers(config.storage.backend);
    let runtime = match runtime::build(runtime::Shape::Daemon { workers }) {
        Ok(r) => r,
        Err(e) => {
            crate::print_err!("{e}");
            return EXIT_FAILED;
        }
    };
    // One thread made now, while nothing waits: the first `cpu::blocking` (a big open) hands
    // the worker's tasks to it instead of to a thread created then, whose stack mapping waits
    // on the memory map lock the open's page population holds, while no worker runs. With one
    // worker, another client's worst wait during a 100 MB open and compaction was 5.4–15.9 ms
    // in six runs without it, 4.4–7.9 ms in six with it.
    drop(runtime.spawn_blocking(|| {}));
    if let Some((before, after)) = raised {
        tracing::debug!(
            before,
            after,
            "raised the soft limit on open files to the hard limit"
        );
    }
    let daemon = crate::daemon::Daemon::new(config);
    // Reported once, through the log (which shows errors on stderr when it is a file; see
    // `logging::init`), with a timestamp like every other line.
    if let Some(e) = &daemon.storage_error {
        tracing::error!("storage_unavailable: {e}");
        return EXIT_FAILED;
    }
    // Reported now, not at the first client's call; the daemon still serves, and every call
    // that needs the store reconnects (or answers storage_unavailable).
    match daemon.storage.check() {
        Ok(()) => tracing::debug!("session store ready"),
        Err(e) => tracing::error!(
            "storage_unavailable: {e} (serving; calls that need the store will retry)"
        ),
    }
    let outcome = runtime.block_on(body(daemon));
    // Do not wait for the blocking thread still reading stdin (it never returns on its own).
    runtime.shutdown_timeout(std::time::Duration::from_millis(10));
    match outcome {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!("{e}");
            EXIT_FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Backend, RuntimeArgs};

    #[test]
    fn postgres_daemons_default_to_a_worker_per_core_and_files_daemons_leave_one() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let default = RuntimeArgs { worker_threads: 0 };
        assert_eq!(default.workers(Backend::Postgres), cores);
        assert_eq!(
            default.workers(Backend::Files),
            cores.saturating_sub(1).max(1)
        );
        // An explicit count wins for either backend.
        let three = RuntimeArgs { worker_threads: 3 };
        assert_eq!(three.workers(Backend::Postgres), 3);
        assert_eq!(three.workers(Backend::Files), 3);
    }
}
