//! OAuth for the MCP client end to end: the real `tracon` binary on Postgres with content
//! protection on, a local authorization server (`tracon_tests::oauth`: metadata, dynamic
//! client registration, an `/authorize` that approves at once, a `/token` that checks PKCE,
//! `resource` and rotates refresh tokens) and the rmcp test server behind it, answering `401`
//! with `WWW-Authenticate: Bearer resource_metadata=…` to anything without its token.
//!
//! Authorize → follow the authorization URL → Tracon's callback → the tools discovered → a
//! run calls one → a token the server no longer takes is refreshed once and the run goes on →
//! the rotated refresh token is the one used next → a token about to expire is refreshed
//! before it is sent → the token columns in Postgres are ciphertext. A replayed or expired
//! state is refused; an authorization server without PKCE S256 is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{Value, json};
use support::{Tracon, database_url, run};
use tracon_tests::mcp::McpTestServer;
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};
use tracon_tests::oauth::AuthServer;

/// base64 of 32 bytes: content protection on.
const PROTECTION_KEY: &str = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";

fn fresh_schema() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("o_{nanos:x}{:x}", std::process::id())
}

async fn start(schema: &str, mock: &MockServer) -> Tracon {
    let endpoint = format!("{}/v1", mock.base_url());
    let url = database_url();
    Tracon::start(&[
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema),
        ("OPENAI_API_KEY", "k"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        // The MCP and authorization servers are on this machine: the egress guard's exception
        // for tests. Every OAuth request goes through the same guard as MCP requests.
        ("Tracon__Egress__AllowHttp", "true"),
        ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8"),
        ("Tracon__ContentProtection__Key", PROTECTION_KEY),
    ])
    .await
}

async fn json_of(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The browser's half: opens the authorization URL and returns where the authorization
/// server sends it (Tracon's callback), without following it.
async fn approve(url: &str) -> String {
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let reply = browser.get(url).send().await.unwrap();
    assert_eq!(reply.status().as_u16(), 302, "{:?}", reply.text().await);
    reply.headers()["location"].to_str().unwrap().to_owned()
}

async fn authorize(client: &reqwest::Client, tracon: &Tracon) -> Value {
    let (status, started) = json_of(client.post(tracon.url("/api/mcp-servers/crm/oauth/authorize"))).await;
    assert_eq!(status, 200, "{started}");
    started
}

async fn tools_run(tracon: &Tracon, mock: &MockServer, customer: &str) {
    tools_run_as(tracon, mock, ("crm-agent", "oauth-model"), customer).await;
}

/// A run of `agent` (on its own scripted `model`) that calls `crm_lookup` once.
async fn tools_run_as(tracon: &Tracon, mock: &MockServer, (agent, model): (&str, &str), customer: &str) {
    mock.script_in_order(
        model,
        vec![MockTurn::tool_call("crm_lookup", json!({"customerId": customer})), MockTurn::text("Found.")],
    );
    let (_, frames, raw) = run(tracon, agent, json!({"message": format!("Who is {customer}?")})).await;
    assert_eq!(frames.last().unwrap().data["status"], "Completed", "{raw}");
    let last = mock.requests(model).last().unwrap()["body"]["messages"].to_string();
    assert!(last.contains(&format!("Customer {customer}: Ada Lovelace")), "the remote tool answered: {last}");
}

#[tokio::test]
async fn an_oauth_server_is_authorized_called_refreshed_with_rotation_and_its_tokens_stored_encrypted() {
    let auth = AuthServer::start().await.unwrap();
    let mcp = McpTestServer::start_protected(auth.guard(), &auth.issuer).await.unwrap();
    auth.set_resource(&mcp.url);
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = fresh_schema();
    let tracon = start(&schema, &mock).await;
    let client = reqwest::Client::new();
    let pool = sqlx::PgPool::connect(&database_url()).await.unwrap();

    // Registered with an oauth object and no client id: Tracon registers itself.
    let server = json!({"name": "crm", "endpoint": mcp.url, "oauth": {"scopes": ["crm.read"]}});
    let (status, created) = json_of(client.post(tracon.url("/api/mcp-servers")).json(&server)).await;
    assert_eq!((status, created["oauth"]["status"].as_str()), (201, Some("not_connected")), "{created}");
    // Before the authorization: no tools, and a warning that says why.
    let (_, refreshed) = json_of(client.post(tracon.url("/api/mcp-servers/refresh"))).await;
    let warning = refreshed[0]["discovery"]["warnings"][0].as_str().unwrap();
    assert!(warning.starts_with("The server needs OAuth authorization"), "{warning}");

    // Authorize: discovery from the 401's resource_metadata, dynamic registration, PKCE S256,
    // the resource indicator.
    let started = authorize(&client, &tracon).await;
    let url = reqwest::Url::parse(started["authorizationUrl"].as_str().unwrap()).unwrap();
    assert!(url.as_str().starts_with(&format!("{}/authorize?", auth.issuer)), "{url}");
    let query: std::collections::BTreeMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["resource"], mcp.url);
    assert_eq!(query["scope"], "crm.read");
    assert_eq!(query["client_id"], "client-1", "registered dynamically");
    assert_eq!(auth.registrations(), 1);
    assert!(started["expiresAt"].is_string());
    // The pending verifier is ciphertext; the state is stored only as its digest.
    let (verifier, digest): (Vec<u8>, String) =
        sqlx::query_as(&format!("SELECT code_verifier, state_digest FROM {schema}.mcp_oauth_pending"))
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(verifier[0], 0x01, "sealed");
    assert_ne!(digest, query["state"]);

    let callback = approve(url.as_str()).await;
    assert!(callback.starts_with(&tracon.url("/api/mcp-servers/oauth/callback?")), "{callback}");
    // The browser reaches the callback with no credential of Tracon's.
    let (status, connected) = json_of(client.get(&callback)).await;
    assert_eq!(status, 200, "{connected} ({:?})", auth.last_refusal());
    assert_eq!((connected["connected"].as_bool(), connected["toolCount"].as_u64()), (Some(true), Some(3)));
    assert_eq!(auth.exchanges(), 1);
    // A replayed callback is refused.
    let (status, replayed) = json_of(client.get(&callback)).await;
    assert_eq!((status, replayed["errorType"].as_str()), (400, Some("mcp_oauth_state_invalid")), "{replayed}");

    let (_, got) = json_of(client.get(tracon.url("/api/mcp-servers/crm"))).await;
    assert_eq!(got["oauth"]["status"], "connected", "{got}");
    assert_eq!(got["oauth"]["grantedScopes"], json!(["crm.read"]));
    let tools: Vec<&str> =
        got["discovery"]["tools"].as_array().unwrap().iter().map(|t| t["toolName"].as_str().unwrap()).collect();
    assert_eq!(tools, ["crm_lookup", "crm_refund", "crm_explode"]);
    let shown = got.to_string();
    assert!(auth.issued_tokens().iter().all(|t| !shown.contains(&format!("\"{t}\""))), "never a token: {shown}");

    // A run calls the remote tool with the token.
    let rule = json!({"toolName": "crm_lookup"});
    assert_eq!(json_of(client.post(tracon.url("/api/approvals/rules")).json(&rule)).await.0, 201);
    let agent = json!({"name": "crm-agent", "toolNames": ["crm_lookup"],
        "model": {"provider": "openai", "model": "oauth-model"}});
    assert_eq!(json_of(client.post(tracon.url("/api/agents")).json(&agent)).await.0, 201);
    tools_run(&tracon, &mock, "c-1").await;
    assert_eq!(mcp.calls().len(), 1);
    assert_eq!(auth.refreshes(), 0);

    // The server stops taking the token: refused once, refreshed, and the run goes on.
    let refused = mcp.refused();
    auth.revoke_access_tokens();
    tools_run(&tracon, &mock, "c-2").await;
    assert_eq!(auth.refreshes(), 1, "{:?}", auth.last_refusal());
    assert_eq!(mcp.refused(), refused + 1, "one 401, then the refreshed token");
    // Again: only the rotated refresh token works now (the first was spent), so this proves
    // the rotation was stored.
    auth.revoke_access_tokens();
    tools_run(&tracon, &mock, "c-3").await;
    assert_eq!(auth.refreshes(), 2, "{:?}", auth.last_refusal());

    // A token about to expire is refreshed before it is sent: no 401 this time.
    auth.set_expires_in(5);
    auth.revoke_access_tokens();
    tools_run(&tracon, &mock, "c-4").await;
    assert_eq!(auth.refreshes(), 3);
    let refused = mcp.refused();
    auth.set_expires_in(3600);
    tools_run(&tracon, &mock, "c-5").await;
    assert_eq!((auth.refreshes(), mcp.refused()), (4, refused), "refreshed ahead of its expiry, never refused");
    assert_eq!(mcp.calls().len(), 5);

    // Two instances (a second process on the same database) refresh with the same refresh
    // token at once — the authorization server answers neither until both have asked. One
    // wins and rotates; the other is refused (its token spent), reads the winner's rotation
    // back instead, and its run goes on. The next forced refresh works: the rotation kept is
    // the one the authorization server still takes.
    let second = start(&schema, &mock).await;
    let agent_b = json!({"name": "crm-agent-b", "toolNames": ["crm_lookup"],
        "model": {"provider": "openai", "model": "oauth-model-b"}});
    assert_eq!(json_of(client.post(tracon.url("/api/agents")).json(&agent_b)).await.0, 201);
    let before = auth.refreshes();
    auth.revoke_access_tokens();
    auth.hold_next_refreshes(2);
    tokio::join!(
        tools_run_as(&tracon, &mock, ("crm-agent", "oauth-model"), "c-6"),
        tools_run_as(&second, &mock, ("crm-agent-b", "oauth-model-b"), "c-7"),
    );
    assert_eq!(auth.refreshes(), before + 1, "one refresh won");
    assert_eq!(auth.last_refusal().as_deref(), Some("unknown or rotated refresh token"), "the other lost");
    auth.revoke_access_tokens();
    tools_run(&second, &mock, "c-8").await;
    assert_eq!(mcp.calls().len(), 8);

    // At rest, every token column is ciphertext: none of the tokens ever issued appears.
    let (access, refresh): (Vec<u8>, Vec<u8>) =
        sqlx::query_as(&format!("SELECT access_token, refresh_token FROM {schema}.mcp_oauth_tokens"))
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((access[0], refresh[0]), (0x01, 0x01), "sealed with the content protection key");
    for token in auth.issued_tokens() {
        let plain = token.as_bytes();
        assert!(!access.windows(plain.len()).any(|w| w == plain) && !refresh.windows(plain.len()).any(|w| w == plain));
    }

    // An authorization left waiting past its expiry is refused at the callback.
    let started = authorize(&client, &tracon).await;
    sqlx::query(&format!("UPDATE {schema}.mcp_oauth_pending SET expires_at = now() - interval '1 second'"))
        .execute(&pool)
        .await
        .unwrap();
    let callback = approve(started["authorizationUrl"].as_str().unwrap()).await;
    let (status, expired) = json_of(client.get(&callback)).await;
    assert_eq!((status, expired["errorType"].as_str()), (400, Some("mcp_oauth_state_invalid")), "{expired}");
    assert_eq!(auth.exchanges(), 1, "no code of an expired authorization is exchanged");

    // Forgetting the tokens: the tools go with them.
    assert_eq!(client.delete(tracon.url("/api/mcp-servers/crm/oauth")).send().await.unwrap().status().as_u16(), 204);
    let (_, refreshed) = json_of(client.post(tracon.url("/api/mcp-servers/refresh?name=crm"))).await;
    assert_eq!(refreshed[0]["oauth"]["status"], "not_connected", "{refreshed}");
    assert_eq!(refreshed[0]["discovery"]["tools"], json!([]));
}

#[tokio::test]
async fn an_authorization_server_without_pkce_s256_is_refused() {
    let auth = AuthServer::start_without_s256().await.unwrap();
    let mcp = McpTestServer::start_protected(auth.guard(), &auth.issuer).await.unwrap();
    auth.set_resource(&mcp.url);
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let tracon = start(&fresh_schema(), &mock).await;
    let client = reqwest::Client::new();
    let server = json!({"name": "crm", "endpoint": mcp.url, "oauth": {"clientId": "preregistered"}});
    assert_eq!(json_of(client.post(tracon.url("/api/mcp-servers")).json(&server)).await.0, 201);
    let (status, doc) = json_of(client.post(tracon.url("/api/mcp-servers/crm/oauth/authorize"))).await;
    assert_eq!((status, doc["errorType"].as_str()), (502, Some("mcp_oauth_failed")), "{doc}");
    assert!(doc["detail"].as_str().unwrap().contains("PKCE with S256"), "{doc}");
    assert_eq!(auth.registrations(), 0, "a configured client id is not registered again");
}
