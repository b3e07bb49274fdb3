//! OAuth for remote MCP servers through the router on the memory stores: the `oauth` object's
//! validation, the server view (a status, never a token), the scopes of the authorize and
//! forget routes, another tenant's server looking missing, the open callback failing closed
//! (a missing, unknown, replayed or expired state; the authorization server's refusal in our
//! words), and a server without a token keeping no tools, with a warning that says why.
//! The flow against a real authorization server is `tests/tests/mcp_oauth_e2e.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::{Duration, Utc};
use serde_json::{Value, json};
use tracon_core::config::Config;
use tracon_core::keys::Scope;
use tracon_core::mcp::authorize::state_digest;
use tracon_core::mcp::oauth::{McpOAuthTokens, OAuthClient, PendingAuthorization};
use tracon_core::mcp::{McpServerName, McpSettings};
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::{AppState, HttpSettings};

const TOKEN: &str = "a-long-enough-test-token";

fn app() -> (Router, AppState) {
    let secrets = Config::from_pairs([("Tracon__McpSecrets__ClientSecret", "s3cret-value")]);
    let settings = McpSettings::default().with_secrets(secrets);
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("hi"));
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .mcp(settings)
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN));
    (tracon_handlers::router(state.clone()), state)
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    bearer: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let reply = support::call(method, path).from(support::REMOTE).bearer_opt(bearer).json(body).send(app).await;
    (reply.status, reply.json_or_null())
}

fn server(oauth: Value) -> Value {
    json!({"name": "crm", "endpoint": "https://crm.example/mcp", "oauth": oauth})
}

fn pending(digest: &str, tenant: &str, expires_in: Duration) -> PendingAuthorization {
    PendingAuthorization {
        state_digest: digest.into(),
        tenant: TenantId::parse(tenant).unwrap(),
        server: McpServerName::parse("crm").unwrap(),
        code_verifier: "v".repeat(43),
        redirect_uri: "https://tracon.example/api/mcp-servers/oauth/callback".into(),
        client: OAuthClient { client_id: "c".into(), issued_secret: None },
        // Never reached: every case here fails before the exchange.
        token_endpoint: "https://as.invalid/token".into(),
        resource: "https://crm.example/mcp".into(),
        scopes: vec![],
        expires_at: Utc::now() + expires_in,
    }
}

#[tokio::test]
async fn the_oauth_object_is_validated_with_400s_that_name_the_field() {
    let (app, _) = app();
    let cases = [
        (
            json!({"name": "crm", "endpoint": "https://crm.example/mcp", "authorizationConfigurationKey": "Tracon:McpSecrets:Crm", "oauth": {}}),
            "oauth",
        ),
        (server(json!({"clientId": "has space"})), "oauth.clientId"),
        (server(json!({"clientId": "x".repeat(257)})), "oauth.clientId"),
        (
            server(json!({"clientSecretConfigurationKey": "Tracon:McpSecrets:ClientSecret"})),
            "oauth.clientSecretConfigurationKey",
        ),
        (
            server(json!({"clientId": "c", "clientSecretConfigurationKey": "sk-live-123456"})),
            "oauth.clientSecretConfigurationKey",
        ),
        (server(json!({"scopes": ["read", "two words"]})), "oauth.scopes"),
        (server(json!({"scopes": ["quote\""]})), "oauth.scopes"),
        (server(json!({"scopes": (0..33).map(|i| format!("s{i}")).collect::<Vec<_>>()})), "oauth.scopes"),
    ];
    for (body, field) in cases {
        let (status, doc) = call(&app, Method::POST, "/api/mcp-servers", Some(TOKEN), Some(body.clone())).await;
        assert_eq!(
            (status, doc["errorType"].as_str(), doc["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some("validation_failed"), Some(field)),
            "{body}: {doc}"
        );
        assert!(!doc.to_string().contains("sk-live-123456"), "a pasted value is never echoed: {doc}");
    }
    let (status, _) =
        call(&app, Method::POST, "/api/mcp-servers", Some(TOKEN), Some(server(json!({"clientSecret": "x"})))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "unknown fields of the oauth object are refused");
    let (_, listed) = call(&app, Method::GET, "/api/mcp-servers", Some(TOKEN), None).await;
    assert_eq!(listed, json!([]), "nothing was stored");
}

#[tokio::test]
async fn the_view_shows_the_status_never_a_token_and_forgetting_disconnects() {
    let (app, state) = app();
    let body =
        server(json!({"clientId": "tracon-client", "clientSecretConfigurationKey": "Tracon__McpSecrets__ClientSecret",
        "scopes": ["crm.read"]}));
    let (status, created) = call(&app, Method::POST, "/api/mcp-servers", Some(TOKEN), Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(
        created["oauth"],
        json!({"clientId": "tracon-client", "clientSecretConfigurationKey": "Tracon:McpSecrets:ClientSecret",
            "scopes": ["crm.read"], "status": "not_connected"})
    );
    assert_eq!(created["credentialsResolved"], true, "the client secret's key holds a value");
    assert!(!created.to_string().contains("s3cret-value"));

    // Tokens as an authorization leaves them.
    let tenant = TenantId::parse("default").unwrap();
    let crm = McpServerName::parse("crm").unwrap();
    let tokens = McpOAuthTokens {
        access_token: "at-very-secret".into(),
        refresh_token: Some("rt-very-secret".into()),
        expires_at: Some(Utc::now() - Duration::minutes(1)),
        scopes: vec!["crm.read".into()],
        client: OAuthClient { client_id: "tracon-client".into(), issued_secret: None },
        token_endpoint: "https://as.invalid/token".into(),
        resource: "https://crm.example/mcp".into(),
        version: 0,
        updated_at: Utc::now(),
    };
    let oauth = state.runtime.mcp.oauth();
    oauth.put_tokens(&tenant, &crm, &tokens).await.unwrap();
    let (_, got) = call(&app, Method::GET, "/api/mcp-servers/crm", Some(TOKEN), None).await;
    assert_eq!(got["oauth"]["status"], "connected", "expired but refreshable: {got}");
    assert_eq!(got["oauth"]["grantedScopes"], json!(["crm.read"]));
    assert!(got["oauth"]["expiresAt"].is_string());
    assert!(!got.to_string().contains("very-secret"), "never a token: {got}");
    oauth.put_tokens(&tenant, &crm, &McpOAuthTokens { refresh_token: None, ..tokens.clone() }).await.unwrap();
    let (_, got) = call(&app, Method::GET, "/api/mcp-servers/crm", Some(TOKEN), None).await;
    assert_eq!(got["oauth"]["status"], "expired", "{got}");

    let (status, _) = call(&app, Method::DELETE, "/api/mcp-servers/crm/oauth", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, got) = call(&app, Method::GET, "/api/mcp-servers/crm", Some(TOKEN), None).await;
    assert_eq!(got["oauth"]["status"], "not_connected");

    // A new endpoint forgets the tokens: they were issued for the old resource.
    oauth.put_tokens(&tenant, &crm, &tokens).await.unwrap();
    let moved = json!({"endpoint": "https://crm2.example/mcp", "oauth": {"clientId": "tracon-client"}});
    let (status, got) = call(&app, Method::PUT, "/api/mcp-servers/crm", Some(TOKEN), Some(moved)).await;
    assert_eq!((status, got["oauth"]["status"].as_str()), (StatusCode::OK, Some("not_connected")), "{got}");
    assert!(oauth.get_tokens(&tenant, &crm).await.unwrap().is_none());

    // So does removing the server.
    oauth.put_tokens(&tenant, &crm, &tokens).await.unwrap();
    let (status, _) = call(&app, Method::DELETE, "/api/mcp-servers/crm", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(oauth.get_tokens(&tenant, &crm).await.unwrap().is_none());

    let (_, trail) = call(&app, Method::GET, "/api/audit?entityType=mcp_server&entityId=crm", Some(TOKEN), None).await;
    let actions: Vec<&str> = trail.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert!(actions.contains(&"mcp_server.oauth_forget"), "{trail}");
}

#[tokio::test]
async fn authorizing_needs_agents_admin_an_oauth_server_and_the_callers_tenant() {
    let (app, state) = app();
    let a = support::api_key(&state.runtime, "tenant-a", &Scope::ALL, None).await;
    let b = support::api_key(&state.runtime, "tenant-b", &Scope::ALL, None).await;
    let reader = support::api_key(&state.runtime, "tenant-a", &[Scope::AgentsRead], None).await;
    let (status, _) = call(&app, Method::POST, "/api/mcp-servers", Some(&a), Some(server(json!({})))).await;
    assert_eq!(status, StatusCode::CREATED);
    let plain = json!({"name": "plain", "endpoint": "https://plain.example/mcp"});
    assert_eq!(call(&app, Method::POST, "/api/mcp-servers", Some(&a), Some(plain)).await.0, StatusCode::CREATED);

    for (method, path) in
        [(Method::POST, "/api/mcp-servers/crm/oauth/authorize"), (Method::DELETE, "/api/mcp-servers/crm/oauth")]
    {
        let (status, doc) = call(&app, method.clone(), path, Some(&reader), None).await;
        assert_eq!(
            (status, doc["requiredScope"].as_str()),
            (StatusCode::FORBIDDEN, Some("AgentsAdmin")),
            "{method} {path}: {doc}"
        );
        // Another tenant's server looks missing.
        let (status, doc) = call(&app, method.clone(), path, Some(&b), None).await;
        assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("mcp_server_not_found")));
        let (status, _) = call(&app, method, path, None, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "not an open route");
    }
    let (status, doc) = call(&app, Method::POST, "/api/mcp-servers/plain/oauth/authorize", Some(&a), None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("mcp_oauth_not_configured")));
    let (status, doc) = call(&app, Method::POST, "/api/mcp-servers/ghost/oauth/authorize", Some(&a), None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("mcp_server_not_found")));
}

#[tokio::test]
async fn the_callback_is_open_and_fails_closed_on_a_missing_unknown_replayed_or_expired_state() {
    let (app, state) = app();
    assert_eq!(
        call(&app, Method::POST, "/api/mcp-servers", Some(TOKEN), Some(server(json!({})))).await.0,
        StatusCode::CREATED
    );
    let oauth = state.runtime.mcp.oauth();
    let callback = |query: &str| {
        let path = format!("/api/mcp-servers/oauth/callback?{query}");
        let app = app.clone();
        async move { call(&app, Method::GET, &path, None, None).await }
    };

    for query in ["code=abc", "code=abc&state=", "code=abc&state=never-issued"] {
        let (status, doc) = callback(query).await;
        assert_eq!(
            (status, doc["errorType"].as_str()),
            (StatusCode::BAD_REQUEST, Some("mcp_oauth_state_invalid")),
            "{query}: {doc}"
        );
    }

    // The authorization server's refusal: our words, never its own; the state is spent.
    oauth.put_pending(&pending(&state_digest("state-1"), "default", Duration::minutes(10))).await.unwrap();
    let (status, doc) =
        callback("state=state-1&error=access_denied&error_description=%3Cscript%3Ehunter2%3C%2Fscript%3E").await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("mcp_oauth_denied")), "{doc}");
    assert!(!doc.to_string().contains("hunter2") && !doc.to_string().contains("script"), "{doc}");
    let (status, doc) = callback("state=state-1&code=abc").await;
    assert_eq!(
        (status, doc["errorType"].as_str()),
        (StatusCode::BAD_REQUEST, Some("mcp_oauth_state_invalid")),
        "replayed"
    );

    // Expired: refused, and gone.
    oauth.put_pending(&pending(&state_digest("state-2"), "default", Duration::seconds(-1))).await.unwrap();
    let (status, doc) = callback("state=state-2&code=abc").await;
    assert_eq!(
        (status, doc["errorType"].as_str()),
        (StatusCode::BAD_REQUEST, Some("mcp_oauth_state_invalid")),
        "expired"
    );

    // A state whose server was removed meanwhile connects nothing.
    oauth.put_pending(&pending(&state_digest("state-3"), "tenant-b", Duration::minutes(10))).await.unwrap();
    let (status, doc) = callback("state=state-3&code=abc").await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("mcp_server_not_found")), "{doc}");
    let tenant = TenantId::parse("tenant-b").unwrap();
    assert!(oauth.get_tokens(&tenant, &McpServerName::parse("crm").unwrap()).await.unwrap().is_none());
}

#[tokio::test]
async fn a_server_without_a_token_offers_no_tools_and_says_it_needs_authorization() {
    let (app, _) = app();
    assert_eq!(
        call(&app, Method::POST, "/api/mcp-servers", Some(TOKEN), Some(server(json!({})))).await.0,
        StatusCode::CREATED
    );
    let (status, refreshed) = call(&app, Method::POST, "/api/mcp-servers/refresh", Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
    let discovery = &refreshed[0]["discovery"];
    assert_eq!((discovery["reachable"].as_bool(), discovery["tools"].as_array().map(Vec::len)), (Some(false), Some(0)));
    let warning = discovery["warnings"][0].as_str().unwrap();
    assert!(warning.starts_with("The server needs OAuth authorization"), "{warning}");
}
