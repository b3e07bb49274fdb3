//! `bench-checkpoints`: what a workflow's checkpoints cost on Postgres — statements per
//! super-step and bytes against the conversation they hold.
//!
//! Starts the mock model server in-process and a `tracon` server on Postgres (a fresh schema),
//! saves two agents answering from the mock with a message of `--message-bytes` and a
//! round-robin `GroupChat` of `--turns` turns (one agent turn per super-step), runs it to its
//! end (`Accept: application/json`), then reads from Postgres:
//!
//! - **writes per super-step** the workflow layer makes: the root run's log writes (each a
//!   statement in its own transaction, told apart by `xmin`) and its checkpoint rows, over
//!   the super-steps; the agents' own runs (one per turn) are reported apart;
//! - **checkpoint bytes** (`octet_length(state)`, summed) against the raw bytes of the
//!   conversation's messages (the input and every answer), and the rows' size on disk;
//! - what the agents' own runs store, for comparison.
//!
//! ```text
//! cargo build --release -p tracon -p tracon-tests
//! DATABASE_URL=postgres://… cargo run --release -p tracon-tests --bin bench-checkpoints -- [--turns 200] [--message-bytes 600]
//! ```
//! Targets: ≤ 2 statements per super-step; checkpoint bytes ≤ 1.2 × the raw message bytes.

// A report tool: its output is the point.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{Value, json};
use tracon_tests::bench::{BoxError, Server, database_url, resolve_binary};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

#[derive(Parser)]
struct Args {
    /// Agent turns of the group chat (its `maxIterations`; one super-step each).
    #[arg(long, default_value_t = 200)]
    turns: u32,
    /// Bytes of each agent's answer.
    #[arg(long, default_value_t = 600)]
    message_bytes: usize,
    /// The tracon binary.
    #[arg(long, default_value = "target/release/tracon")]
    tracon: PathBuf,
    /// Postgres (default: TRACON_TEST_DATABASE_URL, then DATABASE_URL).
    #[arg(long)]
    database_url: Option<String>,
}

const INPUT: &str = "Plan the launch of the new onboarding flow, one step per turn.";

/// A message of exactly `bytes` bytes of prose (ASCII), so the raw size is known.
fn answer(speaker: &str, bytes: usize) -> String {
    let mut text = format!("{speaker}: ");
    let words = ["the", "launch", "needs", "a", "clear", "owner,", "a", "date", "and", "a", "checklist."];
    for w in words.iter().cycle() {
        if text.len() + w.len() + 1 > bytes {
            break;
        }
        text.push_str(w);
        text.push(' ');
    }
    while text.len() < bytes {
        text.push('.');
    }
    text
}

async fn scalar(pool: &sqlx::PgPool, sql: &str, run: uuid::Uuid) -> Result<i64, BoxError> {
    Ok(sqlx::query_scalar::<_, Option<i64>>(sql).bind(run).fetch_one(pool).await?.unwrap_or(0))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.turns == 0 || args.turns > 1000 {
        return Err("--turns is 1 to 1,000 (a workflow's maxIterations)".into());
    }
    let url = database_url(args.database_url.as_deref())?;
    let tracon = resolve_binary(&args.tracon)?;
    let mock = MockServer::start(MockConfig::default()).await?;
    let (a, b) = (answer("cp-a", args.message_bytes), answer("cp-b", args.message_bytes));
    mock.script("cp-a", vec![MockTurn::text(&a).with_usage(10, 10)]);
    mock.script("cp-b", vec![MockTurn::text(&b).with_usage(10, 10)]);
    let schema = format!("bench_cp_{}", std::process::id());
    let env = [("DATABASE_URL", url.as_str()), ("Tracon__PostgreSql__SchemaName", schema.as_str())];
    let server = Server::start(&tracon, &mock.base_url(), &env).await?;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(600)).build()?;
    let post = |path: &str, body: Value| client.post(format!("{}{path}", server.base)).json(&body).send();
    for agent in ["cp-a", "cp-b"] {
        let def =
            json!({"name": agent, "instructions": "Add one step.", "model": {"provider": "openai", "model": agent}});
        let r = post("/api/agents", def).await?;
        if r.status() != 201 {
            return Err(format!("creating {agent}: {} {}", r.status(), r.text().await?).into());
        }
    }
    let workflow = json!({"name": "launch-chat", "kind": "GroupChat", "agentNames": ["cp-a", "cp-b"], "maxIterations": args.turns});
    let r = post("/api/workflows", workflow).await?;
    if r.status() != 201 {
        return Err(format!("creating the workflow: {} {}", r.status(), r.text().await?).into());
    }

    let started = Instant::now();
    let reply = client
        .post(format!("{}/api/workflows/launch-chat/run", server.base))
        .header("Accept", "application/json")
        .json(&json!({"message": INPUT}))
        .send()
        .await?;
    let status = reply.status();
    let body: Value = reply.json().await?;
    let wall = started.elapsed();
    if status != 200 || body["status"] != "Completed" {
        return Err(format!("the workflow did not complete: {status} {body}").into());
    }
    let root: uuid::Uuid = body["runId"].as_str().ok_or("no runId")?.parse()?;

    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    let pool = sqlx::PgPool::connect_with(options.options([("search_path", schema.as_str())])).await?;
    let q = |sql: &'static str| scalar(&pool, sql, root);
    let checkpoints = q("SELECT count(*) FROM workflow_checkpoints WHERE run_id = $1").await?;
    let state_bytes = q("SELECT sum(octet_length(state))::bigint FROM workflow_checkpoints WHERE run_id = $1").await?;
    let row_bytes = q("SELECT sum(pg_column_size(c.*))::bigint FROM workflow_checkpoints c WHERE run_id = $1").await?;
    let checkpoint_txns =
        q("SELECT count(DISTINCT xmin::text)::bigint FROM workflow_checkpoints WHERE run_id = $1").await?;
    let log_events = q("SELECT count(*) FROM run_events WHERE run_id = $1").await?;
    let log_txns = q("SELECT count(DISTINCT xmin::text)::bigint FROM run_events WHERE run_id = $1").await?;
    let steps = q("SELECT count(*) FROM run_events WHERE run_id = $1 AND event_type = 'WorkflowCheckpointed'").await?;
    let nodes = q("SELECT count(*) FROM runs WHERE root_run_id = $1").await?;
    let node_event_bytes = q("SELECT sum(octet_length(e.payload))::bigint FROM run_events e \
         JOIN runs r ON r.tenant_id = e.tenant_id AND r.id = e.run_id WHERE r.root_run_id = $1")
    .await?;
    let node_input_bytes = q("SELECT sum(octet_length(input))::bigint FROM runs WHERE root_run_id = $1").await?;

    let raw = INPUT.len() as i64 + i64::from(args.turns) * args.message_bytes as i64;
    // The log's writes at the run's start (WorkflowStarted) and end (the terminal event with
    // the run row's close) are per run, not per super-step.
    let per_run_log_writes = 2;
    let per_step_log = (log_txns - per_run_log_writes).max(0) as f64 / steps.max(1) as f64;
    let per_step_checkpoints = checkpoint_txns as f64 / steps.max(1) as f64;
    let per_step = per_step_log + per_step_checkpoints;
    let ratio = state_bytes as f64 / raw as f64;

    println!("== Workflow checkpoints on Postgres: a {}-turn GroupChat ==", args.turns);
    println!(
        "command: cargo run --release -p tracon-tests --bin bench-checkpoints -- --turns {} --message-bytes {}",
        args.turns, args.message_bytes
    );
    println!("run {root}: {} super-steps, {nodes} agent runs, {:.1} s", steps, wall.as_secs_f64());
    println!();
    println!("writes per super-step (the workflow layer):");
    println!(
        "  root log:     {per_step_log:.2}  ({log_txns} writes for {log_events} events; {per_run_log_writes} of them per run)"
    );
    println!("  checkpoints:  {per_step_checkpoints:.2}  ({checkpoints} rows, {checkpoint_txns} statements)");
    println!("  together:     {per_step:.2}  (target ≤ 2: {})", if per_step <= 2.0 { "met" } else { "NOT MET" });
    println!();
    println!("bytes:");
    println!("  raw messages:       {raw:>10}  (input + {} answers of {} B)", args.turns, args.message_bytes);
    println!(
        "  checkpoint state:   {state_bytes:>10}  = {ratio:.3} × raw  (target ≤ 1.2: {})",
        if ratio <= 1.2 { "met" } else { "NOT MET" }
    );
    println!("  checkpoint rows:    {row_bytes:>10}  (with the columns beside the state)");
    println!("  per checkpoint:     {:>10.0}", state_bytes as f64 / checkpoints.max(1) as f64);
    println!();
    println!("the agents' own runs (for comparison, not checkpoint cost):");
    println!("  their event payloads: {node_event_bytes:>10}");
    println!("  their recorded inputs: {node_input_bytes:>9}  (each turn's input is the transcript so far)");
    let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).execute(&pool).await;
    drop(server);
    Ok(())
}
