//! What core's integration tests share.

#![allow(dead_code)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tracon_core::ports::Clock;

/// A clock that stands still until the test moves it (timers still run in real time).
pub struct ShiftedClock(AtomicI64, DateTime<Utc>);

impl Default for ShiftedClock {
    fn default() -> Self {
        Self(AtomicI64::new(0), Utc::now())
    }
}

impl ShiftedClock {
    /// Moves the clock on by `millis`.
    pub fn advance(&self, millis: i64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> DateTime<Utc> {
        self.1 + chrono::Duration::milliseconds(self.0.load(Ordering::SeqCst))
    }
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}
