//! Queued runs: [`enqueue`] accepts a run for a worker (a placeholder row and its job);
//! [`QueuedRuns`] executes `run.execute` jobs, each run at most once.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::attribution::Attribution;
use crate::catalog::CatalogError;
use crate::error::StoreError;
use crate::events::RunEvent;
use crate::failure::{ErrorClass, RunFailure};
use crate::identity::Caller;
use crate::names::{AgentName, RunId, SessionId, TenantId};
use crate::ports::new_id;
use crate::runs::continuation::{self, Continuation, InPlace, MAX_CHAIN};
use crate::runs::execute::execute;
use crate::runs::outcome::Accepted;
use crate::runs::prepare::{check_documents, check_queued_context_window, prepare};
use crate::runs::reconcile::close_orphan;
use crate::runs::request::{RunRequest, StartError};
use crate::runs::store::{DocumentInput, RunEnd, RunInputRecord, RunRecord, RunStatus};
use crate::runtime::Runtime;

/// The handler key of a queued run's job.
pub use crate::jobs::RUN_JOB;

/// A queued run's job payload: the request as it was accepted.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedRun {
    pub run_id: RunId,
    pub agent: String,
    pub message: String,
    pub culture: Option<String>,
    pub parameters: BTreeMap<String, String>,
    pub documents: Vec<DocumentInput>,
    pub session_id: Option<String>,
    pub caller: Caller,
    pub attribution: Attribution,
    /// The tree limits the run was accepted with, when its surface set its own
    /// ([`crate::runs::launch::Start::budget`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::runs::tree::AgentGraphSettings>,
}

/// Accepts a run for a worker: the same checks as a live run (the agent compiles with these
/// parameters, the documents are within their limits, the prompt within its model's context
/// window when the pre-flight check is on), then a placeholder run row
/// (`Queued`, with the recorded input) and its job. The row is written first, so a worker
/// never finds a job without its run; a job that cannot be stored closes the row `Failed`.
/// `run_id` is the run's id when the surface chose it beforehand (an A2A task's push
/// configuration is stored before its run can end).
pub async fn enqueue(
    runtime: &Runtime,
    request: RunRequest,
    max_attempts: u32,
    run_id: Option<RunId>,
    budget: Option<Arc<crate::runs::tree::AgentGraphSettings>>,
) -> Result<Accepted, StartError> {
    check_documents(&request.documents)?;
    let agent = runtime
        .catalog
        .compile(&request.tenant, &request.agent, request.culture.as_deref(), &request.parameters)
        .await?;
    check_queued_context_window(runtime, &agent, &request).await?;
    let clock = runtime.platform.clock.as_ref();
    let now = clock.now();
    let run_id = run_id.unwrap_or_else(|| RunId(new_id(clock)));
    let job_id = new_id(clock);
    let row = RunRecord {
        session_id: request.session_id.as_ref().map(|s| s.as_str().to_owned()),
        user_id: request.attribution.user_id.clone(),
        labels: request.attribution.labels.clone(),
        ..RunRecord::opened(run_id, &agent.name, agent.version, RunStatus::Queued, now)
    };
    let input = runtime.settings.recording.record_input.then(|| RunInputRecord {
        message: request.message.clone(),
        culture: request.culture.clone(),
        parameters: request.parameters.clone(),
        documents: request.documents.clone(),
    });
    runtime.stores.runs.create_run(&request.tenant, &row, input.as_ref()).await?;
    let payload = QueuedRun {
        run_id,
        agent: request.agent.as_str().to_owned(),
        message: request.message,
        culture: request.culture,
        parameters: request.parameters,
        documents: request.documents,
        session_id: request.session_id.map(|s| s.as_str().to_owned()),
        caller: request.caller,
        attribution: request.attribution,
        budget: budget.map(|b| b.as_ref().clone()),
    };
    let payload = serde_json::to_value(&payload)
        .map_err(|e| StartError::Store(StoreError::Internal { detail: e.to_string() }))?;
    let mut job = crate::jobs::JobRecord::queued(job_id, request.tenant.clone(), RUN_JOB, payload, max_attempts, now);
    job.run_id = Some(run_id);
    if let Err(e) = runtime.stores.jobs.enqueue(&job).await {
        let failure = RunFailure::new(ErrorClass::Internal, "The run could not be queued.");
        close_unstarted(runtime, &request.tenant, run_id, now, failure).await;
        return Err(StartError::Store(e));
    }
    Ok(Accepted { run_id, job_id })
}

/// Ends a run that never started: its row closes with `failure` and a `RunFailed` event.
async fn close_unstarted(
    runtime: &Runtime,
    tenant: &TenantId,
    run_id: RunId,
    now: chrono::DateTime<chrono::Utc>,
    failure: RunFailure,
) {
    let end = RunEnd::failed(now, 0, failure.clone());
    let event = crate::events::RecordedEvent {
        sequence: 1,
        timestamp: now,
        event: RunEvent::RunFailed { error: failure.clone() },
    };
    if let Err(e) = runtime.stores.runs.finish_run(tenant, run_id, &end, &[event]).await {
        tracing::warn!(run_id = %run_id, error = ?e, "could not close a run that never started");
    }
    crate::webhooks::sources::publish_run_failed(runtime, tenant, run_id, None, &failure).await;
}

/// Executes queued runs (`run.execute` jobs). Jobs are delivered at least once, runs start
/// at most once: an attempt that finds its run already started (an earlier attempt got that
/// far) or ended does not run it again — a run whose worker died mid-way stays `Running`
/// until reconciliation closes it. A run that cannot start (its agent is gone, the store
/// failed loading it) closes `Failed`.
pub struct QueuedRuns {
    pub runtime: Arc<Runtime>,
}

#[async_trait::async_trait]
impl crate::jobs::JobHandler for QueuedRuns {
    fn key(&self) -> &'static str {
        RUN_JOB
    }

    async fn handle(
        &self,
        job: &crate::jobs::JobRecord,
        cancel: CancellationToken,
    ) -> Result<Option<serde_json::Value>, crate::jobs::JobFailure> {
        use crate::jobs::JobFailure;
        let runtime = &self.runtime;
        let queued: QueuedRun = serde_json::from_value(job.payload.clone()).map_err(|_| JobFailure::Permanent {
            code: "tracon.run.bad-payload".into(),
            message: "The queued run's payload could not be read.".into(),
        })?;
        let tenant = job.tenant.clone();
        let run_id = queued.run_id;
        let now = runtime.platform.clock.now();
        let Some(cancel_asked) =
            runtime.stores.runs.start_queued(&tenant, run_id, now).await.map_err(JobFailure::store_unavailable)?
        else {
            // An earlier attempt started it. With continuation on, a run whose executor went
            // away is continued here; otherwise the job settles as the run did, and a run still
            // `Running` (its process went away before it ended) is waited for — reconciliation
            // closes it — rather than reported as done.
            let latest = latest_of_chain(runtime, &tenant, run_id).await.map_err(JobFailure::store_unavailable)?;
            let Some(latest) = latest else {
                return Err(JobFailure::Permanent {
                    code: "tracon.run.gone".into(),
                    message: "The queued run's record no longer exists.".into(),
                });
            };
            if runtime.settings.continuation
                && let Some(done) = self.take_over(&tenant, queued, latest.clone(), cancel).await
            {
                return done;
            }
            tracing::info!(run_id = %latest.id, status = ?latest.status, "the queued run was started before; not running it again");
            return job_result(latest.id, latest.status, latest.error.as_ref());
        };
        let permanent =
            |message: &str| JobFailure::Permanent { code: "tracon.run.cannot-start".into(), message: message.into() };
        let request_budget = queued.budget.clone().map(Arc::new);
        let Some(request) = queued.into_request(&tenant, run_id) else {
            close_unstarted(
                runtime,
                &tenant,
                run_id,
                now,
                RunFailure::new(ErrorClass::Internal, "The queued run is malformed."),
            )
            .await;
            return Err(permanent("The queued run is malformed."));
        };
        let mut prepared = match prepare(runtime, request, None).await {
            Ok(p) => p,
            Err(e) => {
                let failure = cannot_start(&e);
                close_unstarted(runtime, &tenant, run_id, now, failure.clone()).await;
                return Err(permanent(&failure.message));
            }
        };
        prepared.budget = request_budget;
        // A cancel asked while the run waited in the queue stops it before its first call.
        if cancel_asked {
            cancel.cancel();
        }
        prepared.deadline = soft_deadline(runtime);
        let outcome = execute(runtime, prepared, cancel, None).await;
        attempt_result(run_id, &outcome)
    }
}

/// Where this attempt hands its run over, when a soft deadline is configured.
pub(crate) fn soft_deadline(runtime: &Runtime) -> Option<chrono::DateTime<chrono::Utc>> {
    let after = chrono::Duration::from_std(runtime.settings.soft_deadline?).ok()?;
    Some(runtime.platform.clock.now() + after)
}

/// How the attempt that executed `run_id` settles its job: as the run ended, or handed over
/// (a run still `Running` after its own attempt reached its soft deadline).
fn attempt_result(
    run_id: RunId,
    outcome: &crate::runs::outcome::RunOutcome,
) -> Result<Option<serde_json::Value>, crate::jobs::JobFailure> {
    if outcome.status == RunStatus::Running {
        return Err(crate::jobs::JobFailure::HandedOver);
    }
    job_result(run_id, outcome.status, outcome.failure.as_ref())
}

impl QueuedRun {
    /// The run request this payload was accepted as, executing under `run_id` (its row
    /// exists); `None` when the payload's names do not parse.
    fn into_request(self, tenant: &TenantId, run_id: RunId) -> Option<RunRequest> {
        let agent = AgentName::parse(&self.agent).ok()?;
        let session_id = self.session_id.as_deref().map(SessionId::parse).transpose().ok()?;
        Some(RunRequest {
            tenant: tenant.clone(),
            agent,
            message: self.message,
            culture: self.culture,
            parameters: self.parameters,
            documents: self.documents,
            session_id,
            caller: self.caller,
            attribution: self.attribution,
            resume: None,
            queued: Some(run_id),
            tool_results: Vec::new(),
        })
    }
}

/// Why a queued run could not start, as its failure says it.
fn cannot_start(e: &StartError) -> RunFailure {
    let message = match e {
        StartError::Agent(CatalogError::NotFound) => "The agent no longer exists.".to_owned(),
        StartError::Agent(_) => "The agent no longer compiles with these parameters.".to_owned(),
        StartError::Documents(m) | StartError::Resume(m) | StartError::ToolResults(m) => m.clone(),
        StartError::ContextWindow(over) => over.message(),
        StartError::Caller(refusal) => refusal.message.clone(),
        StartError::Session(m) => m.message(),
        StartError::Input(i) => i.message(),
        StartError::Store(_) => "The store could not load the run's agent or session.".to_owned(),
    };
    let class = match e {
        StartError::ContextWindow(_) => ErrorClass::ContextWindowExceeded,
        _ => ErrorClass::Internal,
    };
    RunFailure::new(class, message)
}

/// The newest run of the continuation chain `run_id` starts (`run_id` itself when nobody
/// continued it); `None` when `run_id` does not exist.
pub(crate) async fn latest_of_chain(
    runtime: &Runtime,
    tenant: &TenantId,
    run_id: RunId,
) -> Result<Option<RunRecord>, StoreError> {
    let store = &runtime.stores.runs;
    let Some(mut run) = store.get_run(tenant, run_id).await? else { return Ok(None) };
    for _ in 0..MAX_CHAIN {
        let Some(next) = run.continued_by_run_id else { break };
        match store.get_run(tenant, next).await? {
            Some(r) => run = r,
            None => break,
        }
    }
    Ok(Some(run))
}

impl QueuedRuns {
    /// Continues the queued run whose latest attempt is `latest`, when its executor went away:
    /// a run still `Running` whose heartbeat is older than one and a half heartbeat intervals
    /// (this job's earlier lease was lost, so its executor stopped) is closed `Orphaned` here;
    /// an `Orphaned` run nobody continued yet gets its continuation, executed now. `None` when
    /// there is nothing to continue (the run ended otherwise, or its executor is alive).
    async fn take_over(
        &self,
        tenant: &TenantId,
        queued: QueuedRun,
        mut latest: RunRecord,
        cancel: CancellationToken,
    ) -> Option<Result<Option<serde_json::Value>, crate::jobs::JobFailure>> {
        use crate::jobs::JobFailure;
        let runtime = &self.runtime;
        let transient = |e| Some(Err(JobFailure::store_unavailable(e)));
        if latest.status == RunStatus::Running && latest.yielded_at.is_some() {
            return self.go_on(tenant, queued, latest, cancel).await;
        }
        if latest.status == RunStatus::Running {
            let now = runtime.platform.clock.now();
            let every = runtime.settings.reconciliation.heartbeat;
            let quiet = chrono::Duration::from_std(every + every / 2).unwrap_or(chrono::Duration::seconds(45));
            let stale_before = now - quiet;
            if latest.heartbeat_at.unwrap_or(latest.started_at) >= stale_before {
                return None;
            }
            let last = match runtime.stores.runs.last_sequence(tenant, latest.id).await {
                Ok(n) => n,
                Err(e) => return transient(e),
            };
            match close_orphan(runtime, tenant, latest.id, latest.started_at, last, stale_before).await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return transient(e),
            }
            latest = match runtime.stores.runs.get_run(tenant, latest.id).await {
                Ok(Some(r)) => r,
                Ok(None) => return None,
                Err(e) => return transient(e),
            };
        }
        let orphaned = latest.error.as_ref().is_some_and(|f| f.error_class == ErrorClass::Orphaned);
        if latest.status != RunStatus::Failed || !orphaned || latest.continued_by_run_id.is_some() {
            return None;
        }
        let next = match continuation::open(runtime, tenant, &latest).await {
            Ok(Some(next)) => next,
            // Somebody continued it first: the next attempt follows the chain.
            Ok(None) => {
                return Some(Err(JobFailure::Transient {
                    code: "tracon.run.unfinished".into(),
                    message: "The run was continued by another attempt.".into(),
                    detail: format!("run {} has a continuation", latest.id),
                }));
            }
            Err(e) => return transient(e),
        };
        let now = runtime.platform.clock.now();
        let permanent =
            |message: &str| JobFailure::Permanent { code: "tracon.run.cannot-start".into(), message: message.into() };
        let request_budget = queued.budget.clone().map(Arc::new);
        let Some(request) = queued.into_request(tenant, next.id) else {
            let failure = RunFailure::new(ErrorClass::Internal, "The queued run is malformed.");
            close_unstarted(runtime, tenant, next.id, now, failure).await;
            return Some(Err(permanent("The queued run is malformed.")));
        };
        let mut prepared = match prepare(runtime, request, None).await {
            Ok(p) => p,
            Err(e) => {
                let failure = cannot_start(&e);
                close_unstarted(runtime, tenant, next.id, now, failure.clone()).await;
                return Some(Err(permanent(&failure.message)));
            }
        };
        prepared.budget = request_budget;
        // Left `Running` when the ledger cannot be read: reconciliation closes it, and the
        // next attempt continues from there.
        let continuation = match Continuation::read(runtime, tenant, &latest, &prepared.agent).await {
            Ok(c) => c,
            Err(e) => return transient(e),
        };
        tracing::warn!(
            run_id = %next.id,
            from = %latest.id,
            steps = continuation.steps,
            rerun = continuation.rerun.len(),
            blocked = continuation.blocked.is_some(),
            "continuing an interrupted run"
        );
        prepared.continuation = Some(continuation);
        prepared.deadline = soft_deadline(runtime);
        let outcome = execute(runtime, prepared, cancel, None).await;
        Some(attempt_result(next.id, &outcome))
    }

    /// Takes back a run that handed itself over at its soft deadline and goes on with it in
    /// place, from its ledger: the same run, its log numbered on. `None` when another attempt
    /// took it first.
    async fn go_on(
        &self,
        tenant: &TenantId,
        queued: QueuedRun,
        run: RunRecord,
        cancel: CancellationToken,
    ) -> Option<Result<Option<serde_json::Value>, crate::jobs::JobFailure>> {
        use crate::jobs::JobFailure;
        let runtime = &self.runtime;
        let transient = |e| Some(Err(JobFailure::store_unavailable(e)));
        let now = runtime.platform.clock.now();
        match runtime.stores.runs.resume_yielded(tenant, run.id, now).await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return transient(e),
        }
        let failed = |message: &str| {
            let failure = RunFailure::new(ErrorClass::Internal, message);
            let message = message.to_owned();
            async move {
                let last = runtime.stores.runs.last_sequence(tenant, run.id).await.unwrap_or(0);
                let stale_before = runtime.platform.clock.now() + chrono::Duration::seconds(1);
                let end = crate::runs::store::RunEnd::failed(runtime.platform.clock.now(), 0, failure.clone());
                let event = crate::events::RecordedEvent {
                    sequence: last + 1,
                    timestamp: runtime.platform.clock.now(),
                    event: RunEvent::RunFailed { error: failure },
                };
                if let Err(e) = runtime.stores.runs.close_stale(tenant, run.id, stale_before, &end, &[event]).await {
                    tracing::warn!(run_id = %run.id, error = ?e, "could not close a run that could not go on");
                }
                Some(Err(JobFailure::Permanent { code: "tracon.run.cannot-start".into(), message }))
            }
        };
        let request_budget = queued.budget.clone().map(Arc::new);
        let Some(request) = queued.into_request(tenant, run.id) else {
            return failed("The queued run is malformed.").await;
        };
        let mut prepared = match prepare(runtime, request, None).await {
            Ok(p) => p,
            Err(e) => return failed(&cannot_start(&e).message).await,
        };
        prepared.budget = request_budget;
        let (last_sequence, mut continuation) = match (
            runtime.stores.runs.last_sequence(tenant, run.id).await,
            Continuation::read(runtime, tenant, &run, &prepared.agent).await,
        ) {
            (Ok(last), Ok(c)) => (last, c),
            // Left running: reconciliation closes it, and continuation goes on from there.
            (Err(e), _) | (_, Err(e)) => return transient(e),
        };
        continuation.in_place = Some(InPlace { last_sequence, usage: run.usage, started_at: run.started_at });
        tracing::info!(run_id = %run.id, steps = continuation.steps, "going on with a run handed over at its soft deadline");
        prepared.continuation = Some(continuation);
        prepared.deadline = soft_deadline(runtime);
        if run.cancel_requested {
            cancel.cancel();
        }
        let outcome = execute(runtime, prepared, cancel, None).await;
        Some(attempt_result(run.id, &outcome))
    }
}

/// A queued run's job settles as its run ended: `Succeeded` for a run that completed (or
/// stopped for approval or input, its work handed on), `Failed` with the run's error class for
/// a failed one, `Canceled` for a cancelled one. A run that has not ended — an earlier attempt
/// started it and its process went away — is a transient failure: the job is tried again
/// later, by when reconciliation has closed the run.
pub(crate) fn job_result(
    run_id: RunId,
    status: RunStatus,
    failure: Option<&RunFailure>,
) -> Result<Option<serde_json::Value>, crate::jobs::JobFailure> {
    use crate::jobs::JobFailure;
    match status {
        RunStatus::Completed | RunStatus::AwaitingApproval | RunStatus::AwaitingInput => {
            Ok(Some(serde_json::json!({ "runId": run_id, "status": status })))
        }
        RunStatus::Failed => {
            let class = failure.map_or("internal", |f| f.error_class.error_type());
            Err(JobFailure::Permanent {
                code: format!("tracon.run.{class}"),
                message: format!("The run failed ({class})."),
            })
        }
        RunStatus::Canceled => Err(JobFailure::Canceled),
        RunStatus::Running | RunStatus::Queued => Err(JobFailure::Transient {
            code: "tracon.run.unfinished".into(),
            message: "An earlier attempt started the run and its process stopped; the run has not ended yet.".into(),
            detail: format!("run {run_id} is {status:?}"),
        }),
    }
}
