//! The official OpenAI SDKs — Python (PyPI) and Node (npm) — as clients of the real binary's
//! `/v1` endpoints, against the mock model server: chat completions whole and streamed, the
//! models list, and errors surfacing as the SDKs' typed errors. The scripts live in
//! `tests/sdk/`; `scripts/test` installs the SDKs (`scripts/sdk-tools.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;
use support::Tracon;
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

const TOKEN: &str = "sdk-test-admin-token-0123456789";

fn sdk_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk")
}

fn python() -> PathBuf {
    support::sdk_python()
}

/// A server whose demo agent answers from the mock, and a `RunsWrite` key for the SDKs.
async fn server() -> (MockServer, Tracon, String) {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script("sdk-model", vec![MockTurn::text("Order 4182 ships tomorrow.").with_usage(11, 5)]);
    let endpoint = format!("{}/v1", mock.base_url());
    let server = Tracon::start(&[
        ("TRACON_AUTH_TOKEN", TOKEN),
        ("OPENAI_API_KEY", "mock-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__OpenAI__DefaultModel", "sdk-model"),
    ])
    .await;
    let key = sdk_key(&server).await;
    (mock, server, key)
}

/// A `RunsWrite` key for the SDK clients.
async fn sdk_key(server: &Tracon) -> String {
    let created = server.issue_key(TOKEN, "sdk", &["RunsWrite"]).await;
    created["key"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned()
}

fn run_client(program: &std::ffi::OsStr, args: &[&str], server: &Tracon, key: &str) {
    run_sdk(program, args, &[("TRACON_AGENT", "support")], (server, key), "sdk: ok");
}

/// Runs the SDK `program` on `args` against `server` as the holder of `key`, `agents` naming
/// the agents it talks to; it must succeed and print `ok`.
fn run_sdk(
    program: &std::ffi::OsStr,
    args: &[&str],
    agents: &[(&str, &str)],
    (server, key): (&Tracon, &str),
    ok: &str,
) {
    let output = Command::new(program)
        .args(args)
        .current_dir(sdk_dir())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("OPENAI_BASE_URL", server.url("/v1"))
        .env("OPENAI_API_KEY", key)
        .envs(agents.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("could not start {program:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{program:?} {args:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        server.log_text()
    );
    assert!(stdout.contains(ok), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_talks_to_the_compatible_endpoints() {
    let (mock, server, key) = server().await;
    run_client(python().as_os_str(), &["chat.py"], &server, &key);
    // Every call was a recorded run of the agent.
    let runs = support::json_of(reqwest::Client::new().get(server.url("/api/runs")).bearer_auth(TOKEN)).await;
    assert_eq!(runs.as_array().unwrap().iter().filter(|r| r["agentName"] == "support").count(), 2, "{runs}");
    drop(mock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_node_sdk_talks_to_the_compatible_endpoints() {
    assert!(
        sdk_dir().join("node_modules/openai").exists(),
        "the OpenAI Node SDK is not installed: run `npm ci` in tests/sdk (scripts/test does)"
    );
    let (mock, server, key) = server().await;
    run_client(std::ffi::OsStr::new("node"), &["chat.mjs"], &server, &key);
    drop(mock);
}

/// A server with an agent whose model calls the client-side demo tool `get_local_time` (then
/// thanks the caller) and one whose model calls `cancel_order`, which needs approval.
async fn tools_server() -> (MockServer, Tracon, String) {
    let (mock, server, key) = server().await;
    mock.script(
        "sdk-tools",
        vec![MockTurn::tool_call("get_local_time", json!({})), MockTurn::text("Thanks, noted the time.")],
    );
    mock.script("sdk-approve", vec![MockTurn::tool_call("cancel_order", json!({"orderId": "4182"}))]);
    let client = reqwest::Client::new();
    for (name, model, tool) in [("clock", "sdk-tools", "get_local_time"), ("canceller", "sdk-approve", "cancel_order")]
    {
        let res = client
            .post(server.url("/api/agents"))
            .bearer_auth(TOKEN)
            .json(&json!({"name": name, "model": {"provider": "openai", "model": model}, "toolNames": [tool]}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    }
    (mock, server, key)
}

fn run_tools_client(program: &std::ffi::OsStr, script: &str, server: &Tracon, key: &str) {
    let agents = [("TRACON_TOOL_AGENT", "clock"), ("TRACON_APPROVAL_AGENT", "canceller")];
    run_sdk(program, &[script], &agents, (server, key), "sdk tools: ok");
}

/// The tool message the model got after the client answered: what the SDK sent back.
fn answered_time(mock: &MockServer) -> Vec<String> {
    mock.requests("sdk-tools")
        .iter()
        .filter_map(|r| {
            r["body"]["messages"].as_array()?.iter().find(|m| m["role"] == "tool")?["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_answers_a_client_side_tool_call_and_gets_a_conflict_as_its_typed_error() {
    let (mock, server, key) = tools_server().await;
    run_tools_client(python().as_os_str(), "tools.py", &server, &key);
    assert_eq!(answered_time(&mock), ["python-clock 10:42", "python-responses 10:43"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_sdk_answers_a_client_side_tool_call_and_gets_a_conflict_as_its_typed_error() {
    assert!(sdk_dir().join("node_modules/openai").exists(), "run `npm ci` in tests/sdk (scripts/test does)");
    let (mock, server, key) = tools_server().await;
    run_tools_client(std::ffi::OsStr::new("node"), "tools.mjs", &server, &key);
    assert_eq!(answered_time(&mock), ["node-clock 10:42"]);
}

/// The Responses tests' server: the mock answers by how much of the conversation it was sent
/// ("First answer." with no assistant message, "Second answer." with one …), so an answer
/// shows what the model saw; the tenant header is on, so the administrator can give another
/// tenant a conversation. Returns a `RunsWrite` key of the default tenant and the other
/// tenant's conversation.
async fn responses_server() -> (MockServer, Tracon, String, String) {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let turns = ["First answer.", "Second answer.", "Third answer."].map(|t| MockTurn::text(t).with_usage(11, 5));
    mock.script("sdk-model", turns.to_vec());
    let endpoint = format!("{}/v1", mock.base_url());
    let server = Tracon::start(&[
        ("TRACON_AUTH_TOKEN", TOKEN),
        ("OPENAI_API_KEY", "mock-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__OpenAI__DefaultModel", "sdk-model"),
        ("Tracon__Tenancy__Enabled", "true"),
        ("Tracon__Tenancy__AllowHeader", "true"),
    ])
    .await;
    let http = reqwest::Client::new();
    let key = sdk_key(&server).await;
    let theirs = support::json_of(
        http.post(server.url("/v1/conversations"))
            .bearer_auth(TOKEN)
            .header("X-Tenant-Id", "other-tenant")
            .json(&json!({})),
    )
    .await;
    let conversation = theirs["id"].as_str().unwrap_or_else(|| panic!("{theirs}")).to_owned();
    (mock, server, key, conversation)
}

/// The roles (system messages left out) of the model request whose last message is `text`.
fn roles_sent_with(mock: &MockServer, text: &str) -> Vec<String> {
    let requests = mock.requests("sdk-model");
    let request = requests
        .iter()
        .find(|r| r["body"]["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["content"] == text))
        .unwrap_or_else(|| panic!("no model request ended with {text:?}: {requests:?}"));
    let messages = request["body"]["messages"].as_array().unwrap();
    messages.iter().map(|m| m["role"].as_str().unwrap().to_owned()).filter(|r| r != "system").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_chains_responses_and_keeps_conversations() {
    let (mock, server, key, theirs) = responses_server().await;
    run_client(python().as_os_str(), &["responses.py", &theirs], &server, &key);
    // The third chained turn reached the model with the two before it.
    assert_eq!(roles_sent_with(&mock, "Thanks!"), ["user", "assistant", "user", "assistant", "user"]);
    // The other tenant's conversation is untouched.
    let status = reqwest::Client::new()
        .get(server.url(&format!("/v1/conversations/{theirs}")))
        .bearer_auth(TOKEN)
        .header("X-Tenant-Id", "other-tenant")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, reqwest::StatusCode::OK);
    drop(mock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_node_sdk_chains_responses_and_keeps_conversations() {
    assert!(
        sdk_dir().join("node_modules/openai").exists(),
        "the OpenAI Node SDK is not installed: run `npm ci` in tests/sdk (scripts/test does)"
    );
    let (mock, server, key, theirs) = responses_server().await;
    run_client(std::ffi::OsStr::new("node"), &["responses.mjs", &theirs], &server, &key);
    assert_eq!(roles_sent_with(&mock, "Thanks!"), ["user", "assistant", "user", "assistant", "user"]);
    drop(mock);
}

/// The frameworks' server: three agents that take a caller's tools and output format —
/// `weather` (its model calls `get_weather`, then answers), `plain` (answers in text) and
/// `json` (answers the JSON of a weather report) — for the SDKs, LangChain and the AI SDK.
async fn frameworks_server() -> (MockServer, Tracon, String) {
    let (mock, server, key) = server().await;
    mock.script(
        "sdk-weather",
        vec![MockTurn::tool_call("get_weather", json!({"city": "Izmir"})), MockTurn::text("It is sunny in Izmir.")],
    );
    mock.script("sdk-plain", vec![MockTurn::text("No tools needed.")]);
    mock.script("sdk-json", vec![MockTurn::text(r#"{"city":"Izmir","celsius":24}"#)]);
    let client = reqwest::Client::new();
    for (name, model) in [("weather", "sdk-weather"), ("plain", "sdk-plain"), ("json", "sdk-json")] {
        let res = client
            .post(server.url("/api/agents"))
            .bearer_auth(TOKEN)
            .json(&json!({"name": name, "model": {"provider": "openai", "model": model},
                "openAi": {"callerTools": "ClientSide", "callerResponseFormat": "Allow"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    }
    (mock, server, key)
}

fn run_frameworks_client(program: &std::ffi::OsStr, script: &str, server: &Tracon, key: &str) {
    let agents = [("TRACON_WEATHER_AGENT", "weather"), ("TRACON_PLAIN_AGENT", "plain"), ("TRACON_JSON_AGENT", "json")];
    run_sdk(program, &[script], &agents, (server, key), "sdk frameworks: ok");
}

/// What the model was sent for `tool_choice` in each of `model`'s requests (Chat Completions
/// or Responses), and whether the caller's `get_weather` was offered with it.
fn choices_sent(mock: &MockServer, model: &str) -> Vec<(serde_json::Value, bool)> {
    mock.requests(model)
        .iter()
        .map(|r| {
            let body = &r["body"];
            let offered = body["tools"].as_array().is_some_and(|tools| {
                tools.iter().any(|t| t["function"]["name"] == "get_weather" || t["name"] == "get_weather")
            });
            (body.get("tool_choice").cloned().unwrap_or(serde_json::Value::Null), offered)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_drives_caller_tools_structured_output_and_the_new_routes() {
    let (mock, server, key) = frameworks_server().await;
    run_frameworks_client(python().as_os_str(), "frameworks.py", &server, &key);
    let weather = choices_sent(&mock, "sdk-weather");
    assert!(weather.iter().all(|(_, offered)| *offered), "{weather:?}");
    let sent: Vec<&serde_json::Value> = weather.iter().map(|(c, _)| c).collect();
    assert!(sent.contains(&&json!("required")), "{sent:?}");
    assert!(sent.contains(&&json!({"type": "function", "function": {"name": "get_weather"}})), "{sent:?}");
    assert_eq!(choices_sent(&mock, "sdk-plain"), [(json!("none"), true)]);
    // `.parse()` sent its schema on to the model.
    let parsed = &mock.requests("sdk-json")[0]["body"]["response_format"];
    assert_eq!(
        (parsed["type"].as_str(), parsed["json_schema"]["name"].as_str()),
        (Some("json_schema"), Some("Weather"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_binds_tools_and_gets_structured_output() {
    let (mock, server, key) = frameworks_server().await;
    run_frameworks_client(python().as_os_str(), "langchain_tools.py", &server, &key);
    assert!(choices_sent(&mock, "sdk-weather").iter().all(|(_, offered)| *offered));
    assert_eq!(mock.requests("sdk-json")[0]["body"]["response_format"]["type"], "json_schema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_sdk_drives_caller_tools_and_the_new_routes() {
    assert!(sdk_dir().join("node_modules/openai").exists(), "run `npm ci` in tests/sdk (scripts/test does)");
    let (mock, server, key) = frameworks_server().await;
    run_frameworks_client(std::ffi::OsStr::new("node"), "frameworks.mjs", &server, &key);
    assert_eq!(choices_sent(&mock, "sdk-plain"), [(json!("none"), true)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vercel_ai_sdk_runs_tools_over_several_steps_and_makes_objects() {
    assert!(sdk_dir().join("node_modules/ai").exists(), "run `npm ci` in tests/sdk (scripts/test does)");
    let (mock, server, key) = frameworks_server().await;
    run_frameworks_client(std::ffi::OsStr::new("node"), "aisdk.mjs", &server, &key);
    // Each multi-step run came back for the answer after its tool ran on the client.
    assert!(mock.requests("sdk-weather").len() >= 4, "{:?}", mock.requests("sdk-weather").len());
}
