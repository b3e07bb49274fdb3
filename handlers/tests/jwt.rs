//! JWT bearer tokens through the router: each role reaches what its scopes open and gets
//! `403 insufficient_scope` elsewhere; every way a token can be wrong is the same generic
//! `401`; a valid token without a role is `403 no_role`; the tenant claim decides the tenant
//! and the tenant header is then never read, while an API key still outranks everything;
//! RS256 from a PEM and from a JWKS (by `kid`, refetched at most once a minute), ES256, HS256.
//! The keys are test-only fixtures (`tests/fixtures/jwt/README.md`); the JWKS is served on
//! loopback by the test itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

#[path = "fixtures/jwt/keys.rs"]
mod jwt_keys;
mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use jwt_keys::{EC_PRIVATE, EC_PUBLIC, OTHER_RSA_PRIVATE, RSA_PRIVATE, RSA_PUBLIC};
use serde_json::{Value, json};
use support::TestClock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;
use tracon_core::config::Config;
use tracon_core::keys::Scope;
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::ports::{Platform, tokio_rt};
use tracon_core::runtime::RuntimeBuilder;
use tracon_handlers::{AppState, HttpSettings, PeerAddr};

const TOKEN: &str = "a-long-enough-test-token";
const ISSUER: &str = "https://issuer.example";
const AUDIENCE: &str = "tracon-api";
const SECRET: &str = "an-hs256-test-secret-of-more-than-32-bytes";
const INVALID: &str = "The bearer token is not valid.";

/// The static token plus JWT settings verifying with `key` (the value of the configuration
/// key `Test:JwtKey`), and `extra` on top.
fn rsa_config(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    key_config(RSA_PUBLIC, extra)
}

fn key_config(key: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs = vec![("Tracon__Jwt__SigningKeyConfigurationName", "Test:JwtKey"), ("Test__JwtKey", key)];
    pairs.extend_from_slice(extra);
    base_config(&pairs)
}

fn base_config(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs =
        vec![("TRACON_AUTH_TOKEN", TOKEN), ("Tracon__Jwt__Issuer", ISSUER), ("Tracon__Jwt__Audience", AUDIENCE)];
    pairs.extend_from_slice(extra);
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

fn build_app(pairs: Vec<(String, String)>) -> (Router, AppState, Arc<TestClock>) {
    let clock = Arc::new(TestClock::default());
    let platform = Platform { clock: clock.clone(), spawner: tokio_rt::platform().spawner };
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hello from the model.").with_usage(3, 4));
    let runtime =
        RuntimeBuilder::new(platform).add_provider(Arc::new(script) as Arc<dyn ModelProvider>).build().unwrap();
    let http = HttpSettings::from_config(&Config::from_pairs(pairs)).unwrap();
    let state = AppState::new(Arc::new(runtime), http);
    (tracon_handlers::router(state.clone()), state, clock)
}

async fn call(app: &Router, method: Method, path: &str, bearer: &str, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let reply = support::call(method, path).from(support::REMOTE).bearer(bearer).headers(headers).send(app).await;
    (reply.status, reply.json())
}

async fn post(app: &Router, path: &str, bearer: &str, body: Value, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let call = support::call(Method::POST, path).from(support::REMOTE).bearer(bearer).headers(headers);
    let reply = call.json(Some(body)).send(app).await;
    (reply.status, reply.json_or_null())
}

/// Claims that pass every check, for `roles`; `edit` changes them.
fn claims(roles: Value, edit: impl FnOnce(&mut Value)) -> Value {
    let now = Utc::now().timestamp();
    let mut c = json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "roles": roles,
        "iat": now, "nbf": now - 5, "exp": now + 600,
    });
    edit(&mut c);
    c
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, key).unwrap()
}

fn rs256(claims: &Value) -> String {
    sign(Algorithm::RS256, None, &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(), claims)
}

fn assert_invalid((status, body): (StatusCode, Value), token: &str, case: &str) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}: {body}");
    assert_eq!(body["detail"], INVALID, "{case}");
    let text = body.to_string();
    for part in token.split('.').filter(|p| p.len() > 8) {
        assert!(!text.contains(part), "{case}: the answer echoes the token");
    }
}

fn assert_scope((status, body): (StatusCode, Value), scope: &str, case: &str) {
    assert_eq!(status, StatusCode::FORBIDDEN, "{case}: {body}");
    assert_eq!(body["errorType"], "insufficient_scope", "{case}");
    assert_eq!(body["requiredScope"], scope, "{case}");
    assert!(!body["detail"].as_str().unwrap().contains("API key"), "{case}: {body}");
}

#[tokio::test]
async fn each_role_reaches_what_its_scopes_open_and_nothing_else() {
    let (app, _, _) = build_app(rsa_config(&[]));
    let cancel = format!("/api/runs/{}/cancel", uuid::Uuid::now_v7());

    let reader = rs256(&claims(json!(["Reader"]), |_| {}));
    for path in ["/api/agents", "/api/runs", "/api/sessions", "/api/openapi.json"] {
        let (status, body) = call(&app, Method::GET, path, &reader, &[]).await;
        assert_eq!(status, StatusCode::OK, "Reader {path}: {body}");
    }
    assert_scope(call(&app, Method::POST, &cancel, &reader, &[]).await, "RunsCancel", "Reader cancel");
    assert_scope(call(&app, Method::GET, "/api/api-keys", &reader, &[]).await, "SecurityAdmin", "Reader keys");
    assert_scope(
        post(&app, "/api/agents/support/run", &reader, json!({"message": "hi"}), &[]).await,
        "RunsWrite",
        "Reader run",
    );

    // Several role values: the highest counts.
    let operator = rs256(&claims(json!(["Reader", "Operator"]), |_| {}));
    let (status, body) = call(&app, Method::POST, &cancel, &operator, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "Operator passes the scope check: {body}");
    let (status, body) = call(&app, Method::GET, "/api/approvals/pending", &operator, &[]).await;
    assert_ne!(status, StatusCode::FORBIDDEN, "Operator decides approvals: {body}");
    assert_scope(call(&app, Method::GET, "/api/audit", &operator, &[]).await, "AuditRead", "Operator audit");
    assert_scope(
        post(&app, "/api/agents", &operator, json!({"name": "x"}), &[]).await,
        "AgentsAdmin",
        "Operator agents",
    );

    // A single string is a role claim too.
    let admin = rs256(&claims(json!("Admin"), |_| {}));
    for path in ["/api/api-keys", "/api/audit", "/api/audit/verify", "/api/tenants"] {
        let (status, body) = call(&app, Method::GET, path, &admin, &[]).await;
        assert_eq!(status, StatusCode::OK, "Admin {path}: {body}");
    }
    // The user id claim names the actor of what the caller changes.
    let (status, issued) = post(&app, "/api/api-keys", &admin, json!({"name": "n", "scopes": ["RunsRead"]}), &[]).await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let (_, trail) = call(&app, Method::GET, "/api/audit?action=apiKey.create", &admin, &[]).await;
    assert_eq!(trail[0]["actor"], "user:alice", "{trail}");

    // The static token still works beside JWTs, and the meta document names the method.
    let (status, _) = call(&app, Method::GET, "/api/api-keys", TOKEN, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (_, meta) = call(&app, Method::GET, "/api/meta", "", &[]).await;
    assert!(meta["authentication"]["methods"].as_array().unwrap().contains(&json!("jwt")), "{meta}");
}

#[tokio::test]
async fn every_kind_of_wrong_token_is_the_same_401() {
    let (app, _, _) = build_app(rsa_config(&[("Tracon__Jwt__Algorithms", "RS256")]));
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
    let now = Utc::now().timestamp();
    let header = |alg: &str| URL_SAFE_NO_PAD.encode(json!({"alg": alg, "typ": "JWT"}).to_string());
    let payload = URL_SAFE_NO_PAD.encode(claims(json!(["Admin"]), |_| {}).to_string());
    let valid = rs256(&claims(json!(["Admin"]), |_| {}));
    let (head, rest) = valid.split_once('.').unwrap();
    let (signed_payload, signature) = rest.split_once('.').unwrap();
    let mut flipped = signature.as_bytes().to_vec();
    flipped[10] = if flipped[10] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    let other_payload = URL_SAFE_NO_PAD.encode(claims(json!(["Admin"]), |c| c["sub"] = json!("mallory")).to_string());
    let cases: Vec<(&str, String)> = vec![
        ("wrong issuer", rs256(&claims(json!(["Admin"]), |c| c["iss"] = json!("https://evil.example")))),
        ("wrong audience", rs256(&claims(json!(["Admin"]), |c| c["aud"] = json!("someone-else")))),
        ("audience list without ours", rs256(&claims(json!(["Admin"]), |c| c["aud"] = json!(["a", "b"])))),
        ("expired past the skew", rs256(&claims(json!(["Admin"]), |c| c["exp"] = json!(now - 120)))),
        ("not valid yet", rs256(&claims(json!(["Admin"]), |c| c["nbf"] = json!(now + 600)))),
        (
            "no exp",
            rs256(&claims(json!(["Admin"]), |c| {
                c.as_object_mut().unwrap().remove("exp");
            })),
        ),
        ("no iss", rs256(&claims(json!(["Admin"]), |c| c["iss"] = Value::Null))),
        (
            "signed by another key",
            sign(
                Algorithm::RS256,
                None,
                &EncodingKey::from_rsa_pem(OTHER_RSA_PRIVATE.as_bytes()).unwrap(),
                &claims(json!(["Admin"]), |_| {}),
            ),
        ),
        ("a changed signature", format!("{head}.{signed_payload}.{flipped}")),
        ("a changed payload", format!("{head}.{other_payload}.{signature}")),
        ("alg none", format!("{}.{payload}.", header("none"))),
        ("alg none with a signature", format!("{}.{payload}.{signature}", header("none"))),
        ("an unlisted algorithm", sign(Algorithm::RS384, None, &rsa, &claims(json!(["Admin"]), |_| {}))),
        (
            "HS256 keyed with the public key",
            sign(
                Algorithm::HS256,
                None,
                &EncodingKey::from_secret(RSA_PUBLIC.as_bytes()).unwrap(),
                &claims(json!(["Admin"]), |_| {}),
            ),
        ),
        ("malformed segments", "abc.def.ghi".to_owned()),
        ("a header that is not JSON", format!("{}.{payload}.{signature}", URL_SAFE_NO_PAD.encode("not json"))),
        ("a payload that is not JSON", format!("{head}.{}.{signature}", URL_SAFE_NO_PAD.encode("[1,2]"))),
        (
            "critical extensions",
            format!(
                "{}.{payload}.{signature}",
                URL_SAFE_NO_PAD.encode(json!({"alg": "RS256", "crit": ["x"]}).to_string())
            ),
        ),
        ("not a JWT at all", "not-the-token-and-not-a-key".to_owned()),
    ];
    for (case, token) in &cases {
        assert_invalid(call(&app, Method::GET, "/api/agents", token, &[]).await, token, case);
    }
    // Leeway: expired 30 s ago is still inside the 60 s skew.
    let (status, _) =
        call(&app, Method::GET, "/api/agents", &rs256(&claims(json!(["Admin"]), |c| c["exp"] = json!(now - 30))), &[])
            .await;
    assert_eq!(status, StatusCode::OK);
    // No credential at all while JWT is configured (and no static token).
    let (app, _, _) = build_app(rsa_config(&[]).into_iter().filter(|(k, _)| k != "TRACON_AUTH_TOKEN").collect());
    let res = app
        .clone()
        .oneshot(
            Request::builder()
                .uri("/api/agents")
                .extension(PeerAddr(SocketAddr::from(([203, 0, 113, 9], 40000))))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "remote access is on with JWT alone, and needs a credential");
}

#[tokio::test]
async fn a_valid_token_without_a_configured_role_is_403_no_role() {
    let (app, _, _) =
        build_app(rsa_config(&[("Tracon__Jwt__RoleClaim", "groups"), ("Tracon__Jwt__Roles__Admin", "tracon-admins")]));
    for (case, edit) in [
        ("no role claim", json!({"roles": ["Admin"]})),
        ("unmapped values", json!({"groups": ["Admin", "Reader-ish"]})),
        ("not a string", json!({"groups": 7})),
    ] {
        let token = rs256(&claims(Value::Null, |c| {
            c.as_object_mut().unwrap().remove("roles");
            c.as_object_mut().unwrap().extend(edit.as_object().unwrap().clone());
        }));
        let (status, body) = call(&app, Method::GET, "/api/agents", &token, &[]).await;
        assert_eq!((status, body["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("no_role")), "{case}: {body}");
    }
    let token = rs256(&claims(Value::Null, |c| c["groups"] = json!(["tracon-admins"])));
    let (status, body) = call(&app, Method::GET, "/api/api-keys", &token, &[]).await;
    assert_eq!(status, StatusCode::OK, "the mapped value names Admin: {body}");
}

async fn key_in(state: &AppState, tenant: &str, scopes: &[Scope]) -> String {
    support::api_key(&state.runtime, tenant, scopes, None).await
}

#[tokio::test]
async fn the_tenant_claim_decides_the_tenant_and_the_header_is_never_read() {
    let (app, state, _) = build_app(rsa_config(&[
        ("Tracon__Tenancy__Enabled", "true"),
        ("Tracon__Tenancy__AllowHeader", "true"),
        ("Tracon__Tenancy__ClaimType", "tid"),
        ("Tracon__Tenancy__AllowedTenants__0", "acme"),
        ("Tracon__Tenancy__AllowedTenants__1", "beta"),
        ("Tracon__Tenancy__AllowedTenants__2", "default"),
    ]));
    let issue = |bearer: String, headers: Vec<(&'static str, &'static str)>| {
        let app = app.clone();
        async move {
            let (status, body) =
                post(&app, "/api/api-keys", &bearer, json!({"name": "probe", "scopes": ["RunsRead"]}), &headers).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
            body["tenantId"].as_str().unwrap().to_owned()
        }
    };
    let acme = rs256(&claims(json!(["Admin"]), |c| c["tid"] = json!("acme")));
    assert_eq!(issue(acme.clone(), vec![]).await, "acme");
    assert_eq!(issue(acme.clone(), vec![("x-tenant-id", "beta")]).await, "acme", "the header is ignored");
    // No claim: the default tenant, header or not; so for the static token.
    let plain = rs256(&claims(json!(["Admin"]), |_| {}));
    assert_eq!(issue(plain, vec![("x-tenant-id", "beta")]).await, "default");
    assert_eq!(issue(TOKEN.to_owned(), vec![("x-tenant-id", "beta")]).await, "default");
    // An API key outranks everything; a header naming another tenant is still refused.
    let key = key_in(&state, "beta", &[Scope::SecurityAdmin, Scope::RunsRead]).await;
    assert_eq!(issue(key.clone(), vec![]).await, "beta");
    let (status, body) = call(&app, Method::GET, "/api/api-keys", &key, &[("x-tenant-id", "acme")]).await;
    assert_eq!((status, body["errorType"].as_str()), (StatusCode::FORBIDDEN, Some("tenant_mismatch")));
    // A claim outside the allowlist, or malformed, is refused.
    for (tid, expected) in [
        (json!("gamma"), "tenant_not_allowed"),
        (json!("Not A Tenant!"), "invalid_tenant"),
        (json!(5), "invalid_tenant"),
    ] {
        let token = rs256(&claims(json!(["Admin"]), |c| c["tid"] = tid.clone()));
        let (status, body) = call(&app, Method::GET, "/api/agents", &token, &[]).await;
        assert_eq!((status, body["errorType"].as_str()), (StatusCode::FORBIDDEN, Some(expected)), "{tid}: {body}");
    }
}

#[tokio::test]
async fn es256_and_hs256_verify_with_their_own_keys_only() {
    let (app, _, _) = build_app(key_config(EC_PUBLIC, &[]));
    let ec = EncodingKey::from_ec_pem(EC_PRIVATE.as_bytes()).unwrap();
    let token = sign(Algorithm::ES256, None, &ec, &claims(json!(["Reader"]), |_| {}));
    let (status, body) = call(&app, Method::GET, "/api/agents", &token, &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // RS256 is allowed by default, but the configured key is an EC key.
    assert_invalid(
        call(&app, Method::GET, "/api/agents", &rs256(&claims(json!(["Reader"]), |_| {})), &[]).await,
        "",
        "RS256 vs EC key",
    );

    let (app, _, _) = build_app(key_config(SECRET, &[]));
    let token = sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        &claims(json!(["Reader"]), |_| {}),
    );
    let (status, body) = call(&app, Method::GET, "/api/agents", &token, &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let wrong = sign(
        Algorithm::HS256,
        None,
        &EncodingKey::from_secret(b"another-secret-that-is-long-enough!!").unwrap(),
        &claims(json!(["Reader"]), |_| {}),
    );
    assert_invalid(call(&app, Method::GET, "/api/agents", &wrong, &[]).await, &wrong, "HS256 wrong secret");
    let hs512 = sign(
        Algorithm::HS512,
        None,
        &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        &claims(json!(["Reader"]), |_| {}),
    );
    assert_invalid(call(&app, Method::GET, "/api/agents", &hs512, &[]).await, &hs512, "HS512 not listed");
}

/// A JWKS endpoint on loopback: answers every request with the current set and counts them.
struct JwksServer {
    url: String,
    set: Arc<Mutex<Value>>,
    hits: Arc<AtomicUsize>,
}

async fn jwks_server(set: Value) -> JwksServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().unwrap());
    let set = Arc::new(Mutex::new(set));
    let hits = Arc::new(AtomicUsize::new(0));
    let (s, h) = (set.clone(), hits.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let mut buf = vec![0u8; 8192];
            let mut read = 0;
            while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf[read..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
            h.fetch_add(1, Ordering::SeqCst);
            let body = s.lock().unwrap().to_string();
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    JwksServer { url, set, hits }
}

fn jwk(private_pem: &str, kid: &str) -> Value {
    let key = EncodingKey::from_rsa_pem(private_pem.as_bytes()).unwrap();
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    serde_json::to_value(jwk).unwrap()
}

#[tokio::test]
async fn rs256_from_a_jwks_is_found_by_kid_and_refetched_at_most_once_a_minute() {
    let server = jwks_server(json!({"keys": [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "symmetric"},
        jwk(RSA_PRIVATE, "k1"),
    ]}))
    .await;
    let (app, _, clock) = build_app(base_config(&[("Tracon__Jwt__JwksUrl", &server.url)]));
    let k1 = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
    let k2 = EncodingKey::from_rsa_pem(OTHER_RSA_PRIVATE.as_bytes()).unwrap();
    let reader = claims(json!(["Reader"]), |_| {});

    let token = sign(Algorithm::RS256, Some("k1"), &k1, &reader);
    let (status, body) = call(&app, Method::GET, "/api/agents", &token, &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = call(&app, Method::GET, "/api/runs", &token, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server.hits.load(Ordering::SeqCst), 1, "the set is cached");
    // Without a kid, the set's only RSA key.
    let (status, _) = call(&app, Method::GET, "/api/agents", &sign(Algorithm::RS256, None, &k1, &reader), &[]).await;
    assert_eq!(status, StatusCode::OK);
    // The kid names the key: k1's kid on k2's signature does not verify.
    let forged = sign(Algorithm::RS256, Some("k1"), &k2, &reader);
    assert_invalid(call(&app, Method::GET, "/api/agents", &forged, &[]).await, &forged, "kid of another key");

    // The issuer rotates in k2. Within the minute an unknown kid does not refetch…
    server.set.lock().unwrap()["keys"].as_array_mut().unwrap().push(jwk(OTHER_RSA_PRIVATE, "k2"));
    let rotated = sign(Algorithm::RS256, Some("k2"), &k2, &reader);
    assert_invalid(
        call(&app, Method::GET, "/api/agents", &rotated, &[]).await,
        &rotated,
        "unknown kid, within a minute",
    );
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);
    // …after it, one refetch finds it; an unknown kid after that fetches nothing more.
    clock.advance(61);
    let rotated = sign(Algorithm::RS256, Some("k2"), &k2, &claims(json!(["Reader"]), |_| {}));
    let (status, body) = call(&app, Method::GET, "/api/agents", &rotated, &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);
    for _ in 0..3 {
        let unknown = sign(Algorithm::RS256, Some("k9"), &k2, &reader);
        assert_invalid(call(&app, Method::GET, "/api/agents", &unknown, &[]).await, &unknown, "unknown kid");
    }
    assert_eq!(server.hits.load(Ordering::SeqCst), 2, "at most one fetch a minute");
}

#[test]
fn inconsistent_jwt_settings_stop_the_start() {
    let settings = |pairs: Vec<(String, String)>| HttpSettings::from_config(&Config::from_pairs(pairs));
    let e = settings(vec![("Tracon__Jwt__Issuer".into(), ISSUER.into())]).unwrap_err().to_string();
    assert!(e.contains("Tracon__Jwt__Audience"), "{e}");
    let e = settings(key_config(SECRET, &[("Tracon__Jwt__Algorithms", "RS256,HS256")])).unwrap_err().to_string();
    assert!(e.contains("needs a public key"), "{e}");
    let e = settings(base_config(&[
        ("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"),
        ("Tracon__Jwt__Algorithms", "HS256"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(e.contains("shared secret"), "{e}");
    let e = settings(rsa_config(&[("Tracon__Tenancy__ClaimType", "tid")])).unwrap_err().to_string();
    assert!(e.contains("Tracon__Tenancy__Enabled"), "{e}");
    // JWT alone turns remote access on, as a static token does.
    let s = settings(rsa_config(&[]).into_iter().filter(|(k, _)| k != "TRACON_AUTH_TOKEN").collect()).unwrap();
    assert!(s.allow_remote_access && s.jwt.is_some());
}
