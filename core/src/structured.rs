//! Structured output that holds: a run whose binding asks for JSON (`responseFormat` `json`
//! or `jsonSchema`) closes `Completed` only with an answer that is JSON, valid against the
//! schema for `jsonSchema`, and accepted by the host's own [`ResponseValidator`] when one is
//! registered. Anything else is rejected: a run that is not streamed to its caller gets up to
//! `model.maxRepairAttempts` repair turns (the model sees why its answer was refused and
//! answers again); a run still rejected — or a streamed one, whose text already reached the
//! caller — fails `structured_response_rejected`. The check is fail-closed: there is no
//! "could not tell", only holds or rejected.
//!
//! An answer wrapped in one Markdown code fence (```` ```json … ``` ````, as models often
//! write it) is taken from inside the fence; the run's answer is then the JSON alone.

use std::sync::Arc;

use serde_json::Value;

use crate::definition::ResponseFormat;
use crate::schema::Validator;

/// The most problems one rejection lists.
const MAX_PROBLEMS: usize = 8;

/// A host's own check of a structured answer, after the built-in ones (registered with
/// `RuntimeBuilder::response_validator`). `Err` rejects the answer with the problems given,
/// which the model sees in a repair turn and the run's log records: keep them free of
/// secrets.
pub trait ResponseValidator: Send + Sync {
    fn check(&self, agent: &str, format: &ResponseFormat, answer: &Value) -> Result<(), Vec<String>>;
}

/// How an answer held up.
#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    /// The answer, as the run returns it (the JSON text, without a fence around it).
    Holds(String),
    /// Why not.
    Rejected(Vec<String>),
}

/// The checks an agent's answers go through, compiled once per agent version.
pub struct StructuredCheck {
    format: ResponseFormat,
    schema: Option<Validator>,
}

impl std::fmt::Debug for StructuredCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructuredCheck").field("format", &self.format).finish_non_exhaustive()
    }
}

impl StructuredCheck {
    /// The check of `format`; `None` when it asks for no structure (text, or none).
    pub fn of(format: Option<&ResponseFormat>) -> Result<Option<Self>, String> {
        let schema = match format {
            None | Some(ResponseFormat::Text) => return Ok(None),
            Some(ResponseFormat::Json) => None,
            Some(ResponseFormat::JsonSchema { schema, .. }) => Some(Validator::new(schema)?),
        };
        Ok(format.map(|format| Self { format: format.clone(), schema }))
    }

    /// Checks `text`, the model's answer, for `agent`.
    pub fn check(&self, agent: &str, text: &str, host: Option<&Arc<dyn ResponseValidator>>) -> Checked {
        let body = unfenced(text);
        let value: Value = match serde_json::from_str(body) {
            Ok(v) => v,
            Err(e) => return Checked::Rejected(vec![format!("The answer is not JSON ({e}).")]),
        };
        if let Some(schema) = &self.schema {
            let problems = schema.errors(&value, MAX_PROBLEMS);
            if !problems.is_empty() {
                return Checked::Rejected(
                    problems.into_iter().map(|p| format!("The answer does not match the schema: {p}.")).collect(),
                );
            }
        }
        if let Some(host) = host
            && let Err(mut problems) = host.check(agent, &self.format, &value)
        {
            if problems.is_empty() {
                problems.push("The host's validator refused the answer.".to_owned());
            }
            problems.truncate(MAX_PROBLEMS);
            return Checked::Rejected(problems);
        }
        Checked::Holds(body.to_owned())
    }

    /// What the model is told when its answer was refused.
    pub fn repair_prompt(&self, problems: &[String]) -> String {
        let wanted = match &self.format {
            ResponseFormat::JsonSchema { schema, .. } => {
                format!("only a JSON value that matches this JSON Schema:\n{schema}")
            }
            _ => "only a JSON value".to_owned(),
        };
        format!(
            "Your answer could not be used:\n- {}\n\nAnswer again with {wanted}\nNo prose, no code fence.",
            problems.join("\n- ")
        )
    }

    /// What kind of answer was asked for, in words (for the failure message).
    pub fn wanted(&self) -> &'static str {
        match self.format {
            ResponseFormat::JsonSchema { .. } => "JSON matching the agent's response schema",
            _ => "JSON",
        }
    }
}

/// The text inside one Markdown code fence around the whole answer (its language tag
/// dropped), or the trimmed answer.
fn unfenced(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else { return trimmed };
    let Some(inner) = rest.strip_suffix("```") else { return trimmed };
    // The opening line may name the language (```json).
    match inner.split_once('\n') {
        Some((tag, body)) if !tag.contains(['{', '[', '"']) => body.trim(),
        _ => inner.trim(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema_check() -> StructuredCheck {
        let format = ResponseFormat::JsonSchema {
            name: "order".into(),
            schema: json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                "additionalProperties": false}),
            description: None,
            strict: None,
        };
        StructuredCheck::of(Some(&format)).unwrap().unwrap()
    }

    #[test]
    fn json_is_taken_whole_or_from_one_fence_and_anything_else_is_rejected() {
        let json = StructuredCheck::of(Some(&ResponseFormat::Json)).unwrap().unwrap();
        assert_eq!(json.check("a", " {\"a\": 1}\n", None), Checked::Holds("{\"a\": 1}".into()));
        assert_eq!(json.check("a", "```json\n{\"a\": 1}\n```", None), Checked::Holds("{\"a\": 1}".into()));
        assert_eq!(json.check("a", "```\n[1, 2]\n```", None), Checked::Holds("[1, 2]".into()));
        for bad in ["Sure! Here it is: {\"a\": 1}", "{\"a\": 1", "", "```json\n{\"a\": \n```", "{\"a\": 1} and more"] {
            assert!(matches!(json.check("a", bad, None), Checked::Rejected(_)), "{bad:?}");
        }
        assert!(StructuredCheck::of(Some(&ResponseFormat::Text)).unwrap().is_none());
        assert!(StructuredCheck::of(None).unwrap().is_none());
    }

    #[test]
    fn a_schema_violation_names_each_problem() {
        let check = schema_check();
        assert_eq!(check.check("a", "{\"id\": 7}", None), Checked::Holds("{\"id\": 7}".into()));
        let Checked::Rejected(problems) = check.check("a", "{\"id\": \"seven\", \"extra\": true}", None) else {
            panic!("accepted")
        };
        assert!(problems.len() >= 2, "{problems:?}");
        assert!(problems.iter().all(|p| p.starts_with("The answer does not match the schema")), "{problems:?}");
        assert!(check.repair_prompt(&problems).contains("\"required\":[\"id\"]"));
    }

    struct NoZero;
    impl ResponseValidator for NoZero {
        fn check(&self, _: &str, _: &ResponseFormat, answer: &Value) -> Result<(), Vec<String>> {
            if answer["id"] == 0 { Err(Vec::new()) } else { Ok(()) }
        }
    }

    #[test]
    fn the_hosts_validator_runs_after_the_schema_and_an_empty_refusal_still_refuses() {
        let host: Arc<dyn ResponseValidator> = Arc::new(NoZero);
        let check = schema_check();
        assert_eq!(check.check("a", "{\"id\": 1}", Some(&host)), Checked::Holds("{\"id\": 1}".into()));
        assert_eq!(
            check.check("a", "{\"id\": 0}", Some(&host)),
            Checked::Rejected(vec!["The host's validator refused the answer.".into()])
        );
    }
}
