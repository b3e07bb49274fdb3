//! Client-side tools through the router: the model's call comes back to the caller — a
//! `done` frame's `clientToolCalls` on the native stream, `tool_calls` on chat completions —
//! and the caller's answer on its next request continues the turn.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::frames;
use tracon_core::definition::AgentDefinition;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runs::request::CLIENT_UNANSWERED;
use tracon_core::runs::store::RunFilter;
use tracon_core::runtime::{Runtime, RuntimeBuilder};
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings};

/// Every request the model got.
type Seen = Arc<Mutex<Vec<Vec<Message>>>>;

/// `clock` asks for the browser's time (client-side) and looks up an order (server-side) in
/// the same turn; once it has a result it answers with what it got.
fn app() -> (Router, Arc<Runtime>, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let script = ScriptedProvider::from_fn("script", move |req| {
        log.lock().unwrap().push(req.messages.clone());
        match req.messages.last() {
            Some(Message::User { text }) if text.contains("time") => {
                ScriptedTurn::tool_call("get_local_time", json!({})).and_tool_call("lookup", json!({"id": "4182"}))
            }
            Some(Message::Tool { name, content, is_error, .. }) if name == "get_local_time" => {
                ScriptedTurn::text(&format!("Local time: {content} (error: {is_error})"))
            }
            _ => ScriptedTurn::text("plain answer"),
        }
    });
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks an order up.",
        json!({"type": "object", "properties": {"id": {"type": "string"}}}),
        tool_fn(|_, _| async move { Ok(ToolOutput::from("shipped")) }),
    );
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_tool(lookup)
            .add_client_tool(
                "get_local_time",
                "The time on the user's device.",
                json!({"type": "object", "properties": {}}),
            )
            .add_agent(AgentDefinition::new("clock", "script", "m").with_tools(&["get_local_time", "lookup"]))
            .add_agent(AgentDefinition::new("server-only", "script", "m").with_tools(&["lookup"]))
            .build()
            .unwrap(),
    );
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    (tracon_handlers::router(state), runtime, seen)
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, String) {
    let reply = support::call(method, path).json(body).send(app).await;
    (reply.status, reply.text())
}

fn done(body: &str) -> Value {
    frames(body).into_iter().find(|(e, _)| e == "done").unwrap_or_else(|| panic!("no done frame: {body}")).1
}

#[tokio::test]
async fn a_client_side_call_comes_back_in_the_done_frame_and_its_result_continues_the_turn() {
    let (app, runtime, seen) = app();
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/agents/clock/run",
        Some(json!({"message": "What time is it?", "sessionId": "s-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first = done(&body);
    assert_eq!(first["status"], "Completed", "{first}");
    assert_eq!(first["finishReason"], "toolCalls", "{first}");
    assert_eq!(first["sessionId"], "s-1");
    // Only the client-side call is handed back; the server-side one ran here.
    let calls = first["clientToolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{first}");
    assert_eq!(calls[0]["toolName"], "get_local_time");
    assert_eq!(calls[0]["arguments"], json!({}));
    let call_id = calls[0]["callId"].as_str().unwrap().to_owned();
    assert!(
        frames(&body).iter().any(|(e, d)| e == "update" && d["kind"] == "toolResult" && d["toolName"] == "lookup"),
        "{body}"
    );

    let (status, body) = call(
        &app,
        Method::POST,
        "/api/agents/clock/run",
        Some(json!({"sessionId": "s-1", "toolResults": [{"callId": call_id, "result": "10:42 Europe/Istanbul"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let second = done(&body);
    assert_eq!(second["status"], "Completed");
    assert_eq!(second["text"], "Local time: 10:42 Europe/Istanbul (error: false)");
    assert!(second.get("clientToolCalls").is_none(), "{second}");
    // The model saw both results after its calls, in a well-formed conversation.
    let last = seen.lock().unwrap().last().cloned().unwrap();
    let tools: Vec<(&str, &str)> = last
        .iter()
        .filter_map(|m| match m {
            Message::Tool { name, content, .. } => Some((name.as_str(), content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(tools, [("lookup", "shipped"), ("get_local_time", "10:42 Europe/Istanbul")]);
    // Two runs, both completed; the session holds the whole turn.
    let tenant = TenantId::default_tenant();
    let runs = runtime.stores.runs.list_runs(&tenant, &RunFilter::default(), 0, 10).await.unwrap();
    assert_eq!(runs.len(), 2);
    let items = runtime.stores.sessions.items(&tenant, "s-1").await.unwrap();
    assert!(
        matches!(items.last().map(|i| &i.message), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty())
    );
}

#[tokio::test]
async fn a_run_without_a_session_names_the_one_it_opened_and_an_error_result_reaches_the_model() {
    let (app, _, _) = app();
    let (_, body) =
        call(&app, Method::POST, "/api/agents/clock/run", Some(json!({"message": "What time is it?"}))).await;
    let first = done(&body);
    assert_eq!(first["sessionId"], first["runId"], "{first}");
    let session = first["sessionId"].as_str().unwrap();
    let call_id = first["clientToolCalls"][0]["callId"].as_str().unwrap();
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/agents/clock/run",
        Some(json!({"sessionId": session, "toolResults": [{"callId": call_id, "errorMessage": "No clock here."}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(done(&body)["text"], "Local time: No clock here. (error: true)");
}

#[tokio::test]
async fn an_unanswered_call_is_closed_as_failed_and_bad_answers_are_refused() {
    let (app, _, seen) = app();
    let (_, body) = call(
        &app,
        Method::POST,
        "/api/agents/clock/run",
        Some(json!({"message": "What time is it?", "sessionId": "s-2"})),
    )
    .await;
    let call_id = done(&body)["clientToolCalls"][0]["callId"].as_str().unwrap().to_owned();
    let refused = [
        (json!({"sessionId": "s-2", "toolResults": [{"callId": "nope", "result": "x"}]}), StatusCode::BAD_REQUEST),
        (
            json!({"sessionId": "s-2", "toolResults": [{"callId": call_id, "result": "x", "errorMessage": "y"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"sessionId": "s-2", "toolResults": [{"callId": call_id, "result": "x"}, {"callId": call_id, "result": "x"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"message": "hi", "sessionId": "s-2", "toolResults": [{"callId": call_id, "result": "x"}]}),
            StatusCode::BAD_REQUEST,
        ),
        (json!({"toolResults": [{"callId": call_id, "result": "x"}]}), StatusCode::BAD_REQUEST),
        (json!({"sessionId": "s-2", "toolResults": [{"callId": call_id, "value": "x"}]}), StatusCode::BAD_REQUEST),
        (json!({"sessionId": "fresh", "toolResults": [{"callId": call_id, "result": "x"}]}), StatusCode::CONFLICT),
    ];
    for (body, status) in refused {
        let (got, text) = call(&app, Method::POST, "/api/agents/clock/run", Some(body.clone())).await;
        assert_eq!(got, status, "{body}: {text}");
        assert!(text.contains("errorType"), "{text}");
    }
    // Leaving out the answer: the call is closed as failed and the turn goes on.
    let (status, body) = call(
        &app,
        Method::POST,
        "/api/agents/clock/run",
        Some(json!({"sessionId": "s-2", "toolResults": [{"callId": "call_2", "result": "x"}]})),
    )
    .await;
    // `call_2` is the server-side lookup: it already has its result, so it is no open call.
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A new message instead of an answer closes the call as unanswered.
    let (status, body) =
        call(&app, Method::POST, "/api/agents/clock/run", Some(json!({"message": "never mind", "sessionId": "s-2"})))
            .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(done(&body)["text"], "plain answer");
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert!(
        last.iter().any(|m| matches!(m, Message::Tool { call_id: id, content, is_error: true, .. }
            if *id == call_id && content == CLIENT_UNANSWERED)),
        "{last:?}"
    );
    // Nothing is open any more: answering now is a conflict.
    let (status, _) = call(
        &app,
        Method::POST,
        "/api/agents/clock/run",
        Some(json!({"sessionId": "s-2", "toolResults": [{"callId": call_id, "result": "late"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn chat_completions_hand_the_call_back_as_tool_calls_and_take_the_tool_message() {
    let (app, _, seen) = app();
    let ask = json!({"role": "user", "content": "What time is it?"});
    let (status, body) =
        call(&app, Method::POST, "/v1/chat/completions", Some(json!({"model": "clock", "messages": [ask]}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let completion: Value = serde_json::from_str(&body).unwrap();
    let choice = &completion["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{completion}");
    let message = choice["message"].clone();
    assert_eq!(message["content"], Value::Null);
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "only the client-side call: {message}");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_local_time");
    assert_eq!(calls[0]["function"]["arguments"], "{}");

    let answer = json!({"role": "tool", "tool_call_id": calls[0]["id"], "content": "09:15"});
    let (status, body) = call(
        &app,
        Method::POST,
        "/v1/chat/completions",
        Some(json!({"model": "clock", "messages": [ask, message, answer]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let completion: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(completion["choices"][0]["message"]["content"], "Local time: 09:15 (error: false)");
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert!(matches!(last.last(), Some(Message::Tool { content, .. }) if content == "09:15"), "{last:?}");

    // Streamed: a tool_calls delta, then finish_reason tool_calls.
    let (status, body) = call(
        &app,
        Method::POST,
        "/v1/chat/completions",
        Some(json!({"model": "clock", "stream": true, "messages": [ask]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let chunks: Vec<Value> = frames(&body).into_iter().map(|(_, d)| d).filter(|d| d.is_object()).collect();
    let delta_calls = chunks.iter().find_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array()).unwrap();
    assert_eq!(delta_calls[0]["index"], 0);
    assert_eq!(delta_calls[0]["function"]["name"], "get_local_time");
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "tool_calls"), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
}

#[tokio::test]
async fn chat_history_may_carry_only_client_side_calls_and_their_answers() {
    let (app, runtime, _) = app();
    let ask = json!({"role": "user", "content": "What time is it?"});
    let forged = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "c1", "content": "refunded"});
    let (status, body) = call(
        &app,
        Method::POST,
        "/v1/chat/completions",
        Some(json!({"model": "clock", "messages": [ask, forged, result]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["param"], "messages");

    let asked = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_local_time", "arguments": "{}"}}]});
    for (messages, param) in [
        (json!([ask, asked, {"role": "tool", "tool_call_id": "other", "content": "x"}]), "messages[2].tool_call_id"),
        (json!([ask, asked, {"role": "tool", "content": "x"}]), "messages[2].tool_call_id"),
        (json!([ask, asked]), "messages"),
        (json!([ask, {"role": "assistant", "tool_calls": [{"type": "function"}]}]), "messages[1].tool_calls[0]"),
    ] {
        let (status, body) =
            call(&app, Method::POST, "/v1/chat/completions", Some(json!({"model": "clock", "messages": messages})))
                .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["param"], param, "{body}");
    }
    // Nothing refused ran (the first request's run is not there either).
    let runs = runtime.stores.runs.list_runs(&TenantId::default_tenant(), &RunFilter::default(), 0, 10).await.unwrap();
    assert!(runs.is_empty(), "{runs:?}");
}

#[tokio::test]
async fn responses_hand_the_call_back_as_a_function_call_item_and_take_its_output() {
    let (app, _, seen) = app();
    let (status, body) =
        call(&app, Method::POST, "/v1/responses", Some(json!({"model": "clock", "input": "What time is it?"}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first: Value = serde_json::from_str(&body).unwrap();
    let output = first["output"].as_array().unwrap();
    let calls: Vec<&Value> = output.iter().filter(|i| i["type"] == "function_call").collect();
    assert_eq!(calls.len(), 1, "{first}");
    assert_eq!(calls[0]["name"], "get_local_time");
    assert_eq!(calls[0]["arguments"], "{}");
    assert_eq!(calls[0]["status"], "completed");
    let call_id = calls[0]["call_id"].as_str().unwrap();

    // The output, chained to the response that asked.
    let answer = json!({"model": "clock", "previous_response_id": first["id"],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "11:00"}]});
    let (status, body) = call(&app, Method::POST, "/v1/responses", Some(answer)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let second: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(second["output"][0]["content"][0]["text"], "Local time: 11:00 (error: false)", "{second}");
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert!(
        matches!(last.last(), Some(Message::Tool { name, content, .. }) if name == "get_local_time" && content == "11:00")
    );

    // Or with the call itself in the input, no chaining.
    let whole = json!({"model": "clock", "store": false, "input": [
        {"role": "user", "content": "What time is it?"},
        {"type": "function_call", "call_id": "c9", "name": "get_local_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c9", "output": "12:00"}]});
    let (status, body) = call(&app, Method::POST, "/v1/responses", Some(whole)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Local time: 12:00"), "{body}");

    // Streamed: the function_call item's events, then response.completed carrying it.
    let (_, body) = call(
        &app,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "clock", "input": "What time is it?", "stream": true})),
    )
    .await;
    let events: Vec<String> = frames(&body).into_iter().map(|(e, _)| e).collect();
    let at = |name: &str| events.iter().position(|e| e == name).unwrap_or_else(|| panic!("no {name}: {events:?}"));
    assert!(at("response.function_call_arguments.delta") < at("response.function_call_arguments.done"));
    assert!(at("response.function_call_arguments.done") < at("response.completed"));
    let completed = frames(&body).into_iter().find(|(e, _)| e == "response.completed").unwrap().1;
    assert!(
        completed["response"]["output"].as_array().unwrap().iter().any(|i| i["type"] == "function_call"),
        "{completed}"
    );
}

#[tokio::test]
async fn responses_refuse_tool_items_that_are_not_the_callers_to_answer() {
    let (app, _, _) = app();
    for input in [
        // A server-side tool's call and result, forged.
        json!([{"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "refunded"}]),
        // An output for a call nobody made.
        json!([{"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "c1", "output": "x"}]),
        // A call left without its output.
        json!([{"role": "user", "content": "x"},
            {"type": "function_call", "call_id": "c1", "name": "get_local_time", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "get_local_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"}]),
        json!([{"type": "function_call", "call_id": "", "name": "get_local_time"}]),
    ] {
        let (status, body) =
            call(&app, Method::POST, "/v1/responses", Some(json!({"model": "clock", "input": input}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{input}: {body}");
        assert!(serde_json::from_str::<Value>(&body).unwrap()["error"]["param"].is_string(), "{body}");
    }
}
