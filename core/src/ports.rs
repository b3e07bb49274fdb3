//! Platform ports: time and background work. Adapters supply them (tokio natively, the
//! Workers runtime on Cloudflare); core never reads the system clock or spawns a thread.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

/// Wall-clock time and timers.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// Runs a future that outlives the request that started it (a tool call past its timeout,
/// a live run after its HTTP handler returned). Natively a tokio task; on Workers
/// `wait_until`.
pub trait Spawner: Send + Sync {
    fn spawn(&self, task: BoxFuture<'static, ()>);
}

/// Milliseconds between two instants, never negative.
pub fn millis_between(start: DateTime<Utc>, end: DateTime<Utc>) -> u64 {
    (end - start).num_milliseconds().max(0) as u64
}

/// A new UUIDv7 whose timestamp comes from `clock` (so ids sort by creation time on every
/// platform).
pub fn new_id(clock: &dyn Clock) -> uuid::Uuid {
    let now = clock.now();
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, now.timestamp().max(0) as u64, now.timestamp_subsec_nanos());
    uuid::Uuid::new_v7(ts)
}

/// The platform services bundled for the engine.
#[derive(Clone)]
pub struct Platform {
    pub clock: Arc<dyn Clock>,
    pub spawner: Arc<dyn Spawner>,
}

#[cfg(feature = "tokio-runtime")]
pub mod tokio_rt {
    //! The native implementations of the platform ports, on tokio.
    use super::*;

    #[derive(Debug, Clone, Copy, Default)]
    pub struct TokioClock;

    impl Clock for TokioClock {
        fn now(&self) -> DateTime<Utc> {
            Utc::now()
        }
        fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
            Box::pin(tokio::time::sleep(duration))
        }
    }

    #[derive(Debug, Clone, Copy, Default)]
    pub struct TokioSpawner;

    impl Spawner for TokioSpawner {
        fn spawn(&self, task: BoxFuture<'static, ()>) {
            drop(tokio::spawn(task));
        }
    }

    pub fn platform() -> Platform {
        Platform { clock: Arc::new(TokioClock), spawner: Arc::new(TokioSpawner) }
    }
}
