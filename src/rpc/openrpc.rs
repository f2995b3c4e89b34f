//! The machine-readable protocol reference: an OpenRPC 1.3 document describing every method of
//! the dispatch table, the events a subscriber receives (`x-notifications`), the server→client
//! hook traffic (`x-hooks`) and the error table (`x-errors`).
//!
//! Parameter schemas come from the `#[derive(JsonSchema)]` param structs in [`super::types`], so
//! they cannot drift from what the daemon parses. Results that the handlers build as ad-hoc JSON
//! (`methods.rs`, `lifecycle.rs`, `navigate.rs`) are described by hand below, next to the code
//! that names their fields. `tests/openrpc.rs` compares the output with the committed
//! `proto-docs/openrpc.json` and checks that the method list matches the dispatcher's.
//!
//! The output is deterministic: methods, notifications, hooks and component schemas are sorted
//! by name; properties keep their declaration order.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use super::errors::ErrorKind;
use super::types::*;
use crate::daemon::methods::PROTOCOL_VERSION;

/// The OpenRPC specification version the document follows.
pub const OPENRPC_VERSION: &str = "1.3.2";

/// `#/components/schemas/<name>`.
fn r(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn nullable(schema: Value) -> Value {
    json!({ "oneOf": [schema, {"type": "null"}] })
}

/// Schema generators: params are described as the daemon deserializes them, results as it
/// serializes them. Both put shared types under `#/components/schemas`.
struct Schemas {
    de: SchemaGenerator,
    ser: SchemaGenerator,
}

impl Schemas {
    fn new() -> Schemas {
        let settings = || {
            SchemaSettings::draft2020_12().with(|s| {
                s.definitions_path = "/components/schemas".into();
                s.meta_schema = None;
            })
        };
        Schemas {
            de: settings().for_deserialize().into_generator(),
            ser: settings().for_serialize().into_generator(),
        }
    }

    /// One OpenRPC content descriptor per field of the params struct `T`.
    fn params<T: JsonSchema>(&mut self) -> Vec<Value> {
        let root = self.de.root_schema_for::<T>();
        let obj = root.as_object().cloned().unwrap_or_default();
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(Value::Object(props)) = obj.get("properties") else {
            return Vec::new();
        };
        props
            .iter()
            .map(|(name, schema)| {
                let mut schema = schema.clone();
                let description = schema.as_object_mut().and_then(|o| o.remove("description"));
                let mut d = Map::new();
                d.insert("name".into(), json!(name));
                if let Some(desc) = description {
                    d.insert("description".into(), desc);
                }
                d.insert("required".into(), json!(required.contains(&name.as_str())));
                d.insert("schema".into(), schema);
                Value::Object(d)
            })
            .collect()
    }

    /// A `$ref` to a serialized result type, registering its definition.
    fn result<T: JsonSchema>(&mut self) -> Value {
        self.ser.subschema_for::<T>().to_value()
    }

    /// Every generated definition, params' view first (they agree on shared types).
    fn definitions(&mut self) -> Map<String, Value> {
        let mut out = self.de.take_definitions(true);
        for (k, v) in self.ser.take_definitions(true) {
            out.entry(k).or_insert(v);
        }
        out
    }
}

/// Hand-written component schemas for the JSON the handlers build directly.
fn manual_components() -> Vec<(&'static str, Value)> {
    let int = json!({"type": "integer"});
    let string_list = json!({"type": "array", "items": {"type": "string"}});
    vec![
        (
            "UsageCost",
            json!({
                "description": "Cost breakdown in Pi's key order (pi-ai `Usage.cost`).",
                "type": "object",
                "properties": {
                    "input": {"type": "number"},
                    "output": {"type": "number"},
                    "cacheRead": {"type": "number"},
                    "cacheWrite": {"type": "number"},
                    "total": {"type": "number"}
                },
                "required": ["input", "output", "cacheRead", "cacheWrite", "total"]
            }),
        ),
        (
            "Usage",
            json!({
                "description": "pi-ai's `Usage` of the summarization call(s), in Pi's key order; optional members are omitted when absent.",
                "type": "object",
                "properties": {
                    "input": int,
                    "output": int,
                    "cacheRead": int,
                    "cacheWrite": int,
                    "cacheWrite1h": int,
                    "reasoning": int,
                    "totalTokens": int,
                    "cost": r("UsageCost")
                },
                "required": ["input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"]
            }),
        ),
        (
            "CompactionDetails",
            json!({
                "description": "`details` of a compaction produced by the daemon: the file lists, plus `summarizer: \"extractive\"` when the embedded summarizer wrote it. A hook-supplied compaction carries whatever details the hook returned.",
                "type": "object",
                "properties": {
                    "readFiles": string_list,
                    "modifiedFiles": string_list,
                    "summarizer": {"type": "string", "enum": ["extractive"]}
                },
                "additionalProperties": true
            }),
        ),
        (
            "CompactionResult",
            json!({
                "description": "The outcome of a compaction (`compact`, `checkCompaction.result`, `compaction_end.result`).",
                "type": "object",
                "properties": {
                    "summary": {"type": "string"},
                    "firstKeptEntryId": {"type": "string"},
                    "tokensBefore": {"type": "number"},
                    "estimatedTokensAfter": {"type": "integer", "minimum": 0, "description": "Estimated tokens of the agent context rebuilt after the entry was appended (beyond Pi)."},
                    "usage": r("Usage"),
                    "details": r("CompactionDetails")
                },
                "required": ["summary", "firstKeptEntryId", "tokensBefore", "estimatedTokensAfter"]
            }),
        ),
        (
            "CompactionSettings",
            json!({
                "description": "An effective `compaction` settings block.",
                "type": "object",
                "properties": {
                    "enabled": {"type": "boolean"},
                    "reserveTokens": int,
                    "keepRecentTokens": int,
                    "fileListLimit": {"type": "integer", "minimum": 0, "description": "Beyond Pi: the most paths each summary file block lists (absent: unlimited, Pi's behaviour). Only in getSettings' answer, when set."},
                    "maxIneffectiveCompactions": {"type": "integer", "minimum": 0, "description": "Beyond Pi: ineffective automatic compactions in a row before automatic compaction pauses (default 2; 0: no thrash breaker). Only in getSettings' answer."}
                },
                "required": ["enabled", "reserveTokens", "keepRecentTokens"]
            }),
        ),
        (
            "EffectiveSettings",
            json!({
                "description": "Defaults ← global settings.json ← trusted project settings ← overrides.",
                "type": "object",
                "properties": {
                    "compaction": r("CompactionSettings"),
                    "branchSummary": {
                        "type": "object",
                        "properties": {"reserveTokens": int},
                        "required": ["reserveTokens"]
                    },
                    "retry": {
                        "type": "object",
                        "properties": {
                            "enabled": {"type": "boolean"},
                            "maxRetries": int,
                            "baseDelayMs": int
                        },
                        "required": ["enabled", "maxRetries", "baseDelayMs"]
                    },
                    "defaultThinkingLevel": {"type": "string"}
                },
                "required": ["compaction", "branchSummary", "retry", "defaultThinkingLevel"]
            }),
        ),
        (
            "SessionEntry",
            json!({
                "description": "A raw Pi session entry (sessions.md), exactly as stored in the file.",
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["message", "thinking_level_change", "model_change", "compaction", "branch_summary", "custom", "custom_message", "label", "session_info"]},
                    "id": {"type": "string"},
                    "parentId": {"type": ["string", "null"]},
                    "timestamp": {"type": "string", "description": "ISO 8601."}
                },
                "required": ["type", "id", "parentId", "timestamp"],
                "additionalProperties": true
            }),
        ),
        (
            "AgentMessage",
            json!({
                "description": "An AgentMessage (Pi field shapes). `getContext {format: \"llm\"}` returns the `convertToLlm` projection instead (roles user/assistant/toolResult only).",
                "type": "object",
                "properties": {
                    "role": {"type": "string", "enum": ["user", "assistant", "toolResult", "bashExecution", "custom", "branchSummary", "compactionSummary"]},
                    "timestamp": {"type": "number", "description": "Epoch milliseconds."}
                },
                "required": ["role"],
                "additionalProperties": true
            }),
        ),
        (
            "MessageStats",
            json!({
                "type": "object",
                "properties": {
                    "count": {"type": "integer", "minimum": 0},
                    "estimatedTokens": {"type": "integer", "minimum": 0}
                },
                "required": ["count", "estimatedTokens"]
            }),
        ),
        (
            "MessageRef",
            json!({
                "type": "object",
                "properties": {
                    "entryId": {"type": "string"},
                    "role": {"type": "string"}
                },
                "required": ["entryId", "role"]
            }),
        ),
        (
            "CompactionPreview",
            json!({
                "description": "`previewCompaction`'s answer when there is something to compact. The `detail: \"full\"` members are marked.",
                "type": "object",
                "properties": {
                    "firstKeptEntryId": {"type": "string"},
                    "isSplitTurn": {"type": "boolean"},
                    "tokensBefore": {"type": "number"},
                    "hasPreviousSummary": {"type": "boolean"},
                    "summarize": r("MessageStats"),
                    "turnPrefix": r("MessageStats"),
                    "kept": r("MessageStats"),
                    "fileLists": {
                        "type": "object",
                        "properties": {"readFiles": string_list, "modifiedFiles": string_list},
                        "required": ["readFiles", "modifiedFiles"]
                    },
                    "settings": r("CompactionSettings"),
                    "previousSummary": {"type": ["string", "null"], "description": "detail \"full\" only."},
                    "messagesToSummarize": {"type": "array", "items": r("MessageRef"), "description": "detail \"full\" only."},
                    "turnPrefixMessages": {"type": "array", "items": r("MessageRef"), "description": "detail \"full\" only."},
                    "serialized": {
                        "description": "detail \"full\" only: the serialized summarizer input (`<conversation>` text) of each part; null when the part is empty.",
                        "type": "object",
                        "properties": {
                            "messagesToSummarize": {"type": ["string", "null"]},
                            "turnPrefixMessages": {"type": ["string", "null"]}
                        },
                        "required": ["messagesToSummarize", "turnPrefixMessages"]
                    }
                },
                "required": ["firstKeptEntryId", "isSplitTurn", "tokensBefore", "hasPreviousSummary", "summarize", "turnPrefix", "kept", "fileLists", "settings"]
            }),
        ),
        (
            "NothingToCompact",
            json!({
                "type": "object",
                "properties": {
                    "nothingToCompact": {"type": "string", "enum": ["Already compacted", "Nothing to compact (session too small)"]}
                },
                "required": ["nothingToCompact"]
            }),
        ),
        (
            "CheckCompactionResult",
            json!({
                "description": "The outcome of an automatic check. Compaction outcomes are never JSON-RPC errors.",
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["none", "compacted", "failed", "aborted"]},
                    "reason": {"type": "string", "enum": ["threshold", "overflow"]},
                    "willRetry": {"type": "boolean"},
                    "contextChanged": {"type": "boolean"},
                    "result": r("CompactionResult"),
                    "errorMessage": {"type": "string"}
                },
                "required": ["action", "willRetry", "contextChanged"]
            }),
        ),
        (
            "NavigateTreeResult",
            json!({
                "type": "object",
                "properties": {
                    "newLeafId": {"type": ["string", "null"]},
                    "oldLeafId": {"type": ["string", "null"]},
                    "cancelled": {"type": "boolean"},
                    "aborted": {"type": "boolean", "description": "Present (true) when the branch summary was aborted."},
                    "editorText": {"type": "string", "description": "When the target is a user message or custom_message: its text; the leaf moves to its parent."},
                    "summaryEntry": r("BranchSummaryEntry")
                },
                "required": ["newLeafId", "oldLeafId", "cancelled"]
            }),
        ),
        (
            "BranchSummaryEntry",
            json!({
                "type": "object",
                "properties": {
                    "type": {"const": "branch_summary"},
                    "id": {"type": "string"},
                    "parentId": {"type": ["string", "null"]},
                    "timestamp": {"type": "string"},
                    "fromId": {"type": "string", "description": "The old leaf, or \"root\"."},
                    "summary": {"type": "string"},
                    "details": {"type": "object"},
                    "usage": r("Usage"),
                    "fromHook": {"type": "boolean"}
                },
                "required": ["type", "id", "parentId", "timestamp", "fromId", "summary", "fromHook"]
            }),
        ),
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

/// One method: name, summary, params (from the param struct), result schema, errors.
struct MethodDoc {
    name: &'static str,
    summary: &'static str,
    params: Vec<Value>,
    result_name: &'static str,
    result: Value,
    errors: Vec<ErrorKind>,
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

fn methods(s: &mut Schemas) -> Vec<MethodDoc> {
    use ErrorKind::*;
    let session_info = s.result::<SessionInfo>();
    let append_result = s.result::<AppendResult>();
    let session_err = vec![InvalidParams, UnknownSession];
    let write_err = vec![InvalidParams, UnknownSession, Compacting, LeafMoved, Io];
    let ok = |key: &str| {
        json!({
            "type": "object",
            "properties": {key: {"const": true}},
            "required": [key]
        })
    };
    vec![
        MethodDoc {
            name: "initialize",
            summary: "Optional handshake: server name, version, protocol version and capabilities. Registers nothing.",
            params: s.params::<InitializeParams>(),
            result_name: "InitializeResult",
            result: json!({
                "type": "object",
                "properties": {
                    "serverName": {"const": "compactd"},
                    "version": {"type": "string"},
                    "protocolVersion": {"type": "string"},
                    "capabilities": {
                        "type": "object",
                        "properties": {
                            "framings": {"type": "array", "items": {"type": "string", "enum": ["ndjson", "lsp"]}},
                            "hooks": {"type": "array", "items": {"type": "string"}},
                            "events": {"type": "array", "items": {"type": "string"}},
                            "summarizer": {"type": "string", "description": "The configured summarizer provider (`extractive` when none)."}
                        },
                        "required": ["framings", "hooks", "events", "summarizer"]
                    }
                },
                "required": ["serverName", "version", "protocolVersion", "capabilities"]
            }),
            errors: vec![InvalidParams],
        },
        MethodDoc {
            name: "openSession",
            summary: "Opens (Pi's resume) or, with `create`, creates a session file; takes a hold on it for this connection.",
            params: s.params::<OpenSessionParams>(),
            result_name: "SessionInfo",
            result: session_info.clone(),
            errors: vec![InvalidParams, NotFound, InvalidSessionFile, Locked, Io],
        },
        MethodDoc {
            name: "createSession",
            summary: "Pi's new session (deferred: nothing is on disk until the first assistant message).",
            params: s.params::<CreateSessionParams>(),
            result_name: "SessionInfo",
            result: session_info.clone(),
            errors: vec![InvalidParams, Locked, Io],
        },
        MethodDoc {
            name: "closeSession",
            summary: "Releases this connection's hold; the last release aborts a running compaction and forgets the session.",
            params: s.params::<SessionParams>(),
            result_name: "CloseSessionResult",
            result: json!({
                "type": "object",
                "properties": {"closed": {"type": "boolean", "description": "Whether this connection held the session."}},
                "required": ["closed"]
            }),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "listSessions",
            summary: "The sessions open in this daemon (not a scan of the sessions directory), sorted by sessionId.",
            params: Vec::new(),
            result_name: "SessionInfoList",
            result: json!({"type": "array", "items": session_info.clone()}),
            errors: vec![],
        },
        MethodDoc {
            name: "appendMessage",
            summary: "Appends an AgentMessage (user, assistant, toolResult, bashExecution) as a `message` entry under the current leaf.",
            params: s.params::<AppendMessageParams>(),
            result_name: "AppendResult",
            result: append_result.clone(),
            errors: write_err.clone(),
        },
        MethodDoc {
            name: "appendEntry",
            summary: "Appends a thinking_level_change, label, custom, custom_message or session_info entry; the daemon fills id, parentId and timestamp.",
            params: s.params::<AppendEntryParams>(),
            result_name: "AppendResult",
            result: append_result.clone(),
            errors: vec![InvalidParams, UnknownSession, Compacting, LeafMoved, EntryNotFound, Io],
        },
        MethodDoc {
            name: "setModel",
            summary: "The agent switched model: sets the current model and appends a model_change; reports whether the context already exceeds the new model's threshold (then the next checkCompaction compacts).",
            params: s.params::<SetModelParams>(),
            result_name: "SetModelResult",
            result: s.result::<SetModelResult>(),
            errors: vec![InvalidParams, UnknownSession, Compacting, Io],
        },
        MethodDoc {
            name: "navigateTree",
            summary: "Pi's tree navigation, with an optional branch summary of the abandoned branch and the session_before_tree hook.",
            params: s.params::<NavigateTreeParams>(),
            result_name: "NavigateTreeResult",
            result: r("NavigateTreeResult"),
            errors: vec![InvalidParams, UnknownSession, Compacting, EntryNotFound, LeafMoved, Auth, SummarizationFailed, Io],
        },
        MethodDoc {
            name: "getBranch",
            summary: "The raw entries from the root to the current leaf (no header).",
            params: s.params::<SessionParams>(),
            result_name: "Branch",
            result: json!({"type": "array", "items": r("SessionEntry")}),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "getContext",
            summary: "The agent context (Pi's agent.state.messages), or its convertToLlm projection with format \"llm\".",
            params: s.params::<GetContextParams>(),
            result_name: "Context",
            result: json!({
                "type": "object",
                "properties": {
                    "messages": {"type": "array", "items": r("AgentMessage")},
                    "leafId": {"type": ["string", "null"]}
                },
                "required": ["messages", "leafId"]
            }),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "getContextUsage",
            summary: "Estimated context tokens against the current model's window; null without a model (or a window <= 0).",
            params: s.params::<SessionParams>(),
            result_name: "ContextUsage",
            result: nullable(json!({
                "type": "object",
                "properties": {
                    "tokens": {"type": ["number", "null"], "description": "null after a compaction until an assistant message with usage follows it."},
                    "contextWindow": {"type": "integer"},
                    "percent": {"type": ["number", "null"]}
                },
                "required": ["tokens", "contextWindow", "percent"]
            })),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "searchHistory",
            summary: "Beyond Pi: finds text in every entry of the session (all branches, compacted entries included), most recent first.",
            params: s.params::<SearchHistoryParams>(),
            result_name: "HistoryHits",
            result: json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "entryId": {"type": ["string", "null"]},
                        "role": {"type": "string", "description": "The message's role, else the entry's type (compaction, branch_summary, custom, …)."},
                        "timestamp": {"description": "The entry's timestamp as stored."},
                        "snippet": {"type": "string", "description": "The match with up to 80 characters each side, whitespace folded, … at a cut."},
                        "compacted": {"type": "boolean", "description": "On the current branch but no longer verbatim in the context (summarized by a compaction)."},
                        "onBranch": {"type": "boolean", "description": "On the current branch (else on an abandoned one)."}
                    },
                    "required": ["entryId", "role", "timestamp", "snippet", "compacted", "onBranch"]
                }
            }),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "getEntry",
            summary: "Beyond Pi: one entry exactly as stored, by id (any branch), e.g. a compacted message found by searchHistory.",
            params: s.params::<GetEntryParams>(),
            result_name: "SessionEntry",
            result: r("SessionEntry"),
            errors: vec![InvalidParams, UnknownSession, EntryNotFound],
        },
        MethodDoc {
            name: "pin",
            summary: "Beyond Pi: pins a text (a Pi custom entry, customType compactd.pin); every summary compactd writes carries the live pins verbatim in a `## Pinned` section.",
            params: s.params::<PinParams>(),
            result_name: "PinResult",
            result: json!({
                "type": "object",
                "properties": {
                    "pinId": {"type": "string", "description": "The pin entry's id."},
                    "entryId": {"type": "string"},
                    "leafId": {"type": "string"}
                },
                "required": ["pinId", "entryId", "leafId"]
            }),
            errors: vec![InvalidParams, UnknownSession, Compacting, Io],
        },
        MethodDoc {
            name: "unpin",
            summary: "Beyond Pi: unpins a live pin of the current branch (appends an unpin custom entry).",
            params: s.params::<UnpinParams>(),
            result_name: "AppendResult",
            result: append_result.clone(),
            errors: vec![InvalidParams, UnknownSession, Compacting, EntryNotFound, Io],
        },
        MethodDoc {
            name: "listPins",
            summary: "Beyond Pi: the live pins of the current branch, oldest first.",
            params: s.params::<SessionParams>(),
            result_name: "Pins",
            result: json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "pinId": {"type": "string"},
                        "text": {"type": "string"},
                        "label": {"type": "string"},
                        "timestamp": {"description": "The pin entry's timestamp as stored."}
                    },
                    "required": ["pinId", "text", "timestamp"]
                }
            }),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "undoCompaction",
            summary: "Beyond Pi: makes the path before the branch's latest compaction the active one by appending a compactd.undo_compaction custom entry under the compaction's parent (the compaction stays in the tree).",
            params: s.params::<SessionParams>(),
            result_name: "UndoCompactionResult",
            result: json!({
                "type": "object",
                "properties": {
                    "undoneCompactionId": {"type": "string"},
                    "entryId": {"type": "string"},
                    "leafId": {"type": "string"}
                },
                "required": ["undoneCompactionId", "entryId", "leafId"]
            }),
            errors: vec![InvalidParams, UnknownSession, NothingToCompact, LeafMoved, Compacting, FileChanged, FileBusy, Io],
        },
        MethodDoc {
            name: "editSummary",
            summary: "Beyond Pi: replaces the latest compaction's summary by appending a corrected compaction beside it (same parent, firstKeptEntryId and tokensBefore; details.editedFrom names the original).",
            params: s.params::<EditSummaryParams>(),
            result_name: "EditSummaryResult",
            result: json!({
                "type": "object",
                "properties": {
                    "entry": r("SessionEntry"),
                    "editedFrom": {"type": "string"},
                    "entryId": {"type": "string"},
                    "leafId": {"type": "string"}
                },
                "required": ["entry", "editedFrom", "entryId", "leafId"]
            }),
            errors: vec![InvalidParams, UnknownSession, NothingToCompact, LeafMoved, Compacting, FileChanged, FileBusy, Io],
        },
        MethodDoc {
            name: "shouldCompact",
            summary: "Pi's shouldCompact, for a session (agent-context estimate, current model's window) or for given numbers.",
            params: s.params::<ShouldCompactParams>(),
            result_name: "ShouldCompactResult",
            result: json!({
                "type": "object",
                "properties": {
                    "shouldCompact": {"type": "boolean"},
                    "contextTokens": {"type": "number"},
                    "contextWindow": {"type": "integer"},
                    "threshold": {"type": "number", "description": "contextWindow − reserveTokens."},
                    "settings": r("CompactionSettings")
                },
                "required": ["shouldCompact", "contextTokens", "contextWindow", "threshold", "settings"]
            }),
            errors: vec![InvalidParams, UnknownSession, NoModel],
        },
        MethodDoc {
            name: "previewCompaction",
            summary: "The compaction preparation without calling any model (beyond Pi).",
            params: s.params::<PreviewCompactionParams>(),
            result_name: "PreviewCompactionResult",
            result: json!({"oneOf": [r("CompactionPreview"), r("NothingToCompact")]}),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "compact",
            summary: "Manual compaction (compaction.md §8.2); supersedes a running compaction of the session.",
            params: s.params::<CompactParams>(),
            result_name: "CompactionResult",
            result: r("CompactionResult"),
            errors: vec![InvalidParams, UnknownSession, NothingToCompact, AlreadyCompacted, Cancelled, SummarizationFailed, Auth, LeafMoved, Io],
        },
        MethodDoc {
            name: "checkCompaction",
            summary: "Pi's automatic compaction paths (threshold and overflow) at one agent-loop phase; waits for a running compaction first.",
            params: s.params::<CheckCompactionParams>(),
            result_name: "CheckCompactionResult",
            result: r("CheckCompactionResult"),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "abortCompaction",
            summary: "Signals the running compaction or branch summary and returns at once.",
            params: s.params::<SessionParams>(),
            result_name: "AbortCompactionResult",
            result: json!({
                "type": "object",
                "properties": {"aborted": {"type": "boolean", "description": "Whether one was running."}},
                "required": ["aborted"]
            }),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "getSettings",
            summary: "The session's effective settings (files re-read on every call).",
            params: s.params::<SessionParams>(),
            result_name: "EffectiveSettings",
            result: r("EffectiveSettings"),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "setSettingsOverrides",
            summary: "In-memory compaction overrides for one session, or for every session when sessionId is omitted; null clears.",
            params: s.params::<SetSettingsOverridesParams>(),
            result_name: "SetSettingsOverridesResult",
            result: ok("ok"),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "subscribe",
            summary: "Adds an event filter for this connection (no sessionId: every session; no events: all).",
            params: s.params::<SubscribeParams>(),
            result_name: "SubscribeResult",
            result: ok("subscribed"),
            errors: session_err.clone(),
        },
        MethodDoc {
            name: "unsubscribe",
            summary: "Removes every event filter of this connection.",
            params: Vec::new(),
            result_name: "UnsubscribeResult",
            result: ok("unsubscribed"),
            errors: vec![],
        },
        MethodDoc {
            name: "registerHooks",
            summary: "Registers this connection for hook requests/notifications (x-hooks), for one session or all.",
            params: s.params::<RegisterHooksParams>(),
            result_name: "RegisterHooksResult",
            result: ok("registered"),
            errors: session_err,
        },
    ]
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
    let mut method_docs = methods(&mut schemas);
    method_docs.sort_by_key(|m| m.name);
    let methods: Vec<Value> = method_docs
        .into_iter()
        .map(|m| {
            let mut errors: Vec<Value> = m.errors.iter().map(|k| error_object(*k)).collect();
            errors.sort_by_key(|e| std::cmp::Reverse(e["code"].as_i64().unwrap_or(0)));
            json!({
                "name": m.name,
                "summary": m.summary,
                "paramStructure": "by-name",
                "params": m.params,
                "result": descriptor(m.result_name, m.result),
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
