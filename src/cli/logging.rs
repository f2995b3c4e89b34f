//! Where each command logs. Never stdout: it carries protocol bytes (`stdio`, `connect`, `mcp`)
//! or command output.
//!
//! - A daemon on a socket (`serve`): stderr (a service manager's journal, a terminal), or the
//!   configured `log.file`. A daemon that `connect`/`start` launched in the background has its
//!   stderr pointed at the log file by the launcher.
//! - Under an editor or agent host (`stdio`, `connect`, `mcp`): the configured `log.file`, else
//!   [`default_log_file`]. stderr carries only real errors (`error` lines), because editors show
//!   a server's stderr as errors (Neovim tags each line `[ERROR]` in `lsp.log`). A client that
//!   wants the log in its own view asks for `window/logMessage` notifications instead
//!   (`initialize {logNotifications: true}`, see `daemon::log_relay`).
//! - One-shot commands (`inspect`, `compact`, `service`, `start`): stderr, warnings only.
//!
//! Log lines go through a bounded, lossy background writer: a log reader that stalls (a full
//! stderr pipe nobody drains, a slow disk) loses log lines instead of stalling every client of
//! the daemon.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{filter::LevelFilter, EnvFilter, Layer};

/// How a command logs (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// `serve`: stderr or `log.file`, `info`.
    Daemon,
    /// `stdio`, `connect`, `mcp`: `log.file` or the default file, `info`; stderr errors only.
    Editor,
    /// Everything else: stderr, `warn`.
    OneShot,
    /// `top`: nothing (a log line on stderr would tear its terminal view; it reports in its
    /// event pane).
    Silent,
}

impl LogMode {
    fn default_level(self) -> &'static str {
        match self {
            LogMode::Daemon | LogMode::Editor => "info",
            LogMode::OneShot => "warn",
            LogMode::Silent => "off",
        }
    }
}

/// `$XDG_STATE_HOME/compactd/compactd.log`, else `~/.local/state/compactd/compactd.log` (the
/// XDG base directory default), else `<tmp>/compactd-<uid>/compactd.log` without a home.
pub fn default_log_file() -> PathBuf {
    let state = crate::config::xdg_dir("XDG_STATE_HOME", ".local/state");
    match state {
        Some(dir) => dir.join("compactd").join("compactd.log"),
        None => crate::transport::unix::default_socket_dir().join("compactd.log"),
    }
}

/// The file this process's stderr is, when it is a regular file (a daemon started on demand
/// has its stderr appended to the log file); `None` for a terminal, a pipe or a socket.
pub fn stderr_file() -> Option<PathBuf> {
    let path = std::fs::read_link("/proc/self/fd/2").ok()?;
    std::fs::metadata(&path)
        .is_ok_and(|m| m.is_file())
        .then_some(path)
}

/// The log file a command of `mode` writes: the configured one, or for editors the default.
pub fn log_file(config: &crate::config::Config, mode: LogMode) -> Option<PathBuf> {
    match (&config.log.file, mode) {
        (Some(f), LogMode::Daemon | LogMode::Editor) => Some(f.clone()),
        (None, LogMode::Editor) => Some(default_log_file()),
        _ => None,
    }
}

/// Opens `path` for appending, creating its directory (mode 0700) when missing.
pub fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Checks `COMPACTD_LOG` before anything logs: a filter that does not parse (or a misspelt
/// level, see [`crate::config::check_log_filter`]) used to fall back to the default silently,
/// so whoever set it never learnt why nothing changed. The error names the variable and why.
pub fn check_env() -> Result<(), String> {
    let Some(spec) = std::env::var_os("COMPACTD_LOG") else {
        return Ok(());
    };
    let Some(text) = spec.to_str() else {
        return Err(format!("COMPACTD_LOG {spec:?} is not UTF-8"));
    };
    crate::config::check_log_filter(text).map_err(|e| format!("COMPACTD_LOG {text:?}: {e}"))
}

fn filter(config: &crate::config::Config, default: &str) -> EnvFilter {
    let spec = config
        .log
        .flag_level
        .clone()
        .or_else(|| std::env::var("COMPACTD_LOG").ok())
        .or_else(|| config.log.level.clone())
        .unwrap_or_else(|| default.into());
    let filter = EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new(default));
    quieter_mcp_library(filter, &spec)
}

/// The MCP library (`rmcp`) logs its own bookkeeping at `info`: every handshake and
/// notification with whole Rust structs. Those lines are for debugging the MCP server, so they
/// appear from `debug` on: at the `info` level, `rmcp` logs warnings and errors only. A filter
/// that names `rmcp` itself is left as it is.
fn quieter_mcp_library(filter: EnvFilter, spec: &str) -> EnvFilter {
    if spec.contains("rmcp") || filter.max_level_hint() != Some(LevelFilter::INFO) {
        return filter;
    }
    match "rmcp=warn".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}

/// The level `-v` (`count` times) or `-q` ask for: `-q` errors only, `-v` debug, `-vv` and more
/// trace; `None` without either, so the mode's default, `COMPACTD_LOG` and `[log] level` apply.
pub fn flag_level(verbose: u8, quiet: bool) -> Option<&'static str> {
    match (quiet, verbose) {
        (true, _) => Some("error"),
        (false, 0) => None,
        (false, 1) => Some("debug"),
        (false, _) => Some("trace"),
    }
}

/// Colour only for a person at a terminal: never in an editor's log buffer, a pipe or a file,
/// and never when NO_COLOR is set (https://no-color.org).
fn stderr_colour() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Field values made printable ([`super::printable::line`]): a log line quotes what clients
/// and sessions sent (paths, ids, methods, a provider's error), and its control characters
/// would reach the terminal of whoever reads stderr. tracing-subscriber escapes ESC and BEL in
/// the message only, not in other fields, nor CR, nor the rest of C0. Fields are formatted as
/// usual, without colour, then escaped; the level keeps its colour.
struct PrintableFields;

impl<'writer> tracing_subscriber::fmt::FormatFields<'writer> for PrintableFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        use tracing_subscriber::fmt::format::{DefaultFields, Writer};
        let mut text = String::new();
        DefaultFields::new().format_fields(Writer::new(&mut text), fields)?;
        writer.write_str(&super::printable::line(&text))
    }
}

/// Which process wrote a line: daemons started on demand and editors' commands append to one
/// log file, so every line of theirs names its pid and socket (`pid=… socket=…`, or `stdio`).
#[derive(Debug, Clone, Default)]
pub struct Tag {
    pid: u32,
    socket: Option<PathBuf>,
}

impl Tag {
    /// This process, serving (or reaching) the daemon on `socket` (`None`: on stdio).
    pub fn new(socket: Option<PathBuf>) -> Tag {
        Tag {
            pid: std::process::id(),
            socket,
        }
    }

    fn text(&self) -> String {
        match &self.socket {
            Some(s) => format!("pid={} socket={}", self.pid, s.display()),
            None => format!("pid={} stdio", self.pid),
        }
    }

    /// The tag as JSON members, each followed by a comma (spliced after a line's `{`).
    fn json_members(&self) -> String {
        let socket = self
            .socket
            .as_ref()
            .map(|s| crate::json::stringify(&serde_json::json!(s.to_string_lossy())))
            .unwrap_or_else(|| "null".into());
        format!("\"pid\":{},\"socket\":{socket},", self.pid)
    }
}

/// The time of a text line, then the tag when there is one: `2026-… pid=… socket=…  INFO …`.
struct TaggedTime(Option<String>);

impl tracing_subscriber::fmt::time::FormatTime for TaggedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        tracing_subscriber::fmt::time::SystemTime.format_time(w)?;
        match &self.0 {
            Some(tag) => write!(w, " {tag}"),
            None => Ok(()),
        }
    }
}

/// A writer of JSON log lines that writes DEL and C1 characters as `\u` escapes
/// ([`super::printable::json`]; the JSON formatter already escapes C0), and puts the tag's
/// members first in each object.
struct PrintableJson<M>(M, Arc<str>);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for PrintableJson<M>
{
    type Writer = PrintableJson<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        PrintableJson(self.0.make_writer(), self.1.clone())
    }
}

impl<W: std::io::Write> std::io::Write for PrintableJson<W> {
    /// One event's line arrives in one write (the formatter writes its buffer at once).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => {
                let text = match text.strip_prefix('{') {
                    Some(rest) if !self.1.is_empty() => format!("{{{}{rest}", self.1),
                    _ => text.to_owned(),
                };
                self.0
                    .write_all(super::printable::json(&text).as_bytes())
                    .map(|()| buf.len())
            }
            Err(_) => self.0.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// One formatting layer over `writer`: text (coloured when `colour`) or JSON objects carrying
/// the current span and the span list (connection, request, session, compaction), boxed so
/// every subscriber shape takes either. Either way what a client or a session wrote is made
/// printable.
fn fmt_layer<S, W>(
    writer: W,
    colour: bool,
    format: crate::config::LogFormat,
    tag: Option<&Tag>,
) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    match format {
        crate::config::LogFormat::Text => tracing_subscriber::fmt::layer()
            .fmt_fields(PrintableFields)
            .with_timer(TaggedTime(tag.map(Tag::text)))
            .with_writer(writer)
            .with_ansi(colour)
            .boxed(),
        crate::config::LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(PrintableJson(
                writer,
                tag.map(Tag::json_members).unwrap_or_default().into(),
            ))
            .boxed(),
    }
}

/// Whether stderr is `file` (a daemon started on demand has its stderr appended to its log).
fn stderr_is(file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let stderr = std::fs::metadata("/dev/stderr").or_else(|_| std::fs::metadata("/proc/self/fd/2"));
    match (stderr, file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The relay to connections that asked for log lines, when the command has connections (a
/// function so each subscriber shape gets its own type).
fn relay<S>(
    on: bool,
    config: &crate::config::Config,
    default: &str,
) -> Option<tracing_subscriber::filter::Filtered<crate::daemon::log_relay::RelayLayer, EnvFilter, S>>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    on.then(|| crate::daemon::log_relay::RelayLayer.with_filter(filter(config, default)))
}

/// Installs the logger of `mode`; the returned guards flush what is queued when dropped. `tag`:
/// the process's pid and socket, put on every line (daemons and editors' commands, which share
/// log files).
pub fn init(config: &crate::config::Config, mode: LogMode, tag: Option<&Tag>) -> Vec<WorkerGuard> {
    let default = mode.default_level();
    let format = config.log.format;
    let lossy = || NonBlockingBuilder::default().lossy(true);
    let mut guards = Vec::new();
    let file = log_file(config, mode).and_then(|path| {
        open_log(&path)
            .map_err(|e| {
                crate::print_err!(
                    "cannot open log file {}: {e}; logging {} to stderr",
                    path.display(),
                    if mode == LogMode::Editor {
                        "errors only"
                    } else {
                        "everything"
                    }
                )
            })
            .ok()
    });
    // The relay sends log lines to connections that asked (daemons only have connections).
    let relays = mode != LogMode::OneShot;
    let (stderr, guard) = lossy().finish(std::io::stderr());
    guards.push(guard);
    let colour = stderr_colour();
    match (file, mode) {
        (Some(f), _) => {
            // With a file, stderr keeps real errors for an editor and for a person who ran
            // `serve` (but not when stderr is that file: each event is written once).
            let errors_to_stderr = match mode {
                LogMode::Editor => true,
                LogMode::Daemon => !stderr_is(&f),
                _ => false,
            };
            let (writer, guard) = lossy().finish(f);
            guards.push(guard);
            let file_layer =
                fmt_layer(writer, false, format, tag).with_filter(filter(config, default));
            let stderr_layer = errors_to_stderr
                .then(|| fmt_layer(stderr, colour, format, tag).with_filter(LevelFilter::ERROR));
            tracing_subscriber::registry()
                .with(file_layer)
                .with(stderr_layer)
                .with(relay(relays, config, default))
                .init();
        }
        (None, LogMode::Editor) => {
            tracing_subscriber::registry()
                .with(fmt_layer(stderr, colour, format, tag).with_filter(LevelFilter::ERROR))
                .with(relay(relays, config, default))
                .init();
        }
        (None, _) => {
            tracing_subscriber::registry()
                .with(fmt_layer(stderr, colour, format, tag).with_filter(filter(config, default)))
                .with(relay(relays, config, default))
                .init();
        }
    }
    guards
}
