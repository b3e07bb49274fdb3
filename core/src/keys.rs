//! API keys: tenant-bound, scoped, revocable, optionally expiring credentials.
//!
//! A key is `trk_<id>_<secret>`: `id` (12 hex characters) is the lookup prefix stored in
//! the clear and indexed, `secret` 32 random bytes (base64url). Only the SHA-256 of the whole
//! key is stored — the key itself is shown once, when it is created or rotated. A key is
//! high-entropy, so a fast hash is the right one: nothing is gained by stretching it, and
//! the check stays in the microseconds. The digest is compared in constant time.
//!
//! Scopes narrow, they never widen: a key's caller may do only what its scopes name.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::StoreError;
use crate::names::TenantId;
use crate::sync::lock;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What a key may be used for: a closed set. Each endpoint needs exactly one of these
/// (the table is `tracon_handlers::auth::requirement`); administration scopes do not
/// imply the read scopes of other groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Scope {
    /// Read agent definitions, their versions and diffs; validate a definition.
    AgentsRead,
    /// Create, replace, delete and roll back agent definitions.
    AgentsAdmin,
    /// Start runs (the live run of an agent).
    RunsWrite,
    /// Read runs, their events, tool calls, input, comparisons and statistics.
    RunsRead,
    /// Cancel runs.
    RunsCancel,
    /// List and read sessions.
    SessionsRead,
    /// Delete and branch sessions.
    SessionsWrite,
    /// Manage API keys (create, list, rotate, revoke).
    SecurityAdmin,
    /// Manage tenants.
    PlatformAdmin,
    /// Read the audit trail and verify its chain.
    AuditRead,
    /// Reach the external surfaces (MCP server, A2A).
    ExternalInvoke,
    /// Read pending approval requests and decide them.
    ApprovalsDecide,
    /// Manage approval rules (standing pre-approvals).
    ApprovalsAdmin,
    /// Manage inbound triggers (the signed accept endpoint itself needs no credential).
    TriggersAdmin,
    /// Manage outbound webhook subscriptions, send test deliveries, read delivery history.
    WebhooksAdmin,
    /// Manage schedules (one-time and cron runs).
    SchedulesAdmin,
}

impl Scope {
    pub const ALL: [Scope; 16] = [
        Scope::AgentsRead,
        Scope::AgentsAdmin,
        Scope::RunsWrite,
        Scope::RunsRead,
        Scope::RunsCancel,
        Scope::SessionsRead,
        Scope::SessionsWrite,
        Scope::SecurityAdmin,
        Scope::PlatformAdmin,
        Scope::AuditRead,
        Scope::ExternalInvoke,
        Scope::ApprovalsDecide,
        Scope::ApprovalsAdmin,
        Scope::TriggersAdmin,
        Scope::WebhooksAdmin,
        Scope::SchedulesAdmin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::AgentsRead => "AgentsRead",
            Scope::AgentsAdmin => "AgentsAdmin",
            Scope::RunsWrite => "RunsWrite",
            Scope::RunsRead => "RunsRead",
            Scope::RunsCancel => "RunsCancel",
            Scope::SessionsRead => "SessionsRead",
            Scope::SessionsWrite => "SessionsWrite",
            Scope::SecurityAdmin => "SecurityAdmin",
            Scope::PlatformAdmin => "PlatformAdmin",
            Scope::AuditRead => "AuditRead",
            Scope::ExternalInvoke => "ExternalInvoke",
            Scope::ApprovalsDecide => "ApprovalsDecide",
            Scope::ApprovalsAdmin => "ApprovalsAdmin",
            Scope::TriggersAdmin => "TriggersAdmin",
            Scope::WebhooksAdmin => "WebhooksAdmin",
            Scope::SchedulesAdmin => "SchedulesAdmin",
        }
    }
}

/// A stored key. Never holds the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The lookup prefix (12 hex characters), also the key's id in the API.
    pub id: String,
    pub tenant: TenantId,
    pub name: String,
    /// SHA-256 of the whole key.
    pub hash: [u8; 32],
    pub scopes: BTreeSet<Scope>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub rotated_at: Option<DateTime<Utc>>,
}

impl ApiKeyRecord {
    /// The record of a key just generated: active, never used, no expiry.
    pub fn issued(
        secret: &NewSecret,
        tenant: TenantId,
        name: &str,
        scopes: BTreeSet<Scope>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            id: secret.id.clone(),
            tenant,
            name: name.to_owned(),
            hash: secret.hash,
            scopes,
            created_at: at,
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
            rotated_at: None,
        }
    }

    /// Whether the key may authenticate at `now`.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| now < at)
    }
}

const PREFIX: &str = "trk_";
const ID_LEN: usize = 12;

/// A freshly generated key: what the caller sees once, and what is stored.
pub struct NewSecret {
    pub id: String,
    pub key: String,
    pub hash: [u8; 32],
}

/// Generates a key (`trk_<12 hex>_<43 base64url>`) from the platform's CSPRNG.
pub fn generate() -> Result<NewSecret, String> {
    let mut id = [0u8; 6];
    getrandom::fill(&mut id).map_err(|e| format!("no randomness available: {e}"))?;
    secret_for(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// A new secret for an existing key id (rotation): the id stays, the rest changes.
pub fn secret_for(id: String) -> Result<NewSecret, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness available: {e}"))?;
    let key = format!("{PREFIX}{id}_{}", URL_SAFE_NO_PAD.encode(bytes));
    let hash = digest(&key);
    Ok(NewSecret { id, key, hash })
}

/// The lookup id of something shaped like a key; `None` when it cannot be one (then it is
/// not looked up at all).
pub fn parse_id(presented: &str) -> Option<&str> {
    let rest = presented.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let well_formed = id.len() == ID_LEN
        && id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        && secret.len() == 43
        && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    well_formed.then_some(id)
}

/// What [`is_key_id`] accepts, as an ECMA regular expression (the OpenAPI document's).
pub const ID_PATTERN: &str = "^[0-9a-f]{12}$";

/// Whether `id` is a well-formed key id (for paths).
pub fn is_key_id(id: &str) -> bool {
    id.len() == ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// API keys. `find` is the one call that is not tenant-scoped: the key is what proves the
/// tenant.
#[async_trait::async_trait]
pub trait ApiKeyStore: Send + Sync {
    /// Stores a new key; `Conflict` when its id is taken.
    async fn create(&self, key: &ApiKeyRecord) -> Result<(), StoreError>;
    /// The key with this id, in any tenant (authentication).
    async fn find(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError>;
    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// The tenant's keys, revoked ones included, newest first.
    async fn list(&self, tenant: &TenantId) -> Result<Vec<ApiKeyRecord>, StoreError>;
    /// Marks the key revoked (once: a second revoke keeps the first time). `NotFound` when
    /// the tenant has no such key.
    async fn revoke(&self, tenant: &TenantId, id: &str, at: DateTime<Utc>) -> Result<ApiKeyRecord, StoreError>;
    /// Replaces the secret of an active key (rotation). `NotFound` when the tenant has no
    /// such key; `Conflict` when it is revoked.
    async fn rotate(
        &self,
        tenant: &TenantId,
        id: &str,
        hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> Result<ApiKeyRecord, StoreError>;
    /// Records a use (best effort; callers throttle it).
    async fn touch(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError>;
}

// ---- memory --------------------------------------------------------------------------------

/// Keys by id; the id is globally unique, the tenant is a field checked on every scoped call.
#[derive(Default)]
pub struct MemoryApiKeyStore {
    rows: Mutex<BTreeMap<String, ApiKeyRecord>>,
}

impl MemoryApiKeyStore {
    fn scoped<'a>(
        rows: &'a mut BTreeMap<String, ApiKeyRecord>,
        tenant: &TenantId,
        id: &str,
    ) -> Result<&'a mut ApiKeyRecord, StoreError> {
        rows.get_mut(id).filter(|k| &k.tenant == tenant).ok_or(StoreError::NotFound)
    }
}

#[async_trait::async_trait]
impl ApiKeyStore for MemoryApiKeyStore {
    async fn create(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        if rows.contains_key(&key.id) {
            return Err(StoreError::Conflict(format!("an API key with id '{}' already exists", key.id)));
        }
        rows.insert(key.id.clone(), key.clone());
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(lock(&self.rows).get(id).cloned())
    }

    async fn get(&self, tenant: &TenantId, id: &str) -> Result<Option<ApiKeyRecord>, StoreError> {
        Ok(lock(&self.rows).get(id).filter(|k| &k.tenant == tenant).cloned())
    }

    async fn list(&self, tenant: &TenantId) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let mut keys: Vec<ApiKeyRecord> = lock(&self.rows).values().filter(|k| &k.tenant == tenant).cloned().collect();
        keys.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
        Ok(keys)
    }

    async fn revoke(&self, tenant: &TenantId, id: &str, at: DateTime<Utc>) -> Result<ApiKeyRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let key = Self::scoped(&mut rows, tenant, id)?;
        key.revoked_at.get_or_insert(at);
        Ok(key.clone())
    }

    async fn rotate(
        &self,
        tenant: &TenantId,
        id: &str,
        hash: [u8; 32],
        at: DateTime<Utc>,
    ) -> Result<ApiKeyRecord, StoreError> {
        let mut rows = lock(&self.rows);
        let key = Self::scoped(&mut rows, tenant, id)?;
        if key.revoked_at.is_some() {
            return Err(StoreError::Conflict("a revoked API key cannot be rotated".into()));
        }
        key.hash = hash;
        key.rotated_at = Some(at);
        Ok(key.clone())
    }

    async fn touch(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        if let Some(key) = lock(&self.rows).get_mut(id) {
            key.last_used_at = Some(at);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_back_to_their_id_and_hash_to_what_is_stored() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a.key, b.key);
        assert_eq!(parse_id(&a.key), Some(a.id.as_str()));
        assert_eq!(a.key.len(), 4 + 12 + 1 + 43);
        assert_eq!(digest(&a.key), a.hash);
        assert!(is_key_id(&a.id));
    }

    #[test]
    fn malformed_keys_are_not_looked_up() {
        let k = generate().unwrap().key;
        for bad in ["", "trk_", "Bearer x", &k[..k.len() - 1], &k.replace("trk_", "trx_"), &k.to_uppercase()] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn scopes_are_a_closed_json_enum() {
        for s in Scope::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert!(serde_json::from_value::<Scope>(serde_json::json!("Everything")).is_err());
    }
}
