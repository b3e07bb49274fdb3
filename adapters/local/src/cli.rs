//! The `tracon` command line: `serve` (the default), `migrate` and `health`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracon_core::config::Config;
use tracon_core::runtime::RuntimeBuilder;
use tracon_postgres::pg::{self, PgSettings};

#[derive(Parser)]
#[command(name = "tracon", version, about = "Tracon: an agent control plane")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve(ServeArgs),
    /// Apply the database migrations (or, with `status`, list the pending ones).
    Migrate(MigrateArgs),
    /// Check every configured model provider now, one line each; fails when any is Unhealthy.
    Health,
}

#[derive(clap::Args, Clone)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TRACON_LISTEN", default_value = "127.0.0.1:5081")]
    listen: SocketAddr,
    /// How long in-flight runs may finish after SIGTERM / Ctrl-C before they are cancelled.
    #[arg(long, env = "TRACON_DRAIN_TIMEOUT_SECONDS", default_value_t = 30.0)]
    drain_timeout_seconds: f64,
    /// PostgreSQL connection string; without it every store is in memory.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

#[derive(clap::Args, Clone)]
struct MigrateArgs {
    #[command(subcommand)]
    action: Option<MigrateAction>,
    /// PostgreSQL connection string.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    database_url: Option<String>,
}

#[derive(Subcommand, Clone)]
enum MigrateAction {
    /// List the migrations not yet applied, without writing anything.
    Status,
}

/// Registrations a host adds to the runtime before it is built (tools of its own); the
/// product binary adds none.
pub type Extend = fn(RuntimeBuilder) -> RuntimeBuilder;

/// The `tracon` command line: parses the arguments and runs the command, with `extend`
/// applied to the runtime a served process builds.
pub fn main(extend: Extend) -> ExitCode {
    let cli = Cli::parse();
    let config = Config::from_pairs(std::env::vars());
    if let Err(e) = crate::server::init_logging(&config) {
        eprintln!("tracon: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tracon: could not start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = match cli.command {
        Some(Command::Migrate(args)) => runtime.block_on(migrate(&config, args)),
        Some(Command::Health) => runtime.block_on(crate::health::run(&config, extend, &mut std::io::stdout().lock())),
        Some(Command::Serve(args)) => runtime.block_on(serve(config, args, extend)),
        None => runtime.block_on(serve(config, cli.serve, extend)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tracon: {e}");
            ExitCode::from(1)
        }
    }
}

async fn serve(config: Config, args: ServeArgs, extend: Extend) -> Result<(), String> {
    let drain = Duration::from_secs_f64(args.drain_timeout_seconds.max(0.0));
    crate::server::serve(config, args.listen, args.database_url, drain, extend).await
}

async fn migrate(config: &Config, args: MigrateArgs) -> Result<(), String> {
    let url = args.database_url.ok_or("set DATABASE_URL or --database-url to the database to migrate")?;
    let settings = PgSettings::from_config(&url, config).map_err(|e| e.to_string())?;
    let pool = pg::connect(&settings).await.map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    match args.action {
        None => {
            let applied = pg::migrate(&pool, &settings.schema).await.map_err(|e| e.to_string())?;
            report(&mut out, format_args!("{applied} applied (schema {})", settings.schema))?;
            let protection = tracon_postgres::protect::Protection::from_config(config).map_err(|e| e.to_string())?;
            let stores = pg::stores_on(pool, protection).map_err(|e| e.to_string())?;
            report_foreign_secret_names(config, &stores, &mut out).await
        }
        Some(MigrateAction::Status) => {
            let pending = pg::pending(&pool, &settings.schema).await.map_err(|e| e.to_string())?;
            report(&mut out, format_args!("{} pending (schema {})", pending.len(), settings.schema))?;
            for name in pending {
                report(&mut out, format_args!("  {name}"))?;
            }
            Ok(())
        }
    }
}

/// After migrating (a deploy step every host runs): the stored triggers and subscriptions
/// whose secret key names lie outside their tenant's partition. They keep working for their
/// tenant; a write that changes the name must move it (`tracon_core::secret_names`).
async fn report_foreign_secret_names(
    config: &Config,
    stores: &tracon_core::stores::Stores,
    out: &mut impl std::io::Write,
) -> Result<(), String> {
    let triggers =
        tracon_handlers::triggers::settings::TriggerSettings::from_config(config).map_err(|e| e.to_string())?;
    let webhooks = tracon_core::webhooks::WebhookSettings::from_config(config).map_err(|e| e.to_string())?;
    let found = tracon_core::setup::report_foreign_references(stores, &triggers.secret_names, &webhooks.secret_names)
        .await
        .map_err(|e| format!("could not check the stored secret key names: {e}"))?;
    for (kind, r) in &found {
        let allowed = match *kind {
            "trigger" => triggers.secret_names.tenant_prefix(&r.tenant),
            _ => webhooks.secret_names.tenant_prefix(&r.tenant),
        };
        report(
            out,
            format_args!(
                "warning: {kind} '{}' of tenant '{}' names '{}', outside its partition '{allowed}' (it keeps working for this tenant)",
                r.record, r.tenant, r.key_name
            ),
        )?;
    }
    Ok(())
}

/// The CLI's own output (the only thing `tracon migrate` prints to stdout).
fn report(out: &mut impl std::io::Write, line: std::fmt::Arguments<'_>) -> Result<(), String> {
    writeln!(out, "{line}").map_err(|e| e.to_string())
}
