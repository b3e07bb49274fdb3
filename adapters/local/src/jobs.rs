//! The local server's job consumer: in process, woken when a job is enqueued, and polling
//! so that nothing waits on a lost wake-up (a job retried with backoff, one enqueued by
//! another process on the same database).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tracon_core::config::Config;
use tracon_core::jobs::{JobRunner, JobSettings, JobTransport};
use tracon_core::runtime::RunQueue;
use tracon_handlers::AppState;

/// Wakes the in-process consumer.
pub struct LocalTransport(Arc<Notify>);

#[async_trait::async_trait]
impl JobTransport for LocalTransport {
    async fn wake(&self, _job: uuid::Uuid) -> Result<(), String> {
        self.0.notify_one();
        Ok(())
    }
}

/// `Tracon:Jobs:*` for this consumer.
pub struct ConsumerSettings {
    pub jobs: JobSettings,
    /// Jobs run at once (`Concurrency`, 8).
    pub concurrency: usize,
    /// How often the queue is read without a wake-up (`PollSeconds`, 1).
    pub poll: Duration,
    /// How often the tick runs: due schedules, due jobs, orphaned runs
    /// (`Tracon:Scheduling:TickSeconds`, 10).
    pub tick: Duration,
}

impl ConsumerSettings {
    pub fn from_config(config: &Config) -> Result<Self, String> {
        let jobs = JobSettings::from_config(config).map_err(|e| e.to_string())?;
        let concurrency = config.parse::<usize>("Tracon:Jobs:Concurrency").map_err(|e| e.to_string())?.unwrap_or(8);
        let poll =
            config.seconds("Tracon:Jobs:PollSeconds").map_err(|e| e.to_string())?.unwrap_or(Duration::from_secs(1));
        let tick = config
            .seconds("Tracon:Scheduling:TickSeconds")
            .map_err(|e| e.to_string())?
            .unwrap_or(Duration::from_secs(10));
        if concurrency == 0 || poll.is_zero() || tick.is_zero() {
            return Err(
                "Tracon__Jobs__Concurrency, Tracon__Jobs__PollSeconds and Tracon__Scheduling__TickSeconds must be positive."
                    .into(),
            );
        }
        Ok(Self { jobs, concurrency, poll, tick })
    }
}

/// Starts the consumer and turns queued runs on for `state`.
pub fn start(state: AppState, settings: ConsumerSettings) -> AppState {
    let notify = Arc::new(Notify::new());
    let runtime = state.runtime.clone();
    let handlers = tracon_core::background::job_handlers(&runtime);
    let owner = format!("local-{}", std::process::id());
    let max_attempts = settings.jobs.max_attempts;
    let mut runner =
        JobRunner::new(runtime.stores.jobs.clone(), handlers, runtime.platform.clock.clone(), settings.jobs, owner);
    // job.completed / job.failed webhooks.
    for observer in tracon_core::background::job_observers(&runtime) {
        runner = runner.with_observer(observer);
    }
    let runner = Arc::new(runner);
    let slots = Arc::new(Semaphore::new(settings.concurrency));
    {
        let (runtime, transport, drain, every) =
            (runtime.clone(), LocalTransport(notify.clone()), state.runtime.drain.clone(), settings.tick);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if !drain.is_draining() {
                    tracon_core::background::tick(&runtime, &transport).await;
                }
            }
        });
    }
    let drain = state.runtime.drain.clone();
    let wake = notify.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(settings.poll) => {}
            }
            if drain.is_draining() {
                continue;
            }
            loop {
                let free = slots.available_permits();
                if free == 0 {
                    break;
                }
                let leases = match runner.take(free).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = ?e, "could not read the job queue");
                        break;
                    }
                };
                let taken = leases.len();
                for lease in leases {
                    let Ok(slot) = slots.clone().acquire_owned().await else { return };
                    let (runner, wake) = (runner.clone(), wake.clone());
                    tokio::spawn(async move {
                        runner.run(lease).await;
                        drop(slot);
                        // A slot is free: look for more.
                        wake.notify_one();
                    });
                }
                if taken < free {
                    break;
                }
            }
        }
    });
    runtime.set_queue(RunQueue { transport: Arc::new(LocalTransport(notify)), max_attempts });
    state
}
