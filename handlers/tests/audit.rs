//! The audit trail through the router: every governance write lands in it with its actor
//! and before/after (no secret), newest first and filterable; the chain verifies `Valid`,
//! then `Broken` once an entry is edited behind its back, then `Gap` once one is removed;
//! and a trail that cannot be written does not undo the change it describes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test helpers may fail loudly

mod support;

use std::sync::Arc;

use axum::Router;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use support::Unwritable;
use tracon_core::audit::MemoryAuditStore;
use tracon_core::audit::{AuditEntry, AuditStore, NewAuditEntry};
use tracon_core::model::ModelProvider;
use tracon_core::model::scripted::{ScriptedProvider, ScriptedTurn};
use tracon_core::names::TenantId;
use tracon_core::ports::tokio_rt;
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::stores::Stores;
use tracon_handlers::{AppState, HttpSettings};

const TOKEN: &str = "a-long-enough-test-token";

fn app_on(audit: Arc<dyn AuditStore>) -> Router {
    let script = ScriptedProvider::from_fn("script", |_| ScriptedTurn::text("Hi."));
    let stores = Stores { audit, ..Stores::in_memory() };
    let runtime = RuntimeBuilder::new(tokio_rt::platform())
        .add_provider(Arc::new(script) as Arc<dyn ModelProvider>)
        .stores(stores)
        .build()
        .unwrap();
    tracon_handlers::router(AppState::new(Arc::new(runtime), HttpSettings::with_token(TOKEN)))
}

async fn call(app: &Router, method: Method, path: &str, bearer: &str, body: Option<Value>) -> (StatusCode, Value) {
    let reply = support::call(method, path).bearer(bearer).json(body).send(app).await;
    (reply.status, reply.json_or_null())
}

fn agent(instructions: &str) -> Value {
    json!({"name": "support", "instructions": instructions, "model": {"provider": "script", "model": "m"}})
}

#[tokio::test]
async fn governance_writes_are_traced_and_the_chain_detects_edits_and_removals() {
    let store = Arc::new(MemoryAuditStore::default());
    let app = app_on(store.clone());
    assert_eq!(call(&app, Method::POST, "/api/agents", TOKEN, Some(agent("First."))).await.0, StatusCode::CREATED);
    assert_eq!(call(&app, Method::PUT, "/api/agents/support", TOKEN, Some(agent("Second."))).await.0, StatusCode::OK);
    let rollback = Some(json!({"version": 1}));
    assert_eq!(call(&app, Method::POST, "/api/agents/support/rollback", TOKEN, rollback).await.0, StatusCode::OK);
    let (_, issued) = call(
        &app,
        Method::POST,
        "/api/api-keys",
        TOKEN,
        Some(json!({"name": "auditor", "scopes": ["AuditRead", "AgentsAdmin"]})),
    )
    .await;
    let key = issued["key"].as_str().unwrap().to_owned();
    let key_id = issued["id"].as_str().unwrap().to_owned();
    assert_eq!(call(&app, Method::DELETE, "/api/agents/support", &key, None).await.0, StatusCode::NO_CONTENT);
    assert_eq!(
        call(&app, Method::POST, &format!("/api/api-keys/{key_id}/rotate"), TOKEN, None).await.0,
        StatusCode::OK
    );

    let (status, trail) = call(&app, Method::GET, "/api/audit", TOKEN, None).await;
    assert_eq!(status, StatusCode::OK, "{trail}");
    let actions: Vec<&str> = trail.as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["apiKey.rotate", "agent.delete", "apiKey.create", "agent.rollback", "agent.update", "agent.create"]
    );
    let by_action = |a: &str| trail.as_array().unwrap().iter().find(|e| e["action"] == a).unwrap().clone();
    let update = by_action("agent.update");
    assert_eq!((update["actor"].as_str(), update["entityType"].as_str()), (Some("token"), Some("agent")));
    assert!(
        update["before"].as_str().unwrap().contains("First.") && update["after"].as_str().unwrap().contains("Second.")
    );
    let delete = by_action("agent.delete");
    assert_eq!(delete["actor"], format!("key:{key_id}"), "the key that did it, never the key itself");
    assert!(delete["after"].is_null() && delete["before"].as_str().unwrap().contains("\"version\":3"));
    assert!(!trail.to_string().contains(&key["trk_".len() + 13..]), "no key secret in the trail");
    assert_eq!(trail[0]["hash"].as_str().unwrap().len(), 64);

    // Filters and paging.
    let (_, agents_only) = call(&app, Method::GET, "/api/audit?entityType=agent&take=2&skip=1", TOKEN, None).await;
    let seqs: Vec<u64> = agents_only.as_array().unwrap().iter().map(|e| e["sequence"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [3, 2]);
    let (status, doc) = call(&app, Method::GET, "/api/audit?entity=agent", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::BAD_REQUEST, Some("validation_failed")));
    let (status, doc) = call(&app, Method::GET, "/api/audit?from=yesterday", TOKEN, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{doc}");

    // The chain: valid, then broken where an entry was edited, then a gap where one is gone.
    let verify = || call(&app, Method::GET, "/api/audit/verify", TOKEN, None);
    let (_, report) = verify().await;
    assert_eq!(report, json!({"status": "Valid", "entries": 6, "firstFailingSequence": null}));
    let tenant = TenantId::default_tenant();
    store.tamper(&tenant, |chain| chain[1].after = Some("{\"version\":2,\"definition\":\"forged\"}".into()));
    assert_eq!(verify().await.1, json!({"status": "Broken", "entries": 1, "firstFailingSequence": 2}));
    let pristine = Arc::new(MemoryAuditStore::default());
    for e in store.chain(&tenant).await.unwrap() {
        pristine.append(&tenant, content(&e)).await.unwrap();
    }
    let app = app_on(pristine.clone());
    pristine.tamper(&tenant, |chain| {
        chain.remove(3);
    });
    assert_eq!(
        call(&app, Method::GET, "/api/audit/verify", TOKEN, None).await.1,
        json!({"status": "Gap", "entries": 3, "firstFailingSequence": 4})
    );
}

fn content(e: &AuditEntry) -> NewAuditEntry {
    NewAuditEntry {
        at: e.at,
        actor: e.actor.clone(),
        action: e.action.clone(),
        entity_type: e.entity_type.clone(),
        entity_id: e.entity_id.clone(),
        before: e.before.clone(),
        after: e.after.clone(),
    }
}

#[tokio::test]
async fn an_unwritable_trail_does_not_undo_the_change_and_reading_it_says_unavailable() {
    let app = app_on(Arc::new(Unwritable));
    assert_eq!(call(&app, Method::POST, "/api/agents", TOKEN, Some(agent("Kept."))).await.0, StatusCode::CREATED);
    assert_eq!(call(&app, Method::GET, "/api/agents/support", TOKEN, None).await.0, StatusCode::OK);
    let (status, doc) = call(&app, Method::GET, "/api/audit", TOKEN, None).await;
    assert_eq!((status, doc["errorType"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("store_unavailable")));
    assert!(!doc.to_string().contains("audit database down"));
}
