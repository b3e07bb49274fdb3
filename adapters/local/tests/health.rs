//! `tracon health`, the real binary: every configured provider checked against a local stand-in
//! of its model list, one line each on stdout, exit 0 while none is Unhealthy and 1 once one is.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;

const KEY: &str = "sk-cli-test-key";

/// A model list on loopback: `200` for the OpenAI-style bearer key, `401` (quoting the key, as
/// providers do) for anything else.
async fn stub() -> String {
    let app = Router::new().route(
        "/v1/models",
        get(|headers: HeaderMap| async move {
            let bearer = headers.get("authorization").and_then(|v| v.to_str().ok());
            if bearer == Some(&format!("Bearer {KEY}")) {
                (StatusCode::OK, "{\"data\": []}".to_owned())
            } else {
                (StatusCode::UNAUTHORIZED, format!("{{\"error\": \"invalid x-api-key {KEY} upstream-detail\"}}"))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// `tracon health` with only `env` (and `PATH`) set.
async fn health(env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_tracon"))
            .arg("health")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn lines(output: &Output) -> Vec<Vec<String>> {
    String::from_utf8_lossy(&output.stdout).lines().map(|l| l.split_whitespace().map(str::to_owned).collect()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_provider_gets_a_line_and_all_answering_exits_zero() {
    let base = stub().await;
    let output = health(vec![("OPENAI_API_KEY", KEY.to_owned()), ("OPENAI_BASE_URL", format!("{base}/v1"))]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    let lines = lines(&output);
    assert_eq!(lines.len(), 3, "{lines:?}");
    // The OpenAI key registers both of its routes; each is checked.
    assert_eq!(&lines[0][..2], ["openai", "Healthy"]);
    assert_eq!(lines[0][3], "ms", "the check's latency: {lines:?}");
    assert_eq!(&lines[1][..2], ["openai-responses", "Healthy"]);
    assert_eq!(lines[2].join(" "), "scripted Unknown no health check");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unhealthy_provider_makes_the_command_fail_without_its_text_on_stdout() {
    let base = stub().await;
    let output = health(vec![
        ("OPENAI_API_KEY", KEY.to_owned()),
        ("OPENAI_BASE_URL", format!("{base}/v1")),
        ("ANTHROPIC_API_KEY", KEY.to_owned()),
        ("ANTHROPIC_BASE_URL", base),
    ])
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let lines = lines(&output);
    let names: Vec<&str> = lines.iter().map(|l| l[0].as_str()).collect();
    assert_eq!(names, ["anthropic", "openai", "openai-responses", "scripted"]);
    assert_eq!(
        (lines[0][1].as_str(), lines[0][3].as_str(), lines[0][4].as_str()),
        ("Unhealthy", "ms", "unauthorized:")
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("(HTTP 401)") && stdout.contains("(ref: "), "{stdout}");
    assert!(!stdout.contains("upstream-detail") && !stdout.contains(KEY), "{stdout}");
    assert_eq!(lines[1][1], "Healthy");
    assert!(String::from_utf8_lossy(&output.stderr).contains("a model provider is Unhealthy"));
}
