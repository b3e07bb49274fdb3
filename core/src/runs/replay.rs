//! Replay (`POST /api/runs/{id}/replay`): the recorded input of an ended run, run again as a
//! new, sessionless, single-turn run against the agent's current definition or a selected
//! stored version. The new run names its source (`replayOfRunId`).
//!
//! Tool modes: `ReplayTools` (the default) answers each tool call from the source run's
//! recorded calls — same tool, same arguments, each answer once — and stops with
//! `replay_mismatch` at a call the source never made, so nothing runs for real; `NoTools`
//! offers the model no tools, so it can only answer; `LiveTools` runs the tools for real and
//! needs an Admin caller (`AgentsAdmin`). An agent with a client-side tool is never replayed:
//! its calls were answered by a client and never recorded on the server.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::attribution::Attribution;
use crate::identity::Caller;
use crate::keys::Scope;
use crate::names::{AgentName, RunId, TenantId};
use crate::runs::execute::execute;
use crate::runs::outcome::RunOutcome;
use crate::runs::prepare::{Options, prepare_in};
use crate::runs::request::{RunRequest, StartError};
use crate::runs::store::RunStatus;
use crate::runtime::Runtime;
use crate::tools::replayed::Recorded;

/// How a replay's tool calls are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub enum ToolMode {
    /// From the source run's recorded calls; a call it never made stops the replay.
    #[default]
    ReplayTools,
    /// No tools are offered: only the model's answer.
    NoTools,
    /// The tools run for real (side effects repeat): Admin callers only.
    LiveTools,
}

/// What to replay.
#[derive(Debug, Clone)]
pub struct Replay {
    pub source: RunId,
    pub tool_mode: ToolMode,
    /// A stored version of the source's agent; `None`: the current definition.
    pub agent_version: Option<u32>,
}

/// Why a replay does not start.
#[derive(Debug)]
pub enum ReplayRefusal {
    /// No such run in this tenant.
    NotFound,
    /// The source has not ended yet.
    NotEnded(RunStatus),
    /// The source's input was not recorded (`Tracon:RunRecording:RecordInput` off, or
    /// recording off when it ran).
    InputMissing,
    /// The agent has client-side tools (named).
    ClientTools(Vec<String>),
    /// `LiveTools` needs an Admin caller.
    AdminRequired,
    /// The selected version does not exist (or the agent is defined in code, which has none).
    VersionNotFound(u32),
    Start(StartError),
}

impl From<StartError> for ReplayRefusal {
    fn from(e: StartError) -> Self {
        Self::Start(e)
    }
}

impl From<crate::error::StoreError> for ReplayRefusal {
    fn from(e: crate::error::StoreError) -> Self {
        Self::Start(StartError::Store(e))
    }
}

/// Runs the replay to its end (the run was admitted by the caller of this function).
pub async fn replay(
    runtime: &Arc<Runtime>,
    tenant: &TenantId,
    caller: &Caller,
    attribution: Attribution,
    replay: Replay,
) -> Result<RunOutcome, ReplayRefusal> {
    let runs = &runtime.stores.runs;
    let source = runs.get_run(tenant, replay.source).await?.ok_or(ReplayRefusal::NotFound)?;
    if !source.status.is_terminal() {
        return Err(ReplayRefusal::NotEnded(source.status));
    }
    let input = runs.get_input(tenant, source.id).await?.ok_or(ReplayRefusal::InputMissing)?;
    if replay.tool_mode == ToolMode::LiveTools && !caller.allows(Scope::AgentsAdmin) {
        return Err(ReplayRefusal::AdminRequired);
    }
    let name = AgentName::parse(&source.agent_name).map_err(|_| ReplayRefusal::NotFound)?;
    let catalog = &runtime.catalog;
    let agent = match replay.agent_version {
        None => catalog.compile(tenant, &name, input.culture.as_deref(), &input.parameters).await,
        Some(v) => {
            let stored = runtime.stores.definitions.version(tenant, &name, v).await?;
            let stored = stored.ok_or(ReplayRefusal::VersionNotFound(v))?;
            let definition = Arc::new(stored.definition);
            catalog.compile_definition(tenant, definition, Some(v), input.culture.as_deref(), &input.parameters).await
        }
    }
    .map_err(|e| ReplayRefusal::Start(e.into()))?;
    let client: Vec<String> = agent.tools.iter().filter(|t| t.is_client()).map(|t| t.name().to_owned()).collect();
    if !client.is_empty() {
        return Err(ReplayRefusal::ClientTools(client));
    }
    let (agent, recorded) = match replay.tool_mode {
        ToolMode::ReplayTools => (agent, Some(Arc::new(Recorded::new(runs.list_tool_calls(tenant, source.id).await?)))),
        ToolMode::NoTools => (Arc::new(agent.without_tools()), None),
        ToolMode::LiveTools => (agent, None),
    };
    let request = RunRequest {
        tenant: tenant.clone(),
        agent: name,
        message: input.message,
        culture: input.culture,
        parameters: input.parameters,
        documents: input.documents,
        // Sessionless and single-turn: the source's conversation is not continued.
        session_id: None,
        caller: caller.clone(),
        attribution,
        resume: None,
        queued: None,
        tool_results: Vec::new(),
    };
    let options = Options { agent: Some(agent), replay_of: Some(source.id), ..Options::default() };
    let mut prepared = prepare_in(runtime, request, None, options).await?;
    prepared.replay = recorded;
    let (guard, cancel) = runtime.drain.enter(prepared.run_id);
    let outcome = execute(runtime, prepared, cancel, None).await;
    drop(guard);
    Ok(outcome)
}
