//! A run's prompt against its model's context window, through the router:
//! `POST /api/agents/{name}/estimate` (each part counted, the window and reserve from the model
//! catalog, nothing run or written, whether the pre-flight check is on or off) and the
//! pre-flight check (`Tracon:Preflight`), which refuses an oversized prompt before any
//! provider is called — on the native run, its JSON and queued forms, the OpenAI route, and a
//! queued run whose session grew while it waited.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Manual, call};
use tracon_core::definition::{AgentDefinition, AgentParameter, ParameterKind};
use tracon_core::jobs::{JobHandler, JobRunner, JobSettings};
use tracon_core::model::ModelProvider;
use tracon_core::model::catalog::{ModelCatalog, ModelDescriptor};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::tokio_rt;
use tracon_core::runs::preflight::PreflightSettings;
use tracon_core::runs::queued::QueuedRuns;
use tracon_core::runtime::{RunQueue, RuntimeBuilder, RuntimeSettings};
use tracon_handlers::{AppState, HttpSettings};

/// The window of `small`: 320 tokens of it (80%) for the prompt.
const WINDOW: u64 = 400;
const ALLOWED: u64 = 320;

struct Harness {
    app: Router,
    runner: JobRunner,
    /// Model calls so far.
    calls: Arc<AtomicU32>,
}

fn harness(preflight: bool) -> Harness {
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let script = ScriptedProvider::from_fn("script", move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        ScriptedTurn::text("done")
    });
    let catalog = ModelCatalog::new()
        .with_model("script", ModelDescriptor::new("small").context_window(WINDOW))
        .with_model("script", ModelDescriptor::new("no-window"));
    let settings = RuntimeSettings {
        preflight: PreflightSettings { enabled: preflight, ..PreflightSettings::default() },
        ..RuntimeSettings::default()
    };
    let mut tailored = AgentDefinition::new("tailored", "script", "small").with_instructions("You help {{customer}}.");
    tailored.parameters = vec![AgentParameter {
        name: "customer".into(),
        kind: ParameterKind::Text,
        required: true,
        default_value: None,
        description: None,
    }];
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .settings(settings)
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .model_catalog(catalog)
            .add_tool(tracon_core::demo::order_status_tool())
            .add_agent(
                AgentDefinition::new("support", "script", "small")
                    .with_instructions("You are the support agent. Answer briefly.")
                    .with_tools(&["get_order_status"]),
            )
            .add_agent(AgentDefinition::new("unlisted", "script", "not-in-the-catalog"))
            .add_agent(AgentDefinition::new("windowless", "script", "no-window"))
            .add_agent(tailored)
            .build()
            .unwrap(),
    );
    runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 1 });
    let handlers: Vec<Arc<dyn JobHandler>> = vec![Arc::new(QueuedRuns { runtime: runtime.clone() })];
    let jobs = JobSettings { retry_base: Duration::ZERO, ..JobSettings::default() };
    let runner = JobRunner::new(runtime.stores.jobs.clone(), handlers, runtime.platform.clock.clone(), jobs, "test");
    let app = tracon_handlers::router(AppState::new(runtime.clone(), HttpSettings::default()));
    Harness { app, runner, calls }
}

impl Harness {
    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    async fn estimate(&self, agent: &str, body: Value) -> (StatusCode, Value) {
        let reply = call(Method::POST, &format!("/api/agents/{agent}/estimate")).json(Some(body)).send(&self.app).await;
        (reply.status, reply.json())
    }

    /// A run answered as JSON (an idempotent run): its status and body.
    async fn run(&self, agent: &str, body: Value) -> (StatusCode, Value) {
        let key = uuid::Uuid::new_v4().to_string();
        let reply = call(Method::POST, &format!("/api/agents/{agent}/run"))
            .header("idempotency-key", &key)
            .json(Some(body))
            .send(&self.app)
            .await;
        (reply.status, reply.json())
    }

    async fn runs_recorded(&self) -> usize {
        let reply = call(Method::GET, "/api/runs").send(&self.app).await;
        reply.json().as_array().unwrap().len()
    }
}

/// `n` words of one token each.
fn words(n: u64) -> String {
    vec!["ok"; n as usize].join(" ")
}

#[tokio::test]
async fn an_estimate_counts_each_part_of_the_prompt_against_the_window() {
    let h = harness(false);
    let (status, e) = h.estimate("support", json!({"message": "Where is order 42?"})).await;
    assert_eq!(status, StatusCode::OK, "{e}");
    let part = |name: &str| e["breakdown"][name].as_u64().unwrap();
    assert!(part("instructions") > 0 && part("tools") > 0 && part("message") > 0, "{e}");
    assert_eq!(part("history"), 0);
    let prompt = e["promptTokens"].as_u64().unwrap();
    assert_eq!(prompt, part("instructions") + part("tools") + part("history") + part("message") + 3);
    assert_eq!(
        (e["agent"].as_str(), e["provider"].as_str(), e["model"].as_str()),
        (Some("support"), Some("script"), Some("small"))
    );
    assert_eq!(e["contextWindowTokens"], WINDOW);
    assert_eq!(e["reserveRatio"], 0.2);
    assert_eq!(e["reserveTokens"], WINDOW - ALLOWED);
    assert_eq!(e["allowedPromptTokens"], ALLOWED);
    assert_eq!(e["remainingTokens"], ALLOWED as i64 - prompt as i64);
    assert_eq!(e["fits"], true);
    assert_eq!((e["preflightEnabled"].as_bool(), e["approximate"].as_bool()), (Some(false), Some(true)));
    // An estimate runs nothing and records nothing.
    assert_eq!((h.calls(), h.runs_recorded().await), (0, 0));

    // Ten more words in the message are ten more tokens; a document is counted with it.
    let (_, longer) = h.estimate("support", json!({"message": format!("Where is order 42? {}", words(10))})).await;
    assert_eq!(longer["promptTokens"].as_u64().unwrap(), prompt + 10);
    let document = json!({"message": "Where is order 42?", "documents": [{"name": "policy.md", "content": words(50)}]});
    let (_, with_document) = h.estimate("support", document).await;
    assert!(with_document["breakdown"]["message"].as_u64().unwrap() > part("message") + 50, "{with_document}");

    // A session's history is counted: the turn a run saved there.
    let (status, _) = h.run("support", json!({"message": words(20), "sessionId": "s1"})).await;
    assert_eq!(status, StatusCode::OK);
    let (_, in_session) = h.estimate("support", json!({"message": "Where is order 42?", "sessionId": "s1"})).await;
    let history = in_session["breakdown"]["history"].as_u64().unwrap();
    assert_eq!(history, (4 + 20) + (4 + 1), "the user's 20 words and the answer 'done', each a message: {in_session}");
    assert_eq!(in_session["promptTokens"].as_u64().unwrap(), prompt + history);
    // A session that does not exist yet has no history.
    let (_, fresh) = h.estimate("support", json!({"message": "Where is order 42?", "sessionId": "new-one"})).await;
    assert_eq!(fresh["promptTokens"], prompt);

    // Parameters are bound into the instructions before they are counted.
    let (_, short) = h.estimate("tailored", json!({"message": "hi", "parameters": {"customer": "Ada"}})).await;
    let (_, long) = h.estimate("tailored", json!({"message": "hi", "parameters": {"customer": words(30)}})).await;
    assert_eq!(
        long["breakdown"]["instructions"].as_u64().unwrap(),
        short["breakdown"]["instructions"].as_u64().unwrap() + 29
    );
}

#[tokio::test]
async fn an_estimate_of_a_model_without_a_known_window_compares_nothing() {
    let h = harness(true);
    for agent in ["unlisted", "windowless"] {
        let (status, e) = h.estimate(agent, json!({"message": words(1000)})).await;
        assert_eq!(status, StatusCode::OK, "{e}");
        assert!(e["promptTokens"].as_u64().unwrap() > 1000);
        for field in ["contextWindowTokens", "reserveTokens", "allowedPromptTokens", "remainingTokens", "fits"] {
            assert_eq!(e[field], Value::Null, "{agent}: {field} in {e}");
        }
        assert_eq!(e["preflightEnabled"], true);
    }
}

#[tokio::test]
async fn an_estimate_refuses_what_a_run_would_refuse() {
    let h = harness(false);
    for (agent, body, status, error_type) in [
        ("support", json!({"message": ""}), StatusCode::BAD_REQUEST, "validation_failed"),
        ("support", json!({}), StatusCode::BAD_REQUEST, "validation_failed"),
        ("support", json!({"message": "hi", "approvals": []}), StatusCode::BAD_REQUEST, "validation_failed"),
        (
            "support",
            json!({"message": "hi", "sessionId": "not a session id!"}),
            StatusCode::BAD_REQUEST,
            "validation_failed",
        ),
        ("support", json!({"message": "hi", "culture": "x".repeat(40)}), StatusCode::BAD_REQUEST, "validation_failed"),
        ("support", json!({"message": "hi", "parameters": {"a": [1]}}), StatusCode::BAD_REQUEST, "validation_failed"),
        (
            "support",
            json!({"message": "hi", "documents": [{"name": "", "content": "x"}]}),
            StatusCode::BAD_REQUEST,
            "validation_failed",
        ),
        ("tailored", json!({"message": "hi"}), StatusCode::BAD_REQUEST, "invalid_parameters"),
        ("nobody", json!({"message": "hi"}), StatusCode::NOT_FOUND, "agent_not_found"),
        ("Not A Name", json!({"message": "hi"}), StatusCode::BAD_REQUEST, "invalid_agent_name"),
    ] {
        let path = format!("/api/agents/{}/estimate", agent.replace(' ', "%20"));
        let reply = call(Method::POST, &path).json(Some(body.clone())).send(&h.app).await;
        let doc = reply.json();
        assert_eq!((reply.status, doc["errorType"].as_str()), (status, Some(error_type)), "{agent} {body}: {doc}");
    }
}

#[tokio::test]
async fn with_the_check_off_an_oversized_prompt_still_goes_to_the_model() {
    let h = harness(false);
    let (status, answer) = h.run("support", json!({"message": words(1000)})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!((answer["status"].as_str(), h.calls()), (Some("Completed"), 1));
}

#[tokio::test]
async fn with_the_check_on_an_oversized_prompt_is_refused_before_any_provider_is_called() {
    let h = harness(true);
    let (_, base) = h.estimate("support", json!({"message": "ok"})).await;
    let base = base["promptTokens"].as_u64().unwrap();
    // Exactly the allowed size runs; one token more is refused.
    let fits = format!("ok {}", words(ALLOWED - base));
    let over = format!("ok {}", words(ALLOWED - base + 1));
    let (_, estimate) = h.estimate("support", json!({"message": over})).await;
    assert_eq!((estimate["promptTokens"].as_u64(), estimate["fits"].as_bool()), (Some(ALLOWED + 1), Some(false)));
    assert_eq!(estimate["remainingTokens"], -1);

    let reply = call(Method::POST, "/api/agents/support/run").json(Some(json!({"message": over}))).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    assert!(reply.header("content-type").unwrap().starts_with("application/problem+json"));
    let refusal = reply.json();
    assert_eq!(refusal["errorType"], "context_window_exceeded");
    assert_eq!(refusal["estimatedPromptTokens"], ALLOWED + 1, "the estimate's own count: {refusal}");
    assert_eq!(refusal["allowedPromptTokens"], ALLOWED);
    assert_eq!(refusal["contextWindowTokens"], WINDOW);
    assert_eq!((refusal["reserveRatio"].as_f64(), refusal["approximate"].as_bool()), (Some(0.2), Some(true)));
    assert!(refusal["detail"].as_str().unwrap().contains("321 tokens"), "{refusal}");
    assert_eq!((h.calls(), h.runs_recorded().await), (0, 0), "no provider called, no run opened");

    let (status, answer) = h.run("support", json!({"message": fits})).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("Completed")), "{answer}");
    assert_eq!(h.calls(), 1);
    // A model whose window the catalog does not give is never refused.
    for agent in ["unlisted", "windowless"] {
        let (status, answer) = h.run(agent, json!({"message": words(5000)})).await;
        assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("Completed")), "{agent}: {answer}");
    }
}

#[tokio::test]
async fn the_check_guards_every_run_starting_surface() {
    let h = harness(true);
    let huge = words(2 * WINDOW);
    // The JSON answer of an idempotent run.
    let (status, doc) = h.run("support", json!({"message": huge})).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("context_window_exceeded")));
    // A queued run is refused before it is accepted: no 202, no job.
    let reply = call(Method::POST, "/api/agents/support/run")
        .header("Prefer", "respond-async")
        .json(Some(json!({"message": huge})))
        .send(&h.app)
        .await;
    assert_eq!(
        (reply.status, reply.json()["errorType"].as_str()),
        (StatusCode::BAD_REQUEST, Some("context_window_exceeded"))
    );
    assert_eq!(h.runner.drain(10).await.unwrap(), 0);
    // The OpenAI route, in OpenAI's envelope; the caller's own history and system text count.
    let history: Vec<Value> = (0..10).map(|_| json!({"role": "user", "content": words(40)})).collect();
    let mut messages = vec![json!({"role": "system", "content": "Be kind."})];
    messages.extend(history);
    messages.push(json!({"role": "user", "content": "and now?"}));
    let reply = call(Method::POST, "/v1/chat/completions")
        .json(Some(json!({"model": "support", "messages": messages})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    assert_eq!(reply.json()["error"]["type"], "context_window_exceeded", "{}", reply.text());
    let reply = call(Method::POST, "/v1/chat/completions")
        .json(Some(json!({"model": "support", "messages": [{"role": "user", "content": "hi"}]})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(h.calls(), 1, "only the run that fit reached the model");
}

#[tokio::test]
async fn a_queued_run_whose_session_grew_past_the_window_fails_without_a_model_call() {
    let h = harness(true);
    let (_, base) = h.estimate("support", json!({"message": "ok"})).await;
    let base = base["promptTokens"].as_u64().unwrap();
    // Accepted while the session is empty.
    let reply = call(Method::POST, "/api/agents/support/run")
        .header("Prefer", "respond-async")
        .json(Some(json!({"message": "ok", "sessionId": "grows"})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text());
    let queued = reply.json()["runId"].as_str().unwrap().to_owned();
    // Meanwhile a turn that just fits fills the session: the user's words and the answer.
    let k = ALLOWED + 1 - base;
    let (status, answer) = h.run("support", json!({"message": words(k), "sessionId": "grows"})).await;
    assert_eq!((status, answer["status"].as_str()), (StatusCode::OK, Some("Completed")), "{answer}");
    assert_eq!(h.calls(), 1);

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let run = call(Method::GET, &format!("/api/runs/{queued}")).send(&h.app).await.json();
    assert_eq!(run["status"], "Failed", "{run}");
    assert_eq!(run["error"]["errorType"], "context_window_exceeded", "{run}");
    assert_eq!(run["error"]["errorClass"], "ContextWindowExceeded");
    assert_eq!(h.calls(), 1, "the queued run never reached the model");
}
