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
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler.use_loader(Box::new(NoExternalReferences));
        compiler.add_resource(LOCATION, schema.clone()).map_err(|e| e.to_string())?;
        let index = compiler.compile(LOCATION, &mut schemas).map_err(|e| e.to_string())?;
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

/// Whether `schema` is a valid JSON Schema: valid against its meta-schema, and it compiles.
pub fn is_valid_schema(schema: &Value) -> bool {
    Validator::new(schema).is_ok()
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
            assert!(!is_valid_schema(&schema), "{target} was accepted");
        }
    }

    #[test]
    fn a_schema_that_breaks_its_meta_schema_is_invalid() {
        assert!(!is_valid_schema(&json!({"type": 12})));
        assert!(is_valid_schema(
            &json!({"type": "object", "$defs": {"x": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/x"}}})
        ));
    }
}
