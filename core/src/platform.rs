//! The one place core bridges the native and the wasm32 world.
//!
//! On wasm32 (Cloudflare Workers) futures that touch JavaScript — `reqwest`'s `fetch` — are
//! `!Send`. The runtime there is single-threaded, so wrapping them in `SendWrapper` is sound
//! and lets every port keep its `Send` bounds. Natively these helpers are the identity.

use futures::{Stream, future::Future};

#[cfg(target_arch = "wasm32")]
pub fn send_future<F: Future>(f: F) -> send_wrapper::SendWrapper<F> {
    send_wrapper::SendWrapper::new(f)
}

#[cfg(not(target_arch = "wasm32"))]
pub fn send_future<F: Future>(f: F) -> F {
    f
}

#[cfg(target_arch = "wasm32")]
pub fn send_stream<S: Stream>(s: S) -> send_wrapper::SendWrapper<S> {
    send_wrapper::SendWrapper::new(s)
}

#[cfg(not(target_arch = "wasm32"))]
pub fn send_stream<S: Stream>(s: S) -> S {
    s
}
