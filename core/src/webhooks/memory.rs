//! Subscriptions and deliveries in memory: the zero-setup default and the reference the
//! contract suite (`store::webhook_contract`) holds every implementation to.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{DeliveryAttempt, SubscriptionChange, WebhookDelivery, WebhookStore, WebhookSubscription};
use crate::error::StoreError;
use crate::names::TenantId;
use crate::secret_names::SecretReference;

#[derive(Default)]
struct Rows {
    subscriptions: HashMap<(TenantId, Uuid), WebhookSubscription>,
    deliveries: HashMap<(TenantId, Uuid), WebhookDelivery>,
}

#[derive(Default)]
pub struct MemoryWebhookStore {
    rows: Mutex<Rows>,
}

impl MemoryWebhookStore {
    fn lock(&self) -> MutexGuard<'_, Rows> {
        // A panic while holding the lock left plain data behind; keep serving it.
        self.rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn page<T>(items: Vec<T>, skip: usize, take: usize) -> Vec<T> {
    items.into_iter().skip(skip).take(take).collect()
}

#[async_trait::async_trait]
impl WebhookStore for MemoryWebhookStore {
    async fn create(&self, tenant: &TenantId, subscription: &WebhookSubscription) -> Result<(), StoreError> {
        let mut rows = self.lock();
        if rows.subscriptions.keys().any(|(_, id)| *id == subscription.id) {
            return Err(StoreError::Conflict("The record already exists or was changed concurrently.".into()));
        }
        let mut s = subscription.clone();
        s.tenant = tenant.clone();
        rows.subscriptions.insert((tenant.clone(), s.id), s);
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookSubscription>, StoreError> {
        Ok(self.lock().subscriptions.get(&(tenant.clone(), id)).cloned())
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<WebhookSubscription>, StoreError> {
        let rows = self.lock();
        let mut all: Vec<WebhookSubscription> =
            rows.subscriptions.values().filter(|s| s.tenant == *tenant).cloned().collect();
        all.sort_by_key(|s| (s.created_at, s.id));
        Ok(page(all, skip, take))
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: Uuid,
        change: &SubscriptionChange,
        now: DateTime<Utc>,
    ) -> Result<WebhookSubscription, StoreError> {
        let mut rows = self.lock();
        let s = rows.subscriptions.get_mut(&(tenant.clone(), id)).ok_or(StoreError::NotFound)?;
        if change.enabled && !s.enabled {
            s.consecutive_failures = 0;
            s.disabled_at = None;
        }
        s.url = change.url.clone();
        s.events = change.events.clone();
        s.secret_configuration_name = change.secret_configuration_name.clone();
        s.headers = change.headers.clone();
        s.description = change.description.clone();
        s.enabled = change.enabled;
        s.updated_at = now;
        Ok(s.clone())
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        let mut rows = self.lock();
        let removed = rows.subscriptions.remove(&(tenant.clone(), id)).is_some();
        if removed {
            rows.deliveries.retain(|(t, _), d| !(t == tenant && d.subscription_id == id));
        }
        Ok(removed)
    }

    async fn subscribed(&self, tenant: &TenantId, event: &str) -> Result<Vec<WebhookSubscription>, StoreError> {
        let rows = self.lock();
        let mut out: Vec<WebhookSubscription> = rows
            .subscriptions
            .values()
            .filter(|s| s.tenant == *tenant && s.enabled && s.events.iter().any(|e| e == event))
            .cloned()
            .collect();
        out.sort_by_key(|s| (s.created_at, s.id));
        Ok(out)
    }

    async fn settle(
        &self,
        tenant: &TenantId,
        id: Uuid,
        succeeded: bool,
        disable_after: u32,
        now: DateTime<Utc>,
    ) -> Result<Option<WebhookSubscription>, StoreError> {
        let mut rows = self.lock();
        let Some(s) = rows.subscriptions.get_mut(&(tenant.clone(), id)) else { return Ok(None) };
        if succeeded {
            s.consecutive_failures = 0;
        } else {
            s.consecutive_failures = s.consecutive_failures.saturating_add(1);
            if s.enabled && disable_after > 0 && s.consecutive_failures >= disable_after {
                s.enabled = false;
                s.disabled_at = Some(now);
            }
        }
        s.updated_at = now;
        Ok(Some(s.clone()))
    }

    async fn add_delivery(&self, tenant: &TenantId, delivery: &WebhookDelivery) -> Result<(), StoreError> {
        let mut rows = self.lock();
        if !rows.subscriptions.contains_key(&(tenant.clone(), delivery.subscription_id)) {
            return Err(StoreError::NotFound);
        }
        if rows.deliveries.keys().any(|(_, id)| *id == delivery.id) {
            return Err(StoreError::Conflict("The record already exists or was changed concurrently.".into()));
        }
        let mut d = delivery.clone();
        d.tenant = tenant.clone();
        rows.deliveries.insert((tenant.clone(), d.id), d);
        Ok(())
    }

    async fn get_delivery(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookDelivery>, StoreError> {
        Ok(self.lock().deliveries.get(&(tenant.clone(), id)).cloned())
    }

    async fn record_attempt(&self, tenant: &TenantId, id: Uuid, attempt: &DeliveryAttempt) -> Result<(), StoreError> {
        let mut rows = self.lock();
        let d = rows.deliveries.get_mut(&(tenant.clone(), id)).ok_or(StoreError::NotFound)?;
        d.status = attempt.status;
        d.attempts = attempt.attempts;
        d.last_status_code = attempt.status_code;
        d.last_error = attempt.error.clone();
        d.updated_at = attempt.at;
        if attempt.attempts > 0 {
            d.last_attempt_at = Some(attempt.at);
        }
        d.completed_at = attempt.status.is_terminal().then_some(attempt.at);
        Ok(())
    }

    async fn deliveries(
        &self,
        tenant: &TenantId,
        subscription: Uuid,
        skip: usize,
        take: usize,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let rows = self.lock();
        let mut all: Vec<WebhookDelivery> = rows
            .deliveries
            .values()
            .filter(|d| d.tenant == *tenant && d.subscription_id == subscription)
            .cloned()
            .collect();
        all.sort_by_key(|d| std::cmp::Reverse((d.created_at, d.id)));
        Ok(page(all, skip, take))
    }

    async fn secret_references(&self) -> Result<Vec<SecretReference>, StoreError> {
        let rows = self.lock();
        let mut all: Vec<&WebhookSubscription> = rows.subscriptions.values().collect();
        all.sort_by(|a, b| (&a.tenant, a.created_at, a.id).cmp(&(&b.tenant, b.created_at, b.id)));
        Ok(all
            .into_iter()
            .map(|s| SecretReference {
                tenant: s.tenant.clone(),
                record: s.id.to_string(),
                key_name: s.secret_configuration_name.clone(),
            })
            .collect())
    }
}
