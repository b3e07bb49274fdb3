//! `/api/mcp-servers`: a tenant's remote MCP servers (scope `AgentsAdmin`) — the MCP client's
//! registrations — and `POST /api/mcp-servers/refresh`, which asks them again now.
//!
//! A registration names a Streamable HTTP endpoint (`http`/`https` only, through the egress
//! guard; there is no `stdio`), the *names* of the configuration keys its credential headers
//! are read from (never a value: one sent instead is refused without being echoed), and
//! whether its tools ask for approval — by default they do. Turning that off waives approval
//! for every tool of the server, so an API key also needs `SecurityAdmin` to save such a
//! server when it is new, when it asked for approval before, or when its endpoint changes.
//!
//! Every write is audited before it is applied. Another tenant's server answers as a missing
//! one. A discovery is never run on a save: the next run (or `refresh`) asks the server.
//!
//! A server that needs OAuth carries an `oauth` object instead of an authorization key; its
//! tokens are obtained and forgotten through `oauth.rs`'s routes. A registration whose
//! endpoint or `oauth` object changes forgets them (they were issued for the old one), and so
//! does removing the server.

pub mod oauth;

use oauth::{McpOAuthView, authorize_server, callback, forget};

use std::collections::BTreeMap;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete as delete_route, get, post};
use serde::{Deserialize, Serialize};
use tracon_core::identity::Caller;
use tracon_core::keys::Scope;
use tracon_core::mcp::oauth::{MAX_CLIENT_ID_LEN, MAX_SCOPE_LEN, MAX_SCOPES, McpOAuthConfig};
use tracon_core::mcp::{MAX_ENDPOINT_LEN, MAX_HEADERS, McpDiscovery, McpServer, McpServerName, McpServerRecord};
use tracon_core::names::TenantId;
use tracon_core::secret_names::colon_spelling;
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, ProblemDetails, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// The MCP servers group.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/mcp-servers", get(list).post(create))
        .route("/api/mcp-servers/refresh", post(refresh))
        .route("/api/mcp-servers/{name}", get(read).put(replace).delete(delete))
        .route("/api/mcp-servers/{name}/oauth/authorize", post(authorize_server))
        .route("/api/mcp-servers/{name}/oauth", delete_route(forget))
        .route("/api/mcp-servers/oauth/callback", get(callback))
}

/// A server registration (the body of `POST` and `PUT`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerBody {
    /// Lowercase letters, digits and `-`, starting with a letter, at most 32 characters; its
    /// tools are named `{name}_{tool}`. Required on `POST`; on `PUT` it may be left out, and
    /// must match the path when given.
    #[serde(default)]
    #[schema(pattern = "^[a-z][a-z0-9-]{0,31}$")]
    pub name: Option<String>,
    /// The server's Streamable HTTP endpoint: `https://…` (plain `http` only where
    /// `Tracon:Egress:AllowHttp` allows it). No `stdio`.
    #[schema(max_length = 2048)]
    pub endpoint: String,
    /// The NAME of the configuration key whose value is sent as the `Authorization` header
    /// (`Bearer …`), under the tenant's partition of `Tracon:McpSecrets:`. Never the value.
    #[serde(default)]
    pub authorization_configuration_key: Option<String>,
    /// Other credential headers: header name → the NAME of the configuration key its value is
    /// read from (same partition). At most 16.
    #[serde(default)]
    pub header_configuration_keys: BTreeMap<String, String>,
    /// Whether the server's tools ask for approval before each call. Default `true`; `false`
    /// needs `SecurityAdmin` as well.
    #[serde(default = "crate::extract::default_true")]
    pub requires_approval: bool,
    /// The server needs an OAuth access token, obtained once through
    /// `POST /api/mcp-servers/{name}/oauth/authorize`. Not with `authorizationConfigurationKey`.
    #[serde(default)]
    pub oauth: Option<McpOAuthBody>,
}

/// The `oauth` object of a registration.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpOAuthBody {
    /// The client id registered with the authorization server (at most 256 visible
    /// characters). Without it Tracon registers itself (RFC 7591 dynamic client registration).
    #[serde(default)]
    #[schema(max_length = 256)]
    pub client_id: Option<String>,
    /// The NAME of the configuration key holding the client secret, under the tenant's
    /// partition of `Tracon:McpSecrets:` (needs `clientId`). Never the value.
    #[serde(default)]
    pub client_secret_configuration_key: Option<String>,
    /// The scopes to ask for (at most 32, each 1–128 visible characters); none: those the
    /// server advertises.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// A server as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerView {
    #[serde(flatten)]
    pub server: McpServerRecord,
    /// Whether every named configuration key holds a value now.
    pub credentials_resolved: bool,
    /// What the server last said it offers (none before the first discovery, and after the
    /// registration changes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery: Option<McpDiscovery>,
    /// The OAuth configuration and whether Tracon holds a token (never the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth: Option<McpOAuthView>,
}

async fn view(state: &AppState, tenant: &TenantId, server: McpServer) -> ApiResult<McpServerView> {
    let settings = state.runtime.mcp.settings();
    let record = &server.record;
    let credentials_resolved = record
        .authorization_configuration_key
        .iter()
        .chain(record.header_configuration_keys.values())
        .chain(record.oauth.as_ref().and_then(|o| o.client_secret_configuration_key.as_ref()))
        .all(|key| settings.secret(tenant, key).is_some());
    let oauth = oauth::oauth_view(state, tenant, record).await?;
    // The configuration is shown once, inside the view's `oauth` object.
    let mut shown = server.record;
    shown.oauth = None;
    Ok(McpServerView { server: shown, credentials_resolved, discovery: server.discovery, oauth })
}

async fn views(state: &AppState, tenant: &TenantId, servers: Vec<McpServer>) -> ApiResult<Vec<McpServerView>> {
    let mut out = Vec::with_capacity(servers.len());
    for server in servers {
        out.push(view(state, tenant, server).await?);
    }
    Ok(out)
}

fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "mcp_server_not_found", "The MCP server does not exist.")
}

fn invalid(field: &str, detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("validation_failed", detail).with("field", field)
}

/// A path name that is no valid server name names no server.
fn path_name(raw: &str) -> ApiResult<McpServerName> {
    McpServerName::parse(raw).map_err(|_| not_found())
}

/// Headers a registration may not set: the protocol's own, the transport's, and
/// `Authorization` (which has its own field).
fn reserved_header(name: &str) -> bool {
    const RESERVED: [&str; 12] = [
        "authorization",
        "content-type",
        "content-length",
        "accept",
        "host",
        "connection",
        "transfer-encoding",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    ];
    let lower = name.to_ascii_lowercase();
    RESERVED.contains(&lower.as_str()) || lower.starts_with("mcp-param-")
}

/// Checks a body and builds the record it describes. `before` is the record it replaces: a
/// key name that record already stores is kept as it is.
fn record_of(
    state: &AppState,
    (tenant, caller): (&TenantId, &Caller),
    name: McpServerName,
    body: McpServerBody,
    before: Option<&McpServerRecord>,
) -> ApiResult<McpServerRecord> {
    let settings = state.runtime.mcp.settings();
    let endpoint = body.endpoint.trim().to_owned();
    if endpoint.len() > MAX_ENDPOINT_LEN {
        return Err(invalid("endpoint", format!("The endpoint is longer than {MAX_ENDPOINT_LEN} characters.")));
    }
    settings.check_endpoint(&endpoint).map_err(|why| invalid("endpoint", why))?;
    let kept = |key: &str| {
        before.is_some_and(|b| {
            b.authorization_configuration_key
                .iter()
                .chain(b.header_configuration_keys.values())
                .chain(b.oauth.as_ref().and_then(|o| o.client_secret_configuration_key.as_ref()))
                .any(|k| k == key)
        })
    };
    let key_name = |field: &str, raw: &str| -> ApiResult<String> {
        let key = colon_spelling(raw.trim());
        if !kept(&key)
            && let Err(refused) = settings.secret_names.check_write(tenant, &key)
        {
            // The value is never echoed: a secret pasted here by mistake must not come back.
            return Err(invalid(field, refused.message(field)).with("allowedPrefix", &refused.allowed_prefix));
        }
        Ok(key)
    };
    let authorization_configuration_key = body
        .authorization_configuration_key
        .as_deref()
        .map(|k| key_name("authorizationConfigurationKey", k))
        .transpose()?;
    if body.header_configuration_keys.len() > MAX_HEADERS {
        return Err(invalid("headerConfigurationKeys", format!("At most {MAX_HEADERS} headers are allowed.")));
    }
    let mut header_configuration_keys = BTreeMap::new();
    for (header, key) in &body.header_configuration_keys {
        const FIELD: &str = "headerConfigurationKeys";
        let valid = !header.is_empty() && http::HeaderName::from_bytes(header.as_bytes()).is_ok();
        if !valid || reserved_header(header) {
            return Err(invalid(
                FIELD,
                "A header name is not one a server registration may set: a valid header name, and not the protocol's own headers, Content-Type, Accept or Authorization (which has its own field).",
            ));
        }
        header_configuration_keys.insert(header.clone(), key_name(FIELD, key)?);
    }
    let oauth = match body.oauth {
        None => None,
        Some(_) if authorization_configuration_key.is_some() => {
            return Err(invalid(
                "oauth",
                "'oauth' and 'authorizationConfigurationKey' are exclusive: the Authorization header carries either the OAuth access token or the configured value.",
            ));
        }
        Some(o) => Some(oauth_config(o, |k| key_name("oauth.clientSecretConfigurationKey", k))?),
    };
    // Waiving approval for every tool of a server is a security decision.
    let waives = !body.requires_approval
        && before.is_none_or(|b| b.requires_approval || !b.endpoint.eq_ignore_ascii_case(&endpoint));
    if waives && !caller.allows(Scope::SecurityAdmin) {
        return Err(ApiError::forbidden(
            "insufficient_scope",
            "Saving an MCP server whose tools skip approval needs the 'SecurityAdmin' scope as well as 'AgentsAdmin'.",
        )
        .with("requiredScope", Scope::SecurityAdmin.as_str()));
    }
    let now = state.runtime.platform.clock.now();
    Ok(McpServerRecord {
        name,
        endpoint,
        authorization_configuration_key,
        header_configuration_keys,
        requires_approval: body.requires_approval,
        oauth,
        created_at: before.map_or(now, |b| b.created_at),
        updated_at: now,
    })
}

/// A scope token or client id: visible ASCII without spaces, quotes or backslashes (RFC 6749
/// appendix A).
fn oauth_token_text(value: &str, max: usize) -> bool {
    !value.is_empty()
        && value.len() <= max
        && value.bytes().all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// Checks an `oauth` object; `key_name` checks the secret's key name as every other key name.
fn oauth_config(body: McpOAuthBody, key_name: impl Fn(&str) -> ApiResult<String>) -> ApiResult<McpOAuthConfig> {
    let client_id = body.client_id.map(|c| c.trim().to_owned());
    if let Some(id) = &client_id
        && !oauth_token_text(id, MAX_CLIENT_ID_LEN)
    {
        return Err(invalid(
            "oauth.clientId",
            format!(
                "A client id is 1 to {MAX_CLIENT_ID_LEN} visible characters, without spaces, quotes or backslashes."
            ),
        ));
    }
    let client_secret_configuration_key = body.client_secret_configuration_key.as_deref().map(key_name).transpose()?;
    if client_secret_configuration_key.is_some() && client_id.is_none() {
        return Err(invalid(
            "oauth.clientSecretConfigurationKey",
            "A client secret belongs to a configured 'oauth.clientId' (a dynamically registered client gets its own).",
        ));
    }
    if body.scopes.len() > MAX_SCOPES {
        return Err(invalid("oauth.scopes", format!("At most {MAX_SCOPES} scopes are allowed.")));
    }
    if let Some(bad) = body.scopes.iter().position(|s| !oauth_token_text(s, MAX_SCOPE_LEN)) {
        return Err(invalid(
            "oauth.scopes",
            format!(
                "Scope {bad} is not 1 to {MAX_SCOPE_LEN} visible characters without spaces, quotes or backslashes."
            ),
        ));
    }
    let mut scopes = body.scopes;
    scopes.dedup();
    Ok(McpOAuthConfig { client_id, client_secret_configuration_key, scopes })
}

async fn audited(
    state: &AppState,
    (tenant, caller): (&TenantId, &Caller),
    action: &str,
    name: &McpServerName,
    before: Option<&McpServerRecord>,
    after: Option<&McpServerRecord>,
) -> ApiResult<()> {
    let before = before.and_then(|r| serde_json::to_value(r).ok());
    let after = after.and_then(|r| serde_json::to_value(r).ok());
    let entity = ("mcp_server", name.as_str());
    audit::record_before_apply(state, tenant, caller, action, entity, before.as_ref(), after.as_ref()).await
}

/// The tenant's MCP servers, ordered by name, with what each last said it offers.
#[utoipa::path(get, path = "/api/mcp-servers", tag = "mcp_servers",
    params(("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<McpServerView>)))]
#[tracing::instrument(name = "mcp_servers.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<McpServerView>>> {
    let rows = state.runtime.mcp.store().list(&tenant, paging.skip, paging.take).await?;
    Ok(Json(views(&state, &tenant, rows).await?))
}

/// One MCP server.
#[utoipa::path(get, path = "/api/mcp-servers/{name}", tag = "mcp_servers", params(("name" = String, Path, description = "Server name")),
    responses((status = 200, body = McpServerView), problem::NotFound))]
#[tracing::instrument(name = "mcp_servers.get", skip_all)]
pub async fn read(Ctx { state, tenant, .. }: Ctx, Path(name): Path<String>) -> ApiResult<Json<McpServerView>> {
    let name = path_name(&name)?;
    let found = state.runtime.mcp.store().get(&tenant, &name).await?.ok_or_else(not_found)?;
    Ok(Json(view(&state, &tenant, found).await?))
}

/// Register an MCP server (`409` when the name is taken). Audited before it is applied.
#[utoipa::path(post, path = "/api/mcp-servers", tag = "mcp_servers", request_body = McpServerBody,
    responses((status = 201, description = "Registered", body = McpServerView), problem::BadRequest,
        (status = 403, description = "Approval off without SecurityAdmin", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "A server of that name exists", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "mcp_servers.create", skip_all)]
pub async fn create(Ctx { state, tenant, caller }: Ctx, ApiJson(body): ApiJson<McpServerBody>) -> ApiResult<Response> {
    let raw = body.name.clone().ok_or_else(|| invalid("name", "'name' is required."))?;
    let name = McpServerName::parse(&raw).map_err(|e| invalid("name", e.0))?;
    let store = state.runtime.mcp.store();
    if store.get(&tenant, &name).await?.is_some() {
        return Err(ApiError::new(StatusCode::CONFLICT, "conflict", "An MCP server of that name exists."));
    }
    let record = record_of(&state, (&tenant, &caller), name.clone(), body, None)?;
    audited(&state, (&tenant, &caller), "mcp_server.create", &name, None, Some(&record)).await?;
    let stored = store.put(&tenant, &record).await?;
    let shown = view(&state, &tenant, McpServer { record: stored, discovery: None }).await?;
    let mut response = (StatusCode::CREATED, Json(shown)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/api/mcp-servers/{name}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Replace an MCP server's registration (its discovery is forgotten: the next run or refresh
/// asks the server again). Audited before it is applied.
#[utoipa::path(put, path = "/api/mcp-servers/{name}", tag = "mcp_servers", request_body = McpServerBody,
    params(("name" = String, Path, description = "Server name")),
    responses((status = 200, description = "Replaced", body = McpServerView), problem::BadRequest, problem::NotFound,
        (status = 403, description = "Approval off without SecurityAdmin", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "mcp_servers.put", skip_all)]
pub async fn replace(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<McpServerBody>,
) -> ApiResult<Json<McpServerView>> {
    let name = path_name(&name)?;
    if body.name.as_deref().is_some_and(|n| n != name.as_str()) {
        return Err(
            ApiError::bad_request("name_mismatch", "The body's 'name' differs from the path's.").with("field", "name")
        );
    }
    let store = state.runtime.mcp.store();
    let before = store.get(&tenant, &name).await?.ok_or_else(not_found)?.record;
    let record = record_of(&state, (&tenant, &caller), name.clone(), body, Some(&before))?;
    audited(&state, (&tenant, &caller), "mcp_server.update", &name, Some(&before), Some(&record)).await?;
    let stored = store.put(&tenant, &record).await?;
    // Tokens were issued for the old endpoint (the RFC 8707 resource) and client.
    if before.oauth != stored.oauth || before.endpoint != stored.endpoint {
        state.runtime.mcp.oauth().delete_tokens(&tenant, &name).await?;
    }
    Ok(Json(view(&state, &tenant, McpServer { record: stored, discovery: None }).await?))
}

/// Remove an MCP server: agents that name its tools no longer get them. Audited before it is
/// applied.
#[utoipa::path(delete, path = "/api/mcp-servers/{name}", tag = "mcp_servers", params(("name" = String, Path, description = "Server name")),
    responses((status = 204), problem::NotFound,
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "mcp_servers.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(name): Path<String>) -> ApiResult<StatusCode> {
    let name = path_name(&name)?;
    let store = state.runtime.mcp.store();
    let before = store.get(&tenant, &name).await?.ok_or_else(not_found)?.record;
    audited(&state, (&tenant, &caller), "mcp_server.delete", &name, Some(&before), None).await?;
    if !store.delete(&tenant, &name).await? {
        return Err(not_found());
    }
    state.runtime.mcp.oauth().delete_tokens(&tenant, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Which servers `POST /api/mcp-servers/refresh` asks.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RefreshQuery {
    /// One server; without it, every server of the tenant.
    pub name: Option<String>,
}

/// Ask the tenant's MCP servers (or one) for their tools, prompts and resources now. A server
/// that cannot be reached keeps no tools and carries a warning; the others are not affected.
#[utoipa::path(post, path = "/api/mcp-servers/refresh", tag = "mcp_servers", params(RefreshQuery),
    responses((status = 200, description = "Each server as just discovered", body = Vec<McpServerView>), problem::BadRequest, problem::NotFound))]
#[tracing::instrument(name = "mcp_servers.refresh", skip_all)]
pub async fn refresh(
    Ctx { state, tenant, .. }: Ctx,
    query: Result<Query<RefreshQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<McpServerView>>> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("validation_failed", e.body_text()))?;
    let mcp = &state.runtime.mcp;
    let servers = match query.name {
        Some(raw) => {
            let name = path_name(&raw)?;
            let found = mcp.store().get(&tenant, &name).await?.ok_or_else(not_found)?;
            vec![mcp.refresh(&tenant, &found.record).await?]
        }
        None => mcp.refresh_all(&tenant).await?,
    };
    Ok(Json(views(&state, &tenant, servers).await?))
}
