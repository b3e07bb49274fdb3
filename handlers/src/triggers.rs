//! Inbound triggers: `/api/triggers` management (scope `TriggersAdmin`) and the accept
//! endpoint `POST /api/triggers/{tenantId}/{name}`, which carries **no** bearer token.
//!
//! The accept endpoint's whole authentication is the HMAC signature. It checks, in order:
//!
//! 1. the body size (`MaxBodyBytes`): `413` from `Content-Length`, or as soon as a streamed
//!    body passes the limit — it is never read further;
//! 2. the source address: one whose requests failed verification more than
//!    `MaxUnverifiedRequestsPerMinute` times is `429` before any lookup (per process);
//! 3. the tenant (from the URL only), the trigger (exists, enabled), `X-Tracon-Timestamp`
//!    (inside `TimestampTolerance`, either direction), `X-Tracon-Signature` (HMAC-SHA256
//!    over `"{timestamp}.{rawBody}"` with the secret read from configuration now). Every
//!    failure here answers the same generic `401`, byte for byte, so names cannot be
//!    enumerated, and counts against the source address — never against the trigger;
//! 4. the per-trigger limit (`MaxRequestsPerMinute`), which counts verified requests only:
//!    `429` + `Retry-After`;
//! 5. the signature is reserved as the replay key in the idempotency store, for the whole
//!    installation: a replay — to this trigger or to any other that shares its secret, in
//!    any tenant — is `409` and never a second run;
//! 6. the message is taken from the body (`400` when `payloadPath` finds nothing), and a
//!    queued run is accepted: `202` with `Location`.
//!
//! A trigger names its secret's configuration key, under its tenant's partition of
//! `AllowedConfigurationPrefix` ([`tracon_core::secret_names`]).
//!
//! A host without a job consumer answers `503 queue_unavailable` rather than accept work
//! nobody will run. Definition writes (`PUT`, `DELETE`) are audited before they are
//! applied: a write that cannot be audited is refused (`503 audit_unavailable`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tracon_core::attribution::Attribution;
use tracon_core::catalog::CatalogError;
use tracon_core::config::{Config, ConfigError};
use tracon_core::idempotency::{self, KeyRef, Reservation};
use tracon_core::identity::Caller;
use tracon_core::names::{AgentName, TenantId};
use tracon_core::runs::admission::{Admission, Attributed, admit};
use tracon_core::runs::launch::{Delivery, Launched, Start, launch};
use tracon_core::runs::request::{RunRequest, StartError};
use tracon_core::runtime::RunQueue;
use tracon_core::secret_names::{SecretNamespace, colon_spelling};
use tracon_core::triggers::{self as core_triggers, PayloadError, PayloadMode, TargetKind, TriggerName, TriggerRecord};
use utoipa::ToSchema;

use crate::audit;
use crate::error::{ApiError, ApiResult, ProblemDetails};
use crate::extract::{ApiJson, Paging, Tenant};
use crate::state::{AppState, PeerAddr};

// ---- settings -------------------------------------------------------------------------------

/// Default `Tracon:InboundTriggers:TimestampToleranceSeconds` (five minutes).
pub const DEFAULT_TOLERANCE_SECONDS: u64 = 300;
/// Default `Tracon:InboundTriggers:MaxBodyBytes` (256 KB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 262_144;
/// Default `Tracon:InboundTriggers:MaxRequestsPerMinute`.
pub const DEFAULT_MAX_REQUESTS_PER_MINUTE: u32 = 60;

/// `Tracon:InboundTriggers:*`, validated at start-up, and the configuration snapshot the
/// signing secrets are read from at request time (by key name; nothing else is taken).
#[derive(Clone)]
pub struct TriggerSettings {
    pub timestamp_tolerance_seconds: u64,
    pub max_body_bytes: usize,
    /// Verified requests one trigger accepts per minute (per process).
    pub max_requests_per_minute: u32,
    /// Requests that fail verification one source address may send per minute (per
    /// process); counted apart, so forgeries never use up a trigger's own limit.
    pub max_unverified_per_minute: u32,
    /// Which key names a tenant's triggers may name (`AllowedConfigurationPrefix`, per
    /// tenant, plus the operator's `TenantPrefixes` grants).
    pub secret_names: SecretNamespace,
    secrets: Config,
}

impl std::fmt::Debug for TriggerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerSettings")
            .field("timestamp_tolerance_seconds", &self.timestamp_tolerance_seconds)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_requests_per_minute", &self.max_requests_per_minute)
            .field("max_unverified_per_minute", &self.max_unverified_per_minute)
            .field("secret_names", &self.secret_names)
            .finish_non_exhaustive()
    }
}

impl Default for TriggerSettings {
    fn default() -> Self {
        Self {
            timestamp_tolerance_seconds: DEFAULT_TOLERANCE_SECONDS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_requests_per_minute: DEFAULT_MAX_REQUESTS_PER_MINUTE,
            max_unverified_per_minute: DEFAULT_MAX_REQUESTS_PER_MINUTE,
            secret_names: SecretNamespace::new(core_triggers::DEFAULT_SECRET_PREFIX),
            secrets: Config::default(),
        }
    }
}

const SECTION: &str = "Tracon:InboundTriggers";

impl TriggerSettings {
    /// Reads `Tracon:InboundTriggers:{TimestampToleranceSeconds|MaxBodyBytes|
    /// MaxRequestsPerMinute|MaxUnverifiedRequestsPerMinute|AllowedConfigurationPrefix|
    /// TenantPrefixes:*}` (also `TimestampTolerance` as `hh:mm:ss`); a zero, a value that does
    /// not parse, or a malformed prefix is a start-up error. `config` is kept to resolve
    /// signing secrets by key name.
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let positive = |key: &str| ConfigError::Message(format!("{} must be positive.", env(key)));
        let tolerance = match (
            config.parse::<u64>(&format!("{SECTION}:TimestampToleranceSeconds"))?,
            config.get(&format!("{SECTION}:TimestampTolerance")),
        ) {
            (Some(0), _) => return Err(positive("TimestampToleranceSeconds")),
            (Some(s), _) => s,
            (None, Some(span)) => match time_span_seconds(span) {
                Some(s) if s > 0 => s,
                _ => {
                    return Err(ConfigError::Message(format!(
                        "{} is not a positive hh:mm:ss time span.",
                        env("TimestampTolerance")
                    )));
                }
            },
            (None, None) => d.timestamp_tolerance_seconds,
        };
        let max_body_bytes = match config.parse::<usize>(&format!("{SECTION}:MaxBodyBytes"))? {
            Some(0) => return Err(positive("MaxBodyBytes")),
            Some(n) => n,
            None => d.max_body_bytes,
        };
        let per_minute = |setting: &str, default: u32| match config.parse::<u32>(&format!("{SECTION}:{setting}"))? {
            Some(0) => Err(positive(setting)),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let max_requests_per_minute = per_minute("MaxRequestsPerMinute", d.max_requests_per_minute)?;
        let max_unverified_per_minute = per_minute("MaxUnverifiedRequestsPerMinute", max_requests_per_minute)?;
        Ok(Self {
            timestamp_tolerance_seconds: tolerance,
            max_body_bytes,
            max_requests_per_minute,
            max_unverified_per_minute,
            secret_names: SecretNamespace::from_config(config, SECTION, core_triggers::DEFAULT_SECRET_PREFIX)?,
            secrets: config.clone(),
        })
    }

    /// The signing secret `tenant`'s trigger resolves to now; `None` when its key name is
    /// not (or no longer) one the tenant may resolve, or has no value.
    fn secret(&self, tenant: &TenantId, key_name: &str) -> Option<&str> {
        if !self.secret_names.may_resolve(tenant, key_name) {
            return None;
        }
        self.secrets.get(key_name).filter(|v| !v.is_empty())
    }
}

fn env(setting: &str) -> String {
    format!("Tracon__InboundTriggers__{setting}")
}

/// `hh:mm:ss` (the spec's TimeSpan spelling) as seconds.
fn time_span_seconds(span: &str) -> Option<u64> {
    let parts: Vec<&str> = span.trim().split(':').collect();
    let [h, m, s] = parts.as_slice() else { return None };
    let (h, m, s) = (h.parse::<u64>().ok()?, m.parse::<u64>().ok()?, s.parse::<u64>().ok()?);
    (m < 60 && s < 60).then(|| h * 3600 + m * 60 + s)
}

// ---- the per-trigger rate limit -------------------------------------------------------------

/// Token buckets in process memory: per trigger for verified requests, per source address
/// for requests that fail verification. In a fleet the limits apply per instance.
#[derive(Default)]
pub struct TriggerLimiter {
    buckets: Mutex<HashMap<String, (f64, DateTime<Utc>)>>,
}

/// Buckets kept before idle (full) ones are swept.
const SWEEP_AFTER_BUCKETS: usize = 10_000;

impl TriggerLimiter {
    /// Takes a permit, or says how many seconds until one is free.
    fn check(&self, key: &str, per_minute: u32, now: DateTime<Utc>) -> Result<(), u64> {
        self.refill(key, per_minute, now, true)
    }

    /// Whether a permit is free, without taking it.
    fn peek(&self, key: &str, per_minute: u32, now: DateTime<Utc>) -> Result<(), u64> {
        self.refill(key, per_minute, now, false)
    }

    fn refill(&self, key: &str, per_minute: u32, now: DateTime<Utc>, take: bool) -> Result<(), u64> {
        let capacity = f64::from(per_minute.max(1));
        let per_second = capacity / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > SWEEP_AFTER_BUCKETS {
            buckets.retain(|_, (_, at)| (now - *at).num_seconds() < 60);
        }
        let (tokens, at) = buckets.entry(key.to_owned()).or_insert((capacity, now));
        let elapsed = (now - *at).num_microseconds().unwrap_or(i64::MAX).max(0) as f64 / 1e6;
        *tokens = (*tokens + elapsed * per_second).min(capacity);
        *at = now;
        if *tokens >= 1.0 {
            if take {
                *tokens -= 1.0;
            }
            return Ok(());
        }
        Err(((1.0 - *tokens) / per_second).ceil().max(1.0) as u64)
    }
}

/// The bucket of requests from `source` that failed verification (one shared bucket when
/// the host does not know the address).
fn unverified_bucket(source: Option<IpAddr>) -> String {
    match source {
        Some(ip) => format!("unverified:{ip}"),
        None => "unverified:unknown".to_owned(),
    }
}

fn rate_limited(detail: &str, wait: u64) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", format!("{detail}; retry in {wait} s."))
        .with_retry_after(wait)
}

// ---- management -----------------------------------------------------------------------------

/// A trigger definition (the body of `PUT /api/triggers/{name}`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerBody {
    /// `agent` (a queued agent run). `workflow` is refused: workflows do not exist here yet.
    pub target_kind: TargetKind,
    /// The agent the trigger starts.
    #[schema(pattern = "^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub target_name: String,
    /// The NAME of the configuration key holding the signing secret, in the tenant's own
    /// partition: `Tracon:TriggerSecrets:Slack` for the default tenant,
    /// `Tracon:TriggerSecrets:{tenantId}:Slack` for any other (either spelling:
    /// `Tracon__TriggerSecrets__acme__Slack`), or under a prefix the operator granted the
    /// tenant. Never the secret.
    pub signing_secret_configuration_name: String,
    /// `wholeBody` (default) or `path`.
    #[serde(default)]
    pub payload_mode: PayloadMode,
    /// With `payloadMode: path`: the dotted path of the field that becomes the message.
    #[serde(default)]
    pub payload_path: Option<String>,
    /// Default `true`; a disabled trigger answers every request like a missing one.
    #[serde(default = "crate::extract::default_true")]
    pub enabled: bool,
}

/// A trigger as the API shows it.
#[derive(Debug, serde::Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerView {
    #[serde(flatten)]
    pub trigger: TriggerRecord,
    /// Where the external system sends its signed requests (relative to the host's base path).
    pub accept_path: String,
}

impl TriggerView {
    fn new(tenant: &TenantId, trigger: TriggerRecord) -> Self {
        let accept_path = format!("/api/triggers/{tenant}/{}", trigger.name);
        Self { trigger, accept_path }
    }
}

fn trigger_not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "trigger_not_found", "The trigger does not exist.")
}

fn trigger_name(raw: &str) -> ApiResult<TriggerName> {
    TriggerName::parse(raw).map_err(|e| ApiError::bad_request("invalid_trigger_name", e.0))
}

fn invalid(field: &'static str, detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("validation_failed", detail).with("field", field)
}

/// Checks a body and builds the record it describes (times are `now`). `before` is the
/// record it replaces: a key name that record already stores is kept even when it lies
/// outside the tenant's partition (it was saved before names were partitioned, and keeps
/// working for this tenant); any other name must be the tenant's.
async fn record_of(
    state: &AppState,
    tenant: &TenantId,
    name: TriggerName,
    body: TriggerBody,
    before: Option<&TriggerRecord>,
    now: DateTime<Utc>,
) -> ApiResult<TriggerRecord> {
    if body.target_kind == TargetKind::Workflow {
        return Err(ApiError::bad_request(
            "unsupported_target_kind",
            "Workflow targets cannot run in this product yet; use targetKind 'agent'.",
        )
        .with("field", "targetKind"));
    }
    let agent = AgentName::parse(&body.target_name).map_err(|e| invalid("targetName", e.0))?;
    let key_name = colon_spelling(body.signing_secret_configuration_name.trim());
    let unchanged = before.is_some_and(|b| b.signing_secret_configuration_name.eq_ignore_ascii_case(&key_name));
    if !unchanged && let Err(refused) = state.http.triggers.secret_names.check_write(tenant, &key_name) {
        // The value is never echoed: a secret pasted here by mistake must not come back.
        const FIELD: &str = "signingSecretConfigurationName";
        return Err(invalid(FIELD, refused.message(FIELD)).with("allowedPrefix", &refused.allowed_prefix));
    }
    let payload_path = match (body.payload_mode, body.payload_path) {
        (PayloadMode::WholeBody, None) => None,
        (PayloadMode::WholeBody, Some(_)) => {
            return Err(invalid("payloadPath", "'payloadPath' goes with payloadMode 'path' only."));
        }
        (PayloadMode::Path, Some(p)) if core_triggers::is_valid_payload_path(&p) => Some(p),
        (PayloadMode::Path, _) => {
            return Err(invalid(
                "payloadPath",
                format!(
                    "payloadMode 'path' needs a dotted 'payloadPath' (for example 'event.text'), at most {} characters.",
                    core_triggers::MAX_PAYLOAD_PATH_LEN
                ),
            ));
        }
    };
    // The agent must exist and start without parameters (a trigger gives none) now; if it
    // changes later, the accept endpoint answers 422.
    match state.runtime.catalog.compile(tenant, &agent, None, &BTreeMap::new()).await {
        Ok(_) => {}
        Err(CatalogError::NotFound) => {
            return Err(invalid("targetName", format!("The agent '{agent}' does not exist.")));
        }
        Err(CatalogError::Store(e)) => return Err(e.into()),
        Err(_) => {
            return Err(invalid(
                "targetName",
                format!("The agent '{agent}' does not compile without parameters, so a trigger cannot start it."),
            ));
        }
    }
    Ok(TriggerRecord {
        name,
        target_kind: body.target_kind,
        target_name: body.target_name,
        signing_secret_configuration_name: key_name,
        payload_mode: body.payload_mode,
        payload_path,
        enabled: body.enabled,
        created_at: now,
        updated_at: now,
    })
}

/// Audit before apply ([`audit::record_before_apply`]): no entry, no change.
async fn audit_first(
    state: &AppState,
    tenant: &TenantId,
    caller: &Caller,
    action: &str,
    name: &TriggerName,
    before: Option<&TriggerRecord>,
    after: Option<&TriggerRecord>,
) -> ApiResult<()> {
    let before = before.and_then(|r| serde_json::to_value(r).ok());
    let after = after.and_then(|r| serde_json::to_value(r).ok());
    let entity = ("trigger", name.as_str());
    audit::record_before_apply(state, tenant, caller, action, entity, before.as_ref(), after.as_ref()).await
}

/// The tenant's triggers, ordered by name.
#[utoipa::path(get, path = "/api/triggers", tag = "triggers",
    params(("skip" = Option<usize>, Query, description = "Skip this many"), ("take" = Option<usize>, Query, description = "At most this many (1–200, default 50)")),
    responses((status = 200, body = Vec<TriggerView>)))]
#[tracing::instrument(name = "triggers.list", skip_all)]
pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    paging: Paging,
) -> ApiResult<Json<Vec<TriggerView>>> {
    let rows = state.runtime.stores.triggers.list(&tenant, paging.skip, paging.take).await?;
    Ok(Json(rows.into_iter().map(|r| TriggerView::new(&tenant, r)).collect()))
}

/// One trigger.
#[utoipa::path(get, path = "/api/triggers/{name}", tag = "triggers", params(("name" = String, Path, description = "Trigger name")),
    responses((status = 200, body = TriggerView),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "triggers.get", skip_all)]
pub async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
) -> ApiResult<Json<TriggerView>> {
    let name = trigger_name(&name)?;
    let found = state.runtime.stores.triggers.get(&tenant, &name).await?.ok_or_else(trigger_not_found)?;
    Ok(Json(TriggerView::new(&tenant, found)))
}

/// Define or replace a trigger (`201` when it is new). Audited before it is applied.
#[utoipa::path(put, path = "/api/triggers/{name}", tag = "triggers", request_body = TriggerBody,
    params(("name" = String, Path, description = "Trigger name")),
    responses((status = 200, description = "Replaced", body = TriggerView),
        (status = 201, description = "Created", body = TriggerView),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "triggers.put", skip_all)]
pub async fn put(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<TriggerBody>,
) -> ApiResult<Response> {
    let name = trigger_name(&name)?;
    let now = state.runtime.platform.clock.now();
    let store = &state.runtime.stores.triggers;
    let before = store.get(&tenant, &name).await?;
    let record = record_of(&state, &tenant, name.clone(), body, before.as_ref(), now).await?;
    let action = if before.is_some() { "trigger.update" } else { "trigger.create" };
    let mut after = record.clone();
    if let Some(b) = &before {
        after.created_at = b.created_at;
    }
    audit_first(&state, &tenant, &caller, action, &name, before.as_ref(), Some(&after)).await?;
    let stored = store.put(&tenant, &record).await?;
    let status = if before.is_some() { StatusCode::OK } else { StatusCode::CREATED };
    let view = TriggerView::new(&tenant, stored);
    let mut response = (status, Json(view)).into_response();
    if status == StatusCode::CREATED
        && let Ok(location) = HeaderValue::from_str(&format!("/api/triggers/{name}"))
    {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// Remove a trigger. Audited before it is applied.
#[utoipa::path(delete, path = "/api/triggers/{name}", tag = "triggers", params(("name" = String, Path, description = "Trigger name")),
    responses((status = 204),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "The audit entry could not be written; nothing was applied", body = ProblemDetails, content_type = "application/problem+json")))]
#[tracing::instrument(name = "triggers.delete", skip_all)]
pub async fn delete(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    let name = trigger_name(&name)?;
    let store = &state.runtime.stores.triggers;
    let before = store.get(&tenant, &name).await?.ok_or_else(trigger_not_found)?;
    audit_first(&state, &tenant, &caller, "trigger.delete", &name, Some(&before), None).await?;
    if !store.delete(&tenant, &name).await? {
        return Err(trigger_not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

// ---- accept ---------------------------------------------------------------------------------

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
        (status = 409, description = "This signature was accepted before (a replay)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "The trigger's target cannot start", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 429, body = ProblemDetails, content_type = "application/problem+json"),
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
    if trigger.target_kind != TargetKind::Agent {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unsupported_target_kind",
            "This trigger's target kind cannot run in this product.",
        ));
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
    let unavailable =
        |detail: &str| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "trigger_target_unavailable", detail.to_owned());
    let agent = AgentName::parse(&trigger.target_name)
        .map_err(|_| unavailable("The trigger's target agent name is not valid."))?;
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
    let request = RunRequest {
        tenant: tenant.clone(),
        agent,
        message,
        culture: None,
        parameters: BTreeMap::new(),
        documents: Vec::new(),
        session_id: None,
        caller,
        attribution,
        resume: None,
        queued: None,
        tool_results: Vec::new(),
    };
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
    };
    let location = format!("/api/runs/{}", accepted.run_id);
    Ok(TriggerAccepted {
        run_id: accepted.run_id,
        job_id: accepted.job_id,
        events_location: format!("{location}/events"),
        location,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_have_defaults_and_refuse_nonsense_at_start_up() {
        let d = TriggerSettings::from_config(&Config::default()).unwrap();
        assert_eq!((d.timestamp_tolerance_seconds, d.max_body_bytes, d.max_requests_per_minute), (300, 262_144, 60));
        assert_eq!((d.secret_names.prefix(), d.max_unverified_per_minute), ("Tracon:TriggerSecrets:", 60));
        let s = TriggerSettings::from_config(&Config::from_pairs([
            ("Tracon__InboundTriggers__TimestampTolerance", "00:02:00"),
            ("Tracon__InboundTriggers__MaxBodyBytes", "1024"),
            ("Tracon__InboundTriggers__MaxRequestsPerMinute", "5"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", "Hooks__Secrets__"),
        ]))
        .unwrap();
        assert_eq!((s.timestamp_tolerance_seconds, s.max_body_bytes, s.max_requests_per_minute), (120, 1024, 5));
        assert_eq!(s.secret_names.prefix(), "Hooks:Secrets:");
        assert_eq!(s.max_unverified_per_minute, 5, "defaults to the per-trigger limit");
        for (key, value) in [
            ("Tracon__InboundTriggers__TimestampToleranceSeconds", "0"),
            ("Tracon__InboundTriggers__TimestampToleranceSeconds", "soon"),
            ("Tracon__InboundTriggers__TimestampTolerance", "5 minutes"),
            ("Tracon__InboundTriggers__MaxBodyBytes", "0"),
            ("Tracon__InboundTriggers__MaxRequestsPerMinute", "-1"),
            ("Tracon__InboundTriggers__MaxUnverifiedRequestsPerMinute", "0"),
            ("Tracon__InboundTriggers__TenantPrefixes__acme", "NoColon"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", "Tracon:TriggerSecrets"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", ":"),
        ] {
            assert!(TriggerSettings::from_config(&Config::from_pairs([(key, value)])).is_err(), "{key}={value}");
        }
    }

    #[test]
    fn secrets_resolve_by_key_name_in_either_spelling_and_only_under_the_prefix() {
        let s = TriggerSettings::from_config(&Config::from_pairs([
            ("Tracon__TriggerSecrets__Slack", "whsec_1"),
            ("Tracon__Providers__OpenAI__ApiKey", "sk-not-for-triggers"),
        ]))
        .unwrap();
        let d = TenantId::default_tenant();
        assert_eq!(s.secret(&d, "Tracon:TriggerSecrets:Slack"), Some("whsec_1"));
        assert_eq!(s.secret(&d, "Tracon__TriggerSecrets__Slack"), Some("whsec_1"));
        assert_eq!(s.secret(&d, "Tracon:TriggerSecrets:Missing"), None);
        assert_eq!(s.secret(&d, "Tracon:Providers:OpenAI:ApiKey"), None, "outside the prefix");
        assert!(!format!("{s:?}").contains("whsec_1"));
    }

    #[test]
    fn the_limiter_allows_a_burst_per_trigger_then_says_when_to_retry() {
        let l = TriggerLimiter::default();
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert!(l.check("t/a", 2, now).is_ok());
        assert!(l.check("t/a", 2, now).is_ok());
        assert_eq!(l.check("t/a", 2, now), Err(30));
        assert!(l.check("t/b", 2, now).is_ok(), "per trigger");
        assert!(l.check("t/a", 2, now + chrono::Duration::seconds(30)).is_ok(), "refilled");
        assert!(l.peek("t/c", 1, now).is_ok() && l.peek("t/c", 1, now).is_ok(), "a peek takes nothing");
        assert!(l.check("t/c", 1, now).is_ok());
        assert_eq!(l.peek("t/c", 1, now), Err(60));
    }
}
