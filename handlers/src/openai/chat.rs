//! `POST /v1/chat/completions`: a chat request as a recorded run of the agent its `model`
//! names, answered as a `chat.completion` or its streamed chunks.

use axum::body::{Body, Bytes};
use axum::extract::FromRequest;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tracon_core::events::ClientToolCall;
use tracon_core::events::RunEvent;
use tracon_core::model::{FinishReason, Message, ToolCall, Usage};
use tracon_core::names::AgentName;
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::launch::{Delivery, History, Launched, Start, launch};
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::RunStatus;

use super::{OpenAiResult, approval_error, caller, checked_fields, failure_error, invalid};
use crate::error::{ApiError, start_error};
use crate::extract::{ApiJson, Ctx, header_pairs};
use crate::sse;
use tracon_core::runs::caller::CallerAdditions;

/// What a chat request asks for, checked.
struct ChatAsk {
    agent: AgentName,
    message: String,
    history: Vec<Message>,
    caller_instructions: Option<String>,
    stream: bool,
    include_usage: bool,
    /// The caller's tools, `tool_choice` and output format.
    caller: CallerAdditions,
}

/// The chat route's own fields (besides [`LEFT_TO_THE_AGENT`]).
const CHAT_FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "n",
    "tools",
    "functions",
    "tool_choice",
    "parallel_tool_calls",
    "function_call",
    "response_format",
    "logprobs",
    "top_logprobs",
    "audio",
    "modalities",
    "web_search_options",
];

fn parse_chat(body: &Value) -> OpenAiResult<ChatAsk> {
    // `tools`, `tool_choice`, `parallel_tool_calls` and `response_format` are the caller's
    // additions ([`caller::additions`]); the agent decides whether it takes them.
    let changes_meaning = |key: &str, value: &Value| match key {
        "functions" => value.as_array().is_some_and(|a| !a.is_empty()),
        "function_call" => !matches!(value.as_str(), Some("none" | "auto")) && !value.is_null(),
        "logprobs" => value.as_bool() == Some(true),
        "top_logprobs" => !value.is_null() && value.as_u64() != Some(0),
        // Text is what every answer here is.
        "modalities" => !value.is_null() && *value != json!(["text"]),
        "audio" | "web_search_options" => !value.is_null(),
        _ => false,
    };
    let agent = checked_fields(body, CHAT_FIELDS, changes_meaning, "choice")?;
    let object = body.as_object().ok_or_else(|| invalid("", "The body must be a JSON object."))?;
    let caller = caller::additions(object, caller::Api::Chat)?;
    let stream = match object.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("stream", "'stream' must be a boolean.")),
    };
    let include_usage =
        object.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    let messages = object
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| invalid("messages", "'messages' must be a non-empty array."))?;
    let mut instructions = Vec::new();
    let mut turns = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let text = || content_text(m.get("content"), &format!("messages[{i}].content"));
        match role {
            "system" | "developer" => instructions.push(text()?),
            "user" => turns.push(Message::User { text: text()? }),
            "assistant" => {
                let text = match m.get("content") {
                    None | Some(Value::Null) => None,
                    content => Some(content_text(content, &format!("messages[{i}].content"))?),
                };
                let tool_calls = match m.get("tool_calls") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(calls) => history_calls(calls, i)?,
                };
                turns.push(Message::Assistant { text, tool_calls, reasoning: Vec::new() });
            }
            // The answer to a client-side tool call the agent handed back earlier.
            "tool" => {
                let call_id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid(&format!("messages[{i}].tool_call_id"), "'tool_call_id' is required."))?;
                let param = format!("messages[{i}].tool_call_id");
                let name = match tracon_core::runs::answers::call_answer(&turns, call_id) {
                    tracon_core::runs::answers::CallAnswer::Open(name) => name,
                    tracon_core::runs::answers::CallAnswer::AlreadyAnswered => {
                        return Err(invalid(
                            &param,
                            "'tool_call_id' answers a call that is already answered: each call is answered once.",
                        ));
                    }
                    tracon_core::runs::answers::CallAnswer::Unknown => {
                        return Err(invalid(
                            &param,
                            "'tool_call_id' does not name a call of the assistant message before it.",
                        ));
                    }
                };
                let content = content_text(m.get("content"), &format!("messages[{i}].content"))?;
                turns.push(Message::Tool { call_id: call_id.to_owned(), name, content, is_error: false });
            }
            "function" => {
                return Err(invalid(
                    &format!("messages[{i}].role"),
                    "The deprecated 'function' role is not supported; answer tool calls with 'tool' messages.",
                ));
            }
            _ => {
                return Err(invalid(
                    &format!("messages[{i}].role"),
                    "'role' is one of system, developer, user and assistant.",
                ));
            }
        }
    }
    let message = match turns.last() {
        // The caller answered the agent's client-side calls: the turn goes on.
        Some(Message::Tool { .. }) => {
            if !tracon_core::engine::open_calls(&turns).is_empty() {
                return Err(invalid(
                    "messages",
                    "Every tool call of the last assistant message needs a 'tool' message.",
                ));
            }
            String::new()
        }
        Some(Message::User { .. }) => match turns.pop() {
            Some(Message::User { text }) => text,
            _ => String::new(),
        },
        _ => return Err(invalid("messages", "The last message must be the user's, or the answers to tool calls.")),
    };
    if message.trim().is_empty() && !matches!(turns.last(), Some(Message::Tool { .. })) {
        return Err(invalid(&format!("messages[{}].content", messages.len() - 1), "The user's message is empty."));
    }
    let caller_instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
    Ok(ChatAsk { agent, message, history: turns, caller_instructions, stream, include_usage, caller })
}

/// The `tool_calls` of an assistant message in the history (calls of client-side tools the
/// caller answered).
fn history_calls(calls: &Value, i: usize) -> OpenAiResult<Vec<ToolCall>> {
    let param = format!("messages[{i}].tool_calls");
    let calls = calls.as_array().ok_or_else(|| invalid(&param, "'tool_calls' must be an array."))?;
    calls
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let id = c.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
            let function = c.get("function");
            let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
            let arguments = function.and_then(|f| f.get("arguments")).and_then(Value::as_str).unwrap_or("{}");
            match (id, name) {
                (Some(id), Some(name)) => {
                    Ok(ToolCall { id: id.to_owned(), name: name.to_owned(), arguments: arguments.to_owned() })
                }
                _ => Err(invalid(&format!("{param}[{j}]"), "A tool call needs 'id' and 'function.name'.")),
            }
        })
        .collect()
}

/// A message's text: a string, or an array of `text` parts (other parts are refused).
fn content_text(content: Option<&Value>, param: &str) -> OpenAiResult<String> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(invalid(&format!("{param}[{j}]"), "Only text content parts are supported."));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(invalid(param, "'content' must be a string or an array of text parts.")),
    }
}

fn finish_reason(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Length) => "length",
        Some(FinishReason::ToolCalls) => "tool_calls",
        Some(FinishReason::ContentFilter) => "content_filter",
        Some(FinishReason::Stop | FinishReason::Other) | None => "stop",
    }
}

fn usage_json(usage: Option<&Usage>) -> Value {
    match usage {
        Some(u) => {
            json!({"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens, "total_tokens": u.total_tokens})
        }
        None => Value::Null,
    }
}

/// OpenAI Chat Completions: `model` names the agent; `stream: true` answers
/// `chat.completion.chunk` frames ending with `data: [DONE]`. Errors use OpenAI's envelope.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai", request_body = Object,
    responses(
        (status = 200, description = "A `chat.completion`, or (`stream: true`) its chunks as server-sent events", content(
            (Object = "application/json"),
            (String = "text/event-stream"))),
        (status = 400, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object),
        (status = 404, description = "No agent of that name", body = Object),
        (status = 409, description = "The run waits for a tool approval", body = Object),
        (status = 429, description = "A quota is used up", body = Object),
        (status = 502, description = "The agent's model provider failed", body = Object)))]
#[tracing::instrument(name = "openai.chat", skip_all, fields(agent, run_id))]
pub async fn chat_completions(
    Ctx { state, tenant, caller }: Ctx,
    request: axum::extract::Request,
) -> OpenAiResult<Response> {
    let headers: HeaderMap = request.headers().clone();
    let ApiJson(body) = ApiJson::<Value>::from_request(request, &state).await?;
    let ask = parse_chat(&body)?;
    super::limits::check_messages(&state.runtime.settings.limits, &body)?;
    tracing::Span::current().record("agent", ask.agent.as_str());
    // Only client-side tools — registered ones and the caller's own — are the caller's to
    // answer; a server-side tool's result cannot be supplied from outside.
    let foreign = ask.history.iter().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|c| {
                !state.runtime.catalog.tools().get(&c.name).is_some_and(|t| t.is_client())
                    && !caller::tool_names(&ask.caller).any(|n| n == c.name)
            })
            .map(|c| &c.name),
        _ => None,
    });
    if let Some(name) = foreign {
        return Err(invalid(
            "messages",
            format!(
                "'{}' is not a client-side tool; only calls of client-side tools are answered by the caller.",
                tracon_core::names::ToolName::parse(name).map_or_else(|_| "the tool".to_owned(), |n| n.to_string())
            ),
        ));
    }
    let runtime = state.runtime.clone();
    let pairs = header_pairs(&headers);
    let admission = Admission {
        tenant: &tenant,
        caller: &caller,
        agent: &ask.agent,
        session: None,
        attribution: Attributed::Port(&pairs),
    };
    let attribution = admit(&runtime, admission).await?;
    let request = RunRequest::new(tenant, ask.agent.clone(), ask.message, caller, attribution);
    let start = Start {
        history: History::Supplied(ask.history),
        extra_instructions: ask.caller_instructions,
        caller: ask.caller,
        ..Start::new(request, if ask.stream { Delivery::Live } else { Delivery::Buffered })
    };
    let launched = launch(&runtime, start).await.map_err(|e| start_error(ask.agent.as_str(), e))?;
    let run_id = launched.run_id();
    tracing::Span::current().record("run_id", tracing::field::display(run_id));
    let id = format!("chatcmpl-{}", run_id.0.simple());
    let model = ask.agent.as_str().to_owned();
    let live = match launched {
        Launched::Live(live) => live,
        Launched::Finished(outcome) => {
            let created = outcome.started_at.timestamp();
            return match (outcome.status, &outcome.failure) {
                (RunStatus::Completed, _) => {
                    let mut message = json!({"role": "assistant", "content": outcome.text, "refusal": null});
                    if !outcome.client_tool_calls.is_empty() {
                        message["tool_calls"] = tool_calls_json(&outcome.client_tool_calls, false);
                        if outcome.text.is_empty() {
                            message["content"] = Value::Null;
                        }
                    }
                    Ok(axum::Json(json!({
                        "id": id, "object": "chat.completion", "created": created, "model": model,
                        "choices": [{"index": 0, "message": message,
                            "finish_reason": finish_reason(outcome.finish_reason), "logprobs": null}],
                        "usage": usage_json(outcome.usage.as_ref()),
                    }))
                    .into_response())
                }
                (RunStatus::AwaitingApproval, _) => Err(approval_error().into()),
                (_, Some(failure)) => Err(failure_error(failure).into()),
                (status, None) => Err(ApiError::internal("RunStatus", &format!("{status:?}")).into()),
            };
        }
        Launched::Started(_) | Launched::Queued(_) => {
            return Err(ApiError::internal("RunDelivery", "a chat run was not live or buffered").into());
        }
    };
    let chunks = ChunkWriter { id, created: live.started_at.timestamp(), model, include_usage: ask.include_usage };
    let opening = futures::stream::iter([Ok(chunks.chunk(json!({"role": "assistant", "content": ""}), None))]);
    let on_drop = live.cancel.drop_guard();
    let mut rx = live.events;
    let events = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let frames = events.flat_map(move |event| {
        // Keep the guard alive as long as the stream: dropping the body cancels the run.
        let _ = &on_drop;
        futures::stream::iter(chunks.frames(event).into_iter().map(Ok::<Bytes, std::convert::Infallible>))
    });
    Ok(sse::response(Body::from_stream(opening.chain(frames))))
}

/// Client-side calls as OpenAI `tool_calls` (`arguments` is JSON text); a streamed delta also
/// numbers them.
fn tool_calls_json(calls: &[ClientToolCall], indexed: bool) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let arguments = match &c.arguments {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            let mut call = json!({"id": c.call_id, "type": "function",
                "function": {"name": c.tool_name, "arguments": arguments}});
            if indexed {
                call["index"] = json!(i);
            }
            call
        })
        .collect()
}

fn chunk_frame(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// Turns the run's events into `chat.completion.chunk` frames.
struct ChunkWriter {
    id: String,
    created: i64,
    model: String,
    include_usage: bool,
}

impl ChunkWriter {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Bytes {
        chunk_frame(&json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
        }))
    }

    fn frames(&self, event: RunEvent) -> Vec<Bytes> {
        const DONE: &str = "data: [DONE]\n\n";
        match event {
            RunEvent::MessageDelta { text } => vec![self.chunk(json!({"content": text}), None)],
            RunEvent::RunCompleted { usage, finish_reason: reason, client_tool_calls, .. } => {
                let mut out = Vec::with_capacity(4);
                if !client_tool_calls.is_empty() {
                    out.push(self.chunk(json!({"tool_calls": tool_calls_json(&client_tool_calls, true)}), None));
                }
                out.push(self.chunk(json!({}), Some(finish_reason(reason))));
                if self.include_usage {
                    out.push(chunk_frame(&json!({
                        "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                        "choices": [], "usage": usage_json(usage.as_ref()),
                    })));
                }
                out.push(Bytes::from_static(DONE.as_bytes()));
                out
            }
            RunEvent::RunAwaitingApproval { .. } => {
                vec![error_frame(&approval_error()), Bytes::from_static(DONE.as_bytes())]
            }
            RunEvent::RunFailed { error } | RunEvent::RunCanceled { error } => {
                vec![error_frame(&failure_error(&error)), Bytes::from_static(DONE.as_bytes())]
            }
            _ => Vec::new(),
        }
    }
}

/// An error after the stream started: OpenAI's envelope as a data frame.
fn error_frame(e: &ApiError) -> Bytes {
    chunk_frame(&json!({"error": {"message": e.detail, "type": e.error_type, "param": null, "code": e.error_type}}))
}
