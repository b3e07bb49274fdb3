//! The one entry every run-starting surface calls once its run is admitted
//! ([`super::admission::admit`]): [`launch`] takes a description of the start ([`Start`]) and
//! runs it live (events as they happen), buffered (to its end, then the outcome), in the
//! background, or queued for a job consumer.
//!
//! The surfaces: the native run (`POST /api/agents/{name}/run`, with its in-band approval
//! decisions and client-tool answers), the OpenAI chat and Responses routes, approval
//! decisions through the mailbox, inbound triggers and schedules.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::events::RunEvent;
use crate::jobs::JobTransport;
use crate::names::{RunId, SessionId};
use crate::ports::new_id;
use crate::runs::execute::execute;
use crate::runs::input::check_run_input;
use crate::runs::outcome::{Accepted, RunOutcome};
pub use crate::runs::prepare::History;
use crate::runs::prepare::{Options, prepare_in};
use crate::runs::queued::enqueue;
use crate::runs::request::{RunRequest, StartError};
use crate::runtime::{RunQueue, Runtime};

/// Events buffered between a live run and a slow reader before the run waits.
pub const EVENT_BUFFER: usize = 64;

/// A run to start.
pub struct Start<'a> {
    /// Who runs which agent with what input (and, for a resumption, what was decided).
    pub request: RunRequest,
    pub delivery: Delivery<'a>,
    pub history: History,
    /// Text the caller adds after the agent's own instructions for this run (an OpenAI
    /// client's `system` messages or `instructions`).
    pub extra_instructions: Option<String>,
    /// What an OpenAI-compatible caller adds for this run: its tools, `tool_choice`, its
    /// output format ([`crate::runs::caller`]).
    pub caller: crate::runs::caller::CallerAdditions,
    /// The run's id, when the surface names something after the run before it starts (a
    /// stored response's session is its id); otherwise one is drawn.
    pub run_id: Option<RunId>,
    /// The limits of the call tree this run roots, when the surface sets its own (an external
    /// caller's fresh budget, [`crate::exposure::Exposure::limits`]); `None`: the
    /// installation's `Tracon:AgentGraph`. A queued run keeps them in its job.
    pub budget: Option<Arc<crate::runs::tree::AgentGraphSettings>>,
}

impl<'a> Start<'a> {
    /// A start in the request's own session (if any), with the agent's instructions as they are.
    pub fn new(request: RunRequest, delivery: Delivery<'a>) -> Self {
        Self {
            request,
            delivery,
            history: History::Session,
            extra_instructions: None,
            caller: crate::runs::caller::CallerAdditions::default(),
            run_id: None,
            budget: None,
        }
    }
}

/// How the surface takes the run.
pub enum Delivery<'a> {
    /// Each event as it happens ([`LiveRun`]); the run executes on the platform's spawner,
    /// and closing the receiver cancels it.
    Live,
    /// The run to its end, then its outcome (a JSON answer, a replayable response).
    Buffered,
    /// On the platform's spawner with nobody reading: a resumption decided through the
    /// mailbox, on a host whose background work outlives the response.
    Background,
    /// Accepted for a job consumer: a placeholder row and its job, woken through `transport`.
    Queued { transport: &'a dyn JobTransport, max_attempts: u32 },
}

impl<'a> From<&'a RunQueue> for Delivery<'a> {
    /// Queued through the host's run queue.
    fn from(queue: &'a RunQueue) -> Self {
        Delivery::Queued { transport: queue.transport.as_ref(), max_attempts: queue.max_attempts }
    }
}

/// What [`launch`] started.
pub enum Launched {
    Live(LiveRun),
    Finished(Box<RunOutcome>),
    /// Running in the background (`Delivery::Background`).
    Started(RunId),
    Queued(Accepted),
}

impl Launched {
    /// The run's id (every start has one; a queued run's is its placeholder row's).
    pub fn run_id(&self) -> RunId {
        match self {
            Launched::Live(live) => live.run_id,
            Launched::Finished(outcome) => outcome.run_id,
            Launched::Started(id) => *id,
            Launched::Queued(accepted) => accepted.run_id,
        }
    }
}

/// A run executing now, followed live.
pub struct LiveRun {
    pub run_id: RunId,
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// The session the request named, if any.
    pub session_id: Option<SessionId>,
    /// Every event as it happens, the terminal one last; dropping it cancels the run.
    pub events: mpsc::Receiver<RunEvent>,
    /// Cancels the run (the surface ties it to its response body: a caller that goes away
    /// cancels the run).
    pub cancel: CancellationToken,
    /// How the run ended, once it has.
    pub outcome: oneshot::Receiver<RunOutcome>,
}

/// A fresh run id, for a surface that needs it before [`launch`] (see [`Start::run_id`]).
pub fn new_run_id(runtime: &Runtime) -> RunId {
    RunId(new_id(runtime.platform.clock.as_ref()))
}

/// Starts an admitted run. Everything that can refuse it — an unknown agent, parameters or
/// documents that break a rule, a definition that no longer compiles, a session that moved
/// on, a store that cannot be reached — is refused here, before anything streams.
pub async fn launch(runtime: &Arc<Runtime>, start: Start<'_>) -> Result<Launched, StartError> {
    let Start { request, delivery, history, extra_instructions, caller, run_id, budget } = start;
    // A resumption carries the input its run started with, checked then.
    if request.resume.is_none() {
        check_run_input(&runtime.settings.limits, &request.message, request.culture.as_deref())
            .map_err(StartError::Input)?;
    }
    let here = match delivery {
        Delivery::Queued { transport, max_attempts } => {
            let accepted = enqueue(runtime, request, max_attempts, run_id, budget).await?;
            if let Err(e) = transport.wake(accepted.job_id).await {
                // The row is the truth: the consumer's poll (or the next tick) finds the job.
                tracing::warn!(job = %accepted.job_id, error = %e, "could not wake the job consumer");
            }
            return Ok(Launched::Queued(accepted));
        }
        Delivery::Live => Here::Live,
        Delivery::Buffered => Here::Buffered,
        Delivery::Background => Here::Background,
    };
    // A run someone waits for calls its model while its row is written (the row is there
    // before the surface gets the run). Its agent may come compiled from the catalog without
    // a read of the store; if a definition changed since, the row's guarded write refuses it,
    // and the run starts again from the store, its row written before the model is called.
    let overlap = matches!(here, Here::Live | Here::Buffered);
    if overlap {
        let again = (request.clone(), history.clone(), extra_instructions.clone(), caller.clone(), budget.clone());
        let tenant = request.tenant.clone();
        match start_here(runtime, here, request, history, extra_instructions, caller, run_id, budget, true).await {
            Err(StartError::Store(crate::error::StoreError::DefinitionsMoved)) => {
                runtime.catalog.moved(&tenant);
                let (request, history, extra_instructions, caller, budget) = again;
                start_here(runtime, here, request, history, extra_instructions, caller, run_id, budget, false).await
            }
            other => other,
        }
    } else {
        start_here(runtime, here, request, history, extra_instructions, caller, run_id, budget, false).await
    }
}

/// Prepares and starts a run that executes in this process, its row written while its first
/// model call opens (`overlap_row`) or before.
#[allow(clippy::too_many_arguments)]
async fn start_here(
    runtime: &Arc<Runtime>,
    here: Here,
    request: RunRequest,
    history: History,
    extra_instructions: Option<String>,
    caller: crate::runs::caller::CallerAdditions,
    run_id: Option<RunId>,
    budget: Option<Arc<crate::runs::tree::AgentGraphSettings>>,
    overlap_row: bool,
) -> Result<Launched, StartError> {
    let prepared = prepare_in(
        runtime,
        request,
        run_id,
        Options { extra_instructions, caller, history, budget, overlap_row, ..Options::default() },
    )
    .await?;
    let mut prepared = prepared;
    prepared.whole_answer = matches!(here, Here::Buffered);
    let run_id = prepared.run_id;
    let row = prepared.opening.clone();
    let (guard, cancel) = runtime.drain.enter(run_id);
    let span = tracing::info_span!("runs.execute", agent = %prepared.agent.name, run_id = %run_id);
    match here {
        Here::Buffered => {
            let (written, outcome) =
                futures::join!(row.wait(), execute(runtime, prepared, cancel, None).instrument(span));
            drop(guard);
            written.map_err(StartError::Store)?;
            Ok(Launched::Finished(Box::new(outcome)))
        }
        Here::Background => {
            let task_runtime = runtime.clone();
            runtime.platform.spawner.spawn(Box::pin(
                async move {
                    let _guard = guard;
                    execute(&task_runtime, prepared, cancel, None).await;
                }
                .instrument(span),
            ));
            Ok(Launched::Started(run_id))
        }
        Here::Live => {
            let (tx, events) = mpsc::channel(EVENT_BUFFER);
            let (done, outcome) = oneshot::channel();
            let live = LiveRun {
                run_id,
                started_at: prepared.started_at,
                session_id: prepared.request.session_id.clone(),
                events,
                cancel: cancel.clone(),
                outcome,
            };
            let task_runtime = runtime.clone();
            runtime.platform.spawner.spawn(Box::pin(
                async move {
                    let _guard = guard;
                    let outcome = execute(&task_runtime, prepared, cancel, Some(tx)).await;
                    let _ = done.send(outcome);
                }
                .instrument(span),
            ));
            // The run is the caller's once its row exists: the `run` frame, the headers and a
            // read of the run right after all find it. A store that cannot take the row
            // refuses the run here, as before anything streamed.
            if let Err(e) = row.wait().await {
                live.cancel.cancel();
                return Err(StartError::Store(e));
            }
            Ok(Launched::Live(live))
        }
    }
}

/// The deliveries that execute in this process.
#[derive(Clone, Copy)]
enum Here {
    Live,
    Buffered,
    Background,
}
