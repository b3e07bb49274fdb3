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

// ---- 4. a body that is not an object; a call answered twice ------------------------------

#[tokio::test]
async fn a_body_that_is_not_a_json_object_is_refused_as_such_not_as_an_empty_message() {
    let app = app();
    for body in [json!([]), json!(["Hello"]), json!("Hello"), json!(42), json!(null)] {
        let (status, doc) = post(&app.router, "/api/agents/support/run", body.clone()).await;
        assert_problem(status, &doc, StatusCode::BAD_REQUEST, "validation_failed");
        let detail = doc["detail"].as_str().unwrap();
        assert!(detail.contains("must be a JSON object"), "{body}: {detail}");
        assert!(!detail.contains("'message'"), "{body}: {detail}");
    }
    // Every JSON body is an object, on every route.
    let (status, doc) = post(&app.router, "/api/agents", json!([])).await;
    assert_problem(status, &doc, StatusCode::BAD_REQUEST, "validation_failed");
    assert!(doc["detail"].as_str().unwrap().contains("must be a JSON object"), "{doc}");
    // Broken JSON is still `invalid_json`.
    let reply = call(Method::POST, "/api/agents/support/run").bytes("application/json", "[1, ").send(&app.router).await;
    assert_problem(reply.status, &reply.json(), StatusCode::BAD_REQUEST, "invalid_json");
    assert_eq!(*app.calls.lock().unwrap(), 0, "no model was called");
}

/// Runs `clock` in `session` until it hands back its client-side call; the call's id.
async fn handed_back_call(app: &Router, session: &str) -> String {
    let reply = call(Method::POST, "/api/agents/clock/run")
        .json(Some(json!({"message": "What time is it?", "sessionId": session})))
        .send(app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let done = frames(&reply.text()).into_iter().find(|(e, _)| e == "done").unwrap().1;
    done["clientToolCalls"][0]["callId"].as_str().unwrap().to_owned()
}

/// The message says the call was answered already, not that it does not exist.
fn answered_twice(message: &str) -> bool {
    message.contains("already answered") && !message.contains("does not name")
}

#[tokio::test]
async fn a_tool_call_answered_twice_is_refused_as_answered_twice_not_as_unknown() {
    let app = app();
    let call_id = handed_back_call(&app.router, "s-twice").await;
    let twice = json!({"sessionId": "s-twice", "toolResults": [
        {"callId": call_id, "result": "10:42"},
        {"callId": call_id, "result": "10:43"}
    ]});
    let (status, doc) = post(&app.router, "/api/agents/clock/run", twice).await;
    assert_problem(status, &doc, StatusCode::BAD_REQUEST, "validation_failed");
    let detail = doc["detail"].as_str().unwrap();
    assert!(answered_twice(detail), "{detail}");
    assert!(!detail.contains("does not name"), "{detail}");
    assert_eq!(doc["field"], "toolResults");

    // OpenAI chat: two `tool` messages for one call.
    let assistant = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_local_time", "arguments": "{}"}}]});
    let body = json!({"model": "clock", "messages": [
        {"role": "user", "content": "What time is it?"},
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": "10:42"},
        {"role": "tool", "tool_call_id": "call_1", "content": "10:43"}
    ]});
    let (status, doc) = post(&app.router, "/v1/chat/completions", body).await;
    assert_openai_error(status, &doc, StatusCode::BAD_REQUEST, "invalid_request_error", "messages[3].tool_call_id");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(answered_twice(message), "{message}");

    // OpenAI Responses: two `function_call_output` items for one call.
    let body = json!({"model": "clock", "store": false, "input": [
        {"role": "user", "content": "What time is it?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_local_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "10:42"},
        {"type": "function_call_output", "call_id": "call_1", "output": "10:43"}
    ]});
    let (status, doc) = post(&app.router, "/v1/responses", body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(answered_twice(message), "{message}");
}

// ---- 2. placeholders no parameter declares ------------------------------------------------

fn with_parameters(name: &str, instructions: &str) -> Value {
    json!({"name": name, "instructions": instructions, "model": {"provider": "script", "model": "m"},
           "parameters": [{"name": "customer", "kind": "Text", "required": true}]})
}

/// The problems of `definition`: what validate reports, and what save refuses with.
async fn problems_of(app: &Router, definition: Value) -> Vec<Value> {
    let (status, report) = post(app, "/api/agents/validate", definition.clone()).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let (saved, doc) = post(app, "/api/agents", definition).await;
    if report["valid"] == true {
        assert_eq!(saved, StatusCode::CREATED, "{doc}");
        return Vec::new();
    }
    assert_problem(saved, &doc, StatusCode::BAD_REQUEST, "validation_failed");
    assert_eq!(doc["problems"], report["problems"], "save refuses with validate's problems");
    report["problems"].as_array().unwrap().clone()
}

#[tokio::test]
async fn an_undeclared_placeholder_fails_validation_and_save_like_an_unknown_tool() {
    let app = app();
    let problems = problems_of(&app.router, with_parameters("a1", "Help {{customer}} in a {{tone}} tone.")).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0]["code"], "unknown_parameter");
    assert_eq!(problems[0]["field"], "instructions");
    assert!(problems[0]["message"].as_str().unwrap().contains("tone"), "{problems:?}");

    // An unknown tool is the same kind of refusal: the same status and errorType.
    let mut unknown_tool = with_parameters("a2", "Help {{customer}}.");
    unknown_tool["toolNames"] = json!(["missing"]);
    let problems = problems_of(&app.router, unknown_tool).await;
    assert_eq!(problems[0]["code"], "unknown_tool");

    // Culture-keyed instructions are held to the same rule.
    let mut by_culture = with_parameters("a3", "Help {{customer}}.");
    by_culture["instructionsByCulture"] = json!({"tr": "{{musteri}} için yardım et."});
    let problems = problems_of(&app.router, by_culture).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        (problems[0]["code"].as_str(), problems[0]["field"].as_str()),
        (Some("unknown_parameter"), Some("instructionsByCulture.tr"))
    );
}

#[tokio::test]
async fn a_shared_block_placeholder_must_be_declared_by_the_agent_that_uses_it() {
    let app = app();
    // The block itself declares nothing: its braces are its own plain text.
    let block = json!({"name": "house-style", "instructions": "Sign as {{signature}}.",
                       "model": {"provider": "script", "model": "m"}});
    assert!(problems_of(&app.router, block).await.is_empty());
    let mut using = with_parameters("a4", "Help {{customer}}.");
    using["sharedInstructionsName"] = json!("house-style");
    let problems = problems_of(&app.router, using.clone()).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0]["code"], "unknown_parameter");
    assert_eq!(problems[0]["field"], "sharedInstructionsName");
    assert!(problems[0]["message"].as_str().unwrap().contains("signature"), "{problems:?}");
    // Declared, it compiles and runs with the value bound.
    using["parameters"] = json!([{"name": "customer", "kind": "Text", "required": true},
                                 {"name": "signature", "kind": "Text", "defaultValue": "Ada"}]);
    assert!(problems_of(&app.router, using).await.is_empty());
}

#[tokio::test]
async fn text_that_is_not_a_placeholder_stays_valid() {
    let app = app();
    // Not a parameter name between the braces: JSON, field access, spaces, a leading digit.
    let text = r#"Help {{customer}}. Answer {{"ok": true}} or {{a.b}} or {{ spaced }} or {{1st}} or {{}}."#;
    assert!(problems_of(&app.router, with_parameters("b1", text)).await.is_empty());
    // With no parameters declared, braces are plain text (the spec: unaffected).
    let plain =
        json!({"name": "b2", "instructions": "Use {{this}} literally.", "model": {"provider": "script", "model": "m"}});
    assert!(problems_of(&app.router, plain).await.is_empty());
}

// ---- 6. culture tags ---------------------------------------------------------------------

#[tokio::test]
async fn a_culture_that_is_not_a_bcp47_tag_is_refused_naming_the_field() {
    let app = app();
    for culture in ["not a culture", "en_US", "english!", "en-US-US", "tr-", "x"] {
        for path in ["/api/agents/support/run", "/api/agents/support/estimate"] {
            let (status, doc) = post(&app.router, path, json!({"message": "Hello", "culture": culture})).await;
            assert_problem(status, &doc, StatusCode::BAD_REQUEST, "validation_failed");
            assert_eq!(doc["field"], "culture", "{path} {culture}: {doc}");
        }
    }
    assert_eq!(*app.calls.lock().unwrap(), 0, "no model was called");
    for culture in ["tr", "tr-TR", "zh-Hant-TW", "pt-BR", "es-419", "de-CH-1996"] {
        let (status, doc) =
            post(&app.router, "/api/agents/support/estimate", json!({"message": "Hi", "culture": culture})).await;
        assert_eq!(status, StatusCode::OK, "{culture}: {doc}");
    }
}

#[tokio::test]
async fn instructions_by_culture_keys_are_bcp47_tags() {
    let app = app();
    let def = |key: &str| {
        json!({"name": "cultured", "instructions": "Help.", "model": {"provider": "script", "model": "m"},
               "instructionsByCulture": {key: "Yardım et."}})
    };
    for bad in ["en-US-US", "tr-a", "en_US"] {
        let (status, report) = post(&app.router, "/api/agents/validate", def(bad)).await;
        assert_eq!(status, StatusCode::OK);
        let problems = report["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p["code"] == "invalid_culture" && p["field"] == format!("instructionsByCulture.{bad}")),
            "{bad}: {report}"
        );
    }
    let (status, report) = post(&app.router, "/api/agents/validate", def("sr-Latn-RS")).await;
    assert_eq!((status, report["valid"].clone()), (StatusCode::OK, json!(true)), "{report}");
}

// ---- 7. the per-message limit ------------------------------------------------------------

#[tokio::test]
async fn a_million_character_message_is_refused_before_any_model_call() {
    let app = app();
    let message = "a".repeat(1_000_000);
    let (status, doc) = post(&app.router, "/api/agents/support/run", json!({"message": message})).await;
    assert_problem(status, &doc, StatusCode::BAD_REQUEST, "validation_failed");
    assert_eq!(doc["field"], "message");
    assert_eq!(doc["maxChars"], 100_000, "{doc}");
    assert_eq!(*app.calls.lock().unwrap(), 0, "nothing reached the provider");
    // At the limit it runs.
    let (status, _) = post(&app.router, "/api/agents/support/estimate", json!({"message": "é".repeat(100_000)})).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_message_limit_is_configured_and_holds_on_the_openai_surfaces() {
    let app = app_with(configured(&[("Tracon__Limits__MaxMessageChars", "20")]));
    let long = "b".repeat(21);
    let (status, doc) = post(&app.router, "/api/agents/support/run", json!({"message": long})).await;
    assert_problem(status, &doc, StatusCode::BAD_REQUEST, "validation_failed");
    assert_eq!(doc["maxChars"], 20, "{doc}");

    // Chat: the last message, and an earlier one.
    let (status, doc) = post(
        &app.router,
        "/v1/chat/completions",
        json!({"model": "support", "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_openai_error(status, &doc, StatusCode::BAD_REQUEST, "invalid_request_error", "messages[0].content");
    let body = json!({"model": "support", "messages": [
        {"role": "system", "content": long},
        {"role": "user", "content": "Hi"}]});
    let (status, doc) = post(&app.router, "/v1/chat/completions", body).await;
    assert_openai_error(status, &doc, StatusCode::BAD_REQUEST, "invalid_request_error", "messages[0].content");

    // Responses: a string input, an item, and the instructions.
    let (status, doc) = post(&app.router, "/v1/responses", json!({"model": "support", "input": long})).await;
    assert_openai_error(status, &doc, StatusCode::BAD_REQUEST, "invalid_request_error", "input");
    let body = json!({"model": "support", "input": [
        {"role": "assistant", "content": long},
        {"role": "user", "content": "Hi"}]});
    let (status, doc) = post(&app.router, "/v1/responses", body).await;
    assert_openai_error(status, &doc, StatusCode::BAD_REQUEST, "invalid_request_error", "input[0].content");
    let (status, doc) =
        post(&app.router, "/v1/responses", json!({"model": "support", "input": "Hi", "instructions": long})).await;
    assert_openai_error(status, &doc, StatusCode::BAD_REQUEST, "invalid_request_error", "instructions");
    assert_eq!(*app.calls.lock().unwrap(), 0, "nothing reached the provider");

    // Within the limit every surface runs.
    let ok = "c".repeat(20);
    let (status, _) = post(&app.router, "/v1/responses", json!({"model": "support", "input": ok})).await;
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn the_message_limit_must_be_a_positive_number() {
    let config = |v: &str| Config::from_pairs([("Tracon__Limits__MaxMessageChars", v.to_owned())]);
    assert!(RuntimeSettings::from_config(&config("0")).is_err());
    assert!(RuntimeSettings::from_config(&config("many")).is_err());
    assert!(RuntimeSettings::from_config(&config("500")).is_ok());
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
