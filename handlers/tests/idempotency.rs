//! `Idempotency-Key` on the run endpoint: one run for any number of identical submissions,
//! the stored answer replayed, another request under the same key refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{Method, StatusCode, header};
use serde_json::{Value, json};
use tracon_core::definition::AgentDefinition;
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::{AppState, HttpSettings};

fn app(calls: Arc<AtomicUsize>) -> Router {
    let script = ScriptedProvider::from_fn("script", move |_| {
        calls.fetch_add(1, Ordering::SeqCst);
        ScriptedTurn::text("Once.").with_usage(2, 1)
    });
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .add_agent(AgentDefinition::new("once", "script", "m"))
        .build()
        .unwrap();
    tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::default()))
}

async fn submit(app: &Router, key: Option<&str>, body: Value) -> (StatusCode, axum::http::HeaderMap, Value) {
    let call = support::call(Method::POST, "/api/agents/once/run").header_opt("Idempotency-Key", key);
    let reply = call.json(Some(body)).send(app).await;
    (reply.status, reply.headers.clone(), reply.json_or_null())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_identical_submissions_make_one_run_and_the_answer_replays() {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = app(calls.clone());
    let body = json!({"message": "charge the card", "sessionId": "idem"});
    let answers = futures::future::join_all((0..20).map(|_| submit(&app, Some("order-77"), body.clone()))).await;
    let mut run_ids = std::collections::BTreeSet::new();
    for (status, _, doc) in &answers {
        match *status {
            StatusCode::OK => {
                run_ids.insert(doc["runId"].as_str().unwrap().to_owned());
            }
            StatusCode::CONFLICT => assert_eq!(doc["errorType"], "idempotency_in_progress", "{doc}"),
            other => panic!("{other}: {doc}"),
        }
    }
    assert_eq!(run_ids.len(), 1, "one run, whoever answered");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the model was called once");

    let (status, headers, replayed) = submit(&app, Some("order-77"), body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!((replayed["status"].as_str(), replayed["text"].as_str()), (Some("Completed"), Some("Once.")));
    assert_eq!(replayed["runId"].as_str().unwrap(), run_ids.first().unwrap());
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let (status, _, doc) = submit(&app, Some("order-77"), json!({"message": "something else"})).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("idempotency_key_reused")));
    // Another key is another request.
    assert_eq!(submit(&app, Some("order-78"), body).await.0, StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_refused_request_leaves_its_key_free_and_bad_keys_are_refused() {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = app(calls.clone());
    let (status, _, _) = submit(&app, Some("k1"), json!({"message": ""})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, doc) = submit(&app, Some("k1"), json!({"message": "now right"})).await;
    assert_eq!(status, StatusCode::OK, "the failed request did not keep the key: {doc}");
    for bad in ["", "with space", &"x".repeat(256)] {
        let (status, _, doc) = submit(&app, Some(bad), json!({"message": "hi"})).await;
        assert_eq!(
            (status, doc["errorType"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_idempotency_key")),
            "{bad:?}"
        );
    }
    let (status, headers, _) = submit(&app, None, json!({"message": "hi"})).await;
    assert_eq!(
        (status, &headers[header::CONTENT_TYPE]),
        (StatusCode::OK, &"text/event-stream".parse::<axum::http::HeaderValue>().unwrap())
    );
}
