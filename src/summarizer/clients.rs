//! Picks the provider client for a model's wire protocol.

use std::sync::Arc;

use super::types::{Api, LlmClient, ModelSpec};
use super::{AnthropicMessagesClient, OpenAiCompletionsClient, OpenAiResponsesClient};

/// A client for `model.api`.
pub fn client_for(model: ModelSpec) -> Arc<dyn LlmClient> {
    match model.api {
        Api::OpenAiCompletions => Arc::new(OpenAiCompletionsClient::new(model)),
        Api::AnthropicMessages => Arc::new(AnthropicMessagesClient::new(model)),
        Api::OpenAiResponses => Arc::new(OpenAiResponsesClient::new(model)),
    }
}

