//! `/api/tenants`: the tenant registry (scope `PlatformAdmin`).
//!
//! Records are platform-wide, so who sees what follows the caller's tenant: a caller of the
//! default tenant (the platform's operator) manages every record; a caller of any other
//! tenant sees and renames only its own, and every other record answers exactly as a
//! missing one. Every change is audited.

use axum::Json;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracon_core::error::StoreError;
use tracon_core::identity::Caller;
use tracon_core::names::TenantId;
use tracon_core::tenants::{MAX_DISPLAY_NAME, TenantRecord};
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// A new tenant record.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateTenant {
    /// The tenant id every request and store call carries.
    #[schema(pattern = "^[A-Za-z0-9._-]{1,64}$")]
    pub id: String,
    /// 1–200 characters.
    #[schema(min_length = 1, max_length = 200)]
    pub display_name: String,
}

/// A rename.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateTenant {
    #[schema(min_length = 1, max_length = 200)]
    pub display_name: String,
}

fn tenant_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "tenant_not_found", "The tenant does not exist.")
}

/// The store's `NotFound` as the tenant's `404`.
fn found<T>(result: Result<T, StoreError>) -> ApiResult<T> {
    result.map_err(|e| match e {
        StoreError::NotFound => tenant_not_found(),
        e => e.into(),
    })
}

/// Audits `action` on the record `id`: the record before and after it.
async fn audit_change(
    state: &AppState,
    (tenant, caller): (&TenantId, &Caller),
    action: &str,
    id: &TenantId,
    before: Option<&TenantRecord>,
    after: Option<&TenantRecord>,
) {
    let json = |r: Option<&TenantRecord>| r.and_then(|r| serde_json::to_value(r).ok());
    audit::record(state, tenant, caller, action, ("tenant", id.as_str()), json(before), json(after)).await;
}

fn is_operator(caller_tenant: &TenantId) -> bool {
    *caller_tenant == TenantId::default_tenant()
}

/// The record `raw` names, when the caller may see it; otherwise the missing answer.
fn visible(caller_tenant: &TenantId, raw: &str) -> ApiResult<TenantId> {
    let id = TenantId::parse(raw).map_err(|_| tenant_not_found())?;
    if is_operator(caller_tenant) || id == *caller_tenant { Ok(id) } else { Err(tenant_not_found()) }
}

fn display_name(raw: &str) -> ApiResult<String> {
    let name = raw.trim();
    if name.is_empty() || name.chars().count() > MAX_DISPLAY_NAME || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("'displayName' is 1 to {MAX_DISPLAY_NAME} characters, without control characters."),
        )
        .with("field", "displayName"));
    }
    Ok(name.to_owned())
}

/// Tenant records, ordered by id (the caller's own only, outside the default tenant).
#[utoipa::path(get, path = "/api/tenants", tag = "security",
    params(("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<TenantRecord>)))]
#[tracing::instrument(name = "tenants.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<TenantRecord>>> {
    let store = &state.runtime.stores.tenants;
    if is_operator(&tenant) {
        return Ok(Json(store.list(paging.skip, paging.take).await?));
    }
    let own = store.get(&tenant).await?;
    Ok(Json(own.into_iter().filter(|_| paging.skip == 0).collect()))
}

/// One tenant record.
#[utoipa::path(get, path = "/api/tenants/{id}", tag = "security", params(("id" = String, Path, description = "Tenant id")),
    responses((status = 200, body = TenantRecord), problem::NotFound))]
#[tracing::instrument(name = "tenants.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<TenantRecord>> {
    let id = visible(&tenant, &id)?;
    Ok(Json(state.runtime.stores.tenants.get(&id).await?.ok_or_else(tenant_not_found)?))
}

/// Register a tenant (the default tenant's callers only).
#[utoipa::path(post, path = "/api/tenants", tag = "security", request_body = CreateTenant,
    responses((status = 201, body = TenantRecord), problem::BadRequest, problem::Forbidden, problem::Conflict))]
#[tracing::instrument(name = "tenants.create", skip_all)]
pub async fn create(Ctx { state, tenant, caller }: Ctx, ApiJson(body): ApiJson<CreateTenant>) -> ApiResult<Response> {
    if !is_operator(&tenant) {
        return Err(ApiError::forbidden(
            "platform_operator_required",
            "Only a caller of the default tenant registers tenants.",
        ));
    }
    let id =
        TenantId::parse(&body.id).map_err(|e| ApiError::bad_request("validation_failed", e.0).with("field", "id"))?;
    let now = state.runtime.platform.clock.now();
    let record = TenantRecord { id, display_name: display_name(&body.display_name)?, created_at: now, updated_at: now };
    match state.runtime.stores.tenants.create(&record).await {
        Ok(()) => {}
        Err(StoreError::Conflict(_)) => {
            return Err(ApiError::new(StatusCode::CONFLICT, "tenant_exists", "A tenant with this id is registered."));
        }
        Err(e) => return Err(e.into()),
    }
    audit_change(&state, (&tenant, &caller), "tenant.create", &record.id, None, Some(&record)).await;
    Ok((StatusCode::CREATED, Json(record)).into_response())
}

/// Rename a tenant.
#[utoipa::path(put, path = "/api/tenants/{id}", tag = "security", request_body = UpdateTenant,
    params(("id" = String, Path, description = "Tenant id")),
    responses((status = 200, body = TenantRecord), problem::BadRequest, problem::NotFound))]
#[tracing::instrument(name = "tenants.update", skip_all)]
pub async fn update(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateTenant>,
) -> ApiResult<Json<TenantRecord>> {
    let id = visible(&tenant, &id)?;
    let name = display_name(&body.display_name)?;
    let store = &state.runtime.stores.tenants;
    let before = store.get(&id).await?.ok_or_else(tenant_not_found)?;
    let now = state.runtime.platform.clock.now();
    let after = found(store.update(&id, &name, now).await)?;
    audit_change(&state, (&tenant, &caller), "tenant.update", &id, Some(&before), Some(&after)).await;
    Ok(Json(after))
}

/// Remove a tenant record (the default tenant's callers only). The tenant's data stays.
#[utoipa::path(delete, path = "/api/tenants/{id}", tag = "security", params(("id" = String, Path, description = "Tenant id")),
    responses((status = 204), problem::Forbidden, problem::NotFound))]
#[tracing::instrument(name = "tenants.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id = visible(&tenant, &id)?;
    if !is_operator(&tenant) {
        return Err(ApiError::forbidden(
            "platform_operator_required",
            "Only a caller of the default tenant removes tenants.",
        ));
    }
    let removed = found(state.runtime.stores.tenants.delete(&id).await)?;
    audit_change(&state, (&tenant, &caller), "tenant.delete", &id, Some(&removed), None).await;
    Ok(StatusCode::NO_CONTENT)
}
