//! Tenant records on Postgres: one platform-wide row per tenant in `tenants`, listed in
//! id (byte) order.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::names::TenantId;
use tracon_core::store::StoreError;
use tracon_core::tenants::{TenantRecord, TenantStore};

use super::map_err;
use crate::codec::{TenantColumns, duplicate_tenant};
use crate::sql;

pub struct PgTenantStore {
    pool: PgPool,
}

impl PgTenantStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn record(row: &PgRow) -> Result<TenantRecord, StoreError> {
    TenantColumns {
        id: row.try_get("id").map_err(map_err)?,
        display_name: row.try_get("display_name").map_err(map_err)?,
        created_at: row.try_get("created_at").map_err(map_err)?,
        updated_at: row.try_get("updated_at").map_err(map_err)?,
    }
    .record()
}

#[async_trait::async_trait]
impl TenantStore for PgTenantStore {
    async fn create(&self, r: &TenantRecord) -> Result<(), StoreError> {
        sqlx::query(sql::TENANT_INSERT)
            .bind(r.id.as_str())
            .bind(&r.display_name)
            .bind(r.created_at)
            .bind(r.updated_at)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_tenant(map_err(e), &r.id))?;
        Ok(())
    }

    async fn get(&self, id: &TenantId) -> Result<Option<TenantRecord>, StoreError> {
        let row = sqlx::query(sql::TENANT_GET).bind(id.as_str()).fetch_optional(&self.pool).await.map_err(map_err)?;
        row.as_ref().map(record).transpose()
    }

    async fn list(&self, skip: usize, take: usize) -> Result<Vec<TenantRecord>, StoreError> {
        let rows = sqlx::query(sql::TENANT_LIST)
            .bind(i64::try_from(skip).unwrap_or(i64::MAX))
            .bind(i64::try_from(take).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(record).collect()
    }

    async fn update(&self, id: &TenantId, display_name: &str, now: DateTime<Utc>) -> Result<TenantRecord, StoreError> {
        let row = sqlx::query(sql::TENANT_UPDATE)
            .bind(id.as_str())
            .bind(display_name)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(record).transpose()?.ok_or(StoreError::NotFound)
    }

    async fn delete(&self, id: &TenantId) -> Result<TenantRecord, StoreError> {
        let row =
            sqlx::query(sql::TENANT_DELETE).bind(id.as_str()).fetch_optional(&self.pool).await.map_err(map_err)?;
        row.as_ref().map(record).transpose()?.ok_or(StoreError::NotFound)
    }
}

/// Quota threshold claims: a row per announced threshold (`quota_notices`).
pub struct PgQuotaNoticeStore {
    pool: PgPool,
}

impl PgQuotaNoticeStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

#[async_trait::async_trait]
impl tracon_core::quota::QuotaNoticeStore for PgQuotaNoticeStore {
    async fn claim(
        &self,
        tenant: &TenantId,
        quota: &str,
        period_start: DateTime<Utc>,
        threshold: u32,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(sql::QUOTA_NOTICE_CLAIM)
            .bind(tenant.as_str())
            .bind(quota)
            .bind(period_start)
            .bind(i32::try_from(threshold).unwrap_or(i32::MAX))
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() == 1)
    }
}
