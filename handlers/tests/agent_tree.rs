//! Agents calling agents through the router: a three-level tree (`router` → `researcher` →
//! `leaf`) whose agents answer from a scripted model that tells them apart by their
//! instructions. Each model call spends 10 input and 5 output tokens at a price of 1 (per
//! million) each, so every call costs 0.000015. The tests read the tree back from the leaf,
//! walk the shared budget's limits one by one, and check the wait limits, approvals,
//! provider failures and cancellation inside a tree.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::{TestClock, approval_tool, call, frames};
use tracon_core::definition::{AgentDefinition, SubAgentSettings};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest, ProviderError, ProviderErrorKind};
use tracon_core::ports::Platform;
use tracon_core::pricing::{ModelPrice, Pricing};
use tracon_core::runs::tree::AgentGraphSettings;
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_handlers::{AppState, HttpSettings};

/// What the leaf does when asked.
#[derive(Clone, Copy, PartialEq)]
enum Leaf {
    Answers,
    Hangs,
    ProviderFails,
    NeedsApproval,
}

struct Tree {
    app: Router,
    runtime: Arc<Runtime>,
    model_calls: Arc<AtomicU32>,
}

/// The model: each agent (told apart by its instructions) calls the next one down with its
/// first step and answers with what it got back; the leaf answers at once (or as `leaf`
/// says). Every call takes 30 s of `clock`'s time.
fn model(leaf: Leaf, clock: Arc<TestClock>, calls: Arc<AtomicU32>) -> ScriptedProvider {
    ScriptedProvider::from_fn("script", move |request: &ModelRequest| {
        calls.fetch_add(1, Ordering::SeqCst);
        clock.advance(30);
        let system = request.system.clone().unwrap_or_default();
        let answered = request.messages.iter().rev().find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        });
        let turn = match (system.as_str(), answered) {
            ("LEAF", None) => match leaf {
                Leaf::Answers => ScriptedTurn::text("the leaf's answer"),
                Leaf::Hangs => ScriptedTurn::hanging(),
                Leaf::ProviderFails => ScriptedTurn::failing(ProviderError::new(
                    ProviderErrorKind::ServerError,
                    "HttpError",
                    "upstream said 503",
                )),
                Leaf::NeedsApproval => ScriptedTurn::tool_call("wire_money", json!({})),
            },
            ("LEAF", Some(result)) => ScriptedTurn::text(&format!("leaf got {result}")),
            ("MID", None) => ScriptedTurn::tool_call("ask_leaf", json!({"task": "find it"})),
            ("MID", Some(result)) => ScriptedTurn::text(&format!("mid: {result}")),
            (_, None) => ScriptedTurn::tool_call("ask_researcher", json!({"task": "research it"})),
            (_, Some(result)) => ScriptedTurn::text(&format!("root: {result}")),
        };
        turn.with_usage(10, 5)
    })
}

fn tree(leaf: Leaf, graph: AgentGraphSettings, sub_agents: Option<SubAgentSettings>) -> Tree {
    let clock = Arc::new(TestClock::shifted());
    let calls = Arc::new(AtomicU32::new(0));
    let platform = Platform { clock: clock.clone(), spawner: tracon_core::ports::tokio_rt::platform().spawner };
    let price = ModelPrice { input_per_million: 1.0, output_per_million: 1.0, cached_input_per_million: None };
    let wire = approval_tool("wire_money", "Moves money.", json!({"type": "object"}), "wired");
    let router = AgentDefinition::new("router", "script", "m").with_instructions("ROOT");
    let runtime = RuntimeBuilder::new(platform)
        .settings(RuntimeSettings { agent_graph: Arc::new(graph), ..RuntimeSettings::default() })
        .pricing(Pricing::new("USD").with_price("script", "m", price))
        .add_provider(Arc::new(model(leaf, clock, calls.clone())) as Arc<dyn ModelProvider>)
        .add_tool(wire)
        .add_agent(AgentDefinition { callable_agent_names: vec!["researcher".into()], ..router })
        .add_agent(AgentDefinition {
            callable_agent_names: vec!["leaf".into()],
            sub_agents,
            ..AgentDefinition::new("researcher", "script", "m").with_instructions("MID")
        })
        .add_agent(AgentDefinition::new("leaf", "script", "m").with_instructions("LEAF").with_tools(&["wire_money"]))
        .build()
        .unwrap();
    let runtime = Arc::new(runtime);
    Tree {
        app: tracon_handlers::router(AppState::new(runtime.clone(), HttpSettings::default())),
        runtime,
        model_calls: calls,
    }
}

/// Runs the root to its end; its run id and its `done` or `error` frame.
async fn run_root(app: &Router) -> (String, Value) {
    let reply = call(Method::POST, "/api/agents/router/run").json(Some(json!({"message": "go"}))).send(app).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let frames = frames(&reply.text());
    let run_id = frames.iter().find(|(e, _)| e == "run").map(|(_, d)| d["runId"].as_str().unwrap().to_owned()).unwrap();
    let end = frames.iter().find(|(e, _)| e == "done" || e == "error").map(|(_, d)| d.clone()).unwrap();
    (run_id, end)
}

async fn get(app: &Router, path: &str) -> Value {
    let reply = call(Method::GET, path).send(app).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text());
    reply.json()
}

/// The root's recorded log: `(frame name, data)`.
async fn root_log(app: &Router, root: &str) -> Vec<(String, Value)> {
    let reply = call(Method::GET, &format!("/api/runs/{root}/events")).send(app).await;
    frames(&reply.text())
}

fn named<'a>(log: &'a [(String, Value)], name: &str) -> Vec<&'a Value> {
    log.iter().filter(|(n, _)| n == name).map(|(_, d)| d).collect()
}

fn member<'a>(tree: &'a Value, agent: &str) -> Option<&'a Value> {
    tree["runs"].as_array().unwrap().iter().find(|r| r["agentName"] == agent)
}

#[tokio::test]
async fn a_three_level_tree_runs_each_child_in_its_own_row_and_reads_back_from_the_leaf() {
    let t = tree(Leaf::Answers, AgentGraphSettings::default(), None);
    let (root, end) = run_root(&t.app).await;
    assert_eq!(end["status"], "Completed", "{end}");
    assert_eq!(end["text"], "root: mid: the leaf's answer");

    let from_root = get(&t.app, &format!("/api/runs/{root}/tree")).await;
    let runs = from_root["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3, "{from_root}");
    let (r, m, l) = (
        member(&from_root, "router").unwrap(),
        member(&from_root, "researcher").unwrap(),
        member(&from_root, "leaf").unwrap(),
    );
    assert_eq!((r["depth"].as_u64(), m["depth"].as_u64(), l["depth"].as_u64()), (Some(0), Some(1), Some(2)));
    assert_eq!(m["parentRunId"], r["id"]);
    assert_eq!(l["parentRunId"], m["id"]);
    assert_eq!((m["rootRunId"].as_str(), l["rootRunId"].as_str()), (Some(root.as_str()), Some(root.as_str())));
    assert!(runs.iter().all(|run| run["status"] == "Completed"), "{from_root}");

    // From any member, the same tree.
    let leaf_id = l["id"].as_str().unwrap();
    let from_leaf = get(&t.app, &format!("/api/runs/{leaf_id}/tree")).await;
    assert_eq!(from_leaf, from_root);

    // Tokens and cost roll up: five model calls (two in the root and the researcher, one in
    // the leaf), each 15 tokens and 0.000015.
    assert_eq!(t.model_calls.load(Ordering::SeqCst), 5);
    assert_eq!(from_root["totalUsage"]["totalTokens"], 75, "{from_root}");
    let sum: f64 = runs.iter().map(|run| run["cost"]["totalCost"].as_f64().unwrap()).sum();
    let total = from_root["totalCost"].as_f64().unwrap();
    assert!((total - sum).abs() < 1e-12 && (total - 5.0 * 0.000015).abs() < 1e-12, "{total} vs {sum}");
    assert_eq!(from_root["currency"], "USD");

    // The root's log carries both children's starts and ends, the leaf's under the researcher.
    let log = root_log(&t.app, &root).await;
    let started = named(&log, "child.started");
    let completed = named(&log, "child.completed");
    assert_eq!(started.len(), 2, "{log:?}");
    assert_eq!(completed.len(), 2, "{log:?}");
    assert_eq!(started[1]["agentName"], "leaf");
    assert_eq!(started[1]["parentRunId"], m["id"]);
    assert_eq!(started[1]["depth"], 2);
    assert!(completed.iter().all(|c| c["status"] == "Completed"));
    assert!(named(&log, "child.timed_out").is_empty());
}

/// The leaf's refusal text as the researcher's tool got it (no run row for the leaf).
async fn refused_leaf(graph: AgentGraphSettings, setting: &str) {
    let t = tree(Leaf::Answers, graph, None);
    let (root, end) = run_root(&t.app).await;
    assert_eq!(end["status"], "Completed", "{end}");
    let text = end["text"].as_str().unwrap();
    assert!(text.contains("was not called") && text.contains(setting), "{text}");
    let tree = get(&t.app, &format!("/api/runs/{root}/tree")).await;
    assert_eq!(tree["runs"].as_array().unwrap().len(), 2, "{tree}");
    assert!(member(&tree, "leaf").is_none());
}

#[tokio::test]
async fn depth_and_child_run_limits_refuse_the_call_as_the_tool_result_without_a_run_row() {
    refused_leaf(AgentGraphSettings { max_depth: 1, ..AgentGraphSettings::default() }, "MaxDepth").await;
    refused_leaf(AgentGraphSettings { max_total_child_runs: 1, ..AgentGraphSettings::default() }, "MaxTotalChildRuns")
        .await;
}

/// Each spend limit cuts the tree off between model turns: the researcher's second model
/// call finds the budget spent (three calls so far: root, researcher, leaf), so the
/// researcher fails naming the limit, and the root's next call does too.
async fn cut_off(graph: AgentGraphSettings, setting: &str, leaf_runs: bool) {
    let t = tree(Leaf::Answers, graph, None);
    let (root, end) = run_root(&t.app).await;
    assert_eq!(end["status"], "Failed", "{end}");
    assert_eq!(end["errorType"], "tree_budget_exceeded", "{end}");
    assert!(end["message"].as_str().unwrap().contains(setting), "{end}");
    let tree = get(&t.app, &format!("/api/runs/{root}/tree")).await;
    let researcher = member(&tree, "researcher").unwrap();
    assert_eq!(researcher["status"], "Failed", "{tree}");
    assert_eq!(researcher["error"]["errorType"], "tree_budget_exceeded");
    assert_eq!(member(&tree, "leaf").is_some(), leaf_runs, "{tree}");
    assert_eq!(t.model_calls.load(Ordering::SeqCst), 2 + u32::from(leaf_runs));
}

#[tokio::test]
async fn token_cost_and_duration_limits_cut_every_run_of_the_tree_off_between_model_turns() {
    // 45 tokens after the leaf's call; the limit is 40: the researcher's next turn stops.
    cut_off(AgentGraphSettings { max_total_tokens: Some(40), ..AgentGraphSettings::default() }, "MaxTotalTokens", true)
        .await;
    // 0.000045 after the leaf's call.
    cut_off(
        AgentGraphSettings { max_total_cost: Some(0.00004), ..AgentGraphSettings::default() },
        "MaxTotalCost",
        true,
    )
    .await;
    // Each model call takes 30 s: after the root's and the researcher's, the tree is 60 s
    // old and the leaf is not started (the refusal is the researcher's tool result), and
    // the researcher's next turn is cut off.
    let graph = AgentGraphSettings { max_duration: Some(Duration::from_secs(60)), ..AgentGraphSettings::default() };
    cut_off(graph, "MaxDurationSeconds", false).await;
}

#[tokio::test]
async fn a_child_that_needs_approval_fails_and_its_caller_is_told() {
    let t = tree(Leaf::NeedsApproval, AgentGraphSettings::default(), None);
    let (root, end) = run_root(&t.app).await;
    assert_eq!(end["status"], "Completed", "{end}");
    let tree = get(&t.app, &format!("/api/runs/{root}/tree")).await;
    let leaf = member(&tree, "leaf").unwrap();
    assert_eq!(leaf["status"], "Failed", "{tree}");
    assert_eq!(leaf["error"]["errorType"], "child_cannot_wait");
    assert!(end["text"].as_str().unwrap().contains("approval for wire_money"), "{end}");
    let pending = get(&t.app, "/api/approvals/pending").await;
    assert_eq!(pending.as_array().map(Vec::len), Some(0), "{pending}");
}

#[tokio::test]
async fn a_provider_failure_in_a_child_is_reported_as_that_and_not_as_a_timeout() {
    let t = tree(Leaf::ProviderFails, AgentGraphSettings::default(), None);
    let (root, end) = run_root(&t.app).await;
    assert_eq!(end["status"], "Completed", "{end}");
    let text = end["text"].as_str().unwrap();
    assert!(text.contains("The agent 'leaf' failed"), "{text}");
    assert!(!text.contains("upstream said 503"), "foreign text stays out: {text}");
    let tree = get(&t.app, &format!("/api/runs/{root}/tree")).await;
    assert_eq!(member(&tree, "leaf").unwrap()["error"]["errorType"], "provider_unavailable");
    let log = root_log(&t.app, &root).await;
    assert!(named(&log, "child.timed_out").is_empty(), "{log:?}");
    assert_eq!(named(&log, "child.completed")[0]["status"], "Failed");
}

/// The leaf hangs; the researcher's wait limits are `deadline` and `wait` seconds (the
/// root's are the installation's, 120 and 150).
async fn timed_out(deadline: u32, wait: u32) -> (Tree, String, Vec<(String, Value)>) {
    let limits = SubAgentSettings { child_deadline_seconds: Some(deadline), wait_timeout_seconds: Some(wait) };
    let t = tree(Leaf::Hangs, AgentGraphSettings::default(), Some(limits));
    let (root, end) = run_root(&t.app).await;
    assert_eq!(end["status"], "Completed", "the tree goes on: {end}");
    let log = root_log(&t.app, &root).await;
    (t, root, log)
}

#[tokio::test(start_paused = true)]
async fn a_child_past_its_deadline_is_stopped_and_the_event_names_that_layer() {
    let (t, root, log) = timed_out(5, 60).await;
    let events = named(&log, "child.timed_out");
    assert_eq!(events.len(), 1, "{log:?}");
    assert_eq!(events[0]["layer"], "ChildDeadline");
    assert_eq!(events[0]["agentName"], "leaf");
    let tree = get(&t.app, &format!("/api/runs/{root}/tree")).await;
    assert_eq!(member(&tree, "leaf").unwrap()["status"], "Canceled", "{tree}");
}

#[tokio::test(start_paused = true)]
async fn a_child_that_does_not_stop_in_time_is_left_behind_at_the_wait_timeout() {
    // No time between the two layers: the child is asked to stop and not waited for.
    let (_, _, log) = timed_out(5, 5).await;
    let events = named(&log, "child.timed_out");
    assert_eq!(events.len(), 1, "{log:?}");
    assert_eq!(events[0]["layer"], "WaitTimeout");
    // Its eventual end is discarded: no child.completed for the leaf.
    assert!(named(&log, "child.completed").iter().all(|c| c["agentName"] != "leaf"), "{log:?}");
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_root_cancels_every_run_under_it() {
    let t = tree(Leaf::Hangs, AgentGraphSettings::default(), None);
    let app = t.app.clone();
    let running = tokio::spawn(async move { run_root(&app).await });
    // Wait until the leaf is running (three runs in the store).
    let root = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let list = get(&t.app, "/api/runs").await;
        let runs = list.as_array().unwrap();
        if runs.len() == 3 && runs.iter().all(|r| r["status"] == "Running") {
            break runs.iter().find(|r| r["depth"] == 0).unwrap()["id"].as_str().unwrap().to_owned();
        }
    };
    let reply = call(Method::POST, &format!("/api/runs/{root}/cancel")).send(&t.app).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text());
    let (_, end) = running.await.unwrap();
    assert_eq!(end["status"], "Canceled", "{end}");
    // The children end too (their ends are written as they unwind).
    let tree = loop {
        let tree = get(&t.app, &format!("/api/runs/{root}/tree")).await;
        if tree["runs"].as_array().unwrap().iter().all(|r| r["status"] != "Running") {
            break tree;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for agent in ["researcher", "leaf"] {
        assert_eq!(member(&tree, agent).unwrap()["status"], "Canceled", "{tree}");
    }
    drop(t.runtime);
}

#[tokio::test]
async fn sub_agent_limits_and_generated_tool_names_are_checked_at_save() {
    let t = tree(Leaf::Answers, AgentGraphSettings::default(), None);
    let bad = |sub: Value| json!({"name": "x", "model": {"provider": "script", "model": "m"}, "subAgents": sub});
    for (body, field) in [
        (bad(json!({"childDeadlineSeconds": 0})), "subAgents.childDeadlineSeconds"),
        (bad(json!({"waitTimeoutSeconds": 86_401})), "subAgents.waitTimeoutSeconds"),
        (bad(json!({"childDeadlineSeconds": 30, "waitTimeoutSeconds": 10})), "subAgents.waitTimeoutSeconds"),
    ] {
        let reply = call(Method::POST, "/api/agents/validate").json(Some(body)).send(&t.app).await;
        assert_eq!(reply.status, StatusCode::OK);
        let report = reply.json();
        assert_eq!(report["valid"], false, "{report}");
        assert!(report["problems"].as_array().unwrap().iter().any(|p| p["field"] == field), "{report}");
    }
    // Settings are objects: an array of the fields' values is not read as one.
    for shaped in [
        json!({"subAgents": [null, null]}),
        json!({"harness": [null, null]}),
        json!({"harness": {"loop": [[{"kind": "completionMarker", "marker": "x"}], 3]}}),
        json!({"harness": {"loop": {"criteria": [["completionMarker", "x"]]}}}),
        json!({"model": ["script", "m"]}),
        json!({"parameters": [["customer"]]}),
    ] {
        let mut body = json!({"name": "w", "model": {"provider": "script", "model": "m"}});
        body.as_object_mut().unwrap().extend(shaped.as_object().unwrap().clone());
        let reply = call(Method::POST, "/api/agents/validate").json(Some(body)).send(&t.app).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{shaped}: {}", reply.text());
    }
    // A wrong type inside a settings object is still named by its path.
    let body = json!({"name": "w", "model": {"provider": "script", "model": "m"},
        "subAgents": {"childDeadlineSeconds": "soon"}});
    let reply = call(Method::POST, "/api/agents/validate").json(Some(body)).send(&t.app).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.text().contains("subAgents.childDeadlineSeconds"), "{}", reply.text());
    // A callable agent whose generated tool would collide with a listed tool.
    let body = json!({"name": "y", "model": {"provider": "script", "model": "m"},
        "toolNames": ["ask_leaf"], "callableAgentNames": ["leaf"]});
    let report = call(Method::POST, "/api/agents/validate").json(Some(body)).send(&t.app).await.json();
    assert!(
        report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["field"] == "callableAgentNames[0]" && p["code"] == "duplicate"),
        "{report}"
    );
    // A definition with limits in range is accepted and keeps them.
    let ok = json!({"name": "z", "model": {"provider": "script", "model": "m"}, "callableAgentNames": ["leaf"],
        "subAgents": {"childDeadlineSeconds": 10, "waitTimeoutSeconds": 20}});
    let reply = call(Method::POST, "/api/agents").json(Some(ok)).send(&t.app).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    assert_eq!(get(&t.app, "/api/agents/z").await["definition"]["subAgents"]["waitTimeoutSeconds"], 20);
}
