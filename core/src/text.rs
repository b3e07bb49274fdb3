//! Text the product refuses everywhere: U+0000 (NUL).
//!
//! Postgres `text` and `jsonb` cannot hold it (SQLSTATE 22021 / 22P05), and no field of this
//! product has a use for it, so it is refused at every edge with a `400` naming the field —
//! query parameters, JSON bodies — and every store answers [`StoreError::InvalidText`] for
//! it alike (the store contract suite holds memory and Postgres to that), so a NUL that
//! slips past an edge can never be a `500` on one store and a `200` on another.
//!
//! [`StoreError::InvalidText`]: crate::error::StoreError::InvalidText

use serde_json::Value;

/// Whether `s` holds U+0000.
pub fn has_nul(s: &str) -> bool {
    s.as_bytes().contains(&0)
}

/// The path of the first key or string in `value` holding U+0000 (`metadata.owner`,
/// `messages[2].content`; the empty string for a top-level string), or `None`.
pub fn nul_path(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &mut String) -> bool {
        match value {
            Value::String(s) => has_nul(s),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let found = walk(item, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Object(map) => map.iter().any(|(key, item)| {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key.replace('\0', "\\u0000"));
                let found = has_nul(key) || walk(item, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
    let mut path = String::new();
    walk(value, &mut path).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_nul_is_found_with_its_path() {
        let v = serde_json::json!({"a": "ok", "metadata": {"owner": "x\u{0}y"}, "list": ["fine"]});
        assert_eq!(nul_path(&v).as_deref(), Some("metadata.owner"));
        let v = serde_json::json!({"messages": [{"content": "hi"}, {"content": "\u{0}"}]});
        assert_eq!(nul_path(&v).as_deref(), Some("messages[1].content"));
        let v = serde_json::json!({"k\u{0}": 1});
        assert_eq!(nul_path(&v).as_deref(), Some("k\\u0000"));
        assert_eq!(nul_path(&serde_json::json!("\u{0}")).as_deref(), Some(""));
        assert_eq!(nul_path(&serde_json::json!({"a": ["b", {"c": 1}], "d": "\\u0000 as text"})), None);
    }
}
