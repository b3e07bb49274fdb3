//! `/api/sessions`: conversations between turns.
//!
//! A session's history is stored as ordered items, so `GET /api/sessions/{id}` returns
//! `messages` in sequence; a message's `sequence` is the number the branch endpoint takes.
//! Branching copies items into a new session — the parent is never touched, and the
//! pointer back to it is provenance only.

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing;
use serde::{Deserialize, Serialize};
use tracon_core::access::{RunAction, is_allowed};
use tracon_core::error::StoreError;
use tracon_core::identity::Caller;
use tracon_core::names::SessionId;
use tracon_core::names::TenantId;
use tracon_core::ports::new_id;
use tracon_core::runs::admission::{attribute, user_id};
use tracon_core::sessions::ownership::Use;
use tracon_core::sessions::{SessionItem, SessionRecord};
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult, problem};
use crate::extract::{ApiJson, Ctx, Paging, header_pairs};
use crate::state::AppState;

/// The sessions group.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/sessions", routing::get(list))
        .route("/api/sessions/{id}", routing::get(get).delete(delete))
        .route("/api/sessions/{id}/branch", routing::post(branch))
}

/// A session with its conversation.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    #[serde(flatten)]
    pub session: SessionRecord,
    /// The conversation, in sequence order.
    pub messages: Vec<SessionItem>,
}

fn session_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "session_not_found", "The session does not exist.")
}

/// A session the policy denies answers exactly as a missing one.
async fn allowed(state: &AppState, caller: &Caller, tenant: &TenantId, action: RunAction<'_>) -> ApiResult<()> {
    if is_allowed(state.runtime.run_authorizer.as_ref(), caller, tenant, action).await {
        Ok(())
    } else {
        Err(session_not_found())
    }
}

/// Session ownership: another user's session answers exactly as a missing one.
fn owned(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    headers: &HeaderMap,
    session: &SessionRecord,
    what: Use,
) -> ApiResult<()> {
    let ownership = &state.runtime.settings.session_ownership;
    if !ownership.enabled {
        return Ok(());
    }
    let user = user_id(&state.runtime, tenant, caller, &header_pairs(headers));
    if ownership.may(caller, user.as_deref(), session, what) { Ok(()) } else { Err(session_not_found()) }
}

fn session_id(raw: &str) -> ApiResult<SessionId> {
    // An id that cannot exist answers like a missing one.
    SessionId::parse(raw).map_err(|_| session_not_found())
}

/// List sessions, most recently updated first.
#[utoipa::path(get, path = "/api/sessions", tag = "sessions",
    params(("skip" = Option<u32>, Query, description = "Items to skip"), ("take" = Option<u32>, Query, description = "Items to return, 1..200 (default 50)")),
    responses((status = 200, body = [SessionRecord])))]
#[tracing::instrument(name = "sessions.list", skip_all)]
pub async fn list(
    Ctx { state, tenant, caller }: Ctx,
    headers: HeaderMap,
    paging: Paging,
) -> ApiResult<Json<Vec<SessionRecord>>> {
    if !is_allowed(state.runtime.run_authorizer.as_ref(), &caller, &tenant, RunAction::ListSessions).await {
        return Err(crate::runs::list_denied());
    }
    Ok(Json(
        state
            .runtime
            .stores
            .sessions
            .list(
                &tenant,
                state
                    .runtime
                    .settings
                    .session_ownership
                    .list_owner(&caller, user_id(&state.runtime, &tenant, &caller, &header_pairs(&headers)).as_deref())
                    .as_deref(),
                paging.skip,
                paging.take,
            )
            .await?,
    ))
}

/// Read a session and its messages.
#[utoipa::path(get, path = "/api/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = SessionView), problem::NotFound))]
#[tracing::instrument(name = "sessions.get", skip_all)]
pub async fn get(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Json<SessionView>> {
    let (tenant, id) = (tenant, session_id(&id)?);
    allowed(&state, &caller, &tenant, RunAction::ReadSession { session: id.as_str() }).await?;
    let sessions = &state.runtime.stores.sessions;
    let session = sessions.get(&tenant, id.as_str()).await?.ok_or_else(session_not_found)?;
    owned(&state, &tenant, &caller, &headers, &session, Use::Read)?;
    let messages = sessions.items(&tenant, id.as_str()).await?;
    Ok(Json(SessionView { session, messages }))
}

/// Delete a session and its history.
#[utoipa::path(delete, path = "/api/sessions/{id}", tag = "sessions", params(("id" = String, Path, description = "Session id")),
    responses((status = 204), problem::NotFound))]
#[tracing::instrument(name = "sessions.delete", skip_all)]
pub async fn delete(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let id = session_id(&id)?;
    allowed(&state, &caller, &tenant, RunAction::DeleteSession { session: id.as_str() }).await?;
    if state.runtime.settings.session_ownership.enabled {
        let session = state.runtime.stores.sessions.get(&tenant, id.as_str()).await?.ok_or_else(session_not_found)?;
        owned(&state, &tenant, &caller, &headers, &session, Use::Delete)?;
    }
    if state.runtime.stores.sessions.delete(&tenant, id.as_str()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(session_not_found())
    }
}

/// What to branch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BranchRequest {
    /// The last item to copy (0-based, as in `messages[].sequence`).
    pub sequence: u64,
    /// The new session's id; generated when absent.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// Copy items `0..=sequence` into a new session. The parent is unchanged.
///
/// The branch has no agent until its first turn: it is how a conversation goes on with another
/// agent.
#[utoipa::path(post, path = "/api/sessions/{id}/branch", tag = "sessions", request_body = BranchRequest,
    params(("id" = String, Path, description = "Session id")),
    responses((status = 201, body = SessionView), problem::BadRequest, problem::NotFound, problem::Conflict))]
#[tracing::instrument(name = "sessions.branch", skip_all)]
pub async fn branch(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<BranchRequest>,
) -> ApiResult<Response> {
    let (tenant, source) = (tenant, session_id(&id)?);
    allowed(&state, &caller, &tenant, RunAction::BranchSession { session: source.as_str() }).await?;
    // A branch is a copy, not a handover: it belongs to whoever branches.
    let owner = attribute(&state.runtime, &tenant, &caller, &header_pairs(&headers))?.user_id;
    let sessions = &state.runtime.stores.sessions;
    let parent = sessions.get(&tenant, source.as_str()).await?.ok_or_else(session_not_found)?;
    owned(&state, &tenant, &caller, &headers, &parent, Use::Branch)?;
    if body.sequence >= parent.item_count {
        return Err(ApiError::bad_request(
            "invalid_sequence",
            format!("The session has {} messages; 'sequence' must be below that.", parent.item_count),
        )
        .with("field", "sequence"));
    }
    let ownership = &state.runtime.settings.session_ownership;
    if ownership.enabled && ownership.require_authenticated_owner && owner.is_none() {
        return Err(ApiError::forbidden(
            "session_owner_required",
            "Session ownership is on and no user could be resolved to own the branch.",
        ));
    }
    let clock = state.runtime.platform.clock.clone();
    let new_id = match body.session_id {
        Some(raw) => SessionId::parse(&raw)
            .map_err(|e| ApiError::bad_request("validation_failed", e.0).with("field", "sessionId"))?,
        None => {
            SessionId::parse(&new_id(clock.as_ref()).to_string()).map_err(|e| ApiError::internal("SessionId", &e.0))?
        }
    };
    let record = sessions
        .branch(&tenant, source.as_str(), body.sequence, new_id.as_str(), owner, clock.now())
        .await
        .map_err(|e| match e {
            StoreError::NotFound => session_not_found(),
            StoreError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "session_exists", m),
            other => other.into(),
        })?;
    let messages = sessions.items(&tenant, new_id.as_str()).await?;
    let mut response = (StatusCode::CREATED, Json(SessionView { session: record, messages })).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/api/sessions/{new_id}")) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}
