//! `GetTask` and `CancelTask`: a task is read from its recorded run and cancelled through
//! the run's cancel. Only runs this surface started for this agent are its tasks; anything
//! else — another tenant's run, another agent's, a run started elsewhere — is `TaskNotFound`.

use serde::Deserialize;
use serde_json::Value;
use tracon_core::names::RunId;
use tracon_core::runs::store::{CancelOutcome, RunRecord};
use tracon_core::webhooks::a2a::TASK_LABEL;

use super::Called;
use super::rpc::{self, RpcError, TASK_NOT_CANCELABLE};
use super::wire;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskParams {
    #[serde(default)]
    id: String,
    #[serde(default)]
    history_length: Option<i64>,
    #[serde(default)]
    tenant: Option<String>,
}

/// The run behind task `id` of the called agent, in the key's tenant.
pub(crate) async fn find(called: &Called<'_>, id: &str) -> Result<RunRecord, RpcError> {
    let Some(run_id) = RunId::parse(id.trim()) else { return Err(RpcError::task_not_found()) };
    let run = called.state.runtime.stores.runs.get_run(called.tenant, run_id).await?;
    match run {
        Some(run) if run.labels.get(TASK_LABEL).is_some_and(|a| a == called.agent.as_str()) => Ok(run),
        _ => Err(RpcError::task_not_found().with("taskId", id.chars().take(64).collect::<String>())),
    }
}

/// The task as its run now stands: the answer of a completed run, the recorded input.
pub(crate) async fn read(called: &Called<'_>, run: &RunRecord, history: Option<usize>) -> Result<Value, RpcError> {
    let runs = &called.state.runtime.stores.runs;
    let answer = match wire::state(run) {
        "TASK_STATE_COMPLETED" => runs.answers(called.tenant, &[run.id]).await?.remove(&run.id),
        _ => None,
    };
    let input = match history {
        Some(0) => None,
        _ => runs.get_input(called.tenant, run.id).await?.map(|i| i.message),
    };
    Ok(wire::task(run, answer.as_deref(), input.as_deref(), history))
}

pub(crate) async fn get(called: &Called<'_>, params: Value) -> Result<Value, RpcError> {
    let params: TaskParams = rpc::params(params)?;
    wire::check_tenant(called.tenant, params.tenant.as_deref())?;
    let history = wire::history_length(params.history_length)?;
    let run = find(called, &params.id).await?;
    read(called, &run, history).await
}

pub(crate) async fn cancel(called: &Called<'_>, params: Value) -> Result<Value, RpcError> {
    let params: TaskParams = rpc::params(params)?;
    wire::check_tenant(called.tenant, params.tenant.as_deref())?;
    let run = find(called, &params.id).await?;
    let not_cancelable = || RpcError::new(TASK_NOT_CANCELABLE, "The task has ended and cannot be canceled.");
    if wire::is_terminal(wire::state(&run)) {
        return Err(not_cancelable());
    }
    let runtime = &called.state.runtime;
    match runtime.stores.runs.request_cancel(called.tenant, run.id).await? {
        CancelOutcome::Requested => {
            runtime.drain.cancel_local(run.id);
        }
        CancelOutcome::AlreadyEnded(_) => return Err(not_cancelable()),
    }
    let run = find(called, &params.id).await?;
    read(called, &run, None).await
}
