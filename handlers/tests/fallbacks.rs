//! Fallback links through the router: a run a fallback link answered part of is recorded with
//! the provider of its last call and costs each call at the prices of the model that answered
//! it (across repair turns too); a breaker or response cache whose store is down never fails a
//! run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use support::{call, frames};
use tracon_core::error::StoreError;
use tracon_core::model::breaker::{BreakerState, BreakerStore};
use tracon_core::model::cache::{CachedAnswer, ResponseCacheStore};
use tracon_core::model::resilience::{ResilienceSettings, RetrySettings};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{ModelProvider, ProviderError};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::pricing::{ModelPrice, Pricing};
use tracon_core::runtime::{RuntimeBuilder, RuntimeSettings};
use tracon_core::stores::Stores;
use tracon_handlers::{AppState, HttpSettings};

/// `primary` fails its first `failures` calls with a 503, then answers valid JSON; `backup`
/// answers prose. Each call reports 1,000 input and 1,000 output tokens; `primary` costs 1 per
/// million tokens each way, `backup` 10.
fn app(failures: u32, stores: Stores) -> (Router, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let primary = ScriptedProvider::from_fn("primary", move |_| {
        if counted.fetch_add(1, Ordering::SeqCst) < failures {
            ScriptedTurn::failing(ProviderError::from_status(503, "busy"))
        } else {
            ScriptedTurn::text(r#"{"ok": true}"#).with_usage(1_000, 1_000)
        }
    });
    let backup = ScriptedProvider::from_fn("backup", |_| ScriptedTurn::text("All good!").with_usage(1_000, 1_000));
    let price = |p: f64| ModelPrice { input_per_million: p, output_per_million: p, cached_input_per_million: None };
    let pricing =
        Pricing::new("USD").with_price("primary", "p-model", price(1.0)).with_price("backup", "b-model", price(10.0));
    let settings = RuntimeSettings {
        resilience: ResilienceSettings {
            retry: RetrySettings { max_retries: 0, ..RetrySettings::default() },
            ..ResilienceSettings::default()
        },
        ..RuntimeSettings::default()
    };
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .settings(settings)
        .stores(stores)
        .pricing(pricing)
        .add_provider(Arc::new(primary) as Arc<dyn ModelProvider>)
        .add_provider(Arc::new(backup) as Arc<dyn ModelProvider>)
        .build()
        .unwrap();
    (tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default())), calls)
}

async fn save(app: &Router, model: Value) {
    let reply = call(Method::POST, "/api/agents").json(Some(json!({"name": "a", "model": model}))).send(app).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
}

/// Runs the agent as one JSON answer (no one reads it as it streams: repairs allowed).
async fn run(app: &Router) -> (Value, Value, Vec<String>) {
    let reply = call(Method::POST, "/api/agents/a/run")
        .header("idempotency-key", &uuid::Uuid::now_v7().to_string())
        .json(Some(json!({"message": "go"})))
        .send(app)
        .await;
    let answer = reply.json();
    let id = answer["runId"].as_str().unwrap().to_owned();
    let row = call(Method::GET, &format!("/api/runs/{id}")).send(app).await.json();
    let log = call(Method::GET, &format!("/api/runs/{id}/events")).send(app).await;
    (answer, row, frames(&log.text()).into_iter().map(|(e, _)| e).collect())
}

#[tokio::test]
async fn a_run_partly_answered_by_a_fallback_costs_each_call_at_its_own_models_prices() {
    let (app, _) = app(1, Stores::in_memory());
    save(
        &app,
        json!({"provider": "primary", "model": "p-model", "maxRepairAttempts": 1, "responseFormat": {"type": "json"},
            "fallbacks": [{"provider": "backup", "model": "b-model"}]}),
    )
    .await;
    // The primary fails, the backup answers prose (rejected), the repair turn goes to the
    // primary again, which now answers.
    let (answer, row, log) = run(&app).await;
    assert_eq!((answer["status"].as_str(), answer["text"].as_str()), (Some("Completed"), Some(r#"{"ok": true}"#)));
    assert!(log.contains(&"model.fallback".to_owned()) && log.contains(&"response.rejected".to_owned()), "{log:?}");
    assert_eq!((row["modelProvider"].as_str(), row["model"].as_str()), (Some("primary"), Some("p-model")), "{row}");
    assert_eq!(row["usage"]["totalTokens"], 4_000);
    // 2,000 tokens at 10 per million (the backup) and 2,000 at 1 (the primary).
    let total = row["cost"]["totalCost"].as_f64().unwrap();
    assert!((total - 0.022).abs() < 1e-9, "{}", row["cost"]);
}

#[tokio::test]
async fn a_run_whose_last_call_a_fallback_answered_is_recorded_with_that_link() {
    let (app, _) = app(u32::MAX, Stores::in_memory());
    save(
        &app,
        json!({"provider": "primary", "model": "p-model", "fallbacks": [{"provider": "backup", "model": "b-model"}]}),
    )
    .await;
    let (answer, row, _) = run(&app).await;
    assert_eq!(answer["text"], "All good!");
    assert_eq!((row["modelProvider"].as_str(), row["model"].as_str()), (Some("backup"), Some("b-model")), "{row}");
    assert!((row["cost"]["totalCost"].as_f64().unwrap() - 0.02).abs() < 1e-9, "{}", row["cost"]);
    // An unpriced fallback model leaves the cost unknown, as any unpriced run's.
    let reply = call(Method::PUT, "/api/agents/a")
        .json(Some(json!({"name": "a", "model": {"provider": "primary", "model": "p-model",
            "fallbacks": [{"provider": "backup", "model": "unpriced"}]}})))
        .send(&app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let (_, row, _) = run(&app).await;
    assert_eq!(row["cost"], Value::Null, "{row}");
}

/// A breaker and a response cache whose store is down.
struct Down;

#[async_trait::async_trait]
impl BreakerStore for Down {
    async fn get(&self, _: &str) -> Result<BreakerState, StoreError> {
        Err(StoreError::Unavailable { detail: "connection refused".into() })
    }
    async fn failed(&self, _: &str, _: DateTime<Utc>, _: u32, _: bool) -> Result<BreakerState, StoreError> {
        Err(StoreError::Unavailable { detail: "connection refused".into() })
    }
    async fn succeeded(&self, _: &str, _: DateTime<Utc>) -> Result<(), StoreError> {
        Err(StoreError::Unavailable { detail: "connection refused".into() })
    }
    async fn claim_probe(
        &self,
        _: &str,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(StoreError::Unavailable { detail: "connection refused".into() })
    }
}

#[async_trait::async_trait]
impl ResponseCacheStore for Down {
    async fn get(&self, _: &TenantId, _: &str, _: DateTime<Utc>) -> Result<Option<CachedAnswer>, StoreError> {
        Err(StoreError::Unavailable { detail: "connection refused".into() })
    }
    async fn put(&self, _: &TenantId, _: &str, _: &CachedAnswer, _: DateTime<Utc>) -> Result<(), StoreError> {
        Err(StoreError::Unavailable { detail: "connection refused".into() })
    }
    async fn purge_expired(&self, _: DateTime<Utc>, _: usize) -> Result<u64, StoreError> {
        Err(StoreError::Unavailable { detail: "connection refused".into() })
    }
}

#[tokio::test]
async fn a_breaker_or_a_cache_whose_store_is_down_lets_the_run_through() {
    let stores = Stores { breakers: Arc::new(Down), response_cache: Arc::new(Down), ..Stores::in_memory() };
    let (app, calls) = app(1, stores);
    save(
        &app,
        json!({"provider": "primary", "model": "p-model", "responseCache": {"enabled": true},
            "fallbacks": [{"provider": "backup", "model": "b-model"}]}),
    )
    .await;
    let (answer, _, _) = run(&app).await;
    assert_eq!((answer["status"].as_str(), answer["text"].as_str()), (Some("Completed"), Some("All good!")));
    let (answer, _, log) = run(&app).await;
    assert_eq!(answer["text"], r#"{"ok": true}"#, "the cache could not answer: the model did");
    assert!(!log.contains(&"model.cache_hit".to_owned()));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
