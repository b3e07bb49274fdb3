//! `bench-floor` stays a fair floor: against the same mock model, it answers the demo run and
//! `/v1/chat/completions` with what `tracon` answers (the same frames, text and usage), and
//! with a database it records each run in two statements' worth of rows. A floor that did
//! less than the product would make the product look slow for the wrong reason.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{Value, json};
use support::{Frame, Tracon, run};
use tracon_tests::mock::{MockConfig, MockServer};

const QUESTION: &str = "Where is order 4182?";

async fn pair(mock: &MockServer, extra: &[(&str, &str)]) -> (Tracon, Tracon) {
    let endpoint = format!("{}/v1", mock.base_url());
    let mut env = vec![
        ("OPENAI_API_KEY", "floor-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("Tracon__Providers__OpenAI__DefaultModel", "bench"),
    ];
    env.extend_from_slice(extra);
    let tracon = Tracon::start(&env).await;
    let floor = Tracon::start_bin(std::path::Path::new(env!("CARGO_BIN_EXE_bench-floor")), &env).await;
    (tracon, floor)
}

/// What a client reads from a run: each frame's event, and its kind and text when it has them.
fn shape(frames: &[Frame]) -> Vec<(String, Value, Value)> {
    frames.iter().map(|f| (f.event.clone(), f.data["kind"].clone(), f.data["text"].clone())).collect()
}

#[tokio::test]
async fn the_floor_answers_a_run_with_the_frames_text_and_usage_tracon_answers() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let (tracon, floor) = pair(&mock, &[]).await;
    let (status, product, raw) = run(&tracon, "support", json!({"message": QUESTION})).await;
    assert_eq!(status, 200, "{raw}");
    let (status, floored, raw_floor) = run(&floor, "support", json!({"message": QUESTION})).await;
    assert_eq!(status, 200, "{raw_floor}");

    assert_eq!(shape(&floored), shape(&product), "tracon:\n{raw}\nfloor:\n{raw_floor}");
    let (done, done_floor) = (&product.last().unwrap().data, &floored.last().unwrap().data);
    assert_eq!(done["status"], "Completed");
    assert_eq!(done_floor["usage"], done["usage"]);
    assert_eq!(done_floor["text"], "Hello from the mock model.");
    // Within a fifth of the product's bytes: ids and timestamps differ, nothing else should.
    let (a, b) = (raw.len() as f64, raw_floor.len() as f64);
    assert!((a - b).abs() / a < 0.2, "{a} against {b} bytes");
}

#[tokio::test]
async fn the_floor_answers_chat_completions_whole_and_streamed_as_tracon_does() {
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let (tracon, floor) = pair(&mock, &[]).await;
    let client = reqwest::Client::new();
    let messages = json!([{"role": "user", "content": QUESTION}]);

    let whole = |server: &Tracon| {
        client.post(server.url("/v1/chat/completions")).json(&json!({"model": "support", "messages": messages})).send()
    };
    let product: Value = whole(&tracon).await.unwrap().json().await.unwrap();
    let floored: Value = whole(&floor).await.unwrap().json().await.unwrap();
    assert_eq!(floored["choices"][0]["message"]["content"], product["choices"][0]["message"]["content"]);
    assert_eq!(floored["usage"]["total_tokens"], product["usage"]["total_tokens"]);
    assert_eq!(floored["model"], "support");

    let streamed = |server: &Tracon| {
        client
            .post(server.url("/v1/chat/completions"))
            .json(&json!({"model": "support", "stream": true, "messages": messages}))
            .send()
    };
    let text = |body: String| {
        body.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
            .collect::<String>()
    };
    let product = streamed(&tracon).await.unwrap().text().await.unwrap();
    let floored = streamed(&floor).await.unwrap().text().await.unwrap();
    assert_eq!(text(floored.clone()), text(product.clone()), "tracon:\n{product}\nfloor:\n{floored}");
    assert!(floored.ends_with("data: [DONE]\n\n"), "{floored}");
}

#[tokio::test]
async fn with_a_database_the_floor_records_each_run_and_its_events() {
    let url = support::database_url();
    let schema = format!("floor_{}", std::process::id());
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let endpoint = format!("{}/v1", mock.base_url());
    let env = [
        ("OPENAI_API_KEY", "floor-key"),
        ("Tracon__Providers__OpenAI__Endpoint", endpoint.as_str()),
        ("DATABASE_URL", url.as_str()),
        ("Tracon__PostgreSql__SchemaName", schema.as_str()),
    ];
    let floor = Tracon::start_bin(std::path::Path::new(env!("CARGO_BIN_EXE_bench-floor")), &env).await;
    let (status, frames, raw) = run(&floor, "support", json!({"message": QUESTION})).await;
    assert_eq!(status, 200, "{raw}");
    let (status, _, _) = run(&floor, "support", json!({"message": QUESTION})).await;
    assert_eq!(status, 200);

    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
        "SELECT r.status, (SELECT count(*) FROM {schema}.run_events e WHERE e.run_id = r.id) FROM {schema}.runs r"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    // Every frame after `run` is an event: the updates and the ending.
    let events = frames.len() as i64 - 1;
    assert_eq!(rows, vec![("Completed".to_owned(), events), ("Completed".to_owned(), events)]);
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&pool).await.unwrap();
}
