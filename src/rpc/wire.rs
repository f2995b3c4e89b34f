//! The messages the daemon sends on its own: notifications (events, hook notifications, log
//! lines, `$/cancelRequest`) and requests (hooks). One typed shape, serialized in one place with
//! JavaScript-compatible JSON (`crate::json::stringify`, as every reply), so no call site builds
//! a JSON-RPC envelope by hand. Replies to the client's requests are the transport's
//! (`transport::message`), which also reads what comes in.

use serde_json::{Map, Value};

/// One outgoing message.
#[derive(Debug, Clone, Copy)]
pub enum Outgoing<'a> {
    /// `{"jsonrpc":"2.0","method":…,"params":…}`.
    Notification { method: &'a str, params: &'a Value },
    /// `{"jsonrpc":"2.0","id":…,"method":…,"params":…}`: a server→client request whose answer
    /// is matched by `id`.
    Request {
        id: &'a str,
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
                o.insert("id".into(), Value::from(id));
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
pub fn cancel_request(id: &str) -> String {
    notification("$/cancelRequest", &serde_json::json!({ "id": id }))
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
        let request = Outgoing::Request {
            id: "compactd-1",
            method: "session_before_compact",
            params: &params,
        };
        assert_eq!(
            request.to_text(),
            r#"{"jsonrpc":"2.0","id":"compactd-1","method":"session_before_compact","params":{"n":1e+21,"s":"x"}}"#
        );
        assert_eq!(
            cancel_request("compactd-2"),
            r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"compactd-2"}}"#
        );
    }
}
