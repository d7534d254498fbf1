//! A small MCP 2026-07-28 client over Streamable HTTP, with the Tasks extension.
//!
//! Every request carries its own `_meta` and the routing headers, as the stateless
//! protocol requires, plus the `Mcp-Param-*` headers of tools that declare them. The
//! client keeps nothing but a request counter, the header parameters of the tools it has
//! listed and (with [`oauth`]) its tokens, so it can resume polling a task after a restart
//! from nothing but the task id.

mod demo;
mod listen;
pub mod oauth;
mod tool_headers;
mod tools;
mod transport;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_tasks_wire::TASKS_EXTENSION;
use serde_json::{Value, json};

pub use demo::run_demo;
pub use listen::Subscription;
pub use oauth::{OAuth, OAuthConfig, OAuthError};
pub use tool_headers::{HeaderParam, header_params};
pub use tools::{CallRound, InputRequired};

use tool_headers::HeaderParam as Param;
use transport::Outgoing;

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
    #[error("the server refused the request (HTTP {status}){}", challenge.as_deref().map(|c| format!(": {c}")).unwrap_or_default())]
    Denied {
        status: u16,
        /// The `WWW-Authenticate` challenge, if any.
        challenge: Option<String>,
    },
    #[error(transparent)]
    Auth(#[from] OAuthError),
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
    /// Messages that came before the response on an SSE answer (`notifications/progress`…).
    pub notifications: Vec<Value>,
}

impl Exchange {
    /// Reads a whole response (202 has no body). A server may answer a request with an
    /// SSE stream instead of JSON: then its messages are read up to the response.
    pub async fn read(response: reqwest::Response) -> Result<Self, ClientError> {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let is_stream = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_stream {
            return Self::read_stream(response, status, headers).await;
        }
        let text = response.text().await?;
        let body = if text.is_empty() {
            None
        } else if matches!(status, 401 | 403) {
            // A refusal in front of the MCP endpoint may be anything; the status says it.
            serde_json::from_str(&text).ok()
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
            notifications: Vec::new(),
        })
    }

    async fn read_stream(
        response: reqwest::Response,
        status: u16,
        headers: reqwest::header::HeaderMap,
    ) -> Result<Self, ClientError> {
        let mut stream = Subscription::from_response(response);
        let mut notifications = Vec::new();
        while let Some(message) = stream.next().await? {
            if message.get("result").is_some() || message.get("error").is_some() {
                return Ok(Self {
                    status,
                    headers,
                    body: Some(message),
                    notifications,
                });
            }
            notifications.push(message);
        }
        Err(ClientError::Unexpected(format!(
            "the server's event stream ended before the response ({} other messages)",
            notifications.len()
        )))
    }

    /// The `result`, or the error as a [`ClientError`].
    pub fn into_result(self) -> Result<Value, ClientError> {
        let not_rpc = self
            .body
            .as_ref()
            .is_none_or(|b| b.get("jsonrpc").is_none());
        if matches!(self.status, 401 | 403) && not_rpc {
            return Err(ClientError::Denied {
                status: self.status,
                challenge: self
                    .headers
                    .get("www-authenticate")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            });
        }
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

pub struct Client {
    http: reqwest::Client,
    url: String,
    capabilities: Value,
    bearer: Option<String>,
    oauth: Option<Arc<OAuth>>,
    headers: Vec<(String, String)>,
    next_id: AtomicI64,
    /// The `x-mcp-header` parameters of each tool seen in `tools/list`.
    tools: Mutex<HashMap<String, Vec<Param>>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url)
            .field("bearer", &self.bearer.as_ref().map(|_| "***"))
            .field("oauth", &self.oauth.is_some())
            .finish_non_exhaustive()
    }
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
            oauth: None,
            headers: Vec::new(),
            next_id: AtomicI64::new(1),
            tools: Mutex::new(HashMap::new()),
        }
    }

    /// A client that declares the Tasks extension and form elicitation.
    pub fn with_tasks(url: impl Into<String>) -> Self {
        Self::new(url, tasks_capabilities())
    }

    /// Sends this bearer token on every request (e.g. from `MCP_TASKS_TOKEN`).
    #[must_use]
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// Logs in with OAuth when the server asks (see [`oauth`]); takes the place of
    /// [`bearer`](Self::bearer).
    #[must_use]
    pub fn oauth(mut self, oauth: Arc<OAuth>) -> Self {
        self.oauth = Some(oauth);
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

    /// The capabilities this client declares on every request.
    pub fn capabilities(&self) -> &Value {
        &self.capabilities
    }

    pub fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends one request with id `id` and returns the raw exchange.
    pub async fn send(
        &self,
        id: Value,
        method: &str,
        params: Value,
    ) -> Result<Exchange, ClientError> {
        self.send_with(&id, method, params, Vec::new()).await
    }

    async fn send_with(
        &self,
        id: &Value,
        method: &str,
        params: Value,
        headers: Vec<(String, String)>,
    ) -> Result<Exchange, ClientError> {
        self.execute(Outgoing {
            id,
            method,
            params,
            headers,
            // One answer should never take this long; a listen stream has no such limit.
            timeout: Some(Duration::from_secs(120)),
        })
        .await?
        .exchange()
        .await
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
        let mut headers = self.param_headers(name, &arguments)?;
        headers.push(("idempotency-key".into(), key.into()));
        self.send_with(
            &id,
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
            headers,
        )
        .await?
        .into_result()
    }

    /// Sends a request with the next id and returns its result.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id();
        self.send(json!(id), method, params).await?.into_result()
    }

    pub async fn discover(&self) -> Result<Value, ClientError> {
        self.request("server/discover", json!({})).await
    }

    /// `tools/call`, with the `Mcp-Param-*` headers of a tool seen in [`list_tools`]
    /// (Self::list_tools). Returns the result as is: complete, `input_required` or a task;
    /// [`call_tool_round`](Self::call_tool_round) tells them apart.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, ClientError> {
        self.call_tool_params(json!({ "name": name, "arguments": arguments }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth::{RegisteredClient, TokenEndpointAuth, Tokens};

    #[test]
    fn debug_output_never_shows_tokens_or_secrets() {
        let client = Client::with_tasks("http://127.0.0.1:1/mcp").bearer("bearer-secret-1");
        let tokens = Tokens {
            access_token: "access-secret-2".into(),
            refresh_token: Some("refresh-secret-3".into()),
            expires_at: None,
            scope: Some("a b".into()),
        };
        let registered = RegisteredClient {
            client_id: "id".into(),
            client_secret: Some("client-secret-4".into()),
            auth_method: TokenEndpointAuth::ClientSecretBasic,
            redirect_uri: "http://127.0.0.1/callback".into(),
            how: "dynamic".into(),
        };
        let shown = format!("{client:?} {tokens:?} {registered:?}");
        for secret in [
            "bearer-secret-1",
            "access-secret-2",
            "refresh-secret-3",
            "client-secret-4",
        ] {
            assert!(!shown.contains(secret), "{secret} leaked: {shown}");
        }
        assert!(
            shown.contains("a b") && shown.contains("127.0.0.1:1/mcp"),
            "{shown}"
        );
    }
}
