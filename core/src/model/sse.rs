//! HTTP plumbing shared by the HTTP providers: check a configured endpoint and build URLs
//! under it, send a JSON request, turn a non-success status into a classified
//! [`ProviderError`], and read a `text/event-stream` body as events (parsed by
//! `eventsource-stream`). Natively the transport is reqwest; on wasm32 the
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

/// `endpoint` as an absolute http(s) URL without its trailing `/`, as every configured
/// endpoint must be; the error names `what` (never the value, which may hold credentials).
pub(crate) fn endpoint_url(endpoint: &str, what: &str) -> Result<reqwest::Url, String> {
    let invalid = || format!("The endpoint of {what} must be an absolute http(s) URL.");
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(invalid());
    }
    let url = reqwest::Url::parse(endpoint.trim_end_matches('/')).map_err(|_| invalid())?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid());
    }
    Ok(url)
}

/// `base` with `segments` appended (each escaped as one segment, so a model or deployment
/// name can never add a path of its own) and one query pair.
pub(crate) fn url_under(
    base: &reqwest::Url,
    segments: &[&str],
    (key, value): (&str, &str),
) -> Result<reqwest::Url, ProviderError> {
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| ProviderError::protocol("the endpoint cannot take a path"))?
        .pop_if_empty()
        .extend(segments);
    url.query_pairs_mut().append_pair(key, value);
    Ok(url)
}

/// Largest error body read for the log when a provider answers with a failure status.
const MAX_ERROR_BODY: usize = 8 * 1024;

/// Sends `request`; a non-2xx answer becomes a classified error (body kept for the log).
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Result<Reply, ProviderError> {
    send_classified(request, ProviderError::from_status).await
}

/// [`send`] for a provider whose error bodies say more than their status: `classify` gets the
/// status and the (truncated) body. Google answers a wrong key with `400 API_KEY_INVALID`,
/// Azure a filtered prompt with `400 content_filter`; both are something else than a 400.
pub(crate) async fn send_classified(
    request: reqwest::RequestBuilder,
    classify: fn(u16, &str) -> ProviderError,
) -> Result<Reply, ProviderError> {
    let response = send_future(transmit(request)).await?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = header(&response, "retry-after");
    let body = send_future(whole_body(response)).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BODY)]).into_owned();
    let error = classify(status.as_u16(), &text);
    // The header, when there is one, wins; otherwise what `classify` read from the body stays.
    Err(if retry_after.is_some() { error.with_retry_after(retry_after.as_deref()) } else { error })
}

/// A response header's value, when it is text.
fn header(response: &Reply, name: &str) -> Option<String> {
    #[cfg(not(target_arch = "wasm32"))]
    return response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    #[cfg(target_arch = "wasm32")]
    return response.header(name);
}

/// Sends `request` and reads nothing of a successful answer: a reachability check
/// ([`super::ModelProvider::health`]), its failure classified by the provider's `classify`.
pub(crate) async fn reach(
    request: reqwest::RequestBuilder,
    classify: fn(u16, &str) -> ProviderError,
) -> Result<(), ProviderError> {
    send_classified(request, classify).await.map(drop)
}

/// Whether the answer is a whole JSON document rather than an event stream.
pub(crate) fn is_json(response: &Reply) -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    let content_type = response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    #[cfg(target_arch = "wasm32")]
    let content_type = response.header("content-type");
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
    model_events_from(events, P::default(), push, finish)
}

/// [`model_events`] with a parser that starts from what the request said (Google numbers its
/// generated call ids after the calls already in the conversation).
pub(crate) fn model_events_from<P: Send + 'static>(
    events: BoxStream<'static, Result<Event, ProviderError>>,
    parser: P,
    push: fn(&mut P, &Event) -> Result<Vec<ModelEvent>, ProviderError>,
    finish: fn(P) -> Result<Vec<ModelEvent>, ProviderError>,
) -> ModelStream {
    stream::unfold((events, Some(parser)), move |(mut events, parser)| async move {
        // `None` once the stream ended: the parser was consumed by `finish` or an error.
        let mut parser = parser?;
        loop {
            match events.next().await {
                Some(Ok(ev)) => match push(&mut parser, &ev) {
                    Ok(items) if items.is_empty() => continue,
                    Ok(items) => return Some((Ok(items), (events, Some(parser)))),
                    Err(e) => return Some((Err(e), (events, None))),
                },
                Some(Err(e)) => return Some((Err(e), (events, None))),
                None => return Some((finish(parser), (events, None))),
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
