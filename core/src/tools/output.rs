//! The canonical text form of a tool result and the output-size envelope.
//!
//! Whatever a tool returns becomes one canonical text before anything else inspects it; the
//! byte limit is measured against that text. A result over the limit is replaced by
//! `{"truncated":true,"omittedBytes":N,"content":"…"}` — always valid JSON, and the kept
//! prefix never splits a UTF-8 character.

use serde_json::Value;

/// What a tool body returns.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutput {
    /// Text, passed through exactly.
    Text(String),
    /// A JSON value, serialised compactly (object keys in a stable order).
    Json(Value),
}

impl ToolOutput {
    /// The one canonical text form of this result.
    pub fn into_canonical_text(self) -> String {
        match self {
            ToolOutput::Text(s) => s,
            ToolOutput::Json(Value::String(s)) => s,
            ToolOutput::Json(v) => v.to_string(),
        }
    }
}

impl From<String> for ToolOutput {
    fn from(s: String) -> Self {
        ToolOutput::Text(s)
    }
}

impl From<&str> for ToolOutput {
    fn from(s: &str) -> Self {
        ToolOutput::Text(s.to_owned())
    }
}

impl From<Value> for ToolOutput {
    fn from(v: Value) -> Self {
        ToolOutput::Json(v)
    }
}

/// Applies the byte limit. Returns the text the model sees and, when trimmed, how many
/// bytes were dropped.
pub fn limit_output(text: String, max_bytes: Option<usize>) -> (String, Option<u64>) {
    let Some(max) = max_bytes else {
        return (text, None);
    };
    if text.len() <= max {
        return (text, None);
    }
    let mut cut = max;
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let omitted = (text.len() - cut) as u64;
    let envelope = serde_json::json!({
        "truncated": true,
        "omittedBytes": omitted,
        "content": &text[..cut],
    });
    (envelope.to_string(), Some(omitted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_that_fits_is_untouched() {
        assert_eq!(limit_output("abc".into(), Some(3)), ("abc".to_owned(), None));
        assert_eq!(limit_output("abc".into(), None), ("abc".to_owned(), None));
    }

    #[test]
    fn an_over_limit_result_becomes_a_valid_envelope() {
        let (text, omitted) = limit_output("x\"y\\z".repeat(100), Some(10));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["truncated"], true);
        assert_eq!(v["omittedBytes"], 490);
        assert_eq!(v["content"].as_str().unwrap().len(), 10);
        assert_eq!(omitted, Some(490));
    }

    #[test]
    fn the_cut_never_splits_a_multibyte_character() {
        // "é" is two bytes; a limit of 4 falls inside the third "é".
        let (text, omitted) = limit_output("aéé€".to_owned(), Some(4));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["content"], "aé");
        assert_eq!(omitted, Some(5));
        // "€" is three bytes: cutting at 1 or 2 keeps nothing of it.
        let (text, _) = limit_output("€€".to_owned(), Some(2));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["content"], "");
        assert_eq!(v["omittedBytes"], 6);
    }

    #[test]
    fn canonical_text_forms_are_stable() {
        assert_eq!(
            ToolOutput::Json(serde_json::json!({"b": 1, "a": [true, null]})).into_canonical_text(),
            r#"{"a":[true,null],"b":1}"#
        );
        assert_eq!(ToolOutput::Json(Value::Null).into_canonical_text(), "null");
        assert_eq!(ToolOutput::Json(Value::String("s".into())).into_canonical_text(), "s");
        assert_eq!(ToolOutput::Json(serde_json::json!(1.5)).into_canonical_text(), "1.5");
    }
}
