//! A2A push notifications, delivered as webhooks. A task's push configuration is a
//! [`super::WebhookSubscription`] of its tenant to the task's own event ([`task_event`]), so
//! it is signed, delivered, retried and disabled like any subscription. When a task's run
//! ends — wherever it executes: live, buffered or from the job queue — [`publish_task_end`]
//! posts A2A's `StreamResponse` (a `statusUpdate`) to each of its configurations.
//!
//! Only runs the A2A surface started carry [`TASK_LABEL`], so no other run pays the lookup.

use serde_json::{Value, json};

use super::WebhookStore;
use crate::names::{RunId, TenantId};
use crate::runs::outcome::RunOutcome;
use crate::runs::store::RunStatus;
use crate::runtime::Runtime;

/// The label a run started through A2A carries: the published agent's name.
pub const TASK_LABEL: &str = "a2a.agent";
/// The header a push carries the client's `token` in (the A2A SDKs' name).
pub const TOKEN_HEADER: &str = "X-A2A-Notification-Token";
/// The `X-Tracon-Event` of a push.
pub const PUSH_EVENT: &str = "a2a.task.status";

/// The event a task's push configurations subscribe to.
pub fn task_event(task: RunId) -> String {
    format!("a2a.task.{task}")
}

/// A2A's task state for a run's status. A cancel that is asked and not yet observed is
/// already `CANCELED` (it cannot be taken back); a run that stopped for a person is
/// `REJECTED`: an external caller cannot act as the missing human.
pub fn task_state(status: RunStatus, cancel_requested: bool) -> &'static str {
    match status {
        RunStatus::Queued | RunStatus::Running if cancel_requested => "TASK_STATE_CANCELED",
        RunStatus::Queued => "TASK_STATE_SUBMITTED",
        RunStatus::Running => "TASK_STATE_WORKING",
        RunStatus::Completed => "TASK_STATE_COMPLETED",
        RunStatus::Failed => "TASK_STATE_FAILED",
        RunStatus::Canceled => "TASK_STATE_CANCELED",
        RunStatus::AwaitingApproval | RunStatus::AwaitingInput => "TASK_STATE_REJECTED",
    }
}

/// The push body of an ended run: a `statusUpdate` whose status message is the answer (or
/// the failure's display-safe message).
pub fn status_update(outcome: &RunOutcome, context: &str, at: chrono::DateTime<chrono::Utc>) -> Value {
    let task = outcome.run_id.to_string();
    let said = match outcome.status {
        RunStatus::Completed => Some(outcome.text.clone()),
        _ => outcome.failure.as_ref().map(|f| f.message.clone()),
    };
    let mut status = json!({
        "state": task_state(outcome.status, false),
        "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    });
    if let Some(text) = said {
        status["message"] = json!({
            "messageId": format!("{task}-status"),
            "contextId": context,
            "taskId": task,
            "role": "ROLE_AGENT",
            "parts": [{ "text": text }],
        });
    }
    json!({ "statusUpdate": {
        "taskId": task,
        "contextId": context,
        "status": status,
        "metadata": { "tracon": { "runStatus": outcome.status.as_str() } },
    } })
}

/// Posts the ended task's status to each of its push configurations. One indexed query;
/// a failure is logged and never changes the run.
pub async fn publish_task_end(runtime: &Runtime, tenant: &TenantId, outcome: &RunOutcome) {
    let store: &dyn WebhookStore = runtime.stores.webhooks.as_ref();
    let subscriptions = match store.subscribed(tenant, &task_event(outcome.run_id)).await {
        Ok(s) => s,
        Err(e) => {
            return tracing::warn!(run_id = %outcome.run_id, error = ?e, "could not read a task's push configurations");
        }
    };
    if subscriptions.is_empty() {
        return;
    }
    let context = outcome.session_id.as_ref().map(|s| s.as_str().to_owned()).unwrap_or_default();
    let body = status_update(outcome, &context, runtime.platform.clock.now()).to_string();
    let publisher = super::sources::publisher(runtime);
    for subscription in &subscriptions {
        if let Err(e) = publisher.deliver_body(tenant, subscription, PUSH_EVENT, &body).await {
            tracing::warn!(subscription = %subscription.id, error = ?e, "could not queue a push notification");
        }
    }
}
