//! OpenAI's Responses and Conversations APIs: `POST /v1/responses`,
//! `GET /v1/responses/{id}`, and `/v1/conversations` (create, read, delete, list items).
//!
//! `model` is an **agent name**, and every response is a recorded run with the checks of the
//! chat route ([`admit`]: run policy, attribution, session ownership, quotas; scope
//! `RunsWrite`; tenancy). A response's id is `resp_<run id, simple hex>`: the run that
//! produced it.
//!
//! Where the conversation lives:
//!
//! - `store: true` (the default) saves the whole conversation up to and including the
//!   response as a **session named after the response**. `previous_response_id` loads that
//!   session's items as history, and the new response writes a new session under its own id
//!   (a different id than the one read, so no generation applies and the write is
//!   unconditional). `store: false` saves nothing.
//! - `conversation` runs in that session instead (a versioned append: a lost race is
//!   `409 session_conflict`, or an `error` event in a stream). A conversation id is a
//!   **reservation**: `POST /v1/conversations` creates the session row, so the id answers
//!   `200` before any call carries it, and a `404` means "not yours".
//!
//! A conversation id and a `previous_response_id` are untrusted input: each use is checked
//! against the tenant, the host's run policy and session ownership, and anything that is not
//! the caller's answers exactly like something that does not exist.
//!
//! Input is text: message items (`user`, `assistant`, `system`/`developer`, the last two
//! appended to the agent's own instructions like `instructions`).
//!
//! Client-side tools: when the model calls one of the agent's client-side tools, the
//! response's output ends with a `function_call` item (streamed: `output_item.added`,
//! `function_call_arguments.delta`/`.done`, `output_item.done`). The caller answers with a
//! `function_call_output` item — chained with `previous_response_id`, in the conversation,
//! or with the `function_call` item in the input — and the turn goes on. Input may carry
//! calls of client-side tools only: a server-side tool's result cannot come from outside.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Path};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::DropGuard;
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::error::StoreError;
use tracon_core::events::ClientToolCall;
use tracon_core::events::RunEvent;
use tracon_core::identity::Caller;
use tracon_core::model::{Message, ToolCall, Usage};
use tracon_core::names::{AgentName, RunId, SessionId, TenantId};
use tracon_core::ports::Clock;
use tracon_core::runs::admission::{Admission, Attributed, Refusal, admit, user_id};
use tracon_core::runs::launch::{Delivery, History, Launched, LiveRun, Start, launch, new_run_id};
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::{RunRecord, RunStatus};
use tracon_core::sessions::{SessionItem, SessionRecord, SessionWrite};

use tracon_core::sessions::ownership::Use;

use crate::error::{ApiError, session_agent_mismatch, start_error};
use crate::extract::{ApiJson, Ctx, header_pairs};
use crate::openai::{OpenAiError, OpenAiResult, approval_error, caller, checked_fields, failure_error, invalid};
use crate::sse;
use crate::state::AppState;
use tracon_core::runs::caller::CallerAdditions;

// ---- ids ------------------------------------------------------------------------------------

/// `resp_<run id in simple hex>`.
pub(super) fn response_id(run: RunId) -> String {
    format!("resp_{}", run.0.simple())
}

/// The run behind a response id, when the id is one Tracon could have written.
fn parse_response_id(raw: &str) -> Option<RunId> {
    let hex = raw.strip_prefix("resp_")?;
    let id = uuid::Uuid::try_parse(hex).ok()?;
    // Only the canonical spelling: it is also the session's name.
    (id.simple().to_string() == hex).then_some(RunId(id))
}

/// The `i`-th message a run answered with.
pub(super) fn message_id(run: RunId, i: usize) -> String {
    format!("msg_{}_{i}", run.0.simple())
}

/// A conversation item's id: its position in the conversation.
pub(super) fn item_id(sequence: u64) -> String {
    format!("msg_{sequence:06}")
}

// ---- errors ---------------------------------------------------------------------------------

// A not-found answer names no id: what is missing and what is not the caller's read the same,
// byte for byte.
pub(super) fn not_found(error_type: &'static str, param: Option<&str>, message: &str) -> OpenAiError {
    let e = ApiError::new(StatusCode::NOT_FOUND, error_type, message);
    OpenAiError(match param {
        Some(p) => e.with("field", p),
        None => e,
    })
}

pub(super) fn response_not_found() -> OpenAiError {
    not_found("response_not_found", None, "The response does not exist.")
}

fn previous_not_found() -> OpenAiError {
    not_found("previous_response_not_found", Some("previous_response_id"), "The previous response does not exist.")
}

pub(super) fn conversation_not_found(param: Option<&str>) -> OpenAiError {
    not_found("conversation_not_found", param, "The conversation does not exist.")
}

pub(super) fn session_conflict() -> OpenAiError {
    OpenAiError(ApiError::new(
        StatusCode::CONFLICT,
        "session_conflict",
        "Another turn saved this conversation first; the conversation moved on. Retry the turn.",
    ))
}

// ---- input ----------------------------------------------------------------------------------

/// One input item, checked.
pub(super) enum Item {
    /// `system`/`developer` text: appended to the agent's instructions.
    Instructions(String),
    /// A user or assistant message, a `function_call` (an assistant message with a call) or
    /// a `function_call_output` (a tool message whose tool name is found later, from the
    /// call it answers).
    Turn(Message),
}

/// Message items: a role and text content (a string, or `input_text`/`output_text` parts).
pub(super) fn parse_items(items: &[Value], param: &str) -> OpenAiResult<Vec<Item>> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{param}[{i}]");
        let field = |name: &str| {
            item.get(name)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| invalid(&format!("{at}.{name}"), format!("'{name}' is required.")))
        };
        match item.get("type").and_then(Value::as_str) {
            None | Some("message") => {}
            Some("function_call") => {
                let call = ToolCall {
                    id: field("call_id")?.to_owned(),
                    name: field("name")?.to_owned(),
                    arguments: item.get("arguments").and_then(Value::as_str).unwrap_or("{}").to_owned(),
                };
                // Calls that follow an assistant message (or each other) belong to it.
                match out.last_mut() {
                    Some(Item::Turn(Message::Assistant { tool_calls, .. })) => tool_calls.push(call),
                    _ => out.push(Item::Turn(Message::Assistant {
                        text: None,
                        tool_calls: vec![call],
                        reasoning: Vec::new(),
                    })),
                }
                continue;
            }
            Some("function_call_output") => {
                let call_id = field("call_id")?.to_owned();
                let content = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    output @ Some(Value::Array(_)) => content_text(output, &format!("{at}.output"))?,
                    _ => return Err(invalid(&format!("{at}.output"), "'output' must be a string.")),
                };
                out.push(Item::Turn(Message::Tool { call_id, name: String::new(), content, is_error: false }));
                continue;
            }
            Some(kind) => {
                return Err(invalid(
                    &format!("{at}.type"),
                    format!("'{kind}' items are not supported: send message items with text content."),
                ));
            }
        }
        let text = content_text(item.get("content"), &format!("{at}.content"))?;
        match item.get("role").and_then(Value::as_str) {
            Some("user") => out.push(Item::Turn(Message::User { text })),
            Some("assistant") => out.push(Item::Turn(Message::Assistant {
                text: Some(text),
                tool_calls: Vec::new(),
                reasoning: Vec::new(),
            })),
            Some("system" | "developer") => out.push(Item::Instructions(text)),
            _ => {
                return Err(invalid(&format!("{at}.role"), "'role' is one of user, assistant, system and developer."));
            }
        }
    }
    Ok(out)
}

/// Checks the tool items against the conversation they join (`before`, then `items`): every
/// call is one of a client-side tool, every output answers an open call (and gets its tool
/// name), and no call is left without an output when the input ends with outputs.
fn resolve_tool_items(
    state: &AppState,
    own: &CallerAdditions,
    before: &[Message],
    items: &mut [Message],
) -> OpenAiResult<()> {
    let registry = state.runtime.catalog.tools();
    let client =
        |name: &str| registry.get(name).is_some_and(|t| t.is_client()) || caller::tool_names(own).any(|n| n == name);
    let mut seen: Vec<Message> = Vec::with_capacity(before.len() + items.len());
    seen.extend_from_slice(before);
    for item in items.iter_mut() {
        match item {
            Message::Assistant { tool_calls, .. } => {
                if let Some(c) = tool_calls.iter().find(|c| !client(&c.name)) {
                    return Err(invalid(
                        "input",
                        format!(
                            "'{}' is not a client-side tool; only calls of client-side tools are answered by the caller.",
                            tracon_core::names::ToolName::parse(&c.name)
                                .map_or_else(|_| "the tool".to_owned(), |n| n.to_string())
                        ),
                    ));
                }
            }
            Message::Tool { call_id, name, .. } => {
                *name = match tracon_core::runs::answers::call_answer(&seen, call_id) {
                    tracon_core::runs::answers::CallAnswer::Open(tool) => tool,
                    tracon_core::runs::answers::CallAnswer::AlreadyAnswered => {
                        return Err(invalid(
                            "input",
                            "A function_call_output answers a call that is already answered: each call is answered once.",
                        ));
                    }
                    tracon_core::runs::answers::CallAnswer::Unknown => {
                        return Err(invalid(
                            "input",
                            "A function_call_output's 'call_id' does not name a call waiting for its output.",
                        ));
                    }
                };
            }
            _ => {}
        }
        seen.push(item.clone());
    }
    if matches!(seen.last(), Some(Message::Tool { .. })) && !tracon_core::engine::open_calls(&seen).is_empty() {
        return Err(invalid("input", "Every function_call waiting for its output needs a function_call_output item."));
    }
    Ok(())
}

/// A `function_call` output item.
fn function_call_item(run: RunId, i: usize, call: &ClientToolCall, status: &str) -> Value {
    let arguments = match &call.arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    json!({"type": "function_call", "id": format!("fc_{}_{i}", run.0.simple()), "call_id": call.call_id,
        "name": call.tool_name, "arguments": arguments, "status": status})
}

/// A message's text: a string, or an array of `input_text`/`output_text` parts.
fn content_text(content: Option<&Value>, param: &str) -> OpenAiResult<String> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("input_text" | "output_text" | "text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(invalid(
                            &format!("{param}[{j}]"),
                            "Only input_text and output_text content parts are supported.",
                        ));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(invalid(param, "'content' must be a string or an array of text parts.")),
    }
}

/// Fields a Responses request may carry besides those [`LEFT_TO_THE_AGENT`]: checked below
/// or harmless to accept.
const RESPONSES_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "stream_options",
    "store",
    "previous_response_id",
    "conversation",
    "max_output_tokens",
    "max_tool_calls",
    "reasoning",
    "truncation",
    "prompt_cache_retention",
    "n",
    // The caller's additions (`caller::additions`): the agent decides whether it takes them.
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "include",
    "background",
    "top_logprobs",
    "prompt",
];

/// What a Responses request asks for, checked.
struct ResponseAsk {
    agent: AgentName,
    message: String,
    /// Input items before the new user message.
    earlier: Vec<Message>,
    /// The caller's `instructions` (echoed in the answer).
    instructions: Option<String>,
    /// `instructions` and the `system`/`developer` items, appended to the agent's own.
    extra_instructions: Option<String>,
    stream: bool,
    store: bool,
    previous: Option<String>,
    conversation: Option<String>,
    metadata: Value,
    /// The caller's tools, `tool_choice` and output format.
    caller: CallerAdditions,
    /// What the response object says of them: as the caller sent them.
    echo: Echo,
}

/// The request's tool and format fields as the caller sent them, for the response object.
#[derive(Clone)]
struct Echo {
    tools: Value,
    tool_choice: Value,
    parallel_tool_calls: Value,
    text: Value,
}

impl Default for Echo {
    fn default() -> Self {
        Self {
            tools: json!([]),
            tool_choice: json!("auto"),
            parallel_tool_calls: json!(true),
            text: json!({"format": {"type": "text"}}),
        }
    }
}

impl Echo {
    fn of(object: &serde_json::Map<String, Value>) -> Self {
        let given = |key: &str| object.get(key).filter(|v| !v.is_null()).cloned();
        let default = Self::default();
        Self {
            tools: given("tools").unwrap_or(default.tools),
            tool_choice: given("tool_choice").unwrap_or(default.tool_choice),
            parallel_tool_calls: given("parallel_tool_calls").unwrap_or(default.parallel_tool_calls),
            text: given("text").filter(|t| t.get("format").is_some()).unwrap_or(default.text),
        }
    }
}

fn parse_response(body: &Value) -> OpenAiResult<ResponseAsk> {
    let changes_meaning = |key: &str, value: &Value| match key {
        "include" => value.as_array().is_some_and(|a| !a.is_empty()),
        "background" => value.as_bool() == Some(true),
        "top_logprobs" => !value.is_null() && value.as_u64() != Some(0),
        "prompt" => !value.is_null(),
        _ => false,
    };
    let agent = checked_fields(body, RESPONSES_FIELDS, changes_meaning, "output")?;
    let object = body.as_object().ok_or_else(|| invalid("", "The body must be a JSON object."))?;
    let caller = caller::additions(object, caller::Api::Responses)?;
    let echo = Echo::of(object);
    let flag = |name: &str, default: bool| match object.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(invalid(name, format!("'{name}' must be a boolean."))),
    };
    let stream = flag("stream", false)?;
    let store = flag("store", true)?;
    let text_field = |name: &str| match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(name, format!("'{name}' must be a string."))),
    };
    let instructions = text_field("instructions")?;
    let previous = text_field("previous_response_id")?;
    let conversation = match object.get("conversation") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(o)) => match o.get("id") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => return Err(invalid("conversation", "'conversation' is an id or {\"id\": …}.")),
        },
        Some(_) => return Err(invalid("conversation", "'conversation' is an id or {\"id\": …}.")),
    };
    if conversation.is_some() && previous.is_some() {
        return Err(invalid(
            "previous_response_id",
            "'previous_response_id' and 'conversation' cannot be used together: a response continues one or the other.",
        ));
    }
    if conversation.is_some() && !store {
        return Err(invalid("store", "A response in a 'conversation' is saved to it: 'store' cannot be false."));
    }
    let metadata = match object.get("metadata") {
        None | Some(Value::Null) => json!({}),
        Some(m @ Value::Object(_)) => m.clone(),
        Some(_) => return Err(invalid("metadata", "'metadata' must be an object.")),
    };
    let items = match object.get("input") {
        Some(Value::String(s)) => vec![Item::Turn(Message::User { text: s.clone() })],
        Some(Value::Array(items)) if !items.is_empty() => parse_items(items, "input")?,
        _ => return Err(invalid("input", "'input' must be a string or a non-empty array of message items.")),
    };
    let mut extra = Vec::from_iter(instructions.clone());
    let mut turns = Vec::new();
    for item in items {
        match item {
            Item::Instructions(text) => extra.push(text),
            Item::Turn(message) => turns.push(message),
        }
    }
    let message = match turns.last() {
        // The caller answered client-side calls: the turn goes on.
        Some(Message::Tool { .. }) => String::new(),
        Some(Message::User { .. }) => match turns.pop() {
            Some(Message::User { text }) => text,
            _ => String::new(),
        },
        _ => {
            return Err(invalid(
                "input",
                "The last input item must be the user's message, or function_call_output items.",
            ));
        }
    };
    if message.trim().is_empty() && !matches!(turns.last(), Some(Message::Tool { .. })) {
        return Err(invalid("input", "The user's message is empty."));
    }
    Ok(ResponseAsk {
        agent,
        message,
        earlier: turns,
        instructions,
        extra_instructions: (!extra.is_empty()).then(|| extra.join("\n\n")),
        stream,
        store,
        previous,
        conversation,
        metadata,
        caller,
        echo,
    })
}

// ---- the response object ------------------------------------------------------------------

/// What every rendering of one response shares.
#[derive(Clone)]
struct ResponseBase {
    run_id: RunId,
    created_at: i64,
    model: String,
    previous_response_id: Option<String>,
    conversation: Option<String>,
    instructions: Option<String>,
    store: bool,
    metadata: Value,
    echo: Echo,
}

impl ResponseBase {
    /// The `response` object in a state.
    fn object(
        &self,
        status: &str,
        output: &[Value],
        usage: Option<&Usage>,
        error: Value,
        completed_at: Option<i64>,
    ) -> Value {
        json!({
            "id": response_id(self.run_id),
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": false,
            "completed_at": completed_at,
            "error": error,
            "incomplete_details": null,
            "instructions": self.instructions,
            "max_output_tokens": null,
            "max_tool_calls": null,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.echo.parallel_tool_calls,
            "previous_response_id": self.previous_response_id,
            "conversation": self.conversation.as_ref().map(|id| json!({"id": id})),
            "reasoning": {"effort": null, "summary": null},
            "store": self.store,
            "temperature": null,
            "text": self.echo.text,
            "tool_choice": self.echo.tool_choice,
            "tools": self.echo.tools,
            "top_p": null,
            "truncation": "disabled",
            "usage": usage_json(usage),
            "user": null,
            "metadata": self.metadata,
        })
    }
}

fn usage_json(usage: Option<&Usage>) -> Value {
    match usage {
        Some(u) => json!({
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_input_tokens.unwrap_or(0), "cache_write_tokens": 0},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens.unwrap_or(0)},
            "total_tokens": u.total_tokens,
        }),
        None => Value::Null,
    }
}

pub(super) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// An assistant message item; `text` is `None` while nothing of it has arrived.
fn message_item(id: &str, status: &str, text: Option<&str>) -> Value {
    let content: Vec<Value> = text.map(output_text).into_iter().collect();
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

/// The output of a response: one message per model turn that wrote text, and at least one.
fn output_items(run: RunId, texts: &[String]) -> Vec<Value> {
    if texts.is_empty() {
        return vec![message_item(&message_id(run, 0), "completed", Some(""))];
    }
    texts.iter().enumerate().map(|(i, t)| message_item(&message_id(run, i), "completed", Some(t))).collect()
}

fn error_json(code: &str, message: &str) -> Value {
    json!({"code": code, "message": message})
}

// ---- the stream -----------------------------------------------------------------------------

/// An assistant message being streamed.
struct OpenMessage {
    id: String,
    text: String,
}

/// Turns the run's events into Responses stream events — and, for an answer that is not
/// streamed, the same output: what a stream shows and what is answered whole never differ.
struct ResponseWriter {
    base: ResponseBase,
    clock: Arc<dyn Clock>,
    sequence: u64,
    /// The finished message items.
    output: Vec<Value>,
    open: Option<OpenMessage>,
    /// Dropping the stream (the caller went away) cancels the run.
    _on_drop: Option<DropGuard>,
}

impl ResponseWriter {
    fn new(base: ResponseBase, clock: Arc<dyn Clock>, on_drop: Option<DropGuard>) -> Self {
        Self { base, clock, sequence: 0, output: Vec::new(), open: None, _on_drop: on_drop }
    }

    fn frame(&mut self, kind: &str, mut data: Value) -> Bytes {
        if let Some(object) = data.as_object_mut() {
            object.insert("type".into(), json!(kind));
            object.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence += 1;
        Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
    }

    /// `response.created` and `response.in_progress`.
    fn opening(&mut self) -> Vec<Bytes> {
        let response = self.base.object("in_progress", &[], None, Value::Null, None);
        vec![
            self.frame("response.created", json!({"response": response})),
            self.frame("response.in_progress", json!({"response": response})),
        ]
    }

    fn output_index(&self) -> usize {
        self.output.len()
    }

    /// Opens a message item (when none is open): `output_item.added`, `content_part.added`.
    fn open_message(&mut self, out: &mut Vec<Bytes>) {
        if self.open.is_some() {
            return;
        }
        let id = message_id(self.base.run_id, self.output_index());
        let index = self.output_index();
        out.push(self.frame(
            "response.output_item.added",
            json!({"output_index": index, "item": message_item(&id, "in_progress", None)}),
        ));
        out.push(self.frame(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": output_text("")}),
        ));
        self.open = Some(OpenMessage { id, text: String::new() });
    }

    fn delta(&mut self, text: String, out: &mut Vec<Bytes>) {
        self.open_message(out);
        let index = self.output_index();
        let Some(open) = self.open.as_mut() else { return };
        open.text.push_str(&text);
        let id = open.id.clone();
        out.push(self.frame(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []}),
        ));
    }

    /// Closes the open message with its complete text (a model turn that streamed no
    /// deltas arrives whole, as one delta).
    fn close_message(&mut self, complete: Option<String>, out: &mut Vec<Bytes>) {
        if self.open.is_none() {
            let Some(text) = complete.clone() else { return };
            self.delta(text, out);
        }
        let Some(open) = self.open.take() else { return };
        let text = complete.unwrap_or(open.text);
        let index = self.output_index();
        let id = open.id;
        out.push(self.frame(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
        ));
        out.push(self.frame(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": output_text(&text)}),
        ));
        let item = message_item(&id, "completed", Some(&text));
        out.push(self.frame("response.output_item.done", json!({"output_index": index, "item": item})));
        self.output.push(item);
    }

    /// A client-side call handed back, as a `function_call` item and its events.
    fn function_call(&mut self, call: &ClientToolCall, out: &mut Vec<Bytes>) {
        let index = self.output_index();
        let done = function_call_item(self.base.run_id, index, call, "completed");
        let mut added = done.clone();
        added["status"] = json!("in_progress");
        added["arguments"] = json!("");
        let id = done["id"].clone();
        out.push(self.frame("response.output_item.added", json!({"output_index": index, "item": added})));
        out.push(self.frame(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": done["arguments"]}),
        ));
        out.push(self.frame(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "name": call.tool_name, "arguments": done["arguments"]}),
        ));
        out.push(self.frame("response.output_item.done", json!({"output_index": index, "item": done})));
        self.output.push(done);
    }

    /// The output so far, with a message left open marked incomplete.
    fn output_so_far(&self) -> Vec<Value> {
        let mut output = self.output.clone();
        if let Some(open) = &self.open {
            output.push(message_item(&open.id, "incomplete", Some(&open.text)));
        }
        output
    }

    /// The frames an event produces.
    fn on_event(&mut self, event: RunEvent) -> Vec<Bytes> {
        let mut out = Vec::new();
        match event {
            RunEvent::MessageDelta { text } if !text.is_empty() => self.delta(text, &mut out),
            RunEvent::MessageCompleted { text } => self.close_message(Some(text), &mut out),
            RunEvent::RunCompleted { text, usage, client_tool_calls, .. } => {
                self.close_message(None, &mut out);
                for call in &client_tool_calls {
                    self.function_call(call, &mut out);
                }
                if self.output.is_empty() {
                    // A response has a message, even an empty one.
                    self.open_message(&mut out);
                    self.close_message(Some(text), &mut out);
                }
                let completed_at = Some(self.clock.now().timestamp());
                let response = self.base.object("completed", &self.output, usage.as_ref(), Value::Null, completed_at);
                out.push(self.frame("response.completed", json!({"response": response})));
            }
            RunEvent::RunAwaitingApproval { .. } => {
                let e = approval_error();
                out.push(self.error_frame(&e));
                let output = self.output_so_far();
                let response = self.base.object("incomplete", &output, None, error_json(e.error_type, &e.detail), None);
                out.push(self.frame("response.incomplete", json!({"response": response})));
            }
            RunEvent::RunFailed { error } | RunEvent::RunCanceled { error } => {
                let e = failure_error(&error);
                out.push(self.error_frame(&e));
                let output = self.output_so_far();
                let response = self.base.object("failed", &output, None, error_json(e.error_type, &e.detail), None);
                out.push(self.frame("response.failed", json!({"response": response})));
            }
            _ => {}
        }
        out
    }

    /// OpenAI's `error` stream event: a failure after the headers went out (a lost session
    /// race among them).
    fn error_frame(&mut self, e: &ApiError) -> Bytes {
        self.frame("error", json!({"code": e.error_type, "message": e.detail, "param": null}))
    }
}

// ---- reading stored responses and conversations ---------------------------------------------

/// Whether the host's run policy allows `action`.
pub(super) async fn allowed(state: &AppState, caller: &Caller, tenant: &TenantId, action: RunAction<'_>) -> bool {
    is_allowed(state.runtime.run_authorizer.as_ref(), caller, tenant, action).await
}

/// A session the caller may `what`: the tenant's, allowed by the run policy, and (with
/// session ownership) theirs. `None` for anything else — missing, another tenant's, denied.
pub(super) async fn visible_session(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    headers: &HeaderMap,
    id: &str,
    what: Use,
) -> OpenAiResult<Option<SessionRecord>> {
    let Ok(id) = SessionId::parse(id) else { return Ok(None) };
    let action = match what {
        Use::Delete => RunAction::DeleteSession { session: id.as_str() },
        Use::Branch => RunAction::BranchSession { session: id.as_str() },
        Use::Read => RunAction::ReadSession { session: id.as_str() },
    };
    if !allowed(state, caller, tenant, action).await {
        return Ok(None);
    }
    let Some(session) = state.runtime.stores.sessions.get(tenant, id.as_str()).await.map_err(ApiError::from)? else {
        return Ok(None);
    };
    let ownership = &state.runtime.settings.session_ownership;
    if ownership.enabled {
        let user = user_id(&state.runtime, tenant, caller, &header_pairs(headers));
        if !ownership.may(caller, user.as_deref(), &session, what) {
            return Ok(None);
        }
    }
    Ok(Some(session))
}

/// A stored response: the run behind it and the items of the session that holds it.
pub(super) struct StoredResponse {
    pub(super) run_id: RunId,
    run: Option<RunRecord>,
    session: SessionRecord,
    items: Vec<SessionItem>,
    /// The session is a conversation the response was part of (not its own).
    in_conversation: bool,
}

impl StoredResponse {
    /// Every item up to and including the response's last: the history a response that
    /// chains on it continues. `None` when the session holds nothing of the response.
    fn history(&self) -> Option<Vec<Message>> {
        let last = self.items.iter().rposition(|i| i.run_id == Some(self.run_id))?;
        Some(self.items[..=last].iter().map(|i| i.message.clone()).collect())
    }

    /// The items the response was given: the session's items before its answer, up to and
    /// including its user message (in its own session, the conversation it continued too).
    pub(super) fn input(&self, ran_here: &std::collections::BTreeSet<String>) -> Vec<&SessionItem> {
        let Some(last) = self.items.iter().rposition(|i| i.run_id == Some(self.run_id)) else { return Vec::new() };
        let upto = &self.items[..=last];
        // Its input ends with its user message, or with the outputs of client-side calls it
        // was given: a tool result this run did not produce itself.
        let Some(user) = upto.iter().rposition(|i| match &i.message {
            Message::User { .. } => true,
            Message::Tool { call_id, .. } => !ran_here.contains(call_id.as_str()),
            _ => false,
        }) else {
            return Vec::new();
        };
        let first = if self.in_conversation {
            // A conversation holds other responses too: from this run's first item on.
            upto.iter().position(|i| i.run_id == Some(self.run_id)).unwrap_or(user).min(user)
        } else {
            0
        };
        upto[first..=user].iter().collect()
    }

    /// The texts the response answered with: its assistant messages after its user message.
    fn texts(&self) -> Vec<String> {
        let own: Vec<&SessionItem> = self.items.iter().filter(|i| i.run_id == Some(self.run_id)).collect();
        let from = own.iter().rposition(|i| matches!(i.message, Message::User { .. })).map_or(0, |p| p + 1);
        own[from..]
            .iter()
            .filter_map(|i| match &i.message {
                Message::Assistant { text: Some(t), .. } if !t.is_empty() => Some(t.clone()),
                _ => None,
            })
            .collect()
    }
}

/// Finds a stored response the caller may read: the session named after it, or — for a
/// response in a conversation — the conversation its run names.
pub(super) async fn stored_response(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    headers: &HeaderMap,
    raw: &str,
) -> OpenAiResult<Option<StoredResponse>> {
    let Some(run_id) = parse_response_id(raw) else { return Ok(None) };
    let stores = &state.runtime.stores;
    let run = stores.runs.get_run(tenant, run_id).await.map_err(ApiError::from)?;
    if let Some(run) = &run
        && !allowed(state, caller, tenant, RunAction::ReadRun { run }).await
    {
        return Ok(None);
    }
    let (session, in_conversation) = match visible_session(state, tenant, caller, headers, raw, Use::Read).await? {
        Some(own) => (own, false),
        None => {
            let Some(conversation) = run.as_ref().and_then(|r| r.session_id.as_deref()) else { return Ok(None) };
            match visible_session(state, tenant, caller, headers, conversation, Use::Read).await? {
                Some(s) => (s, true),
                None => return Ok(None),
            }
        }
    };
    let items = stores.sessions.items(tenant, &session.id).await.map_err(ApiError::from)?;
    Ok(Some(StoredResponse { run_id, run, session, items, in_conversation }))
}

fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Completed => "completed",
        RunStatus::Failed => "failed",
        RunStatus::Canceled => "cancelled",
        RunStatus::Queued => "queued",
        RunStatus::Running => "in_progress",
        RunStatus::AwaitingApproval | RunStatus::AwaitingInput => "incomplete",
    }
}

// ---- POST /v1/responses ---------------------------------------------------------------------

/// OpenAI Responses: `model` names the agent. `store` (default true) saves the conversation
/// as a session named after the response, which `previous_response_id` continues;
/// `conversation` runs in a conversation instead. `stream: true` answers Responses stream
/// events. Errors use OpenAI's envelope.
#[utoipa::path(post, path = "/v1/responses", tag = "openai", request_body = Object,
    responses(
        (status = 200, description = "A `response`, or (`stream: true`) its events as server-sent events (`response.created` … `response.completed`)", content(
            (Object = "application/json"),
            (String = "text/event-stream"))),
        (status = 400, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object),
        (status = 404, description = "No agent of that name, or no such previous response or conversation", body = Object),
        (status = 409, description = "Another turn saved the conversation first (`session_conflict`), or the run waits for a tool approval", body = Object),
        (status = 429, description = "A quota is used up", body = Object),
        (status = 502, description = "The agent's model provider failed", body = Object)))]
#[tracing::instrument(name = "openai.responses", skip_all, fields(agent, run_id))]
pub async fn create_response(
    Ctx { state, tenant, caller }: Ctx,
    request: axum::extract::Request,
) -> OpenAiResult<Response> {
    let headers: HeaderMap = request.headers().clone();
    let ApiJson(body) = ApiJson::<Value>::from_request(request, &state).await?;
    let mut ask = parse_response(&body)?;
    super::limits::check_messages(&state.runtime.settings.limits, &body)?;
    tracing::Span::current().record("agent", ask.agent.as_str());
    let has_tool_items = ask.earlier.iter().any(|m| match m {
        Message::Assistant { tool_calls, .. } => !tool_calls.is_empty(),
        Message::Tool { .. } => true,
        _ => false,
    });
    let conversation = match &ask.conversation {
        Some(raw) => Some(SessionId::parse(raw).map_err(|_| conversation_not_found(Some("conversation")))?),
        None => None,
    };
    let pairs = header_pairs(&headers);
    let admission = Admission {
        tenant: &tenant,
        caller: &caller,
        agent: &ask.agent,
        session: conversation.as_ref(),
        attribution: Attributed::Port(&pairs),
    };
    let attribution = admit(&state.runtime, admission).await.map_err(|refusal| match refusal {
        Refusal::SessionAgent(mismatch) => OpenAiError(session_agent_mismatch(&mismatch, "conversation")),
        other => other.into(),
    })?;
    let sessions = state.runtime.stores.sessions.clone();

    // The history a chained response continues, checked like any read of it — and, as any
    // session is, one agent's conversation.
    let previous = match &ask.previous {
        Some(raw) => {
            let stored =
                stored_response(&state, &tenant, &caller, &headers, raw).await?.ok_or_else(previous_not_found)?;
            stored
                .session
                .check_agent(ask.agent.as_str())
                .map_err(|mismatch| OpenAiError(session_agent_mismatch(&mismatch, "previous_response_id")))?;
            Some(stored.history().ok_or_else(previous_not_found)?)
        }
        None => None,
    };
    if has_tool_items && conversation.is_none() {
        resolve_tool_items(&state, &ask.caller, previous.as_deref().unwrap_or_default(), &mut ask.earlier)?;
    }
    if let Some(id) = &conversation {
        let raw = id.as_str();
        let record = visible_session(&state, &tenant, &caller, &headers, raw, Use::Read)
            .await?
            .ok_or_else(|| conversation_not_found(Some("conversation")))?;
        if has_tool_items {
            let items = sessions.items(&tenant, raw).await.map_err(ApiError::from)?;
            let before: Vec<Message> = items.into_iter().map(|i| i.message).collect();
            resolve_tool_items(&state, &ask.caller, &before, &mut ask.earlier)?;
        }
        // Earlier input items join the conversation before the turn that follows them: a
        // versioned append of their own, written before the run row exists, so a lost race
        // refuses the request with nothing started (the turn then loads them as history).
        if !ask.earlier.is_empty() {
            let write = SessionWrite {
                agent_name: ask.agent.as_str().to_owned(),
                run_id: None,
                messages: ask.earlier.clone(),
                owner_user_id: attribution.user_id.clone(),
                now: state.runtime.platform.clock.now(),
            };
            sessions.try_append(&tenant, raw, record.version, &write).await.map_err(|e| match e {
                StoreError::Conflict(_) | StoreError::NotFound => session_conflict(),
                other => OpenAiError(other.into()),
            })?;
        }
    } else if ask.store {
        // The response opens a session of its own: session ownership needs an owner for it.
        state
            .runtime
            .settings
            .session_ownership
            .may_run(attribution.user_id.as_deref(), None)
            .map_err(ApiError::from)?;
    }

    let request = RunRequest {
        session_id: conversation.clone(),
        ..RunRequest::new(tenant, ask.agent.clone(), ask.message.clone(), caller, attribution)
    };
    let runtime = state.runtime.clone();
    let run_id = new_run_id(&runtime);
    tracing::Span::current().record("run_id", tracing::field::display(run_id));
    let history = match &conversation {
        Some(_) => History::Session,
        None => {
            let mut history = previous.unwrap_or_default();
            history.extend(ask.earlier);
            if ask.store {
                // A new session under the response's own id, seeded with everything before
                // the turn: the run's first save writes the whole conversation.
                let id = SessionId::parse(&response_id(run_id)).map_err(|e| ApiError::internal("SessionId", &e.0))?;
                History::Seeded { id, history }
            } else {
                History::Supplied(history)
            }
        }
    };
    // Both ways the run is followed live: the events build the output exactly as a stream
    // shows it, and a buffered answer is the stream collected.
    let start = Start {
        history,
        extra_instructions: ask.extra_instructions,
        caller: ask.caller,
        run_id: Some(run_id),
        ..Start::new(request, Delivery::Live)
    };
    let live = match launch(&runtime, start).await.map_err(|e| start_error(ask.agent.as_str(), e))? {
        Launched::Live(live) => live,
        other => {
            let id = other.run_id();
            return Err(ApiError::internal("RunDelivery", &format!("run {id} was not live")).into());
        }
    };
    let base = ResponseBase {
        run_id,
        created_at: live.started_at.timestamp(),
        model: ask.agent.as_str().to_owned(),
        previous_response_id: ask.previous,
        conversation: conversation.map(|c| c.as_str().to_owned()),
        instructions: ask.instructions,
        store: ask.store,
        metadata: ask.metadata,
        echo: ask.echo,
    };
    let clock = runtime.platform.clock.clone();
    let LiveRun { mut events, cancel, outcome, .. } = live;

    if !ask.stream {
        let mut writer = ResponseWriter::new(base.clone(), clock.clone(), None);
        // The caller going away drops this future, and with it the receiver: the run cancels.
        while let Some(event) = events.recv().await {
            writer.on_event(event);
        }
        let outcome =
            outcome.await.map_err(|_| ApiError::internal("RunOutcome", "the run ended without an outcome"))?;
        return match (outcome.status, &outcome.failure) {
            (RunStatus::Completed, _) => {
                let output =
                    if writer.output.is_empty() { output_items(run_id, &[outcome.text]) } else { writer.output };
                let completed_at = Some(clock.now().timestamp());
                let response = base.object("completed", &output, outcome.usage.as_ref(), Value::Null, completed_at);
                Ok(axum::Json(response).into_response())
            }
            (RunStatus::AwaitingApproval, _) => Err(approval_error().into()),
            (_, Some(failure)) => Err(failure_error(failure).into()),
            (status, None) => Err(ApiError::internal("RunStatus", &format!("{status:?}")).into()),
        };
    }

    let mut writer = ResponseWriter::new(base, clock, Some(cancel.drop_guard()));
    let opening = futures::stream::iter(writer.opening());
    let events = futures::stream::poll_fn(move |cx| events.poll_recv(cx));
    let frames = events.flat_map(move |event| futures::stream::iter(writer.on_event(event)));
    Ok(sse::response(Body::from_stream(opening.chain(frames).map(Ok::<Bytes, std::convert::Infallible>))))
}

// ---- GET /v1/responses/{id} -----------------------------------------------------------------

/// Deletes a stored response: the session named after it goes, so neither `GET` nor
/// `previous_response_id` finds it again; its run stays in the run record. A response that
/// is part of a conversation is the conversation's (`409 response_in_conversation`: delete
/// the conversation). Unknown, `store: false` and another tenant's answer `404`.
#[utoipa::path(delete, path = "/v1/responses/{id}", tag = "openai",
    params(("id" = String, Path, description = "Response id (`resp_…`)")),
    responses(
        (status = 200, description = "`{\"id\", \"object\": \"response\", \"deleted\": true}`", body = Object),
        (status = 404, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object),
        (status = 409, description = "The response is part of a conversation", body = Object)))]
#[tracing::instrument(name = "openai.responses.delete", skip_all)]
pub async fn delete_response(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> OpenAiResult<Response> {
    let stored = stored_response(&state, &tenant, &caller, &headers, &id).await?.ok_or_else(response_not_found)?;
    if stored.in_conversation {
        return Err(OpenAiError(ApiError::new(
            StatusCode::CONFLICT,
            "response_in_conversation",
            format!(
                "This response is part of conversation '{}'; its items are the conversation's. Delete the conversation instead.",
                stored.session.id
            ),
        )));
    }
    visible_session(&state, &tenant, &caller, &headers, &id, Use::Delete).await?.ok_or_else(response_not_found)?;
    if !state.runtime.stores.sessions.delete(&tenant, &id).await.map_err(ApiError::from)? {
        return Err(response_not_found());
    }
    Ok(axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

/// A stored response, rebuilt from its run and the session that holds it. Responses made
/// with `store: false`, another tenant's, and unknown ids answer `404`.
#[utoipa::path(get, path = "/v1/responses/{id}", tag = "openai",
    params(("id" = String, Path, description = "Response id (`resp_…`)")),
    responses(
        (status = 200, description = "The `response`", body = Object),
        (status = 404, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object)))]
#[tracing::instrument(name = "openai.responses.get", skip_all)]
pub async fn get_response(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> OpenAiResult<Response> {
    let stored = stored_response(&state, &tenant, &caller, &headers, &id).await?.ok_or_else(response_not_found)?;
    let run = stored.run.as_ref();
    let status = run.map_or(RunStatus::Completed, |r| r.status);
    let texts = stored.texts();
    let output = match status {
        RunStatus::Completed => output_items(stored.run_id, &texts),
        _ => texts
            .iter()
            .enumerate()
            .map(|(i, t)| message_item(&message_id(stored.run_id, i), "completed", Some(t)))
            .collect(),
    };
    let error =
        run.and_then(|r| r.error.as_ref()).map_or(Value::Null, |f| error_json(f.error_class.error_type(), &f.message));
    let base = ResponseBase {
        run_id: stored.run_id,
        created_at: run.map_or(stored.session.created_at, |r| r.started_at).timestamp(),
        model: run.map(|r| r.agent_name.clone()).or_else(|| stored.session.agent_name.clone()).unwrap_or_default(),
        // Not recorded: the session holds the conversation, not where it was copied from.
        previous_response_id: None,
        conversation: stored.in_conversation.then(|| stored.session.id.clone()),
        instructions: None,
        store: true,
        echo: Echo::default(),
        metadata: json!({}),
    };
    let completed_at = run.and_then(|r| r.ended_at).map(|t| t.timestamp());
    let usage = run.and_then(|r| r.usage.as_ref());
    Ok(axum::Json(base.object(status_name(status), &output, usage, error, completed_at)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_ids_round_trip_and_only_the_canonical_spelling_parses() {
        let run = RunId(uuid::Uuid::now_v7());
        let id = response_id(run);
        assert_eq!(parse_response_id(&id), Some(run));
        for bad in [
            id.to_uppercase(),
            id.replace("resp_", "conv_"),
            format!("resp_{}", run.0),
            format!("{id}0"),
            "resp_".to_owned(),
        ] {
            assert_eq!(parse_response_id(&bad), None, "{bad}");
        }
    }

    #[test]
    fn input_items_become_turns_and_instructions() {
        let body = json!({"model": "support", "instructions": "Be brief.", "input": [
            {"role": "developer", "content": "Answer in English."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!", "annotations": []}]},
            {"role": "user", "content": "Where is order 4182?"},
        ]});
        let ask = parse_response(&body).unwrap_or_else(|e| panic!("{:?}", e.0));
        assert_eq!(ask.message, "Where is order 4182?");
        assert_eq!(ask.earlier.len(), 2);
        assert_eq!(ask.extra_instructions.as_deref(), Some("Be brief.\n\nAnswer in English."));
        assert!(ask.store && !ask.stream);
    }

    #[test]
    fn the_writer_streams_one_message_per_model_turn_in_order() {
        let base = ResponseBase {
            run_id: RunId(uuid::Uuid::now_v7()),
            created_at: 0,
            model: "support".into(),
            previous_response_id: None,
            conversation: None,
            instructions: None,
            store: true,
            metadata: json!({}),
            echo: Echo::default(),
        };
        let clock: Arc<dyn Clock> = tracon_core::ports::tokio_rt::platform().clock;
        let mut writer = ResponseWriter::new(base, clock, None);
        let mut frames = writer.opening();
        for event in [
            RunEvent::MessageDelta { text: "Order ".into() },
            RunEvent::MessageDelta { text: "4182.".into() },
            RunEvent::MessageCompleted { text: "Order 4182.".into() },
            RunEvent::RunCompleted {
                text: "Order 4182.".into(),
                usage: None,
                cost: None,
                finish_reason: None,
                client_tool_calls: Vec::new(),
            },
        ] {
            frames.extend(writer.on_event(event));
        }
        let kinds: Vec<String> = frames
            .iter()
            .map(|f| {
                String::from_utf8_lossy(f).lines().next().unwrap_or_default().trim_start_matches("event: ").to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        assert_eq!(writer.output.len(), 1);
        assert_eq!(writer.output[0]["content"][0]["text"], "Order 4182.");
    }
}
