//! `subscriptions/listen`: the response is an SSE stream of JSON-RPC messages.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use sse_stream::{Sse, SseStream};

use crate::transport::{Answer, Outgoing};
use crate::{Client, ClientError, Exchange};

/// The events of an SSE body, parsed by `sse-stream`: lines are split as bytes and
/// decoded whole, so a character split across two chunks arrives intact.
type Events = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// An open listen stream. Frames arrive in order; the last one is the listen result.
pub struct Subscription {
    status: reqwest::StatusCode,
    headers: reqwest::header::HeaderMap,
    events: Events,
    done: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("status", &self.status)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Opens a listen stream with request id `id`. A server that answers with JSON (an
    /// error) gives `Err(Rpc)`.
    pub async fn listen(
        &self,
        id: Value,
        notifications: Value,
    ) -> Result<Subscription, ClientError> {
        let answer = self
            .execute(Outgoing {
                id: &id,
                method: "subscriptions/listen",
                params: json!({ "notifications": notifications }),
                headers: Vec::new(),
                timeout: None,
            })
            .await?;
        let response = match answer {
            Answer::Open(response) => response,
            Answer::Read(exchange) => {
                let result = exchange.into_result()?;
                return Err(ClientError::Unexpected(format!(
                    "subscriptions/listen answered JSON instead of a stream: {result}"
                )));
            }
        };
        let is_stream = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_stream {
            let result = Exchange::read(response).await?.into_result()?;
            return Err(ClientError::Unexpected(format!(
                "subscriptions/listen answered JSON instead of a stream: {result}"
            )));
        }
        Ok(Subscription::from_response(response))
    }
}

impl Subscription {
    /// Reads the SSE stream of `response`.
    pub(crate) fn from_response(mut response: reqwest::Response) -> Self {
        let status = response.status();
        let headers = std::mem::take(response.headers_mut());
        Self {
            status,
            headers,
            events: Box::pin(SseStream::from_bytes_stream(response.bytes_stream())),
            done: false,
        }
    }

    /// Response headers.
    pub fn headers(&self) -> &reqwest::header::HeaderMap {
        &self.headers
    }

    /// The next JSON-RPC message, or `None` when the server closed the stream.
    pub async fn next(&mut self) -> Result<Option<Value>, ClientError> {
        while !self.done {
            let Some(event) = self.events.next().await else {
                self.done = true;
                break;
            };
            let event = event.map_err(|e| {
                self.done = true;
                stream_error(e)
            })?;
            // Comment-only events (keep-alives) carry no data.
            let Some(data) = event.data else { continue };
            let message = serde_json::from_str(&data).map_err(|e| {
                ClientError::Unexpected(format!("an SSE event is not JSON ({e}): {data:?}"))
            })?;
            return Ok(Some(message));
        }
        Ok(None)
    }
}

/// The transport's own error as it was; anything else is a stream that is not SSE.
fn stream_error(error: sse_stream::Error) -> ClientError {
    match error {
        sse_stream::Error::Body(e) => match e.downcast::<reqwest::Error>() {
            Ok(e) => ClientError::Http(*e),
            Err(e) => ClientError::Unexpected(format!("reading the event stream: {e}")),
        },
        e => ClientError::Unexpected(format!("the server's event stream is not valid SSE: {e}")),
    }
}
