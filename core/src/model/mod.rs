//! Model providers: the wire-neutral request, the streamed events, and the provider port.
//!
//! A [`ModelProvider`] turns a [`ModelRequest`] into a stream of [`ModelEvent`]s. Providers
//! assemble tool-call deltas themselves and emit whole [`ToolCall`]s; they report usage only
//! when the upstream measured it (absent usage stays `None`, never invented) and classify
//! every failure into a [`ProviderError`]. The turn engine owns everything around the call:
//! timeouts, cancellation, the tool loop.
//!
//! Built in: [`openai::OpenAiProvider`] (OpenAI and compatible Chat Completions, and the
//! Responses API through [`openai_responses`]), [`anthropic::AnthropicProvider`] (Messages
//! API), [`google::GoogleProvider`] (the Gemini Developer API), [`azure::AzureOpenAiProvider`]
//! (Azure OpenAI Chat Completions, on the OpenAI body and parser) and
//! [`scripted::ScriptedProvider`] (deterministic, for tests and the keyless demo).
//!
//! Beside the providers: [`catalog`] (what the host says about each provider's models:
//! context window, capability flags, prices) and [`health`] (each provider's cost-free
//! reachability check, cached).

pub mod anthropic;
pub mod azure;
pub mod breaker;
pub mod byok;
pub mod cache;
pub mod catalog;
pub mod error;
#[cfg(target_arch = "wasm32")]
pub(crate) mod fetch;
pub mod google;
pub mod health;
pub mod openai;
pub mod openai_responses;
pub mod registry;
pub mod resilience;
pub mod scripted;
pub(crate) mod sse;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::definition::{ModelBinding, ReasoningEffort, ResponseFormat};
pub use error::{ProviderError, ProviderErrorKind};
pub use registry::ProviderRegistry;

/// A message of the conversation sent to the model. The system prompt travels separately
/// on [`ModelRequest::system`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum Message {
    User {
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Reasoning blocks a provider needs echoed back (Anthropic thinking with tools).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<ReasoningBlock>,
    },
    #[serde(rename_all = "camelCase")]
    Tool {
        call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Self::User { text: text.into() }
    }
}

/// A complete tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model produced them (JSON text, possibly invalid).
    pub arguments: String,
}

/// A reasoning block, kept so it can be sent back to a provider that requires it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningBlock {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// Whether and which tool the model must call (an OpenAI client's `tool_choice`). Each
/// provider says it in its own words; with no tools offered it is not sent.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub enum ToolChoice {
    /// The model decides (what every provider does when nothing is said).
    #[default]
    Auto,
    /// The model answers in text; the tools are offered but not to be called.
    None,
    /// The model calls at least one of the tools.
    Required,
    /// The model calls this tool.
    Function(String),
}

/// One model call, provider-neutral.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    /// Shared with the compiled agent: offering tools copies no schema.
    pub tools: Arc<[ToolSpec]>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    pub reasoning_effort: Option<ReasoningEffort>,
    pub response_format: Option<ResponseFormat>,
    pub provider_settings: BTreeMap<String, serde_json::Value>,
    pub parallel_tool_calls: bool,
    /// Sent only beside tools; [`ToolChoice::Auto`] is left unsaid.
    pub tool_choice: ToolChoice,
    /// The run's caller takes the answer whole (a JSON answer, a non-streamed OpenAI
    /// request): a provider that can asks for it in one piece, usage included, instead of a
    /// stream — one response to read instead of a chunk per token. The events are the same
    /// kinds; the text arrives as one delta.
    pub whole: bool,
}

impl ModelRequest {
    pub fn from_binding(binding: &ModelBinding) -> Self {
        Self {
            model: binding.model.clone(),
            system: None,
            messages: Vec::new(),
            tools: Arc::from(Vec::new()),
            temperature: binding.temperature,
            top_p: binding.top_p,
            max_output_tokens: binding.max_output_tokens,
            reasoning_effort: binding.reasoning_effort,
            response_format: binding.response_format.clone(),
            provider_settings: binding.provider_settings.clone(),
            parallel_tool_calls: binding.allow_concurrent_tool_calls,
            tool_choice: ToolChoice::Auto,
            whole: false,
        }
    }

    /// The same call through a fallback link: its model and settings (the conversation, the
    /// tools and the response format stay).
    pub fn rebound(&self, binding: &ModelBinding) -> Self {
        Self {
            model: binding.model.clone(),
            temperature: binding.temperature,
            top_p: binding.top_p,
            max_output_tokens: binding.max_output_tokens,
            reasoning_effort: binding.reasoning_effort,
            provider_settings: binding.provider_settings.clone(),
            ..self.clone()
        }
    }

    /// A provider setting by case-insensitive key.
    pub fn setting(&self, key: &str) -> Option<&serde_json::Value> {
        self.provider_settings.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v)
    }

    /// The text of the latest user message, what a scripted model answers to.
    pub fn last_user_text(&self) -> Option<&str> {
        self.messages.iter().rev().find_map(|m| match m {
            Message::User { text } => Some(text.as_str()),
            _ => None,
        })
    }
}

/// Token usage as the provider measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
        self.cached_input_tokens = add_opt(self.cached_input_tokens, other.cached_input_tokens);
        self.reasoning_tokens = add_opt(self.reasoning_tokens, other.reasoning_tokens);
    }
}

fn add_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Other,
}

/// What a provider stream yields.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// A reasoning block is complete (with its signature, when the provider signs it).
    ReasoningBlock(ReasoningBlock),
    ToolCall(ToolCall),
    Usage(Usage),
    /// The model that actually answered, when the provider reports it.
    Model(String),
    Finish(FinishReason),
}

impl ModelEvent {
    /// The answer text of `events`: their text deltas, joined.
    pub fn text_of(events: &[ModelEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
}

pub type ModelStream = BoxStream<'static, Result<ModelEvent, ProviderError>>;

/// A provider's answer with its credential removed from every error detail, the opening
/// one and any in the stream.
pub(crate) fn without_secret(
    answer: Result<ModelStream, ProviderError>,
    secret: Option<String>,
) -> Result<ModelStream, ProviderError> {
    let Some(secret) = secret.filter(|s| !s.is_empty()) else { return answer };
    match answer {
        Ok(stream) => Ok(futures::StreamExt::boxed(futures::StreamExt::map(stream, move |item| {
            item.map_err(|e| e.without_secret(&secret))
        }))),
        Err(e) => Err(e.without_secret(&secret)),
    }
}

/// A named model route. Providers are shared by every run and must be thread-safe;
/// credentials come from configuration when the provider is built, never from a definition.
#[async_trait::async_trait]
pub trait ModelProvider: Send + Sync {
    /// The stable name definitions select it by (matched case-insensitively).
    fn name(&self) -> &str;

    /// The `providerSettings` keys this provider understands. Any other key fails compilation.
    fn known_settings(&self) -> &'static [&'static str] {
        &[]
    }

    /// Checks a binding's provider-specific values; `(field, message)` per problem.
    fn check_binding(&self, _binding: &ModelBinding) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Starts one streamed model call. The request is borrowed: a provider serialises what
    /// it needs before it returns the stream.
    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError>;

    /// This provider with a tenant's own credential (BYOK, see [`byok`]): the same
    /// provider, calling with the tenant's key (and at the tenant's endpoint when it has one).
    /// `None` (the default): it takes no tenant credential, and a tenant that bound one to it
    /// cannot call it at all — never with the host's key instead.
    fn with_credential(&self, _credential: &byok::TenantCredential<'_>) -> Option<Arc<dyn ModelProvider>> {
        None
    }

    /// What its circuit breaker is keyed by: its name, but for a tenant's own endpoint.
    fn breaker_key(&self) -> &str {
        self.name()
    }

    /// A cost-free reachability check with the provider's own credential — a model list,
    /// never a completion. `None` (the default): this provider has no check, and its health
    /// is `Unknown` ([`health`]).
    async fn health(&self) -> Option<Result<(), ProviderError>> {
        None
    }
}
