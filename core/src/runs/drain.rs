//! The drain switch and the runs executing in this process ([`Drain`]): a runtime port, so
//! the lifecycle service refuses new runs while the host shuts down, and a cancel reaching
//! this instance stops its own runs at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::names::RunId;

/// Graceful shutdown: once draining, new runs get `503`; in-flight runs are counted so the
/// adapter can wait for them, and can cancel what is left after its drain timeout.
#[derive(Default)]
pub struct Drain {
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
    root: CancellationToken,
    /// Runs executing in this process, so a cancel reaching this instance stops its own
    /// runs at once (other instances observe the store's flag).
    running: Mutex<HashMap<RunId, CancellationToken>>,
    /// Set by hosts where one request must never wake another's work (see
    /// [`Drain::isolate_requests`]).
    isolated: AtomicBool,
}

impl Drain {
    pub fn start(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.idle.notify_waiters();
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Registers a run; the guard ends it. Its token is cancelled by [`Drain::cancel_all`]
    /// and by [`Drain::cancel_local`].
    pub fn enter(self: &Arc<Self>, run: RunId) -> (RunGuard, CancellationToken) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let token = self.root.child_token();
        self.running_lock().insert(run, token.clone());
        (RunGuard(self.clone(), run), token)
    }

    /// For hosts whose requests each have their own I/O context — a Cloudflare Worker. A
    /// cancel request there must not wake the run it cancels: the run would go on inside the
    /// cancel request's context, with its sockets and timers, and stall once that short
    /// request ends. The run notices the store's flag at its next cancel check instead,
    /// exactly as a run on another instance does.
    pub fn isolate_requests(&self) {
        self.isolated.store(true, Ordering::SeqCst);
    }

    /// Cancels a run executing in this process; `false` when it is not running here (or
    /// requests are isolated).
    pub fn cancel_local(&self, run: RunId) -> bool {
        if self.isolated.load(Ordering::SeqCst) {
            return false;
        }
        match self.running_lock().get(&run) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    fn running_lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancellationToken>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no run is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Cancels every in-flight run (they end `Canceled`).
    pub fn cancel_all(&self) {
        self.root.cancel();
    }
}

/// Held by a running run.
pub struct RunGuard(Arc<Drain>, RunId);

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.0.running_lock().remove(&self.1);
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
