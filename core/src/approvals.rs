//! Approvals: a person's decision on a tool call that needs one.
//!
//! A run that reaches such a call stops at `AwaitingApproval` before any body runs; each
//! waiting call becomes an [`ApprovalRecord`] with an absolute expiry. Deciding it — in-band
//! on the session's next run request, or through the mailbox (`/api/approvals`) — never
//! rewrites the stopped run: once every request of that run is decided, a **new** run in the
//! same session resumes it, and the model sees each call's result or its refusal.
//!
//! Whether a call asks at all is decided in this order ([`Gatekeeper::needs_approval`]):
//! a code-defined [`ApprovalPolicy`] for the tool runs first and may force (`Required`) or
//! waive (`NotRequired`) the approval — a failing policy counts as `Required`; only when it
//! is `Undecided` (or absent) do the stored [`ApprovalRule`]s decide: a matching rule runs
//! the call without asking. A rule matches one exact argument set (a hash), a set of
//! [`Condition`]s that must all hold, or — carrying neither — every call of its tool.
//! Conditions fail closed: an unresolved path or a type mismatch is "no match", so the call
//! still asks.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::error::StoreError;
use crate::identity::Caller;
use crate::names::{RunId, TenantId};
use crate::sync::lock;
use crate::tools::effect::ToolEffect;
use std::sync::Mutex;

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    /// Pending past its expiry (never stored: computed when read).
    Expired,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Approved => "Approved",
            Self::Denied => "Denied",
            Self::Expired => "Expired",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Pending" => Some(Self::Pending),
            "Approved" => Some(Self::Approved),
            "Denied" => Some(Self::Denied),
            "Expired" => Some(Self::Expired),
            _ => None,
        }
    }
}

/// One call waiting for (or having had) a person's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRecord {
    /// The request id (the `requestId` of the run's `approvals` frame).
    pub id: Uuid,
    pub tenant: TenantId,
    /// The run that stopped.
    pub run_id: RunId,
    pub session_id: Option<String>,
    pub agent_name: String,
    pub call_id: String,
    pub tool_name: String,
    /// The call's arguments as the model sent them (parsed).
    pub arguments: Value,
    pub effect: ToolEffect,
    /// Who started the stopped run, when known.
    pub requested_by: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Absolute: after it the request can no longer be decided.
    pub expires_at: DateTime<Utc>,
    /// As stored: `Pending`, `Approved` or `Denied` (see [`Self::status_at`]).
    pub status: ApprovalStatus,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    /// The run that resumed the stopped one, once it started.
    pub resumed_run_id: Option<RunId>,
}

impl ApprovalRecord {
    /// The status as a reader sees it: a pending request past its expiry is `Expired`.
    pub fn status_at(&self, now: DateTime<Utc>) -> ApprovalStatus {
        if self.status == ApprovalStatus::Pending && now >= self.expires_at {
            ApprovalStatus::Expired
        } else {
            self.status
        }
    }
}

/// What a decider said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    pub approved: bool,
    pub decided_by: String,
    pub reason: Option<String>,
}

/// A standing pre-approval of a tool. It never expires; delete it to withdraw it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRule {
    pub id: Uuid,
    #[serde(skip)]
    pub tenant: TenantId,
    pub tool_name: String,
    /// Narrows the rule to one agent; absent matches every agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_name: Option<String>,
    /// SHA-256 (hex) of the canonical arguments ([`arguments_hash`]): one exact call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments_hash: Option<String>,
    /// All must hold. Never together with a hash.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

/// The closed operator set. There is no `OR`: write two rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Operator {
    Equals,
    NotEquals,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
    In,
    NotIn,
}

/// One comparison: a dotted path into the arguments, an operator, a value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Condition {
    /// `amount`, `order.total`, `items.0.sku` (a number segment indexes an array).
    pub path: String,
    pub operator: Operator,
    #[schema(value_type = Object)]
    pub value: Value,
}

/// Limits on a rule.
pub const MAX_CONDITIONS: usize = 16;
pub const MAX_PATH_LEN: usize = 256;
pub const MAX_PATH_DEPTH: usize = 16;
pub const MAX_DESCRIPTION: usize = 500;
/// Limit on an `In`/`NotIn` list.
pub const MAX_IN_VALUES: usize = 100;

impl Condition {
    /// Why this condition can never be evaluated, if it cannot.
    pub fn problem(&self) -> Option<String> {
        let p = &self.path;
        if p.is_empty() || p.len() > MAX_PATH_LEN || p.split('.').any(str::is_empty) {
            return Some(format!(
                "'path' must be a dotted path of non-empty segments, at most {MAX_PATH_LEN} characters."
            ));
        }
        if p.split('.').count() > MAX_PATH_DEPTH {
            return Some(format!("'path' may have at most {MAX_PATH_DEPTH} segments."));
        }
        match self.operator {
            Operator::GreaterThan | Operator::GreaterThanOrEqual | Operator::LessThan | Operator::LessThanOrEqual => {
                if !self.value.is_number() {
                    return Some(format!("{:?} compares numbers: 'value' must be a number.", self.operator));
                }
            }
            Operator::In | Operator::NotIn => match &self.value {
                Value::Array(items) if !items.is_empty() && items.len() <= MAX_IN_VALUES => {}
                _ => {
                    return Some(format!(
                        "{:?} needs 'value' to be a list of 1 to {MAX_IN_VALUES} values.",
                        self.operator
                    ));
                }
            },
            Operator::Equals | Operator::NotEquals => {}
        }
        None
    }

    /// Whether the arguments satisfy this condition. Fails closed: a path that does not
    /// resolve, or a value of another type than the rule's, is `false` — for `NotEquals`
    /// and `NotIn` too.
    pub fn holds(&self, arguments: &Value) -> bool {
        let Some(actual) = resolve(arguments, &self.path) else { return false };
        let same_kind = |a: &Value, b: &Value| std::mem::discriminant(a) == std::mem::discriminant(b);
        match self.operator {
            Operator::Equals => same_kind(actual, &self.value) && json_eq(actual, &self.value),
            Operator::NotEquals => same_kind(actual, &self.value) && !json_eq(actual, &self.value),
            Operator::GreaterThan | Operator::GreaterThanOrEqual | Operator::LessThan | Operator::LessThanOrEqual => {
                let (Some(a), Some(b)) = (actual.as_f64(), self.value.as_f64()) else { return false };
                match self.operator {
                    Operator::GreaterThan => a > b,
                    Operator::GreaterThanOrEqual => a >= b,
                    Operator::LessThan => a < b,
                    _ => a <= b,
                }
            }
            Operator::In | Operator::NotIn => {
                let Value::Array(list) = &self.value else { return false };
                // Every listed value must share the argument's type, or the rule is not
                // about this kind of value at all.
                if list.is_empty() || !list.iter().all(|v| same_kind(v, actual)) {
                    return false;
                }
                let found = list.iter().any(|v| json_eq(v, actual));
                (self.operator == Operator::In) == found
            }
        }
    }
}

/// Numbers compare by value (`100` equals `100.0`); everything else structurally.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Follows a dotted path; a number segment indexes an array.
fn resolve<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, segment| match v {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// SHA-256 (hex) of the arguments in canonical form (object keys sorted): the identity of
/// one exact call, whatever order the model wrote its keys in.
pub fn arguments_hash(arguments: &Value) -> String {
    let digest = Sha256::digest(crate::audit::canonical(arguments).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl ApprovalRule {
    /// Whether the rule releases this call of `agent` from approval.
    pub fn matches(&self, agent: &str, tool: &str, arguments: &Value) -> bool {
        if self.tool_name != tool || self.agent_name.as_deref().is_some_and(|a| a != agent) {
            return false;
        }
        if let Some(hash) = &self.arguments_hash {
            return *hash == arguments_hash(arguments);
        }
        self.conditions.iter().all(|c| c.holds(arguments))
    }
}

/// Pending requests, decisions, and rules.
#[async_trait::async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Stores new pending requests (all of one stopped run). `Conflict` when an id exists.
    async fn create(&self, records: &[ApprovalRecord]) -> Result<(), StoreError>;
    async fn get(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ApprovalRecord>, StoreError>;
    /// Requests still pending and not expired at `now`, oldest first, at most `take`.
    async fn list_pending(
        &self,
        tenant: &TenantId,
        now: DateTime<Utc>,
        take: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError>;
    /// Every request of one run, oldest first.
    async fn list_for_run(&self, tenant: &TenantId, run_id: RunId) -> Result<Vec<ApprovalRecord>, StoreError>;
    /// Records a decision, only if the request is still `Pending` and `now` is before its
    /// expiry (one atomic step: of two racing deciders exactly one wins). `NotFound` when
    /// the tenant has no such request; `Conflict` when it was decided or has expired.
    async fn decide(
        &self,
        tenant: &TenantId,
        id: Uuid,
        decision: &ApprovalDecision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError>;
    /// Claims the resumption of a stopped run for `resumed`: `true` for exactly one caller,
    /// and only once none of the run's requests is `Pending` and none was claimed before.
    async fn claim_resume(&self, tenant: &TenantId, run_id: RunId, resumed: RunId) -> Result<bool, StoreError>;

    /// Stores a rule. `Conflict` when its id exists.
    async fn create_rule(&self, rule: &ApprovalRule) -> Result<(), StoreError>;
    /// The tenant's rules, oldest first; only `tool`'s when given.
    async fn list_rules(&self, tenant: &TenantId, tool: Option<&str>) -> Result<Vec<ApprovalRule>, StoreError>;
    async fn get_rule(&self, tenant: &TenantId, id: Uuid) -> Result<Option<ApprovalRule>, StoreError>;
    /// Removes a rule; `NotFound` when the tenant has no such rule.
    async fn delete_rule(&self, tenant: &TenantId, id: Uuid) -> Result<ApprovalRule, StoreError>;
}

/// A code-defined policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyVerdict {
    /// Ask, whatever the rules say.
    Required,
    /// Run without asking.
    NotRequired,
    /// Let the stored rules decide.
    Undecided,
}

/// What a policy sees of the call.
#[derive(Debug)]
pub struct ApprovalContext<'a> {
    pub tenant: &'a TenantId,
    pub run_id: RunId,
    pub agent: &'a str,
    pub tool_name: &'a str,
    pub arguments: &'a Value,
    pub caller: &'a Caller,
}

/// A code-defined approval policy for one tool (`RuntimeBuilder::approval_policy`). Code is
/// a security boundary; the stored rules are writable through the API and may not loosen a
/// policy that says `Required`. An `Err` or a panic counts as `Required`.
#[async_trait::async_trait]
pub trait ApprovalPolicy: Send + Sync {
    async fn evaluate(&self, context: &ApprovalContext<'_>) -> Result<PolicyVerdict, String>;
}

/// Decides whether a call of a tool that requires approval asks a person.
#[derive(Clone, Default)]
pub struct Gatekeeper {
    pub policies: HashMap<String, Arc<dyn ApprovalPolicy>>,
    pub store: Option<Arc<dyn ApprovalStore>>,
}

impl Gatekeeper {
    /// `true` when the call must wait for a person. Every failure on the way asks.
    pub async fn needs_approval(&self, context: &ApprovalContext<'_>) -> bool {
        if let Some(policy) = self.policies.get(context.tool_name) {
            let verdict = std::panic::AssertUnwindSafe(policy.evaluate(context)).catch_unwind().await;
            match verdict {
                Ok(Ok(PolicyVerdict::Required)) => return true,
                Ok(Ok(PolicyVerdict::NotRequired)) => return false,
                Ok(Ok(PolicyVerdict::Undecided)) => {}
                Ok(Err(detail)) => {
                    tracing::warn!(tool = context.tool_name, detail = %detail, "approval policy failed; asking");
                    return true;
                }
                Err(_) => {
                    tracing::warn!(tool = context.tool_name, "approval policy panicked; asking");
                    return true;
                }
            }
        }
        let Some(store) = &self.store else { return true };
        match store.list_rules(context.tenant, Some(context.tool_name)).await {
            Ok(rules) => !rules.iter().any(|r| r.matches(context.agent, context.tool_name, context.arguments)),
            Err(e) => {
                tracing::warn!(tool = context.tool_name, error = ?e, "could not read approval rules; asking");
                true
            }
        }
    }
}

// ---- memory --------------------------------------------------------------------------------

/// Pending requests and rules, per tenant, in creation order.
#[derive(Default)]
pub struct MemoryApprovalStore {
    requests: Mutex<Vec<ApprovalRecord>>,
    rules: Mutex<Vec<ApprovalRule>>,
}

#[async_trait::async_trait]
impl ApprovalStore for MemoryApprovalStore {
    async fn create(&self, records: &[ApprovalRecord]) -> Result<(), StoreError> {
        let mut rows = lock(&self.requests);
        if records.iter().any(|r| rows.iter().any(|x| x.id == r.id)) {
            return Err(StoreError::Conflict("An approval request with this id exists.".into()));
        }
        rows.extend(records.iter().cloned());
        Ok(())
    }

    async fn get(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(lock(&self.requests).iter().find(|r| r.tenant == *tenant && r.id == id).cloned())
    }

    async fn list_pending(
        &self,
        tenant: &TenantId,
        now: DateTime<Utc>,
        take: usize,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = lock(&self.requests);
        let mut pending: Vec<ApprovalRecord> = rows
            .iter()
            .filter(|r| r.tenant == *tenant && r.status == ApprovalStatus::Pending && now < r.expires_at)
            .cloned()
            .collect();
        pending.sort_by_key(|r| (r.created_at, r.id));
        pending.truncate(take);
        Ok(pending)
    }

    async fn list_for_run(&self, tenant: &TenantId, run_id: RunId) -> Result<Vec<ApprovalRecord>, StoreError> {
        let mut rows: Vec<ApprovalRecord> =
            lock(&self.requests).iter().filter(|r| r.tenant == *tenant && r.run_id == run_id).cloned().collect();
        rows.sort_by_key(|r| (r.created_at, r.id));
        Ok(rows)
    }

    async fn decide(
        &self,
        tenant: &TenantId,
        id: uuid::Uuid,
        decision: &ApprovalDecision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let mut rows = lock(&self.requests);
        let row = rows.iter_mut().find(|r| r.tenant == *tenant && r.id == id).ok_or(StoreError::NotFound)?;
        if row.status != ApprovalStatus::Pending || now >= row.expires_at {
            return Err(StoreError::Conflict("This approval request can no longer be decided.".into()));
        }
        row.status = if decision.approved { ApprovalStatus::Approved } else { ApprovalStatus::Denied };
        row.decided_at = Some(now);
        row.decided_by = Some(decision.decided_by.clone());
        row.reason.clone_from(&decision.reason);
        Ok(row.clone())
    }

    async fn claim_resume(&self, tenant: &TenantId, run_id: RunId, resumed: RunId) -> Result<bool, StoreError> {
        let mut rows = lock(&self.requests);
        let mut of_run = rows.iter_mut().filter(|r| r.tenant == *tenant && r.run_id == run_id).peekable();
        if of_run.peek().is_none() {
            return Ok(false);
        }
        let of_run: Vec<&mut ApprovalRecord> = of_run.collect();
        if of_run.iter().any(|r| r.status == ApprovalStatus::Pending || r.resumed_run_id.is_some()) {
            return Ok(false);
        }
        for r in of_run {
            r.resumed_run_id = Some(resumed);
        }
        Ok(true)
    }

    async fn create_rule(&self, rule: &ApprovalRule) -> Result<(), StoreError> {
        let mut rules = lock(&self.rules);
        if rules.iter().any(|r| r.id == rule.id) {
            return Err(StoreError::Conflict("An approval rule with this id exists.".into()));
        }
        rules.push(rule.clone());
        Ok(())
    }

    async fn list_rules(&self, tenant: &TenantId, tool: Option<&str>) -> Result<Vec<ApprovalRule>, StoreError> {
        crate::error::check_text_opt("toolName", tool)?;
        Ok(lock(&self.rules)
            .iter()
            .filter(|r| r.tenant == *tenant && tool.is_none_or(|t| r.tool_name == t))
            .cloned()
            .collect())
    }

    async fn get_rule(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<Option<ApprovalRule>, StoreError> {
        Ok(lock(&self.rules).iter().find(|r| r.tenant == *tenant && r.id == id).cloned())
    }

    async fn delete_rule(&self, tenant: &TenantId, id: uuid::Uuid) -> Result<ApprovalRule, StoreError> {
        let mut rules = lock(&self.rules);
        let at = rules.iter().position(|r| r.tenant == *tenant && r.id == id).ok_or(StoreError::NotFound)?;
        Ok(rules.remove(at))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cond(path: &str, operator: Operator, value: Value) -> Condition {
        Condition { path: path.into(), operator, value }
    }

    #[test]
    fn conditions_compare_and_fail_closed() {
        let args = json!({"amount": 80, "currency": "EUR", "order": {"items": [{"sku": "A1"}]}, "note": "100"});
        assert!(cond("amount", Operator::LessThanOrEqual, json!(100)).holds(&args));
        assert!(!cond("amount", Operator::GreaterThan, json!(100)).holds(&args));
        assert!(cond("amount", Operator::Equals, json!(80.0)).holds(&args));
        assert!(cond("order.items.0.sku", Operator::Equals, json!("A1")).holds(&args));
        assert!(cond("currency", Operator::In, json!(["EUR", "USD"])).holds(&args));
        assert!(cond("currency", Operator::NotIn, json!(["GBP"])).holds(&args));
        // Fail closed: missing paths, text against numbers, mixed lists.
        assert!(!cond("missing", Operator::NotEquals, json!(1)).holds(&args));
        assert!(!cond("missing", Operator::NotIn, json!(["x"])).holds(&args));
        assert!(!cond("note", Operator::LessThanOrEqual, json!(100)).holds(&args));
        assert!(!cond("note", Operator::Equals, json!(100)).holds(&args));
        assert!(!cond("note", Operator::NotEquals, json!(5)).holds(&args));
        assert!(!cond("amount", Operator::NotIn, json!(["80"])).holds(&args));
        assert!(!cond("order.items.9.sku", Operator::Equals, json!("A1")).holds(&args));
        assert!(!cond("amount.deeper", Operator::Equals, json!(1)).holds(&args));
    }

    #[test]
    fn conditions_that_can_never_be_evaluated_are_refused() {
        assert!(cond("", Operator::Equals, json!(1)).problem().is_some());
        assert!(cond("a..b", Operator::Equals, json!(1)).problem().is_some());
        assert!(cond("a", Operator::GreaterThan, json!("1")).problem().is_some());
        assert!(cond("a", Operator::In, json!([])).problem().is_some());
        assert!(cond("a", Operator::In, json!("x")).problem().is_some());
        assert!(cond("a.b", Operator::In, json!([1, 2])).problem().is_none());
    }

    #[test]
    fn the_arguments_hash_ignores_key_order() {
        assert_eq!(arguments_hash(&json!({"a": 1, "b": [1, 2]})), arguments_hash(&json!({"b": [1, 2], "a": 1})));
        assert_ne!(arguments_hash(&json!({"a": 1})), arguments_hash(&json!({"a": 2})));
    }

    #[test]
    fn rules_match_by_tool_agent_hash_or_conditions() {
        let mut rule = ApprovalRule {
            id: Uuid::nil(),
            tenant: TenantId::default_tenant(),
            tool_name: "refund".into(),
            agent_name: None,
            arguments_hash: None,
            conditions: vec![],
            description: None,
            created_at: Utc::now(),
            created_by: "t".into(),
        };
        let args = json!({"amount": 50});
        assert!(rule.matches("support", "refund", &args), "no narrowing matches every call");
        assert!(!rule.matches("support", "cancel", &args));
        rule.agent_name = Some("billing".into());
        assert!(!rule.matches("support", "refund", &args));
        rule.agent_name = None;
        rule.conditions = vec![cond("amount", Operator::LessThanOrEqual, json!(100))];
        assert!(rule.matches("support", "refund", &args));
        assert!(!rule.matches("support", "refund", &json!({"amount": 500})));
        rule.conditions.clear();
        rule.arguments_hash = Some(arguments_hash(&json!({"amount": 500})));
        assert!(!rule.matches("support", "refund", &args));
        assert!(rule.matches("support", "refund", &json!({"amount": 500})));
    }
}
