//! Trigger definitions: `GET /api/triggers`, `GET`/`PUT`/`DELETE /api/triggers/{name}`,
//! audited before they are applied.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tracon_core::catalog::CatalogError;
use tracon_core::identity::Caller;
use tracon_core::names::{AgentName, TenantId, WorkflowName};
use tracon_core::secret_names::colon_spelling;
use tracon_core::triggers::{self as core_triggers, PayloadMode, TargetKind, TriggerName, TriggerRecord};
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, ProblemDetails, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// A trigger definition (the body of `PUT /api/triggers/{name}`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerBody {
    /// `agent` (a queued agent run) or `workflow` (a queued workflow run).
    pub target_kind: TargetKind,
    /// The agent or workflow the trigger starts.
    #[schema(pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub target_name: String,
    /// The NAME of the configuration key holding the signing secret, in the tenant's own
    /// partition: `Tracon:TriggerSecrets:Slack` for the default tenant,
    /// `Tracon:TriggerSecrets:{tenantId}:Slack` for any other (either spelling:
    /// `Tracon__TriggerSecrets__acme__Slack`), or under a prefix the operator granted the
    /// tenant. Never the secret.
    pub signing_secret_configuration_name: String,
    /// `wholeBody` (default) or `path`.
    #[serde(default)]
    pub payload_mode: PayloadMode,
    /// With `payloadMode: path`: the dotted path of the field that becomes the message.
    #[serde(default)]
    pub payload_path: Option<String>,
    /// Default `true`; a disabled trigger answers every request like a missing one.
    #[serde(default = "crate::extract::default_true")]
    pub enabled: bool,
}

/// A trigger as the API shows it.
#[derive(Debug, serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerView {
    #[serde(flatten)]
    pub trigger: TriggerRecord,
    /// Where the external system sends its signed requests (relative to the host's base path).
    pub accept_path: String,
}

impl TriggerView {
    fn new(tenant: &TenantId, trigger: TriggerRecord) -> Self {
        let accept_path = format!("/api/triggers/{tenant}/{}", trigger.name);
        Self { trigger, accept_path }
    }
}

fn trigger_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "trigger_not_found", "The trigger does not exist.")
}

fn trigger_name(raw: &str) -> ApiResult<TriggerName> {
    TriggerName::parse(raw).map_err(|e| ApiError::bad_request("invalid_trigger_name", e.0))
}

fn invalid(field: &'static str, detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("validation_failed", detail).with("field", field)
}

/// Checks a body and builds the record it describes (times are `now`). `before` is the
/// record it replaces: a key name that record already stores is kept even when it lies
/// outside the tenant's partition (it was saved before names were partitioned, and keeps
/// working for this tenant); any other name must be the tenant's.
async fn record_of(
    state: &AppState,
    tenant: &TenantId,
    name: TriggerName,
    body: TriggerBody,
    before: Option<&TriggerRecord>,
    now: DateTime<Utc>,
) -> ApiResult<TriggerRecord> {
    let key_name = colon_spelling(body.signing_secret_configuration_name.trim());
    let unchanged = before.is_some_and(|b| b.signing_secret_configuration_name.eq_ignore_ascii_case(&key_name));
    if !unchanged && let Err(refused) = state.http.triggers.secret_names.check_write(tenant, &key_name) {
        // The value is never echoed: a secret pasted here by mistake must not come back.
        const FIELD: &str = "signingSecretConfigurationName";
        return Err(invalid(FIELD, refused.message(FIELD)).with("allowedPrefix", &refused.allowed_prefix));
    }
    let payload_path = match (body.payload_mode, body.payload_path) {
        (PayloadMode::WholeBody, None) => None,
        (PayloadMode::WholeBody, Some(_)) => {
            return Err(invalid("payloadPath", "'payloadPath' goes with payloadMode 'path' only."));
        }
        (PayloadMode::Path, Some(p)) if core_triggers::is_valid_payload_path(&p) => Some(p),
        (PayloadMode::Path, _) => {
            return Err(invalid(
                "payloadPath",
                format!(
                    "payloadMode 'path' needs a dotted 'payloadPath' (for example 'event.text'), at most {} characters.",
                    core_triggers::MAX_PAYLOAD_PATH_LEN
                ),
            ));
        }
    };
    // The target must exist (an agent: and start without parameters, a trigger gives none)
    // now; if it changes later, the accept endpoint answers 422.
    match body.target_kind {
        TargetKind::Workflow => {
            let workflow = WorkflowName::parse(&body.target_name).map_err(|e| invalid("targetName", e.0))?;
            if state.runtime.stores.workflows.get(tenant, &workflow).await?.is_none() {
                return Err(invalid("targetName", format!("The workflow '{workflow}' does not exist.")));
            }
        }
        TargetKind::Agent => {
            let agent = AgentName::parse(&body.target_name).map_err(|e| invalid("targetName", e.0))?;
            match state.runtime.catalog.compile(tenant, &agent, None, &BTreeMap::new()).await {
                Ok(_) => {}
                Err(CatalogError::NotFound) => {
                    return Err(invalid("targetName", format!("The agent '{agent}' does not exist.")));
                }
                Err(CatalogError::Store(e)) => return Err(e.into()),
                Err(_) => {
                    return Err(invalid(
                        "targetName",
                        format!(
                            "The agent '{agent}' does not compile without parameters, so a trigger cannot start it."
                        ),
                    ));
                }
            }
        }
    }
    Ok(TriggerRecord {
        name,
        target_kind: body.target_kind,
        target_name: body.target_name,
        signing_secret_configuration_name: key_name,
        payload_mode: body.payload_mode,
        payload_path,
        enabled: body.enabled,
        created_at: now,
        updated_at: now,
    })
}

/// Audit before apply ([`audit::record_before_apply`]): no entry, no change.
async fn audit_first(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    action: &str,
    name: &TriggerName,
    before: Option<&TriggerRecord>,
    after: Option<&TriggerRecord>,
) -> ApiResult<()> {
    let before = before.and_then(|r| serde_json::to_value(r).ok());
    let after = after.and_then(|r| serde_json::to_value(r).ok());
    let entity = ("trigger", name.as_str());
    audit::record_before_apply(state, tenant, caller, action, entity, before.as_ref(), after.as_ref()).await
}

/// The tenant's triggers, ordered by name.
#[utoipa::path(get, path = "/api/triggers", tag = "triggers",
    params(("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<TriggerView>)))]
#[tracing::instrument(name = "triggers.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<TriggerView>>> {
    let rows = state.runtime.stores.triggers.list(&tenant, paging.skip, paging.take).await?;
    Ok(Json(rows.into_iter().map(|r| TriggerView::new(&tenant, r)).collect()))
}

/// One trigger.
#[utoipa::path(get, path = "/api/triggers/{name}", tag = "triggers", params(("name" = String, Path, description = "Trigger name")),
    responses((status = 200, body = TriggerView), problem::BadRequest, problem::NotFound))]
#[tracing::instrument(name = "triggers.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(name): Path<String>) -> ApiResult<Json<TriggerView>> {
    let name = trigger_name(&name)?;
    let found = state.runtime.stores.triggers.get(&tenant, &name).await?.ok_or_else(trigger_not_found)?;
    Ok(Json(TriggerView::new(&tenant, found)))
}

/// Define or replace a trigger (`201` when it is new). Audited before it is applied.
#[utoipa::path(put, path = "/api/triggers/{name}", tag = "triggers", request_body = TriggerBody,
    params(("name" = String, Path, description = "Trigger name")),
    responses((status = 200, description = "Replaced", body = TriggerView),
        (status = 201, description = "Created", body = TriggerView), problem::BadRequest,
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "triggers.put", skip_all)]
pub async fn put(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<TriggerBody>,
) -> ApiResult<Response> {
    let name = trigger_name(&name)?;
    let now = state.runtime.platform.clock.now();
    let store = &state.runtime.stores.triggers;
    let before = store.get(&tenant, &name).await?;
    let record = record_of(&state, &tenant, name.clone(), body, before.as_ref(), now).await?;
    let action = if before.is_some() { "trigger.update" } else { "trigger.create" };
    let mut after = record.clone();
    if let Some(b) = &before {
        after.created_at = b.created_at;
    }
    audit_first(&state, &tenant, &caller, action, &name, before.as_ref(), Some(&after)).await?;
    let stored = store.put(&tenant, &record).await?;
    let status = if before.is_some() { StatusCode::OK } else { StatusCode::CREATED };
    let view = TriggerView::new(&tenant, stored);
    let mut response = (status, Json(view)).into_response();
    if status == StatusCode::CREATED
        && let Ok(location) = HeaderValue::from_str(&format!("/api/triggers/{name}"))
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Remove a trigger. Audited before it is applied.
#[utoipa::path(delete, path = "/api/triggers/{name}", tag = "triggers", params(("name" = String, Path, description = "Trigger name")),
    responses((status = 204), problem::NotFound,
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "triggers.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(name): Path<String>) -> ApiResult<StatusCode> {
    let name = trigger_name(&name)?;
    let store = &state.runtime.stores.triggers;
    let before = store.get(&tenant, &name).await?.ok_or_else(trigger_not_found)?;
    audit_first(&state, &tenant, &caller, "trigger.delete", &name, Some(&before), None).await?;
    if !store.delete(&tenant, &name).await? {
        return Err(trigger_not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
