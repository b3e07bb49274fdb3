//! The turn engine: model call → tool calls through the pipeline → model call …, bounded by
//! `maximumIterationsPerRequest`.
//!
//! [`run_turn`] runs one turn of a compiled agent over a conversation and returns how it
//! ended and the conversation it produced; [`crate::runs`] wraps it with the run row,
//! sessions and the terminal event. Every event goes through the run's [`Emitter`]: first to
//! the recorder (the single writer of the log), then to the caller's channel.
//!
//! Ending rules:
//! - the caller going away (its event channel closes), the run's cancel token firing, or
//!   the cancel flag in the store (checked between chunks and before every model and tool
//!   call, at most every `cancel_check_interval`) ends the turn `Canceled`;
//! - a model call that produces no first byte, or no next chunk, within `model_timeout`
//!   fails with the `Timeout` class — a timeout is an outage, not a cancellation;
//! - on the last allowed iteration no tools are offered, so the model has to answer.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::future::join_all;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::compiler::CompiledAgent;
use crate::events::RunEvent;
use crate::events::{ApprovalRequest, ToolCallStatus};
use crate::failure::{ErrorClass, RunFailure};
use crate::model::resilience::{Failed, Link, Note, Opened};
use crate::model::{
    FinishReason, Message, ModelEvent, ModelRequest, ProviderError, ProviderErrorKind, ReasoningBlock, ToolCall,
    ToolChoice, Usage,
};
use crate::names::{RunId, TenantId};
use crate::ports::{Clock, millis_between};
use crate::pricing::CostSnapshot;
use crate::recorder::Recorder;
use crate::runs::drain::Drain;
use crate::runs::store::{ModelStep, RunStore, ToolCallRecord};
use crate::runtime::Runtime;
use crate::tools::pipeline::{self, CallEnv, CallOutcome, Gate};

/// Watches the store's cancel flag, so a cancel issued through any instance stops the run —
/// and so does reconciliation closing the run under this executor (it stalled past the
/// heartbeat limit): the run's continuation goes on elsewhere, and this one must not.
pub struct CancelWatch {
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    tenant: TenantId,
    run_id: RunId,
    interval: Duration,
    last_check: Option<DateTime<Utc>>,
    /// Where signals reach this run, when it is registered with the drain.
    drain: Option<Arc<Drain>>,
    /// The hearing (re)start this run is sure of: a cancel since then reaches its token.
    epoch: Option<u64>,
}

impl CancelWatch {
    pub fn new(
        store: Arc<dyn RunStore>,
        clock: Arc<dyn Clock>,
        tenant: TenantId,
        run_id: RunId,
        interval: Duration,
        drain: Arc<Drain>,
    ) -> Self {
        // The run was created a moment ago: nobody has had a chance to cancel it yet, so the
        // first read waits one interval (and, where signals are heard, never comes).
        let last_check = Some(clock.now());
        // A run not registered here (a queued run's job holds its token) is not reached by a
        // signal: it reads its flag as on a host that hears none.
        let drain = drain.local(run_id).map(|_| drain);
        let epoch = drain.as_ref().and_then(|d| d.heard());
        Self { store, clock, tenant, run_id, interval, last_check, drain, epoch }
    }

    /// Whether a cancel was requested. Where signals are heard, a cancel reaches the run's
    /// token and nothing is read — except once after hearing (re)started, for a cancel sent
    /// while nobody listened. Elsewhere the flag comes with every event write the recorder
    /// makes; the store is read only when neither a write nor a read said anything for
    /// `interval`.
    async fn requested(&mut self, recorder: &Recorder) -> bool {
        if recorder.told_to_stop() {
            return true;
        }
        let now = self.clock.now();
        match self.drain.as_ref().and_then(|d| d.heard()) {
            Some(epoch) if self.epoch == Some(epoch) => return false,
            Some(epoch) => self.epoch = Some(epoch),
            None => {
                self.epoch = None;
                let last = self.last_check.map_or(recorder.last_write(), |c| c.max(recorder.last_write()));
                if (now - last).to_std().is_ok_and(|d| d < self.interval) {
                    return false;
                }
            }
        }
        self.last_check = Some(now);
        match self.store.is_cancel_requested(&self.tenant, self.run_id).await {
            Ok(flag) => flag,
            Err(e) => {
                tracing::warn!(run_id = %self.run_id, error = ?e, "could not read the cancel flag");
                false
            }
        }
    }
}

/// The run's outward side: the recorder first (the log's single writer), then the caller.
pub struct Emitter {
    tx: Option<mpsc::Sender<RunEvent>>,
    cancel: CancellationToken,
    recorder: Arc<Recorder>,
    watch: CancelWatch,
}

impl Emitter {
    pub fn new(
        tx: Option<mpsc::Sender<RunEvent>>,
        cancel: CancellationToken,
        recorder: Arc<Recorder>,
        watch: CancelWatch,
    ) -> Self {
        Self { tx, cancel, recorder, watch }
    }

    pub async fn emit(&mut self, event: RunEvent) {
        self.recorder.record(&event).await;
        if let Some(tx) = &self.tx
            && tx.send(event).await.is_err()
        {
            // The caller went away.
            self.tx = None;
            self.cancel.cancel();
        }
    }

    /// Emits an event whose record travels with the next statement the run makes anyway (a
    /// tool round's ledger write, a call's record): see [`Recorder::along`].
    pub async fn emit_held(&mut self, event: RunEvent) {
        self.recorder.record_held(&event).await;
        self.send_live(event).await;
    }

    /// Sends an event to the caller only (it was recorded another way).
    pub async fn send_live(&mut self, event: RunEvent) {
        if let Some(tx) = &self.tx
            && tx.send(event).await.is_err()
        {
            self.tx = None;
            self.cancel.cancel();
        }
    }

    /// Whether the run streams to a caller as it goes (its text reaches someone at once).
    pub fn is_live(&self) -> bool {
        self.tx.is_some()
    }

    /// Whether the run must stop: its token fired, or the store says someone asked.
    pub async fn should_stop(&mut self) -> bool {
        if self.cancel.is_cancelled() {
            return true;
        }
        if self.watch.requested(&self.recorder).await {
            self.cancel.cancel();
            return true;
        }
        false
    }

    pub fn recorder(&self) -> &Arc<Recorder> {
        &self.recorder
    }
}

/// A run whose row could not be written stops (its surface refuses it).
fn unrecorded(e: crate::error::StoreError) -> Stop {
    Stop::Failed(RunFailure::foreign("StoreError", &format!("{e:?}")))
}

/// How a turn ended.
#[derive(Debug, Clone)]
pub enum TurnEnd {
    Answered,
    AwaitingApproval(Vec<ApprovalRequest>),
    /// The model called client-side tools: the caller answers them on its next request.
    /// The turn's server-side calls ran; their results are in the conversation.
    ClientTools(Vec<ToolCall>),
    Canceled,
    Failed(RunFailure),
    /// A queued attempt reached its soft deadline between two steps: the run goes on in a
    /// later attempt, from the step ledger.
    Yielded,
}

/// The result of [`run_turn`].
#[derive(Debug, Clone)]
pub struct TurnResult {
    pub end: TurnEnd,
    /// The whole conversation: the history, then this turn's messages from `new_from` on.
    pub messages: Vec<Message>,
    pub new_from: usize,
    pub usage: Option<Usage>,
    /// The model that actually answered, when the provider said.
    pub model: Option<String>,
    /// Whether any model call got as far as a response.
    pub called: bool,
    /// The last model turn's text: the answer.
    pub text: String,
    pub finish: Option<FinishReason>,
    /// Where the turn's model calls went and what each cost (see [`Route`]).
    pub route: Route,
}

/// Where a run's model calls went and what they cost, call by call. A run some of whose calls
/// a fallback link answered is recorded with the provider of the call that answered last, and
/// its cost is the sum of each call's at the prices of the model that answered it — unknown
/// (`null`) as soon as one call with usage had no price, as for any run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Route {
    /// Whether a fallback link answered any call.
    pub rerouted: bool,
    /// The provider that answered the last call (none: no call answered).
    pub last_provider: Option<String>,
    /// The calls' costs so far.
    pub cost: Option<CostSnapshot>,
    /// A call with usage had no price.
    pub unpriced: bool,
}

impl Route {
    /// One more call, answered by `provider`: its usage's `cost` (none: no usage, or no price).
    fn add_call(&mut self, provider: &str, has_usage: bool, cost: Option<CostSnapshot>) {
        if self.last_provider.as_deref() != Some(provider) {
            self.last_provider = Some(provider.to_owned());
        }
        self.unpriced |= has_usage && cost.is_none();
        self.cost = crate::pricing::add_cost(self.cost.take(), cost.as_ref());
    }

    /// Two parts of one run, `later` after `self` (a loop's iterations, a repair turn).
    pub fn then(self, later: Route) -> Route {
        Route {
            rerouted: self.rerouted || later.rerouted,
            last_provider: later.last_provider.or(self.last_provider),
            cost: crate::pricing::add_cost(self.cost, later.cost.as_ref()),
            unpriced: self.unpriced || later.unpriced,
        }
    }

    /// What the calls cost, when every call with usage had a price.
    pub fn cost(&self) -> Option<CostSnapshot> {
        if self.unpriced { None } else { self.cost.clone() }
    }
}

/// Why a step stopped short of its end.
pub enum Stop {
    Canceled,
    Failed(RunFailure),
}

/// What a turn's model calls added up to so far.
#[derive(Default)]
pub struct TurnTally {
    pub usage: Option<Usage>,
    /// The model that actually answered, when the provider said.
    pub model: Option<String>,
    pub last_text: String,
    pub finish: Option<FinishReason>,
    /// Whether any model call got as far as a response.
    pub called: bool,
    /// Where the calls went, and what each cost.
    pub route: Route,
}

/// How a turn begins.
#[derive(Debug, Clone)]
pub enum TurnStart {
    /// A new user message, after `prelude`: results for calls an earlier turn left without one
    /// (a stop whose approval was never decided), so the conversation stays well-formed.
    User { prelude: Vec<Message>, message: Message },
    /// Continues the turn the history's last message — an assistant's tool calls that
    /// waited for approval — left open: the calls go through the pipeline again (with the
    /// person's decisions in the [`CallEnv`]), then the model goes on.
    Resume,
    /// Continues the turn after the caller answered the client-side calls it was handed:
    /// `results` (tool messages) are appended — when the conversation already ends with
    /// them (an OpenAI client sends its whole history), `results` is empty — and the model
    /// goes on.
    Continue { results: Vec<Message> },
}

/// Runs one turn from `history` to an answer, an approval stop, a failure or a
/// cancellation.
pub async fn run_turn(
    runtime: &Runtime,
    agent: &CompiledAgent,
    env: &CallEnv,
    history: Vec<Message>,
    start: TurnStart,
    emitter: &mut Emitter,
) -> TurnResult {
    let new_from = history.len();
    let mut request = ModelRequest::from_binding(&agent.definition.model);
    request.system = agent.instructions.clone();
    request.messages = history;
    request.whole = env.whole_answer;
    let mut state = TurnTally::default();
    let outcome = match start {
        TurnStart::User { prelude, message } => {
            request.messages.extend(prelude);
            request.messages.push(message);
            run_loop(runtime, agent, env, &mut request, emitter, &mut state).await
        }
        TurnStart::Resume => resume(runtime, agent, env, &mut request, emitter, &mut state).await,
        TurnStart::Continue { results } => {
            request.messages.extend(results);
            run_loop(runtime, agent, env, &mut request, emitter, &mut state).await
        }
    };
    let end = match outcome {
        Ok(end) => end,
        Err(Stop::Canceled) => TurnEnd::Canceled,
        Err(Stop::Failed(f)) => TurnEnd::Failed(f),
    };
    TurnResult {
        end,
        messages: request.messages,
        new_from,
        usage: state.usage,
        model: state.model,
        called: state.called,
        text: state.last_text,
        finish: state.finish,
        route: state.route,
    }
}

/// The calls of the history's last assistant message that have no result yet: every call
/// when the assistant's message is the last one (a stop for approval), the client-side
/// calls when only the server-side calls' results follow it.
pub fn open_calls(history: &[Message]) -> Vec<ToolCall> {
    let answered = history.iter().rev().take_while(|m| matches!(m, Message::Tool { .. })).count();
    let Some(at) = history.len().checked_sub(answered + 1) else { return Vec::new() };
    let Some(Message::Assistant { tool_calls, .. }) = history.get(at) else { return Vec::new() };
    let results = history.get(at + 1..).unwrap_or_default();
    tool_calls
        .iter()
        .filter(|c| !results.iter().any(|m| matches!(m, Message::Tool { call_id, .. } if *call_id == c.id)))
        .cloned()
        .collect()
}

async fn resume(
    runtime: &Runtime,
    agent: &CompiledAgent,
    env: &CallEnv,
    request: &mut ModelRequest,
    emitter: &mut Emitter,
    state: &mut TurnTally,
) -> Result<TurnEnd, Stop> {
    let calls = open_calls(&request.messages);
    match run_tools(runtime, agent, env, &calls, emitter, None).await? {
        ToolRound::Approvals(requests) => return Ok(TurnEnd::AwaitingApproval(requests)),
        ToolRound::Results { outcomes, client } => {
            push_results(request, outcomes);
            if !client.is_empty() {
                return Ok(TurnEnd::ClientTools(client));
            }
        }
    }
    run_loop(runtime, agent, env, request, emitter, state).await
}

fn push_results(request: &mut ModelRequest, outcomes: Vec<CallOutcome>) {
    for o in outcomes {
        request.messages.push(Message::Tool {
            call_id: o.call_id,
            name: o.tool_name,
            content: o.result,
            is_error: o.status.is_failure(),
        });
    }
}

async fn run_loop(
    runtime: &Runtime,
    agent: &CompiledAgent,
    env: &CallEnv,
    request: &mut ModelRequest,
    emitter: &mut Emitter,
    state: &mut TurnTally,
) -> Result<TurnEnd, Stop> {
    let max = agent.max_iterations.max(1);
    for iteration in 1..=max {
        if emitter.should_stop().await {
            return Err(Stop::Canceled);
        }
        // A step boundary: at least one step of this attempt is recorded, so handing over
        // always makes progress.
        if iteration > 1 && env.deadline.is_some_and(|d| runtime.platform.clock.now() >= d) {
            return Ok(TurnEnd::Yielded);
        }
        // The call tree's shared budget (tokens, cost, time) is checked before every model call.
        if let Some(limit) = env.tree.budget.exhausted(runtime.platform.clock.now()) {
            return Err(Stop::Failed(limit.failure()));
        }
        let offer_tools = iteration < max && !agent.tool_specs.is_empty();
        // One request per run, updated in place: the conversation is never copied per turn.
        request.tools = if offer_tools { agent.tool_specs.clone() } else { Arc::from(Vec::new()) };
        // A required or named tool is the turn's first call's; after a tool round the model
        // decides (or it would call tools until the iteration limit). `None` holds throughout.
        request.tool_choice = match &agent.tool_choice {
            ToolChoice::None => ToolChoice::None,
            choice if iteration == 1 => choice.clone(),
            _ => ToolChoice::Auto,
        };
        let offer_tools = offer_tools && agent.tool_choice != ToolChoice::None;

        let turn = model_turn(runtime, agent, request, env, emitter, state).await?;
        state.last_text.clone_from(&turn.text);
        if !turn.text.is_empty() {
            emitter.emit(RunEvent::MessageCompleted { text: turn.text.clone() }).await;
        }
        if turn.finish == Some(FinishReason::ContentFilter) {
            let e = ProviderError::content_filtered();
            return Err(Stop::Failed(RunFailure::from_provider(agent.provider.name(), &e)));
        }
        if turn.calls.is_empty() || !offer_tools {
            // Calls the model was not to make are not made: the turn ends with its text.
            if !turn.calls.is_empty() && state.finish == Some(FinishReason::ToolCalls) {
                state.finish = Some(FinishReason::Stop);
            }
            request.messages.push(Message::Assistant {
                text: Some(turn.text),
                tool_calls: Vec::new(),
                reasoning: turn.reasoning,
            });
            return Ok(TurnEnd::Answered);
        }
        let asked = Message::Assistant {
            text: (!turn.text.is_empty()).then_some(turn.text),
            tool_calls: turn.calls.clone(),
            reasoning: turn.reasoning,
        };
        let results = run_tools(runtime, agent, env, &turn.calls, emitter, Some(&asked)).await?;
        request.messages.push(asked);
        match results {
            ToolRound::Results { outcomes, client } => {
                push_results(request, outcomes);
                if !client.is_empty() {
                    state.finish = Some(FinishReason::ToolCalls);
                    return Ok(TurnEnd::ClientTools(client));
                }
            }
            ToolRound::Approvals(requests) => return Ok(TurnEnd::AwaitingApproval(requests)),
        }
    }
    Ok(TurnEnd::Answered)
}

/// What one model call said.
pub struct ModelTurn {
    pub text: String,
    pub calls: Vec<ToolCall>,
    pub reasoning: Vec<ReasoningBlock>,
    pub finish: Option<FinishReason>,
}

/// One streamed model call, under the run's cancellation and the model timeout: every delta
/// emitted as it arrives, the usage added to `tally`.
pub async fn model_turn(
    runtime: &Runtime,
    agent: &CompiledAgent,
    request: &ModelRequest,
    env: &CallEnv,
    emitter: &mut Emitter,
    state: &mut TurnTally,
) -> Result<ModelTurn, Stop> {
    let clock = runtime.platform.clock.clone();
    let timeout = runtime.settings.model_timeout;

    let span = tracing::info_span!("model.call", provider = agent.provider.name(), model = %request.model);
    // While the model is silent, a cancel issued through another instance is still noticed
    // and what was already said still reaches the log: every cancel-check interval the
    // store's flag is read and a due batch of events is written, not only between chunks.
    let poll_every = emitter.watch.interval.min(emitter.recorder().flush_interval()).max(Duration::from_millis(10));
    let mut poll = clock.sleep(poll_every);
    // The response cache: the same request answered within the cache's lifetime is answered
    // again without a call (and without spending a token).
    let cache =
        agent.definition.model.response_cache.and_then(|c| c.lifetime()).and_then(|lifetime| {
            Some((crate::model::cache::key(&env.tenant, agent.provider.name(), request)?, lifetime))
        });
    let cached = match &cache {
        Some((key, _)) => match runtime.stores.response_cache.get(&env.tenant, key, clock.now()).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(run_id = %env.run_id, error = ?e, "could not read the response cache; calling the model");
                None
            }
        },
        None => None,
    };
    // Each link goes out with the tenant's own credential where it bound one (BYOK), never
    // with the host's in its place; a tenant without bindings calls the providers as they are.
    let credential_failure = |e: crate::model::byok::CredentialError| Stop::Failed(RunFailure::from_credential(&e));
    let tenant_providers = &runtime.tenant_providers;
    let bound = tenant_providers
        .state(&env.tenant)
        .await
        .map_err(|e| credential_failure(crate::model::byok::CredentialError::Store(e)))?;
    let primary = tenant_providers.resolve(&env.tenant, &bound, &agent.provider).map_err(credential_failure)?;
    let linked = agent
        .fallbacks
        .iter()
        .map(|l| tenant_providers.resolve(&env.tenant, &bound, &l.provider))
        .collect::<Result<Vec<_>, _>>()
        .map_err(credential_failure)?;
    // The binding's fallback chain (no allocation without one); retries and fallbacks happen
    // only before the answer starts, and never past the tree's time budget.
    let fallbacks: Vec<Link<'_>> = agent
        .fallbacks
        .iter()
        .zip(&linked)
        .map(|(l, provider)| Link { provider, binding: Some(l.binding.as_ref()) })
        .collect();
    let until = env.tree.budget.ends_at();
    let mut notes = Vec::new();
    let from_cache = cached.is_some();
    let opened = if let Some(answer) = cached {
        emitter
            .emit(RunEvent::ModelCacheHit { provider: agent.provider.name().to_owned(), model: request.model.clone() })
            .await;
        let events = futures::stream::iter(answer.events().into_iter().map(Ok)).boxed();
        Ok(Opened { provider: agent.provider.name().to_owned(), model: request.model.clone(), stream: events })
    } else {
        // The run row may still be on its way (`crate::runs::opening`): the model is called
        // meanwhile, and the first call waits for both.
        let row = emitter.recorder().row().clone();
        let mut row_pending = !row.is_written();
        let row_written = row.wait();
        let mut row_written = std::pin::pin!(row_written);
        let opening = runtime.models.open(&primary, &fallbacks, request, timeout, until, &mut notes);
        let mut opening = std::pin::pin!(opening.instrument(span));
        let opened = loop {
            tokio::select! {
                biased;
                _ = env.cancel.cancelled() => return Err(Stop::Canceled),
                r = &mut row_written, if row_pending => {
                    row_pending = false;
                    r.map_err(unrecorded)?;
                }
                r = &mut opening => break r,
                _ = &mut poll => {
                    if emitter.should_stop().await {
                        return Err(Stop::Canceled);
                    }
                    emitter.recorder().flush_if_due().await;
                    poll = clock.sleep(poll_every);
                }
            }
        };
        if row_pending {
            row_written.await.map_err(unrecorded)?;
        }
        opened
    };
    let mut timer = clock.sleep(timeout);
    for note in notes {
        emitter.emit(note_event(note)).await;
    }
    let Opened { provider, model: asked_model, mut stream } = match opened {
        Ok(opened) => opened,
        Err(Failed { error, .. }) if error.kind == ProviderErrorKind::Canceled => return Err(Stop::Canceled),
        Err(Failed { provider, error }) => return Err(Stop::Failed(RunFailure::from_provider(&provider, &error))),
    };
    let fail = |e: ProviderError| Stop::Failed(RunFailure::from_provider(&provider, &e));
    // The run names the provider and model that answered its last call: a fallback link's
    // model as asked, the agent's own as its provider reports it (or as bound).
    let rerouted = provider != agent.provider.name() || asked_model != request.model;
    state.route.rerouted |= rerouted;
    state.model = rerouted.then(|| asked_model.clone());
    state.called = true;

    let mut turn = ModelTurn { text: String::new(), calls: Vec::new(), reasoning: Vec::new(), finish: None };
    let mut last_activity = clock.now();
    let mut turn_usage: Option<Usage> = None;
    loop {
        let next = tokio::select! {
            biased;
            _ = env.cancel.cancelled() => return Err(Stop::Canceled),
            next = stream.next() => next,
            _ = &mut poll => {
                if emitter.should_stop().await {
                    return Err(Stop::Canceled);
                }
                emitter.recorder().flush_if_due().await;
                poll = clock.sleep(poll_every);
                continue;
            }
            _ = &mut timer => {
                // One timer per stream, re-armed only when it fires: no allocation per chunk.
                let idle = std::time::Duration::from_millis(millis_between(last_activity, clock.now()));
                if idle >= timeout {
                    return Err(fail(ProviderError::timeout("the model stream stalled")));
                }
                timer = clock.sleep(timeout - idle);
                continue;
            }
        };
        last_activity = clock.now();
        match next {
            None => break,
            Some(Err(e)) if e.kind == ProviderErrorKind::Canceled => return Err(Stop::Canceled),
            Some(Err(e)) => return Err(fail(e)),
            Some(Ok(event)) => match event {
                ModelEvent::TextDelta(t) => {
                    turn.text.push_str(&t);
                    emitter.emit(RunEvent::MessageDelta { text: t }).await;
                }
                ModelEvent::ReasoningDelta(t) => emitter.emit(RunEvent::ReasoningDelta { text: t }).await,
                ModelEvent::ReasoningBlock(b) => turn.reasoning.push(b),
                ModelEvent::ToolCall(c) => turn.calls.push(c),
                ModelEvent::Usage(u) => turn_usage = Some(u),
                ModelEvent::Model(m) => state.model = Some(m),
                ModelEvent::Finish(f) => turn.finish = Some(f),
            },
        }
        if emitter.should_stop().await {
            return Err(Stop::Canceled);
        }
    }
    if let Some(u) = turn_usage {
        state.usage.get_or_insert_with(Usage::default).add(&u);
        let model = state.model.as_deref().unwrap_or(&asked_model);
        let cost = runtime.pricing.cost(&provider, model, Some(&u));
        env.tree.budget.spend(&u, cost.as_ref().map(|c| c.total_cost));
        state.route.add_call(&provider, true, cost);
    } else {
        state.route.add_call(&provider, false, None);
    }
    state.finish = turn.finish;
    // Kept: a whole answer of the agent's own model (not a fallback link's, which a hit would
    // pass off as the primary's), and for a JSON format only an answer that holds.
    let keep = !from_cache
        && !rerouted
        && !matches!(turn.finish, Some(FinishReason::ContentFilter | FinishReason::Length))
        && agent.structured.as_ref().is_none_or(|check| {
            !turn.calls.is_empty()
                || matches!(
                    check.check(&agent.name, &turn.text, runtime.response_validator.as_ref()),
                    crate::structured::Checked::Holds(_)
                )
        });
    if let Some((key, lifetime)) = cache.filter(|_| keep) {
        let answer = crate::model::cache::CachedAnswer {
            text: turn.text.clone(),
            tool_calls: turn.calls.clone(),
            reasoning: turn.reasoning.clone(),
            finish: turn.finish,
            model: state.model.clone(),
        };
        let expires_at = clock.now() + chrono::Duration::from_std(lifetime).unwrap_or_default();
        if let Err(e) = runtime.stores.response_cache.put(&env.tenant, &key, &answer, expires_at).await {
            tracing::warn!(run_id = %env.run_id, error = ?e, "could not keep the answer in the response cache");
        }
    }
    // Ids are what ties a result to its call; a provider that omits one gets a stable one.
    for (i, c) in turn.calls.iter_mut().enumerate() {
        if c.id.is_empty() {
            c.id = format!("call_{i}");
        }
    }
    unique_call_ids(&request.messages, &mut turn.calls, env.ledger.step() + 1);
    Ok(turn)
}

/// The run event of what happened on a model call's way to an answer.
fn note_event(note: Note) -> RunEvent {
    // An open breaker is named as such: nothing was called, so it is not the provider's error.
    let error_type = |kind| match kind {
        ProviderErrorKind::BreakerOpen => "breaker_open".to_owned(),
        kind => ErrorClass::of_provider(kind).error_type().to_owned(),
    };
    match note {
        Note::Retried { provider, model, attempt, kind, delay } => RunEvent::ModelRetried {
            provider,
            model,
            attempt,
            error_type: error_type(kind),
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        },
        Note::FellBack { from_provider, from_model, to_provider, to_model, kind } => {
            RunEvent::ModelFallback { from_provider, from_model, to_provider, to_model, error_type: error_type(kind) }
        }
    }
}

/// Makes each call's id unique within the run: a provider that numbers its calls per
/// response (`call_1` in every turn) would otherwise have a later call's record overwrite an
/// earlier one's, and the step ledger could not tell them apart. A repeated id becomes
/// `{id}_{step}_{index}`; the run sends the model its own ids back, so nothing else changes.
fn unique_call_ids(history: &[Message], calls: &mut [ToolCall], step: u32) {
    let earlier = |id: &str| {
        history
            .iter()
            .any(|m| matches!(m, Message::Assistant { tool_calls, .. } if tool_calls.iter().any(|c| c.id == id)))
    };
    let mut seen = std::collections::HashSet::with_capacity(calls.len());
    for (i, call) in calls.iter_mut().enumerate() {
        if earlier(&call.id) || seen.contains(&call.id) {
            call.id = format!("{}_{step}_{i}", call.id);
        }
        seen.insert(call.id.clone());
    }
}

/// How a round of tool calls ended.
pub enum ToolRound {
    /// The server-side calls' outcomes, and the admitted client-side calls the caller is to
    /// answer.
    Results {
        outcomes: Vec<CallOutcome>,
        client: Vec<ToolCall>,
    },
    Approvals(Vec<ApprovalRequest>),
}

/// One tool round. Admits every call of the turn first (authorization, validation,
/// approval), so that one approval stops the turn before any body runs; then writes the step
/// ledger — `step`, the model's message that asked for the calls (none for a resumed round),
/// and each admitted call's start — and executes the admitted calls, one after another or
/// concurrently when the binding allows it.
pub async fn run_tools(
    runtime: &Runtime,
    agent: &CompiledAgent,
    env: &CallEnv,
    calls: &[ToolCall],
    emitter: &mut Emitter,
    step: Option<&Message>,
) -> Result<ToolRound, Stop> {
    let mut gates = Vec::with_capacity(calls.len());
    for call in calls {
        emitter
            .emit_held(RunEvent::ToolInvoking {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                arguments: call.arguments.clone(),
                display_name: agent.tool(&call.name).and_then(|t| t.display_name.clone()),
            })
            .await;
        gates.push(pipeline::admit(call, agent.tool(&call.name), env).await);
    }
    let approvals: Vec<ApprovalRequest> = gates
        .iter()
        .filter_map(|g| match g {
            Gate::AwaitApproval(r) => Some(r.clone()),
            _ => None,
        })
        .collect();

    let mut settled: Vec<Option<CallOutcome>> = Vec::with_capacity(gates.len());
    let mut admitted = Vec::new();
    let mut client = Vec::new();
    for (i, gate) in gates.into_iter().enumerate() {
        match gate {
            Gate::Done(outcome) => settled.push(Some(outcome)),
            // Admitted like any call (authorized, validated, approved); the caller runs it.
            Gate::Run(a) if approvals.is_empty() && a.tool.is_client() => {
                settled.push(None);
                client.push(a.call);
            }
            Gate::Run(a) if approvals.is_empty() => {
                settled.push(None);
                admitted.push((i, a));
            }
            // With an approval pending nothing runs; the calls are asked again on resume.
            Gate::Run(_) | Gate::AwaitApproval(_) => settled.push(None),
        }
    }

    if !approvals.is_empty() {
        for outcome in settled.into_iter().flatten() {
            finish_call(runtime, env, emitter, outcome, None).await;
        }
        for request in &approvals {
            let asked = calls.iter().find(|c| c.id == request.call_id);
            let call = asked.cloned().unwrap_or_else(|| ToolCall {
                id: request.call_id.clone(),
                name: request.tool_name.clone(),
                arguments: String::new(),
            });
            let now = runtime.platform.clock.now();
            let record =
                ToolCallRecord::opened(env.run_id, call, Some(request.effect), ToolCallStatus::AwaitingApproval, now);
            let along = emitter.recorder().along().await;
            match runtime.stores.runs.record_tool_call_with(&env.tenant, &record, along.events(), along.now()).await {
                Ok(()) => along.written(),
                Err(e) => tracing::warn!(run_id = %env.run_id, error = ?e, "could not record a tool call"),
            }
        }
        return Ok(ToolRound::Approvals(approvals));
    }

    // A replay answers from the source run's record; a call it cannot answer stops it.
    if let Some(recorded) = &env.replay {
        for (i, a) in std::mem::take(&mut admitted) {
            let Some(answer) = recorded.take(&a.call) else {
                return Err(Stop::Failed(RunFailure::new(
                    ErrorClass::ReplayMismatch,
                    format!(
                        "The replay called '{}' with arguments the source run never called it with; in ReplayTools mode no tool runs for real.",
                        a.call.name
                    ),
                )));
            };
            if let Some(slot) = settled.get_mut(i) {
                *slot = Some(CallOutcome {
                    call_id: a.call.id,
                    tool_name: a.call.name,
                    arguments: a.call.arguments,
                    effect: Some(a.tool.effect),
                    status: answer.status,
                    result: answer.result,
                    error: answer.error,
                    omitted_bytes: None,
                    started_at: a.started_at,
                    duration_ms: 0,
                });
            }
        }
    }
    if !admitted.is_empty() && emitter.should_stop().await {
        return Err(Stop::Canceled);
    }
    if !begin_step(runtime, env, emitter.recorder(), step, &admitted).await {
        return Err(Stop::Failed(RunFailure::new(
            ErrorClass::Orphaned,
            "This run was closed while it ran (its executor was taken for gone); its calls did not run here.",
        )));
    }
    let invoke = |i: usize, a: pipeline::Admitted| {
        let span = tracing::info_span!("tools.invoke", tool = %a.call.name, call_id = %a.call.id);
        async move { (i, pipeline::execute(a, env).await) }.instrument(span)
    };
    let executed = if agent.definition.model.allow_concurrent_tool_calls {
        join_all(admitted.into_iter().map(|(i, a)| invoke(i, a))).await
    } else {
        let mut out = Vec::with_capacity(admitted.len());
        for (i, a) in admitted {
            out.push(invoke(i, a).await);
        }
        out
    };
    let mut lates = Vec::new();
    for (i, ex) in executed {
        if let Some(slot) = settled.get_mut(i) {
            *slot = Some(ex.outcome);
        }
        if let Some(late) = ex.late {
            lates.push((i, late));
        }
    }
    let mut results = Vec::with_capacity(settled.len());
    for (i, outcome) in settled.into_iter().enumerate() {
        let Some(outcome) = outcome else { continue };
        let late = lates.iter().position(|(j, _)| *j == i).map(|p| lates.swap_remove(p).1);
        results.push(finish_call(runtime, env, emitter, outcome, late).await);
    }
    if env.cancel.is_cancelled() {
        return Err(Stop::Canceled);
    }
    Ok(ToolRound::Results { outcomes: results, client })
}

/// The step ledger's write before a round's bodies run (one round trip): the model step and
/// the admitted calls' starts. `false` when the store says the run is no longer running —
/// whoever closed it owns what happens next, so no body runs here. A store failure is
/// logged and the round goes on: recording never breaks a run (a continuation after a
/// crash then finds less in the ledger than happened, and calls the model again from there).
async fn begin_step(
    runtime: &Runtime,
    env: &CallEnv,
    recorder: &Recorder,
    step: Option<&Message>,
    admitted: &[(usize, pipeline::Admitted)],
) -> bool {
    let ledger = &env.ledger;
    if !ledger.enabled || (step.is_none() && admitted.is_empty()) {
        // No ledger write for the calls' starts to travel with: they go on their own.
        recorder.flush().await;
        return true;
    }
    let now = runtime.platform.clock.now();
    let step = step.map(|message| ModelStep { step: ledger.next_step(), message: message.clone(), recorded_at: now });
    let starts: Vec<ToolCallRecord> = admitted
        .iter()
        .map(|(_, a)| {
            let call = a.call.clone();
            ToolCallRecord::opened(env.run_id, call, Some(a.tool.effect), ToolCallStatus::Started, a.started_at)
        })
        .collect();
    let along = recorder.along().await;
    let written = runtime.stores.runs.begin_step_with(
        &env.tenant,
        env.run_id,
        step.as_ref(),
        &starts,
        along.events(),
        along.now(),
    );
    match written.await {
        Ok(written) => {
            along.written();
            if !written {
                tracing::warn!(run_id = %env.run_id, "the run is no longer running; its round does not run here");
            }
            written
        }
        Err(e) => {
            tracing::warn!(run_id = %env.run_id, error = ?e, "could not write the step ledger; the round goes on");
            true
        }
    }
}

/// Emits the call's result event and writes its record; then, for a call that timed out,
/// hands the still-running body to the spawner so a late result lands on that record.
async fn finish_call(
    runtime: &Runtime,
    env: &CallEnv,
    emitter: &mut Emitter,
    outcome: CallOutcome,
    late: Option<futures::future::BoxFuture<'static, crate::runs::store::LateCompletion>>,
) -> CallOutcome {
    let event = if outcome.status.is_failure() {
        RunEvent::ToolFailed {
            call_id: outcome.call_id.clone(),
            tool_name: outcome.tool_name.clone(),
            status: outcome.status,
            error: outcome.error.clone().unwrap_or_else(|| outcome.result.clone()),
            duration_ms: outcome.duration_ms,
        }
    } else {
        RunEvent::ToolInvoked {
            call_id: outcome.call_id.clone(),
            tool_name: outcome.tool_name.clone(),
            status: outcome.status,
            result: outcome.result.clone(),
            duration_ms: outcome.duration_ms,
            omitted_bytes: outcome.omitted_bytes,
        }
    };
    tracing::info!(
        run_id = %env.run_id,
        tool = %outcome.tool_name,
        status = ?outcome.status,
        duration_ms = outcome.duration_ms,
        "tool call settled"
    );
    emitter.emit_held(event).await;
    let call =
        ToolCall { id: outcome.call_id.clone(), name: outcome.tool_name.clone(), arguments: outcome.arguments.clone() };
    let record = ToolCallRecord {
        result: (!outcome.status.is_failure()).then(|| outcome.result.clone()),
        error: outcome.error.clone(),
        omitted_bytes: outcome.omitted_bytes,
        duration_ms: outcome.duration_ms,
        timed_out: outcome.status == ToolCallStatus::TimedOut,
        ..ToolCallRecord::opened(env.run_id, call, outcome.effect, outcome.status, outcome.started_at)
    };
    let store = runtime.stores.runs.clone();
    let along = emitter.recorder().along().await;
    match store.record_tool_call_with(&env.tenant, &record, along.events(), along.now()).await {
        Ok(()) => along.written(),
        Err(e) => tracing::warn!(run_id = %env.run_id, error = ?e, "could not record a tool call"),
    }
    if let Some(late) = late {
        runtime.platform.spawner.spawn(Box::pin(async move {
            let done = late.await;
            tracing::info!(run_id = %done.run_id, call_id = %done.call_id, duration_ms = done.duration_ms, "a timed-out tool call finished late");
            if let Err(e) = store.complete_tool_call_late(&done.tenant, &done).await {
                tracing::warn!(run_id = %done.run_id, error = ?e, "could not record a late tool completion");
            }
        }));
    }
    outcome
}
