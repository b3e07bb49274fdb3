//! Column values ⇄ domain types, shared by both Postgres drivers (sqlx natively,
//! tokio-postgres on Workers) so they agree on every stored representation: enum texts,
//! JSON columns, protected values and where they are bound, the statistics rows, API key rows,
//! audit rows and the link an audit append chains from, job rows and the leases they make,
//! idempotency records.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracon_core::approvals::{ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStatus, Condition};
use tracon_core::audit::AuditEntry;
use tracon_core::error::StoreError;
use tracon_core::events::{RecordedEvent, RunEvent};
use tracon_core::idempotency::{Claim, KeyRef};
use tracon_core::jobs::{JobError, JobRecord, JobStatus, Lease};
use tracon_core::keys::{ApiKeyRecord, Scope};
use tracon_core::model::Message;
use tracon_core::names::{RunId, TenantId};
use tracon_core::runs::store::{RunStats, RunStatus};
use tracon_core::tenants::TenantRecord;
use uuid::Uuid;

use crate::protect::{Place, Protection, ProtectionError};

/// Inbound trigger rows.
pub mod triggers;

/// A stored value that does not decode: a bug or a foreign write.
/// Whether a statement that failed with this SQLSTATE may succeed when run again: a
/// serialization failure or a deadlock. Both drivers' stores retry these.
pub fn is_retryable_sqlstate(code: &str) -> bool {
    matches!(code, "40001" | "40P01")
}

/// A database error by its SQLSTATE, the same for both drivers: `detail` is for the log.
///
/// "The database is not available now" is every class a later attempt may get past:
/// connection exceptions (`08`), insufficient resources (`53`: too many connections, disk
/// full, out of memory), operator intervention (`57P`: shutdown, crash recovery, cannot
/// connect now; `57014` a cancelled statement, which the statement timeout raises), and
/// `55000` — what connecting to a database with `ALLOW_CONNECTIONS false` answers. U+0000 in
/// text (`22021`, `22P05`) is the caller's input, refused like every store refuses it.
pub fn sqlstate_error(code: &str, detail: String) -> StoreError {
    match code {
        "23505" => StoreError::Conflict("The record already exists or was changed concurrently.".into()),
        "23503" => StoreError::NotFound,
        "22021" | "22P05" => StoreError::InvalidText { field: "text".into() },
        c if c.starts_with("08") || c.starts_with("53") || c.starts_with("57P") || matches!(c, "57014" | "55000") => {
            StoreError::Unavailable { detail: format!("SQLSTATE {c}: {detail}") }
        }
        c => StoreError::Internal { detail: format!("SQLSTATE {c}: {detail}") },
    }
}

/// A unique violation while appending events means two writers used the same sequence.
pub fn duplicate_event(e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict(_) => StoreError::Conflict("an event sequence of this run is already stored".into()),
        other => other,
    }
}

pub fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal { detail: format!("stored {what} does not decode: {e}") }
}

/// A protected value that could not be opened: the read fails closed.
pub fn unreadable(e: ProtectionError) -> StoreError {
    StoreError::Internal { detail: format!("content protection: {e}") }
}

/// A stored record's key name, as the start-up check of secret names reads it.
pub fn secret_reference(
    tenant: String,
    record: String,
    key_name: String,
) -> Result<tracon_core::secret_names::SecretReference, StoreError> {
    let tenant = TenantId::parse(&tenant).map_err(|e| corrupt("tenant id", e.0))?;
    Ok(tracon_core::secret_names::SecretReference { tenant, record, key_name })
}

pub fn to_json<T: Serialize>(v: &T) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(v).map_err(|e| corrupt("value", e))
}

pub fn from_json<T: DeserializeOwned>(v: Option<serde_json::Value>, what: &str) -> Result<Option<T>, StoreError> {
    v.map(|v| serde_json::from_value(v).map_err(|e| corrupt(what, e))).transpose()
}

/// An enum's serde name (`Succeeded`, `Read`, `Running`).
pub fn enum_text<T: Serialize>(v: &T) -> Result<String, StoreError> {
    match serde_json::to_value(v).map_err(|e| corrupt("enum", e))? {
        serde_json::Value::String(s) => Ok(s),
        other => Err(corrupt("enum", other)),
    }
}

pub fn enum_parse<T: DeserializeOwned>(s: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|e| corrupt(what, e))
}

pub fn status_parse(s: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(s).ok_or_else(|| corrupt("run status", s))
}

/// A count, size or duration as a `bigint` parameter (an `OFFSET`, a `LIMIT`, milliseconds),
/// saturating at `i64::MAX`.
pub fn bigint(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

pub fn to_i64(v: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| corrupt(what, v))
}

pub fn to_u64(v: i64) -> u64 {
    v.max(0) as u64
}

/// Where each protected column's values are bound.
pub fn event_place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "run_events", column: "payload", row }
}

pub fn input_place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "runs", column: "input", row }
}

pub fn tool_place<'a>(tenant: &'a TenantId, column: &'static str, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "tool_calls", column, row }
}

pub fn step_place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "run_steps", column: "message", row }
}

pub fn item_place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "session_items", column: "content", row }
}

/// An event batch as the parallel arrays the statements `unnest`.
pub struct EventArrays {
    pub sequences: Vec<i64>,
    pub kinds: Vec<&'static str>,
    pub times: Vec<chrono::DateTime<chrono::Utc>>,
    pub payloads: Vec<Vec<u8>>,
}

pub fn event_arrays(
    protection: &Protection,
    tenant: &TenantId,
    run: RunId,
    events: &[RecordedEvent],
) -> Result<EventArrays, StoreError> {
    let mut batch = EventArrays {
        sequences: Vec::with_capacity(events.len()),
        kinds: Vec::with_capacity(events.len()),
        times: Vec::with_capacity(events.len()),
        payloads: Vec::with_capacity(events.len()),
    };
    for e in events {
        let json = serde_json::to_string(&e.event).map_err(|err| corrupt("event", err))?;
        let row = format!("{run}/{}", e.sequence);
        batch.payloads.push(protection.seal(&event_place(tenant, &row), &json));
        batch.sequences.push(to_i64(e.sequence, "sequence")?);
        batch.kinds.push(e.event.type_name());
        batch.times.push(e.timestamp);
    }
    Ok(batch)
}

/// One stored event back.
pub fn open_event(
    protection: &Protection,
    tenant: &TenantId,
    run: RunId,
    sequence: i64,
    timestamp: chrono::DateTime<chrono::Utc>,
    payload: &[u8],
) -> Result<RecordedEvent, StoreError> {
    let row = format!("{run}/{sequence}");
    let json = protection.open(&event_place(tenant, &row), payload).map_err(unreadable)?;
    let event: RunEvent = serde_json::from_str(&json).map_err(|e| corrupt("event", e))?;
    Ok(RecordedEvent { sequence: to_u64(sequence), timestamp, event })
}

/// Session items at positions `start..` as `(sequences, sealed contents)`.
pub fn item_arrays(
    protection: &Protection,
    tenant: &TenantId,
    session: &str,
    start: u64,
    messages: &[Message],
) -> Result<(Vec<i64>, Vec<Vec<u8>>), StoreError> {
    let mut seqs = Vec::with_capacity(messages.len());
    let mut contents = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let seq = start + i as u64;
        let json = serde_json::to_string(m).map_err(|e| corrupt("message", e))?;
        let row = format!("{session}/{seq}");
        contents.push(protection.seal(&item_place(tenant, &row), &json));
        seqs.push(to_i64(seq, "sequence")?);
    }
    Ok((seqs, contents))
}

pub fn open_item(
    protection: &Protection,
    tenant: &TenantId,
    session: &str,
    sequence: i64,
    content: &[u8],
) -> Result<Message, StoreError> {
    let row = format!("{session}/{sequence}");
    let json = protection.open(&item_place(tenant, &row), content).map_err(unreadable)?;
    serde_json::from_str(&json).map_err(|e| corrupt("message", e))
}

/// Folds one row of `RUN_STATS` (`dim, key, n, amount, tokens`) into the statistics.
pub fn add_stats_row(
    s: &mut RunStats,
    dim: &str,
    key: Option<String>,
    n: i64,
    amount: Option<f64>,
    tokens: Option<i64>,
) -> Result<(), StoreError> {
    let key = key.unwrap_or_default();
    let n = to_u64(n);
    let tokens = to_u64(tokens.unwrap_or(0));
    match dim {
        "total" => s.total_runs = n,
        "status" => {
            s.by_status.insert(status_parse(&key)?, n);
        }
        "error" => {
            s.by_error_class.insert(enum_parse(&key, "error class")?, n);
        }
        "agent" => {
            s.by_agent.insert(key, n);
        }
        "user" => {
            s.by_user.insert(key, n);
        }
        "label" => {
            s.by_label.insert(key, n);
        }
        "cost" => {
            let amount = amount.unwrap_or(0.0);
            s.cost.insert(key, tracon_core::pricing::Money::from_units(amount).ok_or_else(|| corrupt("cost", amount))?);
            s.runs_with_cost += n;
        }
        "usage" => s.runs_with_usage = n,
        "tokens" => match key.as_str() {
            "input" => s.input_tokens = tokens,
            "output" => s.output_tokens = tokens,
            _ => s.total_tokens = tokens,
        },
        _ => {}
    }
    Ok(())
}

// ---- API keys ----------------------------------------------------------------------------

/// What `rotate` answers for a revoked key (both drivers and the in-memory store agree).
pub const REVOKED_KEY_NOT_ROTATABLE: &str = "a revoked API key cannot be rotated";

/// A unique violation while creating a key: its id is taken (in some tenant).
pub fn duplicate_key(e: StoreError, id: &str) -> StoreError {
    match e {
        StoreError::Conflict(_) => StoreError::Conflict(format!("an API key with id '{id}' already exists")),
        other => other,
    }
}

/// Scopes as the `text[]` column holds them: their serde names.
pub fn scope_texts(scopes: &BTreeSet<Scope>) -> Vec<&'static str> {
    scopes.iter().map(|s| s.as_str()).collect()
}

/// The columns of one `api_keys` row (`sql::KEY_*` select them), as either driver reads
/// them; [`KeyColumns::record`] checks what the column types cannot.
pub struct KeyColumns {
    pub id: String,
    pub tenant_id: String,
    pub name: String,
    pub key_hash: Vec<u8>,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub rotated_at: Option<DateTime<Utc>>,
}

impl KeyColumns {
    pub fn record(self) -> Result<ApiKeyRecord, StoreError> {
        let hash: [u8; 32] =
            self.key_hash.as_slice().try_into().map_err(|_| corrupt("API key hash", self.key_hash.len()))?;
        let scopes = self
            .scopes
            .iter()
            .map(|s| {
                Scope::ALL.into_iter().find(|scope| scope.as_str() == s).ok_or_else(|| corrupt("API key scope", s))
            })
            .collect::<Result<BTreeSet<Scope>, StoreError>>()?;
        Ok(ApiKeyRecord {
            tenant: TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?,
            id: self.id,
            name: self.name,
            hash,
            scopes,
            created_at: self.created_at,
            expires_at: self.expires_at,
            revoked_at: self.revoked_at,
            last_used_at: self.last_used_at,
            rotated_at: self.rotated_at,
        })
    }
}

// ---- audit trail ---------------------------------------------------------------------------

/// A unique violation while appending an audit entry: another append took the sequence
/// (the per-tenant lock should make this impossible).
pub fn duplicate_audit_sequence(e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict(_) => {
            StoreError::Conflict("an audit entry with this sequence is already stored for the tenant".into())
        }
        other => other,
    }
}

/// Where the next entry goes, from the tenant's last `(sequence, hash)` (`sql::AUDIT_LAST`,
/// no row before the first entry): its sequence and the hash it chains from.
pub fn next_audit_link(last: Option<(i64, Vec<u8>)>) -> Result<(u64, [u8; 32]), StoreError> {
    match last {
        None => Ok((1, [0; 32])),
        Some((sequence, hash)) => Ok((to_u64(sequence) + 1, audit_hash(&hash)?)),
    }
}

fn audit_hash(hash: &[u8]) -> Result<[u8; 32], StoreError> {
    hash.try_into().map_err(|_| corrupt("audit hash", hash.len()))
}

/// The columns of one `audit_entries` row (`sql::AUDIT_*` select them), as either driver
/// reads them; [`AuditColumns::entry`] checks what the column types cannot.
pub struct AuditColumns {
    pub tenant_id: String,
    pub sequence: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub entity_type: String,
    pub entity_id: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub hash: Vec<u8>,
}

impl AuditColumns {
    pub fn entry(self) -> Result<AuditEntry, StoreError> {
        Ok(AuditEntry {
            tenant: TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?,
            sequence: to_u64(self.sequence),
            at: self.at,
            actor: self.actor,
            action: self.action,
            entity_type: self.entity_type,
            entity_id: self.entity_id,
            before: self.before,
            after: self.after,
            hash: audit_hash(&self.hash)?,
        })
    }
}

// ---- approvals -----------------------------------------------------------------------------

/// What `decide` answers for a request that was decided or has expired (the in-memory
/// store says the same).
pub const APPROVAL_NOT_DECIDABLE: &str = "This approval request can no longer be decided.";

/// Where a request's arguments (a protected value) are bound.
pub fn approval_place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "approval_requests", column: "arguments", row }
}

/// A unique violation while creating requests: one of the ids is taken.
pub fn duplicate_approval(e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict(_) => StoreError::Conflict("An approval request with this id exists.".into()),
        other => other,
    }
}

/// The status text a decision stores.
pub fn decision_status(decision: &ApprovalDecision) -> &'static str {
    if decision.approved { ApprovalStatus::Approved.as_str() } else { ApprovalStatus::Denied.as_str() }
}

/// A `create` call's requests as the parallel arrays `sql::APPROVAL_INSERT` unnests, the
/// arguments sealed.
pub struct ApprovalArrays {
    pub tenants: Vec<String>,
    pub ids: Vec<Uuid>,
    pub run_ids: Vec<Uuid>,
    pub session_ids: Vec<Option<String>>,
    pub agent_names: Vec<String>,
    pub call_ids: Vec<String>,
    pub tool_names: Vec<String>,
    pub arguments: Vec<Vec<u8>>,
    pub effects: Vec<String>,
    pub requested_by: Vec<Option<String>>,
    pub created_at: Vec<DateTime<Utc>>,
    pub expires_at: Vec<DateTime<Utc>>,
    pub statuses: Vec<&'static str>,
    pub decided_at: Vec<Option<DateTime<Utc>>>,
    pub decided_by: Vec<Option<String>>,
    pub reasons: Vec<Option<String>>,
    pub resumed_run_ids: Vec<Option<Uuid>>,
}

pub fn approval_arrays(protection: &Protection, records: &[ApprovalRecord]) -> Result<ApprovalArrays, StoreError> {
    let n = records.len();
    let mut a = ApprovalArrays {
        tenants: Vec::with_capacity(n),
        ids: Vec::with_capacity(n),
        run_ids: Vec::with_capacity(n),
        session_ids: Vec::with_capacity(n),
        agent_names: Vec::with_capacity(n),
        call_ids: Vec::with_capacity(n),
        tool_names: Vec::with_capacity(n),
        arguments: Vec::with_capacity(n),
        effects: Vec::with_capacity(n),
        requested_by: Vec::with_capacity(n),
        created_at: Vec::with_capacity(n),
        expires_at: Vec::with_capacity(n),
        statuses: Vec::with_capacity(n),
        decided_at: Vec::with_capacity(n),
        decided_by: Vec::with_capacity(n),
        reasons: Vec::with_capacity(n),
        resumed_run_ids: Vec::with_capacity(n),
    };
    for r in records {
        if r.status == ApprovalStatus::Expired {
            return Err(StoreError::Internal { detail: "an approval request cannot be stored as Expired".into() });
        }
        let json = serde_json::to_string(&r.arguments).map_err(|e| corrupt("approval arguments", e))?;
        let row = r.id.to_string();
        a.arguments.push(protection.seal(&approval_place(&r.tenant, &row), &json));
        a.tenants.push(r.tenant.as_str().to_owned());
        a.ids.push(r.id);
        a.run_ids.push(r.run_id.0);
        a.session_ids.push(r.session_id.clone());
        a.agent_names.push(r.agent_name.clone());
        a.call_ids.push(r.call_id.clone());
        a.tool_names.push(r.tool_name.clone());
        a.effects.push(enum_text(&r.effect)?);
        a.requested_by.push(r.requested_by.clone());
        a.created_at.push(r.created_at);
        a.expires_at.push(r.expires_at);
        a.statuses.push(r.status.as_str());
        a.decided_at.push(r.decided_at);
        a.decided_by.push(r.decided_by.clone());
        a.reasons.push(r.reason.clone());
        a.resumed_run_ids.push(r.resumed_run_id.map(|id| id.0));
    }
    Ok(a)
}

/// The columns of one `approval_requests` row (`sql::APPROVAL_*` select them), as either
/// driver reads them; [`ApprovalColumns::record`] opens the arguments and checks what the
/// column types cannot.
pub struct ApprovalColumns {
    pub tenant_id: String,
    pub id: Uuid,
    pub run_id: Uuid,
    pub session_id: Option<String>,
    pub agent_name: String,
    pub call_id: String,
    pub tool_name: String,
    pub arguments: Vec<u8>,
    pub effect: String,
    pub requested_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub status: String,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    pub resumed_run_id: Option<Uuid>,
}

impl ApprovalColumns {
    pub fn record(self, protection: &Protection) -> Result<ApprovalRecord, StoreError> {
        let tenant = TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?;
        let row = self.id.to_string();
        let json = protection.open(&approval_place(&tenant, &row), &self.arguments).map_err(unreadable)?;
        let status = match ApprovalStatus::parse(&self.status) {
            Some(s @ (ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Denied)) => s,
            _ => return Err(corrupt("approval status", &self.status)),
        };
        Ok(ApprovalRecord {
            id: self.id,
            run_id: RunId(self.run_id),
            session_id: self.session_id,
            agent_name: self.agent_name,
            call_id: self.call_id,
            tool_name: self.tool_name,
            arguments: serde_json::from_str(&json).map_err(|e| corrupt("approval arguments", e))?,
            effect: enum_parse(&self.effect, "tool effect")?,
            requested_by: self.requested_by,
            created_at: self.created_at,
            expires_at: self.expires_at,
            status,
            decided_at: self.decided_at,
            decided_by: self.decided_by,
            reason: self.reason,
            resumed_run_id: self.resumed_run_id.map(RunId),
            tenant,
        })
    }
}

// ---- approval rules ------------------------------------------------------------------------

/// A unique violation while creating a rule: its id is taken.
pub fn duplicate_rule(e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict(_) => StoreError::Conflict("An approval rule with this id exists.".into()),
        other => other,
    }
}

/// A rule's conditions as the `conditions` jsonb column holds them (`[]` for none).
pub fn conditions_json(rule: &ApprovalRule) -> Result<serde_json::Value, StoreError> {
    to_json(&rule.conditions)
}

/// The columns of one `approval_rules` row (`sql::RULE_*` select them).
pub struct RuleColumns {
    pub tenant_id: String,
    pub id: Uuid,
    pub tool_name: String,
    pub agent_name: Option<String>,
    pub arguments_hash: Option<String>,
    pub conditions: serde_json::Value,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

impl RuleColumns {
    pub fn rule(self) -> Result<ApprovalRule, StoreError> {
        let conditions: Vec<Condition> =
            serde_json::from_value(self.conditions).map_err(|e| corrupt("approval rule conditions", e))?;
        Ok(ApprovalRule {
            id: self.id,
            tenant: TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?,
            tool_name: self.tool_name,
            agent_name: self.agent_name,
            arguments_hash: self.arguments_hash,
            conditions,
            description: self.description,
            created_at: self.created_at,
            created_by: self.created_by,
        })
    }
}

// ---- tenants -------------------------------------------------------------------------------

/// A unique violation while creating a tenant record: the id is taken.
pub fn duplicate_tenant(e: StoreError, id: &TenantId) -> StoreError {
    match e {
        StoreError::Conflict(_) => StoreError::Conflict(format!("A tenant named '{id}' exists.")),
        other => other,
    }
}

/// The columns of one `tenants` row (`sql::TENANT_*` select them).
pub struct TenantColumns {
    pub id: String,
    pub display_name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TenantColumns {
    pub fn record(self) -> Result<TenantRecord, StoreError> {
        Ok(TenantRecord {
            id: TenantId::parse(&self.id).map_err(|e| corrupt("tenant id", e))?,
            display_name: self.display_name,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

// ---- schedules -------------------------------------------------------------------------------

/// Where a schedule's message (a protected value) is bound.
pub fn schedule_place<'a>(tenant: &'a str, row: &'a str) -> Place<'a> {
    Place { tenant, table: "schedules", column: "message", row }
}

/// A unique violation: the name is taken in the tenant.
pub fn duplicate_schedule(e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict(_) => StoreError::Conflict("A schedule with this name exists.".into()),
        other => other,
    }
}

/// The columns of one `schedules` row (`sql::SCHEDULE_*` select them in this order).
pub struct ScheduleColumns {
    pub tenant_id: String,
    pub id: uuid::Uuid,
    pub name: String,
    pub target_name: String,
    pub message: Vec<u8>,
    pub parameters: serde_json::Value,
    pub run_at: Option<DateTime<Utc>>,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub enabled: bool,
    pub next_run_at: Option<DateTime<Utc>>,
    /// `agent` or `workflow`.
    pub target_kind: String,
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_run_id: Option<uuid::Uuid>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ScheduleColumns {
    pub fn of(s: &tracon_core::schedules::ScheduleRecord, protection: &Protection) -> Result<Self, StoreError> {
        use tracon_core::schedules::Timing;
        let row = s.id.to_string();
        let (run_at, cron, time_zone) = match &s.timing {
            Timing::Once(at) => (Some(*at), None, None),
            Timing::Cron { expression, time_zone } => (None, Some(expression.clone()), Some(time_zone.clone())),
        };
        Ok(Self {
            tenant_id: s.tenant.as_str().to_owned(),
            id: s.id,
            name: s.name.clone(),
            target_name: s.target.name().to_owned(),
            message: protection.seal(&schedule_place(s.tenant.as_str(), &row), &s.message),
            parameters: to_json(&s.parameters)?,
            run_at,
            cron,
            time_zone,
            enabled: s.enabled,
            next_run_at: s.next_run_at,
            target_kind: s.target.kind().to_owned(),
            last_run_at: s.last_run_at,
            last_run_id: s.last_run_id.map(|r| r.0),
            last_error: s.last_error.clone(),
            created_at: s.created_at,
            updated_at: s.updated_at,
        })
    }

    pub fn record(self, protection: &Protection) -> Result<tracon_core::schedules::ScheduleRecord, StoreError> {
        use tracon_core::schedules::Timing;
        let row = self.id.to_string();
        let message = protection.open(&schedule_place(&self.tenant_id, &row), &self.message).map_err(unreadable)?;
        let timing = match (self.run_at, self.cron, self.time_zone) {
            (Some(at), None, None) => Timing::Once(at),
            (None, Some(expression), Some(time_zone)) => Timing::Cron { expression, time_zone },
            _ => return Err(corrupt("schedule timing", &row)),
        };
        Ok(tracon_core::schedules::ScheduleRecord {
            id: self.id,
            tenant: TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?,
            name: self.name,
            target: tracon_core::schedules::ScheduleTarget::parse(&self.target_kind, &self.target_name)
                .ok_or_else(|| corrupt("schedule target", &row))?,
            message,
            parameters: from_json(Some(self.parameters), "schedule parameters")?.unwrap_or_default(),
            timing,
            enabled: self.enabled,
            next_run_at: self.next_run_at,
            last_run_at: self.last_run_at,
            last_run_id: self.last_run_id.map(RunId),
            last_error: self.last_error,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

// ---- jobs ----------------------------------------------------------------------------------

/// Where a job's payload (a protected value) is bound.
pub fn job_place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "jobs", column: "payload", row }
}

/// A unique violation while enqueueing: the id is taken (in some tenant).
pub fn duplicate_job(e: StoreError) -> StoreError {
    match e {
        StoreError::Conflict(_) => StoreError::Conflict("A job with this id exists.".into()),
        other => other,
    }
}

/// What `cancel` answers for a job that already ended (the in-memory store says the same).
pub const JOB_ENDED: &str = "The job has already ended.";

fn job_count(v: u32, what: &str) -> Result<i32, StoreError> {
    i32::try_from(v).map_err(|_| corrupt(what, v))
}

/// A job as the values `sql::JOB_INSERT` binds, in its parameter order, the payload sealed: the
/// row [`JobColumns::record`] reads back.
pub fn job_values(protection: &Protection, job: &JobRecord) -> Result<JobColumns, StoreError> {
    let json = serde_json::to_string(&job.payload).map_err(|e| corrupt("job payload", e))?;
    let row = job.id.to_string();
    Ok(JobColumns {
        tenant_id: job.tenant.as_str().to_owned(),
        id: job.id,
        handler_key: job.handler_key.clone(),
        payload: protection.seal(&job_place(&job.tenant, &row), &json),
        status: job.status.as_str().to_owned(),
        attempts: job_count(job.attempts, "job attempts")?,
        max_attempts: job_count(job.max_attempts, "job max attempts")?,
        available_at: job.available_at,
        lease_owner: job.lease_owner.clone(),
        lease_token: job.lease_token,
        lease_expires_at: job.lease_expires_at,
        heartbeat_at: job.heartbeat_at,
        cancel_requested: job.cancel_requested,
        result: job.result.clone(),
        error_code: job.error.as_ref().map(|e| e.code.clone()),
        error_message: job.error.as_ref().map(|e| e.message.clone()),
        run_id: job.run_id.map(|r| r.0),
        created_at: job.created_at,
        updated_at: job.updated_at,
        completed_at: job.completed_at,
    })
}

/// The columns of one `jobs` row (`sql::JOB_*` select them; `JOB_INSERT` binds them in this order),
/// as either driver reads them;
/// [`JobColumns::record`] opens the payload and checks what the column types cannot.
pub struct JobColumns {
    pub tenant_id: String,
    pub id: Uuid,
    pub handler_key: String,
    pub payload: Vec<u8>,
    pub status: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub available_at: DateTime<Utc>,
    pub lease_owner: Option<String>,
    pub lease_token: Option<Uuid>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub cancel_requested: bool,
    pub result: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

impl JobColumns {
    pub fn record(self, protection: &Protection) -> Result<JobRecord, StoreError> {
        let tenant = TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?;
        let row = self.id.to_string();
        let json = protection.open(&job_place(&tenant, &row), &self.payload).map_err(unreadable)?;
        let count = |v: i32, what: &str| u32::try_from(v).map_err(|_| corrupt(what, v));
        let error = match (self.error_code, self.error_message) {
            (Some(code), Some(message)) => Some(JobError { code, message }),
            (None, None) => None,
            (code, _) => return Err(corrupt("job error", format!("code {code:?} without its message or vice versa"))),
        };
        Ok(JobRecord {
            id: self.id,
            handler_key: self.handler_key,
            payload: serde_json::from_str(&json).map_err(|e| corrupt("job payload", e))?,
            status: JobStatus::parse(&self.status).ok_or_else(|| corrupt("job status", &self.status))?,
            attempts: count(self.attempts, "job attempts")?,
            max_attempts: count(self.max_attempts, "job max attempts")?,
            available_at: self.available_at,
            lease_owner: self.lease_owner,
            lease_token: self.lease_token,
            lease_expires_at: self.lease_expires_at,
            heartbeat_at: self.heartbeat_at,
            cancel_requested: self.cancel_requested,
            result: self.result,
            error,
            run_id: self.run_id.map(RunId),
            created_at: self.created_at,
            updated_at: self.updated_at,
            completed_at: self.completed_at,
            tenant,
        })
    }
}

/// The rows one `sql::JOB_LEASE` statement took: the leases (rows now `Running`), oldest
/// available first, and how many rows it closed instead.
pub fn job_leases(rows: Vec<JobRecord>) -> Result<(Vec<Lease>, usize), StoreError> {
    let mut leases = Vec::with_capacity(rows.len());
    let mut closed = 0;
    for job in rows {
        if job.status == JobStatus::Running {
            leases.push(job_lease(job)?);
        } else {
            closed += 1;
        }
    }
    leases.sort_by_key(|l| (l.job.available_at, l.job.id));
    Ok((leases, closed))
}

/// A row a lease statement returned, as a lease (`None` when the statement closed it).
pub fn job_lease_of(job: JobRecord) -> Result<Option<Lease>, StoreError> {
    if job.status == JobStatus::Running { job_lease(job).map(Some) } else { Ok(None) }
}

fn job_lease(job: JobRecord) -> Result<Lease, StoreError> {
    let token = job.lease_token.ok_or_else(|| corrupt("job lease", "a leased job without a token"))?;
    Ok(Lease { job, token })
}

// ---- idempotency keys ----------------------------------------------------------------------

/// How often a claim runs [`crate::sql::IDEMPOTENCY_CLAIM`] while it returns no row (the
/// conflicting row was committed after the statement's snapshot; a new run sees it).
pub const IDEMPOTENCY_CLAIM_ATTEMPTS: usize = 8;

/// What a claim answers when every attempt found the key changing under it.
pub const IDEMPOTENCY_CONTENDED: &str = "The idempotency key is being claimed concurrently; try again.";

/// Where a stored response body (a protected value) is bound: the record's tenant,
/// operation and key (the operation's length first, so no two pairs share a row text).
pub fn idempotency_place<'a>(tenant: &'a TenantId, row: &'a str) -> Place<'a> {
    Place { tenant: tenant.as_str(), table: "idempotency_keys", column: "response_body", row }
}

pub fn idempotency_row(key: KeyRef<'_>) -> String {
    format!("{}:{}/{}", key.operation.len(), key.operation, key.key)
}

/// A response as `sql::IDEMPOTENCY_COMPLETE` binds it: the status and the sealed body.
pub fn idempotency_response(
    protection: &Protection,
    key: KeyRef<'_>,
    status: u16,
    body: &serde_json::Value,
) -> Result<(i32, Vec<u8>), StoreError> {
    let json = serde_json::to_string(body).map_err(|e| corrupt("idempotent response", e))?;
    let row = idempotency_row(key);
    Ok((i32::from(status), protection.seal(&idempotency_place(key.tenant, &row), &json)))
}

/// The row `sql::IDEMPOTENCY_CLAIM` returned, as either driver reads it.
pub struct ClaimColumns {
    pub claimed: bool,
    pub request_hash: String,
    pub response_status: Option<i32>,
    pub response_body: Option<Vec<u8>>,
}

impl ClaimColumns {
    pub fn claim(self, protection: &Protection, key: KeyRef<'_>) -> Result<Claim, StoreError> {
        if self.claimed {
            return Ok(Claim::Claimed);
        }
        match (self.response_status, self.response_body) {
            (None, None) => Ok(Claim::InProgress { request_hash: self.request_hash }),
            (Some(status), Some(body)) => {
                let status = u16::try_from(status).map_err(|_| corrupt("idempotent response status", status))?;
                let row = idempotency_row(key);
                let json = protection.open(&idempotency_place(key.tenant, &row), &body).map_err(unreadable)?;
                let body = serde_json::from_str(&json).map_err(|e| corrupt("idempotent response", e))?;
                Ok(Claim::Completed { request_hash: self.request_hash, status, body })
            }
            (status, _) => {
                Err(corrupt("idempotent response", format!("status {status:?} without its body or vice versa")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> KeyColumns {
        KeyColumns {
            id: "0123456789ab".into(),
            tenant_id: "tenant-a".into(),
            name: "ci".into(),
            key_hash: vec![7; 32],
            scopes: vec!["RunsWrite".into(), "AgentsRead".into()],
            created_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
            rotated_at: None,
        }
    }

    #[test]
    fn key_rows_decode_with_their_scopes_as_a_set() {
        let key = columns().record().unwrap();
        assert_eq!(key.hash, [7; 32]);
        assert_eq!(key.scopes, [Scope::AgentsRead, Scope::RunsWrite].into());
        assert_eq!(scope_texts(&key.scopes), ["AgentsRead", "RunsWrite"]);
    }

    #[test]
    fn key_rows_that_do_not_decode_are_internal_errors() {
        let short = KeyColumns { key_hash: vec![7; 31], ..columns() };
        let unknown = KeyColumns { scopes: vec!["Everything".into()], ..columns() };
        let tenant = KeyColumns { tenant_id: String::new(), ..columns() };
        for bad in [short, unknown, tenant] {
            assert!(matches!(bad.record(), Err(StoreError::Internal { .. })));
        }
    }

    fn audit_columns() -> AuditColumns {
        AuditColumns {
            tenant_id: "tenant-a".into(),
            sequence: 3,
            at: DateTime::from_timestamp(1_800_000_000, 123_456_000).unwrap(),
            actor: "token".into(),
            action: "agent.update".into(),
            entity_type: "agent".into(),
            entity_id: "support".into(),
            before: Some("{\"version\":1}".into()),
            after: None,
            hash: vec![9; 32],
        }
    }

    #[test]
    fn audit_rows_decode_and_the_next_entry_chains_from_the_last() {
        let e = audit_columns().entry().unwrap();
        assert_eq!((e.sequence, e.hash, e.tenant.as_str()), (3, [9; 32], "tenant-a"));
        assert_eq!(next_audit_link(None).unwrap(), (1, [0; 32]), "the first entry chains from zeros");
        assert_eq!(next_audit_link(Some((3, vec![9; 32]))).unwrap(), (4, [9; 32]));
    }

    #[test]
    fn audit_rows_that_do_not_decode_are_internal_errors() {
        let short = AuditColumns { hash: vec![9; 31], ..audit_columns() };
        let tenant = AuditColumns { tenant_id: String::new(), ..audit_columns() };
        for bad in [short, tenant] {
            assert!(matches!(bad.entry(), Err(StoreError::Internal { .. })));
        }
        assert!(matches!(next_audit_link(Some((3, vec![9; 33]))), Err(StoreError::Internal { .. })));
    }

    fn approval() -> ApprovalRecord {
        ApprovalRecord {
            id: Uuid::from_u128(7),
            tenant: TenantId::parse("tenant-a").unwrap(),
            run_id: RunId(Uuid::from_u128(9)),
            session_id: None,
            agent_name: "support".into(),
            call_id: "c1".into(),
            tool_name: "refund".into(),
            arguments: serde_json::json!({"amount": 80}),
            effect: tracon_core::tools::effect::ToolEffect::Write,
            requested_by: None,
            created_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            expires_at: DateTime::from_timestamp(1_800_003_600, 0).unwrap(),
            status: ApprovalStatus::Pending,
            decided_at: None,
            decided_by: None,
            reason: None,
            resumed_run_id: None,
        }
    }

    /// What the arrays hold for row `i`, read back the way a driver would.
    fn approval_row(a: &ApprovalArrays, i: usize) -> ApprovalColumns {
        ApprovalColumns {
            tenant_id: a.tenants[i].clone(),
            id: a.ids[i],
            run_id: a.run_ids[i],
            session_id: a.session_ids[i].clone(),
            agent_name: a.agent_names[i].clone(),
            call_id: a.call_ids[i].clone(),
            tool_name: a.tool_names[i].clone(),
            arguments: a.arguments[i].clone(),
            effect: a.effects[i].clone(),
            requested_by: a.requested_by[i].clone(),
            created_at: a.created_at[i],
            expires_at: a.expires_at[i],
            status: a.statuses[i].to_owned(),
            decided_at: a.decided_at[i],
            decided_by: a.decided_by[i].clone(),
            reason: a.reasons[i].clone(),
            resumed_run_id: a.resumed_run_ids[i],
        }
    }

    #[test]
    fn approval_arguments_are_sealed_and_rows_decode_back() {
        let sealed = Protection::with_key(7, &[42; 32]);
        let arrays = approval_arrays(&sealed, &[approval()]).unwrap();
        assert!(!String::from_utf8_lossy(&arrays.arguments[0]).contains("amount"), "arguments are protected");
        assert_eq!((arrays.statuses[0], arrays.effects[0].as_str()), ("Pending", "Write"));
        assert_eq!(approval_row(&arrays, 0).record(&sealed).unwrap(), approval());
        // Bound to its row: another request's place does not open it.
        let moved = ApprovalColumns { id: Uuid::from_u128(8), ..approval_row(&arrays, 0) };
        assert!(matches!(moved.record(&sealed), Err(StoreError::Internal { .. })));
    }

    #[test]
    fn approval_rows_that_do_not_decode_are_internal_errors() {
        let plain = Protection::off();
        let arrays = approval_arrays(&plain, &[approval()]).unwrap();
        for status in ["Expired", "pending", ""] {
            let bad = ApprovalColumns { status: status.into(), ..approval_row(&arrays, 0) };
            assert!(matches!(bad.record(&plain), Err(StoreError::Internal { .. })), "{status}");
        }
        let effect = ApprovalColumns { effect: "Everything".into(), ..approval_row(&arrays, 0) };
        assert!(matches!(effect.record(&plain), Err(StoreError::Internal { .. })));
        let expired = ApprovalRecord { status: ApprovalStatus::Expired, ..approval() };
        assert!(matches!(approval_arrays(&plain, &[expired]), Err(StoreError::Internal { .. })), "never stored");
        let denied = ApprovalDecision { approved: false, decided_by: "ops".into(), reason: None };
        assert_eq!(decision_status(&denied), "Denied");
    }

    #[test]
    fn rule_and_tenant_rows_that_do_not_decode_are_internal_errors() {
        let rule = || RuleColumns {
            tenant_id: "tenant-a".into(),
            id: Uuid::from_u128(1),
            tool_name: "refund".into(),
            agent_name: None,
            arguments_hash: None,
            conditions: serde_json::json!([{"path": "amount", "operator": "LessThan", "value": 10}]),
            description: None,
            created_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            created_by: "token".into(),
        };
        assert_eq!(rule().rule().unwrap().conditions.len(), 1);
        let unknown =
            RuleColumns { conditions: serde_json::json!([{"path": "a", "operator": "Like", "value": 1}]), ..rule() };
        let not_a_list = RuleColumns { conditions: serde_json::json!({}), ..rule() };
        for bad in [unknown, not_a_list] {
            assert!(matches!(bad.rule(), Err(StoreError::Internal { .. })));
        }
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let tenant = TenantColumns { id: "no spaces".into(), display_name: "x".into(), created_at: at, updated_at: at };
        assert!(matches!(tenant.record(), Err(StoreError::Internal { .. })));
    }

    #[test]
    fn job_payloads_are_sealed_and_rows_decode_back() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut job = JobRecord::queued(
            Uuid::from_u128(5),
            TenantId::parse("tenant-a").unwrap(),
            "run.execute",
            serde_json::json!({"message": "my secret question", "nested": [1, {"a": null}]}),
            3,
            at,
        );
        job.error = Some(JobError { code: "c".into(), message: "m".into() });
        let sealed = Protection::with_key(7, &[42; 32]);
        let v = job_values(&sealed, &job).unwrap();
        assert!(!String::from_utf8_lossy(&v.payload).contains("secret"), "the payload is protected");
        assert_eq!((job_values(&sealed, &job).unwrap()).record(&sealed).unwrap(), job);
        let moved = JobColumns { id: Uuid::from_u128(6), ..(job_values(&sealed, &job).unwrap()) };
        assert!(matches!(moved.record(&sealed), Err(StoreError::Internal { .. })), "bound to its row");
        let plain = Protection::off();
        let status = JobColumns { status: "Done".into(), ..(job_values(&plain, &job).unwrap()) };
        let half = JobColumns { error_message: None, ..(job_values(&plain, &job).unwrap()) };
        let negative = JobColumns { attempts: -1, ..(job_values(&plain, &job).unwrap()) };
        for bad in [status, half, negative] {
            assert!(matches!(bad.record(&plain), Err(StoreError::Internal { .. })));
        }
        let (leases, closed) = job_leases(vec![job.clone()]).unwrap();
        assert_eq!((leases.len(), closed), (0, 1), "a row that is not running was closed, not leased");
        let running = JobRecord { status: JobStatus::Running, ..job };
        assert!(job_lease_of(running).is_err(), "a running row without a token does not decode as a lease");
    }

    #[test]
    fn idempotent_responses_are_sealed_to_their_record_and_fail_closed() {
        let p = Protection::with_key(1, &[9; 32]);
        let tenant = TenantId::parse("tenant-a").unwrap();
        let k = KeyRef { tenant: &tenant, operation: "run:a", key: "b/c" };
        let body = serde_json::json!({"output": "grüße"});
        let (status, sealed) = idempotency_response(&p, k, 201, &body).unwrap();
        let row = |status, sealed| ClaimColumns {
            claimed: false,
            request_hash: "h".into(),
            response_status: status,
            response_body: sealed,
        };
        let back = row(Some(status), Some(sealed.clone())).claim(&p, k).unwrap();
        assert_eq!(back, Claim::Completed { request_hash: "h".into(), status: 201, body });
        // Another record (same text once joined naively) cannot open it.
        let other = KeyRef { tenant: &tenant, operation: "run:a/b", key: "c" };
        assert!(matches!(row(Some(201), Some(sealed)).claim(&p, other), Err(StoreError::Internal { .. })));
        assert!(matches!(row(Some(201), None).claim(&p, k), Err(StoreError::Internal { .. })));
        assert!(matches!(row(Some(70_000), Some(vec![0])).claim(&p, k), Err(StoreError::Internal { .. })));
        assert_eq!(row(None, None).claim(&p, k).unwrap(), Claim::InProgress { request_hash: "h".into() });
    }
}
