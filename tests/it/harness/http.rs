//! The one HTTP helper: a request fully under the test's control (method, path, header
//! names and values as bytes, body bytes), sent by reqwest, over a bare TCP connection
//! ([`tcp`]), or to the router in process; the answer's status, headers and body, and
//! the JSON-RPC checks every answer must pass; SSE read raw ([`sse`]).

pub(crate) mod sse;
pub(crate) mod tcp;

use std::time::Duration;

use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::spec::{VERSION, meta, name_key, tasks_caps};

/// The HTTP client of the tests: a minute at most for any answer.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client")
}

/// One HTTP request. `path` is what goes on the request line of a bare TCP connection
/// or to the router in process; reqwest is given a whole URL instead.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    pub(crate) body: Vec<u8>,
}

impl Request {
    /// A well-formed request declaring tasks and elicitation, with the routing headers.
    pub(crate) fn rpc(id: Value, method: &str, params: Value) -> Self {
        Self::rpc_as(id, method, params, tasks_caps())
    }

    /// A well-formed request declaring `caps`, with the routing headers.
    pub(crate) fn rpc_as(id: Value, method: &str, mut params: Value, caps: Value) -> Self {
        if let Some(p) = params.as_object_mut() {
            p.entry("_meta").or_insert_with(|| meta(caps));
        }
        let name = name_key(method)
            .and_then(|k| params.get(k))
            .and_then(Value::as_str)
            .map(mcp_tasks_wire::headers::encode_value);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let mut req = Self::raw(body.to_string())
            .set("mcp-method", mcp_tasks_wire::headers::encode_value(method));
        if let Some(name) = name {
            req = req.set("mcp-name", name);
        }
        req
    }

    /// A POST of `body` as is, with `Content-Type`, `Accept` and `MCP-Protocol-Version`.
    pub(crate) fn raw(body: impl Into<Vec<u8>>) -> Self {
        Self::bare(body).set("mcp-protocol-version", VERSION)
    }

    /// A POST of `body` as is, with only `Content-Type` and `Accept`.
    pub(crate) fn bare(body: impl Into<Vec<u8>>) -> Self {
        Self {
            method: Method::POST,
            path: "/mcp".into(),
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                (
                    "accept".into(),
                    b"application/json, text/event-stream".to_vec(),
                ),
            ],
            body: body.into(),
        }
    }

    /// A GET without headers of its own.
    pub(crate) fn get() -> Self {
        Self {
            method: Method::GET,
            path: "/".into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Sets a header, replacing any of that name.
    pub(crate) fn set(self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.unset(name).add(name, value)
    }

    /// Adds one more header line, even if one of that name is there already.
    pub(crate) fn add(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    pub(crate) fn unset(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub(crate) fn verb(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    pub(crate) fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Edits the JSON body.
    pub(crate) fn map_json(self, f: impl FnOnce(&mut Value)) -> Self {
        let mut v: Value = serde_json::from_slice(&self.body).expect("a JSON body to edit");
        f(&mut v);
        self.body(v.to_string())
    }

    /// As this owner of a replica with header authentication.
    pub(crate) fn owner(self, tenant: &str, principal: &str) -> Self {
        self.set("x-test-tenant", tenant)
            .set("x-test-principal", principal)
    }

    /// As this principal (of tenant `default`) of a replica with header authentication.
    pub(crate) fn principal(self, principal: &str) -> Self {
        self.set("x-test-principal", principal)
    }

    /// Sends it with reqwest to `url`; header values reqwest refuses are an `Err`.
    pub(crate) async fn try_send(
        &self,
        http: &reqwest::Client,
        url: &str,
    ) -> Result<Answer, String> {
        let response = self
            .builder(http, url)?
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("{e:?}"))?
            .to_vec();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    pub(crate) async fn send(&self, http: &reqwest::Client, url: &str) -> Answer {
        self.try_send(http, url).await.unwrap_or_else(|e| {
            panic!("no HTTP answer: {e} (header values reqwest refuses go over tcp::exchange)")
        })
    }

    /// Sends it and reads the answer as an event stream, as it arrives.
    pub(crate) async fn open_stream(&self, http: &reqwest::Client, url: &str) -> sse::SseStream {
        let response = self
            .builder(http, url)
            .unwrap_or_else(|e| panic!("{e}"))
            // A stream may stay open for as long as the test reads it.
            .timeout(Duration::from_secs(3600))
            .send()
            .await
            .unwrap_or_else(|e| panic!("no HTTP answer: {e:?}"));
        sse::SseStream::new(response)
    }

    fn builder(
        &self,
        http: &reqwest::Client,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, String> {
        let mut rb = http.request(self.method.clone(), url);
        for (n, v) in &self.headers {
            let name = HeaderName::from_bytes(n.as_bytes()).map_err(|e| format!("{n}: {e}"))?;
            let value = HeaderValue::from_bytes(v).map_err(|e| format!("{n}: {e}"))?;
            rb = rb.header(name, value);
        }
        if !self.body.is_empty() {
            rb = rb.body(self.body.clone());
        }
        Ok(rb)
    }

    /// Sends it to `router` in process, without a socket. Header values must be valid.
    pub(crate) async fn send_to(&self, router: &axum::Router) -> Answer {
        use tower::ServiceExt;
        let mut request = axum::http::Request::builder()
            .method(self.method.clone())
            .uri(&self.path);
        for (name, value) in &self.headers {
            request = request.header(
                name.as_str(),
                HeaderValue::from_bytes(value).expect("a valid header value"),
            );
        }
        let request = request
            .body(axum::body::Body::from(self.body.clone()))
            .expect("request");
        let response = router
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|e| match e {});
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), 16 * 1024 * 1024)
            .await
            .expect("response body");
        Answer {
            status,
            headers,
            body: body.to_vec(),
        }
    }
}

/// Status, sorted headers and body of an answer.
pub(crate) type Observable = (u16, Vec<(String, Vec<u8>)>, Vec<u8>);

/// One HTTP answer.
#[derive(Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &self.excerpt())
            .finish()
    }
}

impl Answer {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The start of the body, for messages about answers that may be large.
    pub(crate) fn excerpt(&self) -> String {
        String::from_utf8_lossy(&self.body)
            .chars()
            .take(600)
            .collect()
    }

    /// The body as JSON, whatever it is.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "HTTP {} body is not JSON ({e}): {}",
                self.status,
                self.excerpt()
            )
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(crate) fn content_type(&self) -> Option<&str> {
        self.header("content-type")
    }

    /// Everything a client can observe, except the `Date` header.
    pub(crate) fn observable(&self) -> Observable {
        let mut headers: Vec<(String, Vec<u8>)> = self
            .headers
            .iter()
            .filter(|(n, _)| *n != reqwest::header::DATE)
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        headers.sort();
        (self.status, headers, self.body.clone())
    }

    /// The JSON-RPC body, after the invariants every answer keeps: `application/json`,
    /// one object, `"jsonrpc": "2.0"`, exactly one of `result` and `error`.
    pub(crate) fn jsonrpc(&self, what: &str) -> Value {
        assert_eq!(
            self.content_type(),
            Some("application/json"),
            "{what}: Content-Type; HTTP {} {}",
            self.status,
            self.excerpt()
        );
        let body: Value = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{what}: not JSON ({e}): HTTP {} {}",
                self.status,
                self.excerpt()
            )
        });
        let obj = body
            .as_object()
            .unwrap_or_else(|| panic!("{what}: body is not one JSON object: {body}"));
        assert_eq!(obj.get("jsonrpc"), Some(&json!("2.0")), "{what}: {body}");
        assert!(
            obj.contains_key("result") != obj.contains_key("error"),
            "{what}: exactly one of result/error: {body}"
        );
        body
    }

    /// Asserts an error answer: HTTP status, code, a message, and the id echoed (`None`:
    /// no id at all). Returns the error object.
    pub(crate) fn error(&self, what: &str, status: u16, code: i64, id: Option<&Value>) -> Value {
        let body = self.jsonrpc(what);
        assert_eq!(
            (self.status, body["error"]["code"].as_i64()),
            (status, Some(code)),
            "{what}: HTTP status and code: {}",
            self.excerpt()
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: error.message must be a non-empty string: {body}"
        );
        match id {
            None => assert!(
                body.get("id").is_none(),
                "{what}: no id can be echoed, and null is not an id: {body}"
            ),
            Some(id) => assert_eq!(body.get("id"), Some(id), "{what}: id echo: {body}"),
        }
        body["error"].clone()
    }

    /// Asserts a result answer with HTTP 200 and the id echoed; returns the result.
    pub(crate) fn result(&self, what: &str, id: &Value) -> Value {
        assert_eq!(
            self.status,
            200,
            "{what}: HTTP status; body {}",
            self.excerpt()
        );
        let body = self.jsonrpc(what);
        assert!(body["result"].is_object(), "{what}: a result: {body}");
        // serde_json numbers compare by kind, so 7 != 7.0: this checks the JSON type.
        assert_eq!(body.get("id"), Some(id), "{what}: id echo: {body}");
        body["result"].clone()
    }

    /// Asserts that `id` comes back exactly as written, lexically: 7 stays 7, never 7.0.
    pub(crate) fn assert_id_lexical(&self, what: &str, id: &Value) {
        let lexical = format!("\"id\":{id}");
        assert!(
            self.text().contains(&lexical),
            "{what}: id must come back exactly as {lexical}: {}",
            self.excerpt()
        );
    }
}
