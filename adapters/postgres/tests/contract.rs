//! The store contract against Postgres — the same suite the in-memory stores pass — once
//! with content protection off and once with it on. Each test gets its own schema in the
//! test database the test command provisions (`TRACON_TEST_DATABASE_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tracon_core::store::Stores;
use tracon_postgres::pg::{PgSettings, stores};
use tracon_postgres::protect::Protection;

pub fn database_url() -> String {
    std::env::var("TRACON_TEST_DATABASE_URL").or_else(|_| std::env::var("DATABASE_URL")).unwrap_or_else(|_| {
        panic!("These tests need PostgreSQL: run ./scripts/test (it provisions one), or set TRACON_TEST_DATABASE_URL to a database you may create schemas in.")
    })
}

async fn fresh(protection: Protection) -> Stores {
    let mut settings = PgSettings::new(&database_url());
    settings.schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    settings.max_connections = 8;
    stores(&settings, protection).await.unwrap().0
}

mod plain {
    tracon_core::store_contract_tests!(super::fresh(tracon_postgres::protect::Protection::off()));
}

mod protected {
    tracon_core::store_contract_tests!(super::fresh(tracon_postgres::protect::Protection::with_key(7, &[42; 32])));
}
