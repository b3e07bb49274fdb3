//! Outbound webhooks: subscriptions to Tracon's events, and their signed deliveries.
//!
//! - [`WebhookSubscription`] — a tenant's endpoint: a URL, the events it wants, the **name**
//!   of the configuration key holding its signing secret (never the value), custom headers.
//! - [`WebhookDelivery`] — the delivery history: **one** entry per event and subscription,
//!   updated in place by every attempt (status, attempts, last response status code, last
//!   error as a stable code and a safe message — never the receiver's or the client's text).
//! - [`WebhookStore`] — the port (tenant-first); [`memory::MemoryWebhookStore`] the
//!   in-memory implementation, `tracon-postgres` the others.
//! - [`Publisher`] — what the places an event happens call: for each enabled subscription
//!   of the tenant to that event, a delivery entry and a `webhook.deliver` job. A tenant
//!   without subscriptions costs one indexed query. A failing publish is logged and never
//!   breaks what published it.
//! - [`deliver::WebhookDeliveries`] — the `webhook.deliver` job handler: signs the body with
//!   `HMAC-SHA256(timestamp + "." + body)` and posts it through the egress guard
//!   ([`crate::egress`]); the job queue's backoff retries a failed attempt. A subscription
//!   is disabled after `Tracon:Webhooks:DisableAfterFailures` (10) consecutive failed
//!   deliveries; a successful one resets the count.
//!
//! Headers of a delivery: `X-Tracon-Event`, `X-Tracon-Delivery` (the delivery entry's id),
//! `X-Tracon-Timestamp` (Unix seconds) and `X-Tracon-Signature: sha256=<hex>` — the same
//! contract inbound triggers verify.

pub mod a2a;
pub mod deliver;
pub mod memory;
pub mod sources;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::config::{Config, ConfigError};
use crate::egress::EgressPolicy;
use crate::error::StoreError;
use crate::jobs::{JobObserver, JobRecord, JobStore, Outcome};
use crate::names::TenantId;
use crate::ports::{Clock, new_id};
use crate::quota::{QuotaNoticeSink, ThresholdNotice};
use crate::secret_names::SecretNamespace;

pub use deliver::WebhookDeliveries;

/// The handler key of a delivery's job.
pub use crate::jobs::DELIVER_JOB;

pub const RUN_COMPLETED: &str = "run.completed";
pub const RUN_FAILED: &str = "run.failed";
pub const APPROVAL_PENDING: &str = "approval.pending";
/// A workflow stopped to ask a person (`runId`, `workflowName`, `requests`).
pub const WORKFLOW_REQUEST_PENDING: &str = "workflow.request.pending";
pub const JOB_COMPLETED: &str = "job.completed";
pub const JOB_FAILED: &str = "job.failed";
pub const QUOTA_THRESHOLD: &str = "quota.threshold";
pub const TEST_PING: &str = "test.ping";

/// Every event a subscription may name. `eval.completed` and `run.score.low` are accepted
/// (they are the spec's names) but nothing emits them yet.
pub const EVENTS: [&str; 10] = [
    RUN_COMPLETED,
    RUN_FAILED,
    APPROVAL_PENDING,
    WORKFLOW_REQUEST_PENDING,
    JOB_COMPLETED,
    JOB_FAILED,
    "eval.completed",
    QUOTA_THRESHOLD,
    "run.score.low",
    TEST_PING,
];

/// Headers of every delivery.
pub const EVENT_HEADER: &str = "X-Tracon-Event";
pub const DELIVERY_HEADER: &str = "X-Tracon-Delivery";
pub const TIMESTAMP_HEADER: &str = "X-Tracon-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Tracon-Signature";

/// Default prefix a signing secret's configuration key name must start with.
pub const DEFAULT_SECRET_PREFIX: &str = "Tracon:WebhookSecrets:";
/// At most this much of a receiver's response is read (and then dropped: never stored).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Longest subscription URL.
pub const MAX_URL_LEN: usize = 2048;
/// At most this many custom headers per subscription.
pub const MAX_HEADERS: usize = 20;
pub const MAX_HEADER_NAME: usize = 128;
pub const MAX_HEADER_VALUE: usize = 1024;
pub const MAX_DESCRIPTION: usize = 500;

// ---- records --------------------------------------------------------------------------------

/// A tenant's webhook endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookSubscription {
    pub id: Uuid,
    #[serde(skip)]
    pub tenant: TenantId,
    /// `https://…` (plain `http://` only where `Tracon:Egress:AllowHttp` is on).
    pub url: String,
    /// The events delivered to it.
    pub events: Vec<String>,
    /// The configuration key holding the signing secret (`Tracon:WebhookSecrets:Orders`) —
    /// the name only; the value is read at delivery time and never stored.
    pub secret_configuration_name: String,
    /// Extra request headers (not secret: stored and shown as given).
    pub headers: BTreeMap<String, String>,
    pub description: Option<String>,
    pub enabled: bool,
    /// Failed deliveries in a row (a success resets it).
    pub consecutive_failures: u32,
    /// When it was disabled for failing too often.
    pub disabled_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What an update may change (the failure count and times are the store's).
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionChange {
    pub url: String,
    pub events: Vec<String>,
    pub secret_configuration_name: String,
    pub headers: BTreeMap<String, String>,
    pub description: Option<String>,
    /// Turning a subscription on resets its failure count and `disabledAt`.
    pub enabled: bool,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum DeliveryStatus {
    /// Queued, not attempted yet.
    Pending,
    /// An attempt failed; the job queue tries again after its backoff.
    Retrying,
    Succeeded,
    /// Out of attempts, or failed for good.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Retrying => "Retrying",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Retrying, Self::Succeeded, Self::Failed].into_iter().find(|v| v.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// Why an attempt failed: a stable code (`tracon.webhook.http-status`, …) and a display-safe
/// message — never a foreign error's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryError {
    pub code: String,
    pub message: String,
}

/// One event's delivery to one subscription.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// Also the `X-Tracon-Delivery` header.
    pub id: Uuid,
    #[serde(skip)]
    pub tenant: TenantId,
    pub subscription_id: Uuid,
    /// The event's id (the body's `id`; one event delivered to several subscriptions shares it).
    pub event_id: Uuid,
    pub event_type: String,
    pub status: DeliveryStatus,
    /// Requests sent so far.
    pub attempts: u32,
    /// The receiver's status code of the last attempt that got an answer.
    pub last_status_code: Option<u16>,
    pub last_error: Option<DeliveryError>,
    /// The `webhook.deliver` job.
    pub job_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// An attempt's result, written over the delivery's entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryAttempt {
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub status_code: Option<u16>,
    pub error: Option<DeliveryError>,
    pub at: DateTime<Utc>,
}

// ---- the port -------------------------------------------------------------------------------

/// Subscriptions and their delivery history. Another tenant's record is indistinguishable
/// from a missing one.
#[async_trait::async_trait]
pub trait WebhookStore: Send + Sync {
    /// `Conflict` when the id exists.
    async fn create(&self, tenant: &TenantId, subscription: &WebhookSubscription) -> Result<(), StoreError>;
    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookSubscription>, StoreError>;
    /// Oldest first.
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<WebhookSubscription>, StoreError>;
    /// Applies `change`; `NotFound` when missing. Turning `enabled` on resets the failure
    /// count and `disabled_at`.
    async fn update(
        &self,
        tenant: &TenantId,
        id: Uuid,
        change: &SubscriptionChange,
        now: DateTime<Utc>,
    ) -> Result<WebhookSubscription, StoreError>;
    /// Deletes it with its delivery history; `false` when there was nothing to delete.
    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError>;
    /// The enabled subscriptions to `event`, oldest first (one indexed query).
    async fn subscribed(&self, tenant: &TenantId, event: &str) -> Result<Vec<WebhookSubscription>, StoreError>;
    /// Counts a finished delivery in one atomic step: a success resets the failure count; a
    /// failure adds one and, when the count reaches `disable_after` (0: never), disables the
    /// subscription at `now`. `None` when the subscription is gone.
    async fn settle(
        &self,
        tenant: &TenantId,
        id: Uuid,
        succeeded: bool,
        disable_after: u32,
        now: DateTime<Utc>,
    ) -> Result<Option<WebhookSubscription>, StoreError>;
    /// `Conflict` when the id exists; `NotFound` when its subscription does not.
    async fn add_delivery(&self, tenant: &TenantId, delivery: &WebhookDelivery) -> Result<(), StoreError>;
    async fn get_delivery(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookDelivery>, StoreError>;
    /// Writes an attempt over the entry; `NotFound` when it is gone.
    async fn record_attempt(&self, tenant: &TenantId, id: Uuid, attempt: &DeliveryAttempt) -> Result<(), StoreError>;
    /// A subscription's deliveries, newest first.
    async fn deliveries(
        &self,
        tenant: &TenantId,
        subscription: Uuid,
        skip: usize,
        take: usize,
    ) -> Result<Vec<WebhookDelivery>, StoreError>;
    /// Every tenant's subscriptions with the secret key name each stores (by tenant, then
    /// oldest first): the start-up check of names outside their tenant's partition
    /// ([`crate::secret_names`]). Never on a request path.
    async fn secret_references(&self) -> Result<Vec<crate::secret_names::SecretReference>, StoreError>;
}

// ---- settings -------------------------------------------------------------------------------

/// `Tracon:Webhooks:*`, the egress policy deliveries go through, and where secrets are read.
#[derive(Clone)]
pub struct WebhookSettings {
    /// `Tracon:Egress:*` ([`EgressPolicy::from_config`]); strict by default.
    pub egress: EgressPolicy,
    /// `DisableAfterFailures` (10): consecutive failed deliveries that disable a
    /// subscription; 0 never disables.
    pub disable_after_failures: u32,
    /// `MaxAttempts` (5): attempts of one delivery, retried with the job queue's backoff.
    pub max_attempts: u32,
    /// Which key names a tenant's subscriptions may name: `AllowedConfigurationPrefix`
    /// (`Tracon:WebhookSecrets:`), partitioned per tenant, plus the operator's
    /// `TenantPrefixes` grants ([`crate::secret_names`]).
    pub secret_names: SecretNamespace,
    /// Where a secret's key name is resolved at delivery time (environment variables
    /// locally, Lambda environment, Worker vars and secrets).
    secrets: Config,
    /// Native only: resolves delivery host names instead of the system resolver (tests,
    /// a custom DNS client); the guard filters its answers all the same.
    #[cfg(not(target_arch = "wasm32"))]
    pub resolver: Option<Arc<dyn reqwest::dns::Resolve>>,
    /// Events a tenant was just seen to have no subscription to (shared by every clone).
    pub quiet: Arc<QuietEvents>,
}

/// Per process: `(tenant, event)` pairs recently found without an enabled subscription, so
/// the runs and jobs of a tenant that subscribes to nothing publish without a query. An
/// entry lives `Tracon:Webhooks:SubscriptionCacheSeconds` (5; 0 turns the cache off) and is
/// dropped at once when a subscription of the tenant is written through this process; a
/// subscription written through another instance is seen within that time.
#[derive(Debug, Default)]
pub struct QuietEvents {
    ttl: std::time::Duration,
    until: std::sync::Mutex<HashMap<(TenantId, String), DateTime<Utc>>>,
}

/// Entries kept at most; beyond it the cache starts over (it is only a shortcut).
const QUIET_CAPACITY: usize = 10_000;

impl QuietEvents {
    pub fn new(ttl: std::time::Duration) -> Self {
        Self { ttl, until: Default::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(TenantId, String), DateTime<Utc>>> {
        self.until.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn is_quiet(&self, tenant: &TenantId, event: &str, now: DateTime<Utc>) -> bool {
        !self.ttl.is_zero() && self.lock().get(&(tenant.clone(), event.to_owned())).is_some_and(|until| *until > now)
    }

    fn remember(&self, tenant: &TenantId, event: &str, now: DateTime<Utc>) {
        let Ok(ttl) = chrono::Duration::from_std(self.ttl) else { return };
        if ttl.is_zero() {
            return;
        }
        let mut map = self.lock();
        if map.len() >= QUIET_CAPACITY {
            map.clear();
        }
        map.insert((tenant.clone(), event.to_owned()), now + ttl);
    }

    /// A subscription of `tenant` was written: its events are no longer known to be quiet.
    pub fn forget(&self, tenant: &TenantId) {
        self.lock().retain(|(t, _), _| t != tenant);
    }
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds secrets: never printed.
        f.debug_struct("WebhookSettings")
            .field("egress", &self.egress)
            .field("disable_after_failures", &self.disable_after_failures)
            .field("max_attempts", &self.max_attempts)
            .field("secret_names", &self.secret_names)
            .finish_non_exhaustive()
    }
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            egress: EgressPolicy::strict(),
            disable_after_failures: 10,
            max_attempts: 5,
            secret_names: SecretNamespace::new(DEFAULT_SECRET_PREFIX),
            secrets: Config::default(),
            #[cfg(not(target_arch = "wasm32"))]
            resolver: None,
            quiet: Arc::new(QuietEvents::new(std::time::Duration::from_secs(5))),
        }
    }
}

impl WebhookSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let max_attempts = config.parse::<u32>("Tracon:Webhooks:MaxAttempts")?.unwrap_or(d.max_attempts);
        if max_attempts == 0 {
            return Err(ConfigError::Message("Tracon__Webhooks__MaxAttempts must be positive.".into()));
        }
        Ok(Self {
            egress: EgressPolicy::from_config(config)?,
            disable_after_failures: config
                .parse::<u32>("Tracon:Webhooks:DisableAfterFailures")?
                .unwrap_or(d.disable_after_failures),
            max_attempts,
            secret_names: SecretNamespace::from_config(config, "Tracon:Webhooks", DEFAULT_SECRET_PREFIX)?,
            secrets: config.clone(),
            quiet: Arc::new(QuietEvents::new(
                config
                    .seconds("Tracon:Webhooks:SubscriptionCacheSeconds")?
                    .unwrap_or(std::time::Duration::from_secs(5)),
            )),
            #[cfg(not(target_arch = "wasm32"))]
            resolver: None,
        })
    }

    /// Replaces the configuration secrets are read from.
    pub fn with_secrets(mut self, secrets: Config) -> Self {
        self.secrets = secrets;
        self
    }

    /// The value of `tenant`'s secret's configuration key, read now; `None` when the name is
    /// not one the tenant may resolve, or has no value.
    pub fn secret(&self, tenant: &TenantId, name: &str) -> Option<String> {
        if !self.secret_names.may_resolve(tenant, name) {
            return None;
        }
        self.secrets.get(name).map(str::to_owned).filter(|v| !v.is_empty())
    }
}

// ---- signing ----------------------------------------------------------------------------------

/// `hex(HMAC-SHA256(secret, "{timestamp}.{body}"))` — the value after `sha256=` in
/// `X-Tracon-Signature`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return String::new() };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks an `X-Tracon-Signature` value (`sha256=<hex>`) in constant time. An empty, short
/// or malformed signature is refused.
pub fn verify(secret: &[u8], timestamp: i64, body: &[u8], header: &str) -> bool {
    let Some(hex) = header.trim().strip_prefix("sha256=") else { return false };
    if hex.len() != 64 {
        return false;
    }
    let mut expected = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let Some(byte) = std::str::from_utf8(pair).ok().and_then(|p| u8::from_str_radix(p, 16).ok()) else {
            return false;
        };
        expected[i] = byte;
    }
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return false };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

// ---- publishing -------------------------------------------------------------------------------

/// A delivery job's payload: which entry, and the exact body every attempt sends (so each
/// attempt signs the same bytes with a fresh timestamp).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryJob {
    pub delivery_id: Uuid,
    pub subscription_id: Uuid,
    pub event_type: String,
    pub body: String,
}

/// Creates delivery entries and their jobs.
#[derive(Clone)]
pub struct Publisher {
    pub webhooks: Arc<dyn WebhookStore>,
    pub jobs: Arc<dyn JobStore>,
    pub clock: Arc<dyn Clock>,
    pub max_attempts: u32,
    /// Events known to have no subscriber right now ([`QuietEvents`]).
    pub quiet: Arc<QuietEvents>,
}

impl Publisher {
    /// For each enabled subscription of `tenant` to `event`: a delivery entry and its job.
    /// Returns the deliveries created.
    pub async fn publish(
        &self,
        tenant: &TenantId,
        event: &str,
        data: Value,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let now = self.clock.now();
        if self.quiet.is_quiet(tenant, event, now) {
            return Ok(Vec::new());
        }
        let subscriptions = self.webhooks.subscribed(tenant, event).await?;
        if subscriptions.is_empty() {
            self.quiet.remember(tenant, event, now);
            return Ok(Vec::new());
        }
        let event_id = new_id(self.clock.as_ref());
        let body = envelope(event_id, event, tenant, self.clock.now(), data);
        let mut out = Vec::with_capacity(subscriptions.len());
        let mut first_error = None;
        for subscription in &subscriptions {
            match self.enqueue(tenant, subscription, event_id, event, &body).await {
                Ok(d) => out.push(d),
                Err(e) => {
                    tracing::warn!(subscription = %subscription.id, event, error = ?e, "could not queue a webhook delivery");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }

    /// [`Self::publish`], a failure logged: what a run, a job or a quota check calls, so a
    /// webhook problem never breaks them.
    pub async fn publish_logged(&self, tenant: &TenantId, event: &str, data: Value) {
        if let Err(e) = self.publish(tenant, event, data).await {
            tracing::warn!(tenant = %tenant, event, error = ?e, "could not publish a webhook event");
        }
    }

    /// One event to one subscription, whether or not it subscribes to it (`test.ping`).
    pub async fn deliver_to(
        &self,
        tenant: &TenantId,
        subscription: &WebhookSubscription,
        event: &str,
        data: Value,
    ) -> Result<WebhookDelivery, StoreError> {
        let event_id = new_id(self.clock.as_ref());
        let body = envelope(event_id, event, tenant, self.clock.now(), data);
        self.enqueue(tenant, subscription, event_id, event, &body).await
    }

    /// `body` as it is to one subscription, under `event` (an A2A push, whose body is A2A's
    /// own rather than [`envelope`]'s).
    pub async fn deliver_body(
        &self,
        tenant: &TenantId,
        subscription: &WebhookSubscription,
        event: &str,
        body: &str,
    ) -> Result<WebhookDelivery, StoreError> {
        let event_id = new_id(self.clock.as_ref());
        self.enqueue(tenant, subscription, event_id, event, body).await
    }

    async fn enqueue(
        &self,
        tenant: &TenantId,
        subscription: &WebhookSubscription,
        event_id: Uuid,
        event: &str,
        body: &str,
    ) -> Result<WebhookDelivery, StoreError> {
        let now = self.clock.now();
        let id = new_id(self.clock.as_ref());
        let job_id = new_id(self.clock.as_ref());
        let mut delivery = WebhookDelivery {
            id,
            tenant: tenant.clone(),
            subscription_id: subscription.id,
            event_id,
            event_type: event.to_owned(),
            status: DeliveryStatus::Pending,
            attempts: 0,
            last_status_code: None,
            last_error: None,
            job_id: Some(job_id),
            created_at: now,
            updated_at: now,
            last_attempt_at: None,
            completed_at: None,
        };
        self.webhooks.add_delivery(tenant, &delivery).await?;
        let payload = DeliveryJob {
            delivery_id: id,
            subscription_id: subscription.id,
            event_type: event.to_owned(),
            body: body.to_owned(),
        };
        let payload = serde_json::to_value(&payload).map_err(|e| StoreError::Internal { detail: e.to_string() })?;
        let job = JobRecord::queued(job_id, tenant.clone(), DELIVER_JOB, payload, self.max_attempts, now);
        if let Err(e) = self.jobs.enqueue(&job).await {
            let error = DeliveryError {
                code: "tracon.webhook.not-queued".into(),
                message: "The delivery could not be queued.".into(),
            };
            let attempt = DeliveryAttempt {
                status: DeliveryStatus::Failed,
                attempts: 0,
                status_code: None,
                error: Some(error),
                at: now,
            };
            if let Err(e) = self.webhooks.record_attempt(tenant, id, &attempt).await {
                tracing::warn!(delivery = %id, error = ?e, "could not close a delivery that was never queued");
            }
            return Err(e);
        }
        delivery.job_id = Some(job_id);
        Ok(delivery)
    }
}

/// The body every event is posted as.
pub fn envelope(event_id: Uuid, event: &str, tenant: &TenantId, at: DateTime<Utc>, data: Value) -> String {
    json!({
        "id": event_id,
        "type": event,
        "createdAt": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "tenantId": tenant.as_str(),
        "data": data,
    })
    .to_string()
}

// ---- job and quota events ------------------------------------------------------------------------

/// `job.completed` / `job.failed` when a job reaches a terminal state — except for
/// `webhook.deliver` jobs, whose own events would feed themselves.
pub struct JobEvents(pub Publisher);

#[async_trait::async_trait]
impl JobObserver for JobEvents {
    async fn settled(&self, job: &JobRecord, outcome: &Outcome) {
        if job.handler_key == DELIVER_JOB {
            return;
        }
        let (event, status, error) = match outcome {
            Outcome::Succeeded(_) => (JOB_COMPLETED, "Succeeded", None),
            Outcome::Failed(e) => (JOB_FAILED, "Failed", Some(e)),
            Outcome::Retry { .. } | Outcome::Canceled | Outcome::Requeue => return,
        };
        let data = json!({
            "jobId": job.id,
            "handlerKey": job.handler_key,
            "status": status,
            "attempts": job.attempts,
            "runId": job.run_id,
            "error": error,
        });
        self.0.publish_logged(&job.tenant, event, data).await;
    }
}

/// `quota.threshold`, through the quota notice seam.
pub struct QuotaEvents(pub Publisher);

#[async_trait::async_trait]
impl QuotaNoticeSink for QuotaEvents {
    async fn notify(&self, notice: &ThresholdNotice) {
        let Ok(tenant) = TenantId::parse(&notice.tenant_id) else { return };
        let data = serde_json::to_value(notice).unwrap_or(Value::Null);
        self.0.publish_logged(&tenant, QUOTA_THRESHOLD, data).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_events_expire_are_per_tenant_and_event_and_are_forgotten_on_a_write() {
        let quiet = QuietEvents::new(std::time::Duration::from_secs(5));
        let (a, b) = (TenantId::parse("a").unwrap(), TenantId::parse("b").unwrap());
        let now = Utc::now();
        assert!(!quiet.is_quiet(&a, RUN_COMPLETED, now));
        quiet.remember(&a, RUN_COMPLETED, now);
        quiet.remember(&b, RUN_COMPLETED, now);
        assert!(quiet.is_quiet(&a, RUN_COMPLETED, now + chrono::Duration::seconds(4)));
        assert!(!quiet.is_quiet(&a, RUN_COMPLETED, now + chrono::Duration::seconds(5)), "expired");
        assert!(!quiet.is_quiet(&a, RUN_FAILED, now), "another event is not known quiet");
        quiet.forget(&a);
        assert!(!quiet.is_quiet(&a, RUN_COMPLETED, now), "a subscription write drops the tenant's entries");
        assert!(quiet.is_quiet(&b, RUN_COMPLETED, now), "and only that tenant's");
        let off = QuietEvents::new(std::time::Duration::ZERO);
        off.remember(&a, RUN_COMPLETED, now);
        assert!(!off.is_quiet(&a, RUN_COMPLETED, now), "0 turns the cache off");
    }

    #[test]
    fn signatures_verify_only_with_the_same_secret_timestamp_and_body() {
        let sig = format!("sha256={}", sign(b"s3cret", 1_800_000_000, b"{\"a\":1}"));
        assert!(verify(b"s3cret", 1_800_000_000, b"{\"a\":1}", &sig));
        assert!(!verify(b"other", 1_800_000_000, b"{\"a\":1}", &sig));
        assert!(!verify(b"s3cret", 1_800_000_001, b"{\"a\":1}", &sig));
        assert!(!verify(b"s3cret", 1_800_000_000, b"{\"a\":2}", &sig));
        assert!(!verify(b"s3cret", 1_800_000_000, b"{\"a\":1}", ""));
        assert!(!verify(b"s3cret", 1_800_000_000, b"{\"a\":1}", "sha256="));
        assert!(!verify(b"s3cret", 1_800_000_000, b"{\"a\":1}", &sig[..sig.len() - 2]));
    }

    #[test]
    fn the_rfc_4231_vector_signs_as_expected() {
        // RFC 4231 test case 2: the MAC under the signature is the standard one.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn secret_names_must_sit_under_the_prefix() {
        let s = WebhookSettings::default().with_secrets(Config::from_pairs([
            ("Tracon__WebhookSecrets__Orders", "whsec_default"),
            ("Tracon__WebhookSecrets__acme__Orders", "whsec_acme"),
        ]));
        let (default, acme) = (TenantId::default_tenant(), TenantId::parse("acme").unwrap());
        assert!(s.secret_names.check_write(&default, "Tracon:WebhookSecrets:Orders").is_ok());
        assert!(s.secret_names.check_write(&acme, "Tracon:WebhookSecrets:acme:orders-v2").is_ok());
        for bad in ["Tracon:WebhookSecrets:", "Tracon:Other:X", "OPENAI_API_KEY", "Tracon:WebhookSecrets:a b"] {
            assert!(s.secret_names.check_write(&default, bad).is_err(), "{bad}");
        }
        assert!(s.secret_names.check_write(&acme, "Tracon:WebhookSecrets:Orders").is_err(), "the default tenant's");
        assert_eq!(s.secret(&acme, "Tracon:WebhookSecrets:acme:Orders").as_deref(), Some("whsec_acme"));
        assert_eq!(s.secret(&default, "OPENAI_API_KEY"), None);
    }
}
