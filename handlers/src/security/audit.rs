//! `/api/audit`: the tenant's trail of governance writes, and the check of its hash chain.

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tracon_core::audit::{self, AuditEntry, AuditFilter, ChainReport};
use utoipa::IntoParams;

use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{Ctx, Paging, Tenant};
use crate::state::AppState;

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
    responses((status = 200, body = [AuditEntry]), problem::BadRequest))]
#[tracing::instrument(name = "audit.list", skip_all)]
pub async fn list(
    Ctx { state, tenant, .. }: Ctx,
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
