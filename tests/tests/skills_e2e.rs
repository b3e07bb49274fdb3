//! Skills end to end: the real `tracon` binary on Postgres, its OpenAI provider the mock model
//! server. A stored skill is loaded and its resource read by an agent's model through
//! `load_skill` and `read_skill_resource`; a replaced skill reaches the next run; and after the
//! process is killed the skill, its versions and the agent that names it are still there.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{Value, json};
use support::{Tracon, create, database_url, run};
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

const MODEL: &str = "skill-model";

fn skill(instructions: &str) -> Value {
    json!({"name": "house-style", "description": "How we write to customers.", "instructions": instructions,
        "resources": [{"name": "references/terms.md", "content": "Say customer, never user."}]})
}

/// The tool results of the last request the mock got, and its system text.
fn last_request(mock: &MockServer) -> (Vec<String>, String) {
    let requests = mock.requests(MODEL);
    let messages = requests.last().unwrap()["body"]["messages"].as_array().unwrap().clone();
    let of_role = |role: &str| -> Vec<String> {
        messages.iter().filter(|m| m["role"] == role).map(|m| m["content"].as_str().unwrap_or("").to_owned()).collect()
    };
    (of_role("tool"), of_role("system").join("\n"))
}

async fn run_once(server: &Tracon) {
    let (status, frames, text) = run(server, "writer", json!({"message": "Write to Ada."})).await;
    assert_eq!(status, 200, "{text}");
    let done = frames.iter().rev().find(|f| f.event == "done").unwrap_or_else(|| panic!("no done frame: {text}"));
    assert_eq!(done.data["status"], "Completed", "{text}");
}

#[tokio::test]
async fn a_stored_skill_is_loaded_read_replaced_and_survives_a_kill_on_postgres() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    mock.script(
        MODEL,
        vec![
            MockTurn::tool_call("load_skill", json!({"skillName": "house-style"})),
            MockTurn::tool_call(
                "read_skill_resource",
                json!({"skillName": "house-style", "resourceName": "references/terms.md"}),
            ),
            MockTurn::text("Dear customer Ada, …"),
        ],
    );
    let schema = format!("e_skill_{}", uuid::Uuid::new_v4().simple());
    let (url, endpoint) = (database_url(), format!("{}/v1", mock.base_url()));
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema.as_str()),
        ("OPENAI_API_KEY", "test-openai-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
    ];
    let client = reqwest::Client::new();

    let first = Tracon::start(&env).await;
    create(&first, "/api/skills", skill("Version one: be brief.")).await;
    create(
        &first,
        "/api/agents",
        json!({"name": "writer", "instructions": "You write to customers.", "model": {"provider": "openai", "model": MODEL},
            "skillNames": ["house-style"], "skills": {"disableReadApproval": true}}),
    )
    .await;
    run_once(&first).await;
    let (results, system) = last_request(&mock);
    assert!(system.contains("house-style: How we write to customers."), "{system}");
    assert!(results[0].contains("Version one: be brief.") && results[0].contains("references/terms.md"), "{results:?}");
    assert_eq!(results[1], "Say customer, never user.");
    let tools: Vec<String> = mock.requests(MODEL)[0]["body"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tools, ["load_skill", "read_skill_resource"]);

    let replaced =
        client.put(first.url("/api/skills/house-style")).json(&skill("Version two: be warm.")).send().await.unwrap();
    assert_eq!(replaced.status(), 200, "{}", replaced.text().await.unwrap());
    run_once(&first).await;
    assert!(last_request(&mock).0[0].contains("Version two: be warm."), "the replaced skill reached the next run");
    drop(first); // SIGKILL

    let second = Tracon::start(&env).await;
    let versions: Value =
        client.get(second.url("/api/skills/house-style/versions")).send().await.unwrap().json().await.unwrap();
    let numbers: Vec<u64> = versions.as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [2, 1], "{versions}");
    run_once(&second).await;
    assert!(last_request(&mock).0[0].contains("Version two: be warm."));
    let audit: Value =
        client.get(second.url("/api/audit?entityType=skill")).send().await.unwrap().json().await.unwrap();
    let actions: Vec<&str> = audit.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["skill.update", "skill.create"], "{audit}");
}
