//! `Tracon:A2A:*`: which agents are published through A2A and each call's budget (read by
//! [`tracon_core::exposure::Exposure`], the boundary the MCP server shares), the public
//! address the cards name, and the signing secret of push notifications.

use tracon_core::config::{Config, ConfigError};
use tracon_core::exposure::Exposure;
use tracon_core::names::{AgentName, TenantId};

/// The A2A surface's settings. Nothing is published by default, and there is no expose-all
/// switch: an agent is published only when `Tracon:A2A:ExposedAgents:{i}` names it.
#[derive(Debug, Clone, Default)]
pub struct A2aSettings {
    /// `ExposedAgents:0..` (fixed at start-up) and `Budget:*` — each external call's own call
    /// tree: `MaxDepth` (1), `MaxTotalRuns`, `MaxTotalTokens`.
    pub exposure: Exposure,
    /// `PublicUrl` — the scheme and host the cards name (`https://agents.example.com`);
    /// without it, the request's `Host` (and `X-Forwarded-Proto`, else `http`).
    pub public_url: Option<String>,
    /// `PushSecretName` — the one segment naming each tenant's push signing secret under
    /// the webhook secrets' partition (`A2A`: `Tracon:WebhookSecrets:A2A` for the default
    /// tenant, `Tracon:WebhookSecrets:acme:A2A` for tenant `acme`). Without it push
    /// notifications are off and the cards say so.
    pub push_secret_name: Option<String>,
}

impl A2aSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        // `false`: A2A has no expose-all switch; setting one is a start-up error.
        let exposure = Exposure::from_config(config, "Tracon:A2A", false)?;
        let public_url = config.get("Tracon:A2A:PublicUrl").map(|u| u.trim().trim_end_matches('/').to_owned());
        if let Some(url) = &public_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(ConfigError::Message(
                "Tracon__A2A__PublicUrl is the scheme and host the agent cards name (https://agents.example.com)."
                    .into(),
            ));
        }
        let push_secret_name = config.get("Tracon:A2A:PushSecretName").map(str::trim).map(str::to_owned);
        if let Some(name) = &push_secret_name
            && (name.is_empty()
                || name.len() > 64
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return Err(ConfigError::Message(
                "Tracon__A2A__PushSecretName is one name of letters, digits, '-', '_' or '.' (A2A), not the secret."
                    .into(),
            ));
        }
        Ok(Self { exposure, public_url, push_secret_name })
    }

    /// Settings publishing `agents` with the default budget (tests, embedders).
    pub fn exposing(agents: &[&str]) -> Self {
        let agents = agents.iter().filter_map(|a| AgentName::parse(a).ok()).collect();
        Self { exposure: Exposure { agents, ..Exposure::default() }, public_url: None, push_secret_name: None }
    }

    /// The published agent called `name`, if it is one.
    pub fn exposed(&self, name: &str) -> Option<&AgentName> {
        self.exposure.agents.iter().find(|a| a.as_str() == name)
    }

    /// The configuration key holding `tenant`'s push signing secret, when push is on.
    pub fn push_secret_key(&self, tenant: &TenantId) -> Option<String> {
        let name = self.push_secret_name.as_deref()?;
        let prefix = tracon_core::webhooks::DEFAULT_SECRET_PREFIX;
        Some(if *tenant == TenantId::default_tenant() {
            format!("{prefix}{name}")
        } else {
            format!("{prefix}{tenant}:{name}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_exposed_by_default_and_there_is_no_expose_all() {
        let none = A2aSettings::from_config(&Config::default()).unwrap();
        assert!(none.exposure.agents.is_empty());
        assert_eq!(none.exposure.budget.max_depth, 1);
        let all = Config::from_pairs([("Tracon__A2A__ExposeAllAgents", "true")]);
        assert!(A2aSettings::from_config(&all).is_err());
    }

    #[test]
    fn exposed_agents_budget_and_the_push_secret_are_read() {
        let c = Config::from_pairs([
            ("Tracon__A2A__ExposedAgents__1", "billing"),
            ("Tracon__A2A__ExposedAgents__0", "support"),
            ("Tracon__A2A__Budget__MaxTotalTokens", "40000"),
            ("Tracon__A2A__PushSecretName", "A2A"),
        ]);
        let s = A2aSettings::from_config(&c).unwrap();
        let names: Vec<&str> = s.exposure.agents.iter().map(AgentName::as_str).collect();
        assert_eq!(names, ["support", "billing"]);
        assert_eq!(s.exposure.budget.max_total_tokens, Some(40_000));
        let acme = TenantId::parse("acme").unwrap();
        assert_eq!(s.push_secret_key(&acme).as_deref(), Some("Tracon:WebhookSecrets:acme:A2A"));
        assert_eq!(s.push_secret_key(&TenantId::default_tenant()).as_deref(), Some("Tracon:WebhookSecrets:A2A"));
        let bad = Config::from_pairs([("Tracon__A2A__ExposedAgents__0", "not a name!")]);
        assert!(A2aSettings::from_config(&bad).is_err());
        let secret = Config::from_pairs([("Tracon__A2A__PushSecretName", "sk-live value")]);
        assert!(A2aSettings::from_config(&secret).is_err());
    }
}
