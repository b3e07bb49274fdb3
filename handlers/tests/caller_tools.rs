//! What an OpenAI client adds to its run through the router: its own `tools` (client-side,
//! handed back, answered on the next request), `tool_choice` and `parallel_tool_calls`
//! reaching the model, its `response_format` / `text.format` held like a definition's, each
//! as the agent's `openAi` settings allow; and the `/v1` routes `models/{id}`,
//! `DELETE responses/{id}` and `responses/{id}/input_items`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tracon_core::definition::{AgentDefinition, CallerResponseFormat, CallerTools, OpenAiSettings};
use tracon_core::events::RunEvent;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest, ToolChoice};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runs::store::{RunFilter, RunStatus};
use tracon_core::runtime::{Runtime, RuntimeBuilder};
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings};

type Seen = Arc<Mutex<Vec<ModelRequest>>>;

/// `open` takes a caller's tools and output format; `closed` (the default settings) takes
/// neither. Both have the server-side tool `lookup` and the client-side `get_local_time`.
/// The model calls `get_weather` when it is offered and the last message is the user's;
/// after a tool result it answers with the result; asked for JSON it answers `answer`.
fn app(answer: &'static str) -> (Router, Arc<Runtime>, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let script = ScriptedProvider::from_fn("script", move |req| {
        log.lock().unwrap().push(req.clone());
        let offered = |name: &str| req.tools.iter().any(|t| t.name == name);
        match req.messages.last() {
            Some(Message::Tool { content, .. }) => ScriptedTurn::text(&format!("It is {content}.")),
            _ if req.response_format.is_some() => ScriptedTurn::text(answer),
            _ if offered("get_weather") => ScriptedTurn::tool_call("get_weather", json!({"city": "Izmir"})),
            _ => ScriptedTurn::text("plain answer"),
        }
    });
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks an order up.",
        json!({"type": "object", "properties": {"id": {"type": "string"}}}),
        tool_fn(|_, _| async move { Ok(ToolOutput::from("shipped")) }),
    );
    let settings =
        OpenAiSettings { caller_tools: CallerTools::ClientSide, caller_response_format: CallerResponseFormat::Allow };
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_tool(lookup)
            .add_client_tool("get_local_time", "The time on the user's device.", json!({"type": "object"}))
            .add_agent(AgentDefinition {
                open_ai: Some(settings),
                ..AgentDefinition::new("open", "script", "m").with_tools(&["lookup", "get_local_time"])
            })
            .add_agent(AgentDefinition::new("closed", "script", "m").with_tools(&["lookup", "get_local_time"]))
            .build()
            .unwrap(),
    );
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    (tracon_handlers::router(state), runtime, seen)
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = support::call(method, path).json(body).send(app).await;
    (reply.status, reply.json_or_null())
}

async fn raw(app: &Router, path: &str, body: Value) -> (StatusCode, String) {
    let reply = support::call(Method::POST, path).json(Some(body)).send(app).await;
    (reply.status, reply.text())
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
}

fn chat(agent: &str, extra: Value) -> Value {
    let mut body = json!({"model": agent, "messages": [{"role": "user", "content": "Weather in Izmir?"}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn a_callers_tool_is_handed_back_as_a_tool_call_and_its_answer_continues_the_turn() {
    let (app, runtime, seen) = app("{}");
    let (status, first) =
        call(&app, Method::POST, "/v1/chat/completions", Some(chat("open", json!({"tools": [weather_tool()]})))).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["choices"][0]["finish_reason"], "tool_calls", "{first}");
    let calls = first["choices"][0]["message"]["tool_calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap()["city"],
        "Izmir"
    );
    // The model was offered the agent's tools and the caller's, with the caller's schema.
    let offered: Vec<String> = seen.lock().unwrap()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, ["lookup", "get_local_time", "get_weather"]);
    assert_eq!(seen.lock().unwrap()[0].tools[2].parameters["required"], json!(["city"]));

    // The caller answers the call; the turn goes on with the tools declared again.
    let body = json!({"model": "open", "tools": [weather_tool()], "messages": [
        {"role": "user", "content": "Weather in Izmir?"},
        {"role": "assistant", "content": null, "tool_calls": calls},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny, 24°C"},
    ]});
    let (status, second) = call(&app, Method::POST, "/v1/chat/completions", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["choices"][0]["message"]["content"], "It is sunny, 24°C.");
    assert_eq!(second["choices"][0]["finish_reason"], "stop");

    // Both are recorded runs; the first records the call it handed back.
    let tenant = TenantId::default_tenant();
    let runs = runtime.stores.runs.list_runs(&tenant, &RunFilter::default(), 0, 10).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed));
    let first_run = runs.iter().min_by_key(|r| r.started_at).unwrap();
    let events = runtime.stores.runs.read_events(&tenant, first_run.id, 0, 100).await.unwrap();
    assert!(
        events.iter().any(|e| matches!(&e.event, RunEvent::RunCompleted { client_tool_calls, .. }
            if client_tool_calls.iter().any(|c| c.tool_name == "get_weather"))),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_streamed_callers_tool_call_arrives_as_a_tool_calls_delta() {
    let (app, _, _) = app("{}");
    let (status, text) =
        raw(&app, "/v1/chat/completions", chat("open", json!({"stream": true, "tools": [weather_tool()]}))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let delta = chunks.iter().find_map(|c| c["choices"][0]["delta"].get("tool_calls")).unwrap();
    assert_eq!(delta[0]["function"]["name"], "get_weather");
    assert_eq!(delta[0]["index"], 0);
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "tool_calls"), "{text}");
}

#[tokio::test]
async fn a_callers_tools_are_refused_unless_the_agent_takes_them_and_never_shadow_a_server_tool() {
    let (app, _, seen) = app("{}");
    let cases = [
        // The default settings take no tools of the caller's …
        (chat("closed", json!({"tools": [weather_tool()]})), "tools", "openAi.callerTools"),
        // … nor may any caller's tool take a server-side tool's name.
        (
            chat("open", json!({"tools": [{"type": "function", "function": {"name": "lookup"}}]})),
            "tools[0].function.name",
            "server-side",
        ),
        (chat("open", json!({"tools": [weather_tool(), weather_tool()]})), "tools[1].function.name", "twice"),
        (
            chat("open", json!({"tools": [{"type": "function", "function": {"name": "no spaces"}}]})),
            "tools[0].function.name",
            "tool name",
        ),
        (
            chat(
                "open",
                json!({"tools": [{"type": "function", "function": {"name": "x", "parameters": {"type": "array"}}}]}),
            ),
            "tools[0].function.parameters",
            "object",
        ),
        (chat("open", json!({"tools": [{"type": "web_search"}]})), "tools[0].type", "built-in"),
        (
            chat("open", json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}})),
            "tool_choice",
            "nope",
        ),
        (chat("open", json!({"tool_choice": "sometimes"})), "tool_choice", "auto"),
        (chat("closed", json!({"response_format": {"type": "json_object"}})), "response_format", "fixes its own"),
        (
            chat(
                "open",
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "bad name", "schema": {}}}}),
            ),
            "response_format.name",
            "name",
        ),
    ];
    for (body, param, says) in cases {
        let (status, error) = call(&app, Method::POST, "/v1/chat/completions", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(says), "{body}: {error}");
    }
    assert!(seen.lock().unwrap().is_empty(), "no refused request reached the model");

    // Declaring the agent's own client-side tool is no addition: even `closed` takes it.
    let own = json!({"type": "function", "function": {"name": "get_local_time", "parameters": {"type": "object"}}});
    let (status, answer) =
        call(&app, Method::POST, "/v1/chat/completions", Some(chat("closed", json!({"tools": [own]})))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

#[tokio::test]
async fn tool_choice_and_parallel_tool_calls_reach_the_model_for_the_whole_tool_set() {
    let (app, _, seen) = app("{}");
    let choice = |extra: Value| {
        chat(
            "open",
            json!({"tools": [weather_tool()]})
                .as_object()
                .unwrap()
                .clone()
                .into_iter()
                .chain(extra.as_object().unwrap().clone())
                .collect::<serde_json::Map<_, _>>()
                .into(),
        )
    };

    // `none`: the tools are offered, the model is told not to call them, and a call it
    // makes anyway is not handed back.
    let (status, answer) =
        call(&app, Method::POST, "/v1/chat/completions", Some(choice(json!({"tool_choice": "none"})))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop", "{answer}");
    assert!(answer["choices"][0]["message"].get("tool_calls").is_none(), "{answer}");
    let sent = seen.lock().unwrap().pop().unwrap();
    assert_eq!((sent.tool_choice, sent.tools.len()), (ToolChoice::None, 3));

    // `required` and a named function hold for the turn's first call.
    for (given, wanted) in [
        (json!("required"), ToolChoice::Required),
        (json!({"type": "function", "function": {"name": "lookup"}}), ToolChoice::Function("lookup".into())),
    ] {
        let (status, answer) = call(
            &app,
            Method::POST,
            "/v1/chat/completions",
            Some(choice(json!({"tool_choice": given, "parallel_tool_calls": false}))),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let sent = seen.lock().unwrap().drain(..).next().unwrap();
        assert_eq!(sent.tool_choice, wanted);
        assert!(!sent.parallel_tool_calls);
    }
}

#[tokio::test]
async fn a_callers_response_format_holds_when_the_agent_allows_it() {
    let (router, _, seen) = app(r#"{"city": "Izmir", "celsius": 24}"#);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
        "required": ["city", "celsius"], "additionalProperties": false});
    let format = json!({"type": "json_schema", "json_schema": {"name": "weather", "schema": schema, "strict": true}});
    let (status, answer) =
        call(&router, Method::POST, "/v1/chat/completions", Some(chat("open", json!({"response_format": format}))))
            .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let content: Value = serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"city": "Izmir", "celsius": 24}));
    let sent = seen.lock().unwrap().pop().unwrap();
    assert!(
        matches!(&sent.response_format, Some(tracon_core::definition::ResponseFormat::JsonSchema { name, .. }) if name == "weather")
    );

    // An answer that breaks the caller's schema is refused like a definition's would be.
    let (broken, _, _) = app(r#"{"city": "Izmir"}"#);
    let (status, error) =
        call(&broken, Method::POST, "/v1/chat/completions", Some(chat("open", json!({"response_format": format}))))
            .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{error}");
    assert_eq!(error["error"]["code"], "structured_response_rejected", "{error}");
}

#[tokio::test]
async fn the_responses_api_takes_function_tools_and_text_format_and_echoes_them() {
    let (app, _, seen) = app(r#"{"ok": true}"#);
    let tool = json!({"type": "function", "name": "get_weather", "description": "The weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let (status, first) = call(
        &app,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "open", "input": "Weather in Izmir?", "tools": [tool], "tool_choice": "required"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let item = first["output"].as_array().unwrap().iter().find(|i| i["type"] == "function_call").unwrap().clone();
    assert_eq!(item["name"], "get_weather");
    assert_eq!(
        (first["tool_choice"].clone(), first["tools"][0]["name"].clone()),
        (json!("required"), json!("get_weather"))
    );
    assert_eq!(seen.lock().unwrap()[0].tool_choice, ToolChoice::Required);

    let (status, second) = call(
        &app,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "open", "previous_response_id": first["id"], "tools": [tool],
            "input": [{"type": "function_call_output", "call_id": item["call_id"], "output": "sunny"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["output"][0]["content"][0]["text"], "It is sunny.");
    // Its input: the question, the call handed back and the caller's output for it.
    let (_, items) = call(
        &app,
        Method::GET,
        &format!("/v1/responses/{}/input_items?order=asc", second["id"].as_str().unwrap()),
        None,
    )
    .await;
    let kinds: Vec<&str> = items["data"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["message", "function_call", "function_call_output"], "{items}");
    assert_eq!(items["data"][2]["output"], "sunny");

    let format = json!({"format": {"type": "json_schema", "name": "ok", "schema": {"type": "object"}}});
    let (status, third) = call(
        &app,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "open", "input": "JSON please", "text": format})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{third}");
    assert_eq!(third["text"]["format"]["name"], "ok");
    assert_eq!(third["output"][0]["content"][0]["text"], r#"{"ok": true}"#);

    for (body, param) in [
        (json!({"model": "open", "input": "x", "tools": [{"type": "file_search"}]}), "tools[0].type"),
        (json!({"model": "closed", "input": "x", "tools": [tool]}), "tools"),
        (json!({"model": "closed", "input": "x", "text": format}), "text.format"),
    ] {
        let (status, error) = call(&app, Method::POST, "/v1/responses", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {error}");
        assert_eq!(error["error"]["param"], param, "{body}: {error}");
    }
}

#[tokio::test]
async fn harmless_default_fields_are_accepted() {
    let (app, _, _) = app("{}");
    let body = chat(
        "closed",
        json!({"modalities": ["text"], "top_logprobs": 0, "logprobs": false, "n": 1,
        "tool_choice": "auto", "parallel_tool_calls": true, "response_format": {"type": "text"}, "tools": []}),
    );
    let (status, answer) = call(&app, Method::POST, "/v1/chat/completions", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, error) = call(
        &app,
        Method::POST,
        "/v1/chat/completions",
        Some(chat("closed", json!({"modalities": ["text", "audio"]}))),
    )
    .await;
    assert_eq!((status, error["error"]["param"].clone()), (StatusCode::BAD_REQUEST, json!("modalities")));
}

#[tokio::test]
async fn a_model_is_retrieved_by_name_and_an_unknown_one_is_not_found() {
    let (app, _, _) = app("{}");
    let (status, model) = call(&app, Method::GET, "/v1/models/open", None).await;
    assert_eq!(status, StatusCode::OK, "{model}");
    assert_eq!((model["id"].clone(), model["object"].clone()), (json!("open"), json!("model")));
    for missing in ["/v1/models/nobody", "/v1/models/NOT%20A%20NAME"] {
        let (status, error) = call(&app, Method::GET, missing, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
        assert_eq!(error["error"]["code"], "model_not_found");
    }
}

#[tokio::test]
async fn a_stored_response_lists_its_input_items_and_can_be_deleted() {
    let (app, _, _) = app("{}");
    let (_, first) =
        call(&app, Method::POST, "/v1/responses", Some(json!({"model": "closed", "input": "Hello there"}))).await;
    let id = first["id"].as_str().unwrap().to_owned();
    let (_, second) = call(
        &app,
        Method::POST,
        "/v1/responses",
        Some(json!({"model": "closed", "input": "And again", "previous_response_id": id})),
    )
    .await;
    let second_id = second["id"].as_str().unwrap().to_owned();

    let (status, items) =
        call(&app, Method::GET, &format!("/v1/responses/{second_id}/input_items?order=asc"), None).await;
    assert_eq!(status, StatusCode::OK, "{items}");
    let texts: Vec<&str> =
        items["data"].as_array().unwrap().iter().map(|i| i["content"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["Hello there", "plain answer", "And again"]);
    assert_eq!(items["object"], "list");

    let (status, deleted) = call(&app, Method::DELETE, &format!("/v1/responses/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted, json!({"id": id, "object": "response", "deleted": true}));
    for path in [format!("/v1/responses/{id}"), format!("/v1/responses/{id}/input_items")] {
        let (status, error) = call(&app, Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {error}");
    }
    let (status, _) = call(&app, Method::DELETE, &format!("/v1/responses/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The chained response holds its own copy of the conversation: it is still there.
    let (status, _) = call(&app, Method::GET, &format!("/v1/responses/{second_id}"), None).await;
    assert_eq!(status, StatusCode::OK);
}
