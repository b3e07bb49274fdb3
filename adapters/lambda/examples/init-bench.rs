//! Lambda cold start, measured against a mock Runtime API (the `init-bench` example).
//!
//! For each function binary: start it as Lambda would (the `AWS_LAMBDA_*` environment, the
//! Runtime API at a local address), time exec → its first `GET …/invocation/next` (init:
//! what Lambda bills as Init Duration), hand it one function-URL event (`GET /api/meta`)
//! and time exec → the first byte of its response and exec → the response's end. Repeats, then prints medians and
//! p90s, and each binary's size.
//!
//! ```text
//! cargo build --release -p tracon-lambda --bins --example init-bench
//! ./target/release/examples/init-bench --bin-dir target/release --runs 30
//! ```

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use clap::Parser;
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;

#[derive(Parser)]
#[command(about = "Lambda init time of each Tracon function against a mock Runtime API")]
struct Args {
    /// Directory holding the function binaries (`tracon-agents`, …), or `cargo lambda
    /// build`'s output (`target/lambda`, one `<function>/bootstrap` each).
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    /// Cold starts per function.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    #[arg(long, value_delimiter = ',', default_value = "tracon-agents,tracon-runs,tracon-sessions,tracon-all")]
    functions: Vec<String>,
}

#[derive(Debug)]
enum Seen {
    Next,
    FirstByte,
    Response,
    InitError,
}

#[derive(Clone)]
struct Api {
    seen: mpsc::UnboundedSender<Seen>,
    served: Arc<Mutex<bool>>,
}

fn event() -> String {
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/api/meta",
        "rawQueryString": "",
        "headers": {"host": "abc.lambda-url.eu-west-1.on.aws"},
        "requestContext": {
            "accountId": "123456789012", "apiId": "abc", "domainName": "abc.lambda-url.eu-west-1.on.aws",
            "domainPrefix": "abc", "requestId": "r1", "routeKey": "$default", "stage": "$default",
            "time": "30/Nov/2026:12:00:00 +0000", "timeEpoch": 1796040000000u64,
            "http": {"method": "GET", "path": "/api/meta", "protocol": "HTTP/1.1", "sourceIp": "203.0.113.7", "userAgent": "bench"}
        },
        "isBase64Encoded": false
    })
    .to_string()
}

async fn next(State(api): State<Api>) -> impl IntoResponse {
    let _ = api.seen.send(Seen::Next);
    let first = {
        let mut served = api.served.lock().unwrap_or_else(|e| e.into_inner());
        !std::mem::replace(&mut *served, true)
    };
    if !first {
        // One invocation per process: hold the second poll until the process is killed.
        std::future::pending::<()>().await;
    }
    let mut headers = HeaderMap::new();
    headers.insert("lambda-runtime-aws-request-id", HeaderValue::from_static("bench-request-1"));
    headers.insert("lambda-runtime-deadline-ms", HeaderValue::from_static("4102444800000"));
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        HeaderValue::from_static("arn:aws:lambda:eu-west-1:123456789012:function:tracon"),
    );
    headers.insert("lambda-runtime-trace-id", HeaderValue::from_static("Root=1-00000000-000000000000000000000000"));
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    (headers, event())
}

async fn response(State(api): State<Api>, body: axum::body::Body) -> StatusCode {
    let mut chunks = body.into_data_stream();
    let mut first = true;
    while let Some(chunk) = chunks.next().await {
        if first && chunk.is_ok_and(|c| !c.is_empty()) {
            let _ = api.seen.send(Seen::FirstByte);
            first = false;
        }
    }
    let _ = api.seen.send(Seen::Response);
    StatusCode::ACCEPTED
}

async fn init_error(State(api): State<Api>, body: Bytes) -> StatusCode {
    eprintln!("init error reported: {}", String::from_utf8_lossy(&body));
    let _ = api.seen.send(Seen::InitError);
    StatusCode::ACCEPTED
}

fn binary(dir: &std::path::Path, function: &str) -> PathBuf {
    let bootstrap = dir.join(function).join("bootstrap");
    if bootstrap.exists() { bootstrap } else { dir.join(function) }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn cold_start(path: &PathBuf, function: &str) -> Result<(f64, f64, f64), String> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let api = Api { seen: tx, served: Arc::new(Mutex::new(false)) };
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let start = Instant::now();
    let mut child = tokio::process::Command::new(path)
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench")
        .env("AWS_REGION", "eu-west-1")
        .env("DATABASE_URL", "postgres://tracon:unused@127.0.0.1:9/tracon")
        .env("TRACON_AUTH_TOKEN", "bench-token-0123456789abcdef")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut init, mut first_byte) = (None, None);
    let result = loop {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(Seen::Next)) if init.is_none() => init = Some(start.elapsed()),
            Ok(Some(Seen::Next)) => {}
            Ok(Some(Seen::FirstByte)) => first_byte = Some(start.elapsed()),
            Ok(Some(Seen::Response)) => {
                let done = start.elapsed();
                break Ok((ms(init.unwrap_or(done)), ms(first_byte.unwrap_or(done)), ms(done)));
            }
            Ok(Some(Seen::InitError)) => break Err("the function reported an init error".to_owned()),
            Ok(None) | Err(_) => break Err("no answer from the function within 10 s".to_owned()),
        }
    };
    let _ = child.kill().await;
    server.abort();
    result
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    eprintln!(
        "function          size (bytes)   init p50 / p90 (ms)   first byte p50 / p90 (ms)   response done p50 / p90 (ms)   [{} cold starts]",
        args.runs
    );
    for function in &args.functions {
        let path = binary(&args.bin_dir, function);
        let size = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?.len();
        let (mut inits, mut firsts, mut dones) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.runs.max(1) {
            let (init, first, done) = cold_start(&path, function).await?;
            inits.push(init);
            firsts.push(first);
            dones.push(done);
        }
        for v in [&mut inits, &mut firsts, &mut dones] {
            v.sort_by(f64::total_cmp);
        }
        let p = |v: &[f64]| format!("{:>8.2} / {:>6.2}", percentile(v, 0.5), percentile(v, 0.9));
        eprintln!("{function:<17} {size:>12}   {}      {}        {}", p(&inits), p(&firsts), p(&dones));
    }
    Ok(())
}
