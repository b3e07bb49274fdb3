//! A local OAuth 2.1 authorization server for the MCP client's OAuth tests, on 127.0.0.1 and
//! nothing else: RFC 8414 metadata (S256 listed, or not, to be refused), RFC 7591 dynamic
//! client registration, an `/authorize` that approves at once and redirects with a code, and a
//! `/token` that checks what a real one checks — the code's client, redirect URI and PKCE
//! verifier (S256), the RFC 8707 `resource` on both requests — and rotates refresh tokens
//! (the old one is refused once used).
//!
//! [`AuthServer::guard`] is what the protected MCP server asks ([`crate::mcp::McpTestServer::
//! start_protected`]): whether a bearer token is one this server issued and has not revoked.
//! [`AuthServer::revoke_access_tokens`] stands in for an access token expiring on the server's
//! side; [`AuthServer::set_expires_in`] sets the lifetime the next tokens are issued with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What an authorization code was issued for.
struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    resource: String,
    scope: String,
}

#[derive(Default)]
struct Issued {
    clients: BTreeMap<String, Vec<String>>,
    codes: BTreeMap<String, Grant>,
    access: BTreeSet<String>,
    every_access: Vec<String>,
    refresh: BTreeMap<String, (String, String)>,
    every_refresh: Vec<String>,
    /// Why the last refused request was refused (for a failing test's message).
    last_refusal: Option<String>,
}

struct Inner {
    issuer: String,
    /// The only resource tokens are issued for (the MCP server's canonical URI).
    resource: Mutex<String>,
    s256: bool,
    issued: Mutex<Issued>,
    counter: AtomicU64,
    expires_in: AtomicI64,
    registrations: AtomicU64,
    refreshes: AtomicU64,
    exchanges: AtomicU64,
    /// Refresh requests wait here until this many have arrived (0: none wait).
    hold: AtomicU64,
    arrived: AtomicU64,
}

/// A running authorization server.
#[derive(Clone)]
pub struct AuthServer {
    /// `http://127.0.0.1:{port}` — also its issuer identifier.
    pub issuer: String,
    inner: Arc<Inner>,
}

impl AuthServer {
    /// Lists S256 in its metadata.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(true).await
    }

    /// Lists only `plain`: a client that requires PKCE S256 must refuse it.
    pub async fn start_without_s256() -> std::io::Result<Self> {
        Self::start_with(false).await
    }

    async fn start_with(s256: bool) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let issuer = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        let inner = Arc::new(Inner {
            issuer: issuer.clone(),
            resource: Mutex::new(String::new()),
            s256,
            issued: Mutex::new(Issued::default()),
            counter: AtomicU64::new(0),
            expires_in: AtomicI64::new(3600),
            registrations: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            exchanges: AtomicU64::new(0),
            hold: AtomicU64::new(0),
            arrived: AtomicU64::new(0),
        });
        let router = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/register", post(register))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self { issuer, inner })
    }

    /// The resource (an MCP server's canonical URI) tokens are issued for.
    pub fn set_resource(&self, resource: &str) {
        *self.inner.resource.lock().unwrap_or_else(PoisonError::into_inner) = resource.to_owned();
    }

    /// Whether `token` is a live access token of this server.
    pub fn guard(&self) -> Arc<dyn Fn(&str) -> bool + Send + Sync> {
        let inner = self.inner.clone();
        Arc::new(move |token: &str| issued(&inner).access.contains(token))
    }

    /// Every access token still valid is refused from now on (as if they had expired).
    pub fn revoke_access_tokens(&self) {
        issued(&self.inner).access.clear();
    }

    /// The `expires_in` of the tokens issued next.
    pub fn set_expires_in(&self, seconds: i64) {
        self.inner.expires_in.store(seconds, Ordering::SeqCst);
    }

    /// The next `n` refresh requests are answered only once all `n` have arrived: two
    /// instances refreshing with the same refresh token at once, deterministically. One
    /// wins; the other is refused, its refresh token spent.
    pub fn hold_next_refreshes(&self, n: u64) {
        self.inner.arrived.store(0, Ordering::SeqCst);
        self.inner.hold.store(n, Ordering::SeqCst);
    }

    /// Every access and refresh token ever issued.
    pub fn issued_tokens(&self) -> Vec<String> {
        let issued = issued(&self.inner);
        issued.every_access.iter().chain(&issued.every_refresh).cloned().collect()
    }

    pub fn registrations(&self) -> u64 {
        self.inner.registrations.load(Ordering::SeqCst)
    }

    pub fn refreshes(&self) -> u64 {
        self.inner.refreshes.load(Ordering::SeqCst)
    }

    pub fn exchanges(&self) -> u64 {
        self.inner.exchanges.load(Ordering::SeqCst)
    }

    pub fn last_refusal(&self) -> Option<String> {
        issued(&self.inner).last_refusal.clone()
    }
}

fn issued(inner: &Inner) -> std::sync::MutexGuard<'_, Issued> {
    inner.issued.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `a=b&c=d` as pairs (a query string and a form body are encoded alike).
fn pairs(encoded: &str) -> BTreeMap<String, String> {
    reqwest::Url::parse(&format!("http://x.invalid/?{encoded}"))
        .map(|u| u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
        .unwrap_or_default()
}

fn refuse(inner: &Inner, status: StatusCode, error: &str, why: &str) -> Response {
    issued(inner).last_refusal = Some(why.to_owned());
    (status, axum::Json(json!({"error": error, "error_description": why}))).into_response()
}

fn next(inner: &Inner, prefix: &str) -> String {
    format!("{prefix}-{}", inner.counter.fetch_add(1, Ordering::SeqCst) + 1)
}

async fn metadata(State(inner): State<Arc<Inner>>) -> axum::Json<Value> {
    let i = &inner.issuer;
    let methods = if inner.s256 { json!(["S256"]) } else { json!(["plain"]) };
    axum::Json(json!({
        "issuer": i,
        "authorization_endpoint": format!("{i}/authorize"),
        "token_endpoint": format!("{i}/token"),
        "registration_endpoint": format!("{i}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": methods,
        "token_endpoint_auth_methods_supported": ["none"],
    }))
}

async fn register(State(inner): State<Arc<Inner>>, axum::Json(body): axum::Json<Value>) -> Response {
    let uris: Vec<String> = body["redirect_uris"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    if uris.is_empty() {
        return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_redirect_uri", "no redirect_uris");
    }
    inner.registrations.fetch_add(1, Ordering::SeqCst);
    let client_id = next(&inner, "client");
    issued(&inner).clients.insert(client_id.clone(), uris.clone());
    (StatusCode::CREATED, axum::Json(json!({"client_id": client_id, "redirect_uris": uris}))).into_response()
}

/// Approves at once: a code for the client, and the browser sent back with it and the state.
async fn authorize(State(inner): State<Arc<Inner>>, RawQuery(query): RawQuery) -> Response {
    let q = pairs(&query.unwrap_or_default());
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let (client_id, redirect_uri) = (get("client_id"), get("redirect_uri"));
    let registered = issued(&inner).clients.get(&client_id).is_some_and(|uris| uris.contains(&redirect_uri));
    if !registered {
        return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_request", "unknown client or redirect_uri");
    }
    let expected = inner.resource.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if get("response_type") != "code" || get("code_challenge_method") != "S256" || get("code_challenge").is_empty() {
        return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_request", "PKCE S256 and response_type=code required");
    }
    if get("resource") != expected {
        return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_target", "resource is not the MCP server's");
    }
    let code = next(&inner, "code");
    let grant = Grant {
        client_id,
        redirect_uri: redirect_uri.clone(),
        challenge: get("code_challenge"),
        resource: expected,
        scope: get("scope"),
    };
    issued(&inner).codes.insert(code.clone(), grant);
    let mut location = match reqwest::Url::parse(&redirect_uri) {
        Ok(u) => u,
        Err(_) => return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_request", "redirect_uri"),
    };
    location.query_pairs_mut().append_pair("code", &code).append_pair("state", &get("state"));
    (StatusCode::FOUND, [(header::LOCATION, location.to_string())]).into_response()
}

async fn token(State(inner): State<Arc<Inner>>, body: String) -> Response {
    let f = pairs(&body);
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let expected = inner.resource.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if get("resource") != expected {
        return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_target", "resource is not the MCP server's");
    }
    let (client_id, scope) = match get("grant_type").as_str() {
        "authorization_code" => {
            let Some(grant) = issued(&inner).codes.remove(&get("code")) else {
                return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_grant", "unknown or used code");
            };
            let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(Sha256::digest(get("code_verifier").as_bytes()));
            if challenge != grant.challenge {
                return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_grant", "PKCE verifier does not match");
            }
            if get("redirect_uri") != grant.redirect_uri || get("client_id") != grant.client_id {
                return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_grant", "client or redirect_uri differs");
            }
            if grant.resource != expected {
                return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_target", "code issued for another resource");
            }
            inner.exchanges.fetch_add(1, Ordering::SeqCst);
            (grant.client_id, grant.scope)
        }
        "refresh_token" => {
            let hold = inner.hold.load(Ordering::SeqCst);
            if hold > 0 {
                let arrived = inner.arrived.fetch_add(1, Ordering::SeqCst) + 1;
                // Bounded: a test that never sends the others fails on its own assertions.
                for _ in 0..1000 {
                    if inner.arrived.load(Ordering::SeqCst) >= hold {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                if arrived == hold {
                    inner.hold.store(0, Ordering::SeqCst);
                }
            }
            // Rotation: a refresh token is good once.
            let Some((client_id, scope)) = issued(&inner).refresh.remove(&get("refresh_token")) else {
                return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_grant", "unknown or rotated refresh token");
            };
            if get("client_id") != client_id {
                return refuse(&inner, StatusCode::BAD_REQUEST, "invalid_client", "another client's refresh token");
            }
            inner.refreshes.fetch_add(1, Ordering::SeqCst);
            (client_id, scope)
        }
        _ => return refuse(&inner, StatusCode::BAD_REQUEST, "unsupported_grant_type", "grant_type"),
    };
    let access = next(&inner, "at");
    let refresh = next(&inner, "rt");
    {
        let mut issued = issued(&inner);
        issued.access.insert(access.clone());
        issued.every_access.push(access.clone());
        issued.refresh.insert(refresh.clone(), (client_id, scope.clone()));
        issued.every_refresh.push(refresh.clone());
    }
    axum::Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": inner.expires_in.load(Ordering::SeqCst),
        "refresh_token": refresh,
        "scope": scope,
    }))
    .into_response()
}
