//! The Gemini Developer API (`google`): `POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`.
//!
//! The key travels in the `x-goog-api-key` header, never in the URL, so it cannot reach a log
//! line that prints addresses. The conversation goes as `contents` (roles `user` and
//! `model`), the system prompt as `systemInstruction`, tools as one `functionDeclarations`
//! list whose schemas go as `parametersJsonSchema` (Tracon's tool schemas are JSON Schema;
//! the older `parameters` field takes only an OpenAPI subset and refuses keywords such as
//! `additionalProperties`), structured output as `responseMimeType` and
//! `responseJsonSchema` for the same reason.
//!
//! Supported `providerSettings`: the five safety thresholds ([`SAFETY_SETTINGS`]: one of
//! [`SAFETY_THRESHOLDS`]), `google.thinking.budgetTokens` (`-1..=65535`; `-1` lets the model
//! decide, `0` turns thinking off) and `google.thinking.includeThoughts` (bool). A wrong value
//! fails compilation in [`ModelProvider::check_binding`].
//!
//! Gemini's function calls carry no id (newer models sometimes do; theirs is kept and sent
//! back). A call without one gets `gemini_call_{n}`, `n` counting the calls of the
//! conversation from 1, so the same transcript always yields the same ids; generated ids are
//! never sent back to Gemini, which matches a response to its call by name. A thinking model's
//! `thoughtSignature` on a call part (Gemini 3 refuses a later request without it) is kept as
//! a [`ReasoningBlock`] whose signature says which call of the turn it belongs to
//! (`gemini:{index}:{signature}`), and goes back on that call's part.
//!
//! A response the safety filter stopped (`finishReason: SAFETY` and its kin, or a prompt
//! refused with `promptFeedback.blockReason`) ends with `Finish(ContentFilter)`: the run fails
//! `content_filtered`. [`GenerateStreamParser`] is the pure part, tested against recorded
//! transcripts; usage is the last `usageMetadata` the stream carried (each chunk's is
//! cumulative), reported only when there was one.

use futures::{StreamExt, stream};
use serde_json::{Map, Value, json};

use super::sse;
use super::{
    FinishReason, Message, ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ProviderErrorKind,
    ReasoningBlock, ToolCall, ToolChoice, Usage,
};
use crate::definition::{ModelBinding, ResponseFormat};

pub const GOOGLE: &str = "google";
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";
pub const SAFETY_HARASSMENT_SETTING: &str = "google.safety.harassment";
pub const SAFETY_HATE_SPEECH_SETTING: &str = "google.safety.hateSpeech";
pub const SAFETY_SEXUALLY_EXPLICIT_SETTING: &str = "google.safety.sexuallyExplicit";
pub const SAFETY_DANGEROUS_CONTENT_SETTING: &str = "google.safety.dangerousContent";
pub const SAFETY_CIVIC_INTEGRITY_SETTING: &str = "google.safety.civicIntegrity";
pub const THINKING_BUDGET_SETTING: &str = "google.thinking.budgetTokens";
pub const THINKING_INCLUDE_THOUGHTS_SETTING: &str = "google.thinking.includeThoughts";

/// Each safety setting and the harm category it sets the threshold of.
pub const SAFETY_SETTINGS: [(&str, &str); 5] = [
    (SAFETY_HARASSMENT_SETTING, "HARM_CATEGORY_HARASSMENT"),
    (SAFETY_HATE_SPEECH_SETTING, "HARM_CATEGORY_HATE_SPEECH"),
    (SAFETY_SEXUALLY_EXPLICIT_SETTING, "HARM_CATEGORY_SEXUALLY_EXPLICIT"),
    (SAFETY_DANGEROUS_CONTENT_SETTING, "HARM_CATEGORY_DANGEROUS_CONTENT"),
    (SAFETY_CIVIC_INTEGRITY_SETTING, "HARM_CATEGORY_CIVIC_INTEGRITY"),
];
pub const SAFETY_THRESHOLDS: [&str; 5] =
    ["BLOCK_LOW_AND_ABOVE", "BLOCK_MEDIUM_AND_ABOVE", "BLOCK_ONLY_HIGH", "BLOCK_NONE", "OFF"];
const KNOWN_SETTINGS: [&str; 7] = [
    SAFETY_HARASSMENT_SETTING,
    SAFETY_HATE_SPEECH_SETTING,
    SAFETY_SEXUALLY_EXPLICIT_SETTING,
    SAFETY_DANGEROUS_CONTENT_SETTING,
    SAFETY_CIVIC_INTEGRITY_SETTING,
    THINKING_BUDGET_SETTING,
    THINKING_INCLUDE_THOUGHTS_SETTING,
];
const THINKING_BUDGET_RANGE: std::ops::RangeInclusive<i64> = -1..=65_535;

/// The ids this provider gives calls that came without one; never sent back to Gemini.
pub const GENERATED_ID_PREFIX: &str = "gemini_call_";
/// How a call part's thought signature is kept: `gemini:{call index in the turn}:{signature}`.
/// Anthropic signatures are base64 and never hold a `:`.
const SIGNATURE_PREFIX: &str = "gemini:";
/// Gemini model ids are short; a longer one is a mistake, not a model.
const MAX_MODEL: usize = 128;

pub struct GoogleProvider {
    base_url: reqwest::Url,
    api_key: String,
    client: reqwest::Client,
}

impl GoogleProvider {
    /// `base_url` (default [`DEFAULT_BASE_URL`]) is the API's root, without `/v1beta`.
    pub fn new(client: reqwest::Client, api_key: String, base_url: Option<String>) -> Result<Self, String> {
        let base_url = sse::endpoint_url(base_url.as_deref().unwrap_or(DEFAULT_BASE_URL), GOOGLE)?;
        if api_key.is_empty() {
            return Err("The google provider needs an API key.".to_owned());
        }
        Ok(Self { base_url, api_key, client })
    }

    /// The streaming URL of `model` (`models/` in front of it is accepted and dropped); the
    /// name is one escaped path segment, and the key is not in it.
    pub fn url(&self, model: &str) -> Result<reqwest::Url, ProviderError> {
        let action = format!("{}:streamGenerateContent", model_id(model));
        sse::url_under(&self.base_url, &["v1beta", "models", &action], ("alt", "sse"))
    }

    async fn start(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let builder = self
            .client
            .post(self.url(&request.model)?)
            .header("x-goog-api-key", &self.api_key)
            .json(&build_body(request));
        let response = sse::send_classified(builder, classify).await?;
        let mut parser = GenerateStreamParser::for_request(request);
        if sse::is_json(&response) {
            // A proxy that ignored `alt=sse` answered with the chunks as one JSON array.
            let body = sse::json_body(response).await?;
            let mut events = Vec::new();
            for chunk in body.as_array().map(Vec::as_slice).unwrap_or(std::slice::from_ref(&body)) {
                events.extend(parser.push_value(chunk)?);
            }
            events.extend(parser.finish()?);
            return Ok(stream::iter(events.into_iter().map(Ok)).boxed());
        }
        Ok(sse::model_events_from(
            sse::events(response),
            parser,
            |p: &mut GenerateStreamParser, ev| p.push(&ev.data),
            GenerateStreamParser::finish,
        ))
    }
}

fn model_id(model: &str) -> &str {
    model.strip_prefix("models/").unwrap_or(model)
}

fn is_model_id(model: &str) -> bool {
    let id = model_id(model);
    !id.is_empty()
        && id.len() <= MAX_MODEL
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && id != "."
        && id != ".."
}

#[async_trait::async_trait]
impl ModelProvider for GoogleProvider {
    fn name(&self) -> &str {
        GOOGLE
    }

    fn with_credential(
        &self,
        credential: &super::byok::TenantCredential<'_>,
    ) -> Option<std::sync::Arc<dyn ModelProvider>> {
        let (base_url, client) = match credential.endpoint {
            Some((url, client)) => (sse::endpoint_url(url, GOOGLE).ok()?, client.clone()),
            None => (self.base_url.clone(), self.client.clone()),
        };
        Some(std::sync::Arc::new(Self { base_url, api_key: credential.api_key.to_owned(), client }))
    }

    fn known_settings(&self) -> &'static [&'static str] {
        &KNOWN_SETTINGS
    }

    fn check_binding(&self, binding: &ModelBinding) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let field = |k: &str| format!("model.providerSettings.{k}");
        for (key, value) in &binding.provider_settings {
            if SAFETY_SETTINGS.iter().any(|(s, _)| s.eq_ignore_ascii_case(key)) {
                if !value.as_str().is_some_and(|v| SAFETY_THRESHOLDS.contains(&v)) {
                    out.push((field(key), format!("{key} must be one of {}.", SAFETY_THRESHOLDS.join(", "))));
                }
            } else if key.eq_ignore_ascii_case(THINKING_BUDGET_SETTING) {
                if !value.as_i64().is_some_and(|b| THINKING_BUDGET_RANGE.contains(&b)) {
                    out.push((
                        field(key),
                        format!("{THINKING_BUDGET_SETTING} must be an integer from -1 (the model decides) to 65535; 0 turns thinking off."),
                    ));
                }
            } else if key.eq_ignore_ascii_case(THINKING_INCLUDE_THOUGHTS_SETTING) && !value.is_boolean() {
                out.push((field(key), format!("{THINKING_INCLUDE_THOUGHTS_SETTING} must be true or false.")));
            }
        }
        if !is_model_id(&binding.model) {
            out.push((
                "model.model".to_owned(),
                format!("A Gemini model id holds letters, digits, '-', '_' and '.', at most {MAX_MODEL} characters."),
            ));
        }
        if binding.reasoning_effort.is_some() {
            out.push((
                "model.reasoningEffort".to_owned(),
                format!("The google provider takes a thinking budget ({THINKING_BUDGET_SETTING}) instead of reasoningEffort."),
            ));
        }
        out
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        // reqwest's wasm32 futures are !Send; see crate::platform.
        let answer = crate::platform::send_future(self.start(request)).await;
        super::without_secret(answer, Some(self.api_key.clone()))
    }

    /// `GET /v1beta/models`: lists models, costs nothing; a wrong key is `unauthorized`.
    async fn health(&self) -> Option<Result<(), ProviderError>> {
        let check = async {
            let url = sse::url_under(&self.base_url, &["v1beta", "models"], ("pageSize", "1"))?;
            sse::reach(self.client.get(url).header("x-goog-api-key", &self.api_key), classify).await
        };
        let answer = crate::platform::send_future(check).await;
        Some(answer.map_err(|e| e.without_secret(&self.api_key)))
    }
}

/// Google answers a wrong key with `400 INVALID_ARGUMENT` and the reason `API_KEY_INVALID`:
/// that is a credential refused (not retried, reported as authentication), not a bad request.
/// A `429` says when to come back in its body (`RetryInfo.retryDelay`, `"37s"`), not in a
/// `Retry-After` header: it becomes the error's `retry_after` all the same.
fn classify(status: u16, body: &str) -> ProviderError {
    let mut e = ProviderError::from_status(status, body);
    let parsed = serde_json::from_str::<Value>(body).ok();
    let details = parsed.as_ref().and_then(|v| v.pointer("/error/details")).and_then(Value::as_array);
    let details = details.map(Vec::as_slice).unwrap_or_default();
    if status == 400 && details.iter().any(|d| d.get("reason").and_then(Value::as_str) == Some("API_KEY_INVALID")) {
        e.kind = ProviderErrorKind::Unauthorized;
    }
    let delay = details.iter().find_map(|d| d.get("retryDelay").and_then(Value::as_str));
    if let Some(seconds) = delay.and_then(|d| d.strip_suffix('s')).and_then(|s| s.parse::<f64>().ok()) {
        // Whole seconds, rounded up: coming back early only earns another 429.
        e = e.with_retry_after(Some(&(seconds.max(0.0).ceil() as u64).to_string()));
    }
    e
}

/// The `generateContent` request body.
pub fn build_body(request: &ModelRequest) -> Value {
    let mut contents: Vec<Value> = Vec::with_capacity(request.messages.len());
    for m in &request.messages {
        match m {
            Message::User { text } => contents.push(json!({"role": "user", "parts": [{"text": text}]})),
            Message::Assistant { text, tool_calls, reasoning } => {
                let mut parts = Vec::with_capacity(tool_calls.len() + 1);
                if let Some(t) = text.as_ref().filter(|t| !t.is_empty()) {
                    parts.push(json!({"text": t}));
                }
                for (i, c) in tool_calls.iter().enumerate() {
                    let args: Value =
                        serde_json::from_str(&c.arguments).ok().filter(Value::is_object).unwrap_or_else(|| json!({}));
                    let mut call = json!({"name": c.name, "args": args});
                    if is_gemini_id(&c.id) {
                        call["id"] = json!(c.id);
                    }
                    let mut part = json!({"functionCall": call});
                    if let Some(signature) = signature_of(reasoning, i) {
                        part["thoughtSignature"] = json!(signature);
                    }
                    parts.push(part);
                }
                // An empty model turn is refused ("contents.parts must not be empty"): leave it out.
                if !parts.is_empty() {
                    contents.push(json!({"role": "model", "parts": parts}));
                }
            }
            Message::Tool { call_id, name, content, is_error } => {
                // `response` must be an object: the documented keys are `output` and `error`.
                let value = serde_json::from_str::<Value>(content).unwrap_or_else(|_| json!(content));
                let response = if *is_error { json!({"error": value}) } else { json!({"output": value}) };
                let mut answer = json!({"name": name, "response": response});
                if is_gemini_id(call_id) {
                    answer["id"] = json!(call_id);
                }
                let part = json!({"functionResponse": answer});
                // The answers to one turn's calls travel together in one user turn.
                match contents.last_mut() {
                    Some(last) if last["role"] == "user" && is_function_responses(last) => {
                        if let Some(parts) = last["parts"].as_array_mut() {
                            parts.push(part);
                        }
                    }
                    _ => contents.push(json!({"role": "user", "parts": [part]})),
                }
            }
        }
    }
    let mut body = json!({"contents": contents});
    if let Some(system) = &request.system {
        body["systemInstruction"] = json!({"parts": [{"text": system}]});
    }
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}))
            .collect();
        body["tools"] = json!([{"functionDeclarations": declarations}]);
        let calling = match &request.tool_choice {
            ToolChoice::Auto => None,
            ToolChoice::None => Some(json!({"mode": "NONE"})),
            ToolChoice::Required => Some(json!({"mode": "ANY"})),
            ToolChoice::Function(name) => Some(json!({"mode": "ANY", "allowedFunctionNames": [name]})),
        };
        if let Some(calling) = calling {
            body["toolConfig"] = json!({"functionCallingConfig": calling});
        }
    }
    let mut config = Map::new();
    if let Some(t) = request.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(p) = request.top_p {
        config.insert("topP".into(), json!(p));
    }
    if let Some(n) = request.max_output_tokens {
        config.insert("maxOutputTokens".into(), json!(n));
    }
    match &request.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::Json) => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseJsonSchema".into(), schema.clone());
        }
    }
    let mut thinking = Map::new();
    if let Some(b) = request.setting(THINKING_BUDGET_SETTING).and_then(Value::as_i64) {
        thinking.insert("thinkingBudget".into(), json!(b));
    }
    if let Some(t) = request.setting(THINKING_INCLUDE_THOUGHTS_SETTING).and_then(Value::as_bool) {
        thinking.insert("includeThoughts".into(), json!(t));
    }
    if !thinking.is_empty() {
        config.insert("thinkingConfig".into(), Value::Object(thinking));
    }
    if !config.is_empty() {
        body["generationConfig"] = Value::Object(config);
    }
    let safety: Vec<Value> = SAFETY_SETTINGS
        .iter()
        .filter_map(|(setting, category)| {
            let threshold = request.setting(setting).and_then(Value::as_str)?;
            Some(json!({"category": category, "threshold": threshold}))
        })
        .collect();
    if !safety.is_empty() {
        body["safetySettings"] = json!(safety);
    }
    body
}

/// An id Gemini gave (sent back so it can match the answer); not one this provider made up.
fn is_gemini_id(id: &str) -> bool {
    !id.is_empty() && !id.starts_with(GENERATED_ID_PREFIX)
}

fn is_function_responses(content: &Value) -> bool {
    content["parts"].as_array().is_some_and(|p| p.iter().all(|part| part.get("functionResponse").is_some()))
}

/// The thought signature kept for call `index` of a turn.
fn signature_of(reasoning: &[crate::model::ReasoningBlock], index: usize) -> Option<&str> {
    reasoning.iter().filter_map(|r| r.signature.as_deref()?.strip_prefix(SIGNATURE_PREFIX)).find_map(|rest| {
        let (at, signature) = rest.split_once(':')?;
        (at.parse::<usize>().ok()? == index).then_some(signature)
    })
}

/// Whether a reasoning block's signature is one this provider kept (and no other provider can
/// use): Anthropic's request builder leaves those out.
pub(crate) fn is_gemini_signature(signature: &str) -> bool {
    signature.starts_with(SIGNATURE_PREFIX)
}

/// Turns `streamGenerateContent` chunks into [`ModelEvent`]s.
#[derive(Debug, Default)]
pub struct GenerateStreamParser {
    /// Calls already in the conversation; a generated id numbers on from them.
    earlier_calls: usize,
    /// Calls of this response so far.
    calls: usize,
    model_reported: bool,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

impl GenerateStreamParser {
    /// A parser whose generated ids number on after `earlier_calls` calls.
    pub fn new(earlier_calls: usize) -> Self {
        Self { earlier_calls, ..Self::default() }
    }

    /// A parser for the answer to `request` (its generated ids follow the conversation's calls).
    pub fn for_request(request: &ModelRequest) -> Self {
        let earlier = request
            .messages
            .iter()
            .map(|m| match m {
                Message::Assistant { tool_calls, .. } => tool_calls.len(),
                _ => 0,
            })
            .sum();
        Self::new(earlier)
    }

    /// Feeds one `data:` payload.
    pub fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let v: Value =
            serde_json::from_str(data).map_err(|e| ProviderError::protocol(format!("invalid stream chunk: {e}")))?;
        self.push_value(&v)
    }

    /// Feeds one chunk, already parsed.
    pub fn push_value(&mut self, v: &Value) -> Result<Vec<ModelEvent>, ProviderError> {
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            return Err(stream_error(err));
        }
        let mut out = Vec::new();
        if !self.model_reported
            && let Some(m) = v.get("modelVersion").and_then(Value::as_str).filter(|m| !m.is_empty())
        {
            self.model_reported = true;
            out.push(ModelEvent::Model(m.to_owned()));
        }
        if let Some(u) = v.get("usageMetadata").and_then(usage) {
            self.usage = Some(u);
        }
        if v.pointer("/promptFeedback/blockReason").and_then(Value::as_str).is_some() {
            // The prompt itself was refused: no candidates follow.
            self.finish = Some(FinishReason::ContentFilter);
        }
        let candidate = v
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0));
        let Some(candidate) = candidate else { return Ok(out) };
        for part in candidate.pointer("/content/parts").and_then(Value::as_array).into_iter().flatten() {
            let text = part.get("text").and_then(Value::as_str).filter(|t| !t.is_empty());
            if let Some(t) = text {
                if part.get("thought").and_then(Value::as_bool) == Some(true) {
                    out.push(ModelEvent::ReasoningDelta(t.to_owned()));
                } else {
                    out.push(ModelEvent::TextDelta(t.to_owned()));
                }
            }
            if let Some(call) = part.get("functionCall") {
                if let Some(signature) = part.get("thoughtSignature").and_then(Value::as_str) {
                    out.push(ModelEvent::ReasoningBlock(ReasoningBlock {
                        text: String::new(),
                        signature: Some(format!("{SIGNATURE_PREFIX}{}:{signature}", self.calls)),
                    }));
                }
                out.push(ModelEvent::ToolCall(self.call(call)));
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish = Some(map_finish(reason));
        }
        Ok(out)
    }

    /// The stream ended: the usage measured and why it stopped. A stream that ended before
    /// any finish reason (or a refused prompt) was cut off.
    pub fn finish(self) -> Result<Vec<ModelEvent>, ProviderError> {
        let Some(reason) = self.finish else {
            return Err(ProviderError::stream_interrupted("a finish reason"));
        };
        // Gemini says STOP for a turn that ends in calls.
        let reason = if reason == FinishReason::Stop && self.calls > 0 { FinishReason::ToolCalls } else { reason };
        Ok(self.usage.map(ModelEvent::Usage).into_iter().chain([ModelEvent::Finish(reason)]).collect())
    }

    fn call(&mut self, call: &Value) -> ToolCall {
        self.calls += 1;
        let id = match call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty()) {
            Some(id) => id.to_owned(),
            None => format!("{GENERATED_ID_PREFIX}{}", self.earlier_calls + self.calls),
        };
        let arguments = match call.get("args") {
            None | Some(Value::Null) => "{}".to_owned(),
            Some(args) => args.to_string(),
        };
        ToolCall { id, name: call.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(), arguments }
    }
}

fn map_finish(reason: &str) -> FinishReason {
    match reason {
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// `usageMetadata`, when it counts anything. Thinking tokens are output (they are billed as
/// such) and reported again as reasoning.
fn usage(u: &Value) -> Option<Usage> {
    let get = |k: &str| u.get(k).and_then(Value::as_u64);
    let prompt = get("promptTokenCount");
    let candidates = get("candidatesTokenCount");
    let thoughts = get("thoughtsTokenCount");
    if prompt.is_none() && candidates.is_none() && thoughts.is_none() {
        return None;
    }
    let input = prompt.unwrap_or(0) + get("toolUsePromptTokenCount").unwrap_or(0);
    let output = candidates.unwrap_or(0) + thoughts.unwrap_or(0);
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: get("totalTokenCount").unwrap_or(input + output),
        cached_input_tokens: get("cachedContentTokenCount"),
        reasoning_tokens: thoughts,
    })
}

/// An error object in the stream, classified by its HTTP code (or its gRPC status name).
fn stream_error(err: &Value) -> ProviderError {
    let code = err.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
    let status = code.unwrap_or_else(|| match err.get("status").and_then(Value::as_str).unwrap_or_default() {
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "RESOURCE_EXHAUSTED" => 429,
        "DEADLINE_EXCEEDED" => 504,
        "UNAVAILABLE" => 503,
        _ => 500,
    });
    let mut e = ProviderError::from_status(status, &err.to_string());
    e.type_name = "StreamError";
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolSpec;

    fn binding(settings: &[(&str, Value)]) -> ModelBinding {
        let mut b = ModelBinding { provider: GOOGLE.into(), model: "gemini-2.5-flash".into(), ..Default::default() };
        for (k, v) in settings {
            b.provider_settings.insert((*k).to_owned(), v.clone());
        }
        b
    }

    fn provider() -> GoogleProvider {
        GoogleProvider::new(reqwest::Client::new(), "AIza-test-key".into(), None).unwrap()
    }

    #[test]
    fn the_key_is_never_in_the_url() {
        let url = provider().url("models/gemini-2.5-flash").unwrap();
        assert_eq!(
            url.as_str(),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert!(!url.as_str().contains("AIza") && !url.as_str().contains("key="));
        let proxied = GoogleProvider::new(reqwest::Client::new(), "k".into(), Some("http://127.0.0.1:9/g/".into()))
            .unwrap()
            .url("a/b")
            .unwrap();
        assert_eq!(proxied.as_str(), "http://127.0.0.1:9/g/v1beta/models/a%2Fb:streamGenerateContent?alt=sse");
        assert!(GoogleProvider::new(reqwest::Client::new(), "k".into(), Some("generativelanguage".into())).is_err());
        assert!(GoogleProvider::new(reqwest::Client::new(), String::new(), None).is_err());
    }

    #[test]
    fn every_setting_is_checked_and_wrong_values_are_compile_errors() {
        let p = provider();
        let good = binding(&[
            (SAFETY_HARASSMENT_SETTING, json!("BLOCK_ONLY_HIGH")),
            (SAFETY_HATE_SPEECH_SETTING, json!("BLOCK_NONE")),
            (SAFETY_SEXUALLY_EXPLICIT_SETTING, json!("BLOCK_LOW_AND_ABOVE")),
            (SAFETY_DANGEROUS_CONTENT_SETTING, json!("BLOCK_MEDIUM_AND_ABOVE")),
            (SAFETY_CIVIC_INTEGRITY_SETTING, json!("OFF")),
            (THINKING_BUDGET_SETTING, json!(-1)),
            (THINKING_INCLUDE_THOUGHTS_SETTING, json!(true)),
        ]);
        assert_eq!(p.check_binding(&good), Vec::new());
        assert_eq!(p.known_settings().len(), 7);
        for budget in [json!(0), json!(65_535), json!(512)] {
            assert!(p.check_binding(&binding(&[(THINKING_BUDGET_SETTING, budget)])).is_empty());
        }
        let bad = [
            (SAFETY_HARASSMENT_SETTING, json!("block_only_high")),
            (SAFETY_CIVIC_INTEGRITY_SETTING, json!("HARM_BLOCK_THRESHOLD_UNSPECIFIED")),
            (SAFETY_HATE_SPEECH_SETTING, json!(3)),
            (THINKING_BUDGET_SETTING, json!(-2)),
            (THINKING_BUDGET_SETTING, json!(65_536)),
            (THINKING_BUDGET_SETTING, json!(1.5)),
            (THINKING_BUDGET_SETTING, json!("512")),
            (THINKING_INCLUDE_THOUGHTS_SETTING, json!("yes")),
        ];
        for (key, value) in bad {
            let problems = p.check_binding(&binding(&[(key, value.clone())]));
            assert_eq!(problems.len(), 1, "{key} = {value}");
            assert_eq!(problems[0].0, format!("model.providerSettings.{key}"));
        }
        let mut effort = binding(&[]);
        effort.reasoning_effort = Some(crate::definition::ReasoningEffort::Low);
        assert_eq!(p.check_binding(&effort)[0].0, "model.reasoningEffort");
        effort.reasoning_effort = None;
        effort.model = "../v1/files".into();
        assert_eq!(p.check_binding(&effort)[0].0, "model.model");
    }

    fn conversation() -> ModelRequest {
        let mut r = ModelRequest::from_binding(&binding(&[
            (SAFETY_HARASSMENT_SETTING, json!("BLOCK_ONLY_HIGH")),
            (SAFETY_DANGEROUS_CONTENT_SETTING, json!("OFF")),
            (THINKING_BUDGET_SETTING, json!(512)),
            (THINKING_INCLUDE_THOUGHTS_SETTING, json!(true)),
        ]));
        r.system = Some("You are terse.".into());
        r.temperature = Some(0.3);
        r.top_p = Some(0.8);
        r.max_output_tokens = Some(1024);
        r.messages = vec![
            Message::user("Order 4182, and the weather in Paris?"),
            Message::Assistant {
                text: Some("Checking both.".into()),
                tool_calls: vec![
                    ToolCall {
                        id: "gemini_call_1".into(),
                        name: "get_order_status".into(),
                        arguments: r#"{"orderId":"4182"}"#.into(),
                    },
                    ToolCall {
                        id: "fc-7f3a".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                ],
                reasoning: vec![ReasoningBlock {
                    text: String::new(),
                    signature: Some("gemini:0:CsYBAY89a1s=".into()),
                }],
            },
            Message::Tool {
                call_id: "gemini_call_1".into(),
                name: "get_order_status".into(),
                content: r#"{"status":"shipped"}"#.into(),
                is_error: false,
            },
            Message::Tool {
                call_id: "fc-7f3a".into(),
                name: "get_weather".into(),
                content: "upstream timeout".into(),
                is_error: true,
            },
        ];
        r.tools = vec![ToolSpec {
            name: "get_order_status".into(),
            description: "Looks up an order.".into(),
            parameters: json!({"type": "object", "properties": {"orderId": {"type": "string"}}, "additionalProperties": false}),
        }]
        .into();
        r
    }

    #[test]
    fn the_conversation_goes_as_contents_with_function_parts() {
        let b = build_body(&conversation());
        assert_eq!(b["systemInstruction"], json!({"parts": [{"text": "You are terse."}]}));
        assert_eq!(
            b["contents"],
            json!([
                {"role": "user", "parts": [{"text": "Order 4182, and the weather in Paris?"}]},
                {"role": "model", "parts": [
                    {"text": "Checking both."},
                    // A generated id stays here; the signature goes back on the call it came with.
                    {"functionCall": {"name": "get_order_status", "args": {"orderId": "4182"}}, "thoughtSignature": "CsYBAY89a1s="},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "fc-7f3a"}},
                ]},
                // Both answers in one user turn; an error under `error`, text as a string.
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "get_order_status", "response": {"output": {"status": "shipped"}}}},
                    {"functionResponse": {"name": "get_weather", "response": {"error": "upstream timeout"}, "id": "fc-7f3a"}},
                ]},
            ])
        );
        assert_eq!(
            b["tools"],
            json!([{"functionDeclarations": [{"name": "get_order_status", "description": "Looks up an order.",
                "parametersJsonSchema": {"type": "object", "properties": {"orderId": {"type": "string"}}, "additionalProperties": false}}]}])
        );
    }

    #[test]
    fn settings_and_structured_output_go_in_generation_config_and_safety_settings() {
        let mut r = conversation();
        let b = build_body(&r);
        assert_eq!(
            b["generationConfig"],
            json!({"temperature": 0.3, "topP": 0.8, "maxOutputTokens": 1024,
                   "thinkingConfig": {"thinkingBudget": 512, "includeThoughts": true}})
        );
        assert_eq!(
            b["safetySettings"],
            json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"},
                   {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "OFF"}])
        );
        r.response_format = Some(ResponseFormat::Json);
        assert_eq!(build_body(&r)["generationConfig"]["responseMimeType"], "application/json");
        let schema = json!({"type": "object", "properties": {"eta": {"type": "string"}}, "required": ["eta"]});
        r.response_format = Some(ResponseFormat::JsonSchema {
            name: "eta".into(),
            schema: schema.clone(),
            description: None,
            strict: None,
        });
        let b = build_body(&r);
        assert_eq!(b["generationConfig"]["responseMimeType"], "application/json");
        assert_eq!(b["generationConfig"]["responseJsonSchema"], schema);

        // Nothing set: no generationConfig, no safetySettings, no tools.
        let mut bare = ModelRequest::from_binding(&binding(&[]));
        bare.messages = vec![Message::user("hi")];
        let b = build_body(&bare);
        assert_eq!(b, json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}));
    }

    #[test]
    fn generated_ids_number_on_after_the_conversations_calls() {
        let mut p = GenerateStreamParser::for_request(&conversation());
        let out = p
            .push(r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"a","args":{}}},{"functionCall":{"name":"b"}},{"functionCall":{"id":"given","name":"c","args":{"x":1}}}],"role":"model"},"finishReason":"STOP","index":0}]}"#)
            .unwrap();
        let ids: Vec<(String, String)> = out
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCall(c) => Some((c.id.clone(), c.arguments.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            ids,
            [
                ("gemini_call_3".into(), "{}".into()),
                ("gemini_call_4".into(), "{}".into()),
                ("given".into(), r#"{"x":1}"#.into())
            ]
        );
        assert_eq!(p.finish().unwrap(), vec![ModelEvent::Finish(FinishReason::ToolCalls)], "no usage was measured");
    }

    #[test]
    fn errors_are_classified() {
        let mut p = GenerateStreamParser::default();
        let e = p
            .push(r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#)
            .unwrap_err();
        assert_eq!((e.kind, e.status), (ProviderErrorKind::ServerError, Some(503)));
        let e = p.push(r#"{"error":{"message":"quota","status":"RESOURCE_EXHAUSTED"}}"#).unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::RateLimited);
        let bad_key = json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}});
        let e = classify(400, &bad_key.to_string());
        assert_eq!((e.kind, e.status), (ProviderErrorKind::Unauthorized, Some(400)));
        assert!(!e.is_retryable());
        let bad_request =
            json!({"error": {"code": 400, "message": "Invalid JSON payload", "status": "INVALID_ARGUMENT"}});
        assert_eq!(classify(400, &bad_request.to_string()).kind, ProviderErrorKind::Rejected);
        assert_eq!(classify(429, "{}").kind, ProviderErrorKind::RateLimited);
        assert_eq!(classify(429, "{}").retry_after, None);
        let quota = json!({"error": {"code": 429, "message": "You exceeded your current quota.", "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "36.4s"}]}});
        let e = classify(429, &quota.to_string());
        assert_eq!((e.kind, e.retry_after), (ProviderErrorKind::RateLimited, Some(std::time::Duration::from_secs(37))));
    }

    #[test]
    fn only_gemini_signatures_are_recognised_as_such() {
        assert!(is_gemini_signature("gemini:0:CsYB"));
        assert!(!is_gemini_signature("EqQBCkgIBRAB"));
        let blocks = [
            ReasoningBlock { text: "t".into(), signature: Some("EqQBCkgIBRAB".into()) },
            ReasoningBlock { text: String::new(), signature: Some("gemini:1:B".into()) },
        ];
        assert_eq!(signature_of(&blocks, 1), Some("B"));
        assert_eq!(signature_of(&blocks, 0), None);
    }
}
