//! `bench-lifecycle`: what Tracon's own work costs per run, in process, through the router.
//!
//! No sockets, no upstream, no second thread: a scripted model answers "Hello from the mock
//! model." with usage, the in-memory stores record the run, and each request is sent and read to
//! its last byte on one current-thread runtime, so the time measured is the CPU Tracon spends on a
//! run (auth, admission, the run row, the model turn, the recorder, pricing, the frames or the
//! `chat.completion`) and nothing the kernel or the other processes add. Compare with what
//! `bench-run`, `bench-openai` and `bench-floor` measure over loopback: the difference between
//! those and this is the HTTP server and the local server's layers, the provider's request and
//! its parsing on a real upstream client, the runtime's cross-thread wake-ups, and the kernel.
//!
//! Requests, sequentially, each `--requests` times after a tenth as warm-up:
//!
//! - `POST /api/agents/b/run` (the live SSE turn);
//! - `POST /v1/chat/completions`, whole;
//! - `POST /v1/chat/completions`, `stream: true`.
//!
//! ```text
//! cargo run --release -p tracon-handlers --example bench-lifecycle [-- --requests 50000]
//! ```

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;
use tracon_core::definition::AgentDefinition;
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::{AppState, HttpSettings, PeerAddr};

fn app() -> Router {
    let model =
        ScriptedProvider::with_turns("bench", vec![ScriptedTurn::text("Hello from the mock model.").with_usage(12, 6)]);
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(model) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("b", "bench", "m"))
        .build()
        .unwrap();
    tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()))
}

async fn measure(app: &Router, path: &str, body: &serde_json::Value, requests: usize) -> (Vec<Duration>, usize) {
    let body = serde_json::to_vec(body).unwrap();
    let mut times = Vec::with_capacity(requests);
    let mut bytes = 0;
    for i in 0..requests + requests / 10 {
        let req = Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .extension(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 1))))
            .body(Body::from(body.clone()))
            .unwrap();
        let start = Instant::now();
        let res = app.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let read = res.into_body().collect().await.unwrap().to_bytes();
        let took = start.elapsed();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&read));
        bytes = read.len();
        if i >= requests / 10 {
            times.push(took);
        }
    }
    times.sort();
    (times, bytes)
}

fn pct(times: &[Duration], p: f64) -> f64 {
    times[((times.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e6
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let requests =
        std::env::args().skip_while(|a| a != "--requests").nth(1).map(|n| n.parse().unwrap()).unwrap_or(20_000);
    let app = app();
    let question = json!([{"role": "user", "content": "Say hello."}]);
    let cases = [
        ("native run (SSE)", "/api/agents/b/run", json!({"message": "Say hello."})),
        ("/v1 whole", "/v1/chat/completions", json!({"model": "b", "messages": question})),
        ("/v1 streamed", "/v1/chat/completions", json!({"model": "b", "stream": true, "messages": question})),
    ];
    println!("{requests} requests each, in process, one thread (µs)\n");
    println!("| request | p50 | p90 | p99 | bytes |");
    println!("|---|---|---|---|---|");
    let mut summary = serde_json::Map::new();
    for (name, path, body) in &cases {
        let (times, bytes) = measure(&app, path, body, requests).await;
        let p50 = pct(&times, 0.5);
        println!("| {name} | {p50:.1} | {:.1} | {:.1} | {bytes} |", pct(&times, 0.9), pct(&times, 0.99));
        summary.insert((*name).to_owned(), json!({"p50_us": p50, "p99_us": pct(&times, 0.99)}));
    }
    println!("{}", json!({"summary": summary}));
}
