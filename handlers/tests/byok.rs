//! A tenant's own provider credentials (BYOK) and egress policy, through the router. The
//! `openai` provider points at a local stub that records the key each call presents — the
//! provider's request boundary, where a wrong key would show.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{StubRequest, call, frames, http_stub};
use tracon_core::config::Config;
use tracon_core::egress::EgressPolicy;
use tracon_core::model::ModelProvider;
use tracon_core::model::byok::ProviderKeySettings;
use tracon_core::model::openai::OpenAiProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::access::tenancy::TenancySettings;
use tracon_handlers::{AppState, HttpSettings};

/// A chat completions stub: answers every call, and keeps every request it got.
async fn stub() -> (String, Arc<Mutex<Vec<StubRequest>>>) {
    let answer = json!({"model": "m", "choices": [{"message": {"role": "assistant", "content": "hello"},
        "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}});
    let (addr, seen) = http_stub(move |_| (200, answer.to_string())).await;
    (format!("http://{addr}/v1"), seen)
}

struct App {
    app: Router,
    seen: Arc<Mutex<Vec<StubRequest>>>,
    endpoint: String,
}

impl App {
    /// The key each call to the stub presented, in order.
    fn keys(&self) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        let bearer = |r: &StubRequest| r.headers.get("authorization").cloned().unwrap_or_default();
        seen.iter().map(|r| bearer(r).trim_start_matches("Bearer ").to_owned()).collect()
    }
}

async fn app() -> App {
    let (endpoint, seen) = stub().await;
    let openai = OpenAiProvider::openai(reqwest::Client::new(), "sk-host".into(), Some(endpoint.clone()));
    let secrets = Config::from_pairs([
        ("Tracon__ProviderKeys__acme__OpenAI", "sk-acme"),
        ("Tracon__ProviderKeys__acme__Empty", ""),
        ("Tracon__ProviderKeys__globex__OpenAI", "sk-globex"),
    ]);
    // Tenants' own endpoints may be this machine's stub (a test's exception to the guard).
    let guard = EgressPolicy::default().with_http(true).with_allowed_network("127.0.0.0/8".parse().unwrap());
    let keys_settings = ProviderKeySettings::default().with_secrets(secrets).with_egress(guard).unwrap();
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(openai) as Arc<dyn ModelProvider>)
        .add_provider(
            Arc::new(ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("scripted"))) as Arc<dyn ModelProvider>
        )
        .provider_keys(keys_settings)
        .build()
        .unwrap();
    let config = Config::from_pairs([("Tracon__Tenancy__Enabled", "true"), ("Tracon__Tenancy__AllowHeader", "true")]);
    let http = HttpSettings { tenancy: TenancySettings::from_config(&config).unwrap(), ..HttpSettings::default() };
    App { app: tracon_handlers::router(AppState::new(Arc::new(runtime), http)), seen, endpoint }
}

async fn send(app: &Router, tenant: &str, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = call(method, path).header("x-tenant-id", tenant).json(body).send(app).await;
    (reply.status, reply.json_or_null())
}

async fn agent(app: &Router, tenant: &str, name: &str, provider: &str) -> (StatusCode, Value) {
    send(
        app,
        tenant,
        Method::POST,
        "/api/agents",
        Some(json!({"name": name, "model": {"provider": provider, "model": "m"}})),
    )
    .await
}

/// Runs `name` for `tenant`: the last frame.
async fn run(app: &Router, tenant: &str, name: &str) -> (String, Value) {
    let reply = call(Method::POST, &format!("/api/agents/{name}/run"))
        .header("x-tenant-id", tenant)
        .json(Some(json!({"message": "hi"})))
        .send(app)
        .await;
    if reply.status != StatusCode::OK {
        return ("refused".into(), reply.json());
    }
    frames(&reply.text()).pop().unwrap()
}

fn bind(name: &str) -> Option<Value> {
    Some(json!({"apiKeyConfigurationName": name}))
}

#[tokio::test]
async fn a_tenants_binding_sends_its_own_key_and_every_other_tenant_keeps_the_hosts() {
    let a = app().await;
    for tenant in ["acme", "globex"] {
        assert_eq!(agent(&a.app, tenant, "chat", "openai").await.0, StatusCode::CREATED);
    }
    let (status, bound) = send(
        &a.app,
        "acme",
        Method::PUT,
        "/api/tenants/acme/providers/OpenAI",
        bind("Tracon:ProviderKeys:acme:OpenAI"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{bound}");
    assert_eq!(
        (bound["provider"].as_str(), bound["resolved"].as_bool(), bound["supported"].as_bool()),
        (Some("openai"), Some(true), Some(true))
    );
    assert_eq!(run(&a.app, "acme", "chat").await.0, "done");
    assert_eq!(run(&a.app, "globex", "chat").await.0, "done");
    assert_eq!(a.keys(), ["sk-acme", "sk-host"], "each call billed to its own account");
    // A read says whether the name resolves, never the value.
    let (_, listed) = send(&a.app, "acme", Method::GET, "/api/tenants/acme/providers", None).await;
    assert_eq!(listed[0]["apiKeyConfigurationName"], "Tracon:ProviderKeys:acme:OpenAI");
    assert!(!listed.to_string().contains("sk-acme"), "{listed}");
    // Removed: the host's key again.
    let (status, _) = send(&a.app, "acme", Method::DELETE, "/api/tenants/acme/providers/openai", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    run(&a.app, "acme", "chat").await;
    assert_eq!(a.keys().last().map(String::as_str), Some("sk-host"));
    let (status, _) = send(&a.app, "acme", Method::DELETE, "/api/tenants/acme/providers/openai", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_binding_holds_a_key_name_under_the_tenants_own_prefix_never_a_key() {
    let a = app().await;
    let put = |name: &'static str| send(&a.app, "acme", Method::PUT, "/api/tenants/acme/providers/openai", bind(name));
    let (status, problem) = put("sk-live-0123456789").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(!problem.to_string().contains("sk-live"), "a value sent by mistake is not echoed: {problem}");
    assert_eq!(put("Tracon:ProviderKeys:globex:OpenAI").await.0, StatusCode::BAD_REQUEST, "another tenant's name");
    assert_eq!(put("OPENAI_API_KEY").await.0, StatusCode::BAD_REQUEST);
    let (status, problem) =
        send(&a.app, "acme", Method::PUT, "/api/tenants/acme/providers/nope", bind("Tracon:ProviderKeys:acme:X")).await;
    assert_eq!((status, problem["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("unknown_provider")));
    // A tenant's endpoint goes through the egress guard.
    let body = Some(
        json!({"apiKeyConfigurationName": "Tracon:ProviderKeys:acme:OpenAI", "endpoint": "http://169.254.169.254/v1"}),
    );
    let (status, problem) = send(&a.app, "acme", Method::PUT, "/api/tenants/acme/providers/openai", body).await;
    assert_eq!((status, problem["field"].as_str()), (StatusCode::BAD_REQUEST, Some("endpoint")), "{problem}");
    // Another tenant's bindings answer as missing ones.
    let (status, _) = send(&a.app, "globex", Method::GET, "/api/tenants/acme/providers", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(
        &a.app,
        "globex",
        Method::PUT,
        "/api/tenants/acme/providers/openai",
        bind("Tracon:ProviderKeys:acme:OpenAI"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Each write is in the tenant's audit trail, without the key name's value.
    put("Tracon:ProviderKeys:acme:OpenAI").await;
    let (_, trail) = send(&a.app, "acme", Method::GET, "/api/audit", None).await;
    assert!(trail.to_string().contains("provider_binding.put"), "{trail}");
}

#[tokio::test]
async fn a_binding_without_a_value_or_to_a_provider_without_byok_fails_the_run_and_never_uses_the_hosts_key() {
    let a = app().await;
    agent(&a.app, "acme", "chat", "openai").await;
    agent(&a.app, "acme", "local", "script").await;
    send(&a.app, "acme", Method::PUT, "/api/tenants/acme/providers/openai", bind("Tracon:ProviderKeys:acme:Empty"))
        .await;
    let (event, end) = run(&a.app, "acme", "chat").await;
    assert_eq!((event.as_str(), end["errorType"].as_str()), ("error", Some("provider_credential_missing")), "{end}");
    let (_, listed) = send(&a.app, "acme", Method::GET, "/api/tenants/acme/providers", None).await;
    assert_eq!(listed[0]["resolved"], false);

    let (status, bound) = send(
        &a.app,
        "acme",
        Method::PUT,
        "/api/tenants/acme/providers/script",
        bind("Tracon:ProviderKeys:acme:OpenAI"),
    )
    .await;
    assert_eq!((status, bound["supported"].as_bool()), (StatusCode::OK, Some(false)));
    let (event, end) = run(&a.app, "acme", "local").await;
    assert_eq!(
        (event.as_str(), end["errorType"].as_str()),
        ("error", Some("provider_credential_unsupported")),
        "{end}"
    );
    assert!(a.keys().is_empty(), "no call went out with the host's key");
}

#[tokio::test]
async fn a_tenants_own_endpoint_is_called_with_its_key() {
    let a = app().await;
    agent(&a.app, "acme", "chat", "openai").await;
    let body = Some(json!({"apiKeyConfigurationName": "Tracon:ProviderKeys:acme:OpenAI", "endpoint": a.endpoint}));
    let (status, bound) = send(&a.app, "acme", Method::PUT, "/api/tenants/acme/providers/openai", body).await;
    assert_eq!(status, StatusCode::OK, "{bound}");
    assert_eq!(run(&a.app, "acme", "chat").await.0, "done");
    assert_eq!(a.keys(), ["sk-acme"]);
}

#[tokio::test]
async fn an_egress_policy_refuses_other_providers_at_save_at_run_and_for_bindings() {
    let a = app().await;
    assert_eq!(agent(&a.app, "acme", "local", "script").await.0, StatusCode::CREATED, "saved while unrestricted");
    let (_, open) = send(&a.app, "acme", Method::GET, "/api/tenants/acme/egress", None).await;
    assert_eq!(open["restricted"], false);
    let policy = Some(json!({"allowedProviders": ["OpenAI", "openai"]}));
    let (status, saved) = send(&a.app, "acme", Method::PUT, "/api/tenants/acme/egress", policy).await;
    assert_eq!((status, &saved["allowedProviders"]), (StatusCode::OK, &json!(["openai"])), "{saved}");

    let (status, problem) = agent(&a.app, "acme", "other", "script").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        problem.to_string().contains("provider_not_allowed") || problem.to_string().contains("ProviderNotAllowed"),
        "{problem}"
    );
    let chained = json!({"name": "chained", "model": {"provider": "openai", "model": "m",
        "fallbacks": [{"provider": "script", "model": "m"}]}});
    let (status, problem) = send(&a.app, "acme", Method::POST, "/api/agents", Some(chained)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(problem.to_string().contains("model.fallbacks[0].provider"), "{problem}");
    // The agent saved before the policy no longer runs.
    let (event, _) = run(&a.app, "acme", "local").await;
    assert_ne!(event, "done");
    // A binding for a provider the policy leaves out is refused, and a policy that would leave
    // out a bound provider too.
    let (status, problem) = send(
        &a.app,
        "acme",
        Method::PUT,
        "/api/tenants/acme/providers/script",
        bind("Tracon:ProviderKeys:acme:OpenAI"),
    )
    .await;
    assert_eq!((status, problem["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("provider_not_allowed")));
    send(&a.app, "acme", Method::PUT, "/api/tenants/acme/providers/openai", bind("Tracon:ProviderKeys:acme:OpenAI"))
        .await;
    let (status, problem) =
        send(&a.app, "acme", Method::PUT, "/api/tenants/acme/egress", Some(json!({"allowedProviders": ["script"]})))
            .await;
    assert_eq!((status, problem["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("provider_binding_exists")));
    let (status, problem) =
        send(&a.app, "acme", Method::PUT, "/api/tenants/acme/egress", Some(json!({"allowedProviders": ["nope"]})))
            .await;
    assert_eq!((status, problem["field"].as_str()), (StatusCode::BAD_REQUEST, Some("allowedProviders[0]")));
    // Another tenant is not restricted; removing the policy lifts it.
    assert_eq!(agent(&a.app, "globex", "other", "script").await.0, StatusCode::CREATED);
    assert_eq!(send(&a.app, "acme", Method::DELETE, "/api/tenants/acme/egress", None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(run(&a.app, "acme", "local").await.0, "done");
}
