//! `compactd top --once`: one snapshot as plain aligned columns (no escape codes), for scripts
//! and tests. Every cell is one word (`-` when empty), so `awk '{print $1, $8}'` works; token
//! counts are exact integers.

use super::model::{self, Row};

/// The column headers, in order.
pub const HEADERS: [&str; 15] = [
    "SID",
    "SESSION",
    "MODEL",
    "TOKENS",
    "THRESHOLD",
    "WINDOW",
    "USED",
    "STATE",
    "COMPACTED",
    "BEFORE",
    "AFTER",
    "BY",
    "TOOK",
    "COST",
    "HANDOFF",
];

fn int(v: Option<f64>) -> String {
    v.map(|t| format!("{}", t.round() as i64))
        .unwrap_or_else(|| "-".into())
}

/// One cell: whitespace runs joined by `_`, and made printable (model ids, cwds, session ids
/// and summarizer names come from sessions and clients, and may hold escape sequences).
fn word(s: &str) -> String {
    if s.is_empty() {
        return "-".into();
    }
    let joined = s.split_whitespace().collect::<Vec<_>>().join("_");
    crate::cli::printable::line(&joined).into_owned()
}

/// The cells of one row, in [`HEADERS`] order.
pub fn cells(r: &Row) -> [String; 15] {
    let last = r.last.as_ref();
    [
        word(&r.session_id),
        word(&r.name),
        word(r.model.as_deref().unwrap_or("")),
        int(r.tokens),
        int(r.threshold),
        r.window
            .map(|w| w.to_string())
            .unwrap_or_else(|| "-".into()),
        r.percent()
            .map(|p| format!("{p:.1}%"))
            .unwrap_or_else(|| "-".into()),
        word(&r.state.word()),
        match (last, r.last_age_ms) {
            (Some(_), Some(age)) => format!("{}-ago", model::age(age)),
            (Some(_), None) => "yes".into(),
            (None, _) => "-".into(),
        },
        int(last.and_then(|l| l.tokens_before)),
        int(last.and_then(|l| l.tokens_after)),
        word(last.and_then(|l| l.summarizer.as_deref()).unwrap_or("")),
        last.and_then(|l| l.duration_ms)
            .map(model::duration)
            .unwrap_or_else(|| "-".into()),
        last.and_then(|l| l.cost)
            .map(model::cost)
            .unwrap_or_else(|| "-".into()),
        last.and_then(|l| l.handoff)
            .map(model::handoff)
            .unwrap_or_else(|| "-".into()),
    ]
}

/// The table: a header line and one line per row, columns two spaces apart, no trailing
/// spaces.
pub fn table(rows: &[Row]) -> String {
    let lines: Vec<[String; 15]> = std::iter::once(HEADERS.map(str::to_owned))
        .chain(rows.iter().map(cells))
        .collect();
    let mut widths = [0usize; 15];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            let pad = widths[i] - cell.chars().count();
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::model::TopModel;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_snapshot_prints_as_aligned_words() {
        let mut m = TopModel::new();
        m.connected(0, "/s");
        m.apply_snapshot(
            &json!([
                {"sessionId": "s1", "path": "/p/2026-01-01T00-00-00-000Z_1-aaaaaaaa.jsonl", "cwd": "/w/api",
                 "model": {"provider": "a", "id": "m1", "contextWindow": 10000, "maxTokens": 1},
                 "isCompacting": false, "contextTokens": 4200, "threshold": 8000, "autoCompaction": "on",
                 "lastCompaction": {"entryId": "c", "timestamp": "1970-01-01T00:00:01.000Z", "tokensBefore": 9000,
                                    "tokensAfter": 4000, "summarizer": "extractive", "durationMs": 1500,
                                    "handoffScore": 0.857}},
                {"sessionId": "s2", "path": "/p/notes.jsonl", "cwd": null, "isCompacting": true,
                 "contextTokens": 10, "autoCompaction": "paused",
                 "currentCompaction": {"reason": "manual", "startedAt": "x", "elapsedMs": 300}}
            ]),
            61_000,
        )
        .unwrap();
        let text = table(&m.rows("", 61_000));
        assert_eq!(
            text,
            "\
SID  SESSION       MODEL  TOKENS  THRESHOLD  WINDOW  USED   STATE                    COMPACTED  BEFORE  AFTER  BY          TOOK  COST  HANDOFF
s1   api/aaaaaaaa  m1     4200    8000       10000   42.0%  idle                     1m-ago     9000    4000   extractive  1.5s  free  86%
s2   p/notes       -      10      -          -       -      compacting:manual:300ms  -          -       -      -           -     -     -
"
        );
        assert!(!text.contains('\u{1b}'), "no escape codes");
        assert_eq!(table(&[]), format!("{}\n", HEADERS.join("  ")));
    }
}
