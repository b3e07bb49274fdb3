//! The MCP server (`/mcp`) through the router: initialize, tools/list, tools/call, the
//! `ExternalInvoke` boundary, the approval boundary, tenants, JSON-RPC errors and tasks.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{Manual, api_key, approval_tool};
use tracon_core::definition::{AgentDefinition, AgentParameter, ParameterKind};
use tracon_core::exposure::Exposure;
use tracon_core::jobs::{JobHandler, JobRunner, JobSettings};
use tracon_core::keys::Scope;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider};
use tracon_core::names::{AgentName, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::runs::queued::QueuedRuns;
use tracon_core::runtime::{RunQueue, Runtime, RuntimeBuilder};
use tracon_handlers::mcp::settings::McpServerSettings;
use tracon_handlers::{AppState, HttpSettings};

const TOKEN: &str = "a-static-token-of-32-characters!";

struct Harness {
    app: Router,
    runtime: Arc<Runtime>,
    runner: JobRunner,
    key: String,
}

fn settings(agents: &[&str], tasks: bool) -> McpServerSettings {
    McpServerSettings {
        exposure: Exposure {
            agents: agents.iter().map(|a| AgentName::parse(a).unwrap()).collect(),
            ..Exposure::default()
        },
        tool_name_prefix: Some("acme".into()),
        enable_tasks: tasks,
        ..McpServerSettings::default()
    }
}

/// `support` answers "echo: <message> (<tier>)"; `refunder` has an approval-required tool;
/// `secret` is not exposed; `caller` may call `refunder`.
async fn harness(http: HttpSettings, queue: bool) -> Harness {
    let refund = approval_tool("refund", "Refunds.", json!({"type": "object"}), "refunded");
    let script = ScriptedProvider::from_fn("script", |req| {
        let text = req.last_user_text().unwrap_or_default().to_owned();
        if text == "refund" && !matches!(req.messages.last(), Some(Message::Tool { .. })) {
            return ScriptedTurn::tool_call("refund", json!({}));
        }
        ScriptedTurn::text(&format!("echo: {text}")).with_usage(4, 2)
    });
    let mut support = AgentDefinition::new("support", "script", "m").with_instructions("Tier {{tier}}.");
    support.description = Some("Answers support questions.".into());
    support.parameters = vec![AgentParameter {
        name: "tier".into(),
        kind: ParameterKind::Text,
        required: false,
        default_value: Some("basic".into()),
        description: Some("The customer's tier.".into()),
    }];
    let mut caller = AgentDefinition::new("caller", "script", "m");
    caller.callable_agent_names = vec!["refunder".into()];
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_tool(refund)
            .add_agent(support)
            .add_agent(AgentDefinition::new("refunder", "script", "m").with_tools(&["refund"]))
            .add_agent(AgentDefinition::new("secret", "script", "m"))
            .add_agent(caller)
            .build()
            .unwrap(),
    );
    let handlers: Vec<Arc<dyn JobHandler>> = vec![Arc::new(QueuedRuns { runtime: runtime.clone() })];
    let job_settings = JobSettings { retry_base: Duration::ZERO, ..JobSettings::default() };
    let runner =
        JobRunner::new(runtime.stores.jobs.clone(), handlers, runtime.platform.clock.clone(), job_settings, "test");
    if queue {
        runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 3 });
    }
    let key = api_key(&runtime, "default", &[Scope::ExternalInvoke], None).await;
    let app = tracon_handlers::router(AppState::new(runtime.clone(), http));
    Harness { app, runtime, runner, key }
}

fn http(agents: &[&str], tasks: bool) -> HttpSettings {
    HttpSettings { mcp_server: settings(agents, tasks), ..HttpSettings::default() }
}

async fn rpc(app: &Router, key: &str, message: Value) -> support::Reply {
    support::call(Method::POST, "/mcp")
        .bearer(key)
        .header("Accept", "application/json, text/event-stream")
        .json(Some(message))
        .send(app)
        .await
}

async fn request(app: &Router, key: &str, method: &str, params: Value) -> Value {
    let reply = rpc(app, key, json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["id"], 7);
    body
}

#[tokio::test]
async fn initialize_negotiates_the_revision_and_issues_no_session() {
    let h = harness(http(&["support"], false), false).await;
    let reply = rpc(
        &h.app,
        &h.key,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.header("mcp-session-id").is_none(), "stateless: no session");
    let body = reply.json();
    assert_eq!(body["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(body["result"]["serverInfo"]["name"], "tracon");
    assert!(body["result"]["capabilities"]["tools"].is_object());
    assert!(body["result"]["capabilities"].get("tasks").is_none(), "tasks are off by default");

    let body = request(&h.app, &h.key, "initialize", json!({"protocolVersion": "1999-01-01"})).await;
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25", "unknown revision: our latest");

    let reply = rpc(&h.app, &h.key, json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    assert!(reply.text().is_empty());
    let body = request(&h.app, &h.key, "ping", json!({})).await;
    assert_eq!(body["result"], json!({}));
}

#[tokio::test]
async fn tools_list_names_each_exposed_agent_with_its_prefix_and_input() {
    let h = harness(http(&["support", "refunder", "missing"], false), false).await;
    let body = request(&h.app, &h.key, "tools/list", json!({})).await;
    let tools = body["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "the approval-bound and the missing agents are left out: {tools:?}");
    let tool = &tools[0];
    assert_eq!(tool["name"], "acme_support");
    assert_eq!(tool["description"], "Answers support questions.");
    assert_eq!(tool["inputSchema"]["required"], json!(["message"]));
    assert_eq!(tool["inputSchema"]["properties"]["parameters"]["properties"]["tier"]["type"], "string");
    assert!(tool.get("execution").is_none());
}

#[tokio::test]
async fn tools_call_runs_the_agent_and_answers_its_text_as_a_recorded_run() {
    let h = harness(http(&["support"], false), false).await;
    let body = request(
        &h.app,
        &h.key,
        "tools/call",
        json!({"name": "acme_support", "arguments": {"message": "hello", "parameters": {"tier": "gold"}}}),
    )
    .await;
    let result = &body["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["content"][0], json!({"type": "text", "text": "echo: hello"}));
    let run_id = result["_meta"]["tracon/runId"].as_str().unwrap();
    let run = run_of(&h, run_id).await;
    assert_eq!(run.agent_name, "support");
    assert_eq!(run.depth, 0);

    // As one server-sent event when the client takes only a stream.
    let reply = support::call(Method::POST, "/mcp")
        .bearer(&h.key)
        .header("Accept", "text/event-stream")
        .json(Some(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "acme_support", "arguments": {"message": "streamed"}}})))
        .send(&h.app)
        .await;
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let frames = support::frames(&reply.text());
    assert_eq!(frames[0].0, "message");
    assert_eq!(frames[0].1["result"]["content"][0]["text"], "echo: streamed");
}

#[tokio::test]
async fn bad_arguments_and_unknown_tools_are_invalid_params() {
    let h = harness(http(&["support"], false), false).await;
    for (params, needle) in [
        (json!({"name": "acme_support", "arguments": {}}), "message"),
        (json!({"name": "acme_support", "arguments": {"message": "x", "extra": 1}}), "extra"),
        (json!({"name": "acme_support", "arguments": {"message": "x", "parameters": {"nope": "1"}}}), "nope"),
        (json!({"name": "acme_secret", "arguments": {"message": "x"}}), "Unknown tool"),
        (json!({"name": "support", "arguments": {"message": "x"}}), "Unknown tool"),
        (json!({"arguments": {"message": "x"}}), "name"),
    ] {
        let body = request(&h.app, &h.key, "tools/call", params.clone()).await;
        assert_eq!(body["error"]["code"], -32602, "{params}: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains(needle), "{body}");
    }
}

#[tokio::test]
async fn json_rpc_errors_have_their_codes() {
    let h = harness(http(&["support"], false), false).await;
    let raw = |body: &'static str| {
        support::call(Method::POST, "/mcp")
            .bearer(&h.key)
            .header("Accept", "application/json, text/event-stream")
            .bytes("application/json", body)
    };
    let reply = raw("{not json").send(&h.app).await;
    assert_eq!((reply.status, reply.json()["error"]["code"].clone()), (StatusCode::BAD_REQUEST, json!(-32700)));
    let reply = raw(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).send(&h.app).await;
    assert_eq!(reply.json()["error"]["code"], -32600);
    let reply = raw(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).send(&h.app).await;
    assert_eq!(reply.json()["error"]["code"], -32600);
    assert_eq!(reply.json()["id"], 1);
    let body = request(&h.app, &h.key, "resources/list", json!({})).await;
    assert_eq!(body["error"]["code"], -32601);
    let body = request(&h.app, &h.key, "tasks/get", json!({"taskId": "x"})).await;
    assert_eq!(body["error"]["code"], -32601, "tasks are off");
    let body = request(&h.app, &h.key, "initialize", json!({})).await;
    assert_eq!(body["error"]["code"], -32602);

    let reply = support::call(Method::POST, "/mcp")
        .bearer(&h.key)
        .header("MCP-Protocol-Version", "2024-01-01")
        .json(Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = support::call(Method::POST, "/mcp")
        .bearer(&h.key)
        .header("Accept", "text/html")
        .json(Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::NOT_ACCEPTABLE);
    let reply = support::call(Method::GET, "/mcp").bearer(&h.key).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    let reply = support::call(Method::POST, "/mcp")
        .bearer(&h.key)
        .header("Origin", "http://evil.example")
        .json(Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "DNS rebinding: a foreign Origin is refused");
}

#[tokio::test]
async fn only_an_api_key_with_external_invoke_reaches_the_server() {
    let mut settings = HttpSettings::with_token(TOKEN);
    settings.mcp_server = self::settings(&["support"], false);
    let h = harness(settings, false).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let reply = rpc(&h.app, TOKEN, ping.clone()).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "the static token alone is refused");
    assert_eq!(reply.json()["errorType"], "insufficient_scope");
    assert_eq!(reply.json()["requiredScope"], "ExternalInvoke");
    let runs_key = api_key(&h.runtime, "default", &[Scope::RunsWrite, Scope::AgentsAdmin], None).await;
    let reply = rpc(&h.app, &runs_key, ping.clone()).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(reply.json()["requiredScope"], "ExternalInvoke");
    let expired = api_key(&h.runtime, "default", &[Scope::ExternalInvoke], Some(chrono::Utc::now())).await;
    assert_eq!(rpc(&h.app, &expired, ping.clone()).await.status, StatusCode::UNAUTHORIZED);
    let reply = support::call(Method::POST, "/mcp").from(support::REMOTE).json(Some(ping.clone())).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(rpc(&h.app, &h.key, ping).await.status, StatusCode::OK);
}

#[tokio::test]
async fn an_agent_that_would_cross_an_approval_boundary_is_refused() {
    let h = harness(http(&["refunder", "caller"], false), false).await;
    for tool in ["acme_refunder", "acme_caller"] {
        let body =
            request(&h.app, &h.key, "tools/call", json!({"name": tool, "arguments": {"message": "refund"}})).await;
        assert_eq!(body["result"]["isError"], true, "{body}");
        let text = body["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("'refund' requires approval"), "{text}");
    }
    let runs = h.runtime.stores.runs.list_runs(&TenantId::default_tenant(), &Default::default(), 0, 10).await.unwrap();
    assert!(runs.is_empty(), "nothing ran");

    let exposure = settings(&["refunder"], false).exposure;
    let refused = tracon_core::exposure::check_startup(&h.runtime, &exposure, false, "Tracon:McpServer").await;
    assert!(refused.unwrap_err().contains("'refund' requires approval"));
}

#[tokio::test]
async fn remote_exposure_needs_an_external_invoke_key_at_start_up() {
    let h = harness(http(&["support"], false), false).await;
    let exposure = settings(&["support"], false).exposure;
    assert!(tracon_core::exposure::check_startup(&h.runtime, &exposure, true, "Tracon:McpServer").await.is_ok());
    let bare = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .add_provider(
                Arc::new(ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("x"))) as Arc<dyn ModelProvider>
            )
            .add_agent(AgentDefinition::new("support", "script", "m"))
            .build()
            .unwrap(),
    );
    let refused = tracon_core::exposure::check_startup(&bare, &exposure, true, "Tracon:McpServer").await.unwrap_err();
    assert!(refused.contains("static bearer token alone is refused"), "{refused}");
    assert!(tracon_core::exposure::check_startup(&bare, &exposure, false, "Tracon:McpServer").await.is_ok());
}

#[tokio::test]
async fn another_tenants_agent_looks_missing() {
    let h = harness(http(&["private"], false), false).await;
    let acme = TenantId::parse("acme").unwrap();
    h.runtime
        .stores
        .definitions
        .create(&acme, AgentDefinition::new("private", "script", "m"), chrono::Utc::now())
        .await
        .unwrap();
    let acme_key = api_key(&h.runtime, "acme", &[Scope::ExternalInvoke], None).await;
    let body = request(&h.app, &acme_key, "tools/list", json!({})).await;
    assert_eq!(body["result"]["tools"][0]["name"], "acme_private");
    let body =
        request(&h.app, &acme_key, "tools/call", json!({"name": "acme_private", "arguments": {"message": "hi"}})).await;
    assert_eq!(body["result"]["content"][0]["text"], "echo: hi");

    let body = request(&h.app, &h.key, "tools/list", json!({})).await;
    assert_eq!(body["result"]["tools"], json!([]), "the default tenant has no such agent");
    let body =
        request(&h.app, &h.key, "tools/call", json!({"name": "acme_private", "arguments": {"message": "hi"}})).await;
    assert_eq!(body["error"]["code"], -32602);
    assert_eq!(body["error"]["message"], "Unknown tool: acme_private");
}

#[tokio::test]
async fn a_task_is_a_queued_run_read_back_by_id_and_only_by_its_key() {
    let h = harness(http(&["support"], true), true).await;
    let body = request(&h.app, &h.key, "initialize", json!({"protocolVersion": "2025-11-25"})).await;
    assert!(body["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object());
    let body = request(&h.app, &h.key, "tools/list", json!({})).await;
    assert_eq!(body["result"]["tools"][0]["execution"]["taskSupport"], "optional");

    let body = request(
        &h.app,
        &h.key,
        "tools/call",
        json!({"name": "acme_support", "arguments": {"message": "later"}, "task": {"ttl": 60000}}),
    )
    .await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"], "working", "{body}");
    assert_eq!(task["pollInterval"], 5000);
    let id = task["taskId"].as_str().unwrap().to_owned();

    // The task is an ordinary run.
    let run = run_of(&h, &id).await;
    assert_eq!(run.status, tracon_core::runs::store::RunStatus::Queued);

    // Another key of the tenant does not see it.
    let other = api_key(&h.runtime, "default", &[Scope::ExternalInvoke], None).await;
    let body = request(&h.app, &other, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(body["error"]["code"], -32602);
    let body = request(&h.app, &other, "tasks/list", json!({})).await;
    assert_eq!(body["result"]["tasks"], json!([]));

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let body = request(&h.app, &h.key, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(body["result"]["status"], "completed", "{body}");
    let body = request(&h.app, &h.key, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(body["result"]["content"][0]["text"], "echo: later");
    assert_eq!(body["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str());
    let body = request(&h.app, &h.key, "tasks/list", json!({})).await;
    assert_eq!(body["result"]["tasks"][0]["taskId"], id.as_str());
    let body = request(&h.app, &h.key, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(body["error"]["code"], -32602, "a finished task cannot be cancelled");
    let body = request(&h.app, &h.key, "tasks/get", json!({"taskId": "not-a-task"})).await;
    assert_eq!(body["error"]["code"], -32602);
}

/// The default tenant's run `id`.
async fn run_of(h: &Harness, id: &str) -> tracon_core::runs::store::RunRecord {
    let id = tracon_core::names::RunId(id.parse().unwrap());
    h.runtime.stores.runs.get_run(&TenantId::default_tenant(), id).await.unwrap().unwrap()
}

/// Calls `acme_support` on `message` as a task; the task's id.
async fn start_task(h: &Harness, message: &str) -> String {
    let params = json!({"name": "acme_support", "arguments": {"message": message}, "task": {}});
    let body = request(&h.app, &h.key, "tools/call", params).await;
    body["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{body}")).to_owned()
}

#[tokio::test]
async fn a_working_task_can_be_cancelled_and_stays_cancelled() {
    let h = harness(http(&["support"], true), true).await;
    let id = start_task(&h, "slow").await;
    let body = request(&h.app, &h.key, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(body["result"]["status"], "cancelled", "{body}");
    h.runner.drain(10).await.unwrap();
    let body = request(&h.app, &h.key, "tasks/get", json!({"taskId": id})).await;
    assert_eq!(body["result"]["status"], "cancelled");
    let body = request(&h.app, &h.key, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(body["result"]["isError"], true);
}

#[tokio::test]
async fn a_task_without_a_queue_runs_in_the_background() {
    let h = harness(http(&["support"], true), false).await;
    let id = start_task(&h, "bg").await;
    let body = request(&h.app, &h.key, "tasks/result", json!({"taskId": id})).await;
    assert_eq!(body["result"]["content"][0]["text"], "echo: bg", "{body}");
}
