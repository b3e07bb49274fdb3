//! `/api/workflows`: list, read, create, replace, delete and validate definitions, their
//! versions, their graph, and the functions a definition may name. Saving checks the
//! definition with the rules the executor relies on and answers `400` with the problems.

use axum::Json;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use tracon_core::definitions::StoredDefinition;
use tracon_core::error::StoreError;
use tracon_core::names::WorkflowName;
use tracon_core::report::ValidationReport;
use tracon_core::workflows::definition::{WorkflowGraph, graph as graph_of};
use tracon_core::workflows::functions::FunctionInfo;
use tracon_core::workflows::{WorkflowDefinition, WorkflowKind};
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// A stored workflow.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowView {
    pub name: String,
    pub display_name: Option<String>,
    pub description: Option<String>,
    pub kind: WorkflowKind,
    pub version: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub definition: WorkflowDefinition,
}

impl From<StoredDefinition<WorkflowDefinition>> for WorkflowView {
    fn from(s: StoredDefinition<WorkflowDefinition>) -> Self {
        let d = &s.definition;
        Self {
            name: d.name.clone(),
            display_name: d.display_name.clone(),
            description: d.description.clone(),
            kind: d.kind,
            version: s.version,
            created_at: s.created_at,
            updated_at: s.updated_at,
            definition: s.definition,
        }
    }
}

/// Names a workflow cannot take: the group's own paths under `/api/workflows/`.
const RESERVED: [&str; 3] = ["functions", "runs", "validate"];

/// Parses a path segment as a workflow name (`400` when it cannot be one).
pub(crate) fn workflow_name(raw: &str) -> ApiResult<WorkflowName> {
    WorkflowName::parse(raw).map_err(|e| ApiError::bad_request("invalid_workflow_name", e.0))
}

pub(crate) fn workflow_not_found(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "workflow_not_found", format!("No workflow named '{name}' exists."))
}

/// The current version of `name`, or `404`.
pub(crate) async fn load(
    state: &AppState,
    tenant: &tracon_core::names::TenantId,
    raw: &str,
) -> ApiResult<StoredDefinition<WorkflowDefinition>> {
    let name = workflow_name(raw)?;
    state.runtime.stores.workflows.get(tenant, &name).await?.ok_or_else(|| workflow_not_found(name.as_str()))
}

/// List stored workflows by name, paged with `skip`/`take`.
#[utoipa::path(get, path = "/api/workflows", tag = "workflows",
    params(("skip" = Option<u32>, Query, description = "Items to skip"), ("take" = Option<u32>, Query, description = "Items to return, 1..200 (default 50)")),
    responses((status = 200, body = [WorkflowView])))]
#[tracing::instrument(name = "workflows.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<WorkflowView>>> {
    let stored = state.runtime.stores.workflows.list(&tenant, paging.skip, paging.take).await?;
    Ok(Json(stored.into_iter().map(WorkflowView::from).collect()))
}

/// Read one workflow (its current version).
#[utoipa::path(get, path = "/api/workflows/{name}", tag = "workflows",
    params(("name" = String, Path, description = "Workflow name")),
    responses((status = 200, body = WorkflowView), problem::NotFound))]
#[tracing::instrument(name = "workflows.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(name): Path<String>) -> ApiResult<Json<WorkflowView>> {
    Ok(Json(load(&state, &tenant, &name).await?.into()))
}

/// Store a new workflow (version 1). A definition that could not run is a `400` with its
/// problems (the rules of `POST /api/workflows/validate`).
#[utoipa::path(post, path = "/api/workflows", tag = "workflows", request_body = WorkflowDefinition,
    responses((status = 201, body = WorkflowView), problem::BadRequest, problem::Conflict))]
#[tracing::instrument(name = "workflows.create", skip_all)]
pub async fn create(
    Ctx { state, tenant, caller }: Ctx,
    ApiJson(def): ApiJson<WorkflowDefinition>,
) -> ApiResult<Response> {
    check(&state, &tenant, &def).await?;
    let name = def.name.clone();
    let now = state.runtime.platform.clock.now();
    let stored = state.runtime.stores.workflows.create(&tenant, def, now).await.map_err(|e| match e {
        StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "workflow_exists", m),
        other => other.into(),
    })?;
    audit::record(&state, &tenant, &caller, "workflow.create", ("workflow", &name), None, Some(snapshot(&stored)))
        .await;
    let mut response = (StatusCode::CREATED, Json(WorkflowView::from(stored))).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/api/workflows/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Replace a workflow; the save appends a new version.
#[utoipa::path(put, path = "/api/workflows/{name}", tag = "workflows", request_body = WorkflowDefinition,
    params(("name" = String, Path, description = "Workflow name")),
    responses((status = 200, body = WorkflowView), problem::BadRequest, problem::NotFound))]
#[tracing::instrument(name = "workflows.replace", skip_all)]
pub async fn replace(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    ApiJson(def): ApiJson<WorkflowDefinition>,
) -> ApiResult<Json<WorkflowView>> {
    let name = workflow_name(&name)?;
    if def.name != name.as_str() {
        return Err(ApiError::bad_request(
            "name_mismatch",
            format!("The body names '{}' but the path names '{name}'; rename by creating a new workflow.", def.name),
        ));
    }
    check(&state, &tenant, &def).await?;
    let workflows = &state.runtime.stores.workflows;
    let before = workflows.get(&tenant, &name).await?.as_ref().map(snapshot);
    let now = state.runtime.platform.clock.now();
    let stored = workflows.update(&tenant, def, now).await.map_err(|e| match e {
        StoreError::NotFound => workflow_not_found(name.as_str()),
        other => other.into(),
    })?;
    let after = Some(snapshot(&stored));
    audit::record(&state, &tenant, &caller, "workflow.update", ("workflow", name.as_str()), before, after).await;
    Ok(Json(stored.into()))
}

/// Delete a workflow and its history (its recorded runs stay).
#[utoipa::path(delete, path = "/api/workflows/{name}", tag = "workflows",
    params(("name" = String, Path, description = "Workflow name")),
    responses((status = 204), problem::NotFound))]
#[tracing::instrument(name = "workflows.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(name): Path<String>) -> ApiResult<StatusCode> {
    let name = workflow_name(&name)?;
    let workflows = &state.runtime.stores.workflows;
    let before = workflows.get(&tenant, &name).await?.as_ref().map(snapshot);
    if !workflows.delete(&tenant, &name).await? {
        return Err(workflow_not_found(name.as_str()));
    }
    audit::record(&state, &tenant, &caller, "workflow.delete", ("workflow", name.as_str()), before, None).await;
    Ok(StatusCode::NO_CONTENT)
}

/// One stored version: a full snapshot.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowVersionView {
    pub version: u32,
    /// When this version was written.
    pub created_at: DateTime<Utc>,
    pub definition: WorkflowDefinition,
}

/// Every version of a workflow, newest first: full snapshots, not deltas.
#[utoipa::path(get, path = "/api/workflows/{name}/versions", tag = "workflows",
    params(("name" = String, Path, description = "Workflow name")),
    responses((status = 200, body = [WorkflowVersionView]), problem::NotFound))]
#[tracing::instrument(name = "workflows.versions", skip_all)]
pub async fn versions(
    Ctx { state, tenant, .. }: Ctx,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<WorkflowVersionView>>> {
    let name = workflow_name(&name)?;
    let versions = state.runtime.stores.workflows.versions(&tenant, &name).await?;
    if versions.is_empty() {
        return Err(workflow_not_found(name.as_str()));
    }
    let views = versions
        .into_iter()
        .map(|s| WorkflowVersionView { version: s.version, created_at: s.updated_at, definition: s.definition })
        .collect();
    Ok(Json(views))
}

/// The compiled graph: its node ids are the `executorId`s of the run events (the console
/// colours nodes live by them), with the same graph as Mermaid text.
#[utoipa::path(get, path = "/api/workflows/{name}/graph", tag = "workflows",
    params(("name" = String, Path, description = "Workflow name")),
    responses((status = 200, body = WorkflowGraph), problem::NotFound))]
#[tracing::instrument(name = "workflows.graph", skip_all)]
pub async fn graph(Ctx { state, tenant, .. }: Ctx, Path(name): Path<String>) -> ApiResult<Json<WorkflowGraph>> {
    Ok(Json(graph_of(&load(&state, &tenant, &name).await?.definition)))
}

/// The functions registered in code that a `Sequential` workflow's `nodes` may name
/// (`human-input`, built in, asks a person).
#[utoipa::path(get, path = "/api/workflows/functions", tag = "workflows",
    responses((status = 200, body = [FunctionInfo])))]
#[tracing::instrument(name = "workflows.functions", skip_all)]
pub async fn functions(Ctx { state, .. }: Ctx) -> Json<Vec<FunctionInfo>> {
    Json(state.runtime.workflow_functions.list())
}

/// Check a definition without saving it. An invalid definition is an answer (`200` with
/// `valid: false`), not a transport failure.
#[utoipa::path(post, path = "/api/workflows/validate", tag = "workflows", request_body = WorkflowDefinition,
    responses((status = 200, body = ValidationReport), problem::BadRequest))]
#[tracing::instrument(name = "workflows.validate", skip_all)]
pub async fn validate(
    Ctx { state, tenant, .. }: Ctx,
    ApiJson(def): ApiJson<WorkflowDefinition>,
) -> ApiResult<Json<ValidationReport>> {
    Ok(Json(report(&state, &tenant, &def).await?))
}

async fn report(
    state: &AppState,
    tenant: &tracon_core::names::TenantId,
    def: &WorkflowDefinition,
) -> ApiResult<ValidationReport> {
    let mut report = tracon_core::workflows::validate(&state.runtime, tenant, def).await?;
    if RESERVED.contains(&def.name.as_str()) {
        report.problems.push(tracon_core::report::Problem::new(
            tracon_core::report::ProblemCode::InvalidName,
            "name",
            format!("'{}' is a path of the workflows API; choose another name.", def.name),
        ));
        report.valid = false;
    }
    Ok(report)
}

async fn check(state: &AppState, tenant: &tracon_core::names::TenantId, def: &WorkflowDefinition) -> ApiResult<()> {
    let report = report(state, tenant, def).await?;
    if report.valid { Ok(()) } else { Err(ApiError::validation(report.problems)) }
}

/// A stored version as the audit trail keeps it.
fn snapshot(stored: &StoredDefinition<WorkflowDefinition>) -> serde_json::Value {
    serde_json::json!({"version": stored.version, "definition": stored.definition})
}
