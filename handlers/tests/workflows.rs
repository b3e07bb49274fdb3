//! Workflows through the router: definitions and their rules, the five kinds run against a
//! scripted model that tells agents apart by their instructions, the tree and the events a
//! run records, function nodes and their retries, checkpoints, resuming, and human input.
//! Every model call spends 10 input and 5 output tokens at a price of 1 (per million) each.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{TestClock, call, frames};
use tracon_core::definition::AgentDefinition;
use tracon_core::jobs::{JobRunner, JobSettings};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest, ProviderError, ProviderErrorKind};
use tracon_core::names::{RunId, TenantId};
use tracon_core::ports::Platform;
use tracon_core::pricing::{ModelPrice, Pricing};
use tracon_core::runtime::{RunQueue, RuntimeBuilder, RuntimeSettings};
use tracon_core::tools::{ToolOutput, ToolRegistration, tool_fn};
use tracon_core::workflows::checkpoints::ENVELOPE;
use tracon_core::workflows::functions::{
    FailureKind, FunctionCall, FunctionError, FunctionOutput, RetryPolicy, TextFunction, WorkflowFunction,
};
use tracon_handlers::{AppState, HttpSettings};

/// The last user message an agent got.
fn input(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { text } => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

fn tool_answered(request: &ModelRequest) -> bool {
    request.messages.iter().any(|m| matches!(m, Message::Tool { .. }))
}

fn tool_result(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// The agents: `writer` drafts, `reviewer` reviews, `frontline` hands off to `billing`,
/// `host` runs a group chat (writer, then reviewer, then done), `lead` plans and steers a
/// Magentic team, `clerk` calls `refund` (which needs a person's approval) and reports its
/// result, `broken`'s provider fails.
fn model(calls: Arc<AtomicU32>) -> ScriptedProvider {
    ScriptedProvider::from_fn("script", move |request: &ModelRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let system = request.system.clone().unwrap_or_default();
        let text = input(request);
        let first_line = text.lines().next().unwrap_or_default().to_owned();
        let turn = match system.as_str() {
            "WRITER" => ScriptedTurn::text(&format!("draft of {first_line}")),
            "REVIEWER" => ScriptedTurn::text(&format!("review of {}", text.lines().last().unwrap_or_default())),
            "FRONT" if !tool_answered(request) => {
                ScriptedTurn::tool_call("handoff_to_billing", json!({"reason": "money"}))
            }
            "FRONT" => ScriptedTurn::text("passing you to billing"),
            "BILL" => ScriptedTurn::text("your refund is on its way"),
            "CLERK" if !tool_answered(request) => ScriptedTurn::tool_call("refund", json!({"amount": 5})),
            "CLERK" => ScriptedTurn::text(&format!("clerk: {}", tool_result(request))),
            "HOST" if !text.contains("[writer]") => ScriptedTurn::text("writer"),
            "HOST" if !text.contains("[reviewer]") => ScriptedTurn::text("Next: reviewer."),
            "HOST" => ScriptedTurn::text("DONE"),
            "LEAD" if text.contains("step-by-step plan") => ScriptedTurn::text("1. writer drafts"),
            "LEAD" if !text.contains("[writer]") => {
                ScriptedTurn::text(r#"Sure: {"done": false, "next": "writer", "instruction": "draft the intro"}"#)
            }
            "LEAD" => ScriptedTurn::text(r#"{"done": true, "answer": "final: the intro"}"#),
            "BROKEN" => ScriptedTurn::failing(ProviderError::new(
                ProviderErrorKind::ServerError,
                "HttpError",
                "upstream said 503 with secret detail",
            )),
            other => ScriptedTurn::text(&format!("unscripted {other}")),
        };
        turn.with_usage(10, 5)
    })
}

/// Fails `failures` times with a transient error, then appends a word count.
struct Flaky {
    failures: u32,
    calls: Arc<AtomicU32>,
}

#[async_trait::async_trait]
impl WorkflowFunction for Flaky {
    async fn call(&self, call: FunctionCall<'_>) -> Result<FunctionOutput, FunctionError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n < self.failures {
            return Err(FunctionError::new(FailureKind::Provider, "the counting service is down"));
        }
        let words = call.input().split_whitespace().count();
        Ok(FunctionOutput::Messages(vec![format!("{} ({words} words)", call.input())]))
    }
}

struct World {
    app: Router,
    /// A job consumer, drained by hand.
    runner: JobRunner,
    runtime: Arc<tracon_core::runtime::Runtime>,
    model_calls: Arc<AtomicU32>,
    function_calls: Arc<AtomicU32>,
    /// Refunds made (the approved tool's executions).
    refunds: Arc<AtomicU32>,
}

fn world_with(settings: RuntimeSettings, failures: u32) -> World {
    let clock = Arc::new(TestClock::shifted());
    let calls = Arc::new(AtomicU32::new(0));
    let function_calls = Arc::new(AtomicU32::new(0));
    let platform = Platform { clock, spawner: tracon_core::ports::tokio_rt::platform().spawner };
    let price = ModelPrice { input_per_million: 1.0, output_per_million: 1.0, cached_input_per_million: None };
    let agent =
        |name: &str, instructions: &str| AgentDefinition::new(name, "script", "m").with_instructions(instructions);
    let refunds = Arc::new(AtomicU32::new(0));
    let made = refunds.clone();
    let refund = ToolRegistration::new(
        "refund",
        "Refunds an order.",
        json!({"type": "object", "properties": {"amount": {}}, "required": ["amount"]}),
        tool_fn(move |args: Value, _| {
            made.fetch_add(1, Ordering::SeqCst);
            async move { Ok(ToolOutput::from(format!("refunded {}", args["amount"]))) }
        }),
    )
    .map(|r| r.requires_approval(true));
    let retry = RetryPolicy { max_attempts: 3, initial_delay: Duration::from_millis(1), backoff_multiplier: 2.0 };
    let runtime = RuntimeBuilder::new(platform)
        .settings(settings)
        .pricing(Pricing::new("USD").with_price("script", "m", price))
        .add_provider(Arc::new(model(calls.clone())) as Arc<dyn ModelProvider>)
        .add_agent(agent("writer", "WRITER"))
        .add_agent(agent("reviewer", "REVIEWER"))
        .add_agent(agent("frontline", "FRONT"))
        .add_agent(agent("billing", "BILL"))
        .add_agent(agent("host", "HOST"))
        .add_agent(agent("lead", "LEAD"))
        .add_agent(agent("broken", "BROKEN"))
        .add_tool(refund)
        .add_agent(agent("clerk", "CLERK").with_tools(&["refund"]))
        .add_workflow_function(
            "word-count",
            "Appends a word count. Runs no model call.",
            Arc::new(Flaky { failures, calls: function_calls.clone() }),
            Some(retry),
        )
        .add_workflow_function(
            "shout",
            "Upper-cases its input.",
            Arc::new(TextFunction(|s: &str| {
                if s.contains("whisper") {
                    Err(FunctionError::permanent("cannot shout a whisper"))
                } else {
                    Ok(s.to_uppercase())
                }
            })),
            None,
        )
        .build()
        .unwrap();
    let runtime = Arc::new(runtime);
    runtime.set_queue(RunQueue { transport: Arc::new(support::Manual), max_attempts: 3 });
    let jobs = JobSettings { retry_base: Duration::ZERO, ..JobSettings::default() };
    let handlers = tracon_core::background::job_handlers(&runtime);
    let runner = JobRunner::new(runtime.stores.jobs.clone(), handlers, runtime.platform.clock.clone(), jobs, "test");
    World {
        app: tracon_handlers::router(AppState::new(runtime.clone(), HttpSettings::default())),
        runner,
        runtime,
        model_calls: calls,
        function_calls,
        refunds,
    }
}

fn world() -> World {
    world_with(RuntimeSettings::default(), 0)
}

async fn save(app: &Router, definition: Value) {
    let reply = call(Method::POST, "/api/workflows").json(Some(definition)).send(app).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
}

async fn get(app: &Router, path: &str) -> Value {
    let reply = call(Method::GET, path).send(app).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text());
    reply.json()
}

/// Runs `path` (a run, resume or respond) live; its run id and its last frame.
async fn stream(app: &Router, path: &str, body: Value) -> (String, Value, Vec<(String, Value)>) {
    let reply = call(Method::POST, path).json(Some(body)).send(app).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text());
    let frames = frames(&reply.text());
    let run_id = frames.iter().find(|(e, _)| e == "run").map(|(_, d)| d["runId"].as_str().unwrap().to_owned()).unwrap();
    let end = frames.iter().rev().find(|(e, _)| e == "done" || e == "error").map(|(_, d)| d.clone()).unwrap();
    (run_id, end, frames)
}

async fn run(app: &Router, workflow: &str, message: &str) -> (String, Value, Vec<(String, Value)>) {
    stream(app, &format!("/api/workflows/{workflow}/run"), json!({"message": message})).await
}

/// The root's recorded log: `(frame name, data)`.
async fn log(app: &Router, run: &str) -> Vec<(String, Value)> {
    let reply = call(Method::GET, &format!("/api/runs/{run}/events")).send(app).await;
    frames(&reply.text())
}

fn named<'a>(log: &'a [(String, Value)], name: &str) -> Vec<&'a Value> {
    log.iter().filter(|(n, _)| n == name).map(|(_, d)| d).collect()
}

fn executors(log: &[(String, Value)], name: &str) -> Vec<String> {
    named(log, name).iter().map(|d| d["executorId"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_definition_that_could_not_run_is_refused_at_save_with_each_problem_named() {
    let w = world();
    let bad = [
        (json!({"name": "x", "kind": "Sequential"}), "nodes"),
        (json!({"name": "x", "kind": "Handoff", "agentNames": ["writer"]}), "agentNames"),
        (json!({"name": "x", "kind": "Magentic", "agentNames": ["writer"]}), "managerAgentName"),
        (json!({"name": "x", "kind": "Concurrent", "agentNames": ["nobody"]}), "agentNames[0]"),
        (json!({"name": "x", "kind": "Concurrent", "agentNames": ["writer"], "maxIterations": 3}), "maxIterations"),
        (
            json!({"name": "x", "kind": "GroupChat", "agentNames": ["writer", "reviewer"], "maxIterations": 0}),
            "maxIterations",
        ),
        (json!({"name": "x", "kind": "Concurrent", "nodes": [{"name": "writer", "kind": "Agent"}]}), "nodes"),
        (json!({"name": "x", "kind": "Sequential", "nodes": [{"name": "nope", "kind": "Function"}]}), "nodes[0].name"),
        (
            json!({"name": "x", "kind": "Sequential", "agentNames": ["writer"], "maxDurationSeconds": 0}),
            "maxDurationSeconds",
        ),
        (json!({"name": "runs", "kind": "Sequential", "agentNames": ["writer"]}), "name"),
        (json!({"name": "Bad Name", "kind": "Sequential", "agentNames": ["writer"]}), "name"),
    ];
    for (definition, field) in bad {
        let reply = call(Method::POST, "/api/workflows").json(Some(definition.clone())).send(&w.app).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{definition}: {}", reply.text());
        let problem = reply.json();
        assert_eq!(problem["errorType"], "validation_failed", "{problem}");
        let fields: Vec<&str> =
            problem["problems"].as_array().unwrap().iter().map(|p| p["field"].as_str().unwrap()).collect();
        assert!(fields.contains(&field), "{definition}: {fields:?}");
    }
    // The same rules answer `POST /api/workflows/validate` without saving.
    let reply = call(Method::POST, "/api/workflows/validate")
        .json(Some(json!({"name": "x", "kind": "Handoff", "agentNames": ["writer"]})))
        .send(&w.app)
        .await;
    assert_eq!((reply.status, reply.json()["valid"].as_bool()), (StatusCode::OK, Some(false)));
    let unknown = call(Method::POST, "/api/workflows")
        .json(Some(json!({"name": "x", "kind": "Sequential", "agentNames": ["writer"], "extra": 1})))
        .send(&w.app)
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.text());
    assert!(get(&w.app, "/api/workflows").await.as_array().unwrap().is_empty());
}

#[tokio::test]
async fn definitions_keep_every_version_and_show_their_graph_and_the_functions() {
    let w = world();
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "agentNames": ["writer", "reviewer"]})).await;
    let again = call(Method::POST, "/api/workflows")
        .json(Some(json!({"name": "pipeline", "kind": "Sequential", "agentNames": ["writer"]})))
        .send(&w.app)
        .await;
    assert_eq!((again.status, again.json()["errorType"].as_str()), (StatusCode::CONFLICT, Some("workflow_exists")));
    let replaced = call(Method::PUT, "/api/workflows/pipeline")
        .json(Some(json!({"name": "pipeline", "kind": "Sequential", "nodes": [
            {"name": "writer", "kind": "Agent"}, {"name": "word-count", "kind": "Function"}, {"name": "writer", "kind": "Agent"}]})))
        .send(&w.app)
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.text());
    assert_eq!(replaced.json()["version"], 2);
    let versions = get(&w.app, "/api/workflows/pipeline/versions").await;
    assert_eq!(versions.as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 1]);

    let graph = get(&w.app, "/api/workflows/pipeline/graph").await;
    let ids: Vec<&str> = graph["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["_start", "writer", "word-count", "writer#2", "_end"], "{graph}");
    assert!(graph["mermaid"].as_str().unwrap().starts_with("flowchart LR"), "{graph}");

    let functions = get(&w.app, "/api/workflows/functions").await;
    let names: Vec<&str> = functions.as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["human-input", "shout", "word-count"]);
    assert_eq!(functions[2]["maxAttempts"], 3);

    let audit = get(&w.app, "/api/audit").await;
    let actions: Vec<&str> = audit["items"].as_array().map_or_else(
        || audit.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect(),
        |items| items.iter().map(|e| e["action"].as_str().unwrap()).collect(),
    );
    assert!(actions.contains(&"workflow.create") && actions.contains(&"workflow.update"), "{actions:?}");

    let deleted = call(Method::DELETE, "/api/workflows/pipeline").send(&w.app).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = call(Method::GET, "/api/workflows/pipeline").send(&w.app).await;
    assert_eq!((gone.status, gone.json()["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("workflow_not_found")));
}

#[tokio::test]
async fn a_sequential_pipeline_passes_each_output_on_and_records_a_tree_with_its_costs() {
    let w = world_with(RuntimeSettings::default(), 2);
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "nodes": [
        {"name": "writer", "kind": "Agent"}, {"name": "word-count", "kind": "Function"}, {"name": "reviewer", "kind": "Agent"}]}))
    .await;
    let (root, end, live) = run(&w.app, "pipeline", "the intro").await;
    assert_eq!(end["status"], "Completed", "{end}");
    assert_eq!(end["text"], "review of draft of the intro (4 words)");
    // Two transient failures and a success: one node call, one super-step.
    assert_eq!(w.function_calls.load(Ordering::SeqCst), 3);
    let updates: Vec<&str> =
        live.iter().filter(|(e, _)| e == "update").map(|(_, d)| d["kind"].as_str().unwrap()).collect();
    let executor_updates: Vec<&str> = updates.iter().copied().filter(|k| k.starts_with("executor")).collect();
    let each = ["executorInvoked", "executorCompleted"];
    assert_eq!(executor_updates, [each, each, each].concat(), "every node's start and end go out live: {updates:?}");

    let log = log(&w.app, &root).await;
    assert_eq!(executors(&log, "executor.invoked"), ["writer", "word-count", "reviewer"]);
    assert_eq!(executors(&log, "executor.completed"), ["writer", "word-count", "reviewer"]);
    let completed = named(&log, "executor.completed");
    assert_eq!(completed[1]["attempts"], 3);
    assert!(completed[1].get("runId").is_none(), "a function node opens no run");
    assert_eq!(
        completed.iter().map(|c| c["superStep"].as_u64().unwrap()).collect::<Vec<_>>(),
        [1, 2, 3],
        "{completed:?}"
    );
    assert_eq!(named(&log, "workflow.checkpointed").len(), 3);

    let tree = get(&w.app, &format!("/api/runs/{root}/tree")).await;
    let runs = tree["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "the root and one run per agent node: {tree}");
    assert_eq!(runs[0]["agentName"], "pipeline");
    assert!(runs[1..].iter().all(|r| r["parentRunId"] == root.as_str() && r["depth"] == 1), "{tree}");
    assert_eq!(tree["totalUsage"]["totalTokens"], 30, "{tree}");
    assert!((tree["totalCost"].as_f64().unwrap() - 2.0 * 0.000015).abs() < 1e-12, "{tree}");
    assert_eq!(end["usage"]["totalTokens"], 30, "{end}");
    assert_eq!(w.model_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_concurrent_workflow_merges_every_answer_to_the_same_input() {
    let w = world();
    save(&w.app, json!({"name": "fan", "kind": "Concurrent", "agentNames": ["writer", "reviewer"]})).await;
    let (root, end, _) = run(&w.app, "fan", "the intro").await;
    assert_eq!(end["status"], "Completed", "{end}");
    assert_eq!(end["text"], "[writer]\ndraft of the intro\n\n[reviewer]\nreview of the intro");
    let log = log(&w.app, &root).await;
    let invoked = named(&log, "executor.invoked");
    assert!(invoked.iter().all(|e| e["superStep"] == 1), "one super-step: {invoked:?}");
    // A checkpoint as each answer came in.
    assert_eq!(named(&log, "workflow.checkpointed").len(), 2);
    let tree = get(&w.app, &format!("/api/runs/{root}/tree")).await;
    assert_eq!(tree["runs"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_handoff_follows_the_model_s_choice_of_agent() {
    let w = world();
    save(&w.app, json!({"name": "triage", "kind": "Handoff", "agentNames": ["frontline", "billing", "writer"]})).await;
    let (root, end, _) = run(&w.app, "triage", "my invoice is wrong").await;
    assert_eq!(end["status"], "Completed", "{end}");
    assert_eq!(end["text"], "your refund is on its way");
    let log = log(&w.app, &root).await;
    assert_eq!(executors(&log, "executor.completed"), ["frontline", "billing"]);
    // The hand-off was the frontline agent's own tool call, recorded in its run.
    let tree = get(&w.app, &format!("/api/runs/{root}/tree")).await;
    let frontline = tree["runs"].as_array().unwrap().iter().find(|r| r["agentName"] == "frontline").unwrap();
    let tools = get(&w.app, &format!("/api/runs/{}/tools", frontline["id"].as_str().unwrap())).await;
    assert_eq!(tools[0]["toolName"], "handoff_to_billing", "{tools}");
}

#[tokio::test]
async fn a_handoff_loop_stops_at_max_iterations_and_fails_saying_so() {
    let w = world();
    // The frontline agent hands off on its first turn; with one turn allowed, billing never
    // gets one and there is no answer.
    save(
        &w.app,
        json!({"name": "short", "kind": "Handoff", "agentNames": ["frontline", "billing"], "maxIterations": 1}),
    )
    .await;
    let (_, end, _) = run(&w.app, "short", "my invoice").await;
    assert_eq!(
        (end["status"].as_str(), end["errorType"].as_str()),
        (Some("Failed"), Some("max_iterations_reached")),
        "{end}"
    );
}

#[tokio::test]
async fn a_group_chat_manager_picks_each_speaker_until_it_says_done() {
    let w = world();
    save(
        &w.app,
        json!({"name": "room", "kind": "GroupChat", "agentNames": ["writer", "reviewer"], "managerAgentName": "host"}),
    )
    .await;
    let (root, end, _) = run(&w.app, "room", "the intro").await;
    assert_eq!(end["status"], "Completed", "{end}");
    assert!(end["text"].as_str().unwrap().starts_with("review of"), "{end}");
    let recorded = log(&w.app, &root).await;
    assert_eq!(executors(&recorded, "executor.completed"), ["host", "writer", "host", "reviewer", "host"]);
    let kinds: Vec<&str> =
        named(&recorded, "executor.invoked").iter().map(|e| e["executorKind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Manager", "Agent", "Manager", "Agent", "Manager"]);

    // Without a manager, participants speak in turn for maxIterations turns.
    save(
        &w.app,
        json!({"name": "round", "kind": "GroupChat", "agentNames": ["writer", "reviewer"], "maxIterations": 3}),
    )
    .await;
    let (root, end, _) = run(&w.app, "round", "the intro").await;
    assert_eq!(end["status"], "Completed", "{end}");
    assert_eq!(executors(&log(&w.app, &root).await, "executor.completed"), ["writer", "reviewer", "writer"]);
}

#[tokio::test]
async fn a_magentic_manager_plans_steers_and_answers() {
    let w = world();
    save(
        &w.app,
        json!({"name": "team", "kind": "Magentic", "agentNames": ["writer", "reviewer"], "managerAgentName": "lead"}),
    )
    .await;
    let (root, end, _) = run(&w.app, "team", "write the intro").await;
    assert_eq!(end["status"], "Completed", "{end}");
    assert_eq!(end["text"], "final: the intro");
    let log = log(&w.app, &root).await;
    assert_eq!(executors(&log, "executor.completed"), ["lead", "lead", "writer", "lead"]);
}

#[tokio::test]
async fn a_failing_node_fails_the_run_with_a_redacted_error_and_a_function_keeps_its_own_message() {
    let w = world();
    save(&w.app, json!({"name": "doomed", "kind": "Sequential", "agentNames": ["writer", "broken"]})).await;
    let (root, end, _) = run(&w.app, "doomed", "x").await;
    assert_eq!(
        (end["status"].as_str(), end["errorType"].as_str()),
        (Some("Failed"), Some("provider_unavailable")),
        "{end}"
    );
    let message = end["message"].as_str().unwrap();
    assert!(message.contains("broken") && !message.contains("secret detail"), "{message}");
    let log = log(&w.app, &root).await;
    assert_eq!(executors(&log, "executor.failed"), ["broken"]);
    let root_row = get(&w.app, &format!("/api/runs/{root}")).await;
    assert_eq!(root_row["status"], "Failed");

    // A function's own failure keeps its message.
    save(&w.app, json!({"name": "loud", "kind": "Sequential", "nodes": [{"name": "shout", "kind": "Function"}]})).await;
    let (_, end, _) = run(&w.app, "loud", "a whisper").await;
    assert_eq!(
        (end["status"].as_str(), end["errorType"].as_str()),
        (Some("Failed"), Some("workflow_node_failed")),
        "{end}"
    );
    assert_eq!(end["message"], "The function 'shout' failed: cannot shout a whisper");
    let (_, end, _) = run(&w.app, "loud", "hello").await;
    assert_eq!(end["text"], "HELLO");
}

#[tokio::test]
async fn a_workflow_asks_a_person_stops_awaiting_input_and_the_answer_resumes_it_as_a_new_run() {
    let w = world();
    save(&w.app, json!({"name": "approve", "kind": "Sequential", "nodes": [
        {"name": "writer", "kind": "Agent"}, {"name": "human-input", "kind": "Function"}, {"name": "reviewer", "kind": "Agent"}]}))
    .await;
    let (first, end, _) = run(&w.app, "approve", "the intro").await;
    assert_eq!(end["status"], "AwaitingInput", "{end}");
    let asked = end["requests"][0].clone();
    assert_eq!(
        (asked["executorId"].as_str(), asked["prompt"].as_str()),
        (Some("human-input"), Some("draft of the intro"))
    );
    let requests = get(&w.app, &format!("/api/workflows/runs/{first}/requests")).await;
    assert_eq!(requests[0]["requestId"], asked["requestId"]);
    assert_eq!(get(&w.app, &format!("/api/runs/{first}")).await["status"], "AwaitingInput");
    let checkpoints = get(&w.app, &format!("/api/workflows/runs/{first}/checkpoints")).await;
    assert_eq!(checkpoints.as_array().unwrap().len(), 2, "{checkpoints}");
    let calls_before = w.model_calls.load(Ordering::SeqCst);

    let respond = format!("/api/workflows/runs/{first}/requests/{}/respond", asked["requestId"].as_str().unwrap());
    let (second, end, _) = stream(&w.app, &respond, json!({"response": "looks good"})).await;
    assert_ne!(second, first, "the answer opens a new run");
    assert_eq!(end["status"], "Completed", "{end}");
    assert_eq!(end["text"], "review of looks good");
    // The writer did not run again: one more model call, the reviewer's.
    assert_eq!(w.model_calls.load(Ordering::SeqCst), calls_before + 1);
    let log = log(&w.app, &second).await;
    assert_eq!(executors(&log, "executor.completed"), ["human-input", "reviewer"]);
    assert_eq!(named(&log, "workflow.started")[0]["resumedFrom"]["runId"], first.as_str());
    // The first run stays as it was; a second answer is refused.
    assert_eq!(get(&w.app, &format!("/api/runs/{first}")).await["status"], "AwaitingInput");
    let again = call(Method::POST, &respond).json(Some(json!({"response": "again"}))).send(&w.app).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text());
    let unknown = call(Method::POST, &format!("/api/workflows/runs/{first}/requests/{}/respond", uuid::Uuid::nil()))
        .json(Some(json!({"response": "x"})))
        .send(&w.app)
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn with_checkpointing_off_a_workflow_that_asks_a_person_fails_instead_of_hanging() {
    let w = world_with(RuntimeSettings { workflow_checkpointing: false, ..RuntimeSettings::default() }, 0);
    save(
        &w.app,
        json!({"name": "approve", "kind": "Sequential", "nodes": [{"name": "human-input", "kind": "Function"}]}),
    )
    .await;
    let (root, end, _) = run(&w.app, "approve", "may I?").await;
    assert_eq!(
        (end["status"].as_str(), end["errorType"].as_str()),
        (Some("Failed"), Some("input_unavailable")),
        "{end}"
    );
    let checkpoints = get(&w.app, &format!("/api/workflows/runs/{root}/checkpoints")).await;
    assert!(checkpoints.as_array().unwrap().is_empty());
    let resume = call(Method::POST, &format!("/api/workflows/runs/{root}/resume")).send(&w.app).await;
    assert_eq!((resume.status, resume.json()["errorType"].as_str()), (StatusCode::CONFLICT, Some("no_checkpoint")));
}

#[tokio::test]
async fn resuming_from_an_earlier_checkpoint_opens_a_new_run_that_repeats_only_what_followed() {
    let w = world();
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "agentNames": ["writer", "reviewer"]})).await;
    let (first, end, _) = run(&w.app, "pipeline", "the intro").await;
    assert_eq!(end["status"], "Completed");
    let checkpoints = get(&w.app, &format!("/api/workflows/runs/{first}/checkpoints")).await;
    let after_writer = checkpoints[0]["id"].as_str().unwrap().to_owned();
    let calls = w.model_calls.load(Ordering::SeqCst);
    let (second, end, _) =
        stream(&w.app, &format!("/api/workflows/runs/{first}/resume"), json!({"checkpointId": after_writer})).await;
    assert_eq!(end["text"], "review of draft of the intro", "{end}");
    assert_eq!(w.model_calls.load(Ordering::SeqCst), calls + 1, "only the reviewer ran again");
    assert_eq!(get(&w.app, &format!("/api/runs/{second}")).await["continuedFromRunId"], first.as_str());
    // From the latest checkpoint there is nothing left to run.
    let (_, end, _) = stream(&w.app, &format!("/api/workflows/runs/{first}/resume"), json!({})).await;
    assert_eq!(end["text"], "review of draft of the intro");
    assert_eq!(w.model_calls.load(Ordering::SeqCst), calls + 1);
    // A missing checkpoint, a run that is not a workflow's.
    let missing = call(Method::POST, &format!("/api/workflows/runs/{first}/resume"))
        .json(Some(json!({"checkpointId": uuid::Uuid::nil()})))
        .send(&w.app)
        .await;
    assert_eq!(missing.status, StatusCode::CONFLICT);
    let nobody =
        call(Method::GET, &format!("/api/workflows/runs/{}/checkpoints", uuid::Uuid::nil())).send(&w.app).await;
    assert_eq!(nobody.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_checkpoint_holds_agents_answers_by_reference_and_a_resume_reads_them_back_from_their_runs() {
    let w = world();
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "agentNames": ["writer", "reviewer"]})).await;
    let (first, end, _) = run(&w.app, "pipeline", "the intro").await;
    assert_eq!(end["status"], "Completed");
    let tenant = TenantId::default_tenant();
    let root = RunId(first.parse().unwrap());
    let stored = w.runtime.stores.checkpoints.list(&tenant, root).await.unwrap();
    assert_eq!(stored.iter().map(|c| c.envelope).collect::<Vec<_>>(), [ENVELOPE, ENVELOPE]);
    // The caller's input is held as text; each agent's answer only as the run that recorded it.
    let held: Vec<(Option<&str>, &str, bool)> = stored
        .iter()
        .flat_map(|c| &c.messages)
        .map(|m| (m.executor_id.as_deref(), m.text.as_str(), m.run_id.is_some()))
        .collect();
    assert_eq!(held, [(None, "the intro", false), (Some("writer"), "", true), (Some("reviewer"), "", true)]);

    // A resume reads the writer's answer back from its run: the reviewer gets it.
    let calls = w.model_calls.load(Ordering::SeqCst);
    let after_writer = stored[0].id;
    let (_, end, _) =
        stream(&w.app, &format!("/api/workflows/runs/{first}/resume"), json!({"checkpointId": after_writer})).await;
    assert_eq!(end["text"], "review of draft of the intro", "{end}");
    assert_eq!(w.model_calls.load(Ordering::SeqCst), calls + 1);

    // An answer no run recorded makes the checkpoint unreadable instead of resuming without it.
    let mut dangling = stored[0].clone();
    let gone = RunId(uuid::Uuid::now_v7());
    dangling.messages[1].run_id = Some(gone);
    dangling.id = uuid::Uuid::now_v7();
    dangling.sequence = 3;
    w.runtime.stores.checkpoints.save(&tenant, &dangling).await.unwrap();
    let reply =
        call(Method::POST, &format!("/api/workflows/runs/{first}/resume")).json(Some(json!({}))).send(&w.app).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    let problem = reply.json();
    assert_eq!(problem["errorType"], "checkpoint_unreadable");
    assert!(problem["detail"].as_str().unwrap().contains(&format!("node 'writer' (run {gone})")), "{problem}");
}

#[tokio::test]
async fn a_workflow_run_answers_as_one_json_document_when_asked() {
    let w = world();
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "agentNames": ["writer"]})).await;
    let reply = call(Method::POST, "/api/workflows/pipeline/run")
        .header("accept", "application/json")
        .json(Some(json!({"message": "the intro"})))
        .send(&w.app)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let answer = reply.json();
    assert_eq!((answer["status"].as_str(), answer["text"].as_str()), (Some("Completed"), Some("draft of the intro")));
    let empty =
        call(Method::POST, "/api/workflows/pipeline/run").json(Some(json!({"message": " "}))).send(&w.app).await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    let missing = call(Method::POST, "/api/workflows/nope/run").json(Some(json!({"message": "x"}))).send(&w.app).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_queued_workflow_runs_one_super_step_per_attempt_when_each_attempt_s_deadline_is_spent() {
    // A soft deadline of zero: every attempt hands the run over after one super-step.
    let settings = RuntimeSettings { soft_deadline: Some(Duration::ZERO), ..RuntimeSettings::default() };
    let w = world_with(settings, 0);
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "nodes": [
        {"name": "writer", "kind": "Agent"}, {"name": "word-count", "kind": "Function"}, {"name": "reviewer", "kind": "Agent"}]}))
    .await;
    let reply = call(Method::POST, "/api/workflows/pipeline/run")
        .header("prefer", "respond-async")
        .json(Some(json!({"message": "the intro"})))
        .send(&w.app)
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text());
    assert_eq!(reply.header("preference-applied"), Some("respond-async"));
    let accepted = reply.json();
    let root = accepted["runId"].as_str().unwrap().to_owned();
    assert_eq!(get(&w.app, &format!("/api/runs/{root}")).await["status"], "Queued");
    let mut attempts = 0;
    while w.runner.drain(10).await.unwrap() > 0 {
        attempts += 1;
        assert!(attempts < 10, "the run never ended");
    }
    // One attempt per super-step, and the last one finds nothing left and closes the run.
    assert_eq!(attempts, 4);
    let row = get(&w.app, &format!("/api/runs/{root}")).await;
    assert_eq!(row["status"], "Completed", "the same run, gone on in place: {row}");
    let recorded = log(&w.app, &root).await;
    assert_eq!(executors(&recorded, "executor.completed"), ["writer", "word-count", "reviewer"]);
    assert_eq!(named(&recorded, "run.started").len(), 1);
    let end = named(&recorded, "run.completed");
    assert_eq!(end[0]["text"], "review of draft of the intro (4 words)");
    // The log is gapless across the three attempts.
    let events = w
        .runtime
        .stores
        .runs
        .read_events(&tracon_core::names::TenantId::default_tenant(), parse(&root), 0, 1000)
        .await
        .unwrap();
    assert!(events.iter().enumerate().all(|(i, e)| e.sequence == i as u64 + 1), "{events:?}");
    let job = get(&w.app, &format!("/api/jobs/{}", accepted["jobId"].as_str().unwrap())).await;
    assert_eq!(job["status"], "Succeeded", "{job}");
    assert_eq!(w.model_calls.load(Ordering::SeqCst), 2);
}

fn parse(id: &str) -> tracon_core::names::RunId {
    tracon_core::names::RunId(uuid::Uuid::parse_str(id).unwrap())
}

#[tokio::test]
async fn an_interrupted_queued_workflow_is_continued_once_from_its_latest_checkpoint_as_a_new_run() {
    interrupted_after_the_writers_checkpoint(false).await;
}

#[tokio::test]
async fn a_continuation_that_died_before_its_first_checkpoint_is_continued_from_its_predecessors() {
    interrupted_after_the_writers_checkpoint(true).await;
}

/// A queued `writer → reviewer` run whose attempt died after the writer's checkpoint; with
/// `twice`, its continuation died too, before writing a checkpoint of its own. Either way the
/// next attempt continues the chain from the writer's checkpoint: the writer does not run again.
async fn interrupted_after_the_writers_checkpoint(twice: bool) {
    let w = world();
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "agentNames": ["writer", "reviewer"]})).await;
    let tenant = tracon_core::names::TenantId::default_tenant();
    let stored = w
        .runtime
        .stores
        .workflows
        .get(&tenant, &tracon_core::names::WorkflowName::parse("pipeline").unwrap())
        .await
        .unwrap()
        .unwrap();
    // An attempt that got as far as the writer's checkpoint and died: its run is `Running`,
    // long unheard from, and its job's lease lapsed.
    let accepted = tracon_core::workflows::queued::enqueue(
        &w.runtime,
        &support::Manual,
        &tenant,
        tracon_core::identity::Caller::internal(),
        Default::default(),
        &stored,
        "the intro".into(),
        3,
    )
    .await
    .unwrap();
    let long_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let runs = &w.runtime.stores.runs;
    assert_eq!(runs.start_queued(&tenant, accepted.run_id, long_ago).await.unwrap(), Some(false));
    // Written as the first envelope generation wrote it: the writer's answer with its run and
    // its text inline (that run is not in this store; the text is read as it stands).
    let checkpoint = tracon_core::workflows::Checkpoint {
        id: uuid::Uuid::now_v7(),
        run_id: accepted.run_id,
        sequence: 1,
        envelope: 1,
        created_at: long_ago,
        position: tracon_core::workflows::checkpoints::Position { super_step: 1, next_node: 1, ..Default::default() },
        messages: vec![
            tracon_core::workflows::functions::WorkflowMessage::user("the intro"),
            tracon_core::workflows::functions::WorkflowMessage {
                role: tracon_core::workflows::functions::Role::Assistant,
                executor_id: Some("writer".into()),
                run_id: Some(RunId(uuid::Uuid::now_v7())),
                text: "draft of the intro".into(),
            },
        ],
        base: None,
    };
    w.runtime.stores.checkpoints.save(&tenant, &checkpoint).await.unwrap();
    let mut stalled = accepted.run_id;
    if twice {
        let last = runs.last_sequence(&tenant, stalled).await.unwrap();
        let closed = tracon_core::runs::reconcile::close_orphan(
            &w.runtime,
            &tenant,
            stalled,
            long_ago,
            last,
            chrono::Utc::now(),
        )
        .await
        .unwrap();
        assert!(closed);
        let row = tracon_core::runs::store::RunRecord {
            continued_from_run_id: Some(stalled),
            ..tracon_core::runs::store::RunRecord::opened(
                tracon_core::names::RunId(uuid::Uuid::now_v7()),
                "pipeline",
                Some(1),
                tracon_core::runs::store::RunStatus::Running,
                long_ago,
            )
        };
        assert!(runs.open_continuation(&tenant, stalled, &row).await.unwrap());
        stalled = row.id;
    }
    assert_eq!(w.runner.drain(10).await.unwrap(), 1);
    let old = get(&w.app, &format!("/api/runs/{stalled}")).await;
    assert_eq!(
        (old["status"].as_str(), old["error"]["errorType"].as_str()),
        (Some("Failed"), Some("orphaned")),
        "{old}"
    );
    let next = old["continuedByRunId"].as_str().unwrap().to_owned();
    let continued = get(&w.app, &format!("/api/runs/{next}")).await;
    assert_eq!(continued["status"], "Completed", "{continued}");
    let recorded = log(&w.app, &next).await;
    assert_eq!(executors(&recorded, "executor.completed"), ["reviewer"], "the writer did not run again");
    assert_eq!(w.model_calls.load(Ordering::SeqCst), 1);
    let job = get(&w.app, &format!("/api/jobs/{}", accepted.job_id)).await;
    assert_eq!(job["status"], "Succeeded", "{job}");
}

#[tokio::test]
async fn a_trigger_starts_a_queued_workflow_run() {
    let w = world();
    save(&w.app, json!({"name": "pipeline", "kind": "Sequential", "agentNames": ["writer"]})).await;
    let trigger = json!({"targetKind": "workflow", "targetName": "pipeline",
        "signingSecretConfigurationName": "Tracon:TriggerSecrets:Flow"});
    let reply = call(Method::PUT, "/api/triggers/flow").json(Some(trigger)).send(&w.app).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let missing = json!({"targetKind": "workflow", "targetName": "nope",
        "signingSecretConfigurationName": "Tracon:TriggerSecrets:Flow"});
    let reply = call(Method::PUT, "/api/triggers/other").json(Some(missing)).send(&w.app).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
}

/// Reads a run until it leaves `Running` (a mailbox decision resumes in the background).
async fn settled(app: &Router, id: &str) -> Value {
    for _ in 0..500 {
        let run = get(app, &format!("/api/runs/{id}")).await;
        if run["status"] != "Running" {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("run {id} never ended");
}

async fn decide(app: &Router, request: &str, approved: bool) -> (StatusCode, Value) {
    let reply = call(Method::POST, &format!("/api/approvals/{request}/decision"))
        .json(Some(json!({"approved": approved})))
        .send(app)
        .await;
    (reply.status, reply.json_or_null())
}

#[tokio::test]
async fn a_node_s_tool_approval_stops_the_workflow_and_the_decision_resumes_it_as_a_new_run() {
    let w = world();
    save(&w.app, json!({"name": "refunds", "kind": "Sequential", "agentNames": ["writer", "clerk", "reviewer"]})).await;
    let (first, end, frames) = run(&w.app, "refunds", "the order").await;
    assert_eq!(end["status"], "AwaitingApproval", "{end}");
    let asked = named(&frames, "approvals")[0].as_array().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!((asked[0]["toolName"].as_str(), &asked[0]["arguments"]), (Some("refund"), &json!({"amount": 5})));
    let request = asked[0]["requestId"].as_str().unwrap().to_owned();
    assert_eq!(w.refunds.load(Ordering::SeqCst), 0, "nothing is refunded before the decision");

    // The root and the clerk's run both wait; the request is in the mailbox under the node.
    assert_eq!(get(&w.app, &format!("/api/runs/{first}")).await["status"], "AwaitingApproval");
    let pending = get(&w.app, &format!("/api/approvals/{request}")).await;
    let node = pending["runId"].as_str().unwrap().to_owned();
    let node_run = get(&w.app, &format!("/api/runs/{node}")).await;
    assert_eq!(
        (node_run["status"].as_str(), node_run["parentRunId"].as_str()),
        (Some("AwaitingApproval"), Some(first.as_str()))
    );
    let log_before = log(&w.app, &first).await;
    assert_eq!(executors(&log_before, "executor.completed"), ["writer"]);
    let calls_before = w.model_calls.load(Ordering::SeqCst);

    // Deciding in band on the node's run is refused: the workflow resumes through the mailbox.
    let in_band = call(Method::POST, "/api/agents/clerk/run")
        .json(Some(json!({"approvals": [{"requestId": request, "approved": true}]})))
        .send(&w.app)
        .await;
    assert_eq!(in_band.status, StatusCode::BAD_REQUEST, "{}", in_band.text());

    let (status, decision) = decide(&w.app, &request, true).await;
    assert_eq!(status, StatusCode::OK, "{decision}");
    let second = decision["resumedRunId"].as_str().expect("the decision resumed the workflow").to_owned();
    assert_ne!(second, first, "the decision opens a new run");
    let resumed = settled(&w.app, &second).await;
    assert_eq!(resumed["status"], "Completed", "{resumed}");
    assert_eq!(w.refunds.load(Ordering::SeqCst), 1, "the approved call ran once");
    // The writer did not run again: two more model calls, the clerk's answer and the reviewer's.
    assert_eq!(w.model_calls.load(Ordering::SeqCst), calls_before + 2);
    let log_after = log(&w.app, &second).await;
    assert_eq!(executors(&log_after, "executor.completed"), ["clerk", "reviewer"]);
    assert_eq!(named(&log_after, "workflow.started")[0]["resumedFrom"]["runId"], first.as_str());
    let output = named(&log_after, "run.completed");
    assert!(output.iter().any(|o| o.to_string().contains("review of clerk: refunded 5")), "{output:?}");

    // Neither stopped run is rewritten; the request names the run that resumed its node.
    assert_eq!(get(&w.app, &format!("/api/runs/{first}")).await["status"], "AwaitingApproval");
    assert_eq!(get(&w.app, &format!("/api/runs/{node}")).await["status"], "AwaitingApproval");
    let decided = get(&w.app, &format!("/api/approvals/{request}")).await;
    assert_eq!(decided["status"], "Approved");
    let again = decide(&w.app, &request, false).await;
    assert_eq!(again.0, StatusCode::CONFLICT, "{}", again.1);
    assert_eq!(w.refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_denied_node_call_reaches_the_model_as_a_refusal_and_the_workflow_goes_on() {
    let w = world();
    save(&w.app, json!({"name": "refunds", "kind": "Sequential", "agentNames": ["clerk", "reviewer"]})).await;
    let (_, end, frames) = run(&w.app, "refunds", "the order").await;
    assert_eq!(end["status"], "AwaitingApproval", "{end}");
    let request = named(&frames, "approvals")[0][0]["requestId"].as_str().unwrap().to_owned();
    let (status, decision) = decide(&w.app, &request, false).await;
    assert_eq!(status, StatusCode::OK, "{decision}");
    let resumed = settled(&w.app, decision["resumedRunId"].as_str().unwrap()).await;
    assert_eq!(resumed["status"], "Completed", "{resumed}");
    assert_eq!(w.refunds.load(Ordering::SeqCst), 0, "a denied call never runs");
    let log = log(&w.app, resumed["id"].as_str().unwrap()).await;
    let output = named(&log, "run.completed");
    assert!(output.iter().any(|o| o.to_string().contains("denied")), "{output:?}");
}

#[tokio::test]
async fn a_concurrent_step_keeps_the_answers_of_nodes_that_finished_while_one_waits_for_approval() {
    let w = world();
    save(&w.app, json!({"name": "fanout", "kind": "Concurrent", "agentNames": ["writer", "clerk"]})).await;
    let (first, end, frames) = run(&w.app, "fanout", "the order").await;
    assert_eq!(end["status"], "AwaitingApproval", "{end}");
    assert_eq!(executors(&log(&w.app, &first).await, "executor.completed"), ["writer"]);
    let request = named(&frames, "approvals")[0][0]["requestId"].as_str().unwrap().to_owned();
    let calls_before = w.model_calls.load(Ordering::SeqCst);
    let (_, decision) = decide(&w.app, &request, true).await;
    let second = decision["resumedRunId"].as_str().unwrap().to_owned();
    let resumed = settled(&w.app, &second).await;
    assert_eq!(resumed["status"], "Completed", "{resumed}");
    // Only the clerk went on; the writer's answer came from the checkpoint.
    assert_eq!(w.model_calls.load(Ordering::SeqCst), calls_before + 1);
    let log = log(&w.app, &second).await;
    assert_eq!(executors(&log, "executor.completed"), ["clerk"]);
    let output = named(&log, "run.completed").iter().map(|o| o.to_string()).collect::<String>();
    assert!(output.contains("draft of the order") && output.contains("clerk: refunded 5"), "{output}");
}

#[tokio::test]
async fn with_checkpointing_off_a_node_that_needs_approval_fails_the_workflow_instead_of_hanging() {
    let w = world_with(RuntimeSettings { workflow_checkpointing: false, ..RuntimeSettings::default() }, 0);
    save(&w.app, json!({"name": "refunds", "kind": "Sequential", "agentNames": ["clerk"]})).await;
    let (_, end, _) = run(&w.app, "refunds", "the order").await;
    assert_eq!(end["status"], "Failed", "{end}");
    assert_eq!(end["errorType"], "child_cannot_wait", "{end}");
    assert_eq!(w.refunds.load(Ordering::SeqCst), 0);
    let pending = get(&w.app, "/api/approvals/pending").await;
    assert_eq!(pending, json!([]), "nothing waits for a decision that could resume nothing");
}
