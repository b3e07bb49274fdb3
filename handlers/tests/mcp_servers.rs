//! `/api/mcp-servers` through the router on the memory stores: registrations (HTTP endpoints
//! only, credentials by key name only, approval on by default), the `SecurityAdmin` rule for a
//! server whose tools skip approval, tenant isolation, the audit trail, and a refresh of a
//! server that cannot be reached (no tools, a warning in our words).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tracon_core::config::Config;
use tracon_core::egress::EgressPolicy;
use tracon_core::keys::Scope;
use tracon_core::mcp::McpSettings;
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::{AppState, HttpSettings};

const TOKEN: &str = "a-long-enough-test-token";

fn app(guard: EgressPolicy) -> (Router, AppState) {
    let secrets = Config::from_pairs([
        ("Tracon__McpSecrets__Crm", "Bearer crm-token"),
        ("Tracon__McpSecrets__tenant-a__Crm", "Bearer a-token"),
    ]);
    let settings = McpSettings::default().with_secrets(secrets).with_egress(guard).unwrap();
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("hi"));
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .mcp(settings)
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN));
    (tracon_handlers::router(state.clone()), state)
}

async fn call(app: &Router, method: Method, path: &str, bearer: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = support::call(method, path).from(support::REMOTE).bearer(bearer).json(body).send(app).await;
    (reply.status, reply.json_or_null())
}

#[tokio::test]
async fn a_server_is_registered_read_replaced_and_removed_with_approval_on_by_default() {
    let (app, _) = app(EgressPolicy::default());
    let body = json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp",
        "authorizationConfigurationKey": "Tracon__McpSecrets__Crm",
        "headerConfigurationKeys": {"X-Api-Key": "Tracon:McpSecrets:Missing"}});
    let (status, created) = call(&app, Method::POST, "/api/mcp-servers", TOKEN, Some(body.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["requiresApproval"], true, "approval is on unless turned off");
    assert_eq!(created["authorizationConfigurationKey"], "Tracon:McpSecrets:Crm", "stored in its ':' spelling");
    assert_eq!(created["credentialsResolved"], false, "one of the names holds no value");
    assert!(created.get("discovery").is_none(), "nothing is asked on a save");
    assert!(!created.to_string().contains("crm-token"), "a value never comes back");
    let (status, again) = call(&app, Method::POST, "/api/mcp-servers", TOKEN, Some(body)).await;
    assert_eq!((status, again["errorType"].as_str()), (StatusCode::CONFLICT, Some("conflict")));

    let (status, got) = call(&app, Method::GET, "/api/mcp-servers/crm", TOKEN, None).await;
    assert_eq!((status, got["endpoint"].as_str()), (StatusCode::OK, Some("https://mcp.example.com/mcp")));
    let replace =
        json!({"endpoint": "https://mcp2.example.com/mcp", "authorizationConfigurationKey": "Tracon:McpSecrets:Crm"});
    let (status, replaced) = call(&app, Method::PUT, "/api/mcp-servers/crm", TOKEN, Some(replace)).await;
    assert_eq!(status, StatusCode::OK, "{replaced}");
    assert_eq!(
        (replaced["credentialsResolved"].as_bool(), replaced["createdAt"].clone()),
        (Some(true), created["createdAt"].clone())
    );
    let (_, listed) = call(&app, Method::GET, "/api/mcp-servers", TOKEN, None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["endpoint"], "https://mcp2.example.com/mcp");
    let mismatch = json!({"name": "other", "endpoint": "https://mcp.example.com/mcp"});
    let (status, doc) = call(&app, Method::PUT, "/api/mcp-servers/crm", TOKEN, Some(mismatch)).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("name_mismatch")));

    let (status, _) = call(&app, Method::DELETE, "/api/mcp-servers/crm", TOKEN, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for method in [Method::GET, Method::DELETE] {
        let (status, doc) = call(&app, method, "/api/mcp-servers/crm", TOKEN, None).await;
        assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("mcp_server_not_found")));
    }
    let (status, doc) = call(
        &app,
        Method::PUT,
        "/api/mcp-servers/crm",
        TOKEN,
        Some(json!({"endpoint": "https://mcp.example.com/mcp"})),
    )
    .await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("mcp_server_not_found")));

    // The audit trail has every change, each written before it applied.
    let (_, trail) = call(&app, Method::GET, "/api/audit?entityType=mcp_server&entityId=crm", TOKEN, None).await;
    let mut actions: Vec<&str> = trail.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    actions.sort();
    assert_eq!(actions, ["mcp_server.create", "mcp_server.delete", "mcp_server.update"], "{trail}");
}

#[tokio::test]
async fn bad_registrations_are_400s_that_name_the_field_and_never_echo_a_value() {
    let (app, _) = app(EgressPolicy::default());
    let cases = [
        (json!({"endpoint": "https://mcp.example.com/mcp"}), "name"),
        (json!({"name": "Crm_Tools", "endpoint": "https://mcp.example.com/mcp"}), "name"),
        (json!({"name": "crm", "endpoint": "stdio:///usr/local/bin/server"}), "endpoint"),
        (json!({"name": "crm", "endpoint": "npx @acme/mcp-server"}), "endpoint"),
        (json!({"name": "crm", "endpoint": "http://mcp.example.com/mcp"}), "endpoint"),
        (json!({"name": "crm", "endpoint": "https://169.254.169.254/mcp"}), "endpoint"),
        (json!({"name": "crm", "endpoint": "https://localhost/mcp"}), "endpoint"),
        (json!({"name": "crm", "endpoint": format!("https://mcp.example.com/{}", "a".repeat(2100))}), "endpoint"),
        (
            json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp", "authorizationConfigurationKey": "Bearer sk-live-123456"}),
            "authorizationConfigurationKey",
        ),
        (
            json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp", "authorizationConfigurationKey": "Tracon:Providers:OpenAI:ApiKey"}),
            "authorizationConfigurationKey",
        ),
        (
            json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp", "headerConfigurationKeys": {"X-Key": "sk-live-123456"}}),
            "headerConfigurationKeys",
        ),
        (
            json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp", "headerConfigurationKeys": {"Authorization": "Tracon:McpSecrets:Crm"}}),
            "headerConfigurationKeys",
        ),
        (
            json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp", "headerConfigurationKeys": {"Mcp-Session-Id": "Tracon:McpSecrets:Crm"}}),
            "headerConfigurationKeys",
        ),
        (
            json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp", "headerConfigurationKeys": {"bad header": "Tracon:McpSecrets:Crm"}}),
            "headerConfigurationKeys",
        ),
        (
            json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp", "headerConfigurationKeys":
            (0..17).map(|i| (format!("X-H{i}"), json!("Tracon:McpSecrets:Crm"))).collect::<serde_json::Map<_, _>>()}),
            "headerConfigurationKeys",
        ),
    ];
    for (body, field) in cases {
        let (status, doc) = call(&app, Method::POST, "/api/mcp-servers", TOKEN, Some(body.clone())).await;
        assert_eq!(
            (status, doc["errorType"].as_str(), doc["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some("validation_failed"), Some(field)),
            "{body}: {doc}"
        );
        assert!(!doc.to_string().contains("sk-live-123456"), "{doc}");
    }
    let (status, doc) = call(
        &app,
        Method::POST,
        "/api/mcp-servers",
        TOKEN,
        Some(json!({"name": "crm", "endpoint": "https://x.example/mcp", "command": "npx"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "unknown fields are refused: {doc}");
    let (_, listed) = call(&app, Method::GET, "/api/mcp-servers", TOKEN, None).await;
    assert_eq!(listed, json!([]), "nothing was stored");
}

#[tokio::test]
async fn waiving_approval_needs_security_admin_as_well_as_agents_admin() {
    let (app, state) = app(EgressPolicy::default());
    let agents = support::api_key(&state.runtime, "default", &[Scope::AgentsAdmin, Scope::AgentsRead], None).await;
    let both = support::api_key(&state.runtime, "default", &[Scope::AgentsAdmin, Scope::SecurityAdmin], None).await;
    let reader = support::api_key(&state.runtime, "default", &[Scope::AgentsRead], None).await;
    let off = |endpoint: &str| json!({"name": "crm", "endpoint": endpoint, "requiresApproval": false});

    // A new server that skips approval.
    let (status, doc) = call(&app, Method::POST, "/api/mcp-servers", &agents, Some(off("https://a.example/mcp"))).await;
    assert_eq!(
        (status, doc["errorType"].as_str(), doc["requiredScope"].as_str()),
        (StatusCode::FORBIDDEN, Some("insufficient_scope"), Some("SecurityAdmin")),
        "{doc}"
    );
    let on = json!({"name": "crm", "endpoint": "https://a.example/mcp"});
    let (status, _) = call(&app, Method::POST, "/api/mcp-servers", &agents, Some(on)).await;
    assert_eq!(status, StatusCode::CREATED);
    // A server that asked for approval and no longer would.
    let (status, _) =
        call(&app, Method::PUT, "/api/mcp-servers/crm", &agents, Some(off("https://a.example/mcp"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, doc) =
        call(&app, Method::PUT, "/api/mcp-servers/crm", &both, Some(off("https://a.example/mcp"))).await;
    assert_eq!((status, doc["requiresApproval"].as_bool()), (StatusCode::OK, Some(false)), "{doc}");
    // Off already, same endpoint: an AgentsAdmin edit is fine; a new endpoint is not.
    let (status, _) =
        call(&app, Method::PUT, "/api/mcp-servers/crm", &agents, Some(off("https://a.example/mcp"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) =
        call(&app, Method::PUT, "/api/mcp-servers/crm", &agents, Some(off("https://b.example/mcp"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, got) = call(&app, Method::GET, "/api/mcp-servers/crm", &reader, None).await;
    assert_eq!(got["endpoint"], "https://a.example/mcp", "the refused change applied nothing");
    // Readers read; they neither write nor refresh.
    let (status, _) = call(&app, Method::POST, "/api/mcp-servers/refresh", &reader, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(&app, Method::DELETE, "/api/mcp-servers/crm", &reader, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn another_tenants_server_looks_missing_and_key_names_stay_in_their_partition() {
    let (app, state) = app(EgressPolicy::default());
    let a = support::api_key(&state.runtime, "tenant-a", &Scope::ALL, None).await;
    let b = support::api_key(&state.runtime, "tenant-b", &Scope::ALL, None).await;
    let register = |key: &'static str| {
        let body = json!({"name": "crm", "endpoint": "https://a.example/mcp", "authorizationConfigurationKey": key});
        call(&app, Method::POST, "/api/mcp-servers", &a, Some(body))
    };
    let (status, doc) = register("Tracon:McpSecrets:Crm").await;
    assert_eq!(
        (status, doc["allowedPrefix"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Tracon:McpSecrets:tenant-a:")),
        "the default tenant's key is not A's"
    );
    let (status, _) = register("Tracon:McpSecrets:tenant-a:Crm").await;
    assert_eq!(status, StatusCode::CREATED);
    for (method, body) in
        [(Method::GET, None), (Method::PUT, Some(json!({"endpoint": "https://b.example/mcp"}))), (Method::DELETE, None)]
    {
        let (status, doc) = call(&app, method.clone(), "/api/mcp-servers/crm", &b, body.clone()).await;
        let (m_status, m_doc) = call(&app, method.clone(), "/api/mcp-servers/nothing", &b, body).await;
        assert_eq!((status, doc["errorType"].clone()), (m_status, m_doc["errorType"].clone()), "{method}");
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, doc) = call(&app, Method::POST, "/api/mcp-servers/refresh?name=crm", &b, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("mcp_server_not_found")));
    let (_, listed) = call(&app, Method::GET, "/api/mcp-servers", &b, None).await;
    assert_eq!(listed, json!([]));
    let (_, refreshed) = call(&app, Method::POST, "/api/mcp-servers/refresh", &b, None).await;
    assert_eq!(refreshed, json!([]), "B's refresh asks none of A's servers");
    let (_, mine) = call(&app, Method::GET, "/api/mcp-servers/crm", &a, None).await;
    assert_eq!(
        (mine["endpoint"].as_str(), mine["credentialsResolved"].as_bool()),
        (Some("https://a.example/mcp"), Some(true))
    );
}

#[tokio::test]
async fn a_server_that_cannot_be_reached_is_refreshed_to_no_tools_and_a_warning_in_our_words() {
    // A local port nothing listens on, which the guard lets through for this test.
    let guard = EgressPolicy::default().with_http(true).with_allowed_network("127.0.0.0/8".parse().unwrap());
    let (app, _) = app(guard);
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let body = json!({"name": "gone", "endpoint": format!("http://127.0.0.1:{port}/mcp")});
    assert_eq!(call(&app, Method::POST, "/api/mcp-servers", TOKEN, Some(body)).await.0, StatusCode::CREATED);
    let missing = json!({"name": "nokey", "endpoint": format!("http://127.0.0.1:{port}/mcp"),
        "authorizationConfigurationKey": "Tracon:McpSecrets:Unset"});
    assert_eq!(call(&app, Method::POST, "/api/mcp-servers", TOKEN, Some(missing)).await.0, StatusCode::CREATED);
    let (status, refreshed) = call(&app, Method::POST, "/api/mcp-servers/refresh", TOKEN, None).await;
    assert_eq!(status, StatusCode::OK, "{refreshed}");
    let by_name = |name: &str| refreshed.as_array().unwrap().iter().find(|s| s["name"] == name).unwrap().clone();
    let gone = by_name("gone");
    assert_eq!(
        (gone["discovery"]["reachable"].as_bool(), gone["discovery"]["tools"].clone()),
        (Some(false), json!([]))
    );
    let warning = gone["discovery"]["warnings"][0].as_str().unwrap();
    assert!(warning.starts_with("The server could not be reached. Its tools are not offered. (ref: "), "{warning}");
    assert!(!warning.contains("127.0.0.1") && !warning.to_lowercase().contains("connection refused"), "{warning}");
    let nokey = by_name("nokey");
    let warning = nokey["discovery"]["warnings"][0].as_str().unwrap();
    assert!(warning.contains("'Tracon:McpSecrets:Unset'") && warning.contains("holds no value"), "{warning}");
    // The discovery is kept: a read shows it without asking again.
    let (_, got) = call(&app, Method::GET, "/api/mcp-servers/gone", TOKEN, None).await;
    assert_eq!(got["discovery"]["reachable"], false);
    let (status, one) = call(&app, Method::POST, "/api/mcp-servers/refresh?name=nokey", TOKEN, None).await;
    assert_eq!((status, one.as_array().unwrap().len()), (StatusCode::OK, 1));
}

#[tokio::test]
async fn a_definition_may_name_the_tools_and_resources_of_registered_servers_only() {
    let (app, _) = app(EgressPolicy::default());
    let agent = |tools: Value, resources: Value| {
        json!({"name": "helper", "toolNames": tools, "mcpResourceUris": resources,
            "model": {"provider": "script", "model": "m"}})
    };
    let problems = |doc: &Value| {
        doc["problems"]
            .as_array()
            .map(|p| {
                p.iter()
                    .map(|x| (x["code"].as_str().unwrap().to_owned(), x["field"].as_str().unwrap().to_owned()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let (status, doc) = call(
        &app,
        Method::POST,
        "/api/agents",
        TOKEN,
        Some(agent(json!(["crm_lookup"]), json!(["crm:file:///policy.md"]))),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{doc}");
    assert_eq!(
        problems(&doc),
        [
            ("unknown_tool".to_owned(), "toolNames[0]".to_owned()),
            ("unknown_mcp_resource".to_owned(), "mcpResourceUris[0]".to_owned())
        ],
        "{doc}"
    );
    let (status, doc) = call(
        &app,
        Method::POST,
        "/api/agents",
        TOKEN,
        Some(agent(json!([]), json!(["crm", "crm:file:///a", "crm:file:///a"]))),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        problems(&doc),
        [
            ("invalid_name".to_owned(), "mcpResourceUris[0]".to_owned()),
            ("duplicate".to_owned(), "mcpResourceUris[2]".to_owned()),
            ("unknown_mcp_resource".to_owned(), "mcpResourceUris[1]".to_owned()),
            ("unknown_mcp_resource".to_owned(), "mcpResourceUris[2]".to_owned())
        ],
        "{doc}"
    );

    // Once the server is registered, its tools and resources may be named before anything was
    // discovered: a run leaves out what the server does not offer then.
    let server = json!({"name": "crm", "endpoint": "https://mcp.example.com/mcp"});
    assert_eq!(call(&app, Method::POST, "/api/mcp-servers", TOKEN, Some(server)).await.0, StatusCode::CREATED);
    let (status, doc) = call(
        &app,
        Method::POST,
        "/api/agents",
        TOKEN,
        Some(agent(json!(["crm_lookup"]), json!(["crm:file:///policy.md"]))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    assert_eq!(doc["definition"]["mcpResourceUris"], json!(["crm:file:///policy.md"]), "kept as written: {doc}");
}
