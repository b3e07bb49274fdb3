//! HTTP plumbing shared by the HTTP providers: send a JSON request, turn a non-success
//! status into a classified [`ProviderError`], and read a `text/event-stream` body as
//! events (parsed by `eventsource-stream`). Natively the transport is reqwest; on wasm32 the
//! request reqwest built goes out through [`super::fetch`], whose body can be dropped safely.

use eventsource_stream::{Event, Eventsource};
use futures::StreamExt;
use futures::stream::{self, BoxStream};

#[cfg(target_arch = "wasm32")]
use super::fetch::{Reply, send as transmit};
use super::{ModelEvent, ModelStream, ProviderError};
use crate::platform::{send_future, send_stream};

#[cfg(not(target_arch = "wasm32"))]
type Reply = reqwest::Response;

#[cfg(not(target_arch = "wasm32"))]
async fn transmit(request: reqwest::RequestBuilder) -> Result<Reply, ProviderError> {
    request.send().await.map_err(|e| ProviderError::from_reqwest(&e))
}

#[cfg(not(target_arch = "wasm32"))]
async fn whole_body(response: Reply) -> Result<bytes::Bytes, ProviderError> {
    response.bytes().await.map_err(|e| ProviderError::from_reqwest(&e))
}

#[cfg(target_arch = "wasm32")]
async fn whole_body(response: Reply) -> Result<bytes::Bytes, ProviderError> {
    response.bytes().await
}

#[cfg(not(target_arch = "wasm32"))]
fn body_stream(response: Reply) -> impl futures::Stream<Item = Result<bytes::Bytes, ProviderError>> {
    response.bytes_stream().map(|r| r.map_err(|e| ProviderError::from_reqwest(&e)))
}

#[cfg(target_arch = "wasm32")]
fn body_stream(response: Reply) -> impl futures::Stream<Item = Result<bytes::Bytes, ProviderError>> {
    response.bytes_stream()
}

/// Largest error body read for the log when a provider answers with a failure status.
const MAX_ERROR_BODY: usize = 8 * 1024;

/// Sends `request`; a non-2xx answer becomes a classified error (body kept for the log).
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Result<Reply, ProviderError> {
    let response = send_future(transmit(request)).await?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = send_future(whole_body(response)).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BODY)]).into_owned();
    Err(ProviderError::from_status(status.as_u16(), &text))
}

/// Sends `request` and reads nothing of a successful answer: a reachability check
/// ([`super::ModelProvider::health`]).
pub(crate) async fn reach(request: reqwest::RequestBuilder) -> Result<(), ProviderError> {
    send(request).await.map(drop)
}

/// Whether the answer is a whole JSON document rather than an event stream.
pub(crate) fn is_json(response: &Reply) -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    let content_type = response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    #[cfg(target_arch = "wasm32")]
    let content_type = response.content_type();
    content_type.is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("application/json"))
}

/// The response body as server-sent events.
pub(crate) fn events(response: Reply) -> BoxStream<'static, Result<Event, ProviderError>> {
    send_stream(body_stream(response).eventsource())
        .map(|r| {
            r.map_err(|e| match e {
                eventsource_stream::EventStreamError::Transport(t) => t,
                other => ProviderError::protocol(other.to_string()),
            })
        })
        .boxed()
}

/// The model events of a provider's event stream: `push` turns each server-sent event into
/// any number of model events, `finish` gives what the end of the stream completes. An error
/// (the transport's or a parse error) is the last item.
pub(crate) fn model_events<P: Default + Send + 'static>(
    events: BoxStream<'static, Result<Event, ProviderError>>,
    push: fn(&mut P, &Event) -> Result<Vec<ModelEvent>, ProviderError>,
    finish: fn(P) -> Result<Vec<ModelEvent>, ProviderError>,
) -> ModelStream {
    stream::unfold((events, P::default(), false), move |(mut events, mut parser, done)| async move {
        if done {
            return None;
        }
        loop {
            match events.next().await {
                Some(Ok(ev)) => match push(&mut parser, &ev) {
                    Ok(items) if items.is_empty() => continue,
                    Ok(items) => return Some((Ok(items), (events, parser, false))),
                    Err(e) => return Some((Err(e), (events, parser, true))),
                },
                Some(Err(e)) => return Some((Err(e), (events, parser, true))),
                None => return Some((finish(parser), (events, P::default(), true))),
            }
        }
    })
    .flat_map(|batch: Result<Vec<ModelEvent>, ProviderError>| match batch {
        Ok(items) => stream::iter(items.into_iter().map(Ok).collect::<Vec<_>>()),
        Err(e) => stream::iter(vec![Err(e)]),
    })
    .boxed()
}

/// Reads a whole JSON body.
pub(crate) async fn json_body(response: Reply) -> Result<serde_json::Value, ProviderError> {
    let bytes = send_future(whole_body(response)).await?;
    serde_json::from_slice(&bytes).map_err(|e| ProviderError::protocol(format!("invalid JSON body: {e}")))
}
