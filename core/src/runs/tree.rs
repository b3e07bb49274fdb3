//! A run's place in a call tree and the one budget the whole tree shares.
//!
//! Every run is a tree's root unless a parent's generated agent tool started it
//! ([`crate::runs::children`]). The root draws a [`TreeBudget`] from the installation's
//! `Tracon:AgentGraph:*` limits; each child gets the same budget, so a tree cannot spend more
//! than one run was allowed. Depth and the number of child runs are checked before a child
//! starts (a refusal is the tool's result, and no run row is created); tokens, cost and
//! wall-clock time are checked before every model call of every run in the tree, so a long
//! tool loop is cut off between two model turns.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{Config, ConfigError};
use crate::failure::{ErrorClass, RunFailure};
use crate::model::Usage;
use crate::names::RunId;

/// `Tracon:AgentGraph:*`: the limits of one root run's call tree. An external surface's run
/// carries its own, narrower ones ([`crate::exposure::Exposure::limits`]); a queued one keeps
/// them in its job payload.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentGraphSettings {
    /// `MaxDepth` (3): how deep a child may sit (the root is depth 0).
    pub max_depth: u32,
    /// `MaxTotalChildRuns` (16): child runs the whole tree may start.
    pub max_total_child_runs: u32,
    /// `MaxTotalTokens` (none): tokens the whole tree may spend.
    pub max_total_tokens: Option<u64>,
    /// `MaxTotalCost` (none): what the whole tree may cost, in the pricing currency; only
    /// priced models count.
    pub max_total_cost: Option<f64>,
    /// `MaxDurationSeconds` (none): wall-clock time from the root's start.
    pub max_duration: Option<Duration>,
}

impl Default for AgentGraphSettings {
    fn default() -> Self {
        Self {
            max_depth: 3,
            max_total_child_runs: 16,
            max_total_tokens: None,
            max_total_cost: None,
            max_duration: None,
        }
    }
}

/// `Tracon:SubAgents:*`: the installation's two-layer wait limit of a call to a callable
/// agent, for an agent whose definition sets no `subAgents` of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubAgentDefaults {
    /// `ChildDeadlineSeconds` (120): the child is asked to stop (cooperative).
    pub child_deadline: Duration,
    /// `WaitTimeoutSeconds` (150): the caller stops waiting (hard).
    pub wait_timeout: Duration,
}

impl Default for SubAgentDefaults {
    fn default() -> Self {
        Self { child_deadline: Duration::from_secs(120), wait_timeout: Duration::from_secs(150) }
    }
}

impl AgentGraphSettings {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let s = Self {
            max_depth: config.parse::<u32>("Tracon:AgentGraph:MaxDepth")?.unwrap_or(d.max_depth),
            max_total_child_runs: config
                .parse::<u32>("Tracon:AgentGraph:MaxTotalChildRuns")?
                .unwrap_or(d.max_total_child_runs),
            max_total_tokens: config.parse::<u64>("Tracon:AgentGraph:MaxTotalTokens")?,
            max_total_cost: config.parse::<f64>("Tracon:AgentGraph:MaxTotalCost")?,
            max_duration: config.seconds("Tracon:AgentGraph:MaxDurationSeconds")?,
        };
        if s.max_total_cost.is_some_and(|c| !c.is_finite() || c < 0.0) {
            return Err(ConfigError::Message(
                "Tracon__AgentGraph__MaxTotalCost must be a number of at least 0.".into(),
            ));
        }
        Ok(s)
    }
}

impl SubAgentDefaults {
    pub fn from_config(config: &Config) -> Result<Self, ConfigError> {
        let d = Self::default();
        let s = Self {
            child_deadline: config.seconds("Tracon:SubAgents:ChildDeadlineSeconds")?.unwrap_or(d.child_deadline),
            wait_timeout: config.seconds("Tracon:SubAgents:WaitTimeoutSeconds")?.unwrap_or(d.wait_timeout),
        };
        if s.child_deadline.is_zero() || s.wait_timeout < s.child_deadline {
            return Err(ConfigError::Message(
                "Tracon__SubAgents__ChildDeadlineSeconds must be positive and WaitTimeoutSeconds at least as long."
                    .into(),
            ));
        }
        Ok(s)
    }
}

/// What a tree has spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spent {
    pub child_runs: u32,
    pub tokens: u64,
    pub cost: crate::pricing::Money,
}

/// The budget a whole tree shares (clones share it).
#[derive(Debug, Clone)]
pub struct TreeBudget {
    limits: Arc<AgentGraphSettings>,
    started_at: DateTime<Utc>,
    spent: Arc<Mutex<Spent>>,
}

/// Which limit a tree reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Depth,
    ChildRuns,
    Tokens,
    Cost,
    Duration,
}

impl Limit {
    /// The setting that names it, for messages.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Depth => "MaxDepth",
            Self::ChildRuns => "MaxTotalChildRuns",
            Self::Tokens => "MaxTotalTokens",
            Self::Cost => "MaxTotalCost",
            Self::Duration => "MaxDurationSeconds",
        }
    }

    /// The failure of a run the limit cut off between model turns.
    pub fn failure(self) -> RunFailure {
        RunFailure::new(
            ErrorClass::TreeBudgetExceeded,
            format!(
                "The run's call tree reached its {} limit (Tracon:AgentGraph); the run was stopped.",
                self.setting()
            ),
        )
    }
}

impl Spent {
    pub fn add(&mut self, other: Self) {
        self.child_runs = self.child_runs.saturating_add(other.child_runs);
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.cost += other.cost;
    }

    /// What the tree of `members` (its root among them, as `RunStore::list_tree` lists it)
    /// has spent by what their rows record: every run's tokens and cost, every child run.
    pub fn of(members: &[crate::runs::store::RunRecord]) -> Self {
        members.iter().fold(Self::default(), |mut spent, run| {
            if let Some(u) = &run.usage {
                spent.tokens = spent.tokens.saturating_add(u.total_tokens.max(u.input_tokens + u.output_tokens));
            }
            spent.cost += run.cost.as_ref().map_or(crate::pricing::Money::ZERO, |c| c.total_cost);
            spent.child_runs += u32::from(run.parent_run_id.is_some());
            spent
        })
    }
}

impl TreeBudget {
    pub fn new(limits: Arc<AgentGraphSettings>, started_at: DateTime<Utc>) -> Self {
        Self::resumed(limits, started_at, Spent::default())
    }

    /// The budget of a tree that has already spent `spent` since `started_at`: a run that goes
    /// on after handing itself over keeps counting against the limits it started under.
    pub fn resumed(limits: Arc<AgentGraphSettings>, started_at: DateTime<Utc>, spent: Spent) -> Self {
        Self { limits, started_at, spent: Arc::new(Mutex::new(spent)) }
    }

    pub fn limits(&self) -> &AgentGraphSettings {
        &self.limits
    }

    pub fn spent(&self) -> Spent {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spent> {
        self.spent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The spend limit (tokens, cost, time) the tree has reached at `now`, if any: checked
    /// before every model call in the tree.
    /// When the tree's time runs out (`MaxDurationSeconds`), if it has a limit.
    pub fn ends_at(&self) -> Option<DateTime<Utc>> {
        self.limits.max_duration.and_then(|d| chrono::Duration::from_std(d).ok()).map(|d| self.started_at + d)
    }

    pub fn exhausted(&self, now: DateTime<Utc>) -> Option<Limit> {
        let spent = self.spent();
        let l = &self.limits;
        if l.max_total_tokens.is_some_and(|max| spent.tokens >= max) {
            return Some(Limit::Tokens);
        }
        if l.max_total_cost.is_some_and(|max| spent.cost.units() >= max) {
            return Some(Limit::Cost);
        }
        let elapsed = (now - self.started_at).to_std().unwrap_or_default();
        l.max_duration.is_some_and(|max| elapsed >= max).then_some(Limit::Duration)
    }

    /// Adds one model call's usage and cost.
    pub fn spend(&self, usage: &Usage, cost: Option<crate::pricing::Money>) {
        let mut spent = self.lock();
        spent.tokens = spent.tokens.saturating_add(usage.total_tokens.max(usage.input_tokens + usage.output_tokens));
        spent.cost += cost.unwrap_or_default();
    }

    /// Claims one child run at `depth`, or names the limit that refuses it.
    pub fn claim_child(&self, depth: u32, now: DateTime<Utc>) -> Result<(), Limit> {
        if depth > self.limits.max_depth {
            return Err(Limit::Depth);
        }
        if let Some(limit) = self.exhausted(now) {
            return Err(limit);
        }
        let mut spent = self.lock();
        if spent.child_runs >= self.limits.max_total_child_runs {
            return Err(Limit::ChildRuns);
        }
        spent.child_runs += 1;
        Ok(())
    }
}

/// A run's place in its tree and where the tree's events go: what a child inherits.
#[derive(Clone)]
pub struct Subtree {
    pub place: TreePlace,
    /// The root run's log (`child.*` events are written there).
    pub root_log: Arc<crate::recorder::Recorder>,
}

/// A run's place in its tree.
#[derive(Debug, Clone)]
pub struct TreePlace {
    /// The tree's root (the run itself when it is the root).
    pub root: RunId,
    /// The run that started this one; `None` for the root.
    pub parent: Option<RunId>,
    pub depth: u32,
    pub budget: TreeBudget,
    /// A workflow's agent node: it may stop for a person's approval (the workflow stops with
    /// it and resumes once it is decided). Any other child cannot wait for one.
    pub may_wait: bool,
}

impl TreePlace {
    /// The place of a root run started at `started_at`, its tree having spent `spent` so far.
    pub fn root(run_id: RunId, limits: Arc<AgentGraphSettings>, started_at: DateTime<Utc>, spent: Spent) -> Self {
        Self {
            root: run_id,
            parent: None,
            depth: 0,
            budget: TreeBudget::resumed(limits, started_at, spent),
            may_wait: false,
        }
    }

    /// The place of a child `self`'s run starts.
    pub fn child_of(&self, parent: RunId) -> Self {
        Self {
            root: self.root,
            parent: Some(parent),
            depth: self.depth + 1,
            budget: self.budget.clone(),
            may_wait: false,
        }
    }

    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap_or_default()
    }

    #[test]
    fn the_budget_is_one_for_the_whole_tree_and_names_the_limit_reached() {
        let limits = AgentGraphSettings {
            max_depth: 2,
            max_total_child_runs: 2,
            max_total_tokens: Some(100),
            max_total_cost: Some(1.0),
            max_duration: Some(Duration::from_secs(60)),
        };
        let root = TreePlace::root(RunId(uuid::Uuid::nil()), Arc::new(limits), at(0), Spent::default());
        let child = root.child_of(root.root);
        assert_eq!(child.depth, 1);
        assert_eq!(root.budget.claim_child(3, at(1)), Err(Limit::Depth));
        assert_eq!(child.budget.claim_child(1, at(1)), Ok(()));
        assert_eq!(root.budget.claim_child(2, at(1)), Ok(()));
        assert_eq!(root.budget.claim_child(1, at(1)), Err(Limit::ChildRuns));
        assert_eq!(root.budget.exhausted(at(1)), None);
        child.budget.spend(&Usage { input_tokens: 60, output_tokens: 40, total_tokens: 100, ..Usage::default() }, None);
        assert_eq!(root.budget.exhausted(at(1)), Some(Limit::Tokens));
        assert_eq!(root.budget.exhausted(at(1)).map(|l| l.failure().error_type), Some("tree_budget_exceeded".into()));

        let timed =
            TreePlace::root(RunId(uuid::Uuid::nil()), Arc::new(AgentGraphSettings::default()), at(0), Spent::default());
        assert_eq!(timed.budget.exhausted(at(100_000)), None, "no duration limit by default");
        let limits =
            AgentGraphSettings { max_duration: Some(Duration::from_secs(60)), ..AgentGraphSettings::default() };
        let timed = TreePlace::root(RunId(uuid::Uuid::nil()), Arc::new(limits), at(0), Spent::default());
        assert_eq!(timed.budget.exhausted(at(59)), None);
        assert_eq!(timed.budget.exhausted(at(60)), Some(Limit::Duration));
        let limits = AgentGraphSettings { max_total_cost: Some(0.5), ..AgentGraphSettings::default() };
        let priced = TreePlace::root(RunId(uuid::Uuid::nil()), Arc::new(limits), at(0), Spent::default());
        priced.budget.spend(&Usage::default(), crate::pricing::Money::from_units(0.5));
        assert_eq!(priced.budget.exhausted(at(0)), Some(Limit::Cost));
    }
}
