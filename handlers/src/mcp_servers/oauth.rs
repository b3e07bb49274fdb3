//! OAuth for a remote MCP server whose registration carries an `oauth` object:
//!
//! - `POST /api/mcp-servers/{name}/oauth/authorize` (`AgentsAdmin`, audited): discovers the
//!   server's authorization server, registers Tracon there when no client id is configured,
//!   and answers the URL the administrator opens in a browser, valid for ten minutes;
//! - `GET /api/mcp-servers/oauth/callback` — an **open** route: the browser arrives from the
//!   authorization server, and the `state` it carries is the credential (found by its digest,
//!   taken once, refused after its expiry; anything wrong fails closed). The code is
//!   exchanged (PKCE verifier, `redirect_uri`, `resource`), the tokens stored — encrypted on
//!   Postgres — and the server discovered again;
//! - `DELETE /api/mcp-servers/{name}/oauth` (`AgentsAdmin`, audited) forgets the tokens.
//!
//! Nothing an authorization server says reaches a response or a row: its `error` parameter
//! becomes our words, its failures a reference to the log.

use axum::Json;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode, header};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tracon_core::identity::Caller;
use tracon_core::mcp::McpServerRecord;
use tracon_core::mcp::authorize::{self, OAuthError};
use tracon_core::mcp::oauth::{McpOAuthConfig, McpOAuthTokens};
use tracon_core::names::TenantId;
use utoipa::ToSchema;

use super::{not_found, path_name};
use crate::audit;
use crate::error::{ApiError, ApiResult, ProblemDetails, problem};
use crate::extract::Ctx;
use crate::state::AppState;

/// Where the administrator's browser goes next.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationStarted {
    /// The authorization server's page, with PKCE, `state` and `resource`: open it in a
    /// browser; the authorization server sends the browser back to Tracon's callback.
    pub authorization_url: String,
    /// When the authorization stops waiting for the callback.
    pub expires_at: DateTime<Utc>,
}

/// Whether Tracon holds a usable token for the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpOAuthStatus {
    NotConnected,
    Connected,
    /// The access token expired and there is no refresh token: authorize again.
    Expired,
}

/// The `oauth` object of a server as the API shows it: the configuration, and the state of
/// its tokens (never a token).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpOAuthView {
    #[serde(flatten)]
    pub config: McpOAuthConfig,
    pub status: McpOAuthStatus,
    /// When the access token expires (it is refreshed before then when there is a refresh
    /// token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The scopes the authorization server granted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub granted_scopes: Vec<String>,
}

/// The view of `record`'s `oauth` object for `tenant`.
pub async fn oauth_view(
    state: &AppState,
    tenant: &TenantId,
    record: &McpServerRecord,
) -> ApiResult<Option<McpOAuthView>> {
    let Some(config) = record.oauth.clone() else { return Ok(None) };
    let tokens = state.runtime.mcp.oauth().get_tokens(tenant, &record.name).await?;
    let now = state.runtime.platform.clock.now();
    Ok(Some(match tokens {
        None => McpOAuthView { config, status: McpOAuthStatus::NotConnected, expires_at: None, granted_scopes: vec![] },
        Some(t) => McpOAuthView {
            config,
            status: if authorize::expired(t.expires_at, t.refresh_token.is_some(), now) {
                McpOAuthStatus::Expired
            } else {
                McpOAuthStatus::Connected
            },
            expires_at: t.expires_at,
            granted_scopes: t.scopes,
        },
    }))
}

/// Tracon's callback: the setting, else from the request's `Host` and `X-Forwarded-Proto`.
fn redirect_uri(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(uri) = &state.runtime.mcp.settings().oauth_redirect_uri {
        return uri.clone();
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| matches!(*p, "http" | "https"))
        .unwrap_or("http");
    format!("{scheme}://{host}/api/mcp-servers/oauth/callback")
}

/// An OAuth failure as a response: our words, the detail in the log under a reference.
fn oauth_failure(e: &OAuthError, what: &str) -> ApiError {
    match e {
        OAuthError::NotConfigured | OAuthError::SecretMissing(_) => {
            ApiError::bad_request("mcp_oauth_not_configured", e.public_text())
        }
        _ => {
            let reference = tracon_core::failure::new_ref();
            tracing::warn!(r#ref = %reference, detail = %e, "{what}");
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "mcp_oauth_failed",
                format!("{} (ref: {reference})", e.public_text()),
            )
        }
    }
}

/// The configured client secret, read now (`None` for a public client).
fn client_secret(state: &AppState, tenant: &TenantId, record: &McpServerRecord) -> Result<Option<String>, OAuthError> {
    match record.oauth.as_ref().and_then(|o| o.client_secret_configuration_key.as_deref()) {
        Some(key) => state
            .runtime
            .mcp
            .settings()
            .secret(tenant, key)
            .map(Some)
            .ok_or_else(|| OAuthError::SecretMissing(key.to_owned())),
        None => Ok(None),
    }
}

/// Start connecting an OAuth MCP server: answers the authorization server's URL for a
/// browser (PKCE S256, RFC 8707 `resource`; Tracon registers itself first when the
/// registration names no client id). Audited before it is applied.
#[utoipa::path(post, path = "/api/mcp-servers/{name}/oauth/authorize", tag = "mcp_servers",
    params(("name" = String, Path, description = "Server name")),
    responses((status = 200, body = AuthorizationStarted),
        (status = 400, description = "The registration has no oauth object, or its client secret key holds no value", body = ProblemDetails, content_type = "application/problem+json"),
        problem::NotFound,
        (status = 502, description = "The server's OAuth metadata, or the authorization server, failed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "mcp_servers.oauth.authorize", skip_all)]
pub async fn authorize_server(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Json<AuthorizationStarted>> {
    let name = path_name(&name)?;
    let record = state.runtime.mcp.store().get(&tenant, &name).await?.ok_or_else(not_found)?.record;
    if record.oauth.is_none() {
        return Err(oauth_failure(&OAuthError::NotConfigured, ""));
    }
    client_secret(&state, &tenant, &record).map_err(|e| oauth_failure(&e, ""))?;
    let mcp = &state.runtime.mcp;
    let redirect = redirect_uri(&state, &headers);
    let started = authorize::begin(mcp.settings(), mcp.clock(), &tenant, &record, &redirect)
        .await
        .map_err(|e| oauth_failure(&e, "MCP OAuth authorization could not start"))?;
    let after = serde_json::json!({ "redirectUri": redirect, "resource": started.pending.resource,
        "scopes": started.pending.scopes, "expiresAt": started.pending.expires_at });
    let entity = ("mcp_server", name.as_str());
    audit::record_before_apply(&state, &tenant, &caller, "mcp_server.oauth_authorize", entity, None, Some(&after))
        .await?;
    mcp.oauth().put_pending(&started.pending).await?;
    Ok(Json(AuthorizationStarted {
        authorization_url: started.authorization_url,
        expires_at: started.pending.expires_at,
    }))
}

/// What the authorization server sends the browser back with.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallbackQuery {
    /// The authorization code.
    pub code: Option<String>,
    /// The `state` Tracon sent: the callback's only credential.
    pub state: Option<String>,
    /// The authorization server's refusal (`access_denied`, …).
    pub error: Option<String>,
}

/// The server connected.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OAuthConnected {
    pub connected: bool,
    pub server: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    pub scopes: Vec<String>,
    /// How many tools the server offers now (it is discovered again on connecting).
    pub tool_count: usize,
}

fn state_invalid() -> ApiError {
    ApiError::bad_request(
        "mcp_oauth_state_invalid",
        "The authorization is unknown, was already completed, or expired: start it again with POST /api/mcp-servers/{name}/oauth/authorize.",
    )
}

/// Tracon's OAuth callback, where the authorization server sends the administrator's browser.
/// Open (no credential): the `state` is looked up by its digest, used once, within ten
/// minutes. The code is exchanged and the tokens stored; the server is discovered again.
#[utoipa::path(get, path = "/api/mcp-servers/oauth/callback", tag = "mcp_servers", params(CallbackQuery),
    security(()),
    responses((status = 200, description = "Connected", body = OAuthConnected),
        (status = 400, description = "Unknown, used or expired state, or the authorization server refused", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 502, description = "The token endpoint failed", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "mcp_servers.oauth.callback", skip_all)]
pub async fn callback(
    axum::extract::State(state): axum::extract::State<AppState>,
    query: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<OAuthConnected>> {
    let Query(query) = query.map_err(|_| state_invalid())?;
    let raw_state = query.state.filter(|s| !s.is_empty() && s.len() <= 512).ok_or_else(state_invalid)?;
    let mcp = &state.runtime.mcp;
    let now = state.runtime.platform.clock.now();
    // Taken before anything else: a state is good for one attempt, whatever its outcome.
    let pending =
        mcp.oauth().take_pending(&authorize::state_digest(&raw_state), now).await?.ok_or_else(state_invalid)?;
    if let Some(code) = query.error {
        return Err(ApiError::bad_request("mcp_oauth_denied", authorize::callback_error_text(&code)));
    }
    let code = query.code.filter(|c| !c.is_empty() && c.len() <= 4096).ok_or_else(|| {
        ApiError::bad_request("mcp_oauth_denied", "The authorization server sent no authorization code.")
    })?;
    let tenant = pending.tenant.clone();
    let record = mcp.store().get(&tenant, &pending.server).await?.ok_or_else(not_found)?.record;
    let secret = client_secret(&state, &tenant, &record).map_err(|e| oauth_failure(&e, ""))?;
    let tokens = authorize::exchange(mcp.settings(), mcp.clock(), &pending, &code, secret.as_deref())
        .await
        .map_err(|e| oauth_failure(&e, "MCP OAuth code exchange failed"))?;
    let after = serde_json::json!({ "expiresAt": tokens.expires_at, "scopes": tokens.scopes });
    let entity = ("mcp_server", pending.server.as_str());
    let system = Caller::internal();
    audit::record_before_apply(&state, &tenant, &system, "mcp_server.oauth_connect", entity, None, Some(&after))
        .await?;
    let stored: McpOAuthTokens = mcp.oauth().put_tokens(&tenant, &pending.server, &tokens).await?;
    let tool_count = match mcp.refresh(&tenant, &record).await {
        Ok(server) => server.discovery.map_or(0, |d| d.tools.len()),
        Err(e) => {
            tracing::warn!(error = %e, "the discovery after an OAuth connection could not be stored");
            0
        }
    };
    Ok(Json(OAuthConnected {
        connected: true,
        server: pending.server.to_string(),
        expires_at: stored.expires_at,
        scopes: stored.scopes,
        tool_count,
    }))
}

/// Forget a server's OAuth tokens (its tools need a new authorization). Audited before it is
/// applied.
#[utoipa::path(delete, path = "/api/mcp-servers/{name}/oauth", tag = "mcp_servers",
    params(("name" = String, Path, description = "Server name")),
    responses((status = 204), problem::NotFound,
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "mcp_servers.oauth.forget", skip_all)]
pub async fn forget(Ctx { state, tenant, caller }: Ctx, Path(name): Path<String>) -> ApiResult<StatusCode> {
    let name = path_name(&name)?;
    state.runtime.mcp.store().get(&tenant, &name).await?.ok_or_else(not_found)?;
    let entity = ("mcp_server", name.as_str());
    audit::record_before_apply(&state, &tenant, &caller, "mcp_server.oauth_forget", entity, None, None).await?;
    state.runtime.mcp.oauth().delete_tokens(&tenant, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
