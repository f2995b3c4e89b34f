//! `serializeConversation` (compaction.md §6.1): the transcript text the summarizer reads.
//!
//! Rendering the conversation as labelled text (rather than replaying it as chat turns) keeps the
//! summarizer from continuing the conversation. Tool results are cut at 2000 UTF-16 units with
//! Pi's marker, never inside a surrogate pair; the token estimates elsewhere still use the full
//! length. Pi 1.6 leaves thinking out: providers return summaries of the real reasoning, and a
//! replayed block may not even have been in the model's context, so it only makes the request
//! larger than the context it summarizes.

use serde_json::Value;

use crate::session::PiVersion;

use crate::json::{js_key_order, stringify, utf16_len, utf16_prefix};

/// Longest tool result text kept in the summarizer input.
pub const TOOL_RESULT_MAX_CHARS: usize = 2000;

/// JavaScript's string conversion of a block field as `Array.join` sees it.
fn join_str(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => stringify(&Value::Number(n.clone())),
        Some(Value::Array(_)) | Some(Value::Object(_)) => String::new(),
    }
}

/// pi-ai's `contentText(content, separator)`: a string as is, or the text blocks joined.
pub fn content_text(content: Option<&Value>, separator: &str) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .map(|b| join_str(b.get("text")))
            .collect::<Vec<_>>()
            .join(separator),
        _ => String::new(),
    }
}

fn truncate_for_summary(text: &str) -> String {
    let len = utf16_len(text);
    if len <= TOOL_RESULT_MAX_CHARS {
        return text.to_owned();
    }
    format!(
        "{}\n\n[... {} more characters truncated]",
        utf16_prefix(text, TOOL_RESULT_MAX_CHARS),
        len - TOOL_RESULT_MAX_CHARS
    )
}

/// One tool call as `name(k=<json>, ...)`, keys in JavaScript order.
fn tool_call_text(block: &Value) -> String {
    let name = join_str(block.get("name"));
    let args = match block.get("arguments") {
        Some(Value::Object(map)) => js_key_order(map)
            .into_iter()
            .map(|(k, v)| format!("{k}={}", stringify(v)))
            .collect::<Vec<_>>()
            .join(", "),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{i}={}", stringify(v)))
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    };
    format!("{name}({args})")
}

/// `serializeConversation(messages)` under `version`'s rules over provider messages (output of
/// `convertToLlm`).
pub fn serialize_conversation(version: PiVersion, messages: &[Value]) -> String {
    let mut w = ConversationText::new(version);
    for m in messages {
        w.push_llm(m);
    }
    w.finish()
}

/// `serializeConversation(convertToLlm(messages))` over AgentMessages produced one at a time,
/// so a compaction of a huge span holds one parsed message and the text, never the span.
pub fn serialize_agent_messages(
    version: PiVersion,
    messages: impl IntoIterator<Item = Value>,
) -> String {
    let mut w = ConversationText::new(version);
    for m in messages {
        if let Some(llm) = crate::context::convert_message(&m) {
            w.push_llm(&llm);
        }
    }
    w.finish()
}

/// The transcript being written: parts joined by a blank line.
struct ConversationText {
    out: String,
    any: bool,
    /// Whether assistant thinking is written (Pi 0.85; 1.6 leaves it out).
    thinking: bool,
}

impl ConversationText {
    fn new(version: PiVersion) -> ConversationText {
        ConversationText {
            out: String::new(),
            any: false,
            thinking: !version.is_1_6(),
        }
    }

    fn part(&mut self, label: &str, text: &str) {
        if self.any {
            self.out.push_str("\n\n");
        }
        self.any = true;
        self.out.push_str(label);
        self.out.push_str(text);
    }

    fn push_llm(&mut self, m: &Value) {
        match m.get("role").and_then(Value::as_str) {
            Some("user") => {
                let text = content_text(m.get("content"), "");
                if !text.is_empty() {
                    self.part("[User]: ", &text);
                }
            }
            Some("assistant") => {
                let blocks: &[Value] = match m.get("content") {
                    Some(Value::Array(b)) => b,
                    _ => &[],
                };
                fn of_type<'a>(
                    blocks: &'a [Value],
                    t: &'static str,
                ) -> impl Iterator<Item = &'a Value> {
                    blocks
                        .iter()
                        .filter(move |b| b.get("type").and_then(Value::as_str) == Some(t))
                }
                let thinking: Vec<String> = of_type(blocks, "thinking")
                    .map(|b| join_str(b.get("thinking")))
                    .collect();
                let calls: Vec<String> = of_type(blocks, "toolCall").map(tool_call_text).collect();
                if self.thinking && !thinking.is_empty() {
                    self.part("[Assistant thinking]: ", &thinking.join("\n"));
                }
                if of_type(blocks, "text").next().is_some() {
                    self.part("[Assistant]: ", &content_text(m.get("content"), "\n"));
                }
                if !calls.is_empty() {
                    self.part("[Assistant tool calls]: ", &calls.join("; "));
                }
            }
            Some("toolResult") => {
                let text = content_text(m.get("content"), "");
                if !text.is_empty() {
                    self.part("[Tool result]: ", &truncate_for_summary(&text));
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn verified_example_from_the_spec() {
        let msgs = crate::context::convert_to_llm(&[
            json!({"role":"user","content":[{"type":"text","text":"a"},{"type":"image","data":"","mimeType":"image/png"},{"type":"text","text":"b"}]}),
            json!({"role":"assistant","content":[
                {"type":"toolCall","id":"1","name":"edit","arguments":{"path":"p.ts","oldText":"x\"y\n"}},
                {"type":"text","text":"t1"},
                {"type":"thinking","thinking":""},
                {"type":"text","text":"t2"},
                {"type":"toolCall","id":"2","name":"write","arguments":{}}
            ]}),
            json!({"role":"bashExecution","command":"ls","output":"","exitCode":2,"cancelled":false,"truncated":true,"fullOutputPath":"/var/log/o"}),
        ]);
        assert_eq!(
            serialize_conversation(PiVersion::V0_85, &msgs),
            "[User]: ab\n\n[Assistant thinking]: \n\n[Assistant]: t1\nt2\n\n[Assistant tool calls]: edit(path=\"p.ts\", oldText=\"x\\\"y\\n\"); write()\n\n[User]: Ran `ls`\n(no output)\n\nCommand exited with code 2\n\n[Output truncated. Full output: /var/log/o]"
        );
    }

    #[test]
    fn tool_results_are_truncated_with_the_marker() {
        let long = "é".repeat(2100);
        let out = serialize_conversation(
            PiVersion::V1_6,
            &[json!({"role":"toolResult","content":[{"type":"text","text":long}]})],
        );
        assert!(out.ends_with("\n\n[... 100 more characters truncated]"));
        assert_eq!(
            utf16_len(&out),
            "[Tool result]: ".len() + 2000 + "\n\n[... 100 more characters truncated]".len()
        );
    }
}
