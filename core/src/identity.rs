//! Who is calling: the identity the handlers resolve and every core decision receives.

use std::collections::BTreeSet;

use serde::Serialize;

/// How the caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AuthMethod {
    /// No authentication configured; a loopback caller.
    Anonymous,
    /// The static bearer token.
    StaticToken,
    /// Inside the process (a queued job, a test).
    Internal,
}

/// The resolved caller of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Caller {
    pub method: AuthMethod,
    /// An opaque user id, when the identity layer knows one.
    pub user_id: Option<String>,
    /// Permission names a tool's `requiredPermission` is checked against.
    pub permissions: BTreeSet<String>,
}

impl Caller {
    pub fn anonymous() -> Self {
        Self { method: AuthMethod::Anonymous, user_id: None, permissions: BTreeSet::new() }
    }

    pub fn internal() -> Self {
        Self { method: AuthMethod::Internal, user_id: None, permissions: BTreeSet::new() }
    }

    pub fn has_permission(&self, name: &str) -> bool {
        self.permissions.contains(name)
    }
}
