//! The audit trail on Postgres: one hash chain per tenant in `audit_entries`.
//!
//! An append is one transaction: the tenant's advisory lock, its last `(sequence, hash)`,
//! the next entry hashed here ([`AuditEntry::chained`], the same code the in-memory store
//! runs), the insert, commit. Appends of one tenant therefore queue on the lock and never
//! share or skip a number; other tenants do not wait.

use crate::driver::Row;
use tracon_core::audit::{AuditEntry, AuditFilter, AuditStore, NewAuditEntry};
use tracon_core::error::StoreError;
use tracon_core::names::TenantId;

use super::Db;
use crate::codec::{AuditColumns, bigint, duplicate_audit_sequence, next_audit_link, to_i64};
use crate::params;
use crate::sql;

pub struct PgAuditStore {
    db: Db,
}

impl PgAuditStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn entry(row: &Row) -> Result<AuditEntry, StoreError> {
    crate::columns!(row, AuditColumns [tenant_id sequence at actor action entity_type entity_id before after
        hash])
    .entry()
}

#[async_trait::async_trait]
impl AuditStore for PgAuditStore {
    async fn append(&self, tenant: &TenantId, new: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        // Dropped without a commit (any `?` below), the transaction rolls back and the lock
        // goes with it.
        let mut tx = self.db.transaction().await?;
        tx.execute(sql::AUDIT_LOCK, &params![tenant.as_str()]).await?;
        let last = tx.query(sql::AUDIT_LAST, &params![tenant.as_str()]).await?;
        let last: Option<(i64, Vec<u8>)> = match last.first() {
            Some(row) => Some((row.get("sequence")?, row.get("hash")?)),
            None => None,
        };
        let (sequence, previous) = next_audit_link(last)?;
        let stored = AuditEntry::chained(tenant, sequence, &previous, new);
        let sequence = to_i64(stored.sequence, "audit sequence")?;
        tx.execute(
            sql::AUDIT_INSERT,
            &params![
                tenant.as_str(),
                sequence,
                stored.at,
                stored.actor,
                stored.action,
                stored.entity_type,
                stored.entity_id,
                stored.before,
                stored.after,
                stored.hash.as_slice()
            ],
        )
        .await
        .map_err(duplicate_audit_sequence)?;
        tx.commit().await?;
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
        let rows = self
            .db
            .query(
                sql::AUDIT_LIST,
                &params![
                    tenant.as_str(),
                    filter.entity_type.as_deref(),
                    filter.entity_id.as_deref(),
                    filter.action.as_deref(),
                    filter.actor.as_deref(),
                    filter.from,
                    filter.to,
                    bigint(skip),
                    bigint(take)
                ],
            )
            .await?;
        rows.iter().map(entry).collect()
    }

    async fn chain(&self, tenant: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = self.db.query(sql::AUDIT_CHAIN, &params![tenant.as_str()]).await?;
        rows.iter().map(entry).collect()
    }
}
