//! The models group through the router: the model catalog (`GET /api/models`, read from
//! configuration or given in code, prices included), its one enforced flag (JSON output of a
//! model listed without structured output fails compilation; a model not listed is never
//! refused), and provider health (`GET /api/models/health/{provider}`) against a local stub
//! of a provider's model list: classified, timed, cached a minute, the upstream's text kept out.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{StubRequest, TestClock, call, http_stub};
use tracon_core::config::Config;
use tracon_core::definition::AgentDefinition;
use tracon_core::model::ModelProvider;
use tracon_core::model::anthropic::AnthropicProvider;
use tracon_core::model::catalog::{ModelCatalog, ModelDescriptor, ModelPrice};
use tracon_core::model::openai::OpenAiProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::{Platform, tokio_rt};
use tracon_core::runtime::{Runtime, RuntimeBuilder};
use tracon_core::setup::{HostDefaults, runtime_from_config};
use tracon_core::stores::Stores;
use tracon_handlers::{AppState, HttpSettings};

const KEY: &str = "sk-test-secret-1234";

fn router(runtime: Runtime) -> Router {
    tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()))
}

async fn get(app: &Router, path: &str) -> (StatusCode, Value) {
    let reply = call(Method::GET, path).send(app).await;
    (reply.status, reply.json())
}

fn script() -> Arc<dyn ModelProvider> {
    // A JSON answer: the structured-output agents below must get one to complete.
    Arc::new(ScriptedProvider::from_fn("script", |_| {
        ScriptedTurn::text("{\"answer\": \"done\"}").with_usage(1_000_000, 500_000)
    }))
}

#[tokio::test]
async fn the_catalog_lists_every_registered_provider_with_what_the_configuration_says() {
    let config = Config::from_pairs([
        ("OPENAI_API_KEY", KEY),
        ("Tracon__Pricing__Currency", "EUR"),
        ("Tracon__Providers__OpenAI__Models__0__Id", "gpt-a"),
        ("Tracon__Providers__OpenAI__Models__0__ContextWindowTokens", "128000"),
        ("Tracon__Providers__OpenAI__Models__0__SupportsStructuredOutput", "true"),
        ("Tracon__Providers__OpenAI__Models__0__SupportsTools", "true"),
        ("Tracon__Providers__OpenAI__Models__0__InputPerMillion", "0.15"),
        ("Tracon__Providers__OpenAI__Models__0__OutputPerMillion", "0.6"),
        ("Tracon__Providers__OpenAI__Models__0__CachedInputPerMillion", "0.075"),
        // The older pricing keys land in the same catalog.
        ("Tracon__Pricing__Models__0__Provider", "scripted"),
        ("Tracon__Pricing__Models__0__Model", "demo"),
        ("Tracon__Pricing__Models__0__InputPerMillion", "1"),
        ("Tracon__Pricing__Models__0__OutputPerMillion", "2"),
        // A catalog for a provider that is not registered is not listed.
        ("Tracon__Providers__Anthropic__Models__0__Id", "claude-x"),
    ]);
    let runtime = runtime_from_config(
        &config,
        tokio_rt::platform(),
        Stores::in_memory(),
        reqwest::Client::new(),
        &HostDefaults { demo_agent: false },
    )
    .unwrap();
    let app = router(runtime);
    let (status, catalog) = get(&app, "/api/models").await;
    assert_eq!(status, StatusCode::OK, "{catalog}");
    assert_eq!(catalog["currency"], "EUR");
    let providers: Vec<&str> =
        catalog["providers"].as_array().unwrap().iter().map(|p| p["provider"].as_str().unwrap()).collect();
    assert_eq!(providers, ["openai", "openai-responses", "scripted"]);
    assert_eq!(
        catalog["providers"][0]["models"],
        json!([{
            "id": "gpt-a",
            "contextWindowTokens": 128000,
            "supportsStructuredOutput": true,
            "supportsTools": true,
            "supportsStreaming": null,
            "supportsReasoning": null,
            "price": {"inputPerMillion": 0.15, "outputPerMillion": 0.6, "cachedInputPerMillion": 0.075}
        }]),
        "what was configured, and null for what was not"
    );
    // The OpenAI section describes both of its routes.
    assert_eq!(catalog["providers"][1]["models"], catalog["providers"][0]["models"]);
    assert_eq!(
        catalog["providers"][2]["models"],
        json!([{
            "id": "demo",
            "contextWindowTokens": null,
            "supportsStructuredOutput": null,
            "supportsTools": null,
            "supportsStreaming": null,
            "supportsReasoning": null,
            "price": {"inputPerMillion": 1.0, "outputPerMillion": 2.0, "cachedInputPerMillion": null}
        }])
    );
}

#[tokio::test]
async fn a_provider_without_a_catalog_is_listed_with_no_models() {
    let app = router(RuntimeBuilder::new(tokio_rt::platform()).add_provider(script()).build().unwrap());
    let (status, catalog) = get(&app, "/api/models").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(catalog, json!({"currency": "USD", "providers": [{"provider": "script", "models": []}]}));
}

#[tokio::test]
async fn a_run_costs_what_the_catalog_prices_its_model_at() {
    let price = ModelPrice { input_per_million: 2.0, output_per_million: 8.0, cached_input_per_million: None };
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(script())
        .model_catalog(ModelCatalog::new().with_model("script", ModelDescriptor::new("m").priced(price)))
        .add_agent(AgentDefinition::new("priced", "script", "m"))
        .add_agent(AgentDefinition::new("unpriced", "script", "other"))
        .build()
        .unwrap();
    let app = router(runtime);
    for (agent, expected) in [("priced", json!(2.0 + 4.0)), ("unpriced", Value::Null)] {
        let reply = call(Method::POST, &format!("/api/agents/{agent}/run"))
            .header("idempotency-key", agent)
            .json(Some(json!({"message": "hi"})))
            .send(&app)
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        let answer = reply.json();
        assert_eq!(answer["cost"]["totalCost"], expected, "{agent}: {answer}");
    }
}

fn json_agent(name: &str, model: &str, format: Value) -> Value {
    json!({"name": name, "model": {"provider": "script", "model": model, "responseFormat": format}})
}

#[tokio::test]
async fn json_output_of_a_model_listed_without_structured_output_does_not_compile() {
    let catalog = ModelCatalog::new()
        .with_model("script", ModelDescriptor::new("plain-text").structured_output(false))
        .with_model("script", ModelDescriptor::new("structured").structured_output(true))
        .with_model("SCRIPT", ModelDescriptor::new("unsaid").context_window(1000));
    let app = router(
        RuntimeBuilder::new(tokio_rt::platform()).add_provider(script()).model_catalog(catalog).build().unwrap(),
    );
    let schema = json!({"type": "jsonSchema", "name": "answer", "schema": {"type": "object"}});

    // Refused on save (400, the compiler's problem list) and reported by validate.
    for format in [json!({"type": "json"}), schema.clone()] {
        let reply = call(Method::POST, "/api/agents")
            .json(Some(json_agent("refused", "plain-text", format.clone())))
            .send(&app)
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
        let doc = reply.json();
        assert_eq!(doc["errorType"], "validation_failed");
        assert_eq!(doc["problems"][0]["code"], "structured_output_unsupported", "{doc}");
        assert_eq!(doc["problems"][0]["field"], "model.responseFormat");
        let reply = call(Method::POST, "/api/agents/validate")
            .json(Some(json_agent("refused", "plain-text", format)))
            .send(&app)
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.json()["valid"], false);
    }
    // A fallback link answers in the same format: the catalog's word on its model counts too.
    let mut chained = json_agent("chained", "structured", json!({"type": "json"}));
    chained["model"]["fallbacks"] = json!([{"provider": "script", "model": "plain-text"}]);
    let reply = call(Method::POST, "/api/agents").json(Some(chained)).send(&app).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    let doc = reply.json();
    assert_eq!(
        (doc["problems"][0]["code"].as_str(), doc["problems"][0]["field"].as_str()),
        (Some("structured_output_unsupported"), Some("model.fallbacks[0].model")),
        "{doc}"
    );
    // Only that flag, only when explicitly false, only for JSON: a model the catalog does not
    // list, one that supports it, one that does not say, and text output all compile.
    for (name, model, format) in [
        ("absent", "not-in-the-catalog", json!({"type": "json"})),
        ("supported", "structured", schema),
        ("unsaid", "unsaid", json!({"type": "json"})),
        ("text", "plain-text", json!({"type": "text"})),
    ] {
        let reply = call(Method::POST, "/api/agents").json(Some(json_agent(name, model, format))).send(&app).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{name}: {}", reply.text());
    }
    // And a model absent from the catalog runs: a catalog, not an allowlist.
    let reply = call(Method::POST, "/api/agents/absent/run").json(Some(json!({"message": "hi"}))).send(&app).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.text().contains("event: done"), "{}", reply.text());
}

#[test]
fn a_code_agent_asking_such_a_model_for_json_stops_the_start() {
    let catalog = ModelCatalog::new().with_model("script", ModelDescriptor::new("m").structured_output(false));
    let def = json_agent("coded", "m", json!({"type": "json"}));
    let err = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(script())
        .model_catalog(catalog)
        .add_agent(serde_json::from_value(def).unwrap())
        .build()
        .err()
        .expect("a start-up error");
    assert!(err.to_string().contains("structured output"), "{err}");
}

/// A stand-in for a provider's model list: answers the status the test sets, quoting the key
/// back in its own words when it refuses, as providers do.
#[derive(Clone)]
struct Stub {
    status: Arc<AtomicU16>,
    seen: Arc<Mutex<Vec<StubRequest>>>,
}

impl Stub {
    async fn start() -> (Stub, SocketAddr) {
        let status = Arc::new(AtomicU16::new(200));
        let answer = status.clone();
        let (addr, seen) = http_stub(move |_| match answer.load(Ordering::SeqCst) {
            200 => (200, "{\"data\": []}".to_owned()),
            s => (s, format!("{{\"error\": \"Incorrect API key provided: {KEY}. upstream-internal-detail\"}}")),
        })
        .await;
        (Stub { status, seen }, addr)
    }

    fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    fn checks(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The `n`-th check: its path and the credential headers it carried.
    fn check(&self, n: usize) -> (String, Option<String>, Option<String>) {
        let r = self.seen.lock().unwrap()[n].clone();
        (r.path, r.headers.get("authorization").cloned(), r.headers.get("x-api-key").cloned())
    }
}

struct Health {
    app: Router,
    stub: Stub,
    clock: Arc<TestClock>,
}

async fn health_app() -> Health {
    let (stub, addr) = Stub::start().await;
    let clock = Arc::new(TestClock::shifted());
    let platform = Platform { clock: clock.clone(), spawner: tokio_rt::platform().spawner };
    let client = reqwest::Client::new();
    let openai = OpenAiProvider::openai(client.clone(), KEY.into(), Some(format!("http://{addr}/v1")));
    let anthropic = AnthropicProvider::new(client, KEY.into(), Some(format!("http://{addr}")));
    let runtime = RuntimeBuilder::new(platform)
        .add_provider(Arc::new(openai))
        .add_provider(Arc::new(anthropic))
        .add_provider(script())
        .build()
        .unwrap();
    Health { app: router(runtime), stub, clock }
}

#[tokio::test]
async fn a_reachable_provider_is_healthy_and_its_check_is_cached_for_a_minute() {
    let h = health_app().await;
    let (status, first) = get(&h.app, "/api/models/health/openai").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!((first["provider"].as_str(), first["status"].as_str()), (Some("openai"), Some("Healthy")));
    assert_eq!(first["cached"], false);
    assert_eq!(first["failure"], Value::Null);
    assert!(first["latencyMs"].is_u64(), "{first}");
    assert!(chrono::DateTime::parse_from_rfc3339(first["checkedAt"].as_str().unwrap()).is_ok());
    // The model list, with the provider's own credential: nothing billed.
    assert_eq!(h.stub.check(0), ("/v1/models".into(), Some(format!("Bearer {KEY}")), None));

    // Within the minute: the same answer from this instance's cache, no second check.
    h.clock.advance(59);
    let (_, again) = get(&h.app, "/api/models/health/OpenAI").await;
    assert_eq!((again["cached"].as_bool(), again["checkedAt"].clone()), (Some(true), first["checkedAt"].clone()));
    assert_eq!(h.stub.checks(), 1);
    // `refresh=true` checks now; after the minute a plain request checks again.
    let (_, refreshed) = get(&h.app, "/api/models/health/openai?refresh=true").await;
    assert_eq!((refreshed["cached"].as_bool(), h.stub.checks()), (Some(false), 2));
    h.clock.advance(61);
    let (_, expired) = get(&h.app, "/api/models/health/openai").await;
    assert_eq!((expired["cached"].as_bool(), h.stub.checks()), (Some(false), 3));

    // Anthropic's check is its model list too, with its own headers.
    let (_, anthropic) = get(&h.app, "/api/models/health/anthropic").await;
    assert_eq!(anthropic["status"], "Healthy", "{anthropic}");
    assert_eq!(h.stub.check(3), ("/v1/models".into(), None, Some(KEY.to_owned())));
}

#[tokio::test]
async fn a_failing_check_is_classified_in_our_words_without_the_providers_text() {
    let h = health_app().await;
    for (answer, status, kind) in [
        (401, "Unhealthy", "unauthorized"),
        (403, "Unhealthy", "unauthorized"),
        (429, "Degraded", "rate_limited"),
        (503, "Unhealthy", "server_error"),
        (404, "Unhealthy", "rejected"),
    ] {
        h.stub.answer(answer);
        let (code, health) = get(&h.app, "/api/models/health/openai?refresh=true").await;
        assert_eq!(code, StatusCode::OK, "{health}");
        assert_eq!(health["status"], status, "{answer}: {health}");
        assert_eq!(health["failure"]["kind"], kind, "{answer}: {health}");
        assert_eq!(health["failure"]["httpStatus"], answer);
        let message = health["failure"]["message"].as_str().unwrap();
        assert!(message.contains("(ref: "), "{message}");
        let text = health.to_string();
        assert!(!text.contains("upstream-internal-detail") && !text.contains(KEY), "{text}");
    }
}

#[tokio::test]
async fn google_and_azure_check_their_own_model_lists_with_their_own_keys() {
    // Google refuses a wrong key with 400 API_KEY_INVALID; its classification holds for the check.
    let (addr, seen) = http_stub(|r| {
        if r.path.starts_with("/v1beta/") {
            (400, r#"{"error": {"code": 400, "details": [{"reason": "API_KEY_INVALID"}]}}"#.to_owned())
        } else {
            (200, "{\"data\": []}".to_owned())
        }
    })
    .await;
    let client = reqwest::Client::new();
    let google =
        tracon_core::model::google::GoogleProvider::new(client.clone(), KEY.into(), Some(format!("http://{addr}")))
            .unwrap();
    let azure =
        tracon_core::model::azure::AzureOpenAiProvider::new(client, &format!("http://{addr}/"), KEY.into(), None)
            .unwrap();
    let app = router(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(google))
            .add_provider(Arc::new(azure))
            .build()
            .unwrap(),
    );
    let (_, health) = get(&app, "/api/models/health/google").await;
    assert_eq!(
        (health["status"].as_str(), health["failure"]["kind"].as_str()),
        (Some("Unhealthy"), Some("unauthorized"))
    );
    let (_, health) = get(&app, "/api/models/health/azure-openai").await;
    assert_eq!(health["status"], "Healthy", "{health}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].path, "/v1beta/models?pageSize=1");
    assert_eq!(seen[0].headers.get("x-goog-api-key").map(String::as_str), Some(KEY));
    assert_eq!(seen[1].path, "/openai/models?api-version=2024-10-21");
    assert_eq!(seen[1].headers.get("api-key").map(String::as_str), Some(KEY));
}

#[tokio::test]
async fn an_unreachable_provider_is_unhealthy() {
    // A port nothing listens on.
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let provider =
        OpenAiProvider::compatible(reqwest::Client::new(), "gone", &format!("http://{free}/v1"), None).unwrap();
    let app = router(RuntimeBuilder::new(tokio_rt::platform()).add_provider(Arc::new(provider)).build().unwrap());
    let (status, health) = get(&app, "/api/models/health/gone").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (health["status"].as_str(), health["failure"]["kind"].as_str()),
        (Some("Unhealthy"), Some("unreachable"))
    );
    assert_eq!(health["failure"]["httpStatus"], Value::Null);
}

/// A provider whose model list never answers.
struct Silent;

#[async_trait::async_trait]
impl ModelProvider for Silent {
    fn name(&self) -> &str {
        "silent"
    }

    async fn stream(
        &self,
        _: &tracon_core::model::ModelRequest,
    ) -> Result<tracon_core::model::ModelStream, tracon_core::model::ProviderError> {
        Err(tracon_core::model::ProviderError::protocol("not used"))
    }

    async fn health(&self) -> Option<Result<(), tracon_core::model::ProviderError>> {
        futures::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_check_that_never_answers_is_unhealthy_once_its_time_is_up() {
    let app = router(RuntimeBuilder::new(tokio_rt::platform()).add_provider(Arc::new(Silent)).build().unwrap());
    let started = tokio::time::Instant::now();
    let (status, health) = get(&app, "/api/models/health/silent").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((health["status"].as_str(), health["failure"]["kind"].as_str()), (Some("Unhealthy"), Some("timeout")));
    assert_eq!(started.elapsed(), tracon_core::model::health::CHECK_TIMEOUT);
}

#[tokio::test]
async fn a_provider_without_a_check_is_unknown_and_an_unknown_provider_is_404() {
    let h = health_app().await;
    let (status, health) = get(&h.app, "/api/models/health/script").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        health,
        json!({"provider": "script", "status": "Unknown", "checkedAt": null, "latencyMs": null, "cached": false, "failure": null})
    );
    let (status, doc) = get(&h.app, "/api/models/health/nobody").await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("provider_not_found")));
    let (status, doc) = get(&h.app, "/api/models/health/openai?refresh=maybe").await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("validation_failed")));
    assert_eq!(h.stub.checks(), 0, "nothing was checked for them");
}
