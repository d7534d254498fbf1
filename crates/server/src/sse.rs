//! The shell every SSE response of a replica shares: each event carries one JSON-RPC
//! message, keep-alive comments keep idle connections open, and proxies are told not to
//! cache or buffer the stream. What a stream sends, and when it ends, is its own
//! [`EventSource`].

use std::convert::Infallible;
use std::future::Future;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream;
use serde_json::Value;

use crate::AppState;

/// The events of one SSE response, in order; `None` ends the response.
pub(crate) trait EventSource: Send + 'static {
    fn next_event(&mut self) -> impl Future<Output = Option<Event>> + Send;
}

/// The `text/event-stream` response that sends `source`'s events, with the replica's
/// keep-alive interval.
pub(crate) fn response(state: &AppState, source: impl EventSource) -> Response {
    let events = stream::unfold(source, |mut s| async move {
        let event = s.next_event().await?;
        Some((Ok::<_, Infallible>(event), s))
    });
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(state.config().keep_alive));
    let mut response = sse.into_response();
    let headers = response.headers_mut();
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// One SSE event carrying one JSON-RPC message on a single `data:` line.
pub(crate) fn frame(message: &Value) -> Event {
    Event::default().data(message.to_string())
}
