//! The job queue on Postgres: one `jobs` row per job, its payload a protected value.
//!
//! Leasing is one statement ([`sql::JOB_LEASE`]): it picks leasable rows `FOR UPDATE SKIP
//! LOCKED` — so each goes to exactly one caller — and, in the same UPDATE, leases them or
//! closes those out of attempts. Every change under a lease is one UPDATE conditioned on the
//! token and the `Running` status, so an expired holder changes nothing.

use std::sync::Arc;

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::jobs::{JobFilter, JobRecord, JobStore, Lease, LeaseRequest, Outcome};
use tracon_core::names::TenantId;
use uuid::Uuid;

use super::Db;
use crate::codec::{JOB_ENDED, JobColumns, bigint, duplicate_job, job_lease_of, job_leases, job_values};
use crate::params;
use crate::protect::Protection;
use crate::sql;

pub struct PgJobStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgJobStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
    }

    fn record(&self, row: &Row) -> Result<JobRecord, StoreError> {
        crate::columns!(row, JobColumns [tenant_id id handler_key payload status attempts max_attempts
            available_at lease_owner lease_token lease_expires_at heartbeat_at cancel_requested result
            error_code error_message run_id created_at updated_at completed_at])
        .record(&self.protection)
    }
}

#[async_trait::async_trait]
impl JobStore for PgJobStore {
    async fn enqueue(&self, job: &JobRecord) -> Result<(), StoreError> {
        let v = job_values(&self.protection, job)?;
        self.db
            .execute(
                sql::JOB_INSERT,
                &params![
                    &v.tenant_id,
                    v.id,
                    &v.handler_key,
                    &v.payload,
                    &v.status,
                    v.attempts,
                    v.max_attempts,
                    v.available_at,
                    &v.lease_owner,
                    v.lease_token,
                    v.lease_expires_at,
                    v.heartbeat_at,
                    v.cancel_requested,
                    &v.result,
                    &v.error_code,
                    &v.error_message,
                    v.run_id,
                    v.created_at,
                    v.updated_at,
                    v.completed_at
                ],
            )
            .await
            .map_err(duplicate_job)?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let row = self.db.query_opt(sql::JOB_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(|r| self.record(r)).transpose()
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &JobFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        filter.check_text()?;
        let rows = self
            .db
            .query(
                sql::JOB_LIST,
                &params![
                    tenant.as_str(),
                    filter.status.map(|s| s.as_str()),
                    filter.handler_key.as_deref(),
                    bigint(skip),
                    bigint(take)
                ],
            )
            .await?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn lease(&self, request: &LeaseRequest, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let until = request.now + request.lease_for;
        let mut leases = Vec::new();
        // Each round is one statement; rows it closed (out of attempts) do not count against
        // the limit, so another round takes their place — as the in-memory store does.
        while leases.len() < limit {
            let want = bigint(limit - leases.len());
            let rows = self
                .db
                .query(sql::JOB_LEASE, &params![&request.handler_keys, request.now, want, &request.owner, until])
                .await?;
            let records = rows.iter().map(|r| self.record(r)).collect::<Result<Vec<_>, _>>()?;
            let (taken, closed) = job_leases(records)?;
            leases.extend(taken);
            if closed == 0 {
                break;
            }
        }
        Ok(leases)
    }

    async fn lease_one(&self, id: Uuid, request: &LeaseRequest) -> Result<Option<Lease>, StoreError> {
        let until = request.now + request.lease_for;
        let row = self
            .db
            .query_opt(sql::JOB_LEASE_ONE, &params![&request.handler_keys, request.now, id, &request.owner, until])
            .await?;
        match row {
            Some(row) => job_lease_of(self.record(&row)?),
            None => Ok(None),
        }
    }

    async fn heartbeat(
        &self,
        id: Uuid,
        token: Uuid,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        let row = self.db.query_opt(sql::JOB_HEARTBEAT, &params![id, token, until, now]).await?;
        row.map(|r| r.get("cancel_requested")).transpose()
    }

    async fn finish(&self, id: Uuid, token: Uuid, outcome: &Outcome, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let done = match outcome {
            Outcome::Succeeded(result) => {
                self.db.execute(sql::JOB_FINISH_SUCCEEDED, &params![id, token, result, now]).await?
            }
            Outcome::Retry { error, retry_at } => {
                self.db
                    .execute(sql::JOB_FINISH_RETRY, &params![id, token, error.code, error.message, *retry_at, now])
                    .await?
            }
            Outcome::Failed(error) => {
                self.db.execute(sql::JOB_FINISH_FAILED, &params![id, token, error.code, error.message, now]).await?
            }
            Outcome::Canceled => self.db.execute(sql::JOB_FINISH_CANCELED, &params![id, token, now]).await?,
            Outcome::Requeue => self.db.execute(sql::JOB_FINISH_REQUEUE, &params![id, token, now]).await?,
        };
        Ok(done > 0)
    }

    async fn due(&self, now: DateTime<Utc>, quiet_since: DateTime<Utc>, limit: usize) -> Result<Vec<Uuid>, StoreError> {
        let limit = bigint(limit);
        let rows = self.db.query(sql::JOB_DUE, &params![now, quiet_since, limit]).await?;
        rows.iter().map(Row::first).collect()
    }

    async fn cancel(&self, tenant: &TenantId, id: Uuid, now: DateTime<Utc>) -> Result<JobRecord, StoreError> {
        let row = self.db.query_one(sql::JOB_CANCEL, &params![tenant.as_str(), id, now]).await?;
        let found: bool = row.get("found")?;
        let changed: Option<Uuid> = row.get("id")?;
        match (found, changed) {
            (false, _) => Err(StoreError::NotFound),
            (true, None) => Err(StoreError::Conflict(JOB_ENDED.into())),
            (true, Some(_)) => self.record(&row),
        }
    }
}
