//! Typed JSON-RPC 2.0 messages (protocol.md §2). A frame's JSON is classified once, here, into
//! a request, a notification or a response to one of the daemon's own requests (hooks), so the
//! connection loop matches on a type instead of probing fields, and in-flight requests are keyed
//! by a [`RequestId`] rather than by the id's JSON text.

use std::fmt;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value};

use crate::rpc::{ErrorKind, RpcError};

/// A request id as the client sent it: a string, a number, or `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestId {
    Str(String),
    Num(serde_json::Number),
    Null,
}

impl Hash for RequestId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            RequestId::Str(s) => {
                0u8.hash(state);
                s.hash(state);
            }
            RequestId::Num(n) => {
                1u8.hash(state);
                n.to_string().hash(state);
            }
            RequestId::Null => 2u8.hash(state),
        }
    }
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

    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Str(s) => Value::String(s.clone()),
            RequestId::Num(n) => Value::Number(n.clone()),
            RequestId::Null => Value::Null,
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Str(s) => write!(f, "{s:?}"),
            RequestId::Num(n) => write!(f, "{n}"),
            RequestId::Null => f.write_str("null"),
        }
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

/// A response frame's text.
pub fn response_text(id: &RequestId, result: Result<Value, RpcError>) -> String {
    let mut o = Map::new();
    o.insert("jsonrpc".into(), Value::from("2.0"));
    o.insert("id".into(), id.to_value());
    match result {
        Ok(v) => o.insert("result".into(), v),
        Err(e) => o.insert("error".into(), e.to_json()),
    };
    crate::json::stringify(&Value::Object(o))
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
