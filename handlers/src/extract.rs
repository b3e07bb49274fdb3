//! Request extractors that answer bad input with a clear problem document.
//!
//! [`ApiJson`] enforces the content type (`415`), the body limit before reading it all
//! (`413`), JSON syntax (`400 invalid_json`) and shape with the offending path
//! (`400 validation_failed`). [`Paging`] parses `skip`/`take` (`take` clamped to 1..200).

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{StatusCode, header, request::Parts};
use serde::de::DeserializeOwned;

use tracon_core::identity::Caller;
use tracon_core::names::TenantId;

use crate::error::ApiError;
use crate::state::AppState;

/// `#[serde(default = "crate::extract::default_true")]`: a flag that is on unless a body
/// says otherwise (`enabled`).
pub(crate) fn default_true() -> bool {
    true
}

/// A JSON request body.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.http.max_body_bytes;
        let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let mime = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        if mime != "application/json" && !mime.ends_with("+json") {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Send the body as JSON with 'Content-Type: application/json'.",
            ));
        }
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(too_large(limit));
        }
        let bytes = axum::body::to_bytes(req.into_body(), limit).await.map_err(|_| too_large(limit))?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// A JSON request body that may be left out: no body is `T::default()`; a body is held to
/// [`ApiJson`]'s rules.
pub struct OptionalJson<T>(pub T);

impl<T: DeserializeOwned + Default> FromRequest<AppState> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.http.max_body_bytes;
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| too_large(limit))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        let req = Request::from_parts(parts, axum::body::Body::from(bytes));
        ApiJson::from_request(req, state).await.map(|ApiJson(v)| OptionalJson(v))
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("The request body is larger than {limit} bytes."),
    )
}

/// Parses a JSON body — an object — telling syntax errors from shape errors and naming the
/// field. A string holding U+0000 is refused with the field's path ([`tracon_core::text`]).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("invalid_json", "The request body is empty; send a JSON object."));
    }
    if let Some(field) = nul_field(bytes) {
        return Err(crate::error::nul_refused(&field));
    }
    // Every body is an object. Said first: serde reads a struct from an array too (`[]` would
    // be a body with every field left out), and "the wrong shape" would name a field.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
            Ok(_) => {
                ApiError::bad_request("validation_failed", "The request body must be a JSON object.").with("field", "")
            }
            Err(e) => not_json(&e),
        });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(v) => match de.end() {
            Ok(()) => Ok(v),
            Err(e) => Err(ApiError::bad_request(
                "invalid_json",
                format!(
                    "The request body has trailing characters after the JSON value (line {}, column {}).",
                    e.line(),
                    e.column()
                ),
            )),
        },
        Err(err) => {
            let path = err.path().to_string();
            let inner = err.into_inner();
            if inner.is_syntax() || inner.is_eof() {
                Err(not_json(&inner))
            } else {
                // serde's data errors describe the expected shape; they carry no secret.
                let message = strip_position(&inner.to_string());
                let detail = if path.is_empty() || path == "." {
                    format!("The request body has the wrong shape: {message}.")
                } else {
                    format!("'{path}': {message}.")
                };
                Err(ApiError::bad_request("validation_failed", detail)
                    .with("field", if path == "." { String::new() } else { path }))
            }
        }
    }
}

/// `400 invalid_json`, saying where the syntax broke.
fn not_json(e: &serde_json::Error) -> ApiError {
    ApiError::bad_request(
        "invalid_json",
        format!("The request body is not valid JSON (line {}, column {}).", e.line(), e.column()),
    )
}

/// The path of the first string holding U+0000, when the body spells one (`\u0000`): only
/// then is it parsed a second time to find where.
fn nul_field(bytes: &[u8]) -> Option<String> {
    const ESCAPE: &[u8] = b"\\u0000";
    let mut at = 0;
    let spelled = loop {
        match bytes[at..].iter().position(|b| *b == b'\\') {
            None => break false,
            Some(i) if bytes[at + i..].starts_with(ESCAPE) => break true,
            // Skip the escaped character too, so `\\u0000` (a backslash, then text) is not one.
            Some(i) => at += i + 2,
        }
        if at >= bytes.len() {
            break false;
        }
    };
    if !spelled {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(bytes).ok().and_then(|v| tracon_core::text::nul_path(&v))
}

/// Refuses a query parameter holding U+0000 (`%00`) with a `400` naming it, for every route
/// alike — before any handler, store or filter sees it.
pub async fn reject_nul_query(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let query = request.uri().query().unwrap_or_default();
    if query.contains("%00") {
        let bad = form_urlencoded::parse(query.as_bytes())
            .find(|(k, v)| tracon_core::text::has_nul(k) || tracon_core::text::has_nul(v));
        if let Some((key, _)) = bad {
            return crate::error::nul_refused(&key.replace('\0', "\\u0000")).into_response();
        }
    }
    next.run(request).await
}

fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// `skip` / `take` list parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    pub skip: usize,
    pub take: usize,
}

pub const DEFAULT_TAKE: usize = 50;
pub const MAX_TAKE: usize = 200;

impl<S: Send + Sync> FromRequestParts<S> for Paging {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let mut paging = Paging { skip: 0, take: DEFAULT_TAKE };
        for pair in parts.uri.query().unwrap_or_default().split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let parse = |v: &str, name: &str| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request("validation_failed", format!("'{name}' must be an integer."))
                        .with("field", name)
                })
            };
            let below = |name: &str, min: i64| {
                ApiError::bad_request("validation_failed", format!("'{name}' must be at least {min}."))
                    .with("field", name)
            };
            match key {
                "skip" => {
                    let skip = parse(value, "skip")?;
                    paging.skip = usize::try_from(skip).map_err(|_| below("skip", 0))?;
                }
                "take" => {
                    // Above the maximum is clamped (a client asking for "everything" gets a
                    // page); below one is a mistake.
                    let take = parse(value, "take")?;
                    if take < 1 {
                        return Err(below("take", 1));
                    }
                    paging.take = usize::try_from(take).unwrap_or(MAX_TAKE).min(MAX_TAKE);
                }
                _ => {}
            }
        }
        Ok(paging)
    }
}

/// The tenant of the request, as the access layer resolved it (an API key's tenant, or the
/// default tenant). Every store call of a handler takes it from here.
pub struct Tenant(pub TenantId);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // The access layer always inserts a caller; without one, refuse rather than guess.
        parts
            .extensions
            .get::<Caller>()
            .map(|c| Tenant(c.tenant.clone()))
            .ok_or_else(|| ApiError::unauthorized("The request was not authenticated."))
    }
}

/// What most handlers start from: the state, the caller the access layer authenticated, and
/// the tenant it acts for.
pub struct Ctx {
    pub state: AppState,
    pub tenant: TenantId,
    pub caller: Caller,
}

impl FromRequestParts<AppState> for Ctx {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        // The access layer always inserts a caller; without one, refuse rather than guess.
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("The request was not authenticated."))?;
        Ok(Self { state: state.clone(), tenant: caller.tenant.clone(), caller })
    }
}

/// The request's headers as `(lowercase name, value)`, what the attribution port reads
/// (values that are not visible ASCII are left out).
pub fn header_pairs(headers: &axum::http::HeaderMap) -> Vec<(String, String)> {
    headers.iter().filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_owned(), v.to_owned()))).collect()
}
