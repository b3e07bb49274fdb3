//! The state every handler receives: the core runtime (with its drain switch and run queue)
//! and the HTTP settings.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tracon_core::config::{Config, ConfigError};
use tracon_core::runtime::Runtime;

use crate::access::jwt::{JwtSettings, JwtVerifier};
use crate::access::key_cache::KeyCache;
use crate::access::ratelimit::{RateLimitSettings, RateLimiter};
use crate::access::tenancy::TenancySettings;
use crate::mcp::settings::McpServerSettings;
use crate::triggers::settings::{TriggerLimiter, TriggerSettings};

/// Default largest accepted request body (`Tracon:Http:MaxRequestBodyBytes`).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Shortest static token accepted: a guessable token protects nothing.
pub const MIN_TOKEN_LEN: usize = 16;

/// HTTP-level settings.
#[derive(Clone)]
pub struct HttpSettings {
    /// SHA-256 of the static bearer token, when one is configured. Only the digest is
    /// kept, and comparisons are between digests in constant time.
    pub auth_token_digest: Option<[u8; 32]>,
    /// Whether non-loopback callers may reach protected routes.
    pub allow_remote_access: bool,
    /// Serverless hosts: there is no loopback to fall back on, so nothing but `/api/meta`
    /// is served until an authentication method is configured.
    pub require_authentication: bool,
    pub max_body_bytes: usize,
    /// How long `GET /api/runs/{id}/events` follows a live run before ending the stream (the
    /// client resumes with `Last-Event-ID`).
    pub follow_timeout: Duration,
    /// Longest pause between two store reads while following a live run.
    pub follow_poll_max: Duration,
    /// How long an event stream may stay silent before a `: keep-alive` comment is sent
    /// (proxies and API Gateway close idle streams); zero turns it off.
    pub sse_keep_alive: Duration,
    /// Browser origins allowed to call the API cross-origin, each exact
    /// (`https://app.example.com`). Empty by default, and while empty no CORS header is
    /// ever sent; there is no wildcard.
    pub allowed_origins: Vec<String>,
    /// How long an API key read from the store is trusted by this instance
    /// (`Tracon:ApiKeys:CacheSeconds`, 5 s; 0 reads the store on every request). A
    /// revocation through this instance applies at once regardless.
    pub key_cache_ttl: Duration,
    /// The request rate limit; off (`None`) by default.
    pub rate_limit: Option<RateLimitSettings>,
    /// How a request's tenant is resolved (single tenant by default).
    pub tenancy: TenancySettings,
    /// JWT bearer tokens (`Tracon:Jwt:*`); off (`None`) by default.
    pub jwt: Option<JwtSettings>,
    /// Whether work spawned by a request goes on after its response is sent (the local
    /// server; a Worker through `waitUntil`). Not on Lambda, where the environment freezes
    /// between invocations: there a decision that resumes a run waits for that run before
    /// it answers.
    pub background_outlives_response: bool,
    /// Inbound triggers (`Tracon:InboundTriggers:*`) and where their secrets are read from.
    pub triggers: TriggerSettings,
    /// The MCP server (`Tracon:McpServer:*`): nothing exposed by default.
    pub mcp_server: McpServerSettings,
    /// The A2A server (`Tracon:A2A:*`): nothing published by default.
    pub a2a: crate::a2a::settings::A2aSettings,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("auth_token", &self.auth_token_digest.map(|_| "<configured>"))
            .field("allow_remote_access", &self.allow_remote_access)
            .field("require_authentication", &self.require_authentication)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("allowed_origins", &self.allowed_origins)
            .field("jwt", &self.jwt)
            .finish()
    }
}

impl HttpSettings {
    /// Reads `TRACON_AUTH_TOKEN` (or `Tracon:AuthToken`), `Tracon:AllowRemoteAccess` and
    /// `Tracon:Http:MaxRequestBodyBytes`. Remote access defaults to on exactly when a token
    /// or JWT is configured, and turning it on without either is refused.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let token = config.first(&["TRACON_AUTH_TOKEN", "Tracon:AuthToken"]).map(str::to_owned);
        if let Some(t) = &token
            && t.chars().count() < MIN_TOKEN_LEN
        {
            return Err(ConfigError::Message(format!(
                "TRACON_AUTH_TOKEN is shorter than {MIN_TOKEN_LEN} characters; use a long random value (e.g. `openssl rand -hex 32`)."
            )));
        }
        let jwt = JwtSettings::from_config(config)?;
        let authenticated = token.is_some() || jwt.is_some();
        let allow_remote = config.bool("Tracon:AllowRemoteAccess")?.unwrap_or(authenticated);
        if allow_remote && !authenticated {
            return Err(ConfigError::Message(
                "Tracon__AllowRemoteAccess is on but no authentication is configured; set TRACON_AUTH_TOKEN or Tracon__Jwt__* first."
                    .into(),
            ));
        }
        let max_body_bytes =
            config.parse::<usize>("Tracon:Http:MaxRequestBodyBytes")?.unwrap_or(DEFAULT_MAX_BODY_BYTES);
        let d = Self::default();
        Ok(Self {
            auth_token_digest: token.as_deref().map(digest),
            allow_remote_access: allow_remote,
            require_authentication: false,
            max_body_bytes,
            follow_timeout: config.seconds("Tracon:Runs:FollowTimeoutSeconds")?.unwrap_or(d.follow_timeout),
            follow_poll_max: config.seconds("Tracon:Runs:FollowPollMaxSeconds")?.unwrap_or(d.follow_poll_max),
            allowed_origins: allowed_origins(config)?,
            sse_keep_alive: config.seconds("Tracon:Http:SseKeepAliveSeconds")?.unwrap_or(d.sse_keep_alive),
            key_cache_ttl: config.seconds("Tracon:ApiKeys:CacheSeconds")?.unwrap_or(d.key_cache_ttl),
            rate_limit: RateLimitSettings::from_config(config)?,
            tenancy: TenancySettings::from_config(config)?,
            jwt,
            background_outlives_response: true,
            triggers: TriggerSettings::from_config(config)?,
            mcp_server: McpServerSettings::from_config(config)?,
            a2a: crate::a2a::settings::A2aSettings::from_config(config)?,
        })
    }

    /// Settings for a serverless host (Lambda, Workers): every caller is remote, and without
    /// a token every route but `/api/meta` answers `503 authentication_not_configured`.
    pub fn serverless_from_config(config: &Config) -> Result<Self, ConfigError> {
        let mut with_remote = config.clone();
        if config.first(&["TRACON_AUTH_TOKEN", "Tracon:AuthToken"]).is_none() {
            with_remote = with_remote.with("Tracon:AllowRemoteAccess", "false");
        }
        let mut s = Self::from_config(&with_remote)?;
        s.allow_remote_access = true;
        s.require_authentication = true;
        Ok(s)
    }

    pub fn with_token(token: &str) -> Self {
        Self { auth_token_digest: Some(digest(token)), allow_remote_access: true, ..Self::default() }
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            auth_token_digest: None,
            allow_remote_access: false,
            require_authentication: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            follow_timeout: Duration::from_secs(900),
            follow_poll_max: Duration::from_millis(500),
            allowed_origins: Vec::new(),
            sse_keep_alive: Duration::from_secs(15),
            key_cache_ttl: Duration::from_secs(5),
            rate_limit: None,
            tenancy: TenancySettings::default(),
            jwt: None,
            background_outlives_response: true,
            triggers: TriggerSettings::default(),
            mcp_server: McpServerSettings::default(),
            a2a: crate::a2a::settings::A2aSettings::default(),
        }
    }
}

pub fn digest(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

/// What every handler receives.
#[derive(Clone)]
pub struct AppState {
    pub runtime: Arc<Runtime>,
    pub http: Arc<HttpSettings>,
    /// API keys recently read, for authentication.
    pub keys: Arc<KeyCache>,
    /// Present when a rate limit is configured.
    pub limiter: Option<Arc<RateLimiter>>,
    /// Present when JWT bearer tokens are configured (with the JWKS cache).
    pub jwt: Option<Arc<JwtVerifier>>,
    /// The per-trigger rate limit of the accept endpoint (per process).
    pub trigger_limiter: Arc<TriggerLimiter>,
}

impl AppState {
    pub fn new(runtime: Arc<Runtime>, http: HttpSettings) -> Self {
        let keys = Arc::new(KeyCache::new(http.key_cache_ttl));
        let limiter = http.rate_limit.map(|s| Arc::new(RateLimiter::new(s)));
        let jwt = http.jwt.clone().map(|s| Arc::new(JwtVerifier::new(s)));
        Self { runtime, http: Arc::new(http), keys, limiter, jwt, trigger_limiter: Arc::default() }
    }
}

/// `Tracon:AllowedOrigins` as a list (`Tracon__AllowedOrigins__0`, `__1`, …) or one
/// comma-separated value. Each entry must be an exact origin — `http` or `https`, a host, an
/// optional port, nothing else — so a wildcard, a path or a trailing slash is a start-up
/// error rather than a silently broken (or silently open) browser surface.
fn allowed_origins(config: &Config) -> Result<Vec<String>, ConfigError> {
    let key = "Tracon:AllowedOrigins";
    let mut raw: Vec<&str> = Vec::new();
    if let Some(v) = config.get(key) {
        raw.extend(v.split(','));
    }
    for child in config.child_sections(key) {
        if let Some(v) = config.get(&format!("{key}:{child}")) {
            raw.push(v);
        }
    }
    let mut out: Vec<String> = Vec::new();
    for origin in raw.into_iter().map(str::trim).filter(|o| !o.is_empty()) {
        if !is_exact_origin(origin) {
            return Err(ConfigError::Message(format!(
                "Tracon__AllowedOrigins: '{origin}' is not an exact origin; write scheme://host[:port] with no path, \
                 no trailing slash and no wildcard (e.g. https://app.example.com)."
            )));
        }
        let origin = origin.to_ascii_lowercase();
        if !out.contains(&origin) {
            out.push(origin);
        }
    }
    Ok(out)
}

fn is_exact_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return false;
    }
    let (host, port) = if rest.starts_with('[') {
        let Some(end) = rest.find(']') else { return false };
        let (host, after) = rest.split_at(end + 1);
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None => return false,
            },
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
    } else {
        !host.is_empty()
            && host
                .split('.')
                .all(|label| !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.parse::<u16>().is_ok_and(|n| n > 0));
    host_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_must_be_exact() {
        for good in [
            "https://app.example.com",
            "http://localhost:5173",
            "http://127.0.0.1:8080",
            "http://[::1]:3000",
            "http://[::1]",
        ] {
            assert!(is_exact_origin(good), "{good}");
        }
        for bad in [
            "*",
            "https://*.example.com",
            "https://app.example.com/",
            "https://app.example.com/path",
            "app.example.com",
            "ftp://app.example.com",
            "null",
            "https://",
            "https://app.example.com:0",
            "https://app.example.com:99999",
            "https://user@app.example.com",
        ] {
            assert!(!is_exact_origin(bad), "{bad}");
        }
    }

    #[test]
    fn allowed_origins_come_from_a_list_or_one_value_and_refuse_wildcards() {
        let config = Config::from_pairs([
            ("Tracon__AllowedOrigins__0", "https://App.example.com"),
            ("Tracon__AllowedOrigins__1", "http://localhost:5173"),
        ]);
        assert_eq!(allowed_origins(&config).unwrap(), ["https://app.example.com", "http://localhost:5173"]);
        let config = Config::from_pairs([("Tracon__AllowedOrigins", "https://a.example, https://b.example")]);
        assert_eq!(allowed_origins(&config).unwrap(), ["https://a.example", "https://b.example"]);
        let config = Config::from_pairs([("Tracon__AllowedOrigins__0", "*")]);
        let e = allowed_origins(&config).unwrap_err().to_string();
        assert!(e.contains("not an exact origin"), "{e}");
        assert!(allowed_origins(&Config::from_pairs(Vec::<(String, String)>::new())).unwrap().is_empty());
    }
}
