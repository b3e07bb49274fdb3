//! JWT bearer tokens (`Tracon:Jwt:*`): callers identified by your own identity provider.
//!
//! A bearer credential shaped like a JWT (three base64url segments) that is not the static
//! token is checked here, in this order: the header's `alg` against the allowed list (never
//! `none`); the signature, against the configured key ([`KeySource::Static`]) or the issuer's
//! key set ([`KeySource::Jwks`], cached, refetched for an unknown `kid` at most once a
//! minute); then `exp` (required), `nbf`, `iss` and `aud`, with `ClockSkewSeconds` of leeway.
//! Every failure is the same `401`: the reason goes to the debug log, never the token or a
//! library's error text. A valid token becomes a [`Caller`] whose scopes are those of the
//! highest role its role claim names ([`Role::scopes`]); a valid token naming no role is
//! `403 no_role`.
//!
//! One behaviour on every host: parsing, key selection and the claim checks are this
//! module's own code. Only the signature check differs ([`backend`]): `jsonwebtoken` (aws-lc)
//! natively, WebCrypto (`crypto.subtle`) on the Worker, whose bundle has no room for a second
//! RSA and ECDSA implementation.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chrono::{DateTime, Duration, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};
use tracon_core::config::{Config, ConfigError};
use tracon_core::identity::{AuthMethod, Caller, Role};

use crate::access::tenancy::TenancySettings;
use crate::error::ApiError;

/// The longest credential looked at: identity-provider tokens are a few KiB.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// A key set is refetched on an unknown `kid` at most this often...
const JWKS_REFETCH_EVERY: Duration = Duration::seconds(60);
/// ...and, so a key the issuer removed stops verifying, when it is this old.
const JWKS_MAX_AGE: Duration = Duration::hours(1);
/// The largest key set read.
const JWKS_MAX_BYTES: usize = 256 * 1024;
/// A shared secret shorter than its hash protects less than the algorithm promises.
const MIN_SECRET_BYTES: usize = 32;

/// A signature algorithm. `none` is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Alg {
    HS256,
    HS384,
    HS512,
    RS256,
    RS384,
    RS512,
    ES256,
    ES384,
}

impl Alg {
    pub const ALL: [Alg; 8] =
        [Alg::HS256, Alg::HS384, Alg::HS512, Alg::RS256, Alg::RS384, Alg::RS512, Alg::ES256, Alg::ES384];

    pub fn as_str(self) -> &'static str {
        match self {
            Alg::HS256 => "HS256",
            Alg::HS384 => "HS384",
            Alg::HS512 => "HS512",
            Alg::RS256 => "RS256",
            Alg::RS384 => "RS384",
            Alg::RS512 => "RS512",
            Alg::ES256 => "ES256",
            Alg::ES384 => "ES384",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// The kind of key that verifies this algorithm.
    fn key_kind(self) -> KeyKind {
        match self {
            Alg::HS256 | Alg::HS384 | Alg::HS512 => KeyKind::Secret,
            Alg::RS256 | Alg::RS384 | Alg::RS512 => KeyKind::Rsa,
            Alg::ES256 => KeyKind::EcP256,
            Alg::ES384 => KeyKind::EcP384,
        }
    }

    /// `SHA-256`, `SHA-384` or `SHA-512`.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    fn hash(self) -> &'static str {
        match self {
            Alg::HS256 | Alg::RS256 | Alg::ES256 => "SHA-256",
            Alg::HS384 | Alg::RS384 | Alg::ES384 => "SHA-384",
            Alg::HS512 | Alg::RS512 => "SHA-512",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Secret,
    Rsa,
    EcP256,
    EcP384,
}

/// One verification key: the configured one, or one of a JWKS.
pub struct Key {
    kind: KeyKind,
    /// A JWK's `kid`.
    kid: Option<String>,
    /// A JWK's `alg`, when it pins one.
    alg: Option<Alg>,
    prepared: backend::Prepared,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the material: a shared secret is a secret.
        f.debug_struct("Key").field("kind", &self.kind).field("kid", &self.kid).field("alg", &self.alg).finish()
    }
}

impl Key {
    fn fits(&self, alg: Alg) -> bool {
        self.kind == alg.key_kind() && self.alg.is_none_or(|a| a == alg)
    }
}

/// Where verification keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// `Tracon:Jwt:SigningKeyConfigurationName`: the configuration key holding one key, an
    /// HMAC shared secret or a PEM public key (`-----BEGIN PUBLIC KEY-----`).
    Static(Arc<Key>),
    /// `Tracon:Jwt:JwksUrl`: the issuer's key set.
    Jwks(reqwest::Url),
}

/// `Tracon:Jwt:*`. JWT is on when any of these keys is set.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// `Issuer`: the exact `iss` accepted.
    pub issuer: String,
    /// `Audience`: `aud` must be (or contain) this.
    pub audience: String,
    pub keys: KeySource,
    /// `Algorithms` (`RS256,ES256`; `HS256` with a shared secret).
    pub algorithms: Vec<Alg>,
    /// `RoleClaim` (`roles`): a string or an array of strings.
    pub role_claim: String,
    /// `Roles:Reader|Operator|Admin`: the claim value naming each role (the role's name).
    pub role_values: Vec<(Role, String)>,
    /// `UserIdClaim` (`sub`): the caller's opaque user id.
    pub user_id_claim: String,
    /// `PermissionsClaim` (none): permission names for tools' `requiredPermission`, an array
    /// of strings or one space-separated string.
    pub permissions_claim: Option<String>,
    /// `ClockSkewSeconds` (60): leeway on `exp` and `nbf`.
    pub clock_skew_seconds: i64,
}

fn invalid(message: String) -> ConfigError {
    ConfigError::Message(message)
}

impl JwtSettings {
    /// Reads `Tracon:Jwt:*`; `None` when nothing under it is set. An incomplete or
    /// inconsistent section is a start-up error.
    pub fn from_config(config: &Config) -> Result<Option<Self>, ConfigError> {
        if config.child_sections("Tracon:Jwt").is_empty() {
            return Ok(None);
        }
        let issuer = config.get("Tracon:Jwt:Issuer").map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| {
            invalid("Tracon__Jwt__Issuer is not set: a JWT is accepted only from the issuer it names.".into())
        })?;
        let audience = config.get("Tracon:Jwt:Audience").map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| {
            invalid("Tracon__Jwt__Audience is not set: a JWT is accepted only for the audience it names.".into())
        })?;
        let keys = key_source(config)?;
        let algorithms = algorithms(config, &keys)?;
        let role_values = Role::ALL
            .into_iter()
            .map(|role| {
                let key = format!("Tracon:Jwt:Roles:{}", role.as_str());
                (role, config.get(&key).map_or(role.as_str(), str::trim).to_owned())
            })
            .collect::<Vec<_>>();
        for (i, (role, value)) in role_values.iter().enumerate() {
            if let Some((other, _)) = role_values[i + 1..].iter().find(|(_, v)| v == value) {
                return Err(invalid(format!(
                    "Tracon__Jwt__Roles: the roles {} and {} are named by the same claim value '{value}'.",
                    role.as_str(),
                    other.as_str()
                )));
            }
        }
        let claim = |key: &str, default: &str| config.get(key).map_or(default, str::trim).to_owned();
        Ok(Some(Self {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            keys,
            algorithms,
            role_claim: claim("Tracon:Jwt:RoleClaim", "roles"),
            role_values,
            user_id_claim: claim("Tracon:Jwt:UserIdClaim", "sub"),
            permissions_claim: config.get("Tracon:Jwt:PermissionsClaim").map(|v| v.trim().to_owned()),
            clock_skew_seconds: i64::from(config.parse::<u32>("Tracon:Jwt:ClockSkewSeconds")?.unwrap_or(60)),
        }))
    }
}

fn key_source(config: &Config) -> Result<KeySource, ConfigError> {
    let named = config.get("Tracon:Jwt:SigningKeyConfigurationName").map(str::trim);
    let jwks = config.get("Tracon:Jwt:JwksUrl").map(str::trim);
    match (named, jwks) {
        (Some(_), Some(_)) => Err(invalid(
            "Tracon__Jwt__SigningKeyConfigurationName and Tracon__Jwt__JwksUrl are both set; configure one key source."
                .into(),
        )),
        (None, None) => Err(invalid(
            "Tracon__Jwt__* is configured without a key: set Tracon__Jwt__JwksUrl (the issuer's key set) or \
             Tracon__Jwt__SigningKeyConfigurationName (the name of the configuration key holding the key)."
                .into(),
        )),
        (None, Some(url)) => jwks_url(url).map(KeySource::Jwks),
        (Some(name), None) => {
            // The setting names another configuration key: the key itself never sits in
            // the JWT section, and only the name appears in messages.
            let value = config.get(name).ok_or_else(|| {
                invalid(format!(
                    "Tracon__Jwt__SigningKeyConfigurationName names '{}', which has no value.",
                    tracon_core::config::env_name(name)
                ))
            })?;
            static_key(value.trim())
                .map(|key| KeySource::Static(Arc::new(key)))
                .map_err(|why| invalid(format!("The JWT key in '{}' {why}", tracon_core::config::env_name(name))))
        }
    }
}

fn jwks_url(raw: &str) -> Result<reqwest::Url, ConfigError> {
    let bad = |why: &str| invalid(format!("Tracon__Jwt__JwksUrl '{raw}' {why}"));
    let url = reqwest::Url::parse(raw).map_err(|_| bad("is not a URL."))?;
    let host = url.host_str().ok_or_else(|| bad("has no host."))?;
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        _ => Err(bad("must be https (http only for a loopback address).")),
    }
}

fn static_key(value: &str) -> Result<Key, String> {
    if value.starts_with("-----BEGIN") {
        let der = pem_public_key(value)?;
        let kind = spki_kind(&der).ok_or("is not an RSA, P-256 or P-384 public key.")?;
        let prepared = backend::from_spki(kind, value, der)?;
        return Ok(Key { kind, kid: None, alg: None, prepared });
    }
    if value.len() < MIN_SECRET_BYTES {
        return Err(format!("is a shared secret shorter than {MIN_SECRET_BYTES} bytes; use a long random value."));
    }
    Ok(Key { kind: KeyKind::Secret, kid: None, alg: None, prepared: backend::from_secret(value.as_bytes())? })
}

/// `Tracon:Jwt:Algorithms`: one comma-separated value or a list (`__0`, `__1`, …), each
/// checked against the key source.
fn algorithms(config: &Config, keys: &KeySource) -> Result<Vec<Alg>, ConfigError> {
    let key = "Tracon:Jwt:Algorithms";
    let mut raw: Vec<&str> = config.get(key).map(|v| v.split(',').collect()).unwrap_or_default();
    for child in config.child_sections(key) {
        if let Some(v) = config.get(&format!("{key}:{child}")) {
            raw.push(v);
        }
    }
    let secret = matches!(keys, KeySource::Static(k) if k.kind == KeyKind::Secret);
    let mut algs = BTreeSet::new();
    for name in raw.into_iter().map(str::trim).filter(|n| !n.is_empty()) {
        let alg = Alg::parse(name).ok_or_else(|| {
            let all = Alg::ALL.map(Alg::as_str).join(", ");
            invalid(format!("Tracon__Jwt__Algorithms: '{name}' is not one of {all}."))
        })?;
        if (alg.key_kind() == KeyKind::Secret) != secret {
            return Err(invalid(if secret {
                format!(
                    "Tracon__Jwt__Algorithms lists {name}, which needs a public key, but the configured key is a shared secret."
                )
            } else {
                format!(
                    "Tracon__Jwt__Algorithms lists {name}, which needs a shared secret in Tracon__Jwt__SigningKeyConfigurationName."
                )
            }));
        }
        algs.insert(alg);
    }
    if algs.is_empty() {
        algs = if secret { [Alg::HS256].into() } else { [Alg::RS256, Alg::ES256].into() };
    }
    if let KeySource::Static(k) = keys
        && !algs.iter().any(|a| k.fits(*a))
    {
        let listed = algs.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ");
        return Err(invalid(format!(
            "Tracon__Jwt__Algorithms ({listed}) has no algorithm the configured key verifies."
        )));
    }
    Ok(algs.into_iter().collect())
}

/// The DER of a `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo) block.
fn pem_public_key(pem: &str) -> Result<Vec<u8>, String> {
    const BEGIN: &str = "-----BEGIN PUBLIC KEY-----";
    const END: &str = "-----END PUBLIC KEY-----";
    let body =
        pem.trim().strip_prefix(BEGIN).and_then(|rest| rest.trim_end().strip_suffix(END)).ok_or(
            "is not a '-----BEGIN PUBLIC KEY-----' PEM block (convert with `openssl pkey -pubin -in key.pem`).",
        )?;
    let body: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    STANDARD.decode(body).map_err(|_| "is a PEM block whose body is not base64.".to_owned())
}

/// The key type a SubjectPublicKeyInfo names: `SEQUENCE { SEQUENCE { OID, params }, BIT STRING }`.
fn spki_kind(der: &[u8]) -> Option<KeyKind> {
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
    const EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    const P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
    let (spki, _) = der_element(der, 0x30)?;
    let (algorithm, _) = der_element(spki, 0x30)?;
    let (oid, params) = der_element(algorithm, 0x06)?;
    match oid {
        RSA => Some(KeyKind::Rsa),
        EC => match der_element(params, 0x06)?.0 {
            P256 => Some(KeyKind::EcP256),
            P384 => Some(KeyKind::EcP384),
            _ => None,
        },
        _ => None,
    }
}

/// The contents of the DER element at the start of `input` with tag `tag`, and what follows.
fn der_element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&t, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    if t != tag {
        return None;
    }
    let (len, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81 => (usize::from(*rest.first()?), rest.get(1..)?),
        0x82 => (usize::from(*rest.first()?) << 8 | usize::from(*rest.get(1)?), rest.get(2..)?),
        _ => return None,
    };
    Some((rest.get(..len)?, rest.get(len..)?))
}

/// A credential that is shaped like a compact JWS: three base64url segments, the first two
/// non-empty. Anything else is not a JWT (an API key, a static token).
pub fn looks_like_jwt(credential: &str) -> bool {
    let mut parts = credential.split('.');
    let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let b64url = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    !h.is_empty() && !p.is_empty() && b64url(h) && b64url(p) && b64url(s)
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
    /// Extensions a verifier must understand; Tracon understands none.
    crit: Option<Value>,
}

/// Verifies JWT bearer tokens: the settings, and the JWKS cache when keys come from one.
pub struct JwtVerifier {
    settings: JwtSettings,
    jwks: Option<Jwks>,
}

impl JwtVerifier {
    pub fn new(settings: JwtSettings) -> Self {
        let jwks = match &settings.keys {
            KeySource::Jwks(url) => Some(Jwks::new(url.clone())),
            KeySource::Static(_) => None,
        };
        Self { settings, jwks }
    }

    /// The caller a token proves: `401` for any token that does not verify, `403 no_role`
    /// for one that grants no role, and the tenancy errors of a bad tenant claim.
    pub async fn authenticate(
        &self,
        token: &str,
        now: DateTime<Utc>,
        tenancy: &TenancySettings,
    ) -> Result<Caller, ApiError> {
        let claims = self.verify(token, now).await.map_err(|reason| {
            tracing::debug!(reason, "JWT bearer token refused");
            ApiError::unauthorized("The bearer token is not valid.")
        })?;
        let s = &self.settings;
        let named = strings(claims.get(&s.role_claim));
        let role = s.role_values.iter().filter(|(_, v)| named.contains(v)).map(|(r, _)| *r).max().ok_or_else(|| {
            tracing::debug!(claim = %s.role_claim, "JWT names none of the configured roles");
            ApiError::forbidden("no_role", "The bearer token is valid but grants none of this server's roles.")
        })?;
        let mut caller = Caller::anonymous();
        caller.method = AuthMethod::Jwt;
        caller.role = Some(role);
        caller.scopes = Some(role.scopes());
        caller.user_id = claims.get(&s.user_id_claim).and_then(Value::as_str).map(str::to_owned);
        if let Some(claim) = &s.permissions_claim {
            caller.permissions = strings(claims.get(claim)).into_iter().collect();
        }
        if let Some(tenant) = tenancy.claimed_tenant(&claims)? {
            caller.tenant = tenant;
        }
        Ok(caller)
    }

    /// The claims of a token whose algorithm, signature and registered claims check out;
    /// otherwise why not (for the log: never token content).
    async fn verify(&self, token: &str, now: DateTime<Utc>) -> Result<Map<String, Value>, &'static str> {
        if token.len() > MAX_TOKEN_BYTES || !looks_like_jwt(token) {
            return Err("not a compact JWS");
        }
        let (message, signature) = token.rsplit_once('.').ok_or("not a compact JWS")?;
        let (header, payload) = message.split_once('.').ok_or("not a compact JWS")?;
        let header: Header = decode_json(header).ok_or("the header is not base64url JSON")?;
        if header.crit.is_some() {
            return Err("the header names critical extensions");
        }
        let alg = Alg::parse(&header.alg).ok_or("the algorithm is not supported")?;
        if !self.settings.algorithms.contains(&alg) {
            return Err("the algorithm is not allowed");
        }
        if signature.is_empty() {
            return Err("the signature is empty");
        }
        let claims: Map<String, Value> = decode_json(payload).ok_or("the payload is not a base64url JSON object")?;
        let key = self.key(alg, header.kid.as_deref(), now).await?;
        if !backend::verify(alg, &key.prepared, message.as_bytes(), signature).await {
            return Err("the signature does not verify");
        }
        self.check_claims(&claims, now.timestamp())?;
        Ok(claims)
    }

    async fn key(&self, alg: Alg, kid: Option<&str>, now: DateTime<Utc>) -> Result<Arc<Key>, &'static str> {
        match (&self.settings.keys, &self.jwks) {
            (KeySource::Static(key), _) if key.fits(alg) => Ok(key.clone()),
            (KeySource::Static(_), _) => Err("the configured key does not verify this algorithm"),
            (KeySource::Jwks(_), Some(jwks)) => jwks.find(alg, kid, now).await,
            (KeySource::Jwks(_), None) => Err("no key set"),
        }
    }

    fn check_claims(&self, claims: &Map<String, Value>, now: i64) -> Result<(), &'static str> {
        let s = &self.settings;
        let exp = claims.get("exp").ok_or("exp is missing")?;
        let exp = numeric_date(exp).ok_or("exp is not a number")?;
        if now.saturating_sub(s.clock_skew_seconds) >= exp {
            return Err("the token has expired");
        }
        if let Some(nbf) = claims.get("nbf") {
            let nbf = numeric_date(nbf).ok_or("nbf is not a number")?;
            if now.saturating_add(s.clock_skew_seconds) < nbf {
                return Err("the token is not valid yet");
            }
        }
        if claims.get("iss").and_then(Value::as_str) != Some(s.issuer.as_str()) {
            return Err("the issuer is not the configured one");
        }
        let audience_ok = match claims.get("aud") {
            Some(Value::String(a)) => *a == s.audience,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(s.audience.as_str())),
            _ => false,
        };
        if !audience_ok {
            return Err("the audience is not the configured one");
        }
        Ok(())
    }
}

fn decode_json<T: serde::de::DeserializeOwned>(segment: &str) -> Option<T> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segment).ok()?).ok()
}

/// A NumericDate: seconds since the epoch, possibly fractional.
fn numeric_date(value: &Value) -> Option<i64> {
    value.as_i64().or_else(|| value.as_f64().filter(|f| f.is_finite()).map(|f| f.floor() as i64))
}

/// A claim that is one string (split on spaces) or an array of strings.
fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// The issuer's key set, cached per instance. No lock is held across the fetch (on the
/// Worker one request must not wake another); the attempt is claimed under the lock, so at
/// most one fetch a minute leaves an instance.
struct Jwks {
    url: reqwest::Url,
    http: backend::Http,
    state: Mutex<JwksState>,
}

#[derive(Default)]
struct JwksState {
    keys: Arc<Vec<Arc<Key>>>,
    fetched_at: Option<DateTime<Utc>>,
    attempted_at: Option<DateTime<Utc>>,
}

impl Jwks {
    fn new(url: reqwest::Url) -> Self {
        Self { url, http: backend::Http::new(), state: Mutex::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, JwksState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn find(&self, alg: Alg, kid: Option<&str>, now: DateTime<Utc>) -> Result<Arc<Key>, &'static str> {
        let (mut keys, stale) = {
            let state = self.state();
            (state.keys.clone(), state.fetched_at.is_none_or(|at| now - at >= JWKS_MAX_AGE))
        };
        if stale && self.claim_fetch(now) {
            keys = self.refresh(now).await;
        }
        if let Some(key) = pick(&keys, alg, kid)? {
            return Ok(key);
        }
        if self.claim_fetch(now) {
            keys = self.refresh(now).await;
            if let Some(key) = pick(&keys, alg, kid)? {
                return Ok(key);
            }
        }
        Err("no key of the key set matches the token's kid and algorithm")
    }

    /// Whether this request may fetch: at most once per [`JWKS_REFETCH_EVERY`].
    fn claim_fetch(&self, now: DateTime<Utc>) -> bool {
        let mut state = self.state();
        if state.attempted_at.is_some_and(|at| now - at < JWKS_REFETCH_EVERY) {
            return false;
        }
        state.attempted_at = Some(now);
        true
    }

    /// Fetches the set; on failure the keys held so far stay.
    async fn refresh(&self, now: DateTime<Utc>) -> Arc<Vec<Arc<Key>>> {
        match tracon_core::platform::send_future(self.fetch()).await {
            Ok(keys) => {
                tracing::debug!(keys = keys.len(), "JWKS fetched");
                let keys = Arc::new(keys);
                let mut state = self.state();
                state.keys = keys.clone();
                state.fetched_at = Some(now);
                keys
            }
            Err(why) => {
                tracing::warn!(url = %self.url, reason = why, "could not fetch the JWT key set");
                self.state().keys.clone()
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<Arc<Key>>, &'static str> {
        let body = self.http.get(&self.url, JWKS_MAX_BYTES).await?;
        #[derive(Deserialize)]
        struct Set {
            keys: Vec<Value>,
        }
        let set: Set = serde_json::from_slice(&body).map_err(|_| "the answer is not a JWK set")?;
        Ok(set.keys.iter().filter_map(jwk).map(Arc::new).collect())
    }
}

/// The key a token names (`kid`), or, without one, the set's only key for its algorithm.
fn pick(keys: &[Arc<Key>], alg: Alg, kid: Option<&str>) -> Result<Option<Arc<Key>>, &'static str> {
    match kid {
        Some(kid) => match keys.iter().find(|k| k.kid.as_deref() == Some(kid)) {
            Some(key) if key.fits(alg) => Ok(Some(key.clone())),
            Some(_) => Err("the key the kid names does not verify this algorithm"),
            None => Ok(None),
        },
        None => {
            let mut fitting = keys.iter().filter(|k| k.fits(alg));
            match (fitting.next(), fitting.next()) {
                (Some(key), None) => Ok(Some(key.clone())),
                (Some(_), Some(_)) => Err("the token has no kid and several keys fit"),
                (None, _) => Ok(None),
            }
        }
    }
}

/// A signature key of a JWK set; keys for encryption, of other types or curves, or with
/// an algorithm Tracon does not verify are skipped.
fn jwk(value: &Value) -> Option<Key> {
    let field = |name: &str| value.get(name).and_then(Value::as_str);
    if field("use").is_some_and(|u| u != "sig") {
        return None;
    }
    let alg = match field("alg") {
        Some(name) => Some(Alg::parse(name)?),
        None => None,
    };
    let component = |name: &str| field(name).filter(|v| URL_SAFE_NO_PAD.decode(v).is_ok_and(|b| !b.is_empty()));
    let (kind, material) = match field("kty")? {
        "RSA" => (KeyKind::Rsa, JwkMaterial::Rsa { n: component("n")?, e: component("e")? }),
        "EC" => {
            let kind = match field("crv")? {
                "P-256" => KeyKind::EcP256,
                "P-384" => KeyKind::EcP384,
                _ => return None,
            };
            (kind, JwkMaterial::Ec { crv: field("crv")?, x: component("x")?, y: component("y")? })
        }
        _ => return None,
    };
    if alg.is_some_and(|a| a.key_kind() != kind) {
        return None;
    }
    match backend::from_jwk(&material) {
        Ok(prepared) => Some(Key { kind, kid: field("kid").map(str::to_owned), alg, prepared }),
        Err(why) => {
            tracing::debug!(reason = why, "JWK skipped");
            None
        }
    }
}

/// The public parts of a JWK, base64url.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
enum JwkMaterial<'a> {
    Rsa { n: &'a str, e: &'a str },
    Ec { crv: &'a str, x: &'a str, y: &'a str },
}

/// Signatures natively: `jsonwebtoken` with aws-lc (already linked for TLS).
#[cfg(not(target_arch = "wasm32"))]
mod backend {
    use jsonwebtoken::{Algorithm, DecodingKey};

    use super::{Alg, JwkMaterial, KeyKind};

    pub struct Prepared(DecodingKey);

    /// Fetches the key set: no redirects, ten seconds at most.
    pub struct Http(reqwest::Client);

    impl Http {
        pub fn new() -> Self {
            Self(
                reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(std::time::Duration::from_secs(10))
                    .build()
                    .unwrap_or_default(),
            )
        }

        pub async fn get(&self, url: &reqwest::Url, limit: usize) -> Result<Vec<u8>, &'static str> {
            let response = self.0.get(url.clone()).send().await.map_err(|_| "the request failed")?;
            if !response.status().is_success() {
                return Err("the answer is not 2xx");
            }
            if response.content_length().is_some_and(|n| n > limit as u64) {
                return Err("the key set is too large");
            }
            let body = response.bytes().await.map_err(|_| "the body could not be read")?;
            if body.len() > limit {
                return Err("the key set is too large");
            }
            Ok(body.to_vec())
        }
    }

    fn provider() -> Result<(), String> {
        jsonwebtoken::crypto::CryptoProvider::try_get_default()
            .map(|_| ())
            .ok_or_else(|| "cannot be used: this build has no JWT crypto provider.".to_owned())
    }

    pub fn from_secret(secret: &[u8]) -> Result<Prepared, String> {
        provider()?;
        DecodingKey::from_secret(secret).map(Prepared).map_err(|_| "is not a usable shared secret.".to_owned())
    }

    pub fn from_spki(kind: KeyKind, pem: &str, _der: Vec<u8>) -> Result<Prepared, String> {
        provider()?;
        let key = match kind {
            KeyKind::Rsa => DecodingKey::from_rsa_pem(pem.as_bytes()),
            _ => DecodingKey::from_ec_pem(pem.as_bytes()),
        };
        key.map(Prepared).map_err(|_| "is not a usable public key.".to_owned())
    }

    pub fn from_jwk(material: &JwkMaterial<'_>) -> Result<Prepared, &'static str> {
        provider().map_err(|_| "no crypto provider")?;
        match material {
            JwkMaterial::Rsa { n, e } => DecodingKey::from_rsa_components(n, e),
            JwkMaterial::Ec { x, y, .. } => DecodingKey::from_ec_components(x, y),
        }
        .map(Prepared)
        .map_err(|_| "unusable key material")
    }

    pub async fn verify(alg: Alg, key: &Prepared, message: &[u8], signature: &str) -> bool {
        let alg = match alg {
            Alg::HS256 => Algorithm::HS256,
            Alg::HS384 => Algorithm::HS384,
            Alg::HS512 => Algorithm::HS512,
            Alg::RS256 => Algorithm::RS256,
            Alg::RS384 => Algorithm::RS384,
            Alg::RS512 => Algorithm::RS512,
            Alg::ES256 => Algorithm::ES256,
            Alg::ES384 => Algorithm::ES384,
        };
        jsonwebtoken::crypto::verify(signature, message, &key.0, alg).unwrap_or(false)
    }
}

/// Signatures on the Worker: WebCrypto (`crypto.subtle`), which workerd implements natively.
/// A key is imported per request (cheap next to the request itself); a `CryptoKey` is a
/// JavaScript object and could not be shared across requests anyway.
#[cfg(target_arch = "wasm32")]
mod backend {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use js_sys::{Array, Object, Reflect, Uint8Array};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    use super::{Alg, JwkMaterial, KeyKind};

    pub enum Prepared {
        Raw(Vec<u8>),
        Spki(Vec<u8>),
        Jwk(String),
    }

    #[wasm_bindgen::prelude::wasm_bindgen]
    extern "C" {
        /// The global `fetch`. reqwest's wasm client is not linked into the Worker (core
        /// sends model calls through `fetch` too), and the bundle has no room for it.
        #[wasm_bindgen(js_name = fetch)]
        fn global_fetch(input: &str, init: &web_sys::RequestInit) -> js_sys::Promise;
    }

    /// Fetches the key set with the platform's `fetch`: no redirects.
    pub struct Http;

    impl Http {
        pub fn new() -> Self {
            Self
        }

        pub async fn get(&self, url: &reqwest::Url, limit: usize) -> Result<Vec<u8>, &'static str> {
            let body = tracon_core::platform::send_future(get(url.as_str())).await?;
            if body.len() > limit {
                return Err("the key set is too large");
            }
            Ok(body)
        }
    }

    async fn get(url: &str) -> Result<Vec<u8>, &'static str> {
        let init = web_sys::RequestInit::new();
        init.set_method("GET");
        init.set_redirect(web_sys::RequestRedirect::Manual);
        let response = JsFuture::from(global_fetch(url, &init)).await.map_err(|_| "the request failed")?;
        let response: web_sys::Response = response.unchecked_into();
        if !(200..300).contains(&response.status()) {
            return Err("the answer is not 2xx");
        }
        let buffer = response.array_buffer().map_err(|_| "the body could not be read")?;
        let buffer = JsFuture::from(buffer).await.map_err(|_| "the body could not be read")?;
        Ok(Uint8Array::new(&buffer).to_vec())
    }

    pub fn from_secret(secret: &[u8]) -> Result<Prepared, String> {
        Ok(Prepared::Raw(secret.to_vec()))
    }

    pub fn from_spki(_kind: KeyKind, _pem: &str, der: Vec<u8>) -> Result<Prepared, String> {
        Ok(Prepared::Spki(der))
    }

    pub fn from_jwk(material: &JwkMaterial<'_>) -> Result<Prepared, &'static str> {
        let jwk = match material {
            JwkMaterial::Rsa { n, e } => serde_json::json!({"kty": "RSA", "n": n, "e": e}),
            JwkMaterial::Ec { crv, x, y } => serde_json::json!({"kty": "EC", "crv": crv, "x": x, "y": y}),
        };
        Ok(Prepared::Jwk(jwk.to_string()))
    }

    pub async fn verify(alg: Alg, key: &Prepared, message: &[u8], signature: &str) -> bool {
        let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else { return false };
        match tracon_core::platform::send_future(subtle_verify(alg, key, message, &signature)).await {
            Ok(valid) => valid,
            Err(_) => {
                tracing::debug!("WebCrypto refused the JWT key or signature");
                false
            }
        }
    }

    fn object(pairs: &[(&str, &str)]) -> Result<Object, JsValue> {
        let o = Object::new();
        for (k, v) in pairs {
            Reflect::set(&o, &JsValue::from_str(k), &JsValue::from_str(v))?;
        }
        Ok(o)
    }

    async fn subtle_verify(alg: Alg, key: &Prepared, message: &[u8], signature: &[u8]) -> Result<bool, JsValue> {
        // Unchecked: workerd's globals need not be `instanceof` the classes web-sys names.
        let crypto: web_sys::Crypto = Reflect::get(&js_sys::global(), &JsValue::from_str("crypto"))?.unchecked_into();
        let subtle = crypto.subtle();
        let hash = alg.hash();
        let (import, params) = match alg.key_kind() {
            KeyKind::Secret => (object(&[("name", "HMAC"), ("hash", hash)])?, object(&[("name", "HMAC")])?),
            KeyKind::Rsa => {
                (object(&[("name", "RSASSA-PKCS1-v1_5"), ("hash", hash)])?, object(&[("name", "RSASSA-PKCS1-v1_5")])?)
            }
            KeyKind::EcP256 => {
                (object(&[("name", "ECDSA"), ("namedCurve", "P-256")])?, object(&[("name", "ECDSA"), ("hash", hash)])?)
            }
            KeyKind::EcP384 => {
                (object(&[("name", "ECDSA"), ("namedCurve", "P-384")])?, object(&[("name", "ECDSA"), ("hash", hash)])?)
            }
        };
        let usages = Array::of1(&JsValue::from_str("verify"));
        let (format, data): (&str, Object) = match key {
            Prepared::Raw(bytes) => ("raw", Uint8Array::from(bytes.as_slice()).unchecked_into()),
            Prepared::Spki(der) => ("spki", Uint8Array::from(der.as_slice()).unchecked_into()),
            Prepared::Jwk(json) => ("jwk", js_sys::JSON::parse(json)?.unchecked_into()),
        };
        let key = JsFuture::from(subtle.import_key_with_object(format, &data, &import, false, &usages)?).await?;
        let key: web_sys::CryptoKey = key.unchecked_into();
        let valid =
            JsFuture::from(subtle.verify_with_object_and_u8_array_and_u8_array(&params, &key, signature, message)?)
                .await?;
        Ok(valid.as_bool().unwrap_or(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RSA_PEM: &str = include_str!("../../tests/fixtures/jwt/rsa-public.pem");
    const EC_PEM: &str = include_str!("../../tests/fixtures/jwt/ec-p256-public.pem");
    const SECRET: &str = "a-shared-secret-of-at-least-32-bytes!";

    fn config(pairs: &[(&str, &str)]) -> Config {
        let base = [("Tracon__Jwt__Issuer", "https://issuer.example"), ("Tracon__Jwt__Audience", "tracon")];
        Config::from_pairs(base.iter().chain(pairs).copied())
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        JwtSettings::from_config(&config(pairs)).unwrap_err().to_string()
    }

    #[test]
    fn nothing_configured_is_off() {
        assert!(JwtSettings::from_config(&Config::default()).unwrap().is_none());
    }

    #[test]
    fn issuer_audience_and_a_key_source_are_required() {
        let only_issuer = Config::from_pairs([("Tracon__Jwt__Issuer", "https://issuer.example")]);
        let e = JwtSettings::from_config(&only_issuer).unwrap_err().to_string();
        assert!(e.contains("Tracon__Jwt__Audience"), "{e}");
        let only_audience = Config::from_pairs([("Tracon__Jwt__Audience", "tracon")]);
        let e = JwtSettings::from_config(&only_audience).unwrap_err().to_string();
        assert!(e.contains("Tracon__Jwt__Issuer"), "{e}");
        let e = error(&[]);
        assert!(e.contains("without a key"), "{e}");
        let e = error(&[
            ("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"),
            ("Tracon__Jwt__SigningKeyConfigurationName", "Auth:Key"),
        ]);
        assert!(e.contains("both set"), "{e}");
    }

    #[test]
    fn the_key_is_read_from_the_named_configuration_key_and_never_echoed() {
        let e = error(&[("Tracon__Jwt__SigningKeyConfigurationName", "Auth:JwtKey")]);
        assert!(e.contains("Auth__JwtKey") && e.contains("no value"), "{e}");
        let e = error(&[("Tracon__Jwt__SigningKeyConfigurationName", "Auth:JwtKey"), ("Auth__JwtKey", "short-secret")]);
        assert!(e.contains("shorter than 32 bytes") && !e.contains("short-secret"), "{e}");
        let e = error(&[
            ("Tracon__Jwt__SigningKeyConfigurationName", "Auth:JwtKey"),
            ("Auth__JwtKey", "-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----"),
        ]);
        assert!(e.contains("BEGIN PUBLIC KEY"), "{e}");
        let s = JwtSettings::from_config(&config(&[
            ("Tracon__Jwt__SigningKeyConfigurationName", "Auth:JwtKey"),
            ("Auth__JwtKey", SECRET),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.algorithms, [Alg::HS256]);
        assert!(!format!("{s:?}").contains(SECRET));
    }

    #[test]
    fn algorithms_must_fit_the_key_source() {
        let e = error(&[
            ("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"),
            ("Tracon__Jwt__Algorithms", "RS256,HS256"),
        ]);
        assert!(e.contains("HS256") && e.contains("shared secret"), "{e}");
        let e = error(&[
            ("Tracon__Jwt__SigningKeyConfigurationName", "Auth:JwtKey"),
            ("Auth__JwtKey", SECRET),
            ("Tracon__Jwt__Algorithms", "RS256"),
        ]);
        assert!(e.contains("needs a public key"), "{e}");
        let e = error(&[("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"), ("Tracon__Jwt__Algorithms", "none")]);
        assert!(e.contains("'none' is not one of"), "{e}");
        let e = error(&[
            ("Tracon__Jwt__SigningKeyConfigurationName", "Auth:JwtKey"),
            ("Auth__JwtKey", RSA_PEM),
            ("Tracon__Jwt__Algorithms", "ES256"),
        ]);
        assert!(e.contains("no algorithm the configured key verifies"), "{e}");
        let s = JwtSettings::from_config(&config(&[
            ("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"),
            ("Tracon__Jwt__Algorithms__0", "ES384"),
            ("Tracon__Jwt__Algorithms__1", "RS512"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.algorithms, [Alg::RS512, Alg::ES384]);
    }

    #[test]
    fn pem_keys_are_classified_by_their_algorithm_identifier() {
        assert_eq!(spki_kind(&pem_public_key(RSA_PEM).unwrap()), Some(KeyKind::Rsa));
        assert_eq!(spki_kind(&pem_public_key(EC_PEM).unwrap()), Some(KeyKind::EcP256));
        assert_eq!(spki_kind(b"\x30\x03\x02\x01\x00"), None);
        let s = JwtSettings::from_config(&config(&[
            ("Tracon__Jwt__SigningKeyConfigurationName", "Auth:JwtKey"),
            ("Auth__JwtKey", EC_PEM),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.algorithms, [Alg::RS256, Alg::ES256]);
    }

    #[test]
    fn a_jwks_url_is_https_or_loopback_http() {
        for good in ["https://issuer.example/.well-known/jwks.json", "http://127.0.0.1:9000/jwks", "http://localhost/j"]
        {
            assert!(JwtSettings::from_config(&config(&[("Tracon__Jwt__JwksUrl", good)])).is_ok(), "{good}");
        }
        for bad in ["http://issuer.example/jwks", "ftp://issuer.example/jwks", "not a url"] {
            let e = error(&[("Tracon__Jwt__JwksUrl", bad)]);
            assert!(e.contains("Tracon__Jwt__JwksUrl"), "{e}");
        }
    }

    #[test]
    fn role_values_default_to_the_role_names_and_must_differ() {
        let s = JwtSettings::from_config(&config(&[
            ("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"),
            ("Tracon__Jwt__Roles__Admin", "tracon-admins"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            s.role_values,
            [
                (Role::Reader, "Reader".into()),
                (Role::Operator, "Operator".into()),
                (Role::Admin, "tracon-admins".into())
            ]
        );
        assert_eq!((s.role_claim.as_str(), s.user_id_claim.as_str(), s.clock_skew_seconds), ("roles", "sub", 60));
        let e =
            error(&[("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"), ("Tracon__Jwt__Roles__Admin", "Reader")]);
        assert!(e.contains("same claim value"), "{e}");
        let e =
            error(&[("Tracon__Jwt__JwksUrl", "https://issuer.example/jwks"), ("Tracon__Jwt__ClockSkewSeconds", "-1")]);
        assert!(e.contains("ClockSkewSeconds"), "{e}");
    }

    #[test]
    fn only_three_base64url_segments_look_like_a_jwt() {
        assert!(looks_like_jwt("eyJh.eyJi.c2ln"));
        assert!(looks_like_jwt("eyJh.eyJi."));
        assert!(!looks_like_jwt("trk_0123456789ab_secret"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt(".b.c"));
        assert!(!looks_like_jwt("a=.b.c"));
    }

    #[test]
    fn der_lengths_are_bounded_by_the_input() {
        assert_eq!(der_element(&[0x30, 0x82, 0xff, 0xff, 0x00], 0x30), None);
        assert_eq!(der_element(&[0x30, 0x01, 0x05, 0x06], 0x30), Some((&[0x05][..], &[0x06][..])));
        assert_eq!(der_element(&[0x31, 0x00], 0x30), None);
    }
}
