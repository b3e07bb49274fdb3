//! Inbound triggers on the Worker: the same statements ([`tracon_postgres::sql`]) and row
//! codec ([`tracon_postgres::codec::triggers`]) as the sqlx store.

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tracon_core::names::TenantId;
use tracon_core::secret_names::SecretReference;
use tracon_core::store::StoreError;
use tracon_core::triggers::{TriggerName, TriggerRecord, TriggerStore};
use tracon_postgres::codec::triggers::{TriggerColumns, TriggerValues};
use tracon_postgres::sql;

use super::{WorkerStores, get, map_err, send};

fn trigger(row: &Row) -> Result<TriggerRecord, StoreError> {
    TriggerColumns {
        name: get(row, "name")?,
        target_kind: get(row, "target_kind")?,
        target_name: get(row, "target_name")?,
        signing_secret_configuration_name: get(row, "signing_secret_configuration_name")?,
        payload_mode: get(row, "payload_mode")?,
        payload_path: get(row, "payload_path")?,
        enabled: get(row, "enabled")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    }
    .record()
}

#[async_trait::async_trait]
impl TriggerStore for WorkerStores {
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<TriggerRecord>, StoreError> {
        let skip = i64::try_from(skip).unwrap_or(i64::MAX);
        let take = i64::try_from(take).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let rows = c.query(sql::TRIGGER_LIST, &[&tenant.as_str(), &skip, &take]).await.map_err(map_err)?;
            rows.iter().map(trigger).collect()
        }))
        .await
    }

    async fn get(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::TRIGGER_GET, &[&tenant.as_str(), &name.as_str()]).await.map_err(map_err)?;
            row.as_ref().map(trigger).transpose()
        }))
        .await
    }

    async fn put(&self, tenant: &TenantId, r: &TriggerRecord) -> Result<TriggerRecord, StoreError> {
        let v = TriggerValues::of(r);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 10] = [
                &tenant.as_str(),
                &v.name,
                &v.target_kind,
                &v.target_name,
                &v.signing_secret_configuration_name,
                &v.payload_mode,
                &v.payload_path,
                &v.enabled,
                &v.created_at,
                &v.updated_at,
            ];
            let row = c.query_one(sql::TRIGGER_PUT, &params).await.map_err(map_err)?;
            trigger(&row)
        }))
        .await
    }

    async fn delete(&self, tenant: &TenantId, name: &TriggerName) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            let n = c.execute(sql::TRIGGER_DELETE, &[&tenant.as_str(), &name.as_str()]).await.map_err(map_err)?;
            Ok(n > 0)
        }))
        .await
    }

    async fn find_enabled(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row =
                c.query_opt(sql::TRIGGER_FIND_ENABLED, &[&tenant.as_str(), &name.as_str()]).await.map_err(map_err)?;
            row.as_ref().map(trigger).transpose()
        }))
        .await
    }

    async fn secret_references(&self) -> Result<Vec<SecretReference>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::TRIGGER_SECRET_NAMES, &[]).await.map_err(map_err)?;
            rows.iter().map(secret_reference).collect()
        }))
        .await
    }
}

/// A `(tenant_id, record, key_name)` row ([`sql::TRIGGER_SECRET_NAMES`], [`sql::WEBHOOK_SECRET_NAMES`]).
pub(super) fn secret_reference(row: &Row) -> Result<SecretReference, StoreError> {
    tracon_postgres::codec::secret_reference(get(row, "tenant_id")?, get(row, "record")?, get(row, "key_name")?)
}
