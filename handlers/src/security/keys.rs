//! `/api/api-keys`: tenant-bound, scoped, revocable, optionally expiring keys.
//!
//! The key itself is in the answer to create and rotate, and nowhere else: the store keeps
//! its SHA-256. A key belongs to the tenant of the caller that created it. A caller
//! authenticated with a key can only give a new key scopes its own key has — scopes narrow,
//! they never widen. Another tenant's key answers exactly as a missing one.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracon_core::error::StoreError;
use tracon_core::identity::Caller;
use tracon_core::keys::{self, ApiKeyRecord, Scope};
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, Tenant};
use crate::state::AppState;

/// Longest key name.
pub const MAX_NAME_LEN: usize = 100;

/// Create a key.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateApiKey {
    /// What the key is for (1–100 characters).
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    /// At least one scope.
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// When the key stops working (RFC 3339, in the future); none means it does not expire.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A key as listed: never the key itself.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyView {
    /// The key's id, also the lookup prefix inside the key (`trk_<id>_…`).
    pub id: String,
    pub name: String,
    pub tenant_id: String,
    pub scopes: BTreeSet<Scope>,
    /// `Active`, `Expired` or `Revoked`.
    pub status: &'static str,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub rotated_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

impl ApiKeyView {
    fn new(k: ApiKeyRecord, now: DateTime<Utc>) -> Self {
        let status = if k.revoked_at.is_some() {
            "Revoked"
        } else if k.is_active(now) {
            "Active"
        } else {
            "Expired"
        };
        Self {
            id: k.id,
            name: k.name,
            tenant_id: k.tenant.as_str().to_owned(),
            scopes: k.scopes,
            status,
            created_at: k.created_at,
            expires_at: k.expires_at,
            revoked_at: k.revoked_at,
            rotated_at: k.rotated_at,
            last_used_at: k.last_used_at,
        }
    }
}

/// A key with its secret: the one time it is shown.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuedApiKey {
    #[serde(flatten)]
    pub view: ApiKeyView,
    /// The key. Store it now: it is not shown again.
    pub key: String,
}

fn key_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "api_key_not_found", "The API key does not exist.")
}

fn key_id(raw: &str) -> ApiResult<&str> {
    if keys::is_key_id(raw) { Ok(raw) } else { Err(key_not_found()) }
}

fn no_randomness(e: String) -> ApiError {
    tracing::error!(error = %e, "cannot generate an API key");
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "key_generation_failed", "No key could be generated; try again.")
}

/// Issue a key for the caller's tenant. The answer carries the key, once.
#[utoipa::path(post, path = "/api/api-keys", tag = "security", request_body = CreateApiKey,
    responses((status = 201, body = IssuedApiKey), problem::BadRequest, problem::Forbidden))]
#[tracing::instrument(name = "keys.create", skip_all)]
pub async fn create(Ctx { state, tenant, caller }: Ctx, ApiJson(body): ApiJson<CreateApiKey>) -> ApiResult<Response> {
    let name = body.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_LEN || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("'name' is 1 to {MAX_NAME_LEN} characters, without control characters."),
        )
        .with("field", "name"));
    }
    if body.scopes.is_empty() {
        return Err(ApiError::bad_request("validation_failed", "'scopes' names at least one scope.")
            .with("field", "scopes")
            .with("allowed", Scope::ALL.map(Scope::as_str).to_vec()));
    }
    let scopes: BTreeSet<Scope> = body.scopes.into_iter().collect();
    within_own_scopes(&caller, &scopes, "issue")?;
    let now = state.runtime.platform.clock.now();
    if body.expires_at.is_some_and(|at| at <= now) {
        return Err(
            ApiError::bad_request("validation_failed", "'expiresAt' must be in the future.").with("field", "expiresAt")
        );
    }
    // A key issued by a key expires no later than its issuer.
    let issuer_expiry = match &caller.key_id {
        Some(own) => state.runtime.stores.keys.find(own).await?.and_then(|k| k.expires_at),
        None => None,
    };
    let expires_at = match (body.expires_at, issuer_expiry) {
        (Some(asked), Some(cap)) => Some(asked.min(cap)),
        (asked, cap) => asked.or(cap),
    };
    let secret = keys::generate().map_err(no_randomness)?;
    let record = ApiKeyRecord { expires_at, ..ApiKeyRecord::issued(&secret, tenant.clone(), name, scopes, now) };
    state.runtime.stores.keys.create(&record).await?;
    tracing::info!(key = %record.id, tenant = %record.tenant, "API key issued");
    let view = ApiKeyView::new(record, now);
    audit::record(&state, &tenant, &caller, "apiKey.create", ("apiKey", &view.id), None, json(&view)).await;
    let issued = IssuedApiKey { view, key: secret.key };
    Ok((StatusCode::CREATED, Json(issued)).into_response())
}

/// The tenant's keys, newest first (revoked and expired ones included).
#[utoipa::path(get, path = "/api/api-keys", tag = "security", responses((status = 200, body = [ApiKeyView])))]
#[tracing::instrument(name = "keys.list", skip_all)]
pub async fn list(State(state): State<AppState>, Tenant(tenant): Tenant) -> ApiResult<Json<Vec<ApiKeyView>>> {
    let now = state.runtime.platform.clock.now();
    let keys = state.runtime.stores.keys.list(&tenant).await?;
    Ok(Json(keys.into_iter().map(|k| ApiKeyView::new(k, now)).collect()))
}

/// One key.
#[utoipa::path(get, path = "/api/api-keys/{id}", tag = "security", params(("id" = String, Path, description = "Key id")),
    responses((status = 200, body = ApiKeyView), problem::NotFound))]
#[tracing::instrument(name = "keys.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<ApiKeyView>> {
    let now = state.runtime.platform.clock.now();
    let key = state.runtime.stores.keys.get(&tenant, key_id(&id)?).await?.ok_or_else(key_not_found)?;
    Ok(Json(ApiKeyView::new(key, now)))
}

/// Revoke a key: its next request is refused. The record stays, marked revoked.
#[utoipa::path(delete, path = "/api/api-keys/{id}", tag = "security", params(("id" = String, Path, description = "Key id")),
    responses((status = 200, body = ApiKeyView), problem::NotFound))]
#[tracing::instrument(name = "keys.revoke", skip_all)]
pub async fn revoke(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<Json<ApiKeyView>> {
    let id = key_id(&id)?;
    let now = state.runtime.platform.clock.now();
    let target = state.runtime.stores.keys.get(&tenant, id).await?.ok_or_else(key_not_found)?;
    within_own_scopes(&caller, &target.scopes, "revoke")?;
    let before = Some(ApiKeyView::new(target, now));
    let key = state.runtime.stores.keys.revoke(&tenant, id, now).await.map_err(not_found_as_missing)?;
    state.keys.forget(id);
    tracing::info!(key = %id, tenant = %tenant, "API key revoked");
    let view = ApiKeyView::new(key, now);
    let before = before.as_ref().and_then(json);
    audit::record(&state, &tenant, &caller, "apiKey.revoke", ("apiKey", id), before, json(&view)).await;
    Ok(Json(view))
}

/// Rotate a key: a new secret under the same id, name and scopes; the old secret stops
/// working at once. The answer carries the new key, once.
#[utoipa::path(post, path = "/api/api-keys/{id}/rotate", tag = "security", params(("id" = String, Path, description = "Key id")),
    responses((status = 200, body = IssuedApiKey), problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "keys.rotate", skip_all)]
pub async fn rotate(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<Json<IssuedApiKey>> {
    let id = key_id(&id)?;
    let now = state.runtime.platform.clock.now();
    let target = state.runtime.stores.keys.get(&tenant, id).await?.ok_or_else(key_not_found)?;
    within_own_scopes(&caller, &target.scopes, "rotate")?;
    let fresh = keys::secret_for(id.to_owned()).map_err(no_randomness)?;
    let key = state.runtime.stores.keys.rotate(&tenant, id, fresh.hash, now).await.map_err(|e| match e {
        StoreError::NotFound => key_not_found(),
        StoreError::Conflict(_) => {
            ApiError::new(StatusCode::CONFLICT, "api_key_revoked", "A revoked API key cannot be rotated.")
        }
        other => other.into(),
    })?;
    state.keys.forget(id);
    tracing::info!(key = %id, tenant = %tenant, "API key rotated");
    let view = ApiKeyView::new(key, now);
    audit::record(&state, &tenant, &caller, "apiKey.rotate", ("apiKey", id), None, json(&view)).await;
    Ok(Json(IssuedApiKey { view, key: fresh.key }))
}

/// A caller authenticated with a key acts only on keys whose scopes its own key has:
/// issuing, rotating (which hands out the secret) or revoking a wider key is `403`.
fn within_own_scopes(caller: &Caller, scopes: &BTreeSet<Scope>, what: &str) -> ApiResult<()> {
    let Some(own) = &caller.scopes else { return Ok(()) };
    match scopes.iter().find(|s| !own.contains(s)) {
        None => Ok(()),
        Some(extra) => Err(ApiError::forbidden(
            "insufficient_scope",
            format!("A key can only {what} keys with scopes it has itself; it lacks '{}'.", extra.as_str()),
        )
        .with("requiredScope", extra.as_str())),
    }
}

/// A key as the audit trail keeps it: the view (never the key, never its hash).
fn json(view: &ApiKeyView) -> Option<serde_json::Value> {
    serde_json::to_value(view).ok()
}

fn not_found_as_missing(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound => key_not_found(),
        other => other.into(),
    }
}
