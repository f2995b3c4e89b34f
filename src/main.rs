//! The `compactd` binary: parse flags, load the one configuration, set up logging (stderr or the
//! configured file; never stdout, which carries protocol bytes for `stdio`), hand off to `cli`.
//!
//! The daemon logs at `info` by default (connections, sessions opened and closed, each
//! compaction, hook waits and failures); `inspect` and `compact` at `warn`; `top` not at all
//! (its terminal view is on the same screen). `COMPACTD_LOG` or the config's `log.level` change
//! it.

use clap::Parser;

/// `default`: the level when neither `COMPACTD_LOG` nor the config sets one.
///
/// Log lines go through a bounded, lossy background writer: a log reader that stalls (a full
/// stderr pipe nobody drains, a slow disk) loses log lines instead of stalling every client of
/// the daemon. The returned guard flushes what is queued when dropped.
fn init_logging(
    config: &compactd::config::Config,
    default: &str,
) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = std::env::var("COMPACTD_LOG")
        .ok()
        .or_else(|| config.log.level.clone())
        .unwrap_or_else(|| default.into());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let file = config.log.file.as_ref().and_then(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                eprintln!(
                    "compactd: cannot open log file {}: {e}; logging to stderr",
                    path.display()
                )
            })
            .ok()
    });
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let lossy = tracing_appender::non_blocking::NonBlockingBuilder::default().lossy(true);
    match file {
        Some(f) => {
            let (writer, guard) = lossy.finish(f);
            builder.with_ansi(false).with_writer(writer).init();
            guard
        }
        None => {
            // Colour only for a person at a terminal: never in an editor's log buffer, a pipe
            // or a file, and never when NO_COLOR is set (https://no-color.org).
            let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            let (writer, guard) = lossy.finish(std::io::stderr());
            builder.with_ansi(colour).with_writer(writer).init();
            guard
        }
    }
}

fn main() {
    let cli = compactd::cli::Cli::parse();
    let config = match compactd::config::Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("compactd: {e}");
            std::process::exit(compactd::cli::EXIT_USAGE);
        }
    };
    // The daemon reports what it does at `info`; one-shot commands print their own output and
    // log only problems.
    let default_level = match cli.command {
        compactd::cli::Command::Serve { .. } | compactd::cli::Command::Stdio { .. } => "info",
        // A log line on stderr would tear the terminal view; `top` reports in its event pane.
        compactd::cli::Command::Top { .. } => "off",
        _ => "warn",
    };
    let guard = init_logging(&config, default_level);
    let code = compactd::cli::run(cli, config);
    drop(guard);
    std::process::exit(code);
}
