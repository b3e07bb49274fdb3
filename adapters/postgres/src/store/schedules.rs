//! Schedules on Postgres: `schedules`, one row per schedule, the message sealed like other
//! user content. The tick's scan (`due`) and compare-and-set (`advance`) are the only
//! statements that cross tenants.

use std::sync::Arc;

use crate::driver::{Param, Row};
use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::names::{RunId, TenantId};
use tracon_core::schedules::{ScheduleRecord, ScheduleStore};
use uuid::Uuid;

use super::Db;
use crate::codec::{ScheduleColumns, bigint, duplicate_schedule};
use crate::params;
use crate::protect::Protection;
use crate::sql;

pub struct PgScheduleStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgScheduleStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
    }

    fn record(&self, row: &Row) -> Result<ScheduleRecord, StoreError> {
        crate::columns!(row, ScheduleColumns [tenant_id id name target_name message parameters run_at cron
            time_zone enabled next_run_at target_kind last_run_at last_run_id last_error created_at updated_at])
        .record(&self.protection)
    }
}

/// `$1`…`$12` of both the insert and the update: the key, the definition and the next
/// occurrence.
fn definition(c: &ScheduleColumns) -> [Param<'_>; 12] {
    params![
        c.tenant_id,
        c.id,
        c.name,
        c.target_name,
        c.message,
        c.parameters,
        c.run_at,
        c.cron,
        c.time_zone,
        c.enabled,
        c.next_run_at,
        c.target_kind
    ]
}

#[async_trait::async_trait]
impl ScheduleStore for PgScheduleStore {
    async fn create(&self, s: &ScheduleRecord) -> Result<(), StoreError> {
        let c = ScheduleColumns::of(s, &self.protection)?;
        let mut p = definition(&c).to_vec();
        p.extend(params![c.last_run_at, c.last_run_id, c.last_error, c.created_at, c.updated_at]);
        self.db.execute(sql::SCHEDULE_INSERT, &p).await.map_err(duplicate_schedule)?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ScheduleRecord>, StoreError> {
        let row = self.db.query_opt(sql::SCHEDULE_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(|r| self.record(r)).transpose()
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = self.db.query(sql::SCHEDULE_LIST, &params![tenant.as_str(), bigint(skip), bigint(take)]).await?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn update(&self, s: &ScheduleRecord) -> Result<(), StoreError> {
        let c = ScheduleColumns::of(s, &self.protection)?;
        let mut p = definition(&c).to_vec();
        p.extend(params![c.updated_at]);
        let done = self.db.execute(sql::SCHEDULE_UPDATE, &p).await.map_err(duplicate_schedule)?;
        if done == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        let done = self.db.execute(sql::SCHEDULE_DELETE, &params![tenant.as_str(), id]).await?;
        Ok(done > 0)
    }

    async fn due(&self, now: DateTime<Utc>, limit: usize) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows = self.db.query(sql::SCHEDULE_DUE, &params![now, bigint(limit)]).await?;
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
        let done = self.db.execute(sql::SCHEDULE_ADVANCE, &params![tenant.as_str(), id, expected, next, now]).await?;
        Ok(done > 0)
    }

    async fn record_outcome(
        &self,
        tenant: &TenantId,
        id: Uuid,
        run: Option<RunId>,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        self.db.execute(sql::SCHEDULE_OUTCOME, &params![tenant.as_str(), id, run.map(|r| r.0), error]).await?;
        Ok(())
    }
}
