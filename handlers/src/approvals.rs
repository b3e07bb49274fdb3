//! Approvals: the mailbox (`/api/approvals/pending`, one request, its decision), the
//! in-band decision on a session's next run request, and the standing rules
//! (`/api/approvals/rules`).
//!
//! Deciding is audited **before** it is applied: an entry that cannot be written refuses the
//! decision (`503 audit_unavailable`) and nothing changes — the one place, with skill
//! scripts, where a missing record would be the whole problem. A decision never rewrites the
//! run that stopped: once every request of that run is decided, exactly one new run (claimed
//! in the store, so two deciders racing on the last two requests start one) resumes it in the
//! same session. Through the mailbox it runs in the background and the answer names it
//! (`resumedRunId`); in-band it is the stream the run request answers with.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::approvals::{
    self, ApprovalDecision, ApprovalRecord, ApprovalRule, ApprovalStatus, Condition, MAX_CONDITIONS, MAX_DESCRIPTION,
};
use tracon_core::attribution::Attribution;
use tracon_core::error::StoreError;
use tracon_core::identity::Caller;
use tracon_core::names::{AgentName, RunId, SessionId, TenantId};
use tracon_core::ports::new_id;
use tracon_core::runs::launch::{Delivery, Start, launch};
use tracon_core::runs::request::{Resume, RunRequest, StartError};
use tracon_core::tools::effect::ToolEffect;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::audit;
use crate::error::{ApiError, ApiResult, ProblemDetails};
use crate::extract::{ApiJson, Paging, Tenant};
use crate::state::AppState;

/// Longest decision reason.
pub const MAX_REASON: usize = 1000;

/// A request as an approver reads it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// The request id (the `requestId` of the run's `approvals` frame).
    pub id: Uuid,
    /// The run that stopped.
    #[schema(value_type = String)]
    pub run_id: RunId,
    pub session_id: Option<String>,
    pub agent_name: String,
    pub call_id: String,
    pub tool_name: String,
    /// The call's arguments, as recorded.
    #[schema(value_type = Object)]
    pub arguments: Value,
    pub effect: ToolEffect,
    pub requested_by: Option<String>,
    pub created_at: DateTime<Utc>,
    /// After this the request can no longer be decided.
    pub expires_at: DateTime<Utc>,
    pub status: ApprovalStatus,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    /// The run that resumed the stopped one, once it started.
    #[schema(value_type = Option<String>)]
    pub resumed_run_id: Option<RunId>,
}

impl ApprovalView {
    pub fn new(r: ApprovalRecord, now: DateTime<Utc>) -> Self {
        Self {
            status: r.status_at(now),
            id: r.id,
            run_id: r.run_id,
            session_id: r.session_id,
            agent_name: r.agent_name,
            call_id: r.call_id,
            tool_name: r.tool_name,
            arguments: r.arguments,
            effect: r.effect,
            requested_by: r.requested_by,
            created_at: r.created_at,
            expires_at: r.expires_at,
            decided_at: r.decided_at,
            decided_by: r.decided_by,
            reason: r.reason,
            resumed_run_id: r.resumed_run_id,
        }
    }
}

/// A decision.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionBody {
    pub approved: bool,
    /// Why (at most 1000 characters); a denial's reason reaches the model.
    #[serde(default)]
    pub reason: Option<String>,
    /// With an approval: stores a rule that pre-approves this exact call (same tool, same
    /// agent, same arguments) from now on.
    #[serde(default)]
    pub dont_ask_again: bool,
}

/// A decision named by its request, as the run request carries it in-band.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InBandDecision {
    pub request_id: Uuid,
    #[serde(flatten)]
    pub decision: DecisionBody,
}

/// The answer to a mailbox decision.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionResult {
    pub approval: ApprovalView,
    /// The run that resumed the stopped one — set by the decision that completed the set.
    #[schema(value_type = Option<String>)]
    pub resumed_run_id: Option<RunId>,
    /// The stopped run's requests still waiting for a decision.
    pub pending: usize,
}

fn approval_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "approval_not_found", "The approval request does not exist.")
}

fn request_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| approval_not_found())
}

/// Pending requests of the caller's tenant that can still be decided, oldest first.
#[utoipa::path(get, path = "/api/approvals/pending", tag = "approvals",
    params(("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<ApprovalView>)))]
#[tracing::instrument(name = "approvals.pending", skip_all)]
pub async fn pending(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    paging: Paging,
) -> ApiResult<Json<Vec<ApprovalView>>> {
    let now = state.runtime.platform.clock.now();
    let rows = state.runtime.stores.approvals.list_pending(&tenant, now, paging.take).await?;
    Ok(Json(rows.into_iter().map(|r| ApprovalView::new(r, now)).collect()))
}

/// One request, in any status.
#[utoipa::path(get, path = "/api/approvals/{id}", tag = "approvals", params(("id" = String, Path, description = "Request id")),
    responses((status = 200, body = ApprovalView), (status = 404, body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "approvals.get", skip_all)]
pub async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> ApiResult<Json<ApprovalView>> {
    let now = state.runtime.platform.clock.now();
    let row = state.runtime.stores.approvals.get(&tenant, request_id(&id)?).await?.ok_or_else(approval_not_found)?;
    Ok(Json(ApprovalView::new(row, now)))
}

/// Decide one request. When it was the stopped run's last undecided request, a new run
/// resumes the conversation in the background and `resumedRunId` names it.
#[utoipa::path(post, path = "/api/approvals/{id}/decision", tag = "approvals", request_body = DecisionBody,
    params(("id" = String, Path, description = "Request id")),
    responses((status = 200, body = DecisionResult),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "Already decided (`approval_already_decided`) or expired (`approval_expired`)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "approvals.decide", skip_all)]
pub async fn decide(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Extension(caller): Extension<Caller>,
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
        Resumption::Waiting(_) | Resumption::Done => {
            Err(ApiError::new(StatusCode::CONFLICT, "already_resumed", "Another request resumed this run first."))
        }
    }
}

// ---- rules --------------------------------------------------------------------------------

/// A new rule.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateRule {
    /// A registered tool.
    #[schema(pattern = "^[A-Za-z][A-Za-z0-9_-]{0,63}$")]
    pub tool_name: String,
    /// Narrows the rule to one agent.
    #[serde(default)]
    #[schema(pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub agent_name: Option<String>,
    /// One exact call: SHA-256 (64 lowercase hex) of its canonical arguments.
    #[serde(default)]
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub arguments_hash: Option<String>,
    /// All must hold (at most 16). Never together with `argumentsHash`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub description: Option<String>,
}

/// Filters of the rule list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RuleQuery {
    pub tool_name: Option<String>,
}

fn rule_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "approval_rule_not_found", "The approval rule does not exist.")
}

/// The standing pre-approvals: each is a tool call that will never ask again.
#[utoipa::path(get, path = "/api/approvals/rules", tag = "approvals", params(RuleQuery),
    responses((status = 200, body = Vec<ApprovalRule>)))]
#[tracing::instrument(name = "approvals.rules.list", skip_all)]
pub async fn list_rules(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    query: Result<Query<RuleQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<ApprovalRule>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("validation_failed", e.body_text()))?;
    Ok(Json(state.runtime.stores.approvals.list_rules(&tenant, q.tool_name.as_deref()).await?))
}

/// Add a rule: a tool, optionally one agent, and one exact argument set (a hash) or
/// conditions — or neither, which pre-approves every call of the tool.
#[utoipa::path(post, path = "/api/approvals/rules", tag = "approvals", request_body = CreateRule,
    responses((status = 201, body = ApprovalRule), (status = 400, body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "approvals.rules.create", skip_all)]
pub async fn create_rule(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateRule>,
) -> ApiResult<Response> {
    let invalid =
        |field: &str, message: String| ApiError::bad_request("validation_failed", message).with("field", field);
    if state.runtime.catalog.tools().get(&body.tool_name).is_none() {
        return Err(invalid(
            "toolName",
            format!("No tool named '{}' is registered.", body.tool_name.chars().take(80).collect::<String>()),
        ));
    }
    if let Some(agent) = &body.agent_name {
        AgentName::parse(agent).map_err(|e| invalid("agentName", e.0))?;
    }
    if let Some(hash) = &body.arguments_hash {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(invalid("argumentsHash", "'argumentsHash' is 64 lowercase hex characters (SHA-256).".into()));
        }
        if !body.conditions.is_empty() {
            return Err(invalid("conditions", "A rule carries an arguments hash or conditions, never both.".into()));
        }
    }
    if body.conditions.len() > MAX_CONDITIONS {
        return Err(invalid("conditions", format!("A rule has at most {MAX_CONDITIONS} conditions.")));
    }
    for (i, c) in body.conditions.iter().enumerate() {
        if let Some(problem) = c.problem() {
            return Err(invalid(&format!("conditions[{i}]"), problem));
        }
    }
    let description = body.description.as_deref().map(str::trim).filter(|d| !d.is_empty());
    if description.is_some_and(|d| d.chars().count() > MAX_DESCRIPTION || d.chars().any(char::is_control)) {
        return Err(invalid(
            "description",
            format!("'description' is at most {MAX_DESCRIPTION} characters, without control characters."),
        ));
    }
    let now = state.runtime.platform.clock.now();
    let rule = ApprovalRule {
        id: new_id(state.runtime.platform.clock.as_ref()),
        tenant: tenant.clone(),
        tool_name: body.tool_name,
        agent_name: body.agent_name,
        arguments_hash: body.arguments_hash,
        conditions: body.conditions,
        description: description.map(str::to_owned),
        created_at: now,
        created_by: audit::actor(&caller),
    };
    state.runtime.stores.approvals.create_rule(&rule).await?;
    let after = serde_json::to_value(&rule).ok();
    audit::record(&state, &tenant, &caller, "approvalRule.create", ("approvalRule", &rule.id.to_string()), None, after)
        .await;
    Ok((StatusCode::CREATED, Json(rule)).into_response())
}

/// Remove a rule: calls it released ask again.
#[utoipa::path(delete, path = "/api/approvals/rules/{id}", tag = "approvals", params(("id" = String, Path, description = "Rule id")),
    responses((status = 204), (status = 404, body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "approvals.rules.delete", skip_all)]
pub async fn delete_rule(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = Uuid::parse_str(&id).map_err(|_| rule_not_found())?;
    let removed = match state.runtime.stores.approvals.delete_rule(&tenant, id).await {
        Ok(r) => r,
        Err(StoreError::NotFound) => return Err(rule_not_found()),
        Err(e) => return Err(e.into()),
    };
    let before = serde_json::to_value(&removed).ok();
    audit::record(&state, &tenant, &caller, "approvalRule.delete", ("approvalRule", &id.to_string()), before, None)
        .await;
    Ok(StatusCode::NO_CONTENT)
}
