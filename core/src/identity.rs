//! Who is calling: the identity the handlers resolve and every core decision receives.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::keys::Scope;
use crate::names::TenantId;

/// How the caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AuthMethod {
    /// No authentication configured; a loopback caller.
    Anonymous,
    /// The static bearer token.
    StaticToken,
    /// An API key.
    ApiKey,
    /// A verified JWT bearer token (`Tracon:Jwt`); its role decides the scopes.
    Jwt,
    /// Inside the process (a queued job, a test).
    Internal,
}

/// The role a JWT's role claim grants, lowest first: a caller holding several gets the
/// highest. The spec's three policy names; Tracon stores no users and no roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
pub enum Role {
    /// Reads agents, runs and sessions.
    Reader,
    /// Reader, plus starting and cancelling runs, changing sessions and deciding approvals.
    Operator,
    /// Everything.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Reader, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "Reader",
            Role::Operator => "Operator",
            Role::Admin => "Admin",
        }
    }

    /// What the role allows, as API key scopes: a JWT caller is authorized exactly like a key
    /// carrying these (the route table is `tracon_handlers::auth::requirement`).
    pub fn scopes(self) -> BTreeSet<Scope> {
        const READER: [Scope; 3] = [Scope::AgentsRead, Scope::RunsRead, Scope::SessionsRead];
        const OPERATOR: [Scope; 4] =
            [Scope::RunsWrite, Scope::RunsCancel, Scope::SessionsWrite, Scope::ApprovalsDecide];
        match self {
            Role::Reader => READER.into_iter().collect(),
            Role::Operator => READER.into_iter().chain(OPERATOR).collect(),
            Role::Admin => Scope::ALL.into_iter().collect(),
        }
    }
}

/// The resolved caller of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
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
    /// The role of a JWT caller (its `scopes` are the role's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
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
            role: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_holds_the_scopes_of_the_one_below() {
        let reader = Role::Reader.scopes();
        let operator = Role::Operator.scopes();
        let admin = Role::Admin.scopes();
        assert_eq!(reader.len(), 3);
        assert_eq!(operator.len(), 7);
        assert!(reader.is_subset(&operator) && operator.is_subset(&admin));
        assert_eq!(admin.len(), Scope::ALL.len());
        assert!(!operator.contains(&Scope::AgentsAdmin) && !operator.contains(&Scope::SecurityAdmin));
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Reader);
    }
}
