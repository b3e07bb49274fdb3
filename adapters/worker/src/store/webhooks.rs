//! Webhook subscriptions and deliveries on the Worker: the same statements
//! ([`tracon_postgres::sql`]) and row codec ([`tracon_postgres::webhooks`]) as the sqlx
//! store.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use tracon_core::names::TenantId;
use tracon_core::store::StoreError;
use tracon_core::webhooks::{DeliveryAttempt, SubscriptionChange, WebhookDelivery, WebhookStore, WebhookSubscription};
use tracon_postgres::codec::job_limit;
use tracon_postgres::sql;
use tracon_postgres::webhooks::{
    DeliveryColumns, SubscriptionColumns, change_headers, count, disable_after, error_columns,
};
use uuid::Uuid;

use super::{WorkerStores, get, map_err, send};

fn subscription(row: &Row) -> Result<WebhookSubscription, StoreError> {
    SubscriptionColumns {
        tenant_id: get(row, "tenant_id")?,
        id: get(row, "id")?,
        url: get(row, "url")?,
        events: get(row, "events")?,
        secret_configuration_name: get(row, "secret_configuration_name")?,
        headers: get(row, "headers")?,
        description: get(row, "description")?,
        enabled: get(row, "enabled")?,
        consecutive_failures: get(row, "consecutive_failures")?,
        disabled_at: get(row, "disabled_at")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    }
    .record()
}

fn delivery(row: &Row) -> Result<WebhookDelivery, StoreError> {
    DeliveryColumns {
        tenant_id: get(row, "tenant_id")?,
        id: get(row, "id")?,
        subscription_id: get(row, "subscription_id")?,
        event_id: get(row, "event_id")?,
        event_type: get(row, "event_type")?,
        status: get(row, "status")?,
        attempts: get(row, "attempts")?,
        last_status_code: get(row, "last_status_code")?,
        last_error_code: get(row, "last_error_code")?,
        last_error_message: get(row, "last_error_message")?,
        job_id: get(row, "job_id")?,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
        last_attempt_at: get(row, "last_attempt_at")?,
        completed_at: get(row, "completed_at")?,
    }
    .record()
}

#[async_trait::async_trait]
impl WebhookStore for WorkerStores {
    async fn create(&self, tenant: &TenantId, s: &WebhookSubscription) -> Result<(), StoreError> {
        let c = SubscriptionColumns::of(tenant, s)?;
        send(self.target.with(async |client| {
            let params: [&(dyn ToSql + Sync); 12] = [
                &c.tenant_id,
                &c.id,
                &c.url,
                &c.events,
                &c.secret_configuration_name,
                &c.headers,
                &c.description,
                &c.enabled,
                &c.consecutive_failures,
                &c.disabled_at,
                &c.created_at,
                &c.updated_at,
            ];
            client.execute(sql::WEBHOOK_INSERT, &params).await.map_err(map_err).map(|_| ())
        }))
        .await
    }

    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookSubscription>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::WEBHOOK_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(subscription).transpose()
        }))
        .await
    }

    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<WebhookSubscription>, StoreError> {
        let (skip, take) = (job_limit(skip), job_limit(take));
        send(self.target.with(async |c| {
            let rows = c.query(sql::WEBHOOK_LIST, &[&tenant.as_str(), &skip, &take]).await.map_err(map_err)?;
            rows.iter().map(subscription).collect()
        }))
        .await
    }

    async fn update(
        &self,
        tenant: &TenantId,
        id: Uuid,
        change: &SubscriptionChange,
        now: DateTime<Utc>,
    ) -> Result<WebhookSubscription, StoreError> {
        let headers = change_headers(change);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 9] = [
                &tenant.as_str(),
                &id,
                &change.url,
                &change.events,
                &change.secret_configuration_name,
                &headers,
                &change.description,
                &change.enabled,
                &now,
            ];
            let row = c.query_opt(sql::WEBHOOK_UPDATE, &params).await.map_err(map_err)?;
            row.as_ref().map(subscription).transpose()?.ok_or(StoreError::NotFound)
        }))
        .await
    }

    async fn delete(&self, tenant: &TenantId, id: Uuid) -> Result<bool, StoreError> {
        send(self.target.with(async |c| {
            let n = c.execute(sql::WEBHOOK_DELETE, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            Ok(n > 0)
        }))
        .await
    }

    async fn subscribed(&self, tenant: &TenantId, event: &str) -> Result<Vec<WebhookSubscription>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::WEBHOOK_SUBSCRIBED, &[&tenant.as_str(), &event]).await.map_err(map_err)?;
            rows.iter().map(subscription).collect()
        }))
        .await
    }

    async fn settle(
        &self,
        tenant: &TenantId,
        id: Uuid,
        succeeded: bool,
        limit: u32,
        now: DateTime<Utc>,
    ) -> Result<Option<WebhookSubscription>, StoreError> {
        let limit = disable_after(limit);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 5] = [&tenant.as_str(), &id, &succeeded, &limit, &now];
            let row = c.query_opt(sql::WEBHOOK_SETTLE, &params).await.map_err(map_err)?;
            row.as_ref().map(subscription).transpose()
        }))
        .await
    }

    async fn add_delivery(&self, tenant: &TenantId, d: &WebhookDelivery) -> Result<(), StoreError> {
        let v = DeliveryColumns::of(tenant, d);
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 15] = [
                &v.tenant_id,
                &v.id,
                &v.subscription_id,
                &v.event_id,
                &v.event_type,
                &v.status,
                &v.attempts,
                &v.last_status_code,
                &v.last_error_code,
                &v.last_error_message,
                &v.job_id,
                &v.created_at,
                &v.updated_at,
                &v.last_attempt_at,
                &v.completed_at,
            ];
            c.execute(sql::WEBHOOK_DELIVERY_INSERT, &params).await.map_err(map_err).map(|_| ())
        }))
        .await
    }

    async fn get_delivery(&self, tenant: &TenantId, id: Uuid) -> Result<Option<WebhookDelivery>, StoreError> {
        send(self.target.with(async |c| {
            let row = c.query_opt(sql::WEBHOOK_DELIVERY_GET, &[&tenant.as_str(), &id]).await.map_err(map_err)?;
            row.as_ref().map(delivery).transpose()
        }))
        .await
    }

    async fn record_attempt(&self, tenant: &TenantId, id: Uuid, a: &DeliveryAttempt) -> Result<(), StoreError> {
        let (code, message) = error_columns(a.error.as_ref());
        let (status, attempts, status_code) = (a.status.as_str(), count(a.attempts), a.status_code.map(i32::from));
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 8] =
                [&tenant.as_str(), &id, &status, &attempts, &status_code, &code, &message, &a.at];
            let n = c.execute(sql::WEBHOOK_DELIVERY_ATTEMPT, &params).await.map_err(map_err)?;
            if n == 0 { Err(StoreError::NotFound) } else { Ok(()) }
        }))
        .await
    }

    async fn deliveries(
        &self,
        tenant: &TenantId,
        subscription: Uuid,
        skip: usize,
        take: usize,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let (skip, take) = (job_limit(skip), job_limit(take));
        send(self.target.with(async |c| {
            let params: [&(dyn ToSql + Sync); 4] = [&tenant.as_str(), &subscription, &skip, &take];
            let rows = c.query(sql::WEBHOOK_DELIVERIES, &params).await.map_err(map_err)?;
            rows.iter().map(delivery).collect()
        }))
        .await
    }

    async fn secret_references(&self) -> Result<Vec<tracon_core::secret_names::SecretReference>, StoreError> {
        send(self.target.with(async |c| {
            let rows = c.query(sql::WEBHOOK_SECRET_NAMES, &[]).await.map_err(map_err)?;
            rows.iter().map(super::triggers::secret_reference).collect()
        }))
        .await
    }
}
