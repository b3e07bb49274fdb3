//! The job runner over the in-memory store: results, retries with backoff, attempts running
//! out, an unserved key, cancellation seen at a heartbeat, the attempt timeout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use support::ShiftedClock;
use tokio_util::sync::CancellationToken;
use tracon_core::jobs::MemoryJobStore;
use tracon_core::jobs::{
    JobFailure, JobHandler, JobRecord, JobRunner, JobSettings, JobStatus, JobStore, UNKNOWN_HANDLER,
};
use tracon_core::names::TenantId;
use tracon_core::ports::Clock;

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

    s.clock.advance(5_001);
    s.runner.drain(10).await.unwrap();
    let after_two = job(&s, id).await;
    let wait = (after_two.available_at - s.clock.now()).num_milliseconds();
    assert_eq!(wait, 10_000, "doubled");

    s.clock.advance(10_001);
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

/// A job store whose heartbeats fail (the database went away mid-attempt).
struct NoHeartbeat(MemoryJobStore);

#[async_trait::async_trait]
impl JobStore for NoHeartbeat {
    async fn enqueue(&self, job: &JobRecord) -> Result<(), tracon_core::error::StoreError> {
        self.0.enqueue(job).await
    }
    async fn get(&self, t: &TenantId, id: uuid::Uuid) -> Result<Option<JobRecord>, tracon_core::error::StoreError> {
        self.0.get(t, id).await
    }
    async fn list(
        &self,
        t: &TenantId,
        f: &tracon_core::jobs::JobFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<JobRecord>, tracon_core::error::StoreError> {
        self.0.list(t, f, skip, take).await
    }
    async fn lease(
        &self,
        r: &tracon_core::jobs::LeaseRequest,
        limit: usize,
    ) -> Result<Vec<tracon_core::jobs::Lease>, tracon_core::error::StoreError> {
        self.0.lease(r, limit).await
    }
    async fn lease_one(
        &self,
        id: uuid::Uuid,
        r: &tracon_core::jobs::LeaseRequest,
    ) -> Result<Option<tracon_core::jobs::Lease>, tracon_core::error::StoreError> {
        self.0.lease_one(id, r).await
    }
    async fn heartbeat(
        &self,
        _: uuid::Uuid,
        _: uuid::Uuid,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<Option<bool>, tracon_core::error::StoreError> {
        Err(tracon_core::error::StoreError::Unavailable { detail: "connection refused".into() })
    }
    async fn finish(
        &self,
        id: uuid::Uuid,
        token: uuid::Uuid,
        o: &tracon_core::jobs::Outcome,
        now: DateTime<Utc>,
    ) -> Result<bool, tracon_core::error::StoreError> {
        self.0.finish(id, token, o, now).await
    }
    async fn cancel(
        &self,
        t: &TenantId,
        id: uuid::Uuid,
        now: DateTime<Utc>,
    ) -> Result<JobRecord, tracon_core::error::StoreError> {
        self.0.cancel(t, id, now).await
    }
    async fn due(
        &self,
        now: DateTime<Utc>,
        quiet: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<uuid::Uuid>, tracon_core::error::StoreError> {
        self.0.due(now, quiet, limit).await
    }
}

/// Wall-clock time (the lease must run out for real here).
struct WallClock;

impl Clock for WallClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

#[tokio::test]
async fn an_attempt_whose_lease_cannot_be_renewed_stops_before_the_lease_runs_out() {
    let store = Arc::new(NoHeartbeat(MemoryJobStore::default()));
    let echo = Arc::new(Echo { fail: 0, calls: AtomicUsize::new(0) });
    let settings = JobSettings { lease_for: Duration::from_millis(600), ..JobSettings::default() };
    let runner =
        JobRunner::new(store.clone(), vec![echo.clone() as Arc<dyn JobHandler>], Arc::new(WallClock), settings, "a");
    let job = JobRecord::queued(uuid::Uuid::now_v7(), tenant(), "echo", json!({"wait": true}), 3, Utc::now());
    store.enqueue(&job).await.unwrap();
    // The handler only ends when cancelled: the runner must cancel it itself, within the
    // lease it holds, and leave the job to the next lease rather than record anything.
    let ran = runner.drain(1).await.unwrap();
    assert_eq!(ran, 1);
    let stopped_at = Utc::now();
    let read = store.get(&tenant(), job.id).await.unwrap().unwrap();
    assert_eq!(read.status, JobStatus::Running, "nothing recorded: the lease returns the job");
    assert!(stopped_at <= read.lease_expires_at.unwrap(), "stopped before its lease ran out");
    assert_eq!(echo.calls.load(Ordering::SeqCst), 1);
}

/// A job type of the host's own, added at start-up.
struct Thumbnails(AtomicUsize);

#[async_trait::async_trait]
impl JobHandler for Thumbnails {
    fn key(&self) -> &'static str {
        "acme.thumbnails"
    }
    async fn handle(&self, job: &JobRecord, _: CancellationToken) -> Result<Option<Value>, JobFailure> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Some(json!({"made": job.payload["images"]})))
    }
}

struct Nobody;

#[async_trait::async_trait]
impl tracon_core::jobs::JobTransport for Nobody {
    async fn wake(&self, _: uuid::Uuid) -> Result<(), String> {
        Ok(())
    }
}

#[tokio::test]
async fn a_host_job_type_runs_on_the_consumer_and_a_key_nobody_serves_is_refused() {
    use tracon_core::background::{EnqueueError, enqueue, job_runner};
    let thumbnails = Arc::new(Thumbnails(AtomicUsize::new(0)));
    let runtime = Arc::new(
        tracon_core::runtime::RuntimeBuilder::new(tracon_core::ports::tokio_rt::platform())
            .add_job_handler(thumbnails.clone())
            .build()
            .unwrap(),
    );
    let id = enqueue(&runtime, &Nobody, &tenant(), "acme.thumbnails", json!({"images": 3}), 3).await.unwrap();
    let runner = job_runner(&runtime, JobSettings::default(), "test");
    assert_eq!(runner.drain(10).await.unwrap(), 1);
    let done = runtime.stores.jobs.get(&tenant(), id).await.unwrap().unwrap();
    assert_eq!((done.status, done.result), (JobStatus::Succeeded, Some(json!({"made": 3}))));
    assert_eq!(thumbnails.0.load(Ordering::SeqCst), 1);

    let refused = enqueue(&runtime, &Nobody, &tenant(), "acme.nobody", json!({}), 3).await;
    assert!(matches!(refused, Err(EnqueueError::UnknownHandlerKey)), "{refused:?}");
    let all = runtime.stores.jobs.list(&tenant(), &Default::default(), 0, 10).await.unwrap();
    assert_eq!(all.len(), 1, "nothing was queued for the unknown key");

    // Two handlers for one key, or a handler for a built-in key, stop the start.
    let twice = tracon_core::runtime::RuntimeBuilder::new(tracon_core::ports::tokio_rt::platform())
        .add_job_handler(thumbnails.clone())
        .add_job_handler(Arc::new(Thumbnails(AtomicUsize::new(0))))
        .build();
    assert!(twice.is_err_and(|e| e.to_string().contains("acme.thumbnails")));
    let built_in = tracon_core::runtime::RuntimeBuilder::new(tracon_core::ports::tokio_rt::platform())
        .add_job_handler(Arc::new(Named("run.execute")))
        .build();
    assert!(built_in.is_err_and(|e| e.to_string().contains("run.execute")));
}

/// A handler under any key.
struct Named(&'static str);

#[async_trait::async_trait]
impl JobHandler for Named {
    fn key(&self) -> &'static str {
        self.0
    }
    async fn handle(&self, _: &JobRecord, _: CancellationToken) -> Result<Option<Value>, JobFailure> {
        Ok(None)
    }
}

/// Hands its job over `times` times (a queued run at its soft deadline), then succeeds.
struct HandsOver {
    times: usize,
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl JobHandler for HandsOver {
    fn key(&self) -> &'static str {
        "steps"
    }
    async fn handle(&self, _job: &JobRecord, _cancel: CancellationToken) -> Result<Option<Value>, JobFailure> {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.times {
            return Err(JobFailure::HandedOver);
        }
        Ok(None)
    }
}

/// Records the jobs it was asked to wake.
#[derive(Default)]
struct Woken(std::sync::Mutex<Vec<uuid::Uuid>>);

#[async_trait::async_trait]
impl tracon_core::jobs::JobTransport for Woken {
    async fn wake(&self, job: uuid::Uuid) -> Result<(), String> {
        self.0.lock().unwrap().push(job);
        Ok(())
    }
}

#[tokio::test]
async fn a_handed_over_job_is_woken_through_the_transport_at_once_and_keeps_its_attempts() {
    let store = Arc::new(MemoryJobStore::default());
    let clock = Arc::new(ShiftedClock::default());
    let handler = Arc::new(HandsOver { times: 3, calls: AtomicUsize::new(0) });
    let woken = Arc::new(Woken::default());
    let runner = JobRunner::new(
        store.clone(),
        vec![handler.clone() as Arc<dyn JobHandler>],
        clock.clone(),
        JobSettings::default(),
        "t",
    )
    .with_transport(woken.clone());
    let job = JobRecord::queued(uuid::Uuid::now_v7(), tenant(), "steps", json!({}), 2, clock.now());
    store.enqueue(&job).await.unwrap();
    // The transport delivers what it was woken for; nothing else drives the job.
    let mut delivered = 0;
    let mut next = Some(job.id);
    while let Some(id) = next {
        assert!(runner.deliver(id).await.unwrap(), "the woken job is leasable at once");
        delivered += 1;
        next = woken.0.lock().unwrap().pop();
    }
    assert_eq!(delivered, 4, "three hand-overs, then the attempt that ends it");
    let stored = store.get(&tenant(), job.id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (JobStatus::Succeeded, 1), "{stored:?}");
    assert!(woken.0.lock().unwrap().is_empty(), "a job that ended is not woken");
}
