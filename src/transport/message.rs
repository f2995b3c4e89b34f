//! Typed JSON-RPC 2.0 messages (protocol.md §2). A frame's JSON is classified once, here, into
//! a request, a notification or a response to one of the daemon's own requests (hooks), so the
//! connection loop matches on a type instead of probing fields, and in-flight requests are keyed
//! by a [`RequestId`] rather than by the id's JSON text.

use serde_json::Value;

pub use crate::rpc::wire::{response, RequestId};
use crate::rpc::{ErrorKind, RpcError};

/// The exact text of each message's `id` in a frame (one entry for a message, one per element
/// for a batch), when some id may not print back as sent.
pub type RawIds = Vec<Option<Box<str>>>;

/// Parses one frame's JSON. A frame that escapes a lone UTF-16 surrogate (JavaScript's
/// `JSON.stringify` of a string cut inside an emoji writes `"\ud83d"`; `JSON.parse` accepts it)
/// is parsed as session lines are ([`crate::json::parse_line`]: the lone surrogate carried, and
/// written back as the same escape), instead of failing as a parse error with `id: null`. When an
/// id may not survive parsing (a surrogate was replaced, or a number id parsed as an `f64`), the
/// ids' exact texts are read too, so replies echo them byte for byte.
pub fn parse_frame(bytes: &[u8]) -> Result<(Value, RawIds), serde_json::Error> {
    let (value, repaired) = match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => (v, false),
        Err(e) => {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return Err(e);
            };
            if !text.contains("\\u") {
                return Err(e);
            }
            (crate::json::parse_line(text).map_err(|_| e)?, true)
        }
    };
    let float_id = |v: &Value| matches!(v.get("id"), Some(Value::Number(n)) if n.is_f64());
    let lossy = repaired
        || match &value {
            Value::Array(items) => items.iter().any(float_id),
            v => float_id(v),
        };
    let raw = if lossy {
        raw_ids(bytes, &value)
    } else {
        Vec::new()
    };
    Ok((value, raw))
}

/// The exact `id` texts of a frame already known to be JSON (see [`parse_frame`]).
fn raw_ids(bytes: &[u8], value: &Value) -> RawIds {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Id<'a> {
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
    }
    let id_of = |text: &str| -> Option<Box<str>> {
        let id = serde_json::from_str::<Id<'_>>(text).ok()?.id?;
        Some(id.get().into())
    };
    match value {
        Value::Array(_) => serde_json::from_slice::<Vec<&RawValue>>(bytes)
            .map(|items| items.into_iter().map(|i| id_of(i.get())).collect())
            .unwrap_or_default(),
        Value::Object(_) => std::str::from_utf8(bytes)
            .map(|t| vec![id_of(t)])
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// One incoming JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: RequestId,
        method: String,
        /// As sent: absent, `null`, an object or an array (normalised by the method table).
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// The client's answer to a daemon→client request: `Ok(result)` or `Err(error object)`.
    Response {
        id: RequestId,
        result: Result<Value, Value>,
    },
}

/// A message that is not valid JSON-RPC: the id to answer with, and the error.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub id: RequestId,
    pub error: RpcError,
}

fn invalid(id: RequestId, message: &str) -> Invalid {
    Invalid {
        id,
        error: RpcError::new(
            ErrorKind::InvalidRequest,
            format!("Invalid request: {message}"),
        ),
    }
}

impl Message {
    /// [`Message::parse`], keeping the id's exact text `raw` when its parsed form would print
    /// differently (see [`RequestId::Raw`]).
    pub fn parse_raw(value: Value, raw: Option<&str>) -> Result<Message, Invalid> {
        match Message::parse(value) {
            Ok(Message::Request { id, method, params }) => Ok(Message::Request {
                id: id.keep_raw(raw),
                method,
                params,
            }),
            Ok(Message::Response { id, result }) => Ok(Message::Response {
                id: id.keep_raw(raw),
                result,
            }),
            Err(Invalid { id, error }) => Err(Invalid {
                id: id.keep_raw(raw),
                error,
            }),
            other => other,
        }
    }

    /// Classifies one message object (not a batch).
    pub fn parse(value: Value) -> Result<Message, Invalid> {
        let Value::Object(mut obj) = value else {
            return Err(invalid(RequestId::Null, "not an object"));
        };
        let id = match obj.remove("id") {
            None => None,
            Some(v) => match RequestId::from_value(&v) {
                Some(id) => Some(id),
                None => {
                    return Err(invalid(
                        RequestId::Null,
                        "id must be a string, number or null",
                    ))
                }
            },
        };
        let answer_id = id.clone().unwrap_or(RequestId::Null);
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(invalid(answer_id, "jsonrpc must be \"2.0\""));
        }
        let method = obj.remove("method");
        if method.is_none() && (obj.contains_key("result") || obj.contains_key("error")) {
            let Some(id) = id else {
                return Err(invalid(RequestId::Null, "a response needs an id"));
            };
            let result = match obj.remove("error") {
                Some(e) => Err(e),
                None => Ok(obj.remove("result").unwrap_or(Value::Null)),
            };
            return Ok(Message::Response { id, result });
        }
        let Some(Value::String(method)) = method else {
            return Err(invalid(answer_id, "method must be a string"));
        };
        let params = obj.remove("params");
        if let Some(p) = &params {
            if !(p.is_object() || p.is_array() || p.is_null()) {
                return Err(invalid(
                    answer_id,
                    "params must be an object, an array or null",
                ));
            }
        }
        Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_requests_notifications_and_responses() {
        assert_eq!(
            Message::parse(json!({"jsonrpc": "2.0", "id": 7, "method": "m", "params": []})),
            Ok(Message::Request {
                id: RequestId::Num(7.into()),
                method: "m".into(),
                params: Some(json!([]))
            })
        );
        assert_eq!(
            Message::parse(json!({"jsonrpc": "2.0", "method": "m", "params": null})),
            Ok(Message::Notification {
                method: "m".into(),
                params: Some(Value::Null)
            })
        );
        assert_eq!(
            Message::parse(json!({"jsonrpc": "2.0", "id": "a", "error": {"code": 1}})),
            Ok(Message::Response {
                id: RequestId::Str("a".into()),
                result: Err(json!({"code": 1}))
            })
        );
        let bad = Message::parse(json!({"jsonrpc": "2.0", "id": [1], "method": "m"}));
        assert_eq!(bad.map_err(|e| e.id), Err(RequestId::Null));
        let bad = Message::parse(json!({"jsonrpc": "1.0", "id": "x", "method": "m"}));
        assert_eq!(bad.map_err(|e| e.id), Err(RequestId::Str("x".into())));
        assert!(
            Message::parse(json!({"jsonrpc": "2.0", "id": 1, "method": "m", "params": 3})).is_err()
        );
    }

    #[test]
    fn ids_that_do_not_survive_parsing_are_echoed_as_sent() {
        for (frame, id) in [
            (
                r#"{"jsonrpc":"2.0","id":18446744073709551617,"method":"m"}"#,
                "18446744073709551617",
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a\ud83d","method":"m"}"#,
                r#""a\ud83d""#,
            ),
            (r#"{"jsonrpc":"2.0","id":1e3,"method":"m"}"#, "1e3"),
            (r#"{"jsonrpc":"2.0","id":1.50,"method":"m"}"#, "1.50"),
            (r#"{"jsonrpc":"2.0","id":-0,"method":"m"}"#, "-0"),
            // Integers past 2^53 that serde_json holds exactly: all their digits, not
            // `JSON.stringify`'s rounding.
            (
                r#"{"jsonrpc":"2.0","id":9007199254740993,"method":"m"}"#,
                "9007199254740993",
            ),
            (
                r#"{"jsonrpc":"2.0","id":-9007199254740993,"method":"m"}"#,
                "-9007199254740993",
            ),
            (
                r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}"#,
                "18446744073709551615",
            ),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#, "1.5"),
        ] {
            let (v, raw) = parse_frame(frame.as_bytes()).unwrap();
            let Ok(Message::Request { id: got, .. }) =
                Message::parse_raw(v, raw.first().and_then(|r| r.as_deref()))
            else {
                panic!("{frame}");
            };
            let text = response(&got, &Ok(Value::Null));
            assert_eq!(
                text,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":null}}"#)
            );
        }
        // Ids that print back as sent stay typed.
        let (v, raw) = parse_frame(br#"{"jsonrpc":"2.0","id":7,"method":"m"}"#).unwrap();
        assert!(raw.is_empty());
        assert!(matches!(
            Message::parse_raw(v, None),
            Ok(Message::Request {
                id: RequestId::Num(_),
                ..
            })
        ));
    }

    #[test]
    fn ids_of_different_types_are_different_keys() {
        use std::collections::HashSet;
        let ids: HashSet<RequestId> = [
            RequestId::Str("1".into()),
            RequestId::Num(1.into()),
            RequestId::Null,
        ]
        .into_iter()
        .collect();
        assert_eq!(ids.len(), 3);
    }
}
