//! Tenants' own provider credentials and egress policies on Postgres: a binding row per tenant
//! and provider (a configuration key *name*, never a key), an egress row per tenant. Each read
//! and write is one statement.

use tracon_core::error::{StoreError, check_text};
use tracon_core::model::byok::{ProviderBinding, ProviderEgress, TenantProviderStore, check_binding_text};
use tracon_core::names::TenantId;

use super::Db;
use crate::params;
use crate::sql;

pub struct PgTenantProviderStore {
    db: Db,
}

impl PgTenantProviderStore {
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

#[async_trait::async_trait]
impl TenantProviderStore for PgTenantProviderStore {
    async fn bindings(&self, tenant: &TenantId) -> Result<Vec<ProviderBinding>, StoreError> {
        let rows = self.db.query(sql::BINDING_LIST, &params![tenant.as_str()]).await?;
        rows.iter()
            .map(|r| {
                Ok(ProviderBinding {
                    provider: r.get("provider")?,
                    api_key_configuration_name: r.get("api_key_configuration_name")?,
                    endpoint: r.get("endpoint")?,
                    updated_at: r.get("updated_at")?,
                })
            })
            .collect()
    }

    async fn put_binding(&self, tenant: &TenantId, b: &ProviderBinding) -> Result<(), StoreError> {
        check_binding_text(b)?;
        self.db
            .execute(
                sql::BINDING_PUT,
                &params![
                    tenant.as_str(),
                    &b.provider,
                    &b.api_key_configuration_name,
                    b.endpoint.as_deref(),
                    b.updated_at
                ],
            )
            .await?;
        Ok(())
    }

    async fn delete_binding(&self, tenant: &TenantId, provider: &str) -> Result<bool, StoreError> {
        Ok(self.db.execute(sql::BINDING_DELETE, &params![tenant.as_str(), provider]).await? > 0)
    }

    async fn egress(&self, tenant: &TenantId) -> Result<Option<ProviderEgress>, StoreError> {
        let row = self.db.query_opt(sql::EGRESS_GET, &params![tenant.as_str()]).await?;
        row.map(|r| {
            Ok(ProviderEgress { allowed_providers: r.get("allowed_providers")?, updated_at: r.get("updated_at")? })
        })
        .transpose()
    }

    async fn put_egress(&self, tenant: &TenantId, policy: &ProviderEgress) -> Result<(), StoreError> {
        for p in &policy.allowed_providers {
            check_text("allowedProviders", p)?;
        }
        self.db
            .execute(sql::EGRESS_PUT, &params![tenant.as_str(), &policy.allowed_providers, policy.updated_at])
            .await?;
        Ok(())
    }

    async fn delete_egress(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        Ok(self.db.execute(sql::EGRESS_DELETE, &params![tenant.as_str()]).await? > 0)
    }
}
