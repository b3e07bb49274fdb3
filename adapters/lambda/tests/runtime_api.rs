//! The function binaries against a mock Runtime API: a failed exchange with the Runtime API
//! (the first `next` answer cut off mid-body, or the first response post cut off) does not
//! end the function; it asks for the next invocation again and answers it — and an
//! invocation it already handled, handed out again, is not run a second time. A function
//! that cannot start reports why through the init error endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::sync::mpsc;

/// Which exchange with the mock Runtime API breaks.
#[derive(Clone, Copy, PartialEq)]
enum Break {
    /// The first `next` answer: the function never saw the invocation.
    FirstPoll,
    /// The first response post: the handler ran, and the Runtime API hands the same
    /// invocation out again.
    FirstResponse,
}

#[derive(Clone)]
struct Api {
    breaks: Break,
    polls: Arc<AtomicUsize>,
    posts: Arc<AtomicUsize>,
    responses: mpsc::UnboundedSender<String>,
}

fn meta_event() -> String {
    json!({
        "version": "2.0", "routeKey": "$default", "rawPath": "/api/meta", "rawQueryString": "",
        "headers": {"host": "abc.lambda-url.eu-west-1.on.aws"},
        "requestContext": {
            "accountId": "123456789012", "apiId": "abc", "domainName": "abc.lambda-url.eu-west-1.on.aws",
            "domainPrefix": "abc", "requestId": "r1", "routeKey": "$default", "stage": "$default",
            "time": "30/Nov/2026:12:00:00 +0000", "timeEpoch": 1796040000000u64,
            "http": {"method": "GET", "path": "/api/meta", "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7", "userAgent": "test"}
        },
        "isBase64Encoded": false
    })
    .to_string()
}

async fn next(State(api): State<Api>) -> Response {
    // Every answer is the same invocation, `request-1`, as when the Runtime API hands out
    // again one whose exchange failed: after a broken poll the function never started it
    // and must run it; after a broken response post it must not run it again.
    let mut headers = HeaderMap::new();
    headers.insert("lambda-runtime-aws-request-id", HeaderValue::from_static("request-1"));
    headers.insert("lambda-runtime-deadline-ms", HeaderValue::from_static("4102444800000"));
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        HeaderValue::from_static("arn:aws:lambda:eu-west-1:123456789012:function:tracon"),
    );
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    match api.polls.fetch_add(1, Ordering::SeqCst) {
        // The first poll's answer breaks off: the connection ends inside the body.
        0 if api.breaks == Break::FirstPoll => {
            let cut = futures::stream::once(async { Err::<Bytes, _>(std::io::Error::other("connection reset")) });
            (headers, Body::from_stream(cut)).into_response()
        }
        0 | 1 => (headers, meta_event()).into_response(),
        // One invocation is enough: hold later polls until the process is killed.
        _ => std::future::pending().await,
    }
}

async fn response(State(api): State<Api>, body: Bytes) {
    if api.posts.fetch_add(1, Ordering::SeqCst) == 0 && api.breaks == Break::FirstResponse {
        // The connection ends without an answer: the handler task dies with it.
        panic!("the mock Runtime API cuts off the first response post");
    }
    let _ = api.responses.send(String::from_utf8_lossy(&body).into_owned());
}

/// Runs `binary` against the mock Runtime API broken at `breaks`; returns the first response
/// posted whole.
async fn answer_after(binary: &str, breaks: Break) -> String {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let api = Api { breaks, polls: Arc::new(AtomicUsize::new(0)), posts: Arc::new(AtomicUsize::new(0)), responses: tx };
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
        .with_state(api.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let mut child = tokio::process::Command::new(binary)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "tracon")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "test")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/test")
        .env("DATABASE_URL", "postgres://tracon:unused@127.0.0.1:9/tracon")
        .env("TRACON_AUTH_TOKEN", "test-token-0123456789abcdef")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
    let exited = child.try_wait().unwrap();
    let _ = child.kill().await;
    server.abort();
    let answer = answer.unwrap_or_else(|_| panic!("{binary}: no answer (exited: {exited:?})")).unwrap();
    assert!(api.polls.load(Ordering::SeqCst) >= 2, "{binary}: the answer came without a second poll");
    answer
}

async fn answers_after_a_broken_poll(binary: &str) {
    let answer = answer_after(binary, Break::FirstPoll).await;
    // Buffered: the response document; streaming: its prelude, then the body as is.
    assert!(answer.contains(r#""statusCode":200"#) && answer.contains("product"), "{binary} answered {answer}");
}

async fn does_not_run_an_invocation_twice(binary: &str) {
    let answer = answer_after(binary, Break::FirstResponse).await;
    assert!(
        answer.contains(r#""statusCode":502"#) && answer.contains("invocation_replayed") && !answer.contains("product"),
        "{binary} answered {answer}"
    );
}

#[tokio::test]
async fn a_buffered_function_survives_a_broken_runtime_api_exchange() {
    answers_after_a_broken_poll(env!("CARGO_BIN_EXE_tracon-sessions")).await;
}

#[tokio::test]
async fn a_streaming_function_survives_a_broken_runtime_api_exchange() {
    answers_after_a_broken_poll(env!("CARGO_BIN_EXE_tracon-runs")).await;
}

#[tokio::test]
async fn a_buffered_function_does_not_run_an_invocation_handed_out_again() {
    does_not_run_an_invocation_twice(env!("CARGO_BIN_EXE_tracon-sessions")).await;
}

#[tokio::test]
async fn a_streaming_function_does_not_run_an_invocation_handed_out_again() {
    does_not_run_an_invocation_twice(env!("CARGO_BIN_EXE_tracon-runs")).await;
}

/// A function that cannot start says why through the Runtime API's init error, so the
/// failed invocation carries what to set — not only a bare exit status.
#[tokio::test]
async fn a_function_that_cannot_start_reports_why_to_the_runtime_api() {
    let (tx, mut rx) = mpsc::unbounded_channel::<(HeaderMap, String)>();
    let app = Router::new()
        .route(
            "/2018-06-01/runtime/init/error",
            post(|State(tx): State<mpsc::UnboundedSender<(HeaderMap, String)>>, headers: HeaderMap, body: String| async move {
                let _ = tx.send((headers, body));
                axum::Json(json!({"status": "OK"}))
            }),
        )
        .with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_tracon-sessions"))
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "tracon")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .status();
    let status =
        tokio::time::timeout(Duration::from_secs(30), status).await.expect("the function did not exit").unwrap();
    server.abort();
    assert!(!status.success(), "a function that cannot start exits with a failure");
    let (headers, body) = rx.try_recv().expect("no init error was posted");
    assert_eq!(headers["lambda-runtime-function-error-type"], "Runtime.ConfigError");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["errorType"], "Runtime.ConfigError");
    assert!(body["errorMessage"].as_str().unwrap().contains("DATABASE_URL is not set"), "{body}");
}
