//! Approvals on Postgres: pending requests in `approval_requests` (their arguments a
//! protected value), standing rules in `approval_rules`.
//!
//! The two steps that race are single statements whose outcome the database decides under
//! row locks (see [`sql::APPROVAL_DECIDE`] and [`sql::APPROVAL_CLAIM_RESUME`]): a decision
//! is one conditional UPDATE, and claiming a run's resumption locks all of the run's rows
//! in id order before it tests and writes them.

use std::sync::Arc;

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::approvals::{ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStore};
use tracon_core::error::StoreError;
use tracon_core::names::{RunId, TenantId};
use uuid::Uuid;

use super::Db;
use crate::codec::{
    APPROVAL_NOT_DECIDABLE, ApprovalColumns, RuleColumns, approval_arrays, bigint, conditions_json, decision_status,
    duplicate_approval, duplicate_rule,
};
use crate::params;
use crate::protect::Protection;
use crate::sql;

pub struct PgApprovalStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgApprovalStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
    }

    fn record(&self, row: &Row) -> Result<ApprovalRecord, StoreError> {
        crate::columns!(row, ApprovalColumns [tenant_id id run_id session_id agent_name call_id tool_name
            arguments effect requested_by created_at expires_at status decided_at decided_by reason
            resumed_run_id])
        .record(&self.protection)
    }
}

fn rule(row: &Row) -> Result<ApprovalRule, StoreError> {
    crate::columns!(row, RuleColumns [tenant_id id tool_name agent_name arguments_hash conditions description
        created_at created_by])
    .rule()
}

#[async_trait::async_trait]
impl ApprovalStore for PgApprovalStore {
    async fn create(&self, records: &[ApprovalRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let a = approval_arrays(&self.protection, records)?;
        self.db
            .execute(
                sql::APPROVAL_INSERT,
                &params![
                    &a.tenants,
                    &a.ids,
                    &a.run_ids,
                    &a.session_ids,
                    &a.agent_names,
                    &a.call_ids,
                    &a.tool_names,
                    &a.arguments,
                    &a.effects,
                    &a.requested_by,
                    &a.created_at,
                    &a.expires_at,
                    &a.statuses,
                    &a.decided_at,
                    &a.decided_by,
                    &a.reasons,
                    &a.resumed_run_ids
                ],
            )
            .await
            .map_err(duplicate_approval)?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ApprovalRecord>, StoreError> {
        let row = self.db.query_opt(sql::APPROVAL_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(|r| self.record(r)).transpose()
    }

    async fn list_pending(
        &self,
        tenant: &TenantId,
        now: DateTime<Utc>,
        take: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = self.db.query(sql::APPROVAL_PENDING, &params![tenant.as_str(), now, bigint(take)]).await?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn list_for_run(&self, tenant: &TenantId, run_id: RunId) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = self.db.query(sql::APPROVAL_FOR_RUN, &params![tenant.as_str(), run_id.0]).await?;
        rows.iter().map(|r| self.record(r)).collect()
    }

    async fn decide(
        &self,
        tenant: &TenantId,
        id: Uuid,
        decision: &ApprovalDecision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let row = self
            .db
            .query_one(
                sql::APPROVAL_DECIDE,
                &params![tenant.as_str(), id, decision_status(decision), now, &decision.decided_by, &decision.reason],
            )
            .await?;
        let found: bool = row.get("found")?;
        let decided: Option<Uuid> = row.get("id")?;
        match (found, decided) {
            (false, _) => Err(StoreError::NotFound),
            (true, None) => Err(StoreError::Conflict(APPROVAL_NOT_DECIDABLE.into())),
            (true, Some(_)) => self.record(&row),
        }
    }

    async fn claim_resume(&self, tenant: &TenantId, run_id: RunId, resumed: RunId) -> Result<bool, StoreError> {
        // The locks are taken in id order, so claimers do not deadlock one another; the retry
        // is for a deadlock with some other writer all the same.
        let done = self.db.execute(sql::APPROVAL_CLAIM_RESUME, &params![tenant.as_str(), run_id.0, resumed.0]).await?;
        Ok(done > 0)
    }

    async fn create_rule(&self, r: &ApprovalRule) -> Result<(), StoreError> {
        self.db
            .execute(
                sql::RULE_INSERT,
                &params![
                    r.tenant.as_str(),
                    r.id,
                    &r.tool_name,
                    &r.agent_name,
                    &r.arguments_hash,
                    conditions_json(r)?,
                    &r.description,
                    r.created_at,
                    &r.created_by
                ],
            )
            .await
            .map_err(duplicate_rule)?;
        Ok(())
    }

    async fn list_rules(&self, tenant: &TenantId, tool: Option<&str>) -> Result<Vec<ApprovalRule>, StoreError> {
        tracon_core::error::check_text_opt("toolName", tool)?;
        let rows = self.db.query(sql::RULE_LIST, &params![tenant.as_str(), tool]).await?;
        rows.iter().map(rule).collect()
    }

    async fn get_rule(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ApprovalRule>, StoreError> {
        let row = self.db.query_opt(sql::RULE_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(rule).transpose()
    }

    async fn delete_rule(&self, tenant: &TenantId, id: Uuid) -> Result<ApprovalRule, StoreError> {
        let row = self.db.query_opt(sql::RULE_DELETE, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(rule).transpose()?.ok_or(StoreError::NotFound)
    }
}
