//! What an OpenAI client adds to its run besides the conversation — `tools`, `tool_choice`,
//! `parallel_tool_calls`, `response_format` (Chat Completions) or `text.format` (Responses) —
//! read from either API's shape into [`CallerAdditions`]. Whether the agent takes them is
//! decided in core ([`tracon_core::runs::caller::apply`]); here only the shape is checked.

use serde_json::{Map, Value};
use tracon_core::definition::ResponseFormat;
use tracon_core::model::ToolChoice;
use tracon_core::runs::caller::{CallerAdditions, CallerTool};

use super::{OpenAiResult, invalid};

/// Which API's words the request uses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    Chat,
    /// `{"type": "function", "name", "description", "parameters"}`.
    Responses,
}

/// The caller's additions in `object` (the request body).
pub(crate) fn additions(object: &Map<String, Value>, api: Api) -> OpenAiResult<CallerAdditions> {
    let tools = match object.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => {
            tools.iter().enumerate().map(|(i, t)| tool(t, &format!("tools[{i}]"), api)).collect::<Result<_, _>>()?
        }
        Some(_) => return Err(invalid("tools", "'tools' must be an array of function tools.")),
    };
    let tool_choice = match object.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(choice) => tool_choice(choice, api)?,
    };
    let parallel_tool_calls = match object.get("parallel_tool_calls") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(invalid("parallel_tool_calls", "'parallel_tool_calls' must be a boolean.")),
    };
    let (response_format, response_format_field) = match api {
        Api::Chat => (object.get("response_format").map(chat_format).transpose()?.flatten(), "response_format"),
        Api::Responses => match object.get("text") {
            None | Some(Value::Null) => (None, "text.format"),
            Some(Value::Object(text)) => match text.get("format") {
                None | Some(Value::Null) => (None, "text.format"),
                Some(format) => (responses_format(format)?, "text.format"),
            },
            Some(_) => return Err(invalid("text", "'text' must be an object.")),
        },
    };
    Ok(CallerAdditions {
        tools,
        tool_choice,
        tool_choice_field: "tool_choice",
        parallel_tool_calls,
        response_format,
        response_format_field,
    })
}

/// One function tool; built-in tool types (web search, file search …) are refused.
fn tool(value: &Value, field: &str, api: Api) -> OpenAiResult<CallerTool> {
    let kind = value.get("type").and_then(Value::as_str).unwrap_or_default();
    if kind != "function" {
        return Err(invalid(
            &format!("{field}.type"),
            format!(
                "Only function tools are supported here; '{}' is a built-in tool type this server does not provide.",
                if kind.is_empty() { "(none)" } else { kind }
            ),
        ));
    }
    let (declaration, at) = match api {
        Api::Chat => match value.get("function") {
            Some(f @ Value::Object(_)) => (f, format!("{field}.function")),
            _ => return Err(invalid(&format!("{field}.function"), "A function tool needs a 'function' object.")),
        },
        Api::Responses => (value, field.to_owned()),
    };
    let name = declaration
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(&format!("{at}.name"), "A function tool needs a 'name'."))?;
    let description = match declaration.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return Err(invalid(&format!("{at}.description"), "'description' must be a string.")),
    };
    let parameters = match declaration.get("parameters") {
        None | Some(Value::Null) => None,
        Some(p @ Value::Object(_)) => Some(p.clone()),
        Some(_) => return Err(invalid(&format!("{at}.parameters"), "'parameters' must be a JSON Schema object.")),
    };
    Ok(CallerTool { field: at, name: name.to_owned(), description, parameters })
}

fn tool_choice(value: &Value, api: Api) -> OpenAiResult<ToolChoice> {
    match value {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(invalid("tool_choice", "'tool_choice' is \"auto\", \"none\", \"required\" or a named function.")),
        },
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = match api {
                Api::Chat => o.get("function").and_then(|f| f.get("name")),
                Api::Responses => o.get("name"),
            };
            name.and_then(Value::as_str)
                .map(|n| ToolChoice::Function(n.to_owned()))
                .ok_or_else(|| invalid("tool_choice", "A named 'tool_choice' needs the function's name."))
        }
        _ => Err(invalid(
            "tool_choice",
            "'tool_choice' is \"auto\", \"none\", \"required\" or a named function; other kinds are not supported here.",
        )),
    }
}

/// Chat Completions' `response_format`; `None` for text.
fn chat_format(value: &Value) -> OpenAiResult<Option<ResponseFormat>> {
    let kind = value.get("type").and_then(Value::as_str);
    match kind {
        None if value.is_null() => Ok(None),
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(ResponseFormat::Json)),
        Some("json_schema") => match value.get("json_schema") {
            Some(Value::Object(spec)) => schema_format(spec, "response_format.json_schema").map(Some),
            _ => Err(invalid("response_format.json_schema", "A json_schema response format needs 'json_schema'.")),
        },
        _ => Err(invalid("response_format.type", "'response_format.type' is text, json_object or json_schema.")),
    }
}

/// The Responses API's `text.format`; `None` for text.
fn responses_format(value: &Value) -> OpenAiResult<Option<ResponseFormat>> {
    match (value.get("type").and_then(Value::as_str), value) {
        (Some("text"), _) => Ok(None),
        (Some("json_object"), _) => Ok(Some(ResponseFormat::Json)),
        (Some("json_schema"), Value::Object(spec)) => schema_format(spec, "text.format").map(Some),
        _ => Err(invalid("text.format.type", "'text.format.type' is text, json_object or json_schema.")),
    }
}

fn schema_format(spec: &Map<String, Value>, field: &str) -> OpenAiResult<ResponseFormat> {
    let name = spec
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(&format!("{field}.name"), "A JSON schema format needs a 'name'."))?;
    let schema = match spec.get("schema") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => return Err(invalid(&format!("{field}.schema"), "A JSON schema format needs a 'schema' object.")),
    };
    let description = spec.get("description").and_then(Value::as_str).map(str::to_owned);
    let strict = spec.get("strict").and_then(Value::as_bool);
    Ok(ResponseFormat::JsonSchema { name: name.to_owned(), schema, description, strict })
}

/// The names of the caller's function tools, for telling its answered calls from a
/// server-side tool's.
pub(crate) fn tool_names(additions: &CallerAdditions) -> impl Iterator<Item = &str> {
    additions.tools.iter().map(|t| t.name.as_str())
}
