//! The events a subscriber receives and the hook traffic a registered connection receives, each
//! declared once: [`EVENTS`] and [`HOOKS`] list name, payload type and summary; the payload
//! types below are what the daemon builds (Pi's key order) and what the OpenRPC document's
//! `x-notifications` / `x-hooks` describe (derived `JsonSchema`). `subscribe`, `registerHooks`
//! and `initialize` take their names from the same lists. `tests/openrpc.rs` checks the daemon's
//! real traffic against the document.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::results::{
    pi_json, AgentMessage, AutoReason, CompactionResult, CompactionSettingsView, SessionEntry,
};
use super::schemas::Schemas;
use crate::compaction::reply::Usage;
use crate::compaction::summary::js_number;

/// Why a compaction runs (Pi's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    Manual,
    Threshold,
    Overflow,
    /// Beyond Pi: the idle gate (`compaction.idleCompactAt`): the provider's cache has expired
    /// anyway, so compacting now costs no cache rewrite.
    Idle,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Manual => "manual",
            Reason::Threshold => "threshold",
            Reason::Overflow => "overflow",
            Reason::Idle => "idle",
        }
    }
}

impl From<AutoReason> for Reason {
    fn from(r: AutoReason) -> Reason {
        match r {
            AutoReason::Threshold => Reason::Threshold,
            AutoReason::Overflow => Reason::Overflow,
            AutoReason::Idle => Reason::Idle,
        }
    }
}

/// `compaction_start`'s payload.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionStart<'a> {
    pub session_id: &'a str,
    pub reason: Reason,
}

/// `compaction_end`'s payload.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionEnd<'a> {
    pub session_id: &'a str,
    pub reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "CompactionResult")]
    pub result: Option<&'a CompactionResult>,
    pub aborted: bool,
    pub will_retry: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub error_message: Option<&'a str>,
}

/// Why the thrash breaker skipped a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Ineffectiveness {
    /// The previous compaction did not bring the context under the threshold.
    Ineffective,
    /// The kept tail and the pins alone are over the threshold: no compaction can help.
    Floor,
}

/// `compaction_suppressed`'s payload (beyond Pi: the thrash breaker).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionSuppressed<'a> {
    pub session_id: &'a str,
    pub reason: Ineffectiveness,
    #[serde(serialize_with = "js_number")]
    pub tokens_before: f64,
    /// The first context size reported after that compaction.
    #[serde(serialize_with = "js_number")]
    pub tokens_after: f64,
    #[serde(serialize_with = "js_number")]
    pub threshold: f64,
    pub paused: bool,
}

/// `compaction_undone`'s payload (beyond Pi): `undoCompaction` made the path before compaction
/// `compactionId` active by appending `entryId`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionUndone<'a> {
    pub session_id: &'a str,
    pub compaction_id: &'a str,
    pub entry_id: &'a str,
}

/// `summary_edited`'s payload (beyond Pi): `editSummary` appended `entryId`, a corrected copy of
/// compaction `compactionId`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummaryEdited<'a> {
    pub session_id: &'a str,
    pub compaction_id: &'a str,
    pub entry_id: &'a str,
}

/// Why a speculative summary was thrown away (beyond Pi: speculative compaction). Each names
/// what changed since the speculation started, or why it could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum DiscardReason {
    /// `navigateTree` moved the leaf off the summarized entries.
    Navigated,
    /// `undoCompaction` made another path active.
    Undone,
    /// `editSummary` replaced the compaction the speculation built on.
    Edited,
    /// Another compaction was written to the branch.
    Compacted,
    /// The session's model (or the summarizer it selects) changed.
    ModelChanged,
    /// A setting that shapes the request changed (reserveTokens, keepRecentTokens, the
    /// thinking level), or speculation was turned off.
    SettingsChanged,
    /// `abortCompaction`, or the daemon shutting down.
    Aborted,
    /// Another writer's lines forked the branch away from the summarized entries.
    Forked,
    /// The summarized entries are no longer on the current branch.
    BranchChanged,
    /// The summarization call failed.
    Failed,
    /// A `session_before_compact` hook cancelled it.
    HookCancelled,
    /// The session was closed.
    Closed,
}

/// `speculation_started`'s payload (beyond Pi).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationStarted<'a> {
    pub session_id: &'a str,
    /// The last entry the speculative summary covers (the one before its firstKeptEntryId).
    #[schemars(with = "Option<String>")]
    pub covers_through_entry_id: Option<&'a str>,
    /// The context tokens (Pi's usage-first estimate) when it started.
    #[serde(serialize_with = "js_number")]
    pub tokens: f64,
}

/// `speculation_ready`'s payload (beyond Pi).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationReady<'a> {
    pub session_id: &'a str,
    #[schemars(with = "Option<String>")]
    pub covers_through_entry_id: Option<&'a str>,
    /// The summary's estimated tokens (chars/4).
    pub summary_tokens: u64,
    /// How long the summarization took.
    pub ms: u64,
}

/// `speculation_discarded`'s payload (beyond Pi).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationDiscarded<'a> {
    pub session_id: &'a str,
    pub reason: DiscardReason,
}

/// `summarization_retry_scheduled`'s payload.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryScheduled<'a> {
    pub session_id: &'a str,
    pub attempt: u32,
    pub max_attempts: u32,
    pub delay_ms: u64,
    pub error_message: &'a str,
}

/// What a retried summarization call belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RetrySource {
    Compaction,
}

/// `summarization_retry_attempt_start`'s payload.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryAttemptStart<'a> {
    pub session_id: &'a str,
    pub source: RetrySource,
    pub reason: Reason,
}

/// `summarization_retry_finished`'s payload.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryFinished<'a> {
    pub session_id: &'a str,
}

/// `subscription_dropped`'s payload (none).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SubscriptionDropped {}

pi_json!(
    /// A stored `compaction` entry, exactly as in the file.
    CompactionEntry,
    |generator| {
            "type": "object",
            "properties": {
                "type": {"const": "compaction"},
                "id": {"type": "string"},
                "parentId": {"type": ["string", "null"]},
                "timestamp": {"type": "string"},
                "summary": {"type": "string"},
                "firstKeptEntryId": {"type": "string"},
                "tokensBefore": {"type": "number"},
                "details": {"type": "object"},
                "usage": generator.subschema_for::<Usage>(),
                "fromHook": {"type": "boolean"}
            },
            "required": ["type", "id", "parentId", "timestamp", "summary", "firstKeptEntryId", "tokensBefore", "fromHook"]
        }
);

/// The `session_before_compact` hook request.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionBeforeCompact<'a> {
    pub session_id: &'a str,
    pub preparation: CompactionPreparation,
    pub branch_entries: Vec<SessionEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub custom_instructions: Option<&'a str>,
    pub reason: Reason,
    pub will_retry: bool,
    /// Beyond Pi: asked when a speculative compaction starts (the summary is installed later,
    /// when the compaction is due). Omitted for normal compactions.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub speculative: bool,
}

/// Pi's `CompactionPreparation` (compaction.md §5 step 13) as hooks receive it, sets as arrays.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionPreparation {
    pub first_kept_entry_id: String,
    pub messages_to_summarize: Vec<AgentMessage>,
    pub turn_prefix_messages: Vec<AgentMessage>,
    pub is_split_turn: bool,
    #[serde(serialize_with = "js_number")]
    pub tokens_before: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub previous_summary: Option<String>,
    pub file_ops: FileOps,
    pub settings: CompactionSettingsView,
}

/// The file operations of a preparation, each set as an array in first-seen order.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileOps {
    pub read: Vec<String>,
    pub written: Vec<String>,
    pub edited: Vec<String>,
}

impl CompactionPreparation {
    /// The hooks' view of `prep` (every message parsed from its line now: CPU work).
    pub fn of(prep: &crate::compaction::Preparation) -> CompactionPreparation {
        let messages = |m: &[crate::compaction::prepare::PreparedMessage]| {
            m.iter().map(|x| AgentMessage(x.message())).collect()
        };
        let set = |s: &indexmap::IndexSet<String>| s.iter().cloned().collect();
        CompactionPreparation {
            first_kept_entry_id: prep.first_kept_entry_id.clone(),
            messages_to_summarize: messages(&prep.messages_to_summarize),
            turn_prefix_messages: messages(&prep.turn_prefix_messages),
            is_split_turn: prep.is_split_turn,
            tokens_before: prep.tokens_before,
            previous_summary: prep.previous_summary.clone(),
            file_ops: FileOps {
                read: set(&prep.file_ops.read),
                written: set(&prep.file_ops.written),
                edited: set(&prep.file_ops.edited),
            },
            settings: CompactionSettingsView::from(&prep.settings),
        }
    }
}

/// The `session_before_tree` hook request.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionBeforeTree<'a> {
    pub session_id: &'a str,
    pub preparation: TreePreparation<'a>,
}

/// Pi's tree-navigation preparation (compaction.md §9).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TreePreparation<'a> {
    pub target_id: Option<&'a str>,
    pub old_leaf_id: Option<&'a str>,
    pub common_ancestor_id: Option<&'a str>,
    pub entries_to_summarize: Vec<SessionEntry>,
    pub user_wants_summary: bool,
    pub custom_instructions: Option<&'a str>,
    pub replace_instructions: bool,
    pub label: Option<&'a str>,
}

/// The `session_compact` hook notification.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCompact<'a> {
    pub session_id: &'a str,
    pub compaction_entry: CompactionEntry,
    pub from_extension: bool,
    pub reason: Reason,
    pub will_retry: bool,
}

/// The `session_compact_failed` hook notification.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCompactFailed<'a> {
    pub session_id: &'a str,
    pub reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub error_message: Option<&'a str>,
    pub aborted: bool,
    /// Always false: a failed compaction is never retried.
    pub will_retry: bool,
    pub from_extension: bool,
}

/// What a client answers a `session_before_compact` request with (`null`: no result). Parsed
/// once, leniently as Pi reads an extension's result: a member of the wrong shape counts as
/// absent (and is logged), so `{"cancel": true, "compaction": 5}` still cancels.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionBeforeCompactReply {
    /// `true` cancels the compaction; later connections are not asked.
    #[serde(default, deserialize_with = "lenient::only_true")]
    #[schemars(with = "Option<bool>")]
    pub cancel: bool,
    /// A compaction to write instead of calling the summarizer (`fromHook: true`).
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub compaction: Option<HookCompaction>,
}

/// A hook's own compaction.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookCompaction {
    pub summary: String,
    /// Must be on the branch, else the reply counts as no result (beyond Pi).
    pub first_kept_entry_id: String,
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub tokens_before: Option<f64>,
    #[serde(default)]
    pub details: Option<Value>,
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub usage: Option<Usage>,
}

/// What a client answers a `session_before_tree` request with (`null`: no result), parsed as
/// leniently as [`SessionBeforeCompactReply`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionBeforeTreeReply {
    /// `true` cancels the navigation.
    #[serde(default, deserialize_with = "lenient::only_true")]
    #[schemars(with = "Option<bool>")]
    pub cancel: bool,
    /// A branch summary to write instead of calling the summarizer (when one was asked for).
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub summary: Option<HookBranchSummary>,
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub custom_instructions: Option<String>,
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub replace_instructions: Option<bool>,
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub label: Option<String>,
}

/// A hook's own branch summary.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
pub struct HookBranchSummary {
    pub summary: String,
    #[serde(default)]
    pub details: Option<Value>,
    #[serde(default, deserialize_with = "lenient::or_absent")]
    pub usage: Option<Usage>,
}

/// Hook replies come from other programs: a member of the wrong shape is dropped, not the
/// whole reply.
mod lenient {
    use serde::de::DeserializeOwned;
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// The member when it has the expected shape, else absent (logged).
    pub fn or_absent<'de, D: Deserializer<'de>, T: DeserializeOwned>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        let v = Value::deserialize(d)?;
        if v.is_null() {
            return Ok(None);
        }
        match serde_json::from_value(v) {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                tracing::warn!(error = %e, "a hook reply member has the wrong shape; ignored");
                Ok(None)
            }
        }
    }

    /// `true` only for the JSON value `true`.
    pub fn only_true<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        Ok(Value::deserialize(d)? == Value::Bool(true))
    }
}

/// A hook reply, parsed once: `None` for no result (`null`, falsy, or not an object).
pub fn reply<T: serde::de::DeserializeOwned>(hook: &str, v: &Value) -> Option<T> {
    if !v.is_object() {
        return None;
    }
    match serde_json::from_value(v.clone()) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(hook, error = %e, "hook reply is not one the daemon accepts; treated as no result");
            None
        }
    }
}

/// `window/logMessage`'s payload (LSP's shape): one line of the daemon's log, for a connection
/// that asked with `initialize {logNotifications: true}`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LogMessage<'a> {
    /// LSP's `MessageType`: 1 error, 2 warning, 3 info, 4 debug or trace.
    #[serde(rename = "type")]
    pub kind: u8,
    /// `target: message key=value …`, as the log file shows it without time and level.
    pub message: &'a str,
}

/// The method name of [`LogMessage`] notifications.
pub const LOG_MESSAGE: &str = "window/logMessage";

/// How a hook reaches a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// A request the daemon waits on (with the registration's timeout).
    Request,
    /// A notification: nothing is answered.
    Notification,
}

/// One event or hook, as the lists declare it.
pub struct MessageSpec {
    pub name: &'static str,
    pub summary: &'static str,
    /// For hooks: request or notification.
    pub kind: Option<HookKind>,
    /// One OpenRPC content descriptor per member of the payload.
    pub params_schema: fn(&mut Schemas) -> Vec<Value>,
    /// For hook requests: the schema of the reply the daemon accepts.
    pub reply_schema: Option<fn(&mut Schemas) -> Value>,
}

/// A message the daemon sends (an event, or a hook request or notification): its payload type
/// knows its wire name, from the one list that declares it, so no call site spells a name.
pub trait Message: Serialize {
    const NAME: &'static str;
}

/// A hook request, and the reply type it is parsed into (declared beside it in [`HOOKS`]).
pub trait HookRequest: Message {
    type Reply: serde::de::DeserializeOwned;
}

macro_rules! messages {
    ($list:ident: $( $(#[doc = $doc:literal])+ $name:literal $(($kind:ident $(-> $reply:ty)?))? => $payload:ident $(<$lt:lifetime>)? ),* $(,)?) => {
        pub const $list: &[MessageSpec] = &[$(
            MessageSpec {
                name: $name,
                summary: concat!($($doc),+),
                kind: messages!(@kind $($kind)?),
                params_schema: |s| s.fields::<$payload $(<$lt>)?>(),
                reply_schema: messages!(@reply $($($reply)?)?),
            }
        ),*];
        $( messages!(@impl $name, $payload $(, $lt)?); )*
        $( $( $( messages!(@request $payload, $reply); )? )? )*
    };
    (@request $payload:ident, $reply:ty) => {
        impl HookRequest for $payload<'_> {
            type Reply = $reply;
        }
    };
    (@kind) => { None };
    (@kind $kind:ident) => { Some(HookKind::$kind) };
    (@reply) => { None };
    (@reply $reply:ty) => { Some(|s: &mut Schemas| s.nullable::<$reply>()) };
    (@impl $name:literal, $payload:ident) => {
        impl Message for $payload {
            const NAME: &'static str = $name;
        }
    };
    (@impl $name:literal, $payload:ident, $lt:lifetime) => {
        impl Message for $payload<'_> {
            const NAME: &'static str = $name;
        }
    };
}

// The events a connection can subscribe to, in the order `initialize` advertises them
// (`subscription_dropped` is delivered whatever the filters say, but may be named too).
messages! { EVENTS:
    /// A compaction of the session started (Pi's `compaction_start`). An agent treats
    /// reason "manual" for its session as Pi's abort().
    "compaction_start" => CompactionStart<'static>,
    /// Beyond Pi (thrash breaker): an automatic threshold compaction was skipped because
    /// the previous one did not bring the context under the threshold. `paused`: automatic
    /// compaction is now paused for the session until a manual compact or a settings change
    /// (sent once per pause).
    "compaction_suppressed" => CompactionSuppressed<'static>,
    /// Beyond Pi: undoCompaction made the path before compaction `compactionId` active
    /// (`entryId`: the appended marker, the new leaf).
    "compaction_undone" => CompactionUndone<'static>,
    /// Beyond Pi: editSummary appended `entryId`, a corrected copy of compaction
    /// `compactionId`.
    "summary_edited" => SummaryEdited<'static>,
    /// A compaction ended. `result` is omitted (not null) unless it succeeded;
    /// `errorMessage` is prefixed (`Compaction failed: `, `Auto-compaction failed: `,
    /// `Context overflow recovery failed: `) or is the overflow give-up text.
    "compaction_end" => CompactionEnd<'static>,
    /// Beyond Pi: a speculative compaction started summarizing the context in the background,
    /// before the threshold (compaction.speculativeAt), so the compaction at the threshold is
    /// instant.
    "speculation_started" => SpeculationStarted<'static>,
    /// Beyond Pi: the speculative summary is ready; the next due compaction installs it.
    "speculation_ready" => SpeculationReady<'static>,
    /// Beyond Pi: a speculative summary was thrown away and will not be installed.
    "speculation_discarded" => SpeculationDiscarded<'static>,
    /// A summarization call failed with a retryable error; the next attempt is scheduled.
    "summarization_retry_scheduled" => RetryScheduled<'static>,
    /// A scheduled retry attempt starts.
    "summarization_retry_attempt_start" => RetryAttemptStart<'static>,
    /// The retry sequence of a summarization call ended.
    "summarization_retry_finished" => RetryFinished<'static>,
    /// This connection fell too far behind (1024 queued events); its subscriptions were
    /// removed. Sent once, after the queue drained. Resubscribe to continue.
    "subscription_dropped" => SubscriptionDropped,
}

// Notifications a connection asks for on `initialize`, not by `subscribe`.
messages! { NOTICES:
    /// One line of the daemon's log, sent to connections that initialized with
    /// `logNotifications: true` (at the daemon's log level; lines are dropped for a connection
    /// that has more than 1 MiB unread).
    "window/logMessage" => LogMessage<'static>,
}

// The hooks a connection can register for.
messages! { HOOKS:
    /// Asked before a compaction summarizes (Pi's session_before_compact). Connections are
    /// asked in registration order, at most once each; a timeout, error or disconnect
    /// counts as no result. The last result with a valid compaction wins; cancel stops.
    "session_before_compact" (Request -> SessionBeforeCompactReply) => SessionBeforeCompact<'static>,
    /// A compaction entry was appended (Pi's session_compact). `compactionEntry` is the
    /// first compaction in the file with this summary.
    "session_compact" (Notification) => SessionCompact<'static>,
    /// A compaction ended without an entry (Pi's session_compact_failed).
    "session_compact_failed" (Notification) => SessionCompactFailed<'static>,
    /// Asked before navigateTree moves the leaf (Pi's session_before_tree).
    "session_before_tree" (Request -> SessionBeforeTreeReply) => SessionBeforeTree<'static>,
}

/// The names of `list`, in its order.
pub fn names(list: &[MessageSpec]) -> Vec<&'static str> {
    list.iter().map(|m| m.name).collect()
}

/// An event payload as the JSON the connections send.
pub fn payload(event: &impl Serialize) -> Value {
    // Plain structs of strings, booleans and numbers always serialize.
    serde_json::to_value(event).unwrap_or_default()
}
