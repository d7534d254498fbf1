//! Tools and tasks at a higher level: the tool list (with SEP-2243 validation), calls that
//! carry `Mcp-Param-*` headers, MRTR rounds, and following a task by push or by polling.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::tool_headers::{header_params, param_headers};
use crate::{Client, ClientError, is_terminal, status_of};

/// What one `tools/call` came back with.
#[derive(Debug, Clone)]
pub enum CallRound {
    /// A finished `CallToolResult` (also when the server left out `resultType`).
    Complete(Value),
    /// The server needs input first (MRTR): answer it and call again.
    InputRequired(InputRequired),
    /// A task was created (Tasks extension): follow it with `tasks/get` or listen.
    Task(Value),
}

/// An `input_required` result: the requests to answer and the opaque state to echo.
#[derive(Debug, Clone)]
pub struct InputRequired {
    pub input_requests: Map<String, Value>,
    /// Sent back byte for byte on the retry, and only when the server sent one.
    pub request_state: Option<String>,
}

impl InputRequired {
    /// The `params` additions of the retry that answers with `responses` (keyed as
    /// `input_requests`).
    pub fn retry_params(&self, responses: Map<String, Value>) -> Map<String, Value> {
        let mut params = Map::new();
        params.insert("inputResponses".into(), Value::Object(responses));
        if let Some(state) = &self.request_state {
            params.insert("requestState".into(), Value::String(state.clone()));
        }
        params
    }
}

impl CallRound {
    pub fn from_result(result: Value) -> Self {
        match result.get("resultType").and_then(Value::as_str) {
            Some("input_required") => Self::InputRequired(InputRequired {
                input_requests: result
                    .get("inputRequests")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                request_state: result
                    .get("requestState")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            Some("task") => Self::Task(result),
            _ => Self::Complete(result),
        }
    }
}

impl Client {
    /// Every tool the server offers (all pages), minus those whose `x-mcp-header`
    /// annotations are invalid: those are left out with a warning, as SEP-2243 requires.
    /// Remembers each tool's header parameters for later calls.
    pub async fn list_tools(&self) -> Result<Vec<Value>, ClientError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut known = std::collections::HashMap::new();
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            for tool in page
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
                let schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
                match header_params(&schema) {
                    Ok(params) => {
                        known.insert(name.to_owned(), params);
                        tools.push(tool.clone());
                    }
                    Err(reason) => {
                        tracing::warn!(tool = name, %reason, "tool left out: invalid x-mcp-header");
                    }
                }
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        if let Ok(mut cache) = self.tools.lock() {
            *cache = known;
        }
        Ok(tools)
    }

    /// The `Mcp-Param-*` headers for calling `name` with `arguments`.
    pub(crate) fn param_headers(
        &self,
        name: &str,
        arguments: &Value,
    ) -> Result<Vec<(String, String)>, ClientError> {
        let params = self
            .tools
            .lock()
            .ok()
            .and_then(|cache| cache.get(name).cloned())
            .unwrap_or_default();
        let empty = Map::new();
        let args = arguments.as_object().unwrap_or(&empty);
        param_headers(&params, args).map_err(ClientError::Unexpected)
    }

    /// `tools/call` with any `params` (`name`, `arguments`, and on an MRTR retry
    /// `inputResponses` / `requestState`). A `HeaderMismatch` (-32020) makes the client
    /// read the tool list again and retry once, as the transport spec advises.
    pub async fn call_tool_params(&self, params: Value) -> Result<Value, ClientError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
        let mut relisted = false;
        loop {
            let headers = self.param_headers(&name, &arguments)?;
            let id = json!(self.next_id());
            let answer = self
                .send_with(&id, "tools/call", params.clone(), headers)
                .await?
                .into_result();
            match answer {
                Err(ClientError::Rpc { code: -32020, .. }) if !relisted => {
                    relisted = true;
                    self.list_tools().await?;
                }
                other => return other,
            }
        }
    }

    /// One round of `tools/call`; `retry` is what [`InputRequired::retry_params`] gave
    /// for an earlier round of the same call.
    pub async fn call_tool_round(
        &self,
        name: &str,
        arguments: Value,
        retry: Option<Map<String, Value>>,
    ) -> Result<CallRound, ClientError> {
        let mut params = Map::new();
        params.insert("name".into(), Value::String(name.to_owned()));
        params.insert("arguments".into(), arguments);
        params.extend(retry.unwrap_or_default());
        self.call_tool_params(Value::Object(params))
            .await
            .map(CallRound::from_result)
    }

    /// Follows a task until it is terminal or needs input, calling `on_update` with each
    /// snapshot: pushed on `subscriptions/listen` when the server offers it, otherwise
    /// polled at the task's `pollIntervalMs` (at most every `max_interval`).
    pub async fn follow_task(
        &self,
        task_id: &str,
        max_interval: Duration,
        mut on_update: impl FnMut(&Value),
    ) -> Result<Value, ClientError> {
        let done = |t: &Value| is_terminal(t) || status_of(t) == "input_required";
        let first = self.get_task(task_id).await?;
        on_update(&first);
        if done(&first) {
            return Ok(first);
        }
        let id = json!(format!("follow-{}", self.next_id()));
        if let Ok(mut stream) = self.listen(id, json!({ "taskIds": [task_id] })).await {
            while let Some(frame) = stream.next().await? {
                if frame.get("method").and_then(Value::as_str) != Some("notifications/tasks") {
                    continue;
                }
                let Some(task) = frame.get("params") else {
                    continue;
                };
                on_update(task);
                if done(task) {
                    return self.get_task(task_id).await;
                }
            }
            // The stream ended (a replica draining, a proxy timeout): the task's state
            // is read again and followed by polling from here.
        }
        let mut last = first;
        loop {
            let every = last
                .get("pollIntervalMs")
                .and_then(Value::as_u64)
                .map_or(max_interval, Duration::from_millis)
                .min(max_interval);
            tokio::time::sleep(every).await;
            last = self.get_task(task_id).await?;
            on_update(&last);
            if done(&last) {
                return Ok(last);
            }
        }
    }
}
