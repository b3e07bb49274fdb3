//! Function nodes: steps of a `Sequential` workflow that are code, not a model call
//! ([`WorkflowFunction`]), registered by name at start-up ([`FunctionRegistry`]) with an
//! optional [`RetryPolicy`] for transient failures. Only the *name* crosses into stored
//! definitions, as with tools.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::names::{RunId, TenantId};

/// Who wrote a message of the workflow's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Role {
    /// The caller (the run's input), a person's answer, or a function's output.
    User,
    /// An agent's answer.
    Assistant,
}

/// One message of the workflow's conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowMessage {
    pub role: Role,
    /// The executor that produced it (none for the caller's input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    /// The run that recorded this message as its answer: the text is that run's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// Left out of a checkpoint for an answer held by reference (see `run_id`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
}

impl WorkflowMessage {
    pub fn user(text: impl Into<String>) -> Self {
        Self { role: Role::User, executor_id: None, run_id: None, text: text.into() }
    }

    /// The message as a checkpoint holds it: an agent's answer (a message with a `run_id`,
    /// whose text is that run's answer) without its text, every other message whole.
    pub fn by_reference(&self) -> Self {
        let text = if self.run_id.is_some() { String::new() } else { self.text.clone() };
        Self { text, ..self.clone() }
    }
}

/// What a function node is called with.
pub struct FunctionCall<'a> {
    pub tenant: &'a TenantId,
    /// The workflow's root run.
    pub run_id: RunId,
    pub executor_id: &'a str,
    /// The conversation so far, the caller's input first; the last message is this node's input.
    pub messages: &'a [WorkflowMessage],
    /// A person's answer to the request this node raised, when the run resumes with one.
    pub answer: Option<&'a str>,
    pub cancel: tokio_util::sync::CancellationToken,
}

impl FunctionCall<'_> {
    /// The node's input: the last message's text.
    pub fn input(&self) -> &str {
        self.messages.last().map_or("", |m| m.text.as_str())
    }
}

/// What a function node answers.
#[derive(Debug, Clone, PartialEq)]
pub enum FunctionOutput {
    /// Messages appended to the conversation (text only; the node's id is set for them); the
    /// last one is the next node's input.
    Messages(Vec<String>),
    /// Stop and ask a person: the run closes `AwaitingInput`, and the node is called again
    /// with the answer when the run resumes.
    Ask { prompt: String },
}

/// Why a function node failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FunctionError {
    pub kind: FailureKind,
    /// Shown to the caller and stored: your own code's message is kept as written.
    pub message: String,
}

/// Which failures are worth another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// A provider failed (5xx, transport).
    Provider,
    /// A circuit breaker is open.
    BreakerOpen,
    RateLimited,
    Timeout,
    /// Anything else (a bad argument, a permanent downstream error): never retried.
    Permanent,
}

impl FailureKind {
    pub fn is_transient(self) -> bool {
        !matches!(self, Self::Permanent)
    }
}

impl FunctionError {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Permanent, message)
    }
}

/// A function node's body. One instance serves every run concurrently: it must be safe to
/// share, and — since resuming from an earlier checkpoint calls it again with the same input —
/// idempotent where it has side effects.
#[async_trait::async_trait]
pub trait WorkflowFunction: Send + Sync + 'static {
    async fn call(&self, call: FunctionCall<'_>) -> Result<FunctionOutput, FunctionError>;
}

/// A function from a plain closure over the node's input text.
pub struct TextFunction<F>(pub F);

#[async_trait::async_trait]
impl<F> WorkflowFunction for TextFunction<F>
where
    F: Fn(&str) -> Result<String, FunctionError> + Send + Sync + 'static,
{
    async fn call(&self, call: FunctionCall<'_>) -> Result<FunctionOutput, FunctionError> {
        (self.0)(call.input()).map(|text| FunctionOutput::Messages(vec![text]))
    }
}

/// Retries of a transient failure, inside the node's one call: a node that succeeds on its
/// third attempt is still one super-step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    pub initial_delay: Duration,
    pub backoff_multiplier: f64,
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` (after `attempt` failures).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = self.backoff_multiplier.max(1.0).powi(attempt.saturating_sub(1) as i32);
        self.initial_delay.mul_f64(factor.min(1e6))
    }
}

/// One registered function.
#[derive(Clone)]
pub struct Registered {
    pub description: String,
    pub function: Arc<dyn WorkflowFunction>,
    pub retry: Option<RetryPolicy>,
}

/// `GET /api/workflows/functions`: what a definition's function nodes may name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FunctionInfo {
    pub name: String,
    pub description: String,
    /// Attempts a transient failure gets (1 without a retry policy).
    pub max_attempts: u32,
}

/// The name of the built-in function that asks a person: it raises a request with its input
/// as the prompt, and answers with the person's reply.
pub const HUMAN_INPUT: &str = "human-input";

/// The functions registered at start-up, by name.
#[derive(Clone)]
pub struct FunctionRegistry {
    by_name: BTreeMap<String, Registered>,
}

impl Default for FunctionRegistry {
    /// The built-in [`HUMAN_INPUT`] function only.
    fn default() -> Self {
        let mut by_name = BTreeMap::new();
        by_name.insert(
            HUMAN_INPUT.to_owned(),
            Registered {
                description: "Asks a person: the run waits (AwaitingInput) with its input as the question, and goes on with the answer.".into(),
                function: Arc::new(HumanInput),
                retry: None,
            },
        );
        Self { by_name }
    }
}

impl FunctionRegistry {
    /// Registers `function` under `name` (a workflow name's rules); a name taken or invalid,
    /// or an empty description, is refused.
    pub fn insert(&mut self, name: &str, registered: Registered) -> Result<(), String> {
        crate::names::WorkflowName::parse(name).map_err(|e| format!("Workflow function '{name}': {}", e.0))?;
        if registered.description.trim().is_empty() {
            return Err(format!("Workflow function '{name}' needs a description."));
        }
        if registered.retry.is_some_and(|r| r.max_attempts == 0) {
            return Err(format!("Workflow function '{name}': a retry policy makes at least one attempt."));
        }
        if self.by_name.contains_key(name) {
            return Err(format!("Two workflow functions are named '{name}'."));
        }
        self.by_name.insert(name.to_owned(), registered);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Registered> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> std::collections::BTreeSet<String> {
        self.by_name.keys().cloned().collect()
    }

    pub fn list(&self) -> Vec<FunctionInfo> {
        self.by_name
            .iter()
            .map(|(name, r)| FunctionInfo {
                name: name.clone(),
                description: r.description.clone(),
                max_attempts: r.retry.map_or(1, |p| p.max_attempts),
            })
            .collect()
    }
}

struct HumanInput;

#[async_trait::async_trait]
impl WorkflowFunction for HumanInput {
    async fn call(&self, call: FunctionCall<'_>) -> Result<FunctionOutput, FunctionError> {
        Ok(match call.answer {
            Some(answer) => FunctionOutput::Messages(vec![answer.to_owned()]),
            None => FunctionOutput::Ask { prompt: call.input().to_owned() },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_and_registration_refuses_what_cannot_work() {
        let p = RetryPolicy { max_attempts: 3, initial_delay: Duration::from_secs(1), backoff_multiplier: 2.0 };
        assert_eq!(
            (p.delay(1), p.delay(2), p.delay(3)),
            (Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(4))
        );
        let mut r = FunctionRegistry::default();
        let f = |d: &str| Registered {
            description: d.into(),
            function: Arc::new(TextFunction(|s: &str| Ok(s.to_owned()))),
            retry: None,
        };
        assert!(r.insert("echo", f("Echoes.")).is_ok());
        assert!(r.insert("echo", f("Again.")).is_err());
        assert!(r.insert(HUMAN_INPUT, f("Mine.")).is_err());
        assert!(r.insert("Bad Name", f("x")).is_err());
        assert!(r.insert("quiet", f(" ")).is_err());
        assert_eq!(r.list().iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["echo", HUMAN_INPUT]);
    }
}
