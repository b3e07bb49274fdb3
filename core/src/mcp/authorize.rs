//! The OAuth side of the MCP authorization spec (2025-06-18 / 2025-11-25), as a client:
//!
//! 1. **Protected-resource metadata** (RFC 9728): the URL a `401`'s
//!    `WWW-Authenticate: Bearer resource_metadata="…"` names, else
//!    `/.well-known/oauth-protected-resource` with the endpoint's path, then at the root. Its
//!    `resource` must be the server's canonical URI.
//! 2. **Authorization server metadata** (RFC 8414, then OpenID discovery) of the first
//!    authorization server it lists. One that does not list `S256` in
//!    `code_challenge_methods_supported` is refused: PKCE is required.
//! 3. **Dynamic client registration** (RFC 7591) when the registration names no client id.
//! 4. The authorization URL (PKCE S256, a random `state`, RFC 8707 `resource`), the code
//!    exchange and refreshes at the token endpoint (`resource` again; the client secret, when
//!    there is one, by HTTP Basic).
//!
//! Every request goes through the egress guard like an MCP request ([`crate::egress`]: the URL
//! checked first, natively the addresses at connect; no redirect followed, so a token request's
//! body is never re-sent elsewhere) under the connection timeout, and nothing
//! an authorization server says reaches a response or a row: [`OAuthError::public_text`] is
//! ours.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::client::{body_bytes, reply_header, reply_status, transmit};
use super::oauth::{McpOAuthTokens, OAuthClient, PENDING_TTL, PendingAuthorization};
use super::{McpServerRecord, McpSettings};
use crate::names::TenantId;
use crate::platform::send_future;
use crate::ports::Clock;

/// Largest metadata, registration or token answer read.
const MAX_OAUTH_ANSWER: usize = 64 * 1024;

/// Why an OAuth step failed. The detail is for the log; [`OAuthError::public_text`] is what a
/// response, a warning or a row may say.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    #[error("the registration has no oauth object")]
    NotConfigured,
    #[error("the egress guard refused {0}")]
    Refused(String),
    #[error("transport: {0}")]
    Transport(String),
    #[error("no answer within the connection timeout")]
    Timeout,
    #[error("metadata: {0}")]
    Metadata(String),
    #[error("the authorization server does not support PKCE S256")]
    NoPkce,
    #[error("no client id configured and the authorization server offers no dynamic registration")]
    NoRegistration,
    #[error("dynamic client registration: {0}")]
    Registration(String),
    #[error("configuration key {0} holds no value")]
    SecretMissing(String),
    #[error("the token endpoint refused: {0}")]
    Grant(String),
    #[error("no refresh token")]
    NoRefreshToken,
    #[error("no randomness: {0}")]
    Random(String),
}

impl OAuthError {
    /// Our words for it.
    pub fn public_text(&self) -> String {
        match self {
            OAuthError::NotConfigured => {
                "The server's registration has no 'oauth' object: OAuth is not configured for it.".into()
            }
            OAuthError::Refused(why) => format!("The egress guard refuses an OAuth address the server named: {why}"),
            OAuthError::Transport(_) => "An OAuth address the server named could not be reached.".into(),
            OAuthError::Timeout => "An OAuth request did not get an answer within the connection timeout.".into(),
            OAuthError::Metadata(_) => "The server's OAuth metadata (RFC 9728 protected-resource metadata, RFC 8414 authorization server metadata) could not be found or is not valid.".into(),
            OAuthError::NoPkce => "The authorization server does not support PKCE with S256, which Tracon requires.".into(),
            OAuthError::NoRegistration => "The registration names no 'oauth.clientId' and the authorization server offers no dynamic client registration.".into(),
            OAuthError::Registration(_) => "The authorization server refused to register Tracon as a client.".into(),
            OAuthError::SecretMissing(key) => {
                format!("The configuration key '{key}' named for the OAuth client secret holds no value.")
            }
            OAuthError::Grant(_) => "The authorization server's token endpoint refused the request.".into(),
            OAuthError::NoRefreshToken => "The access token expired and there is no refresh token.".into(),
            OAuthError::Random(_) => "No randomness was available for the authorization.".into(),
        }
    }
}

/// What the authorization starts with: the URL the administrator's browser opens, the
/// `state` it carries (never stored) and the pending row.
#[derive(Debug)]
pub struct Started {
    pub authorization_url: String,
    pub pending: PendingAuthorization,
}

/// The canonical URI of an MCP server (RFC 8707 `resource`): its endpoint without fragment.
pub fn canonical_resource(endpoint: &str) -> Option<String> {
    let mut url = Url::parse(endpoint).ok()?;
    url.set_fragment(None);
    Some(url.to_string())
}

/// SHA-256 of a `state`, hex: how a pending authorization is found.
pub fn state_digest(state: &str) -> String {
    Sha256::digest(state.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn random_text() -> Result<String, OAuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| OAuthError::Random(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// The PKCE S256 challenge of a verifier.
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// One authorization server, as its metadata describes it.
#[derive(Debug, Clone)]
struct AuthServer {
    authorization_endpoint: Url,
    token_endpoint: Url,
    registration_endpoint: Option<Url>,
}

/// Discovers the server's authorization server, registers Tracon when it must, and returns
/// the authorization URL with its pending row.
pub async fn begin(
    settings: &McpSettings,
    clock: &dyn Clock,
    tenant: &TenantId,
    record: &McpServerRecord,
    redirect_uri: &str,
) -> Result<Started, OAuthError> {
    let config = record.oauth.as_ref().ok_or(OAuthError::NotConfigured)?;
    let endpoint = settings.check_endpoint(&record.endpoint).map_err(OAuthError::Refused)?;
    let resource = canonical_resource(endpoint.as_str()).ok_or_else(|| OAuthError::Metadata("endpoint".into()))?;
    let http = Http { settings, clock };
    let (metadata, challenge_scope) = http.resource_metadata(&endpoint).await?;
    if !same_uri(&metadata.resource, &resource) {
        return Err(OAuthError::Metadata("the protected resource names another resource".into()));
    }
    let issuer = metadata
        .authorization_servers
        .first()
        .ok_or_else(|| OAuthError::Metadata("no authorization server listed".into()))?;
    let server = http.authorization_server(issuer).await?;
    let client = match &config.client_id {
        Some(id) => OAuthClient { client_id: id.clone(), issued_secret: None },
        None => http.register(&server, redirect_uri).await?,
    };
    let scopes = if !config.scopes.is_empty() {
        config.scopes.clone()
    } else if let Some(scope) = challenge_scope {
        scope.split_whitespace().map(str::to_owned).collect()
    } else {
        metadata.scopes_supported.unwrap_or_default()
    };
    let verifier = random_text()?;
    let state = random_text()?;
    let mut url = server.authorization_endpoint.clone();
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &client.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_challenge", &challenge(&verifier))
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &resource);
        if !scopes.is_empty() {
            query.append_pair("scope", &scopes.join(" "));
        }
    }
    let pending = PendingAuthorization {
        state_digest: state_digest(&state),
        tenant: tenant.clone(),
        server: record.name.clone(),
        code_verifier: verifier,
        redirect_uri: redirect_uri.to_owned(),
        client,
        token_endpoint: server.token_endpoint.to_string(),
        resource,
        scopes,
        expires_at: clock.now() + PENDING_TTL,
    };
    Ok(Started { authorization_url: url.to_string(), pending })
}

/// Exchanges the authorization code of `pending` for tokens. `client_secret`: the configured
/// secret, when the registration names one.
pub async fn exchange(
    settings: &McpSettings,
    clock: &dyn Clock,
    pending: &PendingAuthorization,
    code: &str,
    client_secret: Option<&str>,
) -> Result<McpOAuthTokens, OAuthError> {
    let http = Http { settings, clock };
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", pending.redirect_uri.as_str()),
        ("code_verifier", pending.code_verifier.as_str()),
        ("resource", pending.resource.as_str()),
    ];
    let secret = client_secret.or(pending.client.issued_secret.as_deref());
    let answer = http.token(&pending.token_endpoint, &pending.client.client_id, secret, &form).await?;
    Ok(McpOAuthTokens {
        access_token: answer.access_token,
        refresh_token: answer.refresh_token,
        expires_at: answer.expires_in.map(|s| clock.now() + chrono::Duration::seconds(s.min(10 * 365 * 86_400))),
        scopes: answer
            .scope
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or(pending.scopes.clone()),
        client: pending.client.clone(),
        token_endpoint: pending.token_endpoint.clone(),
        resource: pending.resource.clone(),
        version: 0,
        updated_at: clock.now(),
    })
}

/// Refreshes `tokens` (RFC 6749 §6 with the `resource` of RFC 8707). A refresh token the
/// answer rotates replaces the old one; one it leaves out keeps it.
pub async fn refresh(
    settings: &McpSettings,
    clock: &dyn Clock,
    tokens: &McpOAuthTokens,
    client_secret: Option<&str>,
) -> Result<McpOAuthTokens, OAuthError> {
    let refresh_token = tokens.refresh_token.as_deref().ok_or(OAuthError::NoRefreshToken)?;
    let http = Http { settings, clock };
    let form = [("grant_type", "refresh_token"), ("refresh_token", refresh_token), ("resource", &tokens.resource)];
    let secret = client_secret.or(tokens.client.issued_secret.as_deref());
    let answer = http.token(&tokens.token_endpoint, &tokens.client.client_id, secret, &form).await?;
    Ok(McpOAuthTokens {
        access_token: answer.access_token,
        refresh_token: answer.refresh_token.or_else(|| tokens.refresh_token.clone()),
        expires_at: answer.expires_in.map(|s| clock.now() + chrono::Duration::seconds(s.min(10 * 365 * 86_400))),
        scopes: answer
            .scope
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or(tokens.scopes.clone()),
        updated_at: clock.now(),
        ..tokens.clone()
    })
}

/// The URL in `resource_metadata="…"` and the `scope="…"` of a `WWW-Authenticate` header.
fn challenge_params(header: &str) -> (Option<String>, Option<String>) {
    let param = |name: &str| {
        let at = header.find(&format!("{name}=\""))?;
        let rest = &header[at + name.len() + 2..];
        rest.find('"').map(|end| rest[..end].to_owned())
    };
    (param("resource_metadata"), param("scope"))
}

/// Two URIs the same after a trailing `/`.
fn same_uri(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// `https://h/.well-known/{name}{path}` for a URL `https://h{path}` (the path's trailing `/`
/// dropped).
fn well_known(url: &Url, name: &str) -> Url {
    let path = url.path().trim_end_matches('/').to_owned();
    let mut out = url.clone();
    out.set_query(None);
    out.set_fragment(None);
    out.set_path(&format!("/.well-known/{name}{path}"));
    out
}

fn absolute_http(raw: &str) -> Option<Url> {
    let url = Url::parse(raw).ok()?;
    matches!(url.scheme(), "https" | "http").then_some(url)
}

#[derive(Deserialize)]
struct ResourceMetadata {
    resource: String,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ServerMetadata {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    #[serde(default)]
    registration_endpoint: Option<String>,
    #[serde(default)]
    code_challenge_methods_supported: Vec<String>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<i64>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

struct Reply {
    status: u16,
    www_authenticate: Option<String>,
    body: Option<Value>,
}

/// The HTTP side: every request checked by the egress guard and under the timeout.
struct Http<'a> {
    settings: &'a McpSettings,
    clock: &'a dyn Clock,
}

impl Http<'_> {
    async fn send(&self, request: reqwest::RequestBuilder, url: &Url) -> Result<Reply, OAuthError> {
        self.settings.egress.check_url(url).map_err(|e| OAuthError::Refused(format!("{e}.")))?;
        let timeout = self.settings.connection_timeout;
        let sleep = self.clock.sleep(timeout);
        let work = send_future(async move {
            let reply = transmit(request).await.map_err(|e| match e {
                super::client::McpError::Refused(why) => OAuthError::Refused(why),
                other => OAuthError::Transport(other.to_string()),
            })?;
            let status = reply_status(&reply);
            let www_authenticate = reply_header(&reply, "www-authenticate");
            let bytes = body_bytes(reply).await.map_err(|e| OAuthError::Transport(e.to_string()))?;
            if bytes.len() > MAX_OAUTH_ANSWER {
                return Err(OAuthError::Transport("an answer larger than the limit".into()));
            }
            Ok(Reply { status, www_authenticate, body: serde_json::from_slice(&bytes).ok() })
        });
        tokio::select! {
            biased;
            reply = work => reply,
            _ = sleep => Err(OAuthError::Timeout),
        }
    }

    async fn get_json(&self, url: &Url) -> Result<Option<Value>, OAuthError> {
        let request = self.settings.oauth_client().get(url.clone()).header(reqwest::header::ACCEPT, "application/json");
        let reply = self.send(request, url).await?;
        Ok(if reply.status == 200 { reply.body } else { None })
    }

    /// The server's protected-resource metadata, and the scope its challenge asked for.
    async fn resource_metadata(&self, endpoint: &Url) -> Result<(ResourceMetadata, Option<String>), OAuthError> {
        // An unauthenticated request: a server that needs a token answers 401 and names its
        // metadata.
        let probe = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "tracon", "version": env!("CARGO_PKG_VERSION")}}});
        let request = self
            .settings
            .oauth_client()
            .post(endpoint.clone())
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(probe.to_string());
        let reply = self.send(request, endpoint).await?;
        let (named, scope) = match (reply.status, reply.www_authenticate) {
            (401, Some(header)) => challenge_params(&header),
            _ => (None, None),
        };
        let mut candidates: Vec<Url> = named.as_deref().and_then(absolute_http).into_iter().collect();
        candidates.push(well_known(endpoint, "oauth-protected-resource"));
        let mut root = endpoint.clone();
        root.set_path("/");
        candidates.push(well_known(&root, "oauth-protected-resource"));
        candidates.dedup();
        for url in candidates {
            if let Some(body) = self.get_json(&url).await?
                && let Ok(metadata) = serde_json::from_value::<ResourceMetadata>(body)
            {
                return Ok((metadata, scope));
            }
        }
        Err(OAuthError::Metadata("no protected-resource metadata".into()))
    }

    /// RFC 8414 metadata of `issuer`, then OpenID discovery.
    async fn authorization_server(&self, issuer: &str) -> Result<AuthServer, OAuthError> {
        let issuer_url = absolute_http(issuer).ok_or_else(|| OAuthError::Metadata("issuer".into()))?;
        let mut candidates = vec![
            well_known(&issuer_url, "oauth-authorization-server"),
            well_known(&issuer_url, "openid-configuration"),
        ];
        if !issuer_url.path().trim_end_matches('/').is_empty() {
            let mut appended = issuer_url.clone();
            appended.set_path(&format!("{}/.well-known/openid-configuration", issuer_url.path().trim_end_matches('/')));
            candidates.push(appended);
        }
        for url in candidates {
            let Some(body) = self.get_json(&url).await? else { continue };
            let Ok(metadata) = serde_json::from_value::<ServerMetadata>(body) else { continue };
            if !same_uri(&metadata.issuer, issuer) {
                return Err(OAuthError::Metadata("the metadata names another issuer".into()));
            }
            if !metadata.code_challenge_methods_supported.iter().any(|m| m == "S256") {
                return Err(OAuthError::NoPkce);
            }
            let endpoint = |raw: &str| absolute_http(raw).ok_or_else(|| OAuthError::Metadata("an endpoint".into()));
            return Ok(AuthServer {
                authorization_endpoint: endpoint(&metadata.authorization_endpoint)?,
                token_endpoint: endpoint(&metadata.token_endpoint)?,
                registration_endpoint: metadata.registration_endpoint.as_deref().map(endpoint).transpose()?,
            });
        }
        Err(OAuthError::Metadata("no authorization server metadata".into()))
    }

    /// RFC 7591: Tracon as a client whose only redirect URI is its callback.
    async fn register(&self, server: &AuthServer, redirect_uri: &str) -> Result<OAuthClient, OAuthError> {
        let url = server.registration_endpoint.as_ref().ok_or(OAuthError::NoRegistration)?;
        let body = json!({
            "client_name": "Tracon",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        });
        let request = self
            .settings
            .oauth_client()
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body.to_string());
        let reply = self.send(request, url).await?;
        if !(200..300).contains(&reply.status) {
            return Err(OAuthError::Registration(format!("HTTP {}", reply.status)));
        }
        let body = reply.body.ok_or_else(|| OAuthError::Registration("not JSON".into()))?;
        let client_id = body
            .get("client_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| OAuthError::Registration("no client_id".into()))?;
        let issued_secret = body.get("client_secret").and_then(Value::as_str).map(str::to_owned);
        Ok(OAuthClient { client_id: client_id.to_owned(), issued_secret })
    }

    /// A token endpoint request (a form post; the client secret by HTTP Basic).
    async fn token(
        &self,
        endpoint: &str,
        client_id: &str,
        secret: Option<&str>,
        form: &[(&str, &str)],
    ) -> Result<TokenAnswer, OAuthError> {
        let url = absolute_http(endpoint).ok_or_else(|| OAuthError::Metadata("token endpoint".into()))?;
        // The form body, encoded as a query string is (application/x-www-form-urlencoded).
        let mut encoder = Url::parse("http://form.invalid/").map_err(|e| OAuthError::Transport(e.to_string()))?;
        {
            let mut pairs = encoder.query_pairs_mut();
            for (k, v) in form {
                pairs.append_pair(k, v);
            }
            if secret.is_none() {
                pairs.append_pair("client_id", client_id);
            }
        }
        let body = encoder.query().unwrap_or_default().to_owned();
        let mut request = self
            .settings
            .oauth_client()
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(body);
        if let Some(secret) = secret {
            // RFC 6749 §2.3.1: both parts form-encoded before Basic.
            let enc = |s: &str| -> String {
                let mut u = Url::parse("http://x.invalid/").ok();
                if let Some(u) = u.as_mut() {
                    u.query_pairs_mut().append_pair("v", s);
                }
                u.and_then(|u| u.query().map(|q| q.trim_start_matches("v=").to_owned())).unwrap_or_default()
            };
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", enc(client_id), enc(secret)));
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Basic {basic}"))
                .map_err(|e| OAuthError::Transport(e.to_string()))?;
            value.set_sensitive(true);
            request = request.header(reqwest::header::AUTHORIZATION, value);
        }
        let reply = self.send(request, &url).await?;
        let body = reply.body.unwrap_or(Value::Null);
        if !(200..300).contains(&reply.status) {
            // The error code is logged, never shown: only our words leave.
            let code = body.get("error").and_then(Value::as_str).unwrap_or("unknown");
            return Err(OAuthError::Grant(format!(
                "HTTP {} {}",
                reply.status,
                crate::names::truncate_for_message(code)
            )));
        }
        let answer: TokenAnswer =
            serde_json::from_value(body).map_err(|_| OAuthError::Grant("an answer that is not a token".into()))?;
        if answer.access_token.is_empty()
            || answer.token_type.as_deref().is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(OAuthError::Grant("not a bearer token".into()));
        }
        Ok(answer)
    }
}

/// The authorization server's `error` parameter on the callback, in our words (its
/// `error_description` is never shown).
pub fn callback_error_text(code: &str) -> &'static str {
    match code {
        "access_denied" => "The authorization was denied at the authorization server.",
        "invalid_scope" => "The authorization server refused the scopes asked for.",
        "unauthorized_client" | "invalid_client" => "The authorization server does not accept Tracon's client.",
        "temporarily_unavailable" | "server_error" => "The authorization server could not complete the authorization.",
        _ => "The authorization server did not grant the authorization.",
    }
}

/// Whether tokens expired at `now` with no way to refresh them.
pub fn expired(expires_at: Option<DateTime<Utc>>, refreshable: bool, now: DateTime<Utc>) -> bool {
    !refreshable && expires_at.is_some_and(|at| at <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_is_unpadded_base64url_of_the_verifiers_sha256() {
        // Computed independently: base64.urlsafe_b64encode(hashlib.sha256(v).digest()) in
        // Python, '=' stripped.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mJ92IgYvK0dJ1ZaSeSnH8qC5iy9-Yk"),
            "YKffSf4mOmQKHDdjItlHlSxOScDFUJaYUQAaPzi8C3g"
        );
    }

    #[test]
    fn challenges_name_their_metadata_and_scope() {
        let (url, scope) = challenge_params(
            r#"Bearer error="invalid_token", resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", scope="read write""#,
        );
        assert_eq!(url.as_deref(), Some("https://h/.well-known/oauth-protected-resource/mcp"));
        assert_eq!(scope.as_deref(), Some("read write"));
        assert_eq!(challenge_params("Bearer"), (None, None));
    }

    #[test]
    fn well_known_urls_keep_the_path_after_the_suffix() {
        let url = Url::parse("https://h.example/tenant/mcp?x=1").unwrap();
        assert_eq!(
            well_known(&url, "oauth-protected-resource").as_str(),
            "https://h.example/.well-known/oauth-protected-resource/tenant/mcp"
        );
        let root = Url::parse("https://as.example").unwrap();
        assert_eq!(
            well_known(&root, "oauth-authorization-server").as_str(),
            "https://as.example/.well-known/oauth-authorization-server"
        );
        assert_eq!(canonical_resource("https://H.example/mcp#frag").unwrap(), "https://h.example/mcp");
    }

    #[test]
    fn foreign_words_never_reach_the_public_text() {
        let e = OAuthError::Grant("HTTP 400 invalid_grant: secret=hunter2".into());
        assert!(!e.public_text().contains("hunter2"));
        assert!(!callback_error_text("<script>").contains("script"));
    }
}
