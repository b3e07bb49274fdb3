//! API keys through the router: issued once, stored as a hash, scoped, revoked and rotated
//! with effect on the next request; every route walked with one tenant's key against
//! another tenant's resources; each scope against each route; and the host's run and
//! session policy (denied resources look missing, a failing policy denies).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use chrono::Utc;
use serde_json::{Value, json};
use tracon_core::access::{RunAction, RunAuthorizer};
use tracon_core::definition::AgentDefinition;
use tracon_core::identity::Caller;
use tracon_core::keys::{self, Scope};
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::{RuntimeBuilder, RuntimeSettings};
use tracon_core::sessions::ownership::SessionOwnership;
use tracon_handlers::access::{Requirement, requirement};
use tracon_handlers::{AppState, HttpSettings};

mod support;

const TOKEN: &str = "a-long-enough-test-token";

fn app() -> (Router, AppState) {
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hello from the model.").with_usage(3, 4));
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN));
    (tracon_handlers::router(state.clone()), state)
}

async fn call(app: &Router, method: Method, path: &str, bearer: &str, body: Option<Value>) -> (StatusCode, Value) {
    // A stream answers with frames, not JSON: `json()` keeps its text.
    let reply = support::call(method, path).from(support::REMOTE).bearer(bearer).json(body).send(app).await;
    (reply.status, reply.json())
}

/// Puts a key straight into the store (tenant and scopes of the test's choosing).
async fn key_in(state: &AppState, tenant: &str, scopes: &[Scope], expires_in: Option<chrono::Duration>) -> String {
    support::api_key(&state.runtime, tenant, scopes, expires_in.map(|d| Utc::now() + d)).await
}

fn id_of(key: &str) -> &str {
    keys::parse_id(key).unwrap()
}

#[tokio::test]
async fn a_key_is_shown_once_stored_as_a_hash_and_narrowed_by_its_scopes() {
    let (app, state) = app();
    let (status, issued) = call(
        &app,
        Method::POST,
        "/api/api-keys",
        TOKEN,
        Some(json!({"name": "dashboard", "scopes": ["AgentsRead", "RunsRead"]})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let key = issued["key"].as_str().unwrap().to_owned();
    let id = issued["id"].as_str().unwrap().to_owned();
    assert_eq!(keys::parse_id(&key), Some(id.as_str()));
    assert_eq!((issued["status"].as_str(), issued["tenantId"].as_str()), (Some("Active"), Some("default")));

    // Stored as its digest; nothing stored or listed carries the key.
    let stored = state.runtime.stores.keys.find(&id).await.unwrap().unwrap();
    assert_eq!(stored.hash, keys::digest(&key));
    let secret_part = &key["trk_".len() + 12 + 1..];
    assert!(!format!("{stored:?}").contains(secret_part));
    let (_, listed) = call(&app, Method::GET, "/api/api-keys", TOKEN, None).await;
    assert_eq!(listed[0]["id"], id.as_str());
    assert!(listed[0].get("key").is_none() && !listed.to_string().contains(secret_part));
    let (_, one) = call(&app, Method::GET, &format!("/api/api-keys/{id}"), TOKEN, None).await;
    assert!(one.get("key").is_none() && one["scopes"] == json!(["AgentsRead", "RunsRead"]));

    // What the scopes name answers; anything else is 403 naming the missing scope.
    assert_eq!(call(&app, Method::GET, "/api/agents", &key, None).await.0, StatusCode::OK);
    assert_eq!(call(&app, Method::GET, "/api/runs", &key, None).await.0, StatusCode::OK);
    let (status, doc) = call(&app, Method::POST, "/api/agents", &key, Some(json!({"name": "x"}))).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("insufficient_scope")));
    assert_eq!(doc["requiredScope"], "AgentsAdmin");
    let (status, doc) = call(&app, Method::GET, "/api/api-keys", &key, None).await;
    assert_eq!((status, doc["requiredScope"].as_str()), (StatusCode::FORBIDDEN, Some("SecurityAdmin")));

    // Its use is recorded, off the request path.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while state.runtime.stores.keys.find(&id).await.unwrap().unwrap().last_used_at.is_none() {
        assert!(std::time::Instant::now() < deadline, "lastUsedAt was never written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn revocation_and_rotation_take_effect_on_the_next_request_and_expiry_is_enforced() {
    let (app, state) = app();
    let key = key_in(&state, "default", &[Scope::RunsRead], None).await;
    assert_eq!(call(&app, Method::GET, "/api/runs", &key, None).await.0, StatusCode::OK, "cached now");
    let (status, revoked) = call(&app, Method::DELETE, &format!("/api/api-keys/{}", id_of(&key)), TOKEN, None).await;
    assert_eq!((status, revoked["status"].as_str()), (StatusCode::OK, Some("Revoked")));
    let (status, doc) = call(&app, Method::GET, "/api/runs", &key, None).await;
    assert_eq!((status, doc["detail"].as_str()), (StatusCode::UNAUTHORIZED, Some("The API key was revoked.")));
    let (status, doc) = call(&app, Method::POST, &format!("/api/api-keys/{}/rotate", id_of(&key)), TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::CONFLICT, Some("api_key_revoked")));

    let old = key_in(&state, "default", &[Scope::RunsRead], None).await;
    assert_eq!(call(&app, Method::GET, "/api/runs", &old, None).await.0, StatusCode::OK);
    let (status, rotated) =
        call(&app, Method::POST, &format!("/api/api-keys/{}/rotate", id_of(&old)), TOKEN, None).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new = rotated["key"].as_str().unwrap();
    assert_eq!(keys::parse_id(new), keys::parse_id(&old), "same id, new secret");
    assert_ne!(new, old);
    assert_eq!(call(&app, Method::GET, "/api/runs", &old, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(call(&app, Method::GET, "/api/runs", new, None).await.0, StatusCode::OK);

    let expired = key_in(&state, "default", &[Scope::RunsRead], Some(chrono::Duration::seconds(-1))).await;
    let (status, doc) = call(&app, Method::GET, "/api/runs", &expired, None).await;
    assert_eq!((status, doc["detail"].as_str()), (StatusCode::UNAUTHORIZED, Some("The API key has expired.")));

    // A well-formed key nobody issued, a token-shaped guess, a truncated key: all 401.
    let unknown = keys::generate().unwrap().key;
    for bad in [unknown.as_str(), "not-the-token-at-all", &new[..new.len() - 1]] {
        assert_eq!(call(&app, Method::GET, "/api/runs", bad, None).await.0, StatusCode::UNAUTHORIZED, "{bad}");
    }
}

#[tokio::test]
async fn keys_are_validated_and_a_key_cannot_issue_more_than_it_has() {
    let (app, state) = app();
    for (body, field) in [
        (json!({"name": "x", "scopes": []}), "scopes"),
        (json!({"name": " ", "scopes": ["RunsRead"]}), "name"),
        (json!({"name": "x", "scopes": ["RunsRead"], "expiresAt": "2001-01-01T00:00:00Z"}), "expiresAt"),
    ] {
        let (status, doc) = call(&app, Method::POST, "/api/api-keys", TOKEN, Some(body)).await;
        assert_eq!((status, doc["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{doc}");
    }
    let (status, doc) =
        call(&app, Method::POST, "/api/api-keys", TOKEN, Some(json!({"name": "x", "scopes": ["Everything"]}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{doc}");

    let admin = key_in(&state, "acme", &[Scope::SecurityAdmin, Scope::RunsRead], None).await;
    let wider = json!({"name": "escalate", "scopes": ["RunsRead", "AgentsAdmin"]});
    let (status, doc) = call(&app, Method::POST, "/api/api-keys", &admin, Some(wider)).await;
    assert_eq!((status, doc["requiredScope"].as_str()), (StatusCode::FORBIDDEN, Some("AgentsAdmin")));
    let (status, issued) =
        call(&app, Method::POST, "/api/api-keys", &admin, Some(json!({"name": "reader", "scopes": ["RunsRead"]})))
            .await;
    assert_eq!((status, issued["tenantId"].as_str()), (StatusCode::CREATED, Some("acme")), "the issuer's tenant");

    // Rotating hands out a secret and revoking locks an owner out: a key can do neither to a
    // wider key.
    let wider = key_in(&state, "acme", &[Scope::AgentsAdmin, Scope::RunsRead], None).await;
    for (method, tail) in [(Method::POST, "/rotate"), (Method::DELETE, "")] {
        let path = format!("/api/api-keys/{}{tail}", id_of(&wider));
        let (status, doc) = call(&app, method, &path, &admin, None).await;
        assert_eq!((status, doc["requiredScope"].as_str()), (StatusCode::FORBIDDEN, Some("AgentsAdmin")), "{path}");
    }
    assert_eq!(call(&app, Method::GET, "/api/runs", &wider, None).await.0, StatusCode::OK, "still works");
    let narrower = issued["id"].as_str().unwrap();
    assert_eq!(
        call(&app, Method::POST, &format!("/api/api-keys/{narrower}/rotate"), &admin, None).await.0,
        StatusCode::OK
    );

    // A key issued by an expiring key expires no later than it.
    let expiring =
        key_in(&state, "acme", &[Scope::SecurityAdmin, Scope::RunsRead], Some(chrono::Duration::days(1))).await;
    let (_, child) =
        call(&app, Method::POST, "/api/api-keys", &expiring, Some(json!({"name": "child", "scopes": ["RunsRead"]})))
            .await;
    let parent = state.runtime.stores.keys.find(id_of(&expiring)).await.unwrap().unwrap();
    let child_expiry: chrono::DateTime<Utc> = serde_json::from_value(child["expiresAt"].clone()).unwrap();
    assert_eq!(Some(child_expiry), parent.expires_at);
}

/// Tenant B's agent, run, session and key, made through B's own key; its approval request,
/// approval rule and tenant record, put in the stores.
struct Theirs {
    agent: &'static str,
    run: String,
    session: &'static str,
    key_id: String,
    approval: String,
    rule: String,
    tenant: &'static str,
    job: String,
    trigger: &'static str,
    webhook: String,
    schedule: String,
    /// A stored `/v1/responses` response, and a `/v1/conversations` conversation.
    response: String,
    conversation: String,
    /// A workflow, and one of its runs waiting for a person's answer to `request`.
    workflow: &'static str,
    workflow_run: String,
    request: String,
}

async fn tenant_b(app: &Router, state: &AppState, b: &str) -> Theirs {
    let def = AgentDefinition::new("b-agent", "script", "m").with_instructions("Only tenant B's secret instructions.");
    let (status, doc) = call(app, Method::POST, "/api/agents", b, Some(serde_json::to_value(&def).unwrap())).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let (status, _) =
        call(app, Method::POST, "/api/agents/b-agent/run", b, Some(json!({"message": "hi", "sessionId": "b-session"})))
            .await;
    assert_eq!(status, StatusCode::OK);
    let (_, runs) = call(app, Method::GET, "/api/runs", b, None).await;
    let run = runs[0]["id"].as_str().unwrap().to_owned();
    let (status, doc) =
        call(app, Method::POST, "/v1/responses", b, Some(json!({"model": "b-agent", "input": "secret instructions"})))
            .await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    let response = doc["id"].as_str().unwrap().to_owned();
    let (status, doc) = call(app, Method::POST, "/v1/conversations", b, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    let conversation = doc["id"].as_str().unwrap().to_owned();
    let flow = json!({"name": "b-flow", "kind": "Sequential", "description": "secret instructions",
        "nodes": [{"name": "b-agent", "kind": "Agent"}, {"name": "human-input", "kind": "Function"}]});
    let (status, doc) = call(app, Method::POST, "/api/workflows", b, Some(flow)).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let reply = support::call(Method::POST, "/api/workflows/b-flow/run")
        .from(support::REMOTE)
        .bearer(b)
        .header("accept", "application/json")
        .json(Some(json!({"message": "hi"})))
        .send(app)
        .await;
    let (status, doc) = (reply.status, reply.json());
    assert_eq!((status, doc["status"].as_str()), (StatusCode::OK, Some("AwaitingInput")), "{doc}");
    let workflow_run = doc["runId"].as_str().unwrap().to_owned();
    let request = doc["requests"][0]["requestId"].as_str().unwrap().to_owned();
    let trigger = json!({"targetKind": "agent", "targetName": "b-agent",
        "signingSecretConfigurationName": "Tracon:TriggerSecrets:tenant-b:BSecretName"});
    let (status, doc) = call(app, Method::PUT, "/api/triggers/b-trigger", b, Some(trigger)).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let webhook = json!({"url": "https://hooks.example.com/b-hook-path", "events": ["run.completed"],
        "secretConfigurationName": "Tracon:WebhookSecrets:tenant-b:BHookSecretName", "description": "secret instructions"});
    let (status, doc) = call(app, Method::POST, "/api/webhooks", b, Some(webhook)).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let webhook = doc["id"].as_str().unwrap().to_owned();
    let schedule = json!({"name": "b-schedule", "agentName": "b-agent", "message": "secret instructions",
        "cron": "0 9 * * *", "timeZone": "Europe/Istanbul"});
    let (status, doc) = call(app, Method::POST, "/api/schedules", b, Some(schedule)).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let schedule = doc["id"].as_str().unwrap().to_owned();
    // A skill under the agent's name (skills are a catalog of their own), walked like it.
    let skill = json!({"name": "b-agent", "description": "secret instructions", "instructions": "secret instructions",
        "resources": [{"name": "b-resource.md", "content": "secret instructions"}]});
    let (status, doc) = call(app, Method::POST, "/api/skills", b, Some(skill)).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    // An MCP server under the agent's name, so `/api/mcp-servers/{name}` reaches B's own.
    let server = json!({"name": "b-agent", "endpoint": "https://b-mcp-endpoint.example.com/mcp",
        "authorizationConfigurationKey": "Tracon:McpSecrets:tenant-b:BMcpSecretName"});
    let (status, doc) = call(app, Method::POST, "/api/mcp-servers", b, Some(server)).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let tenant = TenantId::parse("tenant-b").unwrap();
    let now = Utc::now();
    let stores = &state.runtime.stores;
    let approval = tracon_core::approvals::ApprovalRecord {
        id: uuid::Uuid::now_v7(),
        tenant: tenant.clone(),
        run_id: tracon_core::names::RunId(uuid::Uuid::parse_str(&run).unwrap()),
        session_id: Some("b-session".into()),
        agent_name: "b-agent".into(),
        call_id: "call_0".into(),
        tool_name: "b-tool".into(),
        arguments: json!({"b": "secret instructions"}),
        effect: tracon_core::tools::effect::ToolEffect::Write,
        requested_by: None,
        created_at: now,
        expires_at: now + chrono::Duration::hours(1),
        status: tracon_core::approvals::ApprovalStatus::Pending,
        decided_at: None,
        decided_by: None,
        reason: None,
        resumed_run_id: None,
    };
    stores.approvals.create(std::slice::from_ref(&approval)).await.unwrap();
    let rule = tracon_core::approvals::ApprovalRule {
        id: uuid::Uuid::now_v7(),
        tenant: tenant.clone(),
        tool_name: "b-tool".into(),
        agent_name: None,
        arguments_hash: None,
        conditions: vec![],
        description: Some("secret instructions".into()),
        created_at: now,
        created_by: "token".into(),
    };
    stores.approvals.create_rule(&rule).await.unwrap();
    let record = tracon_core::tenants::TenantRecord {
        id: tenant,
        display_name: "secret instructions".into(),
        created_at: now,
        updated_at: now,
    };
    stores.tenants.create(&record).await.unwrap();
    let job = tracon_core::jobs::JobRecord::queued(
        uuid::Uuid::now_v7(),
        TenantId::parse("tenant-b").unwrap(),
        "b-handler",
        json!({"secret": "secret instructions"}),
        3,
        now,
    );
    stores.jobs.enqueue(&job).await.unwrap();
    Theirs {
        agent: "b-agent",
        run,
        session: "b-session",
        key_id: id_of(b).to_owned(),
        approval: approval.id.to_string(),
        rule: rule.id.to_string(),
        tenant: "tenant-b",
        job: job.id.to_string(),
        trigger: "b-trigger",
        webhook,
        schedule,
        response,
        conversation,
        workflow: "b-flow",
        workflow_run,
        request,
    }
}

/// Every route of the OpenAPI document (which a test keeps equal to the mounted routes).
fn routes() -> Vec<(Method, String)> {
    let doc: Value = serde_json::from_str(tracon_handlers::meta::openapi::DOCUMENT).unwrap();
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            out.push((method.to_uppercase().parse().unwrap(), path.clone()));
        }
    }
    out
}

/// A body each write route accepts: a definition named `agent` (the path's agent for a
/// replace, a new one for a create), a key with `scope`.
fn body_for(method: &Method, template: &str, agent: &str, scope: Scope) -> Option<Value> {
    let def = |name: &str| serde_json::to_value(AgentDefinition::new(name, "script", "m")).unwrap();
    match (method.as_str(), template) {
        ("POST", "/api/agents") | ("POST", "/api/agents/validate") => Some(def("a-own-agent")),
        ("PUT", "/api/agents/{name}") => Some(def(agent)),
        ("POST", "/api/skills") => Some(json!({"name": "a-own-skill", "description": "d", "instructions": "i"})),
        ("PUT", "/api/skills/{name}") => Some(json!({"name": agent, "description": "d", "instructions": "i"})),
        ("POST", "/api/agents/{name}/rollback") => Some(json!({"version": 1})),
        ("POST", "/api/agents/{name}/run") | ("POST", "/api/agents/{name}/estimate") => Some(json!({"message": "hi"})),
        ("POST", "/api/sessions/{id}/branch") => Some(json!({"sequence": 0})),
        ("POST", "/api/api-keys") => Some(json!({"name": "k", "scopes": [scope]})),
        ("POST", "/api/approvals/{id}/decision") => Some(json!({"approved": true})),
        ("POST", "/api/approvals/rules") => Some(json!({"toolName": "a-tool"})),
        ("POST", "/api/tenants") => Some(json!({"id": "a-new", "displayName": "A's"})),
        ("PUT", "/api/tenants/{id}") => Some(json!({"displayName": "renamed"})),
        ("PUT", "/api/tenants/{id}/providers/{provider}") => {
            Some(json!({"apiKeyConfigurationName": "Tracon:ProviderKeys:tenant-a:Own"}))
        }
        ("PUT", "/api/tenants/{id}/egress") => Some(json!({"allowedProviders": []})),
        ("PUT", "/api/triggers/{name}") => Some(json!({"targetKind": "agent", "targetName": "a-own-agent",
            "signingSecretConfigurationName": "Tracon:TriggerSecrets:tenant-a:Own"})),
        ("POST", "/api/triggers/{tenantId}/{name}") => Some(json!({"event": "unsigned"})),
        ("POST", "/api/schedules") | ("PUT", "/api/schedules/{id}") => Some(json!({
            "name": "a-own", "agentName": agent, "message": "m", "runAt": "2030-01-01T00:00:00Z"})),
        ("POST", "/v1/responses") => Some(json!({"model": agent, "input": "hi"})),
        ("POST", "/v1/conversations") => Some(json!({})),
        ("POST", "/v1/chat/completions") => {
            Some(json!({"model": agent, "messages": [{"role": "user", "content": "hi"}]}))
        }
        ("POST", "/api/workflows") | ("POST", "/api/workflows/validate") => {
            Some(json!({"name": "a-own-flow", "kind": "Sequential", "agentNames": ["a-own-agent"]}))
        }
        ("PUT", "/api/workflows/{name}") => {
            Some(json!({"name": agent, "kind": "Sequential", "agentNames": ["a-own-agent"]}))
        }
        ("POST", "/api/workflows/{name}/run") => Some(json!({"message": "hi"})),
        ("POST", "/api/workflows/runs/{id}/resume") => Some(json!({})),
        ("POST", "/api/workflows/runs/{id}/requests/{request}/respond") => Some(json!({"response": "yes"})),
        ("POST", "/api/webhooks") | ("PUT", "/api/webhooks/{id}") => Some(json!({
            "url": "https://hooks.example.com/a-own", "events": ["run.failed"],
            "secretConfigurationName": "Tracon:WebhookSecrets:tenant-a:Own"})),
        // An endpoint the guard refuses: no server of A's is ever asked over the network.
        ("POST", "/api/mcp-servers") => Some(json!({"name": "a-own-mcp", "endpoint": "https://127.0.0.1/mcp"})),
        ("PUT", "/api/mcp-servers/{name}") => Some(json!({"endpoint": "https://a-own.example.com/mcp"})),
        _ => None,
    }
}

#[tokio::test]
async fn every_route_with_tenant_a_key_finds_nothing_of_tenant_b() {
    let (app, state) = app();
    let all = Scope::ALL;
    let a = key_in(&state, "tenant-a", &all, None).await;
    let b = key_in(&state, "tenant-b", &all, None).await;
    let theirs = tenant_b(&app, &state, &b).await;
    // Tenant A's own agent, which A's trigger definitions below aim at.
    let own = serde_json::to_value(AgentDefinition::new("a-own-agent", "script", "m")).unwrap();
    assert_eq!(call(&app, Method::POST, "/api/agents", &a, Some(own)).await.0, StatusCode::CREATED);
    let markers = [
        theirs.agent,
        theirs.run.as_str(),
        theirs.session,
        theirs.key_id.as_str(),
        "secret instructions",
        theirs.approval.as_str(),
        theirs.rule.as_str(),
        theirs.tenant,
        "b-tool",
        theirs.job.as_str(),
        "b-handler",
        theirs.trigger,
        "BSecretName",
        theirs.webhook.as_str(),
        "b-hook-path",
        "BHookSecretName",
        theirs.schedule.as_str(),
        "b-schedule",
        "b-flow",
        theirs.workflow_run.as_str(),
        theirs.request.as_str(),
        "Europe/Istanbul",
        "b-resource.md",
        "b-mcp-endpoint",
        "BMcpSecretName",
    ];

    let mut walked = BTreeSet::new();
    for (method, template) in routes() {
        let fill = |run: &str, session: &str, key: &str, agent: &str, others: [&str; 12]| {
            let [
                approval,
                rule,
                tenant,
                job,
                trigger,
                webhook,
                schedule,
                response,
                conversation,
                flow,
                flow_run,
                request,
            ] = others;
            // A trigger route's `{name}` is a trigger, a workflow route's a workflow, and
            // `{tenantId}` the tenant a trigger is under.
            let agent = if template.starts_with("/api/triggers") {
                trigger
            } else if template.starts_with("/api/workflows") {
                flow
            } else {
                agent
            };
            // Providers are the host's, no tenant's: neither name is registered here.
            let template = template
                .replace("{tenantId}", tenant)
                .replace("{request}", request)
                .replace("{provider}", "no-such-provider");
            let id = if template.starts_with("/api/workflows/runs") {
                flow_run
            } else if template.starts_with("/api/runs") {
                run
            } else if template.starts_with("/api/sessions") {
                session
            } else if template.starts_with("/api/approvals/rules") {
                rule
            } else if template.starts_with("/api/approvals") {
                approval
            } else if template.starts_with("/api/tenants") {
                tenant
            } else if template.starts_with("/api/jobs") {
                job
            } else if template.starts_with("/api/webhooks") {
                webhook
            } else if template.starts_with("/api/schedules") {
                schedule
            } else if template.starts_with("/v1/responses") {
                response
            } else if template.starts_with("/v1/conversations") {
                conversation
            } else if template.starts_with("/v1/models") {
                agent
            } else {
                key
            };
            template
                .replace("{name}", agent)
                .replace("{id}", id)
                .replace("{a}", run)
                .replace("{b}", run)
                .replace("{version}", "1")
                .replace("{provider}", "openai")
        };
        let diff = template.contains("/diff/");
        let theirs_path = fill(
            &theirs.run,
            theirs.session,
            &theirs.key_id,
            theirs.agent,
            [
                &theirs.approval,
                &theirs.rule,
                theirs.tenant,
                &theirs.job,
                theirs.trigger,
                &theirs.webhook,
                &theirs.schedule,
                &theirs.response,
                &theirs.conversation,
                theirs.workflow,
                &theirs.workflow_run,
                &theirs.request,
            ],
        );
        let theirs_path = if diff {
            template.replace("{name}", theirs.agent).replace("{a}", "1").replace("{b}", "1")
        } else {
            theirs_path
        };
        let has_param = template.contains('{');
        let flows = template.starts_with("/api/workflows");
        let body = body_for(&method, &template, if flows { theirs.workflow } else { theirs.agent }, Scope::RunsRead);
        let asked = body.as_ref().map(Value::to_string).unwrap_or_default();
        let (status, doc) = call(&app, method.clone(), &theirs_path, &a, body).await;
        let text = doc.to_string();
        if has_param {
            // Theirs answers exactly as a resource that does not exist.
            let missing_run = tracon_core::ports::new_id(state.runtime.platform.clock.as_ref()).to_string();
            let missing_response = format!("resp_{}", missing_run.replace('-', ""));
            let missing = fill(
                &missing_run,
                "no-such-session",
                "000000000000",
                "no-such-agent",
                [
                    &missing_run,
                    &missing_run,
                    "no-such-tenant",
                    &missing_run,
                    "no-such-trigger",
                    &missing_run,
                    &missing_run,
                    &missing_response,
                    "conv_no_such_conversation",
                    "no-such-workflow",
                    &missing_run,
                    &missing_run,
                ],
            );
            let missing = if diff {
                template.replace("{name}", "no-such-agent").replace("{a}", "1").replace("{b}", "1")
            } else {
                missing
            };
            let body =
                body_for(&method, &template, if flows { "no-such-workflow" } else { "no-such-agent" }, Scope::RunsRead);
            let (m_status, m_doc) = call(&app, method.clone(), &missing, &a, body).await;
            // The OpenAI-compatible routes name the error in OpenAI's envelope.
            let error_type =
                |doc: &Value| doc["errorType"].as_str().or(doc["error"]["type"].as_str()).map(str::to_owned);
            assert_eq!(
                (status, error_type(&doc)),
                (m_status, error_type(&m_doc)),
                "{method} {template}: tenant B's resource answered {doc} where a missing one answers {m_doc}"
            );
            // Two routes answer alike but not 404: defining a trigger creates the caller's own
            // (under its own tenant), and the accept endpoint takes no key at all — unsigned,
            // it is the same 401 for B's trigger and for none.
            let expected = match (method.as_str(), template.as_str()) {
                ("PUT", "/api/triggers/{name}") => StatusCode::CREATED,
                ("POST", "/api/triggers/{tenantId}/{name}") => StatusCode::UNAUTHORIZED,
                _ => StatusCode::NOT_FOUND,
            };
            assert_eq!(status, expected, "{method} {template}: {doc}");
            if template == "/api/triggers/{name}" && method == Method::PUT {
                // Tenant A's own new triggers; out of the way of the routes walked next.
                let a_tenant = TenantId::parse("tenant-a").unwrap();
                for name in [theirs.trigger, "no-such-trigger"] {
                    let name = tracon_core::triggers::TriggerName::parse(name).unwrap();
                    assert!(state.runtime.stores.triggers.delete(&a_tenant, &name).await.unwrap());
                }
            }
        }
        // What the request itself named may be echoed ("No agent named 'b-agent'"); nothing
        // else of B's may appear.
        for marker in markers.iter().filter(|m| !theirs_path.contains(*m) && !asked.contains(*m)) {
            assert!(!text.contains(marker), "{method} {template} leaked '{marker}': {text}");
        }
        walked.insert(format!("{method} {template}"));
    }
    assert!(walked.len() >= 40, "every route was walked: {walked:?}");

    // Nothing of B's changed: the agent, the run, the session and the key are all there.
    for path in [
        "/api/agents/b-agent".to_owned(),
        format!("/api/runs/{}", theirs.run),
        "/api/sessions/b-session".to_owned(),
        format!("/api/api-keys/{}", theirs.key_id),
        format!("/api/approvals/{}", theirs.approval),
        "/api/tenants/tenant-b".to_owned(),
        format!("/v1/responses/{}", theirs.response),
        format!("/v1/conversations/{}", theirs.conversation),
    ] {
        let (status, doc) = call(&app, Method::GET, &path, &b, None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {doc}");
        assert_ne!(doc["status"], "Revoked");
    }
    let (_, agent) = call(&app, Method::GET, "/api/agents/b-agent", &b, None).await;
    assert_eq!(agent["version"], 1, "tenant A's PUT and rollback did not write a version: {agent}");
    let (_, approval) = call(&app, Method::GET, &format!("/api/approvals/{}", theirs.approval), &b, None).await;
    assert_eq!(approval["status"], "Pending", "tenant A's decision did not apply");
    let (_, rules) = call(&app, Method::GET, "/api/approvals/rules", &b, None).await;
    assert_eq!(rules.as_array().map(Vec::len), Some(1), "tenant A did not delete B's rule");
    let (_, job) = call(&app, Method::GET, &format!("/api/jobs/{}", theirs.job), &b, None).await;
    assert_eq!(job["status"], "Queued", "tenant A did not cancel B's job");
    let (_, record) = call(&app, Method::GET, "/api/tenants/tenant-b", &b, None).await;
    assert_eq!(record["displayName"], "secret instructions", "tenant A did not rename B");
    let (status, schedule) = call(&app, Method::GET, &format!("/api/schedules/{}", theirs.schedule), &b, None).await;
    assert_eq!(status, StatusCode::OK, "tenant A did not delete B's schedule: {schedule}");
    assert_eq!(
        (schedule["name"].as_str(), schedule["cron"].as_str()),
        (Some("b-schedule"), Some("0 9 * * *")),
        "tenant A did not replace B's schedule"
    );
    let (status, trigger) = call(&app, Method::GET, &format!("/api/triggers/{}", theirs.trigger), &b, None).await;
    assert_eq!(status, StatusCode::OK, "tenant A did not delete B's trigger: {trigger}");
    assert_eq!(
        (trigger["targetName"].as_str(), trigger["signingSecretConfigurationName"].as_str()),
        (Some("b-agent"), Some("Tracon:TriggerSecrets:tenant-b:BSecretName")),
        "tenant A did not replace B's trigger"
    );
    let (status, hook) = call(&app, Method::GET, &format!("/api/webhooks/{}", theirs.webhook), &b, None).await;
    assert_eq!(status, StatusCode::OK, "tenant A did not delete B's webhook: {hook}");
    assert_eq!(
        (hook["url"].as_str(), hook["events"][0].as_str()),
        (Some("https://hooks.example.com/b-hook-path"), Some("run.completed")),
        "tenant A did not replace B's webhook"
    );
    let (status, server) = call(&app, Method::GET, "/api/mcp-servers/b-agent", &b, None).await;
    assert_eq!(
        (status, server["endpoint"].as_str()),
        (StatusCode::OK, Some("https://b-mcp-endpoint.example.com/mcp")),
        "tenant A did not replace or delete B's MCP server: {server}"
    );
    let (_, history) = call(&app, Method::GET, &format!("/api/webhooks/{}/deliveries", theirs.webhook), &b, None).await;
    assert_eq!(history, json!([]), "tenant A's test call queued nothing for B's webhook");
}

#[tokio::test]
async fn each_scope_opens_exactly_the_routes_that_need_it() {
    let (app, state) = app();
    let routes = routes();
    for (method, template) in &routes {
        assert_ne!(requirement(method, template), Requirement::Unlisted, "{method} {template} has no scope");
    }
    for scope in Scope::ALL {
        let key = key_in(&state, "matrix", &[scope], None).await;
        for (method, template) in &routes {
            let path = template
                .replace("{name}", "some-agent")
                .replace("{tenantId}", "matrix")
                .replace("{provider}", "script")
                .replace("{id}", "000000000000")
                .replace("{a}", "1")
                .replace("{b}", "1");
            let body = body_for(method, template, "some-agent", scope);
            let (status, doc) = call(&app, method.clone(), &path, &key, body).await;
            // The OpenAI-compatible routes answer in OpenAI's envelope.
            let openai = template.starts_with("/v1/");
            let error_type = if openai { &doc["error"]["type"] } else { &doc["errorType"] };
            let refused = status == StatusCode::FORBIDDEN && error_type == "insufficient_scope";
            let needs = requirement(method, template);
            let allowed = match needs {
                Requirement::Open | Requirement::Authenticated => true,
                Requirement::Scope(s) => s == scope,
                Requirement::Unlisted => false,
            };
            assert_eq!(!refused, allowed, "{scope:?} on {method} {template} answered {status} {doc}");
            if refused && !openai {
                assert_eq!(doc["requiredScope"], json!(needs_scope(needs)));
            }
        }
    }
}

fn needs_scope(r: Requirement) -> &'static str {
    match r {
        Requirement::Scope(s) => s.as_str(),
        _ => "",
    }
}

/// A host policy: runs of `secret` are hidden, `forbidden` may not start, deleting a session
/// fails, listing sessions panics, listing runs is refused.
struct Policy;

#[async_trait::async_trait]
impl RunAuthorizer for Policy {
    async fn authorize(&self, _: &Caller, _: &TenantId, action: RunAction<'_>) -> Result<bool, String> {
        match action {
            RunAction::StartRun { agent, .. } => Ok(agent != "forbidden"),
            RunAction::ReadRun { run } | RunAction::CancelRun { run } => Ok(run.agent_name != "secret"),
            RunAction::ListRuns => Ok(false),
            RunAction::ListSessions => panic!("the policy's own bug"),
            RunAction::DeleteSession { .. } => Err("policy backend unreachable".into()),
            RunAction::ReadSession { .. } | RunAction::BranchSession { .. } => Ok(true),
        }
    }
}

async fn raw(app: &Router, method: Method, path: &str) -> (StatusCode, Vec<u8>) {
    let reply = support::call(method, path).bearer(TOKEN).send(app).await;
    (reply.status, reply.body)
}

#[tokio::test]
async fn the_run_policy_hides_denied_runs_as_missing_and_fails_closed() {
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hello from the model.").with_usage(3, 4));
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("secret", "script", "m").with_instructions("Hidden."))
        .add_agent(AgentDefinition::new("forbidden", "script", "m").with_instructions("Never runs."))
        .run_authorizer(Arc::new(Policy))
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN));
    let app = tracon_handlers::router(state.clone());

    let (status, _) =
        call(&app, Method::POST, "/api/agents/secret/run", TOKEN, Some(json!({"message": "hi", "sessionId": "s1"})))
            .await;
    assert_eq!(status, StatusCode::OK);
    let tenant = TenantId::default_tenant();
    let filter = tracon_core::runs::store::RunFilter::default();
    let secret_run = state.runtime.stores.runs.list_runs(&tenant, &filter, 0, 10).await.unwrap()[0].id.to_string();
    let missing_run = tracon_core::ports::new_id(state.runtime.platform.clock.as_ref()).to_string();

    // Every run resource of a denied run answers byte for byte what a missing run answers.
    for (method, template) in [
        (Method::GET, "/api/runs/{id}"),
        (Method::GET, "/api/runs/{id}/events"),
        (Method::GET, "/api/runs/{id}/tools"),
        (Method::GET, "/api/runs/{id}/input"),
        (Method::GET, "/api/runs/{id}/compare/{id}"),
        (Method::POST, "/api/runs/{id}/cancel"),
    ] {
        let denied = raw(&app, method.clone(), &template.replace("{id}", &secret_run)).await;
        let missing = raw(&app, method.clone(), &template.replace("{id}", &missing_run)).await;
        assert_eq!(denied.0, StatusCode::NOT_FOUND, "{template}");
        assert_eq!(denied, missing, "{template}");
    }

    // Lists the policy refuses are 403; a policy that fails or panics denies.
    let (status, doc) = call(&app, Method::GET, "/api/runs", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("access_denied")));
    let (status, doc) = call(&app, Method::GET, "/api/stats", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("access_denied")));
    let (status, doc) = call(&app, Method::GET, "/api/sessions", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("access_denied")));
    let (status, doc) = call(&app, Method::DELETE, "/api/sessions/s1", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("session_not_found")));
    assert!(state.runtime.stores.sessions.get(&tenant, "s1").await.unwrap().is_some(), "nothing was deleted");
    assert_eq!(call(&app, Method::GET, "/api/sessions/s1", TOKEN, None).await.0, StatusCode::OK);

    // A start the policy refuses is 403 and records nothing.
    let (status, doc) =
        call(&app, Method::POST, "/api/agents/forbidden/run", TOKEN, Some(json!({"message": "hi"}))).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("run_denied")));
    assert_eq!(state.runtime.stores.runs.list_runs(&tenant, &filter, 0, 10).await.unwrap().len(), 1);
    // OpenAI clients' model list names only the agents the caller may run.
    let (status, models) = call(&app, Method::GET, "/v1/models", TOKEN, None).await;
    assert_eq!(status, StatusCode::OK, "{models}");
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["secret"], "{models}");
}

#[tokio::test]
async fn the_rate_limit_is_off_by_default_and_partitions_by_key_when_on() {
    use tracon_handlers::access::ratelimit::{Partition, RateLimitSettings};
    let (open_app, open_state) = app();
    let key = key_in(&open_state, "default", &[Scope::RunsRead], None).await;
    for _ in 0..20 {
        assert_eq!(
            call(&open_app, Method::GET, "/api/runs", &key, None).await.0,
            StatusCode::OK,
            "no limit by default"
        );
    }

    let runtime = RuntimeBuilder::new(tokio_rt::platform()).build().unwrap();
    let limit = RateLimitSettings { permits_per_minute: 3, partition: Partition::Key };
    let http = HttpSettings { rate_limit: Some(limit), ..HttpSettings::with_token(TOKEN) };
    let state = AppState::new(Arc::new(runtime), http);
    let app = tracon_handlers::router(state.clone());
    let (a, b) = (
        key_in(&state, "default", &[Scope::RunsRead], None).await,
        key_in(&state, "default", &[Scope::RunsRead], None).await,
    );
    for _ in 0..3 {
        assert_eq!(call(&app, Method::GET, "/api/runs", &a, None).await.0, StatusCode::OK);
    }
    let res = support::call(Method::GET, "/api/runs").from(support::REMOTE).bearer(&a).send(&app).await;
    assert_eq!(res.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = res.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "{retry}");
    let doc = res.json();
    assert_eq!((doc["errorType"].as_str(), doc["retryAfterSeconds"].as_u64()), (Some("rate_limited"), Some(retry)));
    assert_eq!(call(&app, Method::GET, "/api/runs", &b, None).await.0, StatusCode::OK, "another key, another bucket");
    assert_eq!(call(&app, Method::GET, "/api/meta", &a, None).await.0, StatusCode::OK, "metadata is never limited");
}

#[test]
fn the_rate_limit_partition_must_be_one_it_knows() {
    use tracon_core::config::Config;
    use tracon_handlers::access::ratelimit::{Partition, RateLimitSettings};
    let config = |pairs: &[(&str, &str)]| Config::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    assert_eq!(RateLimitSettings::from_config(&config(&[])).unwrap(), None);
    let on = config(&[("Tracon__RateLimit__PermitsPerMinute", "600"), ("Tracon__RateLimit__PartitionBy", "tenant")]);
    assert_eq!(
        RateLimitSettings::from_config(&on).unwrap(),
        Some(RateLimitSettings { permits_per_minute: 600, partition: Partition::Tenant })
    );
    let bad = config(&[("Tracon__RateLimit__PermitsPerMinute", "10"), ("Tracon__RateLimit__PartitionBy", "user")]);
    assert!(RateLimitSettings::from_config(&bad).unwrap_err().to_string().contains("Tenant, Key or Address"));
}

#[tokio::test]
async fn a_used_up_quota_refuses_the_run_with_429_before_any_model_call() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tracon_core::quota::{Metric, Period, QuotaRule, Quotas};
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let script = ScriptedProvider::from_fn("script", move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        ScriptedTurn::text("Hello.").with_usage(3, 4)
    });
    let rule = |name: &str, agent: Option<&str>, limit: f64| QuotaRule {
        name: name.into(),
        metric: Metric::Runs,
        limit,
        period: Period::Day,
        agent: agent.map(str::to_owned),
        tenant: None,
        currency: "USD".into(),
    };
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("metered", "script", "m").with_instructions("Hi."))
        .add_agent(AgentDefinition::new("free", "script", "m").with_instructions("Hi."))
        .quotas(Quotas {
            rules: vec![rule("metered-daily", Some("metered"), 2.0), rule("tenant-daily", None, 5.0)],
            ..Quotas::default()
        })
        .build()
        .unwrap();
    let app = tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN)));
    let run = async |agent: &str| {
        let path = format!("/api/agents/{agent}/run");
        call(&app, Method::POST, &path, TOKEN, Some(json!({"message": "hi"}))).await
    };
    for _ in 0..2 {
        assert_eq!(run("metered").await.0, StatusCode::OK);
    }
    let (status, doc) = run("metered").await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("quota_exceeded")), "{doc}");
    assert_eq!(
        (doc["quota"].as_str(), doc["limit"].as_f64(), doc["used"].as_f64()),
        (Some("metered-daily"), Some(2.0), Some(2.0))
    );
    assert!(doc["resetsAt"].as_str().unwrap().ends_with("T00:00:00Z"), "{doc}");
    assert!(doc["retryAfterSeconds"].as_u64().unwrap() >= 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the refused run never reached the model");
    // Another agent is under the tenant's rule only, until that one is used up too.
    for _ in 0..3 {
        assert_eq!(run("free").await.0, StatusCode::OK);
    }
    let (status, doc) = run("free").await;
    assert_eq!((status, doc["quota"].as_str()), (StatusCode::TOO_MANY_REQUESTS, Some("tenant-daily")));
}

#[tokio::test]
async fn each_threshold_is_announced_once_per_period_and_stops_nothing() {
    use std::sync::Mutex;
    use tracon_core::quota::{Metric, Period, QuotaNoticeSink, QuotaRule, Quotas, ThresholdNotice};
    #[derive(Default)]
    struct Collect(Mutex<Vec<ThresholdNotice>>);
    #[async_trait::async_trait]
    impl QuotaNoticeSink for Collect {
        async fn notify(&self, notice: &ThresholdNotice) {
            self.0.lock().unwrap().push(notice.clone());
        }
    }
    let sink = Arc::new(Collect::default());
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hello.").with_usage(3, 4));
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("metered", "script", "m").with_instructions("Hi."))
        .add_quota_notice_sink(sink.clone())
        .quotas(Quotas {
            rules: vec![QuotaRule {
                name: "tokens-daily".into(),
                metric: Metric::Tokens,
                limit: 20.0,
                period: Period::Day,
                agent: None,
                tenant: None,
                currency: "USD".into(),
            }],
            threshold_percents: vec![50, 100],
            publish_to_run_stream: true,
        })
        .build()
        .unwrap();
    let app = tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN)));
    // 7 tokens a run: 7, 14 (≥ 10: 50 %), 21 (≥ 20: 100 %), then the quota refuses.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, _) =
            call(&app, Method::POST, "/api/agents/metered/run", TOKEN, Some(json!({"message": "hi"}))).await;
        assert_eq!(status, StatusCode::OK);
        let (_, runs) = call(&app, Method::GET, "/api/runs?take=1", TOKEN, None).await;
        ids.push(runs[0]["id"].as_str().unwrap().to_owned());
    }
    let notices = sink.0.lock().unwrap().clone();
    assert_eq!(notices.iter().map(|n| n.threshold).collect::<Vec<_>>(), [50, 100], "{notices:?}");
    assert_eq!(notices[0].run_id.to_string(), ids[1]);
    assert_eq!((notices[0].consumption, notices[1].consumption, notices[1].limit), (14.0, 21.0, 20.0));
    assert_ne!(notices[0].notice_id, notices[1].notice_id);
    // The notice is in the triggering run's own log, before its end; the other runs have none.
    let log = |id: &str| {
        let path = format!("/api/runs/{id}/events");
        let app = app.clone();
        async move { support::call(Method::GET, &path).from(support::REMOTE).bearer(TOKEN).send(&app).await.text() }
    };
    let second = log(&ids[1]).await;
    let notice_at = second.find("tracon.quota.threshold").expect("the notice frame");
    assert!(notice_at < second.find("run.completed").unwrap(), "{second}");
    assert!(second.contains(&notices[0].notice_id));
    assert!(!log(&ids[0]).await.contains("tracon.quota.threshold"));
    let (status, _) = call(&app, Method::POST, "/api/agents/metered/run", TOKEN, Some(json!({"message": "hi"}))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(sink.0.lock().unwrap().len(), 2, "a refused run announces nothing again");
}

async fn with_tenant(
    app: &Router,
    method: Method,
    path: &str,
    bearer: &str,
    tenant: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let call = support::call(method, path).from(support::REMOTE).bearer(bearer).header_opt("x-tenant-id", tenant);
    let reply = call.json(body).send(app).await;
    (reply.status, reply.json_or_null())
}

#[tokio::test]
async fn a_key_outranks_the_tenant_header_which_is_read_only_when_switched_on() {
    use tracon_core::config::Config;
    use tracon_handlers::access::tenancy::TenancySettings;
    let def =
        |name: &str| serde_json::to_value(AgentDefinition::new(name, "script", "m").with_instructions("Hi.")).unwrap();

    // Off (the default): the header is not read; a key's tenant stands and a disagreeing
    // header is refused.
    let (app, state) = app();
    let (status, _) = with_tenant(&app, Method::POST, "/api/agents", TOKEN, Some("acme"), Some(def("plain"))).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        with_tenant(&app, Method::GET, "/api/agents/plain", TOKEN, None, None).await.0,
        StatusCode::OK,
        "default tenant"
    );
    let key = key_in(&state, "acme", &[Scope::AgentsRead], None).await;
    let (status, doc) = with_tenant(&app, Method::GET, "/api/agents", &key, Some("globex"), None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("tenant_mismatch")));
    assert_eq!(with_tenant(&app, Method::GET, "/api/agents", &key, Some("acme"), None).await.0, StatusCode::OK);

    // On, with the header path and an allowlist.
    let config = Config::from_pairs([
        ("Tracon__Tenancy__Enabled", "true"),
        ("Tracon__Tenancy__AllowHeader", "true"),
        ("Tracon__Tenancy__AllowedTenants__0", "acme"),
        ("Tracon__Tenancy__AllowedTenants__1", "globex"),
    ]);
    let tenancy = TenancySettings::from_config(&config).unwrap();
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hi."));
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings { tenancy, ..HttpSettings::with_token(TOKEN) });
    let app = tracon_handlers::router(state.clone());
    assert_eq!(
        with_tenant(&app, Method::POST, "/api/agents", TOKEN, Some("acme"), Some(def("mine"))).await.0,
        StatusCode::CREATED
    );
    assert_eq!(with_tenant(&app, Method::GET, "/api/agents/mine", TOKEN, Some("acme"), None).await.0, StatusCode::OK);
    assert_eq!(
        with_tenant(&app, Method::GET, "/api/agents/mine", TOKEN, Some("globex"), None).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        with_tenant(&app, Method::GET, "/api/agents/mine", TOKEN, None, None).await.0,
        StatusCode::NOT_FOUND,
        "no header: default"
    );
    let (status, doc) = with_tenant(&app, Method::GET, "/api/agents", TOKEN, Some("not a tenant!"), None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_tenant")));
    let (status, doc) = with_tenant(&app, Method::GET, "/api/agents", TOKEN, Some("initech"), None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("tenant_not_allowed")));
    let key = key_in(&state, "globex", &[Scope::AgentsRead], None).await;
    let (status, doc) = with_tenant(&app, Method::GET, "/api/agents/mine", &key, Some("acme"), None).await;
    assert_eq!(
        (status, doc["errorType"].as_str()),
        (StatusCode::FORBIDDEN, Some("tenant_mismatch")),
        "a key outranks the header"
    );

    let header_without_tenancy = Config::from_pairs([("Tracon__Tenancy__AllowHeader", "true")]);
    assert!(TenancySettings::from_config(&header_without_tenancy).is_err());
}

async fn as_user(
    app: &Router,
    method: Method,
    path: &str,
    key: &str,
    user: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Vec<u8>) {
    let call = support::call(method, path).from(support::REMOTE).bearer(key).header_opt("x-test-user", user);
    let reply = call.json(body).send(app).await;
    (reply.status, reply.body)
}

fn ids(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).unwrap();
    v.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect()
}

fn error_type(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body).unwrap()["errorType"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn with_session_ownership_a_user_reaches_only_their_own_sessions() {
    let ownership = SessionOwnership { enabled: true, refuse_unowned: false, require_authenticated_owner: true };
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hi."));
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("chat", "script", "m").with_instructions("Hi."))
        .attribution(Arc::new(support::TestUsers))
        .settings(RuntimeSettings { session_ownership: ownership, ..RuntimeSettings::default() })
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN));
    let app = tracon_handlers::router(state.clone());
    let key = key_in(&state, "default", &[Scope::RunsWrite, Scope::SessionsRead, Scope::SessionsWrite], None).await;
    let run = |session: &str| json!({"message": "hi", "sessionId": session});

    // Opening sessions: u1's and u2's; without an identity none is opened, sessionless runs go on.
    assert_eq!(
        as_user(&app, Method::POST, "/api/agents/chat/run", &key, Some("u1"), Some(run("s1"))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        as_user(&app, Method::POST, "/api/agents/chat/run", &key, Some("u2"), Some(run("s2"))).await.0,
        StatusCode::OK
    );
    let (status, body) = as_user(&app, Method::POST, "/api/agents/chat/run", &key, None, Some(run("s3"))).await;
    assert_eq!((status, error_type(&body).as_str()), (StatusCode::FORBIDDEN, "session_owner_required"));
    let sessionless = json!({"message": "hi"});
    assert_eq!(
        as_user(&app, Method::POST, "/api/agents/chat/run", &key, None, Some(sessionless)).await.0,
        StatusCode::OK
    );

    // The list narrows to the caller; the manager (the static token) sees all.
    assert_eq!(ids(&as_user(&app, Method::GET, "/api/sessions", &key, Some("u1"), None).await.1), ["s1"]);
    assert_eq!(ids(&as_user(&app, Method::GET, "/api/sessions?take=1", &key, Some("u2"), None).await.1), ["s2"]);
    assert!(ids(&as_user(&app, Method::GET, "/api/sessions", &key, None, None).await.1).is_empty());
    assert_eq!(ids(&as_user(&app, Method::GET, "/api/sessions", TOKEN, None, None).await.1).len(), 2);

    // Another user's session answers byte for byte as a missing one; running in it is 403.
    for (method, tail, body) in
        [(Method::GET, "", None), (Method::POST, "/branch", Some(json!({"sequence": 0}))), (Method::DELETE, "", None)]
    {
        let theirs =
            as_user(&app, method.clone(), &format!("/api/sessions/s1{tail}"), &key, Some("u2"), body.clone()).await;
        let missing = as_user(&app, method.clone(), &format!("/api/sessions/nope{tail}"), &key, Some("u2"), body).await;
        assert_eq!(theirs.0, StatusCode::NOT_FOUND, "{method} {tail}");
        assert_eq!(theirs, missing, "{method} {tail}");
    }
    let (status, body) = as_user(&app, Method::POST, "/api/agents/chat/run", &key, Some("u2"), Some(run("s1"))).await;
    assert_eq!((status, error_type(&body).as_str()), (StatusCode::FORBIDDEN, "session_forbidden"));
    let (status, body) =
        as_user(&app, Method::POST, "/api/agents/chat/run", TOKEN, Some("admin"), Some(run("s1"))).await;
    assert_eq!(
        (status, error_type(&body).as_str()),
        (StatusCode::FORBIDDEN, "session_forbidden"),
        "managing is reading, never appending"
    );
    assert_eq!(
        as_user(&app, Method::GET, "/api/sessions/s1", TOKEN, None, None).await.0,
        StatusCode::OK,
        "the manager reads"
    );
    assert_eq!(as_user(&app, Method::GET, "/api/sessions/s1", &key, Some("u1"), None).await.0, StatusCode::OK);
    assert_eq!(
        as_user(&app, Method::POST, "/api/agents/chat/run", &key, Some("u1"), Some(run("s1"))).await.0,
        StatusCode::OK
    );
    // A branch of your own session is yours.
    let (status, body) = as_user(
        &app,
        Method::POST,
        "/api/sessions/s1/branch",
        &key,
        Some("u1"),
        Some(json!({"sequence": 0, "sessionId": "s1b"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{}", String::from_utf8_lossy(&body));
    assert_eq!(ids(&as_user(&app, Method::GET, "/api/sessions", &key, Some("u1"), None).await.1).len(), 2);
}

#[tokio::test]
async fn refusing_unowned_sessions_leaves_the_manager_reading_and_new_sessions_opening() {
    // One set of stores, seen first without ownership, then with it strict.
    let stores = tracon_core::stores::Stores::in_memory();
    let runtime_with = |session_ownership: SessionOwnership| {
        let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hi."));
        Arc::new(
            RuntimeBuilder::new(tokio_rt::platform())
                .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
                .add_agent(AgentDefinition::new("chat", "script", "m").with_instructions("Hi."))
                .attribution(Arc::new(support::TestUsers))
                .stores(stores.clone())
                .settings(RuntimeSettings { session_ownership, ..RuntimeSettings::default() })
                .build()
                .unwrap(),
        )
    };
    // Before ownership: a session opened without a user.
    let before = tracon_handlers::router(AppState::new(
        runtime_with(SessionOwnership::default()),
        HttpSettings::with_token(TOKEN),
    ));
    let run = |session: &str| json!({"message": "hi", "sessionId": session});
    assert_eq!(
        as_user(&before, Method::POST, "/api/agents/chat/run", TOKEN, None, Some(run("old"))).await.0,
        StatusCode::OK
    );

    let strict = SessionOwnership { enabled: true, refuse_unowned: true, require_authenticated_owner: true };
    let state = AppState::new(runtime_with(strict), HttpSettings::with_token(TOKEN));
    let app = tracon_handlers::router(state.clone());
    let key = key_in(&state, "default", &[Scope::RunsWrite, Scope::SessionsRead], None).await;
    let unowned = as_user(&app, Method::GET, "/api/sessions/old", &key, Some("u1"), None).await;
    assert_eq!(unowned, as_user(&app, Method::GET, "/api/sessions/none", &key, Some("u1"), None).await);
    assert_eq!(unowned.0, StatusCode::NOT_FOUND);
    assert_eq!(as_user(&app, Method::GET, "/api/sessions/old", TOKEN, None, None).await.0, StatusCode::OK);
    let (status, body) = as_user(&app, Method::POST, "/api/agents/chat/run", &key, Some("u1"), Some(run("old"))).await;
    assert_eq!((status, error_type(&body).as_str()), (StatusCode::FORBIDDEN, "session_owner_required"));
    assert_eq!(
        as_user(&app, Method::POST, "/api/agents/chat/run", &key, Some("u1"), Some(run("new"))).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_operator_manages_tenants_and_a_tenant_sees_only_its_own_record() {
    let (app, state) = app();
    let (status, created) =
        call(&app, Method::POST, "/api/tenants", TOKEN, Some(json!({"id": "acme", "displayName": "Acme"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["displayName"], "Acme");
    let (status, _) =
        call(&app, Method::POST, "/api/tenants", TOKEN, Some(json!({"id": "acme", "displayName": "Again"}))).await;
    assert_eq!(status, StatusCode::CONFLICT);
    for bad in [json!({"id": "Not Valid!", "displayName": "x"}), json!({"id": "ok", "displayName": " "})] {
        assert_eq!(call(&app, Method::POST, "/api/tenants", TOKEN, Some(bad)).await.0, StatusCode::BAD_REQUEST);
    }
    call(&app, Method::POST, "/api/tenants", TOKEN, Some(json!({"id": "globex", "displayName": "Globex"}))).await;
    let (_, all) = call(&app, Method::GET, "/api/tenants", TOKEN, None).await;
    assert_eq!(
        all.as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect::<Vec<_>>(),
        ["acme", "globex"]
    );

    // A PlatformAdmin key of acme: its own record only; it cannot register or remove tenants.
    let acme = key_in(&state, "acme", &[Scope::PlatformAdmin], None).await;
    let (_, mine) = call(&app, Method::GET, "/api/tenants", &acme, None).await;
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(mine[0]["id"], "acme");
    assert_eq!(call(&app, Method::GET, "/api/tenants/globex", &acme, None).await.0, StatusCode::NOT_FOUND);
    let (status, renamed) =
        call(&app, Method::PUT, "/api/tenants/acme", &acme, Some(json!({"displayName": "Acme Corp"}))).await;
    assert_eq!((status, renamed["displayName"].as_str()), (StatusCode::OK, Some("Acme Corp")));
    let (status, _) =
        call(&app, Method::POST, "/api/tenants", &acme, Some(json!({"id": "x", "displayName": "X"}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(call(&app, Method::DELETE, "/api/tenants/acme", &acme, None).await.0, StatusCode::FORBIDDEN);

    // The operator removes a record; every change is in the trail.
    assert_eq!(call(&app, Method::DELETE, "/api/tenants/globex", TOKEN, None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(call(&app, Method::DELETE, "/api/tenants/globex", TOKEN, None).await.0, StatusCode::NOT_FOUND);
    let (_, trail) = call(&app, Method::GET, "/api/audit?entityType=tenant", TOKEN, None).await;
    let actions: Vec<&str> = trail.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["tenant.delete", "tenant.create", "tenant.create"], "{trail}");
}

#[tokio::test]
async fn a_tools_required_permission_is_checked_against_the_caller() {
    use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
    let cancel = ToolRegistration::new(
        "cancel_order",
        "Cancels an order.",
        json!({"type": "object"}),
        tool_fn(|_, _| async { Ok(ToolOutput::from("cancelled")) }),
    )
    .map(|r| r.required_permission("orders.cancel"));
    let script = ScriptedProvider::from_fn("script", |req| {
        match req.messages.iter().rev().find_map(|m| match m {
            tracon_core::model::Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        }) {
            Some(result) => ScriptedTurn::text(&format!("Tool said: {result}")),
            None => ScriptedTurn::tool_call("cancel_order", json!({})),
        }
    });
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_tool(cancel)
        .add_agent(AgentDefinition::new("orders", "script", "m").with_instructions("Hi.").with_tools(&["cancel_order"]))
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN));
    let app = tracon_handlers::router(state.clone());
    let key = key_in(&state, "default", &[Scope::RunsWrite, Scope::RunsRead], None).await;
    let tool_status = async |bearer: &str| {
        let (status, _) =
            call(&app, Method::POST, "/api/agents/orders/run", bearer, Some(json!({"message": "go"}))).await;
        assert_eq!(status, StatusCode::OK);
        let (_, runs) = call(&app, Method::GET, "/api/runs?take=1", TOKEN, None).await;
        let id = runs[0]["id"].as_str().unwrap().to_owned();
        let (_, tools) = call(&app, Method::GET, &format!("/api/runs/{id}/tools"), TOKEN, None).await;
        (tools[0]["status"].as_str().unwrap().to_owned(), tools[0]["result"].as_str().unwrap_or_default().to_owned())
    };
    // A key holds no permissions: the model gets the denial as the result and the run goes on.
    let (status, result) = tool_status(&key).await;
    assert_eq!(status, "Denied");
    assert!(result.contains("orders.cancel"), "{result}");
    // The static token is not narrowed.
    assert_eq!(tool_status(TOKEN).await.0, "Succeeded");
}

#[tokio::test]
async fn jobs_are_listed_read_and_cancelled_within_the_tenant() {
    use tracon_core::jobs::JobRecord;
    let (app, state) = app();
    let now = Utc::now();
    let jobs = &state.runtime.stores.jobs;
    let tenant = TenantId::default_tenant();
    let first =
        JobRecord::queued(uuid::Uuid::now_v7(), tenant.clone(), "run.execute", json!({"message": "private"}), 3, now);
    let second = JobRecord::queued(
        uuid::Uuid::now_v7(),
        tenant,
        "webhook.deliver",
        json!({}),
        3,
        now + chrono::Duration::seconds(1),
    );
    jobs.enqueue(&first).await.unwrap();
    jobs.enqueue(&second).await.unwrap();

    let (status, listed) = call(&app, Method::GET, "/api/jobs", TOKEN, None).await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [second.id.to_string(), first.id.to_string()], "newest first");
    assert!(!listed.to_string().contains("private"), "payloads are not shown");
    let (_, filtered) = call(&app, Method::GET, "/api/jobs?handlerKey=run.execute&status=Queued", TOKEN, None).await;
    assert_eq!(filtered.as_array().unwrap().len(), 1);
    let (status, doc) = call(&app, Method::GET, "/api/jobs?status=Sleeping", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("validation_failed")));

    let path = format!("/api/jobs/{}/cancel", first.id);
    let (status, cancelled) = call(&app, Method::POST, &path, TOKEN, None).await;
    assert_eq!((status, cancelled["status"].as_str()), (StatusCode::ACCEPTED, Some("Canceled")));
    let (status, doc) = call(&app, Method::POST, &path, TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::CONFLICT, Some("job_already_ended")));
    let (status, doc) = call(&app, Method::GET, "/api/jobs/not-a-uuid", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("job_not_found")));
}
