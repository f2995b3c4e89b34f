//! Projection of a session path to model context (sessions.md §9): which entries are in
//! context after compactions, the AgentMessage each projects to, and `convertToLlm`.
//!
//! The summary wrapper strings are interface: the model sees them, and Pi's own projection of a
//! compactd-written file must read the same, so they are Pi's exact text.

use serde_json::{Map, Value};

use crate::json::truthy;
use crate::session::ids::timestamp_value_ms;
use crate::session::{Entry, EntryKind, PathEntries, Role};

pub const COMPACTION_SUMMARY_PREFIX: &str =
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
pub const COMPACTION_SUMMARY_SUFFIX: &str = "\n</summary>";
pub const BRANCH_SUMMARY_PREFIX: &str =
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
pub const BRANCH_SUMMARY_SUFFIX: &str = "</summary>";

fn ts_value(entry: &Entry) -> Value {
    timestamp_value_ms(entry.get("timestamp")).map_or(Value::Null, Value::from)
}

fn copy_if_present(out: &mut Map<String, Value>, from: &Map<String, Value>, key: &str) {
    if let Some(v) = from.get(key) {
        out.insert(key.to_owned(), v.clone());
    }
}

/// `sessionEntryToContextMessages`: the message an entry contributes to context, if any.
/// Message entries are parsed from their bytes here; metadata entries use their kept object.
pub fn project_entry(entry: &Entry) -> Option<Value> {
    entry.role?;
    match entry.kind {
        EntryKind::Message => {
            let mut m = entry.message()?;
            let role = m.get("role").and_then(Value::as_str);
            let null_content = matches!(m.get("content"), None | Some(Value::Null));
            if null_content && matches!(role, Some("user" | "assistant" | "toolResult")) {
                m.insert("content".into(), Value::Array(Vec::new()));
            }
            Some(Value::Object(m))
        }
        EntryKind::CustomMessage => {
            let obj = entry.obj()?;
            let mut out = Map::new();
            out.insert("role".into(), Value::from("custom"));
            copy_if_present(&mut out, obj, "customType");
            let content = match obj.get("content") {
                None | Some(Value::Null) => Value::Array(Vec::new()),
                Some(c) => c.clone(),
            };
            out.insert("content".into(), content);
            copy_if_present(&mut out, obj, "display");
            copy_if_present(&mut out, obj, "details");
            out.insert("timestamp".into(), ts_value(entry));
            Some(Value::Object(out))
        }
        EntryKind::BranchSummary => {
            let obj = entry.obj()?;
            let mut out = Map::new();
            out.insert("role".into(), Value::from("branchSummary"));
            copy_if_present(&mut out, obj, "summary");
            copy_if_present(&mut out, obj, "fromId");
            out.insert("timestamp".into(), ts_value(entry));
            Some(Value::Object(out))
        }
        EntryKind::Compaction => {
            let obj = entry.obj()?;
            let mut out = Map::new();
            out.insert("role".into(), Value::from("compactionSummary"));
            copy_if_present(&mut out, obj, "summary");
            copy_if_present(&mut out, obj, "tokensBefore");
            out.insert("timestamp".into(), ts_value(entry));
            Some(Value::Object(out))
        }
        _ => None,
    }
}

/// `buildContextEntries` over a root→leaf path: the latest compaction, the kept entries from its
/// `firstKeptEntryId` up to it, then everything after it (sessions.md §9.2).
pub fn context_entries<'a>(path: &[&'a Entry]) -> Vec<&'a Entry> {
    context_positions(path)
        .into_iter()
        .map(|i| path[i])
        .collect()
}

/// [`context_entries`] as positions into `path`.
pub fn context_positions<P: PathEntries + ?Sized>(path: &P) -> Vec<usize> {
    context_positions_keeping(path, |_| true)
}

/// [`context_positions`] with only the entries kept before the newest compaction that pass
/// `kept` (Pi 1.6's `buildContextEntries` leaves system messages out of that range; the
/// rest of the walk is the same under both versions).
pub fn context_positions_keeping<P: PathEntries + ?Sized>(
    path: &P,
    kept: impl Fn(&Entry) -> bool,
) -> Vec<usize> {
    let n = path.path_len();
    let Some(latest) = (0..n)
        .rev()
        .find(|&i| path.at(i).kind == EntryKind::Compaction)
    else {
        return (0..n).collect();
    };
    let compaction = path.at(latest);
    // Pi locates the compaction by id (first match) before slicing.
    let idx = (0..n)
        .find(|&i| path.at(i).id == compaction.id)
        .unwrap_or(latest);
    let first_kept = compaction.str_field("firstKeptEntryId");
    let mut out = Vec::with_capacity(n - idx + 1);
    out.push(latest);
    if let Some(start) = (0..idx).find(|&i| {
        path.at(i)
            .id
            .as_deref()
            .is_some_and(|id| Some(id) == first_kept)
    }) {
        out.extend((start..idx).filter(|&i| kept(path.at(i))));
    }
    out.extend(idx + 1..n);
    out
}

/// `buildSessionContext`: messages plus the thinking level and model of the full path.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionContext {
    pub messages: Vec<Value>,
    pub thinking_level: Value,
    pub model: Value,
}

/// Thinking level and model over the full path, ignoring compaction (sessions.md §9.3). The
/// last setter wins, so this walks back from the leaf and parses at most one message.
pub fn context_settings<P: PathEntries + ?Sized>(path: &P) -> (Value, Value) {
    let n = path.path_len();
    let thinking = (0..n)
        .rev()
        .map(|i| path.at(i))
        .find(|e| e.kind == EntryKind::ThinkingLevelChange)
        .map_or(Value::from("off"), |e| {
            e.get("thinkingLevel").cloned().unwrap_or(Value::Null)
        });
    let setter = (0..n)
        .rev()
        .map(|i| path.at(i))
        .find(|e| e.kind == EntryKind::ModelChange || e.is_message(Role::Assistant));
    // `{provider, modelId}` from the setter's fields, each copied only when present.
    let model_of = |obj: &Map<String, Value>, id_key: &str| {
        let mut m = Map::new();
        for (from, to) in [("provider", "provider"), (id_key, "modelId")] {
            if let Some(v) = obj.get(from) {
                m.insert(to.into(), v.clone());
            }
        }
        Value::Object(m)
    };
    let model = match setter {
        None => Value::Null,
        Some(e) if e.kind == EntryKind::ModelChange => e
            .obj()
            .map_or(Value::Object(Map::new()), |o| model_of(o, "modelId")),
        Some(e) => model_of(&e.message().unwrap_or_default(), "model"),
    };
    (thinking, model)
}

/// `buildSessionContext(path)`.
pub fn build_session_context(path: &[&Entry]) -> SessionContext {
    let (thinking_level, model) = context_settings(path);
    let messages = context_entries(path)
        .into_iter()
        .filter_map(project_entry)
        .collect();
    SessionContext {
        messages,
        thinking_level,
        model,
    }
}

fn js_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => crate::json::stringify(other),
    }
}

/// The user text a `bashExecution` message becomes (sessions.md §9.4).
pub fn bash_execution_text(m: &Map<String, Value>) -> String {
    let command = js_string(m.get("command"));
    let output = js_string(m.get("output"));
    let mut text = format!("Ran `{command}`\n");
    if output.is_empty() {
        text.push_str("(no output)");
    } else {
        text.push_str("```\n");
        text.push_str(&output);
        text.push_str("\n```");
    }
    if truthy(m.get("cancelled")) {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = m.get("exitCode").filter(|c| c.is_number()) {
        if code.as_f64() != Some(0.0) {
            text.push_str("\n\nCommand exited with code ");
            text.push_str(&crate::json::stringify(code));
        }
    }
    if truthy(m.get("truncated")) && truthy(m.get("fullOutputPath")) {
        text.push_str("\n\n[Output truncated. Full output: ");
        text.push_str(&js_string(m.get("fullOutputPath")));
        text.push(']');
    }
    text
}

fn user_text_message(text: String, timestamp: Option<&Value>) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), Value::from("user"));
    out.insert(
        "content".into(),
        serde_json::json!([{ "type": "text", "text": text }]),
    );
    if let Some(t) = timestamp {
        out.insert("timestamp".into(), t.clone());
    }
    Value::Object(out)
}

/// `convertToLlm`: AgentMessages to provider messages (user/assistant/toolResult).
pub fn convert_to_llm(messages: &[Value]) -> Vec<Value> {
    messages.iter().filter_map(convert_message).collect()
}

/// `convertToLlm` under `version`'s rules: Pi 1.6 passes system messages through (the request
/// replays them), 0.85 drops them as unknown.
pub fn convert_to_llm_in(version: crate::pi_version::PiVersion, messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter_map(|m| match m.get("role").and_then(Value::as_str) {
            Some("system") if version.is_1_6() => Some(m.clone()),
            _ => convert_message(m),
        })
        .collect()
}

/// `convertToLlm` of one AgentMessage (`None` for messages the model never sees).
pub fn convert_message(msg: &Value) -> Option<Value> {
    let m = msg.as_object()?;
    let ts = m.get("timestamp");
    match m.get("role").and_then(Value::as_str) {
        Some("user" | "assistant" | "toolResult") => Some(msg.clone()),
        Some("bashExecution") => {
            if truthy(m.get("excludeFromContext")) {
                None
            } else {
                Some(user_text_message(bash_execution_text(m), ts))
            }
        }
        Some("custom") => {
            let content = match m.get("content") {
                Some(Value::String(s)) => serde_json::json!([{ "type": "text", "text": s }]),
                Some(other) => other.clone(),
                None => Value::Null,
            };
            let mut out = Map::new();
            out.insert("role".into(), Value::from("user"));
            if m.contains_key("content") {
                out.insert("content".into(), content);
            }
            if let Some(t) = ts {
                out.insert("timestamp".into(), t.clone());
            }
            Some(Value::Object(out))
        }
        Some("branchSummary") => Some(user_text_message(
            format!(
                "{BRANCH_SUMMARY_PREFIX}{}{BRANCH_SUMMARY_SUFFIX}",
                js_string(m.get("summary"))
            ),
            ts,
        )),
        Some("compactionSummary") => Some(user_text_message(
            format!(
                "{COMPACTION_SUMMARY_PREFIX}{}{COMPACTION_SUMMARY_SUFFIX}",
                js_string(m.get("summary"))
            ),
            ts,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bash_text_matches_the_spec_layout() {
        let m = json!({"role":"bashExecution","command":"ls","output":"","exitCode":2,"cancelled":false,"truncated":true,"fullOutputPath":"/var/log/o"});
        assert_eq!(
            bash_execution_text(m.as_object().unwrap()),
            "Ran `ls`\n(no output)\n\nCommand exited with code 2\n\n[Output truncated. Full output: /var/log/o]"
        );
        let c = json!({"command":"x","output":"out","exitCode":null,"cancelled":true});
        assert_eq!(
            bash_execution_text(c.as_object().unwrap()),
            "Ran `x`\n```\nout\n```\n\n(command cancelled)"
        );
    }

    #[test]
    fn compaction_context_keeps_from_first_kept() {
        let mk = |v: Value| Entry::from_value(v);
        let entries = [
            mk(
                json!({"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"a","timestamp":1}}),
            ),
            mk(
                json!({"type":"message","id":"u2","parentId":"u1","timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"b","timestamp":2}}),
            ),
            mk(
                json!({"type":"compaction","id":"c","parentId":"u2","timestamp":"2026-01-01T00:00:00.000Z","summary":"S","firstKeptEntryId":"u2","tokensBefore":5}),
            ),
            mk(
                json!({"type":"message","id":"u3","parentId":"c","timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"c","timestamp":3}}),
            ),
        ];
        let path: Vec<&Entry> = entries.iter().collect();
        let ids: Vec<_> = context_entries(&path)
            .iter()
            .map(|e| e.id.clone().unwrap())
            .collect();
        assert_eq!(ids, ["c", "u2", "u3"]);
        let ctx = build_session_context(&path);
        assert_eq!(
            ctx.messages[0],
            json!({"role":"compactionSummary","summary":"S","tokensBefore":5,"timestamp":1767225600000i64})
        );
        let llm = convert_to_llm(&ctx.messages);
        assert_eq!(
            llm[0]["content"][0]["text"],
            "The conversation history before this point was compacted into the following summary:\n\n<summary>\nS\n</summary>"
        );
    }
}
