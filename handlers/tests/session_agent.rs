//! A session is one agent's conversation: running another agent with its id is refused with
//! `409 session_agent_mismatch` on every surface that takes a session — the native run
//! (streamed, buffered, queued), the estimate, OpenAI Responses' `conversation` and
//! `previous_response_id` — and nothing is written. A branch is a new conversation any agent
//! may take; a conversation reservation belongs to the first agent that runs in it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Manual, call};
use tracon_core::attribution::Attribution;
use tracon_core::definition::AgentDefinition;
use tracon_core::identity::Caller;
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::{AgentName, SessionId, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::runs::launch::{Delivery, Start, launch};
use tracon_core::runs::request::{RunRequest, StartError};
use tracon_core::runtime::{RunQueue, Runtime, RuntimeBuilder};
use tracon_handlers::{AppState, HttpSettings};

struct App {
    router: Router,
    runtime: Arc<Runtime>,
    calls: Arc<Mutex<usize>>,
}

fn app() -> App {
    let calls: Arc<Mutex<usize>> = Arc::default();
    let count = calls.clone();
    let script = ScriptedProvider::from_fn("script", move |_| {
        *count.lock().unwrap() += 1;
        ScriptedTurn::text("Answered.")
    });
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_agent(AgentDefinition::new("support", "script", "m").with_instructions("You are support."))
            .add_agent(AgentDefinition::new("orders", "script", "m").with_instructions("You are orders."))
            .build()
            .unwrap(),
    );
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    App { router: tracon_handlers::router(state), runtime, calls }
}

fn tenant() -> TenantId {
    TenantId::default_tenant()
}

async fn post(app: &Router, path: &str, body: Value) -> (StatusCode, Value) {
    let reply = call(Method::POST, path).json(Some(body)).send(app).await;
    (reply.status, reply.json())
}

/// Runs `agent` in `session` to its end.
async fn turn(app: &Router, agent: &str, session: &str) {
    let reply = call(Method::POST, &format!("/api/agents/{agent}/run"))
        .json(Some(json!({"message": "Hello", "sessionId": session})))
        .send(app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert!(reply.text().contains("event: done"), "{}", reply.text());
}

/// The session's agent and item count as stored.
async fn stored(runtime: &Runtime, session: &str) -> (Option<String>, u64) {
    let record = runtime.stores.sessions.get(&tenant(), session).await.unwrap().unwrap();
    (record.agent_name, record.item_count)
}

fn assert_mismatch(status: StatusCode, doc: &Value) {
    assert_eq!(status, StatusCode::CONFLICT, "{doc}");
    assert_eq!(doc["errorType"], "session_agent_mismatch", "{doc}");
    assert_eq!(doc["sessionAgent"], "support", "{doc}");
    assert_eq!(doc["field"], "sessionId", "{doc}");
}

#[tokio::test]
async fn running_another_agent_in_a_session_is_409_and_leaves_the_session_alone() {
    let app = app();
    turn(&app.router, "support", "s-1").await;
    let before = stored(&app.runtime, "s-1").await;
    assert_eq!(before, (Some("support".into()), 2));
    let calls = *app.calls.lock().unwrap();

    // Streamed, buffered (Idempotency-Key) and the dry run alike.
    let body = json!({"message": "Where is my order?", "sessionId": "s-1"});
    let (status, doc) = post(&app.router, "/api/agents/orders/run", body.clone()).await;
    assert_mismatch(status, &doc);
    assert!(doc["detail"].as_str().unwrap().contains("support"), "{doc}");
    let reply = call(Method::POST, "/api/agents/orders/run")
        .header("idempotency-key", "k-1")
        .json(Some(body.clone()))
        .send(&app.router)
        .await;
    assert_mismatch(reply.status, &reply.json());
    let (status, doc) = post(&app.router, "/api/agents/orders/estimate", body).await;
    assert_mismatch(status, &doc);

    assert_eq!(stored(&app.runtime, "s-1").await, before, "the session was not rewritten");
    assert_eq!(*app.calls.lock().unwrap(), calls, "no model was called");
    // Its own agent goes on.
    turn(&app.router, "support", "s-1").await;
    assert_eq!(stored(&app.runtime, "s-1").await, (Some("support".into()), 4));
}

#[tokio::test]
async fn a_queued_run_in_another_agents_session_is_refused_before_202() {
    let app = app();
    app.runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 3 });
    turn(&app.router, "support", "s-q").await;
    let reply = call(Method::POST, "/api/agents/orders/run")
        .header("prefer", "respond-async")
        .json(Some(json!({"message": "Hi", "sessionId": "s-q"})))
        .send(&app.router)
        .await;
    assert_mismatch(reply.status, &reply.json());
    let jobs = app.runtime.stores.jobs.list(&tenant(), &Default::default(), 0, 10).await.unwrap();
    assert!(jobs.is_empty(), "nothing was queued");
}

#[tokio::test]
async fn the_run_lifecycle_itself_refuses_another_agents_session() {
    // What the surfaces that do not admit a run (a schedule, a queued run's worker, a resumed
    // run) go through: the session is checked again as it is loaded.
    let app = app();
    turn(&app.router, "support", "s-core").await;
    let request = RunRequest {
        session_id: Some(SessionId::parse("s-core").unwrap()),
        ..RunRequest::new(
            tenant(),
            AgentName::parse("orders").unwrap(),
            "Hi".into(),
            Caller::internal(),
            Attribution::default(),
        )
    };
    match launch(&app.runtime, Start::new(request, Delivery::Buffered)).await {
        Err(StartError::Session(refusal)) => {
            assert!(format!("{refusal:?}").contains("support"), "{refusal:?}");
        }
        Err(other) => panic!("refused for another reason: {other:?}"),
        Ok(_) => panic!("the run started"),
    }
    assert_eq!(stored(&app.runtime, "s-core").await, (Some("support".into()), 2));
}

#[tokio::test]
async fn a_branch_is_a_new_conversation_another_agent_may_take() {
    let app = app();
    turn(&app.router, "support", "s-parent").await;
    let (status, branch) =
        post(&app.router, "/api/sessions/s-parent/branch", json!({"sequence": 1, "sessionId": "s-branch"})).await;
    assert_eq!(status, StatusCode::CREATED, "{branch}");
    assert_eq!(branch["agentName"], Value::Null, "{branch}");
    turn(&app.router, "orders", "s-branch").await;
    assert_eq!(stored(&app.runtime, "s-branch").await, (Some("orders".into()), 4));
    // The branch is now orders' conversation; the parent is still support's.
    let (status, doc) =
        post(&app.router, "/api/agents/support/run", json!({"message": "Hi", "sessionId": "s-branch"})).await;
    assert_eq!((status, doc["sessionAgent"].as_str()), (StatusCode::CONFLICT, Some("orders")), "{doc}");
    assert_eq!(stored(&app.runtime, "s-parent").await, (Some("support".into()), 2));
}

#[tokio::test]
async fn responses_refuse_another_agents_conversation_and_previous_response() {
    let app = app();
    // A reservation belongs to the first agent that runs in it.
    let (status, conversation) = post(&app.router, "/v1/conversations", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{conversation}");
    let conv = conversation["id"].as_str().unwrap().to_owned();
    let (status, answer) =
        post(&app.router, "/v1/responses", json!({"model": "support", "conversation": conv, "input": "Hi"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let before = stored(&app.runtime, &conv).await;
    assert_eq!(before.0.as_deref(), Some("support"));

    // Earlier input items are not appended either.
    let body = json!({"model": "orders", "conversation": conv, "input": [
        {"role": "assistant", "content": "Earlier."},
        {"role": "user", "content": "Where is my order?"}]});
    let (status, error) = post(&app.router, "/v1/responses", body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["type"], "session_agent_mismatch", "{error}");
    assert_eq!(error["error"]["param"], "conversation", "{error}");
    assert_eq!(stored(&app.runtime, &conv).await, before, "the conversation was not written");

    // A response of support cannot be continued by orders.
    let (status, error) = post(
        &app.router,
        "/v1/responses",
        json!({"model": "orders", "previous_response_id": answer["id"], "input": "Hi"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["error"]["type"], "session_agent_mismatch", "{error}");
    assert_eq!(error["error"]["param"], "previous_response_id", "{error}");
    let first = post(&app.router, "/v1/responses", json!({"model": "support", "input": "Hi"})).await.1;
    let (status, error) = post(
        &app.router,
        "/v1/responses",
        json!({"model": "orders", "previous_response_id": first["id"], "input": "Hi"}),
    )
    .await;
    assert_eq!(
        (status, error["error"]["param"].as_str()),
        (StatusCode::CONFLICT, Some("previous_response_id")),
        "{error}"
    );
    // Its own agent chains on.
    let (status, _) = post(
        &app.router,
        "/v1/responses",
        json!({"model": "support", "previous_response_id": first["id"], "input": "Hi"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}
