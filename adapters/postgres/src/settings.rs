//! `DATABASE_URL` and `Tracon:PostgreSql:*`: how to reach Postgres, parsed once for both
//! drivers (the sqlx pool natively, the Worker's sockets).

use std::time::Duration;

use tracon_core::config::{Config, ConfigError};

use crate::sql::is_schema_name;

/// How to reach Postgres.
#[derive(Clone)]
pub struct PgSettings {
    pub url: String,
    pub schema: String,
    pub auto_apply_migrations: bool,
    pub max_connections: u32,
    pub min_connections: u32,
    pub acquire_timeout: Duration,
    /// `statement_timeout` of every connection.
    pub statement_timeout: Duration,
    /// `application_name` of every connection (what `pg_stat_activity` shows).
    pub application_name: String,
    /// TLS to the database (`Tracon:PostgreSql:Tls`, on unless `off`). The Worker's socket
    /// reads it; natively the URL's `sslmode` decides.
    pub tls: bool,
}

impl std::fmt::Debug for PgSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a password.
        f.debug_struct("PgSettings")
            .field("schema", &self.schema)
            .field("auto_apply_migrations", &self.auto_apply_migrations)
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

impl PgSettings {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            schema: "tracon".into(),
            auto_apply_migrations: true,
            max_connections: 10,
            min_connections: 0,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            application_name: "tracon".into(),
            tls: true,
        }
    }

    /// `url` (from `--database-url` / `DATABASE_URL`) plus `Tracon:PostgreSql:SchemaName`,
    /// `AutoApplyMigrations`, `MaxConnections`, `MinConnections`, `AcquireTimeoutSeconds`,
    /// `CommandTimeoutSeconds`, `ApplicationName`, `Tls` — for both drivers, read here only.
    pub fn from_config(url: &str, config: &Config) -> Result<Self, ConfigError> {
        let d = Self::new(url);
        let schema = config.get("Tracon:PostgreSql:SchemaName").unwrap_or("tracon").to_owned();
        if !is_schema_name(&schema) {
            return Err(ConfigError::Message(format!(
                "Tracon:PostgreSql:SchemaName '{schema}' must be a lowercase identifier (letters, digits, '_')."
            )));
        }
        Ok(Self {
            schema,
            auto_apply_migrations: config.bool("Tracon:PostgreSql:AutoApplyMigrations")?.unwrap_or(true),
            max_connections: config.parse("Tracon:PostgreSql:MaxConnections")?.unwrap_or(d.max_connections).max(1),
            min_connections: config.parse("Tracon:PostgreSql:MinConnections")?.unwrap_or(d.min_connections),
            acquire_timeout: config.seconds("Tracon:PostgreSql:AcquireTimeoutSeconds")?.unwrap_or(d.acquire_timeout),
            statement_timeout: config
                .seconds("Tracon:PostgreSql:CommandTimeoutSeconds")?
                .unwrap_or(d.statement_timeout),
            application_name: config.get("Tracon:PostgreSql:ApplicationName").unwrap_or("tracon").to_owned(),
            tls: !config.get("Tracon:PostgreSql:Tls").is_some_and(|v| v.trim().eq_ignore_ascii_case("off")),
            ..d
        })
    }
}
