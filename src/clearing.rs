//! The second tier (beyond Pi): old tool output cleared from the model's context, reversibly,
//! before anything is summarized.
//!
//! Most of a coding agent's context is old tool output (files read, test logs, searches). Pi has
//! one tier: at the threshold it summarizes. Clearing comes first here: once the context reaches
//! `at` × the threshold, every old tool result outside the newest `keepRecentTokens` (and every
//! superseded one: the same tool called again later with the same arguments) is replaced in the
//! *projection* by one short text naming its entry, when that frees at least `clearAtLeast`
//! tokens. The session keeps every byte: the pass is one Pi `custom` entry
//! (`customType: "compactd.clear"`) listing the cleared entry ids, which Pi loads and ignores,
//! and the recall tools (`getEntry`, `get_entry`) give the original back. Because the cleared set
//! is read from the path, every client and every request sees the same stable prefix, and the
//! context only changes at a pass (one cache break per pass, which is what `clearAtLeast` pays
//! for).
//!
//! Pure: settings, the cleared set of a path, the projection of one message, the plan of a pass.
//! The daemon decides when to run a pass and writes its entry (`daemon::lifecycle::clearing`).

use std::collections::{HashMap, HashSet};

use serde_json::{json, Map, Value};

use crate::json::utf16_len;
use crate::session::{Entry, EntryId, EntryKind, Role};

/// The `customType` of a pass's entry.
pub const CLEAR_TYPE: &str = "compactd.clear";

/// `at` when a settings block does not say.
pub const DEFAULT_AT: f64 = 0.5;
/// `keepRecentTokens` when a settings block does not say.
pub const DEFAULT_KEEP_RECENT_TOKENS: u64 = 20_000;
/// `clearAtLeast` when a settings block does not say.
pub const DEFAULT_CLEAR_AT_LEAST: u64 = 10_000;
/// `summarizeAt` when a settings block does not say: Pi's threshold, no earlier summary.
pub const DEFAULT_SUMMARIZE_AT: f64 = 1.0;
/// The members of the setting, as errors name them.
const MEMBERS: &str = "`at`, `keepRecentTokens`, `clearAtLeast`, `excludeTools`, `cacheAware`, `summarizeAt`, `summarizeOriginals`";
/// `summarizeOriginals` when a settings block does not say: the originals, which keep more of
/// what cleared outputs said in the summary for a few percent more summarization input
/// (benches/README.md, "Under both Pis' rules").
pub const DEFAULT_SUMMARIZE_ORIGINALS: bool = true;

/// `compaction.clearToolResults`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ClearSettings {
    /// The fraction of the threshold from which a pass is considered, in (0, 1).
    pub at: f64,
    /// The newest tool results, by tokens, that always stay verbatim.
    pub keep_recent_tokens: u64,
    /// A pass runs only when it frees at least this many tokens.
    pub clear_at_least: u64,
    /// Tool names never cleared.
    pub exclude_tools: Vec<String>,
    /// While the provider's cache is warm and the context is below the threshold, a pass waits
    /// until it pays for the cache rewrite it causes ([`pays_back`]).
    pub cache_aware: bool,
    /// With clearing on, a summarizing compaction once the context is still at this fraction
    /// of the threshold after clearing, in (0, 1]; 1 is Pi's threshold.
    pub summarize_at: f64,
    /// A summarizing compaction reads the original outputs a pass cleared (true), or the
    /// projection with their placeholders, as Pi 1.6 summarizes its own context (false). The cut
    /// point and `tokensBefore` follow the rules of the session's Pi either way.
    pub summarize_originals: bool,
}

impl ClearSettings {
    /// Reads the setting: absent or `null` is off; an object is on, its missing members taking
    /// the defaults. Anything else, an unknown member or a value out of range is an error naming
    /// the member (`compaction.clearToolResults.<name>`).
    pub fn from_json(v: Option<&Value>, max_tokens: u64) -> Result<Option<ClearSettings>, String> {
        const NAME: &str = "compaction.clearToolResults";
        let o = match v {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(format!(
                    "{NAME} must be an object (members {MEMBERS}) or null for off (got {other})"
                ))
            }
        };
        if let Some(k) = o.keys().find(|k| {
            !matches!(
                k.as_str(),
                "at" | "keepRecentTokens"
                    | "clearAtLeast"
                    | "excludeTools"
                    | "cacheAware"
                    | "summarizeAt"
                    | "summarizeOriginals"
            )
        }) {
            return Err(format!(
                "unknown field `{NAME}.{k}`, expected one of {MEMBERS}"
            ));
        }
        let at = match o.get("at") {
            None => DEFAULT_AT,
            Some(v) => match v.as_f64() {
                Some(f) if f > 0.0 && f < 1.0 => f,
                _ => {
                    return Err(format!(
                        "{NAME}.at must be a fraction of the threshold in (0, 1) (got {v})"
                    ))
                }
            },
        };
        let tokens = |name: &str, default: u64| -> Result<u64, String> {
            match o.get(name) {
                None => Ok(default),
                Some(v) => match v.as_f64() {
                    Some(f) if f.fract() == 0.0 && (0.0..=max_tokens as f64).contains(&f) => {
                        Ok(f as u64)
                    }
                    _ => Err(format!(
                        "{NAME}.{name} must be a number of tokens from 0 to {max_tokens} (got {v})"
                    )),
                },
            }
        };
        let keep_recent_tokens = tokens("keepRecentTokens", DEFAULT_KEEP_RECENT_TOKENS)?;
        let clear_at_least = tokens("clearAtLeast", DEFAULT_CLEAR_AT_LEAST)?;
        let exclude_tools = match o.get("excludeTools") {
            None => Vec::new(),
            Some(Value::Array(names)) => names
                .iter()
                .map(|n| n.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    format!(
                        "{NAME}.excludeTools must be a list of tool names (got {})",
                        o["excludeTools"]
                    )
                })?,
            Some(v) => {
                return Err(format!(
                    "{NAME}.excludeTools must be a list of tool names (got {v})"
                ))
            }
        };
        let cache_aware = match o.get("cacheAware") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(v) => return Err(format!("{NAME}.cacheAware must be true or false (got {v})")),
        };
        let summarize_at = match o.get("summarizeAt") {
            None => DEFAULT_SUMMARIZE_AT,
            Some(v) => match v.as_f64() {
                Some(f) if f > 0.0 && f <= 1.0 => f,
                _ => {
                    return Err(format!(
                        "{NAME}.summarizeAt must be a fraction of the threshold in (0, 1] (got {v})"
                    ))
                }
            },
        };
        let summarize_originals = match o.get("summarizeOriginals") {
            None => DEFAULT_SUMMARIZE_ORIGINALS,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(format!(
                    "{NAME}.summarizeOriginals must be true or false (got {v})"
                ))
            }
        };
        Ok(Some(ClearSettings {
            at,
            keep_recent_tokens,
            clear_at_least,
            exclude_tools,
            cache_aware,
            summarize_at,
            summarize_originals,
        }))
    }

    /// The setting with every member filled in.
    pub fn to_json(&self) -> Value {
        json!({
            "at": self.at,
            "keepRecentTokens": self.keep_recent_tokens,
            "clearAtLeast": self.clear_at_least,
            "excludeTools": self.exclude_tools,
            "cacheAware": self.cache_aware,
            "summarizeAt": self.summarize_at,
            "summarizeOriginals": self.summarize_originals,
        })
    }
}

/// The entry ids a pass entry lists (`None`: not a pass entry).
pub fn pass_ids(entry: &Entry) -> Option<Vec<String>> {
    if entry.kind != EntryKind::Custom {
        return None;
    }
    let v = entry.value();
    if v.get("customType").and_then(Value::as_str) != Some(CLEAR_TYPE) {
        return None;
    }
    Some(crate::json::strings(
        v.get("data").and_then(|d| d.get("entryIds")),
    ))
}

/// The `data` of a pass entry.
pub fn pass_data(pass: &Pass) -> Value {
    json!({ "entryIds": pass.entry_ids, "tokensFreed": pass.tokens_freed })
}

/// The passes recorded on a path: which entries are cleared, and where the latest pass is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cleared {
    ids: HashSet<EntryId>,
    /// Tree index of the latest pass entry on the path: usage a reply reported before it
    /// counted outputs that are now cleared.
    latest_pass: Option<usize>,
    passes: u32,
}

impl Cleared {
    /// Under Pi 1.6: the outputs whose content an edit on the path replaced (compactd's passes
    /// and anyone else's edits alike: such an output is never cleared again, and a pass's edit
    /// overwritten by a later one, the original content restored, stays restored). Usage
    /// before an edit is the projection's to discard, not this set's.
    pub fn replaced(ids: impl IntoIterator<Item = EntryId>) -> Cleared {
        let ids: HashSet<EntryId> = ids.into_iter().collect();
        Cleared {
            passes: u32::from(!ids.is_empty()),
            ids,
            latest_pass: None,
        }
    }

    /// Records the entry at tree index `idx` when it is a pass; returns its ids if so.
    pub fn record(&mut self, idx: usize, entry: &Entry) -> Option<Vec<String>> {
        let ids = pass_ids(entry)?;
        self.ids
            .extend(ids.iter().map(|s| EntryId::from(s.as_str())));
        self.latest_pass = Some(self.latest_pass.map_or(idx, |p| p.max(idx)));
        self.passes += 1;
        Some(ids)
    }

    /// Whether `entry` is a tool result a pass on the path cleared.
    pub fn covers(&self, entry: &Entry) -> bool {
        !self.ids.is_empty()
            && entry.is_message(Role::ToolResult)
            && entry.id.as_ref().is_some_and(|id| self.ids.contains(id))
    }

    /// Whether the usage a reply at tree index `idx` reported predates a pass (it counted
    /// outputs cleared since; the projection's estimate stands until a newer reply).
    pub fn usage_stale(&self, idx: usize) -> bool {
        self.latest_pass.is_some_and(|p| p > idx)
    }

    /// How many passes the path holds.
    pub fn passes(&self) -> u32 {
        self.passes
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// What every placeholder starts with.
const PLACEHOLDER_HEAD: &str = "[Output cleared by compactd to save context (~";
/// What comes between the token count and the entry id.
const PLACEHOLDER_MIDDLE: &str = " tokens); get_entry or getEntry returns entry ";

/// The text a cleared tool result projects to: what it was, and how to get it back. Short,
/// because every cleared output leaves one in the context until a summary (about 27 tokens).
pub fn placeholder(entry_id: &str, tokens: u64) -> String {
    format!("{PLACEHOLDER_HEAD}{tokens}{PLACEHOLDER_MIDDLE}{entry_id}.]")
}

/// Whether `text` is the placeholder of `entry_id` (any token count).
fn is_placeholder_of(text: &str, entry_id: &str) -> bool {
    text.strip_prefix(PLACEHOLDER_HEAD)
        .and_then(|rest| rest.strip_suffix(".]"))
        .and_then(|rest| rest.strip_suffix(entry_id))
        .and_then(|rest| rest.strip_suffix(PLACEHOLDER_MIDDLE))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Under Pi 1.6 a pass is Pi's own mechanism: one `context_edit` per cleared output, whose
/// `replacement` is this (the placeholder as the one text block of the content; Pi keeps the
/// message's other fields). Pi 1.6 itself, and any tool that reads the file, then projects the
/// same context with no extension; a later edit of the same target (the original content
/// again, say) restores it, as Pi's latest edit per target wins.
pub fn replacement(entry_id: &str, tokens: u64) -> Value {
    json!({ "content": [{ "type": "text", "text": placeholder(entry_id, tokens) }] })
}

/// Whether a message's `content` is exactly compactd's placeholder for `entry_id`: the
/// message is an output a pass cleared (under 1.6, as the pass's edit left it).
pub fn is_cleared_content(content: Option<&Value>, entry_id: &str) -> bool {
    match content {
        Some(Value::Array(blocks)) if blocks.len() == 1 => blocks[0]
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| is_placeholder_of(t, entry_id)),
        Some(Value::String(t)) => is_placeholder_of(t, entry_id),
        _ => false,
    }
}

/// Whether a Pi 1.6 `context_edit` entry is a clearing pass's (its replacement is compactd's
/// placeholder for its own target).
pub fn is_clearing_edit(edit: &Entry) -> bool {
    if edit.kind != EntryKind::ContextEdit {
        return false;
    }
    let v = edit.value();
    let Some(target) = v.get("targetId").and_then(Value::as_str) else {
        return false;
    };
    is_cleared_content(v.get("replacement").and_then(|r| r.get("content")), target)
}

/// Pi's estimate of the projected message (`ceil(chars / 4)` of its one text block).
pub fn projected_tokens(entry_id: &str, tokens: u64) -> u64 {
    (utf16_len(&placeholder(entry_id, tokens)) as u64).div_ceil(4)
}

/// The estimate of `entry`'s message in the projection under `cleared`.
pub fn tokens_in_projection(entry: &Entry, cleared: &Cleared) -> u64 {
    match entry.id.as_deref() {
        Some(id) if cleared.covers(entry) => projected_tokens(id, entry.tokens),
        _ => entry.tokens,
    }
}

/// Projects a cleared tool result's message in place: its content becomes the placeholder; the
/// call id, tool name, `isError` and timestamp stay (every call keeps its result), `details`
/// (tool-specific data, often as large as the output) goes.
pub fn project_message(message: &mut Map<String, Value>, entry_id: &str, tokens: u64) {
    message.insert(
        "content".into(),
        json!([{ "type": "text", "text": placeholder(entry_id, tokens) }]),
    );
    message.shift_remove("details");
}

/// One tool result of the context, as a pass weighs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub entry_id: String,
    pub tool: String,
    /// Pi's estimate of the original message.
    pub tokens: u64,
    /// Whether a later call of the same tool with the same arguments supersedes it.
    pub superseded: bool,
    /// Already cleared by an earlier pass.
    pub cleared: bool,
}

/// The tool results of a context (its messages' entries, in order), with what a pass needs to
/// know of each. Parses the assistant messages (tool calls) and tool results only.
pub fn candidates(context: &[&Entry], cleared: &Cleared) -> Vec<Candidate> {
    // Each call's key (tool name + arguments as JSON) by call id, and the position of each
    // key's latest call.
    let mut calls: HashMap<String, (String, usize)> = HashMap::new();
    let mut latest_call: HashMap<String, usize> = HashMap::new();
    let mut results: Vec<(usize, &Entry, String, String)> = Vec::new();
    for (pos, e) in context.iter().enumerate() {
        if e.is_message(Role::Assistant) {
            let Some(m) = e.message() else { continue };
            let Some(Value::Array(blocks)) = m.get("content") else {
                continue;
            };
            for b in blocks {
                if b.get("type").and_then(Value::as_str) != Some("toolCall") {
                    continue;
                }
                let name = b.get("name").and_then(Value::as_str).unwrap_or("");
                let args = b.get("arguments").map_or(String::new(), Value::to_string);
                let key = format!("{name}\u{0}{args}");
                if let Some(id) = b.get("id").and_then(Value::as_str) {
                    calls.insert(id.to_owned(), (key.clone(), pos));
                }
                latest_call.insert(key, pos);
            }
        } else if e.is_message(Role::ToolResult) {
            let Some(m) = e.message() else { continue };
            let call = m
                .get("toolCallId")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let tool = m
                .get("toolName")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            results.push((pos, e, call, tool));
        }
    }
    results
        .into_iter()
        .filter_map(|(_, e, call, tool)| {
            let id = e.id_owned()?;
            let superseded = calls
                .get(&call)
                .is_some_and(|(key, at)| latest_call.get(key).is_some_and(|l| l > at));
            Some(Candidate {
                entry_id: id,
                tool,
                tokens: e.tokens,
                superseded,
                cleared: cleared.covers(e),
            })
        })
        .collect()
}

/// A pass: the entries to clear (superseded ones first, then oldest first) and the tokens it
/// frees.
#[derive(Debug, Clone, PartialEq)]
pub struct Pass {
    pub entry_ids: Vec<String>,
    pub tokens_freed: u64,
}

/// What one result frees when cleared (0 when the placeholder is not shorter).
fn frees(c: &Candidate) -> u64 {
    c.tokens
        .saturating_sub(projected_tokens(&c.entry_id, c.tokens))
}

/// What clearing `entry` (a tool result) frees: its estimate less its placeholder's.
pub fn frees_when_cleared(entry: &Entry) -> u64 {
    entry.id.as_deref().map_or(0, |id| {
        entry
            .tokens
            .saturating_sub(projected_tokens(id, entry.tokens))
    })
}

/// Everything a pass would clear now, whether or not it frees enough: the results outside the
/// newest `keepRecentTokens` of results, plus superseded ones anywhere, never an excluded tool,
/// never one already cleared, never one whose placeholder is not shorter.
pub fn clearable(candidates: &[Candidate], settings: &ClearSettings) -> Pass {
    // Newest first: a result is protected while the newer results before it hold less than
    // keepRecentTokens.
    let mut newer = 0u64;
    let mut protected = vec![false; candidates.len()];
    for (i, c) in candidates.iter().enumerate().rev() {
        protected[i] = newer < settings.keep_recent_tokens;
        newer = newer.saturating_add(c.tokens);
    }
    let eligible =
        |c: &Candidate| !c.cleared && !settings.exclude_tools.contains(&c.tool) && frees(c) > 0;
    let superseded = candidates.iter().filter(|c| c.superseded && eligible(c));
    let old = candidates
        .iter()
        .zip(&protected)
        .filter(|(c, p)| !c.superseded && !**p && eligible(c))
        .map(|(c, _)| c);
    let chosen: Vec<&Candidate> = superseded.chain(old).collect();
    Pass {
        entry_ids: chosen.iter().map(|c| c.entry_id.clone()).collect(),
        tokens_freed: chosen.iter().map(|c| frees(c)).sum(),
    }
}

impl Pass {
    /// Whether the pass clears something and frees at least `clearAtLeast`.
    pub fn frees_enough(&self, settings: &ClearSettings) -> bool {
        !self.entry_ids.is_empty() && self.tokens_freed >= settings.clear_at_least
    }
}

/// The tokens the next request writes to the provider's cache because of `pass`: the context
/// from the first entry it clears to the end, as projected after it. `context` is the
/// context's entries in order.
pub fn rewrite_tokens(context: &[&Entry], cleared: &Cleared, pass: &Pass) -> u64 {
    let ids: HashSet<&str> = pass.entry_ids.iter().map(String::as_str).collect();
    let clears = |e: &Entry| {
        e.is_message(Role::ToolResult) && e.id.as_deref().is_some_and(|id| ids.contains(id))
    };
    let Some(first) = context.iter().position(|e| clears(e)) else {
        return 0;
    };
    context[first..]
        .iter()
        .map(|e| match e.id.as_deref() {
            Some(id) if clears(e) => projected_tokens(id, e.tokens),
            _ => tokens_in_projection(e, cleared),
        })
        .sum()
}

/// Whether a pass pays for the cache break it causes, by the rule that balances a fixed cost
/// against a carrying cost (the economic order quantity's): since the last pass, every request
/// read the outputs a pass would clear at the cache-read price (`held_tokens` counts them, one
/// per request); the pass makes the next request write `rewrite_tokens` at the cache-write
/// price where it would have read them. Passing once the first has reached the second keeps the
/// sum of both near its least: earlier passes break the cache for too little, later ones carry
/// dead output too long. Prices per million tokens; a provider whose cache reads cost what
/// writes do has nothing to wait for.
pub fn pays_back(held_tokens: f64, rewrite_tokens: u64, cache_read: f64, cache_write: f64) -> bool {
    held_tokens * cache_read >= rewrite_tokens as f64 * (cache_write - cache_read).max(0.0)
}

/// What the outputs a pass would clear have cost so far, in token-requests: the clearable
/// tokens at each check, times the replies (one request each) since the check before.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheDebt {
    /// The replies the last check saw (`None`: not yet observed, e.g. after a restart).
    replies: Option<u64>,
    held: f64,
}

impl CacheDebt {
    /// A check that saw `replies` assistant replies in the context and `clearable` tokens a
    /// pass would free now. The first check only sets the count (what was read before it is
    /// unknown, so nothing is assumed); fewer replies than before means the context was rebuilt
    /// (a compaction, another branch): the count starts again.
    pub fn observe(&mut self, replies: u64, clearable: u64) {
        match self.replies {
            Some(seen) if replies >= seen => {
                self.held += (replies - seen) as f64 * clearable as f64;
            }
            _ => self.held = 0.0,
        }
        self.replies = Some(replies);
    }

    /// After a pass: nothing is carried any more.
    pub fn paid(&mut self) {
        self.held = 0.0;
    }

    /// Token-requests carried since the last pass.
    pub fn held(&self) -> f64 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(v: Value) -> Entry {
        Entry::from_value(v)
    }

    fn call(id: &str, parent: &str, calls: &[(&str, &str, Value)]) -> Entry {
        let content: Vec<Value> = calls
            .iter()
            .map(|(cid, name, args)| json!({"type": "toolCall", "id": cid, "name": name, "arguments": args}))
            .collect();
        entry(
            json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "assistant", "content": content, "timestamp": 1}}),
        )
    }

    fn result(id: &str, parent: &str, call: &str, tool: &str, chars: usize) -> Entry {
        entry(
            json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "toolResult", "toolCallId": call, "toolName": tool,
                "content": [{"type": "text", "text": "x".repeat(chars)}], "isError": false, "timestamp": 2}}),
        )
    }

    fn settings(keep: u64, least: u64) -> ClearSettings {
        ClearSettings {
            at: 0.5,
            keep_recent_tokens: keep,
            clear_at_least: least,
            exclude_tools: vec!["memory".into()],
            cache_aware: true,
            summarize_at: 1.0,
            summarize_originals: true,
        }
    }

    /// read a.rs (4000 tokens), grep (2000), read a.rs again (4000), memory (8000), bash (1000).
    fn session() -> Vec<Entry> {
        vec![
            call("a1", "u", &[("c1", "read", json!({"path": "a.rs"}))]),
            result("r1", "a1", "c1", "read", 16_000),
            call("a2", "r1", &[("c2", "grep", json!({"q": "x"}))]),
            result("r2", "a2", "c2", "grep", 8_000),
            call("a3", "r2", &[("c3", "read", json!({"path": "a.rs"}))]),
            result("r3", "a3", "c3", "read", 16_000),
            call("a4", "r3", &[("c4", "memory", json!({}))]),
            result("r4", "a4", "c4", "memory", 32_000),
            call("a5", "r4", &[("c5", "bash", json!({"cmd": "ls"}))]),
            result("r5", "a5", "c5", "bash", 4_000),
        ]
    }

    #[test]
    fn old_and_superseded_results_go_newest_and_excluded_stay() {
        let entries = session();
        let refs: Vec<&Entry> = entries.iter().collect();
        let cands = candidates(&refs, &Cleared::default());
        assert_eq!(cands.len(), 5);
        assert!(cands[0].superseded, "a.rs was read again later");
        assert!(!cands[2].superseded);
        // keepRecentTokens 5000: r5 (1000) and r4 (8000, crosses the line) are protected.
        let pass = clearable(&cands, &settings(5000, 0));
        assert_eq!(pass.entry_ids, ["r1", "r2", "r3"]);
        // Protecting everything still clears the superseded read, and never the excluded tool.
        let pass = clearable(&cands, &settings(1_000_000, 0));
        assert_eq!(pass.entry_ids, ["r1"]);
        let freed = 4000 - projected_tokens("r1", 4000);
        assert_eq!(pass.tokens_freed, freed);
        // clearAtLeast: a pass that frees too little does not run.
        assert!(!pass.frees_enough(&settings(1_000_000, freed + 1)));
        assert!(pass.frees_enough(&settings(1_000_000, freed)));
        let none = clearable(&cands, &settings(0, 0));
        assert!(!none.entry_ids.contains(&"r4".to_owned()));
    }

    #[test]
    fn recorded_passes_project_and_are_not_cleared_twice() {
        let mut entries = session();
        entries.push(entry(json!({"type": "custom", "customType": CLEAR_TYPE,
            "data": {"entryIds": ["r1", "r2"], "tokensFreed": 5000}, "id": "p1", "parentId": "r5",
            "timestamp": "2026-01-01T00:00:00.000Z"})));
        let mut cleared = Cleared::default();
        for (i, e) in entries.iter().enumerate() {
            cleared.record(i, e);
        }
        assert_eq!(cleared.passes(), 1);
        assert!(cleared.covers(&entries[1]) && !cleared.covers(&entries[5]));
        assert!(cleared.usage_stale(9) && !cleared.usage_stale(10));
        assert_eq!(
            tokens_in_projection(&entries[1], &cleared),
            projected_tokens("r1", 4000)
        );
        let refs: Vec<&Entry> = entries.iter().collect();
        let pass = clearable(&candidates(&refs, &cleared), &settings(0, 0));
        assert_eq!(pass.entry_ids, ["r3", "r5"]);

        let mut m = entries[1].message().unwrap();
        m.insert("details".into(), json!({"diff": "big"}));
        project_message(&mut m, "r1", 4000);
        assert_eq!(m["toolCallId"], "c1");
        assert_eq!(m["toolName"], "read");
        assert_eq!(m["isError"], false);
        assert!(m.get("details").is_none());
        let text = m["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("entry r1") && text.contains("get_entry") && text.contains("getEntry")
        );
        assert_eq!(
            crate::estimate::estimate_message(&m),
            projected_tokens("r1", 4000)
        );
    }

    #[test]
    fn settings_are_validated_by_name() {
        let max = 1_000_000_000;
        assert_eq!(ClearSettings::from_json(None, max), Ok(None));
        assert_eq!(ClearSettings::from_json(Some(&json!(null)), max), Ok(None));
        let on = ClearSettings::from_json(Some(&json!({})), max)
            .unwrap()
            .unwrap();
        assert_eq!(on.keep_recent_tokens, DEFAULT_KEEP_RECENT_TOKENS);
        assert_eq!(on.clear_at_least, DEFAULT_CLEAR_AT_LEAST);
        let s = ClearSettings::from_json(
            Some(&json!({"at": 0.6, "keepRecentTokens": 100, "clearAtLeast": 5, "excludeTools": ["a"]})),
            max,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            s.to_json(),
            json!({"at": 0.6, "keepRecentTokens": 100, "clearAtLeast": 5, "excludeTools": ["a"],
                "cacheAware": true, "summarizeAt": 1.0, "summarizeOriginals": true})
        );
        let s = ClearSettings::from_json(
            Some(&json!({"cacheAware": false, "summarizeAt": 0.6, "summarizeOriginals": false})),
            max,
        )
        .unwrap()
        .unwrap();
        assert!(!s.cache_aware);
        assert_eq!(s.summarize_at, 0.6);
        assert!(!s.summarize_originals);
        for (bad, name) in [
            (json!({"at": 1.0}), "compaction.clearToolResults.at"),
            (json!({"at": 0}), "compaction.clearToolResults.at"),
            (
                json!({"keepRecentTokens": -5}),
                "compaction.clearToolResults.keepRecentTokens",
            ),
            (
                json!({"clearAtLeast": 1.5}),
                "compaction.clearToolResults.clearAtLeast",
            ),
            (
                json!({"excludeTools": [1]}),
                "compaction.clearToolResults.excludeTools",
            ),
            (json!({"keep": 1}), "compaction.clearToolResults.keep"),
            (
                json!({"cacheAware": "yes"}),
                "compaction.clearToolResults.cacheAware",
            ),
            (
                json!({"summarizeAt": 1.5}),
                "compaction.clearToolResults.summarizeAt",
            ),
            (
                json!({"summarizeAt": 0}),
                "compaction.clearToolResults.summarizeAt",
            ),
            (
                json!({"summarizeOriginals": "yes"}),
                "compaction.clearToolResults.summarizeOriginals",
            ),
            (json!(3), "compaction.clearToolResults"),
        ] {
            let e = ClearSettings::from_json(Some(&bad), max).unwrap_err();
            assert!(e.contains(name), "{e}");
        }
    }

    #[test]
    fn rewrite_runs_from_the_first_cleared_output_to_the_end() {
        let entries = session();
        let refs: Vec<&Entry> = entries.iter().collect();
        let none = Cleared::default();
        let pass = Pass {
            entry_ids: vec!["r2".into(), "r3".into()],
            tokens_freed: 0,
        };
        // From r2 on: r2 and r3 as placeholders, then a3, a4, r4 (8000), a5, r5 (1000).
        let calls: u64 = [4, 6, 8].iter().map(|i| entries[*i].tokens).sum();
        let expected = projected_tokens("r2", entries[3].tokens)
            + projected_tokens("r3", entries[5].tokens)
            + calls
            + entries[7].tokens
            + entries[9].tokens;
        assert_eq!(rewrite_tokens(&refs, &none, &pass), expected);
        let nothing = Pass {
            entry_ids: vec![],
            tokens_freed: 0,
        };
        assert_eq!(rewrite_tokens(&refs, &none, &nothing), 0);
    }

    #[test]
    fn a_pass_waits_until_it_pays_for_its_cache_break() {
        // Sonnet 4.5: reads $0.30/M, writes $3.75/M: a rewrite of 20k tokens costs as much as
        // 230k token-requests of reads.
        assert!(!pays_back(229_999.0, 20_000, 0.30, 3.75));
        assert!(pays_back(230_000.0, 20_000, 0.30, 3.75));
        // A cache whose reads cost what writes do: nothing to wait for.
        assert!(pays_back(0.0, 20_000, 3.0, 3.0));

        let mut debt = CacheDebt::default();
        debt.observe(2, 10_000);
        assert_eq!(debt.held(), 0.0, "the first check only counts the replies");
        debt.observe(4, 10_000);
        debt.observe(6, 12_000);
        assert_eq!(debt.held(), 2.0 * 10_000.0 + 2.0 * 12_000.0);
        debt.observe(6, 50_000);
        assert_eq!(debt.held(), 44_000.0, "no reply, no request");
        debt.paid();
        assert_eq!(debt.held(), 0.0);
        debt.observe(8, 1_000);
        assert_eq!(debt.held(), 2_000.0);
        debt.observe(1, 1_000);
        assert_eq!(debt.held(), 0.0, "a rebuilt context starts again");
    }
}
