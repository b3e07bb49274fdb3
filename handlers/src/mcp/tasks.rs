//! MCP tasks (revision 2025-11-25) when `Tracon:McpServer:EnableTasks` is on: a task is a run.
//!
//! A task-augmented `tools/call` is admitted like any call, then queued on the host's run queue
//! (or, on a host without one whose background work outlives the response, started in the
//! background) and answered at once with the task; its id is the run's id, so the task is
//! also an ordinary run in `/api/runs` and the cost reports. Nothing is held in memory: every
//! `tasks/*` request reads the run row, on whichever instance it lands.
//!
//! A task belongs to the API key that created it (the run's `mcp.task` label names the key):
//! another key, or another tenant, finds no such task. Statuses: `Queued`/`Running` →
//! `working`; `Completed` and `AwaitingApproval` → `completed` (the latter's result is the
//! rejection an external caller gets, as on the synchronous path); `Failed` → `failed`; a
//! cancel asked or `Canceled` → `cancelled` (sticky). After `TaskTimeToLiveSeconds` from its
//! creation a task is gone.

use std::time::Duration;

use serde_json::{Value, json};
use tracon_core::names::RunId;
use tracon_core::runs::launch::{Delivery, Start, launch, new_run_id};
use tracon_core::runs::store::{CancelOutcome, RunFilter, RunRecord, RunStatus};

use super::Call;
use super::protocol::RpcError;
use super::run::{self, Checked, tool_error};
use crate::error::start_error;
use crate::state::AppState;

/// The label naming the API key that created a task.
pub const TASK_LABEL: &str = "mcp.task";
/// Tasks per `tasks/list` page.
const PAGE: usize = 50;
/// Longest pause between two reads while `tasks/result` waits.
const RESULT_POLL_MAX: Duration = Duration::from_secs(1);

/// Whether tasks are served here: switched on, and the host can run a call after answering
/// (a run queue, or background work that outlives the response).
pub(super) fn offered(state: &AppState) -> bool {
    state.http.mcp_server.enable_tasks && (state.runtime.queue().is_some() || state.http.background_outlives_response)
}

fn key_of<'a>(call: &'a Call<'a>) -> &'a str {
    call.ctx.caller.key_id.as_deref().unwrap_or_default()
}

/// Starts the task of a checked call and answers the `CreateTaskResult`.
pub(super) async fn create(call: &Call<'_>, checked: Checked, _task: &Value) -> Result<Value, RpcError> {
    let state = &call.ctx.state;
    let runtime = &state.runtime;
    let request = match run::admitted(call, &checked, Some((TASK_LABEL, key_of(call)))).await {
        Ok(r) => r,
        Err(e) => return Ok(tool_error(&e.detail, None)),
    };
    let delivery = match runtime.queue() {
        Some(queue) => Delivery::from(queue),
        None => Delivery::Background,
    };
    let start =
        Start { budget: Some(run::budget(call)), run_id: Some(new_run_id(runtime)), ..Start::new(request, delivery) };
    let run_id = match launch(runtime, start).await {
        Ok(launched) => launched.run_id(),
        Err(e) => return Ok(tool_error(&start_error(checked.agent.as_str(), e).detail, None)),
    };
    let run = runtime
        .stores
        .runs
        .get_run(&call.ctx.tenant, run_id)
        .await
        .map_err(|_| RpcError::internal("The task could not be read back."))?
        .ok_or_else(|| RpcError::internal("The task could not be read back."))?;
    Ok(json!({ "task": task(call, &run, &run) }))
}

pub(super) async fn dispatch(call: &Call<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
    match method {
        "tasks/list" => list(call, params).await,
        _ => {
            let id = params
                .get("taskId")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("Invalid params: 'taskId' is required."))?;
            let (first, latest) = find(call, id).await?;
            match method {
                "tasks/get" => Ok(task(call, &first, &latest)),
                "tasks/cancel" => cancel(call, first, latest).await,
                _ => result(call, first, latest).await,
            }
        }
    }
}

/// The task's run (the first of its chain, the task's own row) and its latest continuation.
async fn find(call: &Call<'_>, id: &str) -> Result<(RunRecord, RunRecord), RpcError> {
    let not_found = || RpcError::invalid_params("Failed to retrieve task: Task not found");
    let run_id = uuid::Uuid::parse_str(id).map(RunId).map_err(|_| not_found())?;
    let runs = &call.ctx.state.runtime.stores.runs;
    let tenant = &call.ctx.tenant;
    let internal = |_| RpcError::internal("The task could not be read.");
    let first = runs.get_run(tenant, run_id).await.map_err(internal)?.ok_or_else(not_found)?;
    if first.labels.get(TASK_LABEL).map(String::as_str) != Some(key_of(call)) {
        return Err(not_found());
    }
    if expired(call, &first) {
        return Err(RpcError::invalid_params("Failed to retrieve task: Task has expired"));
    }
    let mut latest = first.clone();
    for _ in 0..tracon_core::runs::continuation::MAX_CHAIN {
        let Some(next) = latest.continued_by_run_id else { break };
        match runs.get_run(tenant, next).await.map_err(internal)? {
            Some(later) => latest = later,
            None => break,
        }
    }
    Ok((first, latest))
}

fn expired(call: &Call<'_>, run: &RunRecord) -> bool {
    let ttl = chrono::Duration::from_std(call.ctx.state.http.mcp_server.task_ttl).unwrap_or(chrono::Duration::MAX);
    run.started_at + ttl <= call.ctx.state.runtime.platform.clock.now()
}

fn status(first: &RunRecord, latest: &RunRecord) -> &'static str {
    if first.cancel_requested || latest.cancel_requested || latest.status == RunStatus::Canceled {
        return "cancelled";
    }
    match latest.status {
        RunStatus::Queued | RunStatus::Running => "working",
        RunStatus::Completed | RunStatus::AwaitingApproval | RunStatus::AwaitingInput => "completed",
        RunStatus::Failed | RunStatus::Canceled => "failed",
    }
}

/// The `Task` object.
fn task(call: &Call<'_>, first: &RunRecord, latest: &RunRecord) -> Value {
    let settings = &call.ctx.state.http.mcp_server;
    let updated = latest.ended_at.or(latest.heartbeat_at).unwrap_or(latest.started_at).max(first.started_at);
    let status = status(first, latest);
    let mut task = json!({
        "taskId": first.id.to_string(),
        "status": status,
        "createdAt": first.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "lastUpdatedAt": updated.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "ttl": u64::try_from(settings.task_ttl.as_millis()).unwrap_or(u64::MAX),
        "pollInterval": u64::try_from(settings.task_poll_interval.as_millis()).unwrap_or(u64::MAX),
    });
    let message = match (status, latest.status) {
        ("working", RunStatus::Queued) => Some("Queued."),
        ("working", _) => Some("The agent is running."),
        ("completed", RunStatus::AwaitingApproval | RunStatus::AwaitingInput) => Some(run::APPROVAL_REJECTED),
        ("failed", _) => latest.error.as_ref().map(|e| e.message.as_str()),
        _ => None,
    };
    if let Some(m) = message {
        task["statusMessage"] = json!(m);
    }
    task
}

async fn list(call: &Call<'_>, params: &Value) -> Result<Value, RpcError> {
    let skip = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => {
            c.parse::<usize>().map_err(|_| RpcError::invalid_params("Invalid params: unknown cursor."))?
        }
        Some(_) => return Err(RpcError::invalid_params("Invalid params: unknown cursor.")),
    };
    let mut filter = RunFilter::default();
    filter.labels.insert(TASK_LABEL.to_owned(), key_of(call).to_owned());
    let runs = call
        .ctx
        .state
        .runtime
        .stores
        .runs
        .list_runs(&call.ctx.tenant, &filter, skip, PAGE + 1)
        .await
        .map_err(|_| RpcError::internal("The tasks could not be listed."))?;
    let more = runs.len() > PAGE;
    let tasks: Vec<Value> = runs
        .iter()
        .take(PAGE)
        .filter(|r| !expired(call, r) && r.continued_from_run_id.is_none())
        .map(|r| task(call, r, r))
        .collect();
    let mut result = json!({ "tasks": tasks });
    if more {
        result["nextCursor"] = json!((skip + PAGE).to_string());
    }
    Ok(result)
}

async fn cancel(call: &Call<'_>, first: RunRecord, latest: RunRecord) -> Result<Value, RpcError> {
    if status(&first, &latest) != "working" {
        return Err(RpcError::invalid_params("Cannot cancel a task in a terminal status."));
    }
    let state = &call.ctx.state;
    match state.runtime.stores.runs.request_cancel(&call.ctx.tenant, latest.id).await {
        Ok(CancelOutcome::Requested) => {
            state.runtime.drain.cancel_local(latest.id);
        }
        Ok(CancelOutcome::AlreadyEnded(_)) => {
            return Err(RpcError::invalid_params("Cannot cancel a task in a terminal status."));
        }
        Err(_) => return Err(RpcError::internal("The task could not be cancelled.")),
    }
    let mut latest = latest;
    latest.cancel_requested = true;
    let mut answer = task(call, &first, &latest);
    answer["statusMessage"] = json!("The task was cancelled by request.");
    Ok(answer)
}

/// `tasks/result`: waits for the run's end (at most `Tracon:Runs:FollowTimeoutSeconds`),
/// then answers what the call would have.
async fn result(call: &Call<'_>, first: RunRecord, mut latest: RunRecord) -> Result<Value, RpcError> {
    let state = &call.ctx.state;
    let clock = state.runtime.platform.clock.clone();
    let deadline = clock.now() + chrono::Duration::from_std(state.http.follow_timeout).unwrap_or(chrono::Duration::MAX);
    let mut pause = Duration::from_millis(50);
    while status(&first, &latest) == "working" {
        if clock.now() >= deadline {
            return Err(RpcError::new(
                -32000,
                "The task is still working; call tasks/result again (or poll tasks/get).",
            ));
        }
        clock.sleep(pause).await;
        pause = (pause * 2).min(RESULT_POLL_MAX);
        latest = find(call, &first.id.to_string()).await?.1;
    }
    let mut result = match status(&first, &latest) {
        "cancelled" => tool_error("The task was cancelled.", Some(latest.id)),
        _ if latest.status == RunStatus::Completed => {
            let answers = state
                .runtime
                .stores
                .runs
                .answers(&call.ctx.tenant, &[latest.id])
                .await
                .map_err(|_| RpcError::internal("The task's answer could not be read."))?;
            let text = answers.get(&latest.id).cloned().unwrap_or_default();
            run::ended(latest.id, latest.status, &text, None, false)
        }
        _ => run::ended(latest.id, latest.status, "", latest.error.as_ref(), false),
    };
    result["_meta"]["io.modelcontextprotocol/related-task"] = json!({ "taskId": first.id.to_string() });
    Ok(result)
}
