//! The boundary of the external surfaces — the MCP server (`/mcp`) and the A2A server
//! (`/a2a/{agent}`) — that let another system run an agent: the rules both share, in one
//! place, so neither surface can drift from the other.
//!
//! - **Nothing is exposed by default.** [`Exposure`] is read from a surface's own section
//!   (`Tracon:McpServer`, `Tracon:A2A`): an allowlist (`ExposedAgents:<i>`), `ExposeAllAgents`
//!   where the surface has it (MCP only), and the per-call budget (`Budget:*`).
//! - **Only an API key with the exact `ExternalInvoke` scope** reaches a surface
//!   ([`check_caller`]): not the static token, not a JWT role, not an anonymous loopback
//!   caller, not a key whose other scopes would have been enough elsewhere.
//! - **No approval boundary is crossed** ([`Exposure::agent`]): an exposed agent whose tools
//!   (or whose callable agents' tools, as deep as the budget lets a call go) include one that
//!   requires approval is refused; an external caller cannot act as the missing human. A tool
//!   the registry does not know counts as one (fail closed).
//! - **The tenant is the key's**: an agent of another tenant, or one not on the allowlist,
//!   is [`ExposureRefusal::NotExposed`] — the same answer as one that does not exist.
//! - **A fresh, smaller budget per call** ([`Exposure::limits`]): the call's run is the root
//!   of a new call tree with `Budget:MaxDepth` (1) and the surface's token and run limits,
//!   handed to [`crate::runs::launch::Start::budget`].
//! - **Start-up** ([`check_startup`]): remote exposure with no active `ExternalInvoke` key
//!   anywhere is refused (a static bearer token alone does not do), and so is an exposed agent
//!   that would cross an approval boundary. A host that cannot reach its stores at start-up
//!   (serverless) relies on the per-request checks, which fail closed the same way.
//!
//! Use: a surface holds an [`Exposure`], calls [`check_caller`] on every request, lists with
//! [`Exposure::agents`], and before starting a run resolves the name with [`Exposure::agent`]
//! and passes [`Exposure::limits`] as the run's budget.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::catalog::CatalogEntry;
use crate::config::{Config, ConfigError};
use crate::error::StoreError;
use crate::identity::{AuthMethod, Caller};
use crate::keys::Scope;
use crate::names::{AgentName, TenantId};
use crate::runs::tree::AgentGraphSettings;
use crate::runtime::Runtime;

/// Most agents one listing returns (an allowlist is short; `ExposeAllAgents` is bounded).
pub const MAX_LISTED: usize = 500;

/// The budget of one external call's run tree (`<Section>:Budget:*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExternalBudget {
    /// `MaxDepth` (1): how deep a child of the called agent may sit; 0 lets it call none.
    pub max_depth: u32,
    /// `MaxTotalRuns` (the installation's child limit + 1): every run of the tree, its root
    /// included.
    pub max_total_runs: Option<u32>,
    /// `MaxTotalTokens` (the installation's `Tracon:AgentGraph:MaxTotalTokens`).
    pub max_total_tokens: Option<u64>,
}

impl Default for ExternalBudget {
    fn default() -> Self {
        Self { max_depth: 1, max_total_runs: None, max_total_tokens: None }
    }
}

/// What one external surface exposes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exposure {
    /// The allowlist, in configuration order.
    pub agents: Vec<AgentName>,
    /// Every agent of the key's tenant (MCP only; off by default).
    pub expose_all: bool,
    pub budget: ExternalBudget,
}

/// Why an external caller may not run an agent.
#[derive(Debug, Clone)]
pub enum ExposureRefusal {
    /// The caller is not an active API key carrying `ExternalInvoke` (the message says which).
    Credential(&'static str),
    /// Not on the allowlist, another tenant's, or missing: the same answer for all three.
    NotExposed,
    /// The agent (or an agent it may call) has a tool that requires approval.
    ApprovalRequired {
        agent: String,
        tool: String,
    },
    Store(StoreError),
}

impl From<StoreError> for ExposureRefusal {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl ExposureRefusal {
    /// A message safe to show the external caller.
    pub fn message(&self) -> String {
        match self {
            Self::Credential(m) => (*m).to_owned(),
            Self::NotExposed => "No such agent is exposed here.".to_owned(),
            Self::ApprovalRequired { agent, tool } => format!(
                "Agent '{agent}' cannot be called from outside: its tool '{tool}' requires approval (or a client's answer), which an external caller cannot give."
            ),
            Self::Store(_) => "The agent catalog could not be read; try again.".to_owned(),
        }
    }
}

impl Exposure {
    /// Reads `<section>:ExposedAgents` (a list, `…:ExposedAgents:0`, or one comma-separated
    /// value), `<section>:ExposeAllAgents` when `expose_all_allowed`, and `<section>:Budget:*`.
    /// A name that is not an agent name, or `ExposeAllAgents` on a surface without it, is a
    /// start-up error.
    pub fn from_config(config: &Config, section: &str, expose_all_allowed: bool) -> Result<Self, ConfigError> {
        let key = format!("{section}:ExposedAgents");
        let mut raw: Vec<&str> = Vec::new();
        if let Some(v) = config.get(&key) {
            raw.extend(v.split(','));
        }
        let mut children = config.child_sections(&key);
        children.sort_by_key(|c| c.parse::<u32>().unwrap_or(u32::MAX));
        for child in children {
            if let Some(v) = config.get(&format!("{key}:{child}")) {
                raw.push(v);
            }
        }
        let mut agents: Vec<AgentName> = Vec::new();
        for name in raw.into_iter().map(str::trim).filter(|n| !n.is_empty()) {
            let name = AgentName::parse(name).map_err(|e| {
                ConfigError::Message(format!(
                    "{}: '{name}' is not an agent name ({}).",
                    crate::config::env_name(&key),
                    e.0
                ))
            })?;
            if !agents.contains(&name) {
                agents.push(name);
            }
        }
        let all_key = format!("{section}:ExposeAllAgents");
        let expose_all = config.bool(&all_key)?.unwrap_or(false);
        if expose_all && !expose_all_allowed {
            return Err(ConfigError::Message(format!(
                "{} does not exist: this surface exposes only the agents it names.",
                crate::config::env_name(&all_key)
            )));
        }
        let d = ExternalBudget::default();
        let budget = ExternalBudget {
            max_depth: config.parse::<u32>(&format!("{section}:Budget:MaxDepth"))?.unwrap_or(d.max_depth),
            max_total_runs: config.parse::<u32>(&format!("{section}:Budget:MaxTotalRuns"))?,
            max_total_tokens: config.parse::<u64>(&format!("{section}:Budget:MaxTotalTokens"))?,
        };
        if budget.max_total_runs == Some(0) {
            return Err(ConfigError::Message(format!(
                "{} must be at least 1 (the called agent's own run).",
                crate::config::env_name(&format!("{section}:Budget:MaxTotalRuns"))
            )));
        }
        Ok(Self { agents, expose_all, budget })
    }

    /// Whether anything is exposed at all.
    pub fn is_enabled(&self) -> bool {
        self.expose_all || !self.agents.is_empty()
    }

    /// Whether `name` is exposed (by the allowlist or `ExposeAllAgents`).
    pub fn names(&self, name: &str) -> bool {
        self.expose_all || self.agents.iter().any(|a| a.as_str() == name)
    }

    /// The limits of one call's fresh tree: the installation's `Tracon:AgentGraph` limits,
    /// narrowed by the surface's budget (never widened).
    pub fn limits(&self, installation: &AgentGraphSettings) -> Arc<AgentGraphSettings> {
        let b = &self.budget;
        let child_runs = b.max_total_runs.map_or(installation.max_total_child_runs, |runs| {
            runs.saturating_sub(1).min(installation.max_total_child_runs)
        });
        let tokens = match (b.max_total_tokens, installation.max_total_tokens) {
            (Some(a), Some(i)) => Some(a.min(i)),
            (a, i) => a.or(i),
        };
        Arc::new(AgentGraphSettings {
            max_depth: b.max_depth.min(installation.max_depth),
            max_total_child_runs: child_runs,
            max_total_tokens: tokens,
            ..installation.clone()
        })
    }

    /// The exposed agent `name` in `tenant`, checked for approval boundaries.
    pub async fn agent(
        &self,
        runtime: &Runtime,
        tenant: &TenantId,
        name: &str,
    ) -> Result<CatalogEntry, ExposureRefusal> {
        if !self.names(name) {
            return Err(ExposureRefusal::NotExposed);
        }
        let Ok(parsed) = AgentName::parse(name) else { return Err(ExposureRefusal::NotExposed) };
        let entry = runtime.catalog.get(tenant, &parsed).await?.ok_or(ExposureRefusal::NotExposed)?;
        if let Some(tool) = approval_tool(runtime, tenant, &entry, self.budget.max_depth).await? {
            return Err(ExposureRefusal::ApprovalRequired { agent: name.to_owned(), tool });
        }
        Ok(entry)
    }

    /// The agents exposed in `tenant`, by name: the allowlist's that exist there (or, with
    /// `ExposeAllAgents`, the tenant's catalog), each with the approval check's verdict.
    pub async fn agents(
        &self,
        runtime: &Runtime,
        tenant: &TenantId,
    ) -> Result<Vec<Result<CatalogEntry, ExposureRefusal>>, StoreError> {
        let names: Vec<String> = if self.expose_all {
            let mut names: Vec<String> = runtime
                .catalog
                .list(tenant, 0, MAX_LISTED)
                .await?
                .into_iter()
                .map(|e| e.definition.name.clone())
                .collect();
            for a in &self.agents {
                if !names.iter().any(|n| n == a.as_str()) {
                    names.push(a.as_str().to_owned());
                }
            }
            names
        } else {
            self.agents.iter().map(|a| a.as_str().to_owned()).collect()
        };
        let mut out = Vec::new();
        for name in names {
            match self.agent(runtime, tenant, &name).await {
                Err(ExposureRefusal::NotExposed) => {}
                Err(ExposureRefusal::Store(e)) => return Err(e),
                other => out.push(other),
            }
        }
        out.sort_by(|a, b| entry_name(a).cmp(entry_name(b)));
        Ok(out)
    }
}

fn entry_name(r: &Result<CatalogEntry, ExposureRefusal>) -> &str {
    match r {
        Ok(e) => &e.definition.name,
        Err(ExposureRefusal::ApprovalRequired { agent, .. }) => agent,
        Err(_) => "",
    }
}

/// Refuses every caller but an active API key with the `ExternalInvoke` scope (the access
/// layer has already checked that the key is known, matches and is active).
pub fn check_caller(caller: &Caller) -> Result<(), ExposureRefusal> {
    if caller.method != AuthMethod::ApiKey || caller.key_id.is_none() {
        return Err(ExposureRefusal::Credential(
            "This surface needs an API key with the 'ExternalInvoke' scope; a static token, a JWT or no credential does not do.",
        ));
    }
    match &caller.scopes {
        Some(scopes) if scopes.contains(&Scope::ExternalInvoke) => Ok(()),
        _ => Err(ExposureRefusal::Credential("This API key lacks the 'ExternalInvoke' scope this surface needs.")),
    }
}

/// The first tool of `entry` (or of an agent it may call, down to `depth` levels) that
/// requires approval, that a client answers (an external caller cannot), or that the
/// registry does not know.
async fn approval_tool(
    runtime: &Runtime,
    tenant: &TenantId,
    entry: &CatalogEntry,
    depth: u32,
) -> Result<Option<String>, StoreError> {
    let registry = runtime.catalog.tools();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut level = vec![entry.definition.clone()];
    for current_depth in 0..=depth {
        let mut next = Vec::new();
        for def in level {
            if !seen.insert(def.name.clone()) {
                continue;
            }
            for tool in &def.tool_names {
                if registry.get(tool).is_none_or(|t| t.requires_approval || t.is_client()) {
                    return Ok(Some(tool.clone()));
                }
            }
            if current_depth == depth {
                continue;
            }
            for callable in &def.callable_agent_names {
                let Ok(name) = AgentName::parse(callable) else { continue };
                if let Some(child) = runtime.catalog.get(tenant, &name).await? {
                    next.push(child.definition);
                }
            }
        }
        level = next;
    }
    Ok(None)
}

/// The start-up check of a surface that exposes agents (`surface` names it in messages):
/// with `remote` on, at least one active key with `ExternalInvoke` must exist in some tenant
/// (a static bearer token alone is refused), and no exposed agent of any tenant may cross an
/// approval boundary. Nothing is checked while nothing is exposed.
pub async fn check_startup(runtime: &Runtime, exposure: &Exposure, remote: bool, surface: &str) -> Result<(), String> {
    if !exposure.is_enabled() {
        return Ok(());
    }
    let unreadable =
        |e: StoreError| format!("{surface}: the stores could not be read to check the exposed agents ({e:?}).");
    let mut tenants = vec![TenantId::default_tenant()];
    for t in runtime.stores.tenants.list(0, 10_000).await.map_err(unreadable)? {
        if !tenants.contains(&t.id) {
            tenants.push(t.id);
        }
    }
    if remote {
        let now = runtime.platform.clock.now();
        let mut found = false;
        for tenant in &tenants {
            let keys = runtime.stores.keys.list(tenant).await.map_err(unreadable)?;
            if keys.iter().any(|k| k.is_active(now) && k.scopes.contains(&Scope::ExternalInvoke)) {
                found = true;
                break;
            }
        }
        if !found {
            return Err(format!(
                "{surface} exposes agents to remote callers, but no active API key has the 'ExternalInvoke' scope; \
                 a static bearer token alone is refused. Create one (POST /api/api-keys with scopes [\"ExternalInvoke\"]) \
                 before enabling remote access."
            ));
        }
    }
    for tenant in &tenants {
        for agent in exposure.agents(runtime, tenant).await.map_err(unreadable)? {
            if let Err(refusal @ ExposureRefusal::ApprovalRequired { .. }) = agent {
                return Err(format!("{surface}: {}", refusal.message()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_exposed_by_default_and_the_allowlist_reads_both_spellings() {
        let none = Exposure::from_config(&Config::default(), "Tracon:McpServer", true).unwrap();
        assert!(!none.is_enabled());
        assert_eq!(none.budget.max_depth, 1);
        let config = Config::from_pairs([
            ("Tracon__McpServer__ExposedAgents__1", "billing"),
            ("Tracon__McpServer__ExposedAgents__0", "support"),
            ("Tracon__McpServer__Budget__MaxTotalRuns", "4"),
            ("Tracon__McpServer__Budget__MaxTotalTokens", "40000"),
        ]);
        let e = Exposure::from_config(&config, "Tracon:McpServer", true).unwrap();
        assert_eq!(e.agents.iter().map(AgentName::as_str).collect::<Vec<_>>(), ["support", "billing"]);
        assert!(e.names("billing") && !e.names("other"));
        let limits = e.limits(&AgentGraphSettings::default());
        assert_eq!((limits.max_depth, limits.max_total_child_runs, limits.max_total_tokens), (1, 3, Some(40_000)));
        let config = Config::from_pairs([("Tracon__A2A__ExposedAgents", "a, b")]);
        assert_eq!(Exposure::from_config(&config, "Tracon:A2A", false).unwrap().agents.len(), 2);
    }

    #[test]
    fn bad_names_and_expose_all_where_it_does_not_exist_are_start_up_errors() {
        let config = Config::from_pairs([("Tracon__McpServer__ExposedAgents__0", "Not A Name")]);
        assert!(Exposure::from_config(&config, "Tracon:McpServer", true).is_err());
        let config = Config::from_pairs([("Tracon__A2A__ExposeAllAgents", "true")]);
        assert!(Exposure::from_config(&config, "Tracon:A2A", false).is_err());
        let config = Config::from_pairs([("Tracon__McpServer__Budget__MaxTotalRuns", "0")]);
        assert!(Exposure::from_config(&config, "Tracon:McpServer", true).is_err());
    }

    #[test]
    fn the_budget_narrows_the_installation_never_widens_it() {
        let installation = AgentGraphSettings { max_depth: 0, max_total_tokens: Some(100), ..Default::default() };
        let e = Exposure {
            budget: ExternalBudget { max_depth: 5, max_total_runs: Some(100), max_total_tokens: Some(1000) },
            ..Default::default()
        };
        let l = e.limits(&installation);
        assert_eq!((l.max_depth, l.max_total_child_runs, l.max_total_tokens), (0, 16, Some(100)));
    }

    #[test]
    fn only_an_api_key_with_external_invoke_passes() {
        let mut caller = Caller::static_token();
        assert!(check_caller(&caller).is_err());
        caller.method = AuthMethod::ApiKey;
        caller.key_id = Some("0123456789ab".into());
        caller.scopes = Some([Scope::RunsWrite, Scope::AgentsAdmin].into_iter().collect());
        assert!(check_caller(&caller).is_err());
        caller.scopes = Some([Scope::ExternalInvoke].into_iter().collect());
        assert!(check_caller(&caller).is_ok());
    }
}
