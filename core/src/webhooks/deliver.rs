//! The `webhook.deliver` job handler: one attempt of one delivery.
//!
//! An attempt reads the delivery entry and its subscription (a finished entry is not sent
//! again — jobs are delivered at least once), reads the signing secret by its key name,
//! signs `"{timestamp}.{body}"`, and posts through the egress guard. Natively that is
//! [`crate::egress::EgressClient`] (URL check, guarded resolver, redirects re-checked); on
//! wasm32 the URL check and the platform's fetch. At most [`super::MAX_RESPONSE_BYTES`] of
//! the answer is read and nothing of it is kept. The entry is updated in place; a failure
//! worth retrying returns a transient failure and the job queue's backoff schedules the
//! next attempt; the last failure counts against the subscription (see
//! [`super::WebhookStore::settle`]).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    DELIVER_JOB, DELIVERY_HEADER, DeliveryAttempt, DeliveryError, DeliveryJob, DeliveryStatus, EVENT_HEADER,
    SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookDelivery, WebhookSubscription, sign,
};
use crate::failure::new_ref;
use crate::jobs::{JobFailure, JobHandler, JobRecord};
use crate::runtime::Runtime;

/// What one request came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    /// The receiver's status, when it answered.
    pub status_code: Option<u16>,
    /// Why it failed (`None`: a 2xx answer).
    pub error: Option<Failure>,
}

/// A failed attempt: the stored code and message, and whether another attempt may help.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: &'static str,
    pub message: String,
    pub retry: bool,
}

impl Failure {
    fn new(code: &'static str, message: impl Into<String>, retry: bool) -> Self {
        Self { code, message: message.into(), retry }
    }
}

/// Serves `webhook.deliver` jobs.
pub struct WebhookDeliveries {
    runtime: Arc<Runtime>,
    #[cfg(not(target_arch = "wasm32"))]
    client: std::sync::OnceLock<Result<crate::egress::EgressClient, String>>,
    #[cfg(target_arch = "wasm32")]
    client: reqwest::Client,
}

impl WebhookDeliveries {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self {
            runtime,
            #[cfg(not(target_arch = "wasm32"))]
            client: std::sync::OnceLock::new(),
            #[cfg(target_arch = "wasm32")]
            client: reqwest::Client::new(),
        }
    }

    /// Sends one signed request. Never returns foreign text: failures become a stable code
    /// and message, the detail is logged under a ref.
    pub async fn send(
        &self,
        subscription: &WebhookSubscription,
        delivery_id: uuid::Uuid,
        event: &str,
        body: &str,
    ) -> Sent {
        let settings = &self.runtime.webhooks;
        let Some(secret) = settings.secret(&subscription.tenant, &subscription.secret_configuration_name) else {
            return failed(Failure::new(
                "tracon.webhook.secret-missing",
                "The subscription's signing secret has no value in the configuration.",
                false,
            ));
        };
        let url = match reqwest::Url::parse(&subscription.url) {
            Ok(u) => u,
            Err(_) => {
                return failed(Failure::new("tracon.webhook.invalid-url", "The subscription's URL is invalid.", false));
            }
        };
        if let Err(refused) = settings.egress.check_url(&url) {
            return failed(refusal(&refused));
        }
        let timestamp = self.runtime.platform.clock.now().timestamp();
        let signature = format!("sha256={}", sign(secret.as_bytes(), timestamp, body.as_bytes()));
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &subscription.headers {
            // Validated when written; a stored header that no longer parses is skipped.
            if is_reserved_header(name) {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_str(value),
            ) {
                headers.insert(n, v);
            }
        }
        let fixed = [
            (reqwest::header::CONTENT_TYPE.as_str(), "application/json".to_owned()),
            (reqwest::header::USER_AGENT.as_str(), "Tracon-Webhooks/1".to_owned()),
            (EVENT_HEADER, event.to_owned()),
            (DELIVERY_HEADER, delivery_id.to_string()),
            (TIMESTAMP_HEADER, timestamp.to_string()),
            (SIGNATURE_HEADER, signature),
        ];
        for (name, value) in fixed {
            if let (Ok(n), Ok(v)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                reqwest::header::HeaderValue::from_str(&value),
            ) {
                headers.insert(n, v);
            }
        }
        self.post(url, headers, body.to_owned()).await
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn post(&self, url: reqwest::Url, headers: reqwest::header::HeaderMap, body: String) -> Sent {
        use crate::egress::{EgressClient, Redirects, SendError};
        use futures::StreamExt;

        let settings = &self.runtime.webhooks;
        // Redirects are never followed: a receiver's `3xx` is a failed attempt, so a delivery
        // is never re-sent somewhere else (or as a bodiless GET).
        let client = self.client.get_or_init(|| {
            EgressClient::build(settings.egress.clone(), settings.resolver.clone(), Redirects::Refuse)
                .map_err(|e| e.to_string())
        });
        let client = match client {
            Ok(c) => c,
            Err(detail) => {
                return failed(foreign("tracon.webhook.client-unavailable", "HttpClient", detail.clone(), true));
            }
        };
        let request = match client.request(reqwest::Method::POST, url) {
            Ok(r) => r.headers(headers).body(body),
            Err(refused) => return failed(refusal(&refused)),
        };
        match request.send().await.map_err(SendError::from) {
            Ok(response) => {
                let status = response.status();
                // Read at most the limit, keep none of it.
                let mut read = 0usize;
                let mut stream = response.bytes_stream();
                while let Some(Ok(chunk)) = stream.next().await {
                    read += chunk.len();
                    if read >= super::MAX_RESPONSE_BYTES {
                        break;
                    }
                }
                answered(status.as_u16())
            }
            Err(SendError::Refused(refused)) => failed(refusal(&refused)),
            Err(SendError::Http(e)) => failed(http_failure(&e)),
        }
    }

    #[cfg(target_arch = "wasm32")]
    async fn post(&self, url: reqwest::Url, headers: reqwest::header::HeaderMap, body: String) -> Sent {
        // The platform's fetch resolves and connects (Workers cannot reach private
        // networks); the URL check above is the guard here. Redirects are not followed (a
        // `3xx` is the answer) and the body is not read.
        let request = self.client.post(url).headers(headers).body(body);
        match send_wrapper::SendWrapper::new(crate::model::fetch::send_unredirected(request)).await {
            Ok(reply) => answered(reply.status().as_u16()),
            Err(e) => failed(foreign("tracon.webhook.request-failed", "HttpRequest", e.to_string(), true)),
        }
    }

    async fn attempt(&self, job: &JobRecord, payload: DeliveryJob) -> Result<Option<Value>, JobFailure> {
        let store = &self.runtime.stores.webhooks;
        let tenant = &job.tenant;
        let Some(delivery) =
            store.get_delivery(tenant, payload.delivery_id).await.map_err(JobFailure::store_unavailable)?
        else {
            // Deleted with its subscription.
            return Ok(Some(json!({ "skipped": "deliveryGone" })));
        };
        if delivery.status.is_terminal() {
            return Ok(Some(json!({ "skipped": "alreadyDelivered", "status": delivery.status })));
        }
        let Some(subscription) =
            store.get(tenant, delivery.subscription_id).await.map_err(JobFailure::store_unavailable)?
        else {
            return Ok(Some(json!({ "skipped": "subscriptionGone" })));
        };
        let now = self.runtime.platform.clock.now();
        if !subscription.enabled {
            let error = DeliveryError {
                code: "tracon.webhook.subscription-disabled".into(),
                message: "The subscription is disabled; the delivery was not sent.".into(),
            };
            let attempt = DeliveryAttempt {
                status: DeliveryStatus::Failed,
                attempts: delivery.attempts,
                status_code: delivery.last_status_code,
                error: Some(error.clone()),
                at: now,
            };
            store.record_attempt(tenant, delivery.id, &attempt).await.map_err(JobFailure::store_unavailable)?;
            return Err(JobFailure::Permanent { code: error.code, message: error.message });
        }
        let sent = self.send(&subscription, delivery.id, &payload.event_type, &payload.body).await;
        let now = self.runtime.platform.clock.now();
        self.settle(job, &delivery, &subscription, sent, now).await
    }

    async fn settle(
        &self,
        job: &JobRecord,
        delivery: &WebhookDelivery,
        subscription: &WebhookSubscription,
        sent: Sent,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<Value>, JobFailure> {
        let store = &self.runtime.stores.webhooks;
        let tenant = &job.tenant;
        let attempts = delivery.attempts.saturating_add(1);
        let status_code = sent.status_code.or(delivery.last_status_code);
        let Some(failure) = sent.error else {
            let attempt =
                DeliveryAttempt { status: DeliveryStatus::Succeeded, attempts, status_code, error: None, at: now };
            store.record_attempt(tenant, delivery.id, &attempt).await.map_err(JobFailure::store_unavailable)?;
            if let Err(e) = store.settle(tenant, subscription.id, true, 0, now).await {
                tracing::warn!(subscription = %subscription.id, error = ?e, "could not reset the subscription's failure count");
            }
            return Ok(Some(
                json!({ "deliveryId": delivery.id, "statusCode": sent.status_code, "attempts": attempts }),
            ));
        };
        let last = !failure.retry || job.attempts >= job.max_attempts;
        let error = DeliveryError { code: failure.code.to_owned(), message: failure.message.clone() };
        let attempt = DeliveryAttempt {
            status: if last { DeliveryStatus::Failed } else { DeliveryStatus::Retrying },
            attempts,
            status_code,
            error: Some(error),
            at: now,
        };
        store.record_attempt(tenant, delivery.id, &attempt).await.map_err(JobFailure::store_unavailable)?;
        if !last {
            return Err(JobFailure::Transient {
                code: failure.code.to_owned(),
                message: failure.message,
                detail: format!("delivery {} attempt {attempts}", delivery.id),
            });
        }
        let disable_after = self.runtime.webhooks.disable_after_failures;
        match store.settle(tenant, subscription.id, false, disable_after, now).await {
            Ok(Some(s)) if !s.enabled && subscription.enabled => {
                tracing::warn!(
                    subscription = %s.id, failures = s.consecutive_failures,
                    "webhook subscription disabled after consecutive failed deliveries"
                );
                // The system changed a governed record: it goes into the trail like any write.
                let entry = crate::audit::NewAuditEntry::new(
                    now,
                    "internal",
                    "webhook.disable",
                    ("webhook", &s.id.to_string()),
                    Some(&json!({ "enabled": true })),
                    Some(&json!({ "enabled": false, "consecutiveFailures": s.consecutive_failures,
                        "disabledAt": s.disabled_at })),
                );
                if let Err(e) = self.runtime.stores.audit.append(tenant, entry).await {
                    tracing::error!(subscription = %s.id, error = %e, "the automatic disable was not audited");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(subscription = %subscription.id, error = ?e, "could not count a failed delivery"),
        }
        Err(JobFailure::Permanent { code: failure.code.to_owned(), message: failure.message })
    }
}

#[async_trait::async_trait]
impl JobHandler for WebhookDeliveries {
    fn key(&self) -> &'static str {
        DELIVER_JOB
    }

    async fn handle(&self, job: &JobRecord, _cancel: CancellationToken) -> Result<Option<Value>, JobFailure> {
        let payload: DeliveryJob = serde_json::from_value(job.payload.clone()).map_err(|_| JobFailure::Permanent {
            code: "tracon.webhook.bad-payload".into(),
            message: "The delivery's payload could not be read.".into(),
        })?;
        self.attempt(job, payload).await
    }
}

fn failed(failure: Failure) -> Sent {
    Sent { status_code: None, error: Some(failure) }
}

fn answered(status: u16) -> Sent {
    if (200..300).contains(&status) {
        Sent { status_code: Some(status), error: None }
    } else if (300..400).contains(&status) {
        let failure = Failure::new(
            "tracon.webhook.redirect",
            format!(
                "The receiver answered {status} (a redirect); deliveries do not follow redirects, so point the subscription at the final URL."
            ),
            true,
        );
        Sent { status_code: Some(status), error: Some(failure) }
    } else {
        let failure = Failure::new("tracon.webhook.http-status", format!("The receiver answered {status}."), true);
        Sent { status_code: Some(status), error: Some(failure) }
    }
}

/// A refusal of the egress guard: nothing reached the refused destination. Only a failed
/// name lookup is worth another attempt.
fn refusal(refused: &crate::egress::EgressError) -> Failure {
    use crate::egress::EgressError;
    match refused {
        EgressError::Resolve { .. } => {
            tracing::warn!(error = %refused, "webhook host name did not resolve");
            Failure::new("tracon.webhook.dns-failed", "The receiver's host name could not be resolved.", true)
        }
        other => {
            tracing::warn!(error = %other, "the egress guard refused a webhook destination");
            Failure::new(
                "tracon.webhook.egress-refused",
                "The egress guard refused the destination (not a public HTTPS address); nothing was sent.",
                false,
            )
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn http_failure(e: &reqwest::Error) -> Failure {
    if e.is_timeout() {
        tracing::warn!(error = %e, "webhook request timed out");
        return Failure::new("tracon.webhook.timeout", "The receiver did not answer in time.", true);
    }
    if e.is_connect() {
        tracing::warn!(error = %e, "webhook connection failed");
        return Failure::new("tracon.webhook.connect-failed", "Could not connect to the receiver.", true);
    }
    foreign("tracon.webhook.request-failed", "HttpRequest", e.to_string(), true)
}

/// A foreign failure: `"{Type} failed. (ref: …)"`, the detail logged under the ref.
fn foreign(code: &'static str, type_name: &str, detail: String, retry: bool) -> Failure {
    let reference = new_ref();
    tracing::warn!(r#ref = %reference, error_type = type_name, detail = %detail, "webhook delivery failed");
    Failure::new(code, format!("{type_name} failed. (ref: {reference})"), retry)
}

/// Headers a subscription may not set: framing and connection headers the client owns,
/// credentials (secrets are never stored — a subscription names its signing secret's key
/// instead), and everything `X-Tracon-*` (the signature contract).
pub fn is_reserved_header(name: &str) -> bool {
    const RESERVED: [&str; 20] = [
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "authorization",
        "cookie",
        "user-agent",
        "forwarded",
        "via",
        "date",
    ];
    let n = name.trim().to_ascii_lowercase();
    RESERVED.contains(&n.as_str())
        || n.starts_with("x-tracon-")
        || n.starts_with("x-forwarded-")
        || n.starts_with("sec-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_headers_are_recognised_in_any_case() {
        for h in [
            "Host",
            "content-length",
            "X-Tracon-Signature",
            "x-tracon-anything",
            "Authorization",
            "Transfer-Encoding",
            "Connection",
            "X-Forwarded-For",
        ] {
            assert!(is_reserved_header(h), "{h}");
        }
        for h in ["X-Team", "X-Api-Version", "Accept-Language"] {
            assert!(!is_reserved_header(h), "{h}");
        }
    }

    #[test]
    fn only_2xx_answers_succeed() {
        assert_eq!(answered(204).error, None);
        let e = answered(500).error.unwrap();
        assert_eq!((e.code, e.retry), ("tracon.webhook.http-status", true));
        let redirect = answered(302);
        assert_eq!(
            (redirect.status_code, redirect.error.map(|e| e.code)),
            (Some(302), Some("tracon.webhook.redirect"))
        );
    }
}
