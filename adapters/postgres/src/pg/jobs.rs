//! The job queue on Postgres: one `jobs` row per job, its payload a protected value.
//!
//! Leasing is one statement ([`sql::JOB_LEASE`]): it picks leasable rows `FOR UPDATE SKIP
//! LOCKED` — so each goes to exactly one caller — and, in the same UPDATE, leases them or
//! closes those out of attempts. Every change under a lease is one UPDATE conditioned on the
//! token and the `Running` status, so an expired holder changes nothing.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::jobs::{JobFilter, JobRecord, JobStore, Lease, LeaseRequest, Outcome};
use tracon_core::names::TenantId;
use tracon_core::store::StoreError;
use uuid::Uuid;

use super::{map_err, retrying};
use crate::codec::{JOB_ENDED, JobColumns, duplicate_job, job_lease_of, job_leases, job_limit, job_values};
use crate::protect::Protection;
use crate::sql;

pub struct PgJobStore {
    pool: PgPool,
    protection: Arc<Protection>,
}

impl PgJobStore {
    pub fn new(pool: PgPool, protection: Arc<Protection>) -> Self {
        Self { pool, protection }
    }

    fn record(&self, row: &PgRow) -> Result<JobRecord, StoreError> {
        JobColumns {
            tenant_id: row.try_get("tenant_id").map_err(map_err)?,
            id: row.try_get("id").map_err(map_err)?,
            handler_key: row.try_get("handler_key").map_err(map_err)?,
            payload: row.try_get("payload").map_err(map_err)?,
            status: row.try_get("status").map_err(map_err)?,
            attempts: row.try_get("attempts").map_err(map_err)?,
            max_attempts: row.try_get("max_attempts").map_err(map_err)?,
            available_at: row.try_get("available_at").map_err(map_err)?,
            lease_owner: row.try_get("lease_owner").map_err(map_err)?,
            lease_token: row.try_get("lease_token").map_err(map_err)?,
            lease_expires_at: row.try_get("lease_expires_at").map_err(map_err)?,
            heartbeat_at: row.try_get("heartbeat_at").map_err(map_err)?,
            cancel_requested: row.try_get("cancel_requested").map_err(map_err)?,
            result: row.try_get("result").map_err(map_err)?,
            error_code: row.try_get("error_code").map_err(map_err)?,
            error_message: row.try_get("error_message").map_err(map_err)?,
            run_id: row.try_get("run_id").map_err(map_err)?,
            created_at: row.try_get("created_at").map_err(map_err)?,
            updated_at: row.try_get("updated_at").map_err(map_err)?,
            completed_at: row.try_get("completed_at").map_err(map_err)?,
        }
        .record(&self.protection)
    }
}

#[async_trait::async_trait]
impl JobStore for PgJobStore {
    async fn enqueue(&self, job: &JobRecord) -> Result<(), StoreError> {
        let v = job_values(&self.protection, job)?;
        sqlx::query(sql::JOB_INSERT)
            .bind(&v.tenant_id)
            .bind(v.id)
            .bind(&v.handler_key)
            .bind(&v.payload)
            .bind(v.status)
            .bind(v.attempts)
            .bind(v.max_attempts)
            .bind(v.available_at)
            .bind(&v.lease_owner)
            .bind(v.lease_token)
            .bind(v.lease_expires_at)
            .bind(v.heartbeat_at)
            .bind(v.cancel_requested)
            .bind(&v.result)
            .bind(&v.error_code)
            .bind(&v.error_message)
            .bind(v.run_id)
            .bind(v.created_at)
            .bind(v.updated_at)
            .bind(v.completed_at)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_job(map_err(e)))?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<JobRecord>, StoreError> {
        let row = sqlx::query(sql::JOB_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
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
        let rows = sqlx::query(sql::JOB_LIST)
            .bind(tenant.as_str())
            .bind(filter.status.map(|s| s.as_str()))
            .bind(filter.handler_key.as_deref())
            .bind(job_limit(skip))
            .bind(job_limit(take))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn lease(&self, request: &LeaseRequest, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let until = request.now + request.lease_for;
        let mut leases = Vec::new();
        // Each round is one statement; rows it closed (out of attempts) do not count against
        // the limit, so another round takes their place — as the in-memory store does.
        while leases.len() < limit {
            let want = job_limit(limit - leases.len());
            let rows = retrying(|| {
                sqlx::query(sql::JOB_LEASE)
                    .bind(&request.handler_keys)
                    .bind(request.now)
                    .bind(want)
                    .bind(&request.owner)
                    .bind(until)
                    .fetch_all(&self.pool)
            })
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
        let row = retrying(|| {
            sqlx::query(sql::JOB_LEASE_ONE)
                .bind(&request.handler_keys)
                .bind(request.now)
                .bind(id)
                .bind(&request.owner)
                .bind(until)
                .fetch_optional(&self.pool)
        })
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
        let row = sqlx::query(sql::JOB_HEARTBEAT)
            .bind(id)
            .bind(token)
            .bind(until)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.map(|r| r.try_get("cancel_requested").map_err(map_err)).transpose()
    }

    async fn finish(&self, id: Uuid, token: Uuid, outcome: &Outcome, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let q = match outcome {
            Outcome::Succeeded(result) => {
                sqlx::query(sql::JOB_FINISH_SUCCEEDED).bind(id).bind(token).bind(result).bind(now)
            }
            Outcome::Retry { error, retry_at } => sqlx::query(sql::JOB_FINISH_RETRY)
                .bind(id)
                .bind(token)
                .bind(&error.code)
                .bind(&error.message)
                .bind(*retry_at)
                .bind(now),
            Outcome::Failed(error) => sqlx::query(sql::JOB_FINISH_FAILED)
                .bind(id)
                .bind(token)
                .bind(&error.code)
                .bind(&error.message)
                .bind(now),
            Outcome::Canceled => sqlx::query(sql::JOB_FINISH_CANCELED).bind(id).bind(token).bind(now),
        };
        let done = q.execute(&self.pool).await.map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn due(&self, now: DateTime<Utc>, quiet_since: DateTime<Utc>, limit: usize) -> Result<Vec<Uuid>, StoreError> {
        sqlx::query_scalar(sql::JOB_DUE)
            .bind(now)
            .bind(quiet_since)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)
    }

    async fn cancel(&self, tenant: &TenantId, id: Uuid, now: DateTime<Utc>) -> Result<JobRecord, StoreError> {
        let row = sqlx::query(sql::JOB_CANCEL)
            .bind(tenant.as_str())
            .bind(id)
            .bind(now)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let found: bool = row.try_get("found").map_err(map_err)?;
        let changed: Option<Uuid> = row.try_get("id").map_err(map_err)?;
        match (found, changed) {
            (false, _) => Err(StoreError::NotFound),
            (true, None) => Err(StoreError::Conflict(JOB_ENDED.into())),
            (true, Some(_)) => self.record(&row),
        }
    }
}
