//! At-rest content protection against a real database: ciphertext in the table, transparent
//! reads, tampering fails closed, rows written before protection stay readable.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use chrono::Utc;
use sqlx::PgPool;
use tracon_core::error::StoreError;
use tracon_core::events::ToolCallStatus;
use tracon_core::events::{RecordedEvent, RunEvent};
use tracon_core::model::Message;
use tracon_core::names::{RunId, TenantId};
use tracon_core::runs::store::{RunInputRecord, RunRecord, RunStatus, ToolCallRecord};
use tracon_core::sessions::SessionWrite;
use tracon_core::stores::Stores;
use tracon_postgres::pg::{PgSettings, connect, migrate, stores_on};
use tracon_postgres::protect::Protection;

const SECRET: &str = "the-patient-is-Ada-Lovelace-7731";

fn database_url() -> String {
    std::env::var("TRACON_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| panic!("These tests need PostgreSQL: run ./scripts/test, or set TRACON_TEST_DATABASE_URL."))
}

async fn pool() -> PgPool {
    let mut settings = PgSettings::new(&database_url());
    settings.schema = format!("p_{}", uuid::Uuid::new_v4().simple());
    let pool = connect(&settings).await.unwrap();
    migrate(&pool, &settings.schema).await.unwrap();
    pool
}

fn key() -> Protection {
    Protection::with_key(1, &[11; 32])
}

fn tenant() -> TenantId {
    TenantId::default_tenant()
}

fn write(text: &str) -> SessionWrite {
    SessionWrite {
        agent_name: "a".into(),
        run_id: None,
        messages: vec![Message::user(text)],
        owner_user_id: None,
        now: Utc::now(),
    }
}

async fn write_run(stores: &Stores, text: &str) -> RunId {
    let id = RunId(uuid::Uuid::now_v7());
    let row = RunRecord { heartbeat_at: None, ..RunRecord::opened(id, "a", None, RunStatus::Running, Utc::now()) };
    let input =
        RunInputRecord { message: text.into(), culture: None, parameters: BTreeMap::new(), documents: Vec::new() };
    stores.runs.create_run(&tenant(), &row, Some(&input)).await.unwrap();
    let event =
        RecordedEvent { sequence: 1, timestamp: Utc::now(), event: RunEvent::MessageDelta { text: text.into() } };
    stores.runs.append_events(&tenant(), id, &[event], Utc::now()).await.unwrap();
    let call = ToolCallRecord {
        run_id: id,
        call_id: "c1".into(),
        tool_name: "lookup".into(),
        arguments: format!("{{\"q\":\"{text}\"}}"),
        effect: None,
        status: ToolCallStatus::Succeeded,
        result: Some(format!("found {text}")),
        error: None,
        omitted_bytes: None,
        started_at: Utc::now(),
        duration_ms: 1,
        timed_out: false,
        late_completed_at: None,
        late_duration_ms: None,
        late_result: None,
        late_error: None,
    };
    stores.runs.record_tool_call(&tenant(), &call).await.unwrap();
    // The same call waiting for a person: its arguments are the user's content too.
    let approval = tracon_core::approvals::ApprovalRecord {
        id: uuid::Uuid::now_v7(),
        tenant: tenant(),
        run_id: id,
        session_id: None,
        agent_name: "a".into(),
        call_id: "c1".into(),
        tool_name: "lookup".into(),
        arguments: serde_json::json!({"q": text}),
        effect: tracon_core::tools::effect::ToolEffect::Read,
        requested_by: None,
        created_at: Utc::now(),
        expires_at: Utc::now() + chrono::Duration::hours(1),
        status: tracon_core::approvals::ApprovalStatus::Pending,
        decided_at: None,
        decided_by: None,
        reason: None,
        resumed_run_id: None,
    };
    stores.approvals.create(std::slice::from_ref(&approval)).await.unwrap();
    id
}

/// Every protected column, as raw bytes.
async fn raw_columns(pool: &PgPool) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for q in [
        "SELECT content FROM session_items",
        "SELECT payload FROM run_events",
        "SELECT input FROM runs WHERE input IS NOT NULL",
        "SELECT arguments FROM tool_calls",
        "SELECT result FROM tool_calls WHERE result IS NOT NULL",
        "SELECT arguments FROM approval_requests",
    ] {
        out.extend(sqlx::query_scalar::<_, Vec<u8>>(q).fetch_all(pool).await.unwrap());
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn protected_content_is_ciphertext_in_the_table_and_plain_through_the_stores() {
    let pool = pool().await;
    let stores = stores_on(pool.clone(), key()).unwrap();
    stores.sessions.try_create(&tenant(), "s1", &write(SECRET)).await.unwrap();
    let run = write_run(&stores, SECRET).await;

    let raw = raw_columns(&pool).await;
    assert_eq!(raw.len(), 6);
    for value in &raw {
        assert_eq!(value[0], 0x01, "sealed");
        assert!(!contains(value, SECRET) && !contains(value, "Ada"), "no plaintext in the table");
    }
    let items = stores.sessions.items(&tenant(), "s1").await.unwrap();
    assert_eq!(items[0].message, Message::user(SECRET));
    let events = stores.runs.read_events(&tenant(), run, 0, 10).await.unwrap();
    assert_eq!(events[0].event, RunEvent::MessageDelta { text: SECRET.into() });
    assert_eq!(stores.runs.get_input(&tenant(), run).await.unwrap().unwrap().message, SECRET);
    let calls = stores.runs.list_tool_calls(&tenant(), run).await.unwrap();
    assert_eq!(calls[0].result.as_deref(), Some(format!("found {SECRET}").as_str()));
    let pending = stores.approvals.list_for_run(&tenant(), run).await.unwrap();
    assert_eq!(pending[0].arguments["q"], SECRET);
}

#[tokio::test]
async fn a_tampered_or_moved_ciphertext_fails_closed() {
    let pool = pool().await;
    let stores = stores_on(pool.clone(), key()).unwrap();
    stores.sessions.try_create(&tenant(), "s1", &write("first")).await.unwrap();
    stores.sessions.try_append(&tenant(), "s1", 1, &write("second")).await.unwrap();
    // Moving item 0's ciphertext onto item 1 must not open as item 1.
    sqlx::query(
        "UPDATE session_items SET content = (SELECT content FROM session_items WHERE sequence = 0) WHERE sequence = 1",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert!(matches!(stores.sessions.items(&tenant(), "s1").await, Err(StoreError::Internal { .. })));

    let run = write_run(&stores, "hello").await;
    sqlx::query("UPDATE run_events SET payload = overlay(payload placing '\\x00'::bytea from length(payload) for 1)")
        .execute(&pool)
        .await
        .unwrap();
    assert!(matches!(stores.runs.read_events(&tenant(), run, 0, 10).await, Err(StoreError::Internal { .. })));
    // Without the key, sealed values do not open either.
    let keyless = stores_on(pool.clone(), Protection::off()).unwrap();
    assert!(matches!(keyless.runs.get_input(&tenant(), run).await, Err(StoreError::Internal { .. })));
}

#[tokio::test]
async fn rows_written_before_protection_stay_readable_next_to_new_ones() {
    let pool = pool().await;
    let before = stores_on(pool.clone(), Protection::off()).unwrap();
    before.sessions.try_create(&tenant(), "s1", &write("written in plain text")).await.unwrap();
    let old_run = write_run(&before, "old").await;

    let after = stores_on(pool.clone(), key()).unwrap();
    after.sessions.try_append(&tenant(), "s1", 1, &write("written sealed")).await.unwrap();
    let new_run = write_run(&after, "new").await;

    let headers: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT sequence, content FROM session_items ORDER BY sequence").fetch_all(&pool).await.unwrap();
    assert_eq!(headers.iter().map(|(_, c)| c[0]).collect::<Vec<_>>(), vec![0x00, 0x01], "each row's own header");
    let items = after.sessions.items(&tenant(), "s1").await.unwrap();
    assert_eq!(
        items.iter().map(|i| i.message.clone()).collect::<Vec<_>>(),
        vec![Message::user("written in plain text"), Message::user("written sealed")]
    );
    assert_eq!(after.runs.get_input(&tenant(), old_run).await.unwrap().unwrap().message, "old");
    assert_eq!(after.runs.get_input(&tenant(), new_run).await.unwrap().unwrap().message, "new");
    assert_eq!(after.runs.list_tool_calls(&tenant(), old_run).await.unwrap()[0].arguments, r#"{"q":"old"}"#);
}
