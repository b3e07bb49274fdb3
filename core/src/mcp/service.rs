//! [`McpServers`]: discovery and the catalog it keeps.
//!
//! A discovery asks a server for its tools, prompts and resources and stores the answer on
//! the server's record. A server that cannot be reached (or answers nonsense) is stored with
//! no tools and a warning in our words; the other servers are not affected. A run reads the
//! stored discovery and refreshes it first only when it is older than the refresh interval,
//! so a cold instance has the catalog without asking the server.

use std::sync::Arc;

use serde_json::Value;

use super::authorize;
use super::client::{Connection, McpError};
use super::oauth::{McpOAuthStore, McpOAuthTokens};
use super::{
    MAX_LISTED, McpDiscovery, McpPromptInfo, McpResourceInfo, McpServer, McpServerName, McpServerRecord,
    McpServerStore, McpSettings, McpToolInfo,
};
use crate::error::StoreError;
use crate::names::{TenantId, ToolName};
use crate::ports::Clock;

/// The MCP client as the runtime holds it: the stores, the settings, the clock.
pub struct McpServers {
    store: Arc<dyn McpServerStore>,
    oauth: Arc<dyn McpOAuthStore>,
    settings: McpSettings,
    clock: Arc<dyn Clock>,
}

impl McpServers {
    pub fn new(
        store: Arc<dyn McpServerStore>,
        oauth: Arc<dyn McpOAuthStore>,
        settings: McpSettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { store, oauth, settings, clock }
    }

    /// Pending OAuth authorizations and tokens.
    pub fn oauth(&self) -> &Arc<dyn McpOAuthStore> {
        &self.oauth
    }

    pub fn settings(&self) -> &McpSettings {
        &self.settings
    }

    pub fn store(&self) -> &Arc<dyn McpServerStore> {
        &self.store
    }

    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// Opens a conversation with `record`'s server for `tenant`. A server that needs OAuth
    /// gets the stored access token, refreshed first when it is about to expire, and once
    /// more when the server refuses it.
    pub async fn connect(&self, tenant: &TenantId, record: &McpServerRecord) -> Result<Connection<'_>, McpError> {
        let open = |bearer: Option<String>| async move {
            Connection::open(&self.settings, self.clock.as_ref(), tenant, record, bearer.as_deref()).await
        };
        if record.oauth.is_none() {
            return open(None).await;
        }
        let tokens = self.tokens(tenant, record).await?;
        match open(Some(tokens.access_token.clone())).await {
            Err(McpError::Status(401)) => {
                let tokens = self.refreshed(tenant, record, tokens).await?;
                open(Some(tokens.access_token)).await
            }
            other => other,
        }
    }

    /// The tenant's tokens for `record`'s server, refreshed when they are due.
    async fn tokens(&self, tenant: &TenantId, record: &McpServerRecord) -> Result<McpOAuthTokens, McpError> {
        let stored = self.oauth.get_tokens(tenant, &record.name).await.map_err(store_failure)?;
        let tokens = stored.ok_or(McpError::OAuthRequired)?;
        if tokens.due(self.clock.now()) { self.refreshed(tenant, record, tokens).await } else { Ok(tokens) }
    }

    /// Refreshes `tokens` and writes the rotation back over the version read; when another
    /// instance refreshed meanwhile, its tokens are used instead.
    async fn refreshed(
        &self,
        tenant: &TenantId,
        record: &McpServerRecord,
        tokens: McpOAuthTokens,
    ) -> Result<McpOAuthTokens, McpError> {
        let secret = match record.oauth.as_ref().and_then(|o| o.client_secret_configuration_key.as_deref()) {
            Some(key) => {
                Some(self.settings.secret(tenant, key).ok_or_else(|| McpError::CredentialMissing(key.into()))?)
            }
            None => None,
        };
        let fresh = match authorize::refresh(&self.settings, self.clock.as_ref(), &tokens, secret.as_deref()).await {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::warn!(tenant = %tenant, server = %record.name, detail = %e, "MCP OAuth refresh failed");
                // Another instance may have rotated the refresh token under us: the
                // authorization server refuses the spent one before that instance has
                // written the new one back, so its write is waited for, briefly.
                for attempt in 0..ROTATION_WAITS {
                    let now = self.oauth.get_tokens(tenant, &record.name).await.map_err(store_failure)?;
                    match now {
                        Some(theirs) if theirs.version != tokens.version => return Ok(theirs),
                        Some(_) if attempt + 1 < ROTATION_WAITS => self.clock.sleep(ROTATION_WAIT).await,
                        _ => break,
                    }
                }
                return Err(McpError::OAuth(e.public_text()));
            }
        };
        match self.oauth.replace_tokens(tenant, &record.name, tokens.version, &fresh).await.map_err(store_failure)? {
            Some(stored) => Ok(stored),
            None => {
                let theirs = self.oauth.get_tokens(tenant, &record.name).await.map_err(store_failure)?;
                theirs.ok_or(McpError::OAuthRequired)
            }
        }
    }

    /// Asks the server now. Never fails: an unreachable server is a discovery with no tools
    /// and a warning.
    pub async fn discover(&self, tenant: &TenantId, record: &McpServerRecord) -> McpDiscovery {
        let refreshed_at = self.clock.now();
        match self.ask(tenant, record).await {
            Ok(mut discovery) => {
                discovery.refreshed_at = refreshed_at;
                discovery
            }
            Err(e) => {
                let reference = crate::failure::new_ref();
                tracing::warn!(tenant = %tenant, server = %record.name, r#ref = %reference, detail = %e,
                    "MCP server discovery failed; its tools are not offered until it answers");
                McpDiscovery {
                    refreshed_at,
                    protocol_version: None,
                    tools: Vec::new(),
                    prompts: Vec::new(),
                    resources: Vec::new(),
                    warnings: vec![format!("{} Its tools are not offered. (ref: {reference})", e.public_text())],
                    reachable: false,
                }
            }
        }
    }

    async fn ask(&self, tenant: &TenantId, record: &McpServerRecord) -> Result<McpDiscovery, McpError> {
        let mut conn = self.connect(tenant, record).await?;
        let max = self.settings.max_tools_per_server;
        let mut warnings = Vec::new();
        let (listed, cut) = optional(conn.list("tools/list", "tools", max).await)?;
        if cut {
            warnings.push(format!("The server offers more than {max} tools; only the first {max} are offered."));
        }
        let mut tools = Vec::new();
        let mut unusable = 0;
        for raw in listed {
            match tool_info(&record.name, raw) {
                Some(t) if !tools.iter().any(|k: &McpToolInfo| k.tool_name == t.tool_name) => tools.push(t),
                _ => unusable += 1,
            }
        }
        if unusable > 0 {
            warnings.push(format!(
                "{unusable} tool(s) were left out: a name that does not make a valid '{}_{{tool}}' name, a repeated name, or an argument schema that is not a JSON Schema object.",
                record.name
            ));
        }
        let (prompts, _) = optional(conn.list("prompts/list", "prompts", MAX_LISTED).await)?;
        let (resources, _) = optional(conn.list("resources/list", "resources", MAX_LISTED).await)?;
        Ok(McpDiscovery {
            refreshed_at: self.clock.now(),
            protocol_version: Some(conn.version().to_owned()),
            tools,
            prompts: prompts.into_iter().filter_map(prompt_info).collect(),
            resources: resources.into_iter().filter_map(resource_info).collect(),
            warnings,
            reachable: true,
        })
    }

    /// Discovers `server` now and stores the result (unless the record changed meanwhile).
    pub async fn refresh(&self, tenant: &TenantId, record: &McpServerRecord) -> Result<McpServer, StoreError> {
        let discovery = self.discover(tenant, record).await;
        self.store.save_discovery(tenant, &record.name, record.updated_at, &discovery).await?;
        Ok(McpServer { record: record.clone(), discovery: Some(discovery) })
    }

    /// The server with a discovery no older than the refresh interval: the stored one, or a
    /// fresh one when it is stale or missing.
    pub async fn current(&self, tenant: &TenantId, name: &McpServerName) -> Result<Option<McpServer>, StoreError> {
        let Some(server) = self.store.get(tenant, name).await? else { return Ok(None) };
        let fresh = server.discovery.as_ref().is_some_and(|d| {
            (self.clock.now() - d.refreshed_at).to_std().is_ok_and(|age| age < self.settings.refresh_interval)
        });
        if fresh { Ok(Some(server)) } else { self.refresh(tenant, &server.record).await.map(Some) }
    }

    /// Every server of `tenant`, each discovered now. One unreachable server does not stop
    /// the others.
    pub async fn refresh_all(&self, tenant: &TenantId) -> Result<Vec<McpServer>, StoreError> {
        let mut out = Vec::new();
        let mut skip = 0;
        loop {
            let page = self.store.list(tenant, skip, 100).await?;
            if page.is_empty() {
                break;
            }
            skip += page.len();
            for server in page {
                out.push(self.refresh(tenant, &server.record).await?);
            }
        }
        Ok(out)
    }
}

/// How often, and how far apart, a failed refresh looks for another instance's rotation.
const ROTATION_WAITS: usize = 5;
const ROTATION_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// A store failure while reading or writing tokens: the exchange cannot go on.
fn store_failure(e: StoreError) -> McpError {
    tracing::error!(error = %e, "the MCP OAuth tokens could not be read or written");
    McpError::OAuth("The stored tokens could not be read or written.".into())
}

/// A list a server may not offer at all: an unknown method is an empty list.
fn optional(listed: Result<(Vec<Value>, bool), McpError>) -> Result<(Vec<Value>, bool), McpError> {
    match listed {
        Err(McpError::Rpc { .. }) => Ok((Vec::new(), false)),
        other => other,
    }
}

/// A discovered tool, when it can be offered: `{server}_{tool}` is a valid tool name and its
/// argument schema a JSON Schema object.
fn tool_info(server: &McpServerName, raw: Value) -> Option<McpToolInfo> {
    let tool: rmcp::model::Tool = serde_json::from_value(raw).ok()?;
    let tool_name = format!("{server}_{}", tool.name);
    ToolName::parse(&tool_name).ok()?;
    let schema = Value::Object((*tool.input_schema).clone());
    if schema.get("type").and_then(Value::as_str) != Some("object") || crate::schema::Validator::new(&schema).is_err() {
        return None;
    }
    let hints = tool.annotations.as_ref();
    Some(McpToolInfo {
        name: tool.name.to_string(),
        description: tool
            .description
            .as_deref()
            .filter(|d| !d.trim().is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("The '{}' tool of the MCP server '{server}'.", tool.name)),
        title: tool.title.clone().or_else(|| hints.and_then(|h| h.title.clone())),
        tool_name,
        input_schema: schema,
        read_only: hints.and_then(|h| h.read_only_hint).unwrap_or(false),
        destructive: hints.and_then(|h| h.destructive_hint).unwrap_or(false),
    })
}

fn prompt_info(raw: Value) -> Option<McpPromptInfo> {
    let prompt: rmcp::model::Prompt = serde_json::from_value(raw).ok()?;
    Some(McpPromptInfo {
        name: prompt.name,
        description: prompt.description,
        arguments: prompt.arguments.unwrap_or_default().into_iter().map(|a| a.name).collect(),
    })
}

fn resource_info(raw: Value) -> Option<McpResourceInfo> {
    let resource: rmcp::model::Resource = serde_json::from_value(raw).ok()?;
    Some(McpResourceInfo {
        uri: resource.uri,
        name: resource.name,
        mime_type: resource.mime_type,
        description: resource.description,
    })
}
