//! Who a run belongs to, and for what: the user id and labels on the run row.
//!
//! Neither is ever read from the run request body — a `userId` field there would let any
//! client write spend against another user's name. They come from a [`RunAttribution`]
//! port bound to the host's identity layer. The default attributes nothing (both stay
//! `null`). [`HeaderLabels`] is a built-in binding: the caller's user id, plus labels from
//! request headers with a configured prefix (`X-Tracon-Label-team: payments`).
//!
//! Labels are bounded: at most 8 per run, keys up to 64 characters, values up to 256.
//! Breaking a limit rejects the request (`400`); nothing is trimmed to fit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::identity::Caller;
use crate::names::TenantId;

pub const MAX_LABELS: usize = 8;
pub const MAX_LABEL_KEY: usize = 64;
pub const MAX_LABEL_VALUE: usize = 256;
/// A user id longer than this is dropped whole (attribution degrades, it never fails a run).
pub const MAX_USER_ID: usize = 256;

/// A run's attribution.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    pub user_id: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// What the attribution port may look at.
#[derive(Debug)]
pub struct AttributionRequest<'a> {
    pub tenant: &'a TenantId,
    pub caller: &'a Caller,
    /// Request headers as `(lowercase name, value)`.
    pub headers: &'a [(String, String)],
}

/// Attributes a run. An `Err` is logged and the run continues unattributed.
pub trait RunAttribution: Send + Sync {
    fn attribute(&self, request: &AttributionRequest<'_>) -> Result<Attribution, String>;
}

/// The default: nothing is attributed.
pub struct NoAttribution;

impl RunAttribution for NoAttribution {
    fn attribute(&self, _: &AttributionRequest<'_>) -> Result<Attribution, String> {
        Ok(Attribution::default())
    }
}

/// The caller's user id, and labels from headers starting with `prefix`
/// (`Tracon:Attribution:LabelHeaderPrefix`, e.g. `X-Tracon-Label-`).
pub struct HeaderLabels {
    prefix: String,
}

impl HeaderLabels {
    pub fn new(prefix: &str) -> Self {
        Self { prefix: prefix.to_ascii_lowercase() }
    }
}

impl RunAttribution for HeaderLabels {
    fn attribute(&self, request: &AttributionRequest<'_>) -> Result<Attribution, String> {
        let labels = request
            .headers
            .iter()
            .filter_map(|(name, value)| name.strip_prefix(&self.prefix).map(|k| (k.to_owned(), value.clone())))
            .collect();
        Ok(Attribution { user_id: request.caller.user_id.clone(), labels })
    }
}

/// Why a label set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidLabels(pub String);

/// Enforces the label limits and drops an over-long user id.
pub fn check(mut attribution: Attribution) -> Result<Attribution, InvalidLabels> {
    if attribution.labels.len() > MAX_LABELS {
        return Err(InvalidLabels(format!(
            "A run carries at most {MAX_LABELS} labels; this one has {}.",
            attribution.labels.len()
        )));
    }
    for (k, v) in &attribution.labels {
        if k.is_empty() || k.chars().count() > MAX_LABEL_KEY {
            return Err(InvalidLabels(format!("A label key is 1 to {MAX_LABEL_KEY} characters.")));
        }
        if v.chars().count() > MAX_LABEL_VALUE {
            return Err(InvalidLabels(format!(
                "The value of label '{k}' is longer than {MAX_LABEL_VALUE} characters."
            )));
        }
    }
    if attribution.user_id.as_ref().is_some_and(|u| u.is_empty() || u.chars().count() > MAX_USER_ID) {
        tracing::warn!("the attributed user id is empty or too long; the run is recorded without one");
        attribution.user_id = None;
    }
    Ok(attribution)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(n: usize, key_len: usize, value_len: usize) -> Attribution {
        Attribution {
            user_id: None,
            labels: (0..n)
                .map(|i| (format!("{i}{}", "k".repeat(key_len.saturating_sub(1))), "v".repeat(value_len)))
                .collect(),
        }
    }

    #[test]
    fn label_limits_are_enforced_not_trimmed() {
        assert!(check(labels(8, 64, 256)).is_ok());
        assert!(check(labels(9, 4, 4)).is_err());
        assert!(check(labels(1, 65, 4)).is_err());
        assert!(check(labels(1, 4, 257)).is_err());
    }

    #[test]
    fn an_over_long_user_id_is_dropped_whole() {
        let a = check(Attribution { user_id: Some("u".repeat(300)), labels: BTreeMap::new() }).unwrap();
        assert_eq!(a.user_id, None);
    }

    #[test]
    fn header_labels_come_from_prefixed_headers() {
        let caller = Caller { user_id: Some("u1".into()), ..Caller::anonymous() };
        let headers =
            vec![("x-tracon-label-team".to_owned(), "payments".to_owned()), ("x-other".to_owned(), "x".to_owned())];
        let a = HeaderLabels::new("X-Tracon-Label-")
            .attribute(&AttributionRequest { tenant: &TenantId::default_tenant(), caller: &caller, headers: &headers })
            .unwrap();
        assert_eq!(a.user_id.as_deref(), Some("u1"));
        assert_eq!(a.labels, BTreeMap::from([("team".to_owned(), "payments".to_owned())]));
    }
}
