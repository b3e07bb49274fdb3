//! A discovered MCP tool as a [`ToolRegistration`]: named `{server}_{tool}`, its source the
//! server's name, approval as the server record says (on by default), and a body that sends
//! `tools/call`. The registration joins the agent's tools at compile time, so a call goes
//! through the one pipeline — authorization, argument validation, timeout, approval — and is
//! recorded like any other.
//!
//! What the model gets: the text blocks of the result (other blocks as JSON). A result the
//! server marks `isError`, or any failure of the exchange, reaches the model and the record
//! in our words only; the server's text goes to the log.

use std::sync::Arc;

use serde_json::{Value, json};

use super::service::McpServers;
use super::{McpServerRecord, McpToolInfo};
use crate::tools::effect::ToolEffect;
use crate::tools::{RegistrationError, Tool, ToolContext, ToolError, ToolOutput, ToolRegistration};

/// The registration of one discovered tool of `record`'s server.
pub fn registration(
    servers: Arc<McpServers>,
    record: &McpServerRecord,
    tool: &McpToolInfo,
) -> Result<ToolRegistration, RegistrationError> {
    let effect = if tool.destructive {
        ToolEffect::Destructive
    } else if tool.read_only {
        ToolEffect::Read
    } else {
        ToolEffect::External
    };
    let body = McpTool { servers, record: record.clone(), tool: tool.name.clone() };
    let mut reg = ToolRegistration::new(&tool.tool_name, &tool.description, tool.input_schema.clone(), body)?
        .effect(effect)
        .requires_approval(record.requires_approval)
        .source(record.name.as_str());
    if let Some(title) = &tool.title {
        reg = reg.display_name(title);
    }
    Ok(reg)
}

struct McpTool {
    servers: Arc<McpServers>,
    record: McpServerRecord,
    tool: String,
}

#[async_trait::async_trait]
impl Tool for McpTool {
    async fn call(&self, arguments: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let outcome = async {
            let mut conn = self.servers.connect(&ctx.tenant, &self.record).await?;
            conn.request("tools/call", json!({ "name": self.tool, "arguments": arguments })).await
        };
        let result = crate::platform::send_future(outcome).await.map_err(|e| {
            let reference = crate::failure::new_ref();
            tracing::warn!(server = %self.record.name, tool = %self.tool, r#ref = %reference, detail = %e,
                "MCP tool call failed");
            ToolError::message(format!("{} (ref: {reference})", e.public_text()))
        })?;
        let parsed: rmcp::model::CallToolResult = serde_json::from_value(result)
            .map_err(|e| ToolError::Foreign { type_name: "McpProtocolError".into(), detail: e.to_string() })?;
        if parsed.is_error == Some(true) {
            return Err(ToolError::Foreign {
                type_name: "McpToolError".into(),
                detail: serde_json::to_string(&parsed.content).unwrap_or_default(),
            });
        }
        Ok(output(parsed))
    }
}

/// Text blocks joined; anything else (images, embedded resources) as the JSON of its blocks;
/// structured content alone as itself.
fn output(result: rmcp::model::CallToolResult) -> ToolOutput {
    use rmcp::model::ContentBlock;
    let texts: Option<Vec<&str>> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    match (texts, result.structured_content) {
        (Some(texts), _) if !texts.is_empty() => ToolOutput::Text(texts.join("\n")),
        (_, Some(structured)) if result.content.is_empty() => ToolOutput::Json(structured),
        _ => ToolOutput::Json(serde_json::to_value(&result.content).unwrap_or(Value::Null)),
    }
}

/// The tool names of `names` that name an MCP tool of `tenant` — `{server}_{tool}` for one of
/// its servers, and no code tool of that name (code wins) — each with its registration when
/// the server offers it. `current`: refresh a stale discovery first (a run); otherwise the
/// stored one is read (the save path, which must not wait on a remote server).
pub async fn resolve(
    servers: &Arc<McpServers>,
    tenant: &crate::names::TenantId,
    names: &[String],
    code: &crate::tools::ToolRegistry,
    current: bool,
) -> Result<std::collections::BTreeMap<String, Option<Arc<ToolRegistration>>>, crate::error::StoreError> {
    use std::collections::BTreeMap;
    let mut by_server: BTreeMap<super::McpServerName, Vec<&String>> = BTreeMap::new();
    for name in names {
        if code.get(name).is_some() {
            continue;
        }
        if let Some((server, _)) = name.split_once('_')
            && let Ok(server) = super::McpServerName::parse(server)
        {
            by_server.entry(server).or_default().push(name);
        }
    }
    let mut out = BTreeMap::new();
    for (server, wanted) in by_server {
        let found = if current {
            servers.current(tenant, &server).await?
        } else {
            servers.store().get(tenant, &server).await?
        };
        let Some(found) = found else { continue };
        let offered = found.discovery.as_ref().map(|d| d.tools.as_slice()).unwrap_or_default();
        for name in wanted {
            let reg = offered.iter().find(|t| &t.tool_name == name).and_then(|t| {
                registration(servers.clone(), &found.record, t)
                    .inspect_err(|e| tracing::warn!(tool = %name, error = %e, "an MCP tool could not be registered"))
                    .ok()
                    .map(Arc::new)
            });
            if reg.is_none() && current {
                tracing::warn!(tenant = %tenant, server = %server, tool = %name,
                    "the agent names an MCP tool its server does not offer now; it is left out");
            }
            out.insert(name.clone(), reg);
        }
    }
    Ok(out)
}
