//! The JSON-RPC 2.0 envelope of the A2A binding: reading a request, answering a result or an
//! error ([`RpcError`], with A2A's own codes), and turning our refusals ([`ApiError`]) into
//! JSON-RPC errors — every JSON-RPC answer is HTTP `200`, as the binding has it.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::error::ApiError;

/// `-32700`: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// `-32600`: not a JSON-RPC request object.
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// A2A's own codes (specification §5.4).
pub const TASK_NOT_FOUND: i64 = -32001;
pub const TASK_NOT_CANCELABLE: i64 = -32002;
pub const PUSH_NOT_SUPPORTED: i64 = -32003;
pub const UNSUPPORTED_OPERATION: i64 = -32004;
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

/// A JSON-RPC error: a code, our message, and the `google.rpc.ErrorInfo` detail A2A asks for
/// (`reason`, `domain`, `metadata`).
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// `TASK_NOT_FOUND`, `INVALID_PARAMS`, … (or our `errorType` for a refusal of ours).
    pub reason: String,
    pub metadata: serde_json::Map<String, Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        let reason = match code {
            PARSE_ERROR => "PARSE_ERROR",
            INVALID_REQUEST => "INVALID_REQUEST",
            METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
            INVALID_PARAMS => "INVALID_PARAMS",
            TASK_NOT_FOUND => "TASK_NOT_FOUND",
            TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
            PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
            CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
            VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
            _ => "INTERNAL_ERROR",
        };
        Self { code, message: message.into(), reason: reason.to_owned(), metadata: Default::default() }
    }

    pub fn params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn task_not_found() -> Self {
        Self::new(TASK_NOT_FOUND, "Task not found.")
    }

    pub fn with(mut self, key: &str, value: impl serde::Serialize) -> Self {
        self.metadata.insert(key.to_owned(), serde_json::to_value(value).unwrap_or(Value::Null));
        self
    }

    /// The error object.
    pub fn object(&self) -> Value {
        json!({
            "code": self.code,
            "message": self.message,
            "data": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.reason,
                "domain": "tracon",
                "metadata": self.metadata,
            }],
        })
    }
}

/// One of our refusals as a JSON-RPC error: the message is ours already; the `errorType`
/// and HTTP status the REST surfaces would have answered travel in the metadata. A server
/// fault or a full store is `-32603`; anything the caller can change is `-32602`.
impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        let code = if e.status.is_server_error() || e.status.as_u16() == 429 { INTERNAL_ERROR } else { INVALID_PARAMS };
        let mut error = RpcError::new(code, e.detail.clone());
        error.reason = e.error_type.to_ascii_uppercase();
        error = error.with("errorType", e.error_type).with("status", e.status.as_u16());
        if let Some(seconds) = e.retry_after {
            error = error.with("retryAfterSeconds", seconds);
        }
        error
    }
}

impl From<tracon_core::error::StoreError> for RpcError {
    fn from(e: tracon_core::error::StoreError) -> Self {
        ApiError::from(e).into()
    }
}

/// The request's `id`: a string, a number or `null` (echoed as it came).
pub type Id = Value;

/// A successful answer.
pub fn result(id: &Id, result: Value) -> Response {
    Json(json!({ "jsonrpc": "2.0", "id": id, "result": result })).into_response()
}

/// An error answer (HTTP `200`, as the binding has it).
pub fn error(id: &Id, error: &RpcError) -> Response {
    Json(json!({ "jsonrpc": "2.0", "id": id, "error": error.object() })).into_response()
}

/// A request, read from the body: its id, method and params (`{}` when left out).
#[derive(Debug)]
pub struct Call {
    pub id: Id,
    pub method: String,
    pub params: Value,
}

/// Reads a JSON-RPC request, or the error to answer (with the id, when one was readable).
pub fn read(body: &[u8]) -> Result<Call, (Id, RpcError)> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| (Value::Null, RpcError::new(PARSE_ERROR, "The body is not valid JSON.")))?;
    let Value::Object(mut object) = value else {
        let message = if value.is_array() {
            "Batches are not supported: send one JSON-RPC request object."
        } else {
            "The body is not a JSON-RPC request object."
        };
        return Err((Value::Null, RpcError::new(INVALID_REQUEST, message)));
    };
    let id = match object.remove("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id,
        None => Value::Null,
        Some(_) => return Err((Value::Null, RpcError::new(INVALID_REQUEST, "'id' is a string, a number or null."))),
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::new(INVALID_REQUEST, "'jsonrpc' must be \"2.0\".")));
    }
    let Some(Value::String(method)) = object.remove("method") else {
        return Err((id, RpcError::new(INVALID_REQUEST, "'method' is a string.")));
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => return Err((id, RpcError::params("'params' is an object."))),
    };
    Ok(Call { id, method, params })
}

/// Params of type `T`, or `-32602` naming what did not fit (our words: serde's message
/// names the field and the type expected, never the value sent).
pub fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| {
        let text = e.to_string();
        let what = text.split(" at line").next().unwrap_or("the params do not fit the method").to_owned();
        RpcError::params(format!("Invalid params: {what}."))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_read_or_refused_with_the_right_code() {
        assert_eq!(read(b"{nope").unwrap_err().1.code, PARSE_ERROR);
        assert_eq!(read(b"[]").unwrap_err().1.code, INVALID_REQUEST);
        assert_eq!(read(br#"{"id":1,"method":"GetTask"}"#).unwrap_err().1.code, INVALID_REQUEST);
        let (id, e) = read(br#"{"jsonrpc":"2.0","id":"a","method":7}"#).unwrap_err();
        assert_eq!((id, e.code), (json!("a"), INVALID_REQUEST));
        assert_eq!(
            read(br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#).unwrap_err().1.code,
            INVALID_PARAMS
        );
        let call = read(br#"{"jsonrpc":"2.0","id":3,"method":"GetTask"}"#).unwrap();
        assert_eq!((call.id, call.method.as_str(), call.params), (json!(3), "GetTask", json!({})));
    }
}
