//! Schedules on Postgres: `schedules`, one row per schedule, the message sealed like other
//! user content. The tick's scan (`due`) and compare-and-set (`advance`) are the only
//! statements that cross tenants.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::names::{RunId, TenantId};
use tracon_core::schedules::{ScheduleRecord, ScheduleStore};
use tracon_core::store::StoreError;
use uuid::Uuid;

use super::map_err;
use crate::codec::{ScheduleColumns, duplicate_schedule};
use crate::protect::Protection;
use crate::sql;

pub struct PgScheduleStore {
    pool: PgPool,
    protection: Arc<Protection>,
}

impl PgScheduleStore {
    pub fn new(pool: PgPool, protection: Arc<Protection>) -> Self {
        Self { pool, protection }
    }

    fn record(&self, row: &PgRow) -> Result<ScheduleRecord, StoreError> {
        ScheduleColumns {
            tenant_id: row.try_get("tenant_id").map_err(map_err)?,
            id: row.try_get("id").map_err(map_err)?,
            name: row.try_get("name").map_err(map_err)?,
            agent_name: row.try_get("agent_name").map_err(map_err)?,
            message: row.try_get("message").map_err(map_err)?,
            parameters: row.try_get("parameters").map_err(map_err)?,
            run_at: row.try_get("run_at").map_err(map_err)?,
            cron: row.try_get("cron").map_err(map_err)?,
            time_zone: row.try_get("time_zone").map_err(map_err)?,
            enabled: row.try_get("enabled").map_err(map_err)?,
            next_run_at: row.try_get("next_run_at").map_err(map_err)?,
            last_run_at: row.try_get("last_run_at").map_err(map_err)?,
            last_run_id: row.try_get("last_run_id").map_err(map_err)?,
            last_error: row.try_get("last_error").map_err(map_err)?,
            created_at: row.try_get("created_at").map_err(map_err)?,
            updated_at: row.try_get("updated_at").map_err(map_err)?,
        }
        .record(&self.protection)
    }
}

#[async_trait::async_trait]
impl ScheduleStore for PgScheduleStore {
    async fn create(&self, s: &ScheduleRecord) -> Result<(), StoreError> {
        let c = ScheduleColumns::of(s, &self.protection)?;
        sqlx::query(sql::SCHEDULE_INSERT)
            .bind(&c.tenant_id)
            .bind(c.id)
            .bind(&c.name)
            .bind(&c.agent_name)
            .bind(&c.message)
            .bind(&c.parameters)
            .bind(c.run_at)
            .bind(&c.cron)
            .bind(&c.time_zone)
            .bind(c.enabled)
            .bind(c.next_run_at)
            .bind(c.last_run_at)
            .bind(c.last_run_id)
            .bind(&c.last_error)
            .bind(c.created_at)
            .bind(c.updated_at)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_schedule(map_err(e)))?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ScheduleRecord>, StoreError> {
        let row = sqlx::query(sql::SCHEDULE_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(|r| self.record(r)).transpose()
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(sql::SCHEDULE_LIST)
            .bind(tenant.as_str())
            .bind(i64::try_from(skip).unwrap_or(i64::MAX))
            .bind(i64::try_from(take).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn update(&self, s: &ScheduleRecord) -> Result<(), StoreError> {
        let c = ScheduleColumns::of(s, &self.protection)?;
        let done = sqlx::query(sql::SCHEDULE_UPDATE)
            .bind(&c.tenant_id)
            .bind(c.id)
            .bind(&c.name)
            .bind(&c.agent_name)
            .bind(&c.message)
            .bind(&c.parameters)
            .bind(c.run_at)
            .bind(&c.cron)
            .bind(&c.time_zone)
            .bind(c.enabled)
            .bind(c.next_run_at)
            .bind(c.updated_at)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_schedule(map_err(e)))?;
        if done.rows_affected() == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query(sql::SCHEDULE_DELETE)
            .bind(tenant.as_str())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn due(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = sqlx::query(sql::SCHEDULE_DUE)
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn advance(
        &self,
        tenant: &TenantId,
        id: Uuid,
        expected: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(sql::SCHEDULE_ADVANCE)
            .bind(tenant.as_str())
            .bind(id)
            .bind(expected)
            .bind(next)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn record_outcome(
        &self,
        tenant: &TenantId,
        id: Uuid,
        run: Option<RunId>,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query(sql::SCHEDULE_OUTCOME)
            .bind(tenant.as_str())
            .bind(id)
            .bind(run.map(|r| r.0))
            .bind(error)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }
}
