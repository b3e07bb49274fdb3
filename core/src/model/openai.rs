//! OpenAI Chat Completions, for `openai` and for named OpenAI-compatible endpoints, and the
//! provider type both OpenAI surfaces share.
//!
//! An [`OpenAiProvider`] is an endpoint (base URL, key, flavour) and the [`Surface`] it calls:
//! Chat Completions here, the Responses API in [`super::openai_responses`] (its body and
//! parser). `openai` and `openai-responses` are one key and one endpoint seen through the two
//! surfaces ([`OpenAiProvider::responses_surface`]); the HTTP call, the bearer credential and
//! its removal from error details are the same code for both.
//!
//! A call streams (`stream: true` with `stream_options.include_usage`, so a compatible
//! server that omits usage leaves it `None`), unless the run's caller takes its answer whole
//! ([`ModelRequest::whole`]): then it asks for one completion (`stream: false`), read by
//! [`parse_completion`] into the same events. [`ChatStreamParser`] is the pure part: it takes
//! the `data:` payloads of the stream and yields [`ModelEvent`]s, assembling tool-call
//! deltas (by `index`) into whole calls. It is tested against recorded wire transcripts.
//! Azure OpenAI ([`super::azure`]) sends the same body and reads the same stream.

use std::borrow::Cow;
use std::collections::BTreeMap;

use futures::{StreamExt, stream};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::sse;
use super::{
    FinishReason, Message, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ToolCall, Usage,
};
use crate::definition::{ModelBinding, ResponseFormat};

pub const OPENAI: &str = "openai";
/// The official endpoint through the Responses API.
pub const OPENAI_RESPONSES: &str = "openai-responses";
/// What a compatible endpoint's Responses provider is called after its own name.
pub const RESPONSES_SUFFIX: &str = "-responses";
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Which flavour of the Chat Completions API an endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// api.openai.com: `max_completion_tokens`, `reasoning_effort`.
    OpenAi,
    /// A compatible server (Ollama, vLLM, LM Studio, OpenRouter, …): the older
    /// `max_tokens`, which every compatible server accepts.
    Compatible,
}

/// What a compatible server does with a JSON `responseFormat`
/// (`Tracon:Providers:Compatible:<name>:StructuredOutput`). Whatever it does, the answer is
/// checked and repaired by [`crate::structured`]; this only decides what the server is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StructuredSupport {
    /// `response_format: {"type": "json_schema", …}` (OpenAI itself, vLLM, recent Ollama).
    #[default]
    JsonSchema,
    /// Only `{"type": "json_object"}`: the schema goes into the system prompt.
    JsonObject,
    /// No `response_format` at all: the system prompt asks for the JSON (and its schema).
    Instructions,
}

impl StructuredSupport {
    /// `JsonSchema`, `JsonObject` or `Instructions`, any case.
    pub fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "jsonschema" => Some(Self::JsonSchema),
            "jsonobject" => Some(Self::JsonObject),
            "instructions" => Some(Self::Instructions),
            _ => None,
        }
    }
}

/// Which OpenAI API a provider calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `POST {base}/chat/completions`.
    ChatCompletions,
    /// `POST {base}/responses`.
    Responses,
}

/// An OpenAI or OpenAI-compatible endpoint, through one [`Surface`].
pub struct OpenAiProvider {
    name: String,
    base_url: String,
    api_key: Option<String>,
    flavor: Flavor,
    surface: Surface,
    structured: StructuredSupport,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// What the server is asked for a JSON `responseFormat` (a compatible server's setting).
    pub fn with_structured_support(mut self, structured: StructuredSupport) -> Self {
        self.structured = structured;
        self
    }

    /// The official OpenAI endpoint (`base_url` overridable for proxies and tests).
    pub fn openai(client: reqwest::Client, api_key: String, base_url: Option<String>) -> Self {
        Self {
            name: OPENAI.to_owned(),
            base_url: trim_base(base_url.as_deref().unwrap_or(DEFAULT_BASE_URL)),
            api_key: Some(api_key),
            flavor: Flavor::OpenAi,
            surface: Surface::ChatCompletions,
            structured: StructuredSupport::JsonSchema,
            client,
        }
    }

    /// A named compatible endpoint. The name must match `[a-z0-9][a-z0-9-]{0,31}` and not
    /// be `openai` or `openai-responses`; the endpoint must be an absolute http(s) URL. A
    /// keyless server is valid.
    pub fn compatible(
        client: reqwest::Client,
        name: &str,
        endpoint: &str,
        api_key: Option<String>,
    ) -> Result<Self, String> {
        if !is_compatible_name(name) {
            return Err(format!(
                "'{name}' is not a valid compatible provider name: it must match [a-z0-9][a-z0-9-]{{0,31}}."
            ));
        }
        if name == "openai" || name == "openai-responses" {
            return Err(format!("The provider name '{name}' is reserved."));
        }
        sse::endpoint_url(endpoint, &format!("compatible provider '{name}'"))?;
        Ok(Self {
            name: name.to_owned(),
            base_url: trim_base(endpoint),
            api_key,
            flavor: Flavor::Compatible,
            surface: Surface::ChatCompletions,
            structured: StructuredSupport::JsonSchema,
            client,
        })
    }

    /// The same endpoint and key through the Responses API: `openai-responses` for `openai`,
    /// `{name}-responses` for a compatible endpoint (whose host enables it only when the
    /// server implements `/responses`).
    pub fn responses_surface(&self) -> Self {
        let name = if self.flavor == Flavor::OpenAi {
            OPENAI_RESPONSES.to_owned()
        } else {
            format!("{}{RESPONSES_SUFFIX}", self.name)
        };
        Self {
            name,
            base_url: self.base_url.clone(),
            api_key: self.api_key.clone(),
            flavor: self.flavor,
            surface: Surface::Responses,
            structured: self.structured,
            client: self.client.clone(),
        }
    }

    pub fn surface(&self) -> Surface {
        self.surface
    }
}

/// OpenAI's structured output (both surfaces, and Azure's) takes only an object schema.
pub(crate) fn check_structured_output(binding: &ModelBinding) -> Option<(String, String)> {
    match &binding.response_format {
        Some(ResponseFormat::JsonSchema { schema, .. })
            if schema.get("type").and_then(Value::as_str) != Some("object") =>
        {
            Some((
                "model.responseFormat.schema".to_owned(),
                "OpenAI structured output needs a schema whose top-level type is \"object\".".to_owned(),
            ))
        }
        _ => None,
    }
}

fn trim_base(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

/// `[a-z0-9][a-z0-9-]{0,31}`.
pub fn is_compatible_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 32
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[async_trait::async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn with_credential(
        &self,
        credential: &super::byok::TenantCredential<'_>,
    ) -> Option<std::sync::Arc<dyn ModelProvider>> {
        let (base_url, client) = match credential.endpoint {
            Some((url, client)) => (trim_base(url), client.clone()),
            None => (self.base_url.clone(), self.client.clone()),
        };
        Some(std::sync::Arc::new(Self {
            name: self.name.clone(),
            base_url,
            api_key: Some(credential.api_key.to_owned()),
            flavor: self.flavor,
            surface: self.surface,
            structured: self.structured,
            client,
        }))
    }

    fn check_binding(&self, binding: &ModelBinding) -> Vec<(String, String)> {
        // A compatible server may not know reasoningEffort; sending it anyway is the
        // caller's explicit choice, so it is allowed.
        check_structured_output(binding).into_iter().collect()
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        // reqwest's wasm32 futures are !Send; see crate::platform.
        let answer = crate::platform::send_future(self.start(request)).await;
        super::without_secret(answer, self.api_key.clone())
    }

    /// `GET {base}/models`: lists models, costs nothing.
    async fn health(&self) -> Option<Result<(), ProviderError>> {
        let mut request = self.client.get(format!("{}/models", self.base_url));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let answer = crate::platform::send_future(sse::reach(request, ProviderError::from_status)).await;
        Some(answer.map_err(|e| match &self.api_key {
            Some(key) => e.without_secret(key),
            None => e,
        }))
    }
}

impl OpenAiProvider {
    async fn start(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let builder = match self.surface {
            Surface::ChatCompletions => self
                .client
                .post(format!("{}/chat/completions", self.base_url))
                .json(&ChatBody::new(request, self.flavor, self.structured)),
            Surface::Responses => self
                .client
                .post(format!("{}/responses", self.base_url))
                .json(&super::openai_responses::ResponsesBody::new(request)),
        };
        let builder = match &self.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        };
        match self.surface {
            Surface::ChatCompletions => stream_chat(builder, ProviderError::from_status).await,
            Surface::Responses => super::openai_responses::stream_responses(builder).await,
        }
    }
}

/// Sends a Chat Completions request and reads its answer as model events; `classify` turns a
/// failure status and its body into the error. Shared with Azure OpenAI, whose answer is the
/// same wire format.
pub(crate) async fn stream_chat(
    builder: reqwest::RequestBuilder,
    classify: fn(u16, &str) -> ProviderError,
) -> Result<ModelStream, ProviderError> {
    let response = sse::send_classified(builder, classify).await?;
    if sse::is_json(&response) {
        // A server that ignored `stream: true` answered with a whole completion.
        let body = sse::json_body(response).await?;
        let events = parse_completion(&body)?;
        return Ok(stream::iter(events.into_iter().map(Ok)).boxed());
    }
    let events = sse::events(response);
    Ok(sse::model_events(events, |p: &mut ChatStreamParser, ev| p.push(&ev.data), ChatStreamParser::finish))
}

/// `tool_choice` in Chat Completions' words (`auto` is left unsaid: it is the default).
pub(crate) fn chat_tool_choice(choice: &super::ToolChoice) -> Option<serde_json::Value> {
    use super::ToolChoice;
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(serde_json::Value::from("none")),
        ToolChoice::Required => Some(serde_json::Value::from("required")),
        ToolChoice::Function(name) => Some(serde_json::json!({"type": "function", "function": {"name": name}})),
    }
}

/// The Chat Completions request body, borrowing everything from the request: serialised
/// straight onto the wire, with no intermediate JSON tree.
#[derive(Serialize)]
pub struct ChatBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<WireResponseFormat<'a>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: Cow<'a, str>,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireResponseFormat<'a> {
    JsonObject,
    JsonSchema { json_schema: WireJsonSchema<'a> },
}

#[derive(Serialize)]
struct WireJsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

impl<'a> ChatBody<'a> {
    pub fn new(request: &'a ModelRequest, flavor: Flavor, structured: StructuredSupport) -> Self {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        // A server that cannot be given the schema is told it in the system prompt.
        let told = match (&request.response_format, structured) {
            (Some(format @ (ResponseFormat::Json | ResponseFormat::JsonSchema { .. })), s)
                if s != StructuredSupport::JsonSchema =>
            {
                Some(json_instructions(format))
            }
            _ => None,
        };
        match (&request.system, told) {
            (Some(system), None) => messages.push(WireMessage::System { content: Cow::Borrowed(system) }),
            (Some(system), Some(told)) => {
                messages.push(WireMessage::System { content: Cow::Owned(format!("{system}\n\n{told}")) })
            }
            (None, Some(told)) => messages.push(WireMessage::System { content: Cow::Owned(told) }),
            (None, None) => {}
        }
        for m in &request.messages {
            messages.push(match m {
                Message::User { text } => WireMessage::User { content: text },
                Message::Assistant { text, tool_calls, .. } => WireMessage::Assistant {
                    content: text.as_deref(),
                    tool_calls: tool_calls
                        .iter()
                        .map(|c| WireToolCall {
                            id: &c.id,
                            kind: "function",
                            function: WireFunctionCall { name: &c.name, arguments: &c.arguments },
                        })
                        .collect(),
                },
                Message::Tool { call_id, content, .. } => WireMessage::Tool { tool_call_id: call_id, content },
            });
        }
        let tools: Vec<WireTool<'a>> = request
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireFunction { name: &t.name, description: &t.description, parameters: &t.parameters },
            })
            .collect();
        let (max_completion_tokens, max_tokens) = match flavor {
            Flavor::OpenAi => (request.max_output_tokens, None),
            Flavor::Compatible => (None, request.max_output_tokens),
        };
        let response_format = match (&request.response_format, structured) {
            (None | Some(ResponseFormat::Text), _) | (_, StructuredSupport::Instructions) => None,
            (Some(ResponseFormat::Json), _) | (_, StructuredSupport::JsonObject) => {
                Some(WireResponseFormat::JsonObject)
            }
            (Some(ResponseFormat::JsonSchema { name, schema, description, strict }), StructuredSupport::JsonSchema) => {
                Some(WireResponseFormat::JsonSchema {
                    json_schema: WireJsonSchema { name, schema, description: description.as_deref(), strict: *strict },
                })
            }
        };
        Self {
            model: &request.model,
            messages,
            // A whole answer carries its usage; a stream only when asked.
            stream: !request.whole,
            stream_options: (!request.whole).then_some(StreamOptions { include_usage: true }),
            parallel_tool_calls: (!tools.is_empty()).then_some(request.parallel_tool_calls),
            tool_choice: if tools.is_empty() { None } else { chat_tool_choice(&request.tool_choice) },
            tools,
            temperature: request.temperature,
            top_p: request.top_p,
            max_completion_tokens,
            max_tokens,
            reasoning_effort: request.reasoning_effort.map(|e| e.as_wire()),
            response_format,
        }
    }
}

/// The request body as JSON (for inspection and tests; the provider serialises
/// [`ChatBody`] directly).
pub fn build_body(request: &ModelRequest, flavor: Flavor) -> Value {
    build_body_for(request, flavor, StructuredSupport::JsonSchema)
}

/// [`build_body`] for a server with `structured` support.
pub fn build_body_for(request: &ModelRequest, flavor: Flavor, structured: StructuredSupport) -> Value {
    serde_json::to_value(ChatBody::new(request, flavor, structured)).unwrap_or(Value::Null)
}

/// What the system prompt says when the server cannot be handed the JSON format itself.
fn json_instructions(format: &ResponseFormat) -> String {
    match format {
        ResponseFormat::JsonSchema { schema, .. } => {
            format!(
                "Answer with only a JSON value that matches this JSON Schema, with no prose and no code fence:\n{schema}"
            )
        }
        _ => "Answer with only a JSON value, with no prose and no code fence.".to_owned(),
    }
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Turns Chat Completions stream chunks into [`ModelEvent`]s.
#[derive(Default)]
pub struct ChatStreamParser {
    calls: BTreeMap<u64, PartialCall>,
    model_reported: bool,
    finish: Option<FinishReason>,
    calls_emitted: bool,
    done: bool,
}

impl ChatStreamParser {
    /// Feeds one `data:` payload.
    pub fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(Vec::new());
        }
        let chunk: WireChunk<'_> =
            serde_json::from_str(data).map_err(|e| ProviderError::protocol(format!("invalid stream chunk: {e}")))?;
        if let Some(err) = &chunk.error {
            return Err(stream_error(err));
        }
        let mut out = Vec::new();
        if !self.model_reported
            && let Some(m) = chunk.model.as_deref()
            && !m.is_empty()
        {
            self.model_reported = true;
            out.push(ModelEvent::Model(m.to_owned()));
        }
        for choice in chunk.choices {
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                for r in [delta.reasoning_content, delta.reasoning].into_iter().flatten() {
                    if !r.is_empty() {
                        out.push(ModelEvent::ReasoningDelta(r.into_owned()));
                    }
                }
                for text in [delta.content, delta.refusal].into_iter().flatten() {
                    if !text.is_empty() {
                        out.push(ModelEvent::TextDelta(text.into_owned()));
                    }
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    let id = call.id.filter(|id| !id.is_empty());
                    let index = match call.index {
                        Some(i) => i,
                        // Some compatible servers (Gemini's, several proxies) omit `index`:
                        // a new id starts a new call, a fragment without one continues the
                        // latest call.
                        None => match (self.calls.last_key_value(), id.as_deref()) {
                            (Some((&last, entry)), Some(id)) if !entry.id.is_empty() && entry.id != id => last + 1,
                            (Some((&last, _)), _) => last,
                            (None, _) => 0,
                        },
                    };
                    let entry = self.calls.entry(index).or_default();
                    if let Some(id) = id {
                        entry.id = id.into_owned();
                    }
                    if let Some(f) = call.function {
                        // A server that repeats the full name in every fragment must not
                        // produce "globglob".
                        if let Some(n) = f.name
                            && !n.is_empty()
                            && entry.name != n
                        {
                            entry.name.push_str(&n);
                        }
                        if let Some(a) = f.arguments {
                            entry.arguments.push_str(&a);
                        }
                    }
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(map_finish(&reason));
                out.extend(self.take_calls());
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(ModelEvent::Usage(usage.into()));
        }
        Ok(out)
    }

    /// The stream ended. A stream that stopped before any finish reason or `[DONE]`
    /// was cut off, which is a transport failure, not an answer.
    pub fn finish(mut self) -> Result<Vec<ModelEvent>, ProviderError> {
        if self.finish.is_none() && !self.done {
            return Err(ProviderError::stream_interrupted("a finish reason"));
        }
        let mut out = self.take_calls();
        let reason = match self.finish {
            Some(r) => r,
            None if self.calls_emitted => FinishReason::ToolCalls,
            None => FinishReason::Stop,
        };
        out.push(ModelEvent::Finish(reason));
        Ok(out)
    }

    fn take_calls(&mut self) -> Vec<ModelEvent> {
        let calls = std::mem::take(&mut self.calls);
        if !calls.is_empty() {
            self.calls_emitted = true;
        }
        calls
            .into_values()
            .map(|c| {
                ModelEvent::ToolCall(ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: if c.arguments.trim().is_empty() { "{}".to_owned() } else { c.arguments },
                })
            })
            .collect()
    }
}

fn map_finish(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

fn parse_usage(u: &Value) -> Usage {
    serde_json::from_value::<WireUsage>(u.clone()).map(Usage::from).unwrap_or_default()
}

/// One Chat Completions stream chunk; strings borrow from the payload when unescaped.
#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Vec<WireChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<WireToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<WireFunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct WireFunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<WireUsageDetails>,
    #[serde(default)]
    completion_tokens_details: Option<WireUsageDetails>,
}

#[derive(Deserialize, Default)]
struct WireUsageDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            total_tokens: u.total_tokens.unwrap_or(u.prompt_tokens + u.completion_tokens),
            cached_input_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
        }
    }
}

fn stream_error(err: &Value) -> ProviderError {
    let detail = err.to_string();
    let code = err.get("code").and_then(Value::as_str).unwrap_or_default();
    let kind_text = err.get("type").and_then(Value::as_str).unwrap_or_default();
    let mut e = if code == "rate_limit_exceeded" || kind_text.contains("rate_limit") {
        ProviderError::from_status(429, &detail)
    } else if kind_text.contains("server_error") || kind_text.is_empty() {
        ProviderError::from_status(500, &detail)
    } else {
        ProviderError::from_status(400, &detail)
    };
    e.type_name = "StreamError";
    e
}

/// A whole (non-streamed) completion, from a server that ignored `stream: true`.
pub fn parse_completion(body: &Value) -> Result<Vec<ModelEvent>, ProviderError> {
    let mut out = Vec::new();
    if let Some(m) = body.get("model").and_then(Value::as_str) {
        out.push(ModelEvent::Model(m.to_owned()));
    }
    let choice = body.pointer("/choices/0").ok_or_else(|| ProviderError::protocol("completion without choices"))?;
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    // What a stream would have said in pieces, in its order: reasoning, then the text (or
    // the refusal in its place).
    for key in ["reasoning_content", "reasoning"] {
        if let Some(r) = message.get(key).and_then(Value::as_str).filter(|r| !r.is_empty()) {
            out.push(ModelEvent::ReasoningDelta(r.to_owned()));
        }
    }
    for key in ["content", "refusal"] {
        if let Some(text) = message.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()) {
            out.push(ModelEvent::TextDelta(text.to_owned()));
        }
    }
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for c in calls {
            out.push(ModelEvent::ToolCall(ToolCall {
                id: c.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
                name: c.pointer("/function/name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                arguments: c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("{}").to_owned(),
            }));
        }
    }
    if let Some(u) = body.get("usage").filter(|u| !u.is_null()) {
        out.push(ModelEvent::Usage(parse_usage(u)));
    }
    let reason = choice.get("finish_reason").and_then(Value::as_str).map(map_finish).unwrap_or(FinishReason::Stop);
    out.push(ModelEvent::Finish(reason));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::ReasoningEffort;
    use crate::model::ToolSpec;
    use serde_json::json;

    #[test]
    fn a_whole_answer_is_asked_for_in_one_piece_and_read_into_the_streams_events() {
        let mut r = ModelRequest::from_binding(&ModelBinding {
            provider: "openai".into(),
            model: "m".into(),
            ..Default::default()
        });
        r.messages = vec![Message::User { text: "hi".into() }];
        let streamed = build_body(&r, Flavor::OpenAi);
        assert_eq!(
            (streamed["stream"].clone(), streamed["stream_options"]["include_usage"].clone()),
            (json!(true), json!(true))
        );
        r.whole = true;
        let whole = build_body(&r, Flavor::OpenAi);
        assert_eq!(whole["stream"], false);
        assert!(whole.get("stream_options").is_none(), "{whole}");

        let body = json!({"model": "m-2024", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "reasoning_content": "Think.", "content": "Hello.", "refusal": null}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}});
        let events = parse_completion(&body).unwrap();
        assert_eq!(events[0], ModelEvent::Model("m-2024".into()));
        assert_eq!(events[1], ModelEvent::ReasoningDelta("Think.".into()));
        assert_eq!(events[2], ModelEvent::TextDelta("Hello.".into()));
        assert!(
            matches!(&events[3], ModelEvent::Usage(u) if u.input_tokens == 7 && u.output_tokens == 2),
            "{events:?}"
        );
        assert_eq!(events[4], ModelEvent::Finish(FinishReason::Stop));
        let refused = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}}]});
        assert!(parse_completion(&refused).unwrap().contains(&ModelEvent::TextDelta("I can't help with that.".into())));
    }

    #[test]
    fn a_compatible_server_is_asked_for_json_as_far_as_it_supports_it() {
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}});
        let mut r = ModelRequest::from_binding(&ModelBinding {
            provider: "local".into(),
            model: "m".into(),
            response_format: Some(ResponseFormat::JsonSchema {
                name: "order".into(),
                schema,
                description: None,
                strict: None,
            }),
            ..Default::default()
        });
        r.system = Some("You track orders.".into());
        r.messages = vec![Message::user("order 7?")];
        let native = build_body_for(&r, Flavor::Compatible, StructuredSupport::JsonSchema);
        assert_eq!(native["response_format"]["type"], "json_schema");
        assert_eq!(native["messages"][0]["content"], "You track orders.");
        let object = build_body_for(&r, Flavor::Compatible, StructuredSupport::JsonObject);
        assert_eq!(object["response_format"], json!({"type": "json_object"}));
        let told = object["messages"][0]["content"].as_str().unwrap();
        assert!(told.starts_with("You track orders.\n\nAnswer with only a JSON value that matches"), "{told}");
        assert!(told.contains(r#""id":{"type":"integer"}"#), "{told}");
        let prompted = build_body_for(&r, Flavor::Compatible, StructuredSupport::Instructions);
        assert!(prompted.get("response_format").is_none());
        assert_eq!(prompted["messages"][0]["content"], object["messages"][0]["content"]);
        // Without a system prompt the instruction is the system message; text asks for nothing.
        r.system = None;
        assert!(
            build_body_for(&r, Flavor::Compatible, StructuredSupport::Instructions)["messages"][0]["content"]
                .as_str()
                .unwrap()
                .starts_with("Answer with only")
        );
        r.response_format = Some(ResponseFormat::Text);
        let plain = build_body_for(&r, Flavor::Compatible, StructuredSupport::Instructions);
        assert_eq!(plain["messages"][0]["role"], "user");
        assert_eq!(StructuredSupport::parse("jsonObject"), Some(StructuredSupport::JsonObject));
        assert_eq!(StructuredSupport::parse("xml"), None);
    }

    #[test]
    fn body_maps_messages_tools_and_options() {
        let mut r = ModelRequest::from_binding(&ModelBinding {
            provider: "openai".into(),
            model: "m".into(),
            max_output_tokens: Some(50),
            reasoning_effort: Some(ReasoningEffort::Low),
            response_format: Some(ResponseFormat::Json),
            ..Default::default()
        });
        r.system = Some("sys".into());
        r.messages = vec![
            Message::user("hi"),
            Message::Assistant {
                text: None,
                tool_calls: vec![ToolCall { id: "c1".into(), name: "t".into(), arguments: "{}".into() }],
                reasoning: vec![],
            },
            Message::Tool { call_id: "c1".into(), name: "t".into(), content: "ok".into(), is_error: false },
        ];
        r.tools =
            vec![ToolSpec { name: "t".into(), description: "d".into(), parameters: json!({"type": "object"}) }].into();
        let b = build_body(&r, Flavor::OpenAi);
        assert_eq!(b["messages"][0], json!({"role": "system", "content": "sys"}));
        assert_eq!(b["messages"][2]["tool_calls"][0]["function"]["name"], "t");
        assert_eq!(b["messages"][3], json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}));
        assert_eq!(b["max_completion_tokens"], 50);
        assert_eq!(b["reasoning_effort"], "low");
        assert_eq!(b["response_format"], json!({"type": "json_object"}));
        assert_eq!(b["parallel_tool_calls"], false);
        assert_eq!(b["stream_options"]["include_usage"], true);
        let c = build_body(&r, Flavor::Compatible);
        assert_eq!(c["max_tokens"], 50);
        assert!(c.get("max_completion_tokens").is_none());
    }

    #[test]
    fn compatible_names_follow_the_spec_pattern() {
        assert!(is_compatible_name("ollama"));
        assert!(is_compatible_name("lm-studio2"));
        assert!(!is_compatible_name("-x"));
        assert!(!is_compatible_name("Ollama"));
        assert!(!is_compatible_name(&"a".repeat(33)));
        let c = reqwest::Client::new();
        assert!(OpenAiProvider::compatible(c.clone(), "openai", "http://x", None).is_err());
        assert!(OpenAiProvider::compatible(c.clone(), "local", "localhost:1", None).is_err());
        assert!(OpenAiProvider::compatible(c, "local", "http://localhost:11434/v1", None).is_ok());
    }

    #[test]
    fn tool_calls_without_index_are_told_apart_by_id() {
        let mut p = ChatStreamParser::default();
        p.push(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"glob","arguments":"{\"p\":1}"}}]}}]}"#).unwrap();
        p.push(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"glob","arguments":"{\"p\":"}}]}}]}"#).unwrap();
        p.push(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"glob","arguments":"2}"}}]}}]}"#)
            .unwrap();
        let out = p.push(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#).unwrap();
        let calls: Vec<(String, String, String)> = out
            .into_iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCall(c) => Some((c.id, c.name, c.arguments)),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            vec![("a".into(), "glob".into(), r#"{"p":1}"#.into()), ("b".into(), "glob".into(), r#"{"p":2}"#.into())]
        );
    }

    #[test]
    fn a_stream_cut_off_before_finish_is_a_transport_failure() {
        let mut p = ChatStreamParser::default();
        p.push(r#"{"model":"m","choices":[{"index":0,"delta":{"content":"Hel"}}]}"#).unwrap();
        let err = p.finish().unwrap_err();
        assert_eq!(err.kind, crate::model::ProviderErrorKind::Transport);
    }

    #[test]
    fn an_error_chunk_is_classified() {
        let mut p = ChatStreamParser::default();
        let e =
            p.push(r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#).unwrap_err();
        assert_eq!(e.kind, crate::model::ProviderErrorKind::RateLimited);
    }
}
