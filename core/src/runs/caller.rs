//! What an OpenAI-compatible caller adds to one run of an agent ([`CallerAdditions`]): its
//! own tools, which tool the model must call, whether calls may run side by side, and the
//! output format. The agent's definition says what it takes (`openAi`, [`OpenAiSettings`]);
//! [`apply`] checks the additions against it and returns the agent as this run sees it, or
//! the [`CallerRefusal`] naming the field at fault.
//!
//! A caller's tools join as client-side tools: declared by the caller, never executed here,
//! handed back as calls and answered by the caller's next request, recorded like the agent's
//! own client-side tools. They never shadow a server-side tool, pass the same name and
//! schema rules and count against the same limit; a tool the agent already declares
//! client-side is the agent's declaration, whatever the setting.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::compiler::CompiledAgent;
use crate::definition::{CallerResponseFormat, CallerTools, MAX_TOOLS, OpenAiSettings, ResponseFormat};
use crate::model::{ProviderRegistry, ToolChoice};
use crate::tools::ToolRegistration;

/// A tool the caller declared (`tools[i]`; `field` is where it was, for an error).
#[derive(Debug, Clone, PartialEq)]
pub struct CallerTool {
    pub field: String,
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON Schema; none means the tool takes no arguments.
    pub parameters: Option<Value>,
}

/// What the caller adds to this run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallerAdditions {
    pub tools: Vec<CallerTool>,
    pub tool_choice: ToolChoice,
    /// Where `tool_choice` was (`tool_choice`, `tool_choice.name` …), for an error.
    pub tool_choice_field: &'static str,
    pub parallel_tool_calls: Option<bool>,
    /// The caller's output format; `None` or text leaves the agent's own.
    pub response_format: Option<ResponseFormat>,
    pub response_format_field: &'static str,
}

impl CallerAdditions {
    /// Whether the run is the agent's own, unchanged.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
            && self.tool_choice == ToolChoice::Auto
            && self.parallel_tool_calls.is_none()
            && !matches!(self.response_format, Some(ResponseFormat::Json | ResponseFormat::JsonSchema { .. }))
    }
}

/// Why the caller's additions were refused: `field` names the request field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerRefusal {
    pub field: String,
    pub message: String,
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> CallerRefusal {
    CallerRefusal { field: field.into(), message: message.into() }
}

/// `agent` as this run sees it with the caller's `additions`, or why they are refused.
pub fn apply(
    agent: &CompiledAgent,
    additions: &CallerAdditions,
    providers: &ProviderRegistry,
) -> Result<CompiledAgent, CallerRefusal> {
    let settings: OpenAiSettings = agent.definition.open_ai.unwrap_or_default();
    let name = crate::names::truncate_for_message(&agent.name);
    let mut extra = Vec::new();
    let mut seen = BTreeSet::new();
    for tool in &additions.tools {
        let field = format!("{}.name", tool.field);
        if !seen.insert(tool.name.as_str()) {
            return Err(refuse(field, format!("The tool '{}' is declared twice.", shown(&tool.name))));
        }
        match agent.tool(&tool.name) {
            // The agent declares it client-side already: its declaration stands.
            Some(own) if own.is_client() => continue,
            Some(_) => {
                return Err(refuse(
                    field,
                    format!(
                        "'{}' is one of agent '{name}''s own server-side tools; a caller's tool cannot take its name.",
                        shown(&tool.name)
                    ),
                ));
            }
            None => {}
        }
        if settings.caller_tools != CallerTools::ClientSide {
            return Err(refuse(
                "tools",
                format!(
                    "Agent '{name}' does not take a caller's tools: '{}' is not one of its client-side tools (its definition's openAi.callerTools is Refuse).",
                    shown(&tool.name)
                ),
            ));
        }
        // No parameters, or `{}`, is a tool that takes none.
        let schema = match &tool.parameters {
            Some(p) if p.as_object().is_some_and(|o| !o.is_empty()) => p.clone(),
            _ => json!({"type": "object", "properties": {}}),
        };
        let description = tool.description.as_deref().map(str::trim).filter(|d| !d.is_empty()).unwrap_or(&tool.name);
        let registration = ToolRegistration::client(&tool.name, description, schema).map_err(|e| {
            let at = if e.0.contains("schema") { format!("{}.parameters", tool.field) } else { field.clone() };
            refuse(at, e.0)
        })?;
        extra.push(Arc::new(registration));
    }
    if agent.tools.len() + extra.len() > MAX_TOOLS {
        return Err(refuse(
            "tools",
            format!("At most {MAX_TOOLS} tools are allowed, the agent's own and the caller's together."),
        ));
    }
    let mut run = if extra.is_empty() { agent.with_tools(Vec::new()) } else { agent.with_tools(extra) };

    match &additions.tool_choice {
        ToolChoice::Function(wanted) if run.tool(wanted).is_none() => {
            return Err(refuse(
                additions.tool_choice_field,
                format!("'tool_choice' names '{}', which is not one of this run's tools.", shown(wanted)),
            ));
        }
        ToolChoice::Required | ToolChoice::Function(_) if run.tools.is_empty() => {
            return Err(refuse(
                additions.tool_choice_field,
                "'tool_choice' asks for a tool call, but this run has no tools.",
            ));
        }
        _ => {}
    }
    run.tool_choice = additions.tool_choice.clone();

    let structured =
        matches!(additions.response_format, Some(ResponseFormat::Json | ResponseFormat::JsonSchema { .. }));
    if additions.parallel_tool_calls.is_some() || structured {
        let mut definition = (*run.definition).clone();
        if let Some(parallel) = additions.parallel_tool_calls {
            definition.model.allow_concurrent_tool_calls = parallel;
        }
        if structured {
            if settings.caller_response_format != CallerResponseFormat::Allow {
                return Err(refuse(
                    additions.response_format_field,
                    format!(
                        "Agent '{name}' fixes its own output format (its definition's openAi.callerResponseFormat is Refuse); leave the response format out."
                    ),
                ));
            }
            definition.model.response_format.clone_from(&additions.response_format);
            let problem = definition
                .check_shape()
                .into_iter()
                .chain(crate::compiler::structured_output_problem("model", &definition.model, providers))
                .find(|p| p.field.starts_with("model.responseFormat") || p.field == "model.maxRepairAttempts");
            if let Some(p) = problem {
                let at = p.field.strip_prefix("model.responseFormat").unwrap_or_default();
                let at = match at.trim_start_matches('.') {
                    "" => additions.response_format_field.to_owned(),
                    rest => format!("{}.{rest}", additions.response_format_field),
                };
                return Err(refuse(at, p.message));
            }
            run.structured = crate::structured::StructuredCheck::of(definition.model.response_format.as_ref())
                .map_err(|e| refuse(additions.response_format_field, e))?
                .map(Arc::new);
        }
        run.definition = Arc::new(definition);
    }
    Ok(run)
}

fn shown(name: &str) -> String {
    crate::names::truncate_for_message(name)
}
