//! API keys on Postgres: one row per key, keyed by its id alone (unique across tenants, so
//! authentication can find a key before it knows the tenant). Only the key's SHA-256 is
//! stored; nothing here is conversation content, so no value is protected.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::keys::{ApiKeyRecord, ApiKeyStore};
use tracon_core::names::TenantId;
use tracon_core::store::StoreError;

use super::map_err;
use crate::codec::{KeyColumns, REVOKED_KEY_NOT_ROTATABLE, duplicate_key, scope_texts};
use crate::sql;

pub struct PgApiKeyStore {
    pool: PgPool,
}

impl PgApiKeyStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn record(row: &PgRow) -> Result<ApiKeyRecord, StoreError> {
    KeyColumns {
        id: row.try_get("id").map_err(map_err)?,
        tenant_id: row.try_get("tenant_id").map_err(map_err)?,
        name: row.try_get("name").map_err(map_err)?,
        key_hash: row.try_get("key_hash").map_err(map_err)?,
        scopes: row.try_get("scopes").map_err(map_err)?,
        created_at: row.try_get("created_at").map_err(map_err)?,
        expires_at: row.try_get("expires_at").map_err(map_err)?,
        revoked_at: row.try_get("revoked_at").map_err(map_err)?,
        last_used_at: row.try_get("last_used_at").map_err(map_err)?,
        rotated_at: row.try_get("rotated_at").map_err(map_err)?,
    }
    .record()
}

#[async_trait::async_trait]
impl ApiKeyStore for PgApiKeyStore {
    async fn create(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        sqlx::query(sql::KEY_INSERT)
            .bind(key.tenant.as_str())
            .bind(&key.id)
            .bind(&key.name)
            .bind(key.hash.as_slice())
            .bind(scope_texts(&key.scopes))
            .bind(key.created_at)
            .bind(key.expires_at)
            .bind(key.revoked_at)
            .bind(key.last_used_at)
            .bind(key.rotated_at)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_key(map_err(e), &key.id))?;
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = sqlx::query(sql::KEY_FIND).bind(id).fetch_optional(&self.pool).await.map_err(map_err)?;
        row.as_ref().map(record).transpose()
    }

    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        let row = sqlx::query(sql::KEY_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(record).transpose()
    }

    async fn list(&self, tenant: &TenantId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows = sqlx::query(sql::KEY_LIST).bind(tenant.as_str()).fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(record).collect()
    }

    async fn revoke(&self, tenant: &TenantId, id: &str, at: DateTime<Utc>) -> Result<ApiKeyRecord, StoreError> {
        let row = sqlx::query(sql::KEY_REVOKE)
            .bind(tenant.as_str())
            .bind(id)
            .bind(at)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(record).transpose()?.ok_or(StoreError::NotFound)
    }

    async fn rotate(
        &self,
        tenant: &TenantId,
        id: &str,
        hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> Result<ApiKeyRecord, StoreError> {
        let row = sqlx::query(sql::KEY_ROTATE)
            .bind(tenant.as_str())
            .bind(id)
            .bind(hash.as_slice())
            .bind(at)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let found: bool = row.try_get("found").map_err(map_err)?;
        let rotated: Option<String> = row.try_get("id").map_err(map_err)?;
        match (found, rotated) {
            (false, _) => Err(StoreError::NotFound),
            (true, None) => Err(StoreError::Conflict(REVOKED_KEY_NOT_ROTATABLE.into())),
            (true, Some(_)) => record(&row),
        }
    }

    async fn touch(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(sql::KEY_TOUCH).bind(id).bind(at).execute(&self.pool).await.map_err(map_err)?;
        Ok(())
    }
}
