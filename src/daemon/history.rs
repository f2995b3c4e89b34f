//! History recall (beyond Pi): `searchHistory` finds text in every entry of a session, the ones
//! a compaction summarized away included, and `getEntry` returns an entry as stored, so an agent
//! can get back exact text a summary dropped (file contents, error output, a user's wording).
//! The file is append-only, so nothing compaction "drops" is ever gone: this makes it reachable.

use serde_json::Value;

use super::handlers::Ctx;
use crate::rpc::errors::{ErrorKind, RpcError};
use crate::rpc::results::{HistoryHit, HistoryHits, SessionEntry};
use crate::rpc::types::{GetEntryParams, SearchHistoryParams};
use crate::session::{Entry, EntryKind};

/// Default and largest number of hits returned.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 1000;
/// Characters of context on each side of a match in a snippet.
const SNIPPET_SIDE: usize = 80;
/// Compiled-size cap of a client regex, so a hostile pattern cannot exhaust memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// The longest query searched, in characters: a literal query's compiled form grows with it
/// (a 100 KB one exceeded the regex size limit, with an error naming the limit, not the query).
const MAX_QUERY_CHARS: usize = 4096;

/// Keys whose string values are identifiers or bookkeeping, not text anyone would look for.
const SKIPPED_KEYS: [&str; 15] = [
    "type",
    "role",
    "id",
    "parentId",
    "timestamp",
    "toolCallId",
    "api",
    "provider",
    "model",
    "modelId",
    "stopReason",
    "signature",
    "thinkingSignature",
    "firstKeptEntryId",
    "targetId",
];

/// The searchable text of an entry: its string values (message text, tool calls and results,
/// bash commands and output, summaries, custom data), one per line. Also what the recall tools
/// (`compactd mcp`, the Pi extension) show a model of an entry.
pub fn entry_text(v: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                if !out.is_empty() {
                    out.push('\n');
                }
                // A part nested past what is held as a value is its JSON text (`json::deep`).
                out.push_str(crate::json::deep::text(s).unwrap_or(s));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => {
                for (k, x) in o {
                    if !SKIPPED_KEYS.contains(&k.as_str()) {
                        walk(x, out);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = String::new();
    walk(v, &mut out);
    out
}

/// [`entry_text`] read straight from an entry's line bytes, without building its value tree:
/// a `Value` of a large message costs 7-20x the line, and the search used to build one per
/// entry. Strings are visited in file order (as the value's order), skipped keys' subtrees are
/// never materialised. `None` when the bytes cannot be read this way (a lone surrogate, a line
/// nested past serde_json's limit); the caller then takes the value path.
fn entry_text_streamed(raw: &[u8]) -> Option<String> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Walk<'o>(&'o mut String);
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_str<E>(self, s: &str) -> Result<(), E> {
            if !self.0.is_empty() {
                self.0.push('\n');
            }
            self.0.push_str(s);
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Walk(&mut *self.0))?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if SKIPPED_KEYS.contains(&key.as_ref()) {
                    map.next_value::<IgnoredAny>()?;
                } else {
                    map.next_value_seed(Walk(&mut *self.0))?;
                }
            }
            Ok(())
        }
    }
    let mut out = String::new();
    let mut de = serde_json::Deserializer::from_slice(raw);
    Walk(&mut out).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(out)
}

/// How a query matches: a regex, or a case-insensitive substring (itself a case-insensitive
/// regex of the escaped literal, so matching allocates nothing whatever the text's size: the
/// lowered copy with a char-offset table it replaced took ~17x the text).
enum Matcher {
    Regex(regex::Regex),
    Plain(regex::Regex),
}

impl Matcher {
    fn new(query: &str, regex: bool) -> Result<Matcher, RpcError> {
        if query.is_empty() {
            return Err(RpcError::invalid_params("query must not be empty"));
        }
        let chars = query.chars().count();
        if chars > MAX_QUERY_CHARS {
            return Err(RpcError::invalid_params(format!(
                "query is {chars} characters long; at most {MAX_QUERY_CHARS} can be searched"
            )));
        }
        if regex {
            regex::RegexBuilder::new(query)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map(Matcher::Regex)
                .map_err(|e| RpcError::invalid_params(format!("query is not a valid regex: {e}")))
        } else {
            regex::RegexBuilder::new(&regex::escape(query))
                .case_insensitive(true)
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map(Matcher::Plain)
                .map_err(|e| RpcError::invalid_params(format!("query is too long: {e}")))
        }
    }

    /// Byte range of the first match in `text`.
    fn find(&self, text: &str) -> Option<(usize, usize)> {
        match self {
            Matcher::Regex(r) | Matcher::Plain(r) => r.find(text).map(|m| (m.start(), m.end())),
        }
    }
}

/// The match with up to [`SNIPPET_SIDE`] characters each side, whitespace runs folded, `…`
/// marking a cut.
fn snippet(text: &str, (start, end): (usize, usize)) -> String {
    let before: String = {
        let mut b: Vec<char> = text[..start].chars().rev().take(SNIPPET_SIDE + 1).collect();
        let cut = b.len() > SNIPPET_SIDE;
        b.truncate(SNIPPET_SIDE);
        b.reverse();
        let s: String = b.into_iter().collect();
        if cut {
            format!("…{s}")
        } else {
            s
        }
    };
    let after: String = {
        let mut a: Vec<char> = text[end..].chars().take(SNIPPET_SIDE + 1).collect();
        let cut = a.len() > SNIPPET_SIDE;
        a.truncate(SNIPPET_SIDE);
        let s: String = a.into_iter().collect();
        if cut {
            format!("{s}…")
        } else {
            s
        }
    };
    let raw = format!("{before}{}{after}", &text[start..end]);
    raw.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The role a hit reports: the message's role, else the entry's type.
fn role_of(e: &Entry, v: &Value) -> String {
    if e.kind == EntryKind::Message {
        if let Some(r) = v["message"]["role"].as_str() {
            return r.to_owned();
        }
    }
    v["type"].as_str().unwrap_or("unknown").to_owned()
}

/// [`role_of`] of an entry as stored (its JSON only, as `getEntry` returns it).
pub fn entry_role(v: &Value) -> String {
    match (v["type"].as_str(), v["message"]["role"].as_str()) {
        (Some("message"), Some(role)) => role.to_owned(),
        (Some(t), _) => t.to_owned(),
        (None, _) => "unknown".to_owned(),
    }
}

/// `searchHistory`: every entry of the session (all branches, file order reversed so the most
/// recent hits come first), up to `limit` hits.
pub fn search_history(ctx: &Ctx, p: SearchHistoryParams) -> Result<HistoryHits, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let matcher = Matcher::new(&p.query, p.regex.unwrap_or(false))?;
    let limit = p
        .limit
        .map_or(DEFAULT_LIMIT, |l| (l as usize).min(MAX_LIMIT));
    // The session's lock is held only to take handles on the entries (shared, never copied)
    // and the branch: appends to the session go on while the search runs.
    let (entries, on_branch, in_context) = {
        let state = session.lock_state();
        let on_branch: std::collections::HashSet<usize> = state.branch.iter().copied().collect();
        let in_context: std::collections::HashSet<usize> = state.agent.iter().copied().collect();
        (state.tree.entries().to_vec(), on_branch, in_context)
    };
    let hits = crate::cpu::blocking(|| {
        let mut hits = Vec::new();
        for (idx, e) in entries.iter().enumerate().rev() {
            if hits.len() >= limit {
                break;
            }
            // One entry's text at a time, read from its bytes (no value tree unless it hits).
            // A line that can no longer be read is passed over; its source remembers the
            // failure, and the search reports the file changed.
            let Ok(line) = e.raw() else { continue };
            let text = match entry_text_streamed(&line) {
                Some(t) => t,
                None => entry_text(&e.value()),
            };
            let Some(m) = matcher.find(&text) else {
                continue;
            };
            let v = e.value();
            let branch = on_branch.contains(&idx);
            hits.push(HistoryHit {
                entry_id: e.id_owned(),
                role: role_of(e, &v),
                timestamp: v.get("timestamp").cloned().unwrap_or(Value::Null),
                snippet: snippet(&text, m),
                compacted: branch && e.role.is_some() && !in_context.contains(&idx),
                on_branch: branch,
            });
        }
        hits
    });
    // A line that could not be read was passed over: the search is incomplete, and says so.
    session.lock_state().check_lines()?;
    Ok(hits)
}

/// `getEntry`: the entry exactly as stored (any branch).
pub fn get_entry(ctx: &Ctx, p: GetEntryParams) -> Result<SessionEntry, RpcError> {
    let session = ctx.daemon.session(&p.session_id)?;
    let state = session.lock_state();
    let idx = state.tree.index_of(&p.entry_id).ok_or_else(|| {
        RpcError::new(
            ErrorKind::EntryNotFound,
            format!("Entry {} not found", p.entry_id),
        )
    })?;
    let entry = crate::cpu::blocking(|| state.tree.entry(idx).try_value());
    entry.map(SessionEntry).map_err(|e| {
        // The failure is remembered: the session reports its file changed from now on.
        RpcError::new(ErrorKind::FileChanged, e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_matching_is_case_insensitive_and_keeps_char_boundaries() {
        let m = Matcher::new("ÉCHEC", false).unwrap();
        let text = "İx avant l'échec du test";
        let (s, e) = m.find(text).unwrap();
        assert_eq!(&text[s..e], "échec");
        assert!(Matcher::new("", false).is_err());
        assert!(Matcher::new("(", true).is_err());
        let r = Matcher::new(r"err(or)?\s+\d+", true).unwrap();
        assert_eq!(r.find("an error   42 here"), Some((3, 13)));
    }

    #[test]
    fn snippets_are_bounded_and_folded() {
        let text = format!("{}needle\n\n{}", "a".repeat(200), "b ".repeat(100));
        let m = Matcher::new("needle", false).unwrap();
        let s = snippet(&text, m.find(&text).unwrap());
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("needle b b"), "{s}");
        assert!(s.chars().count() <= 2 * SNIPPET_SIDE + 10);
    }

    #[test]
    fn entry_text_skips_identifiers() {
        let v = serde_json::json!({"type": "message", "id": "abc", "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]}});
        assert_eq!(entry_text(&v), "hello");
    }

    #[test]
    fn streamed_text_is_the_value_paths_text() {
        for line in [
            r#"{"type":"message","id":"a","message":{"role":"assistant","content":[{"type":"text","text":"x\ny \"q\""},{"type":"toolCall","id":"c","name":"bash","arguments":{"command":"ls","n":3}}],"model":"m","usage":{"input":1}}}"#,
            r#"{"type":"custom","customType":"pin","data":{"text":"é\u00e9","list":["a",["b",null,true]]},"id":"p","parentId":null}"#,
            r#"{"type":"compaction","summary":"s","firstKeptEntryId":"k","tokensBefore":1e3}"#,
        ] {
            let v: Value = serde_json::from_str(line).unwrap();
            assert_eq!(
                entry_text_streamed(line.as_bytes()),
                Some(entry_text(&v)),
                "{line}"
            );
        }
        assert_eq!(entry_text_streamed(br#"{"a":"\ud83d"}"#), None);
    }
}
