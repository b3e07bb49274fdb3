//! Tracon's HTTP surface: one folder per endpoint group, each with its router, sharing
//! [`AppState`]; [`groups`] is the table of groups and of the deployments made of them.
//!
//! Groups: [`agents`] (definitions, starting a run, estimating one), [`models`] (the model
//! catalog and provider health), [`runs`], [`sessions`],
//! [`approvals`], [`jobs`], [`webhooks`], [`schedules`], [`triggers`], [`openai`], [`a2a`]
//! (the A2A server), and on every deployment [`meta`] and [`security`].
//!
//! Cross-cutting: [`access`] (authentication, tenancy, scopes, rate limits), [`error`] (one
//! mapping of every refusal to a status and problem+json), [`extract`] (JSON and paging
//! with clear errors), [`sse`] (framing), [`audit`] (recording governance writes). Handlers
//! are thin: they parse, call core, and map the outcome. Nothing here names a platform or a
//! database, so it builds for wasm32.

pub mod a2a;
pub mod access;
pub mod agents;
pub mod approvals;
pub mod audit;
pub mod cors;
pub mod error;
pub mod extract;
pub mod groups;
pub mod jobs;
pub mod mcp;
pub mod mcp_servers;
pub mod meta;
pub mod models;
pub mod openai;
pub mod runs;
pub mod schedules;
pub mod security;
pub mod sessions;
pub mod skills;
pub mod sse;
pub mod state;
pub mod triggers;
pub mod webhooks;
pub mod workflows;

use axum::Router;
use axum::http::{Method, StatusCode, Uri};
use axum::middleware;

pub use access::peer::PeerAddr;
pub use state::{AppState, HttpSettings};

use crate::error::ApiError;
use crate::groups::{Deployment, EVERYWHERE};

/// Every endpoint group's routes: the local server and the `all` deployments.
pub fn all_routes() -> Router<AppState> {
    groups::deployments::ALL.routes()
}

/// Every endpoint group behind the access layers.
pub fn router(state: AppState) -> Router {
    app(state, all_routes())
}

/// What `deployment` serves: its groups and [`EVERYWHERE`], behind the access layers. A
/// serverless build names its deployment by constant, so the other groups' handlers are not
/// even linked in; a deployment answers `route_not_found` for the groups it does not serve.
pub fn deployment_app(state: AppState, deployment: &Deployment) -> Router {
    app(state, deployment.routes())
}

/// [`EVERYWHERE`]'s routes and `routes` behind the access layers, with problem+json for
/// unknown routes and methods.
pub fn app(state: AppState, routes: Router<AppState>) -> Router {
    let cors = cors::layer(&state.http.allowed_origins);
    let everywhere = EVERYWHERE.iter().fold(Router::new(), |r, group| r.merge((group.router)()));
    let router = everywhere
        .merge(routes)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(extract::reject_nul_query))
        .layer(middleware::from_fn_with_state(state.clone(), access::access))
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
