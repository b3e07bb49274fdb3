//! Background work on Lambda: the SQS consumer (`tracon-jobs`) and the scheduled tick
//! (`tracon-tick`).
//!
//! The consumer is fed by the queue's event source mapping with
//! `FunctionResponseTypes: [ReportBatchItemFailures]`. Each record's body is a job id
//! ([`crate::queue`]); the job is leased by id and run to its end within the invocation (the
//! environment freezes once the function answers). The records of a batch run concurrently.
//! The answer names the records to deliver again (`batchItemFailures`): those whose job could
//! not be reached because the store was unavailable, and bodies that are not a job id (after
//! the queue's `maxReceiveCount` they land in the dead-letter queue). A job that is not
//! leasable — finished, running elsewhere, waiting out a retry's backoff — is a success: its
//! row says what happens next, and the tick wakes it when it is due.
//!
//! The tick runs on an EventBridge schedule: due schedules are enqueued, due jobs woken
//! through the queue, orphaned runs reconciled (`tracon_core::background::tick`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::{LambdaEvent, service_fn};
use tracon_core::background::{self, TickReport};
use tracon_core::config::Config;
use tracon_core::jobs::{JobRunner, JobSettings};
use tracon_core::runtime::Runtime;
use uuid::Uuid;

use crate::queue::{QueueSettings, SqsTransport};

/// Connections per consumer environment: the records of a batch run at once (the template's
/// `BatchSize` is 4), each holding at most one connection at a time.
pub const JOBS_POOL_SIZE: u32 = 4;

/// How one record went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The job was leased and run (whatever its outcome: the row records it).
    Ran,
    /// Nothing to do now (finished, leased elsewhere, not yet due): acknowledged.
    NotLeasable,
    /// The body is not a job id: delivered again, then dead-lettered.
    NotAJob,
    /// The store could not be reached: delivered again after the visibility timeout.
    StoreUnavailable,
}

impl Delivery {
    /// Whether the record is reported in `batchItemFailures`.
    pub fn failed(self) -> bool {
        matches!(self, Self::NotAJob | Self::StoreUnavailable)
    }
}

/// The job id a record carries.
pub fn job_id(record: &SqsMessage) -> Option<Uuid> {
    record.body.as_deref().and_then(|b| Uuid::parse_str(b.trim()).ok())
}

/// Runs one record's job.
pub async fn deliver(runner: &JobRunner, record: &SqsMessage) -> Delivery {
    let Some(id) = job_id(record) else {
        tracing::error!(message_id = ?record.message_id, "an SQS record whose body is not a job id");
        return Delivery::NotAJob;
    };
    match runner.deliver(id).await {
        Ok(true) => Delivery::Ran,
        Ok(false) => {
            tracing::info!(job = %id, "the job is not leasable now; acknowledging its message");
            Delivery::NotLeasable
        }
        Err(e) => {
            tracing::warn!(job = %id, error = ?e, "could not lease the job; its message is delivered again");
            Delivery::StoreUnavailable
        }
    }
}

/// A batch: every record at once; the failed ones named for redelivery.
pub async fn consume(runner: &JobRunner, event: SqsEvent) -> SqsBatchResponse {
    let outcomes = futures::future::join_all(event.records.iter().map(|r| deliver(runner, r))).await;
    let mut response = SqsBatchResponse::default();
    for (record, outcome) in event.records.iter().zip(outcomes) {
        if !outcome.failed() {
            continue;
        }
        // An empty identifier would fail the whole batch; a record without an id cannot be named.
        match record.message_id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => response.add_failure(id),
            None => tracing::error!("a failed SQS record has no message id; it cannot be reported"),
        }
    }
    response
}

/// The consumer's runner: every job handler of the runtime, leases named after this
/// execution environment, and the job queue (when configured) to send a handed-over job's
/// next attempt through at once.
pub fn runner(runtime: &Arc<Runtime>, config: &Config, settings: JobSettings) -> Result<JobRunner, String> {
    let owner = format!(
        "lambda:{}:{}",
        config.get("AWS_LAMBDA_FUNCTION_NAME").unwrap_or("tracon-jobs"),
        config.get("AWS_LAMBDA_LOG_STREAM_NAME").unwrap_or("local"),
    );
    // Every job handler, and the observers that publish job.completed / job.failed webhooks.
    let runner = background::job_runner(runtime, settings, owner);
    Ok(match SqsTransport::from_config(config)? {
        Some(transport) => runner.with_transport(Arc::new(transport)),
        None => {
            tracing::warn!(
                "{} is not set: a queued run handed over at its soft deadline waits for the tick's wake-up",
                tracon_core::config::env_name(QueueSettings::QUEUE_URL)
            );
            runner
        }
    })
}

fn runtime_from_env(config: &Config, pool_size: u32) -> Result<Arc<Runtime>, String> {
    let stores = crate::stores_from_env(config, pool_size)?;
    Ok(Arc::new(crate::runtime_with_stores(config, stores)?))
}

async fn cannot_start(message: String) -> lambda_runtime::Error {
    tracing::error!(error = %message, "cannot start");
    crate::report_init_error(&message).await;
    message.into()
}

/// The `tracon-jobs` function: the SQS consumer.
pub async fn serve_jobs() -> Result<(), lambda_runtime::Error> {
    let config = Config::from_pairs(std::env::vars());
    crate::init_logging(&config);
    let built = JobSettings::from_config(&config).map_err(|e| e.to_string()).and_then(|settings| {
        let timeout = settings.timeout;
        Ok((runner(&runtime_from_env(&config, JOBS_POOL_SIZE)?, &config, settings)?, timeout))
    });
    let (runner, timeout) = match built {
        Ok(b) => b,
        Err(e) => return Err(cannot_start(e).await),
    };
    let runner = Arc::new(runner);
    let warned = Arc::new(AtomicBool::new(false));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let (runner, warned) = (runner.clone(), warned.clone());
        async move {
            warn_if_cut_short(event.context.deadline, timeout, &warned);
            Ok::<_, lambda_runtime::Error>(consume(&runner, event.payload).await)
        }
    }))
    .await
}

/// An attempt must end (by itself or at `Tracon:Jobs:TimeoutSeconds`) before Lambda stops the
/// function, or it is cut off without a result and retried only when its lease expires.
fn warn_if_cut_short(deadline_ms: u64, timeout: Duration, warned: &AtomicBool) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let left = Duration::from_millis(deadline_ms).saturating_sub(now);
    if left < timeout && !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            left_ms = left.as_millis() as u64,
            job_timeout_ms = timeout.as_millis() as u64,
            "the function's timeout is shorter than Tracon__Jobs__TimeoutSeconds: a long job is cut off by Lambda; raise the function's timeout or lower the job timeout"
        );
    }
}

/// The `tracon-tick` function: one tick per scheduled event (the event's content is not read).
pub async fn serve_tick() -> Result<(), lambda_runtime::Error> {
    let config = Config::from_pairs(std::env::vars());
    crate::init_logging(&config);
    let built = SqsTransport::from_config(&config)
        .and_then(|t| {
            t.ok_or_else(|| {
                format!(
                    "{} is not set: the tick wakes due jobs through the job queue; set it to the queue's URL",
                    tracon_core::config::env_name(QueueSettings::QUEUE_URL)
                )
            })
        })
        .and_then(|t| Ok((runtime_from_env(&config, crate::DEFAULT_POOL_SIZE)?, Arc::new(t))));
    let (runtime, transport) = match built {
        Ok(b) => b,
        Err(e) => return Err(cannot_start(e).await),
    };
    lambda_runtime::run(service_fn(move |_: LambdaEvent<serde_json::Value>| {
        let (runtime, transport) = (runtime.clone(), transport.clone());
        async move {
            let report: TickReport = background::tick(&runtime, transport.as_ref()).await;
            tracing::info!(report = ?report, "tick");
            Ok::<_, lambda_runtime::Error>(report)
        }
    }))
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_record_carries_a_bare_job_id() {
        let id = Uuid::new_v4();
        let record = |body: &str| {
            serde_json::from_value::<SqsMessage>(serde_json::json!({"messageId": "m", "body": body})).unwrap()
        };
        assert_eq!(job_id(&record(&id.to_string())), Some(id));
        assert_eq!(job_id(&record(&format!(" {id}\n"))), Some(id));
        assert_eq!(job_id(&record("not-a-job")), None);
        assert_eq!(job_id(&record(&format!("{{\"jobId\":\"{id}\"}}"))), None);
    }

    #[test]
    fn only_unreachable_stores_and_bad_bodies_are_failures() {
        assert!(!Delivery::Ran.failed());
        assert!(!Delivery::NotLeasable.failed());
        assert!(Delivery::NotAJob.failed());
        assert!(Delivery::StoreUnavailable.failed());
    }
}
