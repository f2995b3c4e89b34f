//! The command-line front end: flag parsing lives in `main.rs`; each subcommand is a module.
