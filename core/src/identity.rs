//! Who is calling: the identity the handlers resolve and every core decision receives.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::keys::Scope;
use crate::names::TenantId;

/// How the caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AuthMethod {
    /// No authentication configured; a loopback caller.
    Anonymous,
    /// The static bearer token.
    StaticToken,
    /// An API key.
    ApiKey,
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
    /// The tenant whose data the request reaches.
    pub tenant: TenantId,
    /// What an API key allows; `None` when the method carries no scopes (nothing narrows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<BTreeSet<Scope>>,
    /// The API key's id, when one authenticated the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

impl Caller {
    fn with_method(method: AuthMethod) -> Self {
        Self {
            method,
            user_id: None,
            permissions: BTreeSet::new(),
            tenant: TenantId::default_tenant(),
            scopes: None,
            key_id: None,
        }
    }

    pub fn anonymous() -> Self {
        Self::with_method(AuthMethod::Anonymous)
    }

    pub fn internal() -> Self {
        Self::with_method(AuthMethod::Internal)
    }

    /// The holder of the static bearer token: the default tenant, nothing narrowed.
    pub fn static_token() -> Self {
        Self::with_method(AuthMethod::StaticToken)
    }

    /// Whether the caller's scopes (if any) include `scope`.
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.as_ref().is_none_or(|s| s.contains(&scope))
    }

    pub fn has_permission(&self, name: &str) -> bool {
        self.permissions.contains(name)
    }
}
