//! The `compactd` binary: parse flags, load the one configuration, set up logging
//! (`cli::logging`: never stdout, which carries protocol bytes for `stdio`, `connect` and
//! `mcp`), hand off to `cli`.
//!
//! The daemon logs at `info` by default (connections, sessions opened and closed, each
//! compaction, hook waits and failures); one-shot commands at `warn`; `top` not at all (its
//! terminal view is on the same screen). `COMPACTD_LOG` or the config's `log.level` change it.

use clap::Parser;

fn main() {
    let cli = compactd::cli::Cli::parse();
    let mut config = match compactd::config::Config::load(cli.config.as_deref()) {
        Ok(c) => c,
        // `doctor` reports a configuration that does not load, with what to do about it.
        Err(_) if matches!(cli.command, compactd::cli::Command::Doctor { .. }) => {
            compactd::config::Config::default()
        }
        // `status` and `stop` need only the socket: a broken edit must not leave the running
        // daemon (started with the config that worked) unreachable.
        Err(e) if compactd::cli::needs_only_the_socket(&cli.command) => {
            compactd::print_err!(
                "{e}\n(the rest of the configuration is not needed here: going on with its socket)"
            );
            compactd::config::Config {
                socket: compactd::config::socket_despite_errors(cli.config.as_deref()),
                ..Default::default()
            }
        }
        Err(e) => {
            compactd::print_err!("{e}");
            std::process::exit(compactd::cli::EXIT_USAGE);
        }
    };
    if let Err(e) = compactd::cli::logging::check_env() {
        compactd::print_err!("{e}");
        std::process::exit(compactd::cli::EXIT_USAGE);
    }
    if let Some(format) = cli.log_format {
        config.log.format = format;
    }
    config.log.flag_level =
        compactd::cli::logging::flag_level(cli.verbose, cli.quiet).map(str::to_owned);
    let tag = compactd::cli::log_tag(&cli.command, &config);
    let guards =
        compactd::cli::logging::init(&config, compactd::cli::log_mode(&cli.command), tag.as_ref());
    let code = compactd::cli::run(cli, config);
    drop(guards);
    std::process::exit(code);
}
