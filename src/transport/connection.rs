//! One client connection, whatever the byte stream: read frames, classify each message
//! (request, notification, batch, or a response to one of our hook requests), dispatch, and
//! write replies in the client's framing through the connection's single writer task.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};

use super::dispatch::{Dispatcher, SLOW_METHODS};
use super::framing::{write_frame, Frame, FrameReader, Framing};
use crate::daemon::connections::Connection;
use crate::daemon::methods::Ctx;
use crate::daemon::Daemon;
use crate::rpc::{ErrorKind, RpcError};

fn error_response(id: &Value, e: RpcError) -> String {
    crate::json::stringify(&json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()}))
}

/// Validates one message object; returns the id to answer with on error.
fn validate(msg: &Value) -> Result<(), (Value, RpcError)> {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let invalid = |m: &str| {
        Err((
            id.clone(),
            RpcError::new(ErrorKind::InvalidRequest, m.to_owned()),
        ))
    };
    let Some(obj) = msg.as_object() else {
        return invalid("Invalid request: not an object");
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("Invalid request: jsonrpc must be \"2.0\"");
    }
    if !obj.get("method").is_some_and(Value::is_string) {
        return invalid("Invalid request: method must be a string");
    }
    if let Some(i) = obj.get("id") {
        if !(i.is_string() || i.is_number() || i.is_null()) {
            return Err((
                Value::Null,
                RpcError::new(
                    ErrorKind::InvalidRequest,
                    "Invalid request: id must be a string, number or null",
                ),
            ));
        }
    }
    if let Some(p) = obj.get("params") {
        if !(p.is_object() || p.is_array()) {
            return invalid("Invalid request: params must be an object or an array");
        }
    }
    Ok(())
}

/// Handles one message; returns the response text (None for notifications and responses).
async fn handle_one(dispatcher: &Dispatcher, conn: &Connection, msg: Value) -> Option<String> {
    let is_response = msg.get("method").is_none()
        && msg.get("id").is_some()
        && (msg.get("result").is_some() || msg.get("error").is_some());
    if is_response {
        if !conn.handle_response(&msg) {
            tracing::debug!(
                connection = conn.id,
                "response to an unknown request ignored"
            );
        }
        return None;
    }
    if let Err((id, e)) = validate(&msg) {
        return Some(error_response(&id, e));
    }
    let notification = msg.get("id").is_none();
    if msg.get("method").and_then(Value::as_str) == Some("$/cancelRequest") {
        return None;
    }
    let mut req = msg;
    if notification {
        if let Some(o) = req.as_object_mut() {
            o.insert("id".into(), Value::Null);
        }
    }
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let text = crate::json::stringify(&req);
    let method = req.get("method").and_then(Value::as_str).unwrap_or("");
    let response = dispatcher.call(method, &text, &id).await;
    (!notification).then_some(response)
}

/// Handles a parsed frame (object or batch).
async fn handle_value(dispatcher: &Dispatcher, conn: &Connection, value: Value) -> Option<String> {
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                return Some(error_response(
                    &Value::Null,
                    RpcError::new(ErrorKind::InvalidRequest, "Invalid request: empty batch"),
                ));
            }
            let mut responses = Vec::new();
            for item in items {
                if let Some(r) = handle_one(dispatcher, conn, item).await {
                    responses.push(r);
                }
            }
            (!responses.is_empty()).then(|| format!("[{}]", responses.join(",")))
        }
        other => handle_one(dispatcher, conn, other).await,
    }
}

fn is_slow(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(is_slow),
        v => v
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| SLOW_METHODS.contains(&m)),
    }
}

/// Serves one connection until the client closes it.
pub async fn serve_connection<R, W>(
    daemon: Arc<Daemon>,
    reader: R,
    writer: W,
    forced: Option<Framing>,
    max_frame: usize,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (conn, mut rx) = daemon.connect();
    let framing = Arc::new(Mutex::new(forced));
    // A weak handle: the queue closes when the last strong handle (daemon table, dispatcher,
    // running slow requests) is gone, which ends the writer.
    let writer_conn = Arc::downgrade(&conn);
    let writer_framing = framing.clone();
    let writer_task = tokio::spawn(async move {
        let mut writer = writer;
        while let Some(out) = rx.recv().await {
            let f = writer_framing.lock().unwrap_or(Framing::Ndjson);
            if write_frame(&mut writer, f, out.text.as_bytes())
                .await
                .is_err()
            {
                break;
            }
            let notice = writer_conn.upgrade().and_then(|c| c.written(out.is_event));
            if let Some(notice) = notice {
                if write_frame(&mut writer, f, notice.as_bytes())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }
    });
    let dispatcher = Arc::new(Dispatcher::new(Ctx {
        daemon: daemon.clone(),
        conn: conn.clone(),
    }));
    let mut frames = FrameReader::new(
        BufReader::with_capacity(64 * 1024, reader),
        forced,
        max_frame,
    );
    loop {
        let frame = match frames.next().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(connection = conn.id, error = %e, "read failed; closing");
                break;
            }
        };
        if framing.lock().is_none() {
            *framing.lock() = frames.framing();
        }
        let value = match frame {
            Frame::Message(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => v,
                Err(e) => {
                    conn.send(error_response(
                        &Value::Null,
                        RpcError::new(ErrorKind::ParseError, format!("Parse error: {e}")),
                    ));
                    continue;
                }
            },
            Frame::Oversized(n) => {
                conn.send(error_response(
                    &Value::Null,
                    RpcError::new(ErrorKind::InvalidRequest, format!("Invalid request: frame of {n} bytes exceeds the {max_frame}-byte limit")),
                ));
                continue;
            }
            Frame::BadHeader(why) => {
                conn.send(error_response(
                    &Value::Null,
                    RpcError::new(ErrorKind::InvalidRequest, format!("Invalid request: {why}")),
                ));
                continue;
            }
        };
        if value.get("method").and_then(Value::as_str) == Some("$/cancelRequest") {
            // A client cancelling its own compact/checkCompaction/navigateTree aborts that work,
            // as `abortCompaction` would; the request then answers `Compaction cancelled`.
            let key = value
                .get("params")
                .and_then(|p| p.get("id"))
                .map(Value::to_string);
            let session_id = key.and_then(|k| conn.in_flight.lock().get(&k).cloned());
            if let Some(session) = session_id.and_then(|sid| daemon.session(&sid).ok()) {
                crate::daemon::lifecycle::abort(&session);
            }
            continue;
        }
        if is_slow(&value) {
            let d = dispatcher.clone();
            let c = conn.clone();
            let tracked = value.get("id").map(Value::to_string).zip(
                value
                    .get("params")
                    .and_then(|p| p.get("sessionId"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            );
            if let Some((id, sid)) = &tracked {
                conn.in_flight.lock().insert(id.clone(), sid.clone());
            }
            tokio::spawn(async move {
                let reply = handle_value(&d, &c, value).await;
                if let Some((id, _)) = tracked {
                    c.in_flight.lock().remove(&id);
                }
                if let Some(r) = reply {
                    c.send(r);
                }
            });
        } else if let Some(r) = handle_value(&dispatcher, &conn, value).await {
            conn.send(r);
        }
    }
    daemon.disconnect(&conn);
    drop(dispatcher);
    // Let queued replies drain before the stream is dropped.
    drop(conn);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer_task).await;
}
