//! OAuth for remote MCP servers that need it: what a server registration says about it, and
//! the store of pending authorizations and tokens.
//!
//! - [`McpOAuthConfig`] is the optional `oauth` object of a registration: a client id (else
//!   Tracon registers itself with RFC 7591 dynamic client registration), the *name* of the
//!   configuration key holding the client secret, the scopes to ask for.
//! - A [`PendingAuthorization`] is one `POST …/oauth/authorize` waiting for the browser to come
//!   back to the callback: found by the SHA-256 digest of its `state` (the state is the
//!   callback's only credential, and the store never holds it), taken once, refused after
//!   [`PENDING_TTL`].
//! - [`McpOAuthTokens`] are a tenant's tokens for one server, with what a refresh needs (the
//!   token endpoint, the client, the resource). Stored — on Postgres encrypted — so any
//!   instance of a serverless deployment can use and refresh them; a refresh writes the
//!   rotated tokens back only over the version it read ([`McpOAuthStore::replace_tokens`]), so
//!   two instances refreshing at once do not lose a rotation.
//!
//! The protocol itself (discovery, registration, PKCE, the token endpoint) is
//! [`super::authorize`].

use std::collections::BTreeMap;
use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::McpServerName;
use crate::error::{StoreError, check_text, check_text_opt};
use crate::names::TenantId;
use crate::sync::lock;

/// How long a pending authorization waits for the browser to come back.
pub const PENDING_TTL: Duration = Duration::minutes(10);
/// A token this close to its expiry is refreshed before it is used.
pub const REFRESH_MARGIN: Duration = Duration::seconds(60);
/// Most scopes a registration may ask for.
pub const MAX_SCOPES: usize = 32;
/// Longest scope, client id.
pub const MAX_SCOPE_LEN: usize = 128;
pub const MAX_CLIENT_ID_LEN: usize = 256;

/// The `oauth` object of a server registration: the server needs an OAuth access token,
/// which an administrator obtains once through `POST /api/mcp-servers/{name}/oauth/authorize`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpOAuthConfig {
    /// The client id registered with the authorization server; without it Tracon registers
    /// itself (RFC 7591) when authorizing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The NAME of the configuration key holding the client secret (under the tenant's
    /// partition of `Tracon:McpSecrets:`); none for a public client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_configuration_key: Option<String>,
    /// The scopes asked for; none: the server's advertised scopes, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// The OAuth client Tracon is at one authorization server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub client_id: String,
    /// A secret the authorization server issued at dynamic registration (a configured secret
    /// is read from configuration at call time instead, never stored).
    pub issued_secret: Option<String>,
}

/// One authorization waiting for its callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAuthorization {
    /// SHA-256 of the `state` sent to the authorization server, hex.
    pub state_digest: String,
    pub tenant: TenantId,
    pub server: McpServerName,
    /// The PKCE verifier (a protected value).
    pub code_verifier: String,
    pub redirect_uri: String,
    pub client: OAuthClient,
    pub token_endpoint: String,
    /// The canonical URI of the MCP server (RFC 8707 `resource`).
    pub resource: String,
    pub scopes: Vec<String>,
    pub expires_at: DateTime<Utc>,
}

/// A tenant's tokens for one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpOAuthTokens {
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// When the access token expires (none: the server did not say).
    pub expires_at: Option<DateTime<Utc>>,
    pub scopes: Vec<String>,
    pub client: OAuthClient,
    pub token_endpoint: String,
    pub resource: String,
    /// Bumped by every write; a refresh replaces only the version it read.
    pub version: i64,
    pub updated_at: DateTime<Utc>,
}

impl PendingAuthorization {
    /// When it was started (its expiry less [`PENDING_TTL`]).
    pub fn started_at(&self) -> DateTime<Utc> {
        self.expires_at - PENDING_TTL
    }
}

impl McpOAuthTokens {
    /// Whether the access token should be refreshed before it is used at `now`.
    pub fn due(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|at| at - REFRESH_MARGIN <= now)
    }
}

/// Pending authorizations and tokens.
#[async_trait::async_trait]
pub trait McpOAuthStore: Send + Sync {
    /// Stores a pending authorization (its state digest is new: 256 random bits). Pending
    /// authorizations whose browser never came back are removed on the way, once expired
    /// (`now` is the new one's start, [`PendingAuthorization::started_at`]).
    async fn put_pending(&self, pending: &PendingAuthorization) -> Result<(), StoreError>;
    /// Takes the pending authorization of `state_digest` — at most once: it is removed
    /// whether or not it has expired, and an expired one is not returned. The one read that
    /// is not by tenant: the callback knows only the state, which is the credential.
    async fn take_pending(
        &self,
        state_digest: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<PendingAuthorization>, StoreError>;
    async fn get_tokens(&self, tenant: &TenantId, server: &McpServerName)
    -> Result<Option<McpOAuthTokens>, StoreError>;
    /// Stores tokens obtained by an authorization (whatever was there before is replaced);
    /// returns them as stored, with their new version.
    async fn put_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
        tokens: &McpOAuthTokens,
    ) -> Result<McpOAuthTokens, StoreError>;
    /// Replaces the tokens of version `expected` with refreshed ones; `None` (nothing
    /// written) when another writer got there first or they are gone.
    async fn replace_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
        expected: i64,
        tokens: &McpOAuthTokens,
    ) -> Result<Option<McpOAuthTokens>, StoreError>;
    /// Forgets the tokens; `false` when there were none.
    async fn delete_tokens(&self, tenant: &TenantId, server: &McpServerName) -> Result<bool, StoreError>;
}

/// [`check_text`] over what a pending authorization stores.
pub fn check_pending_text(p: &PendingAuthorization) -> Result<(), StoreError> {
    check_text("state", &p.state_digest)?;
    check_text("codeVerifier", &p.code_verifier)?;
    check_text("redirectUri", &p.redirect_uri)?;
    check_client_text(&p.client)?;
    check_text("tokenEndpoint", &p.token_endpoint)?;
    check_text("resource", &p.resource)?;
    p.scopes.iter().try_for_each(|s| check_text("scopes", s))
}

/// [`check_text`] over what tokens store (the authorization server's words end up in them).
pub fn check_tokens_text(t: &McpOAuthTokens) -> Result<(), StoreError> {
    check_text("accessToken", &t.access_token)?;
    check_text_opt("refreshToken", t.refresh_token.as_deref())?;
    check_client_text(&t.client)?;
    check_text("tokenEndpoint", &t.token_endpoint)?;
    check_text("resource", &t.resource)?;
    t.scopes.iter().try_for_each(|s| check_text("scopes", s))
}

fn check_client_text(c: &OAuthClient) -> Result<(), StoreError> {
    check_text("clientId", &c.client_id)?;
    check_text_opt("clientSecret", c.issued_secret.as_deref())
}

/// Pending authorizations and tokens in process memory.
#[derive(Default)]
pub struct MemoryMcpOAuthStore {
    pending: Mutex<BTreeMap<String, PendingAuthorization>>,
    tokens: Mutex<BTreeMap<(TenantId, McpServerName), McpOAuthTokens>>,
}

#[async_trait::async_trait]
impl McpOAuthStore for MemoryMcpOAuthStore {
    async fn put_pending(&self, pending: &PendingAuthorization) -> Result<(), StoreError> {
        check_pending_text(pending)?;
        let mut all = lock(&self.pending);
        let now = pending.started_at();
        all.retain(|_, p| p.expires_at > now);
        if all.contains_key(&pending.state_digest) {
            return Err(StoreError::Conflict("the state is already pending".into()));
        }
        all.insert(pending.state_digest.clone(), pending.clone());
        Ok(())
    }

    async fn take_pending(
        &self,
        state_digest: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<PendingAuthorization>, StoreError> {
        Ok(lock(&self.pending).remove(state_digest).filter(|p| p.expires_at > now))
    }

    async fn get_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
    ) -> Result<Option<McpOAuthTokens>, StoreError> {
        Ok(lock(&self.tokens).get(&(tenant.clone(), server.clone())).cloned())
    }

    async fn put_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
        tokens: &McpOAuthTokens,
    ) -> Result<McpOAuthTokens, StoreError> {
        check_tokens_text(tokens)?;
        let mut all = lock(&self.tokens);
        let key = (tenant.clone(), server.clone());
        let version = all.get(&key).map_or(0, |t| t.version) + 1;
        let stored = McpOAuthTokens { version, ..tokens.clone() };
        all.insert(key, stored.clone());
        Ok(stored)
    }

    async fn replace_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
        expected: i64,
        tokens: &McpOAuthTokens,
    ) -> Result<Option<McpOAuthTokens>, StoreError> {
        check_tokens_text(tokens)?;
        let mut all = lock(&self.tokens);
        match all.get_mut(&(tenant.clone(), server.clone())) {
            Some(current) if current.version == expected => {
                *current = McpOAuthTokens { version: expected + 1, ..tokens.clone() };
                Ok(Some(current.clone()))
            }
            _ => Ok(None),
        }
    }

    async fn delete_tokens(&self, tenant: &TenantId, server: &McpServerName) -> Result<bool, StoreError> {
        Ok(lock(&self.tokens).remove(&(tenant.clone(), server.clone())).is_some())
    }
}
