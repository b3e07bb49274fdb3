//! Model calls that survive a failing provider, against the real `tracon` binary on Postgres
//! and the mock model server injecting faults ([`MockChaos`]: `429` with `Retry-After`, `500`,
//! a connection broken before the first event, a stall past the model timeout).
//!
//! - **Chaos with a fallback chain**: 30 % of the primary model's calls fail; 500 runs of an
//!   agent whose binding falls back to a second provider all complete, and the runs record
//!   their retries, their moves to the fallback link and which link answered.
//! - **Chaos without one**: the same faults, no retries, no chain: every run the mock failed
//!   fails with the class the spec names for its fault (`provider_rate_limited`,
//!   `provider_unavailable`, `timeout`), one for one.
//! - **One breaker for four processes**: four servers on one database; after five failures
//!   the breaker opens for all of them, at least 99 % of the calls that follow never reach the
//!   failing provider, and once the break is over one probe's success closes it for everyone.
//!
//! The figures are printed (`--nocapture`) for the closing note.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use support::{Tracon, count, create, database_url, parse_frames};
use tracon_tests::mock::{Fault, MockChaos, MockConfig, MockServer, MockTurn};

/// A server on Postgres in the schema `schema`, its `openai` provider and a compatible
/// provider `backup` both the mock; `extra` on top.
async fn start(mock: &MockServer, schema: &str, extra: &[(&str, &str)]) -> Tracon {
    let url = database_url();
    let endpoint = format!("{}/v1", mock.base_url());
    let mut env = vec![
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema),
        ("OPENAI_API_KEY", "test-openai-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__Compatible__backup__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__Compatible__backup__ApiKey", "test-backup-key"),
        // A stalled call is given up after a second.
        ("Tracon__Providers__RequestTimeoutSeconds", "1"),
        ("Tracon__ModelRetry__InitialDelayMilliseconds", "20"),
    ];
    env.extend_from_slice(extra);
    Tracon::start(&env).await
}

async fn pool(schema: &str) -> sqlx::PgPool {
    let search_path = format!("SET search_path TO {schema}");
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .after_connect(move |conn, _| {
            let search_path = search_path.clone();
            Box::pin(async move {
                sqlx::Executor::execute(conn, search_path.as_str()).await?;
                Ok(())
            })
        })
        .connect(&database_url())
        .await
        .unwrap()
}

/// Runs `agent` `n` times, `concurrency` at a time, over `servers` in turn: each run's last
/// frame (`done` `{status, text, …}` or `error` `{status, errorType, message, …}`).
async fn run_many(servers: &[&Tracon], agent: &str, n: usize, concurrency: usize) -> Vec<Value> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    futures::stream::iter(0..n)
        .map(|i| {
            let (client, server) = (client.clone(), servers[i % servers.len()]);
            async move {
                let res = client
                    .post(server.url(&format!("/api/agents/{agent}/run")))
                    .json(&json!({"message": format!("question {i}")}))
                    .send()
                    .await
                    .unwrap();
                let frames = parse_frames(&res.text().await.unwrap());
                frames.last().map(|f| f.data.clone()).unwrap_or(Value::Null)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await
}

fn by_status(answers: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for a in answers {
        let key = match a["status"].as_str() {
            Some("Failed") => format!("Failed {}", a["errorType"].as_str().unwrap_or("?")),
            Some(s) => s.to_owned(),
            None => format!("no status: {a}"),
        };
        *counts.entry(key).or_default() += 1;
    }
    counts
}

fn chaos(rate: f64) -> MockChaos {
    MockChaos { rate, seed: 20_261_204, models: vec!["flaky-model".into()], retry_after_seconds: Some(1) }
}

#[tokio::test]
async fn with_a_fallback_chain_500_runs_against_a_provider_failing_30_percent_all_complete() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script("flaky-model", vec![MockTurn::text("from the primary").with_usage(5, 3)]);
    mock.script("steady-model", vec![MockTurn::text("from the fallback").with_usage(5, 3)]);
    let schema = format!("resil_chain_{:x}", std::process::id());
    let server = start(&mock, &schema, &[("Tracon__ModelRetry__MaxRetries", "2")]).await;
    create(
        &server,
        "/api/agents",
        json!({"name": "resilient", "model": {"provider": "openai", "model": "flaky-model",
            "fallbacks": [{"provider": "backup", "model": "steady-model"}]}}),
    )
    .await;
    mock.chaos(Some(chaos(0.3)));

    let answers = run_many(&[&server], "resilient", 500, 16).await;
    let report = mock.chaos_report();
    let statuses = by_status(&answers);
    println!("chaos with a chain: {statuses:?}; the mock: {report:?}");
    assert_eq!(statuses, BTreeMap::from([("Completed".to_owned(), 500)]), "every run completes");
    let faults: u64 = report.faults.values().sum();
    assert!(faults >= 100, "the primary did fail often: {report:?}");

    let db = pool(&schema).await;
    let retried = count(&db, "SELECT count(*) FROM run_events WHERE event_type = 'ModelRetried'").await;
    let fell_back = count(&db, "SELECT count(*) FROM run_events WHERE event_type = 'ModelFallback'").await;
    let by_backup =
        count(&db, "SELECT count(*) FROM runs WHERE model_provider = 'backup' AND model = 'steady-model'").await;
    let with_fallback =
        count(&db, "SELECT count(DISTINCT run_id) FROM run_events WHERE event_type = 'ModelFallback'").await;
    let answered: usize = answers.iter().filter(|a| a["text"] == "from the fallback").count();
    println!(
        "retries recorded: {retried}; moves to the fallback: {fell_back}; runs the fallback answered: {by_backup}"
    );
    assert!(retried > 0 && fell_back > 0, "both recorded: {retried} retries, {fell_back} moves");
    // A run the fallback answered says so, and moved to it once (one model call a run).
    assert_eq!((by_backup, with_fallback, fell_back), (answered as i64, answered as i64, answered as i64));
    // Every failure of the primary is in a run's log: the retry that followed it, or the move
    // to the fallback (moves past an open breaker come on top).
    assert!(retried + fell_back >= faults as i64, "{retried} + {fell_back} events for {faults} faults");
}

#[tokio::test]
async fn without_a_chain_or_retries_each_failed_run_has_the_class_of_its_fault() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script("flaky-model", vec![MockTurn::text("fine").with_usage(5, 3)]);
    let schema = format!("resil_bare_{:x}", std::process::id());
    let server =
        start(&mock, &schema, &[("Tracon__ModelRetry__MaxRetries", "0"), ("Tracon__CircuitBreaker__Enabled", "false")])
            .await;
    create(&server, "/api/agents", json!({"name": "bare", "model": {"provider": "openai", "model": "flaky-model"}}))
        .await;
    mock.chaos(Some(chaos(0.3)));

    let answers = run_many(&[&server], "bare", 300, 16).await;
    let report = mock.chaos_report();
    let statuses = by_status(&answers);
    println!("chaos without a chain: {statuses:?}; the mock: {report:?}");
    let fault = |f: Fault| report.faults.get(&f).copied().unwrap_or(0) as usize;
    let mut expected = BTreeMap::new();
    for (class, n) in [
        ("Failed provider_rate_limited", fault(Fault::RateLimited)),
        ("Failed provider_unavailable", fault(Fault::ServerError) + fault(Fault::Reset)),
        ("Failed timeout", fault(Fault::Stall)),
        ("Completed", 300 - report.faults.values().sum::<u64>() as usize),
    ] {
        if n > 0 {
            expected.insert(class.to_owned(), n);
        }
    }
    assert_eq!(report.requests, 300, "one model call a run, none retried");
    assert_eq!(statuses, expected, "each fault's run fails with the spec's class for it");
    for a in answers.iter().filter(|a| a["status"] == "Failed") {
        let message = a["message"].as_str().unwrap();
        assert!(!message.contains("mock"), "the provider's own text never reaches the caller: {message}");
    }
}

#[tokio::test]
async fn one_breaker_for_four_processes_opens_after_five_failures_and_one_probe_closes_it() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script("down-model", vec![MockTurn::status(500)]);
    let schema = format!("resil_breaker_{:x}", std::process::id());
    let settings = [
        ("Tracon__ModelRetry__MaxRetries", "0"),
        ("Tracon__CircuitBreaker__FailureThreshold", "5"),
        ("Tracon__CircuitBreaker__BreakDurationSeconds", "4"),
    ];
    // The first applies the migrations; the others join the same schema.
    let first = start(&mock, &schema, &settings).await;
    create(&first, "/api/agents", json!({"name": "fragile", "model": {"provider": "openai", "model": "down-model"}}))
        .await;
    let mut rest = Vec::new();
    for _ in 0..3 {
        rest.push(start(&mock, &schema, &settings).await);
    }
    let servers: Vec<&Tracon> = std::iter::once(&first).chain(rest.iter()).collect();
    let db = pool(&schema).await;
    let opened = "SELECT count(*) FROM model_breakers WHERE provider = 'openai' AND opened_at IS NOT NULL";

    // Until it opens: every call reaches the failing provider.
    let mut before = 0;
    while count(&db, opened).await == 0 {
        run_many(&servers, "fragile", 4, 4).await;
        before += 4;
        assert!(before <= 40, "the breaker never opened");
    }
    let reached_before = mock.requests("down-model").len();
    assert!(reached_before >= 5, "it opened after {reached_before} failures");

    // Open: the calls that follow skip the provider, on every process.
    let answers = run_many(&servers, "fragile", 1_000, 4).await;
    let reached = mock.requests("down-model").len() - reached_before;
    let skipped = 1_000 - reached;
    println!(
        "breaker: opened after {reached_before} calls reached the provider; of the next 1000, {skipped} skipped it ({reached} reached it)"
    );
    assert!(skipped >= 990, "at least 99 % skip the failing provider: {skipped}");
    assert!(answers.iter().all(|a| a["status"] == "Failed"));

    // The provider recovers; once the break is over one probe goes out, succeeds, and the
    // breaker closes for every process.
    mock.script("down-model", vec![MockTurn::text("back").with_usage(1, 1)]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let answers = run_many(&servers, "fragile", 8, 1).await;
    assert!(answers.iter().all(|a| a["status"] == "Completed"), "{answers:?}");
    let closed = count(
        &db,
        "SELECT count(*) FROM model_breakers WHERE provider = 'openai' AND opened_at IS NULL AND consecutive_failures = 0",
    )
    .await;
    assert_eq!(closed, 1);
}
