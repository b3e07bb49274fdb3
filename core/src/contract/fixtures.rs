//! What every contract suite builds its cases from: two tenants and a fixed instant.

// A test suite's fixtures: failing loudly is the point.
#![allow(clippy::unwrap_used)]

use chrono::{DateTime, Duration, Utc};

use crate::names::TenantId;
use crate::secret_names::SecretReference;

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

/// Checks what a store's `secret_references` listed: `(tenant, record, key name)`, in order.
pub(crate) fn assert_secret_references(got: Vec<SecretReference>, want: &[(&str, &str, &str)]) {
    let got: Vec<(String, String, String)> =
        got.into_iter().map(|r| (r.tenant.as_str().to_owned(), r.record, r.key_name)).collect();
    let want: Vec<(String, String, String)> =
        want.iter().map(|(t, r, k)| ((*t).to_owned(), (*r).to_owned(), (*k).to_owned())).collect();
    assert_eq!(got, want);
}
