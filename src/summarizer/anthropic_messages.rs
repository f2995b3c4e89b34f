//! Anthropic Messages streaming client (pi-ai's `anthropic-messages` protocol).
//!
//! Claude models reach the summarizer through this protocol. The details that matter for
//! compatibility with Pi are the extended-thinking budget arithmetic (it changes `max_tokens`),
//! the beta header the SDK adds when thinking is on, and usage accounting including
//! `cacheWrite1h`, all of which the conformance cases recorded.

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::transport::{self, count, CallFailure};
use super::types::{
    clamp_max_tokens, AssistantReply, BlockKind, LlmRequest, ModelSpec, StopReason, Usage,
};

/// The API version pi-ai's SDK pins.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// Beta the SDK requests whenever budget-based thinking is on.
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";
/// pi-ai keeps at least this many tokens for the answer when thinking shares `max_tokens`.
const MIN_ANSWER_TOKENS: u64 = 1024;

/// pi-ai's default thinking budget for a level (`xhigh`/`max` count as `high`); `None` for
/// levels that do not enable thinking.
pub fn thinking_budget(level: &str) -> Option<u64> {
    match level {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" | "xhigh" | "max" => Some(16384),
        _ => None,
    }
}

/// `max_tokens` and the thinking budget (if thinking is on) for a request, following pi-ai's
/// `adjustMaxTokensForThinking` and the context clamp around it: the budget is added on top of
/// the caller's cap, the sum is capped by the model and the context, and the budget is then
/// squeezed so at least 1024 answer tokens remain.
pub fn anthropic_max_tokens(model: &ModelSpec, request: &LlmRequest) -> (u64, Option<u64>) {
    let base = clamp_max_tokens(model, request, request.max_tokens);
    let Some(mut budget) = request.reasoning.as_deref().and_then(thinking_budget) else {
        return (base, None);
    };
    let model_cap = if model.max_tokens == 0 {
        u64::MAX
    } else {
        model.max_tokens
    };
    let adjusted = base.saturating_add(budget).min(model_cap);
    if adjusted <= budget {
        budget = budget.min(adjusted.saturating_sub(MIN_ANSWER_TOKENS));
    }
    let max_tokens = clamp_max_tokens(model, request, adjusted);
    let budget = budget.min(max_tokens.saturating_sub(MIN_ANSWER_TOKENS));
    (max_tokens, Some(budget))
}

transport::provider_client!(
    /// Client for `POST {base_url}/v1/messages?beta=true` with streaming.
    AnthropicMessagesClient
);

impl AnthropicMessagesClient {
    /// The JSON body pi-ai's SDK puts on the wire (keys in that order).
    pub fn build_body(&self, request: &LlmRequest) -> Value {
        let (max_tokens, budget) = anthropic_max_tokens(&self.model, request);
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model.id));
        body.insert(
            "messages".into(),
            json!([{"role": "user", "content": [{"type": "text", "text": request.prompt_text}]}]),
        );
        body.insert("max_tokens".into(), json!(max_tokens));
        body.insert("stream".into(), json!(true));
        if !request.system_prompt.is_empty() {
            body.insert(
                "system".into(),
                json!([{"type": "text", "text": request.system_prompt}]),
            );
        }
        if self.model.reasoning {
            let thinking = match budget {
                Some(b) => json!({
                    "type": "enabled",
                    // pi-ai writes `budget || 1024`.
                    "budget_tokens": if b == 0 { MIN_ANSWER_TOKENS } else { b },
                    "display": "summarized",
                }),
                None => json!({"type": "disabled"}),
            };
            body.insert("thinking".into(), thinking);
        }
        Value::Object(body)
    }

    /// Beta features for the `anthropic-beta` header; a configured header wins, as in pi-ai.
    fn betas(&self, request: &LlmRequest) -> Option<String> {
        if let Some((_, v)) = self
            .model
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("anthropic-beta"))
        {
            return Some(v.clone()).filter(|v| !v.trim().is_empty());
        }
        let thinking = request
            .reasoning
            .as_deref()
            .and_then(thinking_budget)
            .is_some();
        (self.model.reasoning && thinking).then(|| INTERLEAVED_THINKING_BETA.to_string())
    }
}

#[derive(Default)]
struct StreamState {
    /// Blocks in arrival order with the stream index they were announced under.
    blocks: Vec<(Option<u64>, BlockKind, String)>,
    usage: Usage,
    stop: Option<StopReason>,
    error_message: Option<String>,
    saw_start: bool,
    saw_stop: bool,
}

impl StreamState {
    fn block_mut(&mut self, index: Option<u64>, kind: BlockKind) -> Option<&mut String> {
        self.blocks
            .iter_mut()
            .find(|(i, k, _)| *i == index && *k == kind)
            .map(|(_, _, s)| s)
    }

    fn recompute_total(&mut self) {
        let u = &mut self.usage;
        u.total_tokens = u.input + u.output + u.cache_read + u.cache_write;
    }

    fn apply(&mut self, ev: &Value) -> Result<(), CallFailure> {
        let index = ev.get("index").and_then(Value::as_u64);
        match ev.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                self.saw_start = true;
                let u = ev.get("message").and_then(|m| m.get("usage"));
                let field = |name: &str| count(u.and_then(|u| u.get(name)));
                self.usage.input = field("input_tokens");
                self.usage.output = field("output_tokens");
                self.usage.cache_read = field("cache_read_input_tokens");
                self.usage.cache_write = field("cache_creation_input_tokens");
                self.usage.cache_write_1h = Some(count(
                    u.and_then(|u| u.get("cache_creation"))
                        .and_then(|c| c.get("ephemeral_1h_input_tokens")),
                ));
                self.recompute_total();
            }
            "content_block_start" => {
                let block = ev.get("content_block");
                let kind = block.and_then(|b| b.get("type")).and_then(Value::as_str);
                let initial = |key: &str| {
                    block
                        .and_then(|b| b.get(key))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                match kind {
                    Some("fallback") if !self.blocks.is_empty() => {
                        return Err(CallFailure::error(
                            "Anthropic performed an unsupported mid-output model fallback",
                        ));
                    }
                    Some("text") => self.blocks.push((index, BlockKind::Text, initial("text"))),
                    Some("thinking") => {
                        self.blocks
                            .push((index, BlockKind::Thinking, initial("thinking")))
                    }
                    Some("redacted_thinking") => self.blocks.push((
                        index,
                        BlockKind::Thinking,
                        "[Reasoning redacted]".to_string(),
                    )),
                    Some("tool_use") => {
                        self.blocks
                            .push((index, BlockKind::ToolCall, String::new()))
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = ev.get("delta");
                let text = |key: &str| delta.and_then(|d| d.get(key)).and_then(Value::as_str);
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let (Some(t), Some(b)) =
                            (text("text"), self.block_mut(index, BlockKind::Text))
                        {
                            b.push_str(t);
                        }
                    }
                    Some("thinking_delta") => {
                        if let (Some(t), Some(b)) =
                            (text("thinking"), self.block_mut(index, BlockKind::Thinking))
                        {
                            b.push_str(t);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                let delta = ev.get("delta");
                if let Some(reason) = delta
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                    .filter(|r| !r.is_empty())
                {
                    let explanation = delta
                        .and_then(|d| d.get("stop_details"))
                        .and_then(|d| d.get("explanation"))
                        .and_then(Value::as_str);
                    let (stop, message) =
                        map_stop_reason(reason, explanation).map_err(CallFailure::error)?;
                    self.stop = Some(stop);
                    if message.is_some() {
                        self.error_message = message;
                    }
                }
                if let Some(u) = ev.get("usage").filter(|u| u.is_object()) {
                    let present = |name: &str| u.get(name).filter(|v| !v.is_null());
                    if let Some(v) = present("input_tokens") {
                        self.usage.input = count(Some(v));
                    }
                    if let Some(v) = present("output_tokens") {
                        self.usage.output = count(Some(v));
                    }
                    if let Some(v) = present("cache_read_input_tokens") {
                        self.usage.cache_read = count(Some(v));
                    }
                    if let Some(v) = present("cache_creation_input_tokens") {
                        self.usage.cache_write = count(Some(v));
                    }
                    if let Some(v) = u
                        .get("output_tokens_details")
                        .and_then(|d| d.get("thinking_tokens"))
                        .filter(|v| !v.is_null())
                    {
                        self.usage.reasoning = Some(count(Some(v)));
                    }
                }
                self.recompute_total();
            }
            "message_stop" => self.saw_stop = true,
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<AssistantReply, CallFailure> {
        if self.saw_start && !self.saw_stop {
            return Err(CallFailure::error(
                "Anthropic stream ended before message_stop",
            ));
        }
        transport::completed_reply(
            self.stop,
            "Anthropic stream ended without a stop reason",
            self.error_message,
            self.usage,
            self.blocks.into_iter().map(|(_, kind, text)| (kind, text)),
        )
    }
}

/// pi-ai's Anthropic `mapStopReason`; an unknown reason is an error (`Err` with its message).
pub fn map_stop_reason(
    reason: &str,
    explanation: Option<&str>,
) -> Result<(StopReason, Option<String>), String> {
    Ok(match reason {
        "end_turn" | "pause_turn" | "stop_sequence" => (StopReason::Stop, None),
        "max_tokens" => (StopReason::Length, None),
        "tool_use" => (StopReason::ToolUse, None),
        "refusal" => (
            StopReason::Error,
            Some(
                explanation
                    .filter(|e| !e.is_empty())
                    .unwrap_or("The model refused to complete the request")
                    .to_string(),
            ),
        ),
        "sensitive" => (
            StopReason::Error,
            Some("Provider stopped with: sensitive".to_string()),
        ),
        other => {
            return Err(format!("Unhandled stop reason: {other}"));
        }
    })
}

impl transport::StreamingProvider for AnthropicMessagesClient {
    async fn stream(
        &self,
        request: &LlmRequest,
        cancel: &CancellationToken,
    ) -> Result<AssistantReply, CallFailure> {
        let body = self.build_body(request);
        let url = transport::join_url(&self.model.base_url, "/v1/messages?beta=true");
        let mut builder = self.http.post(url);
        if let Some(key) = self.model.api_key.as_deref().filter(|k| !k.is_empty()) {
            builder = builder.header("x-api-key", key);
        }
        builder = builder.header("anthropic-version", ANTHROPIC_VERSION);
        if let Some(betas) = self.betas(request) {
            builder = builder.header("anthropic-beta", betas);
        }
        builder = builder
            .header("content-type", "application/json")
            .header("accept", "application/json");
        for (name, value) in &self.model.headers {
            if !name.eq_ignore_ascii_case("anthropic-beta") {
                builder = builder.header(name.as_str(), value.as_str());
            }
        }
        let builder = builder.body(crate::json::stringify(&body));
        let mut events = transport::open_sse(builder, cancel, self.idle_timeout).await?;

        let mut state = StreamState::default();
        while let Some(event) =
            transport::next_event(&mut events, cancel, self.idle_timeout).await?
        {
            match event.event.as_str() {
                // pi-ai surfaces the raw event data as the error text.
                "error" => return Err(CallFailure::error(event.data)),
                "message_start"
                | "message_delta"
                | "message_stop"
                | "content_block_start"
                | "content_block_delta"
                | "content_block_stop" => {}
                _ => continue,
            }
            let what = format!(
                "Anthropic SSE event {}",
                transport::excerpt(&event.event, 100)
            );
            state.apply(&transport::parse_event(&event.data, &what)?)?;
        }
        state.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarizer::types::Api;

    fn model(max_tokens: u64, context_window: u64) -> ModelSpec {
        ModelSpec {
            api: Api::AnthropicMessages,
            provider: "anthropic".into(),
            id: "claude".into(),
            base_url: "http://x".into(),
            context_window,
            max_tokens,
            reasoning: true,
            api_key: None,
            key_env: None,
            headers: vec![],
        }
    }

    fn req(max_tokens: u64, reasoning: Option<&str>) -> LlmRequest {
        LlmRequest {
            system_prompt: "s".into(),
            prompt_text: "p".into(),
            max_tokens,
            reasoning: reasoning.map(str::to_string),
            session_id: None,
            timestamp_ms: 0,
            pi_version: crate::pi_version::PiVersion::V0_85,
        }
    }

    #[test]
    fn thinking_budget_arithmetic() {
        // Recorded in the conformance cases: base + budget.
        assert_eq!(
            anthropic_max_tokens(&model(64_000, 200_000), &req(16_000, Some("high"))),
            (32_384, Some(16_384))
        );
        assert_eq!(
            anthropic_max_tokens(&model(64_000, 200_000), &req(13_107, Some("xhigh"))),
            (29_491, Some(16_384))
        );
        // Capped by the model: 8000 total, budget keeps 1024 for the answer only if needed.
        assert_eq!(
            anthropic_max_tokens(&model(8_000, 200_000), &req(4_000, Some("high"))),
            (8_000, Some(6_976))
        );
        assert_eq!(
            anthropic_max_tokens(&model(20_000, 200_000), &req(4_000, Some("medium"))),
            (12_192, Some(8_192))
        );
        // Tiny context: clamp to the window, squeeze the budget.
        let m = model(64_000, 6_000);
        let (max, budget) = anthropic_max_tokens(&m, &req(16_000, Some("low")));
        assert_eq!(max, 6_000 - 1 - 1 - 4096);
        assert_eq!(budget, Some(max - 1024));
        // No reasoning.
        assert_eq!(
            anthropic_max_tokens(&model(64_000, 200_000), &req(13_107, None)),
            (13_107, None)
        );
    }

    #[test]
    fn zero_budget_becomes_1024_in_body() {
        let c = AnthropicMessagesClient::new(model(1_000, 200_000));
        let b = c.build_body(&req(500, Some("high")));
        assert_eq!(b["max_tokens"], 1_000);
        assert_eq!(b["thinking"]["budget_tokens"], 1024);
    }

    #[test]
    fn stop_reasons() {
        assert_eq!(
            map_stop_reason("end_turn", None).unwrap().0,
            StopReason::Stop
        );
        assert_eq!(
            map_stop_reason("max_tokens", None).unwrap().0,
            StopReason::Length
        );
        assert_eq!(
            map_stop_reason("tool_use", None).unwrap().0,
            StopReason::ToolUse
        );
        assert_eq!(
            map_stop_reason("refusal", None).unwrap(),
            (
                StopReason::Error,
                Some("The model refused to complete the request".into())
            )
        );
        assert!(map_stop_reason("weird", None).is_err());
    }
}
