//! The audit trail: who changed what, when, from what to what — one hash chain per tenant.
//!
//! Every governance write (agent definitions, API keys, …) appends an entry: actor,
//! action, entity, the state before and after (secret fields masked). Entries are numbered
//! 1, 2, … per tenant, and each carries `hash = SHA-256(previous hash ‖ canonical entry)`,
//! so [`verify`] finds an edited entry (`Broken`) and a removed one (`Gap`). The canonical
//! form sorts object keys and keeps timestamps to the microsecond (what Postgres stores),
//! and `before`/`after` are stored as that exact text, so an entry read back hashes the same.

use chrono::{DateTime, SubsecRound, Utc};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::StoreError;
use crate::names::TenantId;
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;

/// A field whose name contains one of these (case-insensitive, `_` and `-` ignored:
/// `api_key`, `clientSecret`, `accessToken`) never enters the trail. A name containing
/// `tokens` (a usage count: `maxTokens`) is kept.
pub const MASKED_FIELDS: [&str; 5] = ["apikey", "authorization", "password", "secret", "token"];

fn is_secret_field(name: &str) -> bool {
    let n: String = name.chars().filter(|c| *c != '_' && *c != '-').flat_map(char::to_lowercase).collect();
    !n.contains("tokens") && MASKED_FIELDS.iter().any(|m| n.contains(m))
}

/// What replaces a masked value.
pub const MASK: &str = "***";

/// An entry to append: everything but its place in the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAuditEntry {
    pub at: DateTime<Utc>,
    /// `token`, `anonymous`, `key:<id>`, or a user id.
    pub actor: String,
    /// `agent.create`, `agent.update`, `agent.delete`, `agent.rollback`, `apiKey.create`,
    /// `apiKey.revoke`, `apiKey.rotate`.
    pub action: String,
    pub entity_type: String,
    pub entity_id: String,
    /// Canonical JSON text of the state before, masked.
    pub before: Option<String>,
    /// Canonical JSON text of the state after, masked.
    pub after: Option<String>,
}

impl NewAuditEntry {
    /// An entry whose `before`/`after` are masked and put in canonical form, and whose time
    /// is kept to the microsecond.
    pub fn new(
        at: DateTime<Utc>,
        actor: impl Into<String>,
        action: &str,
        entity: (&str, &str),
        before: Option<&Value>,
        after: Option<&Value>,
    ) -> Self {
        Self {
            at: at.trunc_subsecs(6),
            actor: actor.into(),
            action: action.to_owned(),
            entity_type: entity.0.to_owned(),
            entity_id: entity.1.to_owned(),
            before: before.map(|v| canonical(&masked(v))),
            after: after.map(|v| canonical(&masked(v))),
        }
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    #[serde(skip)]
    pub tenant: TenantId,
    pub sequence: u64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub entity_type: String,
    pub entity_id: String,
    /// The state before, as canonical JSON text (secret fields masked).
    pub before: Option<String>,
    pub after: Option<String>,
    /// Hex SHA-256 of the previous entry's hash and this entry.
    #[serde(serialize_with = "hex")]
    #[schema(value_type = String)]
    pub hash: [u8; 32],
}

fn hex<S: serde::Serializer>(h: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&h.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The hash of the entry numbered `sequence` that follows `previous` (zeros for the first).
pub fn chain_hash(previous: &[u8; 32], tenant: &TenantId, sequence: u64, e: &NewAuditEntry) -> [u8; 32] {
    let fields = serde_json::json!({
        "tenant": tenant.as_str(),
        "sequence": sequence,
        "at": e.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "actor": e.actor,
        "action": e.action,
        "entityType": e.entity_type,
        "entityId": e.entity_id,
        "before": e.before,
        "after": e.after,
    });
    let mut h = Sha256::new();
    h.update(previous);
    h.update(canonical(&fields).as_bytes());
    h.finalize().into()
}

impl AuditEntry {
    /// The entry `e` placed at `sequence` after `previous`.
    pub fn chained(tenant: &TenantId, sequence: u64, previous: &[u8; 32], e: NewAuditEntry) -> Self {
        let hash = chain_hash(previous, tenant, sequence, &e);
        Self {
            tenant: tenant.clone(),
            sequence,
            at: e.at,
            actor: e.actor,
            action: e.action,
            entity_type: e.entity_type,
            entity_id: e.entity_id,
            before: e.before,
            after: e.after,
            hash,
        }
    }

    fn content(&self) -> NewAuditEntry {
        NewAuditEntry {
            at: self.at,
            actor: self.actor.clone(),
            action: self.action.clone(),
            entity_type: self.entity_type.clone(),
            entity_id: self.entity_id.clone(),
            before: self.before.clone(),
            after: self.after.clone(),
        }
    }
}

/// JSON text with object keys sorted at every level (one text per value).
pub fn canonical(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&map[k], out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}

/// `v` with the value of every field named in [`MASKED_FIELDS`] replaced by [`MASK`].
pub fn masked(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let secret = is_secret_field(k);
                    (k.clone(), if secret { Value::String(MASK.into()) } else { masked(v) })
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(masked).collect()),
        other => other.clone(),
    }
}

/// What [`verify`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum ChainStatus {
    Valid,
    /// An entry does not hash to what it says: it was edited.
    Broken,
    /// A sequence number is missing: an entry was removed.
    Gap,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    pub status: ChainStatus,
    /// Entries checked.
    pub entries: u64,
    /// The first sequence number that fails (the missing one for a gap).
    pub first_failing_sequence: Option<u64>,
}

/// Walks a tenant's entries in sequence order and recomputes the chain.
pub fn verify(entries: &[AuditEntry]) -> ChainReport {
    let mut previous = [0u8; 32];
    for (i, e) in entries.iter().enumerate() {
        let expected = i as u64 + 1;
        let fail = |status| ChainReport { status, entries: i as u64, first_failing_sequence: Some(expected) };
        if e.sequence != expected {
            return fail(ChainStatus::Gap);
        }
        if chain_hash(&previous, &e.tenant, e.sequence, &e.content()) != e.hash {
            return fail(ChainStatus::Broken);
        }
        previous = e.hash;
    }
    ChainReport { status: ChainStatus::Valid, entries: entries.len() as u64, first_failing_sequence: None }
}

/// Filters of the audit list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    pub entity_type: Option<String>,
    pub entity_id: Option<String>,
    pub action: Option<String>,
    pub actor: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

impl AuditFilter {
    /// [`crate::error::check_text`] over the filter's text: what every store checks first.
    pub fn check_text(&self) -> Result<(), StoreError> {
        use crate::error::check_text_opt;
        check_text_opt("entityType", self.entity_type.as_deref())?;
        check_text_opt("entityId", self.entity_id.as_deref())?;
        check_text_opt("action", self.action.as_deref())?;
        check_text_opt("actor", self.actor.as_deref())
    }

    pub fn matches(&self, e: &AuditEntry) -> bool {
        self.entity_type.as_ref().is_none_or(|v| *v == e.entity_type)
            && self.entity_id.as_ref().is_none_or(|v| *v == e.entity_id)
            && self.action.as_ref().is_none_or(|v| *v == e.action)
            && self.actor.as_ref().is_none_or(|v| *v == e.actor)
            && self.from.is_none_or(|t| e.at >= t)
            && self.to.is_none_or(|t| e.at < t)
    }
}

/// The audit trail. `append` places the entry at the end of the tenant's chain atomically
/// (concurrent appends never share or skip a number).
#[async_trait::async_trait]
pub trait AuditStore: Send + Sync {
    async fn append(&self, tenant: &TenantId, entry: NewAuditEntry) -> Result<AuditEntry, StoreError>;
    /// Newest first.
    async fn list(
        &self,
        tenant: &TenantId,
        filter: &AuditFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<AuditEntry>, StoreError>;
    /// Every entry of the tenant in sequence order (for [`verify`]).
    async fn chain(&self, tenant: &TenantId) -> Result<Vec<AuditEntry>, StoreError>;
}

// ---- memory --------------------------------------------------------------------------------

/// Each tenant's chain, in sequence order.
#[derive(Default)]
pub struct MemoryAuditStore {
    chains: Mutex<HashMap<TenantId, Vec<AuditEntry>>>,
}

impl MemoryAuditStore {
    /// Test support: edits or removes entries behind the chain's back.
    pub fn tamper(&self, tenant: &TenantId, f: impl FnOnce(&mut Vec<AuditEntry>)) {
        f(lock(&self.chains).entry(tenant.clone()).or_default());
    }
}

#[async_trait::async_trait]
impl AuditStore for MemoryAuditStore {
    async fn append(&self, tenant: &TenantId, entry: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        let mut chains = lock(&self.chains);
        let chain = chains.entry(tenant.clone()).or_default();
        let (sequence, previous) = chain.last().map_or((1, [0; 32]), |e| (e.sequence + 1, e.hash));
        let stored = AuditEntry::chained(tenant, sequence, &previous, entry);
        chain.push(stored.clone());
        Ok(stored)
    }

    async fn list(
        &self,
        tenant: &TenantId,
        filter: &AuditFilter,
        skip: usize,
        take: usize,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        filter.check_text()?;
        let chains = lock(&self.chains);
        let chain = chains.get(tenant).map(Vec::as_slice).unwrap_or_default();
        Ok(chain.iter().rev().filter(|e| filter.matches(e)).skip(skip).take(take).cloned().collect())
    }

    async fn chain(&self, tenant: &TenantId) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(lock(&self.chains).get(tenant).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(i: u32) -> NewAuditEntry {
        NewAuditEntry::new(
            DateTime::from_timestamp(1_800_000_000 + i64::from(i), 123_456_789).unwrap(),
            "token",
            "agent.update",
            ("agent", "support"),
            Some(&json!({"version": i})),
            Some(&json!({"version": i + 1})),
        )
    }

    fn chain(n: u32) -> Vec<AuditEntry> {
        let t = TenantId::default_tenant();
        let mut out: Vec<AuditEntry> = Vec::new();
        for i in 1..=n {
            let prev = out.last().map_or([0; 32], |e| e.hash);
            out.push(AuditEntry::chained(&t, u64::from(i), &prev, entry(i)));
        }
        out
    }

    #[test]
    fn a_chain_is_valid_until_an_entry_is_edited_or_removed() {
        let mut c = chain(4);
        assert_eq!(verify(&c).status, ChainStatus::Valid);
        c[2].after = Some("{\"version\":99}".into());
        assert_eq!(
            verify(&c),
            ChainReport { status: ChainStatus::Broken, entries: 2, first_failing_sequence: Some(3) }
        );
        let mut c = chain(4);
        c.remove(1);
        assert_eq!(verify(&c).status, ChainStatus::Gap);
        assert_eq!(verify(&c).first_failing_sequence, Some(2));
    }

    #[test]
    fn secrets_are_masked_at_any_depth_and_tokens_counts_are_kept() {
        let v = json!({"name": "x", "apiKey": "k", "nested": [{"Authorization": "Bearer y", "password": "p"}],
            "headers": {"secret": "s", "token": "t", "tokens": 42},
            "providerSettings": {"api_key": "sk", "clientSecret": "c", "accessToken": "a", "maxTokens": 9}});
        let m = masked(&v);
        assert_eq!(
            m,
            json!({"name": "x", "apiKey": "***", "nested": [{"Authorization": "***", "password": "***"}],
                "headers": {"secret": "***", "token": "***", "tokens": 42},
                "providerSettings": {"api_key": "***", "clientSecret": "***", "accessToken": "***", "maxTokens": 9}})
        );
    }

    #[test]
    fn canonical_text_sorts_keys_and_times_keep_microseconds() {
        assert_eq!(
            canonical(&json!({"b": 1, "a": {"d": [1, {"z": 0, "y": "\"q\""}], "c": null}})),
            r#"{"a":{"c":null,"d":[1,{"y":"\"q\"","z":0}]},"b":1}"#
        );
        assert_eq!(entry(1).at.timestamp_subsec_nanos(), 123_456_000);
    }
}
