//! The axum server, logging, and graceful shutdown.
//!
//! SIGTERM or Ctrl-C drains: the listener stops accepting, new runs on open connections
//! get `503`, in-flight runs finish until the drain timeout, then whatever is left is
//! cancelled (recorded `Canceled`) and the process exits.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use tracing_subscriber::EnvFilter;
use tracon_core::config::Config;
use tracon_handlers::PeerAddr;

use crate::app;

pub fn init_logging(config: &Config) -> Result<(), String> {
    let level = config.get("Tracon:Logging:Level").unwrap_or("info");
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(format!("{level},hyper=warn,reqwest=warn,sqlx=warn")))
        .map_err(|e| format!("invalid log filter: {e}"))?;
    let format = config.first(&["TRACON_LOG_FORMAT", "Tracon:Logging:Format"]).unwrap_or("human");
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format.to_ascii_lowercase().as_str() {
        "json" => builder.json().flatten_event(true).with_current_span(true).init(),
        "human" | "text" => builder.init(),
        other => return Err(format!("TRACON_LOG_FORMAT must be 'human' or 'json', not '{other}'")),
    }
    Ok(())
}

async fn peer_addr(ConnectInfo(addr): ConnectInfo<SocketAddr>, mut request: Request, next: Next) -> Response {
    request.extensions_mut().insert(PeerAddr(addr));
    next.run(request).await
}

pub async fn serve(
    config: Config,
    listen: SocketAddr,
    database_url: Option<String>,
    drain_timeout: Duration,
    extend: crate::cli::Extend,
) -> Result<(), String> {
    let state = app::build(&config, database_url.as_deref(), extend).await?;
    let drain = state.runtime.drain.clone();
    if !state.http.allow_remote_access && !listen.ip().is_loopback() {
        tracing::warn!(%listen, "listening on a non-loopback address without authentication: only loopback callers will be served");
    }
    let app = tracon_handlers::router(state.clone()).layer(middleware::from_fn(peer_addr));
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    // SSE frames are small writes: without TCP_NODELAY, Nagle's algorithm holds each one
    // until the client's delayed ACK (up to 40 ms on Linux) on every kept-alive connection.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    });
    tracing::info!(address = %format!("http://{local}"), persistent_storage = state.runtime.stores.persistent, "tracon listening");
    if !state.runtime.stores.persistent {
        let production = config
            .first(&["TRACON_ENVIRONMENT", "Tracon:Environment"])
            .is_some_and(|e| e.eq_ignore_ascii_case("production"));
        let stores = "agent definitions and their versions, runs with their events, tool calls and input, sessions";
        if production {
            tracing::warn!(
                stores,
                "running in Production on in-memory storage: these stores will not survive a restart (set DATABASE_URL)"
            );
        } else {
            tracing::info!(stores, "storage is in memory; set DATABASE_URL to keep it");
        }
    }

    if state.runtime.stores.persistent {
        report_foreign_secret_names(&state).await;
    }

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).with_graceful_shutdown(
        async move {
            let _ = stop_rx.await;
        },
    );
    let mut server = tokio::spawn(async move { server.await });

    tokio::select! {
        result = &mut server => {
            return match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("server failed: {e}")),
                Err(e) => Err(format!("server task failed: {e}")),
            };
        }
        () = shutdown_signal() => {}
    }
    tracing::info!(
        in_flight = drain.in_flight(),
        timeout_s = drain_timeout.as_secs_f64(),
        "shutting down: draining in-flight runs"
    );
    drain.start();
    let _ = stop_tx.send(());
    if tokio::time::timeout(drain_timeout, drain.wait_idle()).await.is_err() {
        tracing::warn!(in_flight = drain.in_flight(), "drain timeout reached; canceling the remaining runs");
        drain.cancel_all();
        let _ = tokio::time::timeout(Duration::from_secs(5), drain.wait_idle()).await;
    }
    // Streams end once their runs end; give the connections a moment to flush.
    let _ = tokio::time::timeout(Duration::from_secs(5), &mut server).await;
    tracing::info!("stopped");
    Ok(())
}

/// Logs the stored triggers and subscriptions whose secret key names lie outside their
/// tenant's partition (they keep working for that tenant; see `tracon_core::secret_names`).
async fn report_foreign_secret_names(state: &tracon_handlers::AppState) {
    let runtime = &state.runtime;
    let triggers = &state.http.triggers.secret_names;
    match tracon_core::setup::report_foreign_references(&runtime.stores, triggers, &runtime.webhooks.secret_names).await
    {
        Ok(found) if !found.is_empty() => {
            tracing::warn!(records = found.len(), "stored records name secrets outside their tenant's partition")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = ?e, "could not check the stored secret key names"),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
