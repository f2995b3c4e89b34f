//! The error codes of the protocol (protocol.md §3 "Errors"): standard JSON-RPC codes for the
//! transport layer, and one code per failure kind above it, each with `data: {kind}` so clients
//! can branch on a stable string rather than on message text.

use serde_json::{json, Value};

/// One protocol error: code, kind and a message (Pi's exact text where Pi has one).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub kind: ErrorKind,
    pub message: String,
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
    Overloaded = (-32040, "overloaded"),
}

impl RpcError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> RpcError {
        RpcError {
            code: kind.code(),
            kind,
            message: message.into(),
        }
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
        json!({ "kind": self.kind.as_str() })
    }

    /// The JSON-RPC `error` member.
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code, "message": self.message, "data": self.data() })
    }
}

/// Pi's message while a compaction runs.
pub const COMPACTING_MESSAGE: &str =
    "Cannot submit a prompt while compaction is in progress. Wait for compaction to finish and retry.";
