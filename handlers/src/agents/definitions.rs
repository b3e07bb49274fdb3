//! `/api/agents`: list, read, create, replace, delete and validate definitions.
//!
//! Code-defined agents are listed and readable (`definition: null`, `isEditable: false`)
//! but the API refuses to store, replace or delete under their names (`409`): a stored
//! copy would never resolve, and a silent shadow is worse than a refusal. Saving runs the
//! same checks as `POST /api/agents/validate` and answers `400` with the same problems.

use axum::Json;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracon_core::catalog::{AgentSource, CatalogEntry};
use tracon_core::definition::AgentDefinition;
use tracon_core::definitions::StoredDefinition;
use tracon_core::error::StoreError;
use tracon_core::names::{AgentName, TenantId};
use tracon_core::report::ValidationReport;
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// An agent as the management API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub name: String,
    pub display_name: Option<String>,
    pub description: Option<String>,
    pub source: AgentSource,
    /// `false` for code-defined agents: their history is your source history.
    pub is_editable: bool,
    /// The stored version; `null` for code-defined agents.
    pub version: Option<u32>,
    pub provider: String,
    pub model: String,
    pub tool_names: Vec<String>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The stored definition; `null` for code-defined agents (and in lists).
    pub definition: Option<AgentDefinition>,
}

impl AgentView {
    fn from_entry(entry: &CatalogEntry, with_definition: bool) -> Self {
        let d = &entry.definition;
        let stored = entry.source == AgentSource::Stored;
        Self {
            name: d.name.clone(),
            display_name: d.display_name.clone(),
            description: d.description.clone(),
            source: entry.source,
            is_editable: stored,
            version: entry.version,
            provider: d.model.provider.clone(),
            model: d.model.model.clone(),
            tool_names: d.tool_names.clone(),
            created_at: entry.created_at,
            updated_at: entry.updated_at,
            definition: (with_definition && stored).then(|| (**d).clone()),
        }
    }
}

/// Parses a path segment as an agent name (`400` when it cannot be one).
pub(crate) fn agent_name(raw: &str) -> ApiResult<AgentName> {
    AgentName::parse(raw).map_err(|e| ApiError::bad_request("invalid_agent_name", e.0))
}

/// List agents (code-defined first, then stored), paged with `skip`/`take`.
#[utoipa::path(get, path = "/api/agents", tag = "agents",
    params(("skip" = Option<u32>, Query, description = "Items to skip"), ("take" = Option<u32>, Query, description = "Items to return, 1..200 (default 50)")),
    responses((status = 200, body = [AgentView])))]
#[tracing::instrument(name = "agents.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<AgentView>>> {
    let entries = state.runtime.catalog.list(&tenant, paging.skip, paging.take).await?;
    Ok(Json(entries.iter().map(|e| AgentView::from_entry(e, false)).collect()))
}

/// Read one agent.
#[utoipa::path(get, path = "/api/agents/{name}", tag = "agents",
    params(("name" = String, Path, description = "Agent name")),
    responses((status = 200, body = AgentView), problem::NotFound))]
#[tracing::instrument(name = "agents.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(name): Path<String>) -> ApiResult<Json<AgentView>> {
    let name = agent_name(&name)?;
    let entry =
        state.runtime.catalog.get(&tenant, &name).await?.ok_or_else(|| ApiError::agent_not_found(name.as_str()))?;
    Ok(Json(AgentView::from_entry(&entry, true)))
}

/// Store a new definition (version 1).
#[utoipa::path(post, path = "/api/agents", tag = "agents", request_body = AgentDefinition,
    responses((status = 201, body = AgentView), problem::BadRequest, problem::Conflict))]
#[tracing::instrument(name = "agents.create", skip_all)]
pub async fn create(Ctx { state, tenant, caller }: Ctx, ApiJson(def): ApiJson<AgentDefinition>) -> ApiResult<Response> {
    let name = AgentName::parse(&def.name).map_err(|e| ApiError::validation(vec![invalid_name(e.0)]))?;
    refuse_code_agent(&state, &name)?;
    check(&state, &tenant, &def).await?;
    let now = state.runtime.platform.clock.now();
    let stored = state.runtime.stores.definitions.create(&tenant, def, now).await.map_err(|e| match e {
        StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "agent_exists", m),
        other => other.into(),
    })?;
    state.runtime.catalog.moved(&tenant);
    let after = snapshot(&stored);
    audit::record(&state, &tenant, &caller, "agent.create", ("agent", name.as_str()), None, Some(after)).await;
    let entry = stored_entry(stored);
    let mut response = (StatusCode::CREATED, Json(AgentView::from_entry(&entry, true))).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/api/agents/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Replace a stored definition; the save appends a new version.
#[utoipa::path(put, path = "/api/agents/{name}", tag = "agents", request_body = AgentDefinition,
    params(("name" = String, Path, description = "Agent name")),
    responses((status = 200, body = AgentView), problem::BadRequest, problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "agents.replace", skip_all)]
pub async fn replace(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    ApiJson(def): ApiJson<AgentDefinition>,
) -> ApiResult<Json<AgentView>> {
    let name = agent_name(&name)?;
    if def.name != name.as_str() {
        return Err(ApiError::bad_request(
            "name_mismatch",
            format!("The body names '{}' but the path names '{name}'; rename by creating a new agent.", def.name),
        ));
    }
    refuse_code_agent(&state, &name)?;
    check(&state, &tenant, &def).await?;
    let before = state.runtime.stores.definitions.get(&tenant, &name).await?.as_ref().map(snapshot);
    let now = state.runtime.platform.clock.now();
    let stored = state.runtime.stores.definitions.update(&tenant, def, now).await.map_err(|e| match e {
        StoreError::NotFound => ApiError::agent_not_found(name.as_str()),
        other => other.into(),
    })?;
    state.runtime.catalog.moved(&tenant);
    let after = Some(snapshot(&stored));
    audit::record(&state, &tenant, &caller, "agent.update", ("agent", name.as_str()), before, after).await;
    let entry = stored_entry(stored);
    Ok(Json(AgentView::from_entry(&entry, true)))
}

/// Delete a stored definition.
#[utoipa::path(delete, path = "/api/agents/{name}", tag = "agents",
    params(("name" = String, Path, description = "Agent name")),
    responses((status = 204), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "agents.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(name): Path<String>) -> ApiResult<StatusCode> {
    let name = agent_name(&name)?;
    refuse_code_agent(&state, &name)?;
    let before = state.runtime.stores.definitions.get(&tenant, &name).await?.as_ref().map(snapshot);
    if state.runtime.stores.definitions.delete(&tenant, &name).await? {
        state.runtime.catalog.moved(&tenant);
        audit::record(&state, &tenant, &caller, "agent.delete", ("agent", name.as_str()), before, None).await;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::agent_not_found(name.as_str()))
    }
}

/// Check a definition without saving it and without calling a model. An invalid
/// definition is an answer (`200` with `valid: false`), not a transport failure.
#[utoipa::path(post, path = "/api/agents/validate", tag = "agents", request_body = AgentDefinition,
    responses((status = 200, body = ValidationReport), problem::BadRequest))]
#[tracing::instrument(name = "agents.validate", skip_all)]
pub async fn validate(
    Ctx { state, tenant, .. }: Ctx,
    ApiJson(def): ApiJson<AgentDefinition>,
) -> ApiResult<Json<ValidationReport>> {
    Ok(Json(state.runtime.catalog.validate(&tenant, &def).await?))
}

/// A stored version as the audit trail keeps it.
fn snapshot(stored: &StoredDefinition) -> serde_json::Value {
    serde_json::json!({"version": stored.version, "definition": stored.definition})
}

fn stored_entry(stored: StoredDefinition) -> CatalogEntry {
    CatalogEntry {
        definition: std::sync::Arc::new(stored.definition),
        source: AgentSource::Stored,
        version: Some(stored.version),
        created_at: Some(stored.created_at),
        updated_at: Some(stored.updated_at),
    }
}

/// One stored version: a full snapshot.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentVersionView {
    pub version: u32,
    /// When this version was written.
    pub created_at: DateTime<Utc>,
    pub definition: AgentDefinition,
}

impl From<StoredDefinition> for AgentVersionView {
    fn from(s: StoredDefinition) -> Self {
        Self { version: s.version, created_at: s.updated_at, definition: s.definition }
    }
}

/// Every version of a stored definition, newest first: full snapshots, not deltas.
#[utoipa::path(get, path = "/api/agents/{name}/versions", tag = "agents",
    params(("name" = String, Path, description = "Agent name")),
    responses((status = 200, body = [AgentVersionView]), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "agents.versions", skip_all)]
pub async fn versions(
    Ctx { state, tenant, .. }: Ctx,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<AgentVersionView>>> {
    let name = agent_name(&name)?;
    refuse_code_agent(&state, &name)?;
    let versions = state.runtime.stores.definitions.versions(&tenant, &name).await?;
    if versions.is_empty() {
        return Err(ApiError::agent_not_found(name.as_str()));
    }
    Ok(Json(versions.into_iter().map(AgentVersionView::from).collect()))
}

/// Two versions side by side.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionDiff {
    pub a: AgentVersionView,
    pub b: AgentVersionView,
}

/// Both snapshots, verbatim; the client computes the diff.
#[utoipa::path(get, path = "/api/agents/{name}/versions/{a}/diff/{b}", tag = "agents",
    params(("name" = String, Path, description = "Agent name"), ("a" = u32, Path, description = "Version"), ("b" = u32, Path, description = "Version")),
    responses((status = 200, body = VersionDiff), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "agents.diff", skip_all)]
pub async fn diff(
    Ctx { state, tenant, .. }: Ctx,
    Path((name, a, b)): Path<(String, String, String)>,
) -> ApiResult<Json<VersionDiff>> {
    let name = agent_name(&name)?;
    refuse_code_agent(&state, &name)?;
    let a = load_version(&state, &tenant, &name, &a).await?;
    let b = load_version(&state, &tenant, &name, &b).await?;
    Ok(Json(VersionDiff { a: a.into(), b: b.into() }))
}

async fn load_version(state: &AppState, tenant: &TenantId, name: &AgentName, raw: &str) -> ApiResult<StoredDefinition> {
    let missing =
        || ApiError::new(StatusCode::NOT_FOUND, "version_not_found", format!("'{name}' has no version {raw}."));
    let version = raw.parse::<u32>().map_err(|_| missing())?;
    state.runtime.stores.definitions.version(tenant, name, version).await?.ok_or_else(missing)
}

/// Which version to go back to.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackRequest {
    #[schema(minimum = 1)]
    pub version: u32,
}

/// Write an old version's content as a new version. History only moves forward, so a
/// rollback is itself auditable and can be rolled back in turn.
#[utoipa::path(post, path = "/api/agents/{name}/rollback", tag = "agents", request_body = RollbackRequest,
    params(("name" = String, Path, description = "Agent name")),
    responses((status = 200, body = AgentView), problem::BadRequest, problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "agents.rollback", skip_all)]
pub async fn rollback(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<RollbackRequest>,
) -> ApiResult<Json<AgentView>> {
    let name = agent_name(&name)?;
    refuse_code_agent(&state, &name)?;
    let old = load_version(&state, &tenant, &name, &body.version.to_string()).await?;
    // The old content must still compile today (a tool may have been removed since).
    check(&state, &tenant, &old.definition).await?;
    let before = state.runtime.stores.definitions.get(&tenant, &name).await?.as_ref().map(snapshot);
    let now = state.runtime.platform.clock.now();
    let stored = state.runtime.stores.definitions.update(&tenant, old.definition, now).await.map_err(|e| match e {
        StoreError::NotFound => ApiError::agent_not_found(name.as_str()),
        other => other.into(),
    })?;
    state.runtime.catalog.moved(&tenant);
    let after = Some(snapshot(&stored));
    audit::record(&state, &tenant, &caller, "agent.rollback", ("agent", name.as_str()), before, after).await;
    Ok(Json(AgentView::from_entry(&stored_entry(stored), true)))
}

async fn check(state: &AppState, tenant: &TenantId, def: &AgentDefinition) -> ApiResult<()> {
    let report = state.runtime.catalog.validate(tenant, def).await?;
    if report.valid { Ok(()) } else { Err(ApiError::validation(report.problems)) }
}

fn refuse_code_agent(state: &AppState, name: &AgentName) -> ApiResult<()> {
    if state.runtime.catalog.is_code_agent(name.as_str()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "agent_is_code_defined",
            format!(
                "'{name}' is defined in code; code agents are read-only and win every name clash, so a stored copy would never run."
            ),
        ));
    }
    Ok(())
}

fn invalid_name(message: String) -> tracon_core::report::Problem {
    tracon_core::report::Problem::new(tracon_core::report::ProblemCode::InvalidName, "name", message)
}
