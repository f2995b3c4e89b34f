//! The parameter types of every method (protocol.md §3), and the model they name. They derive
//! `JsonSchema` so the machine-readable reference (`proto-docs/openrpc.json`) is generated from
//! the code and cannot drift from what the daemon parses. Results are in `super::results`.
//!
//! Every params type refuses fields it does not know (`deny_unknown_fields`): a typo such as
//! `{"keepRecent": 10}` would otherwise be accepted and silently do nothing. [`decode`] names
//! the field path of any refusal. (Pi's settings *files* stay tolerant, as Pi is: they are read
//! as JSON by `daemon::settings`, never through these types.)

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::errors::RpcError;

/// Decodes `value` as `T`; `at` is where the value sits in the request's params (`""` for the
/// params object itself, `"compaction"` for a member decoded later). Errors are -32602 naming
/// the full field path (`missing field `model.contextWindow``, `unknown field
/// `compaction.keepRecent`, expected one of …`, `model.contextWindow: invalid type: …`), never
/// serde's line and column.
pub fn decode<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, RpcError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (at, inner.as_str()) {
            (at, "" | ".") => at.to_owned(),
            ("", inner) => inner.to_owned(),
            (at, inner) => format!("{at}.{inner}"),
        };
        RpcError::invalid_params(field_message(&path, &e.into_inner().to_string()))
    })
}

/// Puts the path into serde's message: a missing or unknown field gets its full path inside the
/// backticks; any other error gets the path first.
fn field_message(path: &str, inner: &str) -> String {
    for lead in ["missing field `", "unknown field `"] {
        if let Some(rest) = inner.strip_prefix(lead) {
            let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
            // An unknown field's path already ends with the field; a missing one's is its object.
            let full = if path.is_empty() || path == name {
                name.to_owned()
            } else if path.ends_with(&format!(".{name}")) {
                path.to_owned()
            } else {
                format!("{path}.{name}")
            };
            return format!("{lead}{full}`{tail}");
        }
    }
    if path.is_empty() {
        inner.to_owned()
    } else {
        format!("{path}: {inner}")
    }
}

/// Pi's model fields, as a client names its session's model. Both numbers are required. (A
/// summarizer's resolved endpoint, with its protocol and key, is `summarizer::ModelSpec`.)
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Model {
    pub provider: String,
    pub id: String,
    pub context_window: i64,
    pub max_tokens: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InitializeParams {
    pub client_name: Option<String>,
    pub capabilities: Option<Value>,
    /// Beyond Pi: `true` sends this connection the daemon's log lines as `window/logMessage`
    /// notifications from now on (`false` stops them). For an editor's log view: under an
    /// editor the daemon logs to a file, and stderr carries only real errors.
    pub log_notifications: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenSessionParams {
    /// Absolute path of the session file (the files backend).
    pub path: Option<String>,
    /// Beyond Pi: a stored session's header id (postgres backend), instead of `path`.
    pub header_id: Option<String>,
    /// Create a new deferred session at `path` when the file is missing (needs `cwd`).
    #[serde(default)]
    pub create: bool,
    pub cwd: Option<String>,
    pub model: Option<Model>,
    pub thinking_level: Option<String>,
}

/// `listStoredSessions`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListStoredSessionsParams {
    /// Only the sessions of this working directory (the header's `cwd`).
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSessionParams {
    /// Absolute working directory (the header's `cwd`).
    pub cwd: String,
    /// Directory for the new file (Pi's `--session-dir`); default `<agentDir>/sessions/--<cwd>--/`.
    pub session_dir: Option<String>,
    pub model: Option<Model>,
    pub thinking_level: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionParams {
    pub session_id: String,
}

/// `searchHistory` (beyond Pi).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchHistoryParams {
    pub session_id: String,
    /// Text to find: a case-insensitive substring, or with `regex` a Rust regex.
    pub query: String,
    pub regex: Option<bool>,
    /// Most hits returned (default 20, at most 1000).
    pub limit: Option<u32>,
}

/// `pin` (beyond Pi).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PinParams {
    pub session_id: String,
    /// Kept verbatim in every summary compactd writes while the pin is live.
    pub text: String,
    /// A short heading for the pin in the `## Pinned` section.
    pub label: Option<String>,
}

/// `unpin` (beyond Pi).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnpinParams {
    pub session_id: String,
    /// The `pinId` `pin` returned (the pin entry's id).
    pub pin_id: String,
}

/// `editSummary` (beyond Pi).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditSummaryParams {
    pub session_id: String,
    /// The corrected summary, stored as given.
    pub summary: String,
}

/// `getEntry` (beyond Pi).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetEntryParams {
    pub session_id: String,
    pub entry_id: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppendMessageParams {
    pub session_id: String,
    /// An AgentMessage: role user, assistant, toolResult or bashExecution.
    pub message: Value,
    pub expected_leaf_id: Option<String>,
    /// Beyond Pi: the new entry's id, chosen by the client (1–64 letters, digits, `-` or `_`),
    /// which makes the append idempotent: a retry after an unknown outcome (a dropped
    /// connection, `storage_unavailable` after the store committed) answers with the entry
    /// written the first time instead of writing it twice. An id the session already has for a
    /// different message is `invalid_params`.
    pub entry_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppendEntryParams {
    pub session_id: String,
    /// A `thinking_level_change`, `label`, `custom`, `custom_message` or `session_info` entry;
    /// `id`, `parentId` and `timestamp` are filled by the daemon.
    pub entry: Value,
    pub expected_leaf_id: Option<String>,
    /// Beyond Pi: the new entry's id, chosen by the client: the append is idempotent, as
    /// `appendMessage`'s `entryId` (an id the session already has for an entry of another type
    /// is `invalid_params`).
    pub entry_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetModelParams {
    pub session_id: String,
    pub model: Model,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NavigateTreeParams {
    pub session_id: String,
    /// The entry to move to, or null for the root (an empty leaf).
    pub target_id: Option<String>,
    #[serde(default)]
    pub summarize: bool,
    pub custom_instructions: Option<String>,
    #[serde(default)]
    pub replace_instructions: bool,
    pub label: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ContextFormat {
    Agent,
    Llm,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetContextParams {
    pub session_id: String,
    pub format: Option<ContextFormat>,
}

/// Beyond Pi: `compaction.speculativeAt`, when a session starts a speculative compaction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SpeculativeAt {
    /// At this fraction of the threshold, in (0, 1); 0: never (Pi's behaviour).
    Fraction(f64),
    /// `"auto"`: early enough for the summary to be ready when the threshold comes, from the
    /// summarizer's measured latency and the rate at which the context grows.
    Adaptive(Adaptive),
}

/// The one word `speculativeAt` takes besides a fraction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Adaptive {
    Auto,
}

/// A partial `compaction` settings block; missing fields take the defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionSettingsPatch {
    pub enabled: Option<bool>,
    pub reserve_tokens: Option<i64>,
    pub keep_recent_tokens: Option<i64>,
    /// Pi 1.6: per-model `reserveTokens` / `keepRecentTokens`, keyed by exact
    /// `"provider/modelId"`; under 0.85 ignored (as Pi 0.85 ignores it).
    pub model_overrides: Option<std::collections::BTreeMap<String, ModelOverride>>,
    /// Beyond Pi: list at most this many paths in each of the summary's `<read-files>` /
    /// `<modified-files>` blocks (the most recently touched, then `(+K more)`); `details` keeps
    /// the full lists. Absent: unlimited, Pi's behaviour. Ignored by `shouldCompact`.
    pub file_list_limit: Option<u64>,
    /// Beyond Pi: ineffective automatic compactions in a row before automatic compaction
    /// pauses for the session (default 2; 0 turns the thrash breaker off, Pi's behaviour).
    pub max_ineffective_compactions: Option<u32>,
    /// Beyond Pi: start a speculative compaction when the context reaches this fraction of
    /// the threshold, in (0, 1); 0 turns speculation off (Pi's behaviour); `"auto"` starts it
    /// when the context, at the rate it grows, would reach the threshold within the time the
    /// summarizer takes (measured), from half the threshold on. Default 0.75 for sessions with
    /// an LLM summarizer; the extractive summarizer never speculates.
    pub speculative_at: Option<SpeculativeAt>,
    /// Beyond Pi: at `checkCompaction {phase: "prePrompt"}`, compact now (reason "idle") when
    /// the last reply is older than `cacheTtlSeconds` and the context is at this fraction of
    /// the threshold, in (0, 1]; 0 or absent: off (Pi's behaviour).
    pub idle_compact_at: Option<f64>,
    /// Beyond Pi: the agent's provider's prompt-cache lifetime in seconds (default 300).
    pub cache_ttl_seconds: Option<u64>,
    /// Beyond Pi: calibrate trailing estimates by the model's reported usage (default false).
    pub calibrated_estimates: Option<bool>,
    /// Beyond Pi: end every summary compactd writes with one line naming the recall tools
    /// (`search_history` / `get_entry`, `searchHistory` / `getEntry`) and the id range it
    /// stands for (default true).
    pub recall_footer: Option<bool>,
    /// Beyond Pi: clear old tool output from the projected context before anything is
    /// summarized (the second tier; `null` or absent: off, Pi's behaviour). See
    /// [`ClearToolResultsPatch`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_tool_results: Option<ClearToolResultsPatch>,
    /// Beyond Pi: what is done with each summary's handoff check (see proto-docs): `"report"`
    /// (default: score it, install it as written), `"repair"` (append a short section of the
    /// obligations it missed, each naming its entry), `"retry"` (an LLM summarizer gets one
    /// more call with the missing items, then what is still missing is repaired), `"off"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<crate::handoff::Mode>,
}

/// One model's compaction token settings (`compaction.modelOverrides[...]`, Pi 1.6).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelOverride {
    pub reserve_tokens: Option<u64>,
    pub keep_recent_tokens: Option<u64>,
}

/// Beyond Pi: `compaction.clearToolResults`. Once the context reaches `at` × the threshold, a
/// `checkCompaction` clears every tool result outside the newest `keepRecentTokens` (and every
/// superseded one: the same tool called again later with the same arguments), when that frees
/// at least `clearAtLeast` tokens; the file keeps every byte and `getEntry` returns the original.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClearToolResultsPatch {
    /// The fraction of the threshold from which a pass is considered, in (0, 1) (default 0.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<f64>,
    /// The newest tool results, by tokens, that always stay verbatim (default 20000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_recent_tokens: Option<i64>,
    /// A pass runs only when it frees at least this many tokens (default 10000): every pass
    /// breaks the provider's prompt cache once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear_at_least: Option<i64>,
    /// Tool names never cleared (default none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude_tools: Option<Vec<String>>,
    /// While the agent's prompt cache is warm (its last reply is within `cacheTtlSeconds`), the
    /// context is below the point where a summary follows and the model's prices are known, a
    /// pass that frees enough waits until the cache reads of what it would clear, since the last
    /// pass, add up to what its cache rewrite costs (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_aware: Option<bool>,
    /// With clearing on, a summarizing compaction follows once the context is still at this
    /// fraction of the threshold after clearing, in (0, 1] (default 1: Pi's threshold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarize_at: Option<f64>,
    /// A summarizing compaction reads the original outputs a pass cleared (default true), or
    /// the projection with their placeholders (Pi 1.6's own way: it summarizes its context).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarize_originals: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShouldCompactParams {
    pub session_id: Option<String>,
    pub context_tokens: Option<f64>,
    pub context_window: Option<i64>,
    pub settings: Option<CompactionSettingsPatch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PreviewDetail {
    Summary,
    Full,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreviewCompactionParams {
    pub session_id: String,
    pub detail: Option<PreviewDetail>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactParams {
    pub session_id: String,
    pub custom_instructions: Option<String>,
    /// `false`: return the compaction without appending it (the caller writes it). Default `true`.
    pub write: Option<bool>,
}

/// The agent-loop moment of an automatic check (compaction.md §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    PrePrompt,
    MidRun,
    PostRun,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckCompactionParams {
    pub session_id: String,
    pub phase: Phase,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetSettingsOverridesParams {
    /// Omitted: every session, present and future.
    pub session_id: Option<String>,
    /// A partial compaction block; `null` clears the overrides. Omitted while `piVersion` is
    /// given: the compaction overrides stay as they are (omitted with nothing else: cleared).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<Value>")]
    pub compaction: Option<Option<Value>>,
    /// Whose rules the session follows: `"1.6"` (Pi 1.6.0) or `"0.85"` (Pi 0.85.0); `null`
    /// goes back to the daemon's (`[compat] pi_version`, default 1.6). The Pi extension sets
    /// it to the Pi it runs in. Omitted: unchanged.
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<String>")]
    pub pi_version: Option<Option<String>>,
}

/// A member that may be absent (`None`), `null` (`Some(None)`) or set (`Some(Some(v))`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeParams {
    /// Omitted: every session, present and future.
    pub session_id: Option<String>,
    /// Event names to receive; omitted: all.
    pub events: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterHooksParams {
    pub session_id: Option<String>,
    pub hooks: Vec<String>,
    /// How long each hook request waits for this client (default 60000 ms), at most `[limits]
    /// max_hook_timeout_ms` (default 120000 ms; a larger value is lowered to it).
    pub timeout_ms: Option<u64>,
    /// Which large members a hook request carries: any of `preparation` and `branchEntries`.
    /// Omitted: Pi's full payload. `["preparation"]` drops the whole branch (the bulk of it).
    pub include: Option<Vec<String>>,
}

/// The params of a method that takes none (a field sent is refused, as for every method).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_refused_with_their_path() {
        let e =
            decode::<CompactionSettingsPatch>(json!({"keepRecent": 10}), "compaction").unwrap_err();
        assert_eq!(e.code, -32602);
        assert!(
            e.message.starts_with(
                "Invalid params: unknown field `compaction.keepRecent`, expected one of `enabled`"
            ),
            "{}",
            e.message
        );
        let e =
            decode::<OpenSessionParams>(json!({"path": "/x", "sesionId": "s1"}), "").unwrap_err();
        assert!(
            e.message
                .starts_with("Invalid params: unknown field `sesionId`"),
            "{}",
            e.message
        );
        let e = decode::<OpenSessionParams>(
            json!({"path": "/x", "model": {"provider": "p", "id": "i", "contextWindow": 1, "maxTokens": 1, "name": "n"}}),
            "",
        )
        .unwrap_err();
        assert!(
            e.message
                .starts_with("Invalid params: unknown field `model.name`"),
            "{}",
            e.message
        );
        let e = decode::<NoParams>(json!({"x": 1}), "").unwrap_err();
        assert!(e.message.contains("unknown field `x`"), "{}", e.message);
    }

    #[test]
    fn wrong_types_name_their_field() {
        let e = decode::<CompactionSettingsPatch>(json!({"keepRecentTokens": "ten"}), "compaction")
            .unwrap_err();
        assert_eq!(
            e.message,
            "Invalid params: compaction.keepRecentTokens: invalid type: string \"ten\", expected i64"
        );
        let e = decode::<SubscribeParams>(json!({"events": ["a", 3]}), "").unwrap_err();
        assert!(
            e.message
                .starts_with("Invalid params: events[1]: invalid type"),
            "{}",
            e.message
        );
    }
}
