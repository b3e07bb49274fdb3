//! `tracon health`: every registered model provider's health, one line each, from the same
//! configuration the server reads — what a deploy pipeline runs to learn whether the
//! configured credentials and endpoints answer. Each check is the provider's cost-free model
//! list (`tracon_core::model::health`), run now (no cache); the command fails when any provider
//! is `Unhealthy`. A provider's own error text goes to the log on stderr under the `ref` the
//! line names, never to stdout.

use std::io::Write;

use tracon_core::config::Config;
use tracon_core::model::health::{HealthStatus, ProviderHealth, probe};
use tracon_core::runtime::Runtime;
use tracon_core::stores::Stores;

/// Builds the runtime from `config` (no database: checking providers needs none), checks
/// every provider and prints a line each; `Err` when one is `Unhealthy`.
pub async fn run(config: &Config, extend: crate::cli::Extend, out: &mut impl Write) -> Result<(), String> {
    let runtime = crate::app::build_runtime(config, Stores::in_memory(), extend)?;
    let unhealthy = report(&runtime, out).await?;
    match unhealthy {
        0 => Ok(()),
        1 => Err("a model provider is Unhealthy".to_owned()),
        n => Err(format!("{n} model providers are Unhealthy")),
    }
}

/// Checks every provider of `runtime`, in name order, and writes a line each; the number of
/// `Unhealthy` ones.
pub async fn report(runtime: &Runtime, out: &mut impl Write) -> Result<usize, String> {
    let providers = runtime.catalog.providers();
    let mut unhealthy = 0;
    for name in providers.names() {
        let Some(provider) = providers.get(name) else { continue };
        let health = probe(provider.as_ref(), runtime.platform.clock.as_ref()).await;
        if health.status == HealthStatus::Unhealthy {
            unhealthy += 1;
        }
        writeln!(out, "{}", line(&health)).map_err(|e| e.to_string())?;
    }
    Ok(unhealthy)
}

/// `openai  Healthy  182 ms`, `anthropic  Unhealthy  95 ms  unauthorized: …`,
/// `scripted  Unknown  no health check`.
fn line(health: &ProviderHealth) -> String {
    let status = format!("{:?}", health.status);
    let latency = health.latency_ms.map(|ms| format!("{ms} ms")).unwrap_or_default();
    let detail = match (&health.failure, health.status) {
        (Some(f), _) => format!("{}: {}", f.kind, f.message),
        (None, HealthStatus::Unknown) => "no health check".to_owned(),
        (None, _) => String::new(),
    };
    format!("{:<24} {status:<10} {latency:>9}  {detail}", health.provider).trim_end().to_owned()
}
