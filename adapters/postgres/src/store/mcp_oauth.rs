//! MCP OAuth on Postgres: pending authorizations (`mcp_oauth_pending`, by state digest) and
//! tokens (`mcp_oauth_tokens`, one row per tenant and server). The verifier, the tokens and an
//! issued client secret are protected values, bound to their tenant, table, column and row
//! (the state digest; the server's name), so a value copied onto another row fails to open.
//! What is not secret — the client id, the token endpoint, the resource, the scopes — is
//! `details` jsonb.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracon_core::error::StoreError;
use tracon_core::mcp::McpServerName;
use tracon_core::mcp::oauth::{
    McpOAuthStore, McpOAuthTokens, OAuthClient, PendingAuthorization, check_pending_text, check_tokens_text,
};
use tracon_core::names::TenantId;

use super::Db;
use crate::codec::{corrupt, unreadable};
use crate::driver::Row;
use crate::params;
use crate::protect::{Place, Protection};
use crate::sql;

pub struct PgMcpOAuthStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgMcpOAuthStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
    }

    fn seal(&self, place: Place<'_>, text: &str) -> Vec<u8> {
        self.protection.seal(&place, text)
    }

    fn open(&self, place: Place<'_>, stored: &[u8]) -> Result<String, StoreError> {
        self.protection.open(&place, stored).map_err(unreadable)
    }
}

const PENDING: &str = "mcp_oauth_pending";
const TOKENS: &str = "mcp_oauth_tokens";

fn place<'a>(tenant: &'a str, table: &'static str, column: &'static str, row: &'a str) -> Place<'a> {
    Place { tenant, table, column, row }
}

/// The non-secret part of a pending row.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PendingDetails {
    redirect_uri: String,
    client_id: String,
    token_endpoint: String,
    resource: String,
    scopes: Vec<String>,
}

/// The non-secret part of a token row.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenDetails {
    client_id: String,
    token_endpoint: String,
    resource: String,
    scopes: Vec<String>,
}

/// The sealed access token, refresh token and issued client secret, and the details.
type TokenColumns = (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>, Value);

fn json<T: Serialize>(value: &T) -> Result<Value, StoreError> {
    serde_json::to_value(value).map_err(|e| StoreError::Internal { detail: e.to_string() })
}

impl PgMcpOAuthStore {
    fn tokens(&self, tenant: &TenantId, server: &McpServerName, row: &Row) -> Result<McpOAuthTokens, StoreError> {
        let (t, s) = (tenant.as_str(), server.as_str());
        let access: Vec<u8> = row.get("access_token")?;
        let refresh: Option<Vec<u8>> = row.get("refresh_token")?;
        let secret: Option<Vec<u8>> = row.get("client_secret")?;
        let details: Value = row.get("details")?;
        let details: TokenDetails = serde_json::from_value(details).map_err(|e| corrupt("MCP OAuth tokens", e))?;
        Ok(McpOAuthTokens {
            access_token: self.open(place(t, TOKENS, "access_token", s), &access)?,
            refresh_token: refresh.map(|r| self.open(place(t, TOKENS, "refresh_token", s), &r)).transpose()?,
            expires_at: row.get("expires_at")?,
            scopes: details.scopes,
            client: OAuthClient {
                client_id: details.client_id,
                issued_secret: secret.map(|c| self.open(place(t, TOKENS, "client_secret", s), &c)).transpose()?,
            },
            token_endpoint: details.token_endpoint,
            resource: details.resource,
            version: row.get("version")?,
            updated_at: row.get("updated_at")?,
        })
    }

    /// The sealed columns and details of `tokens` (`$3`…`$7` of the put and the replace).
    fn token_columns(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
        tokens: &McpOAuthTokens,
    ) -> Result<TokenColumns, StoreError> {
        let (t, s) = (tenant.as_str(), server.as_str());
        let details = json(&TokenDetails {
            client_id: tokens.client.client_id.clone(),
            token_endpoint: tokens.token_endpoint.clone(),
            resource: tokens.resource.clone(),
            scopes: tokens.scopes.clone(),
        })?;
        Ok((
            self.seal(place(t, TOKENS, "access_token", s), &tokens.access_token),
            tokens.refresh_token.as_deref().map(|r| self.seal(place(t, TOKENS, "refresh_token", s), r)),
            tokens.client.issued_secret.as_deref().map(|c| self.seal(place(t, TOKENS, "client_secret", s), c)),
            details,
        ))
    }
}

#[async_trait::async_trait]
impl McpOAuthStore for PgMcpOAuthStore {
    async fn put_pending(&self, p: &PendingAuthorization) -> Result<(), StoreError> {
        check_pending_text(p)?;
        let (t, d) = (p.tenant.as_str(), p.state_digest.as_str());
        let verifier = self.seal(place(t, PENDING, "code_verifier", d), &p.code_verifier);
        let secret = p.client.issued_secret.as_deref().map(|c| self.seal(place(t, PENDING, "client_secret", d), c));
        let details = json(&PendingDetails {
            redirect_uri: p.redirect_uri.clone(),
            client_id: p.client.client_id.clone(),
            token_endpoint: p.token_endpoint.clone(),
            resource: p.resource.clone(),
            scopes: p.scopes.clone(),
        })?;
        // Authorizations whose browser never came back go once expired.
        self.db.execute(sql::MCP_OAUTH_PENDING_PURGE, &params![p.started_at()]).await?;
        self.db
            .execute(
                sql::MCP_OAUTH_PENDING_PUT,
                &params![d, t, p.server.as_str(), verifier, secret, details, p.expires_at],
            )
            .await?;
        Ok(())
    }

    async fn take_pending(
        &self,
        state_digest: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<PendingAuthorization>, StoreError> {
        let Some(row) = self.db.query_opt(sql::MCP_OAUTH_PENDING_TAKE, &params![state_digest]).await? else {
            return Ok(None);
        };
        let expires_at: DateTime<Utc> = row.get("expires_at")?;
        if expires_at <= now {
            return Ok(None);
        }
        let tenant: String = row.get("tenant_id")?;
        let server: String = row.get("server")?;
        let verifier: Vec<u8> = row.get("code_verifier")?;
        let secret: Option<Vec<u8>> = row.get("client_secret")?;
        let details: Value = row.get("details")?;
        let details: PendingDetails =
            serde_json::from_value(details).map_err(|e| corrupt("MCP OAuth pending authorization", e))?;
        let t = tenant.as_str();
        Ok(Some(PendingAuthorization {
            state_digest: state_digest.to_owned(),
            code_verifier: self.open(place(t, PENDING, "code_verifier", state_digest), &verifier)?,
            client: OAuthClient {
                client_id: details.client_id,
                issued_secret: secret
                    .map(|c| self.open(place(t, PENDING, "client_secret", state_digest), &c))
                    .transpose()?,
            },
            tenant: TenantId::parse(&tenant).map_err(|e| corrupt("tenant id", e))?,
            server: McpServerName::parse(&server).map_err(|e| corrupt("MCP server name", e))?,
            redirect_uri: details.redirect_uri,
            token_endpoint: details.token_endpoint,
            resource: details.resource,
            scopes: details.scopes,
            expires_at,
        }))
    }

    async fn get_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
    ) -> Result<Option<McpOAuthTokens>, StoreError> {
        let row = self.db.query_opt(sql::MCP_OAUTH_TOKENS_GET, &params![tenant.as_str(), server.as_str()]).await?;
        row.map(|r| self.tokens(tenant, server, &r)).transpose()
    }

    async fn put_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
        tokens: &McpOAuthTokens,
    ) -> Result<McpOAuthTokens, StoreError> {
        check_tokens_text(tokens)?;
        let (access, refresh, secret, details) = self.token_columns(tenant, server, tokens)?;
        let row = self
            .db
            .query_one(
                sql::MCP_OAUTH_TOKENS_PUT,
                &params![
                    tenant.as_str(),
                    server.as_str(),
                    access,
                    refresh,
                    secret,
                    tokens.expires_at,
                    details,
                    tokens.updated_at
                ],
            )
            .await?;
        self.tokens(tenant, server, &row)
    }

    async fn replace_tokens(
        &self,
        tenant: &TenantId,
        server: &McpServerName,
        expected: i64,
        tokens: &McpOAuthTokens,
    ) -> Result<Option<McpOAuthTokens>, StoreError> {
        check_tokens_text(tokens)?;
        let (access, refresh, secret, details) = self.token_columns(tenant, server, tokens)?;
        let row = self
            .db
            .query_opt(
                sql::MCP_OAUTH_TOKENS_REPLACE,
                &params![
                    tenant.as_str(),
                    server.as_str(),
                    access,
                    refresh,
                    secret,
                    tokens.expires_at,
                    details,
                    tokens.updated_at,
                    expected
                ],
            )
            .await?;
        row.map(|r| self.tokens(tenant, server, &r)).transpose()
    }

    async fn delete_tokens(&self, tenant: &TenantId, server: &McpServerName) -> Result<bool, StoreError> {
        Ok(self.db.execute(sql::MCP_OAUTH_TOKENS_DELETE, &params![tenant.as_str(), server.as_str()]).await? > 0)
    }
}
