//! `Tracon:McpServer:*`: what the MCP server exposes and how it serves long calls.

use std::time::Duration;

use tracon_core::config::{Config, ConfigError, env_name};
use tracon_core::exposure::Exposure;

/// The configuration section.
pub const SECTION: &str = "Tracon:McpServer";

/// Longest tool name prefix (a tool name is at most 128 characters; an agent's, 64).
pub const MAX_PREFIX: usize = 63;

/// The MCP server's settings (held by `HttpSettings::mcp_server`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSettings {
    /// The agents exposed, the budget of each call (`ExposedAgents`, `ExposeAllAgents`,
    /// `Budget:*`); nothing by default.
    pub exposure: Exposure,
    /// `ToolNamePrefix` (none): a tool is `{prefix}_{agent}`, or the agent's name alone.
    pub tool_name_prefix: Option<String>,
    /// `EnableTasks` (false): a task-aware `tools/call` returns a task at once.
    pub enable_tasks: bool,
    /// `TaskTimeToLiveSeconds` (3600): how long a task is readable after it was created.
    pub task_ttl: Duration,
    /// `TaskPollIntervalSeconds` (5): the `pollInterval` suggested to clients.
    pub task_poll_interval: Duration,
}

impl Default for McpServerSettings {
    fn default() -> Self {
        Self {
            exposure: Exposure::default(),
            tool_name_prefix: None,
            enable_tasks: false,
            task_ttl: Duration::from_secs(3600),
            task_poll_interval: Duration::from_secs(5),
        }
    }
}

impl McpServerSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let prefix_key = format!("{SECTION}:ToolNamePrefix");
        let tool_name_prefix = config.get(&prefix_key).map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned);
        if let Some(p) = &tool_name_prefix
            && (p.len() > MAX_PREFIX
                || !p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')))
        {
            return Err(ConfigError::Message(format!(
                "{} is 1 to {MAX_PREFIX} letters, digits, '_', '-' or '.'.",
                env_name(&prefix_key)
            )));
        }
        Ok(Self {
            exposure: Exposure::from_config(config, SECTION, true)?,
            tool_name_prefix,
            enable_tasks: config.bool(&format!("{SECTION}:EnableTasks"))?.unwrap_or(d.enable_tasks),
            task_ttl: config.seconds(&format!("{SECTION}:TaskTimeToLiveSeconds"))?.unwrap_or(d.task_ttl),
            task_poll_interval: config
                .seconds(&format!("{SECTION}:TaskPollIntervalSeconds"))?
                .unwrap_or(d.task_poll_interval),
        })
    }

    /// The tool name of `agent`.
    pub fn tool_name(&self, agent: &str) -> String {
        match &self.tool_name_prefix {
            Some(p) => format!("{p}_{agent}"),
            None => agent.to_owned(),
        }
    }

    /// The agent a tool name stands for (not yet checked against the allowlist).
    pub fn agent_of<'a>(&self, tool: &'a str) -> Option<&'a str> {
        match &self.tool_name_prefix {
            Some(p) => tool.strip_prefix(p.as_str()).and_then(|rest| rest.strip_prefix('_')),
            None => Some(tool),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_exposed_and_tasks_are_off_by_default() {
        let s = McpServerSettings::from_config(&Config::default()).unwrap();
        assert!(!s.exposure.is_enabled());
        assert!(!s.enable_tasks);
        assert_eq!(s.tool_name("support"), "support");
    }

    #[test]
    fn the_prefix_names_the_tools_and_is_checked() {
        let config = Config::from_pairs([("Tracon__McpServer__ToolNamePrefix", "acme")]);
        let s = McpServerSettings::from_config(&config).unwrap();
        assert_eq!(s.tool_name("support"), "acme_support");
        assert_eq!(s.agent_of("acme_support"), Some("support"));
        assert_eq!(s.agent_of("support"), None);
        assert_eq!(s.agent_of("acmesupport"), None);
        let config = Config::from_pairs([("Tracon__McpServer__ToolNamePrefix", "a b")]);
        assert!(McpServerSettings::from_config(&config).is_err());
    }
}
