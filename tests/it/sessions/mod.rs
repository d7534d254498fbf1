//! 2025-era sessions over raw HTTP: what the client libraries in `clients` do not show,
//! or show only on their good path (negotiation per revision, refused and ended
//! sessions, error forms, input routed by its signed id, the 2025-11-25 tasks adapter,
//! and their streams' limits and ends).

mod catalog;
mod input;
mod lifecycle;
mod streams;

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client")
}

/// A 2025-era session, driven by hand.
#[derive(Clone)]
struct Session {
    http: reqwest::Client,
    url: String,
    id: String,
    version: String,
    principal: String,
}

/// An answer: status, the session header if any, and the body (JSON, or SSE frames).
struct Answer {
    status: StatusCode,
    session: Option<String>,
    content_type: String,
    body: Value,
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> reqwest::Response {
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("POST")
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = response.text().await.expect("body");
    let body = if content_type.starts_with("text/event-stream") {
        Value::Array(frames(&text))
    } else {
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    Answer {
        status,
        session,
        content_type,
        body,
    }
}

/// The JSON messages of an SSE body.
fn frames(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).ok())?
        })
        .collect()
}

fn initialize_body(version: &str, capabilities: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": capabilities,
            "clientInfo": { "name": "sessions-test", "version": "1" },
        },
    })
}

impl Session {
    /// `initialize` at `version` as `principal`, then `notifications/initialized`.
    async fn open(url: &str, version: &str, capabilities: Value, principal: &str) -> Self {
        let http = http();
        let init = answer(
            post(
                &http,
                url,
                &[("x-test-principal", principal)],
                &initialize_body(version, capabilities),
            )
            .await,
        )
        .await;
        assert_eq!(init.status, StatusCode::OK, "{}", init.body);
        assert_eq!(
            init.body["result"]["protocolVersion"], version,
            "{}",
            init.body
        );
        let id = init.session.expect("a session id");
        let session = Self {
            http,
            url: url.to_owned(),
            id,
            version: version.to_owned(),
            principal: principal.to_owned(),
        };
        let ack = session
            .send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        assert_eq!(ack.status, StatusCode::ACCEPTED, "{}", ack.body);
        session
    }

    /// The same session, sent to another replica.
    fn at(&self, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..self.clone()
        }
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        vec![
            ("mcp-session-id", self.id.as_str()),
            ("mcp-protocol-version", self.version.as_str()),
            ("x-test-principal", self.principal.as_str()),
        ]
    }

    async fn raw(&self, body: &Value) -> reqwest::Response {
        post(&self.http, &self.url, &self.headers(), body).await
    }

    async fn send(&self, body: &Value) -> Answer {
        answer(self.raw(body).await).await
    }

    async fn rpc(&self, id: i64, method: &str, params: Value) -> Answer {
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await
    }

    /// A request's answer, which must be a JSON-RPC result with HTTP 200.
    async fn result(&self, id: i64, method: &str, params: Value) -> Value {
        let a = self.rpc(id, method, params).await;
        assert_eq!(a.status, StatusCode::OK, "{method}: {}", a.body);
        assert!(a.body.get("result").is_some(), "{method}: {}", a.body);
        a.body["result"].clone()
    }

    /// A request's error, with the HTTP status the transport gives it.
    async fn error(&self, id: i64, method: &str, params: Value, status: u16) -> Value {
        let a = self.rpc(id, method, params).await;
        assert_eq!(a.status.as_u16(), status, "{method}: {}", a.body);
        assert!(a.body["error"]["code"].is_i64(), "{method}: {}", a.body);
        a.body["error"].clone()
    }

    async fn delete(&self) -> StatusCode {
        let mut req = self.http.delete(&self.url);
        for (k, v) in self.headers() {
            req = req.header(k, v);
        }
        req.send().await.expect("DELETE").status()
    }
}

/// An SSE response read frame by frame.
struct Frames {
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
}

impl Frames {
    fn new(response: reqwest::Response) -> Self {
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            content_type.starts_with("text/event-stream"),
            "expected a stream, got {content_type}"
        );
        Self {
            body: response
                .bytes_stream()
                .map(|c| c.map(|b| b.to_vec()))
                .boxed(),
            buffer: String::new(),
        }
    }

    /// The next JSON-RPC message, or `None` at the end of the stream.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if let Some(message) = frames(&event).pop() {
                    return Some(message);
                }
                continue;
            }
            let chunk = tokio::time::timeout(WAIT, self.body.next())
                .await
                .expect("no frame within the wait")?
                .expect("stream error");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Reads until a message with `method` (a request or notification), returning it.
    async fn until(&mut self, method: &str) -> Value {
        loop {
            let m = self
                .next()
                .await
                .unwrap_or_else(|| panic!("the stream ended before {method}"));
            if m["method"] == method {
                return m;
            }
        }
    }

    /// Reads to the response, which ends the stream.
    async fn response(&mut self) -> Value {
        loop {
            let m = self
                .next()
                .await
                .expect("the stream ended without a response");
            if m.get("method").is_none() {
                assert!(
                    self.next().await.is_none(),
                    "the stream goes on after its response"
                );
                return m;
            }
        }
    }
}
