//! Cross-origin access for browsers: exact origins only.
//!
//! The spec's default is the strictest one: no `Access-Control-Allow-Origin` header is ever
//! sent until an origin is configured (`Tracon__AllowedOrigins__0=https://app.example.com`),
//! and there is no wildcard. A request from any other origin is answered as before, without
//! CORS headers, so the browser withholds the answer from the page. The layer sits outside
//! authentication: a preflight (`OPTIONS` with `Access-Control-Request-Method`) carries no
//! credentials and is answered here; the real request still needs them.

use std::time::Duration;

use axum::http::{HeaderValue, Method, header};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

/// How long a browser may cache a preflight answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The CORS layer for `origins` (already validated as exact, lowercase origins), or `None`
/// when there are none: then nothing about CORS is ever added to a response.
pub fn layer(origins: &[String]) -> Option<CorsLayer> {
    let origins: Vec<HeaderValue> = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
    if origins.is_empty() {
        return None;
    }
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
            // The caller's own headers (Authorization, Content-Type, Last-Event-ID, label
            // headers under a configured prefix …): safe to mirror, since only exact
            // origins get an answer at all.
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers([header::LOCATION, header::RETRY_AFTER])
            .max_age(PREFLIGHT_MAX_AGE),
    )
}
