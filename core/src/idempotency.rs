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

use crate::names::TenantId;
use crate::store::StoreError;

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
