//! `/api/tenants/{id}/providers` and `/api/tenants/{id}/egress`: a tenant's own provider
//! credentials (BYOK) and the providers its agents may call (scope `SecurityAdmin`).
//!
//! A binding stores the *name* of a configuration key under the tenant's part of
//! `Tracon:ProviderKeys:`, never a key: a value sent instead is refused without being echoed,
//! and a read says only whether the name resolves now. Who sees what follows
//! `/api/tenants`: a caller of the default tenant (the operator) manages every tenant's, any
//! other caller only its own — another tenant's answers as a missing one. Every change is
//! audited before it is applied.

use axum::Json;
use axum::extract::Path;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracon_core::identity::Caller;
use tracon_core::model::byok::{ProviderBinding, ProviderEgress, TenantCredential};
use tracon_core::names::TenantId;
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx};
use crate::state::AppState;

/// Longest endpoint a binding may name.
const MAX_ENDPOINT_LEN: usize = 2_048;
/// Most providers an egress policy may list.
const MAX_ALLOWED_PROVIDERS: usize = 64;

/// A binding to write.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutBinding {
    /// The configuration key holding the tenant's API key, under
    /// `Tracon:ProviderKeys:{tenantId}:` (the default tenant: `Tracon:ProviderKeys:`).
    #[schema(min_length = 1, max_length = 256)]
    pub api_key_configuration_name: String,
    /// The tenant's own endpoint for the provider (HTTPS; checked by the egress guard).
    #[serde(default)]
    #[schema(max_length = 2048)]
    pub endpoint: Option<String>,
}

/// A binding as read: never the key, only whether its name resolves now.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingView {
    pub provider: String,
    pub api_key_configuration_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The name holds a value now.
    pub resolved: bool,
    /// The provider takes a tenant credential; a binding to one that does not fails every run
    /// `provider_credential_unsupported`.
    pub supported: bool,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// An egress policy to write.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutEgress {
    /// The registered providers the tenant's agents may call.
    #[schema(max_items = 64)]
    pub allowed_providers: Vec<String>,
}

/// A tenant's egress policy as read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressView {
    /// Whether a policy is saved (without one the tenant may call every provider).
    pub restricted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_providers: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
}

fn tenant_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "tenant_not_found", "The tenant does not exist.")
}

/// The tenant `raw` names, when the caller may manage it; otherwise the missing answer.
fn managed(caller_tenant: &TenantId, raw: &str) -> ApiResult<TenantId> {
    let id = TenantId::parse(raw).map_err(|_| tenant_not_found())?;
    let operator = *caller_tenant == TenantId::default_tenant();
    if operator || id == *caller_tenant { Ok(id) } else { Err(tenant_not_found()) }
}

/// A registered provider's name, lowercase; `400` for any other.
fn registered(state: &AppState, raw: &str) -> ApiResult<String> {
    state.runtime.catalog.providers().get(raw).map(|p| p.name().to_ascii_lowercase()).ok_or_else(|| {
        ApiError::bad_request("unknown_provider", "No model provider of that name is registered.")
            .with("field", "provider")
    })
}

fn view(state: &AppState, tenant: &TenantId, b: ProviderBinding) -> BindingView {
    let keys = state.runtime.tenant_providers.settings();
    let probe = TenantCredential { api_key: "probe", endpoint: None };
    let supported =
        state.runtime.catalog.providers().get(&b.provider).is_some_and(|p| p.with_credential(&probe).is_some());
    BindingView {
        resolved: keys.resolves(tenant, &b.api_key_configuration_name),
        supported,
        provider: b.provider,
        api_key_configuration_name: b.api_key_configuration_name,
        endpoint: b.endpoint,
        updated_at: b.updated_at,
    }
}

async fn audited(
    state: &AppState,
    (tenant, caller): (&TenantId, &Caller),
    action: &str,
    entity: &str,
    before: Option<Value>,
    after: Option<Value>,
) -> ApiResult<()> {
    audit::record_before_apply(
        state,
        tenant,
        caller,
        action,
        ("provider_policy", entity),
        before.as_ref(),
        after.as_ref(),
    )
    .await
}

/// The tenant's credential bindings, by provider.
#[utoipa::path(get, path = "/api/tenants/{id}/providers", tag = "security",
    params(("id" = String, Path, description = "Tenant id")),
    responses((status = 200, body = Vec<BindingView>), problem::NotFound))]
#[tracing::instrument(name = "tenants.providers.list", skip_all)]
pub async fn list_providers(
    Ctx { state, tenant, .. }: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<BindingView>>> {
    let id = managed(&tenant, &id)?;
    let bindings = state.runtime.stores.tenant_providers.bindings(&id).await?;
    Ok(Json(bindings.into_iter().map(|b| view(&state, &id, b)).collect()))
}

/// Bind the tenant's own credential to a provider (replacing one there was).
#[utoipa::path(put, path = "/api/tenants/{id}/providers/{provider}", tag = "security", request_body = PutBinding,
    params(("id" = String, Path, description = "Tenant id"), ("provider" = String, Path, description = "A registered provider")),
    responses((status = 200, body = BindingView), problem::BadRequest, problem::NotFound, problem::Unavailable))]
#[tracing::instrument(name = "tenants.providers.put", skip_all)]
pub async fn put_provider(
    Ctx { state, tenant, caller }: Ctx,
    Path((id, provider)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBinding>,
) -> ApiResult<Json<BindingView>> {
    let id = managed(&tenant, &id)?;
    let provider = registered(&state, &provider)?;
    let policies = &state.runtime.tenant_providers;
    if !policies.state(&id).await?.allows(&provider) {
        return Err(ApiError::bad_request(
            "provider_not_allowed",
            "The tenant's egress policy does not allow this provider.",
        )
        .with("field", "provider"));
    }
    let name = body.api_key_configuration_name.trim();
    if name.len() > tracon_core::secret_names::MAX_KEY_NAME_LEN {
        return Err(ApiError::bad_request("validation_failed", "'apiKeyConfigurationName' is at most 256 characters.")
            .with("field", "apiKeyConfigurationName"));
    }
    policies.settings().names.check_write(&id, name).map_err(|refused| {
        ApiError::bad_request("validation_failed", refused.message("apiKeyConfigurationName"))
            .with("field", "apiKeyConfigurationName")
    })?;
    let endpoint = body.endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned);
    if let Some(url) = &endpoint {
        let refused = |why: String| {
            ApiError::bad_request("validation_failed", format!("'endpoint' {why}.")).with("field", "endpoint")
        };
        if url.len() > MAX_ENDPOINT_LEN {
            return Err(refused(format!("is at most {MAX_ENDPOINT_LEN} characters")));
        }
        policies.settings().check_endpoint(url).map_err(|e| refused(format!("is refused by the egress guard: {e}")))?;
    }
    let store = &state.runtime.stores.tenant_providers;
    let before = store.bindings(&id).await?.into_iter().find(|b| b.provider == provider);
    let binding = ProviderBinding {
        provider: provider.clone(),
        api_key_configuration_name: name.to_owned(),
        endpoint,
        updated_at: state.runtime.platform.clock.now(),
    };
    let json = |b: &ProviderBinding| serde_json::to_value(b).ok();
    audited(&state, (&id, &caller), "provider_binding.put", &provider, before.as_ref().and_then(json), json(&binding))
        .await?;
    store.put_binding(&id, &binding).await?;
    policies.forget(&id);
    Ok(Json(view(&state, &id, binding)))
}

/// Remove the tenant's binding: its calls to the provider use the host's credential again.
#[utoipa::path(delete, path = "/api/tenants/{id}/providers/{provider}", tag = "security",
    params(("id" = String, Path, description = "Tenant id"), ("provider" = String, Path, description = "The provider")),
    responses((status = 204), problem::NotFound, problem::Unavailable))]
#[tracing::instrument(name = "tenants.providers.delete", skip_all)]
pub async fn delete_provider(
    Ctx { state, tenant, caller }: Ctx,
    Path((id, provider)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let id = managed(&tenant, &id)?;
    let provider = provider.to_ascii_lowercase();
    let store = &state.runtime.stores.tenant_providers;
    let not_bound = || ApiError::new(StatusCode::NOT_FOUND, "binding_not_found", "The tenant has no binding for it.");
    let before = store.bindings(&id).await?.into_iter().find(|b| b.provider == provider).ok_or_else(not_bound)?;
    audited(&state, (&id, &caller), "provider_binding.delete", &provider, serde_json::to_value(&before).ok(), None)
        .await?;
    store.delete_binding(&id, &provider).await?;
    state.runtime.tenant_providers.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}

/// The tenant's egress policy (`restricted: false` without one).
#[utoipa::path(get, path = "/api/tenants/{id}/egress", tag = "security",
    params(("id" = String, Path, description = "Tenant id")),
    responses((status = 200, body = EgressView), problem::NotFound))]
#[tracing::instrument(name = "tenants.egress.get", skip_all)]
pub async fn get_egress(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<EgressView>> {
    let id = managed(&tenant, &id)?;
    let policy = state.runtime.stores.tenant_providers.egress(&id).await?;
    Ok(Json(egress_view(policy)))
}

fn egress_view(policy: Option<ProviderEgress>) -> EgressView {
    EgressView {
        restricted: policy.is_some(),
        updated_at: policy.as_ref().map(|p| p.updated_at),
        allowed_providers: policy.map(|p| p.allowed_providers),
    }
}

/// Narrow the providers the tenant's agents may call. Refused while a credential binding names
/// a provider it leaves out (remove the binding first), so the two can never disagree.
#[utoipa::path(put, path = "/api/tenants/{id}/egress", tag = "security", request_body = PutEgress,
    params(("id" = String, Path, description = "Tenant id")),
    responses((status = 200, body = EgressView), problem::BadRequest, problem::NotFound, problem::Unavailable))]
#[tracing::instrument(name = "tenants.egress.put", skip_all)]
pub async fn put_egress(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PutEgress>,
) -> ApiResult<Json<EgressView>> {
    let id = managed(&tenant, &id)?;
    if body.allowed_providers.len() > MAX_ALLOWED_PROVIDERS {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("'allowedProviders' lists at most {MAX_ALLOWED_PROVIDERS} providers."),
        )
        .with("field", "allowedProviders"));
    }
    let mut allowed = Vec::with_capacity(body.allowed_providers.len());
    for (i, raw) in body.allowed_providers.iter().enumerate() {
        let name = registered(&state, raw).map_err(|e| e.with("field", format!("allowedProviders[{i}]")))?;
        if !allowed.contains(&name) {
            allowed.push(name);
        }
    }
    allowed.sort();
    let store = &state.runtime.stores.tenant_providers;
    if let Some(bound) = store.bindings(&id).await?.into_iter().find(|b| !allowed.contains(&b.provider)) {
        return Err(ApiError::bad_request(
            "provider_binding_exists",
            format!("The tenant has a credential binding for '{}', which this policy leaves out.", bound.provider),
        )
        .with("field", "allowedProviders"));
    }
    let before = store.egress(&id).await?;
    let policy = ProviderEgress { allowed_providers: allowed, updated_at: state.runtime.platform.clock.now() };
    let json = |p: &ProviderEgress| serde_json::to_value(p).ok();
    audited(&state, (&id, &caller), "egress_policy.put", "egress", before.as_ref().and_then(json), json(&policy))
        .await?;
    store.put_egress(&id, &policy).await?;
    state.runtime.tenant_providers.forget(&id);
    Ok(Json(egress_view(Some(policy))))
}

/// Remove the tenant's egress policy: it may call every provider again.
#[utoipa::path(delete, path = "/api/tenants/{id}/egress", tag = "security",
    params(("id" = String, Path, description = "Tenant id")),
    responses((status = 204), problem::NotFound, problem::Unavailable))]
#[tracing::instrument(name = "tenants.egress.delete", skip_all)]
pub async fn delete_egress(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id = managed(&tenant, &id)?;
    let store = &state.runtime.stores.tenant_providers;
    let before = store.egress(&id).await?.ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "egress_policy_not_found", "The tenant has no egress policy.")
    })?;
    audited(&state, (&id, &caller), "egress_policy.delete", "egress", serde_json::to_value(&before).ok(), None).await?;
    store.delete_egress(&id).await?;
    state.runtime.tenant_providers.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}
