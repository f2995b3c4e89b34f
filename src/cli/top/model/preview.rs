//! `previewCompaction` as the view shows it: what would be summarized and what kept.

use serde_json::Value;

use super::format::tokens;

/// A `previewCompaction` shown for a session.
#[derive(Debug, Clone, PartialEq)]
pub enum Preview {
    Loading,
    Ready(Vec<String>),
    Failed(String),
}

/// The lines of a `previewCompaction` answer: what would be summarized and what kept.
pub fn preview_lines(v: &Value) -> Vec<String> {
    if let Some(why) = v.get("nothingToCompact").and_then(Value::as_str) {
        return vec![format!("Nothing to compact: {why}")];
    }
    let stats = |k: &str| {
        let s = v.get(k);
        (
            s.and_then(|s| s.get("count"))
                .and_then(Value::as_u64)
                .unwrap_or(0),
            s.and_then(|s| s.get("estimatedTokens"))
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
        )
    };
    let mut out = Vec::new();
    if let Some(t) = v.get("tokensBefore").and_then(Value::as_f64) {
        out.push(format!("Context now: {} tokens", tokens(t)));
    }
    let (n, t) = stats("summarize");
    let previous = if v.get("hasPreviousSummary") == Some(&Value::Bool(true)) {
        ", updating the previous summary"
    } else {
        ""
    };
    out.push(format!(
        "Summarize: {n} messages, ~{} tokens{previous}",
        tokens(t)
    ));
    if v.get("isSplitTurn") == Some(&Value::Bool(true)) {
        let (n, t) = stats("turnPrefix");
        out.push(format!(
            "Split turn: its first {n} messages (~{} tokens) are summarized apart",
            tokens(t)
        ));
    }
    let (n, t) = stats("kept");
    out.push(format!(
        "Keep verbatim: {n} messages, ~{} tokens, from entry {}",
        tokens(t),
        v.get("firstKeptEntryId")
            .and_then(Value::as_str)
            .unwrap_or("?")
    ));
    let files = |k: &str| -> Vec<String> {
        crate::json::strings(v.get("fileLists").and_then(|f| f.get(k)))
    };
    for (label, key) in [
        ("Files read", "readFiles"),
        ("Files modified", "modifiedFiles"),
    ] {
        let list = files(key);
        if list.is_empty() {
            continue;
        }
        const SHOWN: usize = 6;
        let more = list.len().saturating_sub(SHOWN);
        let mut line = format!(
            "{label}: {}",
            list.iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
        if more > 0 {
            line += &format!(" (+{more} more)");
        }
        out.push(line);
    }
    if let Some(s) = v.get("settings") {
        out.push(format!(
            "Settings: reserveTokens {}, keepRecentTokens {}",
            s.get("reserveTokens").and_then(Value::as_i64).unwrap_or(0),
            s.get("keepRecentTokens")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ));
    }
    out
}
