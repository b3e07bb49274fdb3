//! `/api/skills` and its versions. A save checks the skill's shape
//! ([`SkillDefinition::check_shape`]: name, sizes, resources) and answers `400` with the
//! problems; a body with `scripts` is refused before anything else.

use axum::Json;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tracon_core::definitions::StoredDefinition;
use tracon_core::error::StoreError;
use tracon_core::names::{SkillName, TenantId};
use tracon_core::report::ProblemCode;
use tracon_core::skills::{ResolvedSkill, SCRIPTS_UNSUPPORTED, SkillDefinition, SkillSource};
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// A skill as the management API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillView {
    pub name: String,
    pub description: String,
    pub source: SkillSource,
    /// `false` for code skills: their history is your source history.
    pub is_editable: bool,
    /// The stored version; `null` for code skills.
    pub version: Option<u32>,
    /// The names of the skill's resources.
    pub resource_names: Vec<String>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The whole skill (code skills too: they are text); `null` in lists.
    pub definition: Option<SkillDefinition>,
}

impl SkillView {
    fn of(skill: &ResolvedSkill, with_definition: bool) -> Self {
        let d = &skill.definition;
        Self {
            name: d.name.clone(),
            description: d.description.clone(),
            source: skill.source,
            is_editable: skill.source == SkillSource::Stored,
            version: skill.version,
            resource_names: d.resources.iter().map(|r| r.name.clone()).collect(),
            created_at: skill.created_at,
            updated_at: skill.updated_at,
            definition: with_definition.then(|| (**d).clone()),
        }
    }

    fn stored(stored: StoredDefinition<SkillDefinition>) -> Self {
        Self::of(&ResolvedSkill::stored(stored), true)
    }
}

/// One stored version: a full snapshot.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillVersionView {
    pub version: u32,
    /// When this version was written.
    pub created_at: DateTime<Utc>,
    pub definition: SkillDefinition,
}

impl From<StoredDefinition<SkillDefinition>> for SkillVersionView {
    fn from(s: StoredDefinition<SkillDefinition>) -> Self {
        Self { version: s.version, created_at: s.updated_at, definition: s.definition }
    }
}

/// Parses a path segment as a skill name (`400` when it cannot be one).
fn skill_name(raw: &str) -> ApiResult<SkillName> {
    SkillName::parse(raw).map_err(|e| ApiError::bad_request("invalid_skill_name", e.0))
}

fn skill_not_found(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "skill_not_found", format!("No skill named '{name}' exists."))
}

fn refuse_code_skill(state: &AppState, name: &str) -> ApiResult<()> {
    if state.runtime.catalog.skills().is_code_skill(name) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "skill_is_code_defined",
            format!(
                "'{name}' is a code skill; code skills are read-only and win every name clash, so a stored copy would never be used."
            ),
        ));
    }
    Ok(())
}

/// The body as a skill: `scripts` refused first (`400 skill_scripts_unsupported`), then the
/// shape (`400 validation_failed` with the problems).
fn parse(body: Value) -> ApiResult<SkillDefinition> {
    if body.get("scripts").is_some() {
        return Err(ApiError::bad_request("skill_scripts_unsupported", SCRIPTS_UNSUPPORTED));
    }
    let bytes = serde_json::to_vec(&body).map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))?;
    let skill: SkillDefinition = crate::extract::parse_json(&bytes)?;
    let problems = skill.check_shape();
    if problems.iter().any(|p| p.code == ProblemCode::SkillScriptsUnsupported) {
        return Err(ApiError::bad_request("skill_scripts_unsupported", SCRIPTS_UNSUPPORTED).with("problems", problems));
    }
    if !problems.is_empty() {
        return Err(ApiError::validation(problems));
    }
    Ok(skill)
}

/// A stored version as the audit trail keeps it.
fn snapshot(stored: &StoredDefinition<SkillDefinition>) -> Value {
    serde_json::json!({"version": stored.version, "definition": stored.definition})
}

/// List skills (code skills first, then stored ones), paged with `skip`/`take`.
#[utoipa::path(get, path = "/api/skills", tag = "skills",
    params(("skip" = Option<u32>, Query, description = "Items to skip"), ("take" = Option<u32>, Query, description = "Items to return, 1..200 (default 50)")),
    responses((status = 200, body = [SkillView])))]
#[tracing::instrument(name = "skills.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<SkillView>>> {
    let skills = state.runtime.catalog.skills().list(&tenant, paging.skip, paging.take).await?;
    Ok(Json(skills.iter().map(|s| SkillView::of(s, false)).collect()))
}

/// Read one skill, with its instructions and resources.
#[utoipa::path(get, path = "/api/skills/{name}", tag = "skills",
    params(("name" = String, Path, description = "Skill name")),
    responses((status = 200, body = SkillView), problem::NotFound))]
#[tracing::instrument(name = "skills.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(name): Path<String>) -> ApiResult<Json<SkillView>> {
    let name = skill_name(&name)?;
    let skill =
        state.runtime.catalog.skills().get(&tenant, &name).await?.ok_or_else(|| skill_not_found(name.as_str()))?;
    Ok(Json(SkillView::of(&skill, true)))
}

/// Store a new skill (version 1).
#[utoipa::path(post, path = "/api/skills", tag = "skills", request_body = SkillDefinition,
    responses((status = 201, body = SkillView), problem::BadRequest, problem::Conflict))]
#[tracing::instrument(name = "skills.create", skip_all)]
pub async fn create(Ctx { state, tenant, caller }: Ctx, ApiJson(body): ApiJson<Value>) -> ApiResult<Response> {
    let skill = parse(body)?;
    let name = skill.name.clone();
    refuse_code_skill(&state, &name)?;
    let now = state.runtime.platform.clock.now();
    let stored = state.runtime.stores.skills.create(&tenant, skill, now).await.map_err(|e| match e {
        StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "skill_exists", m),
        other => other.into(),
    })?;
    state.runtime.catalog.moved(&tenant);
    audit::record(&state, &tenant, &caller, "skill.create", ("skill", &name), None, Some(snapshot(&stored))).await;
    let mut response = (StatusCode::CREATED, Json(SkillView::stored(stored))).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/api/skills/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Replace a stored skill; the save appends a new version, and the agents that name it are
/// compiled again for their next run.
#[utoipa::path(put, path = "/api/skills/{name}", tag = "skills", request_body = SkillDefinition,
    params(("name" = String, Path, description = "Skill name")),
    responses((status = 200, body = SkillView), problem::BadRequest, problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "skills.replace", skip_all)]
pub async fn replace(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult<Json<SkillView>> {
    let name = skill_name(&name)?;
    refuse_code_skill(&state, name.as_str())?;
    let skill = parse(body)?;
    if skill.name != name.as_str() {
        return Err(ApiError::bad_request(
            "name_mismatch",
            format!("The body names '{}' but the path names '{name}'; rename by creating a new skill.", skill.name),
        ));
    }
    let skills = &state.runtime.stores.skills;
    let before = skills.get(&tenant, &name).await?.as_ref().map(snapshot);
    let now = state.runtime.platform.clock.now();
    let stored = skills.update(&tenant, skill, now).await.map_err(|e| match e {
        StoreError::NotFound => skill_not_found(name.as_str()),
        other => other.into(),
    })?;
    state.runtime.catalog.moved(&tenant);
    let after = Some(snapshot(&stored));
    audit::record(&state, &tenant, &caller, "skill.update", ("skill", name.as_str()), before, after).await;
    Ok(Json(SkillView::stored(stored)))
}

/// Delete a stored skill and its history. An agent that still names it no longer compiles
/// ("the skill was not found") until the name is removed or the skill is created again.
#[utoipa::path(delete, path = "/api/skills/{name}", tag = "skills",
    params(("name" = String, Path, description = "Skill name")),
    responses((status = 204), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "skills.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(name): Path<String>) -> ApiResult<StatusCode> {
    let name = skill_name(&name)?;
    refuse_code_skill(&state, name.as_str())?;
    let skills = &state.runtime.stores.skills;
    let before = skills.get(&tenant, &name).await?.as_ref().map(snapshot);
    if !skills.delete(&tenant, &name).await? {
        return Err(skill_not_found(name.as_str()));
    }
    state.runtime.catalog.moved(&tenant);
    audit::record(&state, &tenant, &caller, "skill.delete", ("skill", name.as_str()), before, None).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Every version of a stored skill, newest first: full snapshots, not deltas.
#[utoipa::path(get, path = "/api/skills/{name}/versions", tag = "skills",
    params(("name" = String, Path, description = "Skill name")),
    responses((status = 200, body = [SkillVersionView]), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "skills.versions", skip_all)]
pub async fn versions(
    Ctx { state, tenant, .. }: Ctx,
    Path(name): Path<String>,
) -> ApiResult<Json<Vec<SkillVersionView>>> {
    let name = skill_name(&name)?;
    refuse_code_skill(&state, name.as_str())?;
    let versions = state.runtime.stores.skills.versions(&tenant, &name).await?;
    if versions.is_empty() {
        return Err(skill_not_found(name.as_str()));
    }
    Ok(Json(versions.into_iter().map(SkillVersionView::from).collect()))
}

/// One stored version of a skill.
#[utoipa::path(get, path = "/api/skills/{name}/versions/{version}", tag = "skills",
    params(("name" = String, Path, description = "Skill name"), ("version" = u32, Path, description = "Version")),
    responses((status = 200, body = SkillVersionView), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "skills.version", skip_all)]
pub async fn version(
    Ctx { state, tenant, .. }: Ctx,
    Path((name, version)): Path<(String, String)>,
) -> ApiResult<Json<SkillVersionView>> {
    let name = skill_name(&name)?;
    refuse_code_skill(&state, name.as_str())?;
    load_version(&state, &tenant, &name, &version).await.map(|s| Json(s.into()))
}

async fn load_version(
    state: &AppState,
    tenant: &TenantId,
    name: &SkillName,
    raw: &str,
) -> ApiResult<StoredDefinition<SkillDefinition>> {
    let missing =
        || ApiError::new(StatusCode::NOT_FOUND, "version_not_found", format!("'{name}' has no version {raw}."));
    let version = raw.parse::<u32>().map_err(|_| missing())?;
    state.runtime.stores.skills.version(tenant, name, version).await?.ok_or_else(missing)
}
