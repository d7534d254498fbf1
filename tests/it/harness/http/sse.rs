//! Server-sent events read raw, as they arrive: every field of every event, comments
//! included, so a test can check the framing itself and not only the messages.

use std::time::Duration;

use reqwest::header::HeaderMap;

/// One event: its lines as (field, value) in order; a comment line is `("", text)`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseEvent {
    pub(crate) fields: Vec<(String, String)>,
}

impl SseEvent {
    /// The event's data lines joined, as a client dispatches them (`None`: no data).
    pub(crate) fn data(&self) -> Option<String> {
        let data: Vec<&str> = self
            .fields
            .iter()
            .filter(|(f, _)| f == "data")
            .map(|(_, v)| v.as_str())
            .collect();
        (!data.is_empty()).then(|| data.join("\n"))
    }

    /// Whether the event is nothing but comments (a keep-alive).
    pub(crate) fn is_comment(&self) -> bool {
        self.fields.iter().all(|(f, _)| f.is_empty())
    }
}

/// A response read as an event stream.
pub(crate) struct SseStream {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    response: reqwest::Response,
    buffer: Vec<u8>,
    done: bool,
}

impl SseStream {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        Self {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            response,
            buffer: Vec::new(),
            done: false,
        }
    }

    /// The next event, `None` once the server has closed the stream; fails the test
    /// if nothing comes within `within`.
    pub(crate) async fn next_event(&mut self, within: Duration) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.take_event() {
                return Some(event);
            }
            if self.done {
                assert!(
                    self.buffer.iter().all(|b| matches!(b, b'\r' | b'\n')),
                    "the stream ended inside an event: {:?}",
                    String::from_utf8_lossy(&self.buffer)
                );
                return None;
            }
            let chunk = tokio::time::timeout(within, self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("no event within {within:?}"))
                .expect("reading the event stream");
            match chunk {
                Some(bytes) => self.buffer.extend_from_slice(&bytes),
                None => self.done = true,
            }
        }
    }

    /// Cuts one event off the buffer, if a whole one is there (lines end in CRLF, LF or
    /// CR; a blank line ends the event).
    fn take_event(&mut self) -> Option<SseEvent> {
        let mut fields = Vec::new();
        let mut at = 0;
        loop {
            let rest = &self.buffer[at..];
            let end = rest.iter().position(|b| matches!(b, b'\r' | b'\n'))?;
            // A CR at the very end may be the first half of a CRLF not yet read.
            if rest[end] == b'\r' && end + 1 == rest.len() && !self.done {
                return None;
            }
            let skip = if rest[end..].starts_with(b"\r\n") {
                2
            } else {
                1
            };
            let line = String::from_utf8_lossy(&rest[..end]).into_owned();
            at += end + skip;
            if line.is_empty() {
                if fields.is_empty() {
                    continue;
                }
                self.buffer.drain(..at);
                return Some(SseEvent { fields });
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f.to_owned(), v.strip_prefix(' ').unwrap_or(v).to_owned()),
                None => (line, String::new()),
            };
            fields.push((field, value));
        }
    }
}

#[tokio::test]
async fn events_end_at_blank_lines_whatever_the_line_endings() {
    let body = ": keep-alive\r\n\r\ndata: {\"a\":1}\n\ndata:x\rdata: y\r\revent: e\r\nid: 7\r\ndata\r\n\r\n";
    let response = reqwest::Response::from(axum::http::Response::new(body));
    let mut stream = SseStream::new(response);
    let within = Duration::from_secs(5);
    let mut events = Vec::new();
    while let Some(event) = stream.next_event(within).await {
        events.push(event);
    }
    let field = |f: &str, v: &str| (f.to_owned(), v.to_owned());
    assert_eq!(
        events,
        vec![
            SseEvent {
                fields: vec![field("", "keep-alive")]
            },
            SseEvent {
                fields: vec![field("data", "{\"a\":1}")]
            },
            SseEvent {
                fields: vec![field("data", "x"), field("data", "y")]
            },
            SseEvent {
                fields: vec![field("event", "e"), field("id", "7"), field("data", "")]
            },
        ]
    );
    assert!(events[0].is_comment() && events[0].data().is_none());
    assert_eq!(events[2].data().as_deref(), Some("x\ny"));
    assert_eq!(events[3].data().as_deref(), Some(""));
}
