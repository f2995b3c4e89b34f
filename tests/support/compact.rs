//! Compacting a session file in a test through the daemon's own path, as `compactd compact`
//! does: a daemon of this process (`compactd::cli::via_daemon::in_process`), the file opened in
//! it, `compact` called. There is no other way to compact a file, so a test sees what users get.
#![allow(dead_code)]

use std::path::Path;

use compactd::transport::client::Refusal;
use serde_json::{json, Value};

use compactd::compaction::tokens::CompactionSettings;

/// What a compaction of a file gave: the protocol's result and the entry appended (the file's
/// last line), or the daemon's refusal.
pub struct Compacted {
    pub result: Value,
    pub entry: Value,
}

/// Compacts `file` with `settings` and Pi's behaviour otherwise (no recall footer, no
/// speculation; the summarizer `config` names), in a daemon of this process.
pub async fn compact_file(
    config: compactd::config::Config,
    file: &Path,
    settings: &CompactionSettings,
    custom_instructions: Option<&str>,
) -> Result<Compacted, Refusal> {
    let open = compactd::cli::via_daemon::in_process(config, file).await?;
    open.call("setSettingsOverrides", pi_exact(settings))
        .await?;
    let result = open
        .call(
            "compact",
            json!({ "customInstructions": custom_instructions }),
        )
        .await?;
    // Closed before the daemon goes: the file's lock is released when the reply comes, not
    // when a runtime gets round to the dropped connection (a caller's next compaction of the
    // same file, a new daemon of this process on a current-thread runtime, would find it still
    // locked). Closed once: a second close is refused (the session is unknown by then).
    open.call("closeSession", json!({})).await?;
    let entry = last_line(&std::fs::read(file).unwrap_or_default());
    Ok(Compacted { result, entry })
}

/// A daemon configuration whose summarizer is `model` (its key given as on the command line),
/// with no retries; `redact` says whether the transcript is redacted before it is sent.
pub fn config_for(
    model: &compactd::summarizer::ModelSpec,
    redact: bool,
) -> compactd::config::Config {
    let text = config_text(
        model,
        redact,
        compactd::pi_version::PiVersion::default(),
        None,
    );
    let mut config = compactd::config::Config::from_toml(&text, Path::new("test.toml"))
        .expect("the summarizer's configuration");
    config.summarizer.api_key = model.api_key.clone().map(compactd::config::GivenKey);
    config
}

/// [`config_for`] as a configuration file's text, sessions following `version`'s rules, the key
/// read from the variable `key_env` when given.
pub fn config_text(
    model: &compactd::summarizer::ModelSpec,
    redact: bool,
    version: compactd::pi_version::PiVersion,
    key_env: Option<&str>,
) -> String {
    let key = key_env.map_or(String::new(), |v| format!("api_key_env = \"{v}\"\n"));
    format!(
        "[summarizer]\nprovider = \"{}\"\nbase_url = \"{}\"\nmodel = \"{}\"\nmax_tokens = {}\ncontext_window = {}\nreasoning = {}\n{key}[summarizer.retry]\nenabled = false\n[redaction]\nenabled = {redact}\n[compat]\npi_version = \"{}\"\n",
        model.api.as_str(),
        model.base_url,
        model.id,
        model.max_tokens,
        model.context_window,
        model.reasoning,
        version.as_str(),
    )
}

/// `setSettingsOverrides`' params for `settings` with every addition beyond Pi that changes
/// what is written turned off (the recall footer, speculation).
pub fn pi_exact(settings: &CompactionSettings) -> Value {
    json!({
        "compaction": {
            "reserveTokens": settings.reserve_tokens,
            "keepRecentTokens": settings.keep_recent_tokens,
            "recallFooter": false,
            "speculativeAt": 0,
        }
    })
}

/// The last line of a session file, parsed (the entry a compaction appended).
pub fn last_line(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null)
}
