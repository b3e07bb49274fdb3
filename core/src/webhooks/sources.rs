//! Where run events enter the webhooks: [`publish_run_end`] from the one place every run ends,
//! [`publish_run_failed`] for runs that end elsewhere, and [`publisher`] — a
//! [`Publisher`] over a runtime's stores and settings.

use serde_json::{Value, json};

use super::{APPROVAL_PENDING, Publisher, RUN_COMPLETED, RUN_FAILED};
use crate::names::TenantId;
use crate::runtime::Runtime;

/// A publisher over `runtime`'s stores, clock and webhook settings.
pub fn publisher(runtime: &Runtime) -> Publisher {
    Publisher {
        webhooks: runtime.stores.webhooks.clone(),
        jobs: runtime.stores.jobs.clone(),
        clock: runtime.platform.clock.clone(),
        max_attempts: runtime.webhooks.max_attempts,
        quiet: runtime.webhooks.quiet.clone(),
    }
}

/// What a run's end publishes: `run.completed`, `run.failed`, or `approval.pending` (the run
/// stopped for a decision); nothing for a cancellation. Called from the one place every run
/// ends ([`crate::runs::execute::execute`]), live, queued and resumed alike.
pub async fn publish_run_end(
    runtime: &Runtime,
    tenant: &TenantId,
    agent: &str,
    outcome: &crate::runs::outcome::RunOutcome,
) {
    use crate::runs::store::RunStatus;
    let (event, data) = match outcome.status {
        RunStatus::Completed => (
            RUN_COMPLETED,
            json!({
                "runId": outcome.run_id,
                "agentName": agent,
                "status": "Completed",
                "usage": outcome.usage,
                "cost": outcome.cost,
            }),
        ),
        RunStatus::Failed => (
            RUN_FAILED,
            json!({
                "runId": outcome.run_id,
                "agentName": agent,
                "status": "Failed",
                // A run failure's message is display-safe by construction (crate::failure).
                "error": outcome.failure,
            }),
        ),
        RunStatus::AwaitingApproval => {
            let requests: Vec<Value> = outcome
                .approvals
                .iter()
                .map(|r| json!({ "requestId": r.request_id, "callId": r.call_id, "toolName": r.tool_name }))
                .collect();
            (APPROVAL_PENDING, json!({ "runId": outcome.run_id, "agentName": agent, "requests": requests }))
        }
        _ => return,
    };
    publisher(runtime).publish_logged(tenant, event, data).await;
}

/// `run.failed` for a run that ended without [`crate::runs::execute::execute`] (a queued run that
/// could not start; reconciliation closing an orphaned run).
pub async fn publish_run_failed(
    runtime: &Runtime,
    tenant: &TenantId,
    run_id: crate::names::RunId,
    agent: Option<&str>,
    failure: &crate::failure::RunFailure,
) {
    let data = json!({ "runId": run_id, "agentName": agent, "status": "Failed", "error": failure });
    publisher(runtime).publish_logged(tenant, RUN_FAILED, data).await;
}
