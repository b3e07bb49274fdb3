//! The drain switch and the runs executing in this process ([`Drain`]): a runtime port, so
//! the lifecycle service refuses new runs while the host shuts down, and a cancel reaching
//! this instance stops its own runs at once.
//!
//! It is also where a run hears what other instances ask of it without polling the store
//! ([`Signal`]): a cancel, and a follower of its log who wants its events promptly. A host
//! that hears every instance's signals as they happen (Postgres `LISTEN` on the local server;
//! one process over memory stores) says so with [`Drain::set_heard`]; a run there never reads
//! its cancel flag and writes its events only on size, a tool call, its end and its heartbeat
//! — promptly only while someone follows it. Elsewhere (a Worker, a Lambda function) a run
//! learns of a cancel from the statements it makes anyway (each event write returns the flag)
//! and writes its events at the recording's time bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::names::{RunId, TenantId};
use crate::sync::lock;

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
    running: Mutex<HashMap<RunId, Arc<LocalRun>>>,
    /// Set by hosts where one request must never wake another's work (see
    /// [`Drain::isolate_requests`]).
    isolated: AtomicBool,
    /// Whether every instance's signals reach this process as they happen ([`Drain::set_heard`]).
    heard: AtomicBool,
    /// Bumped each time hearing (re)starts: a run that was not hearing meanwhile reads its
    /// flag once, since a cancel sent during the gap reached nobody.
    epoch: AtomicU64,
    /// Forgets the catalog's compiled agents of a tenant (`None`: of every tenant) when its
    /// definitions move elsewhere (the runtime hands it `Catalog::forgetting`).
    compiled: Mutex<Option<Forget>>,
}

/// Forgets compiled agents: one tenant's, or (`None`) every tenant's.
pub type Forget = Arc<dyn Fn(Option<&TenantId>) + Send + Sync>;

/// How long a follow signal keeps a run writing its events promptly; a follower repeats it
/// well within this ([`FOLLOW_SIGNAL_EVERY`]).
pub const FOLLOWED_FOR_MS: i64 = 3_000;

/// How often a follower of a live run's log signals that it is still there.
pub const FOLLOW_SIGNAL_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A run executing in this process, as the signals reach it.
#[derive(Debug)]
pub struct LocalRun {
    token: CancellationToken,
    /// Until when (Unix milliseconds) a follower wants its events promptly.
    followed_until: AtomicI64,
}

impl LocalRun {
    /// Whether a follower asked for prompt writes within [`FOLLOWED_FOR_MS`] before `now_ms`.
    pub fn followed(&self, now_ms: i64) -> bool {
        self.followed_until.load(Ordering::Relaxed) > now_ms
    }
}

/// What one instance asks of a run executing on another, sent through the store
/// (Postgres `NOTIFY`) and heard by the host ([`Drain::hear`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Stop the run (its cancel flag is set already).
    Cancel(RunId),
    /// Someone follows the run's log: write its events promptly for a while.
    Follow(RunId),
    /// The tenant's agent or skill definitions were written (by any instance): what this
    /// instance compiled for it is stale. Sent by the definition tables' trigger.
    Definitions(TenantId),
}

impl Signal {
    /// The channel the signals travel on.
    pub const CHANNEL: &'static str = "tracon_runs";

    /// The notification's payload: `cancel:<run id>` or `follow:<run id>`.
    pub fn payload(&self) -> String {
        match self {
            Signal::Cancel(run) => format!("cancel:{run}"),
            Signal::Follow(run) => format!("follow:{run}"),
            Signal::Definitions(tenant) => format!("defs:{}", tenant.as_str()),
        }
    }

    /// Reads a payload; `None` for anything else (a newer instance's signal is ignored).
    pub fn parse(payload: &str) -> Option<Self> {
        let (kind, id) = payload.split_once(':')?;
        if kind == "defs" {
            return TenantId::parse(id).ok().map(Signal::Definitions);
        }
        let run = RunId(uuid::Uuid::parse_str(id).ok()?);
        match kind {
            "cancel" => Some(Signal::Cancel(run)),
            "follow" => Some(Signal::Follow(run)),
            _ => None,
        }
    }
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
        let local = Arc::new(LocalRun { token: token.clone(), followed_until: AtomicI64::new(0) });
        self.running_lock().insert(run, local.clone());
        (RunGuard(self.clone(), run, local), token)
    }

    /// The run as it executes here (for its recorder, which asks whether it is followed).
    pub fn local(&self, run: RunId) -> Option<Arc<LocalRun>> {
        self.running_lock().get(&run).cloned()
    }

    /// Says whether every instance's signals reach this process as they happen from now on
    /// (the host's listener connected, or lost its connection).
    pub fn set_heard(&self, heard: bool) {
        if heard {
            self.epoch.fetch_add(1, Ordering::SeqCst);
            // A definition written while nothing was heard told nobody.
            if let Some(forget) = lock(&self.compiled).as_ref() {
                forget(None);
            }
        }
        self.heard.store(heard, Ordering::SeqCst);
    }

    /// Whether signals are heard here, and since which (re)start.
    pub fn heard(&self) -> Option<u64> {
        self.heard.load(Ordering::SeqCst).then(|| self.epoch.load(Ordering::SeqCst))
    }

    /// A signal from some instance (maybe this one) reached this process.
    pub fn hear(&self, signal: Signal, now_ms: i64) {
        match signal {
            Signal::Cancel(run) => {
                self.cancel_local(run);
            }
            Signal::Follow(run) => {
                if let Some(local) = self.running_lock().get(&run) {
                    local.followed_until.fetch_max(now_ms + FOLLOWED_FOR_MS, Ordering::Relaxed);
                }
            }
            Signal::Definitions(tenant) => {
                if let Some(forget) = lock(&self.compiled).as_ref() {
                    forget(Some(&tenant));
                }
            }
        }
    }

    /// Forgets the compiled agents of a tenant whose definitions another instance wrote
    /// ([`Signal::Definitions`]), and all of them whenever hearing (re)starts.
    pub fn forget_on_signal(&self, forget: Forget) {
        *lock(&self.compiled) = Some(forget);
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
            Some(local) => {
                local.token.cancel();
                true
            }
            None => false,
        }
    }

    fn running_lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Arc<LocalRun>>> {
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
pub struct RunGuard(Arc<Drain>, RunId, Arc<LocalRun>);

impl Drop for RunGuard {
    fn drop(&mut self) {
        // Only its own entry: a start attempt that was given up (its row refused) may end
        // after the attempt that took its id over entered.
        let mut running = self.0.running_lock();
        if running.get(&self.1).is_some_and(|local| Arc::ptr_eq(local, &self.2)) {
            running.remove(&self.1);
        }
        drop(running);
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
