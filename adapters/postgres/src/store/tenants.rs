//! Tenant records on Postgres: one platform-wide row per tenant in `tenants`, listed in
//! id (byte) order.

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::names::TenantId;
use tracon_core::tenants::{TenantRecord, TenantStore};

use super::Db;
use crate::codec::{TenantColumns, bigint, duplicate_tenant};
use crate::params;
use crate::sql;

pub struct PgTenantStore {
    db: Db,
}

impl PgTenantStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn record(row: &Row) -> Result<TenantRecord, StoreError> {
    crate::columns!(row, TenantColumns [id display_name created_at updated_at]).record()
}

#[async_trait::async_trait]
impl TenantStore for PgTenantStore {
    async fn create(&self, r: &TenantRecord) -> Result<(), StoreError> {
        self.db
            .execute(sql::TENANT_INSERT, &params![r.id.as_str(), &r.display_name, r.created_at, r.updated_at])
            .await
            .map_err(|e| duplicate_tenant(e, &r.id))?;
        Ok(())
    }

    async fn get(&self, id: &TenantId) -> Result<Option<TenantRecord>, StoreError> {
        let row = self.db.query_opt(sql::TENANT_GET, &params![id.as_str()]).await?;
        row.as_ref().map(record).transpose()
    }

    async fn list(&self, skip: usize, take: usize) -> Result<Vec<TenantRecord>, StoreError> {
        let rows = self.db.query(sql::TENANT_LIST, &params![bigint(skip), bigint(take)]).await?;
        rows.iter().map(record).collect()
    }

    async fn update(&self, id: &TenantId, display_name: &str, now: DateTime<Utc>) -> Result<TenantRecord, StoreError> {
        let row = self.db.query_opt(sql::TENANT_UPDATE, &params![id.as_str(), display_name, now]).await?;
        row.as_ref().map(record).transpose()?.ok_or(StoreError::NotFound)
    }

    async fn delete(&self, id: &TenantId) -> Result<TenantRecord, StoreError> {
        let row = self.db.query_opt(sql::TENANT_DELETE, &params![id.as_str()]).await?;
        row.as_ref().map(record).transpose()?.ok_or(StoreError::NotFound)
    }
}

/// Quota threshold claims: a row per announced threshold (`quota_notices`).
pub struct PgQuotaNoticeStore {
    db: Db,
}

impl PgQuotaNoticeStore {
    pub fn new(db: Db) -> Self {
        Self { db }
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
        let done = self
            .db
            .execute(
                sql::QUOTA_NOTICE_CLAIM,
                &params![tenant.as_str(), quota, period_start, i32::try_from(threshold).unwrap_or(i32::MAX), at],
            )
            .await?;
        Ok(done == 1)
    }
}
