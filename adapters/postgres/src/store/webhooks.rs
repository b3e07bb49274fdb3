//! Webhook subscriptions and their delivery history on Postgres (`webhook_subscriptions`,
//! `webhook_deliveries`; migration 0009). Every statement is one round trip named in
//! [`sql`]: counting a finished delivery (and disabling at the limit) is one UPDATE, so two
//! consumers settling at once never lose a count.

use crate::driver::Row;
use chrono::{DateTime, Utc};
use tracon_core::error::StoreError;
use tracon_core::names::TenantId;
use tracon_core::webhooks::{DeliveryAttempt, SubscriptionChange, WebhookDelivery, WebhookStore, WebhookSubscription};
use uuid::Uuid;

use super::Db;
use crate::codec::bigint;
use crate::params;
use crate::sql;
use crate::webhooks::{DeliveryColumns, SubscriptionColumns, change_headers, count, disable_after, error_columns};

pub struct PgWebhookStore {
    db: Db,
}

impl PgWebhookStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

fn subscription(row: &Row) -> Result<WebhookSubscription, StoreError> {
    crate::columns!(row, SubscriptionColumns [tenant_id id url events secret_configuration_name headers
        description enabled consecutive_failures disabled_at created_at updated_at])
    .record()
}

fn delivery(row: &Row) -> Result<WebhookDelivery, StoreError> {
    crate::columns!(row, DeliveryColumns [tenant_id id subscription_id event_id event_type status attempts
        last_status_code last_error_code last_error_message job_id created_at updated_at last_attempt_at
        completed_at])
    .record()
}

#[async_trait::async_trait]
impl WebhookStore for PgWebhookStore {
    async fn create(&self, tenant: &TenantId, s: &WebhookSubscription) -> Result<(), StoreError> {
        let c = SubscriptionColumns::of(tenant, s)?;
        self.db
            .execute(
                sql::WEBHOOK_INSERT,
                &params![
                    &c.tenant_id,
                    c.id,
                    &c.url,
                    &c.events,
                    &c.secret_configuration_name,
                    &c.headers,
                    &c.description,
                    c.enabled,
                    c.consecutive_failures,
                    c.disabled_at,
                    c.created_at,
                    c.updated_at
                ],
            )
            .await?;
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookSubscription>, StoreError> {
        let row = self.db.query_opt(sql::WEBHOOK_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(subscription).transpose()
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<WebhookSubscription>, StoreError> {
        let rows = self.db.query(sql::WEBHOOK_LIST, &params![tenant.as_str(), bigint(skip), bigint(take)]).await?;
        rows.iter().map(subscription).collect()
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: Uuid,
        change: &SubscriptionChange,
        now: DateTime<Utc>,
    ) -> Result<WebhookSubscription, StoreError> {
        let row = self
            .db
            .query_opt(
                sql::WEBHOOK_UPDATE,
                &params![
                    tenant.as_str(),
                    id,
                    &change.url,
                    &change.events,
                    &change.secret_configuration_name,
                    change_headers(change),
                    &change.description,
                    change.enabled,
                    now
                ],
            )
            .await?;
        row.as_ref().map(subscription).transpose()?.ok_or(StoreError::NotFound)
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        let done = self.db.execute(sql::WEBHOOK_DELETE, &params![tenant.as_str(), id]).await?;
        Ok(done > 0)
    }

    async fn subscribed(&self, tenant: &TenantId, event: &str) -> Result<Vec<WebhookSubscription>, StoreError> {
        let rows = self.db.query(sql::WEBHOOK_SUBSCRIBED, &params![tenant.as_str(), event]).await?;
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
        let row = self
            .db
            .query_opt(sql::WEBHOOK_SETTLE, &params![tenant.as_str(), id, succeeded, disable_after(limit), now])
            .await?;
        row.as_ref().map(subscription).transpose()
    }

    async fn add_delivery(&self, tenant: &TenantId, d: &WebhookDelivery) -> Result<(), StoreError> {
        let c = DeliveryColumns::of(tenant, d);
        self.db
            .execute(
                sql::WEBHOOK_DELIVERY_INSERT,
                &params![
                    &c.tenant_id,
                    c.id,
                    c.subscription_id,
                    c.event_id,
                    &c.event_type,
                    &c.status,
                    c.attempts,
                    c.last_status_code,
                    &c.last_error_code,
                    &c.last_error_message,
                    c.job_id,
                    c.created_at,
                    c.updated_at,
                    c.last_attempt_at,
                    c.completed_at
                ],
            )
            .await?;
        Ok(())
    }

    async fn get_delivery(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookDelivery>, StoreError> {
        let row = self.db.query_opt(sql::WEBHOOK_DELIVERY_GET, &params![tenant.as_str(), id]).await?;
        row.as_ref().map(delivery).transpose()
    }

    async fn record_attempt(&self, tenant: &TenantId, id: Uuid, a: &DeliveryAttempt) -> Result<(), StoreError> {
        let (code, message) = error_columns(a.error.as_ref());
        let done = self
            .db
            .execute(
                sql::WEBHOOK_DELIVERY_ATTEMPT,
                &params![
                    tenant.as_str(),
                    id,
                    a.status.as_str(),
                    count(a.attempts),
                    a.status_code.map(i32::from),
                    code,
                    message,
                    a.at
                ],
            )
            .await?;
        if done == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }

    async fn deliveries(
        &self,
        tenant: &TenantId,
        subscription: Uuid,
        skip: usize,
        take: usize,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let rows = self
            .db
            .query(sql::WEBHOOK_DELIVERIES, &params![tenant.as_str(), subscription, bigint(skip), bigint(take)])
            .await?;
        rows.iter().map(delivery).collect()
    }

    async fn secret_references(&self) -> Result<Vec<tracon_core::secret_names::SecretReference>, StoreError> {
        let rows = self.db.query(sql::WEBHOOK_SECRET_NAMES, &params![]).await?;
        rows.iter().map(super::triggers::secret_reference).collect()
    }
}
