//! Workflow runs: `POST /api/workflows/{name}/run` (live frames, or one JSON answer with
//! `Accept: application/json`), the run's checkpoints, resuming from one, and the requests a
//! run stopped to ask a person with their answers. Every resume and answer opens a **new**
//! run; the old one is never rewritten.

use axum::Json;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tracon_core::events::RunEvent;
use tracon_core::names::{AgentName, RunId, TenantId};
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::input::InputLimits;
use tracon_core::runs::launch::Launched;
use tracon_core::runs::store::RunStatus;
use tracon_core::workflows::InputRequest;
use tracon_core::workflows::approvals::Claimed;
use tracon_core::workflows::checkpoints::Position;
use tracon_core::workflows::execute::{Answer, Input, Resume, WorkflowStart, spawn, start};
use utoipa::ToSchema;
use uuid::Uuid;

use super::definitions::load;
use crate::agents::run::{QueuedRunAccepted, accepted_body, json_answer, prefers_async};
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, OptionalJson, header_pairs};
use crate::sse;
use crate::state::AppState;

/// Longest `message` or `response`.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// What a workflow run starts with.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowRunBody {
    /// The input: the first node's message (every participant's, for `Concurrent`).
    pub message: String,
}

/// Which checkpoint to resume from.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeBody {
    /// A checkpoint of the run (`GET …/checkpoints`); its latest when omitted.
    #[serde(default)]
    pub checkpoint_id: Option<Uuid>,
}

/// A person's answer to a workflow's request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RespondBody {
    pub response: String,
}

/// A workflow run's end, as one JSON document (`Accept: application/json`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowAnswer {
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    pub status: RunStatus,
    /// The workflow's answer (the last node's; `Concurrent` merges every agent's).
    pub text: String,
    /// What every node's model calls used, together.
    pub usage: Option<tracon_core::model::Usage>,
    pub cost: Option<tracon_core::pricing::CostSnapshot>,
    pub error: Option<tracon_core::failure::RunFailure>,
    /// What the run asks a person (status `AwaitingInput`).
    pub requests: Vec<InputRequest>,
}

/// Run a workflow. The live frames are an agent run's (`run`, `update`, `done`, `error`):
/// each node's start and end is an `update` (`executorInvoked`, `executorCompleted`,
/// `executorFailed`); a run that asks a person ends with `done` `{status: "AwaitingInput",
/// requests}`. Every agent node opens a run of its own under the workflow's root run
/// (`GET /api/runs/{id}/tree`).
#[utoipa::path(post, path = "/api/workflows/{name}/run", tag = "workflows", request_body = WorkflowRunBody,
    params(("name" = String, Path, description = "Workflow name"),
        ("Accept" = Option<String>, Header, description = "`application/json` for one JSON answer at the end instead of the live stream"),
        ("Prefer" = Option<String>, Header, description = "`respond-async` queues the run on hosts that run a job consumer (`202`)")),
    responses(
        (status = 200, description = "The live run as server-sent events, or with `Accept: application/json` its end", content(
            (String = "text/event-stream"),
            (WorkflowAnswer = "application/json"))),
        (status = 202, description = "Queued (`Prefer: respond-async`): the root run's id and where to follow it", body = QueuedRunAccepted),
        problem::BadRequest, problem::NotFound, problem::Forbidden, problem::TooMany, problem::Unavailable))]
#[tracing::instrument(name = "workflows.run", skip_all, fields(workflow = %name))]
pub async fn run(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<WorkflowRunBody>,
) -> ApiResult<Response> {
    if body.message.trim().is_empty() {
        return Err(ApiError::bad_request("validation_failed", "'message' must not be empty.").with("field", "message"));
    }
    check_size(&state.runtime.settings.limits, "message", &body.message)?;
    let stored = load(&state, &tenant, &name).await?;
    // Queued when asked and this host runs a consumer: a super-step per invocation where the
    // host's soft deadline says so.
    if let Some(queue) = state.runtime.queue().filter(|_| prefers_async(&headers)) {
        let target = target(&stored.definition)?;
        let pairs = header_pairs(&headers);
        let admission = Admission {
            tenant: &tenant,
            caller: &caller,
            agent: &target,
            session: None,
            attribution: Attributed::Port(&pairs),
        };
        let attribution = admit(&state.runtime, admission).await?;
        let accepted = enqueue(&state, queue, &tenant, caller, attribution, &stored, body.message).await?;
        let body = accepted_body(accepted);
        return Ok(json_answer(StatusCode::ACCEPTED.as_u16(), &body, false));
    }
    let input = Input::Message(body.message);
    launch(&state, tenant, caller, &headers, stored.definition, Some(stored.version), input).await
}

/// Resume a workflow run from one of its checkpoints (the latest by default) as a **new**
/// run, streamed like a run; the nodes the checkpoint holds as done do not run again.
#[utoipa::path(post, path = "/api/workflows/runs/{id}/resume", tag = "workflows", request_body = ResumeBody,
    params(("id" = String, Path, description = "The workflow run"),
        ("Accept" = Option<String>, Header, description = "`application/json` for one JSON answer at the end")),
    responses(
        (status = 200, description = "The new run, live or as its end", content(
            (String = "text/event-stream"),
            (WorkflowAnswer = "application/json"))),
        problem::NotFound, problem::Conflict, problem::Forbidden, problem::TooMany, problem::Unavailable))]
#[tracing::instrument(name = "workflows.resume", skip_all, fields(run_id = %id))]
pub async fn resume(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
    // Optional: none resumes from the latest checkpoint.
    OptionalJson(body): OptionalJson<ResumeBody>,
) -> ApiResult<Response> {
    let (run_id, workflow) = workflow_run(&state, &tenant, &id).await?;
    let input = Input::Resume(Resume {
        from: run_id,
        checkpoint: body.checkpoint_id,
        answer: None,
        once: false,
        fallback: None,
        approved: Vec::new(),
    });
    let stored = load(&state, &tenant, &workflow).await?;
    launch(&state, tenant, caller, &headers, stored.definition, Some(stored.version), input).await
}

/// Answer a request a workflow run stopped for: the run goes on from its checkpoint as a
/// **new** run, streamed; work done before the question is not repeated. A request is
/// answered once (`409` for a second answer).
#[utoipa::path(post, path = "/api/workflows/runs/{id}/requests/{request}/respond", tag = "workflows", request_body = RespondBody,
    params(("id" = String, Path, description = "The workflow run"), ("request" = String, Path, description = "The request's id"),
        ("Accept" = Option<String>, Header, description = "`application/json` for one JSON answer at the end")),
    responses(
        (status = 200, description = "The resumed run, live or as its end", content(
            (String = "text/event-stream"),
            (WorkflowAnswer = "application/json"))),
        problem::BadRequest, problem::NotFound, problem::Conflict, problem::Forbidden, problem::TooMany, problem::Unavailable))]
#[tracing::instrument(name = "workflows.respond", skip_all, fields(run_id = %id))]
pub async fn respond(
    Ctx { state, tenant, caller }: Ctx,
    Path((id, request)): Path<(String, String)>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<RespondBody>,
) -> ApiResult<Response> {
    check_size(&state.runtime.settings.limits, "response", &body.response)?;
    let (run_id, workflow) = workflow_run(&state, &tenant, &id).await?;
    let pending = pending_requests(&state, &tenant, run_id).await?;
    let Some(asked) = Uuid::parse_str(&request).ok().and_then(|r| pending.into_iter().find(|p| p.request_id == r))
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "request_not_found",
            format!("Run {run_id} has no pending request '{request}'."),
        ));
    };
    let answer = Answer { request_id: asked.request_id, text: body.response };
    let input = Input::Resume(Resume {
        from: run_id,
        checkpoint: None,
        answer: Some(answer),
        once: true,
        fallback: None,
        approved: Vec::new(),
    });
    let stored = load(&state, &tenant, &workflow).await?;
    launch(&state, tenant, caller, &headers, stored.definition, Some(stored.version), input).await
}

/// Resumes a workflow whose stopped nodes' approvals are all decided (the mailbox's last
/// decision claimed it): a **new** run from the checkpoint the workflow stopped at, in the
/// background where the host lets work outlive the response, otherwise to its end before the
/// answer. Its id, or `None` (logged) when it could not start.
pub(crate) async fn resume_approved(
    state: &AppState,
    tenant: &TenantId,
    caller: tracon_core::identity::Caller,
    claimed: Claimed,
) -> Option<RunId> {
    let Claimed { root, nodes } = claimed;
    let stored = match load(state, tenant, &root.agent_name).await {
        Ok(stored) => stored,
        Err(e) => {
            tracing::warn!(run_id = %root.id, error = ?e, "the approved workflow could not resume: its definition is gone");
            return None;
        }
    };
    let input = Input::Resume(Resume {
        from: root.id,
        checkpoint: None,
        answer: None,
        once: true,
        fallback: None,
        approved: nodes,
    });
    let workflow = WorkflowStart {
        tenant: tenant.clone(),
        caller,
        // The cost of the resumed workflow belongs to whoever started it.
        attribution: tracon_core::attribution::Attribution {
            user_id: root.user_id.clone(),
            labels: root.labels.clone(),
        },
        definition: stored.definition,
        version: Some(stored.version),
        input,
        deadline: None,
    };
    let runtime = &state.runtime;
    let started = if state.http.background_outlives_response {
        spawn(runtime, workflow).await
    } else {
        start(runtime, workflow, false).await.map(|launched| launched.run_id())
    };
    match started {
        Ok(run_id) => Some(run_id),
        Err(e) => {
            tracing::warn!(from_run = %root.id, error = %e, "the approved workflow could not resume");
            None
        }
    }
}

/// A checkpoint as listed: where the run stood, not its content.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointView {
    pub id: Uuid,
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    pub super_step: u32,
    /// The envelope generation that wrote it.
    pub envelope: u32,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub position: Position,
    /// The messages it added to the conversation.
    pub message_count: usize,
}

/// A workflow run's checkpoints, oldest first.
#[utoipa::path(get, path = "/api/workflows/runs/{id}/checkpoints", tag = "workflows",
    params(("id" = String, Path, description = "The workflow run")),
    responses((status = 200, body = [CheckpointView]), problem::NotFound))]
#[tracing::instrument(name = "workflows.checkpoints", skip_all)]
pub async fn checkpoints(
    Ctx { state, tenant, .. }: Ctx,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<CheckpointView>>> {
    let (run_id, _) = workflow_run(&state, &tenant, &id).await?;
    let list = state.runtime.stores.checkpoints.list(&tenant, run_id).await?;
    let views = list
        .into_iter()
        .map(|c| CheckpointView {
            id: c.id,
            run_id: c.run_id,
            super_step: c.position.super_step,
            envelope: c.envelope,
            created_at: c.created_at,
            message_count: c.messages.len(),
            position: c.position,
        })
        .collect();
    Ok(Json(views))
}

/// The requests a workflow run stopped to ask a person: read from the run's own events, and
/// only a run in `AwaitingInput` has any.
#[utoipa::path(get, path = "/api/workflows/runs/{id}/requests", tag = "workflows",
    params(("id" = String, Path, description = "The workflow run")),
    responses((status = 200, body = [InputRequest]), problem::NotFound))]
#[tracing::instrument(name = "workflows.requests", skip_all)]
pub async fn requests(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<Vec<InputRequest>>> {
    let (run_id, _) = workflow_run(&state, &tenant, &id).await?;
    Ok(Json(pending_requests(&state, &tenant, run_id).await?))
}

fn check_size(limits: &InputLimits, field: &str, text: &str) -> ApiResult<()> {
    limits.check_message(field, text).map_err(|refusal| crate::error::input_refused(&refusal))?;
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("'{field}' is at most {MAX_MESSAGE_BYTES} bytes."),
        )
        .with("field", field));
    }
    Ok(())
}

fn run_not_found(raw: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "run_not_found", format!("No workflow run '{raw}' exists."))
}

/// The workflow run `raw` names and its workflow's name; `404` for a missing run, another
/// tenant's, or a run that is not a workflow's.
async fn workflow_run(state: &AppState, tenant: &TenantId, raw: &str) -> ApiResult<(RunId, String)> {
    let id = Uuid::parse_str(raw).map(RunId).map_err(|_| run_not_found(raw))?;
    let runs = &state.runtime.stores.runs;
    runs.get_run(tenant, id).await?.ok_or_else(|| run_not_found(raw))?;
    // The root's second event says which workflow it runs.
    let first = runs.read_events(tenant, id, 0, 2).await?;
    first
        .into_iter()
        .find_map(|e| match e.event {
            RunEvent::WorkflowStarted { workflow_name, .. } => Some((id, workflow_name)),
            _ => None,
        })
        .ok_or_else(|| run_not_found(raw))
}

/// The requests of a run in `AwaitingInput`: its terminal event's.
async fn pending_requests(state: &AppState, tenant: &TenantId, run: RunId) -> ApiResult<Vec<InputRequest>> {
    let runs = &state.runtime.stores.runs;
    let Some(record) = runs.get_run(tenant, run).await? else { return Ok(Vec::new()) };
    if record.status != RunStatus::AwaitingInput {
        return Ok(Vec::new());
    }
    let last = runs.last_sequence(tenant, run).await?;
    let tail = runs.read_events(tenant, run, last.saturating_sub(1), 1).await?;
    Ok(tail
        .into_iter()
        .find_map(|e| match e.event {
            RunEvent::RunAwaitingInput { requests } => Some(requests),
            _ => None,
        })
        .unwrap_or_default())
}

/// A workflow's name as the run policy and quotas see a run's target (it follows an agent
/// name's rules).
fn target(definition: &tracon_core::workflows::WorkflowDefinition) -> ApiResult<AgentName> {
    AgentName::parse(&definition.name).map_err(|e| ApiError::bad_request("invalid_workflow_name", e.0))
}

/// Queues an admitted workflow run (its root run row and job) and wakes the host's consumer.
pub(crate) async fn enqueue(
    state: &AppState,
    queue: &tracon_core::runtime::RunQueue,
    tenant: &TenantId,
    caller: tracon_core::identity::Caller,
    attribution: tracon_core::attribution::Attribution,
    stored: &tracon_core::definitions::StoredDefinition<tracon_core::workflows::WorkflowDefinition>,
    message: String,
) -> ApiResult<tracon_core::runs::outcome::Accepted> {
    let transport = queue.transport.as_ref();
    let (runtime, max_attempts) = (&state.runtime, queue.max_attempts);
    Ok(tracon_core::workflows::queued::enqueue(
        runtime,
        transport,
        tenant,
        caller,
        attribution,
        stored,
        message,
        max_attempts,
    )
    .await?)
}

/// Whether the caller asked for one JSON answer instead of the stream.
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get_all("accept")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/json") && !v.contains("text/event-stream"))
}

/// Admits and starts a workflow run, and answers with its stream or its end.
async fn launch(
    state: &AppState,
    tenant: TenantId,
    caller: tracon_core::identity::Caller,
    headers: &HeaderMap,
    definition: tracon_core::workflows::WorkflowDefinition,
    version: Option<u32>,
    input: Input,
) -> ApiResult<Response> {
    let runtime = state.runtime.clone();
    let target = target(&definition)?;
    let pairs = header_pairs(headers);
    let admission = Admission {
        tenant: &tenant,
        caller: &caller,
        agent: &target,
        session: None,
        attribution: Attributed::Port(&pairs),
    };
    let attribution = admit(&runtime, admission).await?;
    let json = wants_json(headers);
    let workflow =
        WorkflowStart { tenant: tenant.clone(), caller, attribution, definition, version, input, deadline: None };
    let launched = start(&runtime, workflow, !json).await?;
    tracing::Span::current().record("run_id", tracing::field::display(launched.run_id()));
    match launched {
        Launched::Live(live) => {
            let keep_alive = sse::KeepAlive::new(state.http.sse_keep_alive, runtime.platform.clock.clone());
            let frames = sse::LiveFrames::new(live.events, live.run_id, keep_alive, live.cancel.drop_guard());
            Ok(sse::response(Body::from_stream(frames)))
        }
        Launched::Finished(outcome) => {
            let requests = pending_requests(state, &tenant, outcome.run_id).await?;
            let answer = WorkflowAnswer {
                run_id: outcome.run_id,
                status: outcome.status,
                text: outcome.text,
                usage: outcome.usage,
                cost: outcome.cost,
                error: outcome.failure,
                requests,
            };
            Ok((StatusCode::OK, Json(answer)).into_response())
        }
        other => Err(ApiError::internal("WorkflowDelivery", &format!("run {} started detached", other.run_id()))),
    }
}
