//! The store ports on Postgres from a Worker: tokio-postgres over a `worker::Socket` to
//! Hyperdrive, running the same SQL text ([`tracon_postgres::sql`]) and the same codec as
//! the sqlx stores.
//!
//! Every store call opens its own connection (Hyperdrive pools the real ones), and closes it
//! before returning: the client is dropped and the connection future awaited, so no socket
//! outlives the call — the pattern the toolchain notes found necessary under workerd.
//! JavaScript futures are `!Send`; a Worker isolate is single-threaded, so each call is
//! wrapped in `SendWrapper` to meet the ports' `Send` bounds.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::RemoteHandle;
use send_wrapper::SendWrapper;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};
use tracon_core::approvals::{ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStore};
use tracon_core::audit::{AuditEntry, AuditFilter, AuditStore, NewAuditEntry};
use tracon_core::definition::AgentDefinition;
use tracon_core::events::RecordedEvent;
use tracon_core::idempotency::{Claim, IdempotencyStore, KeyRef};
use tracon_core::jobs::{JobFilter, JobRecord, JobStore, Lease, LeaseRequest, Outcome};
use tracon_core::keys::{ApiKeyRecord, ApiKeyStore};
use tracon_core::names::{AgentName, RunId, TenantId};
use tracon_core::store::{
    CancelOutcome, DefinitionStore, RunEnd, RunFilter, RunInputRecord, RunRecord, RunStats, RunStore, SessionItem,
    SessionParent, SessionRecord, SessionStore, SessionWrite, StaleRun, StoreError, StoredDefinition, ToolCallRecord,
};
use tracon_core::tenants::{TenantRecord, TenantStore};
use tracon_core::tools::pipeline::LateCompletion;
use tracon_postgres::codec::{
    APPROVAL_NOT_DECIDABLE, ApprovalColumns, AuditColumns, ClaimColumns, IDEMPOTENCY_CLAIM_ATTEMPTS,
    IDEMPOTENCY_CONTENDED, JOB_ENDED, JobColumns, KeyColumns, REVOKED_KEY_NOT_ROTATABLE, RuleColumns, TenantColumns,
    add_stats_row, approval_arrays, conditions_json, corrupt, decision_status, duplicate_approval,
    duplicate_audit_sequence, duplicate_event, duplicate_job, duplicate_key, duplicate_rule, duplicate_tenant,
    enum_parse, enum_text, event_arrays, from_json, idempotency_response, input_place, is_retryable_sqlstate,
    item_arrays, job_lease_of, job_leases, job_limit, job_values, next_audit_link, open_event, open_item, scope_texts,
    status_parse, to_i64, to_json, to_u64, tool_place, unreadable,
};
use tracon_postgres::protect::Protection;
use tracon_postgres::sql;
use worker::{SecureTransport, Socket};

/// Where Postgres is (from the Hyperdrive binding) and how to talk to it.
#[derive(Clone)]
pub struct PgTarget {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
    pub schema: String,
    pub tls: bool,
    pub statement_timeout_ms: u128,
    pub application_name: String,
}

/// One open connection; [`Conn::close`] ends it and waits until the socket is closed.
///
/// A store call can also be dropped half way (the client of a streamed response went away
/// and workerd cancelled the request). Then the connection task is dropped with it: the
/// socket belongs to that request's I/O context, which workerd tears down with the
/// request. (Letting the task run on instead was tried: touching a cancelled request's
/// socket aborted the whole isolate.)
struct Conn {
    client: Client,
    done: RemoteHandle<()>,
}

impl Conn {
    async fn close(self) {
        drop(self.client);
        self.done.await;
    }
}

/// Maps a driver error by SQLSTATE, like the sqlx stores do.
fn map_err(e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(code) => tracon_postgres::codec::sqlstate_error(code.code(), e.to_string()),
        // A connection that broke (closed, or an I/O error on the socket) may work again;
        // anything else without a SQLSTATE — a value that does not decode, a missing column
        // — will not, and must not send callers into a retry loop.
        None if e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) => {
            StoreError::Unavailable { detail: e.to_string() }
        }
        None => StoreError::Internal { detail: e.to_string() },
    }
}

/// `execute`, retrying serialization failures and deadlocks a few times on the same
/// connection — what the sqlx stores do — so a run's closing write is not lost to one.
async fn execute_retrying(c: &Client, statement: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, StoreError> {
    let mut attempt = 0u32;
    loop {
        match c.execute(statement, params).await {
            Ok(n) => return Ok(n),
            Err(e) if e.code().is_some_and(|c| is_retryable_sqlstate(c.code())) && attempt < 4 => {
                attempt += 1;
                worker::Delay::from(std::time::Duration::from_millis(5 * 2u64.pow(attempt))).await;
            }
            Err(e) => return Err(map_err(e)),
        }
    }
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, column: &str) -> Result<T, StoreError> {
    row.try_get(column).map_err(map_err)
}

impl PgTarget {
    async fn open(&self) -> Result<Conn, StoreError> {
        let socket = Socket::builder()
            .secure_transport(if self.tls { SecureTransport::StartTls } else { SecureTransport::Off })
            .connect(self.host.clone(), self.port)
            .map_err(|e| StoreError::Unavailable { detail: format!("socket: {e}") })?;
        let mut config = tokio_postgres::Config::new();
        config
            .user(&self.user)
            .password(&self.password)
            .dbname(&self.database)
            .application_name(&self.application_name)
            .options(format!("-c search_path={} -c statement_timeout={}", self.schema, self.statement_timeout_ms));
        if !self.tls {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        }
        let (client, connection) =
            config.connect_raw(socket, worker::postgres_tls::PassthroughTls).await.map_err(map_err)?;
        let (driver, done) = connection
            .map(|r| {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "postgres connection ended with an error");
                }
            })
            .remote_handle();
        wasm_bindgen_futures::spawn_local(driver);
        Ok(Conn { client, done })
    }

    /// Runs `f` on a fresh connection and closes it, whatever `f` returned.
    async fn with<T>(&self, f: impl AsyncFnOnce(&Client) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let conn = self.open().await?;
        let result = f(&conn.client).await;
        conn.close().await;
        result
    }

    /// Runs `f` in one transaction on a fresh connection, committed when `f` returns `Ok`.
    /// Otherwise the dropped transaction queues its rollback, and closing the connection
    /// ends the transaction on the server in any case.
    async fn in_transaction<T>(&self, f: impl AsyncFnOnce(&Client) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.open().await?;
        let result = async {
            let tx = conn.client.transaction().await.map_err(map_err)?;
            let value = f(tx.client()).await?;
            tx.commit().await.map_err(map_err)?;
            Ok(value)
        }
        .await;
        conn.close().await;
        result
    }
}

/// Runs a `!Send` store future where a `Send` one is required (single-threaded isolate).
/// (A plain function, so the caller holds only the wrapper — never the bare future.)
fn send<F: std::future::Future>(f: F) -> SendWrapper<F> {
    SendWrapper::new(f)
}

pub struct WorkerStores {
    pub target: PgTarget,
    pub protection: Arc<Protection>,
}

// ---- definitions -------------------------------------------------------------------------

fn stored(row: &Row) -> Result<StoredDefinition, StoreError> {
    let version: i32 = get(row, "version")?;
    let definition: serde_json::Value = get(row, "definition")?;
    Ok(StoredDefinition {
        definition: serde_json::from_value(definition).map_err(|e| corrupt("definition", e))?,
        version: version.max(0) as u32,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "written_at")?,
    })
}

#[async_trait::async_trait]
impl DefinitionStore for WorkerStores {
    async fn get(&self, tenant: &TenantId, name: &AgentName) -> Result<Option<StoredDefinition>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::DEF_GET, &[&tenant.as_str(), &name.as_str()]).await.map_err(map_err)?;
            row.as_ref().map(stored).transpose()
        }))
        .await
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<StoredDefinition>, StoreError> {
        send(self.target.with(async |c| {
            let rows =
                c.query(sql::DEF_LIST, &[&tenant.as_str(), &(skip as i64), &(take as i64)]).await.map_err(map_err)?;
            rows.iter().map(stored).collect()
        }))
        .await
    }

    async fn create(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        tracon_core::store::check_definition_text(&definition)?;
        let body = to_json(&definition)?;
        send(self.target.with(async |c| {
            c.execute(sql::DEF_CREATE, &[&tenant.as_str(), &definition.name, &body, &now]).await.map_err(|e| {
                match map_err(e) {
                    StoreError::Conflict(_) => {
                        StoreError::Conflict(format!("An agent named '{}' already exists.", definition.name))
                    }
                    other => other,
                }
            })
        }))
        .await?;
        Ok(StoredDefinition { definition, version: 1, created_at: now, updated_at: now })
    }

    async fn update(
        &self,
        tenant: &TenantId,
        definition: AgentDefinition,
        now: DateTime<Utc>,
    ) -> Result<StoredDefinition, StoreError> {
        tracon_core::store::check_definition_text(&definition)?;
        let body = to_json(&definition)?;
        // Two concurrent saves can pick the same next version; the loser retries on top.
        let mut attempts = 0;
        let row = loop {
            let result = send(self.target.with(async |c| {
                c.query_opt(sql::DEF_UPDATE, &[&tenant.as_str(), &definition.name, &body, &now]).await.map_err(map_err)
            }))
            .await;
            match result {
                Err(StoreError::Conflict(_)) if attempts < 5 => attempts += 1,
                other => break other?.ok_or(StoreError::NotFound)?,
            }
        };
        let version: i32 = get(&row, "version")?;
        Ok(StoredDefinition {
            version: version.max(0) as u32,
            created_at: get(&row, "created_at")?,
            updated_at: now,
            definition,
        })
    }

    async fn delete(&self, tenant: &TenantId, name: &AgentName) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            Ok(c.execute(sql::DEF_DELETE, &[&tenant.as_str(), &name.as_str()]).await.map_err(map_err)? > 0)
        }))
        .await
    }

    async fn versions(&self, tenant: &TenantId, name: &AgentName) -> Result<Vec<StoredDefinition>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::DEF_VERSIONS, &[&tenant.as_str(), &name.as_str()]).await.map_err(map_err)?;
            rows.iter().map(stored).collect()
        }))
        .await
    }

    async fn version(
        &self,
        tenant: &TenantId,
        name: &AgentName,
        version: u32,
    ) -> Result<Option<StoredDefinition>, StoreError> {
        let v = i32::try_from(version).unwrap_or(i32::MAX);
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::DEF_VERSION, &[&tenant.as_str(), &name.as_str(), &v]).await.map_err(map_err)?;
            row.as_ref().map(stored).transpose()
        }))
        .await
    }
}

// ---- runs ------------------------------------------------------------------------------------

fn run_record(row: &Row, tenant: &TenantId) -> Result<RunRecord, StoreError> {
    let status: String = get(row, "status")?;
    let version: Option<i32> = get(row, "agent_version")?;
    let duration: Option<i64> = get(row, "duration_ms")?;
    let depth: i32 = get(row, "depth")?;
    let labels: serde_json::Value = get(row, "labels")?;
    Ok(RunRecord {
        id: RunId(get(row, "id")?),
        tenant: Some(tenant.clone()),
        agent_name: get(row, "agent_name")?,
        agent_version: version.map(|v| v.max(0) as u32),
        status: status_parse(&status)?,
        started_at: get(row, "started_at")?,
        ended_at: get(row, "ended_at")?,
        duration_ms: duration.map(to_u64),
        usage: from_json(get(row, "usage")?, "usage")?,
        cost: from_json(get(row, "cost")?, "cost")?,
        model_provider: get(row, "model_provider")?,
        model: get(row, "model")?,
        error: from_json(get(row, "error")?, "error")?,
        session_id: get(row, "session_id")?,
        parent_run_id: get::<Option<uuid::Uuid>>(row, "parent_run_id")?.map(RunId),
        root_run_id: get::<Option<uuid::Uuid>>(row, "root_run_id")?.map(RunId),
        depth: depth.max(0) as u32,
        user_id: get(row, "user_id")?,
        labels: serde_json::from_value(labels).map_err(|e| corrupt("labels", e))?,
        heartbeat_at: get(row, "heartbeat_at")?,
        cancel_requested: get(row, "cancel_requested")?,
    })
}

/// The run filter as `$2`…`$8`.
struct Filter {
    agent: Option<String>,
    status: Option<String>,
    session: Option<String>,
    user: Option<String>,
    labels: serde_json::Value,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
}

impl Filter {
    fn new(f: &RunFilter) -> Result<Self, StoreError> {
        Ok(Self {
            agent: f.agent.clone(),
            status: f.status.map(|s| enum_text(&s)).transpose()?,
            session: f.session_id.clone(),
            user: f.user_id.clone(),
            labels: to_json(&f.labels)?,
            from: f.from,
            to: f.to,
        })
    }
}

fn sealed_opt(p: &Protection, tenant: &TenantId, column: &'static str, row: &str, v: Option<&str>) -> Option<Vec<u8>> {
    v.map(|text| p.seal(&tool_place(tenant, column, row), text))
}

fn open_opt(
    p: &Protection,
    tenant: &TenantId,
    column: &'static str,
    row: &str,
    v: Option<Vec<u8>>,
) -> Result<Option<String>, StoreError> {
    v.map(|b| p.open(&tool_place(tenant, column, row), &b).map_err(unreadable)).transpose()
}

#[async_trait::async_trait]
impl RunStore for WorkerStores {
    async fn create_run(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
    ) -> Result<(), StoreError> {
        let row_id = run.id.to_string();
        let input = input
            .map(|i| serde_json::to_string(i).map_err(|e| corrupt("input", e)))
            .transpose()?
            .map(|json| self.protection.seal(&input_place(tenant, &row_id), &json));
        let status = enum_text(&run.status)?;
        let labels = to_json(&run.labels)?;
        let version = run.agent_version.map(|v| i32::try_from(v).unwrap_or(i32::MAX));
        let depth = i32::try_from(run.depth).unwrap_or(i32::MAX);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 15] = [
                &tenant.as_str(),
                &run.id.0,
                &run.agent_name,
                &version,
                &status,
                &run.started_at,
                &run.session_id,
                &run.parent_run_id.map(|r| r.0),
                &run.root_run_id.map(|r| r.0),
                &depth,
                &run.user_id,
                &labels,
                &run.heartbeat_at,
                &run.cancel_requested,
                &input,
            ];
            c.execute(sql::RUN_INSERT, &params).await.map_err(map_err).map(|_| ())
        }))
        .await
    }

    async fn finish_run(
        &self,
        tenant: &TenantId,
        id: RunId,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<(), StoreError> {
        let closed = self.close_run(sql::RUN_FINISH, tenant, id, end, events, None).await?;
        if closed == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn get_run(&self, tenant: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::RUN_GET, &[&tenant.as_str(), &id.0]).await.map_err(map_err)?;
            row.as_ref().map(|r| run_record(r, tenant)).transpose()
        }))
        .await
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        filter.check_text()?;
        let f = Filter::new(filter)?;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 10] = [
                &tenant.as_str(),
                &f.agent,
                &f.status,
                &f.session,
                &f.user,
                &f.labels,
                &f.from,
                &f.to,
                &(skip as i64),
                &(take as i64),
            ];
            let rows = c.query(sql::RUN_LIST, &params).await.map_err(map_err)?;
            rows.iter().map(|r| run_record(r, tenant)).collect()
        }))
        .await
    }

    async fn stats(&self, tenant: &TenantId, filter: &RunFilter) -> Result<RunStats, StoreError> {
        filter.check_text()?;
        let f = Filter::new(filter)?;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 8] =
                [&tenant.as_str(), &f.agent, &f.status, &f.session, &f.user, &f.labels, &f.from, &f.to];
            let rows = c.query(sql::RUN_STATS, &params).await.map_err(map_err)?;
            let mut s = RunStats::default();
            for row in &rows {
                let dim: String = get(row, "dim")?;
                add_stats_row(
                    &mut s,
                    &dim,
                    get(row, "key")?,
                    get(row, "n")?,
                    get(row, "amount")?,
                    get(row, "tokens")?,
                )?;
            }
            Ok(s)
        }))
        .await
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
        let kinds: Vec<&str> = batch.kinds.clone();
        let n = send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 7] =
                [&tenant.as_str(), &run.0, &batch.sequences, &kinds, &batch.times, &batch.payloads, &now];
            execute_retrying(c, sql::EVENTS_APPEND, &params).await.map_err(duplicate_event)
        }))
        .await?;
        if n == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn read_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let after = to_i64(after, "sequence")?;
        send(self.target.with(async |c| {
            let rows = c
                .query(sql::EVENTS_READ, &[&tenant.as_str(), &run.0, &after, &(limit as i64)])
                .await
                .map_err(map_err)?;
            rows.iter()
                .map(|r| {
                    let payload: Vec<u8> = get(r, "payload")?;
                    open_event(&self.protection, tenant, run, get(r, "sequence")?, get(r, "occurred_at")?, &payload)
                })
                .collect()
        }))
        .await
    }

    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError> {
        let row = format!("{}/{}", call.run_id, call.call_id);
        let p = &self.protection;
        let arguments = p.seal(&tool_place(tenant, "arguments", &row), &call.arguments);
        let result = sealed_opt(p, tenant, "result", &row, call.result.as_deref());
        let error = sealed_opt(p, tenant, "error", &row, call.error.as_deref());
        let late_result = sealed_opt(p, tenant, "late_result", &row, call.late_result.as_deref());
        let late_error = sealed_opt(p, tenant, "late_error", &row, call.late_error.as_deref());
        let effect = call.effect.as_ref().map(enum_text).transpose()?;
        let status = enum_text(&call.status)?;
        let omitted = call.omitted_bytes.map(|b| to_i64(b, "bytes")).transpose()?;
        let duration = to_i64(call.duration_ms, "duration")?;
        let late_duration = call.late_duration_ms.map(|d| to_i64(d, "duration")).transpose()?;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 17] = [
                &tenant.as_str(),
                &call.run_id.0,
                &call.call_id,
                &call.tool_name,
                &effect,
                &status,
                &arguments,
                &result,
                &error,
                &omitted,
                &call.started_at,
                &duration,
                &call.timed_out,
                &call.late_completed_at,
                &late_duration,
                &late_result,
                &late_error,
            ];
            c.execute(sql::TOOL_UPSERT, &params).await.map_err(map_err).map(|_| ())
        }))
        .await
    }

    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError> {
        let row = format!("{}/{}", late.run_id, late.call_id);
        let (result, error) = match &late.result {
            Ok(t) => (sealed_opt(&self.protection, tenant, "late_result", &row, Some(t)), None),
            Err(e) => (None, sealed_opt(&self.protection, tenant, "late_error", &row, Some(e))),
        };
        let duration = to_i64(late.duration_ms, "duration")?;
        let n = send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 7] =
                [&tenant.as_str(), &late.run_id.0, &late.call_id, &late.completed_at, &duration, &result, &error];
            c.execute(sql::TOOL_LATE, &params).await.map_err(map_err)
        }))
        .await?;
        if n == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::TOOL_LIST, &[&tenant.as_str(), &run.0]).await.map_err(map_err)?;
            let p = &self.protection;
            rows.iter()
                .map(|r| {
                    let call_id: String = get(r, "call_id")?;
                    let row = format!("{run}/{call_id}");
                    let effect: Option<String> = get(r, "effect")?;
                    let status: String = get(r, "status")?;
                    let arguments: Vec<u8> = get(r, "arguments")?;
                    Ok(ToolCallRecord {
                        run_id: run,
                        arguments: p.open(&tool_place(tenant, "arguments", &row), &arguments).map_err(unreadable)?,
                        tool_name: get(r, "tool_name")?,
                        effect: effect.map(|e| enum_parse(&e, "tool effect")).transpose()?,
                        status: enum_parse(&status, "tool status")?,
                        result: open_opt(p, tenant, "result", &row, get(r, "result")?)?,
                        error: open_opt(p, tenant, "error", &row, get(r, "error")?)?,
                        omitted_bytes: get::<Option<i64>>(r, "omitted_bytes")?.map(to_u64),
                        started_at: get(r, "started_at")?,
                        duration_ms: to_u64(get(r, "duration_ms")?),
                        timed_out: get(r, "timed_out")?,
                        late_completed_at: get(r, "late_completed_at")?,
                        late_duration_ms: get::<Option<i64>>(r, "late_duration_ms")?.map(to_u64),
                        late_result: open_opt(p, tenant, "late_result", &row, get(r, "late_result")?)?,
                        late_error: open_opt(p, tenant, "late_error", &row, get(r, "late_error")?)?,
                        call_id,
                    })
                })
                .collect()
        }))
        .await
    }

    async fn record_input(&self, tenant: &TenantId, run: RunId, input: &RunInputRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(input).map_err(|e| corrupt("input", e))?;
        let row = run.to_string();
        let sealed = self.protection.seal(&input_place(tenant, &row), &json);
        let n = send(self.target.with(async |c| {
            c.execute(sql::RUN_SET_INPUT, &[&tenant.as_str(), &run.0, &sealed]).await.map_err(map_err)
        }))
        .await?;
        if n == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn get_input(&self, tenant: &TenantId, run: RunId) -> Result<Option<RunInputRecord>, StoreError> {
        let stored = send(self.target.with(async |c| {
            let row = c.query_opt(sql::RUN_GET_INPUT, &[&tenant.as_str(), &run.0]).await.map_err(map_err)?;
            row.map(|r| get::<Option<Vec<u8>>>(&r, "input")).transpose()
        }))
        .await?;
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
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::RUN_START_QUEUED, &[&tenant.as_str(), &run.0, &now]).await.map_err(map_err)?;
            row.map(|r| get::<bool>(&r, "cancel_requested")).transpose()
        }))
        .await
    }

    async fn request_cancel(&self, tenant: &TenantId, run: RunId) -> Result<CancelOutcome, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_one(sql::RUN_CANCEL, &[&tenant.as_str(), &run.0]).await.map_err(map_err)?;
            let status: Option<String> = get(&row, "status")?;
            let requested: bool = get(&row, "requested")?;
            match status {
                None => Err(StoreError::NotFound),
                Some(_) if requested => Ok(CancelOutcome::Requested),
                Some(s) => Ok(CancelOutcome::AlreadyEnded(status_parse(&s)?)),
            }
        }))
        .await
    }

    async fn is_cancel_requested(&self, tenant: &TenantId, run: RunId) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::RUN_CANCEL_FLAG, &[&tenant.as_str(), &run.0]).await.map_err(map_err)?;
            Ok(row.map(|r| get::<bool>(&r, "cancel_requested")).transpose()?.unwrap_or(false))
        }))
        .await
    }

    async fn heartbeat(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<(), StoreError> {
        send(self.target.with(async |c| {
            c.execute(sql::RUN_HEARTBEAT, &[&tenant.as_str(), &run.0, &now]).await.map_err(map_err).map(|_| ())
        }))
        .await
    }

    async fn stale_runs(&self, stale_before: DateTime<Utc>, limit: usize) -> Result<Vec<StaleRun>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let rows = c.query(sql::RUN_STALE, &[&stale_before, &limit]).await.map_err(map_err)?;
            rows.iter()
                .map(|row| {
                    let tenant: String = get(row, "tenant_id")?;
                    let last: i64 = get(row, "last_sequence")?;
                    Ok(StaleRun {
                        tenant: TenantId::parse(&tenant).map_err(|_| corrupt("tenant", &tenant))?,
                        id: RunId(get(row, "id")?),
                        started_at: get(row, "started_at")?,
                        last_sequence: u64::try_from(last).unwrap_or(0),
                    })
                })
                .collect()
        }))
        .await
    }

    async fn close_stale(
        &self,
        tenant: &TenantId,
        id: RunId,
        stale_before: DateTime<Utc>,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<bool, StoreError> {
        Ok(self.close_run(sql::RUN_CLOSE_STALE, tenant, id, end, events, Some(stale_before)).await? > 0)
    }
}

// ---- sessions ----------------------------------------------------------------------------------

fn session_record(row: &Row) -> Result<SessionRecord, StoreError> {
    let parent_id: Option<String> = get(row, "parent_session_id")?;
    let parent_seq: Option<i64> = get(row, "parent_sequence")?;
    Ok(SessionRecord {
        id: get(row, "id")?,
        agent_name: get(row, "agent_name")?,
        version: to_u64(get(row, "version")?),
        item_count: to_u64(get(row, "item_count")?),
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
        owner_user_id: get(row, "owner_user_id")?,
        parent: match (parent_id, parent_seq) {
            (Some(session_id), Some(seq)) => Some(SessionParent { session_id, sequence: to_u64(seq) }),
            _ => None,
        },
    })
}

impl WorkerStores {
    /// Closes a run with its last events in one statement: `RUN_FINISH`, or
    /// `RUN_CLOSE_STALE` with its `stale_before` as `$15`. Rows affected.
    async fn close_run(
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
        let status = enum_text(&end.status)?;
        let duration = to_i64(end.duration_ms, "duration")?;
        let batch = event_arrays(&self.protection, tenant, id, events)?;
        let kinds: Vec<&str> = batch.kinds.clone();
        let tenant = tenant.as_str();
        send(self.target.with(async |c| {
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![
                &tenant,
                &id.0,
                &status,
                &end.ended_at,
                &duration,
                &usage,
                &cost,
                &end.model_provider,
                &end.model,
                &error,
                &batch.sequences,
                &kinds,
                &batch.times,
                &batch.payloads,
            ];
            if let Some(before) = &stale_before {
                params.push(before);
            }
            execute_retrying(c, statement, &params).await.map_err(duplicate_event)
        }))
        .await
    }
}

impl WorkerStores {
    #[allow(clippy::too_many_arguments)]
    async fn create_session(
        &self,
        tenant: &TenantId,
        id: &str,
        agent_name: Option<&str>,
        messages: &[tracon_core::model::Message],
        run_id: Option<RunId>,
        owner: Option<&str>,
        parent: Option<&SessionParent>,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let (seqs, contents) = item_arrays(&self.protection, tenant, id, 0, messages)?;
        let count = seqs.len() as i64;
        let parent_id = parent.map(|p| p.session_id.clone());
        let parent_seq = parent.map(|p| to_i64(p.sequence, "sequence")).transpose()?;
        let run = run_id.map(|r| r.0);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 11] = [
                &tenant.as_str(),
                &id,
                &agent_name,
                &count,
                &now,
                &owner,
                &parent_id,
                &parent_seq,
                &run,
                &seqs,
                &contents,
            ];
            c.execute(sql::SESSION_CREATE, &params).await.map_err(|e| match map_err(e) {
                StoreError::Conflict(_) => StoreError::Conflict("The session already exists.".into()),
                other => other,
            })
        }))
        .await?;
        Ok(SessionRecord {
            id: id.to_owned(),
            agent_name: agent_name.map(str::to_owned),
            version: 1,
            item_count: to_u64(count),
            created_at: now,
            updated_at: now,
            owner_user_id: owner.map(str::to_owned),
            parent: parent.cloned(),
        })
    }
}

#[async_trait::async_trait]
impl SessionStore for WorkerStores {
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::SESSION_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(session_record).transpose()
        }))
        .await
    }

    async fn items(&self, tenant: &TenantId, id: &str) -> Result<Vec<SessionItem>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::SESSION_ITEMS, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            rows.iter()
                .map(|r| {
                    let seq: i64 = get(r, "sequence")?;
                    let content: Vec<u8> = get(r, "content")?;
                    Ok(SessionItem {
                        sequence: to_u64(seq),
                        message: open_item(&self.protection, tenant, id, seq, &content)?,
                        run_id: get::<Option<uuid::Uuid>>(r, "run_id")?.map(RunId),
                        created_at: get(r, "created_at")?,
                    })
                })
                .collect()
        }))
        .await
    }

    async fn list(
        &self,
        tenant: &TenantId,
        owner: Option<&str>,
        skip: usize,
        take: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c
                .query(sql::SESSION_LIST, &[&tenant.as_str(), &owner, &(skip as i64), &(take as i64)])
                .await
                .map_err(map_err)?;
            rows.iter().map(session_record).collect()
        }))
        .await
    }

    async fn try_create(&self, tenant: &TenantId, id: &str, write: &SessionWrite) -> Result<SessionRecord, StoreError> {
        self.create_session(
            tenant,
            id,
            Some(&write.agent_name),
            &write.messages,
            write.run_id,
            write.owner_user_id.as_deref(),
            None,
            write.now,
        )
        .await
    }

    async fn try_append(
        &self,
        tenant: &TenantId,
        id: &str,
        expected_version: u64,
        write: &SessionWrite,
    ) -> Result<SessionRecord, StoreError> {
        let expected = to_i64(expected_version, "version")?;
        let count: Option<i64> = send(self.target.with(async |c| {
            let row = c.query_opt(sql::SESSION_COUNT_AT, &[&tenant.as_str(), &id, &expected]).await.map_err(map_err)?;
            row.map(|r| get::<i64>(&r, "item_count")).transpose()
        }))
        .await?;
        let Some(count) = count else {
            return match SessionStore::get(self, tenant, id).await? {
                None => Err(StoreError::NotFound),
                Some(_) => Err(StoreError::Conflict("Another turn saved this session first.".into())),
            };
        };
        let (seqs, contents) = item_arrays(&self.protection, tenant, id, to_u64(count), &write.messages)?;
        let added = seqs.len() as i64;
        let run = write.run_id.map(|r| r.0);
        let row = send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 9] =
                [&tenant.as_str(), &id, &expected, &added, &write.now, &write.agent_name, &run, &seqs, &contents];
            c.query_opt(sql::SESSION_APPEND, &params).await.map_err(map_err)
        }))
        .await?;
        if row.is_none() {
            return Err(StoreError::Conflict("Another turn saved this session first.".into()));
        }
        SessionStore::get(self, tenant, id).await?.ok_or(StoreError::NotFound)
    }

    async fn delete(&self, tenant: &TenantId, id: &str) -> Result<bool, StoreError> {
        send(
            self.target.with(async |c| {
                Ok(c.execute(sql::SESSION_DELETE, &[&tenant.as_str(), &id]).await.map_err(map_err)? > 0)
            }),
        )
        .await
    }

    async fn branch(
        &self,
        tenant: &TenantId,
        source: &str,
        up_to: u64,
        new_id: &str,
        owner_user_id: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let parent = SessionStore::get(self, tenant, source).await?.ok_or(StoreError::NotFound)?;
        let messages: Vec<_> =
            self.items(tenant, source).await?.into_iter().filter(|i| i.sequence <= up_to).map(|i| i.message).collect();
        let provenance = SessionParent { session_id: source.to_owned(), sequence: up_to };
        self.create_session(
            tenant,
            new_id,
            parent.agent_name.as_deref(),
            &messages,
            None,
            owner_user_id.as_deref(),
            Some(&provenance),
            now,
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => StoreError::Conflict(format!("A session named '{new_id}' already exists.")),
            other => other,
        })
    }
}

// ---- API keys ----------------------------------------------------------------------------------

fn key_record(row: &Row) -> Result<ApiKeyRecord, StoreError> {
    KeyColumns {
        id: get(row, "id")?,
        tenant_id: get(row, "tenant_id")?,
        name: get(row, "name")?,
        key_hash: get(row, "key_hash")?,
        scopes: get(row, "scopes")?,
        created_at: get(row, "created_at")?,
        expires_at: get(row, "expires_at")?,
        revoked_at: get(row, "revoked_at")?,
        last_used_at: get(row, "last_used_at")?,
        rotated_at: get(row, "rotated_at")?,
    }
    .record()
}

#[async_trait::async_trait]
impl ApiKeyStore for WorkerStores {
    async fn create(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let hash = key.hash.as_slice();
        let scopes = scope_texts(&key.scopes);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 10] = [
                &key.tenant.as_str(),
                &key.id,
                &key.name,
                &hash,
                &scopes,
                &key.created_at,
                &key.expires_at,
                &key.revoked_at,
                &key.last_used_at,
                &key.rotated_at,
            ];
            c.execute(sql::KEY_INSERT, &params).await.map_err(|e| duplicate_key(map_err(e), &key.id)).map(|_| ())
        }))
        .await
    }

    async fn find(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::KEY_FIND, &[&id]).await.map_err(map_err)?;
            row.as_ref().map(key_record).transpose()
        }))
        .await
    }

    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::KEY_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(key_record).transpose()
        }))
        .await
    }

    async fn list(&self, tenant: &TenantId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::KEY_LIST, &[&tenant.as_str()]).await.map_err(map_err)?;
            rows.iter().map(key_record).collect()
        }))
        .await
    }

    async fn revoke(&self, tenant: &TenantId, id: &str, at: DateTime<Utc>) -> Result<ApiKeyRecord, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::KEY_REVOKE, &[&tenant.as_str(), &id, &at]).await.map_err(map_err)?;
            row.as_ref().map(key_record).transpose()?.ok_or(StoreError::NotFound)
        }))
        .await
    }

    async fn rotate(
        &self,
        tenant: &TenantId,
        id: &str,
        hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> Result<ApiKeyRecord, StoreError> {
        let hash = hash.as_slice();
        send(self.target.with(async |c| {
            let row = c.query_one(sql::KEY_ROTATE, &[&tenant.as_str(), &id, &hash, &at]).await.map_err(map_err)?;
            let found: bool = get(&row, "found")?;
            let rotated: Option<String> = get(&row, "id")?;
            match (found, rotated) {
                (false, _) => Err(StoreError::NotFound),
                (true, None) => Err(StoreError::Conflict(REVOKED_KEY_NOT_ROTATABLE.into())),
                (true, Some(_)) => key_record(&row),
            }
        }))
        .await
    }

    async fn touch(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        send(self.target.with(async |c| c.execute(sql::KEY_TOUCH, &[&id, &at]).await.map_err(map_err).map(|_| ())))
            .await
    }
}

// ---- audit trail -------------------------------------------------------------------------------

fn audit_entry(row: &Row) -> Result<AuditEntry, StoreError> {
    AuditColumns {
        tenant_id: get(row, "tenant_id")?,
        sequence: get(row, "sequence")?,
        at: get(row, "at")?,
        actor: get(row, "actor")?,
        action: get(row, "action")?,
        entity_type: get(row, "entity_type")?,
        entity_id: get(row, "entity_id")?,
        before: get(row, "before")?,
        after: get(row, "after")?,
        hash: get(row, "hash")?,
    }
    .entry()
}

#[async_trait::async_trait]
impl AuditStore for WorkerStores {
    /// One transaction, as on sqlx: the tenant's lock, its last entry, the next one hashed
    /// here, the insert.
    async fn append(&self, tenant: &TenantId, new: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        send(self.target.in_transaction(async |c| {
            c.execute(sql::AUDIT_LOCK, &[&tenant.as_str()]).await.map_err(map_err)?;
            let last = match c.query_opt(sql::AUDIT_LAST, &[&tenant.as_str()]).await.map_err(map_err)? {
                Some(row) => Some((get::<i64>(&row, "sequence")?, get::<Vec<u8>>(&row, "hash")?)),
                None => None,
            };
            let (sequence, previous) = next_audit_link(last)?;
            let stored = AuditEntry::chained(tenant, sequence, &previous, new);
            let seq = to_i64(stored.sequence, "audit sequence")?;
            let hash = stored.hash.as_slice();
            let params: [&(dyn ToSql + Sync); 10] = [
                &tenant.as_str(),
                &seq,
                &stored.at,
                &stored.actor,
                &stored.action,
                &stored.entity_type,
                &stored.entity_id,
                &stored.before,
                &stored.after,
                &hash,
            ];
            c.execute(sql::AUDIT_INSERT, &params).await.map_err(|e| duplicate_audit_sequence(map_err(e)))?;
            Ok(stored)
        }))
        .await
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &AuditFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        filter.check_text()?;
        let skip = i64::try_from(skip).unwrap_or(i64::MAX);
        let take = i64::try_from(take).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 9] = [
                &tenant.as_str(),
                &filter.entity_type,
                &filter.entity_id,
                &filter.action,
                &filter.actor,
                &filter.from,
                &filter.to,
                &skip,
                &take,
            ];
            let rows = c.query(sql::AUDIT_LIST, &params).await.map_err(map_err)?;
            rows.iter().map(audit_entry).collect()
        }))
        .await
    }

    async fn chain(&self, tenant: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::AUDIT_CHAIN, &[&tenant.as_str()]).await.map_err(map_err)?;
            rows.iter().map(audit_entry).collect()
        }))
        .await
    }
}

// ---- approvals -----------------------------------------------------------------------------------

impl WorkerStores {
    fn approval(&self, row: &Row) -> Result<ApprovalRecord, StoreError> {
        ApprovalColumns {
            tenant_id: get(row, "tenant_id")?,
            id: get(row, "id")?,
            run_id: get(row, "run_id")?,
            session_id: get(row, "session_id")?,
            agent_name: get(row, "agent_name")?,
            call_id: get(row, "call_id")?,
            tool_name: get(row, "tool_name")?,
            arguments: get(row, "arguments")?,
            effect: get(row, "effect")?,
            requested_by: get(row, "requested_by")?,
            created_at: get(row, "created_at")?,
            expires_at: get(row, "expires_at")?,
            status: get(row, "status")?,
            decided_at: get(row, "decided_at")?,
            decided_by: get(row, "decided_by")?,
            reason: get(row, "reason")?,
            resumed_run_id: get(row, "resumed_run_id")?,
        }
        .record(&self.protection)
    }
}

fn approval_rule(row: &Row) -> Result<ApprovalRule, StoreError> {
    RuleColumns {
        tenant_id: get(row, "tenant_id")?,
        id: get(row, "id")?,
        tool_name: get(row, "tool_name")?,
        agent_name: get(row, "agent_name")?,
        arguments_hash: get(row, "arguments_hash")?,
        conditions: get(row, "conditions")?,
        description: get(row, "description")?,
        created_at: get(row, "created_at")?,
        created_by: get(row, "created_by")?,
    }
    .rule()
}

#[async_trait::async_trait]
impl ApprovalStore for WorkerStores {
    async fn create(&self, records: &[ApprovalRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let a = approval_arrays(&self.protection, records)?;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 17] = [
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
                &a.resumed_run_ids,
            ];
            c.execute(sql::APPROVAL_INSERT, &params).await.map_err(|e| duplicate_approval(map_err(e))).map(|_| ())
        }))
        .await
    }

    async fn get(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<ApprovalRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::APPROVAL_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(|r| self.approval(r)).transpose()
        }))
        .await
    }

    async fn list_pending(
        &self,
        tenant: &TenantId,
        now: DateTime<Utc>,
        take: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let take = i64::try_from(take).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let rows = c.query(sql::APPROVAL_PENDING, &[&tenant.as_str(), &now, &take]).await.map_err(map_err)?;
            rows.iter().map(|r| self.approval(r)).collect()
        }))
        .await
    }

    async fn list_for_run(&self, tenant: &TenantId, run_id: RunId) -> Result<Vec<ApprovalRecord>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::APPROVAL_FOR_RUN, &[&tenant.as_str(), &run_id.0]).await.map_err(map_err)?;
            rows.iter().map(|r| self.approval(r)).collect()
        }))
        .await
    }

    async fn decide(
        &self,
        tenant: &TenantId,
        id: uuid::Uuid,
        decision: &ApprovalDecision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let status = decision_status(decision);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 6] =
                [&tenant.as_str(), &id, &status, &now, &decision.decided_by, &decision.reason];
            let row = c.query_one(sql::APPROVAL_DECIDE, &params).await.map_err(map_err)?;
            let found: bool = get(&row, "found")?;
            let decided: Option<uuid::Uuid> = get(&row, "id")?;
            match (found, decided) {
                (false, _) => Err(StoreError::NotFound),
                (true, None) => Err(StoreError::Conflict(APPROVAL_NOT_DECIDABLE.into())),
                (true, Some(_)) => self.approval(&row),
            }
        }))
        .await
    }

    /// One statement (see `sql::APPROVAL_CLAIM_RESUME`): the run's rows are locked in id
    /// order, tested at their newest versions, and all written or none.
    async fn claim_resume(&self, tenant: &TenantId, run_id: RunId, resumed: RunId) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 3] = [&tenant.as_str(), &run_id.0, &resumed.0];
            Ok(execute_retrying(c, sql::APPROVAL_CLAIM_RESUME, &params).await? > 0)
        }))
        .await
    }

    async fn create_rule(&self, rule: &ApprovalRule) -> Result<(), StoreError> {
        let conditions = conditions_json(rule)?;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 9] = [
                &rule.tenant.as_str(),
                &rule.id,
                &rule.tool_name,
                &rule.agent_name,
                &rule.arguments_hash,
                &conditions,
                &rule.description,
                &rule.created_at,
                &rule.created_by,
            ];
            c.execute(sql::RULE_INSERT, &params).await.map_err(|e| duplicate_rule(map_err(e))).map(|_| ())
        }))
        .await
    }

    async fn list_rules(&self, tenant: &TenantId, tool: Option<&str>) -> Result<Vec<ApprovalRule>, StoreError> {
        tracon_core::store::check_text_opt("toolName", tool)?;
        send(self.target.with(async |c| {
            let rows = c.query(sql::RULE_LIST, &[&tenant.as_str(), &tool]).await.map_err(map_err)?;
            rows.iter().map(approval_rule).collect()
        }))
        .await
    }

    async fn get_rule(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<ApprovalRule>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::RULE_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(approval_rule).transpose()
        }))
        .await
    }

    async fn delete_rule(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<ApprovalRule, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::RULE_DELETE, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(approval_rule).transpose()?.ok_or(StoreError::NotFound)
        }))
        .await
    }
}

// ---- tenants -------------------------------------------------------------------------------------

fn tenant_record(row: &Row) -> Result<TenantRecord, StoreError> {
    TenantColumns {
        id: get(row, "id")?,
        display_name: get(row, "display_name")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    }
    .record()
}

#[async_trait::async_trait]
impl TenantStore for WorkerStores {
    async fn create(&self, record: &TenantRecord) -> Result<(), StoreError> {
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 4] =
                [&record.id.as_str(), &record.display_name, &record.created_at, &record.updated_at];
            c.execute(sql::TENANT_INSERT, &params)
                .await
                .map_err(|e| duplicate_tenant(map_err(e), &record.id))
                .map(|_| ())
        }))
        .await
    }

    async fn get(&self, id: &TenantId) -> Result<Option<TenantRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::TENANT_GET, &[&id.as_str()]).await.map_err(map_err)?;
            row.as_ref().map(tenant_record).transpose()
        }))
        .await
    }

    async fn list(&self, skip: usize, take: usize) -> Result<Vec<TenantRecord>, StoreError> {
        let skip = i64::try_from(skip).unwrap_or(i64::MAX);
        let take = i64::try_from(take).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let rows = c.query(sql::TENANT_LIST, &[&skip, &take]).await.map_err(map_err)?;
            rows.iter().map(tenant_record).collect()
        }))
        .await
    }

    async fn update(&self, id: &TenantId, display_name: &str, now: DateTime<Utc>) -> Result<TenantRecord, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::TENANT_UPDATE, &[&id.as_str(), &display_name, &now]).await.map_err(map_err)?;
            row.as_ref().map(tenant_record).transpose()?.ok_or(StoreError::NotFound)
        }))
        .await
    }

    async fn delete(&self, id: &TenantId) -> Result<TenantRecord, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::TENANT_DELETE, &[&id.as_str()]).await.map_err(map_err)?;
            row.as_ref().map(tenant_record).transpose()?.ok_or(StoreError::NotFound)
        }))
        .await
    }
}

// ---- quota notices -------------------------------------------------------------------------------

#[async_trait::async_trait]
impl tracon_core::quota::QuotaNoticeStore for WorkerStores {
    async fn claim(
        &self,
        tenant: &TenantId,
        quota: &str,
        period_start: DateTime<Utc>,
        threshold: u32,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let threshold = i32::try_from(threshold).unwrap_or(i32::MAX);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 5] = [&tenant.as_str(), &quota, &period_start, &threshold, &at];
            c.execute(sql::QUOTA_NOTICE_CLAIM, &params).await.map_err(map_err).map(|n| n == 1)
        }))
        .await
    }
}

// ---- jobs ----------------------------------------------------------------------------------------

impl WorkerStores {
    fn job(&self, row: &Row) -> Result<JobRecord, StoreError> {
        JobColumns {
            tenant_id: get(row, "tenant_id")?,
            id: get(row, "id")?,
            handler_key: get(row, "handler_key")?,
            payload: get(row, "payload")?,
            status: get(row, "status")?,
            attempts: get(row, "attempts")?,
            max_attempts: get(row, "max_attempts")?,
            available_at: get(row, "available_at")?,
            lease_owner: get(row, "lease_owner")?,
            lease_token: get(row, "lease_token")?,
            lease_expires_at: get(row, "lease_expires_at")?,
            heartbeat_at: get(row, "heartbeat_at")?,
            cancel_requested: get(row, "cancel_requested")?,
            result: get(row, "result")?,
            error_code: get(row, "error_code")?,
            error_message: get(row, "error_message")?,
            run_id: get(row, "run_id")?,
            created_at: get(row, "created_at")?,
            updated_at: get(row, "updated_at")?,
            completed_at: get(row, "completed_at")?,
        }
        .record(&self.protection)
    }
}

/// `query`, retrying serialization failures and deadlocks like [`execute_retrying`].
async fn query_retrying(c: &Client, statement: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
    let mut attempt = 0u32;
    loop {
        match c.query(statement, params).await {
            Ok(rows) => return Ok(rows),
            Err(e) if e.code().is_some_and(|c| is_retryable_sqlstate(c.code())) && attempt < 4 => {
                attempt += 1;
                worker::Delay::from(std::time::Duration::from_millis(5 * 2u64.pow(attempt))).await;
            }
            Err(e) => return Err(map_err(e)),
        }
    }
}

/// Leasing and the lease-token updates are each one statement (see `sql::JOB_LEASE`), the
/// same text the sqlx store runs.
#[async_trait::async_trait]
impl JobStore for WorkerStores {
    async fn enqueue(&self, job: &JobRecord) -> Result<(), StoreError> {
        let v = job_values(&self.protection, job)?;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 20] = [
                &v.tenant_id,
                &v.id,
                &v.handler_key,
                &v.payload,
                &v.status,
                &v.attempts,
                &v.max_attempts,
                &v.available_at,
                &v.lease_owner,
                &v.lease_token,
                &v.lease_expires_at,
                &v.heartbeat_at,
                &v.cancel_requested,
                &v.result,
                &v.error_code,
                &v.error_message,
                &v.run_id,
                &v.created_at,
                &v.updated_at,
                &v.completed_at,
            ];
            c.execute(sql::JOB_INSERT, &params).await.map_err(|e| duplicate_job(map_err(e))).map(|_| ())
        }))
        .await
    }

    async fn get(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<JobRecord>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::JOB_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(|r| self.job(r)).transpose()
        }))
        .await
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &JobFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        filter.check_text()?;
        let status = filter.status.map(|s| s.as_str());
        let handler_key = filter.handler_key.as_deref();
        let (skip, take) = (job_limit(skip), job_limit(take));
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 5] = [&tenant.as_str(), &status, &handler_key, &skip, &take];
            let rows = c.query(sql::JOB_LIST, &params).await.map_err(map_err)?;
            rows.iter().map(|r| self.job(r)).collect()
        }))
        .await
    }

    async fn lease(&self, request: &LeaseRequest, limit: usize) -> Result<Vec<Lease>, StoreError> {
        let until = request.now + request.lease_for;
        send(self.target.with(async |c| {
            let mut leases = Vec::new();
            // Rows a round closed (out of attempts) do not count against the limit.
            while leases.len() < limit {
                let want = job_limit(limit - leases.len());
                let params: [&(dyn ToSql + Sync); 5] =
                    [&request.handler_keys, &request.now, &want, &request.owner, &until];
                let rows = query_retrying(c, sql::JOB_LEASE, &params).await?;
                let records = rows.iter().map(|r| self.job(r)).collect::<Result<Vec<_>, _>>()?;
                let (taken, closed) = job_leases(records)?;
                leases.extend(taken);
                if closed == 0 {
                    break;
                }
            }
            Ok(leases)
        }))
        .await
    }

    async fn lease_one(&self, id: uuid::Uuid, request: &LeaseRequest) -> Result<Option<Lease>, StoreError> {
        let until = request.now + request.lease_for;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 5] = [&request.handler_keys, &request.now, &id, &request.owner, &until];
            let rows = query_retrying(c, sql::JOB_LEASE_ONE, &params).await?;
            match rows.first() {
                Some(row) => job_lease_of(self.job(row)?),
                None => Ok(None),
            }
        }))
        .await
    }

    async fn heartbeat(
        &self,
        id: uuid::Uuid,
        token: uuid::Uuid,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<bool>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::JOB_HEARTBEAT, &[&id, &token, &until, &now]).await.map_err(map_err)?;
            row.as_ref().map(|r| get(r, "cancel_requested")).transpose()
        }))
        .await
    }

    async fn finish(
        &self,
        id: uuid::Uuid,
        token: uuid::Uuid,
        outcome: &Outcome,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            let n = match outcome {
                Outcome::Succeeded(result) => c.execute(sql::JOB_FINISH_SUCCEEDED, &[&id, &token, result, &now]).await,
                Outcome::Retry { error, retry_at } => {
                    let params: [&(dyn ToSql + Sync); 6] = [&id, &token, &error.code, &error.message, retry_at, &now];
                    c.execute(sql::JOB_FINISH_RETRY, &params).await
                }
                Outcome::Failed(error) => {
                    c.execute(sql::JOB_FINISH_FAILED, &[&id, &token, &error.code, &error.message, &now]).await
                }
                Outcome::Canceled => c.execute(sql::JOB_FINISH_CANCELED, &[&id, &token, &now]).await,
            }
            .map_err(map_err)?;
            Ok(n > 0)
        }))
        .await
    }

    async fn due(
        &self,
        now: DateTime<Utc>,
        quiet_since: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<uuid::Uuid>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        send(self.target.with(async |c| {
            let rows = c.query(sql::JOB_DUE, &[&now, &quiet_since, &limit]).await.map_err(map_err)?;
            rows.iter().map(|r| get(r, "id")).collect()
        }))
        .await
    }

    async fn cancel(&self, tenant: &TenantId, id: uuid::Uuid, now: DateTime<Utc>) -> Result<JobRecord, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_one(sql::JOB_CANCEL, &[&tenant.as_str(), &id, &now]).await.map_err(map_err)?;
            let found: bool = get(&row, "found")?;
            let changed: Option<uuid::Uuid> = get(&row, "id")?;
            match (found, changed) {
                (false, _) => Err(StoreError::NotFound),
                (true, None) => Err(StoreError::Conflict(JOB_ENDED.into())),
                (true, Some(_)) => self.job(&row),
            }
        }))
        .await
    }
}

/// A claim is one statement (see `sql::IDEMPOTENCY_CLAIM`), the same text the sqlx store
/// runs, run again while it returns no row.
#[async_trait::async_trait]
impl IdempotencyStore for WorkerStores {
    async fn claim(
        &self,
        key: KeyRef<'_>,
        request_hash: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<Claim, StoreError> {
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 6] =
                [&key.tenant.as_str(), &key.operation, &key.key, &request_hash, &now, &expires_at];
            for _ in 0..IDEMPOTENCY_CLAIM_ATTEMPTS {
                let rows = query_retrying(c, sql::IDEMPOTENCY_CLAIM, &params).await?;
                if let Some(row) = rows.first() {
                    return ClaimColumns {
                        claimed: get(row, "claimed")?,
                        request_hash: get(row, "request_hash")?,
                        response_status: get(row, "response_status")?,
                        response_body: get(row, "response_body")?,
                    }
                    .claim(&self.protection, key);
                }
            }
            Err(StoreError::Conflict(IDEMPOTENCY_CONTENDED.into()))
        }))
        .await
    }

    async fn complete(
        &self,
        key: KeyRef<'_>,
        status: u16,
        body: &serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let (status, body) = idempotency_response(&self.protection, key, status, body)?;
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 6] =
                [&key.tenant.as_str(), &key.operation, &key.key, &status, &body, &now];
            let n = c.execute(sql::IDEMPOTENCY_COMPLETE, &params).await.map_err(map_err)?;
            if n == 0 { Err(StoreError::NotFound) } else { Ok(()) }
        }))
        .await
    }

    async fn release(&self, key: KeyRef<'_>) -> Result<(), StoreError> {
        send(self.target.with(async |c| {
            c.execute(sql::IDEMPOTENCY_RELEASE, &[&key.tenant.as_str(), &key.operation, &key.key])
                .await
                .map_err(map_err)
                .map(|_| ())
        }))
        .await
    }
}

mod schedules;
mod triggers;
mod webhooks;
