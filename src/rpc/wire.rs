//! The messages the daemon writes: replies to the client's requests, notifications (events,
//! hook notifications, log lines, `$/cancelRequest`) and requests (hooks). One typed shape,
//! serialized in one place with JavaScript-compatible JSON (`crate::json::write_js`), so no call
//! site builds a JSON-RPC envelope by hand. What comes in is read by `transport::message`.

use std::fmt;

use serde_json::Value;

use super::RpcError;

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
    /// written by [`Outgoing::Response`], which uses the exact text).
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
            (id @ (RequestId::Num(_) | RequestId::Str(_)), Some(raw)) => {
                let mut text = String::new();
                write_id_value(&mut text, &id);
                if text == raw {
                    id
                } else {
                    RequestId::Raw(raw.into())
                }
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
    /// `{"jsonrpc":"2.0","id":…,"result":…}` or `{…,"error":…}`: the reply to the client's
    /// request `id`, which is echoed byte for byte (a [`RequestId::Raw`] as its exact text).
    Response {
        id: &'a RequestId,
        result: Result<&'a Value, &'a RpcError>,
    },
}

impl Outgoing<'_> {
    /// The frame's JSON text (members in the order above), written in one pass with
    /// `JSON.stringify`'s rendering (`crate::json::write_js`), nothing cloned.
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(128);
        out.push_str("{\"jsonrpc\":\"2.0\"");
        match *self {
            Outgoing::Notification { method, params } => {
                method_and_params(&mut out, method, params);
            }
            Outgoing::Request { id, method, params } => {
                write_id(&mut out, id);
                method_and_params(&mut out, method, params);
            }
            Outgoing::Response { id, result } => {
                write_id(&mut out, id);
                match result {
                    Ok(v) => {
                        out.push_str(",\"result\":");
                        crate::json::write_js(&mut out, v);
                    }
                    Err(e) => {
                        out.push_str(",\"error\":");
                        crate::json::write_js(&mut out, &e.to_json());
                    }
                }
            }
        }
        out.push('}');
        out
    }
}

fn write_id(out: &mut String, id: &RequestId) {
    out.push_str(",\"id\":");
    write_id_value(out, id);
}

/// An id's JSON text. An integer id is written with all its digits: an id is a token the client
/// matches its reply by, not a quantity, so `JSON.stringify`'s rounding past 2^53 (which
/// [`crate::json::write_number`] applies to session data) would hand `9007199254740993` back as
/// `9007199254740992`, the id of another request. Fractions keep the JavaScript rendering;
/// one written otherwise (`1.50`, `1e3`) is a [`RequestId::Raw`].
fn write_id_value(out: &mut String, id: &RequestId) {
    match id {
        RequestId::Raw(raw) => out.push_str(raw),
        RequestId::Str(s) => crate::json::write_string(out, s),
        RequestId::Num(n) if n.is_u64() || n.is_i64() => {
            use std::fmt::Write;
            let _ = write!(out, "{n}");
        }
        RequestId::Num(n) => crate::json::write_number(out, n),
        RequestId::Null => out.push_str("null"),
    }
}

fn method_and_params(out: &mut String, method: &str, params: &Value) {
    out.push_str(",\"method\":");
    crate::json::write_string(out, method);
    out.push_str(",\"params\":");
    crate::json::write_js(out, params);
}

/// A reply's text.
pub fn response(id: &RequestId, result: &Result<Value, RpcError>) -> String {
    Outgoing::Response {
        id,
        result: result.as_ref(),
    }
    .to_text()
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
        let ok = Ok(serde_json::json!({"b": 1, "a": [true, null]}));
        assert_eq!(
            response(&RequestId::Num(7.into()), &ok),
            r#"{"jsonrpc":"2.0","id":7,"result":{"b":1,"a":[true,null]}}"#
        );
        let refused = Err(RpcError::new(
            super::super::ErrorKind::UnknownSession,
            "Unknown session: s",
        ));
        assert_eq!(
            response(&RequestId::Raw(r#""a\ud83d""#.into()), &refused),
            r#"{"jsonrpc":"2.0","id":"a\ud83d","error":{"code":-32001,"message":"Unknown session: s","data":{"kind":"unknown_session"}}}"#
        );
        assert_eq!(
            response(&RequestId::Null, &Ok(Value::Null)),
            r#"{"jsonrpc":"2.0","id":null,"result":null}"#
        );
        assert_eq!(
            cancel_request(&RequestId::Str("compactd-2".into())),
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"compactd-2"}}"#
        );
    }
}
