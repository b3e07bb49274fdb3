//! Queued runs (`Prefer: respond-async`) through the router, with a consumer draining the
//! job queue in process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode, header};
use serde_json::{Value, json};
use support::{Manual, approval_tool};
use tracon_core::definition::AgentDefinition;
use tracon_core::jobs::{JobHandler, JobRunner, JobSettings};
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::model::{Message, ModelProvider, ProviderError, ProviderErrorKind};
use tracon_core::ports::tokio_rt;
use tracon_core::runs::queued::QueuedRuns;
use tracon_core::runtime::RunQueue;
use tracon_core::runtime::{Runtime, RuntimeBuilder, RuntimeSettings};
use tracon_handlers::{AppState, HttpSettings};

struct Harness {
    app: Router,
    runner: JobRunner,
    runtime: Arc<Runtime>,
}

fn harness(with_consumer: bool) -> Harness {
    harness_with(with_consumer, RuntimeSettings::default())
}

fn harness_with(with_consumer: bool, settings: RuntimeSettings) -> Harness {
    let refund = approval_tool("refund", "Refunds.", json!({"type": "object"}), "refunded");
    let script = ScriptedProvider::from_fn("script", |req| match req.last_user_text() {
        Some("refund") if !matches!(req.messages.last(), Some(Message::Tool { .. })) => {
            ScriptedTurn::tool_call("refund", json!({}))
        }
        Some("fail") => ScriptedTurn::failing(ProviderError::new(
            ProviderErrorKind::ServerError,
            "HttpRequestException",
            "upstream said no",
        )),
        _ => ScriptedTurn::text("Done in the background.").with_usage(5, 3),
    });
    let runtime = Arc::new(
        RuntimeBuilder::new(tokio_rt::platform())
            .settings(settings)
            .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
            .add_tool(refund)
            .add_agent(AgentDefinition::new("worker", "script", "m").with_tools(&["refund"]))
            .build()
            .unwrap(),
    );
    let handlers: Vec<Arc<dyn JobHandler>> = vec![Arc::new(QueuedRuns { runtime: runtime.clone() })];
    // Retries are due at once, so a test sees the next attempt on its next drain.
    let settings = JobSettings { retry_base: Duration::ZERO, ..JobSettings::default() };
    let runner =
        JobRunner::new(runtime.stores.jobs.clone(), handlers, runtime.platform.clock.clone(), settings, "test");
    if with_consumer {
        runtime.set_queue(RunQueue { transport: Arc::new(Manual), max_attempts: 3 });
    }
    let state = AppState::new(runtime.clone(), HttpSettings::default());
    Harness { app: tracon_handlers::router(state), runner, runtime }
}

async fn call(
    app: &Router,
    method: Method,
    path: &str,
    body: Option<Value>,
    prefer: bool,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    let prefer = prefer.then_some("wait=5, respond-async");
    let reply = support::call(method, path).header_opt("Prefer", prefer).json(body).send(app).await;
    (reply.status, reply.headers.clone(), reply.json())
}

#[tokio::test]
async fn a_queued_run_answers_202_and_a_worker_runs_it_as_a_live_one() {
    let h = harness(true);
    let (status, headers, accepted) = call(
        &h.app,
        Method::POST,
        "/api/agents/worker/run",
        Some(json!({"message": "hello", "sessionId": "q1"})),
        true,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let run_id = accepted["runId"].as_str().unwrap().to_owned();
    assert_eq!(headers[header::LOCATION], format!("/api/runs/{run_id}"));
    assert_eq!(headers["preference-applied"], "respond-async");
    assert_eq!(accepted["eventsLocation"], format!("/api/runs/{run_id}/events"));
    let job_id = accepted["jobId"].as_str().unwrap().to_owned();

    // The placeholder row exists before any worker touched it.
    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None, false).await;
    assert_eq!(run["status"], "Queued");
    let (_, _, input) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}/input"), None, false).await;
    assert_eq!(input["message"], "hello");

    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None, false).await;
    assert_eq!(run["status"], "Completed", "{run}");
    assert_eq!(run["usage"]["outputTokens"], 3);
    let (_, _, job) = call(&h.app, Method::GET, &format!("/api/jobs/{job_id}"), None, false).await;
    assert_eq!((job["status"].as_str(), job["runId"].as_str()), (Some("Succeeded"), Some(run_id.as_str())));
    let (_, _, session) = call(&h.app, Method::GET, "/api/sessions/q1", None, false).await;
    assert!(session.to_string().contains("Done in the background."), "the turn is in its session: {session}");
    // Delivered again (at least once), the run is not run twice.
    assert_eq!(h.runner.drain(10).await.unwrap(), 0);
}

#[tokio::test]
async fn a_queued_run_that_needs_approval_closes_into_the_mailbox() {
    let h = harness(true);
    let (_, _, accepted) =
        call(&h.app, Method::POST, "/api/agents/worker/run", Some(json!({"message": "refund"})), true).await;
    h.runner.drain(10).await.unwrap();
    let run_id = accepted["runId"].as_str().unwrap();
    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None, false).await;
    assert_eq!(run["status"], "AwaitingApproval");
    let (_, _, pending) = call(&h.app, Method::GET, "/api/approvals/pending", None, false).await;
    assert_eq!((pending[0]["runId"].as_str(), pending[0]["toolName"].as_str()), (Some(run_id), Some("refund")));
}

#[tokio::test]
async fn a_queued_run_cancelled_before_a_worker_starts_it_ends_canceled() {
    let h = harness(true);
    let (_, _, accepted) =
        call(&h.app, Method::POST, "/api/agents/worker/run", Some(json!({"message": "hello"})), true).await;
    let run_id = accepted["runId"].as_str().unwrap();
    let (status, _, _) = call(&h.app, Method::POST, &format!("/api/runs/{run_id}/cancel"), None, false).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.runner.drain(10).await.unwrap();
    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None, false).await;
    assert_eq!(run["status"], "Canceled", "{run}");
    // Its job follows the run: cancelled, not a success.
    let job_id = accepted["jobId"].as_str().unwrap();
    let (_, _, job) = call(&h.app, Method::GET, &format!("/api/jobs/{job_id}"), None, false).await;
    assert_eq!(job["status"], "Canceled", "{job}");
}

#[tokio::test]
async fn a_bad_queued_request_is_refused_before_anything_is_queued() {
    let h = harness(true);
    let (status, _, problem) =
        call(&h.app, Method::POST, "/api/agents/nobody/run", Some(json!({"message": "hello"})), true).await;
    assert_eq!((status, problem["errorType"].as_str()), (StatusCode::NOT_FOUND, Some("agent_not_found")));
    let (_, _, jobs) = call(&h.app, Method::GET, "/api/jobs", None, false).await;
    assert_eq!(jobs, json!([]));
}

#[tokio::test]
async fn without_a_consumer_the_preference_is_ignored_and_the_run_streams() {
    let h = harness(false);
    let (status, headers, _) =
        call(&h.app, Method::POST, "/api/agents/worker/run", Some(json!({"message": "hello"})), true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
    assert!(headers.get("preference-applied").is_none());
}

async fn queue(h: &Harness, message: &str) -> (String, String) {
    let (status, _, accepted) =
        call(&h.app, Method::POST, "/api/agents/worker/run", Some(json!({"message": message})), true).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    (accepted["runId"].as_str().unwrap().to_owned(), accepted["jobId"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_queued_run_that_fails_fails_its_job_with_the_runs_error_class() {
    let h = harness(true);
    let (run_id, job_id) = queue(&h, "fail").await;
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let (_, _, run) = call(&h.app, Method::GET, &format!("/api/runs/{run_id}"), None, false).await;
    assert_eq!(run["status"], "Failed", "{run}");
    let (_, _, job) = call(&h.app, Method::GET, &format!("/api/jobs/{job_id}"), None, false).await;
    assert_eq!(job["status"], "Failed", "a failed run is not a succeeded job: {job}");
    assert_eq!(job["error"]["code"], "tracon.run.provider_unavailable", "{job}");
    assert_eq!(job["attempts"], 1, "a run that ran is never run again");
}

#[tokio::test]
async fn the_job_of_a_run_whose_process_died_waits_for_it_and_settles_as_it_ended() {
    // Continuation off: the run stays as reconciliation closed it (`continuation.rs` has the
    // default, where it is continued).
    let h = harness_with(true, RuntimeSettings { continuation: false, ..RuntimeSettings::default() });
    let (run_id, job_id) = queue(&h, "hello").await;
    // An earlier attempt started the run, then its process went away without ending it.
    let tenant = tracon_core::names::TenantId::default_tenant();
    let id = tracon_core::names::RunId::parse(&run_id).unwrap();
    let started = h.runtime.stores.runs.start_queued(&tenant, id, chrono::Utc::now()).await.unwrap();
    assert_eq!(started, Some(false));

    // The next attempt does not run it twice, and does not call it a success either.
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let (_, _, job) = call(&h.app, Method::GET, &format!("/api/jobs/{job_id}"), None, false).await;
    assert_eq!(job["status"], "Queued", "retried later, not Succeeded: {job}");
    assert_eq!(job["error"]["code"], "tracon.run.unfinished", "{job}");
    assert_eq!(job["result"], Value::Null);

    // Reconciliation closes the orphan; the job then settles as the run ended.
    let stale_before = chrono::Utc::now() + chrono::Duration::seconds(1);
    let stale = h.runtime.stores.runs.stale_runs(stale_before, 10).await.unwrap();
    assert_eq!(stale.len(), 1);
    let failure = tracon_core::failure::RunFailure::new(tracon_core::failure::ErrorClass::Orphaned, "gone");
    let end = tracon_core::runs::store::RunEnd {
        status: tracon_core::runs::store::RunStatus::Failed,
        ended_at: chrono::Utc::now(),
        duration_ms: 1,
        usage: None,
        cost: None,
        model_provider: None,
        model: None,
        error: Some(failure.clone()),
    };
    let event = tracon_core::events::RecordedEvent {
        sequence: stale[0].last_sequence + 1,
        timestamp: chrono::Utc::now(),
        event: tracon_core::events::RunEvent::RunFailed { error: failure },
    };
    assert!(h.runtime.stores.runs.close_stale(&tenant, id, stale_before, &end, &[event]).await.unwrap());
    assert_eq!(h.runner.drain(10).await.unwrap(), 1);
    let (_, _, job) = call(&h.app, Method::GET, &format!("/api/jobs/{job_id}"), None, false).await;
    assert_eq!(
        (job["status"].as_str(), job["error"]["code"].as_str()),
        (Some("Failed"), Some("tracon.run.orphaned")),
        "{job}"
    );
}
