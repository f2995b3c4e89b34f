//! OpenAI chat-completions streaming client (pi-ai's `openai-completions` protocol).
//!
//! This is the protocol most OpenAI-compatible servers speak and the one the conformance cases
//! were recorded against, so the request body must be byte-for-byte what pi-ai sends for a
//! summarization call (key order included), and usage / stop reasons must be read the way
//! pi-ai reads them.

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::transport::{self, count, CallFailure};
use super::types::{clamp_max_tokens, AssistantReply, LlmRequest, ModelSpec, StopReason, Usage};

/// How a particular OpenAI-compatible server wants reasoning expressed. pi-ai detects this from
/// the provider name and base URL; we follow the same detection for the common servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkingFormat {
    /// `reasoning_effort: "<level>"`.
    OpenAi,
    /// OpenRouter's `reasoning: {effort}`.
    OpenRouter,
    /// DeepSeek's `thinking: {type}` plus `reasoning_effort`.
    DeepSeek,
    /// z.ai's `thinking: {type, clear_thinking}`.
    Zai,
    /// Together's `reasoning: {enabled}`.
    Together,
}

/// Server quirks that change the request body (a subset of pi-ai's `detectCompat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compat {
    pub supports_store: bool,
    pub supports_developer_role: bool,
    pub supports_reasoning_effort: bool,
    /// `true` → `max_tokens`, `false` → `max_completion_tokens`.
    pub use_max_tokens_field: bool,
    pub thinking_format: ThinkingFormat,
}

impl Compat {
    /// Detects quirks from the provider name and base URL, as pi-ai does.
    pub fn detect(model: &ModelSpec) -> Compat {
        let p = model.provider.as_str();
        let url = model.base_url.as_str();
        let is_zai = matches!(p, "zai" | "zai-coding-cn")
            || url.contains("api.z.ai")
            || url.contains("open.bigmodel.cn");
        let is_together =
            p == "together" || url.contains("api.together.ai") || url.contains("api.together.xyz");
        let is_moonshot =
            matches!(p, "moonshotai" | "moonshotai-cn") || url.contains("api.moonshot.");
        let is_openrouter = p == "openrouter" || url.contains("openrouter.ai");
        let is_cf_workers = p == "cloudflare-workers-ai" || url.contains("api.cloudflare.com");
        let is_cf_gateway =
            p == "cloudflare-ai-gateway" || url.contains("gateway.ai.cloudflare.com");
        let is_nvidia = p == "nvidia" || url.contains("integrate.api.nvidia.com");
        let is_ant_ling = p == "ant-ling" || url.contains("api.ant-ling.com");
        let is_deepseek = p == "deepseek" || url.to_ascii_lowercase().contains("deepseek.com");
        let is_grok = p == "xai" || url.contains("api.x.ai");
        let is_chutes = url.contains("chutes.ai");
        let non_standard = is_nvidia
            || p == "cerebras"
            || url.contains("cerebras.ai")
            || is_grok
            || is_together
            || is_chutes
            || is_deepseek
            || is_zai
            || is_moonshot
            || p == "opencode"
            || url.contains("opencode.ai")
            || is_cf_workers
            || is_cf_gateway
            || is_ant_ling;
        let dev_role_openrouter = is_openrouter
            && (model.id.starts_with("anthropic/") || model.id.starts_with("openai/"));
        Compat {
            supports_store: !non_standard,
            supports_developer_role: dev_role_openrouter || (!non_standard && !is_openrouter),
            supports_reasoning_effort: !is_grok
                && !is_zai
                && !is_moonshot
                && !is_together
                && !is_cf_gateway
                && !is_nvidia
                && !is_ant_ling,
            use_max_tokens_field: is_chutes
                || is_deepseek
                || is_moonshot
                || is_cf_gateway
                || is_together
                || is_nvidia
                || is_ant_ling
                || is_zai,
            thinking_format: if is_deepseek {
                ThinkingFormat::DeepSeek
            } else if is_zai {
                ThinkingFormat::Zai
            } else if is_together {
                ThinkingFormat::Together
            } else if is_openrouter {
                ThinkingFormat::OpenRouter
            } else {
                ThinkingFormat::OpenAi
            },
        }
    }
}

/// pi-ai's `clampThinkingLevel` for a model without a custom level map: a reasoning model
/// supports `minimal`..`high`, so `xhigh`/`max` fall back to `high`; `off`, unknown levels and
/// non-reasoning models mean no reasoning at all.
pub fn effective_reasoning_level(model: &ModelSpec, level: Option<&str>) -> Option<&'static str> {
    if !model.reasoning {
        return None;
    }
    match level? {
        "minimal" => Some("minimal"),
        "low" => Some("low"),
        "medium" => Some("medium"),
        "high" | "xhigh" | "max" => Some("high"),
        _ => None,
    }
}

transport::provider_client!(
    /// Client for `POST {base_url}/chat/completions` with streaming.
    OpenAiCompletionsClient
);

impl OpenAiCompletionsClient {
    /// The JSON body pi-ai sends for this request (keys in pi-ai's order).
    pub fn build_body(&self, request: &LlmRequest) -> Value {
        let model = &self.model;
        let compat = Compat::detect(model);
        let effort = effective_reasoning_level(model, request.reasoning.as_deref());
        let system_role = if model.reasoning && compat.supports_developer_role {
            "developer"
        } else {
            "system"
        };
        let mut body = Map::new();
        body.insert("model".into(), json!(model.id));
        body.insert(
            "messages".into(),
            json!([
                {"role": system_role, "content": request.system_prompt},
                {"role": "user", "content": [{"type": "text", "text": request.prompt_text}]},
            ]),
        );
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        if compat.supports_store {
            body.insert("store".into(), json!(false));
        }
        let max_tokens = clamp_max_tokens(model, request, request.max_tokens);
        // pi-ai skips the field when the value is falsy (0).
        if max_tokens > 0 {
            let field = if compat.use_max_tokens_field {
                "max_tokens"
            } else {
                "max_completion_tokens"
            };
            body.insert(field.into(), json!(max_tokens));
        }
        if model.reasoning {
            match compat.thinking_format {
                ThinkingFormat::Zai => {
                    body.insert(
                        "thinking".into(),
                        match effort {
                            Some(_) => json!({"type": "enabled", "clear_thinking": false}),
                            None => json!({"type": "disabled"}),
                        },
                    );
                    if let (Some(e), true) = (effort, compat.supports_reasoning_effort) {
                        body.insert("reasoning_effort".into(), json!(e));
                    }
                }
                ThinkingFormat::DeepSeek => {
                    body.insert(
                        "thinking".into(),
                        json!({"type": if effort.is_some() { "enabled" } else { "disabled" }}),
                    );
                    if let (Some(e), true) = (effort, compat.supports_reasoning_effort) {
                        body.insert("reasoning_effort".into(), json!(e));
                    }
                }
                ThinkingFormat::OpenRouter => {
                    body.insert(
                        "reasoning".into(),
                        json!({"effort": effort.unwrap_or("none")}),
                    );
                }
                ThinkingFormat::Together => {
                    body.insert("reasoning".into(), json!({"enabled": effort.is_some()}));
                    if let (Some(e), true) = (effort, compat.supports_reasoning_effort) {
                        body.insert("reasoning_effort".into(), json!(e));
                    }
                }
                ThinkingFormat::OpenAi => {
                    if let (Some(e), true) = (effort, compat.supports_reasoning_effort) {
                        body.insert("reasoning_effort".into(), json!(e));
                    }
                }
            }
        }
        Value::Object(body)
    }
}

/// What has been read from the stream so far.
#[derive(Default)]
struct StreamState {
    text: Option<String>,
    thinking: Option<String>,
    has_tool_call: bool,
    usage: Usage,
    stop: Option<(StopReason, Option<String>)>,
}

impl StreamState {
    fn apply(&mut self, chunk: &Value) -> Result<(), CallFailure> {
        // OpenAI-compatible servers report mid-stream failures as a chunk with an `error` object.
        if let Some(err) = chunk.get("error").filter(|e| crate::json::truthy(Some(e))) {
            let message = match err.get("message") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => crate::json::stringify(err),
            };
            return Err(CallFailure::error(message));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = parse_chunk_usage(usage);
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        // Some servers (Moonshot) put usage on the choice instead.
        if !matches!(chunk.get("usage"), Some(u) if !u.is_null()) {
            if let Some(usage) = choice.get("usage").filter(|u| u.is_object()) {
                self.usage = parse_chunk_usage(usage);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            if !reason.is_empty() {
                self.stop = Some(map_finish_reason(reason));
            }
        }
        if let Some(delta) = choice.get("delta") {
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                if !text.is_empty() {
                    self.text.get_or_insert_with(String::new).push_str(text);
                }
            }
            for field in ["reasoning_content", "reasoning", "reasoning_text"] {
                if let Some(t) = delta.get(field).and_then(Value::as_str) {
                    if !t.is_empty() {
                        self.thinking.get_or_insert_with(String::new).push_str(t);
                        break;
                    }
                }
            }
            if delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
            {
                self.has_tool_call = true;
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<AssistantReply, CallFailure> {
        let Some((stop_reason, error_message)) = self.stop else {
            return Err(CallFailure::error("Stream ended without finish_reason"));
        };
        if stop_reason == StopReason::Error {
            return Err(CallFailure::error(error_message.unwrap_or_else(|| {
                "Provider returned an error stop reason".to_string()
            })));
        }
        Ok(AssistantReply {
            text_blocks: self.text.into_iter().collect(),
            thinking: self.thinking.into_iter().collect(),
            has_tool_call: self.has_tool_call,
            usage: self.usage,
            stop_reason,
            error_message: None,
            http_status: None,
            retry_after_ms: None,
        })
    }
}

/// pi-ai's `parseChunkUsage`: cached and cache-write tokens are taken out of `input`, reasoning
/// tokens are reported (0 when absent) but stay inside `output`, and the total is the sum.
/// Cost stays zero: compactd has no price table.
pub fn parse_chunk_usage(raw: &Value) -> Usage {
    let prompt = count(raw.get("prompt_tokens"));
    let details = raw.get("prompt_tokens_details");
    // `??` chain: the first of these that is present (not null/undefined) wins.
    let cache_read = [
        details.and_then(|d| d.get("cached_tokens")),
        raw.get("prompt_cache_hit_tokens"),
        raw.get("cached_tokens"),
    ]
    .into_iter()
    .flatten()
    .find(|v| !v.is_null())
    .map(|v| count(Some(v)))
    .unwrap_or(0);
    let cache_write = count(details.and_then(|d| d.get("cache_write_tokens")));
    let input = prompt
        .saturating_sub(cache_read)
        .saturating_sub(cache_write);
    let output = count(raw.get("completion_tokens"));
    let reasoning = count(
        raw.get("completion_tokens_details")
            .and_then(|d| d.get("reasoning_tokens")),
    );
    Usage {
        input,
        output,
        cache_read,
        cache_write,
        cache_write_1h: None,
        reasoning: Some(reasoning),
        total_tokens: input + output + cache_read + cache_write,
        cost: Default::default(),
    }
}

/// pi-ai's `mapStopReason` for chat completions.
pub fn map_finish_reason(reason: &str) -> (StopReason, Option<String>) {
    match reason {
        "stop" | "end" => (StopReason::Stop, None),
        "length" => (StopReason::Length, None),
        "function_call" | "tool_calls" => (StopReason::ToolUse, None),
        other => (
            StopReason::Error,
            Some(format!("Provider finish_reason: {other}")),
        ),
    }
}

impl transport::StreamingProvider for OpenAiCompletionsClient {
    async fn stream(
        &self,
        request: &LlmRequest,
        cancel: &CancellationToken,
    ) -> Result<AssistantReply, CallFailure> {
        let body = self.build_body(request);
        let builder =
            transport::openai_style_post(&self.http, &self.model, "/chat/completions", &body);
        let mut events = transport::open_sse(builder, cancel, self.idle_timeout).await?;

        let mut state = StreamState::default();
        while let Some(event) =
            transport::next_event(&mut events, cancel, self.idle_timeout).await?
        {
            if event.event == "error" {
                return Err(CallFailure::error(event.data));
            }
            if let Some(chunk) = transport::event_json(&event.data, "stream chunk")? {
                state.apply(&chunk)?;
            }
        }
        state.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarizer::types::Api;

    fn model(provider: &str, base: &str, reasoning: bool) -> ModelSpec {
        ModelSpec {
            api: Api::OpenAiCompletions,
            provider: provider.into(),
            id: "m".into(),
            base_url: base.into(),
            context_window: 200_000,
            max_tokens: 32_000,
            reasoning,
            api_key: None,
            key_env: None,
            headers: vec![],
        }
    }

    fn request(reasoning: Option<&str>) -> LlmRequest {
        LlmRequest {
            system_prompt: "sys".into(),
            prompt_text: "hello".into(),
            max_tokens: 1000,
            reasoning: reasoning.map(str::to_string),
            session_id: None,
            timestamp_ms: 0,
            pi_version: crate::pi_version::PiVersion::V0_85,
        }
    }

    #[test]
    fn usage_subtracts_cache_and_defaults_reasoning_to_zero() {
        let u = parse_chunk_usage(&json!({
            "prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 30}
        }));
        assert_eq!(u.input, 70);
        assert_eq!(u.cache_read, 30);
        assert_eq!(u.output, 20);
        assert_eq!(u.reasoning, Some(0));
        assert_eq!(u.total_tokens, 120);
        let u = parse_chunk_usage(&json!({
            "prompt_tokens": 10, "completion_tokens": 5, "prompt_cache_hit_tokens": 4,
            "completion_tokens_details": {"reasoning_tokens": 3}
        }));
        assert_eq!((u.input, u.cache_read, u.reasoning), (6, 4, Some(3)));
    }

    #[test]
    fn finish_reasons_map_like_pi() {
        assert_eq!(map_finish_reason("stop").0, StopReason::Stop);
        assert_eq!(map_finish_reason("end").0, StopReason::Stop);
        assert_eq!(map_finish_reason("length").0, StopReason::Length);
        assert_eq!(map_finish_reason("tool_calls").0, StopReason::ToolUse);
        assert_eq!(map_finish_reason("function_call").0, StopReason::ToolUse);
        assert_eq!(
            map_finish_reason("content_filter"),
            (
                StopReason::Error,
                Some("Provider finish_reason: content_filter".into())
            )
        );
    }

    #[test]
    fn reasoning_body_variants() {
        let c = OpenAiCompletionsClient::new(model("openai", "https://api.openai.com/v1", true));
        let b = c.build_body(&request(Some("xhigh")));
        assert_eq!(b["messages"][0]["role"], "developer");
        assert_eq!(b["reasoning_effort"], "high");
        let b = c.build_body(&request(None));
        assert!(b.get("reasoning_effort").is_none());

        let c = OpenAiCompletionsClient::new(model("deepseek", "https://api.deepseek.com", true));
        let b = c.build_body(&request(Some("low")));
        assert_eq!(b["messages"][0]["role"], "system");
        assert!(b.get("store").is_none());
        assert_eq!(b["max_tokens"], 1000);
        assert_eq!(b["thinking"], json!({"type": "enabled"}));
        assert_eq!(b["reasoning_effort"], "low");

        let c = OpenAiCompletionsClient::new(model("fake", "http://x/v1", false));
        let b = c.build_body(&request(Some("high")));
        let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "model",
                "messages",
                "stream",
                "stream_options",
                "store",
                "max_completion_tokens"
            ]
        );
    }
}
