//! The tick's part of schedules: [`enqueue_due`] queues a run (of an agent or a workflow) for
//! every due occurrence.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::attribution::Attribution;
use crate::error::StoreError;
use crate::identity::Caller;
use crate::jobs::JobTransport;
use crate::names::RunId;
use crate::runs::launch::{Delivery, Start, launch};
use crate::runs::request::{RunRequest, StartError};
use crate::runtime::Runtime;
use crate::schedules::{ScheduleRecord, ScheduleTarget};
use crate::workflows::queued::enqueue;

/// Attempts of a scheduled run's job.
const SCHEDULED_RUN_ATTEMPTS: u32 = 5;

/// Enqueues a queued run for every due schedule (at most `limit`) and wakes its job; returns
/// how many runs were queued. An occurrence another tick took is skipped; one whose run
/// cannot be queued (its agent is gone) records why on the schedule and is not retried.
pub async fn enqueue_due(
    runtime: &Arc<Runtime>,
    transport: &dyn JobTransport,
    limit: usize,
) -> Result<usize, StoreError> {
    let store = &runtime.stores.schedules;
    let now = runtime.platform.clock.now();
    let mut queued = 0;
    for schedule in store.due(now, limit).await? {
        let Some(expected) = schedule.next_run_at else { continue };
        let next = schedule.timing.next_after(now);
        if !store.advance(&schedule.tenant, schedule.id, expected, next, now).await? {
            continue;
        }
        let attribution =
            Attribution { user_id: None, labels: BTreeMap::from([("schedule".to_owned(), schedule.name.clone())]) };
        let (run, error) = match queue(runtime, transport, &schedule, attribution).await {
            Ok(run) => {
                queued += 1;
                (Some(run), None)
            }
            Err(reason) => (None, Some(reason)),
        };
        if let Err(e) = store.record_outcome(&schedule.tenant, schedule.id, run, error).await {
            tracing::warn!(schedule = %schedule.id, error = ?e, "could not record a schedule's last run");
        }
    }
    Ok(queued)
}

/// Queues one occurrence's run; the error is the display-safe reason recorded on the schedule.
async fn queue(
    runtime: &Arc<Runtime>,
    transport: &dyn JobTransport,
    schedule: &ScheduleRecord,
    attribution: Attribution,
) -> Result<RunId, &'static str> {
    let tenant = &schedule.tenant;
    let message = schedule.message.clone();
    let agent = match &schedule.target {
        ScheduleTarget::Agent(agent) => agent.clone(),
        ScheduleTarget::Workflow(name) => {
            let stored = match runtime.stores.workflows.get(tenant, name).await {
                Ok(Some(stored)) => stored,
                Ok(None) => return Err("The workflow does not exist."),
                Err(e) => {
                    tracing::warn!(schedule = %schedule.id, tenant = %tenant, error = ?e, "a due schedule queued no run");
                    return Err("The store could not queue the run.");
                }
            };
            let caller = Caller { tenant: tenant.clone(), ..Caller::internal() };
            let max_attempts = SCHEDULED_RUN_ATTEMPTS;
            return enqueue(runtime, transport, tenant, caller, attribution, &stored, message, max_attempts)
                .await
                .map(|accepted| accepted.run_id)
                .map_err(|e| {
                    tracing::warn!(schedule = %schedule.id, tenant = %tenant, error = ?e, "a due schedule queued no run");
                    "The store could not queue the run."
                });
        }
    };
    let request = RunRequest {
        parameters: schedule.parameters.clone(),
        ..RunRequest::new(tenant.clone(), agent, message, Caller::internal(), attribution)
    };
    let delivery = Delivery::Queued { transport, max_attempts: SCHEDULED_RUN_ATTEMPTS };
    launch(runtime, Start::new(request, delivery)).await.map(|launched| launched.run_id()).map_err(|e| {
        tracing::warn!(schedule = %schedule.id, tenant = %tenant, error = ?e, "a due schedule queued no run");
        match &e {
            StartError::Agent(crate::catalog::CatalogError::NotFound) => "The agent does not exist.",
            StartError::Agent(_) => "The agent does not compile with the schedule's parameters.",
            StartError::Store(_) => "The store could not queue the run.",
            StartError::ContextWindow(_) => "The run's prompt is over its model's context window (Tracon:Preflight).",
            StartError::Session(_) => "The session is another agent's conversation.",
            StartError::Input(_) => "The schedule's message is over Tracon:Limits:MaxMessageChars.",
            StartError::Documents(_) | StartError::Resume(_) | StartError::ToolResults(_) | StartError::Caller(_) => {
                "The run could not be queued."
            }
        }
    })
}
