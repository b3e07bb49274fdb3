//! Inbound triggers: another system starts a run by sending a signed HTTP request.
//!
//! - [`TriggerName`] — the name a trigger is addressed by (in its tenant);
//! - [`TriggerRecord`] — a stored definition: the target, the *name* of the configuration
//!   key holding the signing secret (never the secret), and how the body becomes the
//!   run's message ([`PayloadMode`]);
//! - [`TriggerStore`] — the port, tenant-first like every store; [`MemoryTriggerStore`] is
//!   the in-memory implementation and the contract's reference;
//! - [`verify_signature`] — `X-Tracon-Signature: sha256=<hex>`, an HMAC-SHA256 over
//!   `"{timestamp}.{rawBody}"`, compared in constant time after a length check;
//! - [`extract_message`] — the run's message from the raw body.
//!
//! Nothing here reads configuration or talks HTTP: the handlers resolve the secret's key
//! name at request time and decide the status codes.

use std::collections::BTreeMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::error::StoreError;
use crate::names::{InvalidName, TenantId, truncate_for_message};
use crate::secret_names::SecretReference;

/// Longest trigger name.
pub const MAX_TRIGGER_NAME_LEN: usize = 64;
/// Longest `payloadPath`.
pub const MAX_PAYLOAD_PATH_LEN: usize = 256;
/// The signature scheme prefix of `X-Tracon-Signature`.
pub const SIGNATURE_PREFIX: &str = "sha256=";

/// A trigger name: 1–64 lowercase ASCII letters, digits, `.`, `_` or `-`, starting with a
/// letter or digit — the agent-name rule, so it is safe in a URL path as is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TriggerName(String);

impl TriggerName {
    /// What [`Self::parse`] accepts, as an ECMA regular expression (the OpenAPI document's).
    pub const PATTERN: &'static str = crate::names::AgentName::PATTERN;

    pub fn parse(value: &str) -> Result<Self, InvalidName> {
        let mut chars = value.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
        if value.len() > MAX_TRIGGER_NAME_LEN || !first_ok || !rest_ok {
            return Err(InvalidName(format!(
                "'{}' is not a valid trigger name: 1 to {MAX_TRIGGER_NAME_LEN} lowercase letters, digits, '.', '_' or '-', starting with a letter or digit.",
                truncate_for_message(value)
            )));
        }
        Ok(Self(value.to_owned()))
    }
}

crate::names::text_newtype!(TriggerName);

/// What a trigger starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum TargetKind {
    /// A queued agent run.
    Agent,
    /// A queued workflow run.
    Workflow,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Workflow => "workflow",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "agent" => Some(Self::Agent),
            "workflow" => Some(Self::Workflow),
            _ => None,
        }
    }
}

/// How the request body becomes the run's message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum PayloadMode {
    /// The whole body, as sent.
    #[default]
    WholeBody,
    /// One field of a JSON body, named by a dotted `payloadPath`.
    Path,
}

impl PayloadMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WholeBody => "wholeBody",
            Self::Path => "path",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "wholeBody" => Some(Self::WholeBody),
            "path" => Some(Self::Path),
            _ => None,
        }
    }
}

/// A stored trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerRecord {
    #[schema(value_type = String)]
    pub name: TriggerName,
    pub target_kind: TargetKind,
    /// The agent (or workflow) started.
    pub target_name: String,
    /// The configuration key whose value is the signing secret (its name only).
    pub signing_secret_configuration_name: String,
    pub payload_mode: PayloadMode,
    /// Dotted path of the field that becomes the message (`payloadMode: path`).
    pub payload_path: Option<String>,
    pub enabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Trigger definitions, tenant-first.
#[async_trait::async_trait]
pub trait TriggerStore: Send + Sync {
    /// The tenant's triggers, ordered by name.
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<TriggerRecord>, StoreError>;
    async fn get(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError>;
    /// Creates or replaces the trigger named `record.name`. A replacement keeps the stored
    /// `created_at`; every other field is `record`'s. Returns the record as stored.
    async fn put(&self, tenant: &TenantId, record: &TriggerRecord) -> Result<TriggerRecord, StoreError>;
    /// Removes the trigger; `false` when there was nothing to remove.
    async fn delete(&self, tenant: &TenantId, name: &TriggerName) -> Result<bool, StoreError>;
    /// The accept endpoint's lookup: the trigger, only when it exists **and** is enabled.
    async fn find_enabled(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError>;
    /// Every tenant's triggers with the key name each stores, by tenant and name: the
    /// start-up check of names outside their tenant's partition. Never on a request path.
    async fn secret_references(&self) -> Result<Vec<SecretReference>, StoreError>;
}

// ---- memory ---------------------------------------------------------------------------------

/// Triggers in process memory, per tenant and name.
#[derive(Default)]
pub struct MemoryTriggerStore {
    rows: Mutex<BTreeMap<(TenantId, String), TriggerRecord>>,
}

impl MemoryTriggerStore {
    fn rows(&self) -> std::sync::MutexGuard<'_, BTreeMap<(TenantId, String), TriggerRecord>> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait::async_trait]
impl TriggerStore for MemoryTriggerStore {
    async fn list(&self, tenant: &TenantId, skip: usize, take: usize) -> Result<Vec<TriggerRecord>, StoreError> {
        Ok(self.rows().iter().filter(|((t, _), _)| t == tenant).map(|(_, r)| r.clone()).skip(skip).take(take).collect())
    }

    async fn get(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        Ok(self.rows().get(&(tenant.clone(), name.as_str().to_owned())).cloned())
    }

    async fn put(&self, tenant: &TenantId, record: &TriggerRecord) -> Result<TriggerRecord, StoreError> {
        let mut rows = self.rows();
        let key = (tenant.clone(), record.name.as_str().to_owned());
        let mut stored = record.clone();
        if let Some(existing) = rows.get(&key) {
            stored.created_at = existing.created_at;
        }
        rows.insert(key, stored.clone());
        Ok(stored)
    }

    async fn delete(&self, tenant: &TenantId, name: &TriggerName) -> Result<bool, StoreError> {
        Ok(self.rows().remove(&(tenant.clone(), name.as_str().to_owned())).is_some())
    }

    async fn find_enabled(&self, tenant: &TenantId, name: &TriggerName) -> Result<Option<TriggerRecord>, StoreError> {
        Ok(self.get(tenant, name).await?.filter(|r| r.enabled))
    }

    async fn secret_references(&self) -> Result<Vec<SecretReference>, StoreError> {
        Ok(self
            .rows()
            .iter()
            .map(|((tenant, name), r)| SecretReference {
                tenant: tenant.clone(),
                record: name.clone(),
                key_name: r.signing_secret_configuration_name.clone(),
            })
            .collect())
    }
}

// ---- secrets' key names -----------------------------------------------------------------------

/// The default of `Tracon:InboundTriggers:AllowedConfigurationPrefix`; which names under it
/// a tenant may use is [`crate::secret_names::SecretNamespace`]'s rule.
pub const DEFAULT_SECRET_PREFIX: &str = "Tracon:TriggerSecrets:";

// ---- signatures -------------------------------------------------------------------------------

/// The 32 bytes a `sha256=<64 hex digits>` header names; `None` for anything else (empty,
/// truncated, too long, another scheme, not hex).
pub fn parse_signature(header: &str) -> Option<[u8; 32]> {
    let hex = header.trim().strip_prefix(SIGNATURE_PREFIX)?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

/// `sha256=<hex>` of `"{timestamp}.{body}"` under `secret` (what a sender computes).
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return String::new() };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{SIGNATURE_PREFIX}{hex}")
}

/// Whether `signature` is the HMAC-SHA256 of `"{timestamp}.{body}"` under `secret`, in
/// constant time (`Mac::verify_slice`). An empty secret never verifies.
pub fn verify_signature(secret: &[u8], timestamp: &str, body: &[u8], signature: &[u8; 32]) -> bool {
    if secret.is_empty() {
        return false;
    }
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else { return false };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(signature).is_ok()
}

/// The `X-Tracon-Timestamp` value as unix seconds: 1–12 ASCII digits, nothing else.
pub fn parse_timestamp(header: &str) -> Option<i64> {
    if header.is_empty() || header.len() > 12 || !header.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    header.parse().ok()
}

/// Whether `timestamp` is within `tolerance_seconds` of `now`, before or after.
pub fn within_tolerance(timestamp: i64, now: DateTime<Utc>, tolerance_seconds: u64) -> bool {
    let tolerance = i64::try_from(tolerance_seconds).unwrap_or(i64::MAX);
    now.timestamp().checked_sub(timestamp).is_some_and(|d| d.checked_abs().is_some_and(|d| d <= tolerance))
}

// ---- payloads ---------------------------------------------------------------------------------

/// Whether a `payloadPath` is usable: dotted, non-empty segments of printable characters
/// without spaces, at most [`MAX_PAYLOAD_PATH_LEN`] bytes.
pub fn is_valid_payload_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PAYLOAD_PATH_LEN
        && path.split('.').all(|s| !s.is_empty() && s.chars().all(|c| !c.is_control() && !c.is_whitespace()))
}

/// Why a body yields no message. The texts are ours and name nothing of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadError {
    /// The body is empty (or only whitespace).
    Empty,
    /// The body is not UTF-8 text.
    NotText,
    /// `path` mode: the body is not JSON.
    NotJson,
    /// `path` mode: the field is absent, `null`, or an empty string.
    FieldMissing,
}

/// The run's message: the whole body as sent, or the field a dotted path names (a string
/// as is; a number, boolean, object or array as its JSON text). A numeric segment indexes
/// an array.
pub fn extract_message(mode: PayloadMode, path: Option<&str>, body: &[u8]) -> Result<String, PayloadError> {
    let text = std::str::from_utf8(body).map_err(|_| PayloadError::NotText)?;
    if text.trim().is_empty() {
        return Err(PayloadError::Empty);
    }
    match mode {
        PayloadMode::WholeBody => Ok(text.to_owned()),
        PayloadMode::Path => {
            let value: serde_json::Value = serde_json::from_str(text).map_err(|_| PayloadError::NotJson)?;
            let mut at = &value;
            for segment in path.unwrap_or_default().split('.') {
                at = match at {
                    serde_json::Value::Object(map) => map.get(segment),
                    serde_json::Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
                    _ => None,
                }
                .ok_or(PayloadError::FieldMissing)?;
            }
            match at {
                serde_json::Value::Null => Err(PayloadError::FieldMissing),
                serde_json::Value::String(s) if s.trim().is_empty() => Err(PayloadError::FieldMissing),
                serde_json::Value::String(s) => Ok(s.clone()),
                other => Ok(other.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_names_follow_the_agent_name_rule() {
        for ok in ["slack", "a", "ticket.created", "a_b-9"] {
            assert!(TriggerName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Slack", "-x", "a b", "a/b", "ä", &"a".repeat(65)] {
            assert!(TriggerName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn signatures_verify_only_whole_and_under_the_right_secret() {
        let sig = sign(b"whsec_test", "1800000000", b"{\"a\":1}");
        let bytes = parse_signature(&sig).unwrap();
        assert!(verify_signature(b"whsec_test", "1800000000", b"{\"a\":1}", &bytes));
        assert!(!verify_signature(b"whsec_other", "1800000000", b"{\"a\":1}", &bytes));
        assert!(!verify_signature(b"whsec_test", "1800000001", b"{\"a\":1}", &bytes));
        assert!(!verify_signature(b"whsec_test", "1800000000", b"{\"a\":2}", &bytes));
        assert!(!verify_signature(b"", "1800000000", b"{\"a\":1}", &bytes));
        for bad in
            ["", "sha256=", &sig[..sig.len() - 2], &format!("{sig}00"), &sig.replace("sha256=", "sha1="), "sha256=zz"]
        {
            assert!(parse_signature(bad).is_none(), "{bad}");
        }
        assert_eq!(parse_signature(&sig.to_uppercase().replace("SHA256=", "sha256=")), Some(bytes));
    }

    #[test]
    fn timestamps_are_digits_within_the_window_both_ways() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(parse_timestamp("1800000000"), Some(1_800_000_000));
        for bad in ["", "-5", "1.5", " 1", "1e9", "9999999999999"] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
        assert!(within_tolerance(1_800_000_000 - 300, now, 300));
        assert!(within_tolerance(1_800_000_000 + 300, now, 300));
        assert!(!within_tolerance(1_800_000_000 - 301, now, 300));
        assert!(!within_tolerance(1_800_000_000 + 301, now, 300));
    }

    #[test]
    fn messages_come_from_the_whole_body_or_one_field() {
        let body = br#"{"event":{"text":"Reset my password","n":3,"items":["x","y"],"nil":null}}"#;
        assert_eq!(extract_message(PayloadMode::WholeBody, None, body).unwrap(), std::str::from_utf8(body).unwrap());
        let at = |p: &str| extract_message(PayloadMode::Path, Some(p), body);
        assert_eq!(at("event.text").unwrap(), "Reset my password");
        assert_eq!(at("event.n").unwrap(), "3");
        assert_eq!(at("event.items.1").unwrap(), "y");
        assert_eq!(at("event.missing"), Err(PayloadError::FieldMissing));
        assert_eq!(at("event.nil"), Err(PayloadError::FieldMissing));
        assert_eq!(at("event.text.deeper"), Err(PayloadError::FieldMissing));
        assert_eq!(extract_message(PayloadMode::Path, Some("a"), b"not json"), Err(PayloadError::NotJson));
        assert_eq!(extract_message(PayloadMode::WholeBody, None, b"  "), Err(PayloadError::Empty));
        assert_eq!(extract_message(PayloadMode::WholeBody, None, &[0xff, 0xfe]), Err(PayloadError::NotText));
        assert!(is_valid_payload_path("event.text") && !is_valid_payload_path("event..text"));
        assert!(!is_valid_payload_path("") && !is_valid_payload_path("a b"));
    }
}
