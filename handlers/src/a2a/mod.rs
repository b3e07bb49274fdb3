//! The A2A server (protocol 1.0, JSON-RPC binding): each agent named in
//! `Tracon:A2A:ExposedAgents` is published at `/a2a/{agent}`, its card at
//! `/a2a/{agent}/.well-known/agent-card.json`.
//!
//! - The **card** is public discovery metadata and names nothing a tenant wrote: the
//!   published name, its URL, the protocol, the capabilities and how to authenticate. The
//!   tenant's own description and skills (its definition's description and tools) are on the
//!   **extended card** (`GetExtendedAgentCard`), which needs the key — and the key decides
//!   the tenant.
//! - The boundary is the one the MCP server shares ([`tracon_core::exposure`]): every method
//!   needs an active **API key** with the `ExternalInvoke` scope (the static token, a JWT or
//!   an unauthenticated loopback caller are refused); its tenant is the tenant of every run,
//!   task and push configuration, so another tenant's task is missing.
//! - A **task is a run** of the published agent, started through this surface (the run
//!   carries the label [`tracon_core::webhooks::a2a::TASK_LABEL`]); its id is the run id, its
//!   `contextId` the run's session. Runs go through `admission::admit` and
//!   `launch::launch` like every other surface, each on its own call-tree budget
//!   (`Tracon:A2A:Budget:*`, depth 1 by default). An agent with an approval-required tool
//!   (its own, or a callable agent's within the budget's depth) is refused: an external
//!   caller cannot act as the missing human.
//! - Beyond the .NET product: `SendStreamingMessage` (SSE frames mapped from the run's live
//!   events), push notifications (webhook subscriptions scoped to one task, signed and
//!   delivered by `core::webhooks`) and background tasks (`returnImmediately`: a queued run).
//!
//! Files: [`settings`] (`Tracon:A2A:*`), [`rpc`] (the JSON-RPC envelope and error codes),
//! [`wire`] (A2A's objects from runs), [`card`], [`send`] (`SendMessage`,
//! `SendStreamingMessage`), [`tasks`] (`GetTask`, `CancelTask`), [`push`] (push
//! notification configurations).

pub mod card;
pub mod push;
pub mod rpc;
pub mod send;
pub mod settings;
pub mod tasks;
pub mod wire;

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::{Router, routing};
use tracon_core::names::{AgentName, TenantId};

use crate::error::ApiError;
use crate::extract::Ctx;
use crate::state::AppState;
use rpc::{RpcError, VERSION_NOT_SUPPORTED};

pub use settings::A2aSettings;

/// The protocol version served (`Major.Minor`).
pub const PROTOCOL_VERSION: &str = "1.0";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/a2a/{agent}", routing::post(call))
        .route("/a2a/{agent}/.well-known/agent-card.json", routing::get(card::public_card))
}

/// The published agent called `name`, or `404 agent_not_exposed`.
pub(crate) fn exposed(state: &AppState, name: &str) -> Result<AgentName, ApiError> {
    state.http.a2a.exposed(name).cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "agent_not_exposed",
            format!("No agent called '{}' is published through A2A.", short(name)),
        )
    })
}

fn short(value: &str) -> String {
    value.chars().take(80).collect()
}

/// The version the request speaks: the `A2A-Version` header or query parameter; none is
/// 0.3, as the specification has it.
fn version_of(headers: &HeaderMap, uri: &Uri) -> String {
    if let Some(v) = headers.get("a2a-version").and_then(|v| v.to_str().ok()) {
        return v.trim().to_owned();
    }
    uri.query()
        .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("A2A-Version=")))
        .map(str::to_owned)
        .unwrap_or_else(|| "0.3".to_owned())
}

/// `1.0` (and `1.0.x`) are served; anything else is `VersionNotSupported`.
fn check_version(version: &str) -> Result<(), RpcError> {
    let mut parts = version.split('.');
    if parts.next() == Some("1") && parts.next().is_none_or(|minor| minor == "0") {
        return Ok(());
    }
    Err(RpcError::new(
        VERSION_NOT_SUPPORTED,
        format!("This server speaks A2A {PROTOCOL_VERSION}; send 'A2A-Version: {PROTOCOL_VERSION}'."),
    )
    .with("supportedVersions", [PROTOCOL_VERSION]))
}

/// What a method needs to know about its call.
pub(crate) struct Called<'a> {
    pub state: &'a AppState,
    pub tenant: &'a TenantId,
    pub caller: &'a tracon_core::identity::Caller,
    pub agent: &'a AgentName,
    pub headers: &'a HeaderMap,
}

/// `POST /a2a/{agent}`: one JSON-RPC request.
#[tracing::instrument(name = "a2a.call", skip_all, fields(agent = %name, method))]
pub async fn call(
    Ctx { state, tenant, caller }: Ctx,
    Path(name): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let agent = exposed(&state, &name)?;
    // Only an API key with `ExternalInvoke`: the boundary the MCP server shares.
    tracon_core::exposure::check_caller(&caller).map_err(ApiError::from)?;
    if body.len() > state.http.max_body_bytes {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("The request body is larger than {} bytes.", state.http.max_body_bytes),
        ));
    }
    let call = match rpc::read(&body) {
        Ok(call) => call,
        Err((id, e)) => return Ok(rpc::error(&id, &e)),
    };
    tracing::Span::current().record("method", call.method.as_str());
    if let Err(e) = check_version(&version_of(&headers, &uri)) {
        return Ok(rpc::error(&call.id, &e));
    }
    let called = Called { state: &state, tenant: &tenant, caller: &caller, agent: &agent, headers: &headers };
    let answer = match call.method.as_str() {
        "SendMessage" => send::send(&called, call.params, false).await,
        "SendStreamingMessage" => match send::send(&called, call.params, true).await {
            // A stream's frames carry the request's id.
            Ok(send::Sent::Stream(stream)) => return Ok(send::stream_response(stream, call.id)),
            other => other,
        },
        "GetTask" => tasks::get(&called, call.params).await.map(send::Sent::Result),
        "CancelTask" => tasks::cancel(&called, call.params).await.map(send::Sent::Result),
        "SubscribeToTask" => Err(RpcError::new(
            rpc::UNSUPPORTED_OPERATION,
            "SubscribeToTask is not served: follow a task with SendStreamingMessage, GetTask or a push notification.",
        )),
        "ListTasks" => Err(RpcError::new(
            rpc::UNSUPPORTED_OPERATION,
            "ListTasks is not served: the management API lists runs (GET /api/runs).",
        )),
        "CreateTaskPushNotificationConfig" => push::create(&called, call.params).await.map(send::Sent::Result),
        "GetTaskPushNotificationConfig" => push::get(&called, call.params).await.map(send::Sent::Result),
        "ListTaskPushNotificationConfigs" => push::list(&called, call.params).await.map(send::Sent::Result),
        "DeleteTaskPushNotificationConfig" => push::delete(&called, call.params).await.map(send::Sent::Result),
        "GetExtendedAgentCard" => card::extended(&called).await.map(send::Sent::Result),
        other => Err(RpcError::new(rpc::METHOD_NOT_FOUND, format!("There is no method '{}'.", short(other)))),
    };
    Ok(match answer {
        Ok(send::Sent::Result(value)) => rpc::result(&call.id, value),
        Ok(send::Sent::Stream(stream)) => send::stream_response(stream, call.id),
        Err(e) => rpc::error(&call.id, &e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_version_1_0_is_served_and_none_means_0_3() {
        assert!(check_version("1.0").is_ok());
        assert!(check_version("1.0.2").is_ok());
        assert!(check_version("1").is_ok());
        assert_eq!(check_version("0.3").unwrap_err().code, VERSION_NOT_SUPPORTED);
        assert_eq!(check_version("1.1").unwrap_err().code, VERSION_NOT_SUPPORTED);
        let uri: Uri = "/a2a/x".parse().unwrap();
        assert_eq!(version_of(&HeaderMap::new(), &uri), "0.3");
        let uri: Uri = "/a2a/x?A2A-Version=1.0".parse().unwrap();
        assert_eq!(version_of(&HeaderMap::new(), &uri), "1.0");
    }
}
