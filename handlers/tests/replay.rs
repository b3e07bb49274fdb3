//! `POST /api/runs/{id}/replay` through the router, in its three tool modes and its
//! refusals. The scripted model calls `lookup` once (with `{"id": 8}` when its instructions
//! say `v2`, `{"id": 7}` otherwise) and then answers with the result it got; offered no
//! tools, it answers plainly. `lookup` counts its real executions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use serde_json::{Value, json};
use support::{call, frames};
use tracon_core::keys::Scope;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest};
use tracon_core::names::{RunId, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::recorder::RecordingSettings;
use tracon_core::runs::store::{RunRecord, RunStatus};
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings};

const TOKEN: &str = "a-long-enough-replay-token";

struct App {
    app: Router,
    runtime: Arc<Runtime>,
    executions: Arc<AtomicU32>,
}

fn model() -> ScriptedProvider {
    ScriptedProvider::from_fn("script", |request: &ModelRequest| {
        if request.tools.is_empty() {
            return ScriptedTurn::text("no tools: a plain answer").with_usage(5, 5);
        }
        let answered = request.messages.iter().rev().find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        });
        match answered {
            Some(result) => ScriptedTurn::text(&format!("answer: {result}")),
            None if request.system.as_deref().is_some_and(|s| s.contains("v2")) => {
                ScriptedTurn::tool_call("lookup", json!({"id": 8}))
            }
            None => ScriptedTurn::tool_call("lookup", json!({"id": 7})),
        }
        .with_usage(5, 5)
    })
}

fn app_with(record_input: bool) -> App {
    let executions = Arc::new(AtomicU32::new(0));
    let counter = executions.clone();
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks an order up.",
        json!({"type": "object"}),
        tool_fn(move |_, _| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok(ToolOutput::from(format!("live {n}"))) }
        }),
    );
    let recording = RecordingSettings { record_input, ..RecordingSettings::default() };
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .settings(RuntimeSettings { recording, ..RuntimeSettings::default() })
        .add_provider(Arc::new(model()) as Arc<dyn ModelProvider>)
        .add_tool(lookup)
        .add_client_tool("pick_file", "Lets the user pick a file.", json!({"type": "object"}))
        .build()
        .unwrap();
    let runtime = Arc::new(runtime);
    let app = tracon_handlers::router(AppState::new(runtime.clone(), HttpSettings::with_token(TOKEN)));
    App { app, runtime, executions }
}

async fn send(app: &Router, method: Method, path: &str, bearer: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = call(method, path).from(support::REMOTE).bearer(bearer).json(body).send(app).await;
    (reply.status, reply.json())
}

/// Stores (or updates) agent `name` with `instructions` and `tools`.
async fn save(app: &Router, name: &str, instructions: &str, tools: &[&str]) {
    let body = json!({"name": name, "instructions": instructions, "model": {"provider": "script", "model": "m"}, "toolNames": tools});
    let (status, _) = send(app, Method::PUT, &format!("/api/agents/{name}"), TOKEN, Some(body.clone())).await;
    if status == StatusCode::NOT_FOUND {
        let (status, doc) = send(app, Method::POST, "/api/agents", TOKEN, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{doc}");
    }
}

/// Runs `agent` once; its run id and final text.
async fn run(app: &Router, agent: &str) -> (String, String) {
    let reply = call(Method::POST, &format!("/api/agents/{agent}/run"))
        .from(support::REMOTE)
        .bearer(TOKEN)
        .json(Some(json!({"message": "where is my order?"})))
        .send(app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let frames = frames(&reply.text());
    let id = frames.iter().find(|(e, _)| e == "run").unwrap().1["runId"].as_str().unwrap().to_owned();
    let done = frames.iter().find(|(e, _)| e == "done").unwrap().1.clone();
    (id, done["text"].as_str().unwrap_or_default().to_owned())
}

async fn replay(app: &Router, run: &str, bearer: &str, body: Value) -> (StatusCode, Value) {
    send(app, Method::POST, &format!("/api/runs/{run}/replay"), bearer, Some(body)).await
}

#[tokio::test]
async fn replay_tools_answers_from_the_record_and_the_replay_names_its_source() {
    let a = app_with(true);
    save(&a.app, "clerk", "v1", &["lookup"]).await;
    let (source, text) = run(&a.app, "clerk").await;
    assert_eq!(text, "answer: live 1");
    assert_eq!(a.executions.load(Ordering::SeqCst), 1);

    let (status, done) = replay(&a.app, &source, TOKEN, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!((done["status"].as_str(), done["toolMode"].as_str()), (Some("Completed"), Some("ReplayTools")));
    assert_eq!(done["text"], "answer: live 1", "the recorded answer, not a new one");
    assert_eq!(done["replayOfRunId"].as_str(), Some(source.as_str()));
    assert_eq!(a.executions.load(Ordering::SeqCst), 1, "nothing ran for real");

    let replay_id = done["runId"].as_str().unwrap();
    let (_, row) = send(&a.app, Method::GET, &format!("/api/runs/{replay_id}"), TOKEN, None).await;
    assert_eq!(row["replayOfRunId"].as_str(), Some(source.as_str()));
    assert!(row["sessionId"].is_null(), "sessionless: {row}");
    let (_, tools) = send(&a.app, Method::GET, &format!("/api/runs/{replay_id}/tools"), TOKEN, None).await;
    assert_eq!(tools[0]["toolName"], "lookup");
    assert_eq!((tools[0]["status"].as_str(), tools[0]["result"].as_str()), (Some("Succeeded"), Some("live 1")));
}

#[tokio::test]
async fn a_call_the_source_never_made_stops_the_replay_and_a_selected_version_replays_as_it_was() {
    let a = app_with(true);
    save(&a.app, "clerk", "v1", &["lookup"]).await;
    let (source, _) = run(&a.app, "clerk").await;
    // Version 2 asks for another order: the record has no answer for that call.
    save(&a.app, "clerk", "v2", &["lookup"]).await;
    let (status, done) = replay(&a.app, &source, TOKEN, json!({"toolMode": "ReplayTools"})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["status"], "Failed", "{done}");
    assert_eq!(done["error"]["errorType"], "replay_mismatch");
    assert!(done["error"]["message"].as_str().unwrap().contains("'lookup'"), "{done}");
    assert_eq!(a.executions.load(Ordering::SeqCst), 1, "the mismatched call did not run");

    let (status, done) = replay(&a.app, &source, TOKEN, json!({"agentVersion": 1})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!((done["status"].as_str(), done["text"].as_str()), (Some("Completed"), Some("answer: live 1")), "{done}");

    let (status, doc) = replay(&a.app, &source, TOKEN, json!({"agentVersion": 9})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{doc}");
    assert_eq!(doc["errorType"], "version_not_found");
}

#[tokio::test]
async fn no_tools_gets_only_the_models_answer_and_live_tools_runs_them_for_an_admin_only() {
    let a = app_with(true);
    save(&a.app, "clerk", "v1", &["lookup"]).await;
    let (source, _) = run(&a.app, "clerk").await;

    let (status, done) = replay(&a.app, &source, TOKEN, json!({"toolMode": "NoTools"})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["text"], "no tools: a plain answer");
    assert_eq!(a.executions.load(Ordering::SeqCst), 1);

    // An operator's key may replay, but not with live tools.
    let operator = support::api_key(&a.runtime, "default", &[Scope::RunsRead, Scope::RunsWrite], None).await;
    let (status, doc) = replay(&a.app, &source, &operator, json!({"toolMode": "LiveTools"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{doc}");
    assert_eq!(doc["errorType"], "admin_required");
    assert_eq!(a.executions.load(Ordering::SeqCst), 1);
    let (status, done) = replay(&a.app, &source, &operator, json!({})).await;
    assert_eq!((status, done["status"].as_str()), (StatusCode::OK, Some("Completed")), "{done}");

    let admin = support::api_key(&a.runtime, "default", &Scope::ALL, None).await;
    let (status, done) = replay(&a.app, &source, &admin, json!({"toolMode": "LiveTools"})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["text"], "answer: live 2", "the tool ran again");
    assert_eq!(a.executions.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn replays_that_cannot_be_faithful_are_refused() {
    let a = app_with(true);
    save(&a.app, "clerk", "v1", &["lookup"]).await;
    save(&a.app, "picker", "v1", &["lookup", "pick_file"]).await;
    let (source, _) = run(&a.app, "clerk").await;

    // Unknown, or not this tenant's: the same 404.
    let (status, doc) = replay(&a.app, &RunId(uuid::Uuid::now_v7()).to_string(), TOKEN, json!({})).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("run_not_found")), "{doc}");
    // A body that is not a replay request.
    let (status, doc) = replay(&a.app, &source, TOKEN, json!({"toolMode": "Everything"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{doc}");
    let (status, _) = replay(&a.app, &source, TOKEN, json!({"unknown": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // No body at all: the defaults (ReplayTools, the current definition).
    let reply = call(Method::POST, &format!("/api/runs/{source}/replay"))
        .from(support::REMOTE)
        .bearer(TOKEN)
        .send(&a.app)
        .await;
    assert_eq!(
        (reply.status, reply.json()["toolMode"].as_str()),
        (StatusCode::OK, Some("ReplayTools")),
        "{}",
        reply.text()
    );

    // A run still running.
    let running = RunRecord::opened(RunId(uuid::Uuid::now_v7()), "clerk", Some(1), RunStatus::Running, Utc::now());
    a.runtime.stores.runs.create_run(&TenantId::default_tenant(), &running, None).await.unwrap();
    let (status, doc) = replay(&a.app, &running.id.to_string(), TOKEN, json!({})).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::CONFLICT, Some("run_not_ended")), "{doc}");

    // An agent with a client-side tool, in any mode.
    let (picked, _) = run(&a.app, "picker").await;
    for mode in ["ReplayTools", "NoTools", "LiveTools"] {
        let (status, doc) = replay(&a.app, &picked, TOKEN, json!({"toolMode": mode})).await;
        assert_eq!((status, doc["errorType"].as_str()), (StatusCode::CONFLICT, Some("replay_not_supported")), "{doc}");
        assert!(doc["detail"].as_str().unwrap().contains("pick_file"), "{doc}");
    }

    // Input recording off: nothing to replay.
    let b = app_with(false);
    save(&b.app, "clerk", "v1", &["lookup"]).await;
    let (unrecorded, _) = run(&b.app, "clerk").await;
    let (status, doc) = replay(&b.app, &unrecorded, TOKEN, json!({})).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::CONFLICT, Some("replay_input_missing")), "{doc}");
}
