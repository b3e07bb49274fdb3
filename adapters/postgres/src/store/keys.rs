//! API keys on Postgres: one row per key, keyed by its id alone (unique across tenants, so
//! authentication can find a key before it knows the tenant). Only the key's SHA-256 is
//! stored; nothing here is conversation content, so no value is protected.

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::keys::{ApiKeyRecord, ApiKeyStore};
use tracon_core::names::TenantId;

use super::Db;
use crate::codec::{KeyColumns, REVOKED_KEY_NOT_ROTATABLE, duplicate_key, scope_texts};
use crate::params;
use crate::sql;

pub struct PgApiKeyStore {
    db: Db,
}

impl PgApiKeyStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn record(row: &Row) -> Result<ApiKeyRecord, StoreError> {
    crate::columns!(row, KeyColumns [id tenant_id name key_hash scopes created_at expires_at revoked_at
        last_used_at rotated_at])
    .record()
}

#[async_trait::async_trait]
impl ApiKeyStore for PgApiKeyStore {
    async fn create(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        self.db
            .execute(
                sql::KEY_INSERT,
                &params![
                    key.tenant.as_str(),
                    &key.id,
                    &key.name,
                    key.hash.as_slice(),
                    scope_texts(&key.scopes),
                    key.created_at,
                    key.expires_at,
                    key.revoked_at,
                    key.last_used_at,
                    key.rotated_at
                ],
            )
            .await
            .map_err(|e| duplicate_key(e, &key.id))?;
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = self.db.query_opt(sql::KEY_FIND, &params![id]).await?;
        row.as_ref().map(record).transpose()
    }

    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = self.db.query_opt(sql::KEY_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(record).transpose()
    }

    async fn list(&self, tenant: &TenantId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = self.db.query(sql::KEY_LIST, &params![tenant.as_str()]).await?;
        rows.iter().map(record).collect()
    }

    async fn revoke(&self, tenant: &TenantId, id: &str, at: DateTime<Utc>) -> Result<ApiKeyRecord, StoreError> {
        let row = self.db.query_opt(sql::KEY_REVOKE, &params![tenant.as_str(), id, at]).await?;
        row.as_ref().map(record).transpose()?.ok_or(StoreError::NotFound)
    }

    async fn rotate(
        &self,
        tenant: &TenantId,
        id: &str,
        hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> Result<ApiKeyRecord, StoreError> {
        let row = self.db.query_one(sql::KEY_ROTATE, &params![tenant.as_str(), id, hash.as_slice(), at]).await?;
        let found: bool = row.get("found")?;
        let rotated: Option<String> = row.get("id")?;
        match (found, rotated) {
            (false, _) => Err(StoreError::NotFound),
            (true, None) => Err(StoreError::Conflict(REVOKED_KEY_NOT_ROTATABLE.into())),
            (true, Some(_)) => record(&row),
        }
    }

    async fn touch(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.db.execute(sql::KEY_TOUCH, &params![id, at]).await?;
        Ok(())
    }
}
