//! JSON-RPC 2.0 as MCP uses it: one message per POST (batches were dropped in 2025-06-18),
//! the standard error codes, and the revisions this server speaks.
//!
//! Small serde-free types of our own over `serde_json::Value`: the official Rust SDK
//! (`rmcp`) brings a tokio server runtime this crate cannot use on `wasm32-unknown-unknown`,
//! and the messages we answer are few (see ARCHITECTURE.md).

use serde_json::{Value, json};

/// The current revision and the one before it; the first is what we answer a client that
/// asks for neither.
pub const VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];
/// The revision with tasks.
pub const TASKS_VERSION: &str = "2025-11-25";

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }
}

/// One incoming message.
#[derive(Debug)]
pub enum Incoming {
    /// A request: answered.
    Request { id: Value, method: String, params: Value },
    /// A notification, or a response to a request we never send: accepted (`202`).
    Accepted,
}

/// Reads one message, or the error to answer (with the id, when one could be read).
pub fn read(body: &[u8]) -> Result<Incoming, (Value, RpcError)> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| (Value::Null, RpcError::new(PARSE_ERROR, "Parse error: the body is not JSON.")))?;
    let Value::Object(message) = value else {
        let what = if value.is_array() {
            "Invalid request: batches are not supported; send one JSON-RPC message per request."
        } else {
            "Invalid request: a JSON-RPC message is an object."
        };
        return Err((Value::Null, RpcError::new(INVALID_REQUEST, what)));
    };
    let id = message.get("id").cloned();
    let id_ok = id.as_ref().is_none_or(|i| i.is_string() || i.is_i64() || i.is_u64());
    let answer_id = id.clone().filter(|_| id_ok).unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((answer_id, RpcError::new(INVALID_REQUEST, "Invalid request: 'jsonrpc' must be \"2.0\".")));
    }
    if !id_ok {
        return Err((Value::Null, RpcError::new(INVALID_REQUEST, "Invalid request: 'id' is a string or an integer.")));
    }
    match (message.get("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            if !(params.is_null() || params.is_object()) {
                return Err((id, RpcError::invalid_params("Invalid params: 'params' is an object.")));
            }
            Ok(Incoming::Request { id, method: method.clone(), params })
        }
        (Some(Value::String(_)), None) => Ok(Incoming::Accepted),
        (Some(_), id) => {
            Err((id.unwrap_or(Value::Null), RpcError::new(INVALID_REQUEST, "Invalid request: 'method' is a string.")))
        }
        (None, Some(_)) if message.contains_key("result") || message.contains_key("error") => Ok(Incoming::Accepted),
        (None, id) => Err((id.unwrap_or(Value::Null), RpcError::new(INVALID_REQUEST, "Invalid request: no 'method'."))),
    }
}

/// The response to request `id`.
pub fn response(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": { "code": e.code, "message": e.message } }),
    }
}

/// The revision to answer a client that asked for `requested`: the same when we speak it,
/// otherwise our latest (the client then decides whether it can go on).
pub fn negotiate(requested: &str) -> &'static str {
    VERSIONS.iter().copied().find(|v| *v == requested).unwrap_or(VERSIONS[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_read_or_refused_with_the_right_code() {
        let code = |body: &str| read(body.as_bytes()).err().map(|(_, e)| e.code);
        assert_eq!(code("{"), Some(PARSE_ERROR));
        assert_eq!(code("[]"), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"id":1,"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}"#), Some(INVALID_PARAMS));
        assert!(matches!(read(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Ok(Incoming::Accepted)));
        assert!(matches!(read(br#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#), Ok(Incoming::Request { .. })));
    }

    #[test]
    fn the_revision_is_the_clients_when_we_speak_it() {
        assert_eq!(negotiate("2025-06-18"), "2025-06-18");
        assert_eq!(negotiate("2024-11-05"), "2025-11-25");
    }
}
