//! Picks the provider client for a model's wire protocol.

use std::sync::Arc;

use super::types::{Api, AssistantReply, BoxFuture, LlmClient, LlmRequest, ModelSpec};
use super::OpenAiCompletionsClient;
use tokio_util::sync::CancellationToken;

/// A client for `model.api`.
pub fn client_for(model: ModelSpec) -> Arc<dyn LlmClient> {
    match model.api {
        Api::OpenAiCompletions => Arc::new(OpenAiCompletionsClient::new(model)),
        other => Arc::new(Unsupported(other)),
    }
}

/// A protocol this build has no client for: every call fails with a clear error.
struct Unsupported(Api);

impl LlmClient for Unsupported {
    fn complete<'a>(&'a self, _request: &'a LlmRequest, _cancel: &'a CancellationToken) -> BoxFuture<'a, AssistantReply> {
        let msg = format!("provider protocol {} is not supported by this build", self.0.as_str());
        Box::pin(async move { AssistantReply::error(msg, None) })
    }
}
