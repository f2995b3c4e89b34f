//! The `compactd` binary: parse flags, load the one configuration, set up logging (stderr or the
//! configured file; never stdout, which carries protocol bytes for `stdio`), hand off to `cli`.
//!
//! The daemon logs at `info` by default (connections, sessions opened and closed, each
//! compaction, hook waits and failures); `inspect` and `compact` at `warn`. `COMPACTD_LOG` or
//! the config's `log.level` change it.

use clap::Parser;

/// `default`: the level when neither `COMPACTD_LOG` nor the config sets one.
fn init_logging(config: &compactd::config::Config, default: &str) {
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
    match file {
        Some(f) => builder
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(f))
            .init(),
        None => {
            // Colour only for a person at a terminal: never in an editor's log buffer, a pipe
            // or a file, and never when NO_COLOR is set (https://no-color.org).
            let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            builder
                .with_ansi(colour)
                .with_writer(std::io::stderr)
                .init()
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
        _ => "warn",
    };
    init_logging(&config, default_level);
    std::process::exit(compactd::cli::run(cli, config));
}
