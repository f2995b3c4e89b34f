//! OpenAI Responses API streaming client (pi-ai's `openai-responses` protocol).
//!
//! OpenAI's newer models (and Pi users who configure them) use `/responses` rather than chat
//! completions. The request shape, the terminal events (`response.completed`,
//! `response.incomplete`, `response.failed`) and the error wording differ enough from chat
//! completions to need their own client; the wording matters because the retry and overflow
//! classifiers match on it.

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::openai_completions::effective_reasoning_level;
use super::transport::{self, count, CallFailure};
use super::types::{clamp_max_tokens, AssistantReply, BlockKind, LlmRequest, StopReason, Usage};

/// The Responses API rejects `max_output_tokens` below 16, so pi-ai raises smaller caps.
const MIN_OUTPUT_TOKENS: u64 = 16;

transport::provider_client!(
    /// Client for `POST {base_url}/responses` with streaming.
    OpenAiResponsesClient
);

impl OpenAiResponsesClient {
    /// The JSON body pi-ai sends (keys in pi-ai's order; caching is off for summarization, so
    /// no `prompt_cache_key`).
    pub fn build_body(&self, request: &LlmRequest) -> Value {
        let model = &self.model;
        let effort = effective_reasoning_level(model, request.reasoning.as_deref());
        let mut input = Vec::new();
        if !request.system_prompt.is_empty() {
            let role = if model.reasoning {
                "developer"
            } else {
                "system"
            };
            input.push(json!({"role": role, "content": request.system_prompt}));
        }
        input.push(json!({
            "role": "user",
            "content": [{"type": "input_text", "text": request.prompt_text}],
        }));
        let mut body = Map::new();
        body.insert("model".into(), json!(model.id));
        body.insert("input".into(), Value::Array(input));
        body.insert("stream".into(), json!(true));
        body.insert("store".into(), json!(false));
        let max_tokens = clamp_max_tokens(model, request, request.max_tokens);
        if max_tokens > 0 {
            body.insert(
                "max_output_tokens".into(),
                json!(max_tokens.max(MIN_OUTPUT_TOKENS)),
            );
        }
        if model.reasoning {
            match effort {
                Some(e) => {
                    body.insert("reasoning".into(), json!({"effort": e, "summary": "auto"}));
                    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
                }
                None if model.provider != "github-copilot" => {
                    body.insert("reasoning".into(), json!({"effort": "none"}));
                }
                None => {}
            }
            if model.provider == "xai" {
                body.insert("include".into(), json!(["reasoning.encrypted_content"]));
            }
        }
        Value::Object(body)
    }
}

#[derive(Default)]
struct StreamState {
    /// Output items in arrival order: (output_index, kind, accumulated text).
    blocks: Vec<(u64, BlockKind, String)>,
    /// Items still streaming (`output_index` → position in `blocks`).
    open: Vec<(u64, usize)>,
    usage: Usage,
    stop: Option<StopReason>,
    error_message: Option<String>,
    terminal: bool,
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

impl StreamState {
    fn slot(&mut self, output_index: u64, kind: BlockKind) -> Option<&mut String> {
        let pos = self
            .open
            .iter()
            .find(|(i, _)| *i == output_index)
            .map(|(_, p)| *p)?;
        match self.blocks.get_mut(pos) {
            Some((_, k, text)) if *k == kind => Some(text),
            _ => None,
        }
    }

    fn create_slot(&mut self, output_index: u64, item: &Value) {
        let kind = match str_of(item, "type") {
            Some("reasoning") => BlockKind::Thinking,
            Some("message") => BlockKind::Text,
            Some("function_call") | Some("custom_tool_call") => BlockKind::ToolCall,
            _ => return,
        };
        if kind == BlockKind::Text && str_of(item, "phase") == Some("final_answer") {
            self.stop = Some(StopReason::Stop);
        }
        self.blocks.push((output_index, kind, String::new()));
        self.open.retain(|(i, _)| *i != output_index);
        self.open.push((output_index, self.blocks.len() - 1));
    }

    fn apply(&mut self, kind: &str, ev: &Value) -> Result<(), CallFailure> {
        let output_index = ev.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let delta = str_of(ev, "delta").unwrap_or("");
        match kind {
            "response.output_item.added" => {
                if let Some(item) = ev.get("item") {
                    self.create_slot(output_index, item);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(t) = self.slot(output_index, BlockKind::Text) {
                    t.push_str(delta);
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(t) = self.slot(output_index, BlockKind::Thinking) {
                    t.push_str(delta);
                }
            }
            "response.reasoning_summary_part.done" => {
                if let Some(t) = self.slot(output_index, BlockKind::Thinking) {
                    t.push_str("\n\n");
                }
            }
            "response.output_item.done" => {
                let Some(item) = ev.get("item") else {
                    return Ok(());
                };
                if !self.open.iter().any(|(i, _)| *i == output_index) {
                    self.create_slot(output_index, item);
                }
                if str_of(item, "type") == Some("message")
                    && str_of(item, "phase") == Some("final_answer")
                {
                    self.stop = Some(StopReason::Stop);
                }
                match str_of(item, "type") {
                    Some("message") => {
                        let joined: String = item
                            .get("content")
                            .and_then(Value::as_array)
                            .map(|parts| {
                                parts
                                    .iter()
                                    .map(|c| {
                                        let key = if str_of(c, "type") == Some("output_text") {
                                            "text"
                                        } else {
                                            "refusal"
                                        };
                                        str_of(c, key).unwrap_or("")
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        if let Some(t) = self.slot(output_index, BlockKind::Text) {
                            *t = joined;
                        }
                    }
                    Some("reasoning") => {
                        let join = |key: &str, field: &str| -> String {
                            item.get(key)
                                .and_then(Value::as_array)
                                .map(|parts| {
                                    parts
                                        .iter()
                                        .map(|p| str_of(p, field).unwrap_or(""))
                                        .collect::<Vec<_>>()
                                        .join("\n\n")
                                })
                                .unwrap_or_default()
                        };
                        let summary = join("summary", "text");
                        let content = join("content", "text");
                        if let Some(t) = self.slot(output_index, BlockKind::Thinking) {
                            if !summary.is_empty() {
                                *t = summary;
                            } else if !content.is_empty() {
                                *t = content;
                            }
                        }
                    }
                    _ => {}
                }
                self.open.retain(|(i, _)| *i != output_index);
            }
            "response.completed" | "response.incomplete" => {
                self.finalize(ev.get("response").unwrap_or(&Value::Null));
            }
            "error" => {
                let inner = ev.get("error").filter(|e| e.is_object()).unwrap_or(ev);
                let code = inner
                    .get("code")
                    .map(js_display)
                    .unwrap_or("undefined".into());
                let message = inner
                    .get("message")
                    .map(js_display)
                    .unwrap_or("undefined".into());
                return Err(CallFailure::error(format!("Error Code {code}: {message}")));
            }
            "response.failed" => {
                self.terminal = true;
                let response = ev.get("response");
                let error = response
                    .and_then(|r| r.get("error"))
                    .filter(|e| e.is_object());
                let reason = response
                    .and_then(|r| r.get("incomplete_details"))
                    .and_then(|d| str_of(d, "reason"))
                    .filter(|r| !r.is_empty());
                let msg = match (error, reason) {
                    (Some(e), _) => format!(
                        "{}: {}",
                        str_of(e, "code")
                            .filter(|s| !s.is_empty())
                            .unwrap_or("unknown"),
                        str_of(e, "message")
                            .filter(|s| !s.is_empty())
                            .unwrap_or("no message")
                    ),
                    (None, Some(r)) => format!("incomplete: {r}"),
                    (None, None) => "Unknown error (no error details in response)".to_string(),
                };
                return Err(CallFailure::error(msg));
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads usage and the final status from a terminal `response` object.
    fn finalize(&mut self, response: &Value) {
        self.terminal = true;
        if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
            let details = u.get("input_tokens_details");
            let cached = count(details.and_then(|d| d.get("cached_tokens")));
            let cache_write = count(details.and_then(|d| d.get("cache_write_tokens")));
            self.usage = Usage {
                input: count(u.get("input_tokens"))
                    .saturating_sub(cached)
                    .saturating_sub(cache_write),
                output: count(u.get("output_tokens")),
                cache_read: cached,
                cache_write,
                cache_write_1h: None,
                reasoning: Some(count(
                    u.get("output_tokens_details")
                        .and_then(|d| d.get("reasoning_tokens")),
                )),
                total_tokens: count(u.get("total_tokens")),
                cost: Default::default(),
            };
        }
        let reason = response
            .get("incomplete_details")
            .and_then(|d| str_of(d, "reason"));
        let (stop, message) = map_status(str_of(response, "status"), reason);
        self.stop = Some(stop);
        self.error_message = message;
        if stop == StopReason::Stop && self.blocks.iter().any(|b| b.1 == BlockKind::ToolCall) {
            self.stop = Some(StopReason::ToolUse);
        }
    }

    fn finish(self) -> Result<AssistantReply, CallFailure> {
        if !self.terminal {
            return Err(CallFailure::error(
                "OpenAI Responses stream ended before a terminal response event",
            ));
        }
        transport::completed_reply(
            self.stop,
            "OpenAI Responses stream ended without a stop reason",
            self.error_message,
            self.usage,
            self.blocks.into_iter().map(|(_, kind, text)| (kind, text)),
        )
    }
}

/// How JavaScript's template literal prints a JSON value (strings bare, others as JSON).
fn js_display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => crate::json::stringify(other),
    }
}

/// pi-ai's Responses `mapStopReason`: `incomplete` is a length stop only for
/// `max_output_tokens`; other incompletes and failures are errors.
pub fn map_status(
    status: Option<&str>,
    incomplete_reason: Option<&str>,
) -> (StopReason, Option<String>) {
    match status {
        None | Some("") | Some("completed") | Some("in_progress") | Some("queued") => {
            (StopReason::Stop, None)
        }
        Some("incomplete") => match incomplete_reason {
            Some("max_output_tokens") => (StopReason::Length, None),
            Some(r) => (StopReason::Error, Some(format!("Response incomplete: {r}"))),
            None => (
                StopReason::Error,
                Some("Response incomplete without a provider reason".to_string()),
            ),
        },
        Some("failed") | Some("cancelled") => (StopReason::Error, None),
        Some(other) => (
            StopReason::Error,
            Some(format!("Unhandled stop reason: {other}")),
        ),
    }
}

impl transport::StreamingProvider for OpenAiResponsesClient {
    /// pi-ai prefixes HTTP failures with "OpenAI API error (<status>): ".
    fn http_error_message(&self, status: u16, message: String) -> String {
        format!("OpenAI API error ({status}): {message}")
    }

    async fn stream(
        &self,
        request: &LlmRequest,
        cancel: &CancellationToken,
    ) -> Result<AssistantReply, CallFailure> {
        let body = self.build_body(request);
        let builder = transport::openai_style_post(&self.http, &self.model, "/responses", &body);
        let mut events = transport::open_sse(builder, cancel, self.idle_timeout).await?;

        let mut state = StreamState::default();
        while let Some(event) =
            transport::next_event(&mut events, cancel, self.idle_timeout).await?
        {
            let Some(value) = transport::event_json(&event.data, "stream event")? else {
                continue;
            };
            let kind = value
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or(event.event.as_str())
                .to_string();
            state.apply(&kind, &value)?;
        }
        state.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarizer::types::{Api, ModelSpec};

    fn model(reasoning: bool) -> ModelSpec {
        ModelSpec {
            api: Api::OpenAiResponses,
            provider: "openai".into(),
            id: "gpt-x".into(),
            base_url: "https://api.openai.com/v1".into(),
            context_window: 200_000,
            max_tokens: 32_000,
            reasoning,
            api_key: None,
            key_env: None,
            headers: vec![],
        }
    }

    fn req(max: u64, reasoning: Option<&str>) -> LlmRequest {
        LlmRequest {
            system_prompt: "sys".into(),
            prompt_text: "p".into(),
            max_tokens: max,
            reasoning: reasoning.map(str::to_string),
            session_id: None,
            timestamp_ms: 0,
            pi_version: crate::pi_version::PiVersion::V0_85,
        }
    }

    #[test]
    fn body_shape() {
        let b = OpenAiResponsesClient::new(model(true)).build_body(&req(8, Some("max")));
        assert_eq!(
            crate::json::stringify(&b),
            r#"{"model":"gpt-x","input":[{"role":"developer","content":"sys"},{"role":"user","content":[{"type":"input_text","text":"p"}]}],"stream":true,"store":false,"max_output_tokens":16,"reasoning":{"effort":"high","summary":"auto"},"include":["reasoning.encrypted_content"]}"#
        );
        let b = OpenAiResponsesClient::new(model(true)).build_body(&req(100, None));
        assert_eq!(b["reasoning"], json!({"effort": "none"}));
        assert!(b.get("include").is_none());
        let b = OpenAiResponsesClient::new(model(false)).build_body(&req(100, Some("high")));
        assert_eq!(b["input"][0]["role"], "system");
        assert!(b.get("reasoning").is_none());
    }

    #[test]
    fn statuses() {
        assert_eq!(map_status(Some("completed"), None).0, StopReason::Stop);
        assert_eq!(
            map_status(Some("incomplete"), Some("max_output_tokens")).0,
            StopReason::Length
        );
        assert_eq!(
            map_status(Some("incomplete"), Some("content_filter")),
            (
                StopReason::Error,
                Some("Response incomplete: content_filter".into())
            )
        );
        assert_eq!(map_status(Some("failed"), None), (StopReason::Error, None));
    }
}
