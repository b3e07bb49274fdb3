//! Run continuation (`Tracon:RunContinuation`, on by default): a queued run whose executor
//! went away — its job's lease was lost and the run stopped heartbeating — is continued as a
//! **new run** by whichever worker leases the job next. The interrupted run stays as it was
//! (closed `Failed`, error class `Orphaned`) and names its continuation in
//! `continuedByRunId`; the continuation names it in `continuedFromRunId`.
//!
//! The continuation rebuilds the conversation from the step ledger of the interrupted run
//! (and of every run it continued in turn), without calling the model again for a recorded
//! step: each model step's message, then the result of each call that ended. A call that
//! started and never reported an ending has an unknown outcome: it runs again only when its
//! tool is `Read` or `Write`, or declares `SafeToRepeat`; otherwise the continuation stops
//! with [`ErrorClass::ContinuationBlocked`] naming the tool. A call that never started runs.
//! Tool bodies see the same idempotency key for a call in every run of the chain.

use std::collections::HashMap;

use crate::compiler::CompiledAgent;
use crate::error::StoreError;
use crate::events::{RunEvent, ToolCallStatus};
use crate::failure::{ErrorClass, RunFailure};
use crate::model::Message;
use crate::names::{RunId, TenantId};
use crate::runs::store::{RunRecord, ToolCallRecord};
use crate::runtime::Runtime;
use crate::tools::effect::ToolEffect;

/// The custom type of the event a continuation records after `RunStarted`.
pub const CONTINUED_EVENT: &str = "tracon.run.continued";

/// The custom type of the event a run records as it hands itself over at its soft deadline.
pub const YIELDED_EVENT: &str = "tracon.run.yielded";

/// The custom type of the event a run records as a later attempt takes it back.
pub const RESUMED_EVENT: &str = "tracon.run.resumed";

/// Longest chain of continuations followed (a run continued this many times has a problem
/// continuing will not fix).
pub const MAX_CHAIN: usize = 32;

/// What a continuation starts from.
#[derive(Debug, Clone)]
pub struct Continuation {
    /// The interrupted run.
    pub from: RunId,
    /// The first run of the chain: the calls' idempotency keys are named after it.
    pub origin: RunId,
    /// The conversation after the request's own message: each recorded model step and the
    /// results of its calls that ended.
    pub replayed: Vec<Message>,
    /// The number of the last recorded model step.
    pub steps: u32,
    /// Calls of the last step whose outcome is unknown and that run again.
    pub rerun: Vec<String>,
    /// Set when a call with an unknown outcome may not run again: the continuation ends
    /// with this failure before anything runs.
    pub blocked: Option<RunFailure>,
    /// Set when the run goes on in place after handing itself over at its soft deadline
    /// (`from` is the run itself): its log, usage and start carry on.
    pub in_place: Option<InPlace>,
    /// What the call trees of the chain's runs spent, by their rows (a crashed attempt's own
    /// model calls recorded no usage), and when the chain's first run started: the budget
    /// (`Tracon:AgentGraph`) the run goes on under.
    pub tree_spent: crate::runs::tree::Spent,
    pub tree_started_at: chrono::DateTime<chrono::Utc>,
}

/// Where a run that handed itself over left its own record.
#[derive(Debug, Clone)]
pub struct InPlace {
    /// The last event of its log: the next one follows it.
    pub last_sequence: u64,
    /// The usage of its model calls so far.
    pub usage: Option<crate::model::Usage>,
    pub started_at: chrono::DateTime<chrono::Utc>,
}

impl Continuation {
    /// Reads the ledger of `from` and of the runs it continued, oldest first.
    pub async fn read(
        runtime: &Runtime,
        tenant: &TenantId,
        from: &RunRecord,
        agent: &CompiledAgent,
    ) -> Result<Self, StoreError> {
        let store = &runtime.stores.runs;
        let mut chain = vec![from.id];
        let mut earlier = from.continued_from_run_id;
        let mut tree_started_at = from.started_at;
        while let Some(id) = earlier {
            if chain.len() >= MAX_CHAIN || chain.contains(&id) {
                break;
            }
            chain.push(id);
            let run = store.get_run(tenant, id).await?;
            tree_started_at = run.as_ref().map_or(tree_started_at, |r| r.started_at.min(tree_started_at));
            earlier = run.and_then(|r| r.continued_from_run_id);
        }
        chain.reverse();
        let mut tree_spent = crate::runs::tree::Spent::default();
        for id in &chain {
            tree_spent.add(crate::runs::tree::Spent::of(&store.list_tree(tenant, *id).await?));
        }
        let origin = chain.first().copied().unwrap_or(from.id);
        let mut steps = Vec::new();
        // A later run's record of a call replaces an earlier one's (a call run again).
        let mut calls: HashMap<String, ToolCallRecord> = HashMap::new();
        for id in &chain {
            steps.extend(store.list_steps(tenant, *id).await?);
            for call in store.list_tool_calls(tenant, *id).await? {
                calls.insert(call.call_id.clone(), call);
            }
        }
        steps.sort_by_key(|s| s.step);
        steps.dedup_by_key(|s| s.step);
        let last_step = steps.last().map_or(0, |s| s.step);
        let mut continuation = Self {
            from: from.id,
            origin,
            replayed: Vec::new(),
            steps: last_step,
            rerun: Vec::new(),
            blocked: None,
            in_place: None,
            tree_spent,
            tree_started_at,
        };
        for step in steps {
            let asked = match &step.message {
                Message::Assistant { tool_calls, .. } => tool_calls.clone(),
                // A harness loop's next iteration: the feedback it was sent.
                Message::User { .. } => {
                    continuation.replayed.push(step.message);
                    continue;
                }
                _ => continue,
            };
            continuation.replayed.push(step.message);
            for call in asked {
                match calls.get(&call.id) {
                    // Never started: it runs (the pipeline admits it again).
                    None => {}
                    Some(record) if record.status == ToolCallStatus::Started => {
                        let effect = record.effect.or_else(|| agent.tool(&call.name).map(|t| t.effect));
                        let safe = agent.tool(&call.name).is_some_and(|t| t.safe_to_repeat);
                        if matches!(effect, Some(ToolEffect::Read | ToolEffect::Write)) || safe {
                            continuation.rerun.push(call.id.clone());
                        } else if continuation.blocked.is_none() {
                            continuation.blocked = Some(blocked(&call.name, &call.id, effect));
                        }
                    }
                    // Waiting for a decision when the run stopped: asked again.
                    Some(record) if record.status == ToolCallStatus::AwaitingApproval => {}
                    Some(record) => continuation.replayed.push(Message::Tool {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        content: record.result.clone().or_else(|| record.error.clone()).unwrap_or_default(),
                        is_error: record.status.is_failure(),
                    }),
                }
            }
        }
        Ok(continuation)
    }

    /// The event the continuation records first: after `RunStarted` in a new run
    /// ([`CONTINUED_EVENT`]), after the hand-over in the same one ([`RESUMED_EVENT`]).
    pub fn event(&self) -> RunEvent {
        let (custom_type, payload) = match &self.in_place {
            None => (
                CONTINUED_EVENT,
                serde_json::json!({
                    "fromRunId": self.from,
                    "originRunId": self.origin,
                    "replayedSteps": self.steps,
                    "rerunCallIds": self.rerun,
                }),
            ),
            Some(_) => (RESUMED_EVENT, serde_json::json!({ "replayedSteps": self.steps })),
        };
        RunEvent::Custom { custom_type: custom_type.to_owned(), payload: payload.to_string() }
    }
}

fn blocked(tool: &str, call_id: &str, effect: Option<ToolEffect>) -> RunFailure {
    let effect = effect.map_or_else(|| "of unknown effect".to_owned(), |e| format!("{e:?}"));
    RunFailure::new(
        ErrorClass::ContinuationBlocked,
        format!(
            "The run was not continued: the call '{call_id}' of tool '{tool}' started before the interruption and \
             its outcome is unknown, and '{tool}' is {effect} without SafeToRepeat, so it may not run twice."
        ),
    )
}

/// Opens the continuation of the ended run `from` (a `Running` row with the same agent,
/// session, user, labels and place in its tree). `None` when `from` already has one.
pub async fn open(runtime: &Runtime, tenant: &TenantId, from: &RunRecord) -> Result<Option<RunRecord>, StoreError> {
    let clock = runtime.platform.clock.as_ref();
    let next = RunRecord {
        session_id: from.session_id.clone(),
        user_id: from.user_id.clone(),
        labels: from.labels.clone(),
        parent_run_id: from.parent_run_id,
        root_run_id: from.root_run_id,
        depth: from.depth,
        continued_from_run_id: Some(from.id),
        ..RunRecord::opened(
            RunId(crate::ports::new_id(clock)),
            &from.agent_name,
            from.agent_version,
            crate::runs::store::RunStatus::Running,
            clock.now(),
        )
    };
    Ok(runtime.stores.runs.open_continuation(tenant, from.id, &next).await?.then_some(next))
}
