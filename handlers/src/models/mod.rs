//! The models group: the model catalog (`GET /api/models`) and each provider's health
//! (`GET /api/models/health/{provider}`). Both describe the host's own configuration — the
//! same for every tenant — and neither stores anything: the health of a provider is cached
//! in this instance for a minute (`tracon_core::model::health`).

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use tracon_core::model::catalog::ModelDescriptor;
use tracon_core::model::health::ProviderHealth;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult, problem};
use crate::extract::Ctx;
use crate::state::AppState;

/// The models group.
pub fn router() -> Router<AppState> {
    Router::new().route("/api/models", get(list)).route("/api/models/health/{provider}", get(health))
}

/// The model catalog.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelCatalogView {
    /// The currency of every price (`Tracon:Pricing:Currency`).
    pub currency: String,
    /// Every registered provider, by name; one the host described no models for has none.
    pub providers: Vec<ProviderModels>,
}

/// One provider's models.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderModels {
    /// The name a definition's `model.provider` selects it by.
    pub provider: String,
    /// What the host describes, in configuration order. Metadata, not permission: a
    /// definition may name a model that is not listed.
    pub models: Vec<ModelDescriptor>,
}

/// The model catalog: every registered provider with the models the host describes — context
/// window, capability flags, prices. Only `supportsStructuredOutput: false` is enforced (an
/// agent asking that model for JSON does not compile); a model not listed may still be used.
#[utoipa::path(get, path = "/api/models", tag = "models", responses((status = 200, body = ModelCatalogView)))]
#[tracing::instrument(name = "models.list", skip_all)]
pub async fn list(Ctx { state, .. }: Ctx) -> Json<ModelCatalogView> {
    let runtime = &state.runtime;
    let providers = runtime.catalog.providers();
    let catalog = providers.catalog();
    Json(ModelCatalogView {
        currency: runtime.pricing.currency.clone(),
        providers: providers
            .names()
            .map(|name| ProviderModels { provider: name.to_owned(), models: catalog.models(name).to_vec() })
            .collect(),
    })
}

/// The query of a health request.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HealthQuery {
    /// `true` checks now instead of answering from this instance's cache.
    #[serde(default)]
    pub refresh: bool,
}

/// A provider's health: a cost-free reachability check (a model list with the provider's own
/// credential, never a completion), answered from this instance's cache for 60 seconds unless
/// `refresh=true`. `Unknown` for a provider without a check. A failure is classified in our
/// words; the provider's own text stays in the server log under the `ref` the message names.
#[utoipa::path(get, path = "/api/models/health/{provider}", tag = "models",
    params(("provider" = String, Path, description = "A registered provider's name (case-insensitive)"), HealthQuery),
    responses((status = 200, body = ProviderHealth), problem::NotFound))]
#[tracing::instrument(name = "models.health", skip_all)]
pub async fn health(
    Ctx { state, .. }: Ctx,
    Path(provider): Path<String>,
    query: Result<Query<HealthQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<ProviderHealth>> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("validation_failed", e.body_text()))?;
    let runtime = &state.runtime;
    let provider = runtime.catalog.providers().get(&provider).cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "provider_not_found",
            "No model provider of that name is registered; GET /api/models lists them.",
        )
    })?;
    Ok(Json(runtime.model_health.check(&provider, runtime.platform.clock.as_ref(), query.refresh).await))
}
