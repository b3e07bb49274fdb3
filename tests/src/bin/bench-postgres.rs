//! `bench-postgres`: what recording to Postgres costs per run, against in-memory storage.
//!
//! Starts the mock model server in-process and two release `tracon` servers against it —
//! one on in-memory stores, one on Postgres (a fresh schema) — and drives the same
//! workload through both: `POST /api/agents/support/run` in a session-less run, the demo
//! agent on the `openai` provider pointed at the mock (one model call per run, no tool
//! call). Reports runs/second, p50/p99 latency, the Postgres − memory difference at p50,
//! and database round trips per run (transactions committed, from `pg_stat_database`;
//! every statement runs in its own transaction).
//!
//! ```text
//! cargo build --release -p tracon -p tracon-tests
//! DATABASE_URL=postgres://… cargo run --release -p tracon-tests --bin bench-postgres -- [--requests 2000] [--concurrency 1,16]
//! ```
//! `--statements` also lists the statements each Postgres phase ran (`pg_stat_statements`).
//! Target: recording to Postgres adds under 2 ms at p50 per run over in-memory.

// A report tool: its output is the point.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use tracon_tests::bench::{BoxError, Server, complete, database_url, measure, resolve_binary};
use tracon_tests::mock::{MockConfig, MockServer};

#[derive(Parser)]
struct Args {
    /// Runs measured per concurrency level (after a warm-up).
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    concurrency: Vec<usize>,
    /// The tracon binary.
    #[arg(long, default_value = "target/release/tracon")]
    tracon: PathBuf,
    /// Postgres to record into (default: TRACON_TEST_DATABASE_URL, then DATABASE_URL).
    #[arg(long)]
    database_url: Option<String>,
    /// Every run makes one tool round (the model calls `get_order_status`, then answers):
    /// compared with a plain run, what the step ledger and the call's record add on Postgres.
    #[arg(long)]
    tool_round: bool,
    /// After each Postgres phase, the statements it ran from `pg_stat_statements` (the server
    /// needs `shared_preload_libraries = 'pg_stat_statements'`): calls per run and the mean
    /// time in the server of each, so one statement's cost (the step ledger's) is read directly.
    #[arg(long)]
    statements: bool,
}

/// The bench's name, in its progress lines.
const NAME: &str = "bench-postgres";

async fn spawn(bin: &Path, mock: &str, db: Option<(&str, &str)>) -> Result<Server, BoxError> {
    match db {
        Some((url, schema)) => {
            let env = [
                ("DATABASE_URL", url),
                ("Tracon__PostgreSql__SchemaName", schema),
                ("Tracon__PostgreSql__MaxConnections", "16"),
            ];
            Server::start(bin, mock, &env).await
        }
        None => Server::start(bin, mock, &[]).await,
    }
}

/// One run through `base`'s native run endpoint, timed to the last byte of its stream.
fn run_once(
    client: &reqwest::Client,
    base: &str,
) -> impl Fn(usize) -> futures::future::BoxFuture<'static, Result<Duration, String>> + Clone + Send + Sync + 'static {
    let (client, url) = (client.clone(), Arc::new(format!("{base}/api/agents/support/run")));
    move |_| {
        let (client, url) = (client.clone(), url.clone());
        Box::pin(async move {
            let t = Instant::now();
            let sent = client.post(url.as_str()).json(&json!({"message": "Where is order 4182?"})).send().await;
            let body = sent.map_err(|e| e.to_string())?.text().await.map_err(|e| e.to_string())?;
            if !body.contains("event: done") {
                return Err(format!("a run did not complete: {body}"));
            }
            Ok(t.elapsed())
        })
    }
}

/// Transactions committed in this database so far. Backends report their counters to the
/// statistics system in the background, so wait for them to land first.
async fn commits(pool: &sqlx::PgPool) -> Result<i64, BoxError> {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut *conn).await?;
    Ok(sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        .fetch_one(&mut *conn)
        .await?)
}

/// Empties `pg_stat_statements` (creating the extension when the server has it loaded).
async fn reset_statements(pool: &sqlx::PgPool) -> Result<(), BoxError> {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").execute(pool).await?;
    sqlx::query("SELECT pg_stat_statements_reset()").execute(pool).await.map_err(|e| {
        format!("pg_stat_statements is not loaded (set shared_preload_libraries = 'pg_stat_statements'): {e}")
    })?;
    Ok(())
}

/// The statements run in this database since the reset (the store's are unqualified: its
/// connections set `search_path`), most total time first: calls per run, mean and total time
/// in the server.
async fn print_statements(pool: &sqlx::PgPool, runs: usize) -> Result<(), BoxError> {
    let rows: Vec<(String, i64, f64, f64)> = sqlx::query_as(
        "SELECT query, calls, mean_exec_time, total_exec_time FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat%' \
         ORDER BY total_exec_time DESC",
    )
    .fetch_all(pool)
    .await?;
    println!(
        "     {:>9} {:>9} {:>9}  statement (in the server; each is one round trip)",
        "calls/run", "mean µs", "ms/run"
    );
    for (query, calls, mean, total) in rows {
        let text: String = query.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(90).collect();
        println!(
            "     {:>9.2} {:>9.1} {:>9.3}  {text}",
            calls as f64 / runs as f64,
            mean * 1000.0,
            total / runs as f64
        );
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let url = database_url(args.database_url.as_deref())?;
    let tracon = resolve_binary(&args.tracon)?;
    let mock = MockServer::start(MockConfig::default()).await?;
    if args.tool_round {
        // The mock picks a turn by the assistant messages already sent: first the call, then
        // the answer, for every run at any concurrency.
        let call: tracon_tests::mock::MockTurn = serde_json::from_value(
            json!({"toolCalls": [{"name": "get_order_status", "arguments": {"orderId": "4182"}}]}),
        )?;
        let answer: tracon_tests::mock::MockTurn = serde_json::from_value(json!({"text": "It has shipped."}))?;
        mock.script("bench", vec![call, answer]);
    }
    let schema = format!("bench_{}", std::process::id());
    let memory = spawn(&tracon, &mock.base_url(), None).await?;
    let postgres = spawn(&tracon, &mock.base_url(), Some((&url, &schema))).await?;
    let pool = sqlx::PgPool::connect(&url).await?;
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).tcp_nodelay(true).build()?;

    println!("== Tracon on Postgres vs in-memory ==");
    println!(
        "command: cargo run --release -p tracon-tests --bin bench-postgres -- --requests {} --concurrency {}{}{}",
        args.requests,
        args.concurrency.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
        if args.tool_round { " --tool-round" } else { "" },
        if args.statements { " --statements" } else { "" }
    );
    println!("cores: {}", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    println!();
    println!("{:>4} {:<9} {:>9} {:>9} {:>9} {:>14}", "C", "storage", "runs/s", "p50 ms", "p99 ms", "round trips/run");
    let mut worst_added = 0.0f64;
    for &c in &args.concurrency {
        let mut p50s = [0.0; 2];
        for (i, (name, server)) in [("memory", &memory), ("postgres", &postgres)].into_iter().enumerate() {
            let runs = run_once(&client, &server.base);
            complete(measure(NAME, c, 0, 200.max(c * 4), server.pid(), runs.clone()).await?)?; // warm-up
            let before = if i == 1 { commits(&pool).await? } else { 0 };
            if i == 1 && args.statements {
                reset_statements(&pool).await?;
            }
            let phase = complete(measure(NAME, c, 0, args.requests, server.pid(), runs).await?)?;
            // The two reads of the statistics are themselves two transactions.
            let after = if i == 1 { commits(&pool).await? - 2 } else { 0 };
            let trips =
                if i == 1 { format!("{:.2}", (after - before) as f64 / args.requests as f64) } else { "—".into() };
            p50s[i] = phase.percentile_ms(50.0);
            println!(
                "{c:>4} {name:<9} {:>9.0} {:>9.3} {:>9.3} {trips:>14}",
                phase.throughput(),
                phase.percentile_ms(50.0),
                phase.percentile_ms(99.0)
            );
        }
        let added = p50s[1] - p50s[0];
        worst_added = worst_added.max(added);
        println!("     postgres − memory at p50: {added:.3} ms");
        if args.statements {
            print_statements(&pool, args.requests).await?;
        }
    }
    println!();
    println!(
        "target: recording to Postgres adds < 2 ms p50 per run: {}",
        if worst_added < 2.0 { "met" } else { "NOT MET" }
    );
    let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).execute(&pool).await;
    Ok(())
}
