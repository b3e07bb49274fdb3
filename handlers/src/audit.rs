//! Recording governance writes in the audit trail, for every endpoint group that changes
//! governed state (the trail's own endpoints are in [`crate::security::audit`]).
//!
//! Handlers that change governed state call [`record`] once the change is made. The entry
//! names the actor (never a credential), the action, the entity, and the state before and
//! after with secret fields masked. A failed audit write is logged at `error` with the
//! entry's action and entity; the change it describes stands (the spec's audit-before-apply
//! cases — approval decisions, trigger writes — are the deliberate exceptions, and refuse
//! instead: [`record_before_apply`]).

use serde_json::Value;
use tracon_core::audit::NewAuditEntry;
use tracon_core::identity::{AuthMethod, Caller};
use tracon_core::names::TenantId;

use crate::error::ApiError;
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
