//! Schedules on the Worker: the same statements and row codec as the sqlx store.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tracon_core::names::{RunId, TenantId};
use tracon_core::schedules::{ScheduleRecord, ScheduleStore};
use tracon_core::store::StoreError;
use tracon_postgres::codec::{ScheduleColumns, duplicate_schedule};
use tracon_postgres::sql;
use uuid::Uuid;

use super::{WorkerStores, get, map_err, send};

impl WorkerStores {
    fn schedule(&self, row: &Row) -> Result<ScheduleRecord, StoreError> {
        ScheduleColumns {
            tenant_id: get(row, "tenant_id")?,
            id: get(row, "id")?,
            name: get(row, "name")?,
            agent_name: get(row, "agent_name")?,
            message: get(row, "message")?,
            parameters: get(row, "parameters")?,
            run_at: get(row, "run_at")?,
            cron: get(row, "cron")?,
            time_zone: get(row, "time_zone")?,
            enabled: get(row, "enabled")?,
            next_run_at: get(row, "next_run_at")?,
            last_run_at: get(row, "last_run_at")?,
            last_run_id: get(row, "last_run_id")?,
            last_error: get(row, "last_error")?,
            created_at: get(row, "created_at")?,
            updated_at: get(row, "updated_at")?,
        }
        .record(&self.protection)
    }
}

#[async_trait::async_trait]
impl ScheduleStore for WorkerStores {
    async fn create(&self, s: &ScheduleRecord) -> Result<(), StoreError> {
        let c = ScheduleColumns::of(s, &self.protection)?;
        send(self.target.with(async |conn| {
            let params: [&(dyn ToSql + Sync); 16] = [
                &c.tenant_id,
                &c.id,
                &c.name,
                &c.agent_name,
                &c.message,
                &c.parameters,
                &c.run_at,
                &c.cron,
                &c.time_zone,
                &c.enabled,
                &c.next_run_at,
                &c.last_run_at,
                &c.last_run_id,
                &c.last_error,
                &c.created_at,
                &c.updated_at,
            ];
            conn.execute(sql::SCHEDULE_INSERT, &params).await.map_err(|e| duplicate_schedule(map_err(e))).map(|_| ())
        }))
        .await
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ScheduleRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::SCHEDULE_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(|r| self.schedule(r)).transpose()
        }))
        .await
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let skip = i64::try_from(skip).unwrap_or(i64::MAX);
        let take = i64::try_from(take).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let rows = c.query(sql::SCHEDULE_LIST, &[&tenant.as_str(), &skip, &take]).await.map_err(map_err)?;
            rows.iter().map(|r| self.schedule(r)).collect()
        }))
        .await
    }

    async fn update(&self, s: &ScheduleRecord) -> Result<(), StoreError> {
        let c = ScheduleColumns::of(s, &self.protection)?;
        let n = send(self.target.with(async |conn| {
            let params: [&(dyn ToSql + Sync); 12] = [
                &c.tenant_id,
                &c.id,
                &c.name,
                &c.agent_name,
                &c.message,
                &c.parameters,
                &c.run_at,
                &c.cron,
                &c.time_zone,
                &c.enabled,
                &c.next_run_at,
                &c.updated_at,
            ];
            conn.execute(sql::SCHEDULE_UPDATE, &params).await.map_err(|e| duplicate_schedule(map_err(e)))
        }))
        .await?;
        if n == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            c.execute(sql::SCHEDULE_DELETE, &[&tenant.as_str(), &id]).await.map_err(map_err).map(|n| n > 0)
        }))
        .await
    }

    async fn due(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let rows = c.query(sql::SCHEDULE_DUE, &[&now, &limit]).await.map_err(map_err)?;
            rows.iter().map(|r| self.schedule(r)).collect()
        }))
        .await
    }

    async fn advance(
        &self,
        tenant: &TenantId,
        id: Uuid,
        expected: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 5] = [&tenant.as_str(), &id, &expected, &next, &now];
            c.execute(sql::SCHEDULE_ADVANCE, &params).await.map_err(map_err).map(|n| n > 0)
        }))
        .await
    }

    async fn record_outcome(
        &self,
        tenant: &TenantId,
        id: Uuid,
        run: Option<RunId>,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let run = run.map(|r| r.0);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 4] = [&tenant.as_str(), &id, &run, &error];
            c.execute(sql::SCHEDULE_OUTCOME, &params).await.map_err(map_err).map(|_| ())
        }))
        .await
    }
}
