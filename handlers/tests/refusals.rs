//! Bad input refused with the spec's status and a message that says what is wrong: the
//! problem document's own members, a body that is not an object, a tool call answered twice,
//! placeholders no parameter declares, culture tags, the per-message limit and the run
//! status filter — on every surface that takes each.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{call, frames};
use tracon_core::config::Config;
use tracon_core::definition::AgentDefinition;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::ports::tokio_rt;
use tracon_core::runs::store::RunStatus;
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings};

/// How many model calls were made.
type Calls = Arc<Mutex<usize>>;

struct App {
    router: Router,
    calls: Calls,
}

/// `support` answers text; `clock` asks for a client-side tool (`get_local_time`) when the
/// message mentions the time. `settings` as given.
fn app_with(settings: RuntimeSettings) -> App {
    let calls: Calls = Arc::default();
    let count = calls.clone();
    let script = ScriptedProvider::from_fn("script", move |req| {
        *count.lock().unwrap() += 1;
        match req.messages.last() {
            Some(Message::User { text }) if text.contains("time") => {
                ScriptedTurn::tool_call("get_local_time", json!({}))
            }
            _ => ScriptedTurn::text("Answered.").with_usage(3, 4),
        }
    });
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks something up.",
        json!({"type": "object"}),
        tool_fn(|_, _| async { Ok(ToolOutput::from("found")) }),
    );
    let runtime: Arc<Runtime> = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_tool(lookup)
            .add_client_tool("get_local_time", "The time on the user's device.", json!({"type": "object"}))
            .add_agent(AgentDefinition::new("support", "script", "m").with_instructions("Help."))
            .add_agent(AgentDefinition::new("clock", "script", "m").with_tools(&["get_local_time"]))
            .settings(settings)
            .build()
            .unwrap(),
    );
    let state = AppState::new(runtime, HttpSettings::default());
    App { router: tracon_handlers::router(state), calls }
}

fn app() -> App {
    app_with(RuntimeSettings::default())
}

/// Settings read from `Tracon__…` pairs.
fn configured(pairs: &[(&str, &str)]) -> RuntimeSettings {
    RuntimeSettings::from_config(&Config::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))))
        .unwrap()
}

async fn post(app: &Router, path: &str, body: Value) -> (StatusCode, Value) {
    let reply = call(Method::POST, path).json(Some(body)).send(app).await;
    (reply.status, reply.json())
}

/// A problem document with this status and `errorType`.
fn assert_problem(status: StatusCode, doc: &Value, want: StatusCode, error_type: &str) {
    assert_eq!(status, want, "{doc}");
    assert_eq!(doc["errorType"], error_type, "{doc}");
}

/// An OpenAI error envelope with this status, `type` and `param`.
fn assert_openai_error(status: StatusCode, doc: &Value, want: StatusCode, kind: &str, param: &str) {
    assert_eq!(status, want, "{doc}");
    assert_eq!(doc["error"]["type"], kind, "{doc}");
    assert_eq!(doc["error"]["param"], param, "{doc}");
}

/// The top-level keys of a JSON object as the body spells them, duplicates kept (a JSON
/// client keeps one of two equal keys, so a `Value` cannot show them).
fn top_level_keys(raw: &str) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
            while let Some((k, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                self.0.push(k);
            }
            Ok(self.0)
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw);
    serde::Deserializer::deserialize_map(&mut de, Keys(Vec::new())).unwrap()
}

// ---- 1. the problem document keeps one `status` -------------------------------------------

#[tokio::test]
async fn cancelling_an_ended_run_answers_one_status_the_http_one_and_names_the_run_status_apart() {
    let app = app();
    let reply = call(Method::POST, "/api/agents/support/run")
        .header("idempotency-key", "cancel-ended")
        .json(Some(json!({"message": "Hello"})))
        .send(&app.router)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let run_id = reply.json()["runId"].as_str().unwrap().to_owned();

    let reply = call(Method::POST, &format!("/api/runs/{run_id}/cancel")).send(&app.router).await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    let raw = reply.text();
    let keys = top_level_keys(&raw);
    assert_eq!(keys.iter().filter(|k| *k == "status").count(), 1, "exactly one 'status' member: {raw}");
    let doc = reply.json();
    assert_eq!(doc["status"], 409, "{raw}");
    assert_eq!(doc["errorType"], "run_not_running");
    assert_eq!(doc["runStatus"], "Completed", "{raw}");
}

// ---- 8. the status filter names every status ---------------------------------------------

#[tokio::test]
async fn an_unknown_status_filter_lists_every_run_status() {
    let app = app();
    let reply = call(Method::GET, "/api/runs?status=bogus").send(&app.router).await;
    let doc = reply.json();
    assert_problem(reply.status, &doc, StatusCode::BAD_REQUEST, "validation_failed");
    assert_eq!(doc["field"], "status");
    let detail = doc["detail"].as_str().unwrap();
    for status in RunStatus::ALL {
        let name = serde_json::to_value(status).unwrap();
        assert!(detail.contains(name.as_str().unwrap()), "{name} missing from: {detail}");
        let reply = call(Method::GET, &format!("/api/runs?status={}", name.as_str().unwrap())).send(&app.router).await;
        assert_eq!(reply.status, StatusCode::OK, "{name}");
    }
    assert!(detail.contains("Queued"), "{detail}");
}
