//! The response cache through the router: the same request within the cache's lifetime is
//! answered again without a model call and spends no tokens, and the hit is in the run's log;
//! another message, another tool set, another tenant or an expired answer calls the model.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{TestClock, call, frames};
use tracon_core::config::Config;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest};
use tracon_core::ports::{Platform, tokio_rt};
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::access::tenancy::TenancySettings;
use tracon_handlers::{AppState, HttpSettings};

struct App {
    app: Router,
    calls: Arc<AtomicU32>,
    clock: Arc<TestClock>,
}

fn app() -> App {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let model = ScriptedProvider::from_fn("script", move |request: &ModelRequest| {
        counted.fetch_add(1, Ordering::SeqCst);
        let asked = match request.messages.last() {
            Some(Message::User { text }) => text.clone(),
            _ => String::new(),
        };
        ScriptedTurn::text(&format!("answer to {asked}")).with_usage(12, 4)
    });
    let clock = Arc::new(TestClock::shifted());
    let platform = Platform { clock: clock.clone(), spawner: tokio_rt::platform().spawner };
    let lookup = ToolRegistration::new(
        "lookup",
        "Looks up.",
        json!({"type": "object"}),
        tool_fn(|_, _| async { Ok(ToolOutput::from("x")) }),
    );
    let runtime = RuntimeBuilder::new(platform)
        .add_provider(Arc::new(model) as Arc<dyn ModelProvider>)
        .add_tool(lookup)
        .build()
        .unwrap();
    let config = Config::from_pairs([("Tracon__Tenancy__Enabled", "true"), ("Tracon__Tenancy__AllowHeader", "true")]);
    let http = HttpSettings { tenancy: TenancySettings::from_config(&config).unwrap(), ..HttpSettings::default() };
    let app = tracon_handlers::router(AppState::new(Arc::new(runtime), http));
    App { app, calls, clock }
}

async fn save(app: &Router, tenant: &str, name: &str, tools: &[&str]) {
    let agent = json!({"name": name, "instructions": "Answer briefly.", "toolNames": tools,
        "model": {"provider": "script", "model": "m", "responseCache": {"enabled": true, "ttlSeconds": 60}}});
    let reply = call(Method::POST, "/api/agents").header("x-tenant-id", tenant).json(Some(agent)).send(app).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
}

/// Runs `agent` for `tenant` with `message`: the `done` frame and the run's recorded event names.
async fn run(app: &Router, tenant: &str, agent: &str, message: &str) -> (Value, Vec<String>) {
    let reply = call(Method::POST, &format!("/api/agents/{agent}/run"))
        .header("x-tenant-id", tenant)
        .json(Some(json!({"message": message})))
        .send(app)
        .await;
    let live = frames(&reply.text());
    let done = live.iter().find(|(e, _)| e == "done").unwrap_or_else(|| panic!("{live:?}")).1.clone();
    let log = call(Method::GET, &format!("/api/runs/{}/events", done["runId"].as_str().unwrap()))
        .header("x-tenant-id", tenant)
        .send(app)
        .await;
    (done, frames(&log.text()).into_iter().map(|(e, _)| e).collect())
}

#[tokio::test]
async fn the_same_request_is_answered_from_the_cache_without_a_call_or_a_token() {
    let a = app();
    save(&a.app, "acme", "cached", &[]).await;
    let (first, log) = run(&a.app, "acme", "cached", "hi").await;
    assert_eq!((first["text"].as_str(), first["usage"]["inputTokens"].as_u64()), (Some("answer to hi"), Some(12)));
    assert!(!log.contains(&"model.cache_hit".to_owned()));
    let (second, log) = run(&a.app, "acme", "cached", "hi").await;
    assert_eq!(second["text"], "answer to hi");
    assert_eq!(a.calls.load(Ordering::SeqCst), 1, "no second call");
    assert_eq!(second["usage"], Value::Null, "a hit spends no tokens: {second}");
    assert!(log.contains(&"model.cache_hit".to_owned()), "{log:?}");

    // Another message is another request.
    run(&a.app, "acme", "cached", "bye").await;
    assert_eq!(a.calls.load(Ordering::SeqCst), 2);
    // The same agent, prompt and message in another tenant never hits acme's answer.
    save(&a.app, "globex", "cached", &[]).await;
    run(&a.app, "globex", "cached", "hi").await;
    assert_eq!(a.calls.load(Ordering::SeqCst), 3, "a hit never crosses a tenant");
    // Another tool set, the same prompt otherwise: a miss.
    save(&a.app, "acme", "with-tools", &["lookup"]).await;
    run(&a.app, "acme", "with-tools", "hi").await;
    assert_eq!(a.calls.load(Ordering::SeqCst), 4, "a different tool set is a different request");
    // Past its lifetime the answer is gone.
    a.clock.advance(61);
    run(&a.app, "acme", "cached", "hi").await;
    assert_eq!(a.calls.load(Ordering::SeqCst), 5, "expired");
}

#[tokio::test]
async fn a_cache_lifetime_is_one_second_to_a_day() {
    let a = app();
    for ttl in [0, 86_401] {
        let agent = json!({"name": "bad", "model": {"provider": "script", "model": "m",
            "responseCache": {"enabled": true, "ttlSeconds": ttl}}});
        let reply = call(Method::POST, "/api/agents").json(Some(agent)).send(&a.app).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{ttl}");
        assert!(reply.text().contains("model.responseCache.ttlSeconds"), "{}", reply.text());
    }
}
