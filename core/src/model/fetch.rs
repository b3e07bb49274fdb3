//! Model calls on wasm32 (Cloudflare Workers): the request reqwest built, sent with the
//! platform's `fetch`, and a body reader that can be dropped at any time.
//!
//! reqwest's own wasm body stream cannot: dropping it with a read outstanding — a run
//! cancelled while its model is quiet — cancels the body and then calls
//! `ReadableStreamDefaultReader.releaseLock()`. workerd still implements the older Streams
//! rule that throws while a read is pending, and the exception crossing into wasm aborts the
//! isolate, every request on it included. Here a dropped body is cancelled and its fetch
//! aborted, the lock is never released (the reader is simply let go), and the outstanding
//! read is awaited on a spawned task until the cancellation settles it.

use bytes::Bytes;
use futures::Stream;
use js_sys::{Promise, Uint8Array};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use wasm_bindgen::{JsCast, JsValue, prelude::wasm_bindgen};
use wasm_bindgen_futures::{JsFuture, spawn_local};
use web_sys::{AbortController, Headers, ReadableStreamDefaultReader, RequestInit};

use super::{ProviderError, ProviderErrorKind};

#[wasm_bindgen]
extern "C" {
    /// The global `fetch` (workerd, browsers and Node all have one).
    #[wasm_bindgen(js_name = fetch)]
    fn global_fetch(input: &str, init: &RequestInit) -> Promise;
}

/// Calls `target.method()`, an exception coming back as an `Err`. Used for the calls made
/// while a model call is torn down (`abort`, `cancel`): an exception out of an import bound
/// without `catch` is fatal to the isolate, and workerd throws from `abort()` once the body
/// was cancelled.
fn call_caught(target: &JsValue, method: &str) -> Result<JsValue, JsValue> {
    let function: js_sys::Function = js_sys::Reflect::get(target, &method.into())?.dyn_into()?;
    function.call0(target)
}

/// A model's answer: status line and headers read, body not yet.
pub(crate) struct Reply {
    status: reqwest::StatusCode,
    raw: web_sys::Response,
    abort: AbortOnDrop,
}

/// Aborts the fetch when the call is dropped before its body was handed on.
struct AbortOnDrop(AbortController);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        let _ = call_caught(&self.0, "abort");
    }
}

fn transport(what: &str, e: JsValue) -> ProviderError {
    let detail = e
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"));
    ProviderError::new(ProviderErrorKind::Transport, "HttpRequestError", format!("{what}: {detail}"))
}

/// Sends `request` (built by reqwest, so headers and body are exactly what native sends).
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Result<Reply, ProviderError> {
    send_with(request, web_sys::RequestRedirect::Follow).await
}

/// [`send`] without following redirects: a `3xx` comes back as the answer (webhook
/// deliveries, which must never be re-sent somewhere else, and MCP and OAuth requests, whose
/// redirect target the egress guard could not check here).
pub(crate) async fn send_unredirected(request: reqwest::RequestBuilder) -> Result<Reply, ProviderError> {
    send_with(request, web_sys::RequestRedirect::Manual).await
}

async fn send_with(
    request: reqwest::RequestBuilder,
    redirect: web_sys::RequestRedirect,
) -> Result<Reply, ProviderError> {
    let request = request.build().map_err(|e| ProviderError::from_reqwest(&e))?;
    let headers = Headers::new().map_err(|e| transport("headers", e))?;
    for (name, value) in request.headers() {
        let value = value.to_str().map_err(|e| ProviderError::protocol(format!("header {name}: {e}")))?;
        headers.append(name.as_str(), value).map_err(|e| transport("headers", e))?;
    }
    let init = RequestInit::new();
    init.set_method(request.method().as_str());
    init.set_headers(&headers);
    init.set_redirect(redirect);
    if let Some(body) = request.body().and_then(|b| b.as_bytes()) {
        init.set_body(&Uint8Array::from(body));
    }
    let abort = AbortOnDrop(AbortController::new().map_err(|e| transport("abort controller", e))?);
    init.set_signal(Some(&abort.0.signal()));
    let raw = JsFuture::from(global_fetch(request.url().as_str(), &init)).await.map_err(|e| transport("fetch", e))?;
    let raw: web_sys::Response = raw.unchecked_into();
    let status = reqwest::StatusCode::from_u16(raw.status())
        .map_err(|_| ProviderError::protocol(format!("invalid HTTP status {}", raw.status())))?;
    Ok(Reply { status, raw, abort })
}

impl Reply {
    pub(crate) fn status(&self) -> reqwest::StatusCode {
        self.status
    }

    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.raw.headers().get(name).ok().flatten()
    }

    /// The whole body.
    pub(crate) async fn bytes(self) -> Result<Bytes, ProviderError> {
        let promise = self.raw.array_buffer().map_err(|e| transport("body", e))?;
        let buffer = JsFuture::from(promise).await.map_err(|e| transport("body", e))?;
        Ok(Uint8Array::new(&buffer).to_vec().into())
    }

    /// The body as it arrives.
    pub(crate) fn bytes_stream(self) -> Body {
        let reader = self.raw.body().and_then(|b| b.get_reader().dyn_into::<ReadableStreamDefaultReader>().ok());
        Body { reader, pending: None, abort: Some(self.abort) }
    }
}

/// A response body read chunk by chunk; safe to drop with a read outstanding.
pub(crate) struct Body {
    reader: Option<ReadableStreamDefaultReader>,
    pending: Option<JsFuture>,
    abort: Option<AbortOnDrop>,
}

impl Stream for Body {
    type Item = Result<Bytes, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(reader) = &this.reader else { return Poll::Ready(None) };
        let read = this.pending.get_or_insert_with(|| JsFuture::from(reader.read()));
        let Poll::Ready(result) = Pin::new(read).poll(cx) else { return Poll::Pending };
        this.pending = None;
        match result {
            Err(e) => {
                this.reader = None;
                Poll::Ready(Some(Err(transport("body", e))))
            }
            Ok(result) => {
                let done = js_sys::Reflect::get(&result, &"done".into()).ok().and_then(|d| d.as_bool()).unwrap_or(true);
                if done {
                    this.reader = None;
                    return Poll::Ready(None);
                }
                let value = js_sys::Reflect::get(&result, &"value".into()).unwrap_or(JsValue::UNDEFINED);
                match value.dyn_into::<Uint8Array>() {
                    Ok(chunk) => Poll::Ready(Some(Ok(chunk.to_vec().into()))),
                    Err(_) => {
                        this.reader = None;
                        Poll::Ready(Some(Err(ProviderError::protocol("a body chunk that is not bytes"))))
                    }
                }
            }
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        let Some(reader) = self.reader.take() else { return };
        // Cancel the body (this settles an outstanding read) and abort the fetch; never
        // release the lock. What is still in flight is awaited where nothing waits on it.
        let cancel = call_caught(&reader, "cancel").ok().and_then(|p| p.dyn_into::<Promise>().ok()).map(JsFuture::from);
        drop(self.abort.take());
        let pending = self.pending.take();
        spawn_local(async move {
            if let Some(cancel) = cancel {
                let _ = cancel.await;
            }
            if let Some(read) = pending {
                let _ = read.await;
            }
            drop(reader);
        });
    }
}
