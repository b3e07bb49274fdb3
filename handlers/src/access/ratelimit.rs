//! The request rate limiter: off by default; when on, a token bucket per partition — the
//! caller's tenant, its credential (API key id, or the static token), or its address.
//!
//! In memory, per instance: on Lambda and Workers each instance limits on its own, so the
//! effective limit across a fleet is the per-instance limit times the instances serving. A
//! request over the limit answers `429 rate_limited` with `Retry-After` (seconds).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use tracon_core::config::{Config, ConfigError};
use tracon_core::identity::{AuthMethod, Caller};

use crate::access::peer::PeerAddr;
use crate::error::ApiError;

/// What a bucket is kept per.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    Tenant,
    Key,
    Address,
}

/// `Tracon:RateLimit:PermitsPerMinute` (0 or unset: off) and `Tracon:RateLimit:PartitionBy`
/// (`Tenant`, `Key` — the default — or `Address`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitSettings {
    pub permits_per_minute: u32,
    pub partition: Partition,
}

impl RateLimitSettings {
    pub fn from_config(config: &Config) -> Result<Option<Self>, ConfigError> {
        let permits = config.parse::<u32>("Tracon:RateLimit:PermitsPerMinute")?.unwrap_or(0);
        let partition = match config.get("Tracon:RateLimit:PartitionBy") {
            None => Partition::Key,
            Some(v) if v.eq_ignore_ascii_case("tenant") => Partition::Tenant,
            Some(v) if v.eq_ignore_ascii_case("key") => Partition::Key,
            Some(v) if v.eq_ignore_ascii_case("address") => Partition::Address,
            Some(other) => {
                return Err(ConfigError::Message(format!(
                    "Tracon__RateLimit__PartitionBy is '{other}'; use Tenant, Key or Address."
                )));
            }
        };
        Ok((permits > 0).then_some(Self { permits_per_minute: permits, partition }))
    }
}

/// Buckets by partition key.
pub struct RateLimiter {
    settings: RateLimitSettings,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: DateTime<Utc>,
}

/// Buckets idle this long are full again and are dropped when the map is swept.
const SWEEP_AFTER_BUCKETS: usize = 10_000;

impl RateLimiter {
    pub fn new(settings: RateLimitSettings) -> Self {
        Self { settings, buckets: Mutex::default() }
    }

    fn key(&self, caller: &Caller, peer: Option<PeerAddr>) -> String {
        match self.settings.partition {
            Partition::Tenant => format!("t:{}", caller.tenant),
            Partition::Key => match (caller.method, &caller.key_id) {
                (AuthMethod::ApiKey, Some(id)) => format!("k:{id}"),
                (AuthMethod::StaticToken, _) => "k:token".into(),
                (AuthMethod::Jwt, _) if caller.user_id.is_some() => {
                    format!("u:{}", caller.user_id.as_deref().unwrap_or_default())
                }
                _ => peer.map_or_else(|| "a:unknown".into(), |p| format!("a:{}", p.0.ip())),
            },
            Partition::Address => peer.map_or_else(|| "a:unknown".into(), |p| format!("a:{}", p.0.ip())),
        }
    }

    /// Takes a permit, or refuses saying how many seconds until one is free.
    pub fn check(&self, caller: &Caller, peer: Option<PeerAddr>, now: DateTime<Utc>) -> Result<(), RateLimited> {
        let capacity = f64::from(self.settings.permits_per_minute);
        let per_second = capacity / 60.0;
        let key = self.key(caller, peer);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > SWEEP_AFTER_BUCKETS {
            // A bucket idle for a minute is full: forgetting it changes nothing.
            buckets.retain(|_, b| (now - b.at).num_seconds() < 60);
        }
        let bucket = buckets.entry(key).or_insert(Bucket { tokens: capacity, at: now });
        let elapsed = (now - bucket.at).num_microseconds().unwrap_or(i64::MAX).max(0) as f64 / 1e6;
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - bucket.tokens) / per_second).ceil().max(1.0) as u64;
        Err(RateLimited { retry_after: wait })
    }
}

/// A request over the limit, and how long until a permit is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited {
    pub retry_after: u64,
}

impl IntoResponse for RateLimited {
    fn into_response(self) -> Response {
        let wait = self.retry_after;
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", format!("Too many requests; retry in {wait} s."))
            .with_retry_after(wait)
            .into_response()
    }
}
