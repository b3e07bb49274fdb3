//! `Idempotency-Key`: the same tenant, operation and key return the stored response instead
//! of doing the work twice.
//!
//! The first request **claims** the key with a hash of what it asked; while it runs, a
//! duplicate with the same hash is told to retry (`409`), one with a different hash is
//! refused (`422`: a key names one request). When the work is done its JSON response is
//! stored and every later duplicate gets it back, until the record expires. Work that fails
//! before anything happened releases the claim so the client can try again.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::error::StoreError;
use crate::names::TenantId;
use crate::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;

/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// Whether `key` is usable: 1–255 visible ASCII characters.
pub fn is_valid_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The key was free (or its record had expired): this request does the work.
    Claimed,
    /// Another request holds the key and has not finished.
    InProgress { request_hash: String },
    /// The work was done: its response.
    Completed { request_hash: String, status: u16, body: Value },
}

/// What a claim means for the request that made it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reservation {
    /// This request does the work.
    Fresh,
    /// The same request is still running elsewhere (`409`, retry).
    Running,
    /// The same request was answered: its stored response.
    Replay { status: u16, body: Value },
    /// The key was used for a different request (`422`).
    Reused,
}

impl Claim {
    /// What this claim means for a request whose content hashes to `request_hash`.
    pub fn for_request(self, request_hash: &str) -> Reservation {
        match self {
            Claim::Claimed => Reservation::Fresh,
            Claim::InProgress { request_hash: held } if held == request_hash => Reservation::Running,
            Claim::Completed { request_hash: held, status, body } if held == request_hash => {
                Reservation::Replay { status, body }
            }
            Claim::InProgress { .. } | Claim::Completed { .. } => Reservation::Reused,
        }
    }
}

/// Settles a claimed key: the response is stored for every later duplicate, or — `None`,
/// nothing happened — the claim is released so a retry can do the work. A failure to store
/// is logged and the claim released (a retry then runs again rather than waits forever).
pub async fn settle(
    store: &dyn IdempotencyStore,
    key: KeyRef<'_>,
    response: Option<(u16, &Value)>,
    now: DateTime<Utc>,
) {
    if let Some((status, body)) = response {
        match store.complete(key, status, body, now).await {
            Ok(()) => return,
            Err(e) => tracing::warn!(error = ?e, "could not store the idempotent response; a retry will run again"),
        }
    }
    if let Err(e) = store.release(key).await {
        tracing::warn!(error = ?e, "could not release an idempotency claim");
    }
}

/// One key's record, as a claim identifies it.
#[derive(Debug, Clone, Copy)]
pub struct KeyRef<'a> {
    pub tenant: &'a TenantId,
    /// What was asked: `run:<agent>`, …
    pub operation: &'a str,
    pub key: &'a str,
}

#[async_trait::async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims the key for a request whose canonical content hashes to `request_hash`
    /// (hex SHA-256), in one atomic step: of concurrent claimers exactly one gets
    /// `Claimed`. A record whose `expires_at` has passed is replaced.
    async fn claim(
        &self,
        key: KeyRef<'_>,
        request_hash: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<Claim, StoreError>;
    /// Stores the response of a claimed key.
    async fn complete(&self, key: KeyRef<'_>, status: u16, body: &Value, now: DateTime<Utc>) -> Result<(), StoreError>;
    /// Gives up a claim whose work did not happen (a duplicate may then claim it).
    async fn release(&self, key: KeyRef<'_>) -> Result<(), StoreError>;
}

// ---- memory --------------------------------------------------------------------------------

/// One key's state: the request hash, the response once done, the expiry.
#[derive(Debug, Clone)]
struct IdempotencyRow {
    request_hash: String,
    response: Option<(u16, serde_json::Value)>,
    expires_at: DateTime<Utc>,
}

/// Idempotency records per tenant, operation and key.
#[derive(Default)]
pub struct MemoryIdempotencyStore {
    rows: Mutex<HashMap<(TenantId, String, String), IdempotencyRow>>,
}

fn idempotency_key(k: KeyRef<'_>) -> (TenantId, String, String) {
    (k.tenant.clone(), k.operation.to_owned(), k.key.to_owned())
}

#[async_trait::async_trait]
impl IdempotencyStore for MemoryIdempotencyStore {
    async fn claim(
        &self,
        key: KeyRef<'_>,
        request_hash: &str,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<Claim, StoreError> {
        let mut rows = lock(&self.rows);
        let id = idempotency_key(key);
        if let Some(row) = rows.get(&id).filter(|r| r.expires_at > now) {
            return Ok(match &row.response {
                None => Claim::InProgress { request_hash: row.request_hash.clone() },
                Some((status, body)) => {
                    Claim::Completed { request_hash: row.request_hash.clone(), status: *status, body: body.clone() }
                }
            });
        }
        rows.insert(id, IdempotencyRow { request_hash: request_hash.to_owned(), response: None, expires_at });
        Ok(Claim::Claimed)
    }

    async fn complete(
        &self,
        key: KeyRef<'_>,
        status: u16,
        body: &serde_json::Value,
        _now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        let row = rows.get_mut(&idempotency_key(key)).ok_or(StoreError::NotFound)?;
        row.response = Some((status, body.clone()));
        Ok(())
    }

    async fn release(&self, key: KeyRef<'_>) -> Result<(), StoreError> {
        let mut rows = lock(&self.rows);
        let id = idempotency_key(key);
        if rows.get(&id).is_some_and(|r| r.response.is_none()) {
            rows.remove(&id);
        }
        Ok(())
    }
}
