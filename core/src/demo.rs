//! The demo agent every host can ship, and its two harmless tools.
//!
//! `support` answers order questions. With `OPENAI_API_KEY` (or `ANTHROPIC_API_KEY`) it
//! uses that provider; otherwise the `scripted` provider streams a deterministic answer
//! that calls `get_order_status`, so the first `curl` works with no key and no network.

use crate::definition::AgentDefinition;
use crate::tools::{RegistrationError, ToolError, ToolOutput, ToolRegistration, tool_fn};
use serde_json::{Map, Value, json};

pub const AGENT: &str = "support";

pub fn agent(provider: &str, model: &str) -> AgentDefinition {
    let mut def = AgentDefinition::new(AGENT, provider, model)
        .with_instructions(
            "You are a support assistant for an online shop. Answer briefly and clearly. \
             Use get_order_status to look up an order and get_store_hours for opening hours.",
        )
        .with_tools(&["get_order_status", "get_store_hours"]);
    def.display_name = Some("Support Assistant".into());
    def.description = Some("Answers order and store-hours questions (demo).".into());
    def
}

/// A stable pseudo-random number from a string, so the same order always has the same state.
fn stable_hash(s: &str) -> u32 {
    s.bytes().fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619))
}

/// The parameters of a tool that takes one string, `name`, of 1 to `max_length` characters.
fn one_string(name: &str, description: Option<&str>, max_length: u32) -> Value {
    let mut property = Map::new();
    property.insert("type".into(), json!("string"));
    if let Some(description) = description {
        property.insert("description".into(), json!(description));
    }
    property.insert("minLength".into(), json!(1));
    property.insert("maxLength".into(), json!(max_length));
    json!({"type": "object", "properties": {name: property}, "required": [name], "additionalProperties": false})
}

/// A call's string argument `name` (empty when missing: the schema has been checked).
fn string_arg(args: &Value, name: &str) -> String {
    args.get(name).and_then(Value::as_str).unwrap_or_default().to_owned()
}

pub fn order_status_tool() -> Result<ToolRegistration, RegistrationError> {
    ToolRegistration::new(
        "get_order_status",
        "Looks up the shipping status of an order by its number.",
        one_string("orderId", Some("The order number, e.g. 4182"), 32),
        tool_fn(|args: Value, _ctx| async move {
            let order_id = string_arg(&args, "orderId");
            if !order_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(ToolError::message("Order numbers contain only letters, digits and '-'."));
            }
            let h = stable_hash(&order_id);
            let (status, days) = match h % 3 {
                0 => ("processing", 5),
                1 => ("shipped", 2),
                _ => ("out for delivery", 0),
            };
            let carrier = ["DHL", "UPS", "PostNL"][(h / 3 % 3) as usize];
            Ok(ToolOutput::Json(json!({
                "orderId": order_id,
                "status": status,
                "carrier": carrier,
                "estimatedDeliveryInDays": days,
            })))
        }),
    )
    .map(|r| r.display_name("Looking up the order"))
}

/// A client-side tool: the browser (or any caller) answers it with the time on the user's
/// device. Not part of the demo agent — an agent that lists it needs a caller that answers.
pub fn local_time_client_tool() -> Result<ToolRegistration, RegistrationError> {
    ToolRegistration::client(
        "get_local_time",
        "Returns the current date, time and time zone on the user's own device.",
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    )
}

pub fn store_hours_tool() -> Result<ToolRegistration, RegistrationError> {
    ToolRegistration::new(
        "get_store_hours",
        "Returns the opening hours of the shop's store in a city.",
        one_string("city", None, 64),
        tool_fn(|args: Value, _ctx| async move {
            let city = string_arg(&args, "city");
            Ok(ToolOutput::Json(
                json!({"city": city, "weekdays": "09:00-18:00", "saturday": "10:00-16:00", "sunday": "closed"}),
            ))
        }),
    )
    .map(|r| r.display_name("Checking the store hours"))
}

/// Cancels an order — after a person approves the call (the approval flow's demo).
pub fn cancel_order_tool() -> Result<ToolRegistration, RegistrationError> {
    ToolRegistration::new(
        "cancel_order",
        "Cancels an order by its number. A person approves each cancellation first.",
        one_string("orderId", None, 32),
        tool_fn(|args: Value, _ctx| async move {
            let order_id = string_arg(&args, "orderId");
            Ok(ToolOutput::Json(json!({"orderId": order_id, "status": "cancelled"})))
        }),
    )
    .map(|r| {
        r.requires_approval(true)
            .effect(crate::tools::effect::ToolEffect::Destructive)
            .display_name("Cancelling the order")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_string_is_the_schema_the_tools_always_had() {
        assert_eq!(
            one_string("orderId", Some("The order number, e.g. 4182"), 32),
            json!({
                "type": "object",
                "properties": {"orderId": {"type": "string", "description": "The order number, e.g. 4182", "minLength": 1, "maxLength": 32}},
                "required": ["orderId"],
                "additionalProperties": false
            })
        );
        assert_eq!(
            serde_json::to_string(&one_string("city", None, 64)).unwrap(),
            serde_json::to_string(&json!({
                "type": "object",
                "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 64}},
                "required": ["city"],
                "additionalProperties": false
            }))
            .unwrap()
        );
    }
}
