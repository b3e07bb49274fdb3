//! Skills through the router: the `/api/skills` CRUD with versions and audit, a code skill
//! winning its name, the shape rules and the refusal of scripts; and agents that name skills —
//! resolved at compile time (an unknown skill fails), the catalog in the model's instructions,
//! `load_skill` and `read_skill_resource` through the tool pipeline against a scripted model,
//! approval by default and off with `skills.disableReadApproval`, and a changed skill compiling
//! its agents again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ModelRequest};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::skills::SkillDefinition;
use tracon_handlers::{AppState, HttpSettings};

/// What the model saw on each call: its system text and the names of the tools offered.
type Seen = Arc<Mutex<Vec<(String, Vec<String>)>>>;

struct Harness {
    app: Router,
    seen: Seen,
}

/// The model loads `house-style`, then reads its `references/terms.md`, then answers with
/// every tool result it got. A code skill `code-style` is registered.
fn harness() -> Harness {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let script = ScriptedProvider::from_fn("script", move |request: &ModelRequest| {
        let tools = request.tools.iter().map(|t| t.name.clone()).collect();
        log.lock().unwrap().push((request.system.clone().unwrap_or_default(), tools));
        let results: Vec<String> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect();
        match results.len() {
            0 => ScriptedTurn::tool_call("load_skill", json!({"skillName": "house-style"})),
            1 => ScriptedTurn::tool_call(
                "read_skill_resource",
                json!({"skillName": "house-style", "resourceName": "references/terms.md"}),
            ),
            _ => ScriptedTurn::text(&format!("answered from: {}", results.join(" | "))),
        }
    });
    let platform = tokio_rt::platform();
    let runtime = RuntimeBuilder::new(platform)
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_skill(SkillDefinition::new("code-style", "The house code style.", "Use four spaces."))
        .build()
        .unwrap();
    let state = AppState::new(Arc::new(runtime), HttpSettings::default());
    Harness { app: tracon_handlers::router(state), seen }
}

async fn call(app: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = support::call(method, path).json(body).send(app).await;
    (reply.status, reply.json())
}

fn house_style(instructions: &str) -> Value {
    json!({
        "name": "house-style",
        "description": "How we write to customers: tone and terms.",
        "instructions": instructions,
        "resources": [{"name": "references/terms.md", "content": "Say 'customer', never 'user'."}]
    })
}

fn agent(name: &str, skills: &[&str], read_freely: bool) -> Value {
    let mut def = json!({"name": name, "instructions": "You answer customers.",
        "model": {"provider": "script", "model": "m"}, "skillNames": skills});
    if read_freely {
        def["skills"] = json!({"disableReadApproval": true});
    }
    def
}

/// A run's SSE frames as (event, data).
async fn run(app: &Router, agent: &str, body: Value) -> Vec<(String, Value)> {
    let reply = support::call(Method::POST, &format!("/api/agents/{agent}/run")).json(Some(body)).send(app).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    support::frames(&reply.text())
}

fn done(frames: &[(String, Value)]) -> &Value {
    &frames.iter().rev().find(|(e, _)| e == "done").expect("a done frame").1
}

fn answer(frames: &[(String, Value)]) -> String {
    frames.iter().filter(|(e, _)| e == "update").map(|(_, v)| v["text"].as_str().unwrap_or("")).collect()
}

#[tokio::test]
async fn skills_are_created_read_replaced_versioned_and_deleted_with_an_audit_trail() {
    let h = harness();
    let reply = support::call(Method::POST, "/api/skills").json(Some(house_style("Be brief."))).send(&h.app).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    assert_eq!(reply.header("location"), Some("/api/skills/house-style"));
    let created = reply.json();
    assert_eq!((created["version"].as_u64(), created["source"].as_str()), (Some(1), Some("Stored")));
    assert_eq!(created["isEditable"], true);
    assert_eq!(created["resourceNames"], json!(["references/terms.md"]));
    assert_eq!(created["definition"], house_style("Be brief."));

    let (status, doc) = call(&h.app, Method::POST, "/api/skills", Some(house_style("again"))).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::CONFLICT, Some("skill_exists")));

    let (status, doc) = call(&h.app, Method::PUT, "/api/skills/house-style", Some(house_style("Be briefer."))).await;
    assert_eq!((status, doc["version"].as_u64()), (StatusCode::OK, Some(2)), "{doc}");
    let (_, doc) = call(&h.app, Method::GET, "/api/skills/house-style", None).await;
    assert_eq!(doc["definition"]["instructions"], "Be briefer.");

    // Code skills first, then stored ones; lists leave the content out.
    let (_, list) = call(&h.app, Method::GET, "/api/skills", None).await;
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["code-style", "house-style"]);
    assert_eq!(list[1]["definition"], Value::Null);

    let (_, versions) = call(&h.app, Method::GET, "/api/skills/house-style/versions", None).await;
    let numbers: Vec<u64> = versions.as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [2, 1]);
    let (status, first) = call(&h.app, Method::GET, "/api/skills/house-style/versions/1", None).await;
    assert_eq!((status, first["definition"]["instructions"].as_str()), (StatusCode::OK, Some("Be brief.")));
    for missing in ["/api/skills/house-style/versions/3", "/api/skills/house-style/versions/x"] {
        let (status, doc) = call(&h.app, Method::GET, missing, None).await;
        assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("version_not_found")));
    }

    let (status, _) = call(&h.app, Method::DELETE, "/api/skills/house-style", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for (method, path) in [
        (Method::GET, "/api/skills/house-style"),
        (Method::DELETE, "/api/skills/house-style"),
        (Method::GET, "/api/skills/house-style/versions"),
    ] {
        let (status, doc) = call(&h.app, method, path, None).await;
        assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("skill_not_found")), "{path}");
    }
    let (status, doc) = call(&h.app, Method::PUT, "/api/skills/house-style", Some(house_style("x"))).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("skill_not_found")));

    // Every write is in the trail, with the state before and after.
    let (_, audit) = call(&h.app, Method::GET, "/api/audit?entityType=skill", None).await;
    let actions: Vec<&str> = audit.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    for action in ["skill.create", "skill.update", "skill.delete"] {
        assert!(actions.contains(&action), "{action} missing from {audit}");
    }
}

#[tokio::test]
async fn a_code_skill_is_readable_but_its_name_cannot_be_stored() {
    let h = harness();
    let (status, doc) = call(&h.app, Method::GET, "/api/skills/code-style", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((doc["source"].as_str(), doc["isEditable"].as_bool()), (Some("Code"), Some(false)));
    assert_eq!(doc["definition"]["instructions"], "Use four spaces.");
    let body = json!({"name": "code-style", "description": "mine", "instructions": "Use tabs."});
    for (method, path, body) in [
        (Method::POST, "/api/skills", Some(body.clone())),
        (Method::PUT, "/api/skills/code-style", Some(body)),
        (Method::DELETE, "/api/skills/code-style", None),
        (Method::GET, "/api/skills/code-style/versions", None),
        (Method::GET, "/api/skills/code-style/versions/1", None),
    ] {
        let (status, doc) = call(&h.app, method.clone(), path, body).await;
        assert_eq!(
            (status, doc["errorType"].as_str()),
            (StatusCode::CONFLICT, Some("skill_is_code_defined")),
            "{method} {path}: {doc}"
        );
    }
}

#[tokio::test]
async fn a_skill_breaking_a_rule_is_refused_with_the_field_and_scripts_are_refused_clearly() {
    let h = harness();
    let big = "x".repeat(tracon_core::skills::MAX_RESOURCE_BYTES + 1);
    let many: Vec<Value> =
        (0..=tracon_core::skills::MAX_RESOURCES).map(|i| json!({"name": format!("r{i}.md"), "content": "t"})).collect();
    for (body, field) in [
        (json!({"name": "Bad_Name", "description": "d", "instructions": "i"}), "name"),
        (json!({"name": "a--b", "description": "d", "instructions": "i"}), "name"),
        (json!({"name": "ok", "description": " ", "instructions": "i"}), "description"),
        (json!({"name": "ok", "description": "d".repeat(1025), "instructions": "i"}), "description"),
        (json!({"name": "ok", "description": "d", "instructions": ""}), "instructions"),
        (json!({"name": "ok", "description": "d", "instructions": "i".repeat(65_537)}), "instructions"),
        (json!({"name": "ok", "description": "d", "instructions": "i", "resources": many}), "resources"),
        (
            json!({"name": "ok", "description": "d", "instructions": "i",
                "resources": [{"name": "a.md", "content": big}]}),
            "resources[0].content",
        ),
        (
            json!({"name": "ok", "description": "d", "instructions": "i",
                "resources": [{"name": "../secret", "content": "t"}]}),
            "resources[0].name",
        ),
        (
            json!({"name": "ok", "description": "d", "instructions": "i",
                "resources": [{"name": "a.md", "content": "t"}, {"name": "a.md", "content": "u"}]}),
            "resources[1].name",
        ),
    ] {
        let (status, doc) = call(&h.app, Method::POST, "/api/skills", Some(body)).await;
        assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("validation_failed")), "{doc}");
        let fields: Vec<&str> =
            doc["problems"].as_array().unwrap().iter().map(|p| p["field"].as_str().unwrap()).collect();
        assert!(fields.contains(&field), "{field} not in {doc}");
    }
    // An unknown field is refused, not dropped.
    let (status, doc) = call(
        &h.app,
        Method::POST,
        "/api/skills",
        Some(json!({"name": "ok", "description": "d", "instructions": "i", "x": 1})),
    )
    .await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("validation_failed")), "{doc}");
    // Scripts, as a field or as files under scripts/, are refused with the reason.
    for body in [
        json!({"name": "ok", "description": "d", "instructions": "i", "scripts": [{"name": "run.py", "content": "print()"}]}),
        json!({"name": "ok", "description": "d", "instructions": "i",
            "resources": [{"name": "scripts/run.py", "content": "print()"}]}),
    ] {
        let (status, doc) = call(&h.app, Method::POST, "/api/skills", Some(body)).await;
        assert_eq!(
            (status, doc["errorType"].as_str()),
            (StatusCode::BAD_REQUEST, Some("skill_scripts_unsupported")),
            "{doc}"
        );
        assert!(doc["detail"].as_str().unwrap().contains("Lambda"), "{doc}");
    }
    let (status, doc) = call(&h.app, Method::GET, "/api/skills/Not_A_Skill", None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_skill_name")));
    let (status, doc) = call(&h.app, Method::PUT, "/api/skills/other", Some(house_style("i"))).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("name_mismatch")));
    let (_, list) = call(&h.app, Method::GET, "/api/skills", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1, "nothing was stored: {list}");
}

#[tokio::test]
async fn an_agent_naming_an_unknown_skill_or_asking_for_scripts_does_not_validate() {
    let h = harness();
    let (status, doc) = call(&h.app, Method::POST, "/api/agents", Some(agent("helper", &["ghost"], false))).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("validation_failed")), "{doc}");
    let problem = &doc["problems"][0];
    assert_eq!((problem["code"].as_str(), problem["field"].as_str()), (Some("unknown_skill"), Some("skillNames[0]")));
    assert!(problem["message"].as_str().unwrap().to_lowercase().contains("the skill was not found"), "{doc}");

    let (_, report) =
        call(&h.app, Method::POST, "/api/agents/validate", Some(agent("helper", &["ghost"], false))).await;
    assert_eq!(report["valid"], false);

    let mut scripted = agent("helper", &["code-style"], false);
    scripted["toolNames"] = json!(["run_skill_script"]);
    let (status, doc) = call(&h.app, Method::POST, "/api/agents", Some(scripted)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{doc}");
    assert_eq!(doc["problems"][0]["code"], "skill_scripts_unsupported", "{doc}");

    let mut settings = agent("helper", &["code-style"], false);
    settings["skills"] = json!({"allowScripts": true});
    let (status, _) = call(&h.app, Method::POST, "/api/agents", Some(settings)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A code skill resolves in every tenant.
    let (status, doc) = call(&h.app, Method::POST, "/api/agents", Some(agent("helper", &["code-style"], false))).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");
    assert_eq!(doc["definition"]["skillNames"], json!(["code-style"]));
}

#[tokio::test]
async fn an_agent_loads_a_skill_and_reads_its_resource_through_the_tool_pipeline() {
    let h = harness();
    assert_eq!(call(&h.app, Method::POST, "/api/skills", Some(house_style("Be brief."))).await.0, StatusCode::CREATED);
    let (status, doc) = call(&h.app, Method::POST, "/api/agents", Some(agent("helper", &["house-style"], true))).await;
    assert_eq!(status, StatusCode::CREATED, "{doc}");

    let frames = run(&h.app, "helper", json!({"message": "Write to Ada."})).await;
    assert_eq!(done(&frames)["status"], "Completed", "{frames:?}");
    let text = answer(&frames);
    assert!(text.contains("# Skill: house-style") && text.contains("Be brief."), "{text}");
    assert!(text.contains("- references/terms.md"), "load_skill lists the resources: {text}");
    assert!(text.contains("Say 'customer', never 'user'."), "{text}");

    // The model knew what to load: the skills' names and descriptions are in its instructions,
    // after the agent's own, and the two reading tools are offered (never a script tool).
    let seen = h.seen.lock().unwrap().clone();
    let (system, tools) = &seen[0];
    assert!(system.starts_with("You answer customers."), "{system}");
    assert!(system.contains("- house-style: How we write to customers: tone and terms."), "{system}");
    assert_eq!(tools, &["load_skill", "read_skill_resource"]);

    // Each call is recorded as a tool call of the run, like any tool's.
    let run_id = frames.iter().find(|(e, _)| e == "run").unwrap().1["runId"].as_str().unwrap().to_owned();
    let (_, events) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}/events"), None).await;
    let events = events.to_string();
    assert!(events.contains("load_skill") && events.contains("read_skill_resource"), "{events}");
}

#[tokio::test]
async fn the_skill_tools_ask_a_person_first_unless_the_definition_turns_it_off() {
    let h = harness();
    assert_eq!(call(&h.app, Method::POST, "/api/skills", Some(house_style("Be brief."))).await.0, StatusCode::CREATED);
    assert_eq!(
        call(&h.app, Method::POST, "/api/agents", Some(agent("careful", &["house-style"], false))).await.0,
        StatusCode::CREATED
    );
    let stop = run(&h.app, "careful", json!({"message": "Write to Ada.", "sessionId": "s1"})).await;
    assert_eq!(done(&stop)["status"], "AwaitingApproval", "{stop:?}");
    let asked = &stop.iter().find(|(e, _)| e == "approvals").unwrap().1;
    assert_eq!((asked[0]["toolName"].as_str(), asked[0]["effect"].as_str()), (Some("load_skill"), Some("Read")));
    assert_eq!(asked[0]["arguments"], json!({"skillName": "house-style"}));

    // Approved, the skill loads; then its resource asks too, and is approved in turn.
    let request = asked[0]["requestId"].as_str().unwrap();
    let next =
        run(&h.app, "careful", json!({"sessionId": "s1", "approvals": [{"requestId": request, "approved": true}]}))
            .await;
    assert_eq!(done(&next)["status"], "AwaitingApproval", "{next:?}");
    let asked = &next.iter().find(|(e, _)| e == "approvals").unwrap().1;
    assert_eq!(asked[0]["toolName"], "read_skill_resource");
    let request = asked[0]["requestId"].as_str().unwrap();
    let last =
        run(&h.app, "careful", json!({"sessionId": "s1", "approvals": [{"requestId": request, "approved": true}]}))
            .await;
    assert_eq!(done(&last)["status"], "Completed", "{last:?}");
    assert!(answer(&last).contains("never 'user'"), "{last:?}");

    // A `PUT` that leaves `skills` out turns the approval on again.
    let (status, _) =
        call(&h.app, Method::PUT, "/api/agents/careful", Some(agent("careful", &["house-style"], true))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(done(&run(&h.app, "careful", json!({"message": "again"})).await)["status"], "Completed");
    let (status, _) =
        call(&h.app, Method::PUT, "/api/agents/careful", Some(agent("careful", &["house-style"], false))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(done(&run(&h.app, "careful", json!({"message": "again"})).await)["status"], "AwaitingApproval");
}

#[tokio::test]
async fn a_changed_skill_compiles_its_agents_again_and_a_deleted_one_stops_them() {
    let h = harness();
    assert_eq!(
        call(&h.app, Method::POST, "/api/skills", Some(house_style("Version one."))).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        call(&h.app, Method::POST, "/api/agents", Some(agent("helper", &["house-style"], true))).await.0,
        StatusCode::CREATED
    );
    let first = answer(&run(&h.app, "helper", json!({"message": "go"})).await);
    assert!(first.contains("Version one."), "{first}");
    // Compiled once and cached: the same agent runs again from the cache with the same text.
    assert!(answer(&run(&h.app, "helper", json!({"message": "go"})).await).contains("Version one."));

    let mut changed = house_style("Version two.");
    changed["description"] = json!("Changed description.");
    assert_eq!(call(&h.app, Method::PUT, "/api/skills/house-style", Some(changed)).await.0, StatusCode::OK);
    let second = answer(&run(&h.app, "helper", json!({"message": "go"})).await);
    assert!(second.contains("Version two.") && !second.contains("Version one."), "{second}");
    let system = h.seen.lock().unwrap().last().unwrap().0.clone();
    assert!(system.contains("Changed description."), "{system}");

    // Deleted and created again (version 1 again, other content): compiled again too.
    assert_eq!(call(&h.app, Method::DELETE, "/api/skills/house-style", None).await.0, StatusCode::NO_CONTENT);
    let reply =
        support::call(Method::POST, "/api/agents/helper/run").json(Some(json!({"message": "go"}))).send(&h.app).await;
    let doc = reply.json();
    assert_eq!(
        (reply.status, doc["errorType"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("agent_invalid")),
        "{doc}"
    );
    assert!(doc.to_string().to_lowercase().contains("the skill was not found"), "{doc}");
    assert_eq!(
        call(&h.app, Method::POST, "/api/skills", Some(house_style("Version three."))).await.0,
        StatusCode::CREATED
    );
    let third = answer(&run(&h.app, "helper", json!({"message": "go"})).await);
    assert!(third.contains("Version three."), "{third}");
}
