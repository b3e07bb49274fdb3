//! Which tenant a request reaches, in the spec's order:
//!
//! 1. authenticated with an API key → the key's tenant. A key *proves* its tenant; a tenant
//!    header that names another is refused (`403 tenant_mismatch`) before any endpoint runs;
//! 2. tenancy off (the default) → the default tenant;
//! 3. a claim type configured (`Tracon:Tenancy:ClaimType`): a verified JWT's claim of that
//!    name (`crate::access::jwt`), checked like a header (`403 invalid_tenant`, `403
//!    tenant_not_allowed`); a JWT without it, and every other caller, → the default tenant.
//!    The header is then never read: otherwise a signed-in user could reach another tenant
//!    by adding one;
//! 4. the header path, only when explicitly allowed (`Tracon:Tenancy:AllowHeader`): the
//!    header's value — a well-formed tenant id (`400 invalid_tenant`), and on the allowlist
//!    when one is configured (`403 tenant_not_allowed`); no header → the default tenant.
//!
//! A header is a claim, not a proof: that is why it must be switched on, and why a key
//! outranks it.

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
    /// `Tracon:Tenancy:ClaimType` (none): the JWT claim naming the tenant. When set, the
    /// header is never read.
    pub claim_type: Option<String>,
}

impl Default for TenancySettings {
    fn default() -> Self {
        Self {
            enabled: false,
            allow_header: false,
            header: HeaderName::from_static("x-tenant-id"),
            allowed: Vec::new(),
            claim_type: None,
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
        let claim_type = config.get("Tracon:Tenancy:ClaimType").map(|c| c.trim().to_owned());
        if claim_type.is_some() && !enabled {
            return Err(ConfigError::Message(
                "Tracon__Tenancy__ClaimType is set but Tracon__Tenancy__Enabled is off; turn tenancy on first.".into(),
            ));
        }
        Ok(Self { enabled, allow_header, header, allowed, claim_type })
    }

    /// The tenant a verified JWT's claims name, when tenancy resolves tenants from a claim;
    /// `None` (the default tenant) otherwise or when the token carries no such claim.
    pub fn claimed_tenant(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<TenantId>, ApiError> {
        let Some(claim_type) = self.claim_type.as_deref().filter(|_| self.enabled) else { return Ok(None) };
        let Some(value) = claims.get(claim_type) else { return Ok(None) };
        // The token is genuine, so a bad value is the issuer's, not the request's: 403.
        let tenant = value
            .as_str()
            .ok_or_else(|| "The tenant claim is not a string.".to_owned())
            .and_then(|v| TenantId::parse(v.trim()).map_err(|e| e.0))
            .map_err(|detail| ApiError::forbidden("invalid_tenant", detail).with("claim", claim_type))?;
        if !self.allowed.is_empty() && !self.allowed.contains(&tenant) {
            return Err(ApiError::forbidden("tenant_not_allowed", "The tenant is not on this server's allowlist."));
        }
        Ok(Some(tenant))
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
        if self.enabled && self.claim_type.is_some() {
            // A JWT caller's tenant is its claim's, set when the token was verified; anyone
            // else is the default tenant. The header is not read.
            if caller.method != AuthMethod::Jwt {
                caller.tenant = TenantId::default_tenant();
            }
            return Ok(());
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
