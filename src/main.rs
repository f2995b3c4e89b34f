//! The `compactd` binary: parse flags, set up logging to stderr, hand off to `cli`.

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("COMPACTD_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = compactd::cli::Cli::parse();
    std::process::exit(compactd::cli::run(cli));
}
