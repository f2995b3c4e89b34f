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

/// How many files of each list the `top` pane shows (the rest counted); `compactd preview`
/// lists them all.
pub const FILES_IN_PANE: usize = 6;

/// The lines of a `previewCompaction` answer: what would be summarized and what kept, the
/// files, the settings, and what compacting now would save and cost. At most `files_shown`
/// files of each list (`None`: all of them).
pub fn preview_lines(v: &Value, files_shown: Option<usize>) -> Vec<String> {
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
        let shown = files_shown.unwrap_or(list.len());
        let more = list.len().saturating_sub(shown);
        let mut line = format!(
            "{label}: {}",
            list.iter()
                .take(shown)
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
    if let Some(e) = v.get("economics") {
        out.extend(economics_lines(e));
    }
    out
}

/// What compacting now would save and cost (`economics`).
fn economics_lines(e: &Value) -> Vec<String> {
    let n = |k: &str| e.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    let priced = |k: &str| {
        e.get("usd")
            .and_then(|u| u.get(k))
            .and_then(Value::as_f64)
            .map(|d| format!("${d:.4}"))
    };
    let dollars = |k: &str| priced(k).unwrap_or_else(|| "no price configured".to_owned());
    let mut out = vec![
        format!(
            "After: ~{} tokens (summary and kept tail), ~{} fewer on every request{}",
            tokens(n("estimatedTokensAfter")),
            tokens(n("savedTokensPerRequest")),
            priced("savedPerRequest").map_or_else(String::new, |d| format!(" ({d} a request)"))
        ),
        format!(
            "Summarizer input: ~{} tokens ({})",
            tokens(n("summarizationInputTokens")),
            dollars("summarization")
        ),
    ];
    out.push(if e.get("cacheWarm") == Some(&Value::Bool(true)) {
        format!(
            "Prompt cache: warm; the next request writes ~{} tokens again ({})",
            tokens(n("cacheRewriteTokens")),
            dollars("cacheRewrite")
        )
    } else {
        "Prompt cache: cold; compacting now costs no cache".to_owned()
    });
    out.push(match e.get("breakEvenRequests").and_then(Value::as_u64) {
        Some(1) => "Pays for itself: after 1 request".to_owned(),
        Some(r) => format!("Pays for itself: after {r} requests"),
        None => "Pays for itself: unknown (it needs the prices of both models)".to_owned(),
    });
    out
}
