//! Session ownership: a second line under the tenant (`Tracon:SessionOwnership`).
//!
//! Off by default, and while off nothing changes. On, a session records the user who opened
//! it — read from the run attribution port (the host's identity layer), never from a request
//! body — and:
//!
//! - `GET /api/sessions` lists only the caller's sessions, narrowed before paging;
//! - reading, deleting or branching another user's session answers `404`, byte for byte as a
//!   missing one (and, with `RefuseUnownedSessions`, an unowned one too);
//! - starting a run in another user's session is `403 session_forbidden`; in an unowned one
//!   with `RefuseUnownedSessions`, `403 session_owner_required`;
//! - with no resolvable user and `RequireAuthenticatedOwner` (the default), a session is not
//!   opened: `403 session_owner_required`. Sessionless runs are unaffected.
//!
//! Management — the unfiltered listing, and reading any session of the tenant — belongs to
//! the static-token holder (the administrator; with role policies, the Operator role). It
//! never covers appending to someone else's conversation.

use crate::config::{Config, ConfigError};
use crate::identity::{AuthMethod, Caller, Role};
use crate::sessions::SessionRecord;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionOwnership {
    pub enabled: bool,
    pub refuse_unowned: bool,
    pub require_authenticated_owner: bool,
}

impl Default for SessionOwnership {
    fn default() -> Self {
        Self { enabled: false, refuse_unowned: false, require_authenticated_owner: true }
    }
}

/// What a caller does with an existing session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    Read,
    Delete,
    Branch,
}

impl SessionOwnership {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            enabled: config.bool("Tracon:SessionOwnership:Enabled")?.unwrap_or(d.enabled),
            refuse_unowned: config.bool("Tracon:SessionOwnership:RefuseUnownedSessions")?.unwrap_or(d.refuse_unowned),
            require_authenticated_owner: config
                .bool("Tracon:SessionOwnership:RequireAuthenticatedOwner")?
                .unwrap_or(d.require_authenticated_owner),
        })
    }

    fn manages(caller: &Caller) -> bool {
        matches!(caller.method, AuthMethod::StaticToken | AuthMethod::Internal)
            || (caller.method == AuthMethod::Jwt && caller.role >= Some(Role::Operator))
    }

    /// The owner the session list is narrowed to: `None` lists everything (ownership off,
    /// or a manager). A caller without a user id sees no session at all.
    pub fn list_owner(&self, caller: &Caller, user: Option<&str>) -> Option<String> {
        if !self.enabled || Self::manages(caller) {
            return None;
        }
        // An empty owner matches no row: no identity, nothing of theirs.
        Some(user.unwrap_or_default().to_owned())
    }

    /// Whether `caller` (as `user`) may `what` this session; `false` answers as missing.
    pub fn may(&self, caller: &Caller, user: Option<&str>, session: &SessionRecord, what: Use) -> bool {
        if !self.enabled {
            return true;
        }
        match session.owner_user_id.as_deref() {
            Some(owner) => user == Some(owner) || (what == Use::Read && Self::manages(caller)),
            None => !self.refuse_unowned || (what == Use::Read && Self::manages(caller)),
        }
    }

    /// Whether a run may continue `existing` (or open the session when it is `None`).
    pub fn may_run(&self, user: Option<&str>, existing: Option<&SessionRecord>) -> Result<(), SessionRefusal> {
        if !self.enabled {
            return Ok(());
        }
        match existing.map(|s| s.owner_user_id.as_deref()) {
            // A new session: opened by, and owned by, the caller.
            None if user.is_none() && self.require_authenticated_owner => Err(SessionRefusal::OwnerRequired),
            None => Ok(()),
            Some(Some(owner)) if user == Some(owner) => Ok(()),
            Some(Some(_)) => Err(SessionRefusal::Forbidden),
            Some(None) if self.refuse_unowned => Err(SessionRefusal::OwnerRequired),
            Some(None) => Ok(()),
        }
    }
}

/// Why a run may not use a session (`403`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRefusal {
    /// `session_forbidden`: the session belongs to another user.
    Forbidden,
    /// `session_owner_required`: no owner the caller can be matched with (no resolvable
    /// user for a new session, or an unowned one with `RefuseUnownedSessions`).
    OwnerRequired,
}
