//! The MCP client: remote MCP servers whose tools, prompts and resources a tenant's agents use.
//!
//! - A **server record** ([`McpServerRecord`]) is a tenant's registration of one remote server:
//!   its name, its Streamable HTTP endpoint (`http`/`https` only — there is no `stdio`), the
//!   *names* of the configuration keys its `Authorization` and other credential headers are read
//!   from at call time, and whether its tools ask for approval (by default they do).
//! - Its **discovery** ([`McpDiscovery`]) is what the server last said it offers: tools, prompts
//!   and resources, with when it was asked and, for a server that could not be reached, a
//!   warning and no tools. It is kept in the same store as the record, so a cold instance has
//!   the catalog without a round trip; [`service::McpServers`] refreshes it when it is older than
//!   `Tracon:Mcp:RefreshIntervalSeconds`, or at once on `POST /api/mcp-servers/refresh`.
//! - [`client`] speaks the protocol (JSON-RPC over HTTP POST, answers as JSON or an event
//!   stream) through the egress guard; [`tools`] turns a discovered tool into a
//!   [`crate::tools::ToolRegistration`] named `{server}_{tool}` whose body is a `tools/call`,
//!   so every call goes through the one tool pipeline.
//!
//! The protocol types are the official SDK's (`rmcp`, model types only, which build for
//! wasm32); the HTTP exchange is ours, over reqwest natively and the platform's fetch on
//! Workers, like every other outbound call of core.

pub mod authorize;
pub mod client;
pub mod oauth;
pub mod resources;
pub mod service;
pub mod tools;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::{Config, ConfigError};
use crate::error::{StoreError, check_text, check_text_opt};
use crate::names::TenantId;
use crate::secret_names::SecretNamespace;
use crate::sync::lock;

/// Where a tenant's MCP credential key names go by default (`Tracon:Mcp:AllowedConfigurationPrefix`).
pub const DEFAULT_SECRET_PREFIX: &str = "Tracon:McpSecrets:";
pub use crate::names::{MAX_SERVER_NAME_LEN, McpServerName};
/// Longest endpoint URL.
pub const MAX_ENDPOINT_LEN: usize = 2_048;
/// Most credential headers one server may name.
pub const MAX_HEADERS: usize = 16;
/// Default of `Tracon:Mcp:MaxToolsPerServer`.
pub const DEFAULT_MAX_TOOLS: usize = 100;
/// Most prompts and resources kept from one server's discovery.
pub const MAX_LISTED: usize = 500;

/// A tenant's registration of one remote MCP server. Stores no credential: only the names of
/// the configuration keys the values are read from when a request goes out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerRecord {
    pub name: McpServerName,
    /// The server's Streamable HTTP endpoint (`https://…/mcp`; `http` only where the egress
    /// guard allows it).
    pub endpoint: String,
    /// The configuration key whose value is sent as the `Authorization` header
    /// (`Bearer …`), never the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_configuration_key: Option<String>,
    /// Header name → the configuration key its value is read from.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header_configuration_keys: BTreeMap<String, String>,
    /// Whether the server's tools ask for approval (default `true`).
    pub requires_approval: bool,
    /// The server needs an OAuth access token ([`oauth`]); exclusive with
    /// `authorization_configuration_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<oauth::McpOAuthConfig>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One tool a server offers, as discovered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpToolInfo {
    /// The server's own name for it.
    pub name: String,
    /// What agents name it: `{server}_{tool}`.
    pub tool_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    /// The JSON Schema of its arguments.
    #[schema(value_type = Object)]
    pub input_schema: serde_json::Value,
    /// The server's hints: it only reads, it may destroy.
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub destructive: bool,
}

/// One prompt a server offers (a snapshot an administrator may copy; agents never pull one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpPromptInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its argument names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
}

/// One resource a server advertises: the only URIs `mcpResourceUris` may name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpResourceInfo {
    pub uri: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// What a server said it offers when last asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpDiscovery {
    pub refreshed_at: DateTime<Utc>,
    /// The protocol revision spoken (none when the server could not be reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default)]
    pub tools: Vec<McpToolInfo>,
    #[serde(default)]
    pub prompts: Vec<McpPromptInfo>,
    #[serde(default)]
    pub resources: Vec<McpResourceInfo>,
    /// Why the server has no tools now, or what was left out (our words, never the
    /// server's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Whether the last attempt reached the server.
    pub reachable: bool,
}

/// A record and its last discovery.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub record: McpServerRecord,
    pub discovery: Option<McpDiscovery>,
}

/// A tenant's MCP server records and their discoveries.
#[async_trait::async_trait]
pub trait McpServerStore: Send + Sync {
    /// The tenant's servers, by name.
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<McpServer>, StoreError>;
    async fn get(&self, tenant: &TenantId, name: &McpServerName) -> Result<Option<McpServer>, StoreError>;
    /// Creates or replaces the record; a replacement keeps `created_at` and forgets the
    /// discovery (it described the old registration). Returns what is stored.
    async fn put(&self, tenant: &TenantId, record: &McpServerRecord) -> Result<McpServerRecord, StoreError>;
    /// Removes it; `false` when there was none.
    async fn delete(&self, tenant: &TenantId, name: &McpServerName) -> Result<bool, StoreError>;
    /// Stores a discovery of the registration last written at `registered_at`; `false` (and
    /// nothing written) when the record is gone or was written since.
    async fn save_discovery(
        &self,
        tenant: &TenantId,
        name: &McpServerName,
        registered_at: DateTime<Utc>,
        discovery: &McpDiscovery,
    ) -> Result<bool, StoreError>;
}

/// [`check_text`] over a record's text.
pub fn check_record_text(r: &McpServerRecord) -> Result<(), StoreError> {
    check_text("endpoint", &r.endpoint)?;
    check_text_opt("authorizationConfigurationKey", r.authorization_configuration_key.as_deref())?;
    for (header, key) in &r.header_configuration_keys {
        check_text("headerConfigurationKeys", header)?;
        check_text("headerConfigurationKeys", key)?;
    }
    if let Some(o) = &r.oauth {
        check_text_opt("oauth.clientId", o.client_id.as_deref())?;
        check_text_opt("oauth.clientSecretConfigurationKey", o.client_secret_configuration_key.as_deref())?;
        o.scopes.iter().try_for_each(|s| check_text("oauth.scopes", s))?;
    }
    Ok(())
}

/// [`check_text`] over a discovery (a server's words end up in it).
pub fn check_discovery_text(d: &McpDiscovery) -> Result<(), StoreError> {
    let json = serde_json::to_string(d).map_err(|e| StoreError::Internal { detail: e.to_string() })?;
    // Escaped in JSON as \u0000: refused like every other store refuses it.
    if json.contains("\\u0000") {
        return Err(StoreError::InvalidText { field: "discovery".into() });
    }
    Ok(())
}

/// Records in process memory.
#[derive(Default)]
pub struct MemoryMcpServerStore {
    servers: Mutex<BTreeMap<(TenantId, McpServerName), McpServer>>,
}

#[async_trait::async_trait]
impl McpServerStore for MemoryMcpServerStore {
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<McpServer>, StoreError> {
        Ok(lock(&self.servers)
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .skip(skip)
            .take(take)
            .map(|(_, s)| s.clone())
            .collect())
    }

    async fn get(&self, tenant: &TenantId, name: &McpServerName) -> Result<Option<McpServer>, StoreError> {
        Ok(lock(&self.servers).get(&(tenant.clone(), name.clone())).cloned())
    }

    async fn put(&self, tenant: &TenantId, record: &McpServerRecord) -> Result<McpServerRecord, StoreError> {
        check_record_text(record)?;
        let mut servers = lock(&self.servers);
        let key = (tenant.clone(), record.name.clone());
        let mut stored = record.clone();
        if let Some(before) = servers.get(&key) {
            stored.created_at = before.record.created_at;
        }
        servers.insert(key, McpServer { record: stored.clone(), discovery: None });
        Ok(stored)
    }

    async fn delete(&self, tenant: &TenantId, name: &McpServerName) -> Result<bool, StoreError> {
        Ok(lock(&self.servers).remove(&(tenant.clone(), name.clone())).is_some())
    }

    async fn save_discovery(
        &self,
        tenant: &TenantId,
        name: &McpServerName,
        registered_at: DateTime<Utc>,
        discovery: &McpDiscovery,
    ) -> Result<bool, StoreError> {
        check_discovery_text(discovery)?;
        let mut servers = lock(&self.servers);
        match servers.get_mut(&(tenant.clone(), name.clone())) {
            Some(s) if s.record.updated_at == registered_at => {
                s.discovery = Some(discovery.clone());
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// `Tracon:Mcp:*`: discovery's schedule and bounds, the egress guard its connections go
/// through, and where credential key names go and their values are read.
#[derive(Clone)]
pub struct McpSettings {
    /// `RefreshIntervalSeconds` (300): a discovery older than this is refreshed before use.
    pub refresh_interval: Duration,
    /// `ConnectionTimeoutSeconds` (30): the longest one exchange with a server may take.
    pub connection_timeout: Duration,
    /// `MaxToolsPerServer` (100): tools kept from one server; the rest are left out with a
    /// warning.
    pub max_tools_per_server: usize,
    /// `AllowedConfigurationPrefix` (`Tracon:McpSecrets:`) and `TenantPrefixes:{tenant}`.
    pub secret_names: SecretNamespace,
    /// `Tracon:Egress:*`, shared with webhooks and tenants' provider endpoints.
    pub egress: crate::egress::EgressPolicy,
    /// `OAuthRedirectUri`: Tracon's OAuth callback as authorization servers redirect to it
    /// (`https://…/api/mcp-servers/oauth/callback`); without it, built from the authorizing
    /// request's `Host` and `X-Forwarded-Proto`.
    pub oauth_redirect_uri: Option<String>,
    secrets: Config,
    /// The client requests go out with (natively: addresses checked at connect).
    client: reqwest::Client,
    /// The same guard without redirects, for OAuth requests ([`authorize`]).
    oauth_client: reqwest::Client,
}

impl std::fmt::Debug for McpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds secrets: never printed.
        f.debug_struct("McpSettings")
            .field("refresh_interval", &self.refresh_interval)
            .field("connection_timeout", &self.connection_timeout)
            .field("max_tools_per_server", &self.max_tools_per_server)
            .field("secret_names", &self.secret_names)
            .finish_non_exhaustive()
    }
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            refresh_interval: Duration::from_secs(300),
            connection_timeout: Duration::from_secs(30),
            max_tools_per_server: DEFAULT_MAX_TOOLS,
            secret_names: SecretNamespace::new(DEFAULT_SECRET_PREFIX),
            egress: crate::egress::EgressPolicy::default(),
            oauth_redirect_uri: None,
            secrets: Config::default(),
            client: reqwest::Client::new(),
            oauth_client: reqwest::Client::new(),
        }
    }
}

impl McpSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let max_tools = config.parse::<usize>("Tracon:Mcp:MaxToolsPerServer")?.unwrap_or(d.max_tools_per_server);
        let connection_timeout = config.seconds("Tracon:Mcp:ConnectionTimeoutSeconds")?.unwrap_or(d.connection_timeout);
        if max_tools == 0 || connection_timeout.is_zero() {
            return Err(ConfigError::Message(
                "Tracon__Mcp__MaxToolsPerServer and Tracon__Mcp__ConnectionTimeoutSeconds must be positive.".into(),
            ));
        }
        let egress = crate::egress::EgressPolicy::from_config(config)?;
        let oauth_redirect_uri = config.get("Tracon:Mcp:OAuthRedirectUri").map(str::trim).filter(|v| !v.is_empty());
        if let Some(uri) = oauth_redirect_uri
            && reqwest::Url::parse(uri).map_or(true, |u| !matches!(u.scheme(), "https" | "http"))
        {
            return Err(ConfigError::Message("Tracon__Mcp__OAuthRedirectUri must be an absolute http(s) URL.".into()));
        }
        Ok(Self {
            oauth_redirect_uri: oauth_redirect_uri.map(str::to_owned),
            refresh_interval: config.seconds("Tracon:Mcp:RefreshIntervalSeconds")?.unwrap_or(d.refresh_interval),
            connection_timeout,
            max_tools_per_server: max_tools,
            secret_names: SecretNamespace::from_config(config, "Tracon:Mcp", DEFAULT_SECRET_PREFIX)?,
            client: guarded_client(&egress)?,
            oauth_client: oauth_client(&egress)?,
            egress,
            secrets: config.clone(),
        })
    }

    /// Replaces the configuration credential values are read from.
    pub fn with_secrets(mut self, secrets: Config) -> Self {
        self.secrets = secrets;
        self
    }

    /// Replaces the egress guard (and its client).
    pub fn with_egress(mut self, egress: crate::egress::EgressPolicy) -> Result<Self, ConfigError> {
        self.client = guarded_client(&egress)?;
        self.oauth_client = oauth_client(&egress)?;
        self.egress = egress;
        Ok(self)
    }

    /// The value of `tenant`'s key name, when it may read it and it holds one.
    pub fn secret(&self, tenant: &TenantId, name: &str) -> Option<String> {
        if !self.secret_names.may_resolve(tenant, name) {
            return None;
        }
        self.secrets.get(name).map(str::to_owned).filter(|v| !v.trim().is_empty())
    }

    /// Checks an endpoint: an absolute `http(s)` URL the egress guard lets through. The
    /// message is ours and names no part of the URL.
    pub fn check_endpoint(&self, endpoint: &str) -> Result<reqwest::Url, String> {
        if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
            return Err("The endpoint must be an http or https URL (MCP servers are reached over Streamable HTTP only; there is no stdio transport).".into());
        }
        let url = reqwest::Url::parse(endpoint).map_err(|_| "The endpoint is not an absolute URL.".to_owned())?;
        self.egress.check_url(&url).map_err(|e| format!("The egress guard refuses the endpoint: {e}."))?;
        Ok(url)
    }

    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub(crate) fn oauth_client(&self) -> &reqwest::Client {
        &self.oauth_client
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn guarded_client(egress: &crate::egress::EgressPolicy) -> Result<reqwest::Client, ConfigError> {
    crate::egress::guarded_client(std::sync::Arc::new(egress.clone()))
        .map_err(|e| ConfigError::Message(format!("could not build the client of MCP servers: {e}")))
}

#[cfg(not(target_arch = "wasm32"))]
fn oauth_client(egress: &crate::egress::EgressPolicy) -> Result<reqwest::Client, ConfigError> {
    crate::egress::guarded_client_without_redirects(std::sync::Arc::new(egress.clone()))
        .map_err(|e| ConfigError::Message(format!("could not build the OAuth client of MCP servers: {e}")))
}

#[cfg(target_arch = "wasm32")]
fn oauth_client(_: &crate::egress::EgressPolicy) -> Result<reqwest::Client, ConfigError> {
    Ok(reqwest::Client::new())
}

/// On Workers the platform's `fetch` connects (and cannot reach private networks): the URL
/// check is the guard.
#[cfg(target_arch = "wasm32")]
fn guarded_client(_: &crate::egress::EgressPolicy) -> Result<reqwest::Client, ConfigError> {
    Ok(reqwest::Client::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_leave_the_first_underscore_to_the_tool() {
        for ok in ["crm", "a", "my-server-2"] {
            assert!(McpServerName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Crm", "crm_x", "1crm", "-a", "a b", &"a".repeat(33)] {
            assert!(McpServerName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_are_http_only_and_guarded() {
        let s = McpSettings::default();
        assert!(s.check_endpoint("https://mcp.example.com/mcp").is_ok());
        assert!(s.check_endpoint("stdio:///usr/bin/server").is_err());
        assert!(s.check_endpoint("npx server").is_err());
        assert!(s.check_endpoint("http://mcp.example.com/mcp").is_err(), "plain http needs AllowHttp");
        assert!(s.check_endpoint("https://127.0.0.1/mcp").is_err());
        assert!(s.check_endpoint("https://localhost/mcp").is_err());
    }
}
