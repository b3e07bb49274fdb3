//! `POST /api/agents/{name}/estimate`: a run's input counted against its model's context
//! window, without running it (`tracon_core::runs::estimate`). The body is a run's, parsed
//! and checked as the run route checks it; the caller must be one who may run the agent in
//! that session (the run policy and session ownership), though no quota is spent and nothing
//! is written.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::Path;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use tracon_core::runs::admission::{Admission, Attributed, may_run};
use tracon_core::runs::estimate::{Estimate, estimate as count};
use tracon_core::runs::request::RunRequest;
use tracon_core::runs::store::DocumentInput;
use utoipa::ToSchema;

use crate::agents::definitions::agent_name;
use crate::agents::run::{checked_input, message_given};
use crate::error::{ApiResult, ProblemDetails, problem, start_error};
use crate::extract::{ApiJson, Ctx, header_pairs};

/// What a run would be sent: the run body's input fields.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EstimateBody {
    /// The user's message.
    pub message: String,
    /// Count this session's history too (a session that does not exist yet has none).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Picks culture-specific instructions, as a run does.
    #[serde(default)]
    pub culture: Option<String>,
    /// Values for the agent's declared `{{name}}` parameters (strings, numbers or booleans).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub parameters: BTreeMap<String, Value>,
    /// Reference text the run would carry in its user turn.
    #[serde(default)]
    pub documents: Vec<DocumentInput>,
}

/// Estimate a run's prompt — instructions, tool schemas, the session's history and the
/// message with its documents — against the model's context window from the model catalog,
/// whether or not the pre-flight check is on. The count is an approximation, not the
/// provider's tokenizer. Calls no model and writes nothing.
#[utoipa::path(post, path = "/api/agents/{name}/estimate", tag = "agents", request_body = EstimateBody,
    params(("name" = String, Path, description = "Agent name")),
    responses((status = 200, body = Estimate), problem::BadRequest, problem::NotFound,
        (status = 422, description = "A definition that no longer compiles", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "agents.estimate", skip_all, fields(agent = %name))]
pub async fn estimate(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<EstimateBody>,
) -> ApiResult<Json<Estimate>> {
    let name = agent_name(&name)?;
    message_given(&body.message)?;
    let (session_id, parameters) = checked_input(body.culture.as_deref(), body.session_id.as_deref(), body.parameters)?;
    let pairs = header_pairs(&headers);
    let admission = Admission {
        tenant: &tenant,
        caller: &caller,
        agent: &name,
        session: session_id.as_ref(),
        attribution: Attributed::Port(&pairs),
    };
    let attribution = may_run(&state.runtime, admission).await?;
    let request = RunRequest {
        culture: body.culture,
        parameters,
        documents: body.documents,
        session_id,
        ..RunRequest::new(tenant, name.clone(), body.message, caller, attribution)
    };
    let estimate = count(&state.runtime, &request).await.map_err(|e| start_error(name.as_str(), e))?;
    Ok(Json(estimate))
}
