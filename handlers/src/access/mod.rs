//! The access layers, in the spec's order:
//!
//! 1. routes the table marks [`Requirement::Open`] skip every layer below: `/api/meta`,
//!    `GET /embed.js` (the chat widget's script, `crate::widget`), the A2A agent cards, and
//!    `POST /api/triggers/{tenantId}/{name}`, whose HMAC signature authenticates it
//!    (`crate::triggers`) and whose tenant is the URL's;
//! 2. a non-loopback caller gets `403` unless remote access is on (it is on only with a
//!    token behind it);
//! 3. `Authorization: Bearer <credential>`: the static token (SHA-256 digests compared in
//!    constant time), else an API key (`trk_…`: found by its id, its digest compared in
//!    constant time, active — not revoked, not expired), else, when `Tracon:Jwt` is
//!    configured, a JWT (`crate::access::jwt`: signature, expiry, issuer, audience; a valid one
//!    naming no role → `403 no_role`). None of them → `401`. No header while a token or JWT
//!    is configured → `401`;
//! 4. the endpoint's scope: a key, or a JWT's role (`Role::scopes`), without it → `403
//!    insufficient_scope` (the table is [`requirement`]). The static token and an
//!    unauthenticated loopback caller are not narrowed by scopes;
//! 5. the tenant (`crate::access::tenancy`): an API key's tenant (a tenant header naming another is
//!    `403`), otherwise a JWT's tenant claim when a claim type is configured, otherwise the
//!    header's when that path is switched on, otherwise the default.
//!    Handlers read it from the [`Caller`] (`extract::Tenant`), so every store call is
//!    confined to it.
//!
//! Without a static token, a request that *sends* something that is not an API key is `401`
//! too — there is nothing to check it against, and silently ignoring it would let a client
//! believe it is authenticated. On serverless hosts there is no loopback: until a token is
//! configured, every route but `/api/meta` answers `503 authentication_not_configured` to
//! a request without an API key.
//!
//! 6. the rate limit, when one is configured (`crate::access::ratelimit`): `429 rate_limited`.
//!
//! Keys are cached per instance for `Tracon:ApiKeys:CacheSeconds` (5 s): a revocation or
//! rotation made through this instance applies to its very next request; one made through
//! another instance within that time.

pub mod jwt;
pub mod key_cache;
pub mod peer;
pub mod ratelimit;
pub mod tenancy;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;
use tracon_core::identity::{AuthMethod, Caller};
use tracon_core::keys::{self, Scope};

use crate::access::peer::PeerAddr;
use crate::error::ApiError;
use crate::state::{AppState, digest};

pub async fn access(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    // An open route carries no credentials by design (`/api/meta`; the trigger accept
    // endpoint, whose signature is its authentication and whose tenant is its URL's): no
    // bearer token, no tenancy header, no caller rate limit.
    if is_open(&request) {
        request.extensions_mut().insert(Caller::anonymous());
        return next.run(request).await;
    }
    let peer = request.extensions().get::<PeerAddr>().copied();
    let authorization = request.headers().get(header::AUTHORIZATION).cloned();
    let result = match authenticate(&state, authorization.as_ref(), peer).await {
        Ok(mut caller) => state
            .http
            .tenancy
            .resolve(&mut caller, request.headers())
            .and_then(|()| authorize(&caller, &request))
            .map(|()| caller),
        Err(e) => Err(e),
    };
    let caller = match result {
        Ok(caller) => caller,
        Err(e) => return e.into_response(),
    };
    if let Some(limiter) = &state.limiter
        && let Err(refused) = limiter.check(&caller, peer, state.runtime.platform.clock.now())
    {
        return refused.into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Whether the matched route is [`Requirement::Open`]. An unmatched path (a `404` to come)
/// is not: it is authenticated like any other.
fn is_open(request: &Request) -> bool {
    request
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|route| requirement(request.method(), route.as_str()) == Requirement::Open)
}

/// What an endpoint needs from a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// Open (`/api/meta`).
    Open,
    /// Any authenticated caller (the OpenAPI document).
    Authenticated,
    /// A key must carry this scope.
    Scope(Scope),
    /// A route this table does not list: no key may use it (fail closed).
    Unlisted,
}

/// The scope each route needs, by method and route template. Every route of every router
/// is listed; a route missing here is refused to every API key.
pub fn requirement(method: &Method, route: &str) -> Requirement {
    use Requirement::{Authenticated, Open, Scope as S, Unlisted};
    let read = method == Method::GET || method == Method::HEAD;
    match route {
        "/api/meta" => Open,
        // The chat widget's script: a `<script src>` sends no credentials (`crate::widget`).
        "/embed.js" => Open,
        "/api/openapi.json" => Authenticated,
        "/api/agents" | "/api/agents/{name}" => S(if read { Scope::AgentsRead } else { Scope::AgentsAdmin }),
        "/api/agents/validate" | "/api/agents/{name}/versions" | "/api/agents/{name}/versions/{a}/diff/{b}" => {
            S(Scope::AgentsRead)
        }
        "/api/agents/{name}/rollback" => S(Scope::AgentsAdmin),
        // An estimate reads the session a run would continue: it needs what the run needs.
        "/api/agents/{name}/run" | "/api/agents/{name}/estimate" => S(Scope::RunsWrite),
        // Skills are read and administered like the agent definitions that name them.
        "/api/skills" | "/api/skills/{name}" => S(if read { Scope::AgentsRead } else { Scope::AgentsAdmin }),
        "/api/skills/{name}/versions" | "/api/skills/{name}/versions/{version}" => S(Scope::AgentsRead),
        // Model metadata and provider health are read like agent definitions.
        "/api/models" | "/api/models/health/{provider}" => S(Scope::AgentsRead),
        // Workflow definitions are read and administered like agents'; running, resuming and
        // answering one starts runs.
        "/api/workflows" | "/api/workflows/{name}" => S(if read { Scope::AgentsRead } else { Scope::AgentsAdmin }),
        "/api/workflows/validate"
        | "/api/workflows/functions"
        | "/api/workflows/{name}/versions"
        | "/api/workflows/{name}/graph" => S(Scope::AgentsRead),
        "/api/workflows/{name}/run"
        | "/api/workflows/runs/{id}/resume"
        | "/api/workflows/runs/{id}/requests/{request}/respond" => S(Scope::RunsWrite),
        "/api/workflows/runs/{id}/checkpoints" | "/api/workflows/runs/{id}/requests" => S(Scope::RunsRead),
        "/api/runs"
        | "/api/runs/{id}"
        | "/api/runs/{id}/events"
        | "/api/runs/{id}/tools"
        | "/api/runs/{id}/input"
        | "/api/runs/{id}/tree"
        | "/api/runs/{a}/compare/{b}"
        | "/api/stats" => S(Scope::RunsRead),
        "/api/runs/{id}/cancel" | "/api/jobs/{id}/cancel" => S(Scope::RunsCancel),
        "/api/runs/{id}/replay" => S(Scope::RunsWrite),
        "/api/jobs" | "/api/jobs/{id}" => S(Scope::RunsRead),
        "/api/sessions" | "/api/sessions/{id}" => S(if read { Scope::SessionsRead } else { Scope::SessionsWrite }),
        "/api/sessions/{id}/branch" => S(Scope::SessionsWrite),
        "/api/api-keys" | "/api/api-keys/{id}" | "/api/api-keys/{id}/rotate" => S(Scope::SecurityAdmin),
        "/api/audit" | "/api/audit/verify" => S(Scope::AuditRead),
        "/api/approvals/pending" | "/api/approvals/{id}" | "/api/approvals/{id}/decision" => S(Scope::ApprovalsDecide),
        "/api/approvals/rules" | "/api/approvals/rules/{id}" => S(Scope::ApprovalsAdmin),
        "/api/tenants" | "/api/tenants/{id}" => S(Scope::PlatformAdmin),
        "/api/tenants/{id}/providers" | "/api/tenants/{id}/providers/{provider}" | "/api/tenants/{id}/egress" => {
            S(Scope::SecurityAdmin)
        }
        // Remote MCP servers are administered like the agents that name their tools (a server
        // whose tools skip approval also needs `SecurityAdmin`, checked by the handler).
        "/api/mcp-servers" | "/api/mcp-servers/{name}" => S(if read { Scope::AgentsRead } else { Scope::AgentsAdmin }),
        "/api/mcp-servers/refresh" => S(Scope::AgentsAdmin),
        // Connecting or disconnecting an OAuth server changes what its tools can do.
        "/api/mcp-servers/{name}/oauth/authorize" | "/api/mcp-servers/{name}/oauth" => S(Scope::AgentsAdmin),
        // The browser arrives from the authorization server: the single-use `state` is the
        // credential, and the tenant is the pending authorization's (`crate::mcp_servers`).
        "/api/mcp-servers/oauth/callback" => Open,
        // Signed by the external system instead (`crate::triggers`).
        "/api/triggers/{tenantId}/{name}" => Open,
        "/api/triggers" | "/api/triggers/{name}" => S(Scope::TriggersAdmin),
        "/api/webhooks" | "/api/webhooks/{id}" | "/api/webhooks/{id}/test" | "/api/webhooks/{id}/deliveries" => {
            S(Scope::WebhooksAdmin)
        }
        "/api/schedules" | "/api/schedules/{id}" => S(Scope::SchedulesAdmin),
        "/v1/chat/completions"
        | "/v1/models"
        | "/v1/models/{id}"
        | "/v1/responses"
        | "/v1/responses/{id}"
        | "/v1/responses/{id}/input_items"
        | "/v1/conversations"
        | "/v1/conversations/{id}"
        | "/v1/conversations/{id}/items" => S(Scope::RunsWrite),
        // The MCP server: an `ExternalInvoke` key, checked again (exactly) by the surface.
        "/mcp" => S(Scope::ExternalInvoke),
        // A2A discovery: the card names nothing a tenant wrote (`crate::a2a::card`).
        "/a2a/{agent}/.well-known/agent-card.json" => Open,
        // The handler also refuses every credential but an API key (`crate::a2a`).
        "/a2a/{agent}" => S(Scope::ExternalInvoke),
        _ => Unlisted,
    }
}

fn authorize(caller: &Caller, request: &Request) -> Result<(), ApiError> {
    let Some(scopes) = &caller.scopes else { return Ok(()) };
    // An unmatched path (a 404 to come) needs nothing: the fallback answers it.
    let Some(route) = request.extensions().get::<MatchedPath>() else { return Ok(()) };
    let needed = match requirement(request.method(), route.as_str()) {
        Requirement::Open | Requirement::Authenticated => return Ok(()),
        Requirement::Scope(scope) if scopes.contains(&scope) => return Ok(()),
        Requirement::Scope(scope) => Some(scope),
        Requirement::Unlisted => None,
    };
    let message = match (needed, caller.role) {
        (Some(scope), Some(role)) => {
            format!("The {} role lacks the '{}' scope this endpoint needs.", role.as_str(), scope.as_str())
        }
        (Some(scope), None) => format!("This API key lacks the '{}' scope this endpoint needs.", scope.as_str()),
        (None, Some(_)) => "JWT bearer tokens cannot reach this endpoint.".to_owned(),
        (None, None) => "API keys cannot reach this endpoint.".to_owned(),
    };
    let mut error = ApiError::forbidden("insufficient_scope", message);
    if let Some(scope) = needed {
        error = error.with("requiredScope", scope.as_str());
    }
    Err(error)
}

async fn authenticate(
    state: &AppState,
    authorization: Option<&HeaderValue>,
    peer: Option<PeerAddr>,
) -> Result<Caller, ApiError> {
    let http = &state.http;
    let presented = authorization.map(HeaderValue::as_bytes);
    let credential = match presented {
        Some(value) => {
            Some(bearer(value).ok_or_else(|| ApiError::unauthorized("Send 'Authorization: Bearer <token>'."))?)
        }
        None => None,
    };
    let key_id = credential.and_then(keys::parse_id);
    let jwt_configured = state.jwt.is_some();
    if http.require_authentication && http.auth_token_digest.is_none() && !jwt_configured && key_id.is_none() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "authentication_not_configured",
            "This deployment serves nothing but /api/meta until authentication is configured: set TRACON_AUTH_TOKEN (at least 16 characters) as a secret of the function or Worker, or call with an API key.",
        ));
    }
    if !http.allow_remote_access {
        let loopback = peer.is_some_and(|p| p.0.ip().is_loopback());
        if !loopback {
            return Err(ApiError::forbidden(
                "remote_access_denied",
                "Only loopback callers may reach this server until authentication is configured (TRACON_AUTH_TOKEN).",
            ));
        }
    }
    let Some(credential) = credential else {
        return match http.auth_token_digest.is_some() || jwt_configured {
            true => Err(ApiError::unauthorized("Send 'Authorization: Bearer <token>'.")),
            false => Ok(Caller::anonymous()),
        };
    };
    if let Some(expected) = &http.auth_token_digest
        && bool::from(digest(credential).ct_eq(expected))
    {
        return Ok(Caller::static_token());
    }
    if let Some(id) = key_id {
        return api_key(state, id, credential).await;
    }
    if let Some(jwt) = &state.jwt
        && crate::access::jwt::looks_like_jwt(credential)
    {
        return jwt.authenticate(credential, state.runtime.platform.clock.now(), &http.tenancy).await;
    }
    Err(ApiError::unauthorized(if http.auth_token_digest.is_some() || jwt_configured {
        "The bearer token is not valid."
    } else {
        "This server has no bearer token configured and the credential sent is not an API key; remove the Authorization header or send an API key."
    }))
}

/// Checks an API key: known, same digest (constant time), active.
async fn api_key(state: &AppState, id: &str, presented: &str) -> Result<Caller, ApiError> {
    let invalid = || ApiError::unauthorized("The API key is not valid.");
    let now = state.runtime.platform.clock.now();
    let record = state.keys.lookup(&state.runtime, id, now).await?.ok_or_else(invalid)?;
    if !bool::from(keys::digest(presented).ct_eq(&record.hash)) {
        return Err(invalid());
    }
    if record.revoked_at.is_some() {
        return Err(ApiError::unauthorized("The API key was revoked."));
    }
    if !record.is_active(now) {
        return Err(ApiError::unauthorized("The API key has expired."));
    }
    state.keys.touch_if_due(&state.runtime, &record, now);
    Ok(Caller {
        method: AuthMethod::ApiKey,
        user_id: None,
        permissions: Default::default(),
        tenant: record.tenant,
        scopes: Some(record.scopes),
        key_id: Some(record.id),
        role: None,
    })
}

/// The credential of `Bearer <credential>` (scheme case-insensitive).
fn bearer(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim()).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_meta_and_the_trigger_accept_route_are_open() {
        assert_eq!(requirement(&Method::GET, "/api/meta"), Requirement::Open);
        assert_eq!(requirement(&Method::POST, "/api/triggers/{tenantId}/{name}"), Requirement::Open);
        assert_eq!(requirement(&Method::PUT, "/api/triggers/{name}"), Requirement::Scope(Scope::TriggersAdmin));
        assert_eq!(requirement(&Method::GET, "/api/triggers"), Requirement::Scope(Scope::TriggersAdmin));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_requires_a_value() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer"), None);
    }
}
