//! Inbound triggers on Postgres: one `triggers` row per tenant and name. A put is one
//! upsert ([`sql::TRIGGER_PUT`]) that keeps the stored `created_at`.

use crate::driver::Row;
use tracon_core::error::StoreError;
use tracon_core::names::TenantId;
use tracon_core::secret_names::SecretReference;
use tracon_core::triggers::{TriggerName, TriggerRecord, TriggerStore};

use super::Db;
use crate::codec::bigint;
use crate::codec::triggers::{TriggerColumns, TriggerValues};
use crate::params;
use crate::sql;

pub struct PgTriggerStore {
    db: Db,
}

impl PgTriggerStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn record(row: &Row) -> Result<TriggerRecord, StoreError> {
    crate::columns!(row, TriggerColumns [name target_kind target_name signing_secret_configuration_name
        payload_mode payload_path enabled created_at updated_at])
    .record()
}

#[async_trait::async_trait]
impl TriggerStore for PgTriggerStore {
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<TriggerRecord>, StoreError> {
        let rows = self.db.query(sql::TRIGGER_LIST, &params![tenant.as_str(), bigint(skip), bigint(take)]).await?;
        rows.iter().map(record).collect()
    }

    async fn get(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        let row = self.db.query_opt(sql::TRIGGER_GET, &params![tenant.as_str(), name.as_str()]).await?;
        row.as_ref().map(record).transpose()
    }

    async fn put(&self, tenant: &TenantId, r: &TriggerRecord) -> Result<TriggerRecord, StoreError> {
        let v = TriggerValues::of(r);
        let row = self
            .db
            .query_one(
                sql::TRIGGER_PUT,
                &params![
                    tenant.as_str(),
                    v.name,
                    v.target_kind,
                    v.target_name,
                    v.signing_secret_configuration_name,
                    v.payload_mode,
                    v.payload_path,
                    v.enabled,
                    v.created_at,
                    v.updated_at
                ],
            )
            .await?;
        record(&row)
    }

    async fn delete(&self, tenant: &TenantId, name: &TriggerName) -> Result<bool, StoreError> {
        let done = self.db.execute(sql::TRIGGER_DELETE, &params![tenant.as_str(), name.as_str()]).await?;
        Ok(done > 0)
    }

    async fn find_enabled(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        let row = self.db.query_opt(sql::TRIGGER_FIND_ENABLED, &params![tenant.as_str(), name.as_str()]).await?;
        row.as_ref().map(record).transpose()
    }

    async fn secret_references(&self) -> Result<Vec<SecretReference>, StoreError> {
        let rows = self.db.query(sql::TRIGGER_SECRET_NAMES, &params![]).await?;
        rows.iter().map(secret_reference).collect()
    }
}

/// A `(tenant_id, record, key_name)` row ([`sql::TRIGGER_SECRET_NAMES`], [`sql::WEBHOOK_SECRET_NAMES`]).
pub(super) fn secret_reference(row: &Row) -> Result<SecretReference, StoreError> {
    crate::codec::secret_reference(row.get("tenant_id")?, row.get("record")?, row.get("key_name")?)
}
