//! JSON Schema checks — tool argument schemas and response-format schemas — on `boon`.
//!
//! `boon` was chosen over `jsonschema` for the Worker's bundle size (it is a third of the
//! code). A schema is only ever compiled from the document it was given: every external
//! `$ref` is refused, so a stored definition can neither read a server's files nor make it
//! fetch a URL.

use std::error::Error;

use serde_json::Value;

/// Where a schema document is registered. Never fetched: the loader refuses every URL.
const LOCATION: &str = "urn:tracon:schema";

/// A compiled JSON Schema (draft 2020-12 unless the schema's `$schema` says otherwise).
pub struct Validator {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl Validator {
    /// Compiles `schema` after checking it against its meta-schema.
    pub fn new(schema: &Value) -> Result<Self, String> {
        if let Some(refused) = unsupported_pattern(schema) {
            return Err(refused);
        }
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.use_loader(Box::new(NoExternalReferences));
        let readable = |e: boon::CompileError| e.to_string().replace(&format!("{LOCATION}#"), "the schema");
        compiler.add_resource(LOCATION, schema.clone()).map_err(readable)?;
        let index = compiler.compile(LOCATION, &mut schemas).map_err(readable)?;
        Ok(Self { schemas, index })
    }

    /// Up to `max` readable messages, `"/path: message"`; empty when `instance` is valid.
    pub fn errors(&self, instance: &Value, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        if let Err(e) = self.schemas.validate(instance, self.index) {
            leaves(&e, max, &mut out);
        }
        out
    }
}

/// `boon` reports a tree; the leaves are the specific failures a caller can act on.
fn leaves(e: &boon::ValidationError<'_, '_>, max: usize, out: &mut Vec<String>) {
    if out.len() >= max {
        return;
    }
    if e.causes.is_empty() {
        let path = e.instance_location.to_string();
        let message = e.kind.to_string();
        out.push(if path.is_empty() { message } else { format!("{path}: {message}") });
    } else {
        for cause in &e.causes {
            leaves(cause, max, out);
        }
    }
}

/// The first `pattern` the regex engine cannot compile, as a message. boon checks a pattern
/// is ECMA-262 but treats an engine refusal of a valid one as its own bug (a debug
/// assertion), so patterns are compiled here first. The engine is regex-lite (see
/// `shims/regex`): no Unicode classes, no back-references.
fn unsupported_pattern(schema: &Value) -> Option<String> {
    match schema {
        Value::Object(map) => map.iter().find_map(|(key, value)| match (key.as_str(), value) {
            // Instance data, not schemas: a "pattern" key in there is just data.
            ("const" | "enum" | "default" | "examples", _) => None,
            ("pattern", Value::String(pattern)) => {
                regex::Regex::new(pattern).err().map(|e| format!("pattern {pattern:?} is not supported: {e}"))
            }
            _ => unsupported_pattern(value),
        }),
        Value::Array(items) => items.iter().find_map(unsupported_pattern),
        _ => None,
    }
}

struct NoExternalReferences;

impl boon::UrlLoader for NoExternalReferences {
    fn load(&self, url: &str) -> Result<Value, Box<dyn Error>> {
        Err(format!("external schema references are not loaded ({url})").into())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn arguments_are_checked_and_each_failure_names_its_path() {
        let v = Validator::new(&json!({
            "type": "object",
            "properties": {"order": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
            "required": ["order"]
        }))
        .unwrap();
        assert!(v.errors(&json!({"order": "A1", "qty": 2}), 8).is_empty());
        let errors = v.errors(&json!({"qty": 0}), 8);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().any(|e| e.starts_with("/qty: ")), "{errors:?}");
        assert!(errors.iter().any(|e| e.contains("order")), "{errors:?}");
    }

    #[test]
    fn external_references_are_refused_not_loaded() {
        for target in ["file:///etc/passwd", "https://example.invalid/schema.json"] {
            let schema = json!({"type": "object", "properties": {"a": {"$ref": target}}});
            assert!(Validator::new(&schema).is_err(), "{target} was accepted");
        }
    }

    #[test]
    fn a_schema_that_breaks_its_meta_schema_is_invalid() {
        assert!(Validator::new(&json!({"type": 12})).is_err());
        assert!(
            Validator::new(
                &json!({"type": "object", "$defs": {"x": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/x"}}})
            )
            .is_ok()
        );
    }

    #[test]
    fn patterns_are_ecma_regular_expressions_without_unicode_classes() {
        let v = Validator::new(&json!({
            "type": "object",
            "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}},
            "patternProperties": {"^x-": {"type": "integer"}}
        }))
        .unwrap();
        assert!(v.errors(&json!({"sku": "AB-123", "x-count": 3}), 8).is_empty());
        assert_eq!(v.errors(&json!({"sku": "AB-12"}), 8).len(), 1);
        assert_eq!(v.errors(&json!({"x-count": "three"}), 8).len(), 1);
        // ECMA's \d is ASCII: an Arabic-Indic digit is not one.
        assert_eq!(v.errors(&json!({"sku": "AB-\u{0661}23"}), 8).len(), 1);
        // The regex engine (regex-lite, see shims/regex) has no Unicode classes: a schema
        // that needs one is refused, never matched wrongly.
        let refused = Validator::new(&json!({"type": "string", "pattern": "^\\p{L}+$"})).err().unwrap();
        assert!(refused.contains("not supported"), "{refused}");
    }
}
