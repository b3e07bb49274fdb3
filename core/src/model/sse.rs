//! HTTP plumbing shared by the HTTP providers: send a JSON request, turn a non-success
//! status into a classified [`ProviderError`], and read a `text/event-stream` body as
//! events (parsed by `eventsource-stream`).

use eventsource_stream::{Event, Eventsource};
use futures::{StreamExt, stream::BoxStream};

use super::ProviderError;
use crate::platform::{send_future, send_stream};

/// Largest error body read for the log when a provider answers with a failure status.
const MAX_ERROR_BODY: usize = 8 * 1024;

/// Sends `request`; a non-2xx answer becomes a classified error (body kept for the log).
pub(crate) async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, ProviderError> {
    let response = send_future(request.send()).await.map_err(|e| ProviderError::from_reqwest(&e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = send_future(response.bytes()).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BODY)]).into_owned();
    Err(ProviderError::from_status(status.as_u16(), &text))
}

/// The response body as server-sent events.
pub(crate) fn events(response: reqwest::Response) -> BoxStream<'static, Result<Event, ProviderError>> {
    send_stream(response.bytes_stream().eventsource())
        .map(|r| {
            r.map_err(|e| match e {
                eventsource_stream::EventStreamError::Transport(t) => ProviderError::from_reqwest(&t),
                other => ProviderError::protocol(other.to_string()),
            })
        })
        .boxed()
}

/// Reads a whole JSON body.
pub(crate) async fn json_body(response: reqwest::Response) -> Result<serde_json::Value, ProviderError> {
    let bytes = send_future(response.bytes()).await.map_err(|e| ProviderError::from_reqwest(&e))?;
    serde_json::from_slice(&bytes).map_err(|e| ProviderError::protocol(format!("invalid JSON body: {e}")))
}
