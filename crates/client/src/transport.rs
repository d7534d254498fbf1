//! One POST of one JSON-RPC request: `_meta`, the standard and custom headers, the bearer
//! token, and the answers a client recovers from by itself (an OAuth challenge, a
//! protocol version the server asks to hear again).

use std::time::Duration;

use mcp_tasks_wire::headers::encode_value;
use mcp_tasks_wire::{PROTOCOL_VERSION, meta_keys};
use serde_json::{Map, Value, json};

use crate::{Client, ClientError, Exchange};

/// Authorization rounds (token, refresh or step-up) one request may go through.
const MAX_AUTH_ROUNDS: usize = 3;

/// A request as sent: everything needed to send it again.
pub(crate) struct Outgoing<'a> {
    pub id: &'a Value,
    pub method: &'a str,
    pub params: Value,
    pub headers: Vec<(String, String)>,
    pub timeout: Option<Duration>,
}

/// What came back: a response still to be read (JSON or a stream), or one already read.
pub(crate) enum Answer {
    Open(reqwest::Response),
    Read(Exchange),
}

impl Answer {
    pub(crate) async fn exchange(self) -> Result<Exchange, ClientError> {
        match self {
            Self::Open(response) => Exchange::read(response).await,
            Self::Read(exchange) => Ok(exchange),
        }
    }
}

impl Client {
    pub(crate) async fn execute(&self, out: Outgoing<'_>) -> Result<Answer, ClientError> {
        let mut auth_rounds = 0;
        let mut version_retried = false;
        loop {
            let token = match &self.oauth {
                Some(oauth) => oauth.access_token().await?,
                None => self.bearer.clone(),
            };
            let mut request = self.build(&out, token.as_deref());
            if let Some(timeout) = out.timeout {
                request = request.timeout(timeout);
            }
            let response = request.send().await?;
            let status = response.status().as_u16();
            if let Some(oauth) = &self.oauth
                && auth_rounds < MAX_AUTH_ROUNDS
            {
                if status == 401 {
                    auth_rounds += 1;
                    oauth
                        .unauthorized(response.headers(), token.as_deref())
                        .await?;
                    continue;
                }
                if status == 403 && oauth.forbidden(response.headers()).await? {
                    auth_rounds += 1;
                    continue;
                }
            }
            if status != 400 {
                return Ok(Answer::Open(response));
            }
            let exchange = Exchange::read(response).await?;
            if !version_retried && offers_our_version(&exchange) {
                // The server turned the version down but lists it as supported: asked
                // once more, in case what it refused was the first attempt.
                version_retried = true;
                continue;
            }
            return Ok(Answer::Read(exchange));
        }
    }

    fn build(&self, out: &Outgoing<'_>, token: Option<&str>) -> reqwest::RequestBuilder {
        let mut params = match &out.params {
            Value::Object(m) => m.clone(),
            _ => Map::new(),
        };
        params.entry("_meta").or_insert_with(|| self.meta());
        let name = match out.method {
            "tools/call" | "prompts/get" => params.get("name"),
            "resources/read" => params.get("uri"),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params.get("taskId"),
            _ => None,
        }
        .and_then(Value::as_str)
        .map(encode_value);
        let body =
            json!({ "jsonrpc": "2.0", "id": out.id, "method": out.method, "params": params });
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", encode_value(out.method))
            .body(body.to_string());
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        for (name, value) in self.headers.iter().chain(&out.headers) {
            request = request.header(name, value);
        }
        request
    }

    /// The `_meta` of every request.
    pub fn meta(&self) -> Value {
        json!({
            meta_keys::PROTOCOL_VERSION: PROTOCOL_VERSION,
            meta_keys::CLIENT_CAPABILITIES: self.capabilities,
            meta_keys::CLIENT_INFO: { "name": "mcp-tasks-client", "version": env!("CARGO_PKG_VERSION") },
        })
    }
}

/// An `UnsupportedProtocolVersion` (-32022) error whose `supported` list has ours.
fn offers_our_version(exchange: &Exchange) -> bool {
    let error = exchange.body.as_ref().and_then(|b| b.get("error"));
    error.and_then(|e| e.get("code")).and_then(Value::as_i64) == Some(-32022)
        && error
            .and_then(|e| e.pointer("/data/supported"))
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|x| x.as_str() == Some(PROTOCOL_VERSION)))
}
