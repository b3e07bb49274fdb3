//! Tenants' MCP servers on Postgres: one `mcp_servers` row per tenant and name, the
//! registration in columns and the last discovery as `jsonb` (a cold instance reads the
//! catalog from here). Nothing in a row is a protected value: credentials are stored by key
//! name only (the `oauth` object too: a client id, a key name, scopes), and a discovery is what
//! the server publishes to any client. OAuth tokens are `mcp_oauth.rs`'s, protected.

use std::collections::BTreeMap;

use serde_json::Value;
use tracon_core::error::StoreError;
use tracon_core::mcp::{
    McpDiscovery, McpServer, McpServerName, McpServerRecord, McpServerStore, check_discovery_text, check_record_text,
};
use tracon_core::names::TenantId;

use super::Db;
use crate::codec::{bigint, corrupt};
use crate::driver::Row;
use crate::params;
use crate::sql;

pub struct PgMcpServerStore {
    db: Db,
}

impl PgMcpServerStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn record(row: &Row) -> Result<McpServerRecord, StoreError> {
    let name: String = row.get("name")?;
    let headers: Value = row.get("header_configuration_keys")?;
    let oauth: Option<Value> = row.get("oauth")?;
    Ok(McpServerRecord {
        name: McpServerName::parse(&name).map_err(|e| corrupt("MCP server name", e))?,
        endpoint: row.get("endpoint")?,
        authorization_configuration_key: row.get("authorization_configuration_key")?,
        header_configuration_keys: serde_json::from_value::<BTreeMap<String, String>>(headers)
            .map_err(|e| corrupt("MCP server headers", e))?,
        requires_approval: row.get("requires_approval")?,
        oauth: oauth.map(serde_json::from_value).transpose().map_err(|e| corrupt("MCP server oauth", e))?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
}

fn server(row: &Row) -> Result<McpServer, StoreError> {
    let discovery: Option<Value> = row.get("discovery")?;
    Ok(McpServer {
        record: record(row)?,
        discovery: discovery
            .map(serde_json::from_value::<McpDiscovery>)
            .transpose()
            .map_err(|e| corrupt("MCP server discovery", e))?,
    })
}

fn json<T: serde::Serialize>(value: &T) -> Result<Value, StoreError> {
    serde_json::to_value(value).map_err(|e| StoreError::Internal { detail: e.to_string() })
}

#[async_trait::async_trait]
impl McpServerStore for PgMcpServerStore {
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<McpServer>, StoreError> {
        let rows = self.db.query(sql::MCP_SERVER_LIST, &params![tenant.as_str(), bigint(skip), bigint(take)]).await?;
        rows.iter().map(server).collect()
    }

    async fn get(&self, tenant: &TenantId, name: &McpServerName) -> Result<Option<McpServer>, StoreError> {
        let row = self.db.query_opt(sql::MCP_SERVER_GET, &params![tenant.as_str(), name.as_str()]).await?;
        row.as_ref().map(server).transpose()
    }

    async fn put(&self, tenant: &TenantId, r: &McpServerRecord) -> Result<McpServerRecord, StoreError> {
        check_record_text(r)?;
        let headers = json(&r.header_configuration_keys)?;
        let oauth = r.oauth.as_ref().map(json).transpose()?;
        let row = self
            .db
            .query_one(
                sql::MCP_SERVER_PUT,
                &params![
                    tenant.as_str(),
                    r.name.as_str(),
                    &r.endpoint,
                    r.authorization_configuration_key.as_deref(),
                    headers,
                    r.requires_approval,
                    r.created_at,
                    r.updated_at,
                    oauth
                ],
            )
            .await?;
        record(&row)
    }

    async fn delete(&self, tenant: &TenantId, name: &McpServerName) -> Result<bool, StoreError> {
        Ok(self.db.execute(sql::MCP_SERVER_DELETE, &params![tenant.as_str(), name.as_str()]).await? > 0)
    }

    async fn save_discovery(
        &self,
        tenant: &TenantId,
        name: &McpServerName,
        registered_at: chrono::DateTime<chrono::Utc>,
        discovery: &McpDiscovery,
    ) -> Result<bool, StoreError> {
        check_discovery_text(discovery)?;
        let value = json(discovery)?;
        let done = self
            .db
            .execute(sql::MCP_SERVER_DISCOVERY, &params![tenant.as_str(), name.as_str(), registered_at, value])
            .await?;
        Ok(done > 0)
    }
}
