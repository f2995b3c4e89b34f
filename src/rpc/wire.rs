//! The messages the daemon sends on its own: notifications (events, hook notifications, log
//! lines, `$/cancelRequest`) and requests (hooks). One typed shape, serialized in one place with
//! JavaScript-compatible JSON (`crate::json::stringify`, as every reply), so no call site builds
//! a JSON-RPC envelope by hand. Replies to the client's requests are the transport's
//! (`transport::message`), which also reads what comes in.

use std::fmt;

use serde_json::{Map, Value};

/// A request id as the client sent it: a string, a number, or `null`. Hashed as it compares
/// (serde_json's `Number` hashes its value), so in-flight requests are keyed by the id itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    Str(String),
    Num(serde_json::Number),
    Null,
    /// An id whose parsed form would not print back as sent: a number beyond `u64`/`i64` (an
    /// `f64` in serde_json, so `18446744073709551617` would come back as `18446744073709552000`),
    /// one written with a fraction or exponent, or a string holding a lone surrogate escape
    /// (Rust strings cannot hold one). Kept as the exact JSON text and echoed byte for byte.
    Raw(Box<str>),
}

impl RequestId {
    /// The id of a message value, if it has a valid one (`None`: absent or of the wrong type).
    pub fn from_value(v: &Value) -> Option<RequestId> {
        match v {
            Value::String(s) => Some(RequestId::Str(s.clone())),
            Value::Number(n) => Some(RequestId::Num(n.clone())),
            Value::Null => Some(RequestId::Null),
            _ => None,
        }
    }

    /// The id as a JSON value (a [`RequestId::Raw`] id as its parsed, lossy form: replies are
    /// written by `transport::message::response_text`, which uses the exact text).
    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Str(s) => Value::String(s.clone()),
            RequestId::Num(n) => Value::Number(n.clone()),
            RequestId::Null => Value::Null,
            RequestId::Raw(r) => crate::json::parse_line(r).unwrap_or(Value::Null),
        }
    }

    /// Keeps the id's exact text when its parsed form would print differently.
    pub(crate) fn keep_raw(self, raw: Option<&str>) -> RequestId {
        match (self, raw) {
            (id @ (RequestId::Num(_) | RequestId::Str(_)), Some(raw))
                if crate::json::stringify(&id.to_value()) != raw =>
            {
                RequestId::Raw(raw.into())
            }
            (id, _) => id,
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Str(s) => write!(f, "{s:?}"),
            RequestId::Num(n) => write!(f, "{n}"),
            RequestId::Null => f.write_str("null"),
            RequestId::Raw(r) => f.write_str(r),
        }
    }
}

/// One outgoing message.
#[derive(Debug, Clone, Copy)]
pub enum Outgoing<'a> {
    /// `{"jsonrpc":"2.0","method":…,"params":…}`.
    Notification { method: &'a str, params: &'a Value },
    /// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`: a server→client request whose answer
    /// is matched by `id`.
    Request {
        id: &'a RequestId,
        method: &'a str,
        params: &'a Value,
    },
}

impl Outgoing<'_> {
    /// The frame's JSON text (members in the order above).
    pub fn to_text(&self) -> String {
        let mut o = Map::new();
        o.insert("jsonrpc".into(), Value::from("2.0"));
        let (method, params) = match *self {
            Outgoing::Notification { method, params } => (method, params),
            Outgoing::Request { id, method, params } => {
                o.insert("id".into(), id.to_value());
                (method, params)
            }
        };
        o.insert("method".into(), Value::from(method));
        o.insert("params".into(), params.clone());
        crate::json::stringify(&Value::Object(o))
    }
}

/// A notification's text.
pub fn notification(method: &str, params: &Value) -> String {
    Outgoing::Notification { method, params }.to_text()
}

/// `$/cancelRequest` for the daemon's own request `id` (LSP's cancellation, which clients know).
pub fn cancel_request(id: &RequestId) -> String {
    notification(
        "$/cancelRequest",
        &serde_json::json!({ "id": id.to_value() }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outgoing_messages_are_json_rpc_frames() {
        let params = serde_json::json!({"n": 1e21, "s": "x"});
        assert_eq!(
            notification("compaction_start", &params),
            r#"{"jsonrpc":"2.0","method":"compaction_start","params":{"n":1e+21,"s":"x"}}"#
        );
        let id = RequestId::Str("compactd-1".into());
        let request = Outgoing::Request {
            id: &id,
            method: "session_before_compact",
            params: &params,
        };
        assert_eq!(
            request.to_text(),
            r#"{"jsonrpc":"2.0","id":"compactd-1","method":"session_before_compact","params":{"n":1e+21,"s":"x"}}"#
        );
        assert_eq!(
            cancel_request(&RequestId::Str("compactd-2".into())),
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"compactd-2"}}"#
        );
    }
}
