//! `GET /api/meta`: open without authentication, so a client can learn how to
//! authenticate before it can ask anything else. It reveals no secret.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing;
use serde::Serialize;
use utoipa::ToSchema;

use crate::state::AppState;

pub mod openapi;
pub mod widget;

/// The meta group, served by every deployment: metadata, the API document, the widget.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/meta", routing::get(meta))
        .route("/embed.js", routing::get(widget::embed_js))
        .route("/api/openapi.json", routing::get(openapi::document))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub product: &'static str,
    pub version: &'static str,
    pub authentication: AuthenticationMeta,
    pub storage: StorageMeta,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationMeta {
    /// Methods a client can present: `bearerToken` when a static token is configured, `jwt`
    /// when JWT bearer tokens are, and `apiKey` (always).
    pub methods: Vec<&'static str>,
    /// Whether callers other than loopback are served.
    pub remote_access: bool,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageMeta {
    /// Whether runs, sessions and definitions survive a restart.
    pub persistent: bool,
}

/// Server metadata (no authentication required).
#[utoipa::path(get, path = "/api/meta", tag = "meta", responses((status = 200, body = Meta)))]
pub async fn meta(State(state): State<AppState>) -> Json<Meta> {
    let mut methods = Vec::new();
    if state.http.auth_token_digest.is_some() {
        methods.push("bearerToken");
    }
    if state.jwt.is_some() {
        methods.push("jwt");
    }
    // Keys are always checked; they exist once an administrator issued one.
    methods.push("apiKey");
    Json(Meta {
        product: "tracon",
        version: env!("CARGO_PKG_VERSION"),
        authentication: AuthenticationMeta { methods, remote_access: state.http.allow_remote_access },
        storage: StorageMeta { persistent: state.runtime.stores.persistent },
    })
}
