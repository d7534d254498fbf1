//! `subscriptions/listen`: the response is an SSE stream of JSON-RPC messages.

use std::collections::VecDeque;

use serde_json::{Value, json};

use crate::transport::{Answer, Outgoing};
use crate::{Client, ClientError, Exchange};

/// An open listen stream. Frames arrive in order; the last one is the listen result.
pub struct Subscription {
    response: reqwest::Response,
    buffer: String,
    frames: VecDeque<Value>,
    done: bool,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("status", &self.response.status())
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
    pub(crate) fn from_response(response: reqwest::Response) -> Self {
        Self {
            response,
            buffer: String::new(),
            frames: VecDeque::new(),
            done: false,
        }
    }

    /// Response headers.
    pub fn headers(&self) -> &reqwest::header::HeaderMap {
        self.response.headers()
    }

    /// The next JSON-RPC message, or `None` when the server closed the stream.
    pub async fn next(&mut self) -> Result<Option<Value>, ClientError> {
        loop {
            if let Some(frame) = self.frames.pop_front() {
                return Ok(Some(frame));
            }
            if self.done {
                return Ok(None);
            }
            match self.response.chunk().await? {
                Some(bytes) => {
                    self.buffer.push_str(&String::from_utf8_lossy(&bytes));
                    if self.buffer.contains('\r') {
                        // SSE lines may end in CRLF, CR or LF.
                        self.buffer = self.buffer.replace("\r\n", "\n").replace('\r', "\n");
                    }
                    self.parse_events()?;
                }
                None => self.done = true,
            }
        }
    }

    fn parse_events(&mut self) -> Result<(), ClientError> {
        while let Some(end) = self.buffer.find("\n\n") {
            let event: String = self.buffer.drain(..end + 2).collect();
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            // Comment-only events (keep-alives) carry no data.
            if data.is_empty() {
                continue;
            }
            let message = serde_json::from_str(&data.join("\n")).map_err(|e| {
                ClientError::Unexpected(format!("an SSE event is not JSON ({e}): {event:?}"))
            })?;
            self.frames.push_back(message);
        }
        Ok(())
    }
}
