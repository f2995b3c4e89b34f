//! The result type of every method (protocol.md §3). Handlers return these, the dispatch table
//! serializes them, and `proto-docs/openrpc.json` describes them from the same derives, so what
//! the document says is what the daemon sends. Field order is wire order.
//!
//! Entries and messages stay Pi's own JSON ([`SessionEntry`], [`AgentMessage`]): compactd
//! passes them through as stored, and their schemas name the members every entry has.

use schemars::JsonSchema;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::types::Model;
use crate::compaction::reply::Usage;

pub use crate::compaction::summary::{js_number, CompactionResult};

fn js_number_opt<S: Serializer>(f: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    f.map(crate::compaction::summary::number).serialize(s)
}

/// A method's result as the reply's JSON. `serde_json::to_value` copies every `Value` inside a
/// result, so the results that carry whole branches or contexts (Pi's own JSON, possibly
/// hundreds of megabytes) move theirs instead; every other result serializes as it derives.
pub trait IntoReply: Serialize + Sized {
    fn into_reply(self) -> Result<Value, serde_json::Error> {
        serde_json::to_value(&self)
    }
}

impl IntoReply for SessionEntry {
    fn into_reply(self) -> Result<Value, serde_json::Error> {
        Ok(self.0)
    }
}

impl IntoReply for Branch {
    fn into_reply(self) -> Result<Value, serde_json::Error> {
        Ok(Value::Array(self.into_iter().map(|e| e.0).collect()))
    }
}

impl IntoReply for Context {
    fn into_reply(self) -> Result<Value, serde_json::Error> {
        let mut o = serde_json::Map::new();
        let messages = self.messages.into_iter().map(|m| m.0).collect();
        o.insert("messages".into(), Value::Array(messages));
        o.insert(
            "leafId".into(),
            self.leaf_id.map_or(Value::Null, Value::String),
        );
        Ok(Value::Object(o))
    }
}

/// The results that serialize as they derive.
macro_rules! serialized_replies {
    ($($t:ty),* $(,)?) => { $(impl IntoReply for $t {})* };
}

serialized_replies!(
    InitializeResult,
    SessionInfo,
    SyncSessionResult,
    CostReport,
    CloseSessionResult,
    SessionInfoList,
    StoredSessions,
    AppendResult,
    SetModelResult,
    NavigateTreeResult,
    ContextUsage,
    HistoryHits,
    PinResult,
    Pins,
    UndoCompactionResult,
    EditSummaryResult,
    ShouldCompactResult,
    PreviewCompactionResult,
    CompactionResult,
    CheckCompactionResult,
    AbortCompactionResult,
    EffectiveSettings,
    SetSettingsOverridesResult,
    SubscribeResult,
    UnsubscribeResult,
    RegisterHooksResult,
);

/// Declares a newtype over Pi's own JSON, passed through exactly as stored, with the schema
/// that documents it (`|generator| { schema }`: the generator registers referenced types).
macro_rules! pi_json {
    ($(#[$doc:meta])* $name:ident, |$g:ident| $schema:tt) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(pub serde_json::Value);

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema($g: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!($schema)
            }
        }
    };
}
pub(crate) use pi_json;

pi_json!(
    /// A raw Pi session entry (sessions.md), exactly as stored in the file.
    SessionEntry,
    |_generator| {
            "description": "A raw Pi session entry (sessions.md), exactly as stored in the file.",
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["message", "thinking_level_change", "model_change", "compaction", "branch_summary", "custom", "custom_message", "label", "session_info"]},
                "id": {"type": "string"},
                "parentId": {"type": ["string", "null"]},
                "timestamp": {"type": "string", "description": "ISO 8601."}
            },
            "required": ["type", "id", "parentId", "timestamp"],
            "additionalProperties": true
        }
);

pi_json!(
    /// An AgentMessage in Pi's field shapes, as the session's context holds it.
    AgentMessage,
    |_generator| {
            "description": "An AgentMessage (Pi field shapes). `getContext {format: \"llm\"}` returns the `convertToLlm` projection instead (roles user/assistant/toolResult only).",
            "type": "object",
            "properties": {
                "role": {"type": "string", "enum": ["user", "assistant", "toolResult", "bashExecution", "custom", "branchSummary", "compactionSummary"]},
                "timestamp": {"type": "number", "description": "Epoch milliseconds."}
            },
            "required": ["role"],
            "additionalProperties": true
        }
);

pi_json!(
    /// The `branch_summary` entry `navigateTree` appended, as stored.
    BranchSummaryEntry,
    |generator| {
            "type": "object",
            "properties": {
                "type": {"const": "branch_summary"},
                "id": {"type": "string"},
                "parentId": {"type": ["string", "null"]},
                "timestamp": {"type": "string"},
                "fromId": {"type": "string", "description": "The old leaf, or \"root\"."},
                "summary": {"type": "string"},
                "details": {"type": "object"},
                "usage": generator.subschema_for::<Usage>(),
                "fromHook": {"type": "boolean"}
            },
            "required": ["type", "id", "parentId", "timestamp", "fromId", "summary", "fromHook"]
        }
);

/// What `initialize` tells a client about this server.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// Always `compactd`.
    pub server_name: &'static str,
    pub version: &'static str,
    pub protocol_version: &'static str,
    pub capabilities: Capabilities,
    /// Beyond Pi: the daemon process (what `compactd status` prints).
    pub daemon: DaemonStatus,
}

/// The daemon process as `initialize` reports it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonStatus {
    pub pid: u32,
    pub uptime_ms: u64,
    /// Connections open now (this one included).
    pub connections: u64,
    /// Sessions open now.
    pub sessions: u64,
    /// The socket it listens on (absent: a socket the service manager passed, or stdio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    /// The configuration file given on its command line (absent: the default lookup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
    /// A daemon started on demand exits after this long with no client and no session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_exit_seconds: Option<u64>,
}

/// What this server can do, as `initialize` reports it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// `ndjson` and `lsp` (`Content-Length` headers), detected per connection.
    pub framings: Vec<&'static str>,
    /// The hook names `registerHooks` accepts.
    pub hooks: Vec<&'static str>,
    /// The event names `subscribe` accepts.
    pub events: Vec<&'static str>,
    /// The configured summarizer provider (`extractive` when none).
    pub summarizer: String,
    /// The Pi versions whose rules sessions can follow (`piVersion`): `"0.85"` and `"1.6"`.
    pub pi_versions: Vec<&'static str>,
    /// The version a session follows unless it sets its own (`[compat] pi_version`).
    pub pi_version: &'static str,
}

/// `closeSession`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CloseSessionResult {
    /// Whether this connection held the session.
    pub closed: bool,
}

/// `listSessions`: the open sessions, sorted by id.
pub type SessionInfoList = Vec<SessionInfo>;

/// `getBranch`: the raw entries from the root to the current leaf (no header).
pub type Branch = Vec<SessionEntry>;

/// `getContext`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Context {
    pub messages: Vec<AgentMessage>,
    pub leaf_id: Option<String>,
}

/// `getContextUsage`: null without a model (or a window <= 0).
pub type ContextUsage = Option<UsageFigures>;

/// The estimated context size against the model's window.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageFigures {
    /// null after a compaction until an assistant message with usage follows it.
    #[serde(serialize_with = "js_number_opt")]
    pub tokens: Option<f64>,
    pub context_window: i64,
    pub percent: Option<f64>,
    /// Beyond Pi: the ratio of the tokens this model's provider reports to compactd's chars/4
    /// estimate, learned from replies, and how many replies it was learned from (absent until
    /// a reply was sampled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationView>,
}

/// A model's learned ratio of reported to estimated tokens.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalibrationView {
    pub ratio: f64,
    pub samples: u64,
    /// Whether estimates use it now (`compaction.calibratedEstimates`, and enough samples).
    pub applied: bool,
}

/// `searchHistory`: hits, most recent first.
pub type HistoryHits = Vec<HistoryHit>;

/// One `searchHistory` hit.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryHit {
    pub entry_id: Option<String>,
    /// The message's role, else the entry's type (compaction, branch_summary, custom, …).
    pub role: String,
    /// The entry's timestamp as stored.
    pub timestamp: Value,
    /// The match with up to 80 characters each side, whitespace folded, … at a cut.
    pub snippet: String,
    /// On the current branch but no longer verbatim in the context (summarized by a compaction).
    pub compacted: bool,
    /// On the current branch (else on an abandoned one).
    pub on_branch: bool,
}

/// `pin`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinResult {
    /// The pin entry's id.
    pub pin_id: String,
    pub entry_id: String,
    pub leaf_id: String,
}

/// `listPins`: the live pins of the current branch, oldest first.
pub type Pins = Vec<PinInfo>;

/// One live pin.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinInfo {
    pub pin_id: String,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub label: Option<String>,
    /// The pin entry's timestamp as stored.
    pub timestamp: Value,
}

/// `unpin`'s answer: the appended unpin entry.
pub type UnpinResult = AppendResult;

/// `undoCompaction`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UndoCompactionResult {
    pub undone_compaction_id: String,
    pub entry_id: String,
    pub leaf_id: String,
}

/// `editSummary`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EditSummaryResult {
    /// The corrected compaction entry, as stored.
    pub entry: SessionEntry,
    pub edited_from: String,
    pub entry_id: String,
    pub leaf_id: String,
}

/// An effective `compaction` settings block.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "CompactionSettings")]
pub struct CompactionSettingsView {
    pub enabled: bool,
    pub reserve_tokens: i64,
    pub keep_recent_tokens: i64,
    /// Beyond Pi: the most paths each summary file block lists (absent: unlimited, Pi's
    /// behaviour). Only in getSettings' answer, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "usize")]
    pub file_list_limit: Option<usize>,
    /// Beyond Pi: ineffective automatic compactions in a row before automatic compaction
    /// pauses (default 2; 0: no thrash breaker). Only in getSettings' answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u32")]
    pub max_ineffective_compactions: Option<u32>,
    /// Beyond Pi: the fraction of the threshold at which this session starts a speculative
    /// compaction, or `"auto"`, as it applies to the session's summarizer (0: never). Only in
    /// getSettings' answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "crate::rpc::types::SpeculativeAt")]
    pub speculative_at: Option<crate::rpc::types::SpeculativeAt>,
    /// Beyond Pi: the fraction of the threshold from which a `prePrompt` check compacts when
    /// the provider's cache has expired anyway (0: off). Only in getSettings' answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "f64")]
    pub idle_compact_at: Option<f64>,
    /// Beyond Pi: the agent's provider's prompt-cache lifetime. Only in getSettings' answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub cache_ttl_seconds: Option<u64>,
    /// Beyond Pi: trailing estimates calibrated by the model's reported usage. Only in
    /// getSettings' answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub calibrated_estimates: Option<bool>,
    /// Beyond Pi: summaries compactd writes end with the recall footer. Only in getSettings'
    /// answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub recall_footer: Option<bool>,
    /// Beyond Pi: the second tier, every member filled in (`null`: off). Only in getSettings'
    /// answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<ClearToolResultsView>")]
    pub clear_tool_results: Option<Option<ClearToolResultsView>>,
    /// Beyond Pi: what is done with each summary's handoff check (`off`, `report`, `repair`,
    /// `retry`). Only in getSettings' answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "crate::handoff::Mode")]
    pub handoff: Option<crate::handoff::Mode>,
}

/// `compaction.clearToolResults` in effect.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearToolResultsView {
    pub at: f64,
    pub keep_recent_tokens: u64,
    pub clear_at_least: u64,
    pub exclude_tools: Vec<String>,
    pub cache_aware: bool,
    pub summarize_at: f64,
    pub summarize_originals: bool,
}

impl From<&crate::compaction::tokens::CompactionSettings> for CompactionSettingsView {
    fn from(s: &crate::compaction::tokens::CompactionSettings) -> CompactionSettingsView {
        CompactionSettingsView {
            enabled: s.enabled,
            reserve_tokens: s.reserve_tokens,
            keep_recent_tokens: s.keep_recent_tokens,
            file_list_limit: None,
            max_ineffective_compactions: None,
            speculative_at: None,
            idle_compact_at: None,
            cache_ttl_seconds: None,
            calibrated_estimates: None,
            recall_footer: None,
            clear_tool_results: None,
            handoff: None,
        }
    }
}

/// `shouldCompact`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShouldCompactResult {
    pub should_compact: bool,
    #[serde(serialize_with = "js_number")]
    pub context_tokens: f64,
    pub context_window: i64,
    /// contextWindow − reserveTokens.
    #[serde(serialize_with = "js_number")]
    pub threshold: f64,
    pub settings: CompactionSettingsView,
}

/// `previewCompaction`: the preparation, or why there is nothing to compact.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum PreviewCompactionResult {
    Preview(Box<CompactionPreview>),
    Nothing(NothingToCompact),
}

/// `previewCompaction`'s answer when there is nothing to compact.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NothingToCompact {
    /// `Already compacted` or `Nothing to compact (session too small)`.
    pub nothing_to_compact: &'static str,
    /// Beyond Pi: why, with the numbers, and which setting changes it.
    #[serde(flatten)]
    pub detail: crate::compaction::prepare::NothingToCompactDetail,
    /// Beyond Pi: what a clearing pass would clear (`compaction.clearToolResults` on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clearing: Option<ClearingPreview>,
}

/// A message count with its estimated tokens.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageStats {
    pub count: usize,
    pub estimated_tokens: u64,
}

/// The file lists a summary would carry.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileLists {
    pub read_files: Vec<String>,
    pub modified_files: Vec<String>,
}

/// `previewCompaction`'s answer when there is something to compact.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionPreview {
    pub first_kept_entry_id: String,
    pub is_split_turn: bool,
    #[serde(serialize_with = "js_number")]
    pub tokens_before: f64,
    pub has_previous_summary: bool,
    pub summarize: MessageStats,
    pub turn_prefix: MessageStats,
    pub kept: MessageStats,
    pub file_lists: FileLists,
    pub settings: CompactionSettingsView,
    /// Beyond Pi: the speculative compaction a compaction due now would install, if any (it
    /// was prepared earlier, so its cut may differ from `firstKeptEntryId` above).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<SpeculationView>,
    /// Beyond Pi: what this compaction would cost and save (see proto-docs/methods.md).
    pub economics: crate::accounting::Economics,
    /// Beyond Pi: what a clearing pass would clear first (`compaction.clearToolResults` on);
    /// the numbers above are the summarizing compaction's, of the original outputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clearing: Option<ClearingPreview>,
    /// Beyond Pi: what the summary's handoff would owe (`compaction.handoff` not `off`, and
    /// `detail: "full"`): the obligations a compaction now would be checked against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffPreview>,
    /// With `detail: "full"` only.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub full: Option<PreviewDetails>,
}

/// What a compaction's handoff would owe now (`previewCompaction`, beyond Pi).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffPreview {
    /// `compaction.handoff`.
    pub mode: crate::handoff::Mode,
    /// Each obligation with the entry it comes from, in kind order.
    pub owed: Vec<crate::handoff::Item>,
}

/// The members `previewCompaction {detail: "full"}` adds.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewDetails {
    pub previous_summary: Option<String>,
    pub messages_to_summarize: Vec<MessageRef>,
    pub turn_prefix_messages: Vec<MessageRef>,
    /// The serialized summarizer input (`<conversation>` text) of each part.
    pub serialized: SerializedInputs,
}

/// A message a compaction would summarize.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageRef {
    pub entry_id: Option<String>,
    pub role: Value,
}

/// The summarizer's input texts (`<conversation>` text) of each part.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SerializedInputs {
    pub messages_to_summarize: String,
    /// null without a split turn.
    pub turn_prefix_messages: Option<String>,
}

/// What an automatic check did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CheckAction {
    #[default]
    None,
    Compacted,
    Failed,
    Aborted,
}

/// Why an automatic compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AutoReason {
    Threshold,
    Overflow,
    /// Beyond Pi: the idle gate (`compaction.idleCompactAt`).
    Idle,
}

impl AutoReason {
    /// The reason as events and logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            AutoReason::Threshold => "threshold",
            AutoReason::Overflow => "overflow",
            AutoReason::Idle => "idle",
        }
    }
}

/// The outcome of an automatic check. Compaction outcomes are never JSON-RPC errors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckCompactionResult {
    pub action: CheckAction,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "AutoReason")]
    pub reason: Option<AutoReason>,
    pub will_retry: bool,
    pub context_changed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "CompactionResult")]
    pub result: Option<CompactionResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub error_message: Option<String>,
    /// Beyond Pi: the clearing pass this check ran before its compaction decision
    /// (`compaction.clearToolResults`); `contextChanged` is then true.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "ClearingPass")]
    pub cleared: Option<ClearingPass>,
}

/// A clearing pass `checkCompaction` ran (beyond Pi, `compaction.clearToolResults`): the tool
/// results it cleared from the projected context, what that freed, and the context before (as
/// the check measured it) and after (the projection's estimate).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearingPass {
    pub entry_ids: Vec<String>,
    pub tokens_freed: u64,
    #[serde(serialize_with = "crate::compaction::summary::js_number")]
    pub tokens_before: f64,
    #[serde(serialize_with = "crate::compaction::summary::js_number")]
    pub tokens_after: f64,
}

/// What a clearing pass would clear now (`previewCompaction`, beyond Pi): every clearable tool
/// result, and whether a `checkCompaction` now would run the pass (`due`: the context is at
/// `atTokens` and the pass frees at least `clearAtLeast`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearingPreview {
    pub entry_ids: Vec<String>,
    pub tokens_freed: u64,
    #[serde(serialize_with = "crate::compaction::summary::js_number")]
    pub tokens_before: f64,
    #[serde(serialize_with = "crate::compaction::summary::js_number")]
    pub tokens_after: f64,
    /// `at` × the threshold: the context size from which a pass is considered.
    #[serde(serialize_with = "crate::compaction::summary::js_number")]
    pub at_tokens: f64,
    pub due: bool,
    /// The pass frees enough but waits: the provider's cache is warm and the reads of what it
    /// would clear have not yet paid for the rewrite it would cause (`cacheAware`).
    pub waits_for_cache: bool,
    /// Under Pi 1.6's rules, the pass as the `context_edit` entries that make it (one per
    /// output, its content replaced by the placeholder): what a client appending for Pi (the
    /// Pi extension returns them from `turn_end`) writes. Absent under 0.85.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edits: Option<Vec<ContextEditDraft>>,
}

/// A Pi 1.6 `context_edit` entry before it is written (Pi's `ContextEditEntryDraft`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextEditDraft {
    /// Always `"context_edit"`.
    #[serde(rename = "type")]
    pub kind: String,
    pub target_id: String,
    /// `{content}`: the message's content from then on (its other fields stay).
    pub replacement: Value,
}

/// `navigateTree`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NavigateTreeResult {
    /// The appended branch summary, when one was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BranchSummaryEntry")]
    pub summary_entry: Option<BranchSummaryEntry>,
    pub new_leaf_id: Option<String>,
    pub old_leaf_id: Option<String>,
    pub cancelled: bool,
    /// Present (true) when the branch summary was aborted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "bool")]
    pub aborted: Option<bool>,
    /// When the target is a user message or custom_message: its text; the leaf moves to its
    /// parent.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub editor_text: Option<String>,
}

impl NavigateTreeResult {
    /// The leaf did not move (the target is the leaf, or a hook or an abort cancelled).
    pub fn stayed(leaf: Option<String>, cancelled: bool) -> NavigateTreeResult {
        NavigateTreeResult {
            summary_entry: None,
            new_leaf_id: leaf.clone(),
            old_leaf_id: leaf,
            cancelled,
            aborted: None,
            editor_text: None,
        }
    }
}

/// `abortCompaction`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbortCompactionResult {
    /// Whether a compaction or branch summary was running.
    pub aborted: bool,
    /// Beyond Pi: whether a speculative compaction (running or ready) was discarded.
    pub speculation_discarded: bool,
}

/// Where a speculative compaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SpeculationState {
    /// The summarizer is still writing it.
    Running,
    /// Written; the next due compaction installs it.
    Ready,
}

/// Beyond Pi: a session's speculative compaction, as `previewCompaction` and `listSessions`
/// report it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationView {
    pub state: SpeculationState,
    /// The last entry it summarizes.
    pub covers_through_entry_id: Option<String>,
    /// Its cut: everything from here on stays verbatim.
    pub first_kept_entry_id: String,
    pub started_at: String,
    /// The context tokens when it started.
    #[serde(serialize_with = "js_number")]
    pub tokens: f64,
    /// The ready summary's estimated tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_tokens: Option<u64>,
    /// The ready summary's handoff score (`compaction.handoff` not `off`): the share of what
    /// it owes that it carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_score: Option<f64>,
    /// A compaction due now (at the threshold, or a manual one without instructions) would
    /// install it (ready) or wait for it (running): it is still valid.
    pub would_install: bool,
}

/// Beyond Pi: tokens and dollars spent on one kind of call, summed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSpend {
    /// How many calls (replies, compactions, speculations).
    pub count: u64,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// null when a price is unknown for any of them.
    pub usd: Option<f64>,
}

impl Default for SessionSpend {
    fn default() -> Self {
        SessionSpend {
            count: 0,
            input: 0,
            output: 0,
            cache_read: 0,
            cache_write: 0,
            usd: Some(0.0),
        }
    }
}

impl SessionSpend {
    pub fn add(&mut self, c: &crate::accounting::Cost) {
        self.count += 1;
        self.input += c.input;
        self.output += c.output;
        self.cache_read += c.cache_read;
        self.cache_write += c.cache_write;
        // Rounded to the nano-dollar at every step, so a sum of prices never shows float noise
        // (0.7186860000000002).
        self.usd = self
            .usd
            .zip(c.usd)
            .map(|(a, b)| crate::accounting::cost::round_usd(a + b));
    }
}

/// The cache write the first request after a compaction made.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CacheRewrite {
    pub compaction_id: String,
    /// Its cache write and uncached input, as the agent's provider reported them.
    pub tokens: u64,
    /// The cache had expired before the compaction (the reply before it was older than
    /// `cacheTtlSeconds`): the rewrite would have happened anyway, and costs the compaction 0.
    pub cold: bool,
    /// null when the agent's model has no known price.
    pub usd: Option<f64>,
}

/// `getCostReport`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostReport {
    /// The agent's replies (every assistant message in the file).
    pub agent: SessionSpend,
    /// The compaction entries' summarization calls.
    pub compactions: SessionSpend,
    /// Speculative summaries this daemon made and threw away.
    pub discarded_speculations: SessionSpend,
    /// Each compaction's cache rewrite (compactions followed by a reply).
    pub cache_rewrites: Vec<CacheRewrite>,
    /// What compaction cost in all: compactions, discarded speculations and cache rewrites
    /// (null when a price is unknown).
    pub compaction_usd: Option<f64>,
    /// Beyond Pi: what the clearing passes (`compaction.clearToolResults`) saved.
    pub clearing: ClearingSpend,
    /// Each compaction entry of the file, in file order: what its summarization cost and how
    /// much of its handoff it carried.
    pub per_compaction: Vec<CompactionRow>,
}

/// One compaction entry in `getCostReport`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionRow {
    pub compaction_id: String,
    /// `details.summarizer` (`extractive`, `provider/model`), or `hook` for a hook's summary;
    /// absent when the entry does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<String>,
    /// Its calls' tokens, as its `usage` reports them.
    pub input: u64,
    pub output: u64,
    /// null when a price is unknown.
    pub usd: Option<f64>,
    /// Its summary's handoff score (`compaction.handoff`): this daemon's check, or what a
    /// repaired entry records; absent when it was not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_score: Option<f64>,
}

/// What clearing passes saved (`getCostReport`): tokens each later request left out, priced as
/// the cheapest input (cache reads) less the cache rewrites the passes caused, so a lower bound.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClearingSpend {
    /// Clearing passes in the file.
    pub passes: u64,
    /// Tokens the passes freed from the context.
    pub tokens_freed: u64,
    /// Tokens the agent's requests after each pass left out (until the next compaction).
    pub tokens_not_sent: u64,
    /// The first request after each pass rewrote the cache from the first cleared output on
    /// (its cache write and uncached input; 0 when the cache had expired anyway). null when
    /// the agent's model has no known price.
    pub cache_rewrite_usd: Option<f64>,
    /// `tokensNotSent` at the cache-read price, less `cacheRewriteUsd` (null without a price).
    pub usd_saved: Option<f64>,
}

impl Default for ClearingSpend {
    fn default() -> ClearingSpend {
        ClearingSpend {
            passes: 0,
            tokens_freed: 0,
            tokens_not_sent: 0,
            cache_rewrite_usd: Some(0.0),
            usd_saved: None,
        }
    }
}

/// One session in the shared store (`listStoredSessions`).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredSessionInfo {
    /// The header id: `openSession {headerId}` opens it on any daemon of the store.
    pub header_id: String,
    pub cwd: String,
    /// When it was stored, in ms since the epoch.
    pub created: i64,
    pub entry_count: i64,
}

/// `listStoredSessions`' answer, newest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredSessions {
    pub sessions: Vec<StoredSessionInfo>,
}

/// `syncSession`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncSessionResult {
    pub leaf_id: Option<String>,
    pub entry_count: usize,
    /// The session's speculative compaction after the sync, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<SpeculationView>,
}

/// The session's effective settings: defaults ← global settings.json ← trusted project
/// settings ← overrides.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveSettings {
    pub compaction: CompactionSettingsView,
    pub branch_summary: BranchSummarySettings,
    /// Pi's `settings.retry`: how the session's summarization calls retry transient errors.
    pub retry: RetryView,
    pub default_thinking_level: String,
    /// Whose rules the session follows: `"1.6"` (Pi 1.6.0) or `"0.85"` (Pi 0.85.0).
    pub pi_version: &'static str,
}

/// An effective `retry` settings block.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryView {
    pub enabled: bool,
    pub max_retries: u32,
    pub base_delay_ms: u64,
}

/// An effective `branchSummary` settings block.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchSummarySettings {
    pub reserve_tokens: i64,
}

/// `setSettingsOverrides`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SetSettingsOverridesResult {
    /// Always true.
    pub ok: bool,
}

/// `subscribe`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SubscribeResult {
    /// Always true.
    pub subscribed: bool,
}

/// `unsubscribe`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UnsubscribeResult {
    /// Always true.
    pub unsubscribed: bool,
}

/// `registerHooks`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RegisterHooksResult {
    /// Always true.
    pub registered: bool,
}

/// The daemon's view of an open session.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub path: String,
    pub header_id: String,
    pub cwd: Option<String>,
    pub leaf_id: Option<String>,
    pub entry_count: usize,
    pub persisted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Model")]
    pub model: Option<Model>,
    pub thinking_level: String,
    pub is_compacting: bool,
    /// Beyond Pi, in `listSessions`' answer only: the agent context's estimated tokens, as
    /// `getContextUsage` reports them; after a compaction, until a reply reports usage (when
    /// `getContextUsage` says null), the sum of the context messages' estimates (what
    /// `estimatedTokensAfter` reported).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "js_number_opt"
    )]
    #[schemars(with = "f64")]
    pub context_tokens: Option<f64>,
    /// Beyond Pi, in `listSessions`' answer only, with a model: `contextWindow - reserveTokens`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "js_number_opt"
    )]
    #[schemars(with = "f64")]
    pub threshold: Option<f64>,
    /// Beyond Pi, in `listSessions`' answer only: where automatic compaction stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "AutoCompaction")]
    pub auto_compaction: Option<AutoCompaction>,
    /// Beyond Pi, in `listSessions`' answer only, while a compaction runs (not a `navigateTree`
    /// branch summary, which only sets `isCompacting`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "CurrentCompaction")]
    pub current_compaction: Option<CurrentCompaction>,
    /// Beyond Pi, in `listSessions`' answer only: the latest compaction on the current branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "LastCompaction")]
    pub last_compaction: Option<LastCompaction>,
    /// Beyond Pi: the session's speculative compaction, if one runs or is ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation: Option<SpeculationView>,
}

/// Where a session's automatic compaction stands (beyond Pi).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AutoCompaction {
    /// Threshold and overflow compactions run as Pi's settings say.
    On,
    /// `compaction.enabled` is false: only overflow recovery and manual compactions run.
    Off,
    /// The thrash breaker skips the next threshold compaction (the last one was ineffective).
    Suppressed,
    /// The thrash breaker paused threshold compaction until a manual `compact` or a settings
    /// change.
    Paused,
}

/// The compaction running now (beyond Pi).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentCompaction {
    /// `compaction_start`'s reason.
    pub reason: String,
    /// When `compaction_start` was sent (ISO 8601).
    pub started_at: String,
    /// Milliseconds since then, at the time of the answer.
    pub elapsed_ms: u64,
}

/// The latest compaction entry on the current branch (beyond Pi).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastCompaction {
    pub entry_id: String,
    /// The entry's timestamp as stored.
    pub timestamp: Value,
    #[serde(serialize_with = "js_number")]
    pub tokens_before: f64,
    /// The context estimate right after this daemon wrote it (absent for an entry it did not
    /// write in this run, or an edited copy).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub tokens_after: Option<u64>,
    /// `details.summarizer` (`extractive`), `hook` for a hook's summary, else, for an entry
    /// this daemon wrote, the engine that compacts the session (`provider/model`); absent when
    /// not known (an LLM entry written by Pi or an earlier daemon).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub summarizer: Option<String>,
    /// From `compaction_start` to `compaction_end`, when this daemon ran it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "u64")]
    pub duration_ms: Option<u64>,
    /// Its summary's handoff score (`compaction.handoff`), when this daemon checked it or the
    /// entry records it (`details.handoff`, a repaired summary).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "f64")]
    pub handoff_score: Option<f64>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendResult {
    pub entry_id: String,
    pub leaf_id: String,
}

/// `setModel`'s answer: the append, and (beyond Pi) whether the current context already needs a
/// compaction under the new model, so the agent never sends a request known to overflow.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetModelResult {
    pub entry_id: String,
    pub leaf_id: String,
    /// The context's estimate exceeds the new model's threshold (`contextWindow - reserveTokens`):
    /// the next `checkCompaction` compacts, whatever its phase.
    pub should_compact: bool,
    /// The context's estimated tokens.
    pub tokens: f64,
    /// `contextWindow - reserveTokens` of the new model.
    pub threshold: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn moved_replies_are_the_json_their_types_serialize_to() {
        let entry = json!({"type": "message", "id": "a1", "parentId": null, "timestamp": "t", "message": {"role": "user", "content": "hi", "2": 1}});
        let branch: Branch = vec![SessionEntry(entry.clone()), SessionEntry(entry.clone())];
        assert_eq!(
            branch.clone().into_reply().unwrap(),
            serde_json::to_value(&branch).unwrap()
        );
        for leaf_id in [None, Some("a1".to_owned())] {
            let context = Context {
                messages: vec![AgentMessage(entry["message"].clone())],
                leaf_id,
            };
            assert_eq!(
                context.clone().into_reply().unwrap(),
                serde_json::to_value(&context).unwrap()
            );
        }
        let one = SessionEntry(entry.clone());
        assert_eq!(one.into_reply().unwrap(), entry);
    }
}
