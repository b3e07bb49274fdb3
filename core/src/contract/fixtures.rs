//! What every contract suite builds its cases from: two tenants and a fixed instant.

// A test suite's fixtures: failing loudly is the point.
#![allow(clippy::unwrap_used)]

use chrono::{DateTime, Duration, Utc};

use crate::names::TenantId;

/// The tenant a case writes to.
pub(crate) fn a() -> TenantId {
    TenantId::parse("tenant-a").unwrap()
}

/// Another tenant, which must see none of `a`'s records.
pub(crate) fn b() -> TenantId {
    TenantId::parse("tenant-b").unwrap()
}

/// The instant every case starts from.
pub(crate) fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

/// `n` seconds after [`t0`].
pub(crate) fn secs(n: i64) -> DateTime<Utc> {
    t0() + Duration::seconds(n)
}
