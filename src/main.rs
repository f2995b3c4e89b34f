//! The `compactd` binary: parse flags, load the one configuration, set up logging (stderr or the
//! configured file; never stdout, which carries protocol bytes for `stdio`), hand off to `cli`.

use clap::Parser;

fn init_logging(config: &compactd::config::Config) {
    let filter = std::env::var("COMPACTD_LOG")
        .ok()
        .or_else(|| config.log.level.clone())
        .unwrap_or_else(|| "warn".into());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
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
        None => builder.with_writer(std::io::stderr).init(),
    }
}

fn main() {
    let cli = compactd::cli::Cli::parse();
    let config = match compactd::config::Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("compactd: {e}");
            std::process::exit(2);
        }
    };
    init_logging(&config);
    std::process::exit(compactd::cli::run(cli, config));
}
