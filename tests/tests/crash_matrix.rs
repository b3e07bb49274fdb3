//! The crash matrix of run continuation: the real server (`tracon-probe`, the `tracon` binary
//! plus tools that count what they did) on Postgres with the mock model server, 50 queued runs
//! of 3–6 tool calls each in a mix of `Read`, `Write` and `External` tools, the server
//! `kill -9`'d at pseudo-random moments three times and restarted on the same database.
//!
//! What must hold afterwards: every run ends `Completed`, except those whose unknown-outcome
//! `External` call blocked continuation (each with `continuation_blocked` naming the tool);
//! no call whose ending was recorded ran again; no non-repeatable `External` call ran twice;
//! every run's event log is gapless and ends with its terminal event. The figures are printed
//! (`--nocapture`) for the closing note.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

mod support;

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use support::{CrashServer, Lcg};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

fn call(tool: &str, ms: u64) -> (String, Value) {
    (tool.to_owned(), json!({ "ms": ms }))
}

/// A model step's tool calls: `(tool, arguments)`.
type Step = Vec<(String, Value)>;

/// The four shapes of work, one model each: the steps' tool calls, then an answer.
fn shapes() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        ("m-rw", vec![vec![call("probe_read", 200), call("probe_write", 200)], vec![call("probe_read", 150)]]),
        (
            "m-ext",
            vec![
                vec![call("probe_read", 150), call("probe_read", 150), call("probe_write", 200)],
                vec![call("probe_external", 250)],
            ],
        ),
        (
            "m-wide",
            vec![
                vec![call("probe_write", 150)],
                vec![call("probe_read", 150), call("probe_write", 150)],
                vec![call("probe_read", 100), call("probe_read", 100), call("probe_write", 150)],
            ],
        ),
        (
            "m-safe",
            vec![
                vec![call("probe_safe", 250), call("probe_read", 150)],
                vec![call("probe_external", 200), call("probe_write", 150)],
            ],
        ),
    ]
}

fn script(steps: &[Step]) -> Vec<MockTurn> {
    let mut turns: Vec<MockTurn> = steps
        .iter()
        .map(|calls| {
            let mut turn = MockTurn::tool_call(&calls[0].0, calls[0].1.clone());
            for (tool, args) in &calls[1..] {
                turn = turn.and_tool_call(tool, args.clone());
            }
            turn
        })
        .collect();
    turns.push(MockTurn::text("Done.").with_usage(3, 1));
    turns
}

#[tokio::test]
async fn fifty_runs_killed_three_times_end_completed_or_blocked_and_nothing_completed_runs_twice() {
    const RUNS: usize = 50;
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    for (model, steps) in shapes() {
        mock.script(model, script(&steps));
    }
    let mut crash = CrashServer::start(&mock, "cm").await;
    let schema = crash.schema.clone();
    let client = reqwest::Client::new();
    let models: Vec<&str> = shapes().iter().map(|(m, _)| *m).collect();
    for model in &models {
        let agent = json!({
            "name": model, "instructions": "Do the work.",
            "model": {"provider": "openai", "model": model},
            "toolNames": ["probe_read", "probe_write", "probe_external", "probe_safe"],
        });
        let created = client.post(crash.server.url("/api/agents")).json(&agent).send().await.unwrap();
        assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    }
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let model = models[i % models.len()];
        runs.push((model, support::queue_run(&client, &crash.server, model, &format!("job-{i}")).await));
    }

    // Three kills at pseudo-random moments while the work runs, each followed by a restart.
    let pool = sqlx::PgPool::connect(&crash.url).await.unwrap();
    let effects = format!("SELECT count(*) FROM {schema}.probe_effects");
    let kills = crash.kill_three_times(&mut Lcg(20_261_201), (800, 1_700), || support::count(&pool, &effects)).await;
    crash.until_all_ended(&pool).await;
    let server = &crash.server;

    // Each queued run's chain, to the run that ended it.
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut continued = 0;
    let mut chains: Vec<Vec<String>> = Vec::new();
    for (model, first) in &runs {
        let (chain, run) = support::run_chain(&client, server, first).await;
        let ended = match (run["status"].as_str().unwrap(), run["error"]["errorType"].as_str()) {
            ("Completed", _) => "Completed".to_owned(),
            ("Failed", Some("continuation_blocked")) => {
                let message = run["error"]["message"].as_str().unwrap();
                assert!(message.contains("'probe_external'"), "names the tool that blocked: {message}");
                assert!(*model == "m-ext" || *model == "m-safe", "only a shape with External calls blocks: {run}");
                "Failed (continuation_blocked, probe_external)".to_owned()
            }
            _ => panic!("run {first} ended otherwise: {run}"),
        };
        *outcomes.entry(ended).or_default() += 1;
        continued += chain.len() - 1;
        chains.push(chain);
    }

    // The ledger and the effects: per call (idempotency key), how many times it ran, and in
    // which runs of its chain it has a record, ended or left started.
    let executions: HashMap<String, (String, i64)> = sqlx::query_as::<_, (String, String, i64)>(&format!(
        "SELECT idempotency_key, min(tool), count(*) FROM {schema}.probe_effects GROUP BY idempotency_key"
    ))
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(k, t, n)| (k, (t, n)))
    .collect();
    let records: Vec<(String, String, String)> = sqlx::query_as(&format!(
        "SELECT run_id::text, call_id, status FROM {schema}.tool_calls ORDER BY run_id, position"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    let mut completed_twice = 0;
    let mut external_twice = 0;
    let mut reruns = 0;
    let mut calls_total = 0;
    for chain in &chains {
        let origin = &chain[0];
        // call id → the statuses of its records, in chain order.
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for run in chain {
            for (_, call, status) in records.iter().filter(|(r, _, _)| r == run) {
                seen.entry(call.clone()).or_default().push(status.clone());
            }
        }
        for (call, statuses) in &seen {
            calls_total += 1;
            if let Some(at) = statuses.iter().position(|s| s != "Started") {
                assert_eq!(
                    at,
                    statuses.len() - 1,
                    "call {call} of {origin} has a record after its ending: {statuses:?}"
                );
            }
            let ran = executions
                .iter()
                .filter(|(key, _)| key.starts_with(&format!("{origin}:")) && key.ends_with(&format!(":{call}")))
                .map(|(_, (tool, n))| (tool.clone(), *n))
                .next();
            let Some((tool, n)) = ran else { continue };
            if n > 1 {
                reruns += 1;
                if statuses.first().is_some_and(|s| s != "Started") {
                    completed_twice += 1;
                }
                if tool == "probe_external" {
                    external_twice += 1;
                }
            }
            assert!(n as usize <= statuses.len(), "call {call} of {origin} ran {n} times in {} runs", statuses.len());
        }
    }

    // Every run's event log, original and continuation alike: gapless, terminal event last.
    let (logs, gaps) = support::event_logs(&pool, &schema, &["RunCompleted", "RunFailed"]).await;

    println!("crash matrix: {RUNS} queued runs, kills after {kills:?} (wait, effects so far)");
    println!("  outcomes: {outcomes:?}");
    println!("  continuations: {continued}; calls: {calls_total}; calls that ran again (unknown outcome): {reruns}");
    println!("  completed calls run twice: {completed_twice}; External calls run twice: {external_twice}");
    println!("  event logs: {logs} runs, {gaps} with a gap or duplicate");
    assert_eq!(completed_twice, 0, "a call whose ending was recorded ran again");
    assert_eq!(external_twice, 0, "a non-repeatable External call ran twice");
    assert_eq!(gaps, 0, "an event log has a gap or a duplicate");
    assert_eq!(outcomes.values().sum::<usize>(), RUNS);
    assert!(continued > 0, "the kills interrupted nothing: the test proved nothing");
}
