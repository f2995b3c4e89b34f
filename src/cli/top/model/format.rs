//! How numbers, ids and names read in both views (the terminal and `--once`).

use super::session::Cost;

/// A session's display name: the cwd's last component and the file, shortened. Pi names files
/// `<timestamp>_<uuid>.jsonl` with a time-ordered uuid (v7), whose first characters are the
/// same for sessions made within a minute: its last 8 (random) characters identify it.
pub fn session_name(cwd: Option<&str>, path: &str) -> String {
    let path = std::path::Path::new(path);
    let dir = cwd
        .map(std::path::Path::new)
        .or_else(|| path.parent())
        .and_then(|d| d.file_name())
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match stem.rsplit_once('_') {
        Some((_, uuid)) if uuid.len() >= 8 && uuid.is_char_boundary(uuid.len() - 8) => {
            uuid[uuid.len() - 8..].to_owned()
        }
        _ => ellipsize(&stem, 16),
    };
    format!("{dir}/{file}")
}

/// `s` cut to `max` characters, with `…` at the cut.
pub fn ellipsize(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// An entry id as shown: its first 8 characters.
pub fn short_id(id: &str) -> &str {
    match id.char_indices().nth(8) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

/// A token count: `950`, `4.1k`, `183.6k`, `1.25M`.
pub fn tokens(t: f64) -> String {
    let a = t.abs();
    if a < 1000.0 {
        format!("{}", t.round() as i64)
    } else if a < 1_000_000.0 {
        format!("{:.1}k", t / 1000.0)
    } else {
        format!("{:.2}M", t / 1_000_000.0)
    }
}

/// A duration: `830ms`, `1.2s`, `2m05s`.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// An age: `now`, `12s`, `5m`, `3h`, `2d`.
pub fn age(ms: i64) -> String {
    let s = ms / 1000;
    if s < 1 {
        "now".into()
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 86_400 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86_400)
    }
}

/// A cost: `free`, `$0.0123`, or `$?` when the model's prices are unknown.
pub fn cost(c: Cost) -> String {
    match c {
        Cost::Usd(0.0) => "free".into(),
        Cost::Usd(usd) if usd < 1.0 => format!("${usd:.4}"),
        Cost::Usd(usd) => format!("${usd:.2}"),
        Cost::Unpriced => "$?".into(),
    }
}

/// ` 1.2k` after `sep`, or nothing when the count is unknown.
pub(super) fn opt_tokens(t: Option<f64>, sep: &str) -> String {
    t.map(|t| format!("{sep}{}", tokens(t))).unwrap_or_default()
}

/// A token count, or `?` when it is unknown.
pub(super) fn opt_or_dash(t: Option<f64>) -> String {
    t.map(tokens).unwrap_or_else(|| "?".into())
}

/// A handoff score as a share: `86%`.
pub fn handoff(score: f64) -> String {
    format!("{}%", (score * 100.0).round() as i64)
}

/// How the event pane states a compaction's handoff check: `, handoff 86% (1 missing, 1
/// repaired)`.
pub fn handoff_note(r: &crate::handoff::Report) -> String {
    let mut note = format!(", handoff {}", handoff(r.score));
    let mut said = Vec::new();
    if !r.missing.is_empty() {
        said.push(format!("{} missing", r.missing.len()));
    }
    if r.repaired > 0 {
        said.push(format!("{} repaired", r.repaired));
    }
    if !said.is_empty() {
        note.push_str(&format!(" ({})", said.join(", ")));
    }
    note
}
