//! Tool approvals inside a workflow's agent nodes, through the existing approval flow.
//!
//! A node's run that needs a person's approval stops `AwaitingApproval` like any run: its
//! requests wait in the mailbox and `approval.pending` fires for them. The workflow stops with
//! it: the root closes `AwaitingApproval` with a checkpoint naming the stopped node runs
//! ([`super::checkpoints::Position::approvals`]). Once every request of those runs is decided
//! (`POST /api/approvals/{id}/decision`), the decision that settled the last one resumes the
//! workflow as a **new** run from that checkpoint ([`resumption`]): each stopped node goes on
//! as its own run's approval resumption (the approved call runs, a denied one is refused to
//! the model), then the workflow goes on. Nothing done before the stop runs again, and neither
//! the stopped runs nor the stopped root are rewritten.

use crate::approvals::ApprovalStatus;
use crate::error::StoreError;
use crate::names::{RunId, SessionId, TenantId};
use crate::ports::new_id;
use crate::runs::request::Resume;
use crate::runs::store::{RunRecord, RunStatus};
use crate::runtime::Runtime;

use super::execute::NodeResume;

/// Where a decided node run's workflow stands.
pub enum Resumption {
    /// The run is not an agent node a workflow stopped with: it resumes as an agent run.
    NotANode,
    /// Requests of the stopped nodes still wait.
    Waiting(usize),
    /// Another decider resumed the workflow already (or it went on otherwise).
    Done,
    /// This caller won the resumption: the workflow run to resume and its nodes.
    Claimed(Box<Claimed>),
}

/// A claimed workflow resumption.
pub struct Claimed {
    /// The root run that stopped.
    pub root: RunRecord,
    /// Each stopped node, its new run's id claimed.
    pub nodes: Vec<NodeResume>,
}

/// Claims the resumption of the workflow `stopped` (a node run whose requests were decided)
/// stopped with, once no request of any of its stopped nodes is pending. Two deciders
/// racing on the last requests claim one: the first stopped node's claim decides.
pub async fn resumption(runtime: &Runtime, tenant: &TenantId, stopped: RunId) -> Result<Resumption, StoreError> {
    let runs = &runtime.stores.runs;
    let Some(parent) = runs.get_run(tenant, stopped).await?.and_then(|r| r.parent_run_id) else {
        return Ok(Resumption::NotANode);
    };
    let Some(root) = runs.get_run(tenant, parent).await? else { return Ok(Resumption::NotANode) };
    let checkpoints = runtime.stores.checkpoints.list(tenant, root.id).await?;
    let Some(stopped_nodes) = checkpoints
        .last()
        .map(|c| c.position.approvals.clone())
        .filter(|nodes| nodes.iter().any(|n| n.run_id == stopped))
    else {
        return Ok(Resumption::NotANode);
    };
    if root.status != RunStatus::AwaitingApproval || root.continued_by_run_id.is_some() {
        return Ok(Resumption::Done);
    }
    let approvals = &runtime.stores.approvals;
    let mut decided = Vec::with_capacity(stopped_nodes.len());
    let mut waiting = 0;
    for node in stopped_nodes {
        let records = approvals.list_for_run(tenant, node.run_id).await?;
        waiting += records.iter().filter(|r| r.status == ApprovalStatus::Pending).count();
        decided.push((node, records));
    }
    if waiting > 0 {
        return Ok(Resumption::Waiting(waiting));
    }
    let mut nodes = Vec::with_capacity(decided.len());
    for (i, (node, records)) in decided.into_iter().enumerate() {
        let run_id = RunId(new_id(runtime.platform.clock.as_ref()));
        if !approvals.claim_resume(tenant, node.run_id, run_id).await? {
            if i == 0 {
                return Ok(Resumption::Done);
            }
            // Only the first claim is contended; a node claimed elsewhere runs afresh.
            tracing::warn!(run_id = %node.run_id, "a stopped workflow node was resumed elsewhere; it runs again");
            continue;
        }
        let session_id = records.first().and_then(|r| r.session_id.as_deref()).and_then(|s| SessionId::parse(s).ok());
        nodes.push(NodeResume {
            executor_id: node.executor_id,
            resume: Resume { run_id, from_run: node.run_id, decided: records },
            session_id,
        });
    }
    Ok(Resumption::Claimed(Box::new(Claimed { root, nodes })))
}
