//! What a tool call and a task share: the checked call, its admission and budget, and how a
//! run's end reads as a tool result.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tracon_core::names::AgentName;
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::RunStatus;

use super::Call;
use crate::error::ApiError;
use crate::extract::header_pairs;

/// A checked call: the agent and its input.
pub(super) struct Checked {
    pub agent: AgentName,
    pub message: String,
    pub parameters: BTreeMap<String, String>,
}

/// The call's fresh budget.
pub(super) fn budget(call: &Call<'_>) -> Arc<tracon_core::runs::tree::AgentGraphSettings> {
    let state = &call.ctx.state;
    state.http.mcp_server.exposure.limits(&state.runtime.settings.agent_graph)
}

/// The request of an admitted run (`labels` are added to the attributed ones).
pub(super) async fn admitted(
    call: &Call<'_>,
    checked: &Checked,
    label: Option<(&str, &str)>,
) -> Result<RunRequest, ApiError> {
    let Call { ctx, headers } = call;
    let pairs = header_pairs(headers);
    let admission = Admission {
        tenant: &ctx.tenant,
        caller: &ctx.caller,
        agent: &checked.agent,
        session: None,
        attribution: Attributed::Port(&pairs),
    };
    let mut attribution = admit(&ctx.state.runtime, admission).await?;
    if let Some((k, v)) = label {
        attribution.labels.insert(k.to_owned(), v.to_owned());
    }
    let mut request = RunRequest::new(
        ctx.tenant.clone(),
        checked.agent.clone(),
        checked.message.clone(),
        ctx.caller.clone(),
        attribution,
    );
    request.parameters = checked.parameters.clone();
    Ok(request)
}

/// A tool error result carrying `text`.
pub(super) fn tool_error(text: &str, run: Option<tracon_core::names::RunId>) -> Value {
    let mut result = json!({ "content": [{ "type": "text", "text": text }], "isError": true });
    if let Some(run) = run {
        result["_meta"] = json!({ "tracon/runId": run.to_string() });
    }
    result
}

/// What an agent says when it stops for a person: an external caller cannot be one.
pub(super) const APPROVAL_REJECTED: &str =
    "The agent stopped for a person's approval, which an external caller cannot give; the call was not completed.";

/// The result of a finished run.
pub(super) fn result_of(outcome: &tracon_core::runs::outcome::RunOutcome) -> Value {
    ended(
        outcome.run_id,
        outcome.status,
        &outcome.text,
        outcome.failure.as_ref(),
        !outcome.client_tool_calls.is_empty(),
    )
}

/// The result of a run that ended `status` with `text` (its answer) or `failure`.
pub(super) fn ended(
    run: tracon_core::names::RunId,
    status: RunStatus,
    text: &str,
    failure: Option<&tracon_core::failure::RunFailure>,
    handed_back: bool,
) -> Value {
    match status {
        RunStatus::Completed if !handed_back => json!({
            "content": [{ "type": "text", "text": text }],
            "isError": false,
            "_meta": { "tracon/runId": run.to_string() },
        }),
        RunStatus::Completed => tool_error(
            "The agent asked the caller to run a client-side tool, which an external caller cannot do.",
            Some(run),
        ),
        RunStatus::AwaitingApproval | RunStatus::AwaitingInput => tool_error(APPROVAL_REJECTED, Some(run)),
        RunStatus::Canceled => tool_error("The run was cancelled.", Some(run)),
        _ => tool_error(failure.map_or("The run failed.", |f| f.message.as_str()), Some(run)),
    }
}
