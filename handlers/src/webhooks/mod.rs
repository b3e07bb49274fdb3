//! `/api/webhooks`: outbound webhook subscriptions of the caller's tenant, their test
//! delivery and their delivery history (scope `WebhooksAdmin`).
//!
//! Every subscription write is audited **before** it is applied: an entry that cannot be
//! written refuses the write (`503 audit_unavailable`) and nothing changes. A subscription
//! names its signing secret's configuration key, never the secret: under the tenant's own
//! partition of `Tracon:WebhookSecrets:` ([`tracon_core::secret_names`]). Its URL passes the egress guard when written (HTTPS to a
//! public host; see `tracon_core::egress`) and again at every delivery. Another tenant's
//! subscription answers exactly as a missing one.

use axum::Router;
use axum::routing;
use std::collections::BTreeMap;

use axum::Json;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tracon_core::error::StoreError;
use tracon_core::identity::Caller;
use tracon_core::names::TenantId;
use tracon_core::ports::new_id;
use tracon_core::webhooks::deliver::is_reserved_header;
use tracon_core::webhooks::{
    DeliveryStatus, EVENTS, MAX_DESCRIPTION, MAX_HEADER_NAME, MAX_HEADER_VALUE, MAX_HEADERS, MAX_URL_LEN,
    SubscriptionChange, TEST_PING, WebhookDelivery, WebhookSubscription,
};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::audit;
use crate::error::{ApiError, ApiResult, ProblemDetails, problem};
use crate::extract::{ApiJson, Ctx, Paging};
use crate::state::AppState;

/// The webhooks group: subscriptions, test deliveries and the delivery log.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/webhooks", routing::get(list).post(create))
        .route("/api/webhooks/{id}", routing::get(get).put(update).delete(delete))
        .route("/api/webhooks/{id}/test", routing::post(test))
        .route("/api/webhooks/{id}/deliveries", routing::get(deliveries))
}

/// A subscription as written (`POST` creates, `PUT` replaces).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookBody {
    /// `https://…`; a host that is, or resolves only to, a private, loopback or link-local
    /// address is refused.
    #[schema(min_length = 1, max_length = 2048)]
    pub url: String,
    /// One or more of `run.completed`, `run.failed`, `approval.pending`,
    /// `workflow.request.pending`, `job.completed`, `job.failed`, `eval.completed`,
    /// `quota.threshold`, `run.score.low`, `test.ping`.
    #[schema(min_items = 1)]
    pub events: Vec<String>,
    /// The NAME of the configuration key holding the signing secret, in the tenant's own
    /// partition: `Tracon:WebhookSecrets:Orders` for the default tenant,
    /// `Tracon:WebhookSecrets:{tenantId}:Orders` for any other (environment
    /// `Tracon__WebhookSecrets__acme__Orders`), or under a prefix the operator granted the
    /// tenant. Never the secret.
    pub secret_configuration_name: String,
    /// Extra request headers (stored and shown as given: not for credentials). `Host`,
    /// `Content-Type`, `Content-Length`, `Authorization`, `Cookie`, connection headers and
    /// any `X-Tracon-*` are refused.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub description: Option<String>,
    /// Default `true`. Turning a disabled subscription on resets its failure count.
    #[serde(default = "crate::extract::default_true")]
    pub enabled: bool,
}

/// What `POST /api/webhooks/{id}/test` queued.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestQueued {
    pub delivery_id: Uuid,
    pub job_id: Option<Uuid>,
    /// `Pending`: queued, not yet attempted. Read the outcome from the delivery history.
    pub status: DeliveryStatus,
    /// Where the delivery's entry can be read.
    pub deliveries_location: String,
}

fn webhook_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "webhook_not_found", "The webhook subscription does not exist.")
}

fn webhook_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::parse_str(raw).map_err(|_| webhook_not_found())
}

fn invalid(field: &str, detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("validation_failed", detail).with("field", field)
}

/// Checks a body against every rule; the change it asks for.
/// Checks a body. `before` is the subscription it replaces: a secret key name that one
/// already stores is kept even outside the tenant's partition (saved before names were
/// partitioned; it keeps working for this tenant), any other name must be the tenant's.
fn validate(
    state: &AppState,
    tenant: &TenantId,
    body: WebhookBody,
    before: Option<&WebhookSubscription>,
) -> ApiResult<SubscriptionChange> {
    let settings = &state.runtime.webhooks;
    let url = body.url.trim();
    if url.is_empty() || url.len() > MAX_URL_LEN {
        return Err(invalid("url", format!("'url' is 1 to {MAX_URL_LEN} characters.")));
    }
    let parsed = reqwest::Url::parse(url).map_err(|_| invalid("url", "'url' is not an absolute URL."))?;
    if let Err(refused) = settings.egress.check_url(&parsed) {
        // Our own sentence: the guard's message names the host, which the caller sent.
        return Err(
            ApiError::bad_request("url_not_allowed", format!("'url' is refused: {refused}.")).with("field", "url")
        );
    }
    let mut events: Vec<String> = Vec::new();
    for event in &body.events {
        let event = event.trim();
        if !EVENTS.contains(&event) {
            return Err(invalid("events", format!("'events' may hold only: {}.", EVENTS.join(", "))));
        }
        if !events.iter().any(|e| e == event) {
            events.push(event.to_owned());
        }
    }
    if events.is_empty() {
        return Err(invalid("events", "'events' names at least one event."));
    }
    let secret = body.secret_configuration_name.trim();
    let unchanged = before.is_some_and(|b| b.secret_configuration_name.eq_ignore_ascii_case(secret));
    if !unchanged && let Err(refused) = settings.secret_names.check_write(tenant, secret) {
        const FIELD: &str = "secretConfigurationName";
        return Err(invalid(FIELD, refused.message(FIELD)).with("allowedPrefix", &refused.allowed_prefix));
    }
    if body.headers.len() > MAX_HEADERS {
        return Err(invalid("headers", format!("At most {MAX_HEADERS} custom headers.")));
    }
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in &body.headers {
        let lower = name.to_ascii_lowercase();
        if is_reserved_header(name) {
            return Err(ApiError::bad_request(
                "reserved_header",
                format!("The header '{name}' is set by Tracon (or carries a credential) and cannot be configured."),
            )
            .with("field", format!("headers.{name}")));
        }
        let name_ok =
            !name.is_empty() && name.len() <= MAX_HEADER_NAME && http::HeaderName::from_bytes(name.as_bytes()).is_ok();
        if !name_ok || seen.contains(&lower) {
            return Err(invalid(
                &format!("headers.{name}"),
                format!("Header names are HTTP tokens of at most {MAX_HEADER_NAME} characters, each given once."),
            ));
        }
        if value.len() > MAX_HEADER_VALUE || http::HeaderValue::from_str(value).is_err() {
            return Err(invalid(
                &format!("headers.{name}"),
                format!("Header values are at most {MAX_HEADER_VALUE} visible characters, without line breaks."),
            ));
        }
        seen.push(lower);
    }
    let description = body.description.as_deref().map(str::trim).filter(|d| !d.is_empty());
    if description.is_some_and(|d| d.chars().count() > MAX_DESCRIPTION || d.chars().any(char::is_control)) {
        return Err(invalid(
            "description",
            format!("'description' is at most {MAX_DESCRIPTION} characters, without control characters."),
        ));
    }
    Ok(SubscriptionChange {
        url: url.to_owned(),
        events,
        secret_configuration_name: secret.to_owned(),
        headers: body.headers,
        description: description.map(str::to_owned),
        enabled: body.enabled,
    })
}

/// Audit before apply ([`audit::record_before_apply`]): no entry, no change.
async fn audit_first(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    action: &str,
    id: Uuid,
    before: Option<&WebhookSubscription>,
    after: Option<serde_json::Value>,
) -> ApiResult<()> {
    let before = before.and_then(|b| serde_json::to_value(b).ok());
    let id = id.to_string();
    audit::record_before_apply(state, tenant, caller, action, ("webhook", &id), before.as_ref(), after.as_ref()).await
}

fn change_json(c: &SubscriptionChange) -> serde_json::Value {
    json!({
        "url": c.url,
        "events": c.events,
        "secretConfigurationName": c.secret_configuration_name,
        "headers": c.headers,
        "description": c.description,
        "enabled": c.enabled,
    })
}

/// The tenant's webhook subscriptions, oldest first.
#[utoipa::path(get, path = "/api/webhooks", tag = "webhooks",
    params(("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<WebhookSubscription>)))]
#[tracing::instrument(name = "webhooks.list", skip_all)]
pub async fn list(Ctx { state, tenant, .. }: Ctx, paging: Paging) -> ApiResult<Json<Vec<WebhookSubscription>>> {
    Ok(Json(state.runtime.stores.webhooks.list(&tenant, paging.skip, paging.take).await?))
}

/// Subscribe an endpoint to events.
#[utoipa::path(post, path = "/api/webhooks", tag = "webhooks", request_body = WebhookBody,
    responses((status = 201, body = WebhookSubscription),
        (status = 400, description = "Invalid body, a refused URL (`url_not_allowed`) or a reserved header (`reserved_header`)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "webhooks.create", skip_all)]
pub async fn create(Ctx { state, tenant, caller }: Ctx, ApiJson(body): ApiJson<WebhookBody>) -> ApiResult<Response> {
    let change = validate(&state, &tenant, body, None)?;
    let now = state.runtime.platform.clock.now();
    let subscription = WebhookSubscription {
        id: new_id(state.runtime.platform.clock.as_ref()),
        tenant: tenant.clone(),
        url: change.url,
        events: change.events,
        secret_configuration_name: change.secret_configuration_name,
        headers: change.headers,
        description: change.description,
        enabled: change.enabled,
        consecutive_failures: 0,
        disabled_at: None,
        created_at: now,
        updated_at: now,
    };
    let after = serde_json::to_value(&subscription).ok();
    audit_first(&state, &tenant, &caller, "webhook.create", subscription.id, None, after).await?;
    state.runtime.stores.webhooks.create(&tenant, &subscription).await?;
    state.runtime.webhooks.quiet.forget(&tenant);
    let location = format!("/api/webhooks/{}", subscription.id);
    Ok((StatusCode::CREATED, [(axum::http::header::LOCATION, location)], Json(subscription)).into_response())
}

/// One subscription.
#[utoipa::path(get, path = "/api/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, description = "Subscription id")),
    responses((status = 200, body = WebhookSubscription), problem::NotFound))]
#[tracing::instrument(name = "webhooks.get", skip_all)]
pub async fn get(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<Json<WebhookSubscription>> {
    let id = webhook_id(&id)?;
    Ok(Json(state.runtime.stores.webhooks.get(&tenant, id).await?.ok_or_else(webhook_not_found)?))
}

/// Replace a subscription (turning it on again resets its failure count).
#[utoipa::path(put, path = "/api/webhooks/{id}", tag = "webhooks", request_body = WebhookBody,
    params(("id" = String, Path, description = "Subscription id")),
    responses((status = 200, body = WebhookSubscription), problem::BadRequest, problem::NotFound,
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "webhooks.update", skip_all)]
pub async fn update(
    Ctx { state, tenant, caller }: Ctx,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<WebhookBody>,
) -> ApiResult<Json<WebhookSubscription>> {
    let id = webhook_id(&id)?;
    let store = &state.runtime.stores.webhooks;
    let before = store.get(&tenant, id).await?.ok_or_else(webhook_not_found)?;
    let change = validate(&state, &tenant, body, Some(&before))?;
    audit_first(&state, &tenant, &caller, "webhook.update", id, Some(&before), Some(change_json(&change))).await?;
    let now = state.runtime.platform.clock.now();
    let updated = store.update(&tenant, id, &change, now).await;
    state.runtime.webhooks.quiet.forget(&tenant);
    match updated {
        Ok(after) => Ok(Json(after)),
        Err(StoreError::NotFound) => Err(webhook_not_found()),
        Err(e) => Err(e.into()),
    }
}

/// Delete a subscription and its delivery history. Deliveries already queued are dropped.
#[utoipa::path(delete, path = "/api/webhooks/{id}", tag = "webhooks", params(("id" = String, Path, description = "Subscription id")),
    responses((status = 204), problem::NotFound,
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "webhooks.delete", skip_all)]
pub async fn delete(Ctx { state, tenant, caller }: Ctx, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id = webhook_id(&id)?;
    let store = &state.runtime.stores.webhooks;
    let before = store.get(&tenant, id).await?.ok_or_else(webhook_not_found)?;
    audit_first(&state, &tenant, &caller, "webhook.delete", id, Some(&before), None).await?;
    if !store.delete(&tenant, id).await? {
        return Err(webhook_not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Queue a `test.ping` delivery. The answer says it was queued, not how it went: read the
/// delivery history for that.
#[utoipa::path(post, path = "/api/webhooks/{id}/test", tag = "webhooks", params(("id" = String, Path, description = "Subscription id")),
    responses((status = 202, body = TestQueued), problem::NotFound,
        (status = 409, description = "The subscription is disabled", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "webhooks.test", skip_all)]
pub async fn test(Ctx { state, tenant, .. }: Ctx, Path(id): Path<String>) -> ApiResult<(StatusCode, Json<TestQueued>)> {
    let id = webhook_id(&id)?;
    let subscription = state.runtime.stores.webhooks.get(&tenant, id).await?.ok_or_else(webhook_not_found)?;
    if !subscription.enabled {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "webhook_disabled",
            "The subscription is disabled; turn it on (PUT with \"enabled\": true) before testing it.",
        ));
    }
    let data = json!({ "subscriptionId": id, "message": "A test delivery from Tracon." });
    let delivery = match tracon_core::webhooks::sources::publisher(&state.runtime)
        .deliver_to(&tenant, &subscription, TEST_PING, data)
        .await
    {
        Ok(d) => d,
        Err(StoreError::NotFound) => return Err(webhook_not_found()),
        Err(e) => return Err(e.into()),
    };
    if let (Some(queue), Some(job)) = (state.runtime.queue(), delivery.job_id)
        && let Err(e) = queue.transport.wake(job).await
    {
        // The job row is the truth: the consumer's poll or the next tick picks it up.
        tracing::warn!(job = %job, error = %e, "could not wake the consumer for a test delivery");
    }
    Ok((
        StatusCode::ACCEPTED,
        Json(TestQueued {
            delivery_id: delivery.id,
            job_id: delivery.job_id,
            status: delivery.status,
            deliveries_location: format!("/api/webhooks/{id}/deliveries"),
        }),
    ))
}

/// A subscription's delivery history, newest first: one entry per event, updated by every
/// attempt.
#[utoipa::path(get, path = "/api/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = String, Path, description = "Subscription id"), ("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<WebhookDelivery>), problem::NotFound))]
#[tracing::instrument(name = "webhooks.deliveries", skip_all)]
pub async fn deliveries(
    Ctx { state, tenant, .. }: Ctx,
    Path(id): Path<String>,
    paging: Paging,
) -> ApiResult<Json<Vec<WebhookDelivery>>> {
    let id = webhook_id(&id)?;
    let store = &state.runtime.stores.webhooks;
    store.get(&tenant, id).await?.ok_or_else(webhook_not_found)?;
    Ok(Json(store.deliveries(&tenant, id, paging.skip, paging.take).await?))
}
