//! Inbound triggers on Postgres: one `triggers` row per tenant and name. A put is one
//! upsert ([`sql::TRIGGER_PUT`]) that keeps the stored `created_at`.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::names::TenantId;
use tracon_core::secret_names::SecretReference;
use tracon_core::store::StoreError;
use tracon_core::triggers::{TriggerName, TriggerRecord, TriggerStore};

use super::map_err;
use crate::codec::triggers::{TriggerColumns, TriggerValues};
use crate::sql;

pub struct PgTriggerStore {
    pool: PgPool,
}

impl PgTriggerStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn record(row: &PgRow) -> Result<TriggerRecord, StoreError> {
    TriggerColumns {
        name: row.try_get("name").map_err(map_err)?,
        target_kind: row.try_get("target_kind").map_err(map_err)?,
        target_name: row.try_get("target_name").map_err(map_err)?,
        signing_secret_configuration_name: row.try_get("signing_secret_configuration_name").map_err(map_err)?,
        payload_mode: row.try_get("payload_mode").map_err(map_err)?,
        payload_path: row.try_get("payload_path").map_err(map_err)?,
        enabled: row.try_get("enabled").map_err(map_err)?,
        created_at: row.try_get("created_at").map_err(map_err)?,
        updated_at: row.try_get("updated_at").map_err(map_err)?,
    }
    .record()
}

#[async_trait::async_trait]
impl TriggerStore for PgTriggerStore {
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<TriggerRecord>, StoreError> {
        let rows = sqlx::query(sql::TRIGGER_LIST)
            .bind(tenant.as_str())
            .bind(i64::try_from(skip).unwrap_or(i64::MAX))
            .bind(i64::try_from(take).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(record).collect()
    }

    async fn get(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        let row = sqlx::query(sql::TRIGGER_GET)
            .bind(tenant.as_str())
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(record).transpose()
    }

    async fn put(&self, tenant: &TenantId, r: &TriggerRecord) -> Result<TriggerRecord, StoreError> {
        let v = TriggerValues::of(r);
        let row = sqlx::query(sql::TRIGGER_PUT)
            .bind(tenant.as_str())
            .bind(v.name)
            .bind(v.target_kind)
            .bind(v.target_name)
            .bind(v.signing_secret_configuration_name)
            .bind(v.payload_mode)
            .bind(v.payload_path)
            .bind(v.enabled)
            .bind(v.created_at)
            .bind(v.updated_at)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        record(&row)
    }

    async fn delete(&self, tenant: &TenantId, name: &TriggerName) -> Result<bool, StoreError> {
        let done = sqlx::query(sql::TRIGGER_DELETE)
            .bind(tenant.as_str())
            .bind(name.as_str())
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn find_enabled(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        let row = sqlx::query(sql::TRIGGER_FIND_ENABLED)
            .bind(tenant.as_str())
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(record).transpose()
    }

    async fn secret_references(&self) -> Result<Vec<SecretReference>, StoreError> {
        let rows = sqlx::query(sql::TRIGGER_SECRET_NAMES).fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(secret_reference).collect()
    }
}

/// A `(tenant_id, record, key_name)` row ([`sql::TRIGGER_SECRET_NAMES`], [`sql::WEBHOOK_SECRET_NAMES`]).
pub(super) fn secret_reference(row: &PgRow) -> Result<SecretReference, StoreError> {
    crate::codec::secret_reference(
        row.try_get("tenant_id").map_err(map_err)?,
        row.try_get("record").map_err(map_err)?,
        row.try_get("key_name").map_err(map_err)?,
    )
}
