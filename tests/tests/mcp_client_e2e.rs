//! The MCP client end to end: the real `tracon` binary on Postgres, a real MCP server (the
//! official Rust SDK's server side over Streamable HTTP, `tracon_tests::mcp`) and the mock
//! model driving the tool calls. Discovery, a remote tool called through the pipeline after a
//! person approved it, a failing remote tool whose text never reaches the record, the
//! catalog read by a fresh process without asking the server, and the server going away (its
//! tools lost, with a warning) and coming back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{Value, json};
use support::{Tracon, database_url, run, text_of};
use tracon_tests::mcp::{McpTestServer, POLICY, SECRET_FAILURE};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

fn fresh_schema() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("m_{nanos:x}{:x}", std::process::id())
}

async fn start(schema: &str, mock: &MockServer) -> Tracon {
    let endpoint = format!("{}/v1", mock.base_url());
    let url = database_url();
    Tracon::start(&[
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema),
        ("OPENAI_API_KEY", "k"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        // The test's MCP server is on this machine: the egress guard's exception for tests.
        ("Tracon__Egress__AllowHttp", "true"),
        ("Tracon__Egress__AllowedNetworks__0", "127.0.0.0/8"),
        ("Tracon__McpSecrets__Crm", "Bearer crm-test-token"),
    ])
    .await
}

async fn json_of(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn tool_names(server: &Value) -> Vec<String> {
    server["discovery"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolName"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn remote_tools_are_discovered_approved_called_cached_lost_and_found_again() {
    let mcp = McpTestServer::start().await.unwrap();
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let schema = fresh_schema();
    let mut tracon = start(&schema, &mock).await;
    let client = reqwest::Client::new();

    // Registration and discovery.
    let server = json!({"name": "crm", "endpoint": mcp.url, "authorizationConfigurationKey": "Tracon:McpSecrets:Crm"});
    let (status, created) = json_of(client.post(tracon.url("/api/mcp-servers")).json(&server)).await;
    assert_eq!(status, 201, "{created}");
    let (status, refreshed) = json_of(client.post(tracon.url("/api/mcp-servers/refresh"))).await;
    assert_eq!(status, 200, "{refreshed}");
    let crm = &refreshed[0];
    assert_eq!(crm["discovery"]["reachable"], true, "{crm}");
    assert_eq!(crm["discovery"]["protocolVersion"], "2026-07-28", "the current revision, without a handshake");
    assert_eq!(tool_names(crm), ["crm_lookup", "crm_refund", "crm_explode"]);
    assert!(crm["discovery"]["warnings"][0].as_str().unwrap().contains("1 tool(s) were left out"), "{crm}");
    assert_eq!(crm["discovery"]["resources"][0]["uri"], "file:///policy.md");
    assert_eq!(crm["discovery"]["prompts"][0]["name"], "greeting");
    assert_eq!(crm["discovery"]["tools"][1]["destructive"], true);

    // An agent names remote tools like any other; the model calls one; a person approves.
    mock.script_in_order(
        "mcp-model",
        vec![
            MockTurn::tool_call("crm_lookup", json!({"customerId": "c-42"})),
            MockTurn::text("Ada is on the Gold plan."),
            MockTurn::tool_call("crm_explode", json!({})),
            MockTurn::text("That did not work."),
        ],
    );
    // Only a resource the server advertises may be named.
    let unknown = json!({"name": "nosy", "mcpResourceUris": ["crm:file:///etc/passwd"],
        "model": {"provider": "openai", "model": "mcp-model"}});
    let (status, doc) = json_of(client.post(tracon.url("/api/agents")).json(&unknown)).await;
    assert_eq!(status, 400, "{doc}");
    assert!(doc.to_string().contains("unknown_mcp_resource"), "{doc}");
    let agent = json!({"name": "crm-agent", "toolNames": ["crm_lookup", "crm_explode"],
        "mcpResourceUris": ["crm:file:///policy.md", "crm:file:///huge.txt"],
        "model": {"provider": "openai", "model": "mcp-model"}});
    let (status, doc) = json_of(client.post(tracon.url("/api/agents")).json(&agent)).await;
    assert_eq!(status, 201, "{doc}");
    let (_, frames, raw) = run(&tracon, "crm-agent", json!({"message": "Who is c-42?", "sessionId": "s1"})).await;
    let approvals = frames.iter().find(|f| f.event == "approvals").unwrap_or_else(|| panic!("{raw}"));
    assert_eq!(approvals.data[0]["toolName"], "crm_lookup");
    assert_eq!(frames.last().unwrap().data["status"], "AwaitingApproval", "{raw}");
    assert!(mcp.calls().is_empty(), "nothing reaches the server before the approval");
    let first = &mock.requests("mcp-model")[0]["body"];
    let offered = first["tools"].to_string();
    assert!(offered.contains("crm_lookup") && offered.contains("customerId"), "{offered}");
    // The resource snapshot is in the run's instructions; the one over 64 KB is left out.
    let system = first["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    assert!(system.contains(POLICY) && system.contains("uri=\"file:///policy.md\""), "{system}");
    assert!(!system.contains("xxxxxxxx"), "the 70 KB resource is left out");

    let request_id = approvals.data[0]["requestId"].as_str().unwrap();
    let (_, frames, raw) = run(
        &tracon,
        "crm-agent",
        json!({"sessionId": "s1", "approvals": [{"requestId": request_id, "approved": true}]}),
    )
    .await;
    assert_eq!(frames.last().unwrap().data["status"], "Completed", "{raw}");
    assert!(text_of(&frames).contains("Gold plan"), "{raw}");
    assert_eq!(mcp.calls(), [("lookup".to_owned(), json!({"customerId": "c-42"}))]);
    let run_id = frames[0].data["runId"].as_str().unwrap().to_owned();
    let (_, tools) = json_of(client.get(tracon.url(&format!("/api/runs/{run_id}/tools")))).await;
    assert_eq!((tools[0]["toolName"].as_str(), tools[0]["status"].as_str()), (Some("crm_lookup"), Some("Succeeded")));
    assert_eq!(tools[0]["effect"], "Read", "the server's read-only hint");
    assert!(tools[0]["result"].as_str().unwrap().contains("Ada Lovelace"), "{tools}");

    // A remote failure reaches the model and the record in our words only.
    let (_, frames, raw) = run(&tracon, "crm-agent", json!({"message": "Break it", "sessionId": "s2"})).await;
    let request_id =
        frames.iter().find(|f| f.event == "approvals").unwrap().data[0]["requestId"].as_str().unwrap().to_owned();
    let (_, frames, _) = run(
        &tracon,
        "crm-agent",
        json!({"sessionId": "s2", "approvals": [{"requestId": request_id, "approved": true}]}),
    )
    .await;
    let run_id = frames[0].data["runId"].as_str().unwrap().to_owned();
    let (_, tools) = json_of(client.get(tracon.url(&format!("/api/runs/{run_id}/tools")))).await;
    assert_eq!(
        (tools[0]["toolName"].as_str(), tools[0]["status"].as_str()),
        (Some("crm_explode"), Some("Failed")),
        "{raw}"
    );
    assert_eq!(tools[0]["error"], "Tool failed with McpToolError.");
    let (_, events) = json_of(client.get(tracon.url(&format!("/api/runs/{run_id}/events")))).await;
    let everything = format!("{tools}{events}{}", mock.requests("mcp-model").last().unwrap());
    assert!(!everything.contains("hunter2") && !everything.contains(SECRET_FAILURE), "{everything}");

    // A fresh process has the catalog from the store: the server is not asked again.
    tracon.child.kill().unwrap();
    tracon.child.wait().unwrap();
    mcp.stop().await;
    let tracon = start(&schema, &mock).await;
    let (_, got) = json_of(client.get(tracon.url("/api/mcp-servers/crm"))).await;
    assert_eq!(tool_names(&got), ["crm_lookup", "crm_refund", "crm_explode"], "{got}");
    mock.script_in_order("mcp-model", vec![MockTurn::text("Still here.")]);
    let (_, frames, raw) = run(&tracon, "crm-agent", json!({"message": "Hello"})).await;
    assert_eq!(frames.last().unwrap().data["status"], "Completed", "{raw}");
    let offered = mock.requests("mcp-model").last().unwrap()["body"]["tools"].to_string();
    assert!(offered.contains("crm_lookup"), "the cached catalog, no round trip: {offered}");

    // The server went away: a refresh loses its tools with a warning; runs go on without them.
    let (_, refreshed) = json_of(client.post(tracon.url("/api/mcp-servers/refresh"))).await;
    let crm = &refreshed[0];
    assert_eq!((crm["discovery"]["reachable"].as_bool(), tool_names(crm).len()), (Some(false), 0), "{crm}");
    let warning = crm["discovery"]["warnings"][0].as_str().unwrap();
    assert!(warning.starts_with("The server could not be reached."), "{warning}");
    mock.script_in_order("mcp-model", vec![MockTurn::text("No tools now.")]);
    let (_, frames, raw) = run(&tracon, "crm-agent", json!({"message": "Hello again"})).await;
    assert_eq!(frames.last().unwrap().data["status"], "Completed", "{raw}");
    let offered = mock.requests("mcp-model").last().unwrap()["body"]["tools"].to_string();
    assert!(!offered.contains("crm_lookup"), "{offered}");

    // It comes back: the next refresh offers its tools again.
    mcp.restart().await.unwrap();
    let (_, refreshed) = json_of(client.post(tracon.url("/api/mcp-servers/refresh?name=crm"))).await;
    assert_eq!(tool_names(&refreshed[0]), ["crm_lookup", "crm_refund", "crm_explode"], "{refreshed}");
    assert_eq!(refreshed[0]["discovery"]["warnings"].as_array().map(Vec::len), Some(1), "only the left-out tool");
}

#[tokio::test]
async fn a_server_of_the_previous_revision_is_spoken_to_with_the_initialize_handshake() {
    let mcp = McpTestServer::start_previous_revision().await.unwrap();
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let tracon = start(&fresh_schema(), &mock).await;
    let client = reqwest::Client::new();
    let server = json!({"name": "old", "endpoint": mcp.url, "requiresApproval": true});
    assert_eq!(json_of(client.post(tracon.url("/api/mcp-servers")).json(&server)).await.0, 201);
    let (_, refreshed) = json_of(client.post(tracon.url("/api/mcp-servers/refresh"))).await;
    assert_eq!(refreshed[0]["discovery"]["protocolVersion"], "2025-11-25", "{refreshed}");
    assert_eq!(tool_names(&refreshed[0]), ["old_lookup", "old_refund", "old_explode"]);
    // A call over the session the handshake opened, approval waived by a standing rule.
    let rule = json!({"toolName": "old_lookup"});
    assert_eq!(json_of(client.post(tracon.url("/api/approvals/rules")).json(&rule)).await.0, 201);
    mock.script_in_order(
        "old-model",
        vec![MockTurn::tool_call("old_lookup", json!({"customerId": "c-7"})), MockTurn::text("Found.")],
    );
    let agent =
        json!({"name": "legacy", "toolNames": ["old_lookup"], "model": {"provider": "openai", "model": "old-model"}});
    assert_eq!(json_of(client.post(tracon.url("/api/agents")).json(&agent)).await.0, 201);
    let (_, frames, raw) = run(&tracon, "legacy", json!({"message": "c-7?"})).await;
    assert_eq!(frames.last().unwrap().data["status"], "Completed", "{raw}");
    assert_eq!(mcp.calls(), [("lookup".to_owned(), json!({"customerId": "c-7"}))]);
    let last = mock.requests("old-model").last().unwrap()["body"]["messages"].to_string();
    assert!(last.contains("Ada Lovelace"), "{last}");
}
