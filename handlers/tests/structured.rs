//! Structured output that holds, through the router: a JSON `responseFormat` closes a run
//! only with an answer that is JSON (and matches the schema, and the host's validator takes);
//! a run nobody reads as it streams gets `maxRepairAttempts` repair turns; a streamed one, or
//! one still wrong, fails `structured_response_rejected`. The scripted model answers each
//! request from its queue of answers (the last repeats).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{call, frames};
use tracon_core::definition::ResponseFormat;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::structured::ResponseValidator;
use tracon_handlers::{AppState, HttpSettings};

struct App {
    app: Router,
    answers: Arc<Mutex<VecDeque<&'static str>>>,
    /// What each model call was sent last (the repair prompts).
    asked: Arc<Mutex<Vec<String>>>,
}

impl App {
    fn answer(&self, answers: &[&'static str]) {
        *self.answers.lock().unwrap() = answers.iter().copied().collect();
        self.asked.lock().unwrap().clear();
    }
}

/// Refuses an order whose id is 0.
struct NoOrderZero;

impl ResponseValidator for NoOrderZero {
    fn check(&self, _: &str, _: &ResponseFormat, answer: &Value) -> Result<(), Vec<String>> {
        if answer["id"] == 0 { Err(vec!["Order 0 does not exist.".into()]) } else { Ok(()) }
    }
}

fn app() -> App {
    let answers = Arc::new(Mutex::new(VecDeque::new()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (queue, seen) = (answers.clone(), asked.clone());
    let model = ScriptedProvider::from_fn("script", move |request: &ModelRequest| {
        if let Some(Message::User { text }) = request.messages.last() {
            seen.lock().unwrap().push(text.clone());
        }
        let mut queue = queue.lock().unwrap();
        let answer = if queue.len() > 1 { queue.pop_front().unwrap() } else { *queue.front().unwrap() };
        ScriptedTurn::text(answer).with_usage(10, 5)
    });
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(model) as Arc<dyn ModelProvider>)
        .response_validator(Arc::new(NoOrderZero))
        .build()
        .unwrap();
    let app = tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()));
    App { app, answers, asked }
}

const SCHEMA: &str = r#"{"type": "object", "properties": {"id": {"type": "integer"}, "status": {"enum": ["open", "shipped"]}},
    "required": ["id", "status"], "additionalProperties": false}"#;

async fn save(app: &Router, name: &str, model: Value) -> (StatusCode, Value) {
    let reply = call(Method::POST, "/api/agents").json(Some(json!({"name": name, "model": model}))).send(app).await;
    (reply.status, reply.json())
}

fn orders_model(repairs: u32) -> Value {
    json!({"provider": "script", "model": "m", "maxRepairAttempts": repairs,
        "responseFormat": {"type": "jsonSchema", "name": "order", "schema": serde_json::from_str::<Value>(SCHEMA).unwrap()}})
}

/// A run answered as one JSON document (an `Idempotency-Key` asks for it): nobody reads it as
/// it streams, so repairs are allowed.
async fn run_json(app: &Router, agent: &str) -> Value {
    let reply = call(Method::POST, &format!("/api/agents/{agent}/run"))
        .header("idempotency-key", &uuid::Uuid::now_v7().to_string())
        .json(Some(json!({"message": "Where is order 7?"})))
        .send(app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    reply.json()
}

/// The run's recorded `response.rejected` events.
async fn rejections(app: &Router, run: &str) -> Vec<Value> {
    let log = call(Method::GET, &format!("/api/runs/{run}/events")).send(app).await;
    frames(&log.text()).into_iter().filter(|(e, _)| e == "response.rejected").map(|(_, d)| d).collect()
}

#[tokio::test]
async fn a_wrong_answer_is_repaired_and_the_run_returns_the_json_alone() {
    let a = app();
    assert_eq!(save(&a.app, "orders", orders_model(2)).await.0, StatusCode::CREATED);
    a.answer(&[
        "Sure! Order 7 is on its way.",
        r#"{"id": 7, "status": "sent"}"#,
        "```json\n{\"id\": 7, \"status\": \"shipped\"}\n```",
    ]);
    let answer = run_json(&a.app, "orders").await;
    assert_eq!(
        (answer["status"].as_str(), answer["text"].as_str()),
        (Some("Completed"), Some(r#"{"id": 7, "status": "shipped"}"#))
    );
    let rejected = rejections(&a.app, answer["runId"].as_str().unwrap()).await;
    assert_eq!(rejected.len(), 2, "two repairs: {rejected:?}");
    assert!(rejected[0]["problems"][0].as_str().unwrap().starts_with("The answer is not JSON"), "{rejected:?}");
    assert!(rejected[1]["problems"][0].as_str().unwrap().contains("/status"), "{rejected:?}");
    assert!(rejected.iter().all(|r| r["repairing"] == true));
    // The model was told why, and what to answer.
    let asked = a.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3);
    assert!(asked[1].contains("not JSON") && asked[1].contains("\"required\":[\"id\",\"status\"]"), "{}", asked[1]);
    // Each repair turn is a model call the run paid for.
    assert_eq!(answer["usage"]["inputTokens"], 30);
}

#[tokio::test]
async fn an_answer_still_wrong_after_the_repairs_fails_the_run_and_is_never_returned() {
    let a = app();
    save(&a.app, "orders", orders_model(1)).await;
    a.answer(&["{\"id\": 7", "{\"id\": 7, \"status\": \"lost\"}"]);
    let answer = run_json(&a.app, "orders").await;
    assert_eq!(answer["status"], "Failed", "{answer}");
    assert_eq!(answer["error"]["errorType"], "structured_response_rejected");
    assert!(answer["text"].as_str().unwrap_or_default().is_empty(), "the wrong answer is not returned: {answer}");
    let rejected = rejections(&a.app, answer["runId"].as_str().unwrap()).await;
    let repairing: Vec<bool> = rejected.iter().map(|r| r["repairing"].as_bool().unwrap()).collect();
    assert_eq!(repairing, [true, false]);
}

#[tokio::test]
async fn the_hosts_validator_has_the_last_word() {
    let a = app();
    save(&a.app, "orders", orders_model(1)).await;
    a.answer(&[r#"{"id": 0, "status": "open"}"#, r#"{"id": 8, "status": "open"}"#]);
    let answer = run_json(&a.app, "orders").await;
    assert_eq!(answer["text"], r#"{"id": 8, "status": "open"}"#);
    let rejected = rejections(&a.app, answer["runId"].as_str().unwrap()).await;
    assert_eq!(rejected[0]["problems"], json!(["Order 0 does not exist."]));
}

#[tokio::test]
async fn a_streamed_run_gets_no_repair_its_wrong_answer_fails_it() {
    let a = app();
    save(&a.app, "orders", orders_model(3)).await;
    a.answer(&["Order 7 shipped.", r#"{"id": 7, "status": "shipped"}"#]);
    let reply =
        call(Method::POST, "/api/agents/orders/run").json(Some(json!({"message": "order 7?"}))).send(&a.app).await;
    let live = frames(&reply.text());
    let (event, end) = live.last().unwrap();
    assert_eq!(event, "error", "{live:?}");
    assert_eq!(
        (end["status"].as_str(), end["errorType"].as_str()),
        (Some("Failed"), Some("structured_response_rejected"))
    );
    assert_eq!(a.asked.lock().unwrap().len(), 1, "no repair turn while someone reads the stream");
    // A plain `json` format takes any JSON; `text` checks nothing.
    save(&a.app, "loose", json!({"provider": "script", "model": "m", "responseFormat": {"type": "json"}})).await;
    a.answer(&["[1, 2, 3]"]);
    let reply = call(Method::POST, "/api/agents/loose/run").json(Some(json!({"message": "list"}))).send(&a.app).await;
    assert_eq!(frames(&reply.text()).last().unwrap().0, "done");
}

#[tokio::test]
async fn repair_attempts_are_bounded_and_need_a_json_format() {
    let a = app();
    let (status, problem) = save(&a.app, "too-many", orders_model(4)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(problem.to_string().contains("model.maxRepairAttempts"), "{problem}");
    let (status, problem) =
        save(&a.app, "no-format", json!({"provider": "script", "model": "m", "maxRepairAttempts": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(problem.to_string().contains("needs a JSON responseFormat"), "{problem}");
}
