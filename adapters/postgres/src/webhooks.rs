//! Webhook rows ⇄ domain types, shared by both Postgres drivers (sqlx natively,
//! tokio-postgres on Workers) so they agree on every stored representation. Nothing here is
//! protected content: a subscription holds a URL, event names, a secret's key *name* and
//! non-secret headers; a delivery entry holds codes Tracon wrote. The body travels in the
//! delivery job's (protected) payload.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::names::TenantId;
use tracon_core::webhooks::{DeliveryError, DeliveryStatus, SubscriptionChange, WebhookDelivery, WebhookSubscription};
use uuid::Uuid;

use crate::codec::corrupt;

/// A `webhook_subscriptions` row.
#[derive(Debug, Clone)]
pub struct SubscriptionColumns {
    pub tenant_id: String,
    pub id: Uuid,
    pub url: String,
    pub events: Vec<String>,
    pub secret_configuration_name: String,
    pub headers: serde_json::Value,
    pub description: Option<String>,
    pub enabled: bool,
    pub consecutive_failures: i32,
    pub disabled_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl SubscriptionColumns {
    pub fn of(tenant: &TenantId, s: &WebhookSubscription) -> Result<Self, StoreError> {
        Ok(Self {
            tenant_id: tenant.as_str().to_owned(),
            id: s.id,
            url: s.url.clone(),
            events: s.events.clone(),
            secret_configuration_name: s.secret_configuration_name.clone(),
            headers: headers_json(&s.headers),
            description: s.description.clone(),
            enabled: s.enabled,
            consecutive_failures: i32::try_from(s.consecutive_failures)
                .map_err(|_| corrupt("failure count", s.consecutive_failures))?,
            disabled_at: s.disabled_at,
            created_at: s.created_at,
            updated_at: s.updated_at,
        })
    }

    pub fn record(self) -> Result<WebhookSubscription, StoreError> {
        Ok(WebhookSubscription {
            id: self.id,
            tenant: TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?,
            url: self.url,
            events: self.events,
            secret_configuration_name: self.secret_configuration_name,
            headers: serde_json::from_value::<BTreeMap<String, String>>(self.headers)
                .map_err(|e| corrupt("webhook headers", e))?,
            description: self.description,
            enabled: self.enabled,
            consecutive_failures: self.consecutive_failures.max(0) as u32,
            disabled_at: self.disabled_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// Custom headers as the `headers` jsonb object.
pub fn headers_json(headers: &BTreeMap<String, String>) -> serde_json::Value {
    serde_json::Value::Object(headers.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect())
}

/// The `headers` parameter of [`crate::sql::WEBHOOK_UPDATE`].
pub fn change_headers(change: &SubscriptionChange) -> serde_json::Value {
    headers_json(&change.headers)
}

/// `$4` of [`crate::sql::WEBHOOK_SETTLE`].
pub fn disable_after(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A `webhook_deliveries` row.
#[derive(Debug, Clone)]
pub struct DeliveryColumns {
    pub tenant_id: String,
    pub id: Uuid,
    pub subscription_id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub status: String,
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error_code: Option<String>,
    pub last_error_message: Option<String>,
    pub job_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
}

impl DeliveryColumns {
    pub fn of(tenant: &TenantId, d: &WebhookDelivery) -> Self {
        let (last_error_code, last_error_message) = error_columns(d.last_error.as_ref());
        Self {
            tenant_id: tenant.as_str().to_owned(),
            id: d.id,
            subscription_id: d.subscription_id,
            event_id: d.event_id,
            event_type: d.event_type.clone(),
            status: d.status.as_str().to_owned(),
            attempts: count(d.attempts),
            last_status_code: d.last_status_code.map(i32::from),
            last_error_code,
            last_error_message,
            job_id: d.job_id,
            created_at: d.created_at,
            updated_at: d.updated_at,
            last_attempt_at: d.last_attempt_at,
            completed_at: d.completed_at,
        }
    }

    pub fn record(self) -> Result<WebhookDelivery, StoreError> {
        let last_error = match (self.last_error_code, self.last_error_message) {
            (Some(code), Some(message)) => Some(DeliveryError { code, message }),
            _ => None,
        };
        Ok(WebhookDelivery {
            id: self.id,
            tenant: TenantId::parse(&self.tenant_id).map_err(|e| corrupt("tenant id", e))?,
            subscription_id: self.subscription_id,
            event_id: self.event_id,
            event_type: self.event_type,
            status: DeliveryStatus::parse(&self.status).ok_or_else(|| corrupt("delivery status", &self.status))?,
            attempts: self.attempts.max(0) as u32,
            last_status_code: self.last_status_code.and_then(|c| u16::try_from(c).ok()),
            last_error,
            job_id: self.job_id,
            created_at: self.created_at,
            updated_at: self.updated_at,
            last_attempt_at: self.last_attempt_at,
            completed_at: self.completed_at,
        })
    }
}

/// `(last_error_code, last_error_message)`.
pub fn error_columns(error: Option<&DeliveryError>) -> (Option<String>, Option<String>) {
    match error {
        Some(e) => (Some(e.code.clone()), Some(e.message.clone())),
        None => (None, None),
    }
}

/// An attempt or failure count as an `integer` column.
pub fn count(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use crate::sql::*;

    #[test]
    fn every_webhook_statement_is_confined_to_one_tenant() {
        for s in [
            WEBHOOK_GET,
            WEBHOOK_LIST,
            WEBHOOK_UPDATE,
            WEBHOOK_DELETE,
            WEBHOOK_SUBSCRIBED,
            WEBHOOK_SETTLE,
            WEBHOOK_DELIVERY_GET,
            WEBHOOK_DELIVERY_ATTEMPT,
            WEBHOOK_DELIVERIES,
        ] {
            assert!(s.contains("WHERE tenant_id = $1"), "{s}");
        }
        assert!(WEBHOOK_SUBSCRIBED.contains("AND enabled AND $2 = ANY (events)"), "{WEBHOOK_SUBSCRIBED}");
    }
}
