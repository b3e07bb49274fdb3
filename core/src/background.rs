//! The seams every host's background work goes through: the one list of job handlers a
//! consumer serves, and the periodic **tick** (the local server's interval, the Lambda
//! adapter's EventBridge schedule, the Worker's cron trigger).

use std::sync::Arc;

use serde::Serialize;

use crate::jobs::{JobHandler, JobTransport};
use crate::runtime::Runtime;

/// Every job handler of this runtime: what each host's consumer serves, so a job enqueued
/// on one host runs on any other.
pub fn job_handlers(runtime: &Arc<Runtime>) -> Vec<Arc<dyn JobHandler>> {
    let mut handlers: Vec<Arc<dyn JobHandler>> = vec![
        Arc::new(crate::runs::queued::QueuedRuns { runtime: runtime.clone() }),
        Arc::new(crate::webhooks::WebhookDeliveries::new(runtime.clone())),
        Arc::new(crate::workflows::queued::QueuedWorkflows { runtime: runtime.clone() }),
    ];
    handlers.extend(runtime.custom_job_handlers.iter().cloned());
    handlers
}

/// Why [`enqueue`] queued nothing.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// No handler of this runtime serves the key ([`crate::jobs::UNKNOWN_HANDLER`]): a job
    /// nobody would run is never queued.
    #[error("no job handler serves this key")]
    UnknownHandlerKey,
    #[error(transparent)]
    Store(#[from] crate::error::StoreError),
}

/// Queues a job for a handler key this runtime serves (built-in, or added with
/// `RuntimeBuilder::add_job_handler`) and wakes a consumer through `transport`; refuses a
/// key nobody serves. The job runs at least once; its row is the truth, so a lost wake-up
/// only delays it until the next poll or tick.
pub async fn enqueue(
    runtime: &Runtime,
    transport: &dyn JobTransport,
    tenant: &crate::names::TenantId,
    handler_key: &str,
    payload: serde_json::Value,
    max_attempts: u32,
) -> Result<uuid::Uuid, EnqueueError> {
    let served = crate::jobs::BUILT_IN_JOB_KEYS.contains(&handler_key)
        || runtime.custom_job_handlers.iter().any(|h| h.key() == handler_key);
    if !served {
        // The key may come from an untrusted source: logged, never echoed.
        tracing::warn!(handler_key, code = crate::jobs::UNKNOWN_HANDLER, "refused a job nobody serves");
        return Err(EnqueueError::UnknownHandlerKey);
    }
    let clock = runtime.platform.clock.as_ref();
    let job = crate::jobs::JobRecord::queued(
        crate::ports::new_id(clock),
        tenant.clone(),
        handler_key,
        payload,
        max_attempts,
        clock.now(),
    );
    runtime.stores.jobs.enqueue(&job).await?;
    if let Err(e) = transport.wake(job.id).await {
        tracing::warn!(job = %job.id, error = %e, "could not wake a consumer; the next poll or tick will");
    }
    Ok(job.id)
}

/// Every observer of settled jobs: what each host's `JobRunner` is given
/// (`JobRunner::with_observer`), so `job.completed` / `job.failed` webhooks fire wherever a
/// job ran.
pub fn job_observers(runtime: &Arc<Runtime>) -> Vec<Arc<dyn crate::jobs::JobObserver>> {
    vec![Arc::new(crate::webhooks::JobEvents(crate::webhooks::sources::publisher(runtime)))]
}

/// A `JobRunner` serving [`job_handlers`] and told [`job_observers`]: what a host's consumer
/// runs.
pub fn job_runner(
    runtime: &Arc<Runtime>,
    settings: crate::jobs::JobSettings,
    owner: impl Into<String>,
) -> crate::jobs::JobRunner {
    let mut runner = crate::jobs::JobRunner::new(
        runtime.stores.jobs.clone(),
        job_handlers(runtime),
        runtime.platform.clock.clone(),
        settings,
        owner,
    );
    for observer in job_observers(runtime) {
        runner = runner.with_observer(observer);
    }
    runner
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickReport {
    /// Runs enqueued by due schedules.
    pub schedules_enqueued: usize,
    /// Due jobs (a retry whose backoff passed, an expired lease) given a fresh wake-up.
    pub jobs_woken: usize,
    /// Runs whose heartbeat expired, closed `Failed` with error class `Orphaned`.
    pub runs_reconciled: usize,
    /// Expired answers removed from the response cache.
    pub cached_answers_removed: u64,
}

/// One tick: enqueue due schedules, wake due jobs through `transport`, reconcile orphaned
/// runs, remove expired cached answers. Each part's failure is logged and the others still
/// run.
pub async fn tick(runtime: &Arc<Runtime>, transport: &dyn JobTransport) -> TickReport {
    let mut report = TickReport::default();
    match crate::schedules::due::enqueue_due(runtime, transport, TICK_BATCH).await {
        Ok(n) => report.schedules_enqueued = n,
        Err(e) => tracing::warn!(error = ?e, "the tick could not read the due schedules"),
    }
    let now = runtime.platform.clock.now();
    let quiet_since = now - chrono::Duration::seconds(WAKE_GRACE_SECONDS);
    match runtime.stores.jobs.due(now, quiet_since, TICK_BATCH).await {
        Ok(ids) => {
            for id in ids {
                match transport.wake(id).await {
                    Ok(()) => report.jobs_woken += 1,
                    Err(e) => tracing::warn!(job = %id, error = %e, "the tick could not wake a due job"),
                }
            }
        }
        Err(e) => tracing::warn!(error = ?e, "the tick could not read the due jobs"),
    }
    match crate::runs::reconcile::reconcile_orphans(runtime, TICK_BATCH).await {
        Ok(n) => report.runs_reconciled = n,
        Err(e) => tracing::warn!(error = ?e, "the tick could not reconcile orphaned runs"),
    }
    match runtime.stores.response_cache.purge_expired(now, CACHE_PURGE_BATCH).await {
        Ok(n) => report.cached_answers_removed = n,
        Err(e) => tracing::warn!(error = ?e, "the tick could not remove expired cached answers"),
    }
    if report != TickReport::default() {
        tracing::info!(
            schedules_enqueued = report.schedules_enqueued,
            jobs_woken = report.jobs_woken,
            runs_reconciled = report.runs_reconciled,
            cached_answers_removed = report.cached_answers_removed,
            "tick"
        );
    }
    report
}

/// Most of each kind one tick handles; the next tick takes the rest.
const TICK_BATCH: usize = 100;
/// Most expired cached answers one tick removes.
const CACHE_PURGE_BATCH: usize = 1_000;

/// A queued job younger than this still has its own wake-up on the way.
const WAKE_GRACE_SECONDS: i64 = 30;
