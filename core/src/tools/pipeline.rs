//! The tool-call pipeline, in the spec's fixed order:
//!
//! 1. **authorization** ([`ToolAuthorizer`], default allow; an erroring handler denies) — a
//!    denial becomes the tool result text and the run goes on;
//! 2. **argument validation** (the tool's JSON Schema, then an optional
//!    [`ToolArgumentsValidator`]; an erroring validator rejects) — a rejection is recorded as
//!    `ToolFailed`;
//! 3. **timeout** — the model gets a tool error and the run goes on; the body's token is
//!    cancelled, and if it finishes anyway its late result is still recorded on the call;
//! 4. **approval** — a call that needs approval stops the turn before any body runs;
//! 5. the **body**, whose result becomes canonical text, trimmed by the output limit; a
//!    foreign error becomes `Tool failed with <Type>.`.
//!
//! [`admit`] runs stages 1, 2 and 4 (they decide *whether* a body runs); [`execute`] runs 3
//! and 5. The turn engine calls `admit` for every call of a turn first, so one approval
//! stops the whole turn before any side effect happens.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::effect::ToolEffect;
use super::{ToolContext, ToolError, ToolRegistration, output};
use crate::events::{ApprovalRequest, ToolCallStatus};
use crate::identity::Caller;
use crate::model::ToolCall;
use crate::names::{RunId, TenantId};
use crate::ports::{Platform, millis_between, new_id};
use crate::runs::store::LateCompletion;

/// Installation default for a tool without its own timeout.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// What the authorization handler is asked.
#[derive(Debug)]
pub struct ToolAuthorizationRequest<'a> {
    pub tenant: &'a TenantId,
    pub run_id: RunId,
    pub agent: &'a str,
    pub tool_name: &'a str,
    pub effect: ToolEffect,
    pub required_permission: Option<&'a str>,
    pub arguments: &'a Value,
    pub caller: &'a Caller,
}

/// The handler's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDecision {
    Allow,
    /// The reason reaches the model as the tool's result.
    Deny(String),
}

/// Decides whether a caller may call a tool at all. An `Err` denies (fail-closed).
#[async_trait::async_trait]
pub trait ToolAuthorizer: Send + Sync {
    async fn authorize(&self, request: &ToolAuthorizationRequest<'_>) -> Result<ToolDecision, String>;
}

/// The default: a tool's `requiredPermission` is checked against the caller. A caller that
/// proved an identity (an API key, a JWT) must hold the permission (a JWT's permissions
/// claim fills it; a key holds none); the static-token holder, a loopback caller without
/// authentication and Tracon itself are not narrowed, as scopes do not narrow them. A tool
/// without a required permission is allowed.
pub struct RequiredPermissions;

#[async_trait::async_trait]
impl ToolAuthorizer for RequiredPermissions {
    async fn authorize(&self, request: &ToolAuthorizationRequest<'_>) -> Result<ToolDecision, String> {
        use crate::identity::AuthMethod;
        let Some(permission) = request.required_permission else { return Ok(ToolDecision::Allow) };
        let unrestricted =
            matches!(request.caller.method, AuthMethod::StaticToken | AuthMethod::Anonymous | AuthMethod::Internal);
        if unrestricted || request.caller.has_permission(permission) {
            Ok(ToolDecision::Allow)
        } else {
            Ok(ToolDecision::Deny(format!("The caller lacks the permission '{permission}' this tool needs.")))
        }
    }
}

/// Allows every call, required permissions or not (for a host whose own layer already
/// decided).
pub struct AllowAllTools;

#[async_trait::async_trait]
impl ToolAuthorizer for AllowAllTools {
    async fn authorize(&self, _: &ToolAuthorizationRequest<'_>) -> Result<ToolDecision, String> {
        Ok(ToolDecision::Allow)
    }
}

/// Checks arguments beyond the schema (an undeclared field, a `pattern` the schema states).
/// `Ok(Some(reason))` rejects; an `Err` rejects too (fail-closed).
#[async_trait::async_trait]
pub trait ToolArgumentsValidator: Send + Sync {
    async fn validate(&self, tool: &ToolRegistration, arguments: &Value) -> Result<Option<String>, String>;
}

/// The settled result of one call, as the model sees it and the record keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    pub call_id: String,
    pub tool_name: String,
    pub arguments: String,
    pub effect: Option<ToolEffect>,
    pub status: ToolCallStatus,
    /// The text handed to the model.
    pub result: String,
    /// A display-safe error, for failures.
    pub error: Option<String>,
    /// Bytes the output limit dropped.
    pub omitted_bytes: Option<u64>,
    pub started_at: DateTime<Utc>,
    pub duration_ms: u64,
}

/// Everything the pipeline needs from the run it serves.
#[derive(Clone)]
pub struct CallEnv {
    pub tenant: TenantId,
    pub run_id: RunId,
    pub agent: String,
    pub caller: Caller,
    pub cancel: CancellationToken,
    pub platform: Platform,
    pub authorizer: Arc<dyn ToolAuthorizer>,
    pub validator: Option<Arc<dyn ToolArgumentsValidator>>,
    pub default_timeout: Duration,
    pub default_max_output_bytes: Option<usize>,
    /// Calls a person already approved (resumed runs).
    pub approved_call_ids: BTreeSet<String>,
    /// Calls a person denied (resumed runs), with the refusal the model gets as the result.
    pub denied_calls: BTreeMap<String, String>,
    /// Whether a call of a tool that requires approval asks (policies, then rules).
    pub gatekeeper: Arc<crate::approvals::Gatekeeper>,
    /// Where tool bodies write their own events.
    pub events: crate::events::EventWriter,
    /// The run's step ledger: step numbers and the calls' idempotency keys.
    pub ledger: Ledger,
    /// A queued attempt's soft deadline: past it, the turn hands the run over at its next
    /// step boundary.
    pub deadline: Option<DateTime<Utc>>,
    /// The run's place in its call tree: the budget every model call checks first.
    pub tree: crate::runs::tree::TreePlace,
    /// Starts the child runs of the agent's generated agent tools.
    pub children: super::agents::Children,
    /// A replay in `ReplayTools` mode: the source run's answers, given instead of running a
    /// body.
    pub replay: Option<Arc<super::replayed::Recorded>>,
    /// The run's caller takes its answer whole ([`crate::model::ModelRequest::whole`]).
    pub whole_answer: bool,
}

/// Where a run is in its step ledger (clones share the count).
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The first run of the continuation chain this run belongs to (itself when it continues
    /// none): the calls' idempotency keys are named after it, so they survive a continuation.
    pub origin: RunId,
    /// Whether steps are written (recording on).
    pub enabled: bool,
    /// The number of the run's latest model step (a continuation starts at its source's).
    step: Arc<std::sync::atomic::AtomicU32>,
}

impl Ledger {
    pub fn new(origin: RunId, enabled: bool, last_step: u32) -> Self {
        Self { origin, enabled, step: Arc::new(std::sync::atomic::AtomicU32::new(last_step)) }
    }

    /// The latest step's number.
    pub fn step(&self) -> u32 {
        self.step.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Numbers the next model step.
    pub fn next_step(&self) -> u32 {
        self.step.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// A call's idempotency key in the latest step.
    pub fn key(&self, call_id: &str) -> String {
        format!("{}:{}:{call_id}", self.origin, self.step())
    }
}

/// What [`execute`] returns: the outcome, and for a call that timed out, the still-running
/// body. The engine records the call first and only then drives `late` to completion, so a
/// late result always lands on a record that exists.
pub struct Executed {
    pub outcome: CallOutcome,
    pub late: Option<BoxFuture<'static, LateCompletion>>,
}

/// A call that passed authorization, validation and approval.
pub struct Admitted {
    pub call: ToolCall,
    pub tool: Arc<ToolRegistration>,
    pub arguments: Value,
    pub started_at: DateTime<Utc>,
}

/// What [`admit`] decided.
pub enum Gate {
    Run(Admitted),
    Done(CallOutcome),
    AwaitApproval(ApprovalRequest),
}

/// Stages 1, 2 and 4. `tool` is `None` when the model named a tool the agent does not have.
pub async fn admit(call: &ToolCall, tool: Option<&Arc<ToolRegistration>>, env: &CallEnv) -> Gate {
    let started_at = env.platform.clock.now();
    let settled = |status, result: String, error: Option<String>, effect| {
        let now = env.platform.clock.now();
        Gate::Done(CallOutcome {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: call.arguments.clone(),
            effect,
            status,
            result,
            error,
            omitted_bytes: None,
            started_at,
            duration_ms: millis_between(started_at, now),
        })
    };
    let Some(tool) = tool else {
        let msg = format!("Tool '{}' is not available to this agent.", crate::names::truncate_for_message(&call.name));
        return settled(ToolCallStatus::Rejected, msg.clone(), Some(msg), None);
    };
    let effect = Some(tool.effect);
    // A parse failure is a validation failure (stage 2); authorization still goes first.
    let parsed: Option<Value> = serde_json::from_str(&call.arguments).ok();
    let arguments = parsed.clone().unwrap_or(Value::Null);

    // 1. Authorization.
    let request = ToolAuthorizationRequest {
        tenant: &env.tenant,
        run_id: env.run_id,
        agent: &env.agent,
        tool_name: tool.name(),
        effect: tool.effect,
        required_permission: tool.required_permission.as_deref(),
        arguments: &arguments,
        caller: &env.caller,
    };
    match env.authorizer.authorize(&request).await {
        Ok(ToolDecision::Allow) => {}
        Ok(ToolDecision::Deny(reason)) => {
            let reason = if reason.trim().is_empty() { "This tool call was denied.".to_owned() } else { reason };
            return settled(ToolCallStatus::Denied, reason, None, effect);
        }
        Err(detail) => {
            let reference = crate::failure::new_ref();
            tracing::warn!(tool = tool.name(), r#ref = %reference, detail = %detail, "tool authorization handler failed; denying the call");
            return settled(
                ToolCallStatus::Denied,
                format!("This tool call was denied. (ref: {reference})"),
                None,
                effect,
            );
        }
    }

    // 2. Validation.
    if parsed.is_none() {
        let msg = format!("The arguments for tool '{}' are not valid JSON.", tool.name());
        return settled(ToolCallStatus::Rejected, msg.clone(), Some(msg), effect);
    }
    let errors = tool.schema_errors(&arguments);
    if !errors.is_empty() {
        let msg = format!("The arguments for tool '{}' were rejected: {}", tool.name(), errors.join("; "));
        return settled(ToolCallStatus::Rejected, msg.clone(), Some(msg), effect);
    }
    if let Some(validator) = &env.validator {
        let verdict = validator.validate(tool, &arguments).await;
        let reason = match verdict {
            Ok(None) => None,
            Ok(Some(reason)) => Some(reason),
            Err(detail) => {
                let reference = crate::failure::new_ref();
                tracing::warn!(tool = tool.name(), r#ref = %reference, detail = %detail, "tool arguments validator failed; rejecting the call");
                Some(format!("The arguments could not be validated. (ref: {reference})"))
            }
        };
        if let Some(reason) = reason {
            let msg = format!("The arguments for tool '{}' were rejected: {reason}", tool.name());
            return settled(ToolCallStatus::Rejected, msg.clone(), Some(msg), effect);
        }
    }

    // 4. Approval (the timeout of stage 3 never covers a pending approval). A person's
    // decision on a resumed run comes first; otherwise policies and rules may waive it.
    if let Some(refusal) = env.denied_calls.get(&call.id) {
        return settled(ToolCallStatus::Denied, refusal.clone(), None, effect);
    }
    if tool.requires_approval
        && !env.approved_call_ids.contains(&call.id)
        && env
            .gatekeeper
            .needs_approval(&crate::approvals::ApprovalContext {
                tenant: &env.tenant,
                run_id: env.run_id,
                agent: &env.agent,
                tool_name: tool.name(),
                arguments: &arguments,
                caller: &env.caller,
            })
            .await
    {
        return Gate::AwaitApproval(ApprovalRequest {
            request_id: new_id(env.platform.clock.as_ref()),
            call_id: call.id.clone(),
            tool_name: tool.name().to_owned(),
            arguments,
            effect: tool.effect,
        });
    }

    Gate::Run(Admitted { call: call.clone(), tool: tool.clone(), arguments, started_at })
}

/// Stages 3 and 5: runs the body under its timeout and the run's cancellation.
pub async fn execute(admitted: Admitted, env: &CallEnv) -> Executed {
    let Admitted { call, tool, arguments, started_at } = admitted;
    let clock = env.platform.clock.clone();
    let timeout = tool.timeout.unwrap_or(env.default_timeout);
    let call_cancel = env.cancel.child_token();
    let ctx = ToolContext {
        tenant: env.tenant.clone(),
        run_id: env.run_id,
        agent: env.agent.clone(),
        call_id: call.id.clone(),
        caller: env.caller.clone(),
        cancel: call_cancel.clone(),
        events: env.events.clone(),
        idempotency_key: env.ledger.key(&call.id),
        children: env.children.clone(),
    };
    let body = tool.body();
    let mut body_future = async move { body.call(arguments, ctx).await }.boxed();
    let max_bytes = tool.max_output_bytes.or(env.default_max_output_bytes);
    let tool_name = tool.name().to_owned();

    let outcome = |status, result: String, error: Option<String>, omitted: Option<u64>| {
        let now = clock.now();
        CallOutcome {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            arguments: call.arguments.clone(),
            effect: Some(tool.effect),
            status,
            result,
            error,
            omitted_bytes: omitted,
            started_at,
            duration_ms: millis_between(started_at, now),
        }
    };

    tokio::select! {
        biased;
        _ = env.cancel.cancelled() => {
            call_cancel.cancel();
            let msg = "The run was canceled while this tool call ran.".to_owned();
            Executed { outcome: outcome(ToolCallStatus::Canceled, msg.clone(), Some(msg), None), late: None }
        }
        result = &mut body_future => {
            let outcome = match settle(result, &tool_name, max_bytes) {
                Ok((text, omitted)) => outcome(ToolCallStatus::Succeeded, text, None, omitted),
                Err(msg) => outcome(ToolCallStatus::Failed, msg.clone(), Some(msg), None),
            };
            Executed { outcome, late: None }
        }
        _ = clock.sleep(timeout) => {
            call_cancel.cancel();
            let msg = format!("Tool '{tool_name}' timed out after {} ms.", timeout.as_millis());
            let outcome = outcome(ToolCallStatus::TimedOut, msg.clone(), Some(msg), None);
            // The body keeps its cooperative token; if it finishes anyway, its result and
            // real duration are written onto this same call's record.
            let late_clock = clock.clone();
            let (tenant, run_id, call_id) = (env.tenant.clone(), env.run_id, call.id.clone());
            let late = async move {
                let result = body_future.await;
                let completed_at = late_clock.now();
                LateCompletion {
                    tenant,
                    run_id,
                    call_id,
                    completed_at,
                    duration_ms: millis_between(started_at, completed_at),
                    result: settle(result, &tool_name, max_bytes).map(|(text, _)| text),
                }
            }
            .boxed();
            Executed { outcome, late: Some(late) }
        }
    }
}

/// Canonical text and output limit for a success; the display-safe text for a failure.
fn settle(
    result: Result<super::ToolOutput, ToolError>,
    tool_name: &str,
    max_bytes: Option<usize>,
) -> Result<(String, Option<u64>), String> {
    match result {
        Ok(out) => Ok(output::limit_output(out.into_canonical_text(), max_bytes)),
        Err(ToolError::Message(m)) => Err(m),
        Err(ToolError::Foreign { type_name, detail }) => {
            tracing::warn!(tool = tool_name, error_type = %type_name, detail = %detail, "tool body failed");
            Err(format!("Tool failed with {type_name}."))
        }
    }
}
