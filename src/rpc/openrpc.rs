//! The machine-readable protocol reference: an OpenRPC 1.3 document describing every method of
//! the dispatch table, the events a subscriber receives (`x-notifications`), the server→client
//! hook traffic (`x-hooks`), the error table (`x-errors`), and for each method how it runs
//! (`x-run`: `task` or `inline`, so a generated client knows which calls may wait long).
//!
//! The methods come from the one list in [`super::methods`]; their params and result schemas are
//! derived (`#[derive(JsonSchema)]`) from the types the daemon parses and serializes, so they
//! cannot drift from the wire; so are the events and hook messages, from the lists in
//! [`super::events`]. Only what clients answer to hook requests is described by hand below.
//! `tests/openrpc.rs` compares the output with the committed `proto-docs/openrpc.json` and
//! validates the daemon's real responses, events and hook traffic against it.
//!
//! The output is deterministic: methods, notifications, hooks and component schemas are sorted
//! by name; properties keep their declaration order.

use serde_json::{json, Map, Value};

use super::errors::ErrorKind;
use super::events::{HookKind, MessageSpec, EVENTS, HOOKS, NOTICES};
use super::methods::{Run, METHODS};
use super::schemas::Schemas;
use super::PROTOCOL_VERSION;

/// The OpenRPC specification version the document follows.
pub const OPENRPC_VERSION: &str = "1.3.2";

fn example_message(kind: ErrorKind) -> &'static str {
    use ErrorKind::*;
    match kind {
        ParseError => "Parse error: …",
        InvalidRequest => "Invalid request: …",
        MethodNotFound => "Method not found",
        InvalidParams => "Invalid params: …",
        Internal => "Internal error",
        UnknownSession => "Unknown session: <sessionId>",
        NotFound => "Session file not found: <path>",
        InvalidSessionFile => "Session file is not a valid pi session: <abs path>: <why>",
        Locked => "Session file is locked by another compactd process: <path> (held by pid <pid>, the daemon on <socket>)",
        NotRegularFile => "Not a regular file (a FIFO): <path>",
        TooLarge => "Session file is larger than the <limit>-byte limit (<size> bytes): <path>",
        PathNotAllowed => "Session path is outside the allowed roots (<roots>): <path>",
        NothingToCompact => "Nothing to compact (session too small)",
        AlreadyCompacted => "Already compacted",
        Cancelled => "Compaction cancelled",
        SummarizationFailed => "Summarization failed: …",
        NoModel => "No model selected for this session",
        Auth => "No API key found for <provider>. Set the environment variable <VAR>.",
        Compacting => super::errors::COMPACTING_MESSAGE,
        LeafMoved => "leaf moved: expected <expectedLeafId>, current <leafId>",
        EntryNotFound => "Entry <id> not found",
        FileChanged => "Session file was replaced or truncated by another process; reopen the session: <path>",
        FileBusy => "Session file is being written by another process (its last line is still growing): <path>",
        Io => "<io error>",
        StorageUnavailable => "Session store unavailable: <database error>",
        RequestCancelled => "Request cancelled",
        Overloaded => "Too many requests in flight on this connection (limit <n>); …",
    }
}

fn error_object(kind: ErrorKind) -> Value {
    json!({
        "code": kind.code(),
        "message": example_message(kind),
        "data": {"kind": kind.as_str()},
    })
}

/// `session_before_compact` → `SessionBeforeCompact`.
fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn descriptor(name: &str, schema: Value) -> Value {
    json!({"name": name, "schema": schema})
}

/// The events or hooks of `list` as OpenRPC-style descriptors; hook requests get the schema of
/// the reply the daemon accepts.
fn messages(list: &[MessageSpec], s: &mut Schemas) -> Vec<Value> {
    list.iter()
        .map(|m| {
            let mut d = Map::new();
            d.insert("name".into(), json!(m.name));
            if let Some(kind) = m.kind {
                let kind = match kind {
                    HookKind::Request => "request",
                    HookKind::Notification => "notification",
                };
                d.insert("kind".into(), json!(kind));
            }
            d.insert("summary".into(), json!(m.summary.trim()));
            d.insert("params".into(), Value::Array((m.params_schema)(s)));
            if let Some(reply) = m.reply_schema {
                let name = format!("{}Reply", pascal(m.name));
                d.insert("result".into(), descriptor(&name, reply(s)));
            }
            Value::Object(d)
        })
        .collect()
}

/// The daemon's withdrawal of a hook request (LSP's `$/cancelRequest`), sent beside the hooks.
fn cancel_request() -> Value {
    json!({
        "name": "$/cancelRequest",
        "kind": "notification",
        "summary": "The daemon no longer waits for the hook request with this id (abort or timeout); a late reply is ignored.",
        "params": [{"name": "id", "required": true, "schema": {"type": "string"}}]
    })
}

fn error_table() -> Vec<Value> {
    let mut v: Vec<Value> = ErrorKind::ALL
        .iter()
        .map(|k| json!({"code": k.code(), "kind": k.as_str(), "message": example_message(*k)}))
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e["code"].as_i64().unwrap_or(0)));
    v
}

fn sorted_by_name(mut v: Vec<Value>) -> Vec<Value> {
    v.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    v
}

/// The OpenRPC document of this daemon's protocol.
pub fn document() -> Value {
    let mut schemas = Schemas::new();
    let mut specs: Vec<_> = METHODS.iter().collect();
    specs.sort_by_key(|m| m.name);
    let methods: Vec<Value> = specs
        .into_iter()
        .map(|m| {
            let mut errors: Vec<Value> = m.errors.iter().map(|k| error_object(*k)).collect();
            errors.sort_by_key(|e| std::cmp::Reverse(e["code"].as_i64().unwrap_or(0)));
            json!({
                "name": m.name,
                "summary": m.summary.trim(),
                "paramStructure": "by-name",
                "params": (m.params_schema)(&mut schemas),
                "result": descriptor(m.result_name, (m.result_schema)(&mut schemas)),
                "errors": errors,
                // How the daemon runs it (`Run`): a client waits longer for a "task". An
                // awaited method is answered in order, as an inline one.
                "x-run": match m.run {
                    Run::Inline | Run::Awaited => "inline",
                    Run::Task => "task",
                },
            })
        })
        .collect();
    let mut notifications = messages(EVENTS, &mut schemas);
    notifications.extend(messages(NOTICES, &mut schemas));
    let notifications = sorted_by_name(notifications);
    let mut hooks = messages(HOOKS, &mut schemas);
    hooks.push(cancel_request());
    let hooks = sorted_by_name(hooks);
    let mut components: Vec<(String, Value)> = schemas.definitions().into_iter().collect();
    components.sort_by(|a, b| a.0.cmp(&b.0));
    let components: Map<String, Value> = components.into_iter().collect();
    json!({
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "compactd",
            "version": PROTOCOL_VERSION,
            "description": "JSON-RPC 2.0 protocol of compactd, the LLM context compaction daemon for Pi-format sessions. Transports: stdio and a Unix socket, framed as NDJSON or LSP `Content-Length` headers (detected per connection). Prose reference: proto-docs/README.md.",
            "license": {"name": "MIT"}
        },
        "methods": methods,
        "components": {"schemas": components},
        "x-errors": error_table(),
        "x-notifications": notifications,
        "x-hooks": hooks,
    })
}

/// `document()` as committed: pretty-printed with a trailing newline.
pub fn document_text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("a JSON value serializes");
    s.push('\n');
    s
}
