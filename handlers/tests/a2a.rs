//! The A2A server through the router: the public card and the extended one, `SendMessage`
//! (blocking and background), the stream's frames, `GetTask`, `CancelTask`, push
//! notification configurations delivered signed to a local receiver, tenancy, the
//! `ExternalInvoke` key, the approval boundary, the budget, and JSON-RPC errors.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use support::{Manual, REMOTE, StubRequest, approval_tool};
use tracon_core::audit::AuditFilter;
use tracon_core::config::Config;
use tracon_core::definition::AgentDefinition;
use tracon_core::jobs::{JobRunner, JobSettings};
use tracon_core::keys::Scope;
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::{RunId, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::{RunQueue, Runtime, RuntimeBuilder};
use tracon_core::webhooks::WebhookSettings;
use tracon_handlers::a2a::A2aSettings;
use tracon_handlers::{AppState, HttpSettings};

const TOKEN: &str = "static-token-0123456789";
const PUSH_SECRET: &str = "a2a-push-secret-never-shown";

struct Harness {
    app: Router,
    runtime: Arc<Runtime>,
    runner: JobRunner,
    /// `ExternalInvoke` keys of the default tenant and of `acme`, and a key without it.
    key: String,
    acme: String,
    unscoped: String,
}

async fn harness() -> Harness {
    let refund = approval_tool("refund", "Refunds an order.", json!({"type": "object"}), "refunded");
    let lookup = tracon_core::tools::ToolRegistration::new(
        "lookup",
        "Looks an order up.",
        json!({"type": "object"}),
        tracon_core::tools::tool_fn(|_, _| async { Ok(tracon_core::tools::ToolOutput::from("order 7: shipped")) }),
    );
    let script = ScriptedProvider::from_fn("script", |req| match req.last_user_text() {
        Some("look it up") if !matches!(req.messages.last(), Some(tracon_core::model::Message::Tool { .. })) => {
            ScriptedTurn::tool_call("lookup", json!({})).with_usage(50, 50)
        }
        Some("fail") => ScriptedTurn::failing(tracon_core::model::ProviderError::new(
            tracon_core::model::ProviderErrorKind::ServerError,
            "HttpRequestException",
            "upstream said no",
        )),
        Some(text) => ScriptedTurn::text(&format!("Answer to: {text}")).with_usage(5, 3),
        None => ScriptedTurn::text("?"),
    });
    let webhooks = WebhookSettings::from_config(&Config::from_pairs([
        ("Tracon__Egress__AllowHttp", "true"),
        ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8"),
        ("Tracon__WebhookSecrets__A2A", PUSH_SECRET),
    ]))
    .unwrap();
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_tool(refund)
            .add_tool(lookup)
            .add_agent(AgentDefinition {
                description: Some("Answers customers' questions.".into()),
                ..AgentDefinition::new("support", "script", "m")
            })
            .add_agent(AgentDefinition::new("gated", "script", "m").with_tools(&["refund"]))
            .add_agent(AgentDefinition::new("private", "script", "m"))
            .add_agent(AgentDefinition::new("clerk", "script", "m").with_tools(&["lookup"]))
            .webhooks(webhooks)
            .build()
            .unwrap(),
    );
    let runner = tracon_core::background::job_runner(&runtime, JobSettings::default(), "test");
    runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 3 });
    let mut http = HttpSettings::with_token(TOKEN);
    http.a2a =
        A2aSettings { push_secret_name: Some("A2A".into()), ..A2aSettings::exposing(&["support", "gated", "clerk"]) };
    http.a2a.exposure.budget.max_total_tokens = Some(60);
    let key = support::api_key(&runtime, "default", &[Scope::ExternalInvoke], None).await;
    let acme = support::api_key(&runtime, "acme", &[Scope::ExternalInvoke], None).await;
    let unscoped = support::api_key(&runtime, "default", &[Scope::RunsWrite], None).await;
    let app = tracon_handlers::router(AppState::new(runtime.clone(), http));
    Harness { app, runtime, runner, key, acme, unscoped }
}

/// A JSON-RPC call from a remote caller with `A2A-Version: 1.0`.
async fn rpc(h: &Harness, agent: &str, key: &str, method: &str, params: Value) -> (StatusCode, Value) {
    let body = json!({ "jsonrpc": "2.0", "id": "r1", "method": method, "params": params });
    let reply = support::call(Method::POST, &format!("/a2a/{agent}"))
        .from(REMOTE)
        .bearer(key)
        .header("A2A-Version", "1.0")
        .json(Some(body))
        .send(&h.app)
        .await;
    (reply.status, reply.json())
}

fn message(text: &str) -> Value {
    json!({ "message": { "messageId": "m-1", "role": "ROLE_USER", "parts": [{ "text": text }] } })
}

async fn send(h: &Harness, text: &str) -> Value {
    let (status, body) = rpc(h, "support", &h.key, "SendMessage", message(text)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("error").is_none(), "{body}");
    body["result"]["task"].clone()
}

fn error_code(body: &Value) -> i64 {
    body["error"]["code"].as_i64().unwrap_or_else(|| panic!("no error in {body}"))
}

// ---- the card -----------------------------------------------------------------------------------

#[tokio::test]
async fn the_public_card_needs_no_credential_and_names_nothing_a_tenant_wrote() {
    let h = harness().await;
    let reply = support::call(Method::GET, "/a2a/support/.well-known/agent-card.json")
        .from(REMOTE)
        .header("Host", "agents.example.com")
        .header("X-Forwarded-Proto", "https")
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let card = reply.json();
    assert_eq!(card["name"], "support");
    assert_eq!(card["supportedInterfaces"][0]["url"], "https://agents.example.com/a2a/support");
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"], json!({"streaming": true, "pushNotifications": true, "extendedAgentCard": true}));
    assert_eq!(card["securitySchemes"]["apiKey"]["httpAuthSecurityScheme"]["scheme"], "Bearer");
    assert!(!card.to_string().contains("Answers customers"), "the definition's description is the tenant's: {card}");
    assert!(reply.header("cache-control").is_some_and(|c| c.contains("max-age")));

    let hidden = support::call(Method::GET, "/a2a/private/.well-known/agent-card.json").from(REMOTE).send(&h.app).await;
    assert_eq!(hidden.status, StatusCode::NOT_FOUND);
    assert_eq!(hidden.json()["errorType"], "agent_not_exposed");
}

#[tokio::test]
async fn the_extended_card_is_the_tenants_definition() {
    let h = harness().await;
    let (_, body) = rpc(&h, "support", &h.key, "GetExtendedAgentCard", json!({})).await;
    assert_eq!(body["result"]["description"], "Answers customers' questions.", "{body}");
    assert_eq!(body["result"]["skills"][0]["id"], "support");
}

// ---- sending --------------------------------------------------------------------------------------

#[tokio::test]
async fn send_message_runs_the_agent_and_answers_a_completed_task_readable_as_a_run() {
    let h = harness().await;
    let task = send(&h, "where is my order").await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "Answer to: where is my order");
    let context = task["contextId"].as_str().unwrap();
    assert!(!context.is_empty());

    // The task id is the run id: the run is an ordinary run, labelled as A2A's.
    let run_id = RunId::parse(task["id"].as_str().unwrap()).unwrap();
    let run = h.runtime.stores.runs.get_run(&TenantId::default_tenant(), run_id).await.unwrap().unwrap();
    assert_eq!(run.labels.get("a2a.agent").map(String::as_str), Some("support"));
    assert_eq!(run.session_id.as_deref(), Some(context));

    let (_, got) = rpc(&h, "support", &h.key, "GetTask", json!({ "id": task["id"] })).await;
    let got = &got["result"];
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["artifacts"][0]["parts"][0]["text"], "Answer to: where is my order");
    assert_eq!(got["history"][0]["role"], "ROLE_USER");

    // The same contextId continues the conversation (the session).
    let mut next = message("and now?");
    next["message"]["contextId"] = json!(context);
    let (_, again) = rpc(&h, "support", &h.key, "SendMessage", next).await;
    assert_eq!(again["result"]["task"]["contextId"], context);

    // A finished task takes no further message.
    let mut follow = message("more");
    follow["message"]["taskId"] = task["id"].clone();
    let (_, refused) = rpc(&h, "support", &h.key, "SendMessage", follow).await;
    assert_eq!(error_code(&refused), -32004);
}

#[tokio::test]
async fn a_failed_run_is_a_failed_task_with_our_message() {
    let h = harness().await;
    let task = send(&h, "fail").await;
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED");
    let said = task["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(!said.contains("upstream said no"), "foreign text never reaches the answer: {said}");
}

#[tokio::test]
async fn the_stream_is_the_task_then_its_updates_closing_at_the_terminal_state() {
    let h = harness().await;
    let body =
        json!({ "jsonrpc": "2.0", "id": 7, "method": "SendStreamingMessage", "params": message("stream please") });
    let reply = support::call(Method::POST, "/a2a/support")
        .from(REMOTE)
        .bearer(&h.key)
        .header("A2A-Version", "1.0")
        .json(Some(body))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.header("content-type").unwrap().starts_with("text/event-stream"));
    let text = reply.text();
    let frames: Vec<Value> = text
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .collect();
    assert!(frames.iter().all(|f| f["jsonrpc"] == "2.0" && f["id"] == 7), "{text}");
    let results: Vec<&Value> = frames.iter().map(|f| &f["result"]).collect();
    assert_eq!(results[0]["task"]["status"]["state"], "TASK_STATE_SUBMITTED", "{text}");
    assert!(results.iter().any(|r| r["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"));
    let last_artifact = results.iter().rev().find(|r| r.get("artifactUpdate").is_some()).unwrap();
    assert_eq!(last_artifact["artifactUpdate"]["artifact"]["parts"][0]["text"], "Answer to: stream please");
    assert_eq!(last_artifact["artifactUpdate"]["lastChunk"], true);
    let last = results.last().unwrap();
    assert_eq!(last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED", "{text}");
    let task_id = results[0]["task"]["id"].as_str().unwrap();
    assert!(results.iter().skip(1).all(|r| r.as_object().unwrap().values().next().unwrap()["taskId"] == task_id));
}

#[tokio::test]
async fn a_background_task_is_a_queued_run_polled_to_completion() {
    let h = harness().await;
    let mut params = message("take your time");
    params["configuration"] = json!({ "returnImmediately": true });
    let (_, body) = rpc(&h, "support", &h.key, "SendMessage", params).await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_SUBMITTED", "{body}");
    let (_, polled) = rpc(&h, "support", &h.key, "GetTask", json!({ "id": task["id"] })).await;
    assert_eq!(polled["result"]["status"]["state"], "TASK_STATE_SUBMITTED");
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let (_, done) = rpc(&h, "support", &h.key, "GetTask", json!({ "id": task["id"], "historyLength": 0 })).await;
    assert_eq!(done["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(done["result"]["artifacts"][0]["parts"][0]["text"], "Answer to: take your time");
    assert!(done["result"].get("history").is_none(), "historyLength 0 leaves the history out");
}

#[tokio::test]
async fn cancel_stops_a_task_once_and_then_it_is_not_cancelable() {
    let h = harness().await;
    let mut params = message("long job");
    params["configuration"] = json!({ "returnImmediately": true });
    let (_, body) = rpc(&h, "support", &h.key, "SendMessage", params).await;
    let id = body["result"]["task"]["id"].clone();
    let (_, canceled) = rpc(&h, "support", &h.key, "CancelTask", json!({ "id": id })).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    let (_, again) = rpc(&h, "support", &h.key, "CancelTask", json!({ "id": id })).await;
    assert_eq!(error_code(&again), -32002);
    h.runner.drain(10).await.unwrap();
    let run = h
        .runtime
        .stores
        .runs
        .get_run(&TenantId::default_tenant(), RunId::parse(id.as_str().unwrap()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status.as_str(), "Canceled");
    let finished = send(&h, "quick").await;
    let (_, late) = rpc(&h, "support", &h.key, "CancelTask", json!({ "id": finished["id"] })).await;
    assert_eq!(error_code(&late), -32002);
}

// ---- push notifications ---------------------------------------------------------------------------

/// The receiver's check, from the contract alone: HMAC-SHA256 of `"{timestamp}.{body}"`.
fn signed(r: &StubRequest) -> bool {
    let Some(hex) = r.headers["x-tracon-signature"].strip_prefix("sha256=") else { return false };
    let mut mac = Hmac::<Sha256>::new_from_slice(PUSH_SECRET.as_bytes()).unwrap();
    mac.update(r.headers["x-tracon-timestamp"].as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    let expected: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    expected == hex
}

#[tokio::test]
async fn push_configurations_are_kept_per_task_and_the_end_is_delivered_signed() {
    let h = harness().await;
    let (addr, received) = support::http_stub(|_| (200, String::new())).await;
    let url = format!("http://{addr}/a2a-hook");
    let mut params = message("notify me");
    params["configuration"] = json!({ "returnImmediately": true,
        "taskPushNotificationConfig": { "url": url, "token": "client-token-1" } });
    let (_, body) = rpc(&h, "support", &h.key, "SendMessage", params).await;
    let task_id = body["result"]["task"]["id"].as_str().unwrap().to_owned();

    let (_, listed) = rpc(&h, "support", &h.key, "ListTaskPushNotificationConfigs", json!({ "taskId": task_id })).await;
    let configs = listed["result"]["configs"].as_array().unwrap().clone();
    assert_eq!(configs.len(), 1, "{listed}");
    assert_eq!(configs[0]["url"], url);
    assert_eq!(configs[0]["token"], "client-token-1");
    let second_url = format!("http://{addr}/second");
    let (_, created) =
        rpc(&h, "support", &h.key, "CreateTaskPushNotificationConfig", json!({ "taskId": task_id, "url": second_url }))
            .await;
    let second = created["result"]["id"].as_str().unwrap().to_owned();
    let (_, got) =
        rpc(&h, "support", &h.key, "GetTaskPushNotificationConfig", json!({ "taskId": task_id, "id": second })).await;
    assert_eq!(got["result"]["url"], second_url);
    for _ in 0..2 {
        let (_, deleted) =
            rpc(&h, "support", &h.key, "DeleteTaskPushNotificationConfig", json!({ "taskId": task_id, "id": second }))
                .await;
        assert_eq!(deleted["result"], json!({}), "delete is idempotent: {deleted}");
    }
    let (_, gone) =
        rpc(&h, "support", &h.key, "GetTaskPushNotificationConfig", json!({ "taskId": task_id, "id": second })).await;
    assert_eq!(error_code(&gone), -32001);
    let (_, refused) = rpc(
        &h,
        "support",
        &h.key,
        "CreateTaskPushNotificationConfig",
        json!({ "taskId": task_id, "url": url, "authentication": { "scheme": "Bearer", "credentials": "x" } }),
    )
    .await;
    assert_eq!(error_code(&refused), -32602);

    // Every configuration write is audited, as through /api/webhooks: two created (one with the
    // message, one by the method), one deleted once (the second delete found nothing to remove).
    let trail = h
        .runtime
        .stores
        .audit
        .list(
            &TenantId::default_tenant(),
            &AuditFilter { entity_type: Some("webhook".into()), ..Default::default() },
            0,
            10,
        )
        .await
        .unwrap();
    let actions: Vec<&str> = trail.iter().rev().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["webhook.create", "webhook.create", "webhook.delete"]);
    assert_eq!(trail[0].entity_id, second);
    assert!(
        trail.iter().all(|e| !e.after.as_deref().unwrap_or_default().contains("client-token-1")),
        "no token in the trail"
    );

    // The run, then the delivery job.
    h.runner.drain(10).await.unwrap();
    h.runner.drain(10).await.unwrap();
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "one push, to the remaining configuration: {got:?}");
    let push = &got[0];
    assert!(signed(push), "the receiver verifies the signature");
    assert_eq!(push.headers["x-a2a-notification-token"], "client-token-1");
    let body: Value = serde_json::from_slice(&push.body).unwrap();
    assert_eq!(body["statusUpdate"]["taskId"], task_id);
    assert_eq!(body["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(body["statusUpdate"]["status"]["message"]["parts"][0]["text"], "Answer to: notify me");
}

// ---- boundaries -----------------------------------------------------------------------------------

#[tokio::test]
async fn another_tenants_task_is_missing_and_so_is_another_agents() {
    let h = harness().await;
    let task = send(&h, "mine").await;
    for method in ["GetTask", "CancelTask"] {
        let (_, other) = rpc(&h, "support", &h.acme, method, json!({ "id": task["id"] })).await;
        assert_eq!(error_code(&other), -32001, "{method}: {other}");
    }
    let (_, configs) =
        rpc(&h, "support", &h.acme, "ListTaskPushNotificationConfigs", json!({ "taskId": task["id"] })).await;
    assert_eq!(error_code(&configs), -32001);
    let (_, elsewhere) = rpc(&h, "gated", &h.key, "GetTask", json!({ "id": task["id"] })).await;
    assert_eq!(error_code(&elsewhere), -32001);
    let (_, junk) = rpc(&h, "support", &h.key, "GetTask", json!({ "id": "not-a-task" })).await;
    assert_eq!(error_code(&junk), -32001);
}

#[tokio::test]
async fn only_an_api_key_with_external_invoke_may_call() {
    let h = harness().await;
    let (status, body) = rpc(&h, "support", &h.unscoped, "SendMessage", message("hi")).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("insufficient_scope")));
    // The static token reaches every management route, not an external surface.
    let (status, body) = rpc(&h, "support", TOKEN, "SendMessage", message("hi")).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("insufficient_scope")));
    assert_eq!(body["requiredScope"], "ExternalInvoke");
    let reply = support::call(Method::POST, "/a2a/support").from(REMOTE).json(Some(json!({}))).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let (status, body) = rpc(&h, "private", &h.key, "SendMessage", message("hi")).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("agent_not_exposed")));
}

#[tokio::test]
async fn an_agent_with_an_approval_tool_is_refused() {
    let h = harness().await;
    let (_, body) = rpc(&h, "gated", &h.key, "SendMessage", message("refund")).await;
    assert_eq!(error_code(&body), -32004, "{body}");
    assert_eq!(body["error"]["data"][0]["metadata"]["tool"], "refund");
}

#[tokio::test]
async fn each_call_runs_on_the_a2a_budget() {
    let h = harness().await;
    // The tool round spends 100 tokens: past the A2A budget (60), the next model call is refused.
    let (_, body) = rpc(&h, "clerk", &h.key, "SendMessage", message("look it up")).await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{body}");
    let run_id = RunId::parse(task["id"].as_str().unwrap()).unwrap();
    let run = h.runtime.stores.runs.get_run(&TenantId::default_tenant(), run_id).await.unwrap().unwrap();
    assert_eq!((run.depth, run.parent_run_id), (0, None), "a root run of its own tree");
    assert_eq!(run.error.unwrap().error_type, "tree_budget_exceeded", "the tree's budget stopped it");
    // The same agent through the management API runs on the installation's (unbounded) tree.
    let reply = support::call(Method::POST, "/api/agents/clerk/run")
        .from(REMOTE)
        .bearer(TOKEN)
        .header("Idempotency-Key", "budget-1")
        .json(Some(json!({ "message": "look it up" })))
        .send(&h.app)
        .await;
    assert_eq!(reply.json()["status"], "Completed", "{}", reply.text());
    // A queued task carries its budget to the worker.
    let mut params = message("look it up");
    params["configuration"] = json!({ "returnImmediately": true });
    let (_, queued) = rpc(&h, "clerk", &h.key, "SendMessage", params).await;
    h.runner.drain(10).await.unwrap();
    let (_, done) = rpc(&h, "clerk", &h.key, "GetTask", json!({ "id": queued["result"]["task"]["id"] })).await;
    assert_eq!(done["result"]["status"]["state"], "TASK_STATE_FAILED", "{done}");
    let settings = A2aSettings::from_config(&Config::default()).unwrap();
    assert_eq!(settings.exposure.budget.max_depth, 1, "an external caller's tree is one level deep by default");
}

#[tokio::test]
async fn bad_json_rpc_gets_the_protocols_error_codes() {
    let h = harness().await;
    let raw = |body: &'static str, version: Option<&'static str>| {
        support::call(Method::POST, "/a2a/support")
            .from(REMOTE)
            .bearer(&h.key)
            .header_opt("A2A-Version", version)
            .bytes("application/json", body)
    };
    let parse = raw("{not json", Some("1.0")).send(&h.app).await;
    assert_eq!((parse.status, error_code(&parse.json())), (StatusCode::OK, -32700));
    let batch = raw("[]", Some("1.0")).send(&h.app).await;
    assert_eq!(error_code(&batch.json()), -32600);
    let no_version = raw(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#, None).send(&h.app).await;
    assert_eq!(error_code(&no_version.json()), -32009, "no A2A-Version is 0.3, which is not served");
    let (_, unknown) = rpc(&h, "support", &h.key, "message/send", message("hi")).await;
    assert_eq!(error_code(&unknown), -32601);
    assert_eq!(unknown["id"], "r1");
    let (_, bad) = rpc(&h, "support", &h.key, "SendMessage", json!({ "message": "hello" })).await;
    assert_eq!(error_code(&bad), -32602);
    let (_, empty) = rpc(
        &h,
        "support",
        &h.key,
        "SendMessage",
        json!({ "message": { "messageId": "m", "role": "ROLE_USER", "parts": [] } }),
    )
    .await;
    assert_eq!(error_code(&empty), -32602);
    let (_, file) = rpc(&h, "support", &h.key, "SendMessage",
        json!({ "message": { "messageId": "m", "role": "ROLE_USER", "parts": [{ "url": "https://x.test/a.png", "mediaType": "image/png" }] } })).await;
    assert_eq!(error_code(&file), -32005);
    let mut modes = message("hi");
    modes["configuration"] = json!({ "acceptedOutputModes": ["image/png"] });
    let (_, modes) = rpc(&h, "support", &h.key, "SendMessage", modes).await;
    assert_eq!(error_code(&modes), -32005);
    let (_, listing) = rpc(&h, "support", &h.key, "ListTasks", json!({})).await;
    assert_eq!(error_code(&listing), -32004);
}
