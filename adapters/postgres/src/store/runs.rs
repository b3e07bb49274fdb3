//! Runs, their event log, tool calls and recorded input on Postgres.
//!
//! An event batch is one statement (one round trip) that inserts every event and moves the
//! heartbeat. Run input, event payloads and tool arguments and results are protected
//! values (see [`crate::protect`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::driver::{Param, Row};
use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::events::{RecordedEvent, RunEvent};
use tracon_core::names::{RunId, TenantId};
use tracon_core::runs::store::{
    CancelOutcome, ModelStep, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats, RunStatus, RunStore, StaleRun,
    ToolCallRecord,
};
use tracon_core::runs::store::{LateCompletion, MAX_TREE_RUNS};

use super::Db;
use crate::codec::{
    add_stats_row, bigint, corrupt, duplicate_event, enum_parse, enum_text, event_arrays, from_json, input_place,
    open_event, status_parse, step_place, to_json, tool_place, unreadable,
};
use crate::params;
use crate::protect::Protection;
use crate::sql;

pub struct PgRunStore {
    db: Db,
    protection: Arc<Protection>,
}

impl PgRunStore {
    pub fn new(db: Db, protection: Arc<Protection>) -> Self {
        Self { db, protection }
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
        let duration = bigint(end.duration_ms);
        let p = params![
            tenant,
            id.0,
            status,
            end.ended_at,
            duration,
            usage,
            cost,
            end.model_provider,
            end.model,
            error,
            batch.sequences,
            batch.kinds,
            batch.times,
            batch.payloads,
            stale_before
        ];
        // RUN_FINISH takes 14 parameters, RUN_CLOSE_STALE a 15th.
        let p = if stale_before.is_some() { &p[..] } else { &p[..14] };
        let done = self.db.execute(statement, p).await.map_err(duplicate_event)?;
        Ok(done)
    }
}

fn status_text(s: RunStatus) -> Result<String, StoreError> {
    enum_text(&s)
}

/// Run rows decoded: one loop for every list, so the decoder is not inlined into each.
fn run_records(rows: &[Row], tenant: &TenantId) -> Result<Vec<RunRecord>, StoreError> {
    let mut runs = Vec::with_capacity(rows.len());
    for row in rows {
        runs.push(run_record(row, tenant)?);
    }
    Ok(runs)
}

#[inline(never)]
fn run_record(row: &Row, tenant: &TenantId) -> Result<RunRecord, StoreError> {
    let status: String = row.get("status")?;
    let labels: serde_json::Value = row.get("labels")?;
    let depth: i32 = row.get("depth")?;
    let version: Option<i32> = row.get("agent_version")?;
    let duration: Option<i64> = row.get("duration_ms")?;
    Ok(RunRecord {
        id: RunId(row.get("id")?),
        tenant: Some(tenant.clone()),
        agent_name: row.get("agent_name")?,
        agent_version: version.map(|v| v.max(0) as u32),
        status: status_parse(&status)?,
        started_at: row.get("started_at")?,
        ended_at: row.get("ended_at")?,
        duration_ms: duration.map(|d| d.max(0) as u64),
        usage: from_json(row.get("usage")?, "usage")?,
        cost: from_json(row.get("cost")?, "cost")?,
        model_provider: row.get("model_provider")?,
        model: row.get("model")?,
        error: from_json(row.get("error")?, "error")?,
        session_id: row.get("session_id")?,
        parent_run_id: row.get::<Option<uuid::Uuid>>("parent_run_id")?.map(RunId),
        root_run_id: row.get::<Option<uuid::Uuid>>("root_run_id")?.map(RunId),
        depth: depth.max(0) as u32,
        user_id: row.get("user_id")?,
        labels: serde_json::from_value(labels).map_err(|e| corrupt("labels", e))?,
        heartbeat_at: row.get("heartbeat_at")?,
        cancel_requested: row.get("cancel_requested")?,
        continued_from_run_id: row.get::<Option<uuid::Uuid>>("continued_from_run_id")?.map(RunId),
        replay_of_run_id: row.get::<Option<uuid::Uuid>>("replay_of_run_id")?.map(RunId),
        continued_by_run_id: row.get::<Option<uuid::Uuid>>("continued_by_run_id")?.map(RunId),
        yielded_at: row.get("yielded_at")?,
    })
}

/// The run filter's `$2`…`$8`, after the tenant.
struct FilterParams {
    status: Option<String>,
    labels: serde_json::Value,
}

impl FilterParams {
    fn of(f: &RunFilter) -> Result<Self, StoreError> {
        Ok(Self { status: f.status.map(status_text).transpose()?, labels: to_json(&f.labels)? })
    }

    /// `$1`…`$8`: the tenant, then `filter` as these params carry it.
    fn params<'a>(&'a self, tenant: &'a TenantId, filter: &'a RunFilter) -> Vec<Param<'a>> {
        let p = params![
            *tenant,
            filter.agent,
            self.status,
            filter.session_id,
            filter.user_id,
            self.labels,
            filter.from,
            filter.to
        ];
        p.into()
    }
}

impl PgRunStore {
    fn seal_opt(&self, tenant: &TenantId, column: &'static str, row: &str, v: Option<&str>) -> Option<Vec<u8>> {
        v.map(|text| self.protection.seal(&tool_place(tenant, column, row), text))
    }

    /// Writes a run row through [`sql::RUN_INSERT`], or [`sql::RUN_INSERT_AT`] with the
    /// definitions generation it is guarded on as `$17`. Rows written.
    async fn insert(
        &self,
        statement: &'static str,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
        generation: Option<i64>,
    ) -> Result<u64, StoreError> {
        let input = match input {
            Some(i) => {
                let json = serde_json::to_string(i).map_err(|e| corrupt("input", e))?;
                let row = run.id.to_string();
                Some(self.protection.seal(&input_place(tenant, &row), &json))
            }
            None => None,
        };
        let version = run.agent_version.map(|v| i32::try_from(v).unwrap_or(i32::MAX));
        let status = status_text(run.status)?;
        let depth = i32::try_from(run.depth).unwrap_or(i32::MAX);
        let labels = to_json(&run.labels)?;
        let (tenant_id, name) = (tenant.as_str(), run.agent_name.as_str());
        let (session, user) = (run.session_id.as_deref(), run.user_id.as_deref());
        let (parent, root, replay_of) =
            (run.parent_run_id.map(|r| r.0), run.root_run_id.map(|r| r.0), run.replay_of_run_id.map(|r| r.0));
        let p = params![
            tenant_id,
            run.id.0,
            name,
            version,
            status,
            run.started_at,
            session,
            parent,
            root,
            depth,
            user,
            labels,
            run.heartbeat_at,
            run.cancel_requested,
            input,
            replay_of,
            generation
        ];
        let take = if generation.is_some() { p.len() } else { p.len() - 1 };
        self.db.execute(statement, &p[..take]).await
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
        self.insert(sql::RUN_INSERT, tenant, run, input, None).await.map(drop)
    }

    async fn create_run_at(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
        definitions: u64,
    ) -> Result<bool, StoreError> {
        let generation = i64::try_from(definitions).unwrap_or(i64::MAX);
        Ok(self.insert(sql::RUN_INSERT_AT, tenant, run, input, Some(generation)).await? == 1)
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
        let row = self.db.query_opt(sql::RUN_GET, &params![tenant.as_str(), id.0]).await?;
        row.as_ref().map(|r| run_record(r, tenant)).transpose()
    }

    async fn list_tree(&self, tenant: &TenantId, root: RunId) -> Result<Vec<RunRecord>, StoreError> {
        let limit = bigint(MAX_TREE_RUNS);
        let rows = self.db.query(sql::RUN_TREE, &params![tenant.as_str(), root.0, limit]).await?;
        run_records(&rows, tenant)
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        filter.check_text()?;
        let f = FilterParams::of(filter)?;
        let (skip, take) = (skip as i64, take as i64);
        let mut p = f.params(tenant, filter);
        p.extend(params![skip, take]);
        let rows = self.db.query(sql::RUN_LIST, &p).await?;
        run_records(&rows, tenant)
    }

    async fn stats(&self, tenant: &TenantId, filter: &RunFilter) -> Result<RunStats, StoreError> {
        filter.check_text()?;
        let f = FilterParams::of(filter)?;
        let rows = self.db.query(sql::RUN_STATS, &f.params(tenant, filter)).await?;
        let mut s = RunStats::default();
        for row in rows {
            add_stats_row(
                &mut s,
                &row.get::<String>("dim")?,
                row.get("key")?,
                row.get("n")?,
                row.get("amount")?,
                row.get("tokens")?,
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
    ) -> Result<bool, StoreError> {
        if events.is_empty() {
            return self.is_cancel_requested(tenant, run).await;
        }
        let batch = event_arrays(&self.protection, tenant, run, events)?;
        let stop: Option<bool> = self
            .db
            .query_opt(
                sql::EVENTS_APPEND,
                &params![tenant.as_str(), run.0, &batch.sequences, &batch.kinds, &batch.times, &batch.payloads, now],
            )
            .await
            .map_err(duplicate_event)?
            .as_ref()
            .map(Row::first)
            .transpose()?;
        stop.ok_or(StoreError::NotFound)
    }

    async fn answers(&self, tenant: &TenantId, runs: &[RunId]) -> Result<BTreeMap<RunId, String>, StoreError> {
        if runs.is_empty() {
            return Ok(BTreeMap::new());
        }
        let ids: Vec<uuid::Uuid> = runs.iter().map(|r| r.0).collect();
        let rows = self.db.query(sql::EVENTS_ANSWERS, &params![tenant.as_str(), ids]).await?;
        let mut answers = BTreeMap::new();
        for row in &rows {
            let run = RunId(row.get("run_id")?);
            let payload: Vec<u8> = row.get("payload")?;
            let recorded =
                open_event(&self.protection, tenant, run, row.get("sequence")?, row.get("occurred_at")?, &payload)?;
            if let RunEvent::RunCompleted { text, .. } = recorded.event {
                answers.insert(run, text);
            }
        }
        Ok(answers)
    }

    async fn read_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows =
            self.db.query(sql::EVENTS_READ, &params![tenant.as_str(), run.0, bigint(after), limit as i64]).await?;
        rows.iter()
            .map(|row| {
                let payload: Vec<u8> = row.get("payload")?;
                open_event(&self.protection, tenant, run, row.get("sequence")?, row.get("occurred_at")?, &payload)
            })
            .collect()
    }

    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError> {
        self.record_tool_call_with(tenant, call, &[], Utc::now()).await
    }

    async fn record_tool_call_with(
        &self,
        tenant: &TenantId,
        call: &ToolCallRecord,
        events: &[RecordedEvent],
        _now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let batch = event_arrays(&self.protection, tenant, call.run_id, events)?;
        let row = format!("{}/{}", call.run_id, call.call_id);
        let arguments = self.protection.seal(&tool_place(tenant, "arguments", &row), &call.arguments);
        let effect = call.effect.as_ref().map(enum_text).transpose()?;
        self.db
            .execute(
                sql::TOOL_UPSERT,
                &params![
                    tenant.as_str(),
                    call.run_id.0,
                    &call.call_id,
                    &call.tool_name,
                    effect,
                    enum_text(&call.status)?,
                    arguments,
                    self.seal_opt(tenant, "result", &row, call.result.as_deref()),
                    self.seal_opt(tenant, "error", &row, call.error.as_deref()),
                    call.omitted_bytes.map(bigint),
                    call.started_at,
                    bigint(call.duration_ms),
                    call.timed_out,
                    call.late_completed_at,
                    call.late_duration_ms.map(bigint),
                    self.seal_opt(tenant, "late_result", &row, call.late_result.as_deref()),
                    self.seal_opt(tenant, "late_error", &row, call.late_error.as_deref()),
                    &batch.sequences,
                    &batch.kinds,
                    &batch.times,
                    &batch.payloads
                ],
            )
            .await
            .map_err(duplicate_event)?;
        Ok(())
    }

    async fn last_sequence(&self, tenant: &TenantId, run: RunId) -> Result<u64, StoreError> {
        let row = self.db.query_opt(sql::EVENTS_LAST, &params![tenant.as_str(), run.0]).await?;
        let last: i64 = match row {
            Some(row) => row.get("last")?,
            None => 0,
        };
        Ok(last.max(0) as u64)
    }

    async fn begin_step(
        &self,
        tenant: &TenantId,
        run: RunId,
        step: Option<&ModelStep>,
        starts: &[ToolCallRecord],
    ) -> Result<bool, StoreError> {
        self.begin_step_with(tenant, run, step, starts, &[], Utc::now()).await
    }

    async fn begin_step_with(
        &self,
        tenant: &TenantId,
        run: RunId,
        step: Option<&ModelStep>,
        starts: &[ToolCallRecord],
        events: &[RecordedEvent],
        _now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let batch = event_arrays(&self.protection, tenant, run, events)?;
        let (number, message, recorded_at) = match step {
            Some(step) => {
                let json = serde_json::to_string(&step.message).map_err(|e| corrupt("step", e))?;
                let row = format!("{run}/{}", step.step);
                let sealed = self.protection.seal(&step_place(tenant, &row), &json);
                (Some(i32::try_from(step.step).unwrap_or(i32::MAX)), Some(sealed), Some(step.recorded_at))
            }
            None => (None, None, None),
        };
        let mut ids = Vec::with_capacity(starts.len());
        let mut names = Vec::with_capacity(starts.len());
        let mut effects = Vec::with_capacity(starts.len());
        let mut statuses = Vec::with_capacity(starts.len());
        let mut arguments = Vec::with_capacity(starts.len());
        let mut times = Vec::with_capacity(starts.len());
        for call in starts {
            let row = format!("{run}/{}", call.call_id);
            ids.push(call.call_id.clone());
            names.push(call.tool_name.clone());
            effects.push(call.effect.as_ref().map(enum_text).transpose()?);
            statuses.push(enum_text(&call.status)?);
            arguments.push(self.protection.seal(&tool_place(tenant, "arguments", &row), &call.arguments));
            times.push(call.started_at);
        }
        let row = self
            .db
            .query_opt(
                sql::STEP_BEGIN,
                &params![
                    tenant.as_str(),
                    run.0,
                    number,
                    message,
                    recorded_at,
                    ids,
                    names,
                    effects,
                    statuses,
                    arguments,
                    times,
                    &batch.sequences,
                    &batch.kinds,
                    &batch.times,
                    &batch.payloads
                ],
            )
            .await
            .map_err(duplicate_event)?;
        match row {
            Some(row) => row.get("written"),
            None => Ok(false),
        }
    }

    async fn yield_run(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        usage: Option<&tracon_core::model::Usage>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let batch = event_arrays(&self.protection, tenant, run, events)?;
        let usage = usage.map(to_json).transpose()?;
        let p = params![tenant, run.0, now, batch.sequences, batch.kinds, batch.times, batch.payloads, usage];
        let done = self.db.execute(sql::RUN_YIELD, &p).await.map_err(duplicate_event)?;
        Ok(done > 0)
    }

    async fn resume_yielded(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(self.db.execute(sql::RUN_RESUME_YIELDED, &params![tenant.as_str(), run.0, now]).await? > 0)
    }

    async fn list_steps(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ModelStep>, StoreError> {
        let rows = self.db.query(sql::STEP_LIST, &params![tenant.as_str(), run.0]).await?;
        rows.iter()
            .map(|r| {
                let step: i32 = r.get("step")?;
                let sealed: Vec<u8> = r.get("message")?;
                let place = format!("{run}/{step}");
                let json = self.protection.open(&step_place(tenant, &place), &sealed).map_err(unreadable)?;
                Ok(ModelStep {
                    step: step.max(0) as u32,
                    message: serde_json::from_str(&json).map_err(|e| corrupt("step", e))?,
                    recorded_at: r.get("recorded_at")?,
                })
            })
            .collect()
    }

    async fn open_continuation(&self, tenant: &TenantId, from: RunId, next: &RunRecord) -> Result<bool, StoreError> {
        let inserted = self
            .db
            .execute(
                sql::RUN_CONTINUE,
                &params![
                    tenant.as_str(),
                    from.0,
                    next.id.0,
                    &next.agent_name,
                    next.agent_version.map(|v| i32::try_from(v).unwrap_or(i32::MAX)),
                    next.started_at,
                    next.session_id.as_deref(),
                    next.parent_run_id.map(|r| r.0),
                    next.root_run_id.map(|r| r.0),
                    i32::try_from(next.depth).unwrap_or(i32::MAX),
                    next.user_id.as_deref(),
                    to_json(&next.labels)?
                ],
            )
            .await?;
        Ok(inserted > 0)
    }

    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError> {
        let row = format!("{}/{}", late.run_id, late.call_id);
        let (result, error) = match &late.result {
            Ok(text) => (self.seal_opt(tenant, "late_result", &row, Some(text)), None),
            Err(e) => (None, self.seal_opt(tenant, "late_error", &row, Some(e))),
        };
        let done = self
            .db
            .execute(
                sql::TOOL_LATE,
                &params![
                    tenant.as_str(),
                    late.run_id.0,
                    &late.call_id,
                    late.completed_at,
                    bigint(late.duration_ms),
                    result,
                    error
                ],
            )
            .await?;
        if done == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError> {
        let rows = self.db.query(sql::TOOL_LIST, &params![tenant.as_str(), run.0]).await?;
        rows.iter()
            .map(|r| {
                let call_id: String = r.get("call_id")?;
                let row = format!("{run}/{call_id}");
                let effect: Option<String> = r.get("effect")?;
                let status: String = r.get("status")?;
                let arguments: Vec<u8> = r.get("arguments")?;
                let omitted: Option<i64> = r.get("omitted_bytes")?;
                let duration: i64 = r.get("duration_ms")?;
                let late_duration: Option<i64> = r.get("late_duration_ms")?;
                Ok(ToolCallRecord {
                    run_id: run,
                    arguments: self
                        .protection
                        .open(&tool_place(tenant, "arguments", &row), &arguments)
                        .map_err(unreadable)?,
                    tool_name: r.get("tool_name")?,
                    effect: effect.map(|e| enum_parse(&e, "tool effect")).transpose()?,
                    status: enum_parse(&status, "tool status")?,
                    result: self.open_opt(tenant, "result", &row, r.get("result")?)?,
                    error: self.open_opt(tenant, "error", &row, r.get("error")?)?,
                    omitted_bytes: omitted.map(|o| o.max(0) as u64),
                    started_at: r.get("started_at")?,
                    duration_ms: duration.max(0) as u64,
                    timed_out: r.get("timed_out")?,
                    late_completed_at: r.get("late_completed_at")?,
                    late_duration_ms: late_duration.map(|d| d.max(0) as u64),
                    late_result: self.open_opt(tenant, "late_result", &row, r.get("late_result")?)?,
                    late_error: self.open_opt(tenant, "late_error", &row, r.get("late_error")?)?,
                    call_id,
                })
            })
            .collect()
    }

    async fn record_input(&self, tenant: &TenantId, run: RunId, input: &RunInputRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(input).map_err(|e| corrupt("input", e))?;
        let row = run.to_string();
        let sealed = self.protection.seal(&input_place(tenant, &row), &json);
        let done = self.db.execute(sql::RUN_SET_INPUT, &params![tenant.as_str(), run.0, sealed]).await?;
        if done == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn get_input(&self, tenant: &TenantId, run: RunId) -> Result<Option<RunInputRecord>, StoreError> {
        let stored: Option<Option<Vec<u8>>> = self
            .db
            .query_opt(sql::RUN_GET_INPUT, &params![tenant.as_str(), run.0])
            .await?
            .as_ref()
            .map(Row::first)
            .transpose()?;
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
        self.db
            .query_opt(sql::RUN_START_QUEUED, &params![tenant.as_str(), run.0, now])
            .await?
            .as_ref()
            .map(Row::first)
            .transpose()
    }

    async fn request_cancel(&self, tenant: &TenantId, run: RunId) -> Result<CancelOutcome, StoreError> {
        let row = self.db.query_one(sql::RUN_CANCEL, &params![tenant.as_str(), run.0]).await?;
        let status: Option<String> = row.get("status")?;
        let requested: bool = row.get("requested")?;
        match status {
            None => Err(StoreError::NotFound),
            Some(_) if requested => Ok(CancelOutcome::Requested),
            Some(s) => Ok(CancelOutcome::AlreadyEnded(status_parse(&s)?)),
        }
    }

    async fn is_cancel_requested(&self, tenant: &TenantId, run: RunId) -> Result<bool, StoreError> {
        let flag: Option<bool> = self
            .db
            .query_opt(sql::RUN_CANCEL_FLAG, &params![tenant.as_str(), run.0])
            .await?
            .as_ref()
            .map(Row::first)
            .transpose()?;
        Ok(flag.unwrap_or(false))
    }

    async fn heartbeat(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let stop: Option<bool> = self
            .db
            .query_opt(sql::RUN_HEARTBEAT, &params![tenant.as_str(), run.0, now])
            .await?
            .as_ref()
            .map(Row::first)
            .transpose()?;
        Ok(stop.unwrap_or(true))
    }

    async fn signal(&self, signal: tracon_core::runs::drain::Signal) -> Result<(), StoreError> {
        let payload = signal.payload();
        self.db.execute(sql::RUN_SIGNAL, &params![payload.as_str()]).await?;
        Ok(())
    }

    async fn stale_runs(&self, stale_before: DateTime<Utc>, limit: usize) -> Result<Vec<StaleRun>, StoreError> {
        let rows = self.db.query(sql::RUN_STALE, &params![stale_before, bigint(limit)]).await?;
        rows.iter()
            .map(|row| {
                let tenant: String = row.get("tenant_id")?;
                let last: i64 = row.get("last_sequence")?;
                Ok(StaleRun {
                    tenant: TenantId::parse(&tenant).map_err(|_| corrupt("tenant", &tenant))?,
                    id: RunId(row.get("id")?),
                    started_at: row.get("started_at")?,
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
