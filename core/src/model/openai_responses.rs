//! The OpenAI Responses API (`openai-responses`, and `{name}-responses` for a compatible
//! endpoint that enables it): the request body and the stream parser. The endpoint, the key
//! and the HTTP call are [`super::openai::OpenAiProvider`]'s, shared with Chat Completions.
//!
//! The conversation goes as input items: user and assistant text as messages, the model's
//! earlier calls as `function_call` items and the tools' answers as `function_call_output`
//! items; the system prompt is `instructions`. Tracon holds the conversation and sends it
//! whole every turn, so nothing is stored upstream (`store: false`) and no
//! `previous_response_id` is used. Function tools go with `strict: false`: the API's default
//! is strict, which refuses every schema that does not list all its properties as required,
//! and the same tool must work on both surfaces.
//!
//! [`ResponsesStreamParser`] is the pure part: it takes the named events (`response.*`) and
//! yields [`ModelEvent`]s — text deltas, a whole call per `function_call` item, usage from
//! `response.completed` / `response.incomplete` only (never invented), and the finish reason.
//! It is tested against recorded transcripts.

use std::collections::BTreeMap;

use futures::{StreamExt, stream};
use serde::Serialize;
use serde_json::Value;

use super::sse;
use super::{FinishReason, Message, ModelEvent, ModelRequest, ModelStream, ProviderError, ToolCall, Usage};
use crate::definition::ResponseFormat;

/// `tool_choice` in the Responses API's words (`auto` is left unsaid: it is the default).
fn responses_tool_choice(choice: &super::ToolChoice) -> Option<serde_json::Value> {
    use super::ToolChoice;
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(serde_json::Value::from("none")),
        ToolChoice::Required => Some(serde_json::Value::from("required")),
        ToolChoice::Function(name) => Some(serde_json::json!({"type": "function", "name": name})),
    }
}

/// The Responses request body, borrowing everything from the request.
#[derive(Serialize)]
pub struct ResponsesBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    input: Vec<InputItem<'a>>,
    stream: bool,
    store: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<FunctionTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<TextConfig<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InputItem<'a> {
    Message { role: &'static str, content: &'a str },
    FunctionCall { call_id: &'a str, name: &'a str, arguments: &'a str },
    FunctionCallOutput { call_id: &'a str, output: &'a str },
}

#[derive(Serialize)]
struct FunctionTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct Reasoning {
    effort: &'static str,
}

#[derive(Serialize)]
struct TextConfig<'a> {
    format: TextFormat<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TextFormat<'a> {
    JsonObject,
    JsonSchema {
        name: &'a str,
        schema: &'a Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

impl<'a> ResponsesBody<'a> {
    pub fn new(request: &'a ModelRequest) -> Self {
        let mut input = Vec::with_capacity(request.messages.len());
        for m in &request.messages {
            match m {
                Message::User { text } => input.push(InputItem::Message { role: "user", content: text }),
                Message::Assistant { text, tool_calls, .. } => {
                    if let Some(text) = text.as_deref().filter(|t| !t.is_empty()) {
                        input.push(InputItem::Message { role: "assistant", content: text });
                    }
                    input.extend(tool_calls.iter().map(|c| InputItem::FunctionCall {
                        call_id: &c.id,
                        name: &c.name,
                        arguments: &c.arguments,
                    }));
                }
                Message::Tool { call_id, content, .. } => {
                    input.push(InputItem::FunctionCallOutput { call_id, output: content })
                }
            }
        }
        let tools: Vec<FunctionTool<'a>> = request
            .tools
            .iter()
            .map(|t| FunctionTool {
                kind: "function",
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
                strict: false,
            })
            .collect();
        let format = match &request.response_format {
            None | Some(ResponseFormat::Text) => None,
            Some(ResponseFormat::Json) => Some(TextFormat::JsonObject),
            Some(ResponseFormat::JsonSchema { name, schema, description, strict }) => {
                Some(TextFormat::JsonSchema { name, schema, description: description.as_deref(), strict: *strict })
            }
        };
        Self {
            model: &request.model,
            instructions: request.system.as_deref(),
            input,
            stream: true,
            store: false,
            parallel_tool_calls: (!tools.is_empty()).then_some(request.parallel_tool_calls),
            tool_choice: if tools.is_empty() { None } else { responses_tool_choice(&request.tool_choice) },
            tools,
            temperature: request.temperature,
            top_p: request.top_p,
            max_output_tokens: request.max_output_tokens,
            reasoning: request.reasoning_effort.map(|e| Reasoning { effort: e.as_wire() }),
            text: format.map(|format| TextConfig { format }),
        }
    }
}

/// The request body as JSON (for inspection and tests; the provider serialises
/// [`ResponsesBody`] directly).
pub fn build_body(request: &ModelRequest) -> Value {
    serde_json::to_value(ResponsesBody::new(request)).unwrap_or(Value::Null)
}

/// Sends a Responses request (built and authorised by the provider) and reads its answer.
pub(crate) async fn stream_responses(builder: reqwest::RequestBuilder) -> Result<ModelStream, ProviderError> {
    let response = sse::send(builder).await?;
    if sse::is_json(&response) {
        // A compatible server that ignored `stream: true` answered with a whole response.
        let body = sse::json_body(response).await?;
        let events = parse_response(&body)?;
        return Ok(stream::iter(events.into_iter().map(Ok)).boxed());
    }
    Ok(sse::model_events(
        sse::events(response),
        |p: &mut ResponsesStreamParser, ev| p.push(&ev.event, &ev.data),
        ResponsesStreamParser::finish,
    ))
}

/// A `function_call` output item still being streamed.
#[derive(Default)]
struct PendingCall {
    item_id: String,
    call_id: String,
    name: String,
    arguments: String,
}

/// Turns Responses API stream events into [`ModelEvent`]s.
#[derive(Default)]
pub struct ResponsesStreamParser {
    /// By `output_index`.
    calls: BTreeMap<u64, PendingCall>,
    model_reported: bool,
    calls_emitted: bool,
    ended: bool,
}

impl ResponsesStreamParser {
    /// Feeds one event (`event:` name and `data:` payload; the payload's `type` wins).
    pub fn push(&mut self, event: &str, data: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(Vec::new());
        }
        let v: Value =
            serde_json::from_str(data).map_err(|e| ProviderError::protocol(format!("invalid stream event: {e}")))?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(event);
        let mut out = Vec::new();
        match kind {
            "response.created" | "response.in_progress" | "response.queued" => {
                out.extend(self.model_of(&v["response"]));
            }
            "response.output_item.added" => {
                let item = &v["item"];
                if item.get("type").and_then(Value::as_str) == Some("function_call") {
                    let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
                    self.calls.insert(
                        index,
                        PendingCall {
                            item_id: str_of(item, "id").to_owned(),
                            call_id: str_of(item, "call_id").to_owned(),
                            name: str_of(item, "name").to_owned(),
                            arguments: str_of(item, "arguments").to_owned(),
                        },
                    );
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(call) = self.call_of(&v) {
                    call.arguments.push_str(str_of(&v, "delta"));
                }
            }
            "response.function_call_arguments.done" => {
                // The whole text, authoritative over the deltas.
                if let Some(arguments) = v.get("arguments").and_then(Value::as_str)
                    && let Some(call) = self.call_of(&v)
                {
                    arguments.clone_into(&mut call.arguments);
                }
            }
            "response.output_item.done" => {
                let index = v.get("output_index").and_then(Value::as_u64);
                out.extend(self.item_done(index, &v["item"], false));
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta = str_of(&v, "delta");
                if !delta.is_empty() {
                    out.push(ModelEvent::TextDelta(delta.to_owned()));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let delta = str_of(&v, "delta");
                if !delta.is_empty() {
                    out.push(ModelEvent::ReasoningDelta(delta.to_owned()));
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let named = kind.trim_start_matches("response.");
                out.extend(self.terminal(&v["response"], named)?);
            }
            "error" => return Err(failure(v.get("error").filter(|e| e.is_object()).unwrap_or(&v))),
            _ => {} // content parts, annotations, done events of text, and future event types
        }
        Ok(out)
    }

    /// The stream ended; one that ended before a terminal `response.*` event was cut off.
    pub fn finish(self) -> Result<Vec<ModelEvent>, ProviderError> {
        if self.ended { Ok(Vec::new()) } else { Err(ProviderError::stream_interrupted("response.completed")) }
    }

    fn model_of(&mut self, response: &Value) -> Option<ModelEvent> {
        if self.model_reported {
            return None;
        }
        let model = response.get("model").and_then(Value::as_str).filter(|m| !m.is_empty())?;
        self.model_reported = true;
        Some(ModelEvent::Model(model.to_owned()))
    }

    /// The pending call an arguments event is about: by `output_index`, else by `item_id`.
    fn call_of(&mut self, v: &Value) -> Option<&mut PendingCall> {
        let index = v.get("output_index").and_then(Value::as_u64);
        let item_id = str_of(v, "item_id");
        match index {
            Some(i) if self.calls.contains_key(&i) => self.calls.get_mut(&i),
            _ => self.calls.values_mut().find(|c| !item_id.is_empty() && c.item_id == item_id),
        }
    }

    /// A finished output item: a whole call for a `function_call`; the text of a `message`
    /// only when `with_text` (a whole response — streamed text came as deltas already).
    fn item_done(&mut self, index: Option<u64>, item: &Value, with_text: bool) -> Vec<ModelEvent> {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                let pending = index.and_then(|i| self.calls.remove(&i)).unwrap_or_default();
                let pick = |done: &str, streamed: String| if done.is_empty() { streamed } else { done.to_owned() };
                let id = pick(str_of(item, "call_id"), pending.call_id);
                let id = if id.is_empty() { pick(str_of(item, "id"), pending.item_id) } else { id };
                let call = ToolCall {
                    id,
                    name: pick(str_of(item, "name"), pending.name),
                    arguments: pick(str_of(item, "arguments"), pending.arguments),
                };
                self.calls_emitted = true;
                vec![tool_call(call)]
            }
            Some("message") if with_text => item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|part| {
                    let text = part.get("text").or_else(|| part.get("refusal")).and_then(Value::as_str)?;
                    (!text.is_empty()).then(|| ModelEvent::TextDelta(text.to_owned()))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// `response.completed`, `.incomplete` or `.failed`: calls still pending, the usage the
    /// upstream measured, and why it stopped. `named` is the status the event's name says,
    /// for a response object that does not carry its own.
    fn terminal(&mut self, response: &Value, named: &str) -> Result<Vec<ModelEvent>, ProviderError> {
        let status = response.get("status").and_then(Value::as_str).unwrap_or(named);
        if status == "failed" {
            return Err(failure(response.get("error").filter(|e| e.is_object()).unwrap_or(response)));
        }
        self.ended = true;
        let mut out: Vec<ModelEvent> = self.model_of(response).into_iter().collect();
        let pending = std::mem::take(&mut self.calls);
        for call in pending.into_values() {
            self.calls_emitted = true;
            out.push(tool_call(ToolCall { id: call.call_id, name: call.name, arguments: call.arguments }));
        }
        out.extend(response.get("usage").and_then(usage).map(ModelEvent::Usage));
        let reason = match (status, response.pointer("/incomplete_details/reason").and_then(Value::as_str)) {
            ("incomplete", Some("max_output_tokens")) => FinishReason::Length,
            ("incomplete", Some("content_filter")) => FinishReason::ContentFilter,
            ("incomplete", _) => FinishReason::Other,
            _ if self.calls_emitted => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        out.push(ModelEvent::Finish(reason));
        Ok(out)
    }
}

fn str_of<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn tool_call(mut call: ToolCall) -> ModelEvent {
    if call.arguments.trim().is_empty() {
        "{}".clone_into(&mut call.arguments);
    }
    ModelEvent::ToolCall(call)
}

/// The usage object of a response, when the upstream measured one.
fn usage(u: &Value) -> Option<Usage> {
    let input = u.get("input_tokens").and_then(Value::as_u64);
    let output = u.get("output_tokens").and_then(Value::as_u64);
    if input.is_none() && output.is_none() {
        return None;
    }
    let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
    Some(Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: u.get("total_tokens").and_then(Value::as_u64).unwrap_or(input + output),
        cached_input_tokens: u.pointer("/input_tokens_details/cached_tokens").and_then(Value::as_u64),
        reasoning_tokens: u.pointer("/output_tokens_details/reasoning_tokens").and_then(Value::as_u64),
    })
}

/// A failed response or an `error` event, classified by its code: the Responses API names
/// the failure (`server_error`, `rate_limit_exceeded`, `invalid_prompt`, …) instead of
/// giving it a status.
fn failure(err: &Value) -> ProviderError {
    let status = match str_of(err, "code") {
        "rate_limit_exceeded" => 429,
        "vector_store_timeout" => 408,
        // A failure the upstream did not name is its own.
        "server_error" | "" => 500,
        _ => 400,
    };
    let mut e = ProviderError::from_status(status, &err.to_string());
    e.type_name = "StreamError";
    e
}

/// A whole (non-streamed) response, from a compatible server that ignored `stream: true`.
pub fn parse_response(body: &Value) -> Result<Vec<ModelEvent>, ProviderError> {
    let mut parser = ResponsesStreamParser::default();
    let mut out: Vec<ModelEvent> = parser.model_of(body).into_iter().collect();
    for item in body.get("output").and_then(Value::as_array).into_iter().flatten() {
        out.extend(parser.item_done(None, item, true));
    }
    out.extend(parser.terminal(body, "completed")?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::definition::{ModelBinding, ReasoningEffort};
    use crate::model::{ProviderErrorKind, ToolSpec};

    fn request() -> ModelRequest {
        let mut r = ModelRequest::from_binding(&ModelBinding {
            provider: "openai-responses".into(),
            model: "gpt-4.1".into(),
            temperature: Some(0.2),
            top_p: Some(0.9),
            max_output_tokens: Some(800),
            reasoning_effort: Some(ReasoningEffort::High),
            ..Default::default()
        });
        r.system = Some("You are terse.".into());
        r.messages = vec![
            Message::user("Where is order 4182?"),
            Message::Assistant {
                text: Some("Checking.".into()),
                tool_calls: vec![
                    ToolCall {
                        id: "call_a".into(),
                        name: "get_order_status".into(),
                        arguments: r#"{"orderId":"4182"}"#.into(),
                    },
                    ToolCall {
                        id: "call_b".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                    },
                ],
                reasoning: vec![],
            },
            Message::Tool {
                call_id: "call_a".into(),
                name: "get_order_status".into(),
                content: "shipped".into(),
                is_error: false,
            },
            Message::Tool {
                call_id: "call_b".into(),
                name: "get_weather".into(),
                content: "boom".into(),
                is_error: true,
            },
        ];
        r.tools = vec![ToolSpec {
            name: "get_order_status".into(),
            description: "Looks up an order.".into(),
            parameters: json!({"type": "object", "properties": {"orderId": {"type": "string"}}}),
        }]
        .into();
        r
    }

    #[test]
    fn the_conversation_goes_as_input_items_with_the_system_prompt_as_instructions() {
        let b = build_body(&request());
        assert_eq!(b["instructions"], "You are terse.");
        assert_eq!(
            b["input"],
            json!([
                {"type": "message", "role": "user", "content": "Where is order 4182?"},
                {"type": "message", "role": "assistant", "content": "Checking."},
                {"type": "function_call", "call_id": "call_a", "name": "get_order_status", "arguments": "{\"orderId\":\"4182\"}"},
                {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call_output", "call_id": "call_a", "output": "shipped"},
                {"type": "function_call_output", "call_id": "call_b", "output": "boom"},
            ])
        );
        assert_eq!(
            b["tools"],
            json!([{"type": "function", "name": "get_order_status", "description": "Looks up an order.",
                    "parameters": {"type": "object", "properties": {"orderId": {"type": "string"}}}, "strict": false}])
        );
        assert_eq!(b["parallel_tool_calls"], false);
        assert_eq!((b["stream"].clone(), b["store"].clone()), (json!(true), json!(false)));
    }

    #[test]
    fn settings_map_to_their_responses_fields() {
        let mut r = request();
        let b = build_body(&r);
        assert_eq!(b["temperature"], 0.2);
        assert_eq!(b["top_p"], 0.9);
        assert_eq!(b["max_output_tokens"], 800);
        assert_eq!(b["reasoning"], json!({"effort": "high"}));
        assert!(b.get("text").is_none() && b.get("max_tokens").is_none() && b.get("messages").is_none());

        r.response_format = Some(ResponseFormat::Json);
        assert_eq!(build_body(&r)["text"], json!({"format": {"type": "json_object"}}));
        r.response_format = Some(ResponseFormat::JsonSchema {
            name: "order".into(),
            schema: json!({"type": "object", "properties": {"id": {"type": "string"}}}),
            description: None,
            strict: Some(true),
        });
        assert_eq!(
            build_body(&r)["text"],
            json!({"format": {"type": "json_schema", "name": "order", "strict": true,
                              "schema": {"type": "object", "properties": {"id": {"type": "string"}}}}})
        );

        // No tools offered: no tool fields at all; no system: no instructions.
        r.tools = Vec::new().into();
        r.system = None;
        let b = build_body(&r);
        assert!(b.get("tools").is_none() && b.get("parallel_tool_calls").is_none() && b.get("instructions").is_none());
    }

    #[test]
    fn failures_are_classified_by_their_code() {
        let mut p = ResponsesStreamParser::default();
        let failed = |code: &str| {
            json!({"type": "response.failed", "sequence_number": 3,
                   "response": {"id": "resp_1", "status": "failed", "error": {"code": code, "message": "x"}, "usage": null}})
            .to_string()
        };
        let kind = |p: &mut ResponsesStreamParser, data: String| p.push("", &data).unwrap_err().kind;
        assert_eq!(kind(&mut p, failed("server_error")), ProviderErrorKind::ServerError);
        assert_eq!(kind(&mut p, failed("rate_limit_exceeded")), ProviderErrorKind::RateLimited);
        assert_eq!(kind(&mut p, failed("invalid_prompt")), ProviderErrorKind::Rejected);
        assert_eq!(kind(&mut p, failed("vector_store_timeout")), ProviderErrorKind::Timeout);
        let error_event =
            json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null});
        assert_eq!(kind(&mut p, error_event.to_string()), ProviderErrorKind::RateLimited);
        let e = p.push("error", r#"{"type":"error","code":null,"message":"oops"}"#).unwrap_err();
        assert_eq!((e.kind, e.type_name), (ProviderErrorKind::ServerError, "StreamError"));
    }

    #[test]
    fn a_whole_response_yields_what_the_stream_would() {
        let body = json!({
            "id": "resp_1", "object": "response", "status": "completed", "model": "qwen3:8b",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "lookup", "arguments": "", "status": "completed"}
            ],
            "usage": null
        });
        assert_eq!(
            parse_response(&body).unwrap(),
            vec![
                ModelEvent::Model("qwen3:8b".into()),
                ModelEvent::TextDelta("Looking.".into()),
                ModelEvent::ToolCall(ToolCall { id: "call_9".into(), name: "lookup".into(), arguments: "{}".into() }),
                ModelEvent::Finish(FinishReason::ToolCalls),
            ],
            "a null usage stays unreported"
        );
    }
}
