//! Deciding: through the mailbox (`POST /api/approvals/{id}/decision`) and in band (the
//! session's next run request). Audited before applied; the last decision of a stopped run
//! claims its resumption and starts it through the run lifecycle.

use axum::Json;
use axum::extract::Path;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::approvals::{self, ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStatus};
use tracon_core::attribution::Attribution;
use tracon_core::error::StoreError;
use tracon_core::identity::Caller;
use tracon_core::names::{AgentName, RunId, SessionId, TenantId};
use tracon_core::ports::new_id;
use tracon_core::runs::launch::{Delivery, Start, launch};
use tracon_core::runs::request::{Resume, RunRequest, StartError};
use tracon_core::workflows::approvals as workflow_approvals;
use uuid::Uuid;

use super::{ApprovalView, DecisionBody, DecisionResult, InBandDecision, MAX_REASON, approval_not_found, request_id};
use crate::audit;
use crate::error::{ApiError, ApiResult, ProblemDetails, problem};
use crate::extract::{ApiJson, Ctx};
use crate::state::AppState;

/// Decide one request. When it was the stopped run's last undecided request, a new run
/// resumes the conversation in the background and `resumedRunId` names it.
#[utoipa::path(post, path = "/api/approvals/{id}/decision", tag = "approvals", request_body = DecisionBody,
    params(("id" = String, Path, description = "Request id")),
    responses((status = 200, body = DecisionResult), problem::BadRequest, problem::NotFound,
        (status = 409, description = "Already decided (`approval_already_decided`) or expired (`approval_expired`)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "approvals.decide", skip_all)]
pub async fn decide(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DecisionBody>,
) -> ApiResult<Json<DecisionResult>> {
    let id = request_id(&id)?;
    let now = state.runtime.platform.clock.now();
    let record = state.runtime.stores.approvals.get(&tenant, id).await?.ok_or_else(approval_not_found)?;
    // Deciding may start a run: the host's run policy is asked first.
    let start = RunAction::StartRun { agent: &record.agent_name, session: record.session_id.as_deref() };
    if !is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, start).await {
        return Err(ApiError::forbidden("run_denied", "The authorization policy does not allow this run."));
    }
    let decided = apply(&state, &tenant, &caller, &record, &body, now).await?;
    let (resumed, pending) = match resumption(&state, &tenant, &caller, decided.run_id).await? {
        Resumption::Waiting(pending) => (None, pending),
        Resumption::Claimed(request) => (start_in_background(&state, *request).await, 0),
        Resumption::Workflow(claimed) => {
            (crate::workflows::run::resume_approved(&state, &tenant, caller, *claimed).await, 0)
        }
        Resumption::Done => (None, 0),
    };
    let approval = state.runtime.stores.approvals.get(&tenant, id).await?.unwrap_or(decided);
    Ok(Json(DecisionResult { approval: ApprovalView::new(approval, now), resumed_run_id: resumed, pending }))
}

/// Checks a decision against its request, writes the audit entry, then applies it. Shared
/// by the mailbox and the in-band path.
pub(crate) async fn apply(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    record: &ApprovalRecord,
    body: &DecisionBody,
    now: DateTime<Utc>,
) -> ApiResult<ApprovalRecord> {
    let reason = body.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    if reason.is_some_and(|r| r.chars().count() > MAX_REASON || r.chars().any(|c| c.is_control() && c != '\n')) {
        return Err(ApiError::bad_request(
            "validation_failed",
            format!("'reason' is at most {MAX_REASON} characters, without control characters."),
        )
        .with("field", "reason"));
    }
    if body.dont_ask_again && !body.approved {
        return Err(ApiError::bad_request("validation_failed", "'dontAskAgain' goes with an approval only.")
            .with("field", "dontAskAgain"));
    }
    check_open(record, now)?;
    let actor = audit::actor(caller);
    let action = if body.approved { "approval.approve" } else { "approval.deny" };
    let id = record.id.to_string();
    let before = serde_json::to_value(ApprovalView::new(record.clone(), now)).unwrap_or(Value::Null);
    let after = json!({ "status": if body.approved { "Approved" } else { "Denied" }, "reason": reason,
        "dontAskAgain": body.dont_ask_again });
    // Audit before apply: no entry, no decision.
    audit::record_before_apply(state, tenant, caller, action, ("approval", &id), Some(&before), Some(&after)).await?;
    let decision = ApprovalDecision { approved: body.approved, decided_by: actor, reason: reason.map(str::to_owned) };
    let decided = match state.runtime.stores.approvals.decide(tenant, record.id, &decision, now).await {
        Ok(d) => d,
        Err(StoreError::NotFound) => return Err(approval_not_found()),
        Err(StoreError::Conflict(_)) => return Err(already_decided()),
        Err(e) => return Err(e.into()),
    };
    if body.dont_ask_again {
        remember(state, tenant, caller, &decided, now).await;
    }
    Ok(decided)
}

fn already_decided() -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "approval_already_decided", "This approval request was already decided.")
}

fn check_open(record: &ApprovalRecord, now: DateTime<Utc>) -> ApiResult<()> {
    match record.status_at(now) {
        ApprovalStatus::Pending => Ok(()),
        ApprovalStatus::Expired => Err(ApiError::new(
            StatusCode::CONFLICT,
            "approval_expired",
            format!(
                "This approval request expired at {}; it can no longer be decided.",
                record.expires_at.to_rfc3339()
            ),
        )
        .with("expiresAt", record.expires_at)),
        ApprovalStatus::Approved | ApprovalStatus::Denied => Err(already_decided()),
    }
}

/// "Don't ask again": a rule for this exact call. Best effort — the decision stands.
async fn remember(state: &AppState, tenant: &TenantId, caller: &Caller, decided: &ApprovalRecord, now: DateTime<Utc>) {
    let rule = ApprovalRule {
        id: new_id(state.runtime.platform.clock.as_ref()),
        tenant: tenant.clone(),
        tool_name: decided.tool_name.clone(),
        agent_name: Some(decided.agent_name.clone()),
        arguments_hash: Some(approvals::arguments_hash(&decided.arguments)),
        conditions: Vec::new(),
        description: Some(format!("Don't ask again (approval {}).", decided.id)),
        created_at: now,
        created_by: audit::actor(caller),
    };
    match state.runtime.stores.approvals.create_rule(&rule).await {
        Ok(()) => {
            let after = serde_json::to_value(&rule).ok();
            audit::record(
                state,
                tenant,
                caller,
                "approvalRule.create",
                ("approvalRule", &rule.id.to_string()),
                None,
                after,
            )
            .await;
        }
        Err(e) => tracing::warn!(approval = %decided.id, error = ?e, "could not store the don't-ask-again rule"),
    }
}

/// Where a stopped run stands after a decision.
pub(crate) enum Resumption {
    /// Requests still wait.
    Waiting(usize),
    /// This caller won the resumption: the run to start.
    Claimed(Box<RunRequest>),
    /// The run is a workflow's agent node and this caller won the workflow's resumption.
    Workflow(Box<workflow_approvals::Claimed>),
    /// Another decider resumed it already.
    Done,
}

/// Claims the resumption of `stopped` once none of its requests is pending, and builds the
/// run that continues it: the same agent, session, culture and parameters.
pub(crate) async fn resumption(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    stopped: RunId,
) -> ApiResult<Resumption> {
    match workflow_approvals::resumption(&state.runtime, tenant, stopped).await? {
        workflow_approvals::Resumption::NotANode => {}
        workflow_approvals::Resumption::Waiting(n) => return Ok(Resumption::Waiting(n)),
        workflow_approvals::Resumption::Done => return Ok(Resumption::Done),
        workflow_approvals::Resumption::Claimed(claimed) => return Ok(Resumption::Workflow(claimed)),
    }
    let store = &state.runtime.stores.approvals;
    let records = store.list_for_run(tenant, stopped).await?;
    let waiting = records.iter().filter(|r| r.status == ApprovalStatus::Pending).count();
    if waiting > 0 {
        return Ok(Resumption::Waiting(waiting));
    }
    let Some(first) = records.first() else { return Ok(Resumption::Done) };
    let run_id = RunId(new_id(state.runtime.platform.clock.as_ref()));
    if !store.claim_resume(tenant, stopped, run_id).await? {
        return Ok(Resumption::Done);
    }
    let input = match state.runtime.stores.runs.get_input(tenant, stopped).await {
        Ok(input) => input,
        Err(e) => {
            tracing::warn!(run_id = %stopped, error = ?e, "could not read the stopped run's input; resuming without it");
            None
        }
    };
    let agent = AgentName::parse(&first.agent_name).map_err(|e| ApiError::bad_request("validation_failed", e.0))?;
    let session_id = first.session_id.as_deref().and_then(|s| SessionId::parse(s).ok());
    Ok(Resumption::Claimed(Box::new(RunRequest {
        tenant: tenant.clone(),
        agent,
        message: String::new(),
        culture: input.as_ref().and_then(|i| i.culture.clone()),
        parameters: input.map(|i| i.parameters).unwrap_or_default(),
        documents: Vec::new(),
        session_id,
        caller: caller.clone(),
        // The cost of the resumed conversation belongs to whoever started it.
        attribution: Attribution { user_id: first.requested_by.clone(), labels: Default::default() },
        resume: Some(Resume { run_id, from_run: stopped, decided: records }),
        queued: None,
        tool_results: Vec::new(),
    })))
}

/// Starts a claimed resumption without a stream — in the background where the host lets
/// work outlive the response, otherwise to its end before the answer. A resumption that
/// cannot start is logged.
async fn start_in_background(state: &AppState, request: RunRequest) -> Option<RunId> {
    let from = request.resume.as_ref().map(|r| r.from_run);
    let delivery = if state.http.background_outlives_response { Delivery::Background } else { Delivery::Buffered };
    match launch(&state.runtime, Start::new(request, delivery)).await {
        Ok(launched) => Some(launched.run_id()),
        Err(e) => {
            tracing::warn!(from_run = ?from, error = ?describe(&e), "the approved run could not resume");
            None
        }
    }
}

fn describe(e: &StartError) -> String {
    match e {
        StartError::Agent(a) => format!("{a:?}"),
        StartError::Documents(m) | StartError::Resume(m) | StartError::ToolResults(m) => m.clone(),
        StartError::ContextWindow(over) => over.message(),
        StartError::Caller(refusal) => refusal.message.clone(),
        StartError::Session(m) => m.message(),
        StartError::Input(i) => i.message(),
        StartError::Store(s) => format!("{s:?}"),
    }
}

/// Most decisions one run request may carry.
pub const MAX_IN_BAND: usize = 64;

/// The in-band path: the session's next run request decides every pending request of the
/// run that stopped, and the answer is the resumed run. Returns the run to start.
pub(crate) async fn in_band(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    agent: &AgentName,
    session: &SessionId,
    decisions: &[InBandDecision],
) -> ApiResult<RunRequest> {
    let invalid = |message: String| ApiError::bad_request("validation_failed", message).with("field", "approvals");
    if decisions.len() > MAX_IN_BAND {
        return Err(invalid(format!("A run request carries at most {MAX_IN_BAND} decisions.")));
    }
    let store = &state.runtime.stores.approvals;
    let now = state.runtime.platform.clock.now();
    let mut records = Vec::with_capacity(decisions.len());
    for (i, d) in decisions.iter().enumerate() {
        if decisions[..i].iter().any(|e| e.request_id == d.request_id) {
            return Err(invalid(format!("Request {} is decided twice.", d.request_id)));
        }
        let record = store.get(tenant, d.request_id).await?.ok_or_else(approval_not_found)?;
        if record.session_id.as_deref() != Some(session.as_str()) || record.agent_name != agent.as_str() {
            return Err(invalid(format!(
                "Request {} belongs to another session or agent; decide it there or through /api/approvals.",
                d.request_id
            )));
        }
        if records.first().is_some_and(|f: &ApprovalRecord| f.run_id != record.run_id) {
            return Err(invalid("The decisions belong to more than one stopped run.".into()));
        }
        check_open(&record, now)?;
        records.push(record);
    }
    let Some(stopped) = records.first().map(|r| r.run_id) else {
        return Err(invalid("'approvals' names no request.".into()));
    };
    // A workflow's node goes on with its workflow, which the mailbox resumes.
    if state.runtime.stores.runs.get_run(tenant, stopped).await?.is_some_and(|r| r.parent_run_id.is_some()) {
        return Err(invalid(
            "These requests are a workflow node's; decide them through /api/approvals/{id}/decision, which resumes the workflow."
                .into(),
        ));
    }
    let missing: Vec<Uuid> = store
        .list_for_run(tenant, stopped)
        .await?
        .into_iter()
        .filter(|r| r.status_at(now) == ApprovalStatus::Pending && !decisions.iter().any(|d| d.request_id == r.id))
        .map(|r| r.id)
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::bad_request(
            "approvals_incomplete",
            "Decide every request the stopped run is waiting for; the missing ones are listed.",
        )
        .with("missing", missing));
    }
    for (record, d) in records.iter().zip(decisions) {
        apply(state, tenant, caller, record, &d.decision, now).await?;
    }
    match resumption(state, tenant, caller, stopped).await? {
        Resumption::Claimed(request) => Ok(*request),
        Resumption::Waiting(_) | Resumption::Done | Resumption::Workflow(_) => {
            Err(ApiError::new(StatusCode::CONFLICT, "already_resumed", "Another request resumed this run first."))
        }
    }
}

// ---- rules --------------------------------------------------------------------------------
