//! The compiler: a definition plus everything its names point at becomes a
//! [`CompiledAgent`], or a report naming every problem.
//!
//! Name resolution needs the catalog (stored definitions are per tenant), so the
//! [`crate::catalog::Catalog`] gathers a [`Resolution`] first and the functions here are
//! pure: [`check`] (what `validate` and the save path run), [`resolve_culture`],
//! [`bind_parameters`] and [`compile`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use utoipa::ToSchema;

use crate::definition::{AgentDefinition, ModelBinding};
use crate::model::{ModelProvider, ProviderRegistry, ToolChoice, ToolSpec};
use crate::report::{Problem, ProblemCode};
use crate::tools::{ToolRegistration, ToolRegistry};

/// What the catalog found for a definition's outward names.
#[derive(Debug, Default, Clone)]
pub struct Resolution {
    /// The shared instructions block, when the definition names one and it exists.
    pub shared_block: Option<Arc<AgentDefinition>>,
    /// Callable agent names that do not resolve.
    pub missing_callable_agents: Vec<String>,
    /// A callable-agent path that leads back to this definition (`a → b → a`).
    pub callable_cycle: Option<Vec<String>>,
    /// The callable agents that resolve, for their generated tools.
    pub callables: Vec<Arc<AgentDefinition>>,
    /// The named skills that resolve, in the definition's order.
    pub skills: Vec<crate::skills::ResolvedSkill>,
    /// Skill names that resolve to no code skill and no stored skill of the tenant.
    pub missing_skills: Vec<String>,
    /// `toolNames` that name a tool of one of the tenant's MCP servers (`{server}_{tool}`, and
    /// no code tool of that name), each with its registration when the server offers it now.
    pub mcp_tools: BTreeMap<String, Option<Arc<ToolRegistration>>>,
}

/// Every problem the definition has: shape, then each name that does not resolve.
pub fn check(
    def: &AgentDefinition,
    resolution: &Resolution,
    providers: &ProviderRegistry,
    tools: &ToolRegistry,
) -> Vec<Problem> {
    let mut problems = def.check_shape();

    for (path, binding) in def.model.chain() {
        check_provider(&mut problems, providers, &path, &binding);
        problems.extend(structured_output_problem(&path, &binding, providers));
    }

    problems.extend(crate::placeholders::problems(def, resolution.shared_block.as_deref()));

    problems.extend(skill_problems(def, resolution));

    for (i, name) in def.tool_names.iter().enumerate() {
        if name == crate::skills::tools::RUN_SKILL_SCRIPT && tools.get(name).is_none() {
            problems.push(Problem::new(
                ProblemCode::SkillScriptsUnsupported,
                format!("toolNames[{i}]"),
                crate::skills::SCRIPTS_UNSUPPORTED,
            ));
        } else if crate::names::ToolName::parse(name).is_ok()
            && tools.get(name).is_none()
            && !resolution.mcp_tools.contains_key(name)
        {
            problems.push(Problem::new(
                ProblemCode::UnknownTool,
                format!("toolNames[{i}]"),
                format!("No tool named '{name}' is registered."),
            ));
        }
    }

    // Each callable agent is offered to the model as a generated tool (`ask_{name}`).
    let mut generated = std::collections::BTreeSet::new();
    for (i, name) in def.callable_agent_names.iter().enumerate() {
        let tool = crate::tools::agents::tool_name(name);
        if crate::names::AgentName::parse(name).is_err() {
            continue;
        }
        if crate::names::ToolName::parse(&tool).is_err() {
            problems.push(Problem::new(
                ProblemCode::InvalidName,
                format!("callableAgentNames[{i}]"),
                format!(
                    "Agent '{name}' cannot be offered as a tool: its tool name is longer than {} characters.",
                    crate::tools::agents::MAX_TOOL_NAME
                ),
            ));
        } else if def.tool_names.contains(&tool) || !generated.insert(tool.clone()) {
            problems.push(Problem::new(
                ProblemCode::Duplicate,
                format!("callableAgentNames[{i}]"),
                format!("Agent '{name}' is offered as the tool '{tool}', which another tool or agent already is."),
            ));
        }
    }

    if let Some(shared) = &def.shared_instructions_name
        && crate::names::AgentName::parse(shared).is_ok()
        && shared != &def.name
    {
        match &resolution.shared_block {
            None => problems.push(Problem::new(
                ProblemCode::UnknownSharedInstructions,
                "sharedInstructionsName",
                format!("No definition named '{shared}' exists to use as a shared instructions block."),
            )),
            Some(block) if block.shared_instructions_name.is_some() => problems.push(Problem::new(
                ProblemCode::NestedSharedInstructions,
                "sharedInstructionsName",
                format!(
                    "'{shared}' itself references a shared instructions block; a block cannot reference another block."
                ),
            )),
            Some(_) => {}
        }
    }

    for name in &resolution.missing_callable_agents {
        let index = def.callable_agent_names.iter().position(|n| n == name).unwrap_or(0);
        problems.push(Problem::new(
            ProblemCode::UnknownCallableAgent,
            format!("callableAgentNames[{index}]"),
            format!("No agent named '{name}' exists."),
        ));
    }
    if let Some(path) = &resolution.callable_cycle {
        problems.push(Problem::new(
            ProblemCode::CallableAgentCycle,
            "callableAgentNames",
            format!("Callable agents form a cycle: {}.", path.join(" → ")),
        ));
    }
    problems
}

/// The skills' problems: each named skill resolves ("the skill was not found" otherwise),
/// and the two skill tools take no name a listed tool already has.
fn skill_problems(def: &AgentDefinition, resolution: &Resolution) -> Vec<Problem> {
    let mut problems = Vec::new();
    for name in &resolution.missing_skills {
        let index = def.skill_names.iter().position(|n| n == name).unwrap_or(0);
        problems.push(Problem::new(
            ProblemCode::UnknownSkill,
            format!("skillNames[{index}]"),
            format!("The skill was not found: no skill named '{name}' exists."),
        ));
    }
    if !def.skill_names.is_empty() {
        for tool in [crate::skills::tools::LOAD_SKILL, crate::skills::tools::READ_SKILL_RESOURCE] {
            if let Some(i) = def.tool_names.iter().position(|t| t == tool) {
                problems.push(Problem::new(
                    ProblemCode::Duplicate,
                    format!("toolNames[{i}]"),
                    format!("'{tool}' is the skill tool an agent with skillNames gets; it cannot also be listed."),
                ));
            }
        }
    }
    problems
}

/// The one enforced flag of the model catalog: JSON output asked of a model the catalog
/// lists with `supportsStructuredOutput: false` — the primary's or a fallback link's, which
/// answers in the same format. A model the catalog does not list is not checked: the catalog
/// is metadata, not permission.
pub(crate) fn structured_output_problem(
    path: &str,
    binding: &ModelBinding,
    providers: &ProviderRegistry,
) -> Option<Problem> {
    use crate::definition::ResponseFormat;
    if !matches!(binding.response_format, Some(ResponseFormat::Json | ResponseFormat::JsonSchema { .. })) {
        return None;
    }
    let model = providers.catalog().find(&binding.provider, &binding.model)?;
    let field = if path == "model" { "model.responseFormat".to_owned() } else { format!("{path}.model") };
    (model.supports_structured_output == Some(false)).then(|| {
        Problem::new(
            ProblemCode::StructuredOutputUnsupported,
            field,
            format!(
                "The model catalog says '{}' of provider '{}' does not support structured output; ask for \"text\" or choose another model.",
                crate::names::truncate_for_message(&binding.model),
                crate::names::truncate_for_message(&binding.provider)
            ),
        )
    })
}

/// Picks the instructions for `culture`: the exact tag, then each parent subtag
/// (`tr-TR` → `tr`), then the default. Returns the text and the culture key that matched
/// (`None` for the default). An unmatched culture never fails; it falls back.
pub fn resolve_culture<'a>(def: &'a AgentDefinition, culture: Option<&str>) -> (Option<&'a str>, Option<String>) {
    if let Some(requested) = culture.map(str::trim).filter(|c| !c.is_empty()) {
        let mut candidate = requested;
        loop {
            if let Some((key, text)) =
                def.instructions_by_culture.iter().find(|(k, _)| k.eq_ignore_ascii_case(candidate))
            {
                return (Some(text.as_str()), Some(key.clone()));
            }
            match candidate.rfind('-') {
                Some(i) => candidate = &candidate[..i],
                None => break,
            }
        }
    }
    (def.instructions.as_deref(), None)
}

/// A run's parameter values that do not fit the agent's declared parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("invalid run parameters")]
pub struct ParameterError {
    /// Required parameters with no value and no default.
    pub missing: Vec<String>,
    /// Values for names the agent does not declare.
    pub unknown: Vec<String>,
}

impl ParameterError {
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("Missing required parameter(s): {}.", self.missing.join(", ")));
        }
        if !self.unknown.is_empty() {
            parts.push(format!("Unknown parameter(s): {}.", self.unknown.join(", ")));
        }
        parts.join(" ")
    }
}

/// Checks `values` against the declared parameters and substitutes `{{name}}` in `text`
/// in one pass: a substituted value is never scanned again. A placeholder written as a
/// whole JSON string value (`"{{name}}"`) gets its value JSON-escaped; anywhere else the
/// value goes in as-is. Placeholders that name no declared parameter stay literal text.
/// With no parameters declared, the text is returned untouched.
pub fn bind_parameters(
    text: &str,
    def: &AgentDefinition,
    values: &BTreeMap<String, String>,
) -> Result<String, ParameterError> {
    let declared: BTreeSet<&str> = def.parameters.iter().map(|p| p.name.as_str()).collect();
    let unknown: Vec<String> = values.keys().filter(|k| !declared.contains(k.as_str())).cloned().collect();
    let mut bound: BTreeMap<&str, &str> = BTreeMap::new();
    let mut missing = Vec::new();
    for p in &def.parameters {
        match values.get(&p.name).map(String::as_str).or(p.default_value.as_deref()) {
            Some(v) => {
                bound.insert(p.name.as_str(), v);
            }
            None if p.required => missing.push(p.name.clone()),
            None => {
                bound.insert(p.name.as_str(), "");
            }
        }
    }
    if !missing.is_empty() || !unknown.is_empty() {
        return Err(ParameterError { missing, unknown });
    }
    if def.parameters.is_empty() {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else { break };
        let name = &after[..close];
        match bound.get(name) {
            Some(value) => {
                let before = &rest[..open];
                let quoted = before.ends_with('"') && after[close + 2..].starts_with('"');
                out.push_str(before);
                if quoted {
                    let escaped = serde_json::to_string(value).unwrap_or_default();
                    out.push_str(&escaped[1..escaped.len().saturating_sub(1).max(1)]);
                } else {
                    out.push_str(value);
                }
                rest = &after[close + 2..];
            }
            None => {
                // Not ours: keep "{{" literally and continue after it.
                out.push_str(&rest[..open + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// A definition ready to run.
pub struct CompiledAgent {
    pub name: String,
    /// The stored version; `None` for code-defined agents.
    pub version: Option<u32>,
    pub definition: Arc<AgentDefinition>,
    /// The final system text: shared block, culture, parameters applied.
    pub instructions: Option<String>,
    /// The culture key whose instructions were used (`None`: the default).
    pub culture: Option<String>,
    /// The primary binding's provider (the binding is `definition.model`).
    pub provider: Arc<dyn ModelProvider>,
    /// The binding's fallback chain, in order.
    pub fallbacks: Vec<ModelLink>,
    /// What a JSON `responseFormat` holds the answers to (none for text).
    pub structured: Option<Arc<crate::structured::StructuredCheck>>,
    pub tools: Vec<Arc<ToolRegistration>>,
    pub tool_specs: Arc<[ToolSpec]>,
    pub max_iterations: u32,
    /// Which tool the turn's first model call must call (an OpenAI client's `tool_choice`);
    /// later calls of the turn decide for themselves, except that `None` holds throughout.
    pub tool_choice: ToolChoice,
}

/// A fallback link, compiled: its provider and the binding a call through it uses.
#[derive(Clone)]
pub struct ModelLink {
    pub provider: Arc<dyn ModelProvider>,
    pub binding: Arc<ModelBinding>,
}

impl std::fmt::Debug for CompiledAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledAgent")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("culture", &self.culture)
            .finish_non_exhaustive()
    }
}

impl CompiledAgent {
    /// This agent offered no tools (a replay in `NoTools` mode): the model can only answer.
    pub fn without_tools(&self) -> CompiledAgent {
        CompiledAgent { tools: Vec::new(), tool_specs: Arc::from(Vec::new()), ..self.clone_parts() }
    }

    fn clone_parts(&self) -> CompiledAgent {
        CompiledAgent {
            name: self.name.clone(),
            version: self.version,
            definition: self.definition.clone(),
            instructions: self.instructions.clone(),
            culture: self.culture.clone(),
            provider: self.provider.clone(),
            fallbacks: self.fallbacks.clone(),
            structured: self.structured.clone(),
            tools: self.tools.clone(),
            tool_specs: self.tool_specs.clone(),
            max_iterations: self.max_iterations,
            tool_choice: self.tool_choice.clone(),
        }
    }

    /// This agent with `extra` appended to its instructions, for one run (an OpenAI client's
    /// system text).
    pub fn with_extra_instructions(&self, extra: &str) -> CompiledAgent {
        let instructions = match &self.instructions {
            Some(own) => format!("{own}\n\n{extra}"),
            None => extra.to_owned(),
        };
        CompiledAgent { instructions: Some(instructions), ..self.clone_parts() }
    }

    /// This agent with `extra` tools offered besides its own, for one run (a `Handoff`
    /// workflow's hand-off tools).
    pub fn with_tools(&self, extra: Vec<Arc<ToolRegistration>>) -> CompiledAgent {
        let mut tools = self.tools.clone();
        tools.extend(extra);
        CompiledAgent { tool_specs: specs(&tools), tools, ..self.clone_parts() }
    }

    pub fn tool(&self, name: &str) -> Option<&Arc<ToolRegistration>> {
        self.tools.iter().find(|t| t.name() == name)
    }
}

/// What the model is told of `tools`.
fn specs(tools: &[Arc<ToolRegistration>]) -> Arc<[ToolSpec]> {
    tools
        .iter()
        .map(|t| ToolSpec {
            name: t.name().to_owned(),
            description: t.description().to_owned(),
            parameters: t.schema().clone(),
        })
        .collect()
}

/// Compiles a definition that passed [`check`]. `parameters` is `Some` for a run that
/// supplied (or needs defaults for) parameter values.
pub fn compile(
    def: Arc<AgentDefinition>,
    version: Option<u32>,
    resolution: &Resolution,
    culture: Option<&str>,
    parameters: &BTreeMap<String, String>,
    providers: &ProviderRegistry,
    tools: &ToolRegistry,
) -> Result<CompiledAgent, CompileFailure> {
    let problems = check(&def, resolution, providers, tools);
    if !problems.is_empty() {
        return Err(CompileFailure::Invalid(problems));
    }
    let (own, culture_key) = resolve_culture(&def, culture);
    let block = resolution.shared_block.as_ref().and_then(|b| resolve_culture(b, culture).0);
    let combined = match (block, own) {
        (Some(b), Some(o)) if !b.is_empty() && !o.is_empty() => Some(format!("{b}\n\n{o}")),
        (Some(b), _) if !b.is_empty() => Some(b.to_owned()),
        (_, Some(o)) => Some(o.to_owned()),
        _ => None,
    };
    let mut instructions = match combined {
        Some(text) => Some(bind_parameters(&text, &def, parameters).map_err(CompileFailure::Parameters)?),
        None => {
            bind_parameters("", &def, parameters).map_err(CompileFailure::Parameters)?;
            None
        }
    };
    // The skills' names and descriptions join the instructions after the parameters are
    // bound: a skill's text is not the definition's, and no placeholder of it is filled.
    let skills: Vec<Arc<crate::skills::SkillDefinition>> =
        resolution.skills.iter().map(|s| s.definition.clone()).collect();
    if !skills.is_empty() {
        let catalog = crate::skills::tools::catalog_text(&skills);
        instructions = Some(match instructions {
            Some(own) if !own.is_empty() => format!("{own}\n\n{catalog}"),
            _ => catalog,
        });
    }
    let unknown = |path: &str| {
        CompileFailure::Invalid(vec![Problem::new(ProblemCode::UnknownProvider, path, "unknown provider")])
    };
    let provider = providers.get(&def.model.provider).cloned().ok_or_else(|| unknown("model.provider"))?;
    // The schema was checked with the definition; a failure here is the same problem.
    let structured = crate::structured::StructuredCheck::of(def.model.response_format.as_ref())
        .map_err(|e| {
            CompileFailure::Invalid(vec![Problem::new(
                ProblemCode::InvalidResponseFormat,
                "model.responseFormat.schema",
                e,
            )])
        })?
        .map(Arc::new);
    let mut fallbacks = Vec::with_capacity(def.model.fallbacks.len());
    for (i, link) in def.model.fallbacks.iter().enumerate() {
        let binding = def.model.for_link(link);
        let provider = providers
            .get(&binding.provider)
            .cloned()
            .ok_or_else(|| unknown(&format!("model.fallbacks[{i}].provider")))?;
        fallbacks.push(ModelLink { provider, binding: Arc::new(binding) });
    }
    let mut regs = Vec::with_capacity(def.tool_names.len() + resolution.callables.len());
    for name in &def.tool_names {
        // A code tool wins its name; an MCP tool its server does not offer now is left out
        // (the server's record carries the warning).
        if let Some(t) = tools.get(name).or_else(|| resolution.mcp_tools.get(name).and_then(Option::as_ref)) {
            regs.push(t.clone());
        }
    }
    for callee in &resolution.callables {
        regs.push(Arc::new(agent_tool(callee, tools).map_err(|p| CompileFailure::Invalid(vec![p]))?));
    }
    if !skills.is_empty() {
        let read_freely = def.skills.is_some_and(|s| s.disable_read_approval);
        let generated = crate::skills::tools::registrations(&skills, read_freely)
            .map_err(|e| CompileFailure::Invalid(vec![Problem::new(ProblemCode::InvalidName, "skillNames", e.0)]))?;
        regs.extend(generated.into_iter().map(Arc::new));
    }
    let tool_specs = specs(&regs);
    Ok(CompiledAgent {
        name: def.name.clone(),
        version,
        max_iterations: def.max_iterations(),
        definition: def,
        instructions,
        culture: culture_key,
        provider,
        fallbacks,
        structured,
        tools: regs,
        tool_specs,
        tool_choice: ToolChoice::Auto,
    })
}

/// One link of the binding's chain (its fields under `path`): the provider is registered, and
/// it knows and accepts the link's settings.
fn check_provider(problems: &mut Vec<Problem>, providers: &ProviderRegistry, path: &str, binding: &ModelBinding) {
    let Some(provider) = providers.get(&binding.provider) else {
        if !binding.provider.trim().is_empty() {
            let known: Vec<&str> = providers.names().collect();
            problems.push(Problem::new(
                ProblemCode::UnknownProvider,
                format!("{path}.provider"),
                format!(
                    "No model provider named '{}' is registered (registered: {}).",
                    crate::names::truncate_for_message(&binding.provider),
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
            ));
        }
        return;
    };
    let known = provider.known_settings();
    for key in binding.provider_settings.keys() {
        if !known.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            problems.push(Problem::new(
                ProblemCode::UnknownProviderSetting,
                format!("{path}.providerSettings.{key}"),
                format!(
                    "Provider '{}' does not know the setting '{}'{}.",
                    provider.name(),
                    crate::names::truncate_for_message(key),
                    if known.is_empty() { String::new() } else { format!(" (known: {})", known.join(", ")) }
                ),
            ));
        }
    }
    // A provider names its fields from `model.`; a link's live under its own path.
    for (field, message) in provider.check_binding(binding) {
        let field = match field.strip_prefix("model") {
            Some(rest) if path != "model" => format!("{path}{rest}"),
            _ => field,
        };
        problems.push(Problem::new(ProblemCode::InvalidProviderSetting, field, message));
    }
}

/// The generated tool of a callable agent ([`crate::tools::agents`]).
fn agent_tool(callee: &AgentDefinition, tools: &ToolRegistry) -> Result<ToolRegistration, Problem> {
    crate::tools::agents::registration(callee, tools).map_err(|e| {
        Problem::new(
            ProblemCode::InvalidName,
            "callableAgentNames",
            format!("Agent '{}' cannot be offered as a tool: {}", callee.name, e.0),
        )
    })
}

/// Why compilation failed.
#[derive(Debug, Clone, PartialEq)]
pub enum CompileFailure {
    Invalid(Vec<Problem>),
    Parameters(ParameterError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::{AgentParameter, ParameterKind};

    fn def_with(params: &[(&str, bool, Option<&str>)], instructions: &str) -> AgentDefinition {
        let mut d = AgentDefinition::new("a", "scripted", "m").with_instructions(instructions);
        d.parameters = params
            .iter()
            .map(|(n, req, def)| AgentParameter {
                name: (*n).to_owned(),
                kind: ParameterKind::Text,
                required: *req,
                default_value: def.map(str::to_owned),
                description: None,
            })
            .collect();
        d
    }

    fn vals(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn substitution_is_single_pass_and_defaults_apply() {
        let d = def_with(
            &[("customer", true, None), ("tone", false, Some("formal"))],
            "You help {{customer}}. Use a {{tone}} tone.",
        );
        let out = bind_parameters(d.instructions.as_deref().unwrap(), &d, &vals(&[("customer", "{{tone}}")])).unwrap();
        assert_eq!(out, "You help {{tone}}. Use a formal tone.");
    }

    #[test]
    fn a_placeholder_that_is_a_whole_json_string_value_is_escaped() {
        let d = def_with(&[("customer", true, None)], r#"Context: {"customer": "{{customer}}"} and {{customer}}"#);
        let out = bind_parameters(
            d.instructions.as_deref().unwrap(),
            &d,
            &vals(&[("customer", "Ada \"the\" \\ Lovelace\n")]),
        )
        .unwrap();
        assert_eq!(out, "Context: {\"customer\": \"Ada \\\"the\\\" \\\\ Lovelace\\n\"} and Ada \"the\" \\ Lovelace\n");
        let json_part = &out["Context: ".len()..out.find(" and").unwrap()];
        let v: serde_json::Value = serde_json::from_str(json_part).unwrap();
        assert_eq!(v["customer"], "Ada \"the\" \\ Lovelace\n");
    }

    #[test]
    fn missing_required_and_unknown_names_are_both_reported() {
        let d = def_with(&[("customer", true, None)], "{{customer}}");
        let err = bind_parameters("{{customer}}", &d, &vals(&[("nope", "x")])).unwrap_err();
        assert_eq!(err.missing, vec!["customer"]);
        assert_eq!(err.unknown, vec!["nope"]);
        assert!(err.describe().contains("customer"));
    }

    #[test]
    fn without_parameters_braces_stay_plain_text() {
        let d = def_with(&[], "Use {{this}} and {{a.b}} literally.");
        assert_eq!(
            bind_parameters("Use {{this}} and {{a.b}} literally.", &d, &BTreeMap::new()).unwrap(),
            "Use {{this}} and {{a.b}} literally."
        );
        // A value for an agent that declares none is rejected, not dropped.
        assert!(bind_parameters("x", &d, &vals(&[("x", "1")])).is_err());
    }

    #[test]
    fn undeclared_placeholders_and_field_access_stay_literal() {
        let d = def_with(&[("a", false, Some("1"))], "{{a}} {{a.b}} {{b}} {{ a }} {{a");
        assert_eq!(
            bind_parameters(d.instructions.as_deref().unwrap(), &d, &BTreeMap::new()).unwrap(),
            "1 {{a.b}} {{b}} {{ a }} {{a"
        );
    }

    #[test]
    fn culture_resolution_is_exact_then_parent_then_default() {
        let mut d = AgentDefinition::new("a", "scripted", "m").with_instructions("default");
        d.instructions_by_culture.insert("tr".into(), "turkish".into());
        d.instructions_by_culture.insert("pt-BR".into(), "brazilian".into());
        assert_eq!(resolve_culture(&d, Some("tr")), (Some("turkish"), Some("tr".into())));
        assert_eq!(resolve_culture(&d, Some("tr-TR")), (Some("turkish"), Some("tr".into())));
        assert_eq!(resolve_culture(&d, Some("pt-br")), (Some("brazilian"), Some("pt-BR".into())));
        assert_eq!(resolve_culture(&d, Some("pt")), (Some("default"), None));
        assert_eq!(resolve_culture(&d, Some("de-DE")), (Some("default"), None));
        assert_eq!(resolve_culture(&d, None), (Some("default"), None));
    }
}
