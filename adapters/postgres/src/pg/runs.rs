//! Runs, their event log, tool calls and recorded input on Postgres.
//!
//! An event batch is one statement (one round trip) that inserts every event and moves the
//! heartbeat. Run input, event payloads and tool arguments and results are protected
//! values (see [`crate::protect`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::events::RecordedEvent;
use tracon_core::names::{RunId, TenantId};
use tracon_core::store::{
    CancelOutcome, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats, RunStatus, RunStore, StaleRun, StoreError,
    ToolCallRecord,
};
use tracon_core::tools::pipeline::LateCompletion;

use super::{map_err, retrying};
use crate::codec::{
    add_stats_row, corrupt, duplicate_event, enum_parse, enum_text, event_arrays, from_json, input_place, open_event,
    status_parse, to_json, tool_place, unreadable,
};
use crate::protect::Protection;
use crate::sql;

pub struct PgRunStore {
    pool: PgPool,
    protection: Arc<Protection>,
}

impl PgRunStore {
    pub fn new(pool: PgPool, protection: Arc<Protection>) -> Self {
        Self { pool, protection }
    }

    /// Closes a run with its last events in one statement: [`sql::RUN_FINISH`], or
    /// [`sql::RUN_CLOSE_STALE`] with its `stale_before` as `$15`. Rows affected.
    async fn close(
        &self,
        statement: &'static str,
        tenant: &TenantId,
        id: RunId,
        end: &RunEnd,
        events: &[RecordedEvent],
        stale_before: Option<DateTime<Utc>>,
    ) -> Result<u64, StoreError> {
        let usage = end.usage.as_ref().map(to_json).transpose()?;
        let cost = end.cost.as_ref().map(to_json).transpose()?;
        let error = end.error.as_ref().map(to_json).transpose()?;
        let status = status_text(end.status)?;
        let batch = event_arrays(&self.protection, tenant, id, events)?;
        let done = retrying(|| {
            let query = sqlx::query(statement)
                .bind(tenant.as_str())
                .bind(id.0)
                .bind(&status)
                .bind(end.ended_at)
                .bind(i64::try_from(end.duration_ms).unwrap_or(i64::MAX))
                .bind(&usage)
                .bind(&cost)
                .bind(end.model_provider.as_deref())
                .bind(end.model.as_deref())
                .bind(&error)
                .bind(&batch.sequences)
                .bind(&batch.kinds)
                .bind(&batch.times)
                .bind(&batch.payloads);
            match stale_before {
                Some(before) => query.bind(before),
                None => query,
            }
            .execute(&self.pool)
        })
        .await
        .map_err(duplicate_event)?;
        Ok(done.rows_affected())
    }
}

fn status_text(s: RunStatus) -> Result<String, StoreError> {
    enum_text(&s)
}

fn run_record(row: &PgRow, tenant: &TenantId) -> Result<RunRecord, StoreError> {
    let status: String = row.try_get("status").map_err(map_err)?;
    let labels: serde_json::Value = row.try_get("labels").map_err(map_err)?;
    let depth: i32 = row.try_get("depth").map_err(map_err)?;
    let version: Option<i32> = row.try_get("agent_version").map_err(map_err)?;
    let duration: Option<i64> = row.try_get("duration_ms").map_err(map_err)?;
    Ok(RunRecord {
        id: RunId(row.try_get("id").map_err(map_err)?),
        tenant: Some(tenant.clone()),
        agent_name: row.try_get("agent_name").map_err(map_err)?,
        agent_version: version.map(|v| v.max(0) as u32),
        status: status_parse(&status)?,
        started_at: row.try_get("started_at").map_err(map_err)?,
        ended_at: row.try_get("ended_at").map_err(map_err)?,
        duration_ms: duration.map(|d| d.max(0) as u64),
        usage: from_json(row.try_get("usage").map_err(map_err)?, "usage")?,
        cost: from_json(row.try_get("cost").map_err(map_err)?, "cost")?,
        model_provider: row.try_get("model_provider").map_err(map_err)?,
        model: row.try_get("model").map_err(map_err)?,
        error: from_json(row.try_get("error").map_err(map_err)?, "error")?,
        session_id: row.try_get("session_id").map_err(map_err)?,
        parent_run_id: row.try_get::<Option<uuid::Uuid>, _>("parent_run_id").map_err(map_err)?.map(RunId),
        root_run_id: row.try_get::<Option<uuid::Uuid>, _>("root_run_id").map_err(map_err)?.map(RunId),
        depth: depth.max(0) as u32,
        user_id: row.try_get("user_id").map_err(map_err)?,
        labels: serde_json::from_value(labels).map_err(|e| corrupt("labels", e))?,
        heartbeat_at: row.try_get("heartbeat_at").map_err(map_err)?,
        cancel_requested: row.try_get("cancel_requested").map_err(map_err)?,
    })
}

/// Binds the run filter as `$2`…`$8` after the tenant.
fn bind_filter<'q>(
    q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    f: &'q RunFilter,
) -> Result<sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>, StoreError> {
    let status = f.status.map(status_text).transpose()?;
    Ok(q.bind(f.agent.as_deref())
        .bind(status)
        .bind(f.session_id.as_deref())
        .bind(f.user_id.as_deref())
        .bind(to_json(&f.labels)?)
        .bind(f.from)
        .bind(f.to))
}

impl PgRunStore {
    fn seal_opt(&self, tenant: &TenantId, column: &'static str, row: &str, v: Option<&str>) -> Option<Vec<u8>> {
        v.map(|text| self.protection.seal(&tool_place(tenant, column, row), text))
    }

    fn open_opt(
        &self,
        tenant: &TenantId,
        column: &'static str,
        row: &str,
        v: Option<Vec<u8>>,
    ) -> Result<Option<String>, StoreError> {
        v.map(|bytes| self.protection.open(&tool_place(tenant, column, row), &bytes).map_err(unreadable)).transpose()
    }
}

#[async_trait::async_trait]
impl RunStore for PgRunStore {
    async fn create_run(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
    ) -> Result<(), StoreError> {
        let input = match input {
            Some(i) => {
                let json = serde_json::to_string(i).map_err(|e| corrupt("input", e))?;
                let row = run.id.to_string();
                Some(self.protection.seal(&input_place(tenant, &row), &json))
            }
            None => None,
        };
        sqlx::query(sql::RUN_INSERT)
            .bind(tenant.as_str())
            .bind(run.id.0)
            .bind(&run.agent_name)
            .bind(run.agent_version.map(|v| i32::try_from(v).unwrap_or(i32::MAX)))
            .bind(status_text(run.status)?)
            .bind(run.started_at)
            .bind(run.session_id.as_deref())
            .bind(run.parent_run_id.map(|r| r.0))
            .bind(run.root_run_id.map(|r| r.0))
            .bind(i32::try_from(run.depth).unwrap_or(i32::MAX))
            .bind(run.user_id.as_deref())
            .bind(to_json(&run.labels)?)
            .bind(run.heartbeat_at)
            .bind(run.cancel_requested)
            .bind(input)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn finish_run(
        &self,
        tenant: &TenantId,
        id: RunId,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<(), StoreError> {
        let closed = self.close(sql::RUN_FINISH, tenant, id, end, events, None).await?;
        if closed == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn get_run(&self, tenant: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(sql::RUN_GET)
            .bind(tenant.as_str())
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(|r| run_record(r, tenant)).transpose()
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        filter.check_text()?;
        let q = bind_filter(sqlx::query(sql::RUN_LIST).bind(tenant.as_str()), filter)?;
        let rows = q.bind(skip as i64).bind(take as i64).fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(|r| run_record(r, tenant)).collect()
    }

    async fn stats(&self, tenant: &TenantId, filter: &RunFilter) -> Result<RunStats, StoreError> {
        filter.check_text()?;
        let q = bind_filter(sqlx::query(sql::RUN_STATS).bind(tenant.as_str()), filter)?;
        let rows = q.fetch_all(&self.pool).await.map_err(map_err)?;
        let mut s = RunStats::default();
        for row in rows {
            add_stats_row(
                &mut s,
                &row.try_get::<String, _>("dim").map_err(map_err)?,
                row.try_get("key").map_err(map_err)?,
                row.try_get("n").map_err(map_err)?,
                row.try_get("amount").map_err(map_err)?,
                row.try_get("tokens").map_err(map_err)?,
            )?;
        }
        Ok(s)
    }

    async fn append_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let batch = event_arrays(&self.protection, tenant, run, events)?;
        let done = sqlx::query(sql::EVENTS_APPEND)
            .bind(tenant.as_str())
            .bind(run.0)
            .bind(&batch.sequences)
            .bind(&batch.kinds)
            .bind(&batch.times)
            .bind(&batch.payloads)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(|e| duplicate_event(map_err(e)))?;
        if done.rows_affected() == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn read_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows = sqlx::query(sql::EVENTS_READ)
            .bind(tenant.as_str())
            .bind(run.0)
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|row| {
                let payload: Vec<u8> = row.try_get("payload").map_err(map_err)?;
                open_event(
                    &self.protection,
                    tenant,
                    run,
                    row.try_get("sequence").map_err(map_err)?,
                    row.try_get("occurred_at").map_err(map_err)?,
                    &payload,
                )
            })
            .collect()
    }

    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError> {
        let row = format!("{}/{}", call.run_id, call.call_id);
        let arguments = self.protection.seal(&tool_place(tenant, "arguments", &row), &call.arguments);
        let effect = call.effect.as_ref().map(enum_text).transpose()?;
        sqlx::query(sql::TOOL_UPSERT)
            .bind(tenant.as_str())
            .bind(call.run_id.0)
            .bind(&call.call_id)
            .bind(&call.tool_name)
            .bind(effect)
            .bind(enum_text(&call.status)?)
            .bind(arguments)
            .bind(self.seal_opt(tenant, "result", &row, call.result.as_deref()))
            .bind(self.seal_opt(tenant, "error", &row, call.error.as_deref()))
            .bind(call.omitted_bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX)))
            .bind(call.started_at)
            .bind(i64::try_from(call.duration_ms).unwrap_or(i64::MAX))
            .bind(call.timed_out)
            .bind(call.late_completed_at)
            .bind(call.late_duration_ms.map(|d| i64::try_from(d).unwrap_or(i64::MAX)))
            .bind(self.seal_opt(tenant, "late_result", &row, call.late_result.as_deref()))
            .bind(self.seal_opt(tenant, "late_error", &row, call.late_error.as_deref()))
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError> {
        let row = format!("{}/{}", late.run_id, late.call_id);
        let (result, error) = match &late.result {
            Ok(text) => (self.seal_opt(tenant, "late_result", &row, Some(text)), None),
            Err(e) => (None, self.seal_opt(tenant, "late_error", &row, Some(e))),
        };
        let done = sqlx::query(sql::TOOL_LATE)
            .bind(tenant.as_str())
            .bind(late.run_id.0)
            .bind(&late.call_id)
            .bind(late.completed_at)
            .bind(i64::try_from(late.duration_ms).unwrap_or(i64::MAX))
            .bind(result)
            .bind(error)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        if done.rows_affected() == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError> {
        let rows = sqlx::query(sql::TOOL_LIST)
            .bind(tenant.as_str())
            .bind(run.0)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|r| {
                let call_id: String = r.try_get("call_id").map_err(map_err)?;
                let row = format!("{run}/{call_id}");
                let effect: Option<String> = r.try_get("effect").map_err(map_err)?;
                let status: String = r.try_get("status").map_err(map_err)?;
                let arguments: Vec<u8> = r.try_get("arguments").map_err(map_err)?;
                let omitted: Option<i64> = r.try_get("omitted_bytes").map_err(map_err)?;
                let duration: i64 = r.try_get("duration_ms").map_err(map_err)?;
                let late_duration: Option<i64> = r.try_get("late_duration_ms").map_err(map_err)?;
                Ok(ToolCallRecord {
                    run_id: run,
                    arguments: self
                        .protection
                        .open(&tool_place(tenant, "arguments", &row), &arguments)
                        .map_err(unreadable)?,
                    tool_name: r.try_get("tool_name").map_err(map_err)?,
                    effect: effect.map(|e| enum_parse(&e, "tool effect")).transpose()?,
                    status: enum_parse(&status, "tool status")?,
                    result: self.open_opt(tenant, "result", &row, r.try_get("result").map_err(map_err)?)?,
                    error: self.open_opt(tenant, "error", &row, r.try_get("error").map_err(map_err)?)?,
                    omitted_bytes: omitted.map(|o| o.max(0) as u64),
                    started_at: r.try_get("started_at").map_err(map_err)?,
                    duration_ms: duration.max(0) as u64,
                    timed_out: r.try_get("timed_out").map_err(map_err)?,
                    late_completed_at: r.try_get("late_completed_at").map_err(map_err)?,
                    late_duration_ms: late_duration.map(|d| d.max(0) as u64),
                    late_result: self.open_opt(
                        tenant,
                        "late_result",
                        &row,
                        r.try_get("late_result").map_err(map_err)?,
                    )?,
                    late_error: self.open_opt(tenant, "late_error", &row, r.try_get("late_error").map_err(map_err)?)?,
                    call_id,
                })
            })
            .collect()
    }

    async fn record_input(&self, tenant: &TenantId, run: RunId, input: &RunInputRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(input).map_err(|e| corrupt("input", e))?;
        let row = run.to_string();
        let sealed = self.protection.seal(&input_place(tenant, &row), &json);
        let done = sqlx::query(sql::RUN_SET_INPUT)
            .bind(tenant.as_str())
            .bind(run.0)
            .bind(sealed)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        if done.rows_affected() == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn get_input(&self, tenant: &TenantId, run: RunId) -> Result<Option<RunInputRecord>, StoreError> {
        let stored: Option<Option<Vec<u8>>> = sqlx::query_scalar(sql::RUN_GET_INPUT)
            .bind(tenant.as_str())
            .bind(run.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        let Some(Some(bytes)) = stored else { return Ok(None) };
        let row = run.to_string();
        let json = self.protection.open(&input_place(tenant, &row), &bytes).map_err(unreadable)?;
        serde_json::from_str(&json).map(Some).map_err(|e| corrupt("input", e))
    }

    async fn start_queued(
        &self,
        tenant: &TenantId,
        run: RunId,
        now: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        sqlx::query_scalar(sql::RUN_START_QUEUED)
            .bind(tenant.as_str())
            .bind(run.0)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)
    }

    async fn request_cancel(&self, tenant: &TenantId, run: RunId) -> Result<CancelOutcome, StoreError> {
        let row = sqlx::query(sql::RUN_CANCEL)
            .bind(tenant.as_str())
            .bind(run.0)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let status: Option<String> = row.try_get("status").map_err(map_err)?;
        let requested: bool = row.try_get("requested").map_err(map_err)?;
        match status {
            None => Err(StoreError::NotFound),
            Some(_) if requested => Ok(CancelOutcome::Requested),
            Some(s) => Ok(CancelOutcome::AlreadyEnded(status_parse(&s)?)),
        }
    }

    async fn is_cancel_requested(&self, tenant: &TenantId, run: RunId) -> Result<bool, StoreError> {
        let flag: Option<bool> = sqlx::query_scalar(sql::RUN_CANCEL_FLAG)
            .bind(tenant.as_str())
            .bind(run.0)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(flag.unwrap_or(false))
    }

    async fn heartbeat(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(sql::RUN_HEARTBEAT)
            .bind(tenant.as_str())
            .bind(run.0)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn stale_runs(&self, stale_before: DateTime<Utc>, limit: usize) -> Result<Vec<StaleRun>, StoreError> {
        let rows = sqlx::query(sql::RUN_STALE)
            .bind(stale_before)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter()
            .map(|row| {
                let tenant: String = row.try_get("tenant_id").map_err(map_err)?;
                let last: i64 = row.try_get("last_sequence").map_err(map_err)?;
                Ok(StaleRun {
                    tenant: TenantId::parse(&tenant).map_err(|_| corrupt("tenant", &tenant))?,
                    id: RunId(row.try_get("id").map_err(map_err)?),
                    started_at: row.try_get("started_at").map_err(map_err)?,
                    last_sequence: u64::try_from(last).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn close_stale(
        &self,
        tenant: &TenantId,
        id: RunId,
        stale_before: DateTime<Utc>,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<bool, StoreError> {
        Ok(self.close(sql::RUN_CLOSE_STALE, tenant, id, end, events, Some(stale_before)).await? > 0)
    }
}
