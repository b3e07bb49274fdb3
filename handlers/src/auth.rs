//! The access layers, in the spec's order:
//!
//! 1. `/api/meta` is open;
//! 2. a non-loopback caller gets `403` unless remote access is on (it is on only with a
//!    token behind it);
//! 3. with a static token configured, a missing or wrong `Authorization: Bearer` is `401`;
//!    the comparison is between SHA-256 digests, in constant time;
//! 4. without any authentication configured, a request that *sends* credentials is `401`
//!    too — there is nothing to check them against, and silently ignoring them would let
//!    a client believe it is authenticated.
//!
//! On serverless hosts there is no loopback: until a token is configured every route but
//! `/api/meta` answers `503 authentication_not_configured`, saying what to set.
//!
//! The resolved [`Caller`] is put into the request extensions for the handlers.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;
use tracon_core::identity::{AuthMethod, Caller};

use crate::error::ApiError;
use crate::state::{AppState, PeerAddr, digest};

/// Paths that answer without authentication.
const OPEN_PATHS: &[&str] = &["/api/meta"];

pub async fn access(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    match authenticate(&state, &request) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

fn authenticate(state: &AppState, request: &Request) -> Result<Caller, ApiError> {
    if OPEN_PATHS.contains(&request.uri().path()) {
        return Ok(Caller::anonymous());
    }
    let http = &state.http;
    if http.require_authentication && http.auth_token_digest.is_none() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "authentication_not_configured",
            "This deployment serves nothing but /api/meta until authentication is configured: set TRACON_AUTH_TOKEN (at least 16 characters) as a secret of the function or Worker.",
        ));
    }
    if !http.allow_remote_access {
        let loopback = request.extensions().get::<PeerAddr>().is_some_and(|p| p.0.ip().is_loopback());
        if !loopback {
            return Err(ApiError::forbidden(
                "remote_access_denied",
                "Only loopback callers may reach this server until authentication is configured (TRACON_AUTH_TOKEN).",
            ));
        }
    }
    let presented = request.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes());
    match (&http.auth_token_digest, presented) {
        (None, None) => Ok(Caller::anonymous()),
        (None, Some(_)) => Err(ApiError::unauthorized(
            "This server has no authentication configured, so the credentials sent cannot be checked; remove the Authorization header or configure TRACON_AUTH_TOKEN.",
        )),
        (Some(_), None) => Err(ApiError::unauthorized("Send 'Authorization: Bearer <token>'.")),
        (Some(expected), Some(value)) => {
            let token = bearer(value).ok_or_else(|| ApiError::unauthorized("Send 'Authorization: Bearer <token>'."))?;
            if bool::from(digest(token).ct_eq(expected)) {
                Ok(Caller { method: AuthMethod::StaticToken, user_id: None, permissions: Default::default() })
            } else {
                Err(ApiError::unauthorized("The bearer token is not valid."))
            }
        }
    }
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
    fn bearer_scheme_is_case_insensitive_and_requires_a_value() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer"), None);
    }
}
