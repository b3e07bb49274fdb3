//! [`execute`] owns a prepared run, in the steps of an [`Execution`] a continuation or a
//! workflow step can also take one by one: [`Execution::begin`] (the first events and the
//! call environment), [`Execution::turn_start`], [`Execution::turn`] (model calls and tool
//! rounds through the [`crate::engine`]), [`Execution::save_session`] and
//! [`Execution::settle`]. It saves the turn to the session (first save creates, later saves name the generation they read —
//! a lost race fails the run with `session_conflict`, nothing is overwritten), emits the
//! single terminal event and closes the row. Store failures while recording are logged and
//! the run goes on.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::approvals::{ApprovalRecord, ApprovalStatus};
use crate::compiler::CompiledAgent;
use crate::engine::{self, CancelWatch, Emitter, TurnEnd, TurnResult, TurnStart};
use crate::error::StoreError;
use crate::events::{ApprovalRequest, ClientToolCall, DocumentInfo, EventWriter, RunEvent};
use crate::failure::{ErrorClass, RunFailure};
use crate::model::{FinishReason, Message};
use crate::names::{RunId, SessionId, TenantId};
use crate::ports::millis_between;
use crate::quota::{RunConsumption, THRESHOLD_EVENT};
use crate::recorder::Recorder;
use crate::runs::children::{Invoker, Subtree};
use crate::runs::continuation::{self, Continuation};
use crate::runs::outcome::RunOutcome;
use crate::runs::prepare::{LoadedSession, PreparedRun};
use crate::runs::prepare::{prelude, user_message};
use crate::runs::request::{Resume, RunRequest, refusal};
use crate::runs::store::{RunEnd, RunStatus};
use crate::runs::tree::TreePlace;
use crate::runtime::Runtime;
use crate::sessions::SessionWrite;
use crate::tools::pipeline::{CallEnv, Ledger};

/// Runs a prepared run to its end. `events` receives every event as it happens (the live
/// stream); closing it cancels the run, as does `cancel`.
pub async fn execute(
    runtime: &Arc<Runtime>,
    prepared: PreparedRun,
    cancel: CancellationToken,
    events: Option<mpsc::Sender<RunEvent>>,
) -> RunOutcome {
    let mut run = Execution::begin(runtime, prepared, cancel, events).await;
    let start = run.turn_start().await;
    let turn = run.turn(start).await;
    // The row was written while the model was called ([`crate::runs::opening`]); a run whose
    // row could not be written was refused already and writes nothing.
    if let Err(e) = run.recorder.row().wait().await {
        return run.abandon(turn, e);
    }
    let end = run.save_session(&turn).await;
    run.settle(turn, end).await
}

/// [`execute`] for a child run, as the tree's invoker starts it.
fn run_child(
    runtime: Arc<Runtime>,
    prepared: PreparedRun,
    cancel: CancellationToken,
) -> BoxFuture<'static, RunOutcome> {
    Box::pin(async move { execute(&runtime, prepared, cancel, None).await })
}

/// A run between its first event and its end: what each step of [`execute`] shares.
pub struct Execution<'r> {
    runtime: &'r Arc<Runtime>,
    run_id: RunId,
    agent: Arc<CompiledAgent>,
    request: RunRequest,
    started_at: chrono::DateTime<chrono::Utc>,
    /// The conversation the turn starts from (taken out of the session, or supplied).
    history: Vec<Message>,
    /// The session the turn is saved to, once it has one.
    session: Option<LoadedSession>,
    /// Where the session's save starts (see [`Execution::begin`]).
    save_from: Option<usize>,
    /// The caller keeps the conversation (it sent its history along).
    caller_keeps_history: bool,
    client_results: Vec<Message>,
    /// Where the interrupted run this one continues left off.
    continuation: Option<Continuation>,
    /// Harness loop iterations the runs this one continues completed: each left its feedback
    /// in the ledger, so the loop goes on counting from there.
    iterations_before: u32,
    recorder: Arc<Recorder>,
    emitter: Emitter,
    env: CallEnv,
}

/// What a child run says when it would have to wait for someone (a workflow's node `may_wait`
/// for an approval).
fn cannot_wait(end: &TurnEnd, may_wait: bool) -> Option<RunFailure> {
    let why = match end {
        TurnEnd::AwaitingApproval(_) if may_wait => return None,
        TurnEnd::AwaitingApproval(requests) => {
            let tools: Vec<&str> = requests.iter().map(|r| r.tool_name.as_str()).collect();
            format!(
                "It needed a person's approval for {}; an agent called by another agent cannot wait for one.",
                tools.join(", ")
            )
        }
        TurnEnd::ClientTools(calls) => {
            let tools: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            format!(
                "It called client-side tools ({}); an agent called by another agent has no client to answer them.",
                tools.join(", ")
            )
        }
        _ => return None,
    };
    Some(RunFailure::new(ErrorClass::ChildCannotWait, why))
}

impl<'r> Execution<'r> {
    /// The run's first events (`RunStarted`, the attached documents) and everything its calls
    /// share: the recorder, the emitter with its cancel watch, the tool call environment.
    pub async fn begin(
        runtime: &'r Arc<Runtime>,
        prepared: PreparedRun,
        cancel: CancellationToken,
        events: Option<mpsc::Sender<RunEvent>>,
    ) -> Self {
        let PreparedRun {
            run_id,
            agent,
            request,
            session,
            started_at,
            supplied_history,
            client_results,
            continuation,
            deadline,
            tree,
            replay,
            budget,
            opening,
            whole_answer,
        } = prepared;
        let in_place = continuation.as_ref().and_then(|c| c.in_place.clone());
        let started_at = in_place.as_ref().map_or(started_at, |p| p.started_at);
        let caller_keeps_history = supplied_history.is_some();
        let clock = runtime.platform.clock.clone();
        let tenant = request.tenant.clone();
        let store = runtime.stores.runs.clone();
        let recording = &runtime.settings.recording;
        let recorder = Recorder::new(
            tenant.clone(),
            run_id,
            store.clone(),
            clock.clone(),
            recording.clone(),
            runtime.event_sinks.clone(),
        )
        .hearing(runtime.drain.clone())
        .opening(opening);
        let recorder = Arc::new(match &in_place {
            Some(p) => recorder.continue_after(p.last_sequence),
            None => recorder,
        });
        let watch = CancelWatch::new(
            store,
            clock,
            tenant.clone(),
            run_id,
            runtime.settings.cancel_check_interval,
            runtime.drain.clone(),
        );
        let mut emitter = Emitter::new(events, cancel.clone(), recorder.clone(), watch);
        // A run going on in place after a hand-over has its first events already.
        if in_place.is_none() {
            emitter
                .emit(RunEvent::RunStarted {
                    run_id,
                    agent_name: agent.name.clone(),
                    agent_version: agent.version,
                    started_at,
                })
                .await;
        }
        if !request.documents.is_empty() && in_place.is_none() {
            let documents = request
                .documents
                .iter()
                .map(|d| DocumentInfo { name: d.name.clone(), size_bytes: d.content.len() as u64 })
                .collect();
            emitter.emit(RunEvent::DocumentsAttached { documents }).await;
        }
        // A root that goes on from others (a hand-over, a continuation) counts what their trees
        // spent, since the first of them started.
        let (tree_started_at, spent) =
            continuation.as_ref().map_or((started_at, Default::default()), |c| (c.tree_started_at, c.tree_spent));
        let subtree = tree.unwrap_or_else(|| Subtree {
            place: TreePlace::root(
                run_id,
                budget.unwrap_or_else(|| runtime.settings.agent_graph.clone()),
                tree_started_at,
                spent,
            ),
            root_log: recorder.clone(),
        });
        let children = (!agent.definition.callable_agent_names.is_empty()).then(|| {
            let invoker = Invoker::new(
                runtime.clone(),
                subtree.clone(),
                run_id,
                request.attribution.clone(),
                agent.definition.sub_agents.as_ref(),
                run_child,
            );
            Arc::new(invoker) as Arc<dyn crate::tools::agents::ChildRuns>
        });
        let children = crate::tools::agents::Children(children);
        let decided = request.resume.iter().flat_map(|r| &r.decided);
        let env = CallEnv {
            tenant,
            run_id,
            agent: agent.name.clone(),
            caller: request.caller.clone(),
            cancel,
            platform: runtime.platform.clone(),
            authorizer: runtime.tool_authorizer.clone(),
            validator: runtime.tool_validator.clone(),
            default_timeout: runtime.settings.default_tool_timeout,
            default_max_output_bytes: runtime.settings.default_max_output_bytes,
            approved_call_ids: decided
                .clone()
                .filter(|d| d.status == ApprovalStatus::Approved)
                .map(|d| d.call_id.clone())
                .collect(),
            denied_calls: decided
                .filter(|d| d.status != ApprovalStatus::Approved)
                .map(|d| (d.call_id.clone(), refusal(d.reason.as_deref())))
                .collect(),
            gatekeeper: runtime.gatekeeper.clone(),
            events: if recording.enabled { EventWriter::new(recorder.clone()) } else { EventWriter::none() },
            ledger: Ledger::new(
                continuation.as_ref().map_or(run_id, |c| c.origin),
                recording.enabled,
                continuation.as_ref().map_or(0, |c| c.steps),
            ),
            deadline,
            tree: subtree.place,
            children,
            replay,
            whole_answer,
        };
        // Where the session's save starts: a session read at a generation gets what this turn
        // adds; a session this run creates gets the whole conversation, so one seeded with
        // another session's history (`/v1/responses` chaining with `previous_response_id`) is
        // a new record that keeps it — a different id than the one read, so no generation
        // applies.
        let save_from = session.as_ref().map(|s| if s.version.is_some() { s.history.len() } else { 0 });
        let (history, session) = match session {
            Some(mut s) => (std::mem::take(&mut s.history), Some(s)),
            None => (supplied_history.unwrap_or_default(), None),
        };
        Self {
            runtime,
            run_id,
            agent,
            request,
            started_at,
            history,
            session,
            save_from,
            caller_keeps_history,
            client_results,
            continuation,
            iterations_before: 0,
            recorder,
            emitter,
            env,
        }
    }

    /// How the turn begins: a resumption after decisions, a continuation with client-side
    /// results, or a new user message (after closing calls an earlier turn left open).
    pub async fn turn_start(&mut self) -> TurnStart {
        if let Some(resume) = &self.request.resume {
            self.emitter.emit(resumed_event(resume)).await;
            return TurnStart::Resume;
        }
        if !self.client_results.is_empty() {
            return TurnStart::Continue { results: std::mem::take(&mut self.client_results) };
        }
        // An OpenAI client's history that ends with its tool results: the model goes on.
        if self.request.message.is_empty() && matches!(self.history.last(), Some(Message::Tool { .. })) {
            return TurnStart::Continue { results: Vec::new() };
        }
        let prelude = prelude(&self.agent, &self.history);
        let message = user_message(&self.request.message, &self.request.documents);
        if let Some(continuation) = self.continuation.as_mut() {
            // The interrupted run's turn as its ledger recorded it; the model goes on from
            // there, after the calls of its last step that did not end.
            self.emitter.emit(continuation.event()).await;
            if self.session.is_none() {
                self.save_from = Some(self.history.len());
            }
            self.history.extend(prelude);
            self.history.push(message);
            // After the request's own message, a user message in the ledger is a loop's feedback.
            self.iterations_before =
                continuation.replayed.iter().filter(|m| matches!(m, Message::User { .. })).count() as u32;
            self.history.append(&mut continuation.replayed);
            return if engine::open_calls(&self.history).is_empty() {
                TurnStart::Continue { results: Vec::new() }
            } else {
                TurnStart::Resume
            };
        }
        TurnStart::User { prelude, message }
    }

    /// The turn through the engine — model calls and tool rounds until an answer, a stop, a
    /// failure or a cancellation — with the run's heartbeat moving meanwhile.
    pub async fn turn(&mut self, start: TurnStart) -> TurnResult {
        let history = std::mem::take(&mut self.history);
        if let Some(failure) = self.continuation.as_mut().and_then(|c| c.blocked.take()) {
            // A call with an unknown outcome may not run twice: nothing runs.
            return TurnResult {
                end: TurnEnd::Failed(failure),
                new_from: history.len(),
                messages: history,
                usage: None,
                model: None,
                called: false,
                text: String::new(),
                finish: None,
                route: Default::default(),
            };
        }
        let mut turn = self.one_turn(history, start).await;
        if let Some(settings) = self.agent.definition.harness.as_ref().and_then(|h| h.r#loop.clone()) {
            turn = self.iterate(&settings, turn).await;
        }
        if let Some(check) = self.agent.structured.clone() {
            turn = self.hold_to_format(&check, turn).await;
        }
        if !self.env.tree.is_root()
            && let Some(failure) = cannot_wait(&turn.end, self.env.tree.may_wait)
        {
            turn.end = TurnEnd::Failed(failure);
        }
        turn
    }

    async fn one_turn(&mut self, history: Vec<Message>, start: TurnStart) -> TurnResult {
        let turn = engine::run_turn(self.runtime, &self.agent, &self.env, history, start, &mut self.emitter);
        with_heartbeat(turn, self.runtime, &self.request.tenant, &self.recorder, &self.env.cancel).await
    }

    /// The harness loop ([`crate::harness`]): while the turn answered and iterations are
    /// left, the criteria are evaluated in order; the first that asks for more sends its
    /// feedback as the next iteration's message. The answer and the feedback go to the step
    /// ledger first, so a continuation after a crash goes on from the last iteration.
    async fn iterate(&mut self, settings: &crate::definition::LoopSettings, mut turn: TurnResult) -> TurnResult {
        let max = settings.max_iterations();
        let loops = self.runtime.catalog.loops().clone();
        let mut iteration = 1 + self.iterations_before;
        while iteration < max && matches!(turn.end, TurnEnd::Answered) {
            let context = crate::harness::LoopContext {
                tenant: &self.request.tenant,
                run_id: self.run_id,
                iteration,
                last_text: &turn.text,
                messages: &turn.messages,
                runs: &self.runtime.stores.runs,
            };
            let (mut asked, mut failed) = (None, None);
            for criterion in &settings.criteria {
                match loops.evaluate(criterion, &context).await {
                    Ok(crate::harness::LoopEvaluation::Stop) => {}
                    Ok(crate::harness::LoopEvaluation::Continue(feedback)) => {
                        asked = Some((criterion.kind.clone(), feedback));
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(run_id = %self.run_id, criterion = %criterion.kind, error = %e, "a loop criterion failed to evaluate; the loop stops");
                        failed = Some(criterion.kind.clone());
                        break;
                    }
                }
            }
            let continued = asked.is_some();
            self.emitter
                .emit(RunEvent::LoopIterationCompleted {
                    iteration,
                    continued,
                    criterion: asked.as_ref().map(|(k, _)| k.clone()).or(failed.clone()),
                    failed: failed.is_some(),
                    ceiling_reached: continued && iteration + 1 == max,
                })
                .await;
            let Some((_, feedback)) = asked else { break };
            let feedback = Message::user(feedback.as_deref().unwrap_or(crate::harness::DEFAULT_FEEDBACK));
            turn = self.follow_up(turn, feedback).await;
            iteration += 1;
        }
        turn
    }

    /// Holds an answered turn to the binding's JSON `responseFormat` ([`crate::structured`]):
    /// an answer that holds becomes the run's answer (the JSON alone); one that does not is
    /// recorded as `ResponseRejected` and, while repair turns are left and nobody is reading
    /// the answer as it streams, sent back to the model with the reasons; otherwise the run
    /// fails `structured_response_rejected`.
    async fn hold_to_format(&mut self, check: &crate::structured::StructuredCheck, mut turn: TurnResult) -> TurnResult {
        let repairs =
            if self.emitter.is_live() { 0 } else { self.agent.definition.model.max_repair_attempts.unwrap_or(0) };
        let host = self.runtime.response_validator.clone();
        let mut attempt = 0;
        while matches!(turn.end, TurnEnd::Answered) {
            let problems = match check.check(&self.agent.name, &turn.text, host.as_ref()) {
                crate::structured::Checked::Holds(answer) => {
                    turn.text = answer;
                    break;
                }
                crate::structured::Checked::Rejected(problems) => problems,
            };
            attempt += 1;
            let repairing = attempt <= repairs;
            self.emitter.emit(RunEvent::ResponseRejected { attempt, problems: problems.clone(), repairing }).await;
            if !repairing {
                // The problems can quote the answer: they stay in the run's log.
                let repaired = match attempt - 1 {
                    0 => String::new(),
                    1 => " after 1 repair turn".to_owned(),
                    n => format!(" after {n} repair turns"),
                };
                let failure = RunFailure::new(
                    ErrorClass::StructuredResponseRejected,
                    format!(
                        "The model's answer is not {}{repaired}; the run's response.rejected events say why.",
                        check.wanted()
                    ),
                );
                turn.end = TurnEnd::Failed(failure);
                // A refused answer is never the run's answer (the log keeps what the model said).
                turn.text.clear();
                break;
            }
            turn = self.follow_up(turn, Message::user(check.repair_prompt(&problems))).await;
        }
        turn
    }

    /// One more turn of the same run, `message` after the answer so far (a loop's feedback, a
    /// repair): both go to the step ledger first, and the new turn's tallies add to the old.
    async fn follow_up(&mut self, mut turn: TurnResult, message: Message) -> TurnResult {
        self.record_follow_up(&turn, &message).await;
        let (new_from, usage, called, model) = (turn.new_from, turn.usage, turn.called, turn.model.clone());
        let route = std::mem::take(&mut turn.route);
        let start = TurnStart::User { prelude: Vec::new(), message };
        let mut next = self.one_turn(std::mem::take(&mut turn.messages), start).await;
        next.new_from = new_from;
        if let Some(earlier) = usage {
            next.usage.get_or_insert_with(Default::default).add(&earlier);
        }
        next.called |= called;
        // The run names the model of its last call: the later turn's when it made one.
        if next.route.last_provider.is_none() {
            next.model = model;
        }
        next.route = route.then(std::mem::take(&mut next.route));
        next
    }

    /// An answer and the message that follows it (a loop's feedback, a repair), as two ledger
    /// steps.
    async fn record_follow_up(&self, turn: &TurnResult, feedback: &Message) {
        let ledger = &self.env.ledger;
        if !ledger.enabled {
            return;
        }
        let runs = &self.runtime.stores.runs;
        let answer = turn.messages.last().filter(|m| matches!(m, Message::Assistant { .. }));
        for message in answer.into_iter().chain(std::iter::once(feedback)) {
            let now = self.runtime.platform.clock.now();
            let step =
                crate::runs::store::ModelStep { step: ledger.next_step(), message: message.clone(), recorded_at: now };
            if let Err(e) = runs.begin_step(&self.request.tenant, self.run_id, Some(&step), &[]).await {
                tracing::warn!(run_id = %self.run_id, error = ?e, "could not write a loop iteration to the step ledger");
            }
        }
    }

    /// Saves the turn to its session; a lost race fails the run rather than overwrite. A run
    /// without a session that stops (approval; client-side calls the caller does not keep)
    /// gets one named after the run: the conversation is what the next request continues.
    /// Returns how the run ends.
    pub async fn save_session(&mut self, turn: &TurnResult) -> TurnEnd {
        let end = turn.end.clone();
        let needs_session = match end {
            TurnEnd::AwaitingApproval(_) => true,
            TurnEnd::ClientTools(_) => !self.caller_keeps_history,
            _ => false,
        };
        if self.session.is_none() && needs_session {
            self.session = SessionId::parse(&self.run_id.to_string()).ok().map(|id| LoadedSession {
                id,
                version: None,
                history: Vec::new(),
            });
        }
        let Some(session) = &self.session else { return end };
        if !matches!(end, TurnEnd::Answered | TurnEnd::AwaitingApproval(_) | TurnEnd::ClientTools(_)) {
            return end;
        }
        let write = SessionWrite {
            agent_name: self.agent.name.clone(),
            run_id: Some(self.run_id),
            messages: turn
                .messages
                .get(self.save_from.unwrap_or(turn.new_from)..)
                .map(<[Message]>::to_vec)
                .unwrap_or_default(),
            owner_user_id: self.request.attribution.user_id.clone(),
            now: self.runtime.platform.clock.now(),
        };
        let (sessions, tenant) = (&self.runtime.stores.sessions, &self.request.tenant);
        let saved = match session.version {
            None => sessions.try_create(tenant, session.id.as_str(), &write).await,
            Some(v) => sessions.try_append(tenant, session.id.as_str(), v, &write).await,
        };
        match saved {
            Ok(_) => end,
            Err(StoreError::Conflict(_) | StoreError::NotFound) => TurnEnd::Failed(RunFailure::new(
                ErrorClass::SessionConflict,
                "Another turn saved this session first; the conversation moved on. Retry the turn.",
            )),
            Err(e) => TurnEnd::Failed(RunFailure::foreign("SessionStoreError", &format!("{e:?}"))),
        }
    }

    /// The outcome of a run whose row could not be written: its surface refused it
    /// (`launch` answers `503`), so nothing is saved, recorded or announced.
    fn abandon(self, turn: TurnResult, e: StoreError) -> RunOutcome {
        tracing::warn!(run_id = %self.run_id, error = ?e, "the run row could not be written; the run is abandoned");
        RunOutcome {
            run_id: self.run_id,
            started_at: self.started_at,
            status: RunStatus::Failed,
            text: String::new(),
            usage: turn.usage,
            cost: None,
            failure: Some(RunFailure::foreign("StoreError", &format!("{e:?}"))),
            approvals: Vec::new(),
            model_provider: None,
            model: None,
            finish_reason: None,
            event_writes: 0,
            client_tool_calls: Vec::new(),
            session_id: None,
        }
    }

    /// Ends the run: its outcome and single terminal event, the stop's approval requests,
    /// quota thresholds crossed, the statement that closes the row (with every event still
    /// buffered), the live terminal frame, the run-end webhooks.
    pub async fn settle(mut self, mut turn: TurnResult, end: TurnEnd) -> RunOutcome {
        let runtime = self.runtime;
        let (run_id, tenant) = (self.run_id, self.request.tenant.clone());
        // A run the A2A surface started is a task whose push configurations hear its end.
        let a2a_task = self.request.attribution.labels.contains_key(crate::webhooks::a2a::TASK_LABEL);
        let agent = self.agent.clone();
        let clock = runtime.platform.clock.clone();
        let provider_name = turn.route.last_provider.clone().unwrap_or_else(|| agent.provider.name().to_owned());
        let model = turn.model.clone().or_else(|| Some(agent.definition.model.model.clone()));
        // The model calls of the attempts before a hand-over count too.
        let earlier = self.continuation.as_ref().and_then(|c| c.in_place.as_ref()).and_then(|p| p.usage);
        if let Some(earlier) = earlier {
            turn.usage.get_or_insert_with(Default::default).add(&earlier);
        }
        if matches!(end, TurnEnd::Yielded) {
            return self.hand_over(turn).await;
        }
        let cost = if turn.route.rerouted {
            // Each call at the prices of the model that answered it; an earlier attempt's at the
            // agent's own. Unknown as soon as one of them has no price.
            let before = runtime.pricing.cost(agent.provider.name(), &agent.definition.model.model, earlier.as_ref());
            match turn.route.cost() {
                Some(calls) if earlier.is_none() || before.is_some() => {
                    crate::pricing::add_cost(Some(calls), before.as_ref())
                }
                _ => None,
            }
        } else {
            runtime.pricing.cost(&provider_name, model.as_deref().unwrap_or_default(), turn.usage.as_ref())
        };
        let mut outcome = RunOutcome {
            run_id,
            started_at: self.started_at,
            status: RunStatus::Completed,
            text: turn.text,
            usage: turn.usage,
            cost: cost.clone(),
            failure: None,
            approvals: Vec::new(),
            model_provider: turn.called.then(|| provider_name.clone()),
            model: if turn.called { model } else { None },
            finish_reason: turn.finish,
            event_writes: 0,
            client_tool_calls: Vec::new(),
            session_id: None,
        };
        let terminal = match end {
            TurnEnd::Answered => RunEvent::RunCompleted {
                text: outcome.text.clone(),
                usage: outcome.usage,
                cost,
                finish_reason: outcome.finish_reason,
                client_tool_calls: Vec::new(),
            },
            TurnEnd::ClientTools(calls) => {
                outcome.finish_reason = Some(FinishReason::ToolCalls);
                outcome.client_tool_calls = calls.iter().map(ClientToolCall::from_call).collect();
                outcome.session_id = self.session.as_ref().map(|s| s.id.clone());
                RunEvent::RunCompleted {
                    text: outcome.text.clone(),
                    usage: outcome.usage,
                    cost,
                    finish_reason: outcome.finish_reason,
                    client_tool_calls: outcome.client_tool_calls.clone(),
                }
            }
            TurnEnd::AwaitingApproval(requests) => {
                outcome.status = RunStatus::AwaitingApproval;
                save_requests(runtime, &self.request, run_id, &agent.name, self.session.as_ref(), &requests).await;
                outcome.approvals = requests.clone();
                RunEvent::RunAwaitingApproval { requests }
            }
            TurnEnd::Canceled => {
                outcome.status = RunStatus::Canceled;
                let failure = RunFailure::canceled();
                outcome.failure = Some(failure.clone());
                RunEvent::RunCanceled { error: failure }
            }
            TurnEnd::Failed(failure) => {
                outcome.status = RunStatus::Failed;
                outcome.failure = Some(failure.clone());
                RunEvent::RunFailed { error: failure }
            }
            // Handed over above.
            TurnEnd::Yielded => unreachable_hand_over(),
        };
        self.announce_thresholds(&outcome).await;
        let ended_at = clock.now();
        let run_end = RunEnd {
            status: outcome.status,
            ended_at,
            duration_ms: millis_between(self.started_at, ended_at),
            usage: outcome.usage,
            cost: outcome.cost.clone(),
            model_provider: outcome.model_provider.clone(),
            model: outcome.model.clone(),
            error: outcome.failure.clone(),
        };
        // The terminal event and every event still buffered go with the statement that closes
        // the row; only then does the caller see the end.
        let recorder = self.recorder.clone();
        let store = runtime.stores.runs.clone();
        recorder.record_held(&terminal).await;
        let mut row_open = false;
        if runtime.settings.recording.enabled {
            let last = recorder.take_pending().await;
            recorder.count_write();
            if let Err(e) = store.finish_run(&tenant, run_id, &run_end, &last).await {
                tracing::warn!(run_id = %run_id, error = ?e, "could not record the end of the run");
                row_open = matches!(e, StoreError::Unavailable { .. });
                if row_open {
                    recorder.restore(last);
                }
            }
        }
        self.emitter.send_live(terminal).await;
        outcome.event_writes = recorder.store_writes();
        // run.completed / run.failed / approval.pending: every run ends here (live, queued,
        // resumed). A failing publish is logged; it never changes the run.
        crate::webhooks::sources::publish_run_end(runtime, &tenant, &agent.name, &outcome).await;
        if a2a_task {
            crate::webhooks::a2a::publish_task_end(runtime, &tenant, &outcome).await;
        }
        if row_open {
            finish_when_back(runtime, tenant, run_id, recorder, run_end.clone());
        }
        tracing::info!(
            run_id = %run_id,
            agent = %agent.name,
            status = ?outcome.status,
            duration_ms = run_end.duration_ms,
            error_class = ?outcome.failure.as_ref().map(|f| f.error_class),
            "run ended"
        );
        outcome
    }

    /// Hands the run over at its soft deadline: the yielded event and every event still
    /// buffered go with the statement that marks it yielded (keeping the usage so far); the
    /// run stays `Running`, and the attempt that takes it back goes on from the ledger.
    async fn hand_over(self, turn: TurnResult) -> RunOutcome {
        let runtime = self.runtime;
        let (run_id, tenant) = (self.run_id, self.request.tenant.clone());
        let payload = serde_json::json!({ "steps": self.env.ledger.step() }).to_string();
        let event = RunEvent::Custom { custom_type: continuation::YIELDED_EVENT.to_owned(), payload };
        self.recorder.record_held(&event).await;
        let last = self.recorder.take_pending().await;
        self.recorder.count_write();
        let now = runtime.platform.clock.now();
        match runtime.stores.runs.yield_run(&tenant, run_id, &last, turn.usage.as_ref(), now).await {
            Ok(true) => {
                tracing::info!(run_id = %run_id, steps = self.env.ledger.step(), "handed the run over at its soft deadline")
            }
            // Left running: reconciliation closes it, and continuation goes on from the ledger.
            Ok(false) => tracing::warn!(run_id = %run_id, "the run was no longer running to hand over"),
            Err(e) => {
                tracing::warn!(run_id = %run_id, error = ?e, "could not hand the run over; continuation picks it up")
            }
        }
        RunOutcome {
            run_id,
            started_at: self.started_at,
            status: RunStatus::Running,
            text: turn.text,
            usage: turn.usage,
            cost: None,
            failure: None,
            approvals: Vec::new(),
            model_provider: None,
            model: turn.model,
            finish_reason: None,
            event_writes: self.recorder.store_writes(),
            client_tool_calls: Vec::new(),
            session_id: None,
        }
    }

    /// Quota thresholds this run crossed: announced once per period, before the end.
    async fn announce_thresholds(&mut self, outcome: &RunOutcome) {
        let runtime = self.runtime;
        if runtime.quotas.rules.is_empty() || runtime.quotas.threshold_percents.is_empty() {
            return;
        }
        let own = RunConsumption {
            tokens: outcome.usage.map_or(0, |u| u.total_tokens),
            cost: outcome.cost.as_ref().map(|c| (c.currency.clone(), c.total_cost)),
        };
        let notices = runtime
            .quotas
            .crossed(
                runtime.stores.runs.as_ref(),
                runtime.stores.quota_notices.as_ref(),
                &self.request.tenant,
                &self.agent.name,
                self.run_id,
                self.request.attribution.user_id.as_deref(),
                &own,
                runtime.platform.clock.now(),
            )
            .await;
        for notice in notices {
            tracing::warn!(quota = %notice.quota, threshold = notice.threshold, consumption = notice.consumption,
                limit = notice.limit, notice_id = %notice.notice_id, "quota threshold crossed");
            for sink in &runtime.quota_sinks {
                sink.notify(&notice).await;
            }
            if runtime.quotas.publish_to_run_stream {
                let payload = serde_json::to_string(&notice).unwrap_or_default();
                self.emitter.emit(RunEvent::Custom { custom_type: THRESHOLD_EVENT.to_owned(), payload }).await;
            }
        }
    }
}

/// [`Execution::settle`] hands a yielded turn over before it builds an ending.
fn unreachable_hand_over() -> RunEvent {
    RunEvent::RunFailed { error: RunFailure::new(ErrorClass::Internal, "The run handed over twice.") }
}

/// The store went away during the run. Keeps trying in the background so the record ends
/// complete once it is back, instead of holding the caller.
fn finish_when_back(runtime: &Runtime, tenant: TenantId, run_id: RunId, recorder: Arc<Recorder>, run_end: RunEnd) {
    let (store, clock) = (runtime.stores.runs.clone(), runtime.platform.clock.clone());
    runtime.platform.spawner.spawn(Box::pin(async move {
        let mut pause = std::time::Duration::from_millis(250);
        for _ in 0..12 {
            clock.sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_secs(10));
            let last = recorder.take_pending().await;
            match store.finish_run(&tenant, run_id, &run_end, &last).await {
                Ok(()) => {
                    tracing::info!(run_id = %run_id, "recorded the end of the run after the store came back");
                    return;
                }
                Err(StoreError::Unavailable { .. }) => recorder.restore(last),
                Err(e) => {
                    tracing::warn!(run_id = %run_id, error = ?e, "gave up recording the end of the run");
                    return;
                }
            }
        }
        tracing::error!(run_id = %run_id, "the store stayed unreachable; this run's record is incomplete");
    }));
}

/// Keeps the stop's requests for the mailbox and the in-band decision. Recording never
/// breaks a run: a failed write is logged (the requests then cannot be decided, and the
/// session's next message closes the calls as undecided).
async fn save_requests(
    runtime: &Runtime,
    request: &RunRequest,
    run_id: RunId,
    agent: &str,
    session: Option<&LoadedSession>,
    requests: &[ApprovalRequest],
) {
    let now = runtime.platform.clock.now();
    let expires_at =
        now + chrono::Duration::from_std(runtime.settings.approval_expiry).unwrap_or(chrono::Duration::days(1));
    let records: Vec<ApprovalRecord> = requests
        .iter()
        .map(|r| ApprovalRecord {
            id: r.request_id,
            tenant: request.tenant.clone(),
            run_id,
            session_id: session.map(|s| s.id.as_str().to_owned()),
            agent_name: agent.to_owned(),
            call_id: r.call_id.clone(),
            tool_name: r.tool_name.clone(),
            arguments: r.arguments.clone(),
            effect: r.effect,
            requested_by: request.attribution.user_id.clone(),
            created_at: now,
            expires_at,
            status: ApprovalStatus::Pending,
            decided_at: None,
            decided_by: None,
            reason: None,
            resumed_run_id: None,
        })
        .collect();
    if let Err(e) = runtime.stores.approvals.create(&records).await {
        tracing::warn!(run_id = %run_id, error = ?e, "could not save the approval requests of a stopped run");
    }
}

/// The resumed run's first event after `RunStarted`: which run it continues and what was
/// decided (a Tracon-owned custom event).
fn resumed_event(resume: &Resume) -> RunEvent {
    let decisions: Vec<serde_json::Value> = resume
        .decided
        .iter()
        .map(|d| {
            serde_json::json!({
                "requestId": d.id,
                "callId": d.call_id,
                "toolName": d.tool_name,
                "approved": d.status == ApprovalStatus::Approved,
                "decidedBy": d.decided_by,
            })
        })
        .collect();
    let payload = serde_json::json!({ "fromRunId": resume.from_run, "decisions": decisions });
    RunEvent::Custom { custom_type: RESUMED_EVENT.to_owned(), payload: payload.to_string() }
}

/// The custom type of [`resumed_event`].
pub const RESUMED_EVENT: &str = "tracon.approval.resumed";

// ---- queued runs ------------------------------------------------------------------------------

/// Drives `work` while moving the run's heartbeat every `HeartbeatSeconds`, so reconciliation
/// can tell a long model call from a dead process. The heartbeat carries the events the
/// recorder holds (an unfollowed run's deltas wait for it, where signals are heard), and says
/// whether the run is to stop — cancelled, or closed under a process that stalled — which
/// cancels it. A failed heartbeat is logged; the run goes on.
pub(crate) async fn with_heartbeat<T>(
    work: impl std::future::Future<Output = T>,
    runtime: &Runtime,
    tenant: &TenantId,
    recorder: &Recorder,
    cancel: &CancellationToken,
) -> T {
    let clock = runtime.platform.clock.as_ref();
    let every = runtime.settings.reconciliation.heartbeat;
    let run_id = recorder.run_id();
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            biased;
            out = &mut work => return out,
            () = clock.sleep(every) => {
                if recorder.enabled() && recorder.pending() > 0 {
                    recorder.flush().await;
                    if recorder.told_to_stop() {
                        cancel.cancel();
                    }
                    continue;
                }
                match runtime.stores.runs.heartbeat(tenant, run_id, clock.now()).await {
                    Ok(true) => cancel.cancel(),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(run_id = %run_id, error = ?e, "could not move the run's heartbeat"),
                }
            }
        }
    }
}
