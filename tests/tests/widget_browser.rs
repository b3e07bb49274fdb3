//! The embeddable chat widget (`GET /embed.js`) in a real browser: headless Chromium
//! (Debian's package) driven by playwright-core from `tests/browser/widget.test.mjs`.
//!
//! This test starts the mock model, the real binary with one allowed origin, a `RunsWrite`
//! key and a `RunsRead` one (which the run endpoint refuses), the agents (defined through the
//! API, each on its own mock model), and a host page server on two more ports: one whose
//! origin is allowed, one whose origin is not. The pages load the widget from the tracon
//! server, so every call the widget makes is cross-origin, as on a customer's site. The
//! browser script scripts the mock, drives the pages and checks what reached the model and
//! what the widget shows (typing indicator, tool lines, Markdown, friendly errors, roles);
//! this test asserts it succeeded, and that the refused origin and keys started no run. `scripts/test` installs Chromium (apt) and playwright-core
//! (`npm ci` in tests/browser).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::response::Html;
use serde_json::{Value, json};
use support::Tracon;
use tracon_tests::mock::{MockConfig, MockServer};

const TOKEN: &str = "widget-test-admin-token-0123456789";

/// Each scenario's agent, on a mock model of the same name, with the tools it may call.
const AGENTS: &[(&str, &[&str])] = &[
    ("w-stream", &[]),
    ("w-approve", &["cancel_order"]),
    ("w-reload", &[]),
    ("w-cors", &[]),
    ("w-fail", &[]),
    ("w-shot", &["cancel_order"]),
    ("w-tool", &["get_local_time", "get_cart", "get_coupon"]),
    ("w-alive", &["get_order_status"]),
    ("w-markdown", &[]),
    ("w-auth", &[]),
    ("w-a11y", &[]),
];

/// The longest the browser script may take (Chromium's start included) before it is killed.
const BROWSER_DEADLINE: Duration = Duration::from_secs(300);

fn browser_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn chromium() -> PathBuf {
    let path = std::env::var_os("TRACON_CHROMIUM").map(PathBuf::from).unwrap_or_else(|| "/usr/bin/chromium".into());
    assert!(
        path.exists(),
        "Chromium is not installed at {}: `apt-get install -y chromium` (scripts/test does), or set TRACON_CHROMIUM",
        path.display()
    );
    path
}

/// What the host pages need to embed the widget.
struct Host {
    tracon: String,
    key: String,
}

/// Escapes text for an HTML attribute value.
fn attr(s: &str) -> String {
    s.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `/?agent=NAME[&lang=L][&dlang=L][&tools=1][&key=K]`: a shop page embedding the widget, with
/// a hostile stylesheet the widget's shadow root must keep out, and — with `tools` — a
/// client-side tool registered through the queue before the script loads. `key` replaces the
/// test's `RunsWrite` key in `data-api-key`.
async fn page(State(host): State<Arc<Host>>, Query(q): Query<HashMap<String, String>>) -> Html<String> {
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or_default();
    let data_lang = match get("dlang") {
        "" => String::new(),
        l => format!(r#" data-lang="{}""#, attr(l)),
    };
    let tools = if get("tools") == "1" {
        r#"<script>
window.TraconWidget = window.TraconWidget || { q: [], registerTool(n, h) { this.q.push([n, h]); } };
TraconWidget.registerTool("get_local_time", async () => ({ time: "2031-05-04T09:30:00+03:00", timeZone: "Europe/Istanbul" }));
</script>"#
    } else {
        ""
    };
    Html(format!(
        r#"<!doctype html>
<html lang="{lang}">
<head><meta charset="utf-8"><title>Shop</title>
<style>
button, input, [role=dialog], div {{ display: none !important; }}
* {{ font-family: "Comic Sans MS", cursive !important; color: #f0f !important; }}
</style>
{tools}
</head>
<body><h1>Shop</h1><p>Everything for your garden.</p>
<script src="{tracon}/embed.js" data-agent="{agent}" data-api-key="{key}"{data_lang} async></script>
</body>
</html>"#,
        lang = attr(get("lang")),
        tracon = attr(&host.tracon),
        agent = attr(get("agent")),
        key = attr(q.get("key").unwrap_or(&host.key)),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_widget_streams_approves_answers_client_tools_survives_a_reload_and_honours_cors() {
    assert!(
        browser_dir().join("node_modules/playwright-core").exists(),
        "playwright-core is not installed: run `npm ci` in tests/browser (scripts/test does)"
    );
    let chromium = chromium();
    let mock = MockServer::start(MockConfig::default()).await.unwrap();

    // The host pages' two origins: the first allowed, the second not.
    let allowed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host_url = format!("http://{}", allowed.local_addr().unwrap());
    let other_url = format!("http://{}", other.local_addr().unwrap());

    let endpoint = format!("{}/v1", mock.base_url());
    let server = Tracon::start(&[
        ("TRACON_AUTH_TOKEN", TOKEN),
        ("OPENAI_API_KEY", "mock-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__AllowedOrigins__0", host_url.as_str()),
        // Two more client-side tools beside the demo's get_local_time: one the page
        // implements after the script loaded, one it never implements.
        ("Tracon__ClientTools__get_cart__Description", "The shopper's cart, read in their browser."),
        ("Tracon__ClientTools__get_coupon__Description", "A coupon the page may offer."),
    ])
    .await;
    let client = reqwest::Client::new();
    for (name, tools) in AGENTS {
        let agent = json!({"name": name, "instructions": "Help the shopper.", "toolNames": tools,
            "model": {"provider": "openai", "model": name}});
        let res = client.post(server.url("/api/agents")).bearer_auth(TOKEN).json(&agent).send().await.unwrap();
        assert_eq!(res.status(), 201, "{name}: {}", res.text().await.unwrap());
    }
    let created = server.issue_key(TOKEN, "widget", &["RunsWrite"]).await;
    let key = created["key"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    // A valid key that may not start runs: the run endpoint answers 403.
    let created = server.issue_key(TOKEN, "widget-read-only", &["RunsRead"]).await;
    let read_key = created["key"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();

    let pages = Router::new()
        .route("/", axum::routing::get(page))
        .with_state(Arc::new(Host { tracon: server.base.clone(), key }));
    for listener in [allowed, other] {
        let pages = pages.clone();
        tokio::spawn(async move { axum::serve(listener, pages).await });
    }

    let screenshot = target_dir().join("widget-screenshot.png");
    let out_dir = std::env::temp_dir().join(format!("tracon-widget-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let (stdout_path, stderr_path) = (out_dir.join("stdout"), out_dir.join("stderr"));
    let mut cmd = Command::new("node");
    cmd.arg("widget.test.mjs")
        .current_dir(browser_dir())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOST_URL", &host_url)
        .env("OTHER_URL", &other_url)
        .env("MOCK_URL", mock.base_url())
        .env("READ_KEY", &read_key)
        .env("SCREENSHOT", &screenshot)
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    for passed in ["HOME", "TMPDIR", "SCENARIOS"] {
        if let Some(v) = std::env::var_os(passed) {
            cmd.env(passed, v);
        }
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("could not start node: {e}"));
    let deadline = Instant::now() + BROWSER_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    println!("{stdout}");
    assert!(
        status.is_some_and(|s| s.success()),
        "the browser scenarios failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        status.map_or_else(|| format!("killed after {BROWSER_DEADLINE:?}"), |s| s.to_string()),
        server.log_text()
    );
    assert!(stdout.contains("browser scenarios:"), "{stdout}");

    // The refused origin and the refused keys reached neither the model nor the run store.
    assert!(mock.requests("w-cors").is_empty());
    assert!(mock.requests("w-auth").is_empty());
    let runs: Value =
        client.get(server.url("/api/runs?take=200")).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    let runs = runs.as_array().unwrap_or_else(|| panic!("{runs}"));
    assert!(runs.iter().all(|r| r["agentName"] != "w-cors" && r["agentName"] != "w-auth"), "{runs:?}");
    let _ = std::fs::remove_dir_all(out_dir);
}
