//! The Conversations API (`/v1/conversations`): a conversation is a session of the caller's,
//! which `POST /v1/responses` runs in when it names it.

use axum::extract::{FromRequest, Path, RawQuery};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tracon_core::identity::Caller;
use tracon_core::model::Message;
use tracon_core::names::TenantId;
use tracon_core::ports::new_id;
use tracon_core::runs::admission::attribute;
use tracon_core::sessions::{SessionItem, SessionRecord, SessionWrite};

use tracon_core::sessions::ownership::Use;

use super::responses::{Item, conversation_not_found, item_id, output_text, parse_items, visible_session};
use crate::error::ApiError;
use crate::extract::{ApiJson, Ctx, header_pairs};
use crate::openai::OpenAiResult;
use crate::openai::invalid;
use crate::state::AppState;

/// At most this many items go into a new conversation at once (OpenAI's limit).
const MAX_CONVERSATION_ITEMS: usize = 20;
/// The conversation items a page lists by default, and at most.
const DEFAULT_ITEMS_LIMIT: usize = 20;
const MAX_ITEMS_LIMIT: usize = 100;

// ---- /v1/conversations ----------------------------------------------------------------------

/// The caller's conversation `id`, for `what`; another's and an unknown one answer the same
/// `404`.
async fn conversation(
    state: &AppState,
    (tenant, caller): (&TenantId, &Caller),
    headers: &HeaderMap,
    id: &str,
    what: Use,
) -> OpenAiResult<SessionRecord> {
    visible_session(state, tenant, caller, headers, id, what).await?.ok_or_else(|| conversation_not_found(None))
}

fn conversation_json(session: &SessionRecord) -> Value {
    // Metadata is not stored; a conversation carries none.
    json!({"id": session.id, "object": "conversation", "created_at": session.created_at.timestamp(), "metadata": {}})
}

/// Creates a conversation: a session row in the caller's tenant, with the initial `items`.
/// The id is valid from now on, before any response carries it.
#[utoipa::path(post, path = "/v1/conversations", tag = "openai", request_body = Object,
    responses(
        (status = 200, description = "The `conversation`: `{\"id\": \"conv_…\", \"object\": \"conversation\", \"created_at\", \"metadata\"}`", body = Object),
        (status = 400, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object)))]
#[tracing::instrument(name = "openai.conversations.create", skip_all)]
pub async fn create_conversation(
    Ctx { state, tenant, caller }: Ctx,
    request: axum::extract::Request,
) -> OpenAiResult<Response> {
    let headers: HeaderMap = request.headers().clone();
    let ApiJson(body) = ApiJson::<Value>::from_request(request, &state).await?;
    let Some(object) = body.as_object() else {
        return Err(invalid("", "The body must be a JSON object."));
    };
    let mut messages = Vec::new();
    for (key, value) in object {
        match (key.as_str(), value) {
            ("items", Value::Null) => {}
            ("items", Value::Array(items)) if items.len() <= MAX_CONVERSATION_ITEMS => {
                for (i, item) in parse_items(items, "items")?.into_iter().enumerate() {
                    match item {
                        Item::Turn(message) => messages.push(message),
                        Item::Instructions(_) => {
                            return Err(invalid(
                                &format!("items[{i}].role"),
                                "A conversation keeps user and assistant messages; send instructions with each response.",
                            ));
                        }
                    }
                }
            }
            ("items", _) => {
                return Err(invalid(
                    "items",
                    format!("'items' must be an array of at most {MAX_CONVERSATION_ITEMS} message items."),
                ));
            }
            // Not stored: refused rather than silently dropped.
            ("metadata", m) if m.is_null() || m.as_object().is_some_and(Map::is_empty) => {}
            ("metadata", _) => {
                return Err(invalid("metadata", "Conversation metadata is not stored here; send none."));
            }
            _ => return Err(invalid(key, format!("Unrecognized request argument supplied: {key}"))),
        }
    }
    let attribution = attribute(&state.runtime, &tenant, &caller, &header_pairs(&headers)).map_err(ApiError::from)?;
    state.runtime.settings.session_ownership.may_run(attribution.user_id.as_deref(), None).map_err(ApiError::from)?;
    let clock = state.runtime.platform.clock.clone();
    let id = format!("conv_{}", new_id(clock.as_ref()).simple());
    let write = SessionWrite {
        // The agent that last spoke in it: none yet.
        agent_name: String::new(),
        run_id: None,
        messages,
        owner_user_id: attribution.user_id,
        now: clock.now(),
    };
    let session = state.runtime.stores.sessions.try_create(&tenant, &id, &write).await.map_err(ApiError::from)?;
    Ok(axum::Json(conversation_json(&session)).into_response())
}

/// A conversation of the caller's. Another tenant's (or user's) and unknown ids answer the
/// same `404`.
#[utoipa::path(get, path = "/v1/conversations/{id}", tag = "openai",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The `conversation`", body = Object),
        (status = 404, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object)))]
#[tracing::instrument(name = "openai.conversations.get", skip_all)]
pub async fn get_conversation(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> OpenAiResult<Response> {
    let session = conversation(&state, (&tenant, &caller), &headers, &id, Use::Read).await?;
    Ok(axum::Json(conversation_json(&session)).into_response())
}

/// Deletes a conversation and its items.
#[utoipa::path(delete, path = "/v1/conversations/{id}", tag = "openai",
    params(("id" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "`{\"id\", \"object\": \"conversation.deleted\", \"deleted\": true}`", body = Object),
        (status = 404, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object)))]
#[tracing::instrument(name = "openai.conversations.delete", skip_all)]
pub async fn delete_conversation(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> OpenAiResult<Response> {
    conversation(&state, (&tenant, &caller), &headers, &id, Use::Delete).await?;
    if !state.runtime.stores.sessions.delete(&tenant, &id).await.map_err(ApiError::from)? {
        return Err(conversation_not_found(None));
    }
    Ok(axum::Json(json!({"id": id, "object": "conversation.deleted", "deleted": true})).into_response())
}

/// A conversation item as OpenAI lists it; `None` for what is not a text message (the
/// agent's own tool calls and their results).
pub(super) fn conversation_item(item: &SessionItem) -> Option<Value> {
    let (role, part) = match &item.message {
        Message::User { text } => ("user", json!({"type": "input_text", "text": text})),
        Message::Assistant { text: Some(text), .. } if !text.is_empty() => ("assistant", output_text(text)),
        _ => return None,
    };
    Some(
        json!({"type": "message", "id": item_id(item.sequence), "status": "completed", "role": role, "content": [part]}),
    )
}

/// The items list's query: `limit` (1..100, default 20), `order` (`asc`/`desc`, default
/// `desc`), `after` (an item id).
pub(super) struct ItemsQuery {
    limit: usize,
    ascending: bool,
    after: Option<String>,
}

pub(super) fn items_query(raw: Option<&str>) -> OpenAiResult<ItemsQuery> {
    let mut query = ItemsQuery { limit: DEFAULT_ITEMS_LIMIT, ascending: false, after: None };
    for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "limit" => {
                query.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_ITEMS_LIMIT).contains(n))
                    .ok_or_else(|| invalid("limit", format!("'limit' is 1 to {MAX_ITEMS_LIMIT}.")))?;
            }
            "order" => {
                query.ascending = match value {
                    "asc" => true,
                    "desc" => false,
                    _ => return Err(invalid("order", "'order' is asc or desc.")),
                };
            }
            "after" => query.after = Some(value.to_owned()),
            // `include` asks for data text messages do not have.
            _ => {}
        }
    }
    Ok(query)
}

/// The conversation's messages, as OpenAI conversation items, newest first unless
/// `order=asc`; paged with `limit` and `after`.
#[utoipa::path(get, path = "/v1/conversations/{id}/items", tag = "openai",
    params(("id" = String, Path, description = "Conversation id"),
        ("limit" = Option<u32>, Query, description = "Items to return, 1..100 (default 20)"),
        ("order" = Option<String>, Query, description = "`asc` or `desc` (default)"),
        ("after" = Option<String>, Query, description = "List the items after this item id")),
    responses(
        (status = 200, description = "`{\"object\": \"list\", \"data\": [message items], \"first_id\", \"last_id\", \"has_more\"}`", body = Object),
        (status = 400, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object),
        (status = 404, description = "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}`", body = Object)))]
#[tracing::instrument(name = "openai.conversations.items", skip_all)]
pub async fn list_conversation_items(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> OpenAiResult<Response> {
    let query = items_query(raw.as_deref())?;
    let session = conversation(&state, (&tenant, &caller), &headers, &id, Use::Read).await?;
    let items = state.runtime.stores.sessions.items(&tenant, &session.id).await.map_err(ApiError::from)?;
    let all: Vec<Value> = items.iter().filter_map(conversation_item).collect();
    Ok(axum::Json(page(all, &query, "conversation")?).into_response())
}

/// One page of `all` (items in stored order) as OpenAI's list object: `query`'s order,
/// after its cursor, at most its limit. `of` names what the items belong to, for an error.
pub(super) fn page(mut all: Vec<Value>, query: &ItemsQuery, of: &str) -> OpenAiResult<Value> {
    if !query.ascending {
        all.reverse();
    }
    let start = match &query.after {
        None => 0,
        Some(after) => {
            let at = all.iter().position(|i| i["id"].as_str() == Some(after.as_str()));
            at.map(|p| p + 1).ok_or_else(|| invalid("after", format!("'after' is not an item of this {of}.")))?
        }
    };
    let rest = all.get(start..).unwrap_or_default();
    let data = &rest[..rest.len().min(query.limit)];
    let has_more = rest.len() > data.len();
    let first_id = data.first().map_or(Value::Null, |i| i["id"].clone());
    let last_id = data.last().map_or(Value::Null, |i| i["id"].clone());
    Ok(json!({"object": "list", "data": data, "first_id": first_id, "last_id": last_id, "has_more": has_more}))
}
