//! Which tenant a request reaches, in the spec's order:
//!
//! 1. authenticated with an API key → the key's tenant. A key *proves* its tenant; a tenant
//!    header that names another is refused (`403 tenant_mismatch`) before any endpoint runs;
//! 2. tenancy off (the default) → the default tenant;
//! 3. the header path, only when explicitly allowed (`Tracon:Tenancy:AllowHeader`): the
//!    header's value — a well-formed tenant id (`400 invalid_tenant`), and on the allowlist
//!    when one is configured (`403 tenant_not_allowed`); no header → the default tenant.
//!
//! A header is a claim, not a proof: that is why it must be switched on, and why a key
//! outranks it. (Claims of a verified JWT come before the header once JWT lands.)

use axum::http::{HeaderMap, HeaderName, StatusCode};
use tracon_core::config::{Config, ConfigError};
use tracon_core::identity::{AuthMethod, Caller};
use tracon_core::names::TenantId;

use crate::error::ApiError;

/// `Tracon:Tenancy:*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenancySettings {
    /// `Tracon:Tenancy:Enabled` (off).
    pub enabled: bool,
    /// `Tracon:Tenancy:AllowHeader` (off): read the tenant from [`Self::header`].
    pub allow_header: bool,
    /// `Tracon:Tenancy:HeaderName` (`X-Tenant-Id`).
    pub header: HeaderName,
    /// `Tracon:Tenancy:AllowedTenants:0`, `:1`, … — empty allows every well-formed id.
    pub allowed: Vec<TenantId>,
}

impl Default for TenancySettings {
    fn default() -> Self {
        Self {
            enabled: false,
            allow_header: false,
            header: HeaderName::from_static("x-tenant-id"),
            allowed: Vec::new(),
        }
    }
}

impl TenancySettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let header = match config.get("Tracon:Tenancy:HeaderName") {
            None => d.header,
            Some(name) => HeaderName::try_from(name).map_err(|_| {
                ConfigError::Message(format!("Tracon__Tenancy__HeaderName '{name}' is not a header name."))
            })?,
        };
        let mut allowed = Vec::new();
        for child in config.child_sections("Tracon:Tenancy:AllowedTenants") {
            if let Some(v) = config.get(&format!("Tracon:Tenancy:AllowedTenants:{child}")) {
                allowed.push(
                    TenantId::parse(v).map_err(|e| {
                        ConfigError::Message(format!("Tracon__Tenancy__AllowedTenants: '{v}': {}", e.0))
                    })?,
                );
            }
        }
        let enabled = config.bool("Tracon:Tenancy:Enabled")?.unwrap_or(false);
        let allow_header = config.bool("Tracon:Tenancy:AllowHeader")?.unwrap_or(false);
        if allow_header && !enabled {
            return Err(ConfigError::Message(
                "Tracon__Tenancy__AllowHeader is on but Tracon__Tenancy__Enabled is off; turn tenancy on first.".into(),
            ));
        }
        Ok(Self { enabled, allow_header, header, allowed })
    }

    /// Sets `caller.tenant` for this request.
    pub fn resolve(&self, caller: &mut Caller, headers: &HeaderMap) -> Result<(), ApiError> {
        let claimed = headers.get(&self.header).map(|v| v.to_str().unwrap_or("\u{0}").trim());
        if caller.method == AuthMethod::ApiKey {
            // The key's tenant stands; a header that disagrees is refused, whatever the settings.
            return match claimed {
                Some(c) if c != caller.tenant.as_str() => Err(ApiError::forbidden(
                    "tenant_mismatch",
                    "The tenant header names another tenant than the API key belongs to.",
                )),
                _ => Ok(()),
            };
        }
        if !self.enabled || !self.allow_header {
            caller.tenant = TenantId::default_tenant();
            return Ok(());
        }
        let Some(claimed) = claimed else {
            caller.tenant = TenantId::default_tenant();
            return Ok(());
        };
        let tenant = TenantId::parse(claimed).map_err(|e| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_tenant", e.0).with("header", self.header.as_str())
        })?;
        if !self.allowed.is_empty() && !self.allowed.contains(&tenant) {
            return Err(ApiError::forbidden("tenant_not_allowed", "The tenant is not on this server's allowlist."));
        }
        caller.tenant = tenant;
        Ok(())
    }
}
