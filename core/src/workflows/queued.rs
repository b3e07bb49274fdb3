//! Queued workflow runs: [`enqueue`] accepts one for a worker (a placeholder root run and
//! its `workflow.run` job); [`QueuedWorkflows`] executes the jobs.
//!
//! A job attempt runs super-steps until the host's soft deadline
//! (`Tracon:RunContinuation:SoftDeadlineSeconds`), then hands the run over at a super-step
//! boundary — a checkpoint written, the run marked yielded, the job queued again at once — so
//! a workflow may run longer than any one invocation, and the next step may run on another
//! host. An attempt whose process died is noticed by the next one (its lease expired): the
//! stale run is closed `Orphaned` and continued as a **new** run from its latest checkpoint,
//! once, so no node a checkpoint holds as done runs again.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::definition::WorkflowDefinition;
use super::execute::{Input, Resume, WorkflowError, WorkflowStart, start};
use crate::attribution::Attribution;
use crate::definitions::StoredDefinition;
use crate::error::StoreError;
use crate::failure::ErrorClass;
use crate::identity::Caller;
use crate::jobs::{JobFailure, JobRecord, JobTransport, WORKFLOW_JOB};
use crate::names::{RunId, TenantId, WorkflowName};
use crate::ports::new_id;
use crate::runs::launch::Launched;
use crate::runs::outcome::Accepted;
use crate::runs::queued::{job_result, latest_of_chain, soft_deadline};
use crate::runs::reconcile::close_orphan;
use crate::runs::store::{RunRecord, RunStatus};
use crate::runtime::Runtime;

/// A queued workflow run's job payload.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedWorkflow {
    pub run_id: RunId,
    pub workflow: String,
    /// The version accepted: every attempt runs it.
    pub version: u32,
    pub message: String,
    pub caller: Caller,
    pub attribution: Attribution,
}

/// Accepts an admitted workflow run for a worker: its root run row (`Queued`), then its job,
/// then wakes a consumer through `transport`. The row is written first, so a worker never
/// finds a job without its run; a lost wake-up only delays the job until the next poll or tick.
#[allow(clippy::too_many_arguments)]
pub async fn enqueue(
    runtime: &Runtime,
    transport: &dyn JobTransport,
    tenant: &TenantId,
    caller: Caller,
    attribution: Attribution,
    workflow: &StoredDefinition<WorkflowDefinition>,
    message: String,
    max_attempts: u32,
) -> Result<Accepted, StoreError> {
    let clock = runtime.platform.clock.as_ref();
    let now = clock.now();
    let run_id = RunId(new_id(clock));
    let job_id = new_id(clock);
    let name = &workflow.definition.name;
    let row = RunRecord {
        user_id: attribution.user_id.clone(),
        labels: attribution.labels.clone(),
        ..RunRecord::opened(run_id, name, Some(workflow.version), RunStatus::Queued, now)
    };
    runtime.stores.runs.create_run(tenant, &row, None).await?;
    let payload =
        QueuedWorkflow { run_id, workflow: name.clone(), version: workflow.version, message, caller, attribution };
    let payload = serde_json::to_value(&payload).map_err(|e| StoreError::Internal { detail: e.to_string() })?;
    let mut job = JobRecord::queued(job_id, tenant.clone(), WORKFLOW_JOB, payload, max_attempts, now);
    job.run_id = Some(run_id);
    runtime.stores.jobs.enqueue(&job).await?;
    if let Err(e) = transport.wake(job_id).await {
        tracing::warn!(job = %job_id, error = %e, "could not wake the job consumer");
    }
    Ok(Accepted { run_id, job_id })
}

/// Executes `workflow.run` jobs (see the module).
pub struct QueuedWorkflows {
    pub runtime: Arc<Runtime>,
}

fn transient(e: StoreError) -> JobFailure {
    JobFailure::store_unavailable(e)
}

fn permanent(message: &str) -> JobFailure {
    JobFailure::Permanent { code: "tracon.workflow.cannot-start".into(), message: message.into() }
}

#[async_trait::async_trait]
impl crate::jobs::JobHandler for QueuedWorkflows {
    fn key(&self) -> &'static str {
        WORKFLOW_JOB
    }

    async fn handle(
        &self,
        job: &JobRecord,
        cancel: CancellationToken,
    ) -> Result<Option<serde_json::Value>, JobFailure> {
        let runtime = &self.runtime;
        let queued: QueuedWorkflow = serde_json::from_value(job.payload.clone())
            .map_err(|_| permanent("The queued workflow run's payload could not be read."))?;
        let tenant = job.tenant.clone();
        let name = WorkflowName::parse(&queued.workflow).map_err(|e| permanent(&e.0))?;
        let Some(stored) = runtime.stores.workflows.version(&tenant, &name, queued.version).await.map_err(transient)?
        else {
            return Err(permanent("The workflow (or the version accepted) no longer exists."));
        };
        let now = runtime.platform.clock.now();
        let input = match runtime.stores.runs.start_queued(&tenant, queued.run_id, now).await.map_err(transient)? {
            Some(cancel_asked) => {
                if cancel_asked {
                    cancel.cancel();
                }
                Input::Queued { run_id: queued.run_id, message: queued.message.clone() }
            }
            None => match self.taken(&tenant, &queued).await? {
                Taken::Input(input) => input,
                Taken::Ended(run) => return job_result(run.id, run.status, run.error.as_ref()),
            },
        };
        let workflow = WorkflowStart {
            tenant: tenant.clone(),
            caller: queued.caller,
            attribution: queued.attribution,
            definition: stored.definition,
            version: Some(stored.version),
            input,
            deadline: soft_deadline(runtime),
        };
        let outcome = match start(runtime, workflow, false).await {
            Ok(Launched::Finished(outcome)) => outcome,
            Ok(other) => return Err(permanent(&format!("run {} started detached", other.run_id()))),
            // Continued by another attempt first: the next attempt follows the chain.
            Err(WorkflowError::Conflict(m)) => {
                return Err(JobFailure::Transient {
                    code: "tracon.run.unfinished".into(),
                    message: "The run was continued by another attempt.".into(),
                    detail: m,
                });
            }
            Err(WorkflowError::Store(e)) => return Err(transient(e)),
            Err(e) => return Err(permanent(&e.to_string())),
        };
        if outcome.status == RunStatus::Running {
            return Err(JobFailure::HandedOver);
        }
        job_result(outcome.run_id, outcome.status, outcome.failure.as_ref())
    }
}

/// What an attempt after the first finds.
enum Taken {
    /// Something to go on with.
    Input(Input),
    /// The run (its latest continuation) ended: the job settles as it did.
    Ended(Box<RunRecord>),
}

impl QueuedWorkflows {
    /// The run an earlier attempt started: taken back in place after a hand-over, continued
    /// as a new run when its executor went away, or reported as it ended.
    async fn taken(&self, tenant: &TenantId, queued: &QueuedWorkflow) -> Result<Taken, JobFailure> {
        let runtime = &self.runtime;
        let Some(mut latest) = latest_of_chain(runtime, tenant, queued.run_id).await.map_err(transient)? else {
            return Err(permanent("The queued workflow run's record no longer exists."));
        };
        let now = runtime.platform.clock.now();
        if latest.status == RunStatus::Running && latest.yielded_at.is_some() {
            if runtime.stores.runs.resume_yielded(tenant, latest.id, now).await.map_err(transient)? {
                return Ok(Taken::Input(Input::GoOn { run_id: latest.id, message: queued.message.clone() }));
            }
            return Err(busy(latest.id));
        }
        if latest.status == RunStatus::Running {
            // Its executor went away when it has not been heard from for one and a half
            // heartbeats (this job's earlier lease was lost, so that attempt stopped).
            let every = runtime.settings.reconciliation.heartbeat;
            let quiet = chrono::Duration::from_std(every + every / 2).unwrap_or(chrono::Duration::seconds(45));
            let stale_before = now - quiet;
            if latest.heartbeat_at.unwrap_or(latest.started_at) >= stale_before {
                return Err(busy(latest.id));
            }
            let last = runtime.stores.runs.last_sequence(tenant, latest.id).await.map_err(transient)?;
            if !close_orphan(runtime, tenant, latest.id, latest.started_at, last, stale_before)
                .await
                .map_err(transient)?
            {
                return Err(busy(latest.id));
            }
            latest = runtime
                .stores
                .runs
                .get_run(tenant, latest.id)
                .await
                .map_err(transient)?
                .ok_or_else(|| busy(latest.id))?;
        }
        let orphaned = latest.error.as_ref().is_some_and(|f| f.error_class == ErrorClass::Orphaned);
        if latest.status == RunStatus::Failed && orphaned && latest.continued_by_run_id.is_none() {
            tracing::warn!(run_id = %latest.id, "continuing an interrupted workflow run from its latest checkpoint");
            return Ok(Taken::Input(Input::Resume(Resume {
                from: latest.id,
                checkpoint: None,
                answer: None,
                once: true,
                fallback: Some(queued.message.clone()),
                approved: Vec::new(),
            })));
        }
        Ok(Taken::Ended(Box::new(latest)))
    }
}

/// The run is held by another attempt (or was just taken): try again later.
fn busy(run: RunId) -> JobFailure {
    JobFailure::Transient {
        code: "tracon.run.unfinished".into(),
        message: "Another attempt holds the workflow run.".into(),
        detail: format!("run {run} is running elsewhere"),
    }
}
