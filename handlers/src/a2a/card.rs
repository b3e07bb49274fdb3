//! Agent cards. The public card (`GET /a2a/{agent}/.well-known/agent-card.json`, no
//! credential) is built from configuration alone — it cannot know a tenant, so it says
//! nothing a tenant wrote; the extended card (`GetExtendedAgentCard`) is the key's tenant's
//! definition: its description, and one skill per tool.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::rpc::RpcError;
use super::wire::{INPUT_MODES, OUTPUT_MODES};
use super::{Called, PROTOCOL_VERSION, exposed};
use crate::error::ApiError;
use crate::state::AppState;

/// The scheme and host the cards name.
fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.http.a2a.public_url {
        return url.clone();
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| matches!(*p, "http" | "https"))
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

/// The card's members that do not depend on a tenant.
fn card(state: &AppState, headers: &HeaderMap, agent: &str, description: String, skills: Value) -> Value {
    let base = base_url(state, headers);
    json!({
        "name": agent,
        "description": description,
        "supportedInterfaces": [{
            "url": format!("{base}/a2a/{agent}"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "provider": { "organization": "Tracon", "url": base },
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {
            "streaming": true,
            "pushNotifications": state.http.a2a.push_secret_name.is_some(),
            "extendedAgentCard": true,
        },
        "securitySchemes": {
            "apiKey": { "httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "bearerFormat": "Tracon API key (trk_…)",
                "description": "An API key with the ExternalInvoke scope; its tenant is the tenant of every task.",
            } },
        },
        "securityRequirements": [{ "schemes": { "apiKey": { "list": [] } } }],
        "defaultInputModes": INPUT_MODES,
        "defaultOutputModes": OUTPUT_MODES,
        "skills": skills,
    })
}

/// `GET /a2a/{agent}/.well-known/agent-card.json`: open (discovery needs no credential),
/// cacheable for five minutes.
pub async fn public_card(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let agent = exposed(&state, &name)?;
    let skills = json!([{
        "id": agent.as_str(),
        "name": agent.as_str(),
        "description": "Send a message; the agent answers with a text artifact. Its own description and tools are on the extended card, for an authenticated caller.",
        "tags": ["tracon", "agent"],
    }]);
    let description = format!(
        "The Tracon agent '{agent}'. Authenticate with an API key that has the ExternalInvoke scope; GetExtendedAgentCard describes the agent for your tenant."
    );
    let body = card(&state, &headers, agent.as_str(), description, skills);
    let mut response = axum::Json(body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    Ok(response)
}

/// `GetExtendedAgentCard`: the agent as the key's tenant defines it.
pub(crate) async fn extended(called: &Called<'_>) -> Result<Value, RpcError> {
    let runtime = &called.state.runtime;
    let agent = runtime
        .catalog
        .compile(called.tenant, called.agent, None, &Default::default())
        .await
        .map_err(|e| RpcError::from(ApiError::from(e)))?;
    let definition = &agent.definition;
    let description = definition.description.clone().unwrap_or_else(|| format!("The Tracon agent '{}'.", called.agent));
    let mut skills = vec![json!({
        "id": called.agent.as_str(),
        "name": definition.display_name.clone().unwrap_or_else(|| called.agent.to_string()),
        "description": description,
        "tags": ["tracon", "agent"],
    })];
    for tool in &agent.tools {
        skills.push(json!({
            "id": format!("{}.{}", called.agent, tool.name()),
            "name": tool.display_name.clone().unwrap_or_else(|| tool.name().to_owned()),
            "description": tool.description(),
            "tags": ["tool"],
        }));
    }
    let mut card = card(called.state, called.headers, called.agent.as_str(), description, Value::Array(skills));
    if let Some(version) = agent.version {
        card["version"] = json!(version.to_string());
    }
    Ok(card)
}
