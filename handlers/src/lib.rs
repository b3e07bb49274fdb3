//! Tracon's HTTP surface: one axum `Router` per endpoint group, sharing [`AppState`].
//!
//! - [`agents`] — `/api/agents` management and validation;
//! - [`run`] — `POST /api/agents/{name}/run`, the live SSE turn;
//! - [`meta`] — `GET /api/meta`; [`openapi`] — `GET /api/openapi.json`.
//!
//! Cross-cutting: [`auth`] (access layers), [`error`] (problem+json), [`extract`] (JSON and
//! paging with clear errors), [`sse`] (framing). Handlers are thin: they parse, authorize
//! and call core. Nothing here names a platform or a database, so it builds for wasm32.

pub mod agents;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod cors;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod jwt;
pub mod keys;
pub mod meta;
pub mod openai;
pub mod openai_responses;
pub mod openapi;
pub mod ratelimit;
pub mod run;
pub mod runs;
pub mod schedules;
pub mod sessions;
pub mod sse;
pub mod state;
pub mod tenancy;
pub mod tenants;
pub mod triggers;
pub mod webhooks;
pub mod widget;

use axum::Router;
use axum::http::{Method, StatusCode, Uri};
use axum::middleware;
use axum::routing::{delete, get, post};

pub use state::{AppState, HttpSettings, PeerAddr};

use crate::error::ApiError;

/// The agents endpoint group: definitions, their history, and starting runs (the live run
/// streams).
pub fn agents_router() -> Router<AppState> {
    Router::new()
        .route("/api/agents", get(agents::list).post(agents::create))
        .route("/api/agents/validate", post(agents::validate))
        .route("/api/agents/{name}", get(agents::get).put(agents::replace).delete(agents::delete))
        .route("/api/agents/{name}/versions", get(agents::versions))
        .route("/api/agents/{name}/versions/{a}/diff/{b}", get(agents::diff))
        .route("/api/agents/{name}/rollback", post(agents::rollback))
        .route("/api/agents/{name}/run", post(run::run))
}

/// The runs endpoint group: reading runs, their logs (streams) and statistics; cancelling.
pub fn runs_router() -> Router<AppState> {
    Router::new()
        .route("/api/runs", get(runs::list))
        .route("/api/runs/{id}", get(runs::get))
        .route("/api/runs/{id}/events", get(runs::events))
        .route("/api/runs/{id}/tools", get(runs::tools))
        .route("/api/runs/{id}/input", get(runs::input))
        .route("/api/runs/{id}/cancel", post(runs::cancel))
        .route("/api/runs/{a}/compare/{b}", get(runs::compare))
        .route("/api/stats", get(runs::stats))
        .route("/api/approvals/pending", get(approvals::pending))
        .route("/api/approvals/{id}", get(approvals::get))
        .route("/api/approvals/{id}/decision", post(approvals::decide))
        .route("/api/jobs", get(jobs::list))
        .route("/api/jobs/{id}", get(jobs::get))
        .route("/api/jobs/{id}/cancel", post(jobs::cancel))
        .route("/api/webhooks", get(webhooks::list).post(webhooks::create))
        .route("/api/webhooks/{id}", get(webhooks::get).put(webhooks::update).delete(webhooks::delete))
        .route("/api/webhooks/{id}/test", post(webhooks::test))
        .route("/api/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/models", get(openai::models))
        .route("/v1/responses", post(openai_responses::create_response))
        .route("/v1/responses/{id}", get(openai_responses::get_response))
        .route("/v1/conversations", post(openai_responses::create_conversation))
        .route(
            "/v1/conversations/{id}",
            get(openai_responses::get_conversation).delete(openai_responses::delete_conversation),
        )
        .route("/v1/conversations/{id}/items", get(openai_responses::list_conversation_items))
        .route("/api/schedules", get(schedules::list).post(schedules::create))
        .route("/api/schedules/{id}", get(schedules::get).put(schedules::update).delete(schedules::delete))
        .route("/api/triggers", get(triggers::list))
        .route("/api/triggers/{name}", get(triggers::get).put(triggers::put).delete(triggers::delete))
        .route("/api/triggers/{tenantId}/{name}", post(triggers::accept))
}

/// The sessions endpoint group.
pub fn sessions_router() -> Router<AppState> {
    Router::new()
        .route("/api/sessions", get(sessions::list))
        .route("/api/sessions/{id}", get(sessions::get).delete(sessions::delete))
        .route("/api/sessions/{id}/branch", post(sessions::branch))
}

/// The meta group: metadata and the API document.
/// Served by every host and group, like `/api/meta`: metadata, the OpenAPI document, and
/// the security administration (API keys, the audit trail, approval rules, tenants).
pub fn meta_router() -> Router<AppState> {
    Router::new()
        .route("/api/meta", get(meta::meta))
        .route("/embed.js", get(widget::embed_js))
        .route("/api/openapi.json", get(openapi::document))
        .route("/api/api-keys", get(keys::list).post(keys::create))
        .route("/api/api-keys/{id}", get(keys::get).delete(keys::revoke))
        .route("/api/api-keys/{id}/rotate", post(keys::rotate))
        .route("/api/audit", get(audit::list))
        .route("/api/audit/verify", get(audit::verify))
        .route("/api/approvals/rules", get(approvals::list_rules).post(approvals::create_rule))
        .route("/api/approvals/rules/{id}", delete(approvals::delete_rule))
        .route("/api/tenants", get(tenants::list).post(tenants::create))
        .route("/api/tenants/{id}", get(tenants::get).put(tenants::update).delete(tenants::delete))
}

/// Every endpoint group's routes: the local server and the `all` builds.
pub fn all_routes() -> Router<AppState> {
    agents_router().merge(runs_router()).merge(sessions_router())
}

/// Every endpoint group behind the access layers.
pub fn router(state: AppState) -> Router {
    app(state, all_routes())
}

/// The meta routes and `routes` (one group's router, or [`all_routes`]) behind the access
/// layers, with problem+json for unknown routes and methods. A serverless build passes its
/// group's router by name, so the other groups' handlers are not even linked in: which
/// group a deployment serves is decided at build time. A deployment of one group answers
/// `route_not_found` for the others.
pub fn app(state: AppState, routes: Router<AppState>) -> Router {
    let cors = cors::layer(&state.http.allowed_origins);
    let router = meta_router()
        .merge(routes)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(extract::reject_nul_query))
        .layer(middleware::from_fn_with_state(state.clone(), auth::access))
        .layer(middleware::from_fn(openai::envelope))
        .with_state(state);
    // Outside authentication: a browser's preflight carries no credentials.
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "route_not_found", format!("No route matches '{}'.", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("'{}' does not accept {method}.", uri.path()),
    )
}
