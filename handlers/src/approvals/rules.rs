//! Standing approval rules (`/api/approvals/rules`): a rule waives the approval of matching
//! calls. Served with the security administration on every host.

use axum::Json;
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracon_core::approvals::{ApprovalRule, Condition, MAX_CONDITIONS, MAX_DESCRIPTION};
use tracon_core::error::StoreError;
use tracon_core::names::AgentName;
use tracon_core::ports::new_id;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::audit;
use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx};

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
    Ctx { state, tenant, .. }: Ctx,
    query: Result<Query<RuleQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<ApprovalRule>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request("validation_failed", e.body_text()))?;
    Ok(Json(state.runtime.stores.approvals.list_rules(&tenant, q.tool_name.as_deref()).await?))
}

/// Add a rule: a tool, optionally one agent, and one exact argument set (a hash) or
/// conditions — or neither, which pre-approves every call of the tool.
#[utoipa::path(post, path = "/api/approvals/rules", tag = "approvals", request_body = CreateRule,
    responses((status = 201, body = ApprovalRule), problem::BadRequest))]
#[tracing::instrument(name = "approvals.rules.create", skip_all)]
pub async fn create_rule(
    Ctx { state, tenant, caller }: Ctx,
    ApiJson(body): ApiJson<CreateRule>,
) -> ApiResult<Response> {
    let invalid =
        |field: &str, message: String| ApiError::bad_request("validation_failed", message).with("field", field);
    // A code tool, or a `{server}_{tool}` of one of the tenant's MCP servers.
    let mcp_tool = match body.tool_name.split_once('_').map(|(s, _)| tracon_core::mcp::McpServerName::parse(s)) {
        Some(Ok(server)) => state.runtime.mcp.store().get(&tenant, &server).await?.is_some(),
        _ => false,
    };
    if state.runtime.catalog.tools().get(&body.tool_name).is_none() && !mcp_tool {
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
    responses((status = 204), problem::NotFound))]
#[tracing::instrument(name = "approvals.rules.delete", skip_all)]
pub async fn delete_rule(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<StatusCode> {
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
