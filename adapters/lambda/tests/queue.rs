//! The SQS transport and the consumer function's batch handling, without AWS: the transport
//! against a loopback server standing in for SQS, the consumer over in-memory stores and over
//! a database that cannot be reached.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use tracon_core::config::Config;
use tracon_core::jobs::{JobRecord, JobSettings, JobStatus, JobTransport};
use tracon_core::names::TenantId;
use tracon_core::stores::Stores;
use tracon_lambda::consumer;
use tracon_lambda::queue::SqsTransport;
use uuid::Uuid;

fn config(pairs: &[(&str, &str)]) -> Config {
    Config::from_pairs(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
}

fn event(records: &[(&str, &str)]) -> SqsEvent {
    let records: Vec<Value> = records
        .iter()
        .map(|(id, body)| json!({"messageId": id, "receiptHandle": format!("rh-{id}"), "body": body, "eventSource": "aws:sqs"}))
        .collect();
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

fn failures(response: &SqsBatchResponse) -> Vec<String> {
    let mut ids: Vec<String> = response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    ids.sort();
    ids
}

/// What the stand-in for SQS received, and what it answers.
type Seen = Arc<Mutex<Vec<(HeaderMap, String)>>>;

async fn fake_sqs(status: StatusCode, answer: Value) -> (String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let recorder = seen.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            recorder.lock().unwrap().push((headers, body));
            let answer = answer.clone();
            async move { (status, answer.to_string()) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (endpoint, seen)
}

const QUEUE_URL: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/tracon-jobs";

fn transport(endpoint: &str) -> SqsTransport {
    SqsTransport::from_config(&config(&[
        ("Tracon__Queue__SqsQueueUrl", QUEUE_URL),
        ("Tracon__Queue__SqsEndpoint", endpoint),
        ("AWS_ACCESS_KEY_ID", "AKIDTESTEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "test-secret-access-key"),
        ("AWS_SESSION_TOKEN", "test-session-token"),
    ]))
    .unwrap()
    .unwrap()
}

#[tokio::test]
async fn a_wake_up_is_one_sigv4_signed_send_message_carrying_only_the_job_id() {
    let (endpoint, seen) = fake_sqs(StatusCode::OK, json!({"MessageId": "m-1", "MD5OfMessageBody": "x"})).await;
    let job = Uuid::new_v4();
    transport(&endpoint).wake(job).await.unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    let (headers, body) = &seen[0];
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    assert_eq!(header("x-amz-target"), "AmazonSQS.SendMessage");
    assert_eq!(header("content-type"), "application/x-amz-json-1.0");
    let authorization = header("authorization");
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDTESTEXAMPLE/")
            && authorization.contains("/eu-west-1/sqs/aws4_request")
            && authorization.contains("x-amz-target")
            && authorization.contains("Signature="),
        "{authorization}"
    );
    assert!(!header("x-amz-date").is_empty());
    assert_eq!(header("x-amz-security-token"), "test-session-token");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body, json!({"QueueUrl": QUEUE_URL, "MessageBody": job.to_string()}));
}

#[tokio::test]
async fn a_refused_send_is_an_error_naming_the_error_type_only() {
    let answer = json!({"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "account 123456789012 detail"});
    let (endpoint, _) = fake_sqs(StatusCode::BAD_REQUEST, answer).await;
    let error = transport(&endpoint).wake(Uuid::new_v4()).await.unwrap_err();
    assert!(error.contains("400") && error.contains("QueueDoesNotExist"), "{error}");
    assert!(!error.contains("account"), "{error}");
}

/// A record whose job ran (even to a permanent failure) or is not leasable is a success; a body
/// that is not a job id is the only failure; a job delivered again does not run again.
#[tokio::test]
async fn a_batch_reports_exactly_the_records_to_deliver_again() {
    let config = Config::default();
    let runtime = Arc::new(tracon_lambda::runtime_with_stores(&config, Stores::in_memory()).unwrap());
    let runner = consumer::runner(&runtime, &config, JobSettings::default()).unwrap();
    let tenant = TenantId::default_tenant();
    let now = runtime.platform.clock.now();
    // A queued run whose payload cannot be read: its attempt fails for good.
    let job = JobRecord::queued(Uuid::new_v4(), tenant.clone(), "run.execute", json!({"unreadable": true}), 3, now);
    runtime.stores.jobs.enqueue(&job).await.unwrap();
    let id = job.id.to_string();
    let unknown = Uuid::new_v4().to_string();

    let response =
        consumer::consume(&runner, event(&[("m-job", &id), ("m-unknown", &unknown), ("m-bad", "not a job id")])).await;
    assert_eq!(failures(&response), ["m-bad"]);
    let stored = runtime.stores.jobs.get(&tenant, job.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (JobStatus::Failed, 1), "{stored:?}");

    let again = consumer::consume(&runner, event(&[("m-job", &id)])).await;
    assert_eq!(failures(&again), Vec::<String>::new());
    let stored = runtime.stores.jobs.get(&tenant, job.id).await.unwrap().unwrap();
    assert_eq!(stored.attempts, 1, "not run twice");
}

#[tokio::test]
async fn records_whose_store_cannot_be_reached_are_delivered_again() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://tracon@127.0.0.1:{port}/nowhere");
    let config = config(&[("DATABASE_URL", url.as_str()), ("Tracon__PostgreSql__AcquireTimeoutSeconds", "1")]);
    let stores = tracon_lambda::stores_from_env(&config, 1).unwrap();
    let runtime = Arc::new(tracon_lambda::runtime_with_stores(&config, stores).unwrap());
    let runner = consumer::runner(&runtime, &config, JobSettings::default()).unwrap();
    let (a, b) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
    let response = consumer::consume(&runner, event(&[("m-a", &a), ("m-b", &b), ("m-bad", "{}")])).await;
    assert_eq!(failures(&response), ["m-a", "m-b", "m-bad"]);
}
