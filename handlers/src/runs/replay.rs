//! `POST /api/runs/{id}/replay`: an ended run's recorded input, run again as a new,
//! sessionless run (see `tracon_core::runs::replay`), answered as one JSON document.

use axum::Json;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::failure::RunFailure;
use tracon_core::model::Usage;
use tracon_core::names::{AgentName, RunId};
use tracon_core::pricing::CostSnapshot;
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::replay::{Replay, ReplayRefusal, ToolMode, replay as run_replay};
use tracon_core::runs::store::RunStatus;
use utoipa::ToSchema;

use super::{run_id, run_not_found};
use crate::error::{ApiError, ApiResult, problem, start_error};
use crate::extract::{Ctx, OptionalJson, header_pairs};

/// What to replay with.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplayBody {
    /// `ReplayTools` (default): tool calls answered from the source's record; `NoTools`: no
    /// tools offered; `LiveTools`: tools run for real (Admin only).
    #[serde(default)]
    pub tool_mode: ToolMode,
    /// A stored version of the source's agent; default: its current definition.
    #[serde(default)]
    pub agent_version: Option<u32>,
}

/// The replay's end.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplayResult {
    pub run_id: RunId,
    pub replay_of_run_id: RunId,
    pub tool_mode: ToolMode,
    pub status: RunStatus,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostSnapshot>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunFailure>,
}

/// Replay an ended run: its recorded input, run again as a new sessionless run against the
/// agent's current definition or `agentVersion`, its tool calls answered as `toolMode` says
/// (the body may be left out: `ReplayTools` against the current definition).
#[utoipa::path(post, path = "/api/runs/{id}/replay", tag = "runs", params(("id" = String, Path, description = "The run to replay")),
    request_body = ReplayBody,
    responses((status = 200, body = ReplayResult), problem::BadRequest, problem::Forbidden, problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "runs.replay", skip_all)]
pub async fn replay(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
    OptionalJson(body): OptionalJson<ReplayBody>,
) -> ApiResult<Json<ReplayResult>> {
    let id = run_id(&id)?;
    let runtime = &state.runtime;
    let source = runtime.stores.runs.get_run(&tenant, id).await?.ok_or_else(run_not_found)?;
    if !is_allowed(runtime.run_authorizer.as_ref(), &caller, &tenant, RunAction::ReadRun { run: &source }).await {
        return Err(run_not_found());
    }
    let agent = AgentName::parse(&source.agent_name).map_err(|_| run_not_found())?;
    let pairs = header_pairs(&headers);
    let admission = Admission {
        tenant: &tenant,
        caller: &caller,
        agent: &agent,
        session: None,
        attribution: Attributed::Port(&pairs),
    };
    let attribution = admit(runtime, admission).await?;
    let tool_mode = body.tool_mode;
    let request = Replay { source: id, tool_mode, agent_version: body.agent_version };
    let outcome = run_replay(runtime, &tenant, &caller, attribution, request).await.map_err(|e| match e {
        ReplayRefusal::NotFound => run_not_found(),
        ReplayRefusal::NotEnded(status) => {
            ApiError::new(StatusCode::CONFLICT, "run_not_ended", "Only a run that has ended can be replayed.")
                .with("runStatus", status)
        }
        ReplayRefusal::InputMissing => ApiError::new(
            StatusCode::CONFLICT,
            "replay_input_missing",
            "The run's input was not recorded (Tracon:RunRecording:RecordInput), so it cannot be replayed.",
        ),
        ReplayRefusal::ClientTools(tools) => ApiError::new(
            StatusCode::CONFLICT,
            "replay_not_supported",
            format!(
                "The agent has client-side tools ({}): their calls were answered by a client and never recorded, so it cannot be replayed.",
                tools.join(", ")
            ),
        ),
        ReplayRefusal::AdminRequired => {
            ApiError::forbidden("admin_required", "LiveTools repeats real side effects: it needs an Admin caller.")
        }
        ReplayRefusal::VersionNotFound(v) => {
            ApiError::new(StatusCode::NOT_FOUND, "version_not_found", format!("The agent has no stored version {v}."))
                .with("field", "agentVersion")
        }
        ReplayRefusal::Start(e) => start_error(agent.as_str(), e),
    })?;
    Ok(Json(ReplayResult {
        run_id: outcome.run_id,
        replay_of_run_id: id,
        tool_mode,
        status: outcome.status,
        text: outcome.text,
        usage: outcome.usage,
        cost: outcome.cost,
        error: outcome.failure,
    }))
}
