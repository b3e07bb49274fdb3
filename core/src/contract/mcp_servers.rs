//! The MCP server store's contract: a tenant's registrations (by name, replaced in place with
//! their creation time kept, removed once), each discovery stored only against the
//! registration it describes, and nothing visible to another tenant.

use std::collections::BTreeMap;

use chrono::Duration;

use super::fixtures::{a, b, t0};
use crate::error::StoreError;
use crate::mcp::{McpDiscovery, McpResourceInfo, McpServerName, McpServerRecord, McpToolInfo};
use crate::stores::Stores;

fn name(s: &str) -> McpServerName {
    McpServerName::parse(s).unwrap()
}

fn record(n: &str, endpoint: &str) -> McpServerRecord {
    McpServerRecord {
        name: name(n),
        endpoint: endpoint.into(),
        authorization_configuration_key: Some("Tracon:McpSecrets:a:Crm".into()),
        header_configuration_keys: BTreeMap::from([("X-Api-Key".to_owned(), "Tracon:McpSecrets:a:CrmKey".to_owned())]),
        requires_approval: true,
        oauth: None,
        created_at: t0(),
        updated_at: t0(),
    }
}

fn discovery(tool: &str) -> McpDiscovery {
    McpDiscovery {
        refreshed_at: t0() + Duration::seconds(1),
        protocol_version: Some("2026-07-28".into()),
        tools: vec![McpToolInfo {
            name: tool.into(),
            tool_name: format!("crm_{tool}"),
            title: Some("Look up".into()),
            description: "Finds a customer.".into(),
            input_schema: serde_json::json!({"type": "object", "properties": {"id": {"type": "string"}}}),
            read_only: true,
            destructive: false,
        }],
        prompts: Vec::new(),
        resources: vec![McpResourceInfo {
            uri: "file:///policy.md".into(),
            name: "policy".into(),
            mime_type: Some("text/markdown".into()),
            description: None,
        }],
        warnings: vec!["1 tool(s) were left out.".into()],
        reachable: true,
    }
}

pub async fn mcp_servers_are_kept_per_tenant_with_their_discovery(s: Stores) {
    let m = &s.mcp_servers;
    assert!(m.list(&a(), 0, 10).await.unwrap().is_empty());
    let crm = m.put(&a(), &record("crm", "https://crm.example/mcp")).await.unwrap();
    m.put(&a(), &record("billing", "https://billing.example/mcp")).await.unwrap();
    let listed = m.list(&a(), 0, 10).await.unwrap();
    assert_eq!(listed.iter().map(|s| s.record.name.as_str()).collect::<Vec<_>>(), ["billing", "crm"]);
    assert_eq!(m.list(&a(), 1, 1).await.unwrap()[0].record.name.as_str(), "crm", "paged by name");
    let got = m.get(&a(), &name("crm")).await.unwrap().unwrap();
    assert_eq!(got.record, crm);
    assert_eq!(got.record.header_configuration_keys.len(), 1);
    assert_eq!(got.discovery, None, "nothing discovered yet");

    // A discovery is stored against the registration it describes.
    assert!(m.save_discovery(&a(), &name("crm"), crm.updated_at, &discovery("lookup")).await.unwrap());
    assert_eq!(m.get(&a(), &name("crm")).await.unwrap().unwrap().discovery, Some(discovery("lookup")));
    assert!(!m.save_discovery(&a(), &name("ghost"), crm.updated_at, &discovery("x")).await.unwrap());

    // A replacement keeps the creation time and forgets the old discovery; a discovery of the
    // old registration that lands late changes nothing.
    let mut moved = record("crm", "https://crm2.example/mcp");
    moved.requires_approval = false;
    moved.authorization_configuration_key = None;
    moved.header_configuration_keys.clear();
    moved.created_at = t0() + Duration::seconds(9);
    moved.updated_at = t0() + Duration::seconds(10);
    let stored = m.put(&a(), &moved).await.unwrap();
    assert_eq!(stored.created_at, crm.created_at);
    assert_eq!((stored.endpoint.as_str(), stored.requires_approval), ("https://crm2.example/mcp", false));
    assert_eq!(stored.authorization_configuration_key, None);
    let got = m.get(&a(), &name("crm")).await.unwrap().unwrap();
    assert_eq!((got.record.clone(), got.discovery), (stored.clone(), None));
    assert!(!m.save_discovery(&a(), &name("crm"), crm.updated_at, &discovery("stale")).await.unwrap());
    assert_eq!(m.get(&a(), &name("crm")).await.unwrap().unwrap().discovery, None);
    assert!(m.save_discovery(&a(), &name("crm"), stored.updated_at, &discovery("fresh")).await.unwrap());

    // Another tenant sees, changes and removes nothing.
    assert!(m.list(&b(), 0, 10).await.unwrap().is_empty());
    assert!(m.get(&b(), &name("crm")).await.unwrap().is_none());
    assert!(!m.save_discovery(&b(), &name("crm"), stored.updated_at, &discovery("hijack")).await.unwrap());
    assert!(!m.delete(&b(), &name("crm")).await.unwrap());
    m.put(&b(), &record("crm", "https://other.example/mcp")).await.unwrap();
    assert_eq!(m.get(&a(), &name("crm")).await.unwrap().unwrap().record.endpoint, "https://crm2.example/mcp");
    assert_eq!(
        m.get(&a(), &name("crm")).await.unwrap().unwrap().discovery.unwrap().tools[0].name,
        "fresh",
        "another tenant's write of the same name touches nothing of this one's"
    );

    assert!(m.delete(&a(), &name("crm")).await.unwrap());
    assert!(!m.delete(&a(), &name("crm")).await.unwrap());
    assert!(m.get(&a(), &name("crm")).await.unwrap().is_none());
    assert_eq!(m.get(&b(), &name("crm")).await.unwrap().unwrap().record.endpoint, "https://other.example/mcp");

    // The oauth object round-trips.
    let mut with_oauth = record("secure", "https://secure.example/mcp");
    with_oauth.authorization_configuration_key = None;
    with_oauth.oauth = Some(crate::mcp::oauth::McpOAuthConfig {
        client_id: Some("client-1".into()),
        client_secret_configuration_key: Some("Tracon:McpSecrets:a:Secret".into()),
        scopes: vec!["crm.read".into(), "crm.write".into()],
    });
    let stored = m.put(&a(), &with_oauth).await.unwrap();
    assert_eq!(stored.oauth, with_oauth.oauth);
    assert_eq!(m.get(&a(), &name("secure")).await.unwrap().unwrap().record, stored);

    let mut nul = record("nul", "https://x.example/mcp");
    nul.authorization_configuration_key = Some("a\u{0}".into());
    assert!(matches!(m.put(&a(), &nul).await, Err(StoreError::InvalidText { .. })));
    let billing = m.get(&a(), &name("billing")).await.unwrap().unwrap().record;
    let mut bad = discovery("lookup");
    bad.tools[0].description = "x\u{0}".into();
    assert!(matches!(
        m.save_discovery(&a(), &name("billing"), billing.updated_at, &bad).await,
        Err(StoreError::InvalidText { .. })
    ));
}
