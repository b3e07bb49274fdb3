//! The recorded event log of a scripted run, byte for byte: a committed fixture that a
//! change of how runs start, execute or record must leave as it is.
//!
//! The clock stands still (so every timestamp and duration is the same on every run) and the
//! run ids, which are random, are replaced by their order of appearance. The runs cover what
//! an event log records: text deltas, usage, two tool calls in one turn (one failing), a
//! document, parameters, labels, an approval stop, and the decided run that resumes it.
//! `TRACON_UPDATE_FIXTURES=1` rewrites the fixture (then review the diff: it is the contract).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tracon_core::definition::{AgentDefinition, AgentParameter};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::ports::{Clock, Platform, tokio_rt};
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::tools::{ToolError, ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings};

/// Always the same instant.
struct Frozen(DateTime<Utc>);

impl Clock for Frozen {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

fn app() -> Router {
    let frozen = Arc::new(Frozen(DateTime::from_timestamp(1_800_000_000, 0).unwrap()));
    let platform = Platform { clock: frozen, spawner: tokio_rt::platform().spawner };
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks an order up.",
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        tool_fn(|args: Value, _| async move {
            match args["q"].as_str() {
                Some("missing") => Err(ToolError::message("No order matches.")),
                Some(q) => Ok(ToolOutput::from(format!("order {q}: shipped"))),
                None => Err(ToolError::message("no query")),
            }
        }),
    );
    let refund = support::approval_tool(
        "refund",
        "Refunds an order.",
        json!({"type": "object", "properties": {"order": {"type": "string"}}}),
        "refunded",
    );
    let script = ScriptedProvider::from_fn("script", |req| {
        let answered = matches!(req.messages.last(), Some(Message::Tool { .. }));
        match req.last_user_text() {
            Some(u) if u.starts_with("Look up") && !answered => {
                ScriptedTurn::tool_call("lookup", json!({"q": "4182"})).and_tool_call("lookup", json!({"q": "missing"}))
            }
            Some(u) if u.starts_with("Refund") && !answered => ScriptedTurn::tool_call("refund", json!({"order": "7"})),
            _ => ScriptedTurn::text("Order 4182 has shipped; no other order matches.").with_usage(42, 9),
        }
    });
    let agent = AgentDefinition::new("clerk", "script", "m")
        .with_instructions("You help {{customer}}.")
        .with_tools(&["lookup", "refund"]);
    let agent = AgentDefinition {
        parameters: vec![AgentParameter {
            name: "customer".into(),
            kind: Default::default(),
            required: true,
            default_value: None,
            description: None,
        }],
        ..agent
    };
    let runtime = RuntimeBuilder::new(platform)
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_tool(lookup)
        .add_tool(refund)
        .add_agent(agent)
        .build()
        .unwrap();
    tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()))
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, String) {
    let reply = support::call(method, path).header("user-agent", "fixture").json(body).send(app).await;
    (reply.status, reply.text())
}

/// The `data:` of the stream's `run` frame: the run id.
fn run_id_of(stream: &str) -> String {
    let data = stream.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    serde_json::from_str::<Value>(data).unwrap()["runId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_scripted_runs_recorded_log_is_byte_for_byte_the_fixture() {
    let app = app();
    let mut logs = Vec::new();
    let mut ids: Vec<String> = Vec::new();

    // One turn with two tool calls (one failing), a document and a parameter.
    let (status, stream) = call(
        &app,
        Method::POST,
        "/api/agents/clerk/run",
        Some(json!({"message": "Look up order 4182", "sessionId": "fixture-1",
            "parameters": {"customer": "Ada"}, "documents": [{"name": "policy.md", "content": "Refunds in 30 days."}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{stream}");
    ids.push(run_id_of(&stream));

    // A run that stops for approval, then the decision that resumes it.
    let (status, stream) = call(
        &app,
        Method::POST,
        "/api/agents/clerk/run",
        Some(json!({"message": "Refund order 7", "sessionId": "fixture-2", "parameters": {"customer": "Ada"}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{stream}");
    ids.push(run_id_of(&stream));
    let approval = stream
        .split("\n\n")
        .find(|f| f.starts_with("event: approvals"))
        .and_then(|f| f.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .unwrap();
    let request_id = approval[0]["requestId"].as_str().unwrap().to_owned();
    let (status, decided) = call(
        &app,
        Method::POST,
        &format!("/api/approvals/{request_id}/decision"),
        Some(json!({"approved": true, "reason": "fine"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let decided: Value = serde_json::from_str(&decided).unwrap();
    ids.push(decided["resumedRunId"].as_str().unwrap().to_owned());

    for id in &ids {
        let (status, log) = call(&app, Method::GET, &format!("/api/runs/{id}/events"), None).await;
        assert_eq!(status, StatusCode::OK);
        logs.push(log);
    }
    // Random ids are the only thing that differs between two runs of this test.
    let mut text = logs.join("\n=== next run ===\n\n");
    for (i, id) in ids.iter().enumerate() {
        text = text.replace(id, &format!("<run-{i}>"));
    }
    text = text.replace(&request_id, "<approval-0>");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/recorded_log.sse");
    if std::env::var_os("TRACON_UPDATE_FIXTURES").is_some() {
        std::fs::create_dir_all(fixture.parent().unwrap()).unwrap();
        std::fs::write(&fixture, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&fixture).unwrap();
    assert!(
        text == expected,
        "the recorded log changed (TRACON_UPDATE_FIXTURES=1 rewrites {}):\n{text}",
        fixture.display()
    );
}
