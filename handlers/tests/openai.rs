//! The OpenAI-compatible endpoints through the router: chat completions (whole and
//! streamed), the models list, and OpenAI's error envelope for everything refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tracon_core::definition::AgentDefinition;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runs::store::RunFilter;
use tracon_core::runtime::{Runtime, RuntimeBuilder};
use tracon_handlers::{AppState, HttpSettings};

/// What the model was sent: the system text and the messages.
type Seen = Arc<Mutex<Vec<(Option<String>, Vec<Message>)>>>;

fn app() -> (Router, Arc<Runtime>, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let script = ScriptedProvider::from_fn("script", move |req| {
        log.lock().unwrap().push((req.system.clone(), req.messages.clone()));
        ScriptedTurn::text("Order 4182 ships tomorrow.").with_usage(11, 5)
    });
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_agent(AgentDefinition::new("support", "script", "m").with_instructions("You are the support agent."))
            .build()
            .unwrap(),
    );
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    (tracon_handlers::router(state), runtime, seen)
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, String, String) {
    let reply = support::call(method, path).json(body).send(app).await;
    (reply.status, reply.header("content-type").unwrap_or_default().to_owned(), reply.text())
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": "support", "messages": [{"role": "user", "content": "Where is order 4182?"}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn a_chat_completion_is_a_recorded_run_of_the_agent_named_by_model() {
    let (app, runtime, seen) = app();
    let body = json!({"model": "support", "temperature": 0.2, "messages": [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, how can I help?"},
        {"role": "user", "content": [{"type": "text", "text": "Where is "}, {"type": "text", "text": "order 4182?"}]},
    ]});
    let (status, content_type, text) = call(&app, Method::POST, "/v1/chat/completions", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(content_type.starts_with("application/json"));
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["model"], "support");
    assert_eq!(
        answer["choices"][0]["message"],
        json!({"role": "assistant", "content": "Order 4182 ships tomorrow.", "refusal": null})
    );
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["usage"], json!({"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}));

    // The model got the agent's instructions with the caller's appended, and the history.
    let (system, messages) = seen.lock().unwrap()[0].clone();
    assert_eq!(system.as_deref(), Some("You are the support agent.\n\nAnswer in one sentence."));
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[2], Message::User { text: "Where is order 4182?".into() });

    // It is a recorded run, and no session was written.
    let runs = runtime.stores.runs.list_runs(&TenantId::default_tenant(), &RunFilter::default(), 0, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    let id = answer["id"].as_str().unwrap();
    assert_eq!(id, format!("chatcmpl-{}", runs[0].id.0.simple()));
    assert_eq!(runs[0].session_id, None);
    let sessions = runtime.stores.sessions.list(&TenantId::default_tenant(), None, 0, 10).await.unwrap();
    assert!(sessions.is_empty());
}

#[tokio::test]
async fn a_streamed_chat_completion_sends_chunks_usage_and_done() {
    let (app, _, _) = app();
    let body = chat(json!({"stream": true, "stream_options": {"include_usage": true}}));
    let (status, content_type, text) = call(&app, Method::POST, "/v1/chat/completions", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let frames: Vec<&str> = text.split("\n\n").filter(|f| !f.is_empty()).collect();
    assert!(frames.iter().all(|f| f.starts_with("data: ")), "{text}");
    assert_eq!(*frames.last().unwrap(), "data: [DONE]");
    let chunks: Vec<Value> =
        frames[..frames.len() - 1].iter().map(|f| serde_json::from_str(&f["data: ".len()..]).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(content, "Order 4182 ships tomorrow.");
    let finish = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str()).unwrap();
    assert_eq!(finish, "stop");
    let usage = chunks.last().unwrap();
    assert_eq!((usage["choices"].clone(), usage["usage"]["total_tokens"].clone()), (json!([]), json!(16)));
    let ids: std::collections::BTreeSet<&str> = chunks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "one id for every chunk");

    // Without include_usage there is no usage chunk.
    let (_, _, text) = call(&app, Method::POST, "/v1/chat/completions", Some(chat(json!({"stream": true})))).await;
    assert!(!text.contains("\"usage\""), "{text}");
}

#[tokio::test]
async fn requests_that_would_change_meaning_if_ignored_are_refused_in_openais_envelope() {
    let (app, runtime, _) = app();
    for (body, status, param) in [
        (chat(json!({"n": 2})), StatusCode::BAD_REQUEST, "n"),
        (chat(json!({"tools": [{"type": "function", "function": {"name": "x"}}]})), StatusCode::BAD_REQUEST, "tools"),
        (chat(json!({"response_format": {"type": "json_object"}})), StatusCode::BAD_REQUEST, "response_format"),
        (chat(json!({"logprobs": true})), StatusCode::BAD_REQUEST, "logprobs"),
        (chat(json!({"frobnicate": 1})), StatusCode::BAD_REQUEST, "frobnicate"),
        (chat(json!({"stream": "yes"})), StatusCode::BAD_REQUEST, "stream"),
        (json!({"model": "support", "messages": []}), StatusCode::BAD_REQUEST, "messages"),
        (json!({"messages": [{"role": "user", "content": "x"}]}), StatusCode::BAD_REQUEST, "model"),
        (
            json!({"model": "support", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}),
            StatusCode::BAD_REQUEST,
            "messages",
        ),
        (
            json!({"model": "support", "messages": [{"role": "tool", "content": "x", "tool_call_id": "c"}]}),
            StatusCode::BAD_REQUEST,
            "messages[0].tool_call_id",
        ),
        (
            json!({"model": "support", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            StatusCode::BAD_REQUEST,
            "messages[0].content[0]",
        ),
    ] {
        let (got, _, text) = call(&app, Method::POST, "/v1/chat/completions", Some(body.clone())).await;
        assert_eq!(got, status, "{body}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["param"], param, "{body}: {text}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{text}");
        assert_eq!(error["error"]["type"], error["error"]["code"]);
    }
    let (got, _, text) = call(&app, Method::POST, "/v1/chat/completions", Some(chat(json!({"model": "ghost"})))).await;
    assert_eq!(got, StatusCode::NOT_FOUND, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["type"], "agent_not_found", "{text}");
    let (got, _, text) = call(&app, Method::POST, "/v1/chat/completions", None).await;
    assert_eq!(got, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{text}");
    assert!(serde_json::from_str::<Value>(&text).unwrap()["error"]["message"].is_string());
    // Nothing refused was run.
    let runs = runtime.stores.runs.list_runs(&TenantId::default_tenant(), &RunFilter::default(), 0, 10).await.unwrap();
    assert!(runs.is_empty());
}

#[tokio::test]
async fn models_lists_the_agents() {
    let (app, _, _) = app();
    let (status, _, text) = call(&app, Method::GET, "/v1/models", None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["support"]);
    assert_eq!(list["data"][0]["object"], "model");
}

#[tokio::test]
async fn refusals_of_the_shared_layers_arrive_in_openais_envelope_too() {
    let (app, _, _) = app();
    // A route that does not exist under /v1, and a method the route does not take.
    for (method, path, status) in [
        (Method::POST, "/v1/embeddings", StatusCode::NOT_FOUND),
        (Method::GET, "/v1/chat/completions", StatusCode::METHOD_NOT_ALLOWED),
    ] {
        let (got, content_type, text) = call(&app, method, path, Some(json!({}))).await;
        assert_eq!(got, status, "{text}");
        assert!(content_type.starts_with("application/json"), "{content_type}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{text}");
    }
    // Native routes keep their problem documents.
    let (_, content_type, _) = call(&app, Method::GET, "/api/nothing-here", None).await;
    assert!(content_type.starts_with("application/problem+json"), "{content_type}");
}

#[tokio::test]
async fn a_whole_chat_completion_asks_the_model_for_a_whole_answer_and_a_streamed_one_for_a_stream() {
    let asked: Arc<Mutex<Vec<bool>>> = Arc::default();
    let log = asked.clone();
    let script = ScriptedProvider::from_fn("script", move |req| {
        log.lock().unwrap().push(req.whole);
        ScriptedTurn::text("Order 4182 ships tomorrow.").with_usage(11, 5)
    });
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("support", "script", "m"))
        .build()
        .unwrap();
    let app = tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()));
    let (status, _, whole) = call(&app, Method::POST, "/v1/chat/completions", Some(chat(json!({})))).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let answer: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "Order 4182 ships tomorrow.");
    assert_eq!(answer["usage"]["completion_tokens"], 5);
    let (status, _, streamed) =
        call(&app, Method::POST, "/v1/chat/completions", Some(chat(json!({"stream": true})))).await;
    assert_eq!(status, StatusCode::OK, "{streamed}");
    assert!(streamed.contains("chat.completion.chunk") && streamed.contains("data: [DONE]"), "{streamed}");
    assert_eq!(*asked.lock().unwrap(), vec![true, false], "whole for the whole answer, a stream for the stream");
}
