//! Webhook subscriptions and their delivery history on Postgres (`webhook_subscriptions`,
//! `webhook_deliveries`; migration 0009). Every statement is one round trip named in
//! [`sql`]: counting a finished delivery (and disabling at the limit) is one UPDATE, so two
//! consumers settling at once never lose a count.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};
use tracon_core::names::TenantId;
use tracon_core::store::StoreError;
use tracon_core::webhooks::{DeliveryAttempt, SubscriptionChange, WebhookDelivery, WebhookStore, WebhookSubscription};
use uuid::Uuid;

use super::map_err;
use crate::codec::job_limit;
use crate::sql;
use crate::webhooks::{DeliveryColumns, SubscriptionColumns, change_headers, count, disable_after, error_columns};

pub struct PgWebhookStore {
    pool: PgPool,
}

impl PgWebhookStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

fn subscription(row: &PgRow) -> Result<WebhookSubscription, StoreError> {
    SubscriptionColumns {
        tenant_id: row.try_get("tenant_id").map_err(map_err)?,
        id: row.try_get("id").map_err(map_err)?,
        url: row.try_get("url").map_err(map_err)?,
        events: row.try_get("events").map_err(map_err)?,
        secret_configuration_name: row.try_get("secret_configuration_name").map_err(map_err)?,
        headers: row.try_get("headers").map_err(map_err)?,
        description: row.try_get("description").map_err(map_err)?,
        enabled: row.try_get("enabled").map_err(map_err)?,
        consecutive_failures: row.try_get("consecutive_failures").map_err(map_err)?,
        disabled_at: row.try_get("disabled_at").map_err(map_err)?,
        created_at: row.try_get("created_at").map_err(map_err)?,
        updated_at: row.try_get("updated_at").map_err(map_err)?,
    }
    .record()
}

fn delivery(row: &PgRow) -> Result<WebhookDelivery, StoreError> {
    DeliveryColumns {
        tenant_id: row.try_get("tenant_id").map_err(map_err)?,
        id: row.try_get("id").map_err(map_err)?,
        subscription_id: row.try_get("subscription_id").map_err(map_err)?,
        event_id: row.try_get("event_id").map_err(map_err)?,
        event_type: row.try_get("event_type").map_err(map_err)?,
        status: row.try_get("status").map_err(map_err)?,
        attempts: row.try_get("attempts").map_err(map_err)?,
        last_status_code: row.try_get("last_status_code").map_err(map_err)?,
        last_error_code: row.try_get("last_error_code").map_err(map_err)?,
        last_error_message: row.try_get("last_error_message").map_err(map_err)?,
        job_id: row.try_get("job_id").map_err(map_err)?,
        created_at: row.try_get("created_at").map_err(map_err)?,
        updated_at: row.try_get("updated_at").map_err(map_err)?,
        last_attempt_at: row.try_get("last_attempt_at").map_err(map_err)?,
        completed_at: row.try_get("completed_at").map_err(map_err)?,
    }
    .record()
}

#[async_trait::async_trait]
impl WebhookStore for PgWebhookStore {
    async fn create(&self, tenant: &TenantId, s: &WebhookSubscription) -> Result<(), StoreError> {
        let c = SubscriptionColumns::of(tenant, s)?;
        sqlx::query(sql::WEBHOOK_INSERT)
            .bind(&c.tenant_id)
            .bind(c.id)
            .bind(&c.url)
            .bind(&c.events)
            .bind(&c.secret_configuration_name)
            .bind(&c.headers)
            .bind(&c.description)
            .bind(c.enabled)
            .bind(c.consecutive_failures)
            .bind(c.disabled_at)
            .bind(c.created_at)
            .bind(c.updated_at)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookSubscription>, StoreError> {
        let row = sqlx::query(sql::WEBHOOK_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(subscription).transpose()
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<WebhookSubscription>, StoreError> {
        let rows = sqlx::query(sql::WEBHOOK_LIST)
            .bind(tenant.as_str())
            .bind(job_limit(skip))
            .bind(job_limit(take))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(subscription).collect()
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: Uuid,
        change: &SubscriptionChange,
        now: DateTime<Utc>,
    ) -> Result<WebhookSubscription, StoreError> {
        let row = sqlx::query(sql::WEBHOOK_UPDATE)
            .bind(tenant.as_str())
            .bind(id)
            .bind(&change.url)
            .bind(&change.events)
            .bind(&change.secret_configuration_name)
            .bind(change_headers(change))
            .bind(&change.description)
            .bind(change.enabled)
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(subscription).transpose()?.ok_or(StoreError::NotFound)
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query(sql::WEBHOOK_DELETE)
            .bind(tenant.as_str())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn subscribed(&self, tenant: &TenantId, event: &str) -> Result<Vec<WebhookSubscription>, StoreError> {
        let rows = sqlx::query(sql::WEBHOOK_SUBSCRIBED)
            .bind(tenant.as_str())
            .bind(event)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(subscription).collect()
    }

    async fn settle(
        &self,
        tenant: &TenantId,
        id: Uuid,
        succeeded: bool,
        limit: u32,
        now: DateTime<Utc>,
    ) -> Result<Option<WebhookSubscription>, StoreError> {
        let row = sqlx::query(sql::WEBHOOK_SETTLE)
            .bind(tenant.as_str())
            .bind(id)
            .bind(succeeded)
            .bind(disable_after(limit))
            .bind(now)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(subscription).transpose()
    }

    async fn add_delivery(&self, tenant: &TenantId, d: &WebhookDelivery) -> Result<(), StoreError> {
        let c = DeliveryColumns::of(tenant, d);
        sqlx::query(sql::WEBHOOK_DELIVERY_INSERT)
            .bind(&c.tenant_id)
            .bind(c.id)
            .bind(c.subscription_id)
            .bind(c.event_id)
            .bind(&c.event_type)
            .bind(&c.status)
            .bind(c.attempts)
            .bind(c.last_status_code)
            .bind(&c.last_error_code)
            .bind(&c.last_error_message)
            .bind(c.job_id)
            .bind(c.created_at)
            .bind(c.updated_at)
            .bind(c.last_attempt_at)
            .bind(c.completed_at)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    async fn get_delivery(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookDelivery>, StoreError> {
        let row = sqlx::query(sql::WEBHOOK_DELIVERY_GET)
            .bind(tenant.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(delivery).transpose()
    }

    async fn record_attempt(&self, tenant: &TenantId, id: Uuid, a: &DeliveryAttempt) -> Result<(), StoreError> {
        let (code, message) = error_columns(a.error.as_ref());
        let done = sqlx::query(sql::WEBHOOK_DELIVERY_ATTEMPT)
            .bind(tenant.as_str())
            .bind(id)
            .bind(a.status.as_str())
            .bind(count(a.attempts))
            .bind(a.status_code.map(i32::from))
            .bind(code)
            .bind(message)
            .bind(a.at)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        if done.rows_affected() == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn deliveries(
        &self,
        tenant: &TenantId,
        subscription: Uuid,
        skip: usize,
        take: usize,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let rows = sqlx::query(sql::WEBHOOK_DELIVERIES)
            .bind(tenant.as_str())
            .bind(subscription)
            .bind(job_limit(skip))
            .bind(job_limit(take))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(delivery).collect()
    }

    async fn secret_references(&self) -> Result<Vec<tracon_core::secret_names::SecretReference>, StoreError> {
        let rows = sqlx::query(sql::WEBHOOK_SECRET_NAMES).fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(super::triggers::secret_reference).collect()
    }
}
