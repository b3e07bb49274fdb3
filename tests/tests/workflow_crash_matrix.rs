//! The crash matrix of workflows: the real server (`tracon-probe`, with its counting
//! `probe-count` function node) on Postgres with the mock model server, 32 queued workflow runs
//! of four kinds — `Sequential` with a function node, `Concurrent`, `Handoff`, `GroupChat` —
//! the server `kill -9`'d at pseudo-random moments three times and restarted on the same
//! database.
//!
//! What must hold afterwards: every run's chain (the run, then the run that continued it after
//! a crash, …) ends `Completed` with the answer of an uninterrupted run; no node whose
//! completion a checkpoint holds ran again (each `(run, executor, super-step)` completes once
//! across its chain); every event log is gapless and ends with its terminal event. The figures
//! are printed (`--nocapture`) for the closing note.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

mod support;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use support::{CrashServer, Lcg, count};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

/// The workflows and the answer each gives when nothing interrupts it.
fn workflows() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({"name": "seq", "kind": "Sequential", "nodes": [
                {"name": "w-writer", "kind": "Agent"}, {"name": "probe-count", "kind": "Function"},
                {"name": "w-reviewer", "kind": "Agent"}]}),
            "reviewed",
        ),
        (json!({"name": "conc", "kind": "Concurrent", "agentNames": ["w-a", "w-b"]}), "[w-a]\nsaid a\n\n[w-b]\nsaid b"),
        (json!({"name": "hand", "kind": "Handoff", "agentNames": ["w-front", "w-back"]}), "answered at the back"),
        (json!({"name": "chat", "kind": "GroupChat", "agentNames": ["w-a", "w-b"], "maxIterations": 4}), "said b"),
    ]
}

#[tokio::test]
async fn workflow_runs_killed_three_times_all_complete_from_their_checkpoints_and_no_completed_node_runs_again() {
    const RUNS: usize = 32;
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let slow = |text: &str, ms: u64| MockTurn::text(text).with_usage(3, 1).with_delay_ms(ms);
    mock.script("w-writer", vec![slow("drafted", 300)]);
    mock.script("w-reviewer", vec![slow("reviewed", 300)]);
    mock.script("w-a", vec![slow("said a", 250)]);
    mock.script("w-b", vec![slow("said b", 350)]);
    mock.script(
        "w-front",
        vec![MockTurn::tool_call("handoff_to_w-back", json!({})).with_delay_ms(200), slow("passing you on", 100)],
    );
    mock.script("w-back", vec![slow("answered at the back", 300)]);
    let mut crash = CrashServer::start(&mock, "wcm").await;
    let schema = crash.schema.clone();
    let client = reqwest::Client::new();
    for agent in ["w-writer", "w-reviewer", "w-a", "w-b", "w-front", "w-back"] {
        let def =
            json!({"name": agent, "instructions": "Do your part.", "model": {"provider": "openai", "model": agent}});
        let created = client.post(crash.server.url("/api/agents")).json(&def).send().await.unwrap();
        assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    }
    let flows = workflows();
    for (def, _) in &flows {
        let created = client.post(crash.server.url("/api/workflows")).json(def).send().await.unwrap();
        assert_eq!(created.status(), 201, "{}", created.text().await.unwrap());
    }
    let mut runs = Vec::new();
    for i in 0..RUNS {
        let (def, expected) = &flows[i % flows.len()];
        let name = def["name"].as_str().unwrap();
        let accepted = client
            .post(crash.server.url(&format!("/api/workflows/{name}/run")))
            .header("Prefer", "respond-async")
            .json(&json!({"message": format!("task {i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(accepted.status(), 202, "{}", accepted.text().await.unwrap());
        let body: Value = accepted.json().await.unwrap();
        runs.push((name, *expected, body["runId"].as_str().unwrap().to_owned()));
    }

    // Three kills at pseudo-random moments while the work runs, each followed by a restart.
    let pool = sqlx::PgPool::connect(&crash.url).await.unwrap();
    let checkpoints = format!("SELECT count(*) FROM {schema}.workflow_checkpoints");
    let kills = crash.kill_three_times(&mut Lcg(20_261_202), (700, 1_500), || count(&pool, &checkpoints)).await;
    crash.until_all_ended(&pool).await;
    let server = &crash.server;

    // Each run's chain, to the run that ended it: all Completed, with the uninterrupted answer.
    let mut continued = 0;
    let mut completed_twice = 0;
    let mut completions = 0;
    let mut function_runs = 0;
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, expected, first) in &runs {
        let (chain, last) = support::run_chain(&client, server, first).await;
        assert_eq!(last["status"], "Completed", "{name} run {first} ended otherwise: {last}");
        continued += chain.len() - 1;
        *by_kind.entry(name).or_default() += 1;
        // Every node completion across the chain, by (executor, super-step): once each.
        let mut done: BTreeMap<(String, u64), usize> = BTreeMap::new();
        let mut answer = None;
        for run in &chain {
            let rows: Vec<(String, String)> = sqlx::query_as(&format!(
                "SELECT event_type, convert_from(substring(payload from 2), 'UTF8') FROM {schema}.run_events \
                 WHERE run_id = $1::uuid ORDER BY sequence"
            ))
            .bind(run)
            .fetch_all(&pool)
            .await
            .unwrap();
            for (kind, payload) in rows {
                let event: Value = serde_json::from_str(&payload).unwrap();
                match kind.as_str() {
                    "ExecutorCompleted" => {
                        let key =
                            (event["executorId"].as_str().unwrap().to_owned(), event["superStep"].as_u64().unwrap());
                        *done.entry(key).or_default() += 1;
                    }
                    "RunCompleted" => answer = event["text"].as_str().map(str::to_owned),
                    _ => {}
                }
            }
        }
        completions += done.len();
        completed_twice += done.values().filter(|n| **n > 1).count();
        assert_eq!(answer.as_deref(), Some(*expected), "{name} run {first}: {done:?}");
        if *name == "seq" {
            let keys: Vec<String> = chain.iter().map(|r| format!("{r}:probe-count")).collect();
            let n: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {schema}.probe_effects WHERE idempotency_key = ANY($1)"
            ))
            .bind(&keys)
            .fetch_one(&pool)
            .await
            .unwrap();
            assert!(n >= 1, "the function node of {first} never ran");
            function_runs += n;
        }
    }

    // Every run's event log, roots, continuations and nodes alike: gapless, terminal event last.
    let (logs, gaps) = support::event_logs(&pool, &schema, &["RunCompleted", "RunFailed", "RunCanceled"]).await;
    let checkpoints: i64 = count(&pool, &checkpoints).await;

    println!(
        "workflow crash matrix: {RUNS} queued workflow runs {by_kind:?}, kills after {kills:?} (wait, checkpoints so far)"
    );
    println!("  all completed; continuations after a crash: {continued}; checkpoints written: {checkpoints}");
    println!("  node completions: {completions}; completed nodes run again: {completed_twice}");
    println!("  function node executions for {} Sequential runs: {function_runs}", RUNS / 4);
    println!("  event logs: {logs} runs, {gaps} with a gap or duplicate");
    assert_eq!(completed_twice, 0, "a node whose completion was recorded ran again");
    assert_eq!(gaps, 0, "an event log has a gap or a duplicate");
    assert!(continued > 0, "the kills interrupted nothing: the test proved nothing");
}
