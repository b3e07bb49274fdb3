//! `/mcp`: the MCP server — exposed agents as MCP tools over Streamable HTTP, stateless.
//!
//! Every request stands alone: `initialize` negotiates a revision ([`protocol::VERSIONS`])
//! and issues no `Mcp-Session-Id`, so any instance answers any request, and a task is a run
//! row ([`tasks`]) read back from the store. A `POST` carries one JSON-RPC message: a request
//! is answered as JSON, or as one server-sent event when the client's `Accept` takes only
//! `text/event-stream`; a notification (or a response) is `202 Accepted`. `GET` (no
//! server-initiated stream is offered) and `DELETE` (there is no session to end) are `405`.
//!
//! The boundary is `tracon_core::exposure`: only an active API key with the `ExternalInvoke`
//! scope gets past [`post`]'s first line; an agent not exposed, or another tenant's, is an
//! unknown tool; one that would cross an approval boundary answers a tool error. A browser
//! `Origin` that is neither a loopback one nor in `Tracon:AllowedOrigins` is `403` (DNS
//! rebinding).

pub mod protocol;
mod run;
pub mod settings;
mod tasks;
mod tools;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::extract::Ctx;
use crate::state::AppState;
use protocol::{INVALID_REQUEST, Incoming, RpcError};

pub fn router() -> Router<AppState> {
    Router::new().route("/mcp", post(handle).get(no_stream).delete(no_stream))
}

/// What one request is served with.
pub(crate) struct Call<'a> {
    pub ctx: &'a Ctx,
    pub headers: &'a HeaderMap,
}

async fn handle(ctx: Ctx, request: Request) -> Response {
    let headers = request.headers().clone();
    // The whole request is read before any answer, refusals included: under `wrangler dev` a
    // Worker that answers with the body unread loses the connection, and the next request on
    // it gets wrangler's `503` ("Your worker restarted mid-request") — which is what an MCP
    // client probing a newer revision first (a `400` here) then met on its `initialize`.
    let limit = ctx.state.http.max_body_bytes;
    let Ok(body) = axum::body::to_bytes(request.into_body(), limit).await else {
        return rpc_failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            RpcError::new(INVALID_REQUEST, format!("The request body is larger than {limit} bytes.")),
        );
    };
    if !origin_allowed(&ctx, &headers) {
        return rpc_failure(
            StatusCode::FORBIDDEN,
            RpcError::new(INVALID_REQUEST, "Forbidden: this Origin may not call /mcp."),
        );
    }
    if let Err(refusal) = tracon_core::exposure::check_caller(&ctx.caller) {
        return ApiError::from(refusal).into_response();
    }
    let Some(as_sse) = answer_as_sse(&headers) else {
        return rpc_failure(
            StatusCode::NOT_ACCEPTABLE,
            RpcError::new(INVALID_REQUEST, "Not acceptable: accept application/json or text/event-stream."),
        );
    };
    let mime = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !mime.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json") {
        return rpc_failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RpcError::new(INVALID_REQUEST, "Send the JSON-RPC message with 'Content-Type: application/json'."),
        );
    }
    if let Some(version) = headers.get("mcp-protocol-version")
        && !version.to_str().is_ok_and(|v| protocol::VERSIONS.contains(&v.trim()))
    {
        return rpc_failure(
            StatusCode::BAD_REQUEST,
            RpcError::new(
                INVALID_REQUEST,
                format!("Unsupported MCP-Protocol-Version; this server speaks {}.", protocol::VERSIONS.join(", ")),
            ),
        );
    }
    let (id, method, params) = match protocol::read(&body) {
        Ok(Incoming::Accepted) => return StatusCode::ACCEPTED.into_response(),
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
        Err((id, e)) => return answer(StatusCode::BAD_REQUEST, &protocol::response(id, Err(e)), false),
    };
    let call = Call { ctx: &ctx, headers: &headers };
    let outcome = dispatch(&call, &method, params).await;
    answer(StatusCode::OK, &protocol::response(id, outcome), as_sse)
}

async fn dispatch(call: &Call<'_>, method: &str, params: Value) -> Result<Value, RpcError> {
    let settings = &call.ctx.state.http.mcp_server;
    match method {
        "initialize" => initialize(call, &params),
        "ping" => Ok(json!({})),
        "tools/list" => tools::list(call, &params).await,
        "tools/call" => tools::call(call, params).await,
        "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel" if tasks::offered(&call.ctx.state) => {
            tasks::dispatch(call, method, &params).await
        }
        _ => Err(RpcError::new(
            protocol::METHOD_NOT_FOUND,
            format!(
                "Method not found: {method}{}",
                if method.starts_with("tasks/") && !settings.enable_tasks { " (tasks are off here)" } else { "" }
            ),
        )),
    }
}

fn initialize(call: &Call<'_>, params: &Value) -> Result<Value, RpcError> {
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("Invalid params: 'protocolVersion' is required."))?;
    let version = protocol::negotiate(requested);
    let mut capabilities = json!({ "tools": { "listChanged": false } });
    if version == protocol::TASKS_VERSION && tasks::offered(&call.ctx.state) {
        capabilities["tasks"] = json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } });
    }
    Ok(json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": { "name": "tracon", "title": "Tracon", "version": env!("CARGO_PKG_VERSION") },
        "instructions": "Each tool runs one Tracon agent on a message and answers its reply.",
    }))
}

/// `None` when the client accepts neither JSON nor an event stream; otherwise whether the
/// answer goes as one server-sent event (only when the client takes nothing but a stream).
fn answer_as_sse(headers: &HeaderMap) -> Option<bool> {
    let accepts: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| m.split(';').next().unwrap_or_default().trim().to_ascii_lowercase())
        .collect();
    if accepts.is_empty() || accepts.iter().any(|m| m == "application/json" || m == "*/*" || m == "application/*") {
        return Some(false);
    }
    accepts.iter().any(|m| m == "text/event-stream" || m == "text/*").then_some(true)
}

fn answer(status: StatusCode, message: &Value, as_sse: bool) -> Response {
    if as_sse {
        let frame = format!("event: message\ndata: {message}\n\n");
        let mut response = (status, Body::from(frame)).into_response();
        let h = response.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return response;
    }
    (status, axum::Json(message)).into_response()
}

fn rpc_failure(status: StatusCode, e: RpcError) -> Response {
    answer(status, &protocol::response(Value::Null, Err(e)), false)
}

/// Browsers send `Origin`; a page on another site must not reach a local server through DNS
/// rebinding. Allowed: no `Origin` (not a browser), a loopback origin, or one listed in
/// `Tracon:AllowedOrigins`.
fn origin_allowed(ctx: &Ctx, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let origin = origin.to_str().unwrap_or_default().trim().to_ascii_lowercase();
    let host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or_default();
    let host = if host.starts_with('[') {
        host.split_inclusive(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]");
    loopback || ctx.state.http.allowed_origins.contains(&origin)
}

async fn no_stream() -> Response {
    let mut response = rpc_failure(
        StatusCode::METHOD_NOT_ALLOWED,
        RpcError::new(
            INVALID_REQUEST,
            "This stateless server offers no GET stream and no session to delete; POST JSON-RPC messages.",
        ),
    );
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
    response
}
