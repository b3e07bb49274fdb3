//! `POST /api/triggers/{tenantId}/{name}`: a signed event from an external system, verified
//! and queued as a run.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use tracon_core::attribution::Attribution;
use tracon_core::catalog::CatalogError;
use tracon_core::idempotency::{self, KeyRef, Reservation};
use tracon_core::identity::Caller;
use tracon_core::names::{AgentName, TenantId, WorkflowName};
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::launch::{Delivery, Launched, Start, launch};
use tracon_core::runs::request::{RunRequest, StartError};
use tracon_core::runtime::RunQueue;
use tracon_core::triggers::{self as core_triggers, PayloadError, TargetKind, TriggerName, TriggerRecord};
use utoipa::ToSchema;

use super::settings::{rate_limited, unverified_bucket};
use crate::access::peer::PeerAddr;
use crate::error::{ApiError, ApiResult, ProblemDetails, problem};
use crate::state::AppState;

/// The one answer to every authentication failure of the accept endpoint.
fn unverified() -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "The request could not be verified.")
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("The request body is larger than {limit} bytes."),
    )
}

/// The idempotency operation the replay reservations are kept under (installation-wide).
const REPLAY_OPERATION: &str = "trigger.signature";

/// How long a signature stays reserved beyond the tolerance window (after that its
/// timestamp is stale anyway, so the record is not needed to refuse it).
const REPLAY_MARGIN_SECONDS: i64 = 60;

/// What a queued triggered run answers.
#[derive(Debug, serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerAccepted {
    #[schema(value_type = String)]
    pub run_id: tracon_core::names::RunId,
    pub job_id: uuid::Uuid,
    /// The run's record (relative to the host's base path).
    pub location: String,
    /// Its event log.
    pub events_location: String,
}

/// Accept a signed event from an external system and queue a run (no bearer token: the
/// HMAC signature is the authentication).
#[utoipa::path(post, path = "/api/triggers/{tenantId}/{name}", tag = "triggers", security(()),
    params(("tenantId" = String, Path, description = "The trigger's tenant"), ("name" = String, Path, description = "Trigger name"),
        ("X-Tracon-Timestamp" = String, Header, description = "Unix seconds; within TimestampTolerance of the server's clock"),
        ("X-Tracon-Signature" = String, Header, description = "`sha256=<hex>`: HMAC-SHA256 of `{timestamp}.{rawBody}` with the trigger's secret")),
    request_body(content = String, description = "Any body up to MaxBodyBytes; the signed bytes", content_type = "application/json"),
    responses((status = 202, description = "A queued run", body = TriggerAccepted),
        (status = 400, description = "The body has no message (payloadPath found nothing)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "Unknown tenant or trigger, disabled trigger, bad timestamp or signature: one generic answer", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "This signature was accepted before (a replay)", body = ProblemDetails, content_type = "application/problem+json"), problem::TooLarge,
        (status = 422, description = "The trigger's target cannot start", body = ProblemDetails, content_type = "application/problem+json"), problem::TooMany,
        (status = 503, description = "No job consumer on this host, draining, or the store is unavailable", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "triggers.accept", skip_all, fields(run_id))]
pub async fn accept(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let settings = &state.http.triggers;
    // 1. The size, before anything else, and without reading past the limit.
    let limit = settings.max_body_bytes;
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let raw = axum::body::to_bytes(body, limit).await.map_err(|_| too_large(limit))?;
    let (tenant_raw, name_raw) = match path {
        Ok(Path(p)) => p,
        Err(_) => (String::new(), String::new()),
    };
    let now = state.runtime.platform.clock.now();
    // 2. An address whose requests keep failing verification is turned away before any
    //    lookup. Only failures count against it, so a valid sender elsewhere is never held up.
    let source = peer.map(|Extension(p)| p.0.ip());
    let unverified_bucket = unverified_bucket(source);
    let unverified_limit = settings.max_unverified_per_minute;
    if source.is_some()
        && let Err(wait) = state.trigger_limiter.peek(&unverified_bucket, unverified_limit, now)
    {
        return Err(rate_limited("Too many unverified requests from this address", wait));
    }
    // 3. Who is asking: one generic 401 for every failure.
    let (tenant, trigger, signature) = match verify(&state, &tenant_raw, &name_raw, &headers, &raw, now).await? {
        Ok(verified) => verified,
        Err(reason) => {
            tracing::info!(reason, "an inbound trigger request was not verified");
            if let Err(wait) = state.trigger_limiter.check(&unverified_bucket, unverified_limit, now) {
                return Err(rate_limited("Too many unverified requests from this address", wait));
            }
            return Err(unverified());
        }
    };
    // 4. The trigger's own limit counts verified requests only: forgeries cannot use it up.
    let bucket = format!("verified:{tenant}/{}", trigger.name);
    if let Err(wait) = state.trigger_limiter.check(&bucket, settings.max_requests_per_minute, now) {
        return Err(rate_limited("Too many requests for this trigger", wait));
    }
    let Some(queue) = state.runtime.queue() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "queue_unavailable",
            "This host runs no job consumer, so it cannot accept triggered runs; send the trigger to a host that runs queued work.",
        ));
    };
    // 5. The signature is the replay key, reserved for the whole installation: every trigger
    //    that verifies with the same secret (in any tenant) computes the same signature for
    //    the same request, so a captured request starts at most one run anywhere.
    let key: String = signature.iter().map(|b| format!("{b:02x}")).collect();
    let installation = TenantId::installation();
    let key_ref = KeyRef { tenant: &installation, operation: REPLAY_OPERATION, key: &key };
    let store = state.runtime.stores.idempotency.clone();
    let tolerance = i64::try_from(settings.timestamp_tolerance_seconds).unwrap_or(i64::MAX / 4).min(i64::MAX / 4);
    let expires_at = now + chrono::Duration::seconds(tolerance.saturating_mul(2).saturating_add(REPLAY_MARGIN_SECONDS));
    match store.claim(key_ref, &key, now, expires_at).await?.for_request(&key) {
        Reservation::Fresh => {}
        Reservation::Running | Reservation::Replay { .. } | Reservation::Reused => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "trigger_replayed",
                "This signed request was accepted before; send a fresh timestamp and signature to start another run.",
            ));
        }
    }
    // 6. The run. Anything refused from here on started nothing: the key is freed.
    match start(&state, queue, &tenant, &trigger, &raw).await {
        Ok(body) => {
            // The claim is left as it is: it outlives every timestamp the window accepts, and
            // a replay is refused whether or not a response was stored — so storing one would
            // only add a write to the accept path.
            tracing::Span::current().record("run_id", tracing::field::display(body.run_id));
            tracing::info!(trigger = %trigger.name, tenant = %tenant, run_id = %body.run_id, "accepted an inbound trigger");
            let mut response = (StatusCode::ACCEPTED, Json(&body)).into_response();
            if let Ok(location) = HeaderValue::from_str(&body.location) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        Err(e) => {
            idempotency::settle(store.as_ref(), key_ref, None, now).await;
            Err(e)
        }
    }
}

/// Steps 3's checks. `Ok(Err(reason))` is an authentication failure (the reason is for the
/// log only); `Err` is a store failure.
async fn verify(
    state: &AppState,
    tenant_raw: &str,
    name_raw: &str,
    headers: &HeaderMap,
    body: &[u8],
    now: DateTime<Utc>,
) -> ApiResult<Result<(TenantId, TriggerRecord, [u8; 32]), &'static str>> {
    let settings = &state.http.triggers;
    let names = TenantId::parse(tenant_raw).ok().zip(TriggerName::parse(name_raw).ok());
    let trigger = match &names {
        Some((tenant, name)) => state.runtime.stores.triggers.find_enabled(tenant, name).await?,
        None => None,
    };
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let timestamp = header("x-tracon-timestamp");
    let at = timestamp.and_then(core_triggers::parse_timestamp);
    let signature = header("x-tracon-signature").and_then(core_triggers::parse_signature);
    let secret = match (&names, &trigger) {
        (Some((tenant, _)), Some(t)) => settings.secret(tenant, &t.signing_secret_configuration_name),
        _ => None,
    };
    // One HMAC whatever failed before it, so a missing trigger or secret costs what a wrong
    // signature costs (the comparison itself is constant-time: `Mac::verify_slice`).
    let matches = core_triggers::verify_signature(
        secret.unwrap_or(UNUSED_KEY).as_bytes(),
        timestamp.unwrap_or_default(),
        body,
        &signature.unwrap_or([0; 32]),
    );
    let reason = match (&names, &trigger, at, &signature) {
        (None, ..) => "malformed tenant or trigger name",
        (_, None, ..) => "no such enabled trigger",
        (_, _, None, _) => "missing or malformed timestamp",
        (_, _, Some(at), _) if !core_triggers::within_tolerance(at, now, settings.timestamp_tolerance_seconds) => {
            "timestamp outside the tolerance"
        }
        (_, _, _, None) => "missing or malformed signature",
        _ if secret.is_none() => {
            tracing::warn!(
                trigger = name_raw,
                "the trigger's signing secret has no value in configuration (or its key name is outside the allowed prefix)"
            );
            "no signing secret configured"
        }
        _ if !matches => "signature mismatch",
        _ => match (names, trigger, signature) {
            (Some((tenant, _)), Some(trigger), Some(signature)) => return Ok(Ok((tenant, trigger, signature))),
            _ => "unreachable",
        },
    };
    Ok(Err(reason))
}

/// The key the one HMAC of a request that cannot verify is computed with.
const UNUSED_KEY: &str = "tracon-inbound-trigger-without-a-secret";

/// Everything after the replay key is reserved: the message, the checks a run start makes,
/// and the queued run.
async fn start(
    state: &AppState,
    queue: &RunQueue,
    tenant: &TenantId,
    trigger: &TriggerRecord,
    body: &[u8],
) -> ApiResult<TriggerAccepted> {
    let message = core_triggers::extract_message(trigger.payload_mode, trigger.payload_path.as_deref(), body)
        .map_err(|e| {
            let detail = match e {
                PayloadError::Empty => "The request body is empty; it carries no message.".to_owned(),
                PayloadError::NotText => "The request body is not UTF-8 text.".to_owned(),
                PayloadError::NotJson => "The request body is not JSON, so 'payloadPath' cannot select a field.".to_owned(),
                PayloadError::FieldMissing => format!(
                    "The field the trigger's payloadPath names ('{}') is missing, null or empty in this request's body.",
                    trigger.payload_path.as_deref().unwrap_or_default()
                ),
            };
            ApiError::bad_request("payload_not_found", detail)
        })?;
    // The event is the run's message, held to the message limit whichever the target is.
    let field = trigger.payload_path.as_deref().unwrap_or("body");
    state.runtime.settings.limits.check_message(field, &message).map_err(|r| crate::error::input_refused(&r))?;
    let unavailable =
        |detail: &str| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "trigger_target_unavailable", detail.to_owned());
    // A workflow's name follows an agent name's rules: the run policy and quotas see it so.
    let agent =
        AgentName::parse(&trigger.target_name).map_err(|_| unavailable("The trigger's target name is not valid."))?;
    let caller = Caller { tenant: tenant.clone(), ..Caller::internal() };
    let labels = BTreeMap::from([("trigger".to_owned(), trigger.name.as_str().to_owned())]);
    let attribution = Attribution { user_id: None, labels };
    let admission = Admission {
        tenant,
        caller: &caller,
        agent: &agent,
        session: None,
        attribution: Attributed::Given(attribution),
    };
    let attribution = admit(&state.runtime, admission).await?;
    if trigger.target_kind == TargetKind::Workflow {
        let stored = match WorkflowName::parse(&trigger.target_name) {
            Ok(name) => state.runtime.stores.workflows.get(tenant, &name).await?,
            Err(_) => None,
        };
        let stored = stored.ok_or_else(|| unavailable("The trigger's target workflow does not exist."))?;
        let accepted =
            crate::workflows::run::enqueue(state, queue, tenant, caller, attribution, &stored, message).await?;
        return Ok(accepted_body(accepted));
    }
    let request = RunRequest::new(tenant.clone(), agent, message, caller, attribution);
    let accepted = match launch(&state.runtime, Start::new(request, Delivery::from(queue))).await {
        Ok(Launched::Queued(accepted)) => accepted,
        Ok(other) => return Err(ApiError::internal("RunDelivery", &format!("run {} was not queued", other.run_id()))),
        Err(StartError::Agent(CatalogError::NotFound)) => {
            return Err(unavailable("The trigger's target agent does not exist."));
        }
        Err(StartError::Agent(CatalogError::Store(s)) | StartError::Store(s)) => return Err(s.into()),
        Err(StartError::Agent(_)) => {
            return Err(unavailable("The trigger's target agent cannot start (its definition or parameters)."));
        }
        Err(StartError::Documents(m) | StartError::Resume(m) | StartError::ToolResults(m)) => {
            return Err(unavailable(&m));
        }
        Err(StartError::Caller(refusal)) => return Err(unavailable(&refusal.message)),
        // The event itself is too large for the agent's model: the sender's to shorten.
        Err(StartError::ContextWindow(over)) => return Err(crate::error::context_window_exceeded(&over)),
        Err(StartError::Input(refusal)) => return Err(crate::error::input_refused(&refusal)),
        Err(StartError::Session(mismatch)) => return Err(crate::error::session_agent_mismatch(&mismatch, "sessionId")),
    };
    Ok(accepted_body(accepted))
}

fn accepted_body(accepted: tracon_core::runs::outcome::Accepted) -> TriggerAccepted {
    let location = format!("/api/runs/{}", accepted.run_id);
    TriggerAccepted {
        run_id: accepted.run_id,
        job_id: accepted.job_id,
        events_location: format!("{location}/events"),
        location,
    }
}
