//! Which configuration key *names* a tenant's records may point at for their secrets.
//!
//! A trigger or a webhook subscription never stores a secret: it stores the name of the
//! configuration key that holds it, and the value is read at call time. Configuration is one
//! namespace for the whole installation, so the names are partitioned by tenant — otherwise a
//! tenant could name a key meant for another tenant and sign (or verify) with its secret.
//!
//! [`SecretNamespace`] draws the partition under one installation prefix (`Tracon:TriggerSecrets:`,
//! `Tracon:WebhookSecrets:`):
//!
//! - the default tenant names `{prefix}{Name}` — one segment after the prefix;
//! - any other tenant names `{prefix}{tenantId}:{Name}` — its id, then one segment;
//! - an operator may grant a tenant one more prefix of its own in configuration
//!   (`{section}:TenantPrefixes:{tenantId}`), under which any name is that tenant's.
//!
//! Exactly one segment follows a tenant's prefix, so no tenant's names can reach into
//! another's (`Tracon:TriggerSecrets:acme:Slack` is tenant `acme`'s, never the default
//! tenant's, and tenant `acme` cannot name `Tracon:TriggerSecrets:acme:eu:Slack`, which would
//! be a tenant `acme__eu`'s). Names compare case-insensitively, as configuration keys do.
//!
//! [`SecretNamespace::check_write`] is what a write must pass. [`SecretNamespace::may_resolve`]
//! is what resolving a stored name checks: any name under the installation prefix, or under
//! the tenant's grants. A record saved before the partition existed keeps working for the
//! tenant that saved it (records are tenant-scoped), and [`SecretNamespace::is_foreign`] lets
//! start-up report it.

use std::collections::BTreeMap;

use crate::config::{Config, ConfigError};
use crate::names::TenantId;

/// A stored record that names a configuration key: what the start-up check reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretReference {
    pub tenant: TenantId,
    /// The record's name or id (a trigger's name, a subscription's id).
    pub record: String,
    pub key_name: String,
}

/// Longest configuration key name a record may store.
pub const MAX_KEY_NAME_LEN: usize = 256;

/// A configuration key name in its `:` spelling (`Tracon__A__B` → `Tracon:A:B`).
pub fn colon_spelling(name: &str) -> String {
    name.replace("__", ":")
}

/// The installation prefix and the operator's per-tenant grants for one kind of secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretNamespace {
    /// `:` spelling, ending in `:`.
    prefix: String,
    /// Lowercase tenant id → extra prefixes (`:` spelling, each ending in `:`).
    grants: BTreeMap<String, Vec<String>>,
}

/// Why a name may not be written. The message names the allowed prefix, never the value sent
/// (a secret pasted by mistake must not come back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRefused {
    /// The prefix this tenant's names go under.
    pub allowed_prefix: String,
    /// The tenant's granted prefixes, if any.
    pub granted: Vec<String>,
}

impl NameRefused {
    /// `'{field}' is the name of a configuration key under '…' (for example '…Slack'), …`.
    pub fn message(&self, field: &str) -> String {
        let granted = match self.granted.as_slice() {
            [] => String::new(),
            many => format!(" or under a prefix granted to this tenant ({})", many.join(", ")),
        };
        format!(
            "'{field}' is the name of a configuration key under '{p}' followed by one name of letters, digits, '-', '_' or '.' (for example '{p}Slack'){granted}, never the secret itself.",
            p = self.allowed_prefix
        )
    }
}

impl SecretNamespace {
    /// One prefix (either spelling; must end in `:`) and no grants.
    pub fn new(prefix: &str) -> Self {
        Self { prefix: colon_spelling(prefix.trim()), grants: BTreeMap::new() }
    }

    /// `{section}:AllowedConfigurationPrefix` (default `default_prefix`) and
    /// `{section}:TenantPrefixes:{tenantId}` (one prefix, or several separated by commas).
    /// A prefix that is not a configuration section ending in `:` is a start-up error.
    pub fn from_config(config: &Config, section: &str, default_prefix: &str) -> Result<Self, ConfigError> {
        let key = format!("{section}:AllowedConfigurationPrefix");
        let prefix = colon_spelling(config.get(&key).map(str::trim).unwrap_or(default_prefix));
        if !is_prefix(&prefix) {
            return Err(ConfigError::Message(format!(
                "{} must be a configuration section ending in ':' (for example {default_prefix}).",
                crate::config::env_name(&key)
            )));
        }
        let mut grants: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let grant_section = format!("{section}:TenantPrefixes");
        for tenant in config.child_sections(&grant_section) {
            let key = format!("{grant_section}:{tenant}");
            let Some(raw) = config.get(&key) else { continue };
            for granted in raw.split(',').map(str::trim).filter(|g| !g.is_empty()) {
                let granted = colon_spelling(granted);
                if !is_prefix(&granted) {
                    return Err(ConfigError::Message(format!(
                        "{} holds '{granted}', which is not a configuration section ending in ':'.",
                        crate::config::env_name(&key)
                    )));
                }
                grants.entry(tenant.to_ascii_lowercase()).or_default().push(granted);
            }
        }
        Ok(Self { prefix, grants })
    }

    /// The installation prefix (`:` spelling).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prefix `tenant`'s own names go under: the installation prefix for the default
    /// tenant, `{prefix}{tenantId}:` for every other.
    pub fn tenant_prefix(&self, tenant: &TenantId) -> String {
        if tenant.as_str() == TenantId::DEFAULT {
            self.prefix.clone()
        } else {
            format!("{}{}:", self.prefix, colon_spelling(tenant.as_str()))
        }
    }

    fn granted(&self, tenant: &TenantId) -> &[String] {
        self.grants.get(&tenant.as_str().to_ascii_lowercase()).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether `tenant` may write a record naming `name`: one segment under its own prefix,
    /// or anything under a prefix granted to it.
    pub fn check_write(&self, tenant: &TenantId, name: &str) -> Result<(), NameRefused> {
        let name = colon_spelling(name.trim());
        let own = self.tenant_prefix(tenant);
        let ok = is_key_name(&name)
            && (strip_prefix_ci(&name, &own).is_some_and(|rest| !rest.contains(':'))
                || self.granted(tenant).iter().any(|g| strip_prefix_ci(&name, g).is_some()));
        if ok { Ok(()) } else { Err(NameRefused { allowed_prefix: own, granted: self.granted(tenant).to_vec() }) }
    }

    /// Whether a stored name may be resolved for `tenant` now: under the installation prefix
    /// (whoever's partition it is in — see [`Self::is_foreign`]), or under the tenant's grants.
    pub fn may_resolve(&self, tenant: &TenantId, name: &str) -> bool {
        let name = colon_spelling(name.trim());
        is_key_name(&name)
            && (strip_prefix_ci(&name, &self.prefix).is_some()
                || self.granted(tenant).iter().any(|g| strip_prefix_ci(&name, g).is_some()))
    }

    /// A stored record of `tenant` naming a key a write would refuse today (saved before the
    /// names were partitioned by tenant): it keeps working for its tenant, and start-up says so.
    pub fn is_foreign(&self, tenant: &TenantId, name: &str) -> bool {
        self.check_write(tenant, name).is_err()
    }
}

/// The rest of `name` after `prefix`, compared case-insensitively; `None` when it does not
/// start with it or nothing follows.
fn strip_prefix_ci<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    let rest = &name[prefix.len()..];
    (head.eq_ignore_ascii_case(prefix) && !rest.is_empty()).then_some(rest)
}

/// ASCII letters, digits, `:`, `_`, `-` and `.`, no empty segment, at most
/// [`MAX_KEY_NAME_LEN`] bytes (`:` spelling).
fn is_key_name(name: &str) -> bool {
    name.len() <= MAX_KEY_NAME_LEN
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-' | '.'))
        && name.split(':').all(|segment| !segment.is_empty())
}

fn is_prefix(prefix: &str) -> bool {
    prefix.len() > 1 && prefix.ends_with(':') && is_key_name(&prefix[..prefix.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(id: &str) -> TenantId {
        TenantId::parse(id).unwrap()
    }

    #[test]
    fn the_default_tenant_names_one_segment_under_the_prefix() {
        let ns = SecretNamespace::new("Tracon:TriggerSecrets:");
        let d = TenantId::default_tenant();
        for ok in ["Tracon:TriggerSecrets:Slack", "Tracon__TriggerSecrets__Slack", "tracon:triggersecrets:a.b-c_d"] {
            assert!(ns.check_write(&d, ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Tracon:TriggerSecrets:",
            "Tracon:TriggerSecrets:acme:Slack",
            "Tracon:TriggerSecretsX:Slack",
            "Tracon:Providers:OpenAI:ApiKey",
            "whsec_abc123",
            "Tracon:TriggerSecrets:a b",
            "Tracon:TriggerSecrets:Slack:",
        ] {
            assert!(ns.check_write(&d, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn another_tenant_names_its_id_then_one_segment_and_never_another_tenants_keys() {
        let ns = SecretNamespace::new("Tracon:WebhookSecrets:");
        let acme = tenant("acme");
        assert!(ns.check_write(&acme, "Tracon:WebhookSecrets:acme:Orders").is_ok());
        assert!(ns.check_write(&acme, "Tracon__WebhookSecrets__ACME__Orders").is_ok(), "either spelling, any case");
        for bad in [
            "Tracon:WebhookSecrets:Orders",
            "Tracon:WebhookSecrets:globex:Orders",
            "Tracon:WebhookSecrets:acme:eu:Orders",
            "Tracon:WebhookSecrets:acmex:Orders",
            "Tracon:WebhookSecrets:acme:",
        ] {
            let refused = ns.check_write(&acme, bad).unwrap_err();
            assert_eq!(refused.allowed_prefix, "Tracon:WebhookSecrets:acme:", "{bad}");
            assert!(refused.message("secretConfigurationName").contains("'Tracon:WebhookSecrets:acme:'"));
        }
        // A tenant whose id spells a segment separator stays inside its own partition.
        let nested = tenant("acme__eu");
        assert!(ns.check_write(&nested, "Tracon:WebhookSecrets:acme:eu:Orders").is_ok());
        assert!(ns.check_write(&nested, "Tracon:WebhookSecrets:acme:Orders").is_err());
    }

    #[test]
    fn an_operator_grant_is_the_only_other_way_and_is_per_tenant() {
        let config = Config::from_pairs([
            ("Tracon__InboundTriggers__TenantPrefixes__acme", "Shared:Acme:, Legacy__Hooks__"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", "Hooks:Secrets:"),
        ]);
        let ns = SecretNamespace::from_config(&config, "Tracon:InboundTriggers", "Tracon:TriggerSecrets:").unwrap();
        assert_eq!(ns.prefix(), "Hooks:Secrets:");
        assert!(ns.check_write(&tenant("acme"), "Shared:Acme:Slack:Eu").is_ok());
        assert!(ns.check_write(&tenant("acme"), "Legacy:Hooks:Slack").is_ok());
        assert!(ns.may_resolve(&tenant("acme"), "Shared:Acme:Slack"));
        assert!(ns.check_write(&tenant("globex"), "Shared:Acme:Slack").is_err());
        assert!(!ns.may_resolve(&tenant("globex"), "Shared:Acme:Slack"));
        let refused = ns.check_write(&tenant("acme"), "Other:Slack").unwrap_err();
        assert!(refused.message("f").contains("Shared:Acme:"), "{}", refused.message("f"));
        for bad in [
            ("Tracon__InboundTriggers__TenantPrefixes__acme", "NoColon"),
            ("Tracon__InboundTriggers__AllowedConfigurationPrefix", ":"),
        ] {
            let e = SecretNamespace::from_config(
                &Config::from_pairs([bad]),
                "Tracon:InboundTriggers",
                "Tracon:TriggerSecrets:",
            );
            assert!(e.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn stored_names_outside_the_partition_still_resolve_for_their_tenant_and_are_reported() {
        let ns = SecretNamespace::new("Tracon:TriggerSecrets:");
        let acme = tenant("acme");
        // Saved before the partition: the default tenant's key, named by acme.
        assert!(ns.may_resolve(&acme, "Tracon:TriggerSecrets:Slack"));
        assert!(ns.is_foreign(&acme, "Tracon:TriggerSecrets:Slack"));
        assert!(!ns.is_foreign(&acme, "Tracon:TriggerSecrets:acme:Slack"));
        assert!(!ns.may_resolve(&acme, "Tracon:Providers:OpenAI:ApiKey"));
    }
}
