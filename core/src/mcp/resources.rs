//! `mcpResourceUris`: static resources of a tenant's MCP servers, read when a run starts and
//! added to its instructions — a snapshot, never a live pull during the run.
//!
//! An entry is `{server}:{uri}` (split at the first `:`; server names have none). Only a URI
//! the server advertises in its discovery is read — accepting any URI would make the server
//! an SSRF tool. A resource over [`MAX_RESOURCE_BYTES`] is left out, and so is everything past
//! [`MAX_TOTAL_BYTES`]; a server that cannot be reached leaves its resources out. None of that
//! refuses the run: the log says what was left out and why.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::McpServerName;
use super::service::McpServers;
use crate::error::StoreError;
use crate::names::TenantId;
use crate::report::{Problem, ProblemCode};

/// Largest resource read into a run's context.
pub const MAX_RESOURCE_BYTES: usize = 64 * 1024;
/// Most text all of an agent's resources add.
pub const MAX_TOTAL_BYTES: usize = 256 * 1024;
pub use crate::definition::{
    MAX_MCP_RESOURCE_URI_LEN as MAX_URI_LEN, MAX_MCP_RESOURCES as MAX_ENTRIES, mcp_resource as parse,
};

/// What the tenant's servers say of the entries (the save path: the stored discovery, no
/// round trip): a server that is not registered, or a URI its last successful discovery did
/// not advertise.
pub async fn problems(servers: &McpServers, tenant: &TenantId, entries: &[String]) -> Result<Vec<Problem>, StoreError> {
    let mut problems = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let Some((server, uri)) = parse(entry) else { continue };
        let field = format!("mcpResourceUris[{i}]");
        match servers.store().get(tenant, &server).await? {
            None => problems.push(Problem::new(
                ProblemCode::UnknownMcpResource,
                field,
                format!("No MCP server named '{server}' is registered."),
            )),
            Some(found) => {
                let known = found.discovery.as_ref().filter(|d| d.reachable);
                if known.is_some_and(|d| !d.resources.iter().any(|r| r.uri == uri)) {
                    problems.push(Problem::new(
                        ProblemCode::UnknownMcpResource,
                        field,
                        format!("The MCP server '{server}' does not advertise that resource."),
                    ));
                }
            }
        }
    }
    Ok(problems)
}

/// Reads the entries now and returns the text they add to the run's instructions (`None`
/// when nothing could be read).
pub async fn snapshot(
    servers: &Arc<McpServers>,
    tenant: &TenantId,
    entries: &[String],
) -> Result<Option<String>, StoreError> {
    let mut by_server: BTreeMap<McpServerName, Vec<&str>> = BTreeMap::new();
    for entry in entries {
        if let Some((server, uri)) = parse(entry) {
            by_server.entry(server).or_default().push(uri);
        }
    }
    let mut blocks = Vec::new();
    let mut total = 0usize;
    for (name, uris) in by_server {
        let Some(server) = servers.current(tenant, &name).await? else {
            tracing::warn!(tenant = %tenant, server = %name, "an MCP resource names a server that is not registered; left out");
            continue;
        };
        let advertised = server.discovery.as_ref().map(|d| d.resources.as_slice()).unwrap_or_default();
        let wanted: Vec<&str> = uris.into_iter().filter(|u| advertised.iter().any(|r| r.uri == *u)).collect();
        if wanted.is_empty() {
            tracing::warn!(tenant = %tenant, server = %name, "no MCP resource named is advertised by its server now; left out");
            continue;
        }
        let mut conn = match crate::platform::send_future(servers.connect(tenant, &server.record)).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(tenant = %tenant, server = %name, detail = %e, "MCP resources could not be read; left out");
                continue;
            }
        };
        for uri in wanted {
            let read = crate::platform::send_future(conn.request("resources/read", json!({ "uri": uri }))).await;
            let text = match read.map(serde_json::from_value::<rmcp::model::ReadResourceResult>) {
                Ok(Ok(result)) => text_of(result),
                Ok(Err(e)) => {
                    tracing::warn!(server = %name, uri, detail = %e, "an MCP resource's answer was not valid; left out");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(server = %name, uri, detail = %e, "an MCP resource could not be read; left out");
                    continue;
                }
            };
            if text.len() > MAX_RESOURCE_BYTES {
                tracing::warn!(server = %name, uri, bytes = text.len(), "an MCP resource is over 64 KB; left out");
                continue;
            }
            if total + text.len() > MAX_TOTAL_BYTES {
                tracing::warn!(server = %name, uri, "the MCP resources are over 256 KB in all; the rest are left out");
                return Ok(finish(blocks));
            }
            total += text.len();
            blocks
                .push(format!("<resource server=\"{name}\" uri=\"{}\">\n{text}\n</resource>", uri.replace('"', "%22")));
        }
    }
    Ok(finish(blocks))
}

fn finish(blocks: Vec<String>) -> Option<String> {
    (!blocks.is_empty())
        .then(|| format!("Resources read from MCP servers when this run started:\n\n{}", blocks.join("\n\n")))
}

/// The text contents of a read (binary contents are left out).
fn text_of(result: rmcp::model::ReadResourceResult) -> String {
    result
        .contents
        .into_iter()
        .filter_map(|c| match c {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => Some(text),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_a_server_then_a_uri() {
        assert_eq!(
            parse("crm:file:///policy.md").map(|(s, u)| (s.to_string(), u)),
            Some(("crm".into(), "file:///policy.md"))
        );
        for bad in ["crm", "crm:", ":file:///a", "CRM:file:///a", "crm:a\nb"] {
            assert!(parse(bad).is_none(), "{bad}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("crm:file:///{i}")).collect();
        let shape = |entries: &[String]| crate::definition::mcp_resource_problems(entries);
        assert!(shape(&many).iter().any(|p| p.code == ProblemCode::LimitExceeded));
        let twice = vec!["crm:file:///a".to_owned(), "crm:file:///a".to_owned()];
        assert_eq!(shape(&twice)[0].code, ProblemCode::Duplicate);
    }
}
