//! `tracon-probe`: the `tracon` local server with four more tools, for the crash tests that
//! count what ran. Each tool sleeps for its `ms` argument (so a `kill -9` can land inside a
//! body), then writes one row to `probe_effects` in the server's schema — its idempotency
//! key, its name and its run — as the side effect a test counts: a key with two rows ran
//! twice.
//!
//! | tool | effect | `SafeToRepeat` |
//! |---|---|---|
//! | `probe_read` | Read | — |
//! | `probe_write` | Write | — |
//! | `probe_external` | External | no |
//! | `probe_safe` | External | yes |
//!
//! It also registers the workflow function `probe-count`: it waits 200 ms, records one
//! `probe_effects` row keyed `{rootRunId}:{executorId}` (tool `probe-count`), and appends a
//! word count to its input.
//!
//! The arguments and environment are the `tracon` binary's (`DATABASE_URL`,
//! `Tracon__PostgreSql__SchemaName`); without a database the tools fail.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tracon_core::runtime::RuntimeBuilder;
use tracon_core::tools::effect::ToolEffect;
use tracon_core::tools::{ToolContext, ToolError, ToolOutput, ToolRegistration, tool_fn};
use tracon_core::workflows::functions::{FunctionCall, FunctionError, FunctionOutput, WorkflowFunction};

fn main() -> ExitCode {
    tracon::cli::main(probe_tools)
}

fn probe_tools(builder: RuntimeBuilder) -> RuntimeBuilder {
    builder
        .add_tool(probe("probe_read", ToolEffect::Read, false))
        .add_tool(probe("probe_write", ToolEffect::Write, false))
        .add_tool(probe("probe_external", ToolEffect::External, false))
        .add_tool(probe("probe_safe", ToolEffect::External, true))
        .add_workflow_function(
            "probe-count",
            "Waits 200 ms, records that it ran, and appends a word count.",
            std::sync::Arc::new(Count),
            None,
        )
}

/// The `probe-count` workflow function.
struct Count;

#[async_trait::async_trait]
impl WorkflowFunction for Count {
    async fn call(&self, call: FunctionCall<'_>) -> Result<FunctionOutput, FunctionError> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let key = format!("{}:{}", call.run_id, call.executor_id);
        record_effect(&key, "probe-count", call.run_id.0).await.map_err(FunctionError::permanent)?;
        let words = call.input().split_whitespace().count();
        Ok(FunctionOutput::Messages(vec![format!("{} ({words} words)", call.input())]))
    }
}

fn probe(
    name: &'static str,
    effect: ToolEffect,
    safe_to_repeat: bool,
) -> Result<ToolRegistration, tracon_core::tools::RegistrationError> {
    let schema = json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}});
    ToolRegistration::new(
        name,
        "Waits `ms` milliseconds, then records that it ran.",
        schema,
        tool_fn(move |args: Value, ctx: ToolContext| async move {
            let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0).min(10_000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            record(name, &ctx).await.map_err(|e| ToolError::Foreign { type_name: "ProbeStore".into(), detail: e })?;
            Ok(ToolOutput::from(format!("{name} ran")))
        }),
    )
    .map(|r| r.effect(effect).safe_to_repeat(safe_to_repeat))
}

/// The server's own database and schema, with the effects table.
async fn pool() -> Result<&'static (sqlx::PgPool, String), String> {
    static POOL: OnceCell<(sqlx::PgPool, String)> = OnceCell::const_new();
    POOL.get_or_try_init(|| async {
        let url = std::env::var("DATABASE_URL").map_err(|_| "no DATABASE_URL".to_owned())?;
        let schema = std::env::var("Tracon__PostgreSql__SchemaName").unwrap_or_else(|_| "tracon".into());
        if !schema.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            return Err(format!("schema name {schema:?} is not a plain identifier"));
        }
        let pool =
            sqlx::postgres::PgPoolOptions::new().max_connections(4).connect(&url).await.map_err(|e| e.to_string())?;
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {schema}.probe_effects (idempotency_key text NOT NULL, tool text NOT NULL, \
             run_id uuid NOT NULL, recorded_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        ))
        .execute(&pool)
        .await
        .map_err(|e| e.to_string())?;
        Ok((pool, schema))
    })
    .await
}

async fn record(tool: &str, ctx: &ToolContext) -> Result<(), String> {
    record_effect(&ctx.idempotency_key, tool, ctx.run_id.0).await
}

async fn record_effect(key: &str, tool: &str, run: uuid::Uuid) -> Result<(), String> {
    let (pool, schema) = pool().await?;
    sqlx::query(&format!("INSERT INTO {schema}.probe_effects (idempotency_key, tool, run_id) VALUES ($1, $2, $3)"))
        .bind(key)
        .bind(tool)
        .bind(run)
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
