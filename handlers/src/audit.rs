//! `/api/audit`: the trail of governance writes, and the check of its hash chain.
//!
//! Handlers that change governed state call [`record`] once the change is made. The entry
//! names the actor (never a credential), the action, the entity, and the state before and
//! after with secret fields masked. A failed audit write is logged at `error` with the
//! entry's action and entity; the change it describes stands (the spec's audit-before-apply
//! cases — approval decisions — are the deliberate exceptions, and refuse instead).

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use tracon_core::audit::{self, AuditEntry, AuditFilter, ChainReport, NewAuditEntry};
use tracon_core::identity::{AuthMethod, Caller};
use tracon_core::names::TenantId;
use utoipa::IntoParams;

use crate::error::{ApiError, ApiResult, ProblemDetails};
use crate::extract::{Paging, Tenant};
use crate::state::AppState;

/// Who did it, as the trail names them: never a credential.
pub fn actor(caller: &Caller) -> String {
    match (&caller.user_id, caller.method, &caller.key_id) {
        (Some(user), _, _) => format!("user:{user}"),
        (None, AuthMethod::ApiKey, Some(id)) => format!("key:{id}"),
        (None, AuthMethod::StaticToken, _) => "token".into(),
        (None, AuthMethod::Internal, _) => "internal".into(),
        _ => "anonymous".into(),
    }
}

/// Appends an entry for a change already made; a failure is logged, not returned.
pub async fn record(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    action: &str,
    entity: (&str, &str),
    before: Option<Value>,
    after: Option<Value>,
) {
    let now = state.runtime.platform.clock.now();
    let entry = NewAuditEntry::new(now, actor(caller), action, entity, before.as_ref(), after.as_ref());
    if let Err(e) = state.runtime.stores.audit.append(tenant, entry).await {
        tracing::error!(action, entity_type = entity.0, entity_id = entity.1, error = %e, "the audit entry was not written");
    }
}

/// Audit before apply: appends the entry of a change **about to be made**. When the entry
/// cannot be written the change must not happen: the caller gets `503 audit_unavailable`
/// and applies nothing. For the writes the spec names (approval decisions, triggers,
/// webhooks); other changes are recorded after the fact with [`record`].
pub async fn record_before_apply(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    action: &str,
    entity: (&str, &str),
    before: Option<&Value>,
    after: Option<&Value>,
) -> Result<(), ApiError> {
    let now = state.runtime.platform.clock.now();
    let entry = NewAuditEntry::new(now, actor(caller), action, entity, before, after);
    if let Err(e) = state.runtime.stores.audit.append(tenant, entry).await {
        tracing::error!(action, entity_type = entity.0, entity_id = entity.1, error = %e, "the audit entry could not be written; the change is refused");
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "audit_unavailable",
            "The change was not applied: its audit entry could not be written. Try again.",
        )
        .with_retry_after(5));
    }
    Ok(())
}

/// Filters of the trail.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// `agent`, `apiKey`, …
    pub entity_type: Option<String>,
    pub entity_id: Option<String>,
    /// `agent.create`, `apiKey.revoke`, …
    pub action: Option<String>,
    /// `token`, `key:<id>`, `user:<id>`, `anonymous`
    pub actor: Option<String>,
    /// At or after (RFC 3339).
    pub from: Option<DateTime<Utc>>,
    /// Before (RFC 3339).
    pub to: Option<DateTime<Utc>>,
    /// Entries to skip.
    pub skip: Option<i64>,
    /// Entries to return, 1..200 (default 50).
    pub take: Option<i64>,
}

/// The tenant's trail, newest first.
#[utoipa::path(get, path = "/api/audit", tag = "security", params(AuditQuery),
    responses((status = 200, body = [AuditEntry]), (status = 400, body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "audit.list", skip_all)]
pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    paging: Paging,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<AuditEntry>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("validation_failed", e.body_text()))?;
    let filter = AuditFilter {
        entity_type: q.entity_type,
        entity_id: q.entity_id,
        action: q.action,
        actor: q.actor,
        from: q.from,
        to: q.to,
    };
    Ok(Json(state.runtime.stores.audit.list(&tenant, &filter, paging.skip, paging.take).await?))
}

/// Recomputes the tenant's hash chain: `Valid`, `Broken` (an entry was edited) or `Gap` (an
/// entry was removed), with the first failing sequence number.
#[utoipa::path(get, path = "/api/audit/verify", tag = "security", responses((status = 200, body = ChainReport)))]
#[tracing::instrument(name = "audit.verify", skip_all)]
pub async fn verify(State(state): State<AppState>, Tenant(tenant): Tenant) -> ApiResult<Json<ChainReport>> {
    let chain = state.runtime.stores.audit.chain(&tenant).await?;
    Ok(Json(audit::verify(&chain)))
}
