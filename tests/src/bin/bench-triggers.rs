//! `bench-triggers`: inbound trigger throughput on Postgres, from the signed request to the
//! completed run.
//!
//! Starts the mock model server in-process and a release `tracon` server on Postgres (a fresh
//! schema), defines a trigger aimed at the demo agent (pointed at the mock: one model call per
//! run), then fires signed events at `POST /api/triggers/default/{name}` from `--concurrency`
//! clients — each body unique, so each signature is (the signature is the replay key). It
//! reports accepted triggers per second with the accept latency p50/p99 (the `202`), then
//! waits until every accepted run completed and reports the end-to-end rate: accept → job
//! leased by the local consumer → run completed.
//!
//! ```text
//! cargo build --release -p tracon -p tracon-tests
//! DATABASE_URL=postgres://… cargo run --release -p tracon-tests --bin bench-triggers -- [--requests 3000] [--concurrency 16]
//! ```
//! Target: accept p99 under 10 ms and at least 500 accepted triggers per second.

// A report tool: its output is the point.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;
use tracon_tests::bench::{BoxError, Server, complete, database_url, measure, resolve_binary};
use tracon_tests::mock::{MockConfig, MockServer};

const SECRET: &str = "bench-trigger-secret-0123456789abcdef";

#[derive(Parser)]
struct Args {
    /// Triggers fired (after a warm-up).
    #[arg(long, default_value_t = 3000)]
    requests: usize,
    /// Clients firing at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// The tracon binary.
    #[arg(long, default_value = "target/release/tracon")]
    tracon: PathBuf,
    /// Postgres to record into (default: TRACON_TEST_DATABASE_URL, then DATABASE_URL).
    #[arg(long)]
    database_url: Option<String>,
}

/// The bench's name, in its progress lines.
const NAME: &str = "bench-triggers";

async fn spawn(bin: &Path, mock: &str, url: &str, schema: &str) -> Result<Server, BoxError> {
    let env = [
        ("Tracon__TriggerSecrets__bench", SECRET),
        ("Tracon__InboundTriggers__MaxRequestsPerMinute", "1000000"),
        ("Tracon__Jobs__Concurrency", "16"),
        ("DATABASE_URL", url),
        ("Tracon__PostgreSql__SchemaName", schema),
        ("Tracon__PostgreSql__MaxConnections", "32"),
    ];
    Server::start(bin, mock, &env).await
}

fn signature(timestamp: &str, body: &str) -> Result<String, BoxError> {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes())?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    let bytes = mac.finalize().into_bytes();
    Ok(format!("sha256={}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// One signed event per call (the `offset + n`th, so every body and signature is new),
/// timed to the `202`.
fn fire(
    client: &reqwest::Client,
    url: &str,
    offset: usize,
) -> impl Fn(usize) -> futures::future::BoxFuture<'static, Result<Duration, String>> + Clone + Send + Sync + 'static {
    let (client, url) = (client.clone(), Arc::new(url.to_owned()));
    move |n| {
        let (client, url) = (client.clone(), url.clone());
        Box::pin(async move {
            let body = json!({"event": {"text": format!("Where is order {}?", offset + n)}}).to_string();
            let timestamp = chrono::Utc::now().timestamp().to_string();
            let signed = signature(&timestamp, &body).map_err(|e| e.to_string())?;
            let t = Instant::now();
            let response = client
                .post(url.as_str())
                .header("Content-Type", "application/json")
                .header("X-Tracon-Timestamp", &timestamp)
                .header("X-Tracon-Signature", signed)
                .body(body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let text = response.text().await.map_err(|e| e.to_string())?;
            if status != reqwest::StatusCode::ACCEPTED {
                return Err(format!("a trigger was not accepted: {status} {text}"));
            }
            Ok(t.elapsed())
        })
    }
}

async fn open_runs(pool: &sqlx::PgPool, schema: &str) -> Result<i64, BoxError> {
    Ok(sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.runs WHERE status IN ('Queued', 'Running')"))
        .fetch_one(pool)
        .await?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let url = database_url(args.database_url.as_deref())?;
    let tracon = resolve_binary(&args.tracon)?;
    let mock = MockServer::start(MockConfig::default()).await?;
    let schema = format!("bench_triggers_{}", std::process::id());
    let server = spawn(&tracon, &mock.base_url(), &url, &schema).await?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).tcp_nodelay(true).build()?;
    let defined = client
        .put(format!("{}/api/triggers/bench", server.base))
        .json(&json!({"targetKind": "agent", "targetName": "support",
            "signingSecretConfigurationName": "Tracon:TriggerSecrets:bench",
            "payloadMode": "path", "payloadPath": "event.text"}))
        .send()
        .await?;
    if !defined.status().is_success() {
        return Err(format!("could not define the trigger: {}", defined.text().await?).into());
    }
    let accept = format!("{}/api/triggers/default/bench", server.base);

    println!("== Inbound triggers on Postgres: accept → job leased → run completed ==");
    println!(
        "command: cargo run --release -p tracon-tests --bin bench-triggers -- --requests {} --concurrency {}",
        args.requests, args.concurrency
    );
    println!("cores: {}", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let warm = 200.max(args.concurrency * 4);
    complete(measure(NAME, args.concurrency, 0, warm, server.pid(), fire(&client, &accept, 0)).await?)?;
    while open_runs(&pool, &schema).await? > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = Instant::now();
    let accepted = fire(&client, &accept, warm);
    let phase = complete(measure(NAME, args.concurrency, 0, args.requests, server.pid(), accepted).await?)?;
    let seconds = phase.wall.as_secs_f64();
    println!();
    println!("accepted      {:>8} triggers in {seconds:.2} s = {:.0}/s", args.requests, phase.throughput());
    println!("accept  p50   {:>8.3} ms", phase.percentile_ms(50.0));
    println!("accept  p99   {:>8.3} ms", phase.percentile_ms(99.0));
    let deadline = Instant::now() + Duration::from_secs(600);
    while open_runs(&pool, &schema).await? > 0 {
        if Instant::now() > deadline {
            return Err("runs were still open after 10 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = started.elapsed().as_secs_f64();
    let completed: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.runs WHERE status = 'Completed'"))
        .fetch_one(&pool)
        .await?;
    println!(
        "completed     {completed:>8} runs (warm-up included) — the measured {} in {total:.2} s = {:.0} runs/s end to end",
        args.requests,
        args.requests as f64 / total
    );
    let p99 = phase.percentile_ms(99.0);
    let rate = phase.throughput();
    println!();
    println!(
        "target: accept p99 < 10 ms ({}) and ≥ 500 accepted/s ({})",
        if p99 < 10.0 { "met" } else { "NOT met" },
        if rate >= 500.0 { "met" } else { "NOT met" }
    );
    drop(server);
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&pool).await?;
    Ok(())
}
