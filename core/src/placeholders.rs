//! Placeholders in instructions: `{{name}}` where `name` follows the parameter name rules
//! (`[A-Za-z_][A-Za-z0-9_]{0,63}`). For an agent that declares parameters, one that names no
//! declared parameter is a definition problem (`unknown_parameter`), found on save and
//! validation as an unknown tool is: left alone it would reach the model as literal braces.
//! Anything else between braces — JSON, `{{a.b}}`, `{{ spaced }}` — is text, and an agent
//! that declares no parameters keeps all its braces as text (the spec: such an agent is
//! unaffected by parameters).
//!
//! Found the way [`crate::compiler::bind_parameters`] substitutes: each `{{` up to the first
//! `}}` after it.

use std::collections::BTreeSet;

use crate::definition::{AgentDefinition, is_parameter_name};
use crate::report::{Problem, ProblemCode};

/// The placeholders of `text` that follow the name rules, in order of appearance.
pub fn placeholders(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else { break };
        let name = &after[..close];
        if is_parameter_name(name) {
            found.push(name);
            rest = &after[close + 2..];
        } else {
            rest = after;
        }
    }
    found
}

/// The problems of `def`'s placeholders that name no parameter it declares: in its own
/// instructions (each culture's), and in the shared block it uses (`block`), whose text is
/// bound with `def`'s parameters.
pub fn problems(def: &AgentDefinition, block: Option<&AgentDefinition>) -> Vec<Problem> {
    if def.parameters.is_empty() {
        return Vec::new();
    }
    let declared: BTreeSet<&str> = def.parameters.iter().map(|p| p.name.as_str()).collect();
    let undeclared = |texts: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for name in texts.flat_map(placeholders) {
            if !declared.contains(name) && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        names
    };
    let problem = |field: String, names: Vec<String>, whose: &str| {
        let listed: Vec<String> = names.iter().map(|n| format!("{{{{{n}}}}}")).collect();
        Problem::new(
            ProblemCode::UnknownParameter,
            field,
            format!(
                "{whose} {} {} no declared parameter; declare {} in 'parameters', or write the text without the double braces.",
                listed.join(", "),
                if names.len() == 1 { "names" } else { "name" },
                if names.len() == 1 { "it" } else { "them" },
            ),
        )
    };
    let mut found = Vec::new();
    let own = undeclared(&mut def.instructions.as_deref().into_iter());
    if !own.is_empty() {
        found.push(problem("instructions".to_owned(), own, "The placeholder(s)"));
    }
    for (tag, text) in &def.instructions_by_culture {
        let names = undeclared(&mut std::iter::once(text.as_str()));
        if !names.is_empty() {
            found.push(problem(format!("instructionsByCulture.{tag}"), names, "The placeholder(s)"));
        }
    }
    if let Some(block) = block {
        let mut texts =
            block.instructions.as_deref().into_iter().chain(block.instructions_by_culture.values().map(String::as_str));
        let names = undeclared(&mut texts);
        if !names.is_empty() {
            let whose = format!("The shared instructions block '{}' uses", block.name);
            found.push(problem("sharedInstructionsName".to_owned(), names, &whose));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::{AgentParameter, ParameterKind};

    fn with(params: &[&str], instructions: &str) -> AgentDefinition {
        let mut d = AgentDefinition::new("a", "scripted", "m").with_instructions(instructions);
        d.parameters = params
            .iter()
            .map(|n| AgentParameter {
                name: (*n).to_owned(),
                kind: ParameterKind::Text,
                required: false,
                default_value: None,
                description: None,
            })
            .collect();
        d
    }

    #[test]
    fn only_names_between_double_braces_are_placeholders() {
        assert_eq!(
            placeholders(r#"{{a}} {{ b }} {{c.d}} {{1e}} {{}} {"x": {{y}}} {{{z}}} {{_w9}} {{open"#),
            ["a", "y", "_w9"]
        );
    }

    #[test]
    fn an_undeclared_placeholder_is_a_problem_once_parameters_are_declared() {
        let d = with(&["customer"], "Help {{customer}} in a {{tone}} tone, {{tone}} again, and {{mood}}.");
        let found = problems(&d, None);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].code, found[0].field.as_str()), (ProblemCode::UnknownParameter, "instructions"));
        assert!(found[0].message.contains("{{tone}}, {{mood}} name no declared parameter"), "{}", found[0].message);
        assert!(problems(&with(&[], "Use {{this}} literally."), None).is_empty(), "no parameters: plain text");
        assert!(problems(&with(&["customer"], "Help {{customer}}."), None).is_empty());
    }

    #[test]
    fn culture_texts_and_the_shared_block_are_held_to_the_agents_parameters() {
        let mut d = with(&["customer"], "Help {{customer}}.");
        d.instructions_by_culture.insert("tr".into(), "{{musteri}} için.".into());
        let mut block = with(&[], "Sign as {{signature}}.");
        block.name = "house".into();
        block.instructions_by_culture.insert("tr".into(), "{{imza}} olarak imzala.".into());
        let fields: Vec<(String, String)> =
            problems(&d, Some(&block)).into_iter().map(|p| (p.field, p.message)).collect();
        assert_eq!(fields.len(), 2, "{fields:?}");
        assert_eq!(fields[0].0, "instructionsByCulture.tr");
        assert_eq!(fields[1].0, "sharedInstructionsName");
        assert!(fields[1].1.contains("'house'") && fields[1].1.contains("{{signature}}, {{imza}}"), "{}", fields[1].1);
    }
}
