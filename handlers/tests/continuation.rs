//! The step ledger and run continuation through the router, with a consumer draining the job
//! queue in process. A crash is what the store holds after one: a queued run started by an
//! attempt whose process went away (its heartbeat old), with the ledger that attempt wrote.
//! Every tool body counts its executions by the idempotency key it was given.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::Manual;
use tracon_core::definition::AgentDefinition;
use tracon_core::events::ToolCallStatus;
use tracon_core::failure::{ErrorClass, RunFailure};
use tracon_core::jobs::{JobHandler, JobRunner, JobSettings};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ToolCall};
use tracon_core::names::{RunId, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::runs::queued::QueuedRuns;
use tracon_core::runs::store::{ModelStep, RunEnd, RunRecord, RunStatus, ToolCallRecord};
use tracon_core::runs::tree::AgentGraphSettings;
use tracon_core::runtime::{RunQueue, Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_core::tools::effect::ToolEffect;
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_handlers::{AppState, HttpSettings};

/// Executions per idempotency key, and the model's calls.
#[derive(Default)]
struct Counts {
    bodies: Mutex<HashMap<String, u32>>,
    model_calls: Mutex<u32>,
}

impl Counts {
    fn of(&self, key: &str) -> u32 {
        self.bodies.lock().unwrap().get(key).copied().unwrap_or(0)
    }
    fn total(&self) -> u32 {
        self.bodies.lock().unwrap().values().sum()
    }
}

struct Harness {
    app: Router,
    runner: JobRunner,
    runtime: Arc<Runtime>,
    counts: Arc<Counts>,
}

fn counting(
    name: &str,
    effect: ToolEffect,
    safe_to_repeat: bool,
    counts: &Arc<Counts>,
) -> Result<ToolRegistration, tracon_core::tools::RegistrationError> {
    let counts = counts.clone();
    ToolRegistration::new(
        name,
        "Counts its executions.",
        json!({"type": "object"}),
        tool_fn(move |_, ctx| {
            let counts = counts.clone();
            async move {
                *counts.bodies.lock().unwrap().entry(ctx.idempotency_key.clone()).or_default() += 1;
                Ok(ToolOutput::from(format!("done {}", ctx.call_id)))
            }
        }),
    )
    .map(|r| r.effect(effect).safe_to_repeat(safe_to_repeat))
}

/// The model asks, in its first step, for one call of each tool named in the message
/// (`"lookup ship"`), then answers with the results it was given.
fn harness(continuation: bool) -> Harness {
    harness_with(RuntimeSettings { continuation, ..RuntimeSettings::default() })
}

/// The model of [`harness`]; a message `steps N` instead asks for one `lookup` per step for
/// `N` steps, then answers.
fn harness_with(settings: RuntimeSettings) -> Harness {
    let counts = Arc::new(Counts::default());
    let seen = counts.clone();
    let script = ScriptedProvider::from_fn("script", move |req| {
        *seen.model_calls.lock().unwrap() += 1;
        let asked = req.last_user_text();
        // The looping agent: "draft n" on its n-th iteration, done from the third.
        if req.system.as_deref() == Some("LOOP") {
            let n = req.messages.iter().filter(|m| matches!(m, Message::User { .. })).count();
            let done = if n >= 3 { "ALL DONE" } else { "working" };
            return ScriptedTurn::text(&format!("draft {n}: {done}")).with_usage(2, 1);
        }
        if let Some(steps) = asked.and_then(|a| a.strip_prefix("steps ")) {
            let done = req.messages.iter().filter(|m| matches!(m, Message::Assistant { .. })).count();
            return if done < steps.parse::<usize>().unwrap() {
                ScriptedTurn::tool_call("lookup", json!({})).with_usage(2, 1)
            } else {
                ScriptedTurn::text(&format!("finished after {done} steps")).with_usage(2, 1)
            };
        }
        if let Some(Message::Tool { .. }) = req.messages.last() {
            let results: Vec<String> = req
                .messages
                .iter()
                .filter_map(|m| match m {
                    Message::Tool { content, .. } => Some(content.clone()),
                    _ => None,
                })
                .collect();
            return ScriptedTurn::text(&format!("answered with {}", results.join(", ")));
        }
        let asked = req.last_user_text();
        let mut turn = ScriptedTurn::default();
        for tool in asked.unwrap_or_default().split_whitespace() {
            turn = turn.and_tool_call(tool, json!({}));
        }
        if turn.tool_calls.is_empty() { ScriptedTurn::text("nothing to do") } else { turn }
    });
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .settings(settings)
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_tool(counting("lookup", ToolEffect::Read, false, &counts))
        .add_tool(counting("ship", ToolEffect::External, false, &counts))
        .add_tool(counting("charge", ToolEffect::External, true, &counts))
        .add_agent(AgentDefinition::new("worker", "script", "m").with_tools(&["lookup", "ship", "charge"]))
        .add_agent(AgentDefinition {
            harness: Some(tracon_core::definition::HarnessSettings {
                maximum_iterations_per_request: None,
                r#loop: Some(tracon_core::definition::LoopSettings {
                    criteria: vec![tracon_core::definition::LoopCriterion {
                        kind: "completionMarker".into(),
                        marker: Some("ALL DONE".into()),
                        modes: None,
                        judge_criteria: None,
                        judge_instructions: None,
                    }],
                    max_iterations: None,
                }),
            }),
            ..AgentDefinition::new("looper", "script", "m").with_instructions("LOOP")
        })
        .build()
        .unwrap();
    let runtime = Arc::new(runtime);
    let handlers: Vec<Arc<dyn JobHandler>> = vec![Arc::new(QueuedRuns { runtime: runtime.clone() })];
    let settings = JobSettings { retry_base: Duration::ZERO, ..JobSettings::default() };
    let runner =
        JobRunner::new(runtime.stores.jobs.clone(), handlers, runtime.platform.clock.clone(), settings, "test");
    runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 5 });
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    Harness { app: tracon_handlers::router(state), runner, runtime, counts }
}

async fn get(h: &Harness, path: &str) -> Value {
    let reply = support::call(Method::GET, path).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}");
    reply.json()
}

async fn queue(h: &Harness, message: &str) -> (RunId, String) {
    let reply = support::call(Method::POST, "/api/agents/worker/run")
        .header_opt("Prefer", Some("respond-async"))
        .json(Some(json!({"message": message})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let accepted = reply.json();
    (RunId::parse(accepted["runId"].as_str().unwrap()).unwrap(), accepted["jobId"].as_str().unwrap().to_owned())
}

fn call(id: &str, tool: &str) -> ToolCall {
    ToolCall { id: id.into(), name: tool.into(), arguments: "{}".into() }
}

fn record(
    run: RunId,
    c: &ToolCall,
    effect: ToolEffect,
    status: ToolCallStatus,
    result: Option<&str>,
) -> ToolCallRecord {
    let opened = ToolCallRecord::opened(run, c.clone(), Some(effect), status, chrono::Utc::now());
    ToolCallRecord { result: result.map(str::to_owned), ..opened }
}

/// What the store holds after an attempt started `run`, wrote its first step asking for
/// `calls`, finished the `ended` ones and died: the heartbeat ten minutes old.
async fn crashed(h: &Harness, run: RunId, calls: &[(ToolCall, ToolEffect)], ended: &[&str]) {
    let tenant = TenantId::default_tenant();
    let runs = &h.runtime.stores.runs;
    let long_ago = chrono::Utc::now() - chrono::Duration::minutes(10);
    assert_eq!(runs.start_queued(&tenant, run, long_ago).await.unwrap(), Some(false));
    let step = ModelStep {
        step: 1,
        message: Message::Assistant {
            text: None,
            tool_calls: calls.iter().map(|(c, _)| c.clone()).collect(),
            reasoning: Vec::new(),
        },
        recorded_at: long_ago,
    };
    let starts: Vec<ToolCallRecord> =
        calls.iter().map(|(c, e)| record(run, c, *e, ToolCallStatus::Started, None)).collect();
    assert!(runs.begin_step(&tenant, run, Some(&step), &starts).await.unwrap());
    for (c, e) in calls.iter().filter(|(c, _)| ended.contains(&c.id.as_str())) {
        let done = format!("done {}", c.id);
        runs.record_tool_call(&tenant, &record(run, c, *e, ToolCallStatus::Succeeded, Some(&done))).await.unwrap();
    }
    runs.heartbeat(&tenant, run, long_ago).await.unwrap();
}

#[tokio::test]
async fn a_queued_run_writes_its_step_ledger_and_gives_each_call_a_key() {
    let h = harness(true);
    let (run, job) = queue(&h, "lookup ship").await;
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let tenant = TenantId::default_tenant();
    let steps = h.runtime.stores.runs.list_steps(&tenant, run).await.unwrap();
    assert_eq!(steps.len(), 1, "one model step asked for tools; the answer closes the run");
    let Message::Assistant { tool_calls, .. } = &steps[0].message else { panic!("{steps:?}") };
    assert_eq!(tool_calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["lookup", "ship"]);
    let calls = get(&h, &format!("/api/runs/{run}/tools")).await;
    assert_eq!(calls[0]["status"], "Succeeded", "{calls}");
    assert_eq!(calls[1]["status"], "Succeeded", "{calls}");
    assert_eq!(h.counts.of(&format!("{run}:1:call_1")), 1);
    assert_eq!(h.counts.of(&format!("{run}:1:call_2")), 1);
    assert_eq!(get(&h, &format!("/api/jobs/{job}")).await["status"], "Succeeded");
}

#[tokio::test]
async fn a_run_whose_executor_died_continues_as_a_new_run_without_running_a_completed_call_again() {
    let h = harness(true);
    let (run, job) = queue(&h, "lookup lookup").await;
    let (first, second) = (call("call_1", "lookup"), call("call_2", "lookup"));
    crashed(&h, run, &[(first, ToolEffect::Read), (second, ToolEffect::Read)], &["call_1"]).await;

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let original = get(&h, &format!("/api/runs/{run}")).await;
    assert_eq!(original["status"], "Failed", "{original}");
    assert_eq!(original["error"]["errorClass"], "Orphaned", "{original}");
    let next = original["continuedByRunId"].as_str().expect("linked to its continuation").to_owned();
    let continued = get(&h, &format!("/api/runs/{next}")).await;
    assert_eq!(continued["status"], "Completed", "{continued}");
    assert_eq!(continued["continuedFromRunId"], json!(run), "{continued}");

    assert_eq!(h.counts.of(&format!("{run}:1:call_1")), 0, "the completed call is replayed, not run");
    assert_eq!(h.counts.of(&format!("{run}:1:call_2")), 1, "the Read call of unknown outcome runs again");
    assert_eq!(*h.counts.model_calls.lock().unwrap(), 1, "the recorded step is not asked again");
    let text = support::call(Method::GET, &format!("/api/runs/{next}/events")).send(&h.app).await.text();
    assert!(text.contains("tracon.run.continued"), "{text}");
    assert!(text.contains("answered with done call_1, done call_2"), "{text}");
    let job = get(&h, &format!("/api/jobs/{job}")).await;
    assert_eq!(job["status"], "Succeeded", "the job settles as its continuation ended: {job}");
}

#[tokio::test]
async fn a_harness_loop_whose_executor_died_goes_on_from_its_last_recorded_iteration() {
    let h = harness(true);
    let reply = support::call(Method::POST, "/api/agents/looper/run")
        .header_opt("Prefer", Some("respond-async"))
        .json(Some(json!({"message": "write it"})))
        .send(&h.app)
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let run = RunId::parse(reply.json()["runId"].as_str().unwrap()).unwrap();
    // The first attempt answered once, was told to go on, and died.
    let (tenant, runs) = (TenantId::default_tenant(), &h.runtime.stores.runs);
    let long_ago = chrono::Utc::now() - chrono::Duration::minutes(10);
    assert_eq!(runs.start_queued(&tenant, run, long_ago).await.unwrap(), Some(false));
    let answer =
        Message::Assistant { text: Some("draft 1: working".into()), tool_calls: Vec::new(), reasoning: Vec::new() };
    for (step, message) in [(1, answer), (2, Message::user("Not finished: say ALL DONE when it is."))] {
        let step = ModelStep { step, message, recorded_at: long_ago };
        assert!(runs.begin_step(&tenant, run, Some(&step), &[]).await.unwrap());
    }
    runs.heartbeat(&tenant, run, long_ago).await.unwrap();

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let original = get(&h, &format!("/api/runs/{run}")).await;
    let next = original["continuedByRunId"].as_str().expect("continued").to_owned();
    let text = support::call(Method::GET, &format!("/api/runs/{next}/events")).send(&h.app).await.text();
    assert!(text.contains("draft 3: ALL DONE"), "{text}");
    assert_eq!(*h.counts.model_calls.lock().unwrap(), 2, "iterations 2 and 3 only: the first is not asked again");
    assert_eq!(get(&h, &format!("/api/runs/{next}")).await["status"], "Completed");
    // The loop counts on from the recorded iteration, so its ceiling holds across the crash.
    let iterations: Vec<u64> = support::frames(&text)
        .into_iter()
        .filter(|(e, _)| e == "loop.iteration_completed")
        .map(|(_, d)| d["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [2, 3], "{text}");
}

#[tokio::test]
async fn an_external_call_of_unknown_outcome_blocks_the_continuation_naming_the_tool() {
    let h = harness(true);
    let (run, job) = queue(&h, "lookup ship").await;
    let calls = [(call("call_1", "lookup"), ToolEffect::Read), (call("call_2", "ship"), ToolEffect::External)];
    crashed(&h, run, &calls, &["call_1"]).await;

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let original = get(&h, &format!("/api/runs/{run}")).await;
    let next = original["continuedByRunId"].as_str().unwrap().to_owned();
    let continued = get(&h, &format!("/api/runs/{next}")).await;
    assert_eq!(continued["status"], "Failed", "{continued}");
    assert_eq!(continued["error"]["errorType"], "continuation_blocked", "{continued}");
    let message = continued["error"]["message"].as_str().unwrap();
    assert!(message.contains("'ship'") && message.contains("call_2"), "{message}");
    assert_eq!(h.counts.total(), 0, "nothing ran: not the blocked call, not the completed one");
    assert_eq!(*h.counts.model_calls.lock().unwrap(), 0);
    let job = get(&h, &format!("/api/jobs/{job}")).await;
    assert_eq!(job["status"], "Failed", "{job}");
    assert_eq!(job["error"]["code"], "tracon.run.continuation_blocked", "{job}");
}

#[tokio::test]
async fn a_safe_to_repeat_external_call_runs_again_under_the_same_idempotency_key() {
    let h = harness(true);
    let (run, _) = queue(&h, "charge").await;
    crashed(&h, run, &[(call("call_1", "charge"), ToolEffect::External)], &[]).await;
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let next = get(&h, &format!("/api/runs/{run}")).await["continuedByRunId"].as_str().unwrap().to_owned();
    assert_eq!(get(&h, &format!("/api/runs/{next}")).await["status"], "Completed");
    assert_eq!(h.counts.of(&format!("{run}:1:call_1")), 1, "the key is the original run's, so the effect dedups");
}

#[tokio::test]
async fn a_continuation_that_dies_too_is_continued_from_the_whole_chain() {
    let h = harness(true);
    let (run, job) = queue(&h, "lookup lookup").await;
    let calls = [(call("call_1", "lookup"), ToolEffect::Read), (call("call_2", "lookup"), ToolEffect::Read)];
    crashed(&h, run, &calls, &["call_1"]).await;
    // The first continuation: opened, then its process died before it ran anything.
    let tenant = TenantId::default_tenant();
    let runs = &h.runtime.stores.runs;
    let original = runs.get_run(&tenant, run).await.unwrap().unwrap();
    let stale_before = chrono::Utc::now();
    let last = runs.last_sequence(&tenant, run).await.unwrap();
    assert!(
        tracon_core::runs::reconcile::close_orphan(&h.runtime, &tenant, run, original.started_at, last, stale_before)
            .await
            .unwrap()
    );
    let original = runs.get_run(&tenant, run).await.unwrap().unwrap();
    let middle = tracon_core::runs::continuation::open(&h.runtime, &tenant, &original).await.unwrap().unwrap();
    runs.heartbeat(&tenant, middle.id, chrono::Utc::now() - chrono::Duration::minutes(5)).await.unwrap();

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let middle_row = get(&h, &format!("/api/runs/{}", middle.id)).await;
    assert_eq!(middle_row["error"]["errorClass"], "Orphaned", "{middle_row}");
    let last = middle_row["continuedByRunId"].as_str().unwrap().to_owned();
    assert_eq!(get(&h, &format!("/api/runs/{last}")).await["status"], "Completed");
    assert_eq!(h.counts.of(&format!("{run}:1:call_1")), 0);
    assert_eq!(h.counts.of(&format!("{run}:1:call_2")), 1);
    assert_eq!(get(&h, &format!("/api/jobs/{job}")).await["status"], "Succeeded");
}

#[tokio::test]
async fn a_run_whose_executor_is_alive_is_waited_for_not_continued() {
    let h = harness(true);
    let (run, job) = queue(&h, "lookup").await;
    let tenant = TenantId::default_tenant();
    assert_eq!(h.runtime.stores.runs.start_queued(&tenant, run, chrono::Utc::now()).await.unwrap(), Some(false));
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let row = get(&h, &format!("/api/runs/{run}")).await;
    assert_eq!((row["status"].as_str(), &row["continuedByRunId"]), (Some("Running"), &Value::Null), "{row}");
    let job = get(&h, &format!("/api/jobs/{job}")).await;
    assert_eq!(job["error"]["code"], "tracon.run.unfinished", "{job}");
    assert_eq!(h.counts.total(), 0);
}

#[tokio::test]
async fn with_continuation_off_an_interrupted_run_stays_orphaned() {
    let h = harness(false);
    let (run, _) = queue(&h, "lookup lookup").await;
    let calls = [(call("call_1", "lookup"), ToolEffect::Read), (call("call_2", "lookup"), ToolEffect::Read)];
    crashed(&h, run, &calls, &["call_1"]).await;
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let row = get(&h, &format!("/api/runs/{run}")).await;
    assert_eq!((row["status"].as_str(), &row["continuedByRunId"]), (Some("Running"), &Value::Null), "{row}");
    assert_eq!(h.counts.total(), 0);
}

#[tokio::test]
async fn a_tree_budget_counts_what_the_run_spent_before_each_hand_over() {
    // Each model call spends 3 tokens; each attempt makes one, then hands over. No attempt
    // alone reaches 7 tokens, the run does: the fourth attempt starts at 9 and is cut off.
    let graph = AgentGraphSettings { max_total_tokens: Some(7), ..AgentGraphSettings::default() };
    let h = harness_with(RuntimeSettings {
        soft_deadline: Some(Duration::ZERO),
        agent_graph: Arc::new(graph),
        ..RuntimeSettings::default()
    });
    let (run, _) = queue(&h, "steps 3").await;
    let mut drains = 0;
    while matches!(get(&h, &format!("/api/runs/{run}")).await["status"].as_str(), Some("Queued" | "Running")) {
        assert_eq!(h.runner.drain(10).await.unwrap(), 1);
        drains += 1;
        assert!(drains <= 10, "never finished");
    }
    let row = get(&h, &format!("/api/runs/{run}")).await;
    assert_eq!(
        (row["status"].as_str(), row["error"]["errorType"].as_str()),
        (Some("Failed"), Some("tree_budget_exceeded")),
        "{row}"
    );
    assert!(row.to_string().contains("MaxTotalTokens"), "{row}");
    assert_eq!(*h.counts.model_calls.lock().unwrap(), 3, "the fourth step was not asked");
}

#[tokio::test]
async fn a_run_past_its_soft_deadline_hands_over_at_each_step_boundary_and_completes_in_place() {
    // A deadline of zero: every attempt takes one step, then hands the run over.
    let h = harness_with(RuntimeSettings { soft_deadline: Some(Duration::ZERO), ..RuntimeSettings::default() });
    let (run, job) = queue(&h, "steps 3").await;
    let mut drains = 0;
    while get(&h, &format!("/api/runs/{run}")).await["status"] == "Queued"
        || get(&h, &format!("/api/runs/{run}")).await["status"] == "Running"
    {
        assert_eq!(h.runner.drain(10).await.unwrap(), 1, "one attempt each time");
        drains += 1;
        assert!(drains <= 10, "never finished");
    }
    assert_eq!(drains, 4, "three hand-overs, the fourth attempt answers");
    let row = get(&h, &format!("/api/runs/{run}")).await;
    assert_eq!(row["status"], "Completed", "{row}");
    assert_eq!(row["continuedByRunId"], Value::Null, "handed over in place, not continued as another run");
    assert_eq!(row["usage"]["totalTokens"], json!(4 * 3), "every attempt's model calls count: {row}");
    let keys: Vec<(String, u32)> = h.counts.bodies.lock().unwrap().clone().into_iter().collect();
    assert_eq!(keys.len(), 3, "one call a step: {keys:?}");
    for step in 1..=3 {
        let prefix = format!("{run}:{step}:");
        assert!(keys.iter().any(|(k, n)| k.starts_with(&prefix) && *n == 1), "step {step} ran its call once: {keys:?}");
    }
    assert_eq!(*h.counts.model_calls.lock().unwrap(), 4, "no step was asked twice");
    let job = get(&h, &format!("/api/jobs/{job}")).await;
    assert_eq!(job["status"], "Succeeded", "{job}");
    assert_eq!(job["attempts"], 1, "a hand-over gives its attempt back: {job}");

    // One log, numbered on across the hand-overs, in order, one start and one end.
    let body = support::call(Method::GET, &format!("/api/runs/{run}/events")).send(&h.app).await.text();
    let frames = support::frames(&body);
    let ids: Vec<u64> = body.lines().filter_map(|l| l.strip_prefix("id: ")).map(|i| i.parse().unwrap()).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "gapless and in order: {body}");
    let names: Vec<&str> = frames.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "run.started").count(), 1, "{names:?}");
    assert_eq!(names.last(), Some(&"run.completed"), "{names:?}");
    assert_eq!(body.matches("tracon.run.yielded").count(), 3, "{body}");
    assert_eq!(body.matches("tracon.run.resumed").count(), 3, "{body}");
}

#[tokio::test]
async fn cancelling_a_continued_run_cancels_its_continuation_and_says_which_run() {
    let h = harness(true);
    let (run, _) = queue(&h, "lookup ship").await;
    let (tenant, runs) = (TenantId::default_tenant(), &h.runtime.stores.runs);
    let now = chrono::Utc::now();
    // The run ended interrupted; its continuation is running on another instance.
    assert_eq!(runs.start_queued(&tenant, run, now).await.unwrap(), Some(false));
    let orphaned = RunFailure::new(ErrorClass::Orphaned, "The process running it went away.");
    runs.finish_run(&tenant, run, &RunEnd::failed(now, 0, orphaned), &[]).await.unwrap();
    let next = RunRecord {
        continued_from_run_id: Some(run),
        ..RunRecord::opened(RunId(uuid::Uuid::now_v7()), "worker", None, RunStatus::Running, now)
    };
    assert!(runs.open_continuation(&tenant, run, &next).await.unwrap());

    let reply = support::call(Method::POST, &format!("/api/runs/{run}/cancel")).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text());
    assert_eq!(reply.json()["runId"], next.id.to_string(), "the answer names the run that was cancelled");
    assert!(runs.is_cancel_requested(&tenant, next.id).await.unwrap());
    // Once the chain's latest run has ended, there is nothing to cancel.
    runs.finish_run(&tenant, next.id, &RunEnd::failed(now, 0, RunFailure::new(ErrorClass::Internal, "x")), &[])
        .await
        .unwrap();
    let reply = support::call(Method::POST, &format!("/api/runs/{run}/cancel")).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
}
