//! Postgres natively, on sqlx: the [`SqlxDriver`] the stores run over, the pool, migrations,
//! and the mapping of database errors.
//!
//! [`PgSettings`] come from configuration (`DATABASE_URL`, `Tracon:PostgreSql:*`).
//! [`connect`] builds a pool whose connections use the configured schema (`search_path`)
//! and statement timeout; [`migrate`] applies the embedded migrations under sqlx's advisory
//! lock, so concurrent starters serialise, and fails loudly when an applied migration was
//! edited. Errors are mapped by SQLSTATE, never by message text.

mod driver;
mod listen;

use std::sync::Arc;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Executor, PgPool};
use tracon_core::error::StoreError;
use tracon_core::stores::Stores;

use crate::protect::Protection;
use crate::sql::is_schema_name;

pub use crate::settings::PgSettings;
pub use driver::{Connections, PING_WHEN_IDLE_FOR, SqlxDriver};
pub use listen::listen;

/// The migrations under `migrations/`, embedded in the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// Why connecting or migrating failed (the message names no secret).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("invalid database URL: {0}")]
    Url(String),
    #[error("cannot reach PostgreSQL: {0}")]
    Connect(String),
    #[error(
        "migration {version} was changed after it was applied to this database; startup refuses to run against a schema that is not what the code expects. Restore the original migration file, or drop and recreate schema '{schema}'."
    )]
    Tampered { version: i64, schema: String },
    #[error("the database has migration {0} that this build does not know; it was migrated by a newer version")]
    Unknown(i64),
    #[error("migrating failed: {0}")]
    Migrate(String),
    #[error("the schema is not current: {0} migration(s) pending; run `tracon migrate` or turn AutoApplyMigrations on")]
    Pending(usize),
}

fn connect_options(settings: &PgSettings) -> Result<(PgPoolOptions, PgConnectOptions), SetupError> {
    let options: PgConnectOptions = settings.url.parse().map_err(|e: sqlx::Error| SetupError::Url(e.to_string()))?;
    let options = options
        .options([
            ("search_path", settings.schema.as_str()),
            ("statement_timeout", &format!("{}", settings.statement_timeout.as_millis())),
        ])
        .application_name(&settings.application_name)
        .disable_statement_logging();
    // The stores run on their own pool of this size ([`SqlxDriver`]); this one serves
    // migrations and `LISTEN`, and keeps nothing open for them.
    let pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .min_connections(0)
        .acquire_timeout(settings.acquire_timeout);
    Ok((pool, options))
}

/// A pool whose connections work inside `settings.schema`; connects now.
pub async fn connect(settings: &PgSettings) -> Result<PgPool, SetupError> {
    let (pool, options) = connect_options(settings)?;
    pool.connect_with(options).await.map_err(|e| SetupError::Connect(e.to_string()))
}

/// The same pool, connecting on first use (serverless cold starts open no connection).
pub fn connect_lazy(settings: &PgSettings) -> Result<PgPool, SetupError> {
    let (pool, options) = connect_options(settings)?;
    Ok(pool.connect_lazy_with(options))
}

/// Applies pending migrations (creating the schema first). Returns how many this call
/// applied. Concurrent callers serialise on an advisory lock scoped to the schema, taken on
/// the connection that migrates, so each counts only its own work.
pub async fn migrate(pool: &PgPool, schema: &str) -> Result<usize, SetupError> {
    if !is_schema_name(schema) {
        return Err(SetupError::Migrate(format!("'{schema}' is not a valid schema name")));
    }
    let failed = |e: sqlx::Error| SetupError::Migrate(e.to_string());
    let mut conn = pool.acquire().await.map_err(|e| SetupError::Connect(e.to_string()))?;
    let lock_key = format!("tracon.migrate.{schema}");
    sqlx::query("SELECT pg_advisory_lock(hashtext($1))").bind(&lock_key).execute(&mut *conn).await.map_err(failed)?;
    let result = async {
        conn.execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str()).await.map_err(failed)?;
        let before = applied_versions(&mut conn).await?;
        MIGRATOR.run(&mut *conn).await.map_err(|e| match e {
            MigrateError::VersionMismatch(version) => SetupError::Tampered { version, schema: schema.to_owned() },
            MigrateError::VersionMissing(version) => SetupError::Unknown(version),
            other => SetupError::Migrate(other.to_string()),
        })?;
        let after = applied_versions(&mut conn).await?;
        Ok(after.len().saturating_sub(before.len()))
    }
    .await;
    if let Err(e) = sqlx::query("SELECT pg_advisory_unlock(hashtext($1))").bind(&lock_key).execute(&mut *conn).await {
        // The lock goes with the connection; make sure the pool does not keep it.
        tracing::warn!(error = %e, "could not release the migration lock; closing the connection");
        drop(conn.detach());
    }
    result
}

/// The embedded migrations not yet applied to the database, without writing anything.
/// An applied migration whose checksum differs is reported as tampered.
pub async fn pending(pool: &PgPool, schema: &str) -> Result<Vec<String>, SetupError> {
    let applied = applied_checksums(pool, schema).await?;
    let mut out = Vec::new();
    for m in MIGRATOR.iter() {
        match applied.iter().find(|(v, _)| *v == m.version) {
            Some((_, checksum)) if checksum.as_slice() != &*m.checksum => {
                return Err(SetupError::Tampered { version: m.version, schema: schema.to_owned() });
            }
            Some(_) => {}
            None => out.push(format!("{} {}", m.version, m.description)),
        }
    }
    Ok(out)
}

async fn applied_versions(conn: &mut sqlx::PgConnection) -> Result<Vec<i64>, SetupError> {
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| SetupError::Migrate(e.to_string()))?;
    if exists.is_none() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| SetupError::Migrate(e.to_string()))
}

async fn applied_checksums(pool: &PgPool, schema: &str) -> Result<Vec<(i64, Vec<u8>)>, SetupError> {
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(format!("{schema}._sqlx_migrations"))
        .fetch_one(pool)
        .await
        .map_err(|e| SetupError::Connect(e.to_string()))?;
    if exists.is_none() {
        return Ok(Vec::new());
    }
    sqlx::query_as("SELECT version, checksum FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(pool)
        .await
        .map_err(|e| SetupError::Migrate(e.to_string()))
}

/// Connects, migrates (or checks that nothing is pending), and builds every store.
pub async fn stores(settings: &PgSettings, protection: Protection) -> Result<(Stores, PgPool), SetupError> {
    let pool = connect(settings).await?;
    if settings.auto_apply_migrations {
        let applied = migrate(&pool, &settings.schema).await?;
        if applied > 0 {
            tracing::info!(applied, schema = %settings.schema, "applied database migrations");
        }
    } else {
        let pending = pending(&pool, &settings.schema).await?;
        if !pending.is_empty() {
            return Err(SetupError::Pending(pending.len()));
        }
    }
    let driver = SqlxDriver::new(pool.clone())?;
    driver.open(settings.min_connections as usize).await;
    Ok((crate::store::stores(Arc::new(driver), protection), pool))
}

/// The stores over an existing, migrated pool.
pub fn stores_on(pool: PgPool, protection: Protection) -> Result<Stores, SetupError> {
    Ok(crate::store::stores(Arc::new(SqlxDriver::new(pool)?), protection))
}

/// Maps a database error by SQLSTATE (never by message text). The detail stays in
/// `StoreError` for the log.
pub fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some(code) => crate::codec::sqlstate_error(code, db.to_string()),
            None => StoreError::Internal { detail: db.to_string() },
        },
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => StoreError::Unavailable { detail: e.to_string() },
        _ => StoreError::Internal { detail: e.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::MIGRATOR;

    #[test]
    fn embedded_migrations_are_numbered_without_gaps_and_include_every_step() {
        let versions: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=versions.len() as i64).collect::<Vec<_>>());
        assert!(MIGRATOR.iter().any(|m| m.version == 2 && m.description == "api keys"), "{versions:?}");
        assert!(MIGRATOR.iter().any(|m| m.version == 3 && m.description == "audit"), "{versions:?}");
        assert!(MIGRATOR.iter().any(|m| m.version == 4 && m.description == "session owner index"), "{versions:?}");
        assert!(MIGRATOR.iter().any(|m| m.version == 5 && m.description == "approvals tenants"), "{versions:?}");
        assert!(MIGRATOR.iter().any(|m| m.version == 6 && m.description == "jobs"), "{versions:?}");
        assert!(MIGRATOR.iter().any(|m| m.version == 7 && m.description == "idempotency"), "{versions:?}");
        assert!(MIGRATOR.iter().any(|m| m.version == 8 && m.description == "triggers"), "{versions:?}");
        assert!(MIGRATOR.iter().any(|m| m.version == 9 && m.description == "webhooks"), "{versions:?}");
    }
}
