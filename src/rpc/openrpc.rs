//! The machine-readable protocol reference: an OpenRPC 1.3 document describing every method of
//! the dispatch table, the events a subscriber receives (`x-notifications`), the server→client
//! hook traffic (`x-hooks`) and the error table (`x-errors`).
//!
//! The methods come from the one list in [`super::methods`]; their params and result schemas are
//! derived (`#[derive(JsonSchema)]`) from the types the daemon parses and serializes, so they
//! cannot drift from the wire. The hook payloads, which the daemon assembles from Pi's own
//! structures, are described by hand below. `tests/openrpc.rs` compares the output with the
//! committed `proto-docs/openrpc.json` and validates real responses against the result schemas.
//!
//! The output is deterministic: methods, notifications, hooks and component schemas are sorted
//! by name; properties keep their declaration order.

use serde_json::{json, Map, Value};

use super::errors::ErrorKind;
use super::methods::METHODS;
use super::schemas::Schemas;
use super::PROTOCOL_VERSION;

/// The OpenRPC specification version the document follows.
pub const OPENRPC_VERSION: &str = "1.3.2";

/// `#/components/schemas/<name>`.
fn r(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// Hand-written component schemas for the hook payloads (assembled from Pi's structures).
fn manual_components() -> Vec<(&'static str, Value)> {
    let string_list = json!({"type": "array", "items": {"type": "string"}});
    vec![
        (
            "CompactionEntry",
            json!({
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
                    "usage": r("Usage"),
                    "fromHook": {"type": "boolean"}
                },
                "required": ["type", "id", "parentId", "timestamp", "summary", "firstKeptEntryId", "tokensBefore", "fromHook"]
            }),
        ),
        (
            "FileOps",
            json!({
                "type": "object",
                "properties": {"read": string_list, "written": string_list, "edited": string_list},
                "required": ["read", "written", "edited"]
            }),
        ),
        (
            "CompactionPreparation",
            json!({
                "description": "Pi's `CompactionPreparation` (compaction.md §5 step 13), sets as arrays.",
                "type": "object",
                "properties": {
                    "firstKeptEntryId": {"type": "string"},
                    "messagesToSummarize": {"type": "array", "items": r("AgentMessage")},
                    "turnPrefixMessages": {"type": "array", "items": r("AgentMessage")},
                    "isSplitTurn": {"type": "boolean"},
                    "tokensBefore": {"type": "number"},
                    "previousSummary": {"type": "string"},
                    "fileOps": r("FileOps"),
                    "settings": r("CompactionSettings")
                },
                "required": ["firstKeptEntryId", "messagesToSummarize", "turnPrefixMessages", "isSplitTurn", "tokensBefore", "fileOps", "settings"]
            }),
        ),
        (
            "TreePreparation",
            json!({
                "description": "Pi's tree-navigation preparation (compaction.md §9).",
                "type": "object",
                "properties": {
                    "targetId": {"type": ["string", "null"]},
                    "oldLeafId": {"type": ["string", "null"]},
                    "commonAncestorId": {"type": ["string", "null"]},
                    "entriesToSummarize": {"type": "array", "items": r("SessionEntry")},
                    "userWantsSummary": {"type": "boolean"},
                    "customInstructions": {"type": ["string", "null"]},
                    "replaceInstructions": {"type": "boolean"},
                    "label": {"type": ["string", "null"]}
                },
                "required": ["targetId", "oldLeafId", "commonAncestorId", "entriesToSummarize", "userWantsSummary", "customInstructions", "replaceInstructions", "label"]
            }),
        ),
    ]
}

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
        InvalidSessionFile => "Session file is not a valid pi session: <abs path>",
        Locked => "Session file is locked by another compactd process: <path>",
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

fn descriptor(name: &str, schema: Value) -> Value {
    json!({"name": name, "schema": schema})
}

fn field(name: &str, required: bool, schema: Value) -> Value {
    json!({"name": name, "required": required, "schema": schema})
}

/// Events a subscribed connection receives as plain JSON-RPC notifications.
fn notifications() -> Vec<Value> {
    let sid = || field("sessionId", true, json!({"type": "string"}));
    let reason = |required| {
        field(
            "reason",
            required,
            json!({"type": "string", "enum": ["manual", "threshold", "overflow"]}),
        )
    };
    vec![
        json!({
            "name": "compaction_start",
            "summary": "A compaction of the session started (Pi's `compaction_start`). An agent treats reason \"manual\" for its session as Pi's abort().",
            "params": [sid(), reason(true)]
        }),
        json!({
            "name": "compaction_end",
            "summary": "A compaction ended. `result` is omitted (not null) unless it succeeded; `errorMessage` is prefixed (`Compaction failed: `, `Auto-compaction failed: `, `Context overflow recovery failed: `) or is the overflow give-up text.",
            "params": [
                sid(),
                reason(true),
                field("result", false, r("CompactionResult")),
                field("aborted", true, json!({"type": "boolean"})),
                field("willRetry", true, json!({"type": "boolean"})),
                field("errorMessage", false, json!({"type": "string"}))
            ]
        }),
        json!({
            "name": "compaction_suppressed",
            "summary": "Beyond Pi (thrash breaker): an automatic threshold compaction was skipped because the previous one did not bring the context under the threshold. `paused`: automatic compaction is now paused for the session until a manual compact or a settings change (sent once per pause).",
            "params": [
                sid(),
                field("reason", true, json!({"type": "string", "enum": ["ineffective", "floor"]})),
                field("tokensBefore", true, json!({"type": "number"})),
                field("tokensAfter", true, json!({"type": "number", "description": "The first context size reported after that compaction."})),
                field("threshold", true, json!({"type": "number"})),
                field("paused", true, json!({"type": "boolean"}))
            ]
        }),
        json!({
            "name": "compaction_undone",
            "summary": "Beyond Pi: undoCompaction made the path before compaction `compactionId` active (`entryId`: the appended marker, the new leaf).",
            "params": [sid(), field("compactionId", true, json!({"type": "string"})), field("entryId", true, json!({"type": "string"}))]
        }),
        json!({
            "name": "summary_edited",
            "summary": "Beyond Pi: editSummary appended `entryId`, a corrected copy of compaction `compactionId`.",
            "params": [sid(), field("compactionId", true, json!({"type": "string"})), field("entryId", true, json!({"type": "string"}))]
        }),
        json!({
            "name": "summarization_retry_scheduled",
            "summary": "A summarization call failed with a retryable error; the next attempt is scheduled.",
            "params": [
                sid(),
                field("attempt", true, json!({"type": "integer"})),
                field("maxAttempts", true, json!({"type": "integer"})),
                field("delayMs", true, json!({"type": "integer"})),
                field("errorMessage", true, json!({"type": "string"}))
            ]
        }),
        json!({
            "name": "summarization_retry_attempt_start",
            "summary": "A scheduled retry attempt starts.",
            "params": [
                sid(),
                field("source", true, json!({"const": "compaction"})),
                reason(true)
            ]
        }),
        json!({
            "name": "summarization_retry_finished",
            "summary": "The retry sequence of a summarization call ended.",
            "params": [sid()]
        }),
        json!({
            "name": "subscription_dropped",
            "summary": "This connection fell too far behind (1024 queued events); its subscriptions were removed. Sent once, after the queue drained. Resubscribe to continue.",
            "params": []
        }),
    ]
}

/// Server→client traffic to connections that called `registerHooks`.
fn hooks() -> Vec<Value> {
    let sid = || field("sessionId", true, json!({"type": "string"}));
    vec![
        json!({
            "name": "session_before_compact",
            "kind": "request",
            "summary": "Asked before a compaction summarizes (Pi's session_before_compact). Connections are asked in registration order, at most once each; a timeout, error or disconnect counts as no result. The last result with a valid compaction wins; cancel stops.",
            "params": [
                sid(),
                field("preparation", true, r("CompactionPreparation")),
                field("branchEntries", true, json!({"type": "array", "items": r("SessionEntry")})),
                field("customInstructions", false, json!({"type": "string"})),
                field("reason", true, json!({"type": "string", "enum": ["manual", "threshold", "overflow"]})),
                field("willRetry", true, json!({"type": "boolean"}))
            ],
            "result": descriptor("SessionBeforeCompactReply", json!({
                "oneOf": [
                    {"type": "null"},
                    {"type": "object", "properties": {"cancel": {"const": true}}, "required": ["cancel"]},
                    {
                        "type": "object",
                        "properties": {
                            "compaction": {
                                "type": "object",
                                "properties": {
                                    "summary": {"type": "string"},
                                    "firstKeptEntryId": {"type": "string", "description": "Must be on the branch, else the reply counts as no result."},
                                    "tokensBefore": {"type": "number"},
                                    "details": {},
                                    "usage": r("Usage")
                                },
                                "required": ["summary", "firstKeptEntryId"]
                            }
                        },
                        "required": ["compaction"]
                    }
                ]
            }))
        }),
        json!({
            "name": "session_before_tree",
            "kind": "request",
            "summary": "Asked before navigateTree moves the leaf (Pi's session_before_tree).",
            "params": [sid(), field("preparation", true, r("TreePreparation"))],
            "result": descriptor("SessionBeforeTreeReply", json!({
                "oneOf": [
                    {"type": "null"},
                    {"type": "object", "properties": {"cancel": {"const": true}}, "required": ["cancel"]},
                    {
                        "type": "object",
                        "properties": {
                            "summary": {
                                "type": "object",
                                "properties": {"summary": {"type": "string"}, "details": {}, "usage": r("Usage")},
                                "required": ["summary"]
                            },
                            "customInstructions": {"type": "string"},
                            "replaceInstructions": {"type": "boolean"},
                            "label": {"type": "string"}
                        }
                    }
                ]
            }))
        }),
        json!({
            "name": "session_compact",
            "kind": "notification",
            "summary": "A compaction entry was appended (Pi's session_compact). `compactionEntry` is the first compaction in the file with this summary.",
            "params": [
                sid(),
                field("compactionEntry", true, r("CompactionEntry")),
                field("fromExtension", true, json!({"type": "boolean"})),
                field("reason", true, json!({"type": "string", "enum": ["manual", "threshold", "overflow"]})),
                field("willRetry", true, json!({"type": "boolean"}))
            ]
        }),
        json!({
            "name": "session_compact_failed",
            "kind": "notification",
            "summary": "A compaction ended without an entry (Pi's session_compact_failed).",
            "params": [
                sid(),
                field("reason", true, json!({"type": "string", "enum": ["manual", "threshold", "overflow"]})),
                field("errorMessage", false, json!({"type": "string"})),
                field("aborted", true, json!({"type": "boolean"})),
                field("willRetry", true, json!({"const": false})),
                field("fromExtension", true, json!({"type": "boolean"}))
            ]
        }),
        json!({
            "name": "$/cancelRequest",
            "kind": "notification",
            "summary": "The daemon no longer waits for the hook request with this id (abort or timeout); a late reply is ignored.",
            "params": [field("id", true, json!({"type": "string"}))]
        }),
    ]
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
            })
        })
        .collect();
    let mut components: Vec<(String, Value)> = schemas.definitions().into_iter().collect();
    components.extend(
        manual_components()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v)),
    );
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
        "x-notifications": sorted_by_name(notifications()),
        "x-hooks": sorted_by_name(hooks()),
    })
}

/// `document()` as committed: pretty-printed with a trailing newline.
pub fn document_text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("a JSON value serializes");
    s.push('\n');
    s
}
