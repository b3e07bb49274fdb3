//! `/api/jobs`: the background work of the caller's tenant — read it, cancel it.
//!
//! Another tenant's job answers exactly as a missing one. A job's payload is not shown (it
//! may carry a user's message); its handler key, status, attempts, times, result and error
//! code are.

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::routing;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracon_core::error::StoreError;
use tracon_core::jobs::{JobError, JobFilter, JobRecord, JobStatus};
use tracon_core::names::RunId;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult, ProblemDetails, problem};
use crate::extract::{Ctx, Paging};
use crate::state::AppState;

/// The jobs group: the queue's jobs and their cancellation.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/jobs", routing::get(list))
        .route("/api/jobs/{id}", routing::get(get))
        .route("/api/jobs/{id}/cancel", routing::post(cancel))
}

/// A job as listed.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    pub id: Uuid,
    pub handler_key: String,
    pub status: JobStatus,
    pub attempts: u32,
    pub max_attempts: u32,
    /// Not run before this.
    pub available_at: DateTime<Utc>,
    pub cancel_requested: bool,
    /// The run the job executes, when it executes one.
    #[schema(value_type = Option<String>)]
    pub run_id: Option<RunId>,
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    pub error: Option<JobError>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

impl From<JobRecord> for JobView {
    fn from(j: JobRecord) -> Self {
        Self {
            id: j.id,
            handler_key: j.handler_key,
            status: j.status,
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            available_at: j.available_at,
            cancel_requested: j.cancel_requested,
            run_id: j.run_id,
            result: j.result,
            error: j.error,
            created_at: j.created_at,
            updated_at: j.updated_at,
            completed_at: j.completed_at,
        }
    }
}

/// Filters of the job list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct JobQuery {
    // `skip` and `take` are read by `Paging`.
    /// `Queued`, `Running`, `Succeeded`, `Failed` or `Canceled`.
    pub status: Option<String>,
    pub handler_key: Option<String>,
}

fn job_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "job_not_found", "The job does not exist.")
}

fn job_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| job_not_found())
}

/// The tenant's jobs, newest first.
#[utoipa::path(get, path = "/api/jobs", tag = "runs",
    params(JobQuery, ("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<JobView>), problem::BadRequest))]
#[tracing::instrument(name = "jobs.list", skip_all)]
pub async fn list(
    Ctx { state, tenant, .. }: Ctx,
    paging: Paging,
    query: Result<Query<JobQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<JobView>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("validation_failed", e.body_text()))?;
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(JobStatus::parse(s).ok_or_else(|| {
            let names: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request("validation_failed", format!("'status' is one of {}.", names.join(", ")))
                .with("field", "status")
        })?),
    };
    let filter = JobFilter { status, handler_key: q.handler_key };
    let jobs = state.runtime.stores.jobs.list(&tenant, &filter, paging.skip, paging.take).await?;
    Ok(Json(jobs.into_iter().map(JobView::from).collect()))
}

/// One job.
#[utoipa::path(get, path = "/api/jobs/{id}", tag = "runs", params(("id" = String, Path, description = "Job id")),
    responses((status = 200, body = JobView), problem::NotFound))]
#[tracing::instrument(name = "jobs.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<JobView>> {
    let job = state.runtime.stores.jobs.get(&tenant, job_id(&id)?).await?.ok_or_else(job_not_found)?;
    Ok(Json(job.into()))
}

/// Cancel a job: a queued one ends at once, a running one stops at its next heartbeat.
#[utoipa::path(post, path = "/api/jobs/{id}/cancel", tag = "runs", params(("id" = String, Path, description = "Job id")),
    responses((status = 202, body = JobView), problem::NotFound,
        (status = 409, description = "The job has already ended", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "jobs.cancel", skip_all)]
pub async fn cancel(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<(StatusCode, Json<JobView>)> {
    let now = state.runtime.platform.clock.now();
    match state.runtime.stores.jobs.cancel(&tenant, job_id(&id)?, now).await {
        Ok(job) => Ok((StatusCode::ACCEPTED, Json(job.into()))),
        Err(StoreError::NotFound) => Err(job_not_found()),
        Err(StoreError::Conflict(_)) => {
            Err(ApiError::new(StatusCode::CONFLICT, "job_already_ended", "The job has already ended."))
        }
        Err(e) => Err(e.into()),
    }
}
