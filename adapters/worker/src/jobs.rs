//! Background work on Workers: a Cloudflare Queue wakes the consumer, a cron trigger ticks.
//!
//! The producer binding `TRACON_JOBS` carries one message per wake-up whose body is the job's
//! id (text) and nothing else: the job's row in Postgres is the truth. The `queue` handler
//! leases each message's job by id and runs it to its end inside the batch's own invocation
//! (awaited, under the batch's `ctx.wait_until` for what the run spawns), so no request ever
//! runs another request's work. A message is acknowledged when its job ran or is not leasable
//! (finished, leased elsewhere, waiting out a retry's backoff: the tick wakes it when due);
//! it is retried when the store could not be reached, and when its body is not a job id
//! (after `max_retries` it goes to the dead-letter queue). The `scheduled` handler (a cron in
//! wrangler.toml) runs the tick: due schedules enqueued, due jobs woken, orphaned runs
//! reconciled.

use std::rc::Rc;
use std::sync::Arc;

use send_wrapper::SendWrapper;
use tracon_core::background::{self, TickReport};
use tracon_core::config::Config;
use tracon_core::jobs::{JobRunner, JobSettings, JobTransport};
use tracon_core::runtime::Runtime;
use uuid::Uuid;
use worker::{MessageBuilder, MessageExt, QueueContentType, QueueRetryOptionsBuilder, RawMessage};

use crate::platform::{WaitUntil, WithContext};

/// The producer binding in wrangler.toml.
pub const BINDING: &str = "TRACON_JOBS";

/// How long a message whose job could not be reached waits before its next delivery.
const RETRY_DELAY_SECONDS: u32 = 10;

/// Wakes the consumer with a queue message carrying the job's id.
pub struct QueueTransport(SendWrapper<worker::Queue>);

#[async_trait::async_trait]
impl JobTransport for QueueTransport {
    async fn wake(&self, job: Uuid) -> Result<(), String> {
        let message = MessageBuilder::new(job.to_string()).content_type(QueueContentType::Text).build();
        SendWrapper::new(self.0.send(message)).await.map_err(|e| format!("the job queue refused the message: {e}"))
    }
}

/// What the queue and cron handlers need from the isolate's app.
pub struct Background {
    pub runtime: Arc<Runtime>,
    pub runner: JobRunner,
    /// `None` without the `TRACON_JOBS` binding: nothing is queued and the tick cannot wake jobs.
    pub transport: Option<Arc<QueueTransport>>,
    pub settings: JobSettings,
}

impl Background {
    pub fn new(runtime: Arc<Runtime>, config: &Config, env: &worker::Env) -> Result<Self, String> {
        let settings = JobSettings::from_config(config).map_err(|e| e.to_string())?;
        let transport = match env.queue(BINDING) {
            Ok(q) => Some(Arc::new(QueueTransport(SendWrapper::new(q)))),
            Err(e) => {
                tracing::info!(error = %e, "no job queue bound as {BINDING}: runs are not queued and the tick wakes nothing");
                None
            }
        };
        let owner = format!("worker:{}", Uuid::new_v4());
        // Every job handler, and the observers that publish job.completed / job.failed webhooks.
        let runner = background::job_runner(&runtime, settings.clone(), owner);
        // A run handed over at its soft deadline goes back to the queue as a fresh message.
        let runner = match &transport {
            Some(t) => runner.with_transport(t.clone()),
            None => runner,
        };
        Ok(Self { runtime, runner, transport, settings })
    }

    pub fn transport(&self) -> Option<Arc<dyn JobTransport>> {
        self.transport.clone().map(|t| t as Arc<dyn JobTransport>)
    }

    /// One queue batch: every message's job at once, each message acknowledged or retried.
    pub async fn consume(&self, messages: Vec<RawMessage>, ctx: Rc<dyn WaitUntil>) {
        let work = futures::future::join_all(messages.iter().map(|m| self.deliver(m)));
        WithContext::new(ctx, work).await;
    }

    async fn deliver(&self, message: &RawMessage) {
        let Some(id) = message.body().as_string().and_then(|b| Uuid::parse_str(b.trim()).ok()) else {
            tracing::error!(message_id = %message.id(), "a job queue message whose body is not a job id");
            message.retry();
            return;
        };
        match self.runner.deliver(id).await {
            Ok(ran) => {
                if !ran {
                    tracing::info!(job = %id, "the job is not leasable now; acknowledging its message");
                }
                message.ack();
            }
            Err(e) => {
                tracing::warn!(job = %id, error = ?e, "could not lease the job; its message is retried");
                message.retry_with_options(
                    &QueueRetryOptionsBuilder::new().with_delay_seconds(RETRY_DELAY_SECONDS).build(),
                );
            }
        }
    }

    /// One tick, from the cron trigger.
    pub async fn tick(&self, ctx: Rc<dyn WaitUntil>) -> Option<TickReport> {
        let Some(transport) = &self.transport else {
            tracing::error!(
                "the {BINDING} queue binding is missing: the tick cannot wake due jobs; bind the job queue as a producer in wrangler.toml"
            );
            return None;
        };
        Some(WithContext::new(ctx, background::tick(&self.runtime, transport.as_ref())).await)
    }
}
