//! The durable job queue: everything that outlives a request.
//!
//! A job is a row — the truth — and a queue transport only wakes a consumer with the job's
//! id. A consumer **leases** a job: the lease names its owner, carries a fresh token and an
//! expiry, and counts an attempt. Every later change (heartbeat, completion, failure) names
//! the token, so a consumer whose lease expired — and whose job another consumer has leased
//! since — changes nothing. An expired lease returns the job to the queue; a failed attempt
//! goes back with exponential backoff until `max_attempts`. Delivery is at least once; a
//! handler that must not repeat its effect checks its own progress (a run is not started
//! twice: its row says whether it ran).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::StoreError;
use crate::names::{RunId, TenantId};
use crate::ports::Clock;
use crate::sync::lock;
use std::sync::Mutex;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub enum JobStatus {
    /// Waiting to be leased (at or after `available_at`).
    Queued,
    /// Leased by a consumer.
    Running,
    Succeeded,
    /// Out of attempts, or failed for good.
    Failed,
    Canceled,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "Queued",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Canceled => "Canceled",
        }
    }

    /// Every status (what the job list's `status` filter takes).
    pub const ALL: [JobStatus; 5] = [Self::Queued, Self::Running, Self::Succeeded, Self::Failed, Self::Canceled];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Canceled)
    }
}

/// Why a job failed: a stable code and a display-safe message (never foreign error text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobError {
    pub code: String,
    pub message: String,
}

/// The handler key of a queued run's job ([`crate::runs::queued::QueuedRuns`]).
pub const RUN_JOB: &str = "run.execute";
/// The handler key of a webhook delivery's job ([`crate::webhooks::WebhookDeliveries`]).
pub const DELIVER_JOB: &str = "webhook.deliver";
/// The handler key of a queued workflow run's job ([`crate::workflows::queued::QueuedWorkflows`]).
pub const WORKFLOW_JOB: &str = "workflow.run";
/// The handler keys Tracon serves itself.
pub const BUILT_IN_JOB_KEYS: [&str; 3] = [RUN_JOB, DELIVER_JOB, WORKFLOW_JOB];

/// The code of a job whose handler key no consumer serves.
pub const UNKNOWN_HANDLER: &str = "tracon.job.unknown-handler-key";

/// A job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: Uuid,
    pub tenant: TenantId,
    /// Which handler runs it (`run.execute`, `webhook.deliver`, …).
    pub handler_key: String,
    pub payload: Value,
    pub status: JobStatus,
    /// Leases taken so far.
    pub attempts: u32,
    pub max_attempts: u32,
    /// Not leased before this.
    pub available_at: DateTime<Utc>,
    pub lease_owner: Option<String>,
    pub lease_token: Option<Uuid>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub cancel_requested: bool,
    pub result: Option<Value>,
    pub error: Option<JobError>,
    /// The run the job executes, when it executes one.
    pub run_id: Option<RunId>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

impl JobRecord {
    /// A new queued job, available at once.
    pub fn queued(
        id: Uuid,
        tenant: TenantId,
        handler_key: &str,
        payload: Value,
        max_attempts: u32,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            tenant,
            handler_key: handler_key.to_owned(),
            payload,
            status: JobStatus::Queued,
            attempts: 0,
            max_attempts: max_attempts.max(1),
            available_at: now,
            lease_owner: None,
            lease_token: None,
            lease_expires_at: None,
            heartbeat_at: None,
            cancel_requested: false,
            result: None,
            error: None,
            run_id: None,
            created_at: now,
            updated_at: now,
            completed_at: None,
        }
    }
}

/// A job a consumer holds, with the token every later change must name.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub job: JobRecord,
    pub token: Uuid,
}

/// Filters of the job list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFilter {
    pub status: Option<JobStatus>,
    pub handler_key: Option<String>,
}

impl JobFilter {
    /// [`crate::error::check_text`] over the filter's text: what every store checks first.
    pub fn check_text(&self) -> Result<(), StoreError> {
        crate::error::check_text_opt("handlerKey", self.handler_key.as_deref())
    }
}

/// What a consumer asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRequest {
    /// Who leases (an instance id), for the record.
    pub owner: String,
    /// Only jobs with these handler keys.
    pub handler_keys: Vec<String>,
    /// How long the lease lasts before the job returns to the queue.
    pub lease_for: chrono::Duration,
    pub now: DateTime<Utc>,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Succeeded(Option<Value>),
    /// Try again at `retry_at`; the error is kept meanwhile.
    Retry {
        error: JobError,
        retry_at: DateTime<Utc>,
    },
    /// No more attempts.
    Failed(JobError),
    /// The consumer stopped because cancellation was asked.
    Canceled,
    /// The work handed itself over to a later attempt (a queued run that reached its soft
    /// deadline): queued again at once, the attempt given back, nothing counted as failed.
    Requeue,
}

/// The job rows. Leasing and the lease-token updates are each one atomic step.
#[async_trait::async_trait]
pub trait JobStore: Send + Sync {
    /// Stores a queued job. `Conflict` when its id exists.
    async fn enqueue(&self, job: &JobRecord) -> Result<(), StoreError>;
    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<JobRecord>, StoreError>;
    /// Newest first.
    async fn list(
        &self,
        tenant: &TenantId,
        filter: &JobFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<JobRecord>, StoreError>;
    /// Leases up to `limit` jobs of any tenant: queued ones available at `now`, and running
    /// ones whose lease expired — oldest available first, each to exactly one caller even
    /// under concurrency (`FOR UPDATE SKIP LOCKED`). Each lease counts an attempt and gets a
    /// fresh token. A job out of attempts is not leased again: it is closed `Failed`.
    async fn lease(&self, request: &LeaseRequest, limit: usize) -> Result<Vec<Lease>, StoreError>;
    /// Leases one job by id (a transport delivered it), under the same rules; `None` when
    /// it is not leasable now (taken, not yet available, finished, unknown).
    async fn lease_one(&self, id: Uuid, request: &LeaseRequest) -> Result<Option<Lease>, StoreError>;
    /// Extends the lease to `until`. `Ok(None)` when the lease is no longer this token's;
    /// otherwise whether cancellation was asked.
    async fn heartbeat(
        &self,
        id: Uuid,
        token: Uuid,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError>;
    /// Records how the attempt ended. `false` (nothing changed) when the lease is no
    /// longer this token's.
    async fn finish(&self, id: Uuid, token: Uuid, outcome: &Outcome, now: DateTime<Utc>) -> Result<bool, StoreError>;
    /// Cancels: a queued job ends `Canceled` at once, a running one is flagged (its
    /// consumer sees it at its next heartbeat). `NotFound` for another tenant's or an
    /// unknown job; `Conflict` when it already ended.
    async fn cancel(&self, tenant: &TenantId, id: Uuid, now: DateTime<Utc>) -> Result<JobRecord, StoreError>;
    /// Ids of jobs of any tenant a consumer could lease at `now` but may not have been told
    /// about: queued retries whose backoff passed, queued jobs older than `quiet_since` (their
    /// wake-up may be lost), and running jobs whose lease expired — oldest first, at most
    /// `limit`. The tick wakes them through the host's transport.
    async fn due(&self, now: DateTime<Utc>, quiet_since: DateTime<Utc>, limit: usize) -> Result<Vec<Uuid>, StoreError>;
}

/// Wakes a consumer for a job just enqueued: in process on the local server, a queue
/// message on serverless hosts. The message carries only the job's id; the row is the truth,
/// so a lost wake-up only delays the job until the next poll or tick.
#[async_trait::async_trait]
pub trait JobTransport: Send + Sync {
    async fn wake(&self, job: Uuid) -> Result<(), String>;
}

/// Runs one kind of job.
#[async_trait::async_trait]
pub trait JobHandler: Send + Sync {
    /// The handler key it serves.
    fn key(&self) -> &'static str;
    /// Runs one attempt. `cancel` fires when cancellation is asked (seen at a heartbeat) or
    /// the lease is lost. An `Err` is retried with backoff while attempts remain; its text is
    /// logged, never stored.
    async fn handle(&self, job: &JobRecord, cancel: CancellationToken) -> Result<Option<Value>, JobFailure>;
}

/// Told when a job settles for good (`Succeeded` or `Failed`, its result recorded): what
/// publishes `job.completed` / `job.failed`. Runs after the store write; it must not fail
/// the job, so it returns nothing.
#[async_trait::async_trait]
pub trait JobObserver: Send + Sync {
    async fn settled(&self, job: &JobRecord, outcome: &Outcome);
}

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobFailure {
    /// Worth another attempt (a provider error, a store outage). `detail` is logged only.
    Transient { code: String, message: String, detail: String },
    /// Never worth another attempt (bad payload, a definition that no longer compiles).
    Permanent { code: String, message: String },
    /// The work was cancelled (a queued run that ended `Canceled`): the job ends `Canceled`.
    Canceled,
    /// The work stopped at a boundary of its own to go on in another attempt (a queued run at
    /// its soft deadline): [`Outcome::Requeue`].
    HandedOver,
}

impl JobFailure {
    /// The store could not be reached: worth another attempt (the cause is logged only).
    pub fn store_unavailable(e: StoreError) -> Self {
        JobFailure::Transient {
            code: "tracon.store.unavailable".into(),
            message: "The store could not be reached.".into(),
            detail: format!("{e:?}"),
        }
    }
}

/// Queue settings (`Tracon:Jobs:*`).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// How long a lease lasts without a heartbeat (`LeaseSeconds`, 60).
    pub lease_for: Duration,
    /// Longest an attempt may run (`TimeoutSeconds`, 900). Heartbeats keep the lease alive
    /// meanwhile; at the timeout the attempt is cancelled and retried.
    pub timeout: Duration,
    /// First retry delay (`RetryBaseSeconds`, 5), doubled per attempt up to `retry_max`.
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Attempts of a new job (`MaxAttempts`, 5).
    pub max_attempts: u32,
}

impl Default for JobSettings {
    fn default() -> Self {
        Self {
            lease_for: Duration::from_secs(60),
            timeout: Duration::from_secs(900),
            retry_base: Duration::from_secs(5),
            retry_max: Duration::from_secs(600),
            max_attempts: 5,
        }
    }
}

impl JobSettings {
    pub fn from_config(config: &crate::config::Config) -> Result<Self, crate::config::ConfigError> {
        let d = Self::default();
        let bad = |m: &str| crate::config::ConfigError::Message(m.to_owned());
        let s = Self {
            lease_for: config.seconds("Tracon:Jobs:LeaseSeconds")?.unwrap_or(d.lease_for),
            timeout: config.seconds("Tracon:Jobs:TimeoutSeconds")?.unwrap_or(d.timeout),
            retry_base: config.seconds("Tracon:Jobs:RetryBaseSeconds")?.unwrap_or(d.retry_base),
            retry_max: config.seconds("Tracon:Jobs:RetryMaxSeconds")?.unwrap_or(d.retry_max),
            max_attempts: config.parse::<u32>("Tracon:Jobs:MaxAttempts")?.unwrap_or(d.max_attempts),
        };
        if s.lease_for < Duration::from_secs(1) {
            return Err(bad("Tracon__Jobs__LeaseSeconds must be at least 1."));
        }
        if s.timeout.is_zero() || s.max_attempts == 0 || s.retry_base > s.retry_max {
            return Err(bad(
                "Tracon__Jobs__TimeoutSeconds and MaxAttempts must be positive, RetryBaseSeconds at most RetryMaxSeconds.",
            ));
        }
        Ok(s)
    }

    /// The delay before attempt `attempts + 1`: base × 2^(attempts − 1), at most `retry_max`.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let factor = 1u32.checked_shl(attempts.saturating_sub(1).min(20)).unwrap_or(u32::MAX);
        self.retry_base.saturating_mul(factor).min(self.retry_max)
    }
}

/// Leases jobs and runs them with their handlers, heartbeating while they run.
pub struct JobRunner {
    store: Arc<dyn JobStore>,
    handlers: HashMap<&'static str, Arc<dyn JobHandler>>,
    clock: Arc<dyn Clock>,
    settings: JobSettings,
    /// This consumer's name in the lease rows.
    owner: String,
    /// Told of every job that settles for good ([`JobObserver`]).
    observers: Vec<Arc<dyn JobObserver>>,
    /// Wakes a consumer for a job handed back to the queue ([`Outcome::Requeue`]) at once;
    /// without one it waits for the next poll or tick.
    transport: Option<Arc<dyn JobTransport>>,
}

impl JobRunner {
    pub fn new(
        store: Arc<dyn JobStore>,
        handlers: Vec<Arc<dyn JobHandler>>,
        clock: Arc<dyn Clock>,
        settings: JobSettings,
        owner: impl Into<String>,
    ) -> Self {
        let handlers = handlers.into_iter().map(|h| (h.key(), h)).collect();
        Self { store, handlers, clock, settings, owner: owner.into(), observers: Vec::new(), transport: None }
    }

    /// Wakes a consumer through `transport` for every job an attempt hands back to the queue
    /// (a queued run at its soft deadline), so its next attempt starts at once rather than at
    /// the next tick: a message on serverless hosts.
    pub fn with_transport(mut self, transport: Arc<dyn JobTransport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Adds an observer of settled jobs (see [`crate::background::job_observers`]).
    pub fn with_observer(mut self, observer: Arc<dyn JobObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    /// Whether a handler serves `key` (enqueue refuses a key nobody serves).
    pub fn serves(&self, key: &str) -> bool {
        self.handlers.contains_key(key)
    }

    fn request(&self) -> LeaseRequest {
        LeaseRequest {
            owner: self.owner.clone(),
            handler_keys: self.handlers.keys().map(|k| (*k).to_owned()).collect(),
            lease_for: chrono::Duration::from_std(self.settings.lease_for).unwrap_or(chrono::Duration::seconds(60)),
            now: self.clock.now(),
        }
    }

    /// Leases up to `limit` due jobs without running them (a consumer that runs them
    /// concurrently hands each to [`Self::run`]).
    pub async fn take(&self, limit: usize) -> Result<Vec<Lease>, StoreError> {
        self.store.lease(&self.request(), limit).await
    }

    /// Leases up to `limit` due jobs and runs them one after another; returns how many ran.
    pub async fn drain(&self, limit: usize) -> Result<usize, StoreError> {
        let leases = self.store.lease(&self.request(), limit).await?;
        let n = leases.len();
        for lease in leases {
            self.run(lease).await;
        }
        Ok(n)
    }

    /// Runs the job a transport delivered, when it is leasable now.
    pub async fn deliver(&self, id: Uuid) -> Result<bool, StoreError> {
        match self.store.lease_one(id, &self.request()).await? {
            Some(lease) => {
                self.run(lease).await;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// One attempt: the handler under the timeout, a heartbeat every third of the lease.
    pub async fn run(&self, lease: Lease) {
        let Lease { job, token } = lease;
        let Some(handler) = self.handlers.get(job.handler_key.as_str()).cloned() else {
            tracing::error!(job = %job.id, handler_key = %job.handler_key, "no handler serves this job's key");
            let error = JobError { code: UNKNOWN_HANDLER.into(), message: "No consumer serves this job.".into() };
            self.finish(&job, token, Outcome::Failed(error)).await;
            return;
        };
        let cancel = CancellationToken::new();
        let mut work = std::pin::pin!(handler.handle(&job, cancel.clone()));
        let every = self.settings.lease_for / 3;
        let mut beat = self.clock.sleep(every);
        let mut deadline = self.clock.sleep(self.settings.timeout);
        let mut cancel_asked = false;
        // Until when the lease is known to be this attempt's.
        let mut held_until = job.lease_expires_at.unwrap_or_else(|| self.clock.now());
        let outcome = loop {
            tokio::select! {
                biased;
                result = &mut work => break self.outcome(&job, result, cancel_asked),
                _ = &mut deadline => {
                    cancel.cancel();
                    let error = JobError { code: "tracon.job.timeout".into(), message: "The attempt ran past the job timeout.".into() };
                    break self.retry_or_fail(&job, error);
                }
                _ = &mut beat => {
                    let now = self.clock.now();
                    let until = now + chrono::Duration::from_std(self.settings.lease_for).unwrap_or(chrono::Duration::seconds(60));
                    match self.store.heartbeat(job.id, token, until, now).await {
                        Ok(Some(asked)) => {
                            if asked && !cancel_asked {
                                cancel_asked = true;
                                cancel.cancel();
                            }
                        }
                        Ok(None) => {
                            // Another consumer holds the job now: stop, change nothing.
                            cancel.cancel();
                            tracing::warn!(job = %job.id, "lost the job's lease; stopping this attempt");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(job = %job.id, error = ?e, "job heartbeat failed");
                            // The lease runs out before the next heartbeat could renew it:
                            // stop now, so the attempt never outlives its lease and never runs
                            // beside the consumer that leases the job next.
                            if held_until - now <= chrono::Duration::from_std(every).unwrap_or_default() {
                                cancel.cancel();
                                tracing::warn!(job = %job.id, "the job's lease is about to run out unrenewed; stopping this attempt");
                                return;
                            }
                            beat = self.clock.sleep(every);
                            continue;
                        }
                    }
                    held_until = until;
                    beat = self.clock.sleep(every);
                }
            }
        };
        self.finish(&job, token, outcome).await;
    }

    fn outcome(&self, job: &JobRecord, result: Result<Option<Value>, JobFailure>, cancel_asked: bool) -> Outcome {
        match result {
            Ok(value) => Outcome::Succeeded(value),
            Err(_) if cancel_asked => Outcome::Canceled,
            Err(JobFailure::Canceled) => Outcome::Canceled,
            Err(JobFailure::HandedOver) => Outcome::Requeue,
            Err(JobFailure::Permanent { code, message }) => Outcome::Failed(JobError { code, message }),
            Err(JobFailure::Transient { code, message, detail }) => {
                tracing::warn!(job = %job.id, attempt = job.attempts, code = %code, detail = %detail, "job attempt failed");
                self.retry_or_fail(job, JobError { code, message })
            }
        }
    }

    fn retry_or_fail(&self, job: &JobRecord, error: JobError) -> Outcome {
        if job.attempts >= job.max_attempts {
            return Outcome::Failed(error);
        }
        let delay =
            chrono::Duration::from_std(self.settings.backoff(job.attempts)).unwrap_or(chrono::Duration::seconds(5));
        Outcome::Retry { error, retry_at: self.clock.now() + delay }
    }

    async fn finish(&self, job: &JobRecord, token: Uuid, outcome: Outcome) {
        match self.store.finish(job.id, token, &outcome, self.clock.now()).await {
            Ok(true) if matches!(outcome, Outcome::Succeeded(_) | Outcome::Failed(_)) => {
                for observer in &self.observers {
                    observer.settled(job, &outcome).await;
                }
            }
            Ok(true) if matches!(outcome, Outcome::Requeue) => {
                if let Some(transport) = &self.transport
                    && let Err(e) = transport.wake(job.id).await
                {
                    tracing::warn!(job = %job.id, error = %e, "could not wake a consumer for a handed-over job; the next tick will");
                }
            }
            Ok(true) => {}
            Ok(false) => tracing::warn!(job = %job.id, "the job's lease moved on before its result was recorded"),
            Err(e) => {
                tracing::error!(job = %job.id, error = ?e, "could not record a job's result; its lease will return it")
            }
        }
    }
}

// ---- memory --------------------------------------------------------------------------------

/// Jobs in creation order.
#[derive(Default)]
pub struct MemoryJobStore {
    rows: Mutex<Vec<JobRecord>>,
}

impl MemoryJobStore {
    /// Leases `job` when the rules allow it at `request.now`; closes it `Failed` when it is
    /// out of attempts.
    fn try_lease(job: &mut JobRecord, request: &LeaseRequest) -> Option<Lease> {
        let now = request.now;
        let leasable = match job.status {
            JobStatus::Queued => job.available_at <= now,
            JobStatus::Running => job.lease_expires_at.is_some_and(|at| at <= now),
            _ => false,
        };
        if !leasable || !request.handler_keys.contains(&job.handler_key) {
            return None;
        }
        if job.attempts >= job.max_attempts || job.cancel_requested {
            job.status = if job.cancel_requested { JobStatus::Canceled } else { JobStatus::Failed };
            if job.status == JobStatus::Failed && job.error.is_none() {
                job.error = Some(JobError {
                    code: "tracon.job.attempts-exhausted".into(),
                    message: "The job's lease expired on its last attempt.".into(),
                });
            }
            job.lease_owner = None;
            job.lease_token = None;
            job.lease_expires_at = None;
            job.updated_at = now;
            job.completed_at = Some(now);
            return None;
        }
        let token = uuid::Uuid::new_v4();
        job.status = JobStatus::Running;
        job.attempts += 1;
        job.lease_owner = Some(request.owner.clone());
        job.lease_token = Some(token);
        job.lease_expires_at = Some(now + request.lease_for);
        job.heartbeat_at = Some(now);
        job.updated_at = now;
        Some(Lease { job: job.clone(), token })
    }
}

#[async_trait::async_trait]
impl JobStore for MemoryJobStore {
    async fn enqueue(&self, job: &JobRecord) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        if rows.iter().any(|j| j.id == job.id) {
            return Err(StoreError::Conflict("A job with this id exists.".into()));
        }
        rows.push(job.clone());
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<JobRecord>, StoreError> {
        Ok(lock(&self.rows).iter().find(|j| j.tenant == *tenant && j.id == id).cloned())
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &JobFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        filter.check_text()?;
        let rows = lock(&self.rows);
        let mut jobs: Vec<JobRecord> = rows
            .iter()
            .filter(|j| {
                j.tenant == *tenant
                    && filter.status.is_none_or(|s| j.status == s)
                    && filter.handler_key.as_deref().is_none_or(|k| j.handler_key == k)
            })
            .cloned()
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse((j.created_at, j.id)));
        Ok(jobs.into_iter().skip(skip).take(take).collect())
    }

    async fn lease(&self, request: &LeaseRequest, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let mut rows = lock(&self.rows);
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| (rows[i].available_at, rows[i].id));
        let mut leases = Vec::new();
        for i in order {
            if leases.len() >= limit {
                break;
            }
            if let Some(lease) = Self::try_lease(&mut rows[i], request) {
                leases.push(lease);
            }
        }
        Ok(leases)
    }

    async fn due(
        &self,
        now: DateTime<Utc>,
        quiet_since: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<uuid::Uuid>, StoreError> {
        let rows = lock(&self.rows);
        let mut due: Vec<&JobRecord> = rows
            .iter()
            .filter(|j| match j.status {
                JobStatus::Queued => j.available_at <= now && (j.attempts > 0 || j.created_at <= quiet_since),
                JobStatus::Running => j.lease_expires_at.is_some_and(|at| at <= now),
                _ => false,
            })
            .collect();
        due.sort_by_key(|j| (j.available_at, j.id));
        Ok(due.into_iter().take(limit).map(|j| j.id).collect())
    }

    async fn lease_one(&self, id: uuid::Uuid, request: &LeaseRequest) -> Result<Option<Lease>, StoreError> {
        let mut rows = lock(&self.rows);
        Ok(rows.iter_mut().find(|j| j.id == id).and_then(|j| Self::try_lease(j, request)))
    }

    async fn heartbeat(
        &self,
        id: uuid::Uuid,
        token: uuid::Uuid,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        let mut rows = lock(&self.rows);
        let Some(job) = rows.iter_mut().find(|j| j.id == id && j.lease_token == Some(token)) else { return Ok(None) };
        if job.status != JobStatus::Running {
            return Ok(None);
        }
        job.lease_expires_at = Some(until);
        job.heartbeat_at = Some(now);
        job.updated_at = now;
        Ok(Some(job.cancel_requested))
    }

    async fn finish(
        &self,
        id: uuid::Uuid,
        token: uuid::Uuid,
        outcome: &Outcome,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut rows = lock(&self.rows);
        let Some(job) = rows.iter_mut().find(|j| j.id == id && j.lease_token == Some(token)) else { return Ok(false) };
        if job.status != JobStatus::Running {
            return Ok(false);
        }
        job.lease_owner = None;
        job.lease_token = None;
        job.lease_expires_at = None;
        job.updated_at = now;
        match outcome {
            Outcome::Succeeded(result) => {
                job.status = JobStatus::Succeeded;
                job.result.clone_from(result);
                job.error = None;
                job.completed_at = Some(now);
            }
            Outcome::Retry { error, retry_at } if job.attempts < job.max_attempts && !job.cancel_requested => {
                job.status = JobStatus::Queued;
                job.available_at = *retry_at;
                job.error = Some(error.clone());
            }
            Outcome::Retry { error, .. } | Outcome::Failed(error) => {
                job.status = if job.cancel_requested { JobStatus::Canceled } else { JobStatus::Failed };
                job.error = Some(error.clone());
                job.completed_at = Some(now);
            }
            Outcome::Canceled => {
                job.status = JobStatus::Canceled;
                job.completed_at = Some(now);
            }
            Outcome::Requeue if job.cancel_requested => {
                job.status = JobStatus::Canceled;
                job.completed_at = Some(now);
            }
            Outcome::Requeue => {
                job.status = JobStatus::Queued;
                job.available_at = now;
                job.attempts = job.attempts.saturating_sub(1);
                job.error = None;
            }
        }
        Ok(true)
    }

    async fn cancel(&self, tenant: &TenantId, id: uuid::Uuid, now: DateTime<Utc>) -> Result<JobRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let job = rows.iter_mut().find(|j| j.tenant == *tenant && j.id == id).ok_or(StoreError::NotFound)?;
        match job.status {
            JobStatus::Queued => {
                job.status = JobStatus::Canceled;
                job.cancel_requested = true;
                job.completed_at = Some(now);
            }
            JobStatus::Running => job.cancel_requested = true,
            _ => return Err(StoreError::Conflict("The job has already ended.".into())),
        }
        job.updated_at = now;
        Ok(job.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap() {
        let s = JobSettings::default();
        let secs: Vec<u64> = (1..=9).map(|a| s.backoff(a).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 320, 600, 600]);
        assert_eq!(s.backoff(u32::MAX).as_secs(), 600);
    }

    #[test]
    fn settings_are_read_and_checked() {
        let config = |pairs: &[(&str, &str)]| {
            crate::config::Config::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        };
        let s = JobSettings::from_config(&config(&[
            ("Tracon__Jobs__MaxAttempts", "2"),
            ("Tracon__Jobs__LeaseSeconds", "30"),
        ]))
        .unwrap();
        assert_eq!((s.max_attempts, s.lease_for), (2, Duration::from_secs(30)));
        for bad in [
            ("Tracon__Jobs__MaxAttempts", "0"),
            ("Tracon__Jobs__LeaseSeconds", "0.5"),
            ("Tracon__Jobs__RetryBaseSeconds", "9999"),
        ] {
            assert!(JobSettings::from_config(&config(&[bad])).is_err(), "{bad:?}");
        }
    }
}
