//! The job runner over the in-memory store: results, retries with backoff, attempts running
//! out, an unserved key, cancellation seen at a heartbeat, the attempt timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracon_core::jobs::{
    JobFailure, JobHandler, JobRecord, JobRunner, JobSettings, JobStatus, JobStore, UNKNOWN_HANDLER,
};
use tracon_core::names::TenantId;
use tracon_core::ports::Clock;
use tracon_core::store::memory::MemoryJobStore;

/// A clock that stands still until the test moves it (timers still run in real time).
struct ShiftedClock(AtomicI64, DateTime<Utc>);

impl Default for ShiftedClock {
    fn default() -> Self {
        Self(AtomicI64::new(0), Utc::now())
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> DateTime<Utc> {
        self.1 + chrono::Duration::milliseconds(self.0.load(Ordering::SeqCst))
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Fails its first `fail` attempts (transiently), then echoes the payload; or waits for
/// cancellation when the payload says `"wait": true`.
struct Echo {
    fail: usize,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl JobHandler for Echo {
    fn key(&self) -> &'static str {
        "echo"
    }
    async fn handle(&self, job: &JobRecord, cancel: CancellationToken) -> Result<Option<Value>, JobFailure> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if job.payload["wait"] == true {
            cancel.cancelled().await;
            return Err(JobFailure::Permanent { code: "stopped".into(), message: "Stopped.".into() });
        }
        if n < self.fail {
            return Err(JobFailure::Transient {
                code: "flaky".into(),
                message: "A flaky dependency.".into(),
                detail: "connection reset by 10.0.0.7".into(),
            });
        }
        Ok(Some(json!({"echo": job.payload})))
    }
}

struct Setup {
    store: Arc<MemoryJobStore>,
    clock: Arc<ShiftedClock>,
    runner: JobRunner,
    echo: Arc<Echo>,
}

fn setup(fail: usize, settings: JobSettings) -> Setup {
    let store = Arc::new(MemoryJobStore::default());
    let clock = Arc::new(ShiftedClock::default());
    let echo = Arc::new(Echo { fail, calls: AtomicUsize::new(0) });
    let runner =
        JobRunner::new(store.clone(), vec![echo.clone() as Arc<dyn JobHandler>], clock.clone(), settings, "test");
    Setup { store, clock, runner, echo }
}

fn tenant() -> TenantId {
    TenantId::default_tenant()
}

async fn enqueue(s: &Setup, key: &str, payload: Value, max_attempts: u32) -> uuid::Uuid {
    let job = JobRecord::queued(uuid::Uuid::now_v7(), tenant(), key, payload, max_attempts, s.clock.now());
    s.store.enqueue(&job).await.unwrap();
    job.id
}

async fn job(s: &Setup, id: uuid::Uuid) -> JobRecord {
    s.store.get(&tenant(), id).await.unwrap().unwrap()
}

#[tokio::test]
async fn a_job_runs_once_and_keeps_its_result() {
    let s = setup(0, JobSettings::default());
    let id = enqueue(&s, "echo", json!({"n": 1}), 3).await;
    assert_eq!(s.runner.drain(10).await.unwrap(), 1);
    let done = job(&s, id).await;
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.result, Some(json!({"echo": {"n": 1}})));
    assert_eq!((done.attempts, done.lease_token), (1, None));
    assert_eq!(s.runner.drain(10).await.unwrap(), 0, "a finished job is not leased again");
}

#[tokio::test]
async fn a_failed_attempt_is_retried_after_a_growing_backoff_until_attempts_run_out() {
    let s = setup(usize::MAX, JobSettings::default());
    let id = enqueue(&s, "echo", json!({}), 3).await;
    s.runner.drain(10).await.unwrap();
    let after_one = job(&s, id).await;
    assert_eq!(after_one.status, JobStatus::Queued);
    assert_eq!(after_one.error.as_ref().unwrap().code, "flaky");
    assert!(!format!("{after_one:?}").contains("10.0.0.7"), "the detail is logged, never stored");
    let wait = (after_one.available_at - s.clock.now()).num_milliseconds();
    assert_eq!(wait, 5_000, "first retry after the base delay");
    assert_eq!(s.runner.drain(10).await.unwrap(), 0, "not before its time");

    s.clock.0.fetch_add(5_001, Ordering::SeqCst);
    s.runner.drain(10).await.unwrap();
    let after_two = job(&s, id).await;
    let wait = (after_two.available_at - s.clock.now()).num_milliseconds();
    assert_eq!(wait, 10_000, "doubled");

    s.clock.0.fetch_add(10_001, Ordering::SeqCst);
    s.runner.drain(10).await.unwrap();
    let last = job(&s, id).await;
    assert_eq!((last.status, last.attempts), (JobStatus::Failed, 3));
    assert_eq!(s.echo.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_key_nobody_serves_fails_with_the_stable_code() {
    let s = setup(0, JobSettings::default());
    let id = enqueue(&s, "nobody", json!({}), 3).await;
    let lease_request = tracon_core::jobs::LeaseRequest {
        owner: "other".into(),
        handler_keys: vec!["nobody".into()],
        lease_for: chrono::Duration::seconds(60),
        now: s.clock.now(),
    };
    let lease = s.store.lease_one(id, &lease_request).await.unwrap().unwrap();
    s.runner.run(lease).await;
    let failed = job(&s, id).await;
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.error.unwrap().code, UNKNOWN_HANDLER);
    assert!(!s.runner.serves("nobody") && s.runner.serves("echo"));
}

#[tokio::test]
async fn cancellation_reaches_a_running_attempt_at_its_next_heartbeat() {
    let settings = JobSettings { lease_for: Duration::from_millis(60), ..JobSettings::default() };
    let s = Arc::new(setup(0, settings));
    let id = enqueue(&s, "echo", json!({"wait": true}), 3).await;
    let running = {
        let s = s.clone();
        tokio::spawn(async move { s.runner.drain(1).await.unwrap() })
    };
    while job(&s, id).await.status != JobStatus::Running {
        tokio::task::yield_now().await;
    }
    let flagged = s.store.cancel(&tenant(), id, s.clock.now()).await.unwrap();
    assert!(flagged.cancel_requested);
    running.await.unwrap();
    assert_eq!(job(&s, id).await.status, JobStatus::Canceled);
}

#[tokio::test]
async fn an_attempt_past_the_timeout_is_stopped_and_retried() {
    let settings = JobSettings { timeout: Duration::from_millis(30), ..JobSettings::default() };
    let s = setup(0, settings);
    let id = enqueue(&s, "echo", json!({"wait": true}), 2).await;
    s.runner.drain(1).await.unwrap();
    let retried = job(&s, id).await;
    assert_eq!((retried.status, retried.error.unwrap().code.as_str()), (JobStatus::Queued, "tracon.job.timeout"));
}
