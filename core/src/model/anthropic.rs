//! Anthropic Messages API (`anthropic`).
//!
//! `max_tokens` is required by the API; it defaults to 4096 when the binding sets no
//! `maxOutputTokens`. Supported `providerSettings`: `anthropic.promptCaching` (bool) and
//! `anthropic.thinking.budgetTokens` (≥ 1024 and below the effective output limit;
//! temperature must then be absent or 1). [`MessagesStreamParser`] is the pure part that
//! turns the SSE events into [`ModelEvent`]s; it is tested against recorded transcripts.
//!
//! A JSON `responseFormat` goes through a forced tool ([`RESPONSE_TOOL`], its input schema the
//! format's): the model answers by calling it (`tool_choice` names it, or `any` beside the
//! agent's own tools), and the call's input streams back as the answer's text. Not with
//! thinking, which the API does not allow with a forced tool.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::sse;
use super::{
    FinishReason, Message, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ReasoningBlock,
    ToolCall, ToolChoice, Usage,
};
use crate::definition::{ModelBinding, ResponseFormat};

pub const ANTHROPIC: &str = "anthropic";
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;
pub const API_VERSION: &str = "2023-06-01";
pub const PROMPT_CACHING_SETTING: &str = "anthropic.promptCaching";
pub const THINKING_BUDGET_SETTING: &str = "anthropic.thinking.budgetTokens";
/// The tool a JSON answer is given through.
pub const RESPONSE_TOOL: &str = "respond_with_json";

pub struct AnthropicProvider {
    base_url: String,
    api_key: String,
    default_max_output_tokens: u32,
    client: reqwest::Client,
}

impl AnthropicProvider {
    pub fn new(client: reqwest::Client, api_key: String, base_url: Option<String>) -> Self {
        Self {
            base_url: base_url.as_deref().unwrap_or(DEFAULT_BASE_URL).trim_end_matches('/').to_owned(),
            api_key,
            default_max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            client,
        }
    }

    pub fn with_default_max_output_tokens(mut self, n: u32) -> Self {
        self.default_max_output_tokens = n.max(1);
        self
    }
}

#[async_trait::async_trait]
impl ModelProvider for AnthropicProvider {
    fn name(&self) -> &str {
        ANTHROPIC
    }

    fn with_credential(
        &self,
        credential: &super::byok::TenantCredential<'_>,
    ) -> Option<std::sync::Arc<dyn ModelProvider>> {
        let (base_url, client) = match credential.endpoint {
            Some((url, client)) => (url.trim_end_matches('/').to_owned(), client.clone()),
            None => (self.base_url.clone(), self.client.clone()),
        };
        Some(std::sync::Arc::new(Self {
            base_url,
            api_key: credential.api_key.to_owned(),
            default_max_output_tokens: self.default_max_output_tokens,
            client,
        }))
    }

    fn known_settings(&self) -> &'static [&'static str] {
        &[PROMPT_CACHING_SETTING, THINKING_BUDGET_SETTING]
    }

    fn check_binding(&self, binding: &ModelBinding) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let setting = |key: &str| {
            binding.provider_settings.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(k, v)| (k.clone(), v))
        };
        if let Some((k, v)) = setting(PROMPT_CACHING_SETTING)
            && !v.is_boolean()
        {
            out.push((
                format!("model.providerSettings.{k}"),
                format!("{PROMPT_CACHING_SETTING} must be true or false."),
            ));
        }
        if let Some((k, v)) = setting(THINKING_BUDGET_SETTING) {
            let limit = binding.max_output_tokens.unwrap_or(self.default_max_output_tokens) as u64;
            match v.as_u64() {
                Some(b) if b >= 1024 && b < limit => {}
                Some(_) | None => out.push((
                    format!("model.providerSettings.{k}"),
                    format!(
                        "{THINKING_BUDGET_SETTING} must be an integer of at least 1024 and smaller than the output limit ({limit})."
                    ),
                )),
            }
            if binding.temperature.is_some_and(|t| (t - 1.0).abs() > f64::EPSILON) {
                out.push((
                    "model.temperature".to_owned(),
                    "With Anthropic thinking enabled, temperature must be absent or 1.".to_owned(),
                ));
            }
        }
        if let Some(ResponseFormat::JsonSchema { schema, .. }) = &binding.response_format
            && schema.get("type").and_then(Value::as_str) != Some("object")
        {
            out.push((
                "model.responseFormat.schema".to_owned(),
                "Anthropic takes a JSON answer as a tool's input: the schema's top-level type must be \"object\"."
                    .to_owned(),
            ));
        }
        if matches!(binding.response_format, Some(ResponseFormat::Json | ResponseFormat::JsonSchema { .. }))
            && binding.provider_settings.keys().any(|k| k.eq_ignore_ascii_case(THINKING_BUDGET_SETTING))
        {
            out.push((
                "model.responseFormat".to_owned(),
                format!("With Anthropic thinking ({THINKING_BUDGET_SETTING}), a JSON response format cannot be forced; use \"text\" or turn thinking off."),
            ));
        }
        if binding.reasoning_effort.is_some() {
            out.push((
                "model.reasoningEffort".to_owned(),
                format!("The anthropic provider takes a thinking budget ({THINKING_BUDGET_SETTING}) instead of reasoningEffort."),
            ));
        }
        out
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        // reqwest's wasm32 futures are !Send; see crate::platform.
        let answer = crate::platform::send_future(self.start(request)).await;
        super::without_secret(answer, Some(self.api_key.clone()))
    }

    /// `GET /v1/models`: lists models, costs nothing.
    async fn health(&self) -> Option<Result<(), ProviderError>> {
        let request = self
            .client
            .get(format!("{}/v1/models", self.base_url))
            .header("x-api-key", &self.api_key)
            .header("anthropic-version", API_VERSION);
        let answer = crate::platform::send_future(sse::reach(request, ProviderError::from_status)).await;
        Some(answer.map_err(|e| e.without_secret(&self.api_key)))
    }
}

impl AnthropicProvider {
    async fn start(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let body = build_body(request, self.default_max_output_tokens);
        let builder = self
            .client
            .post(format!("{}/v1/messages", self.base_url))
            .header("x-api-key", &self.api_key)
            .header("anthropic-version", API_VERSION)
            .json(&body);
        let response = sse::send(builder).await?;
        let events = sse::events(response);
        Ok(sse::model_events(
            events,
            |p: &mut MessagesStreamParser, ev| p.push(&ev.event, &ev.data),
            MessagesStreamParser::finish,
        ))
    }
}

/// The Messages API request body.
pub fn build_body(request: &ModelRequest, default_max_tokens: u32) -> Value {
    let caching = request.setting(PROMPT_CACHING_SETTING).and_then(Value::as_bool).unwrap_or(false);
    let mut messages: Vec<Value> = Vec::new();
    for m in &request.messages {
        match m {
            Message::User { text } => messages.push(json!({"role": "user", "content": text})),
            Message::Assistant { text, tool_calls, reasoning } => {
                let mut content = Vec::new();
                for r in reasoning {
                    // A Gemini thought signature (a conversation that moved providers) means
                    // nothing here and would be refused.
                    if let Some(sig) = r.signature.as_ref().filter(|s| !super::google::is_gemini_signature(s)) {
                        content.push(json!({"type": "thinking", "thinking": r.text, "signature": sig}));
                    }
                }
                if let Some(t) = text.as_ref().filter(|t| !t.is_empty()) {
                    content.push(json!({"type": "text", "text": t}));
                }
                for c in tool_calls {
                    let input: Value =
                        serde_json::from_str(&c.arguments).ok().filter(Value::is_object).unwrap_or_else(|| json!({}));
                    content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
                }
                messages.push(json!({"role": "assistant", "content": content}));
            }
            Message::Tool { call_id, content, is_error, .. } => {
                let block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error});
                // Consecutive tool results travel in one user message, as the API requires.
                match messages.last_mut() {
                    Some(last)
                        if last["role"] == "user"
                            && last["content"]
                                .as_array()
                                .is_some_and(|a| a.iter().all(|b| b["type"] == "tool_result")) =>
                    {
                        if let Some(a) = last["content"].as_array_mut() {
                            a.push(block);
                        }
                    }
                    _ => messages.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    if caching && let Some(last) = messages.last_mut() {
        mark_cache(last);
    }
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_output_tokens.unwrap_or(default_max_tokens),
        "messages": messages,
        "stream": true,
    });
    if let Some(system) = &request.system {
        body["system"] = if caching {
            json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}])
        } else {
            json!(system)
        };
    }
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
        .collect();
    let answer_schema = match &request.response_format {
        Some(ResponseFormat::JsonSchema { schema, .. }) => Some(schema.clone()),
        Some(ResponseFormat::Json) => Some(json!({"type": "object"})),
        None | Some(ResponseFormat::Text) => None,
    };
    let parallel_off = !request.parallel_tool_calls;
    if let Some(schema) = answer_schema {
        let choice = match (&request.tool_choice, tools.is_empty()) {
            (ToolChoice::None, _) | (_, true) => json!({"type": "tool", "name": RESPONSE_TOOL}),
            (ToolChoice::Function(name), false) => {
                json!({"type": "tool", "name": name, "disable_parallel_tool_use": parallel_off})
            }
            (ToolChoice::Auto | ToolChoice::Required, false) => {
                json!({"type": "any", "disable_parallel_tool_use": true})
            }
        };
        tools.push(json!({"name": RESPONSE_TOOL, "input_schema": schema,
            "description": "Give your final answer by calling this tool: its input is the answer."}));
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = choice;
    } else if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = match &request.tool_choice {
            ToolChoice::Auto => json!({"type": "auto", "disable_parallel_tool_use": parallel_off}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any", "disable_parallel_tool_use": parallel_off}),
            ToolChoice::Function(name) => {
                json!({"type": "tool", "name": name, "disable_parallel_tool_use": parallel_off})
            }
        };
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(t) = request.top_p {
        body["top_p"] = json!(t);
    }
    if let Some(budget) = request.setting(THINKING_BUDGET_SETTING).and_then(Value::as_u64) {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    body
}

fn mark_cache(message: &mut Value) {
    let content = &mut message["content"];
    if let Some(text) = content.as_str().map(str::to_owned) {
        *content = json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]);
    } else if let Some(last) = content.as_array_mut().and_then(|a| a.last_mut()) {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
}

enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        json: String,
    },
    /// The forced tool of a JSON answer: its input streams out as text (whether any did).
    Answer {
        streamed: bool,
    },
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Other,
}

/// Turns Messages API stream events into [`ModelEvent`]s.
#[derive(Default)]
pub struct MessagesStreamParser {
    blocks: BTreeMap<u64, Block>,
    input_tokens: u64,
    cached_tokens: Option<u64>,
    output_tokens: u64,
    usage_seen: bool,
    stop: Option<FinishReason>,
    stopped: bool,
    /// The model answered through the forced answer tool.
    answered: bool,
}

impl MessagesStreamParser {
    /// Feeds one event (`event:` name and `data:` payload).
    pub fn push(&mut self, event: &str, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        if data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let v: Value =
            serde_json::from_str(data).map_err(|e| ProviderError::protocol(format!("invalid stream event: {e}")))?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
        let mut out = Vec::new();
        match kind {
            "message_start" => {
                if let Some(m) = v.pointer("/message/model").and_then(Value::as_str) {
                    out.push(ModelEvent::Model(m.to_owned()));
                }
                if let Some(u) = v.pointer("/message/usage") {
                    self.read_usage(u);
                }
            }
            "content_block_start" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = &v["content_block"];
                let b = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.push(ModelEvent::TextDelta(t.to_owned()));
                        }
                        Block::Text
                    }
                    Some("tool_use") if block.get("name").and_then(Value::as_str) == Some(RESPONSE_TOOL) => {
                        self.answered = true;
                        Block::Answer { streamed: false }
                    }
                    Some("tool_use") => Block::Tool {
                        id: block.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        name: block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                        json: String::new(),
                    },
                    Some("thinking") => Block::Thinking { text: String::new(), signature: None },
                    _ => Block::Other,
                };
                self.blocks.insert(index, b);
            }
            "content_block_delta" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = &v["delta"];
                match (delta.get("type").and_then(Value::as_str), self.blocks.get_mut(&index)) {
                    (Some("text_delta"), _) => {
                        if let Some(t) = delta.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.push(ModelEvent::TextDelta(t.to_owned()));
                        }
                    }
                    (Some("input_json_delta"), Some(Block::Tool { json, .. })) => {
                        json.push_str(delta.get("partial_json").and_then(Value::as_str).unwrap_or_default());
                    }
                    (Some("input_json_delta"), Some(Block::Answer { streamed })) => {
                        if let Some(t) = delta.get("partial_json").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            *streamed = true;
                            out.push(ModelEvent::TextDelta(t.to_owned()));
                        }
                    }
                    (Some("thinking_delta"), Some(Block::Thinking { text, .. })) => {
                        if let Some(t) = delta.get("thinking").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            text.push_str(t);
                            out.push(ModelEvent::ReasoningDelta(t.to_owned()));
                        }
                    }
                    (Some("signature_delta"), Some(Block::Thinking { signature, .. })) => {
                        let s = delta.get("signature").and_then(Value::as_str).unwrap_or_default();
                        signature.get_or_insert_with(String::new).push_str(s);
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                match self.blocks.remove(&index) {
                    Some(Block::Tool { id, name, json }) => out.push(ModelEvent::ToolCall(ToolCall {
                        id,
                        name,
                        arguments: if json.trim().is_empty() { "{}".to_owned() } else { json },
                    })),
                    Some(Block::Thinking { text, signature }) => {
                        out.push(ModelEvent::ReasoningBlock(ReasoningBlock { text, signature }))
                    }
                    // An empty input may come without a delta: the answer is then `{}`.
                    Some(Block::Answer { streamed: false }) => out.push(ModelEvent::TextDelta("{}".to_owned())),
                    Some(Block::Text | Block::Answer { .. } | Block::Other) | None => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    // The forced answer tool ends the turn with `tool_use`: it is an answer.
                    self.stop = Some(match map_stop(reason) {
                        FinishReason::ToolCalls if self.answered => FinishReason::Stop,
                        other => other,
                    });
                }
                if let Some(u) = v.get("usage") {
                    self.read_usage(u);
                }
            }
            "message_stop" => {
                self.stopped = true;
                out.extend(self.usage_event());
                out.push(ModelEvent::Finish(self.stop.unwrap_or(FinishReason::Stop)));
            }
            "error" => return Err(stream_error(&v["error"])),
            _ => {} // ping and future event types
        }
        Ok(out)
    }

    /// The stream ended; one that ended before `message_stop` was cut off.
    pub fn finish(self) -> Result<Vec<ModelEvent>, ProviderError> {
        if self.stopped { Ok(Vec::new()) } else { Err(ProviderError::stream_interrupted("message_stop")) }
    }

    fn read_usage(&mut self, u: &Value) {
        let get = |k: &str| u.get(k).and_then(Value::as_u64);
        if let Some(i) = get("input_tokens") {
            let created = get("cache_creation_input_tokens").unwrap_or(0);
            let read = get("cache_read_input_tokens");
            self.input_tokens = i + created + read.unwrap_or(0);
            self.cached_tokens = read.or(self.cached_tokens);
            self.usage_seen = true;
        }
        if let Some(o) = get("output_tokens") {
            // Cumulative in message_delta.
            self.output_tokens = o;
            self.usage_seen = true;
        }
    }

    fn usage_event(&self) -> Option<ModelEvent> {
        self.usage_seen.then(|| {
            ModelEvent::Usage(Usage {
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
                total_tokens: self.input_tokens + self.output_tokens,
                cached_input_tokens: self.cached_tokens,
                reasoning_tokens: None,
            })
        })
    }
}

fn map_stop(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

fn stream_error(err: &Value) -> ProviderError {
    let detail = err.to_string();
    let status = match err.get("type").and_then(Value::as_str).unwrap_or_default() {
        "authentication_error" => 401,
        "permission_error" => 403,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        "api_error" => 500,
        "timeout_error" => 408,
        "not_found_error" => 404,
        "request_too_large" => 413,
        _ => 400,
    };
    let mut e = ProviderError::from_status(status, &detail);
    e.type_name = "StreamError";
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolSpec;

    #[test]
    fn tool_results_share_one_user_message_and_defaults_apply() {
        let mut r = ModelRequest::from_binding(&ModelBinding {
            provider: "anthropic".into(),
            model: "claude".into(),
            ..Default::default()
        });
        r.system = Some("sys".into());
        r.messages = vec![
            Message::user("hi"),
            Message::Assistant {
                text: Some("looking".into()),
                tool_calls: vec![
                    ToolCall { id: "a".into(), name: "t".into(), arguments: r#"{"x":1}"#.into() },
                    ToolCall { id: "b".into(), name: "t".into(), arguments: "not json".into() },
                ],
                reasoning: vec![],
            },
            Message::Tool { call_id: "a".into(), name: "t".into(), content: "1".into(), is_error: false },
            Message::Tool { call_id: "b".into(), name: "t".into(), content: "2".into(), is_error: true },
        ];
        r.tools =
            vec![ToolSpec { name: "t".into(), description: "d".into(), parameters: json!({"type": "object"}) }].into();
        let b = build_body(&r, DEFAULT_MAX_OUTPUT_TOKENS);
        assert_eq!(b["max_tokens"], 4096);
        assert_eq!(b["system"], "sys");
        assert_eq!(b["messages"].as_array().unwrap().len(), 3);
        assert_eq!(b["messages"][1]["content"][1]["input"], json!({"x": 1}));
        assert_eq!(b["messages"][1]["content"][2]["input"], json!({}));
        assert_eq!(b["messages"][2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(b["messages"][2]["content"][1]["is_error"], true);
        assert_eq!(b["tool_choice"]["disable_parallel_tool_use"], true);
    }

    #[test]
    fn thinking_budget_must_fit_under_the_output_limit() {
        let p = AnthropicProvider::new(reqwest::Client::new(), "k".into(), None);
        let mut b = ModelBinding { provider: "anthropic".into(), model: "m".into(), ..Default::default() };
        b.provider_settings.insert(THINKING_BUDGET_SETTING.into(), json!(8192));
        assert_eq!(p.check_binding(&b).len(), 1);
        b.max_output_tokens = Some(16000);
        assert!(p.check_binding(&b).is_empty());
        b.temperature = Some(0.2);
        assert_eq!(p.check_binding(&b).len(), 1);
    }

    #[test]
    fn a_json_format_is_a_forced_answer_tool_whose_input_streams_as_the_answer() {
        let schema = json!({"type": "object", "properties": {"id": {"type": "integer"}}});
        let mut r = ModelRequest::from_binding(&ModelBinding {
            provider: "anthropic".into(),
            model: "claude".into(),
            response_format: Some(ResponseFormat::JsonSchema {
                name: "order".into(),
                schema: schema.clone(),
                description: None,
                strict: None,
            }),
            ..Default::default()
        });
        r.messages = vec![Message::user("order 7?")];
        let b = build_body(&r, DEFAULT_MAX_OUTPUT_TOKENS);
        assert_eq!(b["tools"][0]["name"], RESPONSE_TOOL);
        assert_eq!(b["tools"][0]["input_schema"], schema);
        assert_eq!(b["tool_choice"], json!({"type": "tool", "name": RESPONSE_TOOL}));
        // Beside the agent's own tools, the model must call one of them or answer.
        r.tools =
            vec![ToolSpec { name: "lookup".into(), description: "d".into(), parameters: json!({"type": "object"}) }]
                .into();
        let b = build_body(&r, DEFAULT_MAX_OUTPUT_TOKENS);
        assert_eq!(b["tools"].as_array().unwrap().len(), 2);
        assert_eq!(b["tool_choice"]["type"], "any");

        let mut p = MessagesStreamParser::default();
        let mut events = Vec::new();
        for (name, data) in [
            (
                "message_start",
                r#"{"type":"message_start","message":{"model":"claude","usage":{"input_tokens":9,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"respond_with_json","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"id\""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":": 7}"}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":6}}"#,
            ),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ] {
            events.extend(p.push(name, data).unwrap());
        }
        assert_eq!(ModelEvent::text_of(&events), r#"{"id": 7}"#);
        assert!(!events.iter().any(|e| matches!(e, ModelEvent::ToolCall(_))), "not a tool call: {events:?}");
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));

        // Thinking cannot be combined with a forced tool.
        let provider = AnthropicProvider::new(reqwest::Client::new(), "k".into(), None);
        let mut binding = ModelBinding {
            provider: "anthropic".into(),
            model: "m".into(),
            max_output_tokens: Some(9000),
            ..Default::default()
        };
        binding.response_format = Some(ResponseFormat::Json);
        assert!(provider.check_binding(&binding).is_empty());
        binding.provider_settings.insert(THINKING_BUDGET_SETTING.into(), json!(2048));
        assert_eq!(provider.check_binding(&binding).len(), 1);
    }

    #[test]
    fn error_events_are_classified() {
        let mut p = MessagesStreamParser::default();
        let e = p
            .push("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
            .unwrap_err();
        assert_eq!(e.kind, crate::model::ProviderErrorKind::ServerError);
        let e = p.push("error", r#"{"type":"error","error":{"type":"rate_limit_error","message":"x"}}"#).unwrap_err();
        assert_eq!(e.kind, crate::model::ProviderErrorKind::RateLimited);
    }
}
