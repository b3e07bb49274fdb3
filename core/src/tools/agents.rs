//! The tool the compiler generates for each of an agent's `callableAgentNames`: calling it
//! starts a child run of that agent and answers with the child's final text. The body only
//! hands the call to the run's [`ChildRuns`] (`crate::runs::children`), which owns the tree's
//! checks, the child's run and the wait limits.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::effect::ToolEffect;
use super::{RegistrationError, Tool, ToolContext, ToolError, ToolOutput, ToolRegistration};
use crate::definition::{AgentDefinition, MAX_SUB_AGENT_SECONDS};

/// The generated tool's name prefix: `ask_{agent}` (an agent name's `.` becomes `_`).
pub const PREFIX: &str = "ask_";

/// Longest tool name a model provider accepts.
pub const MAX_TOOL_NAME: usize = 64;

/// Starts child runs for a run's generated agent tools.
#[async_trait::async_trait]
pub trait ChildRuns: Send + Sync {
    /// Runs `agent` on `task` as a child of the run `ctx` serves; its answer, or a readable
    /// refusal or failure.
    async fn call(&self, agent: &str, task: String, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// The generated tool's name for callable agent `agent`.
pub fn tool_name(agent: &str) -> String {
    format!("{PREFIX}{}", agent.replace('.', "_"))
}

/// The generated tool for callable agent `callee`. Its effect is the strongest of the
/// callee's own tools (`External` when one is unknown here or the callee calls agents too),
/// so continuation after a crash repeats a child only when repeating its tools is safe.
pub fn registration(
    callee: &AgentDefinition,
    tools: &super::ToolRegistry,
) -> Result<ToolRegistration, RegistrationError> {
    let description = callee
        .description
        .clone()
        .or_else(|| callee.display_name.clone())
        .unwrap_or_else(|| format!("The agent '{}'.", callee.name));
    let schema = json!({
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "description": "What the agent is to do, in full: it sees nothing else of this conversation."}
        },
        "required": ["task"],
        "additionalProperties": false
    });
    let effect = if callee.callable_agent_names.is_empty() {
        callee
            .tool_names
            .iter()
            .map(|n| tools.get(n).map_or(ToolEffect::External, |t| t.effect))
            .max_by_key(|e| rank(*e))
            .unwrap_or(ToolEffect::Read)
    } else {
        ToolEffect::External
    };
    let body = SubAgentTool { agent: callee.name.clone() };
    Ok(ToolRegistration::new(&tool_name(&callee.name), &format!("Ask another agent: {description}"), schema, body)?
        .effect(effect)
        // The child's own wait limits stop it first; this is only a backstop.
        .timeout(Duration::from_secs(u64::from(MAX_SUB_AGENT_SECONDS) + 60))
        .source("agent"))
}

fn rank(e: ToolEffect) -> u8 {
    match e {
        ToolEffect::Read => 0,
        ToolEffect::Write => 1,
        ToolEffect::Destructive => 2,
        ToolEffect::External => 3,
    }
}

/// The body of a generated agent tool.
pub struct SubAgentTool {
    agent: String,
}

#[async_trait::async_trait]
impl Tool for SubAgentTool {
    async fn call(&self, arguments: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let task = arguments.get("task").and_then(Value::as_str).unwrap_or_default().to_owned();
        let Some(children) = ctx.children.0.clone() else {
            return Err(ToolError::message("Agents cannot be called from here."));
        };
        children.call(&self.agent, task, &ctx).await
    }
}

/// A run's [`ChildRuns`], when it has one.
#[derive(Clone, Default)]
pub struct Children(pub Option<Arc<dyn ChildRuns>>);

impl std::fmt::Debug for Children {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Children(Some)" } else { "Children(None)" })
    }
}
