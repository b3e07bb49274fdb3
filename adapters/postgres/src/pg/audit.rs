//! The audit trail on Postgres: one hash chain per tenant in `audit_entries`.
//!
//! An append is one transaction: the tenant's advisory lock, its last `(sequence, hash)`,
//! the next entry hashed here ([`AuditEntry::chained`], the same code the in-memory store
//! runs), the insert, commit. Appends of one tenant therefore queue on the lock and never
//! share or skip a number; other tenants do not wait.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::audit::{AuditEntry, AuditFilter, AuditStore, NewAuditEntry};
use tracon_core::names::TenantId;
use tracon_core::store::StoreError;

use super::map_err;
use crate::codec::{AuditColumns, duplicate_audit_sequence, next_audit_link, to_i64};
use crate::sql;

pub struct PgAuditStore {
    pool: PgPool,
}

impl PgAuditStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn entry(row: &PgRow) -> Result<AuditEntry, StoreError> {
    AuditColumns {
        tenant_id: row.try_get("tenant_id").map_err(map_err)?,
        sequence: row.try_get("sequence").map_err(map_err)?,
        at: row.try_get("at").map_err(map_err)?,
        actor: row.try_get("actor").map_err(map_err)?,
        action: row.try_get("action").map_err(map_err)?,
        entity_type: row.try_get("entity_type").map_err(map_err)?,
        entity_id: row.try_get("entity_id").map_err(map_err)?,
        before: row.try_get("before").map_err(map_err)?,
        after: row.try_get("after").map_err(map_err)?,
        hash: row.try_get("hash").map_err(map_err)?,
    }
    .entry()
}

#[async_trait::async_trait]
impl AuditStore for PgAuditStore {
    async fn append(&self, tenant: &TenantId, new: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        // Dropped without a commit (any `?` below), the transaction rolls back and the lock
        // goes with it.
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(sql::AUDIT_LOCK).bind(tenant.as_str()).execute(&mut *tx).await.map_err(map_err)?;
        let last: Option<(i64, Vec<u8>)> =
            sqlx::query_as(sql::AUDIT_LAST).bind(tenant.as_str()).fetch_optional(&mut *tx).await.map_err(map_err)?;
        let (sequence, previous) = next_audit_link(last)?;
        let stored = AuditEntry::chained(tenant, sequence, &previous, new);
        sqlx::query(sql::AUDIT_INSERT)
            .bind(tenant.as_str())
            .bind(to_i64(stored.sequence, "audit sequence")?)
            .bind(stored.at)
            .bind(&stored.actor)
            .bind(&stored.action)
            .bind(&stored.entity_type)
            .bind(&stored.entity_id)
            .bind(&stored.before)
            .bind(&stored.after)
            .bind(stored.hash.as_slice())
            .execute(&mut *tx)
            .await
            .map_err(|e| duplicate_audit_sequence(map_err(e)))?;
        tx.commit().await.map_err(map_err)?;
        Ok(stored)
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &AuditFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        filter.check_text()?;
        let rows = sqlx::query(sql::AUDIT_LIST)
            .bind(tenant.as_str())
            .bind(filter.entity_type.as_deref())
            .bind(filter.entity_id.as_deref())
            .bind(filter.action.as_deref())
            .bind(filter.actor.as_deref())
            .bind(filter.from)
            .bind(filter.to)
            .bind(i64::try_from(skip).unwrap_or(i64::MAX))
            .bind(i64::try_from(take).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(entry).collect()
    }

    async fn chain(&self, tenant: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(sql::AUDIT_CHAIN).bind(tenant.as_str()).fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(entry).collect()
    }
}
