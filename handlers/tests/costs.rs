//! Money is exact: a run's cost, a tree's total and the usage report are computed in whole
//! nano-units and answered as clean decimals — `0.00013`, never `0.00013000000000000002`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

mod support;

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{call, frames};
use tracon_core::definition::AgentDefinition;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::ports::tokio_rt;
use tracon_core::pricing::{ModelPrice, Pricing};
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::{AppState, HttpSettings};

/// 100 input tokens at 0.5 a million and 40 output tokens at 2 a million: in floating point,
/// `5e-05 + 8e-05` is `0.00013000000000000002`.
fn app() -> Router {
    let script = ScriptedProvider::from_fn("script", |req| {
        let answered = req.messages.iter().any(|m| matches!(m, Message::Tool { .. }));
        let turn = match req.last_user_text() {
            Some("delegate") if !answered && !req.tools.is_empty() => {
                ScriptedTurn::tool_call("ask_support", json!({"task": "look it up"}))
            }
            _ => ScriptedTurn::text("Answered."),
        };
        turn.with_usage(100, 40)
    });
    let price = ModelPrice { input_per_million: 0.5, output_per_million: 2.0, cached_input_per_million: None };
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .pricing(Pricing::new("USD").with_price("script", "m", price))
        .add_agent(AgentDefinition::new("support", "script", "m").with_instructions("Help."))
        .add_agent(AgentDefinition {
            callable_agent_names: vec!["support".into()],
            ..AgentDefinition::new("boss", "script", "m").with_instructions("Delegate.")
        })
        .build()
        .unwrap();
    tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()))
}

/// Runs `agent` on `message` under an Idempotency-Key: the answer's raw text.
async fn run(app: &Router, agent: &str, message: &str, key: &str) -> String {
    let reply = call(Method::POST, &format!("/api/agents/{agent}/run"))
        .header("idempotency-key", key)
        .json(Some(json!({"message": message})))
        .send(app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    reply.text()
}

async fn get_raw(app: &Router, path: &str) -> String {
    let reply = call(Method::GET, path).send(app).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text());
    reply.text()
}

/// Every number in `raw` is written with at most nine decimals (no float noise).
fn assert_clean(raw: &str) {
    let noisy = regex::Regex::new(r"\d\.\d{10,}|\d{6,}e-").unwrap();
    assert!(!noisy.is_match(raw), "float noise in: {raw}");
}

#[tokio::test]
async fn a_runs_cost_is_a_clean_decimal_in_its_answer_record_and_stream() {
    let app = app();
    let raw = run(&app, "support", "Hello", "cost-1").await;
    assert_clean(&raw);
    assert!(raw.contains(r#""totalCost":0.00013"#), "{raw}");
    let answer: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(answer["cost"]["inputCost"], json!(0.00005));
    assert_eq!(answer["cost"]["outputCost"], json!(0.00008));
    let run_id = answer["runId"].as_str().unwrap();

    let record = get_raw(&app, &format!("/api/runs/{run_id}")).await;
    assert_clean(&record);
    assert!(record.contains(r#""totalCost":0.00013"#), "{record}");
    let events = get_raw(&app, &format!("/api/runs/{run_id}/events")).await;
    assert_clean(&events);

    // The live stream's done frame, too.
    let reply = call(Method::POST, "/api/agents/support/run").json(Some(json!({"message": "Hi"}))).send(&app).await;
    let text = reply.text();
    assert_clean(&text);
    let done = frames(&text).into_iter().find(|(e, _)| e == "done").unwrap().1;
    assert_eq!(done["cost"]["totalCost"], json!(0.00013), "{done}");
}

#[tokio::test]
async fn sums_of_costs_are_exact_in_the_tree_and_the_usage_report() {
    let app = app();
    for i in 0..3 {
        run(&app, "support", "Hello", &format!("sum-{i}")).await;
    }
    let stats = get_raw(&app, "/api/stats").await;
    assert_clean(&stats);
    let doc: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(doc["cost"]["USD"], json!(0.00039), "{stats}");

    // A root run that asks another agent: two model calls of its own, one of its child.
    let raw = run(&app, "boss", "delegate", "tree-1").await;
    let root = serde_json::from_str::<Value>(&raw).unwrap()["runId"].as_str().unwrap().to_owned();
    let tree = get_raw(&app, &format!("/api/runs/{root}/tree")).await;
    assert_clean(&tree);
    let doc: Value = serde_json::from_str(&tree).unwrap();
    assert_eq!(doc["totalCost"], json!(0.00039), "{tree}");
}
