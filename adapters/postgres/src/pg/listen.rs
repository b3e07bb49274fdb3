//! Signals heard natively: one connection per process `LISTEN`s on
//! [`Signal::CHANNEL`], and every notification — a cancel set by any instance's
//! `RUN_CANCEL`, a follower's `RUN_SIGNAL` — reaches the runs executing here through
//! [`Drain::hear`]. While the connection is up the drain says signals are heard, so runs
//! neither poll their cancel flag nor write their events on a timer; when it drops they fall
//! back to both at once, and after the reconnect each reads its flag once (a cancel sent
//! during the gap reached nobody).

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tracon_core::runs::drain::{Drain, Signal};

/// The pause before connecting again after the listening connection failed.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// Starts listening on `pool`'s database for the life of the process.
pub fn listen(pool: PgPool, drain: Arc<Drain>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match hear(&pool, &drain).await {
                Ok(()) => tracing::warn!("the signal connection to PostgreSQL closed; runs poll until it is back"),
                Err(e) => tracing::warn!(error = %e, "could not listen for run signals; runs poll until it works"),
            }
            drain.set_heard(false);
            tokio::time::sleep(RECONNECT_AFTER).await;
        }
    })
}

/// One listening connection, until it closes.
async fn hear(pool: &PgPool, drain: &Drain) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(Signal::CHANNEL).await?;
    drain.set_heard(true);
    loop {
        // `None`: the connection was lost. The next call would reconnect quietly, and a gap
        // must be noticed, so the caller connects again and the runs read their flags.
        match listener.try_recv().await? {
            Some(notification) => {
                if let Some(signal) = Signal::parse(notification.payload()) {
                    drain.hear(signal, chrono::Utc::now().timestamp_millis());
                }
            }
            None => return Ok(()),
        }
    }
}
