//! The events a subscriber receives and the hook traffic a registered connection receives, each
//! declared once: [`EVENTS`] and [`HOOKS`] list name, payload type and summary; the payload
//! types below are what the daemon builds (Pi's key order) and what the OpenRPC document's
//! `x-notifications` / `x-hooks` describe (derived `JsonSchema`). `subscribe`, `registerHooks`
//! and `initialize` take their names from the same lists. `tests/openrpc.rs` checks the daemon's
//! real traffic against the document.

use std::borrow::Cow;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionStart<'a> {
    pub session_id: &'a str,
    pub reason: Reason,
}

/// `compaction_end`'s payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionEnd<'a> {
    pub session_id: &'a str,
    pub reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    // Borrowed when the daemon announces its own result, owned when parsed from the wire
    // (`Event::parse`): a result is a struct, not a string a `Value` can lend. (A `//`
    // comment: a doc comment would become the member's description in the OpenRPC document.)
    #[schemars(with = "CompactionResult")]
    pub result: Option<Cow<'a, CompactionResult>>,
    pub aborted: bool,
    pub will_retry: bool,
    #[serde(skip_serializing_if = "Option::is_none", borrow)]
    #[schemars(with = "String")]
    pub error_message: Option<&'a str>,
}

/// Why the thrash breaker skipped a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Ineffectiveness {
    /// The previous compaction did not bring the context under the threshold.
    Ineffective,
    /// The kept tail and the pins alone are over the threshold: no compaction can help.
    Floor,
}

/// `compaction_suppressed`'s payload (beyond Pi: the thrash breaker).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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

/// `context_cleared`'s payload (beyond Pi: the second tier): a clearing pass replaced the tool
/// results `entryIds` in the projected context by short texts (`getEntry` returns each).
/// `tokensBefore` is the context the check measured, `tokensAfter` the projection's estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextCleared<'a> {
    pub session_id: &'a str,
    #[serde(borrow)]
    pub entry_ids: Vec<Cow<'a, str>>,
    pub tokens_freed: u64,
    #[serde(serialize_with = "js_number")]
    pub tokens_before: f64,
    #[serde(serialize_with = "js_number")]
    pub tokens_after: f64,
}

/// `compaction_undone`'s payload (beyond Pi): `undoCompaction` made the path before compaction
/// `compactionId` active by appending `entryId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionUndone<'a> {
    pub session_id: &'a str,
    pub compaction_id: &'a str,
    pub entry_id: &'a str,
}

/// `summary_edited`'s payload (beyond Pi): `editSummary` appended `entryId`, a corrected copy of
/// compaction `compactionId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummaryEdited<'a> {
    pub session_id: &'a str,
    pub compaction_id: &'a str,
    pub entry_id: &'a str,
}

/// Why a speculative summary was thrown away (beyond Pi: speculative compaction). Each names
/// what changed since the speculation started, or why it could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationStarted<'a> {
    pub session_id: &'a str,
    /// The last entry the speculative summary covers (the one before its firstKeptEntryId).
    #[serde(borrow)]
    #[schemars(with = "Option<String>")]
    pub covers_through_entry_id: Option<&'a str>,
    /// The context tokens (Pi's usage-first estimate) when it started.
    #[serde(serialize_with = "js_number")]
    pub tokens: f64,
}

/// `speculation_ready`'s payload (beyond Pi).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationReady<'a> {
    pub session_id: &'a str,
    #[serde(borrow)]
    #[schemars(with = "Option<String>")]
    pub covers_through_entry_id: Option<&'a str>,
    /// The summary's estimated tokens (chars/4).
    pub summary_tokens: u64,
    /// How long the summarization took.
    pub ms: u64,
    /// Beyond Pi: the summary's handoff check (`compaction.handoff`): the share of what it owes
    /// that it carries (absent when `off`). The installed compaction reports the full check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff_score: Option<f64>,
}

/// `speculation_discarded`'s payload (beyond Pi).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculationDiscarded<'a> {
    pub session_id: &'a str,
    pub reason: DiscardReason,
}

/// `summarization_retry_scheduled`'s payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryScheduled<'a> {
    pub session_id: &'a str,
    pub attempt: u32,
    pub max_attempts: u32,
    pub delay_ms: u64,
    pub error_message: &'a str,
}

/// What a retried summarization call belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RetrySource {
    Compaction,
}

/// `summarization_retry_attempt_start`'s payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryAttemptStart<'a> {
    pub session_id: &'a str,
    pub source: RetrySource,
    pub reason: Reason,
}

/// `summarization_retry_finished`'s payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryFinished<'a> {
    pub session_id: &'a str,
}

/// `subscription_dropped`'s payload (none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// Beyond Pi: the summary's handoff check (`compaction.handoff` not `off`), as the
    /// compaction's result carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<crate::handoff::Report>,
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
    // The event list: the list of specs, plus the typed view of the same events ([`Event`],
    // [`EventKind`]), so a name is spelled once, here, and both directions follow from it.
    (enum $enum:ident<$elt:lifetime> / $kinds:ident, $list:ident: $( $(#[doc = $doc:literal])+ $name:literal => $payload:ident $(<$lt:lifetime>)? ),* $(,)?) => {
        messages! { $list: $( $(#[doc = $doc])+ $name => $payload $(<$lt>)? ),* }

        /// One event of [`EVENTS`] with its payload, as the daemon announces it or a client
        /// reads it back ([`Event::parse`]). Strings borrow from the parsed `Value`.
        // `compaction_end` carries a whole result: an event is built, read and dropped one at
        // a time, never kept in bulk, so boxing it would only add an allocation.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug, Clone, PartialEq)]
        pub enum $enum<$elt> {
            $( $(#[doc = $doc])+ $payload($payload $(<$lt>)?), )*
        }

        /// Which event of [`EVENTS`], without a payload: for a consumer that only routes by
        /// name (the name is not parsed twice, nor spelled again).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $kinds {
            $( $(#[doc = $doc])+ $payload, )*
        }

        impl $kinds {
            /// The event with this wire name, if it is one of [`EVENTS`].
            pub fn of(name: &str) -> Option<$kinds> {
                match name {
                    $( $name => Some($kinds::$payload), )*
                    _ => None,
                }
            }

            /// The wire name, as declared.
            pub fn name(self) -> &'static str {
                match self {
                    $( $kinds::$payload => $name, )*
                }
            }
        }

        impl<$elt> $enum<$elt> {
            /// Reads the notification `name` with `params` as the typed event: an unknown name
            /// or a payload of the wrong shape is an [`EventError`], never a panic. Members
            /// the payload type does not know are ignored, as a newer daemon may add them;
            /// absent params (`null`: JSON-RPC lets a notification omit them) read as `{}`.
            pub fn parse(name: &str, params: &$elt Value) -> Result<$enum<$elt>, EventError> {
                static NO_PARAMS: std::sync::LazyLock<Value> =
                    std::sync::LazyLock::new(|| Value::Object(Default::default()));
                let params = if params.is_null() { &*NO_PARAMS } else { params };
                let kind = $kinds::of(name).ok_or_else(|| EventError::Unknown(name.to_owned()))?;
                Ok(match kind {
                    $( $kinds::$payload => $enum::$payload(
                        <$payload $(<$lt>)? as Deserialize>::deserialize(params).map_err(|e| {
                            EventError::Payload { name: $name, message: e.to_string() }
                        })?,
                    ), )*
                })
            }

            /// Which event this is.
            pub fn kind(&self) -> $kinds {
                match self {
                    $( $enum::$payload(_) => $kinds::$payload, )*
                }
            }

            /// The wire name, as declared.
            pub fn name(&self) -> &'static str {
                self.kind().name()
            }

            /// The payload as the connections receive it.
            pub fn payload(&self) -> Value {
                match self {
                    $( $enum::$payload(p) => payload(p), )*
                }
            }
        }
    };
    ($list:ident: $( $(#[doc = $doc:literal])+ $name:literal $(($kind:ident $(-> $reply:ty)?))? => $payload:ident $(<$lt:lifetime>)? ),* $(,)?) => {
        pub const $list: &[MessageSpec] = &[$(
            MessageSpec {
                name: $name,
                summary: concat!($($doc),+),
                kind: messages!(@kind $($kind)?),
                params_schema: messages!(@schema $payload $(, $lt)?),
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
    (@schema $payload:ident) => { |s: &mut Schemas| s.fields::<$payload>() };
    (@schema $payload:ident, $lt:lifetime) => { |s: &mut Schemas| s.fields::<$payload<'_>>() };
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

/// Why a notification is not one of [`EVENTS`] as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventError {
    /// No event has this name (a newer daemon's, or not an event at all).
    Unknown(String),
    /// The payload does not have the declared type's shape.
    Payload { name: &'static str, message: String },
}

impl std::fmt::Display for EventError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventError::Unknown(name) => write!(f, "unknown event {name:?}"),
            EventError::Payload { name, message } => {
                write!(f, "event {name:?} has an unexpected payload: {message}")
            }
        }
    }
}

impl std::error::Error for EventError {}

impl Event<'_> {
    /// The session the event is about (`None` for a connection's own notice).
    pub fn session_id(&self) -> Option<&str> {
        match self {
            Event::CompactionStart(e) => Some(e.session_id),
            Event::CompactionSuppressed(e) => Some(e.session_id),
            Event::ContextCleared(e) => Some(e.session_id),
            Event::CompactionUndone(e) => Some(e.session_id),
            Event::SummaryEdited(e) => Some(e.session_id),
            Event::CompactionEnd(e) => Some(e.session_id),
            Event::SpeculationStarted(e) => Some(e.session_id),
            Event::SpeculationReady(e) => Some(e.session_id),
            Event::SpeculationDiscarded(e) => Some(e.session_id),
            Event::RetryScheduled(e) => Some(e.session_id),
            Event::RetryAttemptStart(e) => Some(e.session_id),
            Event::RetryFinished(e) => Some(e.session_id),
            Event::SubscriptionDropped(_) => None,
        }
    }
}

// The events a connection can subscribe to, in the order `initialize` advertises them
// (`subscription_dropped` is delivered whatever the filters say, but may be named too).
messages! { enum Event<'a> / EventKind, EVENTS:
    /// A compaction of the session started (Pi's `compaction_start`). An agent treats
    /// reason "manual" for its session as Pi's abort().
    "compaction_start" => CompactionStart<'a>,
    /// Beyond Pi (thrash breaker): an automatic threshold compaction was skipped because
    /// the previous one did not bring the context under the threshold. `paused`: automatic
    /// compaction is now paused for the session until a manual compact or a settings change
    /// (sent once per pause).
    "compaction_suppressed" => CompactionSuppressed<'a>,
    /// Beyond Pi (compaction.clearToolResults): a clearing pass cleared old tool output from
    /// the projected context before any summarizing (one `compactd.clear` custom entry).
    "context_cleared" => ContextCleared<'a>,
    /// Beyond Pi: undoCompaction made the path before compaction `compactionId` active
    /// (`entryId`: the appended marker, the new leaf).
    "compaction_undone" => CompactionUndone<'a>,
    /// Beyond Pi: editSummary appended `entryId`, a corrected copy of compaction
    /// `compactionId`.
    "summary_edited" => SummaryEdited<'a>,
    /// A compaction ended. `result` is omitted (not null) unless it succeeded;
    /// `errorMessage` is prefixed (`Compaction failed: `, `Auto-compaction failed: `,
    /// `Context overflow recovery failed: `) or is the overflow give-up text.
    "compaction_end" => CompactionEnd<'a>,
    /// Beyond Pi: a speculative compaction started summarizing the context in the background,
    /// before the threshold (compaction.speculativeAt), so the compaction at the threshold is
    /// instant.
    "speculation_started" => SpeculationStarted<'a>,
    /// Beyond Pi: the speculative summary is ready; the next due compaction installs it.
    "speculation_ready" => SpeculationReady<'a>,
    /// Beyond Pi: a speculative summary was thrown away and will not be installed.
    "speculation_discarded" => SpeculationDiscarded<'a>,
    /// A summarization call failed with a retryable error; the next attempt is scheduled.
    "summarization_retry_scheduled" => RetryScheduled<'a>,
    /// A scheduled retry attempt starts.
    "summarization_retry_attempt_start" => RetryAttemptStart<'a>,
    /// The retry sequence of a summarization call ended.
    "summarization_retry_finished" => RetryFinished<'a>,
    /// This connection fell too far behind (1024 queued events); its subscriptions were
    /// removed. Sent once, after the queue drained. Resubscribe to continue.
    "subscription_dropped" => SubscriptionDropped,
}

// Notifications a connection asks for on `initialize`, not by `subscribe`.
messages! { NOTICES:
    /// One line of the daemon's log, sent to connections that initialized with
    /// `logNotifications: true` (at the daemon's log level; lines are dropped for a connection
    /// that has more than 1 MiB unread).
    "window/logMessage" => LogMessage<'a>,
}

// The hooks a connection can register for.
messages! { HOOKS:
    /// Asked before a compaction summarizes (Pi's session_before_compact). Connections are
    /// asked in registration order, at most once each; a timeout, error or disconnect
    /// counts as no result. The last result with a valid compaction wins; cancel stops.
    "session_before_compact" (Request -> SessionBeforeCompactReply) => SessionBeforeCompact<'a>,
    /// A compaction entry was appended (Pi's session_compact). `compactionEntry` is the
    /// first compaction in the file with this summary.
    "session_compact" (Notification) => SessionCompact<'a>,
    /// A compaction ended without an entry (Pi's session_compact_failed).
    "session_compact_failed" (Notification) => SessionCompactFailed<'a>,
    /// Asked before navigateTree moves the leaf (Pi's session_before_tree).
    "session_before_tree" (Request -> SessionBeforeTreeReply) => SessionBeforeTree<'a>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::Cost;
    use serde_json::json;

    /// A payload of `kind` with every optional member present (the exhaustive match makes a
    /// new event declare its sample here).
    fn sample(kind: EventKind) -> Event<'static> {
        match kind {
            EventKind::CompactionStart => Event::CompactionStart(CompactionStart {
                session_id: "s1",
                reason: Reason::Idle,
            }),
            EventKind::CompactionSuppressed => Event::CompactionSuppressed(CompactionSuppressed {
                session_id: "s1",
                reason: Ineffectiveness::Floor,
                tokens_before: 195_000.0,
                tokens_after: 190_000.5,
                threshold: 183_616.0,
                paused: true,
            }),
            EventKind::ContextCleared => Event::ContextCleared(ContextCleared {
                session_id: "s1",
                entry_ids: vec!["e1".into(), "e2".into()],
                tokens_freed: 12_000,
                tokens_before: 150_000.0,
                tokens_after: 138_000.5,
            }),
            EventKind::CompactionUndone => Event::CompactionUndone(CompactionUndone {
                session_id: "s1",
                compaction_id: "c1",
                entry_id: "e2",
            }),
            EventKind::SummaryEdited => Event::SummaryEdited(SummaryEdited {
                session_id: "s1",
                compaction_id: "c1",
                entry_id: "e3",
            }),
            EventKind::CompactionEnd => Event::CompactionEnd(CompactionEnd {
                session_id: "s1",
                reason: Reason::Overflow,
                result: Some(Cow::Owned(CompactionResult {
                    summary: "## Goal\n\"quoted\" \u{1F600}".into(),
                    first_kept_entry_id: "e9".into(),
                    tokens_before: 150_000.0,
                    estimated_tokens_after: 9_000,
                    usage: Some(Usage::default()),
                    details: Some(json!({"summarizer": "extractive", "readFiles": ["a"]})),
                    cost: Some(Cost {
                        input: 1,
                        output: 2,
                        cache_read: 3,
                        cache_write: 4,
                        usd: Some(0.0125),
                    }),
                    handoff: Some(crate::handoff::check(
                        "port 8080",
                        &crate::handoff::owed(&crate::handoff::Facts {
                            user_words: vec![crate::handoff::Said::new(
                                "Serve on port 8080 with --json",
                                Some("e1"),
                            )],
                            ..Default::default()
                        }),
                        crate::handoff::Mode::Repair,
                    )),
                })),
                aborted: false,
                will_retry: true,
                error_message: Some("Context overflow recovery failed: x"),
            }),
            EventKind::SpeculationStarted => Event::SpeculationStarted(SpeculationStarted {
                session_id: "s1",
                covers_through_entry_id: Some("e7"),
                tokens: 120_000.0,
            }),
            EventKind::SpeculationReady => Event::SpeculationReady(SpeculationReady {
                session_id: "s1",
                covers_through_entry_id: Some("e7"),
                summary_tokens: 2_100,
                ms: 830,
                handoff_score: Some(0.75),
            }),
            EventKind::SpeculationDiscarded => Event::SpeculationDiscarded(SpeculationDiscarded {
                session_id: "s1",
                reason: DiscardReason::HookCancelled,
            }),
            EventKind::RetryScheduled => Event::RetryScheduled(RetryScheduled {
                session_id: "s1",
                attempt: 1,
                max_attempts: 3,
                delay_ms: 2_000,
                error_message: "503",
            }),
            EventKind::RetryAttemptStart => Event::RetryAttemptStart(RetryAttemptStart {
                session_id: "s1",
                source: RetrySource::Compaction,
                reason: Reason::Threshold,
            }),
            EventKind::RetryFinished => Event::RetryFinished(RetryFinished { session_id: "s1" }),
            EventKind::SubscriptionDropped => Event::SubscriptionDropped(SubscriptionDropped {}),
        }
    }

    /// The same event with every optional member absent, where it has any.
    fn sparse(event: &Event<'static>) -> Option<Event<'static>> {
        match event {
            Event::CompactionEnd(e) => Some(Event::CompactionEnd(CompactionEnd {
                result: None,
                error_message: None,
                ..e.clone()
            })),
            Event::SpeculationStarted(e) => Some(Event::SpeculationStarted(SpeculationStarted {
                covers_through_entry_id: None,
                ..e.clone()
            })),
            Event::SpeculationReady(e) => Some(Event::SpeculationReady(SpeculationReady {
                covers_through_entry_id: None,
                ..e.clone()
            })),
            _ => None,
        }
    }

    #[test]
    fn every_event_round_trips_through_its_wire_form() {
        for spec in EVENTS {
            let kind = EventKind::of(spec.name)
                .unwrap_or_else(|| panic!("{} has no typed variant", spec.name));
            assert_eq!(kind.name(), spec.name);
            let full = sample(kind);
            assert_eq!(full.name(), spec.name);
            for event in std::iter::once(full.clone()).chain(sparse(&full)) {
                let wire = event.payload();
                assert!(wire.is_object(), "{}: {wire}", spec.name);
                let back = Event::parse(spec.name, &wire)
                    .unwrap_or_else(|e| panic!("{}: {e} in {wire}", spec.name));
                assert_eq!(back, event, "{} from {wire}", spec.name);
                // The parsed event writes the same JSON, byte for byte.
                assert_eq!(back.payload().to_string(), wire.to_string());
            }
        }
    }

    #[test]
    fn optional_members_are_omitted_or_null_as_before() {
        let end = sparse(&sample(EventKind::CompactionEnd)).expect("sparse");
        assert_eq!(
            end.payload().to_string(),
            r#"{"sessionId":"s1","reason":"overflow","aborted":false,"willRetry":true}"#
        );
        let started = sparse(&sample(EventKind::SpeculationStarted)).expect("sparse");
        assert_eq!(
            started.payload().to_string(),
            r#"{"sessionId":"s1","coversThroughEntryId":null,"tokens":120000}"#
        );
    }

    #[test]
    fn unknown_names_and_bad_payloads_are_errors() {
        let params = json!({"sessionId": "s1", "reason": "manual"});
        assert_eq!(
            Event::parse("compaction_begun", &params),
            Err(EventError::Unknown("compaction_begun".into()))
        );
        let err = Event::parse(
            "compaction_start",
            &json!({"sessionId": "s1", "reason": "later"}),
        )
        .expect_err("no such reason");
        assert!(
            matches!(
                &err,
                EventError::Payload {
                    name: "compaction_start",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("later"), "{err}");
        for bad in [
            json!(null),
            json!([1]),
            json!("x"),
            json!({"reason": "manual"}),
        ] {
            assert!(Event::parse("compaction_start", &bad).is_err(), "{bad}");
        }
        // Absent params are no members: enough for an event that has none.
        assert_eq!(
            Event::parse("subscription_dropped", &Value::Null),
            Ok(Event::SubscriptionDropped(SubscriptionDropped {}))
        );
        // A member a newer daemon adds is ignored.
        let newer = json!({"sessionId": "s1", "reason": "manual", "extra": 1});
        assert_eq!(
            Event::parse("compaction_start", &newer).map(|e| e.session_id().map(str::to_owned)),
            Ok(Some("s1".into()))
        );
    }
}
