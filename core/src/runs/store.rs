//! Runs as stored: the run row, its numbered event log, its tool calls and recorded input,
//! the cancel flag and statistics — the [`RunStore`] port, tenant-first like every store.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{StoreError, check_text, check_text_opt};
use crate::events::{RecordedEvent, ToolCallStatus};
use crate::failure::{ErrorClass, RunFailure};
use crate::model::Usage;
use crate::names::{RunId, TenantId};
use crate::pricing::CostSnapshot;
use crate::tools::effect::ToolEffect;

/// The most runs [`RunStore::list_tree`] returns.
pub const MAX_TREE_RUNS: usize = 1_000;

/// Declares [`RunStatus`] and [`RunStatus::ALL`] from one list: every message and schema that
/// names the statuses reads `ALL`, so none can leave a status out.
macro_rules! run_statuses {
    ($($(#[doc = $doc:literal])* $variant:ident),+ $(,)?) => {
        /// A run's status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
        pub enum RunStatus {
            $($(#[doc = $doc])* $variant,)+
        }

        impl RunStatus {
            /// Every status, in declaration order.
            pub const ALL: &'static [RunStatus] = &[$(RunStatus::$variant),+];

            /// The status as it is written (its JSON form): `Queued`, `Running` …
            pub fn as_str(self) -> &'static str {
                match self {
                    $(RunStatus::$variant => stringify!($variant),)+
                }
            }
        }
    };
}

run_statuses! {
    /// Accepted and waiting for a worker (`Prefer: respond-async`, triggers).
    Queued,
    Running,
    Completed,
    Failed,
    Canceled,
    AwaitingApproval,
    AwaitingInput,
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Running | Self::Queued)
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|status| status.as_str() == s)
    }

    /// Every status, as a list for a message: `Queued, Running, …, AwaitingInput`.
    pub fn names() -> String {
        Self::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// The run row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub id: RunId,
    #[serde(skip)]
    pub tenant: Option<TenantId>,
    pub agent_name: String,
    pub agent_version: Option<u32>,
    pub status: RunStatus,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<u64>,
    /// `null` when no model call reported usage: unmeasured is not zero.
    pub usage: Option<Usage>,
    pub cost: Option<CostSnapshot>,
    /// The provider and model that actually answered.
    pub model_provider: Option<String>,
    pub model: Option<String>,
    pub error: Option<RunFailure>,
    pub session_id: Option<String>,
    pub parent_run_id: Option<RunId>,
    pub root_run_id: Option<RunId>,
    pub depth: u32,
    pub user_id: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Somebody asked this run to stop; the executing turn observes it.
    #[serde(default)]
    pub cancel_requested: bool,
    /// The interrupted run this one continues (set by continuation, never by a caller).
    #[serde(default)]
    pub continued_from_run_id: Option<RunId>,
    /// The run that continues this one, once its executor went away and it was continued.
    #[serde(default)]
    pub continued_by_run_id: Option<RunId>,
    /// The run this one replays (`POST /api/runs/{id}/replay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of_run_id: Option<RunId>,
    /// Set while a queued run that reached its soft deadline waits for the attempt that goes
    /// on with it (it stays `Running`).
    #[serde(skip)]
    pub yielded_at: Option<DateTime<Utc>>,
}

impl RunRecord {
    /// A row for a run of `agent_name` that has not ended: `status` as of `started_at`, the
    /// heartbeat at `started_at` for a run executing now (none for a queued one), nothing
    /// else known yet.
    pub fn opened(
        id: RunId,
        agent_name: &str,
        agent_version: Option<u32>,
        status: RunStatus,
        started_at: DateTime<Utc>,
    ) -> Self {
        Self {
            id,
            tenant: None,
            agent_name: agent_name.to_owned(),
            agent_version,
            status,
            started_at,
            ended_at: None,
            duration_ms: None,
            usage: None,
            cost: None,
            model_provider: None,
            model: None,
            error: None,
            session_id: None,
            parent_run_id: None,
            root_run_id: None,
            depth: 0,
            user_id: None,
            labels: BTreeMap::new(),
            heartbeat_at: (status == RunStatus::Running).then_some(started_at),
            cancel_requested: false,
            continued_from_run_id: None,
            continued_by_run_id: None,
            replay_of_run_id: None,
            yielded_at: None,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub status: RunStatus,
    pub ended_at: DateTime<Utc>,
    pub duration_ms: u64,
    pub usage: Option<Usage>,
    pub cost: Option<CostSnapshot>,
    pub model_provider: Option<String>,
    pub model: Option<String>,
    pub error: Option<RunFailure>,
}

impl RunEnd {
    /// The end of a run that failed at `ended_at` without a model answer to account for.
    pub fn failed(ended_at: DateTime<Utc>, duration_ms: u64, failure: RunFailure) -> Self {
        Self {
            status: RunStatus::Failed,
            ended_at,
            duration_ms,
            usage: None,
            cost: None,
            model_provider: None,
            model: None,
            error: Some(failure),
        }
    }
}

/// One tool call, stored individually so "which tool failed with what input" is a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    pub run_id: RunId,
    pub call_id: String,
    pub tool_name: String,
    pub arguments: String,
    pub effect: Option<ToolEffect>,
    pub status: ToolCallStatus,
    pub result: Option<String>,
    pub error: Option<String>,
    pub omitted_bytes: Option<u64>,
    pub started_at: DateTime<Utc>,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// Set when a call that outlived its timeout finished after all.
    pub late_completed_at: Option<DateTime<Utc>>,
    pub late_duration_ms: Option<u64>,
    pub late_result: Option<String>,
    pub late_error: Option<String>,
}

impl ToolCallRecord {
    /// A call's record as of `started_at` in `status`, nothing known yet of its ending: what
    /// the ledger writes before its body runs (`Started`), or for a call that waits for a
    /// decision (`AwaitingApproval`).
    pub fn opened(
        run_id: RunId,
        call: crate::model::ToolCall,
        effect: Option<ToolEffect>,
        status: ToolCallStatus,
        started_at: DateTime<Utc>,
    ) -> Self {
        Self {
            run_id,
            call_id: call.id,
            tool_name: call.name,
            arguments: call.arguments,
            effect,
            status,
            result: None,
            error: None,
            omitted_bytes: None,
            started_at,
            duration_ms: 0,
            timed_out: false,
            late_completed_at: None,
            late_duration_ms: None,
            late_result: None,
            late_error: None,
        }
    }
}

/// One model call of the step ledger that asked for tools: the assistant's message as the
/// model produced it (text, tool calls, reasoning). Written before any of its calls' bodies
/// run, together with each call's start (a [`ToolCallRecord`] in `Started`), so after a crash
/// the ledger says which calls ended, which started without an ending and which never started;
/// a continuation rebuilds the conversation from these steps without calling the model again.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelStep {
    /// 1, 2, … in the order of the run's model calls; a continuation numbers on from the
    /// run it continues.
    pub step: u32,
    /// A [`Message::Assistant`](crate::model::Message::Assistant).
    pub message: crate::model::Message,
    pub recorded_at: DateTime<Utc>,
}

/// What the caller sent, when input recording is on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunInputRecord {
    pub message: String,
    pub culture: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub documents: Vec<DocumentInput>,
}

/// A reference document sent with a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DocumentInput {
    pub name: String,
    pub content: String,
}

/// Filters of the run list and the statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub agent: Option<String>,
    pub status: Option<RunStatus>,
    pub session_id: Option<String>,
    pub user_id: Option<String>,
    /// Every pair must be present on the run.
    pub labels: BTreeMap<String, String>,
    /// Started at or after.
    pub from: Option<DateTime<Utc>>,
    /// Started before.
    pub to: Option<DateTime<Utc>>,
}

impl RunFilter {
    /// [`check_text`] over the filter's text: what every store checks first.
    pub fn check_text(&self) -> Result<(), StoreError> {
        check_text_opt("agent", self.agent.as_deref())?;
        check_text_opt("sessionId", self.session_id.as_deref())?;
        check_text_opt("userId", self.user_id.as_deref())?;
        self.labels.iter().try_for_each(|(k, v)| check_text("label", k).and_then(|()| check_text("label", v)))
    }

    pub fn matches(&self, run: &RunRecord) -> bool {
        self.agent.as_deref().is_none_or(|a| run.agent_name == a)
            && self.status.is_none_or(|s| run.status == s)
            && self.session_id.as_deref().is_none_or(|s| run.session_id.as_deref() == Some(s))
            && self.user_id.as_deref().is_none_or(|u| run.user_id.as_deref() == Some(u))
            && self.labels.iter().all(|(k, v)| run.labels.get(k) == Some(v))
            && self.from.is_none_or(|f| run.started_at >= f)
            && self.to.is_none_or(|t| run.started_at < t)
    }
}

/// Aggregates over the runs a filter selects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStats {
    pub total_runs: u64,
    pub by_status: BTreeMap<RunStatus, u64>,
    pub by_error_class: BTreeMap<ErrorClass, u64>,
    pub by_agent: BTreeMap<String, u64>,
    pub by_user: BTreeMap<String, u64>,
    /// `key:value` → runs. A run with three labels counts in three rows.
    pub by_label: BTreeMap<String, u64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// Runs whose usage was measured.
    pub runs_with_usage: u64,
    /// Currency → total cost of the runs with a known cost.
    #[schema(value_type = BTreeMap<String, f64>)]
    pub cost: BTreeMap<String, crate::pricing::Money>,
    pub runs_with_cost: u64,
}

impl RunStats {
    /// Adds one run (the reference aggregation every store must match).
    pub fn add(&mut self, run: &RunRecord) {
        self.total_runs += 1;
        *self.by_status.entry(run.status).or_default() += 1;
        if let Some(e) = &run.error {
            *self.by_error_class.entry(e.error_class).or_default() += 1;
        }
        *self.by_agent.entry(run.agent_name.clone()).or_default() += 1;
        if let Some(u) = &run.user_id {
            *self.by_user.entry(u.clone()).or_default() += 1;
        }
        for (k, v) in &run.labels {
            *self.by_label.entry(format!("{k}:{v}")).or_default() += 1;
        }
        if let Some(u) = &run.usage {
            self.input_tokens += u.input_tokens;
            self.output_tokens += u.output_tokens;
            self.total_tokens += u.total_tokens;
            self.runs_with_usage += 1;
        }
        if let Some(c) = &run.cost {
            *self.cost.entry(c.currency.clone()).or_default() += c.total_cost;
            self.runs_with_cost += 1;
        }
    }
}

/// The answer to a cancel request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The flag is set; the executing turn will stop.
    Requested,
    /// The run had already ended with this status.
    AlreadyEnded(RunStatus),
}

/// Runs and everything recorded about them.
#[async_trait::async_trait]
pub trait RunStore: Send + Sync {
    /// Writes the run row, with its recorded input when there is one (one round trip).
    async fn create_run(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
    ) -> Result<(), StoreError>;
    /// [`create_run`](Self::create_run), only while the tenant's definitions are still at
    /// generation `definitions` ([`crate::definitions::Generations`]), checked in the same
    /// write: `Ok(false)` and nothing written when they moved on — the run was compiled from a
    /// definition that is no longer current.
    async fn create_run_at(
        &self,
        tenant: &TenantId,
        run: &RunRecord,
        input: Option<&RunInputRecord>,
        definitions: u64,
    ) -> Result<bool, StoreError>;
    /// Closes the run row and appends its last events, together (one round trip): whoever
    /// sees the terminal event finds the row ended. The events follow the
    /// [`append_events`](Self::append_events) rules; `NotFound` for a missing run.
    async fn finish_run(
        &self,
        tenant: &TenantId,
        id: RunId,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<(), StoreError>;
    async fn get_run(&self, tenant: &TenantId, id: RunId) -> Result<Option<RunRecord>, StoreError>;

    /// The call tree whose root is `root`: the root itself and every run under it, by depth,
    /// then start, then id; at most [`MAX_TREE_RUNS`].
    async fn list_tree(&self, tenant: &TenantId, root: RunId) -> Result<Vec<RunRecord>, StoreError>;
    /// Newest first.
    async fn list_runs(
        &self,
        tenant: &TenantId,
        filter: &RunFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<RunRecord>, StoreError>;
    async fn stats(&self, tenant: &TenantId, filter: &RunFilter) -> Result<RunStats, StoreError>;

    /// Appends a batch of events (one round trip) and moves the run's heartbeat to `now`.
    /// Sequence numbers come from the run's single writer; a sequence already stored is a
    /// `Conflict` and nothing of the batch is written. Returns, from the same statement,
    /// whether the run's executor is to stop ([`Self::is_cancel_requested`]), so a run that
    /// writes its events never reads its cancel flag separately.
    async fn append_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// Events with a sequence above `after`, in order, at most `limit`.
    async fn read_events(
        &self,
        tenant: &TenantId,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError>;

    /// The sequence of the run's last stored event (0 without events, or for a missing run).
    async fn last_sequence(&self, tenant: &TenantId, run: RunId) -> Result<u64, StoreError>;
    /// The answers of `runs` in one round trip: the text of each one's `RunCompleted` event. A run that has not completed, does not exist or is another
    /// tenant's is absent. A workflow checkpoint refers to its agents' answers by run id; this
    /// reads them back when the workflow resumes.
    async fn answers(&self, tenant: &TenantId, runs: &[RunId]) -> Result<BTreeMap<RunId, String>, StoreError>;

    async fn record_tool_call(&self, tenant: &TenantId, call: &ToolCallRecord) -> Result<(), StoreError>;
    /// The step ledger's write before a tool round (one round trip): the model step that asked
    /// for the calls (when there is one; a resumed round has none) and each call's start, a
    /// record in `Started` that [`Self::record_tool_call`] later overwrites with its ending.
    /// Fenced by the run's state: only while the run is `Running` — `false`, and nothing
    /// written, when it is not (reconciliation closed it, its executor lost it), and then no
    /// body may run. A step number already stored is a `Conflict`.
    async fn begin_step(
        &self,
        tenant: &TenantId,
        run: RunId,
        step: Option<&ModelStep>,
        starts: &[ToolCallRecord],
    ) -> Result<bool, StoreError>;
    /// [`Self::begin_step`] with the run's events recorded before it (the calls'
    /// `ToolInvoking`, what the model said), appended by the [`Self::append_events`] rules in
    /// the same round trip: a tool round's ledger write is its only statement before the
    /// bodies run. The events are written whether or not the run is still `Running` (as
    /// `append_events` writes them); all of it or none is written.
    async fn begin_step_with(
        &self,
        tenant: &TenantId,
        run: RunId,
        step: Option<&ModelStep>,
        starts: &[ToolCallRecord],
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        if !events.is_empty() {
            self.append_events(tenant, run, events, now).await?;
        }
        self.begin_step(tenant, run, step, starts).await
    }
    /// [`Self::record_tool_call`] with the run's events recorded before it (the call's
    /// `ToolInvoked` or `ToolFailed`) in the same round trip: a call's ending is one statement.
    async fn record_tool_call_with(
        &self,
        tenant: &TenantId,
        call: &ToolCallRecord,
        events: &[RecordedEvent],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if !events.is_empty() {
            self.append_events(tenant, call.run_id, events, now).await?;
        }
        self.record_tool_call(tenant, call).await
    }
    /// The run's model steps, in step order.
    async fn list_steps(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ModelStep>, StoreError>;
    /// Hands a running run over to a later attempt (its soft deadline): appends `events`
    /// (the [`Self::append_events`] rules), keeps `usage` (the model calls' so far) on the row
    /// and marks it yielded at `now`, with its heartbeat, in one round trip. `false`, nothing
    /// written, when it is not running or already yielded.
    async fn yield_run(
        &self,
        tenant: &TenantId,
        run: RunId,
        events: &[RecordedEvent],
        usage: Option<&Usage>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// Takes a yielded run back for the attempt going on with it (heartbeat `now`); `false`
    /// when it is not a yielded running run — another attempt took it, or it ended.
    async fn resume_yielded(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<bool, StoreError>;
    /// Opens `next` (a `Running` row naming `from` in `continued_from_run_id`) as the
    /// continuation of the ended run `from`, and links `from` to it, in one round trip; `false`
    /// and nothing written when `from` does not exist, has not ended, or already has a
    /// continuation — so a run is continued at most once however many workers try.
    async fn open_continuation(&self, tenant: &TenantId, from: RunId, next: &RunRecord) -> Result<bool, StoreError>;
    /// Writes a late result onto the same call's record (no second record).
    async fn complete_tool_call_late(&self, tenant: &TenantId, late: &LateCompletion) -> Result<(), StoreError>;
    /// In call order.
    async fn list_tool_calls(&self, tenant: &TenantId, run: RunId) -> Result<Vec<ToolCallRecord>, StoreError>;

    async fn record_input(&self, tenant: &TenantId, run: RunId, input: &RunInputRecord) -> Result<(), StoreError>;
    async fn get_input(&self, tenant: &TenantId, run: RunId) -> Result<Option<RunInputRecord>, StoreError>;

    /// Moves a queued run to `Running` as its worker starts it (`started_at` and the heartbeat
    /// are `now`), answering whether a cancel was asked while it waited (one round trip for
    /// both). `None` when it is not queued — an earlier attempt started it, or it ended;
    /// `NotFound` is not used (a missing run is `None` too).
    async fn start_queued(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>)
    -> Result<Option<bool>, StoreError>;
    /// Sets the cancel flag of a queued or running run (a queued one stops as its worker
    /// starts it). `NotFound` for a run that does not exist.
    async fn request_cancel(&self, tenant: &TenantId, run: RunId) -> Result<CancelOutcome, StoreError>;
    /// Whether the run's executor is to stop: a cancel was asked, or the run is no longer
    /// running — reconciliation closed it under an executor it had given up on (a process that
    /// stalled past the heartbeat limit and woke up), which must then stop rather than go on
    /// beside the run that continues it. `false` for a missing run.
    async fn is_cancel_requested(&self, tenant: &TenantId, run: RunId) -> Result<bool, StoreError>;

    /// Moves a running run's heartbeat to `now` (its executor is alive). A run that is not
    /// running is left alone. Returns, from the same statement, whether the executor is to
    /// stop ([`Self::is_cancel_requested`]; `true` for a missing run).
    async fn heartbeat(&self, tenant: &TenantId, run: RunId, now: DateTime<Utc>) -> Result<bool, StoreError>;
    /// Tells every instance that hears signals ([`crate::runs::drain::Drain::hear`]) what is
    /// asked of a run — a follower of its log. A store without listeners does nothing.
    async fn signal(&self, _signal: crate::runs::drain::Signal) -> Result<(), StoreError> {
        Ok(())
    }
    /// Running runs of any tenant whose heartbeat (or start, without one) is older than
    /// `stale_before`, oldest first, at most `limit` — reconciliation's candidates.
    async fn stale_runs(&self, stale_before: DateTime<Utc>, limit: usize) -> Result<Vec<StaleRun>, StoreError>;
    /// Closes a stale run like [`Self::finish_run`], but only while it is still running with
    /// a heartbeat older than `stale_before`; `false` when it moved on (it finished, or its
    /// executor came back) and nothing was written.
    async fn close_stale(
        &self,
        tenant: &TenantId,
        id: RunId,
        stale_before: DateTime<Utc>,
        end: &RunEnd,
        events: &[RecordedEvent],
    ) -> Result<bool, StoreError>;
}

/// A running run whose executor stopped heartbeating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleRun {
    pub tenant: TenantId,
    pub id: RunId,
    pub started_at: DateTime<Utc>,
    /// The last stored event's sequence (0 without events): the closing event follows it.
    pub last_sequence: u64,
}

/// A call that finished after its timeout.
#[derive(Debug, Clone, PartialEq)]
pub struct LateCompletion {
    pub tenant: TenantId,
    pub run_id: RunId,
    pub call_id: String,
    pub completed_at: DateTime<Utc>,
    pub duration_ms: u64,
    /// The canonical result text, or the display-safe error.
    pub result: Result<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_is_listed_parsed_and_written_as_it_serializes() {
        for status in RunStatus::ALL {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
            assert_eq!(RunStatus::parse(status.as_str()), Some(*status));
            assert!(RunStatus::names().contains(status.as_str()));
        }
        assert_eq!(RunStatus::parse("queued"), None);
    }
}
