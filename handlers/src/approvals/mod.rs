//! Approvals: the mailbox (`/api/approvals/pending`, one request, its decision), the
//! in-band decision on a session's next run request, and the standing rules
//! (`/api/approvals/rules`).
//!
//! Deciding is audited **before** it is applied: an entry that cannot be written refuses the
//! decision (`503 audit_unavailable`) and nothing changes — the one place, with skill
//! scripts, where a missing record would be the whole problem. A decision never rewrites the
//! run that stopped: once every request of that run is decided, exactly one new run (claimed
//! in the store, so two deciders racing on the last two requests start one) resumes it in the
//! same session. Through the mailbox it runs in the background and the answer names it
//! (`resumedRunId`); in-band it is the stream the run request answers with.

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracon_core::approvals::{ApprovalRecord, ApprovalStatus};
use tracon_core::names::RunId;
use tracon_core::tools::effect::ToolEffect;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{Ctx, Paging};
use crate::state::AppState;

pub mod decide;
pub mod rules;

/// The approvals group: the mailbox. (The standing rules are served with the security
/// administration, on every deployment: [`rules`].)
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/approvals/pending", routing::get(pending))
        .route("/api/approvals/{id}", routing::get(get))
        .route("/api/approvals/{id}/decision", routing::post(decide::decide))
}

/// Longest decision reason.
pub const MAX_REASON: usize = 1000;

/// A request as an approver reads it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// The request id (the `requestId` of the run's `approvals` frame).
    pub id: Uuid,
    /// The run that stopped.
    #[schema(value_type = String)]
    pub run_id: RunId,
    pub session_id: Option<String>,
    pub agent_name: String,
    pub call_id: String,
    pub tool_name: String,
    /// The call's arguments, as recorded.
    #[schema(value_type = Object)]
    pub arguments: Value,
    pub effect: ToolEffect,
    pub requested_by: Option<String>,
    pub created_at: DateTime<Utc>,
    /// After this the request can no longer be decided.
    pub expires_at: DateTime<Utc>,
    pub status: ApprovalStatus,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    /// The run that resumed the stopped one, once it started.
    #[schema(value_type = Option<String>)]
    pub resumed_run_id: Option<RunId>,
}

impl ApprovalView {
    pub fn new(r: ApprovalRecord, now: DateTime<Utc>) -> Self {
        Self {
            status: r.status_at(now),
            id: r.id,
            run_id: r.run_id,
            session_id: r.session_id,
            agent_name: r.agent_name,
            call_id: r.call_id,
            tool_name: r.tool_name,
            arguments: r.arguments,
            effect: r.effect,
            requested_by: r.requested_by,
            created_at: r.created_at,
            expires_at: r.expires_at,
            decided_at: r.decided_at,
            decided_by: r.decided_by,
            reason: r.reason,
            resumed_run_id: r.resumed_run_id,
        }
    }
}

/// A decision.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionBody {
    pub approved: bool,
    /// Why (at most 1000 characters); a denial's reason reaches the model.
    #[serde(default)]
    pub reason: Option<String>,
    /// With an approval: stores a rule that pre-approves this exact call (same tool, same
    /// agent, same arguments) from now on.
    #[serde(default)]
    pub dont_ask_again: bool,
}

/// A decision named by its request, as the run request carries it in-band.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InBandDecision {
    pub request_id: Uuid,
    #[serde(flatten)]
    pub decision: DecisionBody,
}

/// The answer to a mailbox decision.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionResult {
    pub approval: ApprovalView,
    /// The run that resumed the stopped one — set by the decision that completed the set.
    #[schema(value_type = Option<String>)]
    pub resumed_run_id: Option<RunId>,
    /// The stopped run's requests still waiting for a decision.
    pub pending: usize,
}

fn approval_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "approval_not_found", "The approval request does not exist.")
}

fn request_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| approval_not_found())
}

/// Pending requests of the caller's tenant that can still be decided, oldest first.
#[utoipa::path(get, path = "/api/approvals/pending", tag = "approvals",
    params(("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<ApprovalView>)))]
#[tracing::instrument(name = "approvals.pending", skip_all)]
pub async fn pending(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<ApprovalView>>> {
    let now = state.runtime.platform.clock.now();
    let rows = state.runtime.stores.approvals.list_pending(&tenant, now, paging.take).await?;
    Ok(Json(rows.into_iter().map(|r| ApprovalView::new(r, now)).collect()))
}

/// One request, in any status.
#[utoipa::path(get, path = "/api/approvals/{id}", tag = "approvals", params(("id" = String, Path, description = "Request id")),
    responses((status = 200, body = ApprovalView), problem::NotFound))]
#[tracing::instrument(name = "approvals.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<ApprovalView>> {
    let now = state.runtime.platform.clock.now();
    let row = state.runtime.stores.approvals.get(&tenant, request_id(&id)?).await?.ok_or_else(approval_not_found)?;
    Ok(Json(ApprovalView::new(row, now)))
}
