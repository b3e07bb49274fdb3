//! The message limit (`Tracon:Limits:MaxMessageChars`, [`tracon_core::runs::input`]) on the
//! OpenAI surfaces: every message text a request carries — each chat message's `content`,
//! Responses' `input` (a string, or each item's `content` or `output`) and `instructions` — is
//! held to it, under the name OpenAI's `param` gives it. (`launch` holds the last message to it
//! too, as it does every run's.)

use serde_json::Value;
use tracon_core::runs::input::InputLimits;

use super::{OpenAiResult, invalid};

/// Refuses a request body with a message text over the limit (`400`, `param` naming it).
pub(super) fn check_messages(limits: &InputLimits, body: &Value) -> OpenAiResult<()> {
    let check = |param: String, text: &str| {
        limits.check_message(&param, text).map_err(|refusal| invalid(&param, refusal.message()))
    };
    for (i, message) in body.get("messages").and_then(Value::as_array).into_iter().flatten().enumerate() {
        if let Some(text) = message.get("content").and_then(text_of) {
            check(format!("messages[{i}].content"), &text)?;
        }
    }
    match body.get("input") {
        Some(Value::String(text)) => check("input".to_owned(), text)?,
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                for field in ["content", "output"] {
                    if let Some(text) = item.get(field).and_then(text_of) {
                        check(format!("input[{i}].{field}"), &text)?;
                    }
                }
            }
        }
        _ => {}
    }
    if let Some(Value::String(text)) = body.get("instructions") {
        check("instructions".to_owned(), text)?;
    }
    Ok(())
}

/// A content's text: a string, or its parts' `text` joined (the rest is the parser's to judge).
fn text_of(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect()),
        _ => None,
    }
}
