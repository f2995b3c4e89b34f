//! Pi's identifier and timestamp formats (sessions.md §3, §4.1).

use std::collections::HashSet;

/// An entry's `id` or `parentId`. Pi's ids are 8 hex digits (a session's header id is a
/// UUID), so they are kept inline, within the 24 bytes a `String` takes, and reading a 72k-entry
/// session allocates nothing for them; the tree's id index then compares ids without
/// following a pointer per entry. Longer ids are kept on the heap.
pub type EntryId = compact_str::CompactString;

/// A new entry id: the first 8 hex characters of a random UUIDv4, redrawn (up to 100 times) until
/// it is not in `taken`, then a full 36-character UUIDv4 as Pi falls back to.
pub fn new_entry_id<F>(is_taken: F) -> String
where
    F: Fn(&str) -> bool,
{
    for _ in 0..100 {
        let full = uuid::Uuid::new_v4().to_string();
        let short = &full[..8];
        if !is_taken(short) {
            return short.to_owned();
        }
    }
    uuid::Uuid::new_v4().to_string()
}

/// Draws ids for a batch (migration), unique within the batch.
pub fn new_entry_id_in(taken: &mut HashSet<String>) -> String {
    let id = new_entry_id(|c| taken.contains(c));
    taken.insert(id.clone());
    id
}

/// A new session id (UUIDv7, lowercase hex).
pub fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// `new Date(ms).toISOString()`: `YYYY-MM-DDTHH:mm:ss.sssZ`, UTC.
pub fn iso_timestamp(epoch_ms: i64) -> String {
    match chrono::DateTime::<chrono::Utc>::from_timestamp_millis(epoch_ms) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => "1970-01-01T00:00:00.000Z".to_owned(),
    }
}

/// The current wall clock in epoch milliseconds.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `Date.parse(ts)` for the ISO forms Pi writes: epoch milliseconds, or `None` (JS `NaN`, which
/// JSON prints as `null`) when the string is not a date. Accepts RFC 3339 with any offset, a
/// missing seconds fraction, and a bare date (UTC), as `Date.parse` does.
pub fn parse_iso_ms(ts: &str) -> Option<i64> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) {
        return Some(t.timestamp_millis());
    }
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%dT%H:%M:%S%.f") {
        return Some(t.and_utc().timestamp_millis());
    }
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%dT%H:%M") {
        return Some(t.and_utc().timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(ts, "%Y-%m-%d") {
        return d
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc().timestamp_millis());
    }
    None
}

/// `Date.parse` of an entry's `timestamp` field: strings are parsed, numbers are taken as epoch
/// milliseconds (as `new Date(number)`), anything else is `NaN`.
pub fn timestamp_value_ms(v: Option<&serde_json::Value>) -> Option<i64> {
    match v {
        Some(serde_json::Value::String(s)) => parse_iso_ms(s),
        Some(serde_json::Value::Number(n)) => n.as_f64().map(|f| f as i64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_eight_hex_and_avoid_taken() {
        let id = new_entry_id(|_| false);
        assert_eq!(id.len(), 8);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let full = new_entry_id(|_| true);
        assert_eq!(full.len(), 36);
    }

    #[test]
    fn iso_round_trip() {
        assert_eq!(iso_timestamp(1767689201745), "2026-01-06T08:46:41.745Z");
        assert_eq!(
            parse_iso_ms("2026-01-06T08:46:41.745Z"),
            Some(1767689201745)
        );
        assert_eq!(parse_iso_ms("2026-01-06T08:46:41Z"), Some(1767689201000));
        assert_eq!(parse_iso_ms("not a date"), None);
    }
}
