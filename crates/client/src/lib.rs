//! A small MCP 2026-07-28 client over Streamable HTTP, with the Tasks extension.
//!
//! Every request carries its own `_meta` and the routing headers, as the stateless
//! protocol requires. The client keeps nothing but a request counter, so it can resume
//! polling a task after a restart from nothing but the task id.

mod demo;
mod listen;

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use mcp_tasks_wire::headers::encode_value;
use mcp_tasks_wire::{PROTOCOL_VERSION, TASKS_EXTENSION, meta_keys};
use serde_json::{Map, Value, json};

pub use demo::run_demo;
pub use listen::Subscription;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("HTTP request failed: {0}")]
    Http(#[from] reqwest::Error),
    #[error("the server answered HTTP {status} with a body that is not JSON-RPC: {body}")]
    NotJsonRpc { status: u16, body: String },
    #[error("JSON-RPC error {code}: {message}")]
    Rpc {
        status: u16,
        code: i64,
        message: String,
        data: Option<Value>,
    },
    #[error("{0}")]
    Unexpected(String),
}

impl ClientError {
    /// The JSON-RPC error code, if the server answered with one.
    pub fn code(&self) -> Option<i64> {
        match self {
            Self::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// One exchange: the HTTP status and the parsed body (absent for 202).
#[derive(Debug, Clone)]
pub struct Exchange {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Option<Value>,
}

impl Exchange {
    /// Reads a whole response (202 has no body).
    pub async fn read(response: reqwest::Response) -> Result<Self, ClientError> {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await?;
        let body = if text.is_empty() {
            None
        } else {
            Some(
                serde_json::from_str(&text).map_err(|_| ClientError::NotJsonRpc {
                    status,
                    body: text.chars().take(500).collect(),
                })?,
            )
        };
        Ok(Self {
            status,
            headers,
            body,
        })
    }

    /// The `result`, or the error as a [`ClientError`].
    pub fn into_result(self) -> Result<Value, ClientError> {
        let Some(mut body) = self.body else {
            return Err(ClientError::Unexpected(format!(
                "HTTP {} with no body",
                self.status
            )));
        };
        if let Some(result) = body.get_mut("result") {
            return Ok(result.take());
        }
        if let Some(error) = body.get("error") {
            return Err(ClientError::Rpc {
                status: self.status,
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                data: error.get("data").cloned(),
            });
        }
        Err(ClientError::NotJsonRpc {
            status: self.status,
            body: body.to_string(),
        })
    }
}

/// Capabilities of a client that supports tasks and form elicitation.
pub fn tasks_capabilities() -> Value {
    json!({ "elicitation": { "form": {} }, "extensions": { TASKS_EXTENSION: {} } })
}

#[derive(Debug)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    capabilities: Value,
    bearer: Option<String>,
    headers: Vec<(String, String)>,
    next_id: AtomicI64,
}

impl Client {
    /// A client declaring `capabilities` on every request.
    pub fn new(url: impl Into<String>, capabilities: Value) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self {
            http,
            url: url.into(),
            capabilities,
            bearer: None,
            headers: Vec::new(),
            next_id: AtomicI64::new(1),
        }
    }

    /// A client that declares the Tasks extension and form elicitation.
    pub fn with_tasks(url: impl Into<String>) -> Self {
        Self::new(url, tasks_capabilities())
    }

    #[must_use]
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Adds a header to every request.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The `_meta` of every request.
    pub fn meta(&self) -> Value {
        json!({
            meta_keys::PROTOCOL_VERSION: PROTOCOL_VERSION,
            meta_keys::CLIENT_CAPABILITIES: self.capabilities,
            meta_keys::CLIENT_INFO: { "name": "mcp-tasks-client", "version": env!("CARGO_PKG_VERSION") },
        })
    }

    /// Sends one request with id `id` and returns the raw exchange.
    pub async fn send(
        &self,
        id: Value,
        method: &str,
        params: Value,
    ) -> Result<Exchange, ClientError> {
        // One answer should never take this long; a listen stream has no such limit.
        let response = self
            .post(&id, method, params)
            .timeout(Duration::from_secs(120))
            .send()
            .await?;
        Exchange::read(response).await
    }

    /// `tools/call` with an `Idempotency-Key`: retrying it after a lost response returns
    /// the same task instead of creating a second one.
    pub async fn call_tool_idempotent(
        &self,
        name: &str,
        arguments: Value,
        key: &str,
    ) -> Result<Value, ClientError> {
        let id = json!(self.next_id());
        let response = self
            .post(
                &id,
                "tools/call",
                json!({ "name": name, "arguments": arguments }),
            )
            .header("idempotency-key", key)
            .timeout(Duration::from_secs(120))
            .send()
            .await?;
        Exchange::read(response).await?.into_result()
    }

    /// A POST of one request, with its `_meta` and routing headers.
    fn post(&self, id: &Value, method: &str, params: Value) -> reqwest::RequestBuilder {
        let mut params = match params {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        params.entry("_meta").or_insert_with(|| self.meta());
        let name = match method {
            "tools/call" | "prompts/get" => params.get("name"),
            "resources/read" => params.get("uri"),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params.get("taskId"),
            _ => None,
        }
        .and_then(Value::as_str)
        .map(encode_value);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", encode_value(method))
            .body(body.to_string());
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
    }

    /// Sends a request with the next id and returns its result.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id();
        self.send(json!(id), method, params).await?.into_result()
    }

    pub async fn discover(&self) -> Result<Value, ClientError> {
        self.request("server/discover", json!({})).await
    }

    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, ClientError> {
        self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )
        .await
    }

    pub async fn get_task(&self, task_id: &str) -> Result<Value, ClientError> {
        self.request("tasks/get", json!({ "taskId": task_id }))
            .await
    }

    pub async fn update_task(&self, task_id: &str, responses: Value) -> Result<Value, ClientError> {
        self.request(
            "tasks/update",
            json!({ "taskId": task_id, "inputResponses": responses }),
        )
        .await
    }

    pub async fn cancel_task(&self, task_id: &str) -> Result<Value, ClientError> {
        self.request("tasks/cancel", json!({ "taskId": task_id }))
            .await
    }

    /// Polls `tasks/get` until `done(snapshot)` holds, honouring `pollIntervalMs` but
    /// never waiting longer than `max_interval` between polls.
    pub async fn poll_until(
        &self,
        task_id: &str,
        timeout: Duration,
        max_interval: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let task = match self.get_task(task_id).await {
                Ok(task) => task,
                // Told to slow down, or that the server is briefly unavailable: wait as
                // asked and poll again.
                Err(ClientError::Rpc {
                    status: 429 | 503, ..
                }) if tokio::time::Instant::now() + Duration::from_secs(1) < deadline => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if done(&task) {
                return Ok(task);
            }
            let every = task
                .get("pollIntervalMs")
                .and_then(Value::as_u64)
                .map_or(max_interval, Duration::from_millis)
                .min(max_interval);
            if tokio::time::Instant::now() + every > deadline {
                return Err(ClientError::Unexpected(format!(
                    "task {task_id} still {} after {timeout:?}",
                    task.get("status").and_then(Value::as_str).unwrap_or("?")
                )));
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Polls until the task reaches a terminal status.
    pub async fn wait_terminal(
        &self,
        task_id: &str,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        self.poll_until(task_id, timeout, Duration::from_millis(100), is_terminal)
            .await
    }
}

pub fn status_of(task: &Value) -> &str {
    task.get("status")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub fn is_terminal(task: &Value) -> bool {
    matches!(status_of(task), "completed" | "failed" | "cancelled")
}
