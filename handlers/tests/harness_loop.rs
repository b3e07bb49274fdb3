//! The harness loop through the router. The scripted agent model answers
//! `"draft {n}"` on its n-th iteration (it counts the user messages it was sent) and says
//! the marker, ticks its task list, or cites, from the iteration its test asks; a scripted
//! judge answers CONTINUE until the agent's answer says `draft 2`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{call, frames};
use tracon_core::definition::LoopCriterion;
use tracon_core::harness::{LoopContext, LoopEvaluation, LoopEvaluator};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest};
use tracon_core::names::{RunId, TenantId};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_handlers::{AppState, HttpSettings};

struct App {
    app: Router,
    runtime: Arc<Runtime>,
    agent_calls: Arc<AtomicU32>,
    judge_calls: Arc<AtomicU32>,
}

/// Done on iteration `done_at`: the answer then says `ALL DONE`, ticks `- [x] fix`, cites `[1]`.
fn agent_model(done_at: usize, calls: Arc<AtomicU32>) -> ScriptedProvider {
    ScriptedProvider::from_fn("script", move |request: &ModelRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let n = request.messages.iter().filter(|m| matches!(m, Message::User { .. })).count();
        let text = if n >= done_at {
            format!("draft {n}: ALL DONE [1]\n- [x] find\n- [x] fix")
        } else {
            format!("draft {n}: working\n- [x] find\n- [ ] fix")
        };
        ScriptedTurn::text(&text).with_usage(10, 5)
    })
}

fn judge_model(calls: Arc<AtomicU32>) -> ScriptedProvider {
    ScriptedProvider::from_fn("judge", move |request: &ModelRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        let asked = match request.messages.last() {
            Some(Message::User { text }) => text.clone(),
            _ => String::new(),
        };
        if asked.contains("draft 2") {
            ScriptedTurn::text("DONE")
        } else {
            ScriptedTurn::text("CONTINUE\nAdd the fix.")
        }
    })
}

/// Cites or not: `hasCitations` registered in code; `broken` always fails to evaluate.
struct Citations;

#[async_trait::async_trait]
impl LoopEvaluator for Citations {
    async fn evaluate(&self, _: &LoopCriterion, context: &LoopContext<'_>) -> Result<LoopEvaluation, String> {
        Ok(if context.last_text.contains("[1]") {
            LoopEvaluation::Stop
        } else {
            LoopEvaluation::Continue(Some("Add a numbered citation.".into()))
        })
    }
}

struct Broken;

#[async_trait::async_trait]
impl LoopEvaluator for Broken {
    async fn evaluate(&self, _: &LoopCriterion, _: &LoopContext<'_>) -> Result<LoopEvaluation, String> {
        Err("the evaluator's backend is down".into())
    }
}

fn app(done_at: usize, judge: bool) -> App {
    let (agent_calls, judge_calls) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let settings = RuntimeSettings {
        loop_judge: judge.then(|| ("judge".to_owned(), "j".to_owned())),
        ..RuntimeSettings::default()
    };
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .settings(settings)
        .add_provider(Arc::new(agent_model(done_at, agent_calls.clone())) as Arc<dyn ModelProvider>)
        .add_provider(Arc::new(judge_model(judge_calls.clone())) as Arc<dyn ModelProvider>)
        .add_loop_evaluator("hasCitations", Arc::new(Citations))
        .add_loop_evaluator("broken", Arc::new(Broken))
        .build()
        .unwrap();
    let runtime = Arc::new(runtime);
    let app = tracon_handlers::router(AppState::new(runtime.clone(), HttpSettings::default()));
    App { app, runtime, agent_calls, judge_calls }
}

async fn save(app: &Router, name: &str, harness_loop: Value) -> (StatusCode, Value) {
    let body = json!({"name": name, "model": {"provider": "script", "model": "m"}, "harness": {"loop": harness_loop}});
    let reply = call(Method::POST, "/api/agents").json(Some(body)).send(app).await;
    (reply.status, reply.json())
}

/// Runs `agent`: the final text, and the recorded `loop.iteration_completed` events.
async fn run(app: &Router, agent: &str) -> (String, String, Vec<Value>) {
    let reply =
        call(Method::POST, &format!("/api/agents/{agent}/run")).json(Some(json!({"message": "go"}))).send(app).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let live = frames(&reply.text());
    let id = live.iter().find(|(e, _)| e == "run").unwrap().1["runId"].as_str().unwrap().to_owned();
    let done = live.iter().find(|(e, _)| e == "done").unwrap_or_else(|| panic!("{live:?}")).1.clone();
    let log = call(Method::GET, &format!("/api/runs/{id}/events")).send(app).await;
    let events =
        frames(&log.text()).into_iter().filter(|(e, _)| e == "loop.iteration_completed").map(|(_, d)| d).collect();
    (id, done["text"].as_str().unwrap().to_owned(), events)
}

#[tokio::test]
async fn a_completion_marker_loop_invokes_the_agent_again_until_the_marker_appears() {
    let a = app(3, false);
    let (status, doc) =
        save(&a.app, "writer", json!({"criteria": [{"kind": "completionMarker", "marker": "ALL DONE"}]})).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let (id, text, events) = run(&a.app, "writer").await;
    assert!(text.starts_with("draft 3: ALL DONE"), "{text}");
    assert_eq!(a.agent_calls.load(Ordering::SeqCst), 3);
    let continued: Vec<bool> = events.iter().map(|e| e["continued"].as_bool().unwrap()).collect();
    assert_eq!(continued, [true, true, false], "{events:?}");
    assert_eq!(events[0]["criterion"], "completionMarker");
    assert_eq!(events[0]["iteration"], 1);
    assert!(events.iter().all(|e| e.get("ceilingReached").is_none()));

    // The run's usage counts every iteration; each iteration's answer and the feedback that
    // started the next are steps of the ledger, so a continuation goes on from there.
    let run = call(Method::GET, &format!("/api/runs/{id}")).send(&a.app).await.json();
    assert_eq!(run["usage"]["totalTokens"], 45, "{run}");
    let steps =
        a.runtime.stores.runs.list_steps(&TenantId::default_tenant(), RunId(id.parse().unwrap())).await.unwrap();
    assert_eq!(steps.len(), 4, "two answers and two feedback messages");
    assert!(matches!(&steps[1].message, Message::User { text } if text.contains("ALL DONE")), "{:?}", steps[1]);
}

#[tokio::test]
async fn the_ceiling_is_never_open_and_the_last_event_says_it_was_reached() {
    let a = app(usize::MAX, false);
    save(
        &a.app,
        "capped",
        json!({"criteria": [{"kind": "completionMarker", "marker": "ALL DONE"}], "maxIterations": 3}),
    )
    .await;
    let (_, text, events) = run(&a.app, "capped").await;
    assert!(text.starts_with("draft 3: working"), "{text}");
    assert_eq!(a.agent_calls.load(Ordering::SeqCst), 3);
    assert_eq!(events.len(), 2, "the turn at the ceiling is not evaluated: {events:?}");
    assert_eq!(events[1]["ceilingReached"], true);

    // Unset, the ceiling is Tracon's default of 10.
    let b = app(usize::MAX, false);
    save(&b.app, "default", json!({"criteria": [{"kind": "completionMarker", "marker": "ALL DONE"}]})).await;
    let (_, _, events) = run(&b.app, "default").await;
    assert_eq!(b.agent_calls.load(Ordering::SeqCst), 10);
    assert_eq!(events.len(), 9);
}

#[tokio::test]
async fn criteria_run_in_order_and_the_first_that_asks_for_more_wins() {
    // The marker is said from iteration 2, the task list is ticked from iteration 2 too; the
    // registered citation check agrees from then on: two iterations.
    let a = app(2, false);
    let criteria = json!({"criteria": [
        {"kind": "todoCompletion"},
        {"kind": "hasCitations"},
        {"kind": "completionMarker", "marker": "ALL DONE"}
    ]});
    let (status, doc) = save(&a.app, "careful", criteria).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let (_, text, events) = run(&a.app, "careful").await;
    assert!(text.starts_with("draft 2"), "{text}");
    assert_eq!(events[0]["criterion"], "todoCompletion", "the first criterion asked: {events:?}");
    assert_eq!(events[1]["continued"], false);
}

#[tokio::test]
async fn an_ai_judge_decides_on_its_own_binding_and_a_failing_criterion_stops_the_loop() {
    let a = app(usize::MAX, true);
    let (status, doc) =
        save(&a.app, "judged", json!({"criteria": [{"kind": "aiJudge", "judgeCriteria": "The fix is in."}]})).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    let (_, text, events) = run(&a.app, "judged").await;
    assert!(text.starts_with("draft 2"), "{text}");
    assert_eq!((a.agent_calls.load(Ordering::SeqCst), a.judge_calls.load(Ordering::SeqCst)), (2, 2));
    assert_eq!(events.len(), 2);

    let b = app(usize::MAX, false);
    save(&b.app, "fragile", json!({"criteria": [{"kind": "broken"}, {"kind": "completionMarker", "marker": "X"}]}))
        .await;
    let (_, text, events) = run(&b.app, "fragile").await;
    assert!(text.starts_with("draft 1"), "the finished work is returned: {text}");
    assert_eq!(events.len(), 1);
    assert_eq!((events[0]["failed"].as_bool(), events[0]["criterion"].as_str()), (Some(true), Some("broken")));
}

#[tokio::test]
async fn a_loop_that_could_never_stop_or_run_is_refused_at_save() {
    let a = app(1, false);
    for (criteria, field) in [
        (json!({"criteria": [{"kind": "vibes"}]}), "harness.loop.criteria[0].kind"),
        (json!({"criteria": []}), "harness.loop.criteria"),
        (json!({"criteria": [{"kind": "completionMarker"}]}), "harness.loop.criteria[0].marker"),
        (json!({"criteria": [{"kind": "aiJudge", "judgeCriteria": "done"}]}), "harness.loop.criteria[0].kind"),
        (json!({"criteria": [{"kind": "aiJudge"}]}), "harness.loop.criteria[0].judgeCriteria"),
        (json!({"criteria": [{"kind": "todoCompletion", "modes": ["someday"]}]}), "harness.loop.criteria[0].modes[0]"),
        (json!({"criteria": [{"kind": "backgroundTaskCompletion"}], "maxIterations": 0}), "harness.loop.maxIterations"),
        (
            json!({"criteria": [{"kind": "backgroundTaskCompletion"}], "maxIterations": 101}),
            "harness.loop.maxIterations",
        ),
    ] {
        let (status, doc) = save(&a.app, "bad", criteria.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{criteria}: {doc}");
        let problems = doc["problems"].as_array().unwrap();
        assert!(problems.iter().any(|p| p["field"] == field), "{criteria}: {doc}");
    }
    // backgroundTaskCompletion with nothing in the background stops at once.
    let (status, _) = save(&a.app, "quiet", json!({"criteria": [{"kind": "backgroundTaskCompletion"}]})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, _, events) = run(&a.app, "quiet").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["continued"], false);
}
