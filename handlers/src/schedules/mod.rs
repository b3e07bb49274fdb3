//! `/api/schedules`: one-time and cron runs of an agent or a workflow (scope `SchedulesAdmin`).
//!
//! A schedule names an agent or a workflow of the caller's tenant and the message its runs get;
//! the tick queues a run (a workflow's is a queued workflow run) at each occurrence (see `tracon_core::schedules`). Another tenant's schedule
//! answers exactly as a missing one. Every change is audited.

use axum::Router;
use axum::routing;
use std::collections::BTreeMap;

use axum::Json;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracon_core::error::StoreError;
use tracon_core::names::{AgentName, RunId, TenantId, WorkflowName};
use tracon_core::schedules::{ScheduleRecord, ScheduleTarget, TimingView};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// The schedules group.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/schedules", routing::get(list).post(create))
        .route("/api/schedules/{id}", routing::get(get).put(update).delete(delete))
}

/// Longest schedule name.
const MAX_NAME: usize = 100;
/// Longest message a schedule may carry.
const MAX_MESSAGE: usize = 32 * 1024;

/// A schedule as written.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduleInput {
    /// Unique in the tenant: 1–100 letters, digits, `-`, `_` and `.`.
    #[schema(pattern = "^[A-Za-z0-9._-]{1,100}$")]
    pub name: String,
    /// The agent each occurrence runs (or `workflowName`: exactly one of the two).
    #[serde(default)]
    #[schema(pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub agent_name: Option<String>,
    /// The workflow each occurrence runs as a queued workflow run (or `agentName`).
    #[serde(default)]
    #[schema(pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub workflow_name: Option<String>,
    /// The message each run gets (at most 32 KiB).
    pub message: String,
    /// The agent's parameters (none for a workflow).
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// One-time: the instant, with an offset (`2026-12-24T18:00:00+01:00`).
    pub run_at: Option<DateTime<Utc>>,
    /// Recurring: five cron fields (minute hour day-of-month month day-of-week).
    pub cron: Option<String>,
    /// Recurring: the IANA zone the pattern is read in (required with `cron`).
    pub time_zone: Option<String>,
    /// Default `true`; a disabled schedule queues nothing.
    #[serde(default = "crate::extract::default_true")]
    pub enabled: bool,
}

/// A schedule as shown.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleView {
    pub id: Uuid,
    pub name: String,
    /// The agent each occurrence runs (absent for a workflow's schedule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// The workflow each occurrence runs (absent for an agent's schedule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_name: Option<String>,
    pub message: String,
    pub parameters: BTreeMap<String, String>,
    #[serde(flatten)]
    pub timing: TimingView,
    pub enabled: bool,
    /// The next occurrence; empty once a one-time schedule ran.
    pub next_run_at: Option<DateTime<Utc>>,
    pub last_run_at: Option<DateTime<Utc>>,
    /// The run the last occurrence queued.
    #[schema(value_type = Option<String>)]
    pub last_run_id: Option<RunId>,
    /// Why the last occurrence queued nothing.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<&ScheduleRecord> for ScheduleView {
    fn from(s: &ScheduleRecord) -> Self {
        Self {
            id: s.id,
            name: s.name.clone(),
            agent_name: matches!(s.target, ScheduleTarget::Agent(_)).then(|| s.target.name().to_owned()),
            workflow_name: matches!(s.target, ScheduleTarget::Workflow(_)).then(|| s.target.name().to_owned()),
            message: s.message.clone(),
            parameters: s.parameters.clone(),
            timing: TimingView::from(&s.timing),
            enabled: s.enabled,
            next_run_at: s.next_run_at,
            last_run_at: s.last_run_at,
            last_run_id: s.last_run_id,
            last_error: s.last_error.clone(),
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

fn schedule_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "schedule_not_found", "The schedule does not exist.")
}

fn invalid(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::bad_request("validation_failed", message).with("field", field)
}

fn schedule_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| schedule_not_found())
}

/// Checks `body` and builds the record (`existing` keeps its id, creation time and history).
async fn validated(
    state: &AppState,
    tenant: &TenantId,
    body: ScheduleInput,
    existing: Option<&ScheduleRecord>,
) -> ApiResult<ScheduleRecord> {
    let name = body.name.trim();
    if name.is_empty()
        || name.chars().count() > MAX_NAME
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(invalid("name", format!("'name' is 1 to {MAX_NAME} letters, digits, '-', '_' or '.'.")));
    }
    if body.message.trim().is_empty() || body.message.len() > MAX_MESSAGE {
        return Err(invalid("message", format!("'message' is required and at most {MAX_MESSAGE} bytes.")));
    }
    let view = TimingView { run_at: body.run_at, cron: body.cron, time_zone: body.time_zone };
    let timing = view.timing().map_err(|e| invalid("cron", e.0))?;
    let target = target(state, tenant, body.agent_name, body.workflow_name, &body.parameters).await?;
    let now = state.runtime.platform.clock.now();
    let next_run_at = match &timing {
        tracon_core::schedules::Timing::Once(at) => Some(*at),
        cron => cron.next_after(now),
    };
    Ok(ScheduleRecord {
        id: existing.map_or_else(|| tracon_core::ports::new_id(state.runtime.platform.clock.as_ref()), |e| e.id),
        tenant: tenant.clone(),
        name: name.to_owned(),
        target,
        message: body.message,
        parameters: body.parameters,
        timing,
        enabled: body.enabled,
        next_run_at,
        last_run_at: existing.and_then(|e| e.last_run_at),
        last_run_id: existing.and_then(|e| e.last_run_id),
        last_error: existing.and_then(|e| e.last_error.clone()),
        created_at: existing.map_or(now, |e| e.created_at),
        updated_at: now,
    })
}

/// Checks what the schedule runs: exactly one of `agentName` and `workflowName`, naming one
/// that exists now (an agent must also compile with the parameters; a workflow takes none).
/// If it changes later, the occurrence records why it queued nothing.
async fn target(
    state: &AppState,
    tenant: &TenantId,
    agent: Option<String>,
    workflow: Option<String>,
    parameters: &BTreeMap<String, String>,
) -> ApiResult<ScheduleTarget> {
    match (agent, workflow) {
        (Some(agent), None) => {
            let agent = AgentName::parse(&agent).map_err(|e| invalid("agentName", e.0))?;
            match state.runtime.catalog.compile(tenant, &agent, None, parameters).await {
                Ok(_) => Ok(ScheduleTarget::Agent(agent)),
                Err(tracon_core::catalog::CatalogError::NotFound) => {
                    Err(invalid("agentName", format!("The agent '{}' does not exist.", agent.as_str())))
                }
                Err(tracon_core::catalog::CatalogError::Store(e)) => Err(e.into()),
                Err(_) => Err(invalid("parameters", "The agent does not compile with these parameters.")),
            }
        }
        (None, Some(workflow)) => {
            let name = WorkflowName::parse(&workflow).map_err(|e| invalid("workflowName", e.0))?;
            if !parameters.is_empty() {
                return Err(invalid("parameters", "A workflow's schedule takes no parameters."));
            }
            if state.runtime.stores.workflows.get(tenant, &name).await?.is_none() {
                return Err(invalid("workflowName", format!("The workflow '{}' does not exist.", name.as_str())));
            }
            Ok(ScheduleTarget::Workflow(name))
        }
        (Some(_), Some(_)) => Err(invalid("workflowName", "Give 'agentName' or 'workflowName', not both.")),
        (None, None) => Err(invalid("agentName", "'agentName' or 'workflowName' is required.")),
    }
}

fn name_taken() -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "schedule_exists", "A schedule with this name exists.").with("field", "name")
}

fn audited(s: &ScheduleRecord) -> Option<serde_json::Value> {
    serde_json::to_value(ScheduleView::from(s)).ok()
}

/// The tenant's schedules, by name.
#[utoipa::path(get, path = "/api/schedules", tag = "runs",
    params(("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<ScheduleView>)))]
#[tracing::instrument(name = "schedules.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<ScheduleView>>> {
    let rows = state.runtime.stores.schedules.list(&tenant, paging.skip, paging.take).await?;
    Ok(Json(rows.iter().map(ScheduleView::from).collect()))
}

/// One schedule.
#[utoipa::path(get, path = "/api/schedules/{id}", tag = "runs", params(("id" = String, Path, description = "Schedule id")),
    responses((status = 200, body = ScheduleView), problem::NotFound))]
#[tracing::instrument(name = "schedules.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<ScheduleView>> {
    let id = schedule_id(&id)?;
    let s = state.runtime.stores.schedules.get(&tenant, id).await?.ok_or_else(schedule_not_found)?;
    Ok(Json(ScheduleView::from(&s)))
}

/// Create a schedule: `runAt` (one-time) or `cron` with an IANA `timeZone` (recurring).
#[utoipa::path(post, path = "/api/schedules", tag = "runs", request_body = ScheduleInput,
    responses((status = 201, body = ScheduleView), problem::BadRequest, problem::Conflict))]
#[tracing::instrument(name = "schedules.create", skip_all)]
pub async fn create(Ctx { state, tenant, caller }: Ctx, ApiJson(body): ApiJson<ScheduleInput>) -> ApiResult<Response> {
    let record = validated(&state, &tenant, body, None).await?;
    match state.runtime.stores.schedules.create(&record).await {
        Ok(()) => {}
        Err(StoreError::Conflict(_)) => return Err(name_taken()),
        Err(e) => return Err(e.into()),
    }
    let id = record.id.to_string();
    audit::record(&state, &tenant, &caller, "schedule.create", ("schedule", &id), None, audited(&record)).await;
    Ok((StatusCode::CREATED, Json(ScheduleView::from(&record))).into_response())
}

/// Replace a schedule; its next occurrence is computed anew.
#[utoipa::path(put, path = "/api/schedules/{id}", tag = "runs", request_body = ScheduleInput,
    params(("id" = String, Path, description = "Schedule id")),
    responses((status = 200, body = ScheduleView), problem::BadRequest, problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "schedules.update", skip_all)]
pub async fn update(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ScheduleInput>,
) -> ApiResult<Json<ScheduleView>> {
    let id = schedule_id(&id)?;
    let store = &state.runtime.stores.schedules;
    let before = store.get(&tenant, id).await?.ok_or_else(schedule_not_found)?;
    let record = validated(&state, &tenant, body, Some(&before)).await?;
    match store.update(&record).await {
        Ok(()) => {}
        Err(StoreError::Conflict(_)) => return Err(name_taken()),
        Err(StoreError::NotFound) => return Err(schedule_not_found()),
        Err(e) => return Err(e.into()),
    }
    let key = id.to_string();
    audit::record(&state, &tenant, &caller, "schedule.update", ("schedule", &key), audited(&before), audited(&record))
        .await;
    Ok(Json(ScheduleView::from(&record)))
}

/// Delete a schedule (runs it queued stay).
#[utoipa::path(delete, path = "/api/schedules/{id}", tag = "runs", params(("id" = String, Path, description = "Schedule id")),
    responses((status = 204), problem::NotFound))]
#[tracing::instrument(name = "schedules.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id = schedule_id(&id)?;
    let store = &state.runtime.stores.schedules;
    let before = store.get(&tenant, id).await?.ok_or_else(schedule_not_found)?;
    if !store.delete(&tenant, id).await? {
        return Err(schedule_not_found());
    }
    let key = id.to_string();
    audit::record(&state, &tenant, &caller, "schedule.delete", ("schedule", &key), audited(&before), None).await;
    Ok(StatusCode::NO_CONTENT)
}
