//! The store contract against Postgres — the same suite the in-memory stores pass — once
//! with content protection off and once with it on. Each test gets its own schema in the
//! test database the test command provisions (`TRACON_TEST_DATABASE_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use tracon_core::idempotency::IdempotencyStore;
use tracon_core::jobs::JobStore;
use tracon_core::stores::Stores;
use tracon_postgres::pg::{PgSettings, stores};
use tracon_postgres::protect::Protection;

pub fn database_url() -> String {
    std::env::var("TRACON_TEST_DATABASE_URL").or_else(|_| std::env::var("DATABASE_URL")).unwrap_or_else(|_| {
        panic!("These tests need PostgreSQL: run ./scripts/test (it provisions one), or set TRACON_TEST_DATABASE_URL to a database you may create schemas in.")
    })
}

fn settings() -> PgSettings {
    let mut settings = PgSettings::new(&database_url());
    settings.schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    settings.max_connections = 8;
    settings
}

async fn fresh(protection: Protection) -> Stores {
    stores(&settings(), protection).await.unwrap().0
}

/// A job store on a fresh, migrated schema.
async fn fresh_jobs(protection: Protection) -> Arc<dyn JobStore> {
    fresh(protection).await.jobs
}

/// A webhook store on a fresh, migrated schema (it holds no protected content, so it runs
/// once, with protection off).
async fn fresh_webhooks() -> Arc<dyn tracon_core::webhooks::WebhookStore> {
    fresh(Protection::off()).await.webhooks
}

/// An idempotency store on a fresh, migrated schema.
async fn fresh_idempotency(protection: Protection) -> Arc<dyn IdempotencyStore> {
    fresh(protection).await.idempotency
}

/// A trigger store on a fresh, migrated schema (through `Stores`, so `stores_on` is what
/// is tested). Nothing in it is protected; it runs under both settings all the same.
async fn fresh_triggers(protection: Protection) -> Arc<dyn tracon_core::triggers::TriggerStore> {
    fresh(protection).await.triggers
}

mod plain {
    tracon_core::store_contract_tests!(super::fresh(tracon_postgres::protect::Protection::off()));
    tracon_core::webhook_store_contract_tests!(super::fresh_webhooks());
    tracon_core::job_store_contract_tests!(super::fresh_jobs(tracon_postgres::protect::Protection::off()));
    tracon_core::idempotency_store_contract_tests!(super::fresh_idempotency(
        tracon_postgres::protect::Protection::off()
    ));
    mod triggers {
        tracon_core::trigger_store_contract_tests!(super::super::fresh_triggers(
            tracon_postgres::protect::Protection::off()
        ));
    }
}

mod protected {
    tracon_core::store_contract_tests!(super::fresh(tracon_postgres::protect::Protection::with_key(7, &[42; 32])));
    tracon_core::job_store_contract_tests!(super::fresh_jobs(tracon_postgres::protect::Protection::with_key(
        7, &[42; 32]
    )));
    tracon_core::idempotency_store_contract_tests!(super::fresh_idempotency(
        tracon_postgres::protect::Protection::with_key(7, &[42; 32])
    ));
    mod triggers {
        tracon_core::trigger_store_contract_tests!(super::super::fresh_triggers(
            tracon_postgres::protect::Protection::with_key(7, &[42; 32])
        ));
    }
}
