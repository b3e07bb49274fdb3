//! The clock and spawner ports on Workers: `Date.now()`, `setTimeout`, and tasks of the
//! isolate (single-threaded, so `!Send` JS futures are wrapped to satisfy the ports).
//!
//! A task spawned while a request is being handled — a run, and with it the recording of
//! its tail — is handed to that request's `ctx.wait_until`, so the runtime keeps the
//! request alive until the task finishes even when the client has gone. The same holds for
//! a queue batch and a cron trigger ([`WaitUntil`]). Which request is
//! "current" is exact: [`WithContext`] sets it only for the duration of each poll of the
//! request's future, and polls never interleave on the isolate's one thread.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use send_wrapper::SendWrapper;
use tracon_core::ports::{Clock, Platform, Spawner};

pub struct WorkerClock;

impl Clock for WorkerClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(worker::Date::now().as_millis() as i64).unwrap_or_default()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(SendWrapper::new(worker::Delay::from(duration)))
    }
}

/// What keeps an invocation alive for a task: a request's `Context`, a queue batch's, a
/// cron trigger's `ScheduleContext`.
pub trait WaitUntil {
    fn wait_until(&self, task: Pin<Box<dyn Future<Output = ()>>>);
}

impl WaitUntil for worker::Context {
    fn wait_until(&self, task: Pin<Box<dyn Future<Output = ()>>>) {
        worker::Context::wait_until(self, task);
    }
}

impl WaitUntil for worker::ScheduleContext {
    fn wait_until(&self, task: Pin<Box<dyn Future<Output = ()>>>) {
        worker::ScheduleContext::wait_until(self, task);
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<dyn WaitUntil>>> = const { RefCell::new(None) };
}

pub struct WorkerSpawner;

impl Spawner for WorkerSpawner {
    fn spawn(&self, task: BoxFuture<'static, ()>) {
        match CURRENT.with(|c| c.borrow().clone()) {
            // The task keeps the invocation as its context, so what it spawns is kept alive too.
            Some(ctx) => ctx.clone().wait_until(Box::pin(WithContext::new(ctx, task))),
            None => wasm_bindgen_futures::spawn_local(task),
        }
    }
}

pub fn platform() -> Platform {
    Platform { clock: Arc::new(WorkerClock), spawner: Arc::new(WorkerSpawner) }
}

/// An invocation's future (a request's, a queue batch's, a cron trigger's), polled with its
/// context as the current one.
pub struct WithContext<F> {
    ctx: Rc<dyn WaitUntil>,
    inner: Pin<Box<F>>,
}

impl<F: Future> WithContext<F> {
    pub fn new(ctx: Rc<dyn WaitUntil>, inner: F) -> Self {
        Self { ctx, inner: Box::pin(inner) }
    }
}

impl<F: Future> Future for WithContext<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let previous = CURRENT.with(|c| c.replace(Some(self.ctx.clone())));
        let result = self.inner.as_mut().poll(cx);
        CURRENT.with(|c| *c.borrow_mut() = previous);
        result
    }
}
