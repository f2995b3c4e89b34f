//! The error codes of the protocol (protocol.md §3 "Errors"): standard JSON-RPC codes for the
//! transport layer, and one code per failure kind above it, each with `data: {kind}` so clients
//! can branch on a stable string rather than on message text.

use serde_json::{json, Value};

/// One protocol error: code, kind and a message (Pi's exact text where Pi has one), and
/// optionally more members for `data` beside `kind` (beyond Pi: why, and what to change).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub kind: ErrorKind,
    pub message: String,
    /// Members added to `data` after `kind`; `kind` itself is never overwritten.
    pub detail: Option<Box<serde_json::Map<String, Value>>>,
}

macro_rules! kinds {
    ($($name:ident = ($code:expr, $kind:expr)),* $(,)?) => {
        /// Stable error kinds and their codes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorKind { $($name),* }
        impl ErrorKind {
            pub fn code(self) -> i32 { match self { $(ErrorKind::$name => $code),* } }
            pub fn as_str(self) -> &'static str { match self { $(ErrorKind::$name => $kind),* } }
            /// Every kind, for documentation.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$name),*];
        }
    };
}

kinds! {
    ParseError = (-32700, "parse_error"),
    InvalidRequest = (-32600, "invalid_request"),
    MethodNotFound = (-32601, "method_not_found"),
    InvalidParams = (-32602, "invalid_params"),
    RequestCancelled = (-32800, "request_cancelled"),
    Internal = (-32603, "internal"),
    UnknownSession = (-32001, "unknown_session"),
    NotFound = (-32002, "not_found"),
    InvalidSessionFile = (-32003, "invalid_session_file"),
    Locked = (-32004, "locked"),
    NotRegularFile = (-32005, "not_regular_file"),
    TooLarge = (-32006, "too_large"),
    PathNotAllowed = (-32007, "path_not_allowed"),
    NothingToCompact = (-32010, "nothing_to_compact"),
    AlreadyCompacted = (-32011, "already_compacted"),
    Cancelled = (-32012, "cancelled"),
    SummarizationFailed = (-32013, "summarization_failed"),
    NoModel = (-32014, "no_model"),
    Auth = (-32015, "auth"),
    Compacting = (-32020, "compacting"),
    LeafMoved = (-32021, "leaf_moved"),
    EntryNotFound = (-32022, "entry_not_found"),
    FileChanged = (-32023, "file_changed"),
    FileBusy = (-32024, "file_busy"),
    Io = (-32030, "io"),
    StorageUnavailable = (-32031, "storage_unavailable"),
    Overloaded = (-32040, "overloaded"),
}

impl RpcError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> RpcError {
        RpcError {
            code: kind.code(),
            kind,
            message: message.into(),
            detail: None,
        }
    }

    /// Adds the members of `detail` (an object; anything else is ignored) to the error's `data`.
    pub fn with_detail(mut self, detail: Value) -> RpcError {
        if let Value::Object(mut members) = detail {
            members.remove("kind");
            self.detail = Some(Box::new(members));
        }
        self
    }

    /// A manual compaction's refusal: Pi's exact message (`Already compacted` or `Nothing to
    /// compact (session too small)`) with its kind, and in `data` the `reason`, the `hint`
    /// naming the setting to change, and the numbers (`recentTokens`, `recentMessages`,
    /// `keepRecentTokens`).
    pub fn nothing_to_compact(
        nothing: crate::compaction::prepare::NothingToCompact,
        detail: &crate::compaction::prepare::NothingToCompactDetail,
    ) -> RpcError {
        use crate::compaction::prepare::NothingToCompact;
        let kind = match nothing {
            NothingToCompact::AlreadyCompacted => ErrorKind::AlreadyCompacted,
            NothingToCompact::TooSmall => ErrorKind::NothingToCompact,
        };
        RpcError::new(kind, nothing.message())
            .with_detail(serde_json::to_value(detail).unwrap_or(Value::Null))
    }

    /// A -32602 error; the message always reads `Invalid params: …`.
    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        let message = message.into();
        let message = if message.starts_with("Invalid params: ") {
            message
        } else {
            format!("Invalid params: {message}")
        };
        RpcError::new(ErrorKind::InvalidParams, message)
    }

    pub fn data(&self) -> Value {
        let mut data = json!({ "kind": self.kind.as_str() });
        if let (Some(members), Value::Object(d)) = (&self.detail, &mut data) {
            d.extend(members.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        data
    }

    /// The JSON-RPC `error` member.
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code, "message": self.message, "data": self.data() })
    }
}

/// Pi's message while a compaction runs.
pub const COMPACTING_MESSAGE: &str =
    "Cannot submit a prompt while compaction is in progress. Wait for compaction to finish and retry.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::prepare::{NothingToCompact, NothingToCompactDetail};

    #[test]
    fn a_refusal_keeps_pis_message_and_adds_why_to_data() {
        let detail = NothingToCompactDetail {
            reason: "within_keep_recent",
            hint: "set compaction.keepRecentTokens below 300".into(),
            recent_tokens: 300,
            recent_messages: 3,
            keep_recent_tokens: 20000,
        };
        let e = RpcError::nothing_to_compact(NothingToCompact::TooSmall, &detail);
        assert_eq!(
            e.to_json(),
            json!({"code": -32010, "message": "Nothing to compact (session too small)", "data": {
                "kind": "nothing_to_compact", "reason": "within_keep_recent",
                "hint": "set compaction.keepRecentTokens below 300", "recentTokens": 300,
                "recentMessages": 3, "keepRecentTokens": 20000}})
        );
        let e = RpcError::new(ErrorKind::Io, "x").with_detail(json!({"kind": "other", "n": 1}));
        assert_eq!(
            e.data(),
            json!({"kind": "io", "n": 1}),
            "kind is never overwritten"
        );
    }
}
