//! End-to-end workflows: the real `tracon` binary, over TCP, against the mock model server, in
//! memory and on Postgres. The crash matrix (`workflow_crash_matrix.rs`) runs the other four
//! kinds through the binary; this runs `Magentic`: a manager that plans, stalls twice, plans
//! again, steers two members and answers, with the tree, its costs and the checkpoints it
//! leaves.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{Value, json};
use support::{Frame, Tracon, create, database_url, last_user_message, parse_frames, stream};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

/// Each model's price (input and output per million tokens): different per model, so the
/// tree's total cost holds only if every node's run is priced as its own model.
const PRICES: [(&str, &str, &str); 3] =
    [("lead-model", "2", "8"), ("writer-model", "1", "4"), ("reviewer-model", "0.5", "1.5")];

fn price(model: &str) -> (f64, f64) {
    let (_, input, output) = PRICES.iter().find(|(m, _, _)| *m == model).unwrap();
    (input.parse().unwrap(), output.parse().unwrap())
}

/// The server's settings: the OpenAI provider is the mock, each model priced; `extra` on top.
async fn start(mock: &MockServer, extra: &[(&str, &str)]) -> Tracon {
    let mut env = vec![
        ("OPENAI_API_KEY".to_owned(), "test-openai-key".to_owned()),
        ("Tracon__Providers__OpenAI__Endpoint".to_owned(), format!("{}/v1", mock.base_url())),
    ];
    for (i, (model, input, output)) in PRICES.iter().enumerate() {
        let key = |k: &str| format!("Tracon__Pricing__Models__{i}__{k}");
        env.push((key("Provider"), "openai".to_owned()));
        env.push((key("Model"), (*model).to_owned()));
        env.push((key("InputPerMillion"), (*input).to_owned()));
        env.push((key("OutputPerMillion"), (*output).to_owned()));
    }
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.extend_from_slice(extra);
    Tracon::start(&env).await
}

async fn get(server: &Tracon, path: &str) -> Value {
    let res = reqwest::Client::new().get(server.url(path)).send().await.unwrap();
    assert_eq!(res.status(), 200, "GET {path}");
    res.json().await.unwrap()
}

const FIRST_PLAN: &str = "1. writer drafts the release note\n2. reviewer checks it";
const SECOND_PLAN: &str = "1. writer drafts the release note again, shorter\n2. reviewer signs it off";
const DRAFT: &str = "Draft: version 2 adds workflows.";
const REVIEW: &str = "Reviewed: clear and correct.";
const ANSWER: &str = "Release note: version 2 adds workflows.";

/// One node of the expected run: its executor, its kind, and what its model call spent.
struct Node {
    executor: &'static str,
    kind: &'static str,
    model: &'static str,
    usage: (u64, u64),
}

/// The super-steps the script below leads to, in order, with each checkpoint's `stalls`.
fn expected_steps() -> Vec<(Node, u64)> {
    let lead = |usage| Node { executor: "lead", kind: "Manager", model: "lead-model", usage };
    vec![
        (lead((30, 12)), 0), // the plan
        (lead((41, 9)), 1),  // a decision naming someone who is not a member: a stall
        (lead((43, 7)), 2),  // a decision naming nobody: the second stall
        (lead((52, 14)), 0), // so the manager plans again
        (lead((60, 11)), 0), // and picks the writer
        (Node { executor: "writer", kind: "Agent", model: "writer-model", usage: (70, 20) }, 0),
        (lead((81, 10)), 0), // then the reviewer
        (Node { executor: "reviewer", kind: "Agent", model: "reviewer-model", usage: (90, 6) }, 0),
        (lead((95, 15)), 0), // and answers
    ]
}

/// The manager's answers, by request: each call it gets is one fresh prompt, so the script
/// answers the N-th call with turn N.
fn script(mock: &MockServer) {
    let usage = |executor: &str| -> Vec<(u64, u64)> {
        expected_steps().into_iter().filter(|(n, _)| n.executor == executor).map(|(n, _)| n.usage).collect()
    };
    let lead = usage("lead");
    let manager = [
        FIRST_PLAN.to_owned(),
        json!({"done": false, "next": "editor", "instruction": "polish it"}).to_string(),
        "I am not sure who should go next.".to_owned(),
        SECOND_PLAN.to_owned(),
        format!("Next: {}", json!({"done": false, "next": "writer", "instruction": "draft the release note"})),
        json!({"done": false, "next": "reviewer", "instruction": "check the draft"}).to_string(),
        json!({"done": true, "answer": ANSWER}).to_string(),
    ];
    let turns = manager.iter().zip(lead).map(|(text, (i, o))| MockTurn::text(text).with_usage(i, o)).collect();
    mock.script_in_order("lead-model", turns);
    let (i, o) = usage("writer")[0];
    mock.script("writer-model", vec![MockTurn::text(DRAFT).with_usage(i, o)]);
    let (i, o) = usage("reviewer")[0];
    mock.script("reviewer-model", vec![MockTurn::text(REVIEW).with_usage(i, o)]);
}

/// The live `update` frames of `kind`.
fn updates<'a>(frames: &'a [Frame], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f.event == "update" && f.data["kind"] == kind).map(|f| &f.data).collect()
}

/// The run's recorded log.
async fn events(server: &Tracon, run: &str) -> Vec<Frame> {
    let res = reqwest::Client::new().get(server.url(&format!("/api/runs/{run}/events"))).send().await.unwrap();
    assert_eq!(res.status(), 200);
    parse_frames(&res.text().await.unwrap())
}

/// A `Magentic` team on `server`: the manager plans, twice names no member it can use, plans
/// again, has the writer draft and the reviewer check, and answers. The stream, the tree with
/// every node's tokens and cost rolled up, the checkpoints (one per super-step) and what each
/// agent was sent all say so.
async fn magentic_team_replans_after_two_stalls_and_answers(server: &Tracon, mock: &MockServer) {
    script(mock);
    for (name, model) in [("lead", "lead-model"), ("writer", "writer-model"), ("reviewer", "reviewer-model")] {
        let agent = json!({"name": name, "instructions": format!("You are the {name}."),
            "model": {"provider": "openai", "model": model}});
        create(server, "/api/agents", agent).await;
    }
    create(
        server,
        "/api/workflows",
        json!({"name": "team", "kind": "Magentic", "agentNames": ["writer", "reviewer"],
            "managerAgentName": "lead", "maxIterations": 4}),
    )
    .await;

    let (status, frames, raw) = stream(server, "/api/workflows/team/run", json!({"message": "Write the note"})).await;
    assert_eq!(status, 200, "{raw}");
    let steps = expected_steps();

    // ---- The live frames: the run, each node's start and end in order with its answer, the
    // answer.
    assert_eq!(frames.first().unwrap().event, "run", "{raw}");
    let root = frames[0].data["runId"].as_str().unwrap().to_owned();
    let completed = updates(&frames, "executorCompleted");
    let invoked = updates(&frames, "executorInvoked");
    let at = |frames: &[&Value]| -> Vec<(String, u64)> {
        frames
            .iter()
            .map(|c| (c["executorId"].as_str().unwrap().to_owned(), c["superStep"].as_u64().unwrap()))
            .collect()
    };
    let expected: Vec<(String, u64)> =
        steps.iter().zip(1..).map(|((node, _), step)| (node.executor.to_owned(), step)).collect();
    assert_eq!(at(&completed), expected, "one node a super-step: {raw}");
    assert_eq!(at(&invoked), expected, "each node's start goes out live too: {raw}");
    for (start, end) in invoked.iter().zip(&completed) {
        assert_eq!(start["runId"], end["runId"], "{raw}");
    }
    assert!(updates(&frames, "executorFailed").is_empty(), "{raw}");
    assert_eq!((completed[5]["text"].as_str(), completed[7]["text"].as_str()), (Some(DRAFT), Some(REVIEW)));
    let done = frames.last().unwrap();
    assert_eq!(
        (done.event.as_str(), done.data["status"].as_str(), done.data["text"].as_str()),
        ("done", Some("Completed"), Some(ANSWER)),
        "{raw}"
    );

    // ---- The recorded log: per super-step the node's start and end, in its own run, and the
    // checkpoint; the answer last.
    let log = events(server, &root).await;
    let nodes: Vec<&Frame> = log
        .iter()
        .filter(|f| matches!(f.event.as_str(), "executor.invoked" | "executor.completed" | "workflow.checkpointed"))
        .collect();
    assert_eq!(nodes.len(), 3 * steps.len(), "{log:?}");
    for (((node, _), step), (recorded, live)) in steps.iter().zip(1..).zip(nodes.chunks(3).zip(&completed)) {
        let [invoked, ended, checkpointed] = recorded else { unreachable!() };
        let names = [invoked.event.as_str(), ended.event.as_str(), checkpointed.event.as_str()];
        assert_eq!(names, ["executor.invoked", "executor.completed", "workflow.checkpointed"], "step {step}");
        assert_eq!(
            (invoked.data["executorId"].as_str(), invoked.data["executorKind"].as_str()),
            (Some(node.executor), Some(node.kind)),
            "step {step}"
        );
        assert_eq!(ended.data["executorId"].as_str(), Some(node.executor), "step {step}");
        for frame in recorded {
            assert_eq!(frame.data["superStep"].as_u64(), Some(step), "{frame:?}");
        }
        assert_eq!((&invoked.data["runId"], &ended.data["runId"]), (&live["runId"], &live["runId"]), "step {step}");
    }
    assert_eq!(log.last().unwrap().event, "run.completed");

    // ---- The tree: the root and one run per node, each with its model's usage and cost;
    // the totals, and the root's own answer, are their sums.
    let tree = get(server, &format!("/api/runs/{root}/tree")).await;
    let runs = tree["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1 + steps.len(), "the root and one run per agent node: {tree}");
    assert_eq!((runs[0]["id"].as_str(), runs[0]["agentName"].as_str()), (Some(root.as_str()), Some("team")));
    assert_eq!(runs[0]["usage"], Value::Null, "the root's own row counts none: {tree}");
    let (mut input, mut output, mut cost) = (0, 0, 0.0);
    for ((node, _), completed) in steps.iter().zip(&completed) {
        let run = runs.iter().find(|r| r["id"] == completed["runId"]).unwrap_or_else(|| panic!("{completed}: {tree}"));
        assert_eq!((run["agentName"].as_str(), run["status"].as_str()), (Some(node.executor), Some("Completed")));
        assert_eq!((run["parentRunId"].as_str(), run["depth"].as_u64()), (Some(root.as_str()), Some(1)), "{run}");
        let (i, o) = node.usage;
        assert_eq!((run["usage"]["inputTokens"].as_u64(), run["usage"]["outputTokens"].as_u64()), (Some(i), Some(o)));
        let (pi, po) = price(node.model);
        let own = (i as f64 * pi + o as f64 * po) / 1_000_000.0;
        assert!((run["cost"]["totalCost"].as_f64().unwrap() - own).abs() < 1e-12, "{run}");
        (input, output, cost) = (input + i, output + o, cost + own);
    }
    assert_eq!(
        (tree["totalUsage"]["inputTokens"].as_u64(), tree["totalUsage"]["outputTokens"].as_u64()),
        (Some(input), Some(output)),
        "{tree}"
    );
    assert!((tree["totalCost"].as_f64().unwrap() - cost).abs() < 1e-12, "{tree}");
    let answered = &done.data;
    assert_eq!(
        (answered["usage"]["inputTokens"].as_u64(), answered["usage"]["outputTokens"].as_u64()),
        (Some(input), Some(output)),
        "{raw}"
    );
    assert!((answered["cost"]["totalCost"].as_f64().unwrap() - cost).abs() < 1e-12, "{raw}");
    assert_eq!(get(server, &format!("/api/runs/{root}")).await["status"], "Completed");

    // ---- The checkpoints: one per super-step, the stalls counted and cleared by the new plan.
    let checkpoints = get(server, &format!("/api/workflows/runs/{root}/checkpoints")).await;
    let checkpoints = checkpoints.as_array().unwrap();
    let positions: Vec<(u64, u64)> = checkpoints
        .iter()
        .map(|c| (c["superStep"].as_u64().unwrap(), c["position"]["stalls"].as_u64().unwrap_or(0)))
        .collect();
    let expected: Vec<(u64, u64)> = steps.iter().enumerate().map(|(i, (_, stalls))| (i as u64 + 1, *stalls)).collect();
    assert_eq!(positions, expected, "one checkpoint per super-step: {checkpoints:?}");
    assert!(checkpoints.iter().all(|c| c["runId"] == root.as_str()), "{checkpoints:?}");
    assert_eq!(checkpoints[4]["position"]["speaker"], "writer", "the pick is kept for the next step");

    // ---- What the agents were sent: the manager asked for a plan again after the stalls, and
    // each member got the plans, the work so far and its instruction.
    let asked = mock.requests("lead-model");
    assert_eq!(asked.len(), 7, "the manager's calls");
    let plan_requests: Vec<usize> =
        (0..asked.len()).filter(|i| last_user_message(&asked[*i]).contains("step-by-step plan")).collect();
    assert_eq!(plan_requests, [0, 3], "a plan, and a new one after two stalled decisions");
    assert!(last_user_message(&asked[3]).contains(FIRST_PLAN), "the new plan is made knowing the old one");
    let writer = mock.requests("writer-model");
    assert_eq!(writer.len(), 1);
    let sent = last_user_message(&writer[0]);
    assert!(sent.contains(FIRST_PLAN) && sent.contains(SECOND_PLAN), "{sent}");
    assert!(sent.ends_with("Your step: draft the release note"), "{sent}");
    let reviewer = mock.requests("reviewer-model");
    assert_eq!(reviewer.len(), 1);
    let sent = last_user_message(&reviewer[0]);
    assert!(sent.contains(&format!("[writer] {DRAFT}")) && sent.ends_with("Your step: check the draft"), "{sent}");
}

#[tokio::test]
async fn a_magentic_team_on_the_real_binary_replans_after_two_stalls_and_answers_with_its_tree_and_checkpoints() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let server = start(&mock, &[]).await;
    magentic_team_replans_after_two_stalls_and_answers(&server, &mock).await;
}

#[tokio::test]
async fn a_magentic_team_on_postgres_replans_after_two_stalls_and_answers_with_its_tree_and_checkpoints() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let (url, schema) = (database_url(), format!("wf_{nanos:x}{:x}", std::process::id()));
    let server = start(&mock, &[("DATABASE_URL", &url), ("Tracon__PostgreSql__SchemaName", &schema)]).await;
    magentic_team_replans_after_two_stalls_and_answers(&server, &mock).await;
}
