//! Approvals on Postgres: pending requests in `approval_requests` (their arguments a
//! protected value), standing rules in `approval_rules`.
//!
//! The two steps that race are single statements whose outcome the database decides under
//! row locks (see [`sql::APPROVAL_DECIDE`] and [`sql::APPROVAL_CLAIM_RESUME`]): a decision
//! is one conditional UPDATE, and claiming a run's resumption locks all of the run's rows
//! in id order before it tests and writes them.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::approvals::{ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStore};
use tracon_core::names::{RunId, TenantId};
use tracon_core::store::StoreError;
use uuid::Uuid;

use super::{map_err, retrying};
use crate::codec::{
    APPROVAL_NOT_DECIDABLE, ApprovalColumns, RuleColumns, approval_arrays, conditions_json, decision_status,
    duplicate_approval, duplicate_rule,
};
use crate::protect::Protection;
use crate::sql;

pub struct PgApprovalStore {
    pool: PgPool,
    protection: Arc<Protection>,
}

impl PgApprovalStore {
    pub fn new(pool: PgPool, protection: Arc<Protection>) -> Self {
        Self { pool, protection }
    }

    fn record(&self, row: &PgRow) -> Result<ApprovalRecord, StoreError> {
        ApprovalColumns {
            tenant_id: row.try_get("tenant_id").map_err(map_err)?,
            id: row.try_get("id").map_err(map_err)?,
            run_id: row.try_get("run_id").map_err(map_err)?,
            session_id: row.try_get("session_id").map_err(map_err)?,
            agent_name: row.try_get("agent_name").map_err(map_err)?,
            call_id: row.try_get("call_id").map_err(map_err)?,
            tool_name: row.try_get("tool_name").map_err(map_err)?,
            arguments: row.try_get("arguments").map_err(map_err)?,
            effect: row.try_get("effect").map_err(map_err)?,
            requested_by: row.try_get("requested_by").map_err(map_err)?,
            created_at: row.try_get("created_at").map_err(map_err)?,
            expires_at: row.try_get("expires_at").map_err(map_err)?,
            status: row.try_get("status").map_err(map_err)?,
            decided_at: row.try_get("decided_at").map_err(map_err)?,
            decided_by: row.try_get("decided_by").map_err(map_err)?,
            reason: row.try_get("reason").map_err(map_err)?,
            resumed_run_id: row.try_get("resumed_run_id").map_err(map_err)?,
        }
        .record(&self.protection)
    }
}

fn rule(row: &PgRow) -> Result<ApprovalRule, StoreError> {
    RuleColumns {
        tenant_id: row.try_get("tenant_id").map_err(map_err)?,
        id: row.try_get("id").map_err(map_err)?,
        tool_name: row.try_get("tool_name").map_err(map_err)?,
        agent_name: row.try_get("agent_name").map_err(map_err)?,
        arguments_hash: row.try_get("arguments_hash").map_err(map_err)?,
        conditions: row.try_get("conditions").map_err(map_err)?,
        description: row.try_get("description").map_err(map_err)?,
        created_at: row.try_get("created_at").map_err(map_err)?,
        created_by: row.try_get("created_by").map_err(map_err)?,
    }
    .rule()
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl ApprovalStore for PgApprovalStore {
    async fn create(&self, records: &[ApprovalRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let a = approval_arrays(&self.protection, records)?;
        sqlx::query(sql::APPROVAL_INSERT)
            .bind(&a.tenants)
            .bind(&a.ids)
            .bind(&a.run_ids)
            .bind(&a.session_ids)
            .bind(&a.agent_names)
            .bind(&a.call_ids)
            .bind(&a.tool_names)
            .bind(&a.arguments)
            .bind(&a.effects)
            .bind(&a.requested_by)
            .bind(&a.created_at)
            .bind(&a.expires_at)
            .bind(&a.statuses)
            .bind(&a.decided_at)
            .bind(&a.decided_by)
            .bind(&a.reasons)
            .bind(&a.resumed_run_ids)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_approval(map_err(e)))?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ApprovalRecord>, StoreError> {
        let row = sqlx::query(sql::APPROVAL_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(|r| self.record(r)).transpose()
    }

    async fn list_pending(
        &self,
        tenant: &TenantId,
        now: DateTime<Utc>,
        take: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = sqlx::query(sql::APPROVAL_PENDING)
            .bind(tenant.as_str())
            .bind(now)
            .bind(limit(take))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn list_for_run(&self, tenant: &TenantId, run_id: RunId) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = sqlx::query(sql::APPROVAL_FOR_RUN)
            .bind(tenant.as_str())
            .bind(run_id.0)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn decide(
        &self,
        tenant: &TenantId,
        id: Uuid,
        decision: &ApprovalDecision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let row = sqlx::query(sql::APPROVAL_DECIDE)
            .bind(tenant.as_str())
            .bind(id)
            .bind(decision_status(decision))
            .bind(now)
            .bind(&decision.decided_by)
            .bind(&decision.reason)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let found: bool = row.try_get("found").map_err(map_err)?;
        let decided: Option<Uuid> = row.try_get("id").map_err(map_err)?;
        match (found, decided) {
            (false, _) => Err(StoreError::NotFound),
            (true, None) => Err(StoreError::Conflict(APPROVAL_NOT_DECIDABLE.into())),
            (true, Some(_)) => self.record(&row),
        }
    }

    async fn claim_resume(&self, tenant: &TenantId, run_id: RunId, resumed: RunId) -> Result<bool, StoreError> {
        // The locks are taken in id order, so claimers do not deadlock one another; the retry
        // is for a deadlock with some other writer all the same.
        let done = retrying(|| {
            sqlx::query(sql::APPROVAL_CLAIM_RESUME)
                .bind(tenant.as_str())
                .bind(run_id.0)
                .bind(resumed.0)
                .execute(&self.pool)
        })
        .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn create_rule(&self, r: &ApprovalRule) -> Result<(), StoreError> {
        sqlx::query(sql::RULE_INSERT)
            .bind(r.tenant.as_str())
            .bind(r.id)
            .bind(&r.tool_name)
            .bind(&r.agent_name)
            .bind(&r.arguments_hash)
            .bind(conditions_json(r)?)
            .bind(&r.description)
            .bind(r.created_at)
            .bind(&r.created_by)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_rule(map_err(e)))?;
        Ok(())
    }

    async fn list_rules(&self, tenant: &TenantId, tool: Option<&str>) -> Result<Vec<ApprovalRule>, StoreError> {
        tracon_core::store::check_text_opt("toolName", tool)?;
        let rows = sqlx::query(sql::RULE_LIST)
            .bind(tenant.as_str())
            .bind(tool)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(rule).collect()
    }

    async fn get_rule(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ApprovalRule>, StoreError> {
        let row = sqlx::query(sql::RULE_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(rule).transpose()
    }

    async fn delete_rule(&self, tenant: &TenantId, id: Uuid) -> Result<ApprovalRule, StoreError> {
        let row = sqlx::query(sql::RULE_DELETE)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(rule).transpose()?.ok_or(StoreError::NotFound)
    }
}
