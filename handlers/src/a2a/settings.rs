//! `Tracon:A2A:*`: which agents are published through A2A, the budget of each external call,
//! the public address the cards name, and the signing secret of push notifications.

use tracon_core::config::{Config, ConfigError};
use tracon_core::names::{AgentName, TenantId};
use tracon_core::runs::tree::AgentGraphSettings;

/// The A2A surface's settings. Nothing is published by default, and there is no expose-all
/// switch: an agent is published only when `Tracon:A2A:ExposedAgents:{i}` names it.
#[derive(Debug, Clone, Default)]
pub struct A2aSettings {
    /// `ExposedAgents:0..` — the published names, fixed at start-up.
    pub exposed: Vec<AgentName>,
    /// `Budget:*` — each external call's own call tree: `MaxDepth` (1), `MaxTotalChildRuns`
    /// (4), `MaxTotalTokens`, `MaxTotalCost`, `MaxDurationSeconds` (none unless set).
    pub budget: AgentGraphSettings,
    /// `PublicUrl` — the scheme and host the cards name (`https://agents.example.com`);
    /// without it, the request's `Host` (and `X-Forwarded-Proto`, else `http`).
    pub public_url: Option<String>,
    /// `PushSecretName` — the one segment naming each tenant's push signing secret under
    /// the webhook secrets' partition (`A2A`: `Tracon:WebhookSecrets:A2A` for the default
    /// tenant, `Tracon:WebhookSecrets:acme:A2A` for tenant `acme`). Without it push
    /// notifications are off and the cards say so.
    pub push_secret_name: Option<String>,
}

/// The budget an external call gets when `Budget:MaxDepth` is not set: the agent itself
/// and one level of the agents it calls.
pub const DEFAULT_MAX_DEPTH: u32 = 1;
pub const DEFAULT_MAX_CHILD_RUNS: u32 = 4;

impl A2aSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        if config.get("Tracon:A2A:ExposeAllAgents").is_some() {
            return Err(ConfigError::Message(
                "Tracon__A2A__ExposeAllAgents does not exist: A2A publishes only the agents Tracon__A2A__ExposedAgents__{i} names.".into(),
            ));
        }
        let mut exposed: Vec<AgentName> = Vec::new();
        let mut indices: Vec<(usize, String)> = config
            .child_sections("Tracon:A2A:ExposedAgents")
            .into_iter()
            .map(|i| (i.parse::<usize>().unwrap_or(usize::MAX), i))
            .collect();
        indices.sort();
        for (_, i) in indices {
            let Some(raw) = config.get(&format!("Tracon:A2A:ExposedAgents:{i}")) else { continue };
            let name = AgentName::parse(raw.trim()).map_err(|e| {
                ConfigError::Message(format!("Tracon__A2A__ExposedAgents__{i} is not an agent name: {}", e.0))
            })?;
            if !exposed.contains(&name) {
                exposed.push(name);
            }
        }
        let budget = AgentGraphSettings {
            max_depth: config.parse::<u32>("Tracon:A2A:Budget:MaxDepth")?.unwrap_or(DEFAULT_MAX_DEPTH),
            max_total_child_runs: config
                .parse::<u32>("Tracon:A2A:Budget:MaxTotalChildRuns")?
                .unwrap_or(DEFAULT_MAX_CHILD_RUNS),
            max_total_tokens: config.parse::<u64>("Tracon:A2A:Budget:MaxTotalTokens")?,
            max_total_cost: config.parse::<f64>("Tracon:A2A:Budget:MaxTotalCost")?,
            max_duration: config.seconds("Tracon:A2A:Budget:MaxDurationSeconds")?,
        };
        if budget.max_total_cost.is_some_and(|c| !c.is_finite() || c < 0.0) {
            return Err(ConfigError::Message(
                "Tracon__A2A__Budget__MaxTotalCost must be a number of at least 0.".into(),
            ));
        }
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
        Ok(Self { exposed, budget, public_url, push_secret_name })
    }

    /// Settings publishing `agents` with the default budget (tests, embedders).
    pub fn exposing(agents: &[&str]) -> Self {
        Self {
            exposed: agents.iter().filter_map(|a| AgentName::parse(a).ok()).collect(),
            budget: AgentGraphSettings {
                max_depth: DEFAULT_MAX_DEPTH,
                max_total_child_runs: DEFAULT_MAX_CHILD_RUNS,
                ..AgentGraphSettings::default()
            },
            public_url: None,
            push_secret_name: None,
        }
    }

    /// The published agent called `name`, if it is one.
    pub fn exposed(&self, name: &str) -> Option<&AgentName> {
        self.exposed.iter().find(|a| a.as_str() == name)
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
        assert!(none.exposed.is_empty());
        assert_eq!(none.budget.max_depth, 1);
        let all = Config::from_pairs([("Tracon__A2A__ExposeAllAgents", "true")]);
        assert!(A2aSettings::from_config(&all).is_err());
    }

    #[test]
    fn exposed_agents_and_budget_are_read_in_order() {
        let c = Config::from_pairs([
            ("Tracon__A2A__ExposedAgents__1", "billing"),
            ("Tracon__A2A__ExposedAgents__0", "support"),
            ("Tracon__A2A__Budget__MaxTotalTokens", "40000"),
            ("Tracon__A2A__PushSecretName", "A2A"),
        ]);
        let s = A2aSettings::from_config(&c).unwrap();
        let names: Vec<&str> = s.exposed.iter().map(AgentName::as_str).collect();
        assert_eq!(names, ["support", "billing"]);
        assert_eq!(s.budget.max_total_tokens, Some(40_000));
        let acme = TenantId::parse("acme").unwrap();
        assert_eq!(s.push_secret_key(&acme).as_deref(), Some("Tracon:WebhookSecrets:acme:A2A"));
        assert_eq!(s.push_secret_key(&TenantId::default_tenant()).as_deref(), Some("Tracon:WebhookSecrets:A2A"));
        let bad = Config::from_pairs([("Tracon__A2A__ExposedAgents__0", "not a name!")]);
        assert!(A2aSettings::from_config(&bad).is_err());
    }
}
