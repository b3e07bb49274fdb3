//! Running a workflow: a root run, one run per agent node (under the root, sharing its call
//! tree's budget), `Executor*` events in the root's log, and a checkpoint at every super-step
//! boundary. A run that stops to ask a person closes `AwaitingInput`; a resume (after a
//! crash, an answer, or on request) opens a **new** run from a checkpoint — nothing recorded
//! is rewritten, and no node the checkpoint holds as done runs again.
//!
//! One super-step is one node call (an agent's turn, a manager's decision, a function), or
//! for `Concurrent` the one step in which every agent answers the same input.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::checkpoints::{Checkpoint, CheckpointRef, ENVELOPE, InputRequest, NodeApproval, OLDEST_READ, Position};
use super::definition::{Participant, WorkflowDefinition, WorkflowKind, WorkflowNodeKind};
use super::functions::{FunctionCall, FunctionOutput, Role, WorkflowMessage};
use crate::attribution::Attribution;
use crate::engine::{CancelWatch, Emitter};
use crate::error::StoreError;
use crate::events::{ApprovalRequest, RunEvent};
use crate::failure::{ErrorClass, RunFailure};
use crate::identity::Caller;
use crate::model::Usage;
use crate::names::{AgentName, RunId, SessionId, TenantId};
use crate::ports::{millis_between, new_id};
use crate::pricing::{CostSnapshot, add_cost};
use crate::recorder::Recorder;
use crate::runs::launch::{EVENT_BUFFER, Launched, LiveRun};
use crate::runs::outcome::RunOutcome;
use crate::runs::prepare::{Options, PreparedRun, prepare_in};
use crate::runs::request::RunRequest;
use crate::runs::store::{RunEnd, RunRecord, RunStatus};
use crate::runs::tree::{Spent, Subtree, TreePlace};
use crate::runtime::Runtime;
use crate::tools::{ToolError, ToolOutput, ToolRegistration, tool_fn};

/// A workflow run to start.
pub struct WorkflowStart {
    pub tenant: TenantId,
    pub caller: Caller,
    pub attribution: Attribution,
    pub definition: WorkflowDefinition,
    /// The stored version run (none for a definition not from the store).
    pub version: Option<u32>,
    pub input: Input,
    /// A queued attempt's soft deadline: past it, the run hands itself over to a later
    /// attempt at its next super-step boundary.
    pub deadline: Option<chrono::DateTime<chrono::Utc>>,
}

/// What the run starts from.
pub enum Input {
    /// A new run with the caller's message.
    Message(String),
    /// A new run going on from a checkpoint of an earlier one.
    Resume(Resume),
    /// A queued run's first attempt: its row exists under `run_id` (the job started it).
    Queued { run_id: RunId, message: String },
    /// A queued run an earlier attempt handed over at its soft deadline: it goes on in place,
    /// from its own latest checkpoint (from `message` when it has none).
    GoOn { run_id: RunId, message: String },
}

/// Going on from `from`'s checkpoint `checkpoint` (its latest when `None`), answering its
/// pending request when `answer` is set.
pub struct Resume {
    pub from: RunId,
    pub checkpoint: Option<Uuid>,
    pub answer: Option<Answer>,
    /// Open the new run as `from`'s one continuation (a person's answer: answered once; a
    /// crashed run: continued once).
    pub once: bool,
    /// Where a run with no checkpoint starts over from (a crash before the first one);
    /// without it, no checkpoint is a [`WorkflowError::NoCheckpoint`].
    pub fallback: Option<String>,
    /// The agent nodes the checkpoint holds as stopped for approval, each going on as its
    /// own run's approval resumption (every one of their requests decided).
    pub approved: Vec<NodeResume>,
}

/// An agent node that stopped for a person's approval, going on: the approval resumption of
/// the run that stopped, in that run's session.
pub struct NodeResume {
    pub executor_id: String,
    pub resume: crate::runs::request::Resume,
    pub session_id: Option<SessionId>,
}

/// A person's answer to a workflow's request.
pub struct Answer {
    pub request_id: Uuid,
    pub text: String,
}

/// Why a workflow run could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// Nothing to resume from: the run has no checkpoints (not a workflow run, checkpointing
    /// was off, or retention removed them), or not the one named.
    #[error("{0}")]
    NoCheckpoint(String),
    /// The run is not waiting for this: no such pending request, or it was answered.
    #[error("{0}")]
    Conflict(String),
    /// A checkpoint this build cannot read.
    #[error("{0}")]
    Unreadable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A run whose input and position are resolved and whose row is written.
struct Prepared {
    run_id: RunId,
    started_at: chrono::DateTime<chrono::Utc>,
    start: WorkflowStart,
    conversation: Vec<WorkflowMessage>,
    position: Position,
    /// Where the conversation before this run is ([`Checkpoint::base`] of its first checkpoint).
    base: Option<CheckpointRef>,
    answer: Option<Answer>,
    /// Nodes that stopped for approval, going on.
    approved: Vec<NodeResume>,
    /// A run going on in place: its last event's sequence and the checkpoints it has.
    in_place: Option<(u64, u32)>,
}

/// Starts a workflow run: live (events as they happen) or buffered (to its end).
pub async fn start(runtime: &Arc<Runtime>, start: WorkflowStart, live: bool) -> Result<Launched, WorkflowError> {
    let prepared = prepare(runtime, start).await?;
    let run_id = prepared.run_id;
    let (guard, cancel) = runtime.drain.enter(run_id);
    if !live {
        let outcome = run(runtime.clone(), prepared, cancel, None).await;
        drop(guard);
        return Ok(Launched::Finished(Box::new(outcome)));
    }
    let (tx, events) = mpsc::channel(EVENT_BUFFER);
    let (done, outcome) = oneshot::channel();
    let started_at = prepared.started_at;
    let task_runtime = runtime.clone();
    let task_cancel = cancel.clone();
    runtime.platform.spawner.spawn(Box::pin(async move {
        let _guard = guard;
        let _ = done.send(run(task_runtime, prepared, task_cancel, Some(tx)).await);
    }));
    Ok(Launched::Live(LiveRun { run_id, started_at, session_id: None, events, cancel, outcome }))
}

/// Starts a workflow run in the background, on the platform's spawner: its id now, its end
/// in its record (a decision in the approval mailbox resumes a workflow this way).
pub async fn spawn(runtime: &Arc<Runtime>, start: WorkflowStart) -> Result<RunId, WorkflowError> {
    let prepared = prepare(runtime, start).await?;
    let run_id = prepared.run_id;
    let (guard, cancel) = runtime.drain.enter(run_id);
    let task_runtime = runtime.clone();
    runtime.platform.spawner.spawn(Box::pin(async move {
        let _guard = guard;
        run(task_runtime, prepared, cancel, None).await;
    }));
    Ok(run_id)
}

/// The most resumes one conversation is followed back through.
const MAX_BASES: usize = 64;

/// The conversation and position at `from`'s checkpoint `at` (its latest when `None`).
async fn load(
    runtime: &Runtime,
    tenant: &TenantId,
    from: RunId,
    at: Option<Uuid>,
) -> Result<(Vec<WorkflowMessage>, Position, CheckpointRef), WorkflowError> {
    let store = &runtime.stores.checkpoints;
    let mut chain = Vec::new();
    let (mut run, mut checkpoint) = (from, at);
    let mut found = None;
    loop {
        let list = store.list(tenant, run).await?;
        if list.is_empty() && checkpoint.is_none() && chain.len() < MAX_BASES {
            // A run continued after a crash that itself died before its first checkpoint
            // stands where it started: at its predecessor's latest checkpoint.
            let row = runtime.stores.runs.get_run(tenant, run).await?;
            if let Some(previous) = row.and_then(|r| r.continued_from_run_id) {
                chain.push(Vec::new());
                run = previous;
                continue;
            }
        }
        let index = match checkpoint {
            None if list.is_empty() => {
                return Err(WorkflowError::NoCheckpoint(format!("Run {run} has no checkpoints to resume from.")));
            }
            None => list.len() - 1,
            Some(id) => list.iter().position(|c| c.id == id).ok_or_else(|| {
                WorkflowError::NoCheckpoint(format!("Run {run} has no checkpoint {id} (it may have been removed)."))
            })?,
        };
        if let Some(c) = list.iter().find(|c| !(OLDEST_READ..=ENVELOPE).contains(&c.envelope)) {
            return Err(WorkflowError::Unreadable(format!(
                "Checkpoint {} was written in envelope generation {}; this build reads generations {OLDEST_READ} to {ENVELOPE}.",
                c.id, c.envelope
            )));
        }
        let base = list.first().and_then(|c| c.base);
        found.get_or_insert_with(|| {
            (list[index].position.clone(), CheckpointRef { run_id: run, checkpoint_id: list[index].id })
        });
        chain.push(list.into_iter().take(index + 1).flat_map(|c| c.messages).collect::<Vec<_>>());
        match base {
            Some(b) if chain.len() < MAX_BASES => (run, checkpoint) = (b.run_id, Some(b.checkpoint_id)),
            Some(_) => return Err(WorkflowError::Unreadable("The run was resumed too many times over.".into())),
            None => break,
        }
    }
    let mut messages: Vec<WorkflowMessage> = chain.into_iter().rev().flatten().collect();
    let (position, at) = found.ok_or_else(|| WorkflowError::NoCheckpoint(format!("Run {from} has no checkpoints.")))?;
    read_answers(runtime, tenant, &mut messages).await?;
    Ok((messages, position, at))
}

/// The most answers one read asks the run store for.
const ANSWERS_PER_READ: usize = 500;

/// Puts back the text of the agents' answers a checkpoint holds by reference (a message with a
/// `run_id` and no text): each is its run's recorded answer, read in one round trip per
/// [`ANSWERS_PER_READ`] of them. An answer no run recorded makes the conversation unreadable
/// rather than silently shorter.
async fn read_answers(
    runtime: &Runtime,
    tenant: &TenantId,
    messages: &mut [WorkflowMessage],
) -> Result<(), WorkflowError> {
    let referred: Vec<RunId> = messages.iter().filter(|m| m.text.is_empty()).filter_map(|m| m.run_id).collect();
    let mut answers = BTreeMap::new();
    for batch in referred.chunks(ANSWERS_PER_READ) {
        answers.extend(runtime.stores.runs.answers(tenant, batch).await?);
    }
    for m in messages.iter_mut().filter(|m| m.text.is_empty()) {
        let Some(run) = m.run_id else { continue };
        let answer = answers.get(&run).ok_or_else(|| {
            WorkflowError::Unreadable(format!(
                "The answer of node '{}' (run {run}) that a checkpoint refers to is not recorded.",
                m.executor_id.as_deref().unwrap_or_default()
            ))
        })?;
        m.text.clone_from(answer);
    }
    Ok(())
}

async fn prepare(runtime: &Arc<Runtime>, mut start: WorkflowStart) -> Result<Prepared, WorkflowError> {
    let clock = &runtime.platform.clock;
    let started_at = clock.now();
    let runs = &runtime.stores.runs;
    let fresh = |text: String| (vec![WorkflowMessage::user(text)], Position::default());
    let mut base = None;
    let mut answer = None;
    let mut approved = Vec::new();
    let mut continued_from = None;
    let mut once = false;
    let (conversation, position) = match std::mem::replace(&mut start.input, Input::Message(String::new())) {
        Input::Message(text) => fresh(text),
        Input::Queued { run_id: id, message } => {
            let prepared = fresh(message);
            return Ok(Prepared {
                run_id: id,
                started_at,
                start,
                conversation: prepared.0,
                position: prepared.1,
                base: None,
                answer: None,
                approved: Vec::new(),
                in_place: None,
            });
        }
        Input::GoOn { run_id: id, message } => {
            let row = runs
                .get_run(&start.tenant, id)
                .await?
                .ok_or_else(|| WorkflowError::NoCheckpoint(format!("Run {id} does not exist.")))?;
            let last = runs.last_sequence(&start.tenant, id).await?;
            let written = runtime.stores.checkpoints.list(&start.tenant, id).await?.len() as u32;
            // A run with no checkpoint of its own yet (a continuation handed over before its
            // first) still stands on its predecessor's: its first checkpoint names that base.
            let (conversation, position, base) = match load(runtime, &start.tenant, id, None).await {
                Ok((messages, position, at)) => (messages, position, (written == 0).then_some(at)),
                Err(WorkflowError::NoCheckpoint(_)) => {
                    let (conversation, position) = fresh(message);
                    (conversation, position, None)
                }
                Err(e) => return Err(e),
            };
            return Ok(Prepared {
                run_id: id,
                started_at: row.started_at,
                start,
                conversation,
                position,
                base,
                answer: None,
                approved: Vec::new(),
                in_place: Some((last, written)),
            });
        }
        Input::Resume(resume) => {
            continued_from = Some(resume.from);
            once = resume.once;
            match load(runtime, &start.tenant, resume.from, resume.checkpoint).await {
                Ok((messages, mut position, at)) => {
                    let stopped = std::mem::take(&mut position.approvals);
                    let unknown = resume.approved.iter().find(|n| {
                        !stopped.iter().any(|s| s.executor_id == n.executor_id && s.run_id == n.resume.from_run)
                    });
                    if let Some(n) = unknown {
                        return Err(WorkflowError::Conflict(format!(
                            "Run {} is not waiting for the approval of node '{}' (run {}).",
                            resume.from, n.executor_id, n.resume.from_run
                        )));
                    }
                    if let Some(given) = &resume.answer {
                        let pending = position.request.as_ref().map(|r| r.request_id);
                        if pending != Some(given.request_id) {
                            return Err(WorkflowError::Conflict(format!(
                                "Run {} is not waiting for an answer to request {}.",
                                resume.from, given.request_id
                            )));
                        }
                    }
                    base = Some(at);
                    answer = resume.answer;
                    approved = resume.approved;
                    (messages, position)
                }
                Err(WorkflowError::NoCheckpoint(_)) if resume.fallback.is_some() => {
                    fresh(resume.fallback.unwrap_or_default())
                }
                Err(e) => return Err(e),
            }
        }
    };
    let run_id = RunId(new_id(clock.as_ref()));
    let row = RunRecord {
        user_id: start.attribution.user_id.clone(),
        labels: start.attribution.labels.clone(),
        continued_from_run_id: continued_from,
        ..RunRecord::opened(run_id, &start.definition.name, start.version, RunStatus::Running, started_at)
    };
    match continued_from {
        // An answer (or a crashed run) goes on once: the first opens the run, a second finds
        // it taken.
        Some(from) if once => {
            if !runs.open_continuation(&start.tenant, from, &row).await? {
                return Err(WorkflowError::Conflict(format!(
                    "Run {from} was answered or continued already, or it has not ended."
                )));
            }
        }
        _ => runs.create_run(&start.tenant, &row, None).await?,
    }
    Ok(Prepared { run_id, started_at, start, conversation, position, base, answer, approved, in_place: None })
}

/// How a super-step left the run.
enum Step {
    Continue,
    /// Past the attempt's soft deadline at a super-step boundary: handed over.
    Yield,
    Finished(String),
    Ask(InputRequest),
    /// Agent nodes stopped for a person's approval of a tool call.
    AwaitApproval(Vec<Stopped>),
    Failed(RunFailure),
    Canceled(RunFailure),
}

/// An agent node whose run stopped for approval, and what it asks.
struct Stopped {
    executor_id: String,
    run_id: RunId,
    requests: Vec<ApprovalRequest>,
}

/// A node's answer.
struct Answered {
    text: String,
    run_id: RunId,
}

/// The executing run: its state and everything its nodes share.
struct Walk {
    runtime: Arc<Runtime>,
    run_id: RunId,
    tenant: TenantId,
    caller: Caller,
    attribution: Attribution,
    def: WorkflowDefinition,
    participants: Vec<Participant>,
    conversation: Vec<WorkflowMessage>,
    position: Position,
    /// How many of `conversation`'s messages a checkpoint holds already.
    saved: usize,
    /// Checkpoints this run wrote.
    written: u32,
    deadline: Option<chrono::DateTime<chrono::Utc>>,
    base: Option<CheckpointRef>,
    answer: Option<Answer>,
    /// Nodes that stopped for approval, each taken by its node's next start.
    approved: Mutex<Vec<NodeResume>>,
    emitter: Emitter,
    subtree: Subtree,
    cancel: CancellationToken,
    usage: Option<Usage>,
    cost: Option<CostSnapshot>,
}

/// Runs a prepared workflow run to its end.
fn run(
    runtime: Arc<Runtime>,
    prepared: Prepared,
    cancel: CancellationToken,
    tx: Option<mpsc::Sender<RunEvent>>,
) -> BoxFuture<'static, RunOutcome> {
    Box::pin(async move {
        let Prepared { run_id, started_at, start, conversation, position, base, answer, approved, in_place } = prepared;
        let clock = runtime.platform.clock.clone();
        let store = runtime.stores.runs.clone();
        let recorder = Recorder::new(
            start.tenant.clone(),
            run_id,
            store.clone(),
            clock.clone(),
            runtime.settings.recording.clone(),
            runtime.event_sinks.clone(),
        )
        .hearing(runtime.drain.clone());
        // A run going on in place appends to its own log.
        let recorder = Arc::new(match in_place {
            Some((last, _)) => recorder.continue_after(last),
            None => recorder,
        });
        let watch = CancelWatch::new(
            store,
            clock.clone(),
            start.tenant.clone(),
            run_id,
            runtime.settings.cancel_check_interval,
            runtime.drain.clone(),
        );
        let mut emitter = Emitter::new(tx, cancel.clone(), recorder.clone(), watch);
        let def = start.definition;
        if in_place.is_none() {
            emitter
                .emit(RunEvent::RunStarted {
                    run_id,
                    agent_name: def.name.clone(),
                    agent_version: start.version,
                    started_at,
                })
                .await;
            emitter
                .emit(RunEvent::WorkflowStarted {
                    workflow_name: def.name.clone(),
                    workflow_version: start.version,
                    kind: def.kind,
                    resumed_from: base,
                })
                .await;
        }
        let place = TreePlace::root(run_id, runtime.settings.agent_graph.clone(), started_at, Spent::default());
        let saved = if base.is_some() || in_place.is_some() { conversation.len() } else { 0 };
        let max_duration = def.max_duration_seconds.map(|s| Duration::from_secs(u64::from(s)));
        let mut walk = Walk {
            runtime: runtime.clone(),
            run_id,
            tenant: start.tenant,
            caller: start.caller,
            attribution: start.attribution,
            participants: def.participants(),
            def,
            conversation,
            position,
            saved,
            written: in_place.map_or(0, |(_, written)| written),
            deadline: start.deadline,
            base,
            answer,
            approved: Mutex::new(approved),
            emitter,
            subtree: Subtree { place, root_log: recorder.clone() },
            cancel: cancel.clone(),
            usage: None,
            cost: None,
        };
        let elapsed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tenant = walk.tenant.clone();
        let end = {
            // The root's heartbeat moves while its nodes run, so reconciliation can tell a
            // long node from a dead process.
            let steps = crate::runs::execute::with_heartbeat(walk.steps(), &runtime, &tenant, &recorder, &cancel);
            futures::pin_mut!(steps);
            match max_duration {
                None => steps.await,
                Some(limit) => {
                    tokio::select! {
                        biased;
                        end = &mut steps => end,
                        _ = clock.sleep(limit) => {
                            elapsed.store(true, std::sync::atomic::Ordering::SeqCst);
                            cancel.cancel();
                            steps.await
                        }
                    }
                }
            }
        };
        let end = match end {
            Step::Canceled(_) if elapsed.load(std::sync::atomic::Ordering::SeqCst) => Step::Canceled(RunFailure::new(
                ErrorClass::Canceled,
                format!(
                    "The workflow ran past its maxDurationSeconds ({} s) and was stopped.",
                    walk.def.max_duration_seconds.unwrap_or_default()
                ),
            )),
            other => other,
        };
        walk.settle(end, started_at, recorder).await
    })
}

/// The prompts a manager gets.
const GROUP_MANAGER: &str = "You manage a group conversation. Participants: {participants}.\n\n\
     Task and conversation so far:\n{transcript}\n\n\
     Answer with only the name of the participant who should speak next, or DONE when the task is complete.";
const PLAN: &str = "You lead a team. Members: {participants}.\n\nTask:\n{transcript}\n\n\
     Write a short step-by-step plan: which member does what.";
const PROGRESS: &str = "You lead a team. Members: {participants}.\n\n\
     Task, plan and work so far:\n{transcript}\n\n\
     Decide the next step. Answer with only a JSON object: \
     {\"done\": false, \"next\": \"<member>\", \"instruction\": \"<what they should do>\"} — \
     or, when the task is complete, {\"done\": true, \"answer\": \"<the final answer>\"}.";

/// A Magentic manager's progress answer.
#[derive(serde::Deserialize, Default)]
struct Progress {
    #[serde(default)]
    done: bool,
    next: Option<String>,
    instruction: Option<String>,
    answer: Option<String>,
}

/// Manager answers in a row that name no usable step before the manager plans again.
const STALLS_BEFORE_REPLAN: u32 = 2;

impl Walk {
    async fn steps(&mut self) -> Step {
        loop {
            if self.emitter.should_stop().await {
                return Step::Canceled(RunFailure::canceled());
            }
            if let Some(limit) = self.subtree.place.budget.exhausted(self.runtime.platform.clock.now()) {
                return Step::Failed(limit.failure());
            }
            let before = self.position.clone();
            let step = match self.def.kind {
                WorkflowKind::Sequential => self.sequential().await,
                WorkflowKind::Concurrent => self.concurrent().await,
                WorkflowKind::Handoff => self.handoff().await,
                WorkflowKind::GroupChat => self.group_chat().await,
                WorkflowKind::Magentic => self.magentic().await,
            };
            match step {
                Step::Continue => {
                    self.checkpoint().await;
                    // Handed over only where a later attempt can go on: from a checkpoint.
                    let past = self.deadline.is_some_and(|d| self.runtime.platform.clock.now() >= d);
                    if past && self.runtime.settings.workflow_checkpointing && self.saved == self.conversation.len() {
                        return Step::Yield;
                    }
                }
                Step::Ask(request) => {
                    if !self.runtime.settings.workflow_checkpointing {
                        return Step::Failed(RunFailure::new(
                            ErrorClass::InputUnavailable,
                            format!(
                                "The node '{}' asked a person for input, but checkpointing is off (Tracon:Workflows:EnableCheckpointing): there would be nothing to resume from.",
                                request.executor_id
                            ),
                        ));
                    }
                    self.position.request = Some(request.clone());
                    self.checkpoint().await;
                    return Step::Ask(request);
                }
                Step::AwaitApproval(stopped) => {
                    if !self.runtime.settings.workflow_checkpointing {
                        let nodes: Vec<&str> = stopped.iter().map(|s| s.executor_id.as_str()).collect();
                        return Step::Failed(RunFailure::new(
                            ErrorClass::InputUnavailable,
                            format!(
                                "The node '{}' needs a person's approval, but checkpointing is off (Tracon:Workflows:EnableCheckpointing): there would be nothing to resume from.",
                                nodes.join("', '")
                            ),
                        ));
                    }
                    // The step the nodes stopped in is taken again when they go on (a
                    // `Concurrent` step keeps the answers of the nodes that finished).
                    if self.def.kind != WorkflowKind::Concurrent {
                        self.position = before;
                    }
                    self.position.approvals = stopped
                        .iter()
                        .map(|s| NodeApproval { executor_id: s.executor_id.clone(), run_id: s.run_id })
                        .collect();
                    self.checkpoint().await;
                    return Step::AwaitApproval(stopped);
                }
                end => return end,
            }
        }
    }

    /// The caller's input: the conversation's first message.
    fn task(&self) -> &str {
        self.conversation.first().map_or("", |m| m.text.as_str())
    }

    /// The last message's text: a pipeline node's input, a chat's answer.
    fn last_text(&self) -> String {
        self.conversation.last().map(|m| m.text.clone()).unwrap_or_default()
    }

    /// The task, then every message since, each under its author.
    fn transcript(&self) -> String {
        let mut text = self.task().to_owned();
        let rest = self.conversation.iter().skip(1);
        for (i, m) in rest.enumerate() {
            if i == 0 {
                text.push_str("\n\nConversation so far:");
            }
            let who = m.executor_id.as_deref().unwrap_or("user");
            text.push_str(&format!("\n[{who}] {}", m.text));
        }
        text
    }

    fn participant_list(&self) -> String {
        self.participants.iter().map(|p| p.id.as_str()).collect::<Vec<_>>().join(", ")
    }

    fn prompt(&self, template: &str) -> String {
        template.replace("{participants}", &self.participant_list()).replace("{transcript}", &self.transcript())
    }

    fn push(&mut self, role: Role, executor_id: &str, run_id: Option<RunId>, text: String) {
        self.conversation.push(WorkflowMessage { role, executor_id: Some(executor_id.to_owned()), run_id, text });
    }

    fn next_step(&mut self) -> u32 {
        self.position.super_step += 1;
        self.position.super_step
    }

    async fn sequential(&mut self) -> Step {
        let Some(node) = self.participants.get(self.position.next_node).cloned() else {
            return Step::Finished(self.last_text());
        };
        let step = self.next_step();
        match node.kind {
            WorkflowNodeKind::Agent => {
                match self.agent(&node.id, &node.name, "Agent", self.last_text(), step, Vec::new()).await {
                    Ok(a) => self.push(Role::Assistant, &node.id, Some(a.run_id), a.text),
                    Err(end) => return end,
                }
            }
            WorkflowNodeKind::Function => match self.function(&node, step).await {
                Ok(FunctionOutput::Messages(texts)) => {
                    for text in texts {
                        self.push(Role::User, &node.id, None, text);
                    }
                }
                Ok(FunctionOutput::Ask { prompt }) => {
                    // The request keeps its id when the run resumes without an answer.
                    let request_id = match &self.position.request {
                        Some(r) if r.executor_id == node.id => r.request_id,
                        _ => new_id(self.runtime.platform.clock.as_ref()),
                    };
                    // The step is asked again when the answer comes.
                    self.position.super_step -= 1;
                    return Step::Ask(InputRequest { request_id, executor_id: node.id.clone(), prompt });
                }
                Err(end) => return end,
            },
        }
        self.position.request = None;
        self.position.next_node += 1;
        Step::Continue
    }

    async fn concurrent(&mut self) -> Step {
        if self.position.super_step == 0 {
            self.next_step();
            self.position.pending = self.participants.iter().map(|p| p.id.clone()).collect();
        }
        let step = self.position.super_step;
        let input = self.task().to_owned();
        let pending: Vec<Participant> =
            self.participants.iter().filter(|p| self.position.pending.contains(&p.id)).cloned().collect();
        if !pending.is_empty() {
            // Every agent at once; each answer is checkpointed as it comes, so a crash repeats
            // only the ones still out.
            let calls =
                pending.iter().map(|p| self.start_agent(&p.id, &p.name, "Agent", input.clone(), step, Vec::new()));
            let started = futures::future::join_all(calls).await;
            let mut running = futures::stream::FuturesUnordered::new();
            for (p, s) in pending.iter().zip(started) {
                match s {
                    Ok((child, invoked)) => {
                        self.emitter.send_live(invoked).await;
                        running.push(async move { (p, child.wait().await) });
                    }
                    Err(end) => {
                        self.cancel.cancel();
                        return end;
                    }
                }
            }
            let mut stopped = Vec::new();
            while let Some((p, waited)) = running.next().await {
                match self.finish_agent(&p.id, step, waited).await {
                    Ok(a) => {
                        self.push(Role::Assistant, &p.id, Some(a.run_id), a.text);
                        self.position.pending.retain(|id| id != &p.id);
                        self.checkpoint().await;
                    }
                    // The others go on answering; the step stops once they have.
                    Err(Step::AwaitApproval(mut s)) => stopped.append(&mut s),
                    Err(end) => {
                        // The others are stopped; their runs end `Canceled`.
                        self.cancel.cancel();
                        return end;
                    }
                }
            }
            if !stopped.is_empty() {
                return Step::AwaitApproval(stopped);
            }
        }
        // Merged in the participants' order, each under its name.
        let merged: Vec<String> = self
            .participants
            .iter()
            .filter_map(|p| {
                let m = self.conversation.iter().rev().find(|m| m.executor_id.as_deref() == Some(p.id.as_str()))?;
                Some(format!("[{}]\n{}", p.id, m.text))
            })
            .collect();
        Step::Finished(merged.join("\n\n"))
    }

    async fn handoff(&mut self) -> Step {
        let speaker = self.position.speaker.clone().unwrap_or_else(|| self.participants[0].id.clone());
        if self.position.turns >= self.def.iterations() {
            return Step::Failed(self.out_of_iterations());
        }
        let step = self.next_step();
        self.position.turns += 1;
        let target = Arc::new(Mutex::new(None::<String>));
        let tools = self
            .participants
            .iter()
            .filter(|p| p.id != speaker)
            .filter_map(|p| handoff_tool(&p.id, target.clone()))
            .collect();
        let name = self.participants.iter().find(|p| p.id == speaker).map_or(speaker.clone(), |p| p.name.clone());
        match self.agent(&speaker, &name, "Agent", self.transcript(), step, tools).await {
            Ok(a) => self.push(Role::Assistant, &speaker, Some(a.run_id), a.text),
            Err(end) => return end,
        }
        let handed = crate::sync::lock(&target).take();
        match handed {
            Some(next) => {
                self.position.speaker = Some(next);
                Step::Continue
            }
            None => {
                self.checkpoint().await;
                Step::Finished(self.last_text())
            }
        }
    }

    async fn group_chat(&mut self) -> Step {
        if self.position.turns >= self.def.iterations() {
            return Step::Finished(self.last_text());
        }
        let speaker = match (&self.def.manager_agent_name, self.position.speaker.clone()) {
            (Some(manager), None) => {
                let manager = manager.clone();
                let step = self.next_step();
                let prompt = self.prompt(GROUP_MANAGER);
                let decision = match self.agent(&manager, &manager, "Manager", prompt, step, Vec::new()).await {
                    Ok(a) => a.text,
                    Err(end) => return end,
                };
                match self.named_participant(&decision) {
                    Some(next) => {
                        self.position.speaker = Some(next);
                        return Step::Continue;
                    }
                    None => {
                        self.checkpoint().await;
                        return Step::Finished(self.last_text());
                    }
                }
            }
            (Some(_), Some(picked)) => picked,
            (None, _) => self.participants[self.position.turns as usize % self.participants.len()].id.clone(),
        };
        let step = self.next_step();
        self.position.turns += 1;
        match self.agent(&speaker, &speaker, "Agent", self.transcript(), step, Vec::new()).await {
            Ok(a) => self.push(Role::Assistant, &speaker, Some(a.run_id), a.text),
            Err(end) => return end,
        }
        self.position.speaker = None;
        Step::Continue
    }

    /// The participant a manager's answer names first (`None` for `DONE` or nobody).
    fn named_participant(&self, answer: &str) -> Option<String> {
        let words: Vec<String> = answer
            .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '#')))
            .map(|w| w.trim_matches('.').to_ascii_lowercase())
            .collect();
        words.iter().find_map(|w| self.participants.iter().find(|p| p.id == *w).map(|p| p.id.clone()))
    }

    async fn magentic(&mut self) -> Step {
        let Some(manager) = self.def.manager_agent_name.clone() else {
            return Step::Failed(RunFailure::new(ErrorClass::Configuration, "A Magentic workflow needs a manager."));
        };
        let planned = self.conversation.iter().any(|m| m.executor_id.as_deref() == Some(manager.as_str()));
        if !planned || self.position.stalls >= STALLS_BEFORE_REPLAN {
            let step = self.next_step();
            let prompt = self.prompt(PLAN);
            match self.agent(&manager, &manager, "Manager", prompt, step, Vec::new()).await {
                // Held as text: the plan is the manager's answer under a heading, not the answer.
                Ok(a) => self.push(Role::Assistant, &manager, None, format!("Plan:\n{}", a.text)),
                Err(end) => return end,
            }
            self.position.stalls = 0;
            return Step::Continue;
        }
        let Some(speaker) = self.position.speaker.clone() else {
            let step = self.next_step();
            let prompt = self.prompt(PROGRESS);
            let decision = match self.agent(&manager, &manager, "Manager", prompt, step, Vec::new()).await {
                Ok(a) => a.text,
                Err(end) => return end,
            };
            let progress = json_object(&decision).unwrap_or_default();
            if progress.done {
                self.checkpoint().await;
                return Step::Finished(progress.answer.unwrap_or_else(|| self.last_text()));
            }
            match progress.next.as_deref().and_then(|n| self.participants.iter().find(|p| p.id == n)) {
                Some(p) => {
                    self.position.speaker = Some(p.id.clone());
                    self.position.instruction = progress.instruction;
                }
                None => self.position.stalls += 1,
            }
            return Step::Continue;
        };
        if self.position.turns >= self.def.iterations() {
            return Step::Failed(self.out_of_iterations());
        }
        let step = self.next_step();
        self.position.turns += 1;
        let message = match self.position.instruction.take() {
            Some(instruction) => format!("{}\n\nYour step: {instruction}", self.transcript()),
            None => self.transcript(),
        };
        match self.agent(&speaker, &speaker, "Agent", message, step, Vec::new()).await {
            Ok(a) => self.push(Role::Assistant, &speaker, Some(a.run_id), a.text),
            Err(end) => return end,
        }
        self.position.speaker = None;
        Step::Continue
    }

    fn out_of_iterations(&self) -> RunFailure {
        RunFailure::new(
            ErrorClass::MaxIterationsReached,
            format!(
                "The workflow took its {} agent turns (maxIterations) without reaching an answer.",
                self.def.iterations()
            ),
        )
    }

    /// One agent node to its end.
    async fn agent(
        &mut self,
        executor_id: &str,
        agent: &str,
        kind: &str,
        message: String,
        step: u32,
        tools: Vec<Arc<ToolRegistration>>,
    ) -> Result<Answered, Step> {
        let (child, invoked) = self.start_agent(executor_id, agent, kind, message, step, tools).await?;
        self.emitter.send_live(invoked).await;
        let waited = child.wait().await;
        self.finish_agent(executor_id, step, waited).await
    }

    /// Opens an agent node's run (under the root) and starts it; its `ExecutorInvoked`, recorded
    /// in the root's log, for the caller to send to the live stream (nodes of one `Concurrent`
    /// step start together, so this cannot hold the emitter).
    async fn start_agent(
        &self,
        executor_id: &str,
        agent: &str,
        kind: &str,
        message: String,
        step: u32,
        tools: Vec<Arc<ToolRegistration>>,
    ) -> Result<(Child, RunEvent), Step> {
        let runtime = &self.runtime;
        let refused = |message: String| {
            Step::Failed(RunFailure::new(
                ErrorClass::WorkflowNodeFailed,
                format!("The node '{executor_id}' could not start: {message}"),
            ))
        };
        let name = AgentName::parse(agent).map_err(|e| refused(e.0))?;
        let compiled = runtime
            .catalog
            .compile(&self.tenant, &name, None, &BTreeMap::new())
            .await
            .map_err(|e| refused(format!("the agent '{agent}' {}", describe(&e))))?;
        let compiled = if tools.is_empty() { compiled } else { Arc::new(compiled.with_tools(tools)) };
        let mut request =
            RunRequest::new(self.tenant.clone(), name, message, self.caller.clone(), self.attribution.clone());
        let resumed = {
            let mut approved = crate::sync::lock(&self.approved);
            approved.iter().position(|n| n.executor_id == executor_id).map(|i| approved.remove(i))
        };
        if let Some(node) = resumed {
            // The node goes on where its run stopped: the conversation is that run's session.
            request.message = String::new();
            request.session_id = node.session_id;
            request.resume = Some(node.resume);
        }
        let mut place = self.subtree.place.child_of(self.run_id);
        // An agent node may stop for approval where the workflow can stop with it.
        place.may_wait = runtime.settings.workflow_checkpointing;
        let options = Options { place: Some(&place), agent: Some(compiled), ..Options::default() };
        let mut prepared = prepare_in(runtime, request, None, options)
            .await
            .map_err(|e| refused(format!("the agent '{agent}' could not be prepared ({e:?})")))?;
        prepared.tree = Some(Subtree { place, root_log: self.subtree.root_log.clone() });
        let run_id = prepared.run_id;
        let invoked = RunEvent::ExecutorInvoked {
            executor_id: executor_id.to_owned(),
            executor_kind: kind.to_owned(),
            super_step: step,
            run_id: Some(run_id),
        };
        self.record_invoked(&invoked).await;
        Ok((Child::spawn(runtime, prepared, self.cancel.child_token(), run_id), invoked))
    }

    /// Records how an agent node ended; its answer, or the run's end.
    async fn finish_agent(&mut self, executor_id: &str, step: u32, waited: Waited) -> Result<Answered, Step> {
        let (outcome, past_deadline) = match waited {
            Waited::Ended(o, past) => (*o, past),
            Waited::TimedOut(run_id, after) => {
                let error = RunFailure::new(
                    ErrorClass::Timeout,
                    format!("The node '{executor_id}' did not answer within its wait timeout ({} s).", after.as_secs()),
                );
                self.executor_failed(executor_id, step, Some(run_id), &error).await;
                return Err(Step::Failed(error));
            }
        };
        if let Some(u) = &outcome.usage {
            self.usage.get_or_insert_with(Usage::default).add(u);
        }
        self.cost = add_cost(self.cost.take(), outcome.cost.as_ref());
        match outcome.status {
            RunStatus::Completed => {
                self.completed(RunEvent::ExecutorCompleted {
                    executor_id: executor_id.to_owned(),
                    super_step: step,
                    run_id: Some(outcome.run_id),
                    text: outcome.text.clone(),
                    usage: outcome.usage,
                    attempts: None,
                })
                .await;
                Ok(Answered { text: outcome.text, run_id: outcome.run_id })
            }
            RunStatus::AwaitingApproval if !past_deadline => Err(Step::AwaitApproval(vec![Stopped {
                executor_id: executor_id.to_owned(),
                run_id: outcome.run_id,
                requests: outcome.approvals,
            }])),
            RunStatus::Canceled if !past_deadline => {
                let error = outcome.failure.unwrap_or_else(RunFailure::canceled);
                self.executor_failed(executor_id, step, Some(outcome.run_id), &error).await;
                Err(Step::Canceled(RunFailure::canceled()))
            }
            _ => {
                let error = match outcome.failure {
                    Some(f) if !past_deadline => f,
                    _ => RunFailure::new(
                        ErrorClass::Timeout,
                        format!("The node '{executor_id}' ran past its deadline and was stopped."),
                    ),
                };
                self.executor_failed(executor_id, step, Some(outcome.run_id), &error).await;
                Err(Step::Failed(RunFailure::new(
                    error.error_class,
                    format!("The node '{executor_id}' failed: {}", error.message),
                )))
            }
        }
    }

    /// A node's start, in the root's log: held for the write of the super-step's checkpoint when
    /// one follows (so a super-step costs the log one write; the node's own run row says it
    /// started meanwhile), written at once otherwise.
    async fn record_invoked(&self, event: &RunEvent) {
        let log = &self.subtree.root_log;
        if self.runtime.settings.workflow_checkpointing {
            log.record_held(event).await;
        } else {
            log.record(event).await;
        }
    }

    /// A node's completion: to the live stream now, to the log with the checkpoint that holds
    /// it (written right after, and flushed by its `WorkflowCheckpointed`), so the log never
    /// says a node completed that a crash would make run again.
    async fn completed(&mut self, event: RunEvent) {
        self.emitter.recorder().record_held(&event).await;
        self.emitter.send_live(event).await;
    }

    async fn executor_failed(&mut self, executor_id: &str, step: u32, run_id: Option<RunId>, error: &RunFailure) {
        self.emitter
            .emit(RunEvent::ExecutorFailed {
                executor_id: executor_id.to_owned(),
                super_step: step,
                run_id,
                error: error.clone(),
            })
            .await;
    }

    /// One function node, with its retry policy for transient failures (inside this one
    /// super-step).
    async fn function(&mut self, node: &Participant, step: u32) -> Result<FunctionOutput, Step> {
        let invoked = RunEvent::ExecutorInvoked {
            executor_id: node.id.clone(),
            executor_kind: "Function".into(),
            super_step: step,
            run_id: None,
        };
        self.record_invoked(&invoked).await;
        self.emitter.send_live(invoked).await;
        let Some(registered) = self.runtime.workflow_functions.get(&node.name).cloned() else {
            let error = RunFailure::new(
                ErrorClass::WorkflowNodeFailed,
                format!("No workflow function named '{}' is registered any more.", node.name),
            );
            self.executor_failed(&node.id, step, None, &error).await;
            return Err(Step::Failed(error));
        };
        let answer = match (&self.answer, &self.position.request) {
            (Some(a), Some(r)) if r.executor_id == node.id => Some(a.text.clone()),
            _ => None,
        };
        let max_attempts = registered.retry.map_or(1, |r| r.max_attempts);
        let mut attempt = 0;
        let result = loop {
            attempt += 1;
            let call = FunctionCall {
                tenant: &self.tenant,
                run_id: self.run_id,
                executor_id: &node.id,
                messages: &self.conversation,
                answer: answer.as_deref(),
                cancel: self.cancel.child_token(),
            };
            match registered.function.call(call).await {
                Err(e) if e.kind.is_transient() && attempt < max_attempts => {
                    let delay = registered.retry.map_or(Duration::ZERO, |r| r.delay(attempt));
                    tracing::info!(function = %node.name, attempt, error = %e.message, "retrying a workflow function");
                    self.runtime.platform.clock.sleep(delay).await;
                }
                other => break other,
            }
        };
        match result {
            Ok(output) => {
                if let FunctionOutput::Messages(texts) = &output {
                    self.answer = None;
                    self.completed(RunEvent::ExecutorCompleted {
                        executor_id: node.id.clone(),
                        super_step: step,
                        run_id: None,
                        text: texts.last().cloned().unwrap_or_default(),
                        usage: None,
                        attempts: Some(attempt),
                    })
                    .await;
                }
                Ok(output)
            }
            Err(e) => {
                // The function is the host's own code: its message is kept as written.
                let error = RunFailure::new(
                    ErrorClass::WorkflowNodeFailed,
                    format!("The function '{}' failed: {}", node.name, e.message),
                );
                self.executor_failed(&node.id, step, None, &error).await;
                Err(Step::Failed(error))
            }
        }
    }

    /// Writes a checkpoint of where the run stands (when checkpointing is on); a store that
    /// fails it does not stop the run — the next checkpoint carries the messages instead.
    async fn checkpoint(&mut self) {
        if !self.runtime.settings.workflow_checkpointing {
            return;
        }
        let clock = &self.runtime.platform.clock;
        let checkpoint = Checkpoint {
            id: new_id(clock.as_ref()),
            run_id: self.run_id,
            sequence: self.written + 1,
            envelope: ENVELOPE,
            created_at: clock.now(),
            position: self.position.clone(),
            messages: self.conversation[self.saved..].iter().map(WorkflowMessage::by_reference).collect(),
            base: self.base,
        };
        match self.runtime.stores.checkpoints.save(&self.tenant, &checkpoint).await {
            Ok(()) => {
                self.written += 1;
                self.saved = self.conversation.len();
                self.base = None;
                self.emitter
                    .emit(RunEvent::WorkflowCheckpointed {
                        checkpoint_id: checkpoint.id,
                        super_step: self.position.super_step,
                    })
                    .await;
            }
            Err(e) => tracing::warn!(run_id = %self.run_id, error = ?e, "could not write a workflow checkpoint"),
        }
    }

    /// Hands the run over to a later attempt (its soft deadline passed at a super-step
    /// boundary, after a checkpoint): it stays `Running`, marked yielded.
    async fn hand_over(self, mut outcome: RunOutcome, recorder: Arc<Recorder>) -> RunOutcome {
        let runtime = &self.runtime;
        let now = runtime.platform.clock.now();
        let pending = recorder.take_pending().await;
        match runtime.stores.runs.yield_run(&self.tenant, self.run_id, &pending, None, now).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(run_id = %self.run_id, "the workflow run was not running when it handed over"),
            Err(e) => tracing::warn!(run_id = %self.run_id, error = ?e, "could not hand the workflow run over"),
        }
        outcome.status = RunStatus::Running;
        outcome.event_writes = recorder.store_writes();
        outcome
    }

    /// Closes the root run: its row, its terminal event, its webhook.
    async fn settle(self, end: Step, started_at: chrono::DateTime<chrono::Utc>, recorder: Arc<Recorder>) -> RunOutcome {
        let runtime = &self.runtime;
        let mut outcome = RunOutcome {
            run_id: self.run_id,
            started_at,
            status: RunStatus::Completed,
            text: String::new(),
            usage: self.usage,
            cost: self.cost.clone(),
            failure: None,
            approvals: Vec::new(),
            model_provider: None,
            model: None,
            finish_reason: None,
            event_writes: 0,
            client_tool_calls: Vec::new(),
            session_id: None,
        };
        let mut requests = Vec::new();
        if matches!(end, Step::Yield) {
            return self.hand_over(outcome, recorder).await;
        }
        // (`steps` never ends on `Continue`; were it to, the answer so far is the answer.)
        let end = match end {
            Step::Continue => Step::Finished(self.last_text()),
            other => other,
        };
        let terminal = match end {
            Step::Finished(text) => {
                outcome.text = text.clone();
                RunEvent::RunCompleted {
                    text,
                    usage: self.usage,
                    cost: self.cost.clone(),
                    finish_reason: None,
                    client_tool_calls: Vec::new(),
                }
            }
            Step::Continue | Step::Yield => RunEvent::RunCompleted {
                text: String::new(),
                usage: self.usage,
                cost: self.cost.clone(),
                finish_reason: None,
                client_tool_calls: Vec::new(),
            },
            Step::Ask(request) => {
                outcome.status = RunStatus::AwaitingInput;
                requests.push(request);
                RunEvent::RunAwaitingInput { requests: requests.clone() }
            }
            Step::AwaitApproval(stopped) => {
                outcome.status = RunStatus::AwaitingApproval;
                outcome.approvals = stopped.into_iter().flat_map(|s| s.requests).collect();
                RunEvent::RunAwaitingApproval { requests: outcome.approvals.clone() }
            }
            Step::Failed(f) => {
                outcome.status = RunStatus::Failed;
                outcome.failure = Some(f.clone());
                RunEvent::RunFailed { error: f }
            }
            Step::Canceled(f) => {
                outcome.status = RunStatus::Canceled;
                outcome.failure = Some(f.clone());
                RunEvent::RunCanceled { error: f }
            }
        };
        let clock = &runtime.platform.clock;
        let ended_at = clock.now();
        // The nodes' own runs carry their usage and cost: the root's row counts none of its
        // own, so the tree's totals add up once.
        let run_end = RunEnd {
            status: outcome.status,
            ended_at,
            duration_ms: millis_between(started_at, ended_at),
            usage: None,
            cost: None,
            model_provider: None,
            model: None,
            error: outcome.failure.clone(),
        };
        let mut emitter = self.emitter;
        recorder.record_held(&terminal).await;
        let last = recorder.take_pending().await;
        if let Err(e) = runtime.stores.runs.finish_run(&self.tenant, self.run_id, &run_end, &last).await {
            tracing::warn!(run_id = %self.run_id, error = ?e, "could not record the end of the workflow run");
        }
        emitter.send_live(terminal).await;
        outcome.event_writes = recorder.store_writes();
        match outcome.status {
            // Each stopped node's run announced its own requests (`approval.pending`).
            RunStatus::AwaitingApproval => {}
            RunStatus::AwaitingInput => {
                let data = json!({
                    "runId": self.run_id,
                    "workflowName": self.def.name,
                    "requests": requests,
                });
                crate::webhooks::sources::publisher(runtime)
                    .publish_logged(&self.tenant, crate::webhooks::WORKFLOW_REQUEST_PENDING, data)
                    .await;
            }
            _ => crate::webhooks::sources::publish_run_end(runtime, &self.tenant, &self.def.name, &outcome).await,
        }
        outcome
    }
}

/// An agent node's run, executing on the platform's spawner.
struct Child {
    run_id: RunId,
    outcome: oneshot::Receiver<RunOutcome>,
    cancel: CancellationToken,
    clock: Arc<dyn crate::ports::Clock>,
    deadline: Duration,
    wait_timeout: Duration,
}

/// How waiting for a node's run ended.
enum Waited {
    /// It ended; `true` when only after its deadline asked it to stop.
    Ended(Box<RunOutcome>, bool),
    /// It did not end within the wait timeout (it is left to finish on its own).
    TimedOut(RunId, Duration),
}

impl Child {
    fn spawn(runtime: &Arc<Runtime>, prepared: PreparedRun, cancel: CancellationToken, run_id: RunId) -> Self {
        let (done, outcome) = oneshot::channel();
        let (guard, _) = runtime.drain.enter(run_id);
        let task_runtime = runtime.clone();
        let token = cancel.clone();
        runtime.platform.spawner.spawn(Box::pin(async move {
            let _guard = guard;
            let _ = done.send(crate::runs::execute::execute(&task_runtime, prepared, token, None).await);
        }));
        // The installation's two-layer wait limit of a callable agent's call (no override here).
        let limits = runtime.settings.sub_agents;
        Self {
            run_id,
            outcome,
            cancel,
            clock: runtime.platform.clock.clone(),
            deadline: limits.child_deadline,
            wait_timeout: limits.wait_timeout.max(limits.child_deadline),
        }
    }

    async fn wait(mut self) -> Waited {
        let failed = |run_id| RunOutcome {
            run_id,
            started_at: chrono::DateTime::<chrono::Utc>::MIN_UTC,
            status: RunStatus::Failed,
            text: String::new(),
            usage: None,
            cost: None,
            failure: Some(RunFailure::new(ErrorClass::Internal, "The node's run ended without an outcome.")),
            approvals: Vec::new(),
            model_provider: None,
            model: None,
            finish_reason: None,
            event_writes: 0,
            client_tool_calls: Vec::new(),
            session_id: None,
        };
        tokio::select! {
            biased;
            r = &mut self.outcome => return Waited::Ended(Box::new(r.unwrap_or_else(|_| failed(self.run_id))), false),
            _ = self.clock.sleep(self.deadline) => {}
        }
        self.cancel.cancel();
        let rest = self.wait_timeout.saturating_sub(self.deadline);
        tokio::select! {
            biased;
            r = &mut self.outcome => Waited::Ended(Box::new(r.unwrap_or_else(|_| failed(self.run_id))), true),
            _ = self.clock.sleep(rest) => Waited::TimedOut(self.run_id, self.wait_timeout),
        }
    }
}

/// The tool a `Handoff` agent calls to pass the floor to `target` (its name made a tool name).
fn handoff_tool(target: &str, slot: Arc<Mutex<Option<String>>>) -> Option<Arc<ToolRegistration>> {
    let tool_name: String =
        target.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let to = target.to_owned();
    let body = tool_fn(move |_args, _ctx| {
        let slot = slot.clone();
        let to = to.clone();
        async move {
            *crate::sync::lock(&slot) = Some(to.clone());
            Ok::<_, ToolError>(ToolOutput::from(format!("Handed off to {to}. End your turn now.")))
        }
    });
    let registration = ToolRegistration::new(
        &format!("handoff_to_{tool_name}"),
        &format!("Hand the conversation to '{target}' when they are better placed to answer."),
        json!({"type": "object", "properties": {"reason": {"type": "string"}}}),
        body,
    );
    match registration {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            tracing::warn!(target, error = %e, "no hand-off tool for this participant");
            None
        }
    }
}

/// A catalog refusal in words.
fn describe(e: &crate::catalog::CatalogError) -> &'static str {
    match e {
        crate::catalog::CatalogError::NotFound => "does not exist",
        _ => "does not compile",
    }
}

/// The first JSON object in a manager's answer (models wrap it in prose or fences).
fn json_object(text: &str) -> Option<Progress> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    serde_json::from_str(text.get(start..=end)?).ok()
}
