//! `bench-auth`: what authenticating a request costs, in process, through the router.
//!
//! The same request (`GET /api/sessions/{id}` of a session that does not exist: a scope
//! check, one store read, a 404) is sent sequentially with
//!
//! - no credentials (a loopback caller on a server without authentication): the baseline;
//! - the static bearer token;
//! - an API key, cached (the default: 5 s per instance);
//! - an API key read from the (in-memory) store on every request (`CacheSeconds` = 0);
//! - a JWT (HS256, RS256 and ES256 against a static key from configuration): the signature
//!   and claim checks on every request, nothing cached;
//!
//! and the medians and 99th percentiles are reported with what each adds to the baseline.
//! Target: an API key (lookup + digest compare + scope check) adds under 50 µs at the median.
//!
//! ```text
//! cargo run --release -p tracon-handlers --example bench-auth [-- --requests 50000]
//! ```

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/fixtures/jwt/keys.rs"]
mod jwt_keys;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use chrono::Utc;
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use jwt_keys::{EC_PRIVATE, EC_PUBLIC, RSA_PRIVATE, RSA_PUBLIC};
use tower::ServiceExt;
use tracon_core::config::Config;
use tracon_core::keys::{self, ApiKeyRecord, Scope};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::{AppState, HttpSettings, PeerAddr};

const TOKEN: &str = "a-long-enough-benchmark-token";
const ISSUER: &str = "https://issuer.example";
const AUDIENCE: &str = "tracon-api";
const HS_SECRET: &str = "an-hs256-benchmark-secret-of-more-than-32-bytes";

/// Settings that verify JWTs of `algorithm` against `key` (a secret or a public key PEM).
fn jwt_settings(algorithm: &str, key: &str) -> HttpSettings {
    let pairs = [
        ("TRACON_AUTH_TOKEN", TOKEN),
        ("Tracon__Jwt__Issuer", ISSUER),
        ("Tracon__Jwt__Audience", AUDIENCE),
        ("Tracon__Jwt__Algorithms", algorithm),
        ("Tracon__Jwt__SigningKeyConfigurationName", "Bench:JwtKey"),
        ("Bench__JwtKey", key),
    ];
    HttpSettings::from_config(&Config::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))).unwrap()
}

/// A Reader's token, valid for an hour.
fn jwt(algorithm: Algorithm, key: &EncodingKey) -> String {
    let now = Utc::now().timestamp();
    let claims = serde_json::json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "bench", "roles": ["Reader"],
        "iat": now, "exp": now + 3600});
    jsonwebtoken::encode(&Header::new(algorithm), &claims, key).unwrap()
}

async fn app(http: HttpSettings) -> (Router, String) {
    let runtime = RuntimeBuilder::new(tokio_rt::platform()).build().unwrap();
    let state = AppState::new(Arc::new(runtime), http);
    let secret = keys::generate().unwrap();
    state
        .runtime
        .stores
        .keys
        .create(&ApiKeyRecord::issued(
            &secret,
            TenantId::default_tenant(),
            "bench",
            [Scope::SessionsRead, Scope::RunsRead].into(),
            Utc::now(),
        ))
        .await
        .unwrap();
    (tracon_handlers::router(state), secret.key)
}

async fn measure(app: &Router, bearer: Option<&str>, requests: usize) -> Vec<Duration> {
    let mut times = Vec::with_capacity(requests);
    for i in 0..requests + requests / 10 {
        let mut req =
            Request::get("/api/sessions/missing-session").extension(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 1))));
        if let Some(b) = bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {b}"));
        }
        let req = req.body(Body::empty()).unwrap();
        let start = Instant::now();
        let res = app.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let _ = res.into_body().collect().await.unwrap();
        let took = start.elapsed();
        assert_eq!(status, StatusCode::NOT_FOUND);
        // The first tenth warms up (and fills the key cache).
        if i >= requests / 10 {
            times.push(took);
        }
    }
    times.sort();
    times
}

fn pct(times: &[Duration], p: f64) -> f64 {
    times[((times.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e6
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let requests =
        std::env::args().skip_while(|a| a != "--requests").nth(1).and_then(|n| n.parse().ok()).unwrap_or(20_000usize);
    let (open, _) = app(HttpSettings::default()).await;
    let (token_app, key) = app(HttpSettings::with_token(TOKEN)).await;
    let (uncached_app, uncached_key) =
        app(HttpSettings { key_cache_ttl: Duration::ZERO, ..HttpSettings::with_token(TOKEN) }).await;

    let (hs_app, _) = app(jwt_settings("HS256", HS_SECRET)).await;
    let (rs_app, _) = app(jwt_settings("RS256", RSA_PUBLIC)).await;
    let (es_app, _) = app(jwt_settings("ES256", EC_PUBLIC)).await;
    let hs = jwt(Algorithm::HS256, &EncodingKey::from_secret(HS_SECRET.as_bytes()).unwrap());
    let rs = jwt(Algorithm::RS256, &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap());
    let es = jwt(Algorithm::ES256, &EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).unwrap());

    let baseline = measure(&open, None, requests).await;
    let rows = [
        ("no credentials (baseline)", baseline.clone()),
        ("static bearer token", measure(&token_app, Some(TOKEN), requests).await),
        ("API key, cached", measure(&token_app, Some(&key), requests).await),
        ("API key, store read each time", measure(&uncached_app, Some(&uncached_key), requests).await),
        ("JWT HS256", measure(&hs_app, Some(&hs), requests).await),
        ("JWT RS256 (2048-bit)", measure(&rs_app, Some(&rs), requests).await),
        ("JWT ES256", measure(&es_app, Some(&es), requests).await),
    ];
    let base50 = pct(&baseline, 0.5);
    println!("{requests} sequential requests each, GET /api/sessions/{{id}} → 404, in process (µs)");
    println!("{:<32} {:>8} {:>8} {:>10} {:>7}", "credential", "p50", "p99", "added p50", "ratio");
    for (name, times) in &rows {
        let p50 = pct(times, 0.5);
        println!("{name:<32} {p50:>8.2} {:>8.2} {:>10.2} {:>6.2}×", pct(times, 0.99), p50 - base50, p50 / base50);
    }
}
