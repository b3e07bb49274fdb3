//! `tools/list` and `tools/call`: one tool per exposed agent, a call is one run of it.
//!
//! A tool's input is `{ "message": string, "parameters"?: { … } }` — the agent's declared
//! parameters, typed by their kind. A call is admitted and launched like any run
//! (`admission::admit`, `launch::launch`) with the call's fresh budget
//! (`Exposure::limits`); its answer is the run's text. Everything that goes wrong once the
//! tool is known is a tool error (`isError: true`) with our own text, never a foreign one.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use tracon_core::catalog::CatalogEntry;
use tracon_core::definition::ParameterKind;
use tracon_core::exposure::ExposureRefusal;
use tracon_core::names::AgentName;
use tracon_core::runs::launch::{Delivery, Launched, Start, launch};

use super::Call;
use super::protocol::RpcError;
use super::run::{Checked, admitted, budget, result_of, tool_error};
use super::tasks;
use crate::error::{ApiError, start_error};

/// The `tools/list` result.
pub(super) async fn list(call: &Call<'_>, params: &Value) -> Result<Value, RpcError> {
    if params.get("cursor").is_some_and(|c| !c.is_null()) {
        return Err(RpcError::invalid_params("Invalid params: unknown cursor (the list has one page)."));
    }
    let state = &call.ctx.state;
    let settings = &state.http.mcp_server;
    let agents = settings
        .exposure
        .agents(&state.runtime, &call.ctx.tenant)
        .await
        .map_err(|e| RpcError::internal(ApiError::from(e).detail))?;
    let tasks = tasks::offered(state);
    let tools: Vec<Value> = agents
        .into_iter()
        .filter_map(|agent| match agent {
            Ok(entry) => Some(tool(&settings.tool_name(&entry.definition.name), &entry, tasks)),
            Err(refused) => {
                tracing::warn!(reason = %refused.message(), "an exposed agent is left out of tools/list");
                None
            }
        })
        .collect();
    Ok(json!({ "tools": tools }))
}

fn tool(name: &str, entry: &CatalogEntry, tasks: bool) -> Value {
    let def = &entry.definition;
    let mut properties = Map::new();
    properties
        .insert("message".into(), json!({ "type": "string", "minLength": 1, "description": "What to ask the agent." }));
    let mut required = vec![json!("message")];
    if !def.parameters.is_empty() {
        let mut params = Map::new();
        let mut params_required = Vec::new();
        for p in &def.parameters {
            let kind = match p.kind {
                ParameterKind::Text => "string",
                ParameterKind::Number => "number",
                ParameterKind::Boolean => "boolean",
            };
            let mut schema = json!({ "type": kind });
            if let Some(d) = &p.description {
                schema["description"] = json!(d);
            }
            params.insert(p.name.clone(), schema);
            if p.required && p.default_value.is_none() {
                params_required.push(json!(p.name));
            }
        }
        properties.insert(
            "parameters".into(),
            json!({ "type": "object", "properties": params, "required": params_required.clone(), "additionalProperties": false }),
        );
        if !params_required.is_empty() {
            required.push(json!("parameters"));
        }
    }
    let description = def
        .description
        .clone()
        .or_else(|| def.display_name.clone())
        .unwrap_or_else(|| format!("Runs the agent '{}' on a message and answers its reply.", def.name));
    let mut tool = json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object", "properties": properties, "required": required, "additionalProperties": false },
    });
    if let Some(title) = &def.display_name {
        tool["title"] = json!(title);
    }
    if tasks {
        tool["execution"] = json!({ "taskSupport": "optional" });
    }
    tool
}

/// The `tools/call` result (or, for a task-augmented call, the `CreateTaskResult`).
pub(super) async fn call(call: &Call<'_>, params: Value) -> Result<Value, RpcError> {
    let state = &call.ctx.state;
    let settings = &state.http.mcp_server;
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("Invalid params: 'name' is required."))?;
    let unknown = || RpcError::invalid_params(format!("Unknown tool: {name}"));
    let agent_name = settings.agent_of(name).ok_or_else(unknown)?;
    let entry = match settings.exposure.agent(&state.runtime, &call.ctx.tenant, agent_name).await {
        Ok(entry) => entry,
        Err(ExposureRefusal::NotExposed) => return Err(unknown()),
        Err(refused @ ExposureRefusal::ApprovalRequired { .. }) => return Ok(tool_error(&refused.message(), None)),
        Err(e) => return Err(RpcError::internal(ApiError::from(e).detail)),
    };
    let checked = arguments(&entry, params.get("arguments"))?;
    let task = params.get("task").filter(|t| !t.is_null());
    if let Some(task) = task
        && tasks::offered(state)
    {
        return tasks::create(call, checked, task).await;
    }
    let request = match admitted(call, &checked, None).await {
        Ok(request) => request,
        Err(e) => return Ok(tool_error(&e.detail, None)),
    };
    let start = Start { budget: Some(budget(call)), ..Start::new(request, Delivery::Buffered) };
    match launch(&state.runtime, start).await {
        Ok(Launched::Finished(outcome)) => Ok(result_of(&outcome)),
        Ok(other) => Err(RpcError::internal(format!("The run {} did not finish here.", other.run_id()))),
        Err(e) => Ok(tool_error(&start_error(checked.agent.as_str(), e).detail, None)),
    }
}

/// The call's arguments, checked against the tool's input.
fn arguments(entry: &CatalogEntry, arguments: Option<&Value>) -> Result<Checked, RpcError> {
    let invalid = |m: &str| RpcError::invalid_params(format!("Invalid arguments: {m}"));
    let empty = Map::new();
    let args = match arguments {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err(invalid("'arguments' is an object.")),
    };
    if let Some(key) = args.keys().find(|k| *k != "message" && *k != "parameters") {
        return Err(invalid(&format!("unknown argument '{key}'.")));
    }
    let message = args
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| invalid("'message' is a non-empty string."))?;
    let mut parameters = BTreeMap::new();
    match args.get("parameters") {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) => {
            for (k, v) in given {
                if !entry.definition.parameters.iter().any(|p| &p.name == k) {
                    return Err(invalid(&format!("the agent has no parameter '{k}'.")));
                }
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return Err(invalid(&format!("parameter '{k}' is a string, number or boolean."))),
                };
                parameters.insert(k.clone(), text);
            }
        }
        Some(_) => return Err(invalid("'parameters' is an object.")),
    }
    let agent = AgentName::parse(&entry.definition.name).map_err(|e| RpcError::internal(e.0))?;
    Ok(Checked { agent, message: message.to_owned(), parameters })
}
