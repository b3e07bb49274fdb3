//! Agents calling agents: the [`ChildRuns`] a run's generated agent tools call.
//!
//! A call is checked first — the tree's depth and child-run limits, and its spend so far — and
//! a refusal is the tool's result (no run row is created). Then the child is prepared like any
//! run, in the caller's tenant, with its own run row (parent, root and depth set), and
//! executes on the platform's spawner in this invocation, under the tree's one budget.
//! `child.started` and `child.completed` go to the root's log. The wait is two-layered: at
//! the child deadline the child's cancellation token fires (it stops at its next check, and
//! ends `Canceled`); at the wait timeout the caller stops waiting and the tree goes on, while
//! a child still running finishes in the background and its result is discarded. A wait
//! limit that fires writes `child.timed_out` naming the layer; a child that failed on its
//! own (a provider that did not answer) is reported as that failure, never as a timeout.
//!
//! A child cannot wait in the middle of its parent's tree: one that needs a person's approval
//! or hands tool calls back to a client fails (`child_cannot_wait`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::attribution::Attribution;
use crate::events::RunEvent;
use crate::names::{AgentName, RunId};
use crate::ports::millis_between;
use crate::runs::outcome::RunOutcome;
use crate::runs::prepare::{Options, PreparedRun, prepare_in};
use crate::runs::request::{RunRequest, StartError};
use crate::runs::store::RunStatus;
use crate::runs::tree::Limit;
pub use crate::runs::tree::Subtree;
use crate::runtime::Runtime;
use crate::tools::agents::ChildRuns;
use crate::tools::{ToolContext, ToolError, ToolOutput};

/// Executes a prepared child run to its end (the run executor, handed in so this module
/// does not import it back).
pub type RunChild = fn(Arc<Runtime>, PreparedRun, CancellationToken) -> BoxFuture<'static, RunOutcome>;

/// One run's [`ChildRuns`]: its place, its caller's identity and wait limits.
pub struct Invoker {
    runtime: Arc<Runtime>,
    /// The calling run's own place and the root's log.
    subtree: Subtree,
    run_id: RunId,
    attribution: Attribution,
    child_deadline: Duration,
    wait_timeout: Duration,
    run_child: RunChild,
}

impl Invoker {
    /// The invoker of run `run_id`, whose agent's definition may override the installation's
    /// wait limits.
    pub fn new(
        runtime: Arc<Runtime>,
        subtree: Subtree,
        run_id: RunId,
        attribution: Attribution,
        sub_agents: Option<&crate::definition::SubAgentSettings>,
        run_child: RunChild,
    ) -> Self {
        let defaults = runtime.settings.sub_agents;
        let seconds = |v: Option<u32>| v.map(|s| Duration::from_secs(u64::from(s)));
        let child_deadline =
            seconds(sub_agents.and_then(|s| s.child_deadline_seconds)).unwrap_or(defaults.child_deadline);
        let wait_timeout = seconds(sub_agents.and_then(|s| s.wait_timeout_seconds))
            .unwrap_or(defaults.wait_timeout)
            .max(child_deadline);
        Self { runtime, subtree, run_id, attribution, child_deadline, wait_timeout, run_child }
    }

    async fn record(&self, event: RunEvent) {
        self.subtree.root_log.record(&event).await;
    }
}

/// A readable sentence for a child that could not start.
fn start_refusal(agent: &str, e: &StartError) -> String {
    match e {
        StartError::Agent(crate::catalog::CatalogError::NotFound) => format!("There is no agent named '{agent}'."),
        StartError::Agent(_) => format!("The agent '{agent}' cannot run: its definition does not compile."),
        StartError::Store(_) => format!("The agent '{agent}' could not be started: the store did not answer."),
        StartError::Documents(m) | StartError::Resume(m) | StartError::ToolResults(m) => {
            format!("The agent '{agent}' could not be started: {m}")
        }
        StartError::ContextWindow(over) => format!("The agent '{agent}' could not be started: {}", over.message()),
        StartError::Caller(refusal) => format!("The agent '{agent}' could not be started: {}", refusal.message),
        StartError::Session(m) => format!("The agent '{agent}' could not be started: {}", m.message()),
        StartError::Input(i) => format!("The agent '{agent}' could not be started: {}", i.message()),
    }
}

fn refusal(agent: &str, limit: Limit) -> String {
    format!(
        "The agent '{agent}' was not called: the call tree reached its {} limit (Tracon:AgentGraph).",
        limit.setting()
    )
}

#[async_trait::async_trait]
impl ChildRuns for Invoker {
    async fn call(&self, agent: &str, task: String, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let runtime = &self.runtime;
        let clock = runtime.platform.clock.clone();
        let place = self.subtree.place.child_of(self.run_id);
        self.subtree
            .place
            .budget
            .claim_child(place.depth, clock.now())
            .map_err(|l| ToolError::message(refusal(agent, l)))?;
        let name = AgentName::parse(agent).map_err(|e| ToolError::message(e.0))?;
        let request = RunRequest {
            // The caller's tenant: a child never runs anywhere else.
            tenant: ctx.tenant.clone(),
            agent: name,
            message: task,
            culture: None,
            parameters: Default::default(),
            documents: Vec::new(),
            session_id: None,
            caller: ctx.caller.clone(),
            attribution: self.attribution.clone(),
            resume: None,
            queued: None,
            tool_results: Vec::new(),
        };
        let mut prepared = prepare_in(runtime, request, None, Options { place: Some(&place), ..Options::default() })
            .await
            .map_err(|e| ToolError::message(start_refusal(agent, &e)))?;
        let child_id = prepared.run_id;
        prepared.tree = Some(Subtree { place, root_log: self.subtree.root_log.clone() });
        self.record(RunEvent::ChildStarted {
            child_run_id: child_id,
            parent_run_id: self.run_id,
            agent_name: agent.to_owned(),
            depth: self.subtree.place.depth + 1,
            call_id: ctx.call_id.clone(),
        })
        .await;

        // The child's token: the call's (a cancelled parent cancels it), fired at the deadline.
        let cancel = ctx.cancel.child_token();
        let (done, mut outcome) = oneshot::channel();
        let execution = (self.run_child)(runtime.clone(), prepared, cancel.clone());
        let (guard, _) = runtime.drain.enter(child_id);
        runtime.platform.spawner.spawn(Box::pin(async move {
            let _guard = guard;
            let _ = done.send(execution.await);
        }));
        let started = clock.now();
        let timed_out = |layer: &str| RunEvent::ChildRunTimedOut {
            child_run_id: child_id,
            parent_run_id: self.run_id,
            agent_name: agent.to_owned(),
            layer: layer.to_owned(),
            after_ms: millis_between(started, clock.now()),
        };
        let ended = tokio::select! {
            biased;
            r = &mut outcome => r.ok(),
            _ = clock.sleep(self.child_deadline) => None,
        };
        let ended = match ended {
            Some(o) => Some((o, false)),
            None => {
                cancel.cancel();
                let rest = self.wait_timeout.saturating_sub(self.child_deadline);
                tokio::select! {
                    biased;
                    r = &mut outcome => r.ok().map(|o| (o, true)),
                    _ = clock.sleep(rest) => None,
                }
            }
        };
        let Some((child, past_deadline)) = ended else {
            self.record(timed_out("WaitTimeout")).await;
            return Err(ToolError::message(format!(
                "The agent '{agent}' did not answer within its wait timeout ({} s); the run goes on without its answer.",
                self.wait_timeout.as_secs()
            )));
        };
        self.record(RunEvent::ChildCompleted {
            child_run_id: child_id,
            parent_run_id: self.run_id,
            agent_name: agent.to_owned(),
            status: format!("{:?}", child.status),
            usage: child.usage,
            error: child.failure.clone(),
        })
        .await;
        match child.status {
            RunStatus::Completed => Ok(ToolOutput::from(child.text)),
            RunStatus::Canceled if past_deadline => {
                self.record(timed_out("ChildDeadline")).await;
                Err(ToolError::message(format!(
                    "The agent '{agent}' ran past its deadline ({} s) and was stopped.",
                    self.child_deadline.as_secs()
                )))
            }
            _ => {
                let why = child.failure.map_or_else(|| "it did not finish.".to_owned(), |f| f.message);
                Err(ToolError::message(format!("The agent '{agent}' failed: {why}")))
            }
        }
    }
}
