//! Structured output against the real binary and the mock model: a seeded corpus of 50 bad
//! answers (`tests/fixtures/structured/bad_answers.json`: invalid JSON, schema violations,
//! prose) to an agent whose `responseFormat` is an order-status JSON schema, with two repair
//! turns. Whatever the model says, no run returns an answer that is not valid against the
//! schema: 40 cases are repaired on the first repair turn, 10 stay wrong and fail
//! `structured_response_rejected`. The repairs are counted from the runs' logs (printed with
//! `--nocapture` for the closing note).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout)]

mod support;

use serde_json::{Value, json};
use support::{Tracon, create, parse_frames};
use tracon_core::schema::Validator;
use tracon_tests::mock::{MockConfig, MockServer, MockTurn};

fn corpus() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/structured/bad_answers.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn fifty_bad_answers_yield_no_invalid_answer_and_the_repairs_are_counted() {
    let corpus = corpus();
    let schema = corpus["schema"].clone();
    let validator = Validator::new(&schema).unwrap();
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let endpoint = format!("{}/v1", mock.base_url());
    let server = Tracon::start(&[("OPENAI_API_KEY", "k"), ("Tracon__Providers__OpenAI__Endpoint", &endpoint)]).await;
    create(
        &server,
        "/api/agents",
        json!({"name": "orders", "instructions": "Report an order's status as JSON.",
            "model": {"provider": "openai", "model": "orders-model", "maxRepairAttempts": 2,
                "responseFormat": {"type": "jsonSchema", "name": "order_status", "schema": schema}}}),
    )
    .await;
    let client = reqwest::Client::new();
    let (mut completed, mut rejected_runs, mut repairs, mut rejections) = (0, 0, 0, 0);
    let cases = corpus["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 50);
    for (i, case) in cases.iter().enumerate() {
        let answers: Vec<MockTurn> =
            case["answers"].as_array().unwrap().iter().map(|a| MockTurn::text(a.as_str().unwrap())).collect();
        mock.script("orders-model", answers);
        // A JSON answer (asked for with an Idempotency-Key): nobody reads it as it streams.
        let res = client
            .post(server.url("/api/agents/orders/run"))
            .header("idempotency-key", format!("case-{i}"))
            .json(&json!({"message": format!("Where is order {i}?")}))
            .send()
            .await
            .unwrap();
        let answer: Value = res.json().await.unwrap();
        let text = answer["text"].as_str().unwrap_or_default();
        match answer["status"].as_str() {
            Some("Completed") => {
                completed += 1;
                let value: Value =
                    serde_json::from_str(text).unwrap_or_else(|e| panic!("case {i}: not JSON ({e}): {text}"));
                assert!(validator.errors(&value, 4).is_empty(), "case {i}: an invalid answer was returned: {text}");
                assert!(case["holds"].as_bool().unwrap(), "case {i} should not have held: {text}");
            }
            Some("Failed") => {
                rejected_runs += 1;
                assert_eq!(answer["error"]["errorType"], "structured_response_rejected", "case {i}: {answer}");
                assert!(text.is_empty(), "case {i}: a rejected answer was returned: {text}");
                assert!(!case["holds"].as_bool().unwrap(), "case {i} should have held: {answer}");
            }
            other => panic!("case {i}: {other:?}: {answer}"),
        }
        let run = answer["runId"].as_str().unwrap();
        let log =
            client.get(server.url(&format!("/api/runs/{run}/events"))).send().await.unwrap().text().await.unwrap();
        for frame in parse_frames(&log).iter().filter(|f| f.event == "response.rejected") {
            rejections += 1;
            if frame.data["repairing"] == true {
                repairs += 1;
            }
        }
    }
    println!(
        "structured output: 50 bad answers → {completed} repaired and valid, {rejected_runs} failed \
         structured_response_rejected, 0 invalid returned; {rejections} rejections, {repairs} repair turns"
    );
    assert_eq!((completed, rejected_runs), (40, 10));
    assert_eq!(repairs, 40 + 10 * 2, "one repair per repaired case, two per case that stayed wrong");
    assert_eq!(rejections, 40 + 10 * 3);
}
