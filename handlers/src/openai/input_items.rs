//! `GET /v1/responses/{id}/input_items`: what a stored response was given, as conversation
//! items are listed. Apart from `responses.rs` and `conversations.rs`, which it reads both of,
//! so neither imports the other back.

use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tracon_core::events::RunEvent;
use tracon_core::model::Message;
use tracon_core::sessions::SessionItem;

use super::conversations::{conversation_item, items_query, page};
use super::responses::{response_not_found, stored_response};
use crate::error::ApiError;
use crate::extract::Ctx;
use crate::openai::OpenAiResult;

/// The input a stored response was given — the conversation before its answer, its user
/// message last — as a page of message items (`limit`, `order`, `after` as for a
/// conversation's items).
#[utoipa::path(get, path = "/v1/responses/{id}/input_items", tag = "openai",
    params(("id" = String, Path, description = "Response id (`resp_…`)")),
    responses(
        (status = 200, description = "`{\"object\": \"list\", \"data\", \"first_id\", \"last_id\", \"has_more\"}`", body = Object),
        (status = 404, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object)))]
#[tracing::instrument(name = "openai.responses.input_items", skip_all)]
pub async fn list_input_items(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
    headers: HeaderMap,
) -> OpenAiResult<Response> {
    let query = items_query(raw.as_deref())?;
    let stored = stored_response(&state, &tenant, &caller, &headers, &id).await?.ok_or_else(response_not_found)?;
    // The tool calls the run made itself: their results are its output, not its input.
    let events = state.runtime.stores.runs.read_events(&tenant, stored.run_id, 0, MAX_EVENTS_READ).await;
    let ran_here: std::collections::BTreeSet<String> = events
        .map_err(ApiError::from)?
        .into_iter()
        .filter_map(|e| match e.event {
            RunEvent::ToolInvoking { call_id, .. } => Some(call_id),
            _ => None,
        })
        .collect();
    let all: Vec<Value> = stored.input(&ran_here).into_iter().flat_map(input_items).collect();
    Ok(axum::Json(page(all, &query, "response's input")?).into_response())
}

/// Most events of a run read to tell its own tool calls from the caller's.
const MAX_EVENTS_READ: usize = 10_000;

/// A session item as the input items it was: a message, or the client-side `function_call`s
/// of an assistant message and the `function_call_output` that answered one.
fn input_items(item: &SessionItem) -> Vec<Value> {
    match &item.message {
        Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => tool_calls
            .iter()
            .enumerate()
            .map(|(j, c)| {
                json!({"type": "function_call", "id": format!("fc_{:06}_{j}", item.sequence), "call_id": c.id,
                    "name": c.name, "arguments": c.arguments, "status": "completed"})
            })
            .collect(),
        Message::Tool { call_id, content, .. } => vec![json!({"type": "function_call_output",
            "id": format!("fco_{:06}", item.sequence), "call_id": call_id, "output": content, "status": "completed"})],
        _ => conversation_item(item).into_iter().collect(),
    }
}
