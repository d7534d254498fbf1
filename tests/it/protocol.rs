//! The protocol surface over real HTTP: envelope, `_meta` and routing-header validation
//! with their exact JSON-RPC codes and HTTP statuses, id echo, discovery, isolation of
//! one owner's tasks from every other owner, durable task creation, the synchronous
//! fallback, MRTR, and a deterministic fuzz pass that must never crash a replica.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use mcp_tasks_client::{Client, Exchange};
use mcp_tasks_server::StateKeys;
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::harness::{self, Replica, TestDb, Worker, registry, status, task_id};

const VERSION: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";
const PV: &str = "io.modelcontextprotocol/protocolVersion";
const CC: &str = "io.modelcontextprotocol/clientCapabilities";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

// ---------------------------------------------------------------------------------------
// Raw HTTP helpers
// ---------------------------------------------------------------------------------------

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("http client")
}

/// Status, sorted headers and body of an answer.
type Observable = (u16, Vec<(String, Vec<u8>)>, Vec<u8>);

/// One raw HTTP answer.
#[derive(Debug)]
struct Raw {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Raw {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "HTTP {} body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    fn content_type(&self) -> Option<&str> {
        self.headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }

    /// Everything a client can observe, except the `Date` header.
    fn observable(&self) -> Observable {
        let mut headers: Vec<(String, Vec<u8>)> = self
            .headers
            .iter()
            .filter(|(n, _)| *n != reqwest::header::DATE)
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        headers.sort();
        (self.status, headers, self.body.clone())
    }
}

fn tasks_caps() -> Value {
    json!({ "elicitation": {}, "extensions": { TASKS: {} } })
}

fn meta(caps: Value) -> Value {
    json!({ PV: VERSION, CC: caps })
}

/// The body value `Mcp-Name` mirrors, for the methods that have one.
fn name_of(method: &str, params: &Value) -> Option<String> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params
        .get(key)
        .and_then(Value::as_str)
        .map(mcp_tasks_wire::headers::encode_value)
}

/// One HTTP request, fully under the test's control.
#[derive(Debug, Clone)]
struct Req {
    method: Method,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Req {
    /// A well-formed request declaring tasks and elicitation.
    fn rpc(id: Value, method: &str, params: Value) -> Self {
        Self::rpc_as(id, method, params, tasks_caps())
    }

    /// A well-formed request declaring `caps`.
    fn rpc_as(id: Value, method: &str, mut params: Value, caps: Value) -> Self {
        if let Some(p) = params.as_object_mut() {
            p.entry("_meta").or_insert_with(|| meta(caps));
        }
        let name = name_of(method, &params);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let mut req = Self::raw(body.to_string()).set("mcp-method", method);
        if let Some(name) = name {
            req = req.set("mcp-name", name);
        }
        req
    }

    /// A POST with the usual transport headers and `body` as is.
    fn raw(body: impl Into<Vec<u8>>) -> Self {
        Self {
            method: Method::POST,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                (
                    "accept".into(),
                    b"application/json, text/event-stream".to_vec(),
                ),
                ("mcp-protocol-version".into(), VERSION.as_bytes().to_vec()),
            ],
            body: body.into(),
        }
    }

    fn set(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self = self.unset(name);
        self.headers
            .push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    fn unset(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    fn verb(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    fn map_json(self, f: impl FnOnce(&mut Value)) -> Self {
        let mut v: Value = serde_json::from_slice(&self.body).expect("a JSON body to edit");
        f(&mut v);
        self.body(v.to_string())
    }

    fn owner(self, tenant: &str, principal: &str) -> Self {
        self.set("x-test-tenant", tenant)
            .set("x-test-principal", principal)
    }

    fn principal(self, principal: &str) -> Self {
        self.set("x-test-principal", principal)
    }

    async fn try_send(&self, http: &reqwest::Client, url: &str) -> Result<Raw, String> {
        let mut rb = http.request(self.method.clone(), url);
        for (n, v) in &self.headers {
            let name = HeaderName::from_bytes(n.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_bytes(v).map_err(|e| e.to_string())?;
            rb = rb.header(name, value);
        }
        if !self.body.is_empty() {
            rb = rb.body(self.body.clone());
        }
        let response = rb.send().await.map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("{e:?}"))?
            .to_vec();
        Ok(Raw {
            status,
            headers,
            body,
        })
    }

    async fn send(&self, http: &reqwest::Client, url: &str) -> Raw {
        self.try_send(http, url)
            .await
            .unwrap_or_else(|e| panic!("no HTTP answer: {e}"))
    }

    /// Sends the request over a bare TCP connection, header names and values byte for
    /// byte as written (no client library normalises them).
    async fn send_tcp(&self, addr: SocketAddr) -> Raw {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut wire = format!(
            "{} /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.method,
            self.body.len()
        )
        .into_bytes();
        for (n, v) in &self.headers {
            wire.extend_from_slice(n.as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(v);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(&self.body);
        stream.write_all(&wire).await.expect("write");
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out))
            .await
            .expect("the server closed the connection")
            .expect("read");
        parse_http_response(&out)
    }
}

fn parse_http_response(raw: &[u8]) -> Raw {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(raw)));
    let head = std::str::from_utf8(&raw[..split]).expect("ASCII response head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = HeaderMap::new();
    for line in lines {
        let (n, v) = line.split_once(':').expect("header line");
        headers.append(
            HeaderName::from_bytes(n.trim().as_bytes()).expect("header name"),
            HeaderValue::from_str(v.trim()).expect("header value"),
        );
    }
    assert!(
        headers.get("transfer-encoding").is_none(),
        "chunked responses are not expected here: {head}"
    );
    Raw {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

/// Asserts the invariants of every JSON-RPC answer and returns the parsed body.
fn assert_jsonrpc(raw: &Raw, what: &str) -> Value {
    assert_eq!(
        raw.content_type(),
        Some("application/json"),
        "{what}: Content-Type; body {}",
        raw.text()
    );
    let body = raw.json();
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

/// Asserts an error answer: HTTP status, code, id echo (`None` = no id at all).
fn assert_error(raw: &Raw, what: &str, http: u16, code: i64, id: Option<&Value>) -> Value {
    assert_eq!(raw.status, http, "{what}: HTTP status; body {}", raw.text());
    let body = assert_jsonrpc(raw, what);
    assert_eq!(body["error"]["code"], json!(code), "{what}: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{what}: error.message must be a non-empty string: {body}"
    );
    assert_id(&body, raw, what, id);
    body["error"].clone()
}

/// Asserts a successful answer with HTTP 200 and returns its `result`.
fn assert_result(raw: &Raw, what: &str, id: &Value) -> Value {
    assert_eq!(raw.status, 200, "{what}: HTTP status; body {}", raw.text());
    let body = assert_jsonrpc(raw, what);
    assert!(body["result"].is_object(), "{what}: {body}");
    assert_id(&body, raw, what, Some(id));
    body["result"].clone()
}

fn assert_id(body: &Value, raw: &Raw, what: &str, id: Option<&Value>) {
    match id {
        None => assert!(
            body.get("id").is_none(),
            "{what}: no id can be echoed, and null is not an id: {body}"
        ),
        Some(id) => {
            // serde_json numbers compare by kind, so 7 != 7.0: this checks the JSON type.
            assert_eq!(body.get("id"), Some(id), "{what}: id echo: {body}");
            let lexical = format!("\"id\":{id}");
            assert!(
                raw.text().contains(&lexical),
                "{what}: id must come back exactly as {lexical}: {}",
                raw.text()
            );
        }
    }
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

fn fresh_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The error of a client exchange, after checking status and id echo.
fn exchange_error(ex: &Exchange, what: &str, http: u16, code: i64, id: &Value) -> Value {
    let body = ex
        .body
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: HTTP {} without a body", ex.status));
    assert_eq!(ex.status, http, "{what}: HTTP status; body {body}");
    assert_eq!(body["error"]["code"], json!(code), "{what}: {body}");
    assert_eq!(body.get("id"), Some(id), "{what}: {body}");
    body["error"].clone()
}

fn exchange_result(ex: Exchange, what: &str) -> Value {
    assert_eq!(ex.status, 200, "{what}: {:?}", ex.body);
    ex.into_result()
        .unwrap_or_else(|e| panic!("{what}: expected a result, got {e}"))
}

// ---------------------------------------------------------------------------------------
// 1. Bad requests, one table
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
enum Want {
    /// An error with this code and this id (`None`: the answer carries no id).
    Error(i64, Option<Value>),
    /// A result for this id.
    Result(Value),
    /// 202 with an empty body.
    Accepted,
}

struct Case {
    name: &'static str,
    req: Req,
    /// Over a bare TCP connection rather than reqwest.
    tcp: bool,
    /// To the replica with a 4096-byte body limit.
    small: bool,
    status: u16,
    want: Want,
    extra: Option<fn(&Raw, &Value)>,
}

fn case(name: &'static str, req: Req, status: u16, want: Want) -> Case {
    Case {
        name,
        req,
        tcp: false,
        small: false,
        status,
        want,
        extra: None,
    }
}

impl Case {
    fn tcp(mut self) -> Self {
        self.tcp = true;
        self
    }

    fn small(mut self) -> Self {
        self.small = true;
        self
    }

    fn then(mut self, extra: fn(&Raw, &Value)) -> Self {
        self.extra = Some(extra);
        self
    }
}

fn remove_meta_key(key: &'static str) -> impl FnOnce(&mut Value) {
    move |b| {
        if let Some(m) = b["params"]["_meta"].as_object_mut() {
            m.remove(key);
        }
    }
}

fn bad_request_cases() -> Vec<Case> {
    let unknown_task = fresh_id();
    let list = |id: i64| Req::rpc(json!(id), "tools/list", json!({}));
    let greet = |id: i64, who: &str| {
        Req::rpc(
            json!(id),
            "tools/call",
            json!({ "name": "greet", "arguments": { "name": who } }),
        )
    };
    let v999 = |b: &mut Value| b["params"]["_meta"][PV] = json!("v999.0.0");
    let mut cases = vec![
        case(
            "GET /mcp",
            list(1).verb(Method::GET).body(Vec::new()),
            405,
            Want::Error(-32600, None),
        )
        .then(|raw, _| {
            assert_eq!(
                raw.headers.get("allow").map(HeaderValue::as_bytes),
                Some(&b"POST"[..]),
                "GET needs Allow: POST"
            );
        }),
        case(
            "DELETE /mcp",
            list(1).verb(Method::DELETE).body(Vec::new()),
            405,
            Want::Error(-32600, None),
        ),
        case(
            "not json",
            Req::raw("not json").set("mcp-method", "tools/list"),
            400,
            Want::Error(-32700, None),
        ),
        case(
            "batch",
            Req::raw("[]").set("mcp-method", "tools/list"),
            400,
            Want::Error(-32600, None),
        ),
        case(
            "boolean id",
            Req::raw(r#"{"jsonrpc":"2.0","id":true,"method":"x"}"#).set("mcp-method", "x"),
            400,
            Want::Error(-32600, None),
        ),
        case(
            "null id",
            Req::raw(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#).set("mcp-method", "x"),
            400,
            Want::Error(-32600, None),
        ),
        case(
            "jsonrpc 1.0",
            list(4).map_json(|b| b["jsonrpc"] = json!("1.0")),
            400,
            Want::Error(-32600, Some(json!(4))),
        ),
        case(
            "params as an array",
            list(2).map_json(|b| b["params"] = json!([1])),
            400,
            Want::Error(-32600, Some(json!(2))),
        ),
        case(
            "missing params._meta",
            list(3).map_json(|b| {
                if let Some(p) = b["params"].as_object_mut() {
                    p.remove("_meta");
                }
            }),
            400,
            Want::Error(-32602, Some(json!(3))),
        ),
        case(
            "protocolVersion as a number",
            list(5).map_json(|b| b["params"]["_meta"][PV] = json!(20260728)),
            400,
            Want::Error(-32602, Some(json!(5))),
        ),
        case(
            "missing clientCapabilities",
            list(6).map_json(remove_meta_key(CC)),
            400,
            Want::Error(-32602, Some(json!(6))),
        ),
        case(
            "header 2026-07-28, _meta v999.0.0",
            list(7).map_json(v999),
            400,
            Want::Error(-32020, Some(json!(7))),
        ),
        case(
            "both v999.0.0",
            list(8)
                .map_json(v999)
                .set("mcp-protocol-version", "v999.0.0"),
            400,
            Want::Error(-32022, Some(json!(8))),
        )
        .then(|_, body| {
            assert_eq!(
                body["error"]["data"]["supported"],
                json!([VERSION]),
                "{body}"
            );
            assert_eq!(
                body["error"]["data"]["requested"],
                json!("v999.0.0"),
                "{body}"
            );
        }),
        case(
            "missing MCP-Protocol-Version",
            list(9).unset("mcp-protocol-version"),
            400,
            Want::Error(-32020, Some(json!(9))),
        ),
        case(
            "missing Mcp-Method",
            list(10).unset("mcp-method"),
            400,
            Want::Error(-32020, Some(json!(10))),
        ),
        case(
            "Mcp-Method mismatch",
            list(11).set("mcp-method", "tools/call"),
            400,
            Want::Error(-32020, Some(json!(11))),
        ),
        case(
            "Mcp-Method in another case",
            list(12).set("mcp-method", "TOOLS/LIST"),
            400,
            Want::Error(-32020, Some(json!(12))),
        ),
        case(
            "header name in odd case",
            list(13).unset("mcp-method").set("mCp-MeThOd", "tools/list"),
            200,
            Want::Result(json!(13)),
        )
        .tcp()
        .then(|_, body| {
            assert!(
                body["result"]["tools"]
                    .as_array()
                    .is_some_and(|t| !t.is_empty()),
                "{body}"
            );
        }),
        case(
            "Mcp-Name mismatch on tools/call",
            greet(14, "x").set("mcp-name", "test_logging_tool"),
            400,
            Want::Error(-32020, Some(json!(14))),
        ),
        case(
            "Mcp-Name missing on tools/call",
            greet(15, "x").unset("mcp-name"),
            400,
            Want::Error(-32020, Some(json!(15))),
        ),
        case(
            "Mcp-Name missing on tasks/get",
            Req::rpc(json!(16), "tasks/get", json!({ "taskId": unknown_task })).unset("mcp-name"),
            200,
            Want::Error(-32602, Some(json!(16))),
        )
        .then(|_, body| {
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("not found"), "{body}");
        }),
        case(
            "Mcp-Name mismatch on tasks/get",
            Req::rpc(json!(33), "tasks/get", json!({ "taskId": fresh_id() }))
                .set("mcp-name", fresh_id()),
            400,
            Want::Error(-32020, Some(json!(33))),
        ),
        case(
            "Mcp-Name in base64",
            greet(17, "b64").set("mcp-name", "=?base64?Z3JlZXQ=?="),
            200,
            Want::Result(json!(17)),
        )
        .then(|_, body| assert_eq!(text_of(&body["result"]), "Hello, b64!", "{body}")),
        case(
            "Mcp-Name with surrounding spaces",
            greet(18, "spaces").set("mcp-name", "  greet \t"),
            200,
            Want::Result(json!(18)),
        )
        .tcp()
        .then(|_, body| assert_eq!(text_of(&body["result"]), "Hello, spaces!", "{body}")),
        case(
            "Mcp-Name with invalid base64",
            greet(19, "x").set("mcp-name", "=?base64?***?="),
            400,
            Want::Error(-32020, Some(json!(19))),
        ),
        case(
            "unknown method",
            Req::rpc(json!(20), "foo/bar", json!({})),
            404,
            Want::Error(-32601, Some(json!(20))),
        ),
        case(
            "tasks/result",
            Req::rpc(json!(21), "tasks/result", json!({ "taskId": fresh_id() })),
            404,
            Want::Error(-32601, Some(json!(21))),
        ),
        case(
            "tasks/list",
            Req::rpc(json!(22), "tasks/list", json!({})),
            404,
            Want::Error(-32601, Some(json!(22))),
        ),
        case(
            "tasks/status",
            Req::rpc(json!(23), "tasks/status", json!({ "taskId": fresh_id() })),
            404,
            Want::Error(-32601, Some(json!(23))),
        ),
        case(
            "ping",
            Req::rpc(json!(24), "ping", json!({})),
            404,
            Want::Error(-32601, Some(json!(24))),
        ),
        case(
            "initialize with _meta",
            Req::rpc(
                json!(25),
                "initialize",
                json!({
                    "protocolVersion": VERSION,
                    "capabilities": {},
                    "clientInfo": { "name": "x", "version": "1" },
                }),
            ),
            404,
            Want::Error(-32601, Some(json!(25))),
        ),
        case(
            "notification",
            Req::raw(
                json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/initialized",
                    "params": { "_meta": meta(tasks_caps()) },
                })
                .to_string(),
            )
            .set("mcp-method", "notifications/initialized"),
            202,
            Want::Accepted,
        ),
        case(
            "Content-Type text/plain",
            list(26).set("content-type", "text/plain"),
            415,
            Want::Error(-32600, None),
        ),
        case(
            "body over the limit",
            list(27).map_json(|b| b["params"]["padding"] = json!("x".repeat(10 * 1024))),
            413,
            Want::Error(-32600, None),
        )
        .small(),
        case(
            "Host and Origin evil.example.com",
            list(28)
                .set("host", "evil.example.com")
                .set("origin", "http://evil.example.com"),
            403,
            Want::Error(-32600, None),
        ),
        case(
            "Host evil.example.com, no Origin",
            list(35).set("host", "evil.example.com"),
            403,
            Want::Error(-32600, None),
        )
        .then(|_, body| {
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("Host"), "refused for its Host: {body}");
        }),
        case(
            "Origin evil.example.com, good Host",
            list(29).set("origin", "http://evil.example.com"),
            403,
            Want::Error(-32600, None),
        ),
        case(
            "opaque Origin null",
            list(34).set("origin", "null"),
            403,
            Want::Error(-32600, None),
        ),
        case(
            "greet {name: 5}",
            Req::rpc(
                json!(30),
                "tools/call",
                json!({ "name": "greet", "arguments": { "name": 5 } }),
            ),
            200,
            Want::Error(-32602, Some(json!(30))),
        )
        .then(|_, body| {
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("/name"), "must name the property: {body}");
        }),
        case(
            "unknown tool",
            Req::rpc(
                json!(31),
                "tools/call",
                json!({ "name": "no_such_tool", "arguments": {} }),
            ),
            200,
            Want::Error(-32602, Some(json!(31))),
        )
        .then(|_, body| {
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("no_such_tool"), "{body}");
        }),
        case(
            "legacy initialize",
            Req::raw(
                json!({
                    "jsonrpc": "2.0",
                    "id": 32,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": { "name": "x", "version": "1" },
                    },
                })
                .to_string(),
            )
            .set("mcp-protocol-version", "2025-11-25"),
            200,
            Want::Result(json!(32)),
        )
        .then(|raw, body| {
            // A version this server speaks in a session is answered as asked (issue 11:
            // this used to be answered with 2026-07-28, which 2025-era clients refuse).
            assert_eq!(
                body["result"]["protocolVersion"],
                json!("2025-11-25"),
                "{body}"
            );
            assert!(
                raw.headers.contains_key("mcp-session-id"),
                "{:?}",
                raw.headers
            );
        }),
        case(
            "legacy initialize asking for 2026-07-28",
            Req::raw(
                json!({
                    "jsonrpc": "2.0",
                    "id": 40,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": VERSION,
                        "capabilities": {},
                        "clientInfo": { "name": "x", "version": "1" },
                    },
                })
                .to_string(),
            ),
            200,
            Want::Result(json!(40)),
        )
        .then(|raw, body| {
            assert_eq!(body["result"]["protocolVersion"], json!(VERSION), "{body}");
            assert!(
                !raw.headers.contains_key("mcp-session-id"),
                "{:?}",
                raw.headers
            );
        }),
    ];
    // Ids keep their JSON type and value, on results and on errors alike.
    for id in [
        json!("abc"),
        json!(7),
        json!(1_700_000_000_000_i64),
        json!(-3),
    ] {
        cases.push(case(
            "id echo on a result",
            Req::rpc(id.clone(), "server/discover", json!({})),
            200,
            Want::Result(id.clone()),
        ));
        cases.push(case(
            "id echo on an error",
            Req::rpc(id.clone(), "foo/bar", json!({})),
            404,
            Want::Error(-32601, Some(id)),
        ));
    }
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_exact_statuses_codes_and_ids() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let mut cfg = harness::server_config();
    cfg.max_body_bytes = 4096;
    let small = Replica::start_with(
        &db.store,
        registry("conformance"),
        cfg,
        StateKeys::parse(&"ab".repeat(32)).expect("key"),
    )
    .await;
    let http = http();

    for c in bad_request_cases() {
        let (url, addr) = if c.small {
            (&small.url, small.addr)
        } else {
            (&replica.url, replica.addr)
        };
        let raw = if c.tcp {
            c.req.send_tcp(addr).await
        } else {
            c.req.send(&http, url).await
        };
        let what = c.name;
        let body = match &c.want {
            Want::Accepted => {
                assert_eq!(raw.status, c.status, "{what}: {}", raw.text());
                assert!(
                    raw.body.is_empty(),
                    "{what}: 202 must have no body: {}",
                    raw.text()
                );
                Value::Null
            }
            Want::Error(code, id) => {
                assert_error(&raw, what, c.status, *code, id.as_ref());
                raw.json()
            }
            Want::Result(id) => {
                assert_eq!(c.status, 200, "{what}: results travel with 200");
                assert_result(&raw, what, id);
                raw.json()
            }
        };
        if let Some(extra) = c.extra {
            extra(&raw, &body);
        }
    }

    small.stop().await;
    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 2. Fuzz: no request makes a replica panic or answer a bare 500
// ---------------------------------------------------------------------------------------

/// xorshift64: deterministic, so a failure reproduces.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n as u64)).unwrap_or(0)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn byte(&mut self) -> u8 {
        self.next().to_le_bytes()[0]
    }
}

struct Base {
    body: Value,
    method: &'static str,
}

fn fuzz_bases() -> Vec<Base> {
    let call = |name: &str, arguments: Value| json!({ "name": name, "arguments": arguments });
    let items: Vec<(&'static str, Value)> = vec![
        ("server/discover", json!({})),
        ("tools/list", json!({})),
        ("tools/list", json!({ "cursor": "x" })),
        ("tools/call", call("greet", json!({ "name": "x" }))),
        (
            "tools/call",
            call("slow_compute", json!({ "seconds": 0, "label": "l" })),
        ),
        ("tools/call", call("failing_job", json!({ "note": "x" }))),
        (
            "tools/call",
            call("confirm_delete", json!({ "filename": "f" })),
        ),
        ("tools/call", call("test_missing_capability", json!({}))),
        ("tools/call", call("test_streaming_elicitation", json!({}))),
        (
            "tools/call",
            json!({
                "name": "test_tool_with_task",
                "arguments": {},
                "inputResponses": { "user_name": { "action": "accept", "content": { "name": "x" } } },
                "requestState": "v1.eyJ0IjoieCJ9.AAAA",
            }),
        ),
        (
            "tasks/get",
            json!({ "taskId": "6f9619ff-8b86-4011-b42d-00cf4fc964ff" }),
        ),
        (
            "tasks/update",
            json!({
                "taskId": "6f9619ff-8b86-4011-b42d-00cf4fc964ff",
                "inputResponses": { "k": { "action": "accept", "content": {} } },
            }),
        ),
        (
            "tasks/cancel",
            json!({ "taskId": "6f9619ff-8b86-4011-b42d-00cf4fc964ff" }),
        ),
        ("prompts/get", json!({ "name": "p" })),
        ("foo/bar", json!({})),
        ("tasks/result", json!({ "taskId": "x" })),
        ("resources/read", json!({ "uri": "file:///x" })),
        (
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": { "name": "x", "version": "1" },
            }),
        ),
    ];
    items
        .into_iter()
        .enumerate()
        .map(|(i, (method, mut params))| {
            if method != "initialize"
                && let Some(p) = params.as_object_mut()
            {
                p.insert("_meta".into(), meta(tasks_caps()));
            }
            Base {
                body: json!({ "jsonrpc": "2.0", "id": i, "method": method, "params": params }),
                method,
            }
        })
        .collect()
}

const FUZZ_PATHS: &[&[&str]] = &[
    &["id"],
    &["jsonrpc"],
    &["method"],
    &["params"],
    &["params", "_meta"],
    &["params", "_meta", PV],
    &["params", "_meta", CC],
    &["params", "_meta", CC, "extensions"],
    &["params", "_meta", CC, "extensions", TASKS],
    &["params", "_meta", CC, "elicitation"],
    &["params", "name"],
    &["params", "arguments"],
    &["params", "arguments", "name"],
    &["params", "arguments", "seconds"],
    &["params", "taskId"],
    &["params", "inputResponses"],
    &["params", "inputResponses", "k"],
    &["params", "requestState"],
    &["params", "cursor"],
    &["params", "protocolVersion"],
];

const RAW_NUMBERS: &[&str] = &[
    "1e400",
    "-1e400",
    "1e-400",
    "1E+400",
    "123456789012345678901234567890",
    "-9223372036854775809",
    "18446744073709551616",
    "9007199254740993",
    "-0",
    "0.0",
    "1.5",
    "-1",
];

const NESTING_DEPTHS: &[usize] = &[2, 64, 126, 127, 128, 129, 200, 1000, 3000, 5000];

/// Sets (or, with `None`, removes) the value at `path`, creating objects on the way
/// when it can.
fn set_path(root: &mut Value, path: &[&str], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = root;
    for key in parents {
        let Some(obj) = at.as_object_mut() else {
            return;
        };
        at = obj.entry((*key).to_owned()).or_insert_with(|| json!({}));
    }
    if let Some(obj) = at.as_object_mut() {
        match value {
            Some(v) => {
                obj.insert((*last).to_owned(), v);
            }
            None => {
                obj.remove(*last);
            }
        }
    }
}

fn weird_value(rng: &mut XorShift) -> Value {
    match rng.below(16) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(false),
        3 => json!(0),
        4 => json!(-1),
        5 => json!(1.5),
        6 => json!(u64::MAX),
        7 => json!(i64::MIN),
        8 => json!(""),
        9 => json!("x"),
        10 => json!("\u{0}nul"),
        11 => json!("é👋"),
        12 => json!([]),
        13 => json!([1, "2", null]),
        14 => json!({}),
        _ => json!({ "a": { "b": [] } }),
    }
}

fn nested(depth: usize, rng: &mut XorShift) -> String {
    if rng.below(2) == 0 {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    } else {
        format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
    }
}

fn random_header_value(rng: &mut XorShift) -> Vec<u8> {
    const KNOWN: &[&str] = &[
        "",
        " ",
        "\t",
        "tools/call",
        "tools/list",
        "tasks/get",
        "server/discover",
        "greet",
        "2026-07-28",
        "2025-11-25",
        "=?base64?",
        "=?base64??=",
        "=?base64?Z3JlZXQ=?=",
        "=?base64?/w==?=",
        "=?base64?***?=",
        "=?base64?SGk?=",
        "6f9619ff-8b86-4011-b42d-00cf4fc964ff",
    ];
    let len = rng.below(24);
    match rng.below(5) {
        0 => (0..len).map(|_| rng.byte()).collect(),
        1 => (0..len).map(|_| 0x20 + rng.byte() % 0x5f).collect(),
        2 => (0..len).map(|_| 0x80 | rng.byte()).collect(),
        3 => {
            let inner: Vec<u8> = (0..len)
                .map(|_| {
                    *rng.pick(
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\t ?",
                    )
                })
                .collect();
            [&b"=?base64?"[..], &inner, b"?="].concat()
        }
        _ => rng.pick(KNOWN).as_bytes().to_vec(),
    }
}

/// One mutated request and a description of what was done to it.
fn fuzz_variant(rng: &mut XorShift, bases: &[Base]) -> (Req, String) {
    let base = rng.pick(bases);
    let mut body = base.body.clone();
    let mut req = Req::raw(Vec::new()).set("mcp-method", base.method);
    if let Some(name) = name_of(base.method, &base.body["params"]) {
        req = req.set("mcp-name", name);
    }
    let mut raws: Vec<String> = Vec::new();
    let mut text_ops: Vec<usize> = Vec::new();
    let mut desc = vec![format!("base {}", base.method)];

    for _ in 0..=rng.below(2) {
        match rng.below(11) {
            0..=2 => {
                let path = rng.pick(FUZZ_PATHS);
                if rng.below(5) == 0 {
                    set_path(&mut body, path, None);
                    desc.push(format!("remove {path:?}"));
                } else {
                    let v = weird_value(rng);
                    desc.push(format!("set {path:?} = {v}"));
                    set_path(&mut body, path, Some(v));
                }
            }
            3 => {
                let path = rng.pick(FUZZ_PATHS);
                let depth = *rng.pick(NESTING_DEPTHS);
                desc.push(format!("nest {depth} at {path:?}"));
                let placeholder = format!("@@RAW{}@@", raws.len());
                raws.push(nested(depth, rng));
                set_path(&mut body, path, Some(json!(placeholder)));
            }
            4 => {
                let path = rng.pick(FUZZ_PATHS);
                let number = *rng.pick(RAW_NUMBERS);
                desc.push(format!("number {number} at {path:?}"));
                let placeholder = format!("@@RAW{}@@", raws.len());
                raws.push(number.to_owned());
                set_path(&mut body, path, Some(json!(placeholder)));
            }
            5 | 6 => text_ops.push(rng.below(5)),
            7 => {
                // Without an id, any message is a notification.
                set_path(&mut body, &["id"], None);
                desc.push("remove id".into());
            }
            _ => {
                let header = *rng.pick(&[
                    "mcp-method",
                    "mcp-name",
                    "mcp-protocol-version",
                    "content-type",
                ]);
                if rng.below(4) == 0 {
                    desc.push(format!("unset {header}"));
                    req = req.unset(header);
                } else {
                    let value = random_header_value(rng);
                    // Values the HTTP client refuses (CR, LF, NUL, DEL, ...) are skipped.
                    if HeaderValue::from_bytes(&value).is_ok() {
                        desc.push(format!("{header}: {:?}", String::from_utf8_lossy(&value)));
                        req = req.set(header, value);
                    }
                }
            }
        }
    }

    let mut text = body.to_string();
    for (i, raw) in raws.iter().enumerate() {
        text = text.replace(&format!("\"@@RAW{i}@@\""), raw);
    }
    let mut bytes = text.into_bytes();
    for op in text_ops {
        match op {
            0 => {
                let at = rng.below(bytes.len().max(1));
                desc.push(format!("truncate at {at}"));
                bytes.truncate(at);
            }
            1 => {
                for _ in 0..=rng.below(4) {
                    if !bytes.is_empty() {
                        let at = rng.below(bytes.len());
                        bytes[at] = rng.byte();
                    }
                }
                desc.push("flip bytes".into());
            }
            2 => {
                let bad: &[u8] = rng.pick::<&[u8]>(&[
                    &[0xff][..],
                    &[0xc3, 0x28],
                    &[0xed, 0xa0, 0x80],
                    &[0xf0, 0x28, 0x8c, 0x28],
                    &[0x80],
                    &[0xc0, 0xaf],
                ]);
                let at = rng.below(bytes.len() + 1);
                desc.push(format!("invalid UTF-8 {bad:02x?} at {at}"));
                bytes.splice(at..at, bad.iter().copied());
            }
            3 => {
                let dup = *rng.pick(&[
                    r#""id":"dup","#,
                    r#""id":1,"id":{},"#,
                    r#""method":"tools/list","#,
                    r#""method":"tasks/get","#,
                    r#""jsonrpc":"1.0","#,
                    r#""params":{},"#,
                    r#""params":{"_meta":null},"#,
                ]);
                desc.push(format!("duplicate {dup}"));
                let mut s = String::from_utf8_lossy(&bytes).into_owned();
                if s.starts_with('{') {
                    s.insert_str(1, dup);
                }
                // Keys later in the object win in serde_json: also duplicate at the end.
                if rng.below(2) == 0
                    && let Some(end) = s.rfind('}')
                {
                    s.insert_str(end, &format!(",{}", dup.trim_end_matches(',')));
                }
                bytes = s.into_bytes();
            }
            _ => {
                let escape = *rng.pick(&["\\u0000", "\\ud800", "\\udfff\\ud800", "\\\\", "\\q"]);
                desc.push(format!("escape {escape}"));
                let s =
                    String::from_utf8_lossy(&bytes).replacen("\"x\"", &format!("\"x{escape}\""), 1);
                bytes = s.into_bytes();
            }
        }
    }
    (req.body(bytes), desc.join("; "))
}

/// Why an answer breaks the transport's contract, if it does.
fn insane(raw: &Raw) -> Option<String> {
    if raw.status == 202 {
        return (!raw.body.is_empty()).then(|| "202 with a body".into());
    }
    if raw.content_type() != Some("application/json") {
        return Some(format!("Content-Type {:?}", raw.content_type()));
    }
    let Ok(body) = serde_json::from_slice::<Value>(&raw.body) else {
        return Some("body is not JSON".into());
    };
    let Some(obj) = body.as_object() else {
        return Some("body is not one JSON object".into());
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Some("no \"jsonrpc\":\"2.0\"".into());
    }
    if obj.contains_key("result") == obj.contains_key("error") {
        return Some("not exactly one of result/error".into());
    }
    if let Some(error) = obj.get("error")
        && (!error["code"].is_i64() || !error["message"].is_string())
    {
        return Some("error without an integer code and a string message".into());
    }
    if raw.status >= 500 && body["error"]["code"] != json!(-32603) {
        return Some("a 5xx that is not a JSON-RPC -32603 error".into());
    }
    if obj.contains_key("result") && raw.status != 200 {
        return Some("a result with a status other than 200".into());
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_makes_the_server_panic_or_answer_a_bare_500() {
    let db = TestDb::new().await;
    // Task-optional calls from clients without the extension wait for a worker; there is
    // none here, so keep that wait short.
    let mut cfg = harness::server_config();
    cfg.sync_wait = Duration::from_millis(300);
    let replica = Replica::start_with(
        &db.store,
        registry("conformance"),
        cfg,
        StateKeys::parse(&"ab".repeat(32)).expect("key"),
    )
    .await;
    let http = http();
    let bases = fuzz_bases();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let variants: Vec<(usize, Req, String)> = (0..400)
        .map(|i| {
            let (req, desc) = fuzz_variant(&mut rng, &bases);
            (i, req, desc)
        })
        .collect();

    let outcomes: Vec<(usize, String, Result<Raw, String>)> =
        futures::stream::iter(variants.iter().map(|(i, req, desc)| {
            let http = &http;
            let url = &replica.url;
            async move { (*i, desc.clone(), req.try_send(http, url).await) }
        }))
        .buffer_unordered(8)
        .collect()
        .await;

    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, desc, outcome) in &outcomes {
        match outcome {
            Err(e) => failures.push(format!("#{i} ({desc}): no HTTP answer: {e}")),
            Ok(raw) => {
                if let Some(why) = insane(raw) {
                    failures.push(format!(
                        "#{i} ({desc}): {why}: HTTP {} {}",
                        raw.status,
                        raw.text().chars().take(300).collect::<String>()
                    ));
                } else if raw.status == 202 {
                    seen.insert((202, 0));
                } else {
                    let body = raw.json();
                    seen.insert((raw.status, body["error"]["code"].as_i64().unwrap_or(0)));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fuzzed requests broke the contract:\n{}",
        failures.len(),
        outcomes.len(),
        failures.join("\n")
    );
    // The variants reached many different layers, not one early rejection.
    for expected in [
        (200, 0),
        (200, -32602),
        (202, 0),
        (404, -32601),
        (400, -32021),
        (400, -32700),
        (400, -32600),
        (400, -32602),
        (400, -32020),
    ] {
        assert!(
            seen.contains(&expected),
            "no fuzzed request got {expected:?}; seen {seen:?}"
        );
    }

    // The replica is still serving.
    let client = replica.client("alice");
    let discover = client
        .discover()
        .await
        .expect("server/discover after fuzzing");
    assert_eq!(discover["supportedVersions"], json!([VERSION]));
    let hello = client
        .call_tool("greet", json!({ "name": "after" }))
        .await
        .expect("greet after fuzzing");
    assert_eq!(text_of(&hello), "Hello, after!");
    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 3. Discovery and tools/list
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_and_tools_list_are_complete_and_stable() {
    let db = TestDb::new().await;
    let one = Replica::start(&db.store, registry("conformance")).await;
    let two = Replica::start(&db.store, registry("conformance")).await;
    let http = http();

    let raw = Req::rpc(json!("d"), "server/discover", json!({}))
        .send(&http, &one.url)
        .await;
    let d = assert_result(&raw, "server/discover", &json!("d"));
    assert_eq!(d["resultType"], "complete", "{d}");
    assert_eq!(d["supportedVersions"], json!([VERSION]), "{d}");
    assert_eq!(d["capabilities"]["extensions"][TASKS], json!({}), "{d}");
    assert!(
        d["capabilities"].get("tasks").is_none(),
        "no legacy capabilities.tasks: {d}"
    );
    assert!(d["capabilities"]["tools"].is_object(), "{d}");
    assert!(d["ttlMs"].is_u64(), "ttlMs must be an integer >= 0: {d}");
    assert!(
        matches!(d["cacheScope"].as_str(), Some("public" | "private")),
        "{d}"
    );
    let info = &d["_meta"][SERVER_INFO];
    assert!(info["name"].as_str().is_some_and(|s| !s.is_empty()), "{d}");
    assert!(
        info["version"].as_str().is_some_and(|s| !s.is_empty()),
        "{d}"
    );

    let list_on = |url: String| {
        let http = http.clone();
        async move {
            let raw = Req::rpc(json!(1), "tools/list", json!({}))
                .send(&http, &url)
                .await;
            assert_result(&raw, "tools/list", &json!(1))
        }
    };
    let a = list_on(one.url.clone()).await;
    let b = list_on(one.url.clone()).await;
    let c = list_on(two.url.clone()).await;
    assert_eq!(a, b, "tools/list differs between two calls");
    assert_eq!(a, c, "tools/list differs between two replicas");
    assert_eq!(a["resultType"], "complete");
    assert!(a["ttlMs"].is_u64(), "{a}");
    assert!(
        matches!(a["cacheScope"].as_str(), Some("public" | "private")),
        "{a}"
    );
    let tools = a["tools"].as_array().expect("tools array");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in [
        "greet",
        "slow_compute",
        "failing_job",
        "protocol_error_job",
        "confirm_delete",
        "multi_input",
        "test_tool_with_task",
        "test_missing_capability",
        "test_streaming_elicitation",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(
            tool.get("execution").is_none(),
            "no tool-level task declaration on the 2026 wire: {tool}"
        );
    }

    let raw = Req::rpc(json!(2), "tools/list", json!({ "cursor": "x" }))
        .send(&http, &one.url)
        .await;
    let e = assert_error(
        &raw,
        "tools/list with a foreign cursor",
        200,
        -32602,
        Some(&json!(2)),
    );
    assert!(
        e["message"].as_str().unwrap_or_default().contains("cursor"),
        "{e}"
    );

    two.stop().await;
    one.stop().await;
}

// ---------------------------------------------------------------------------------------
// 4. Ownership
// ---------------------------------------------------------------------------------------

async fn task_row(db: &TestDb, id: &str) -> (String, i64, bool) {
    let mut conn = db.sql().await;
    sqlx::query_as::<_, (String, i64, bool)>(
        "SELECT status, version, cancel_requested_at IS NULL FROM tasks WHERE id = $1",
    )
    .bind(uuid::Uuid::parse_str(id).expect("uuid"))
    .fetch_one(&mut conn)
    .await
    .expect("task row")
}

fn task_params(method: &str, id: &str) -> Value {
    match method {
        "tasks/update" => json!({ "taskId": id, "inputResponses": {} }),
        _ => json!({ "taskId": id }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_cannot_tell_a_task_from_one_that_never_existed() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let http = http();
    let alice = replica.client("alice");

    // No worker: the task stays working, so a cancel that got through would be visible at
    // once as status "cancelled".
    let created = alice
        .call_tool("slow_compute", json!({ "seconds": 30 }))
        .await
        .expect("create");
    assert_eq!(created["resultType"], "task", "{created}");
    let id = task_id(&created);
    let before = task_row(&db, &id).await;
    assert_eq!(before.0, "working");

    for (tenant, principal) in [("default", "bob"), ("other", "carol"), ("other", "alice")] {
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let never_issued = fresh_id();
            let theirs = Req::rpc(json!(77), method, task_params(method, &id))
                .owner(tenant, principal)
                .send(&http, &replica.url)
                .await;
            let unknown = Req::rpc(json!(77), method, task_params(method, &never_issued))
                .owner(tenant, principal)
                .send(&http, &replica.url)
                .await;
            let what = format!("{principal}@{tenant} {method}");
            assert_error(&theirs, &what, 200, -32602, Some(&json!(77)));
            assert_eq!(
                theirs.observable(),
                unknown.observable(),
                "{what}: the answer about alice's task must be byte-identical to the one about a never-issued id\n{}\n{}",
                theirs.text(),
                unknown.text()
            );
        }
    }
    assert_eq!(
        task_row(&db, &id).await,
        before,
        "alice's task was changed by another owner"
    );

    // Malformed ids are told apart from unknown ones (it reveals nothing about anyone's tasks).
    let malformed = Req::rpc(json!(1), "tasks/get", json!({ "taskId": "not-a-task" }))
        .principal("alice")
        .send(&http, &replica.url)
        .await;
    let malformed = assert_error(&malformed, "malformed id", 200, -32602, Some(&json!(1)));
    let unknown = Req::rpc(json!(1), "tasks/get", json!({ "taskId": fresh_id() }))
        .principal("alice")
        .send(&http, &replica.url)
        .await;
    let unknown = assert_error(&unknown, "unknown id", 200, -32602, Some(&json!(1)));
    assert_ne!(malformed["message"], unknown["message"]);

    // Without the extension, every tasks/* method is refused before any lookup.
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        for target in [id.clone(), fresh_id(), "not-a-task".to_owned()] {
            let raw = Req::rpc_as(json!("nd"), method, task_params(method, &target), json!({}))
                .principal("alice")
                .send(&http, &replica.url)
                .await;
            let what = format!("non-declaring {method} {target}");
            let e = assert_error(&raw, &what, 400, -32021, Some(&json!("nd")));
            assert_eq!(
                e["data"]["requiredCapabilities"]["extensions"][TASKS],
                json!({}),
                "{what}: {e}"
            );
        }
    }
    assert_eq!(
        task_row(&db, &id).await,
        before,
        "a refused request changed the task"
    );

    // The owner sees it, and can cancel it: the checks above were not vacuous.
    let own = Req::rpc(json!(77), "tasks/get", task_params("tasks/get", &id))
        .principal("alice")
        .send(&http, &replica.url)
        .await;
    let own = assert_result(&own, "owner tasks/get", &json!(77));
    assert_eq!(own["taskId"], json!(id));
    assert_eq!(status(&own), "working");
    let ack = alice.cancel_task(&id).await.expect("owner cancel");
    assert_eq!(ack["resultType"], "complete");
    assert_eq!(task_row(&db, &id).await.0, "cancelled");

    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 5. Task creation: shape and durability
// ---------------------------------------------------------------------------------------

fn assert_timestamp(v: &Value, what: &str) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{what} must be a string: {v}"));
    assert!(s.ends_with('Z'), "{what} must be UTC with Z: {s}");
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{what} is not RFC 3339 ({e}): {s}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_task_is_durable_and_well_formed() {
    let db = TestDb::new().await;
    let one = Replica::start(&db.store, registry("conformance")).await;
    let two = Replica::start(&db.store, registry("conformance")).await;
    let worker = Worker::start(&db.store, registry("conformance"));

    let ex = one
        .client("alice")
        .send(
            json!("create"),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 1, "label": "durable" } }),
        )
        .await
        .expect("tools/call");
    assert_eq!(
        ex.body.as_ref().and_then(|b| b.get("id")),
        Some(&json!("create"))
    );
    let created = exchange_result(ex, "create");
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    let id = task_id(&created);
    assert!(
        created["ttlMs"].as_u64().is_some_and(|t| t > 0),
        "ttlMs must be a positive integer: {created}"
    );
    assert!(
        created["pollIntervalMs"].as_u64().is_some_and(|t| t > 0),
        "pollIntervalMs must be positive: {created}"
    );
    assert_timestamp(&created["createdAt"], "createdAt");
    assert_timestamp(&created["lastUpdatedAt"], "lastUpdatedAt");
    for absent in [
        "result",
        "error",
        "inputRequests",
        "requestState",
        "task",
        "ttl",
        "pollInterval",
    ] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }

    // Readable at once through another replica.
    let got = two
        .client("alice")
        .get_task(&id)
        .await
        .expect("tasks/get on another replica right after creation");
    assert_eq!(got["resultType"], "complete", "{got}");
    assert_eq!(got["taskId"], json!(id));
    assert_eq!(got["createdAt"], created["createdAt"]);
    assert!(matches!(status(&got), "working" | "completed"), "{got}");

    let done = two
        .client("alice")
        .wait_terminal(&id, Duration::from_secs(30))
        .await
        .expect("terminal");
    assert_eq!(status(&done), "completed", "{done}");
    assert_eq!(done["resultType"], "complete", "{done}");
    let result = &done["result"];
    assert!(
        result["content"].as_array().is_some_and(|c| !c.is_empty()),
        "{done}"
    );
    assert_eq!(text_of(result), "Computed durable in 1 s.");
    assert_eq!(result["resultType"], "complete", "{done}");
    assert!(result["_meta"][SERVER_INFO]["name"].is_string(), "{done}");
    assert!(result["_meta"].get(RELATED_TASK).is_none(), "{done}");
    for absent in ["error", "inputRequests", "requestState"] {
        assert!(done.get(absent).is_none(), "{absent} in {done}");
    }

    worker.stop().await;
    two.stop().await;
    one.stop().await;
}

// ---------------------------------------------------------------------------------------
// 6. Synchronous fallback for clients without the extension
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_the_extension_get_plain_results_or_32021() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let worker = Worker::start(&db.store, registry("conformance"));
    let plain =
        Client::new(&replica.url, json!({ "elicitation": {} })).header("x-test-principal", "alice");

    let ex = plain
        .send(
            json!(1),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 1, "label": "sync" } }),
        )
        .await
        .expect("tools/call");
    let result = exchange_result(ex, "slow_compute without the extension");
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result.get("taskId").is_none(), "{result}");
    assert!(result.get("status").is_none(), "{result}");
    assert!(
        result["content"].as_array().is_some_and(|c| !c.is_empty()),
        "{result}"
    );
    assert_eq!(text_of(&result), "Computed sync in 1 s.");
    // It really ran on the worker.
    let mut conn = db.sql().await;
    let ran: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE tool = 'slow_compute' AND status = 'completed'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("count");
    assert_eq!(ran, 1);

    let ex = plain
        .send(
            json!("f"),
            "tools/call",
            json!({ "name": "failing_job", "arguments": {} }),
        )
        .await
        .expect("tools/call");
    let e = exchange_error(
        &ex,
        "failing_job without the extension",
        400,
        -32021,
        &json!("f"),
    );
    assert_eq!(
        e["data"]["requiredCapabilities"]["extensions"][TASKS],
        json!({}),
        "{e}"
    );
    let created: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE tool = 'failing_job'")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert_eq!(created, 0, "a refused call must not create a task");

    // A legacy task param is ignored, with and without the extension.
    for client in [&plain, &replica.client("alice")] {
        let result = client
            .request(
                "tools/call",
                json!({ "name": "greet", "arguments": { "name": "x" }, "task": { "ttl": 1000 } }),
            )
            .await
            .expect("greet");
        assert_eq!(result["resultType"], "complete", "{result}");
        assert!(result.get("taskId").is_none(), "{result}");
        assert_eq!(text_of(&result), "Hello, x!");
    }

    worker.stop().await;
    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// 7. MRTR
// ---------------------------------------------------------------------------------------

fn user_name(name: Value) -> Value {
    json!({ "user_name": { "action": "accept", "content": { "name": name } } })
}

fn round_two(state: &str, arguments: Value, responses: Value) -> Value {
    json!({
        "name": "test_tool_with_task",
        "arguments": arguments,
        "inputResponses": responses,
        "requestState": state,
    })
}

/// Round 1 of `test_tool_with_task`: the input request and the state to send back.
async fn round_one(client: &Client) -> String {
    let r1 = client
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("round 1");
    assert_eq!(r1["resultType"], "input_required", "{r1}");
    assert!(r1.get("taskId").is_none(), "{r1}");
    assert_eq!(
        r1["inputRequests"]["user_name"]["method"], "elicitation/create",
        "{r1}"
    );
    r1["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("requestState must be a string: {r1}"))
        .to_owned()
}

async fn refused(client: &Client, params: Value, what: &'static str) -> Value {
    let ex = client
        .send(json!(what), "tools/call", params)
        .await
        .expect("tools/call");
    exchange_error(&ex, what, 200, -32602, &json!(what))
}

fn flip_middle(token: &str) -> String {
    let mut chars: Vec<char> = token.chars().collect();
    let mut at = chars.len() / 2;
    while !chars[at].is_ascii_alphanumeric() {
        at += 1;
    }
    chars[at] = if chars[at] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mrtr_gathers_input_before_the_task_and_refuses_forged_state() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let worker = Worker::start(&db.store, registry("conformance"));
    let alice = replica.client("alice");
    let bob = replica.client("bob");

    // The happy path.
    let state = round_one(&alice).await;
    let created = alice
        .request(
            "tools/call",
            round_two(&state, json!({}), user_name(json!("Alice"))),
        )
        .await
        .expect("round 2");
    assert_eq!(created["resultType"], "task", "{created}");
    assert!(created.get("requestState").is_none(), "{created}");
    assert!(created.get("inputRequests").is_none(), "{created}");
    let id = task_id(&created);
    let done = alice
        .wait_terminal(&id, Duration::from_secs(30))
        .await
        .expect("terminal");
    assert_eq!(status(&done), "completed", "{done}");
    assert!(text_of(&done["result"]).contains("Alice"), "{done}");

    // Answers without a state answer nothing: the server asks again.
    let again = alice
        .request(
            "tools/call",
            json!({ "name": "test_tool_with_task", "arguments": {}, "inputResponses": user_name(json!("Alice")) }),
        )
        .await
        .expect("answers without state");
    assert_eq!(again["resultType"], "input_required", "{again}");

    let state = round_one(&alice).await;
    let tampered = flip_middle(&state);
    assert_ne!(tampered, state);
    let e = refused(
        &alice,
        round_two(&tampered, json!({}), user_name(json!("Alice"))),
        "tampered requestState",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let e = refused(
        &bob,
        round_two(&state, json!({}), user_name(json!("Bob"))),
        "requestState replayed by another principal",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let e = refused(
        &alice,
        round_two(&state, json!({ "extra": 1 }), user_name(json!("Alice"))),
        "requestState with changed arguments",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let other_tool = alice
        .call_tool("test_streaming_elicitation", json!({}))
        .await
        .expect("test_streaming_elicitation round 1");
    assert_eq!(other_tool["resultType"], "input_required", "{other_tool}");
    let other_state = other_tool["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let e = refused(
        &alice,
        round_two(&other_state, json!({}), user_name(json!("Alice"))),
        "requestState of another tool",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("requestState"),
        "{e}"
    );

    let e = refused(
        &alice,
        round_two(&state, json!({}), user_name(json!(5))),
        "answer that does not match the schema",
    )
    .await;
    assert!(
        e["message"]
            .as_str()
            .unwrap_or_default()
            .contains("user_name"),
        "{e}"
    );

    // None of the refused rounds created a task.
    let mut conn = db.sql().await;
    let tasks: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE tool = 'test_tool_with_task'")
            .fetch_one(&mut conn)
            .await
            .expect("count");
    assert_eq!(tasks, 1, "only the accepted round 2 creates a task");

    // Input the client cannot give, and capabilities it did not declare.
    let bare = Client::new(&replica.url, json!({})).header("x-test-principal", "alice");
    let ex = bare
        .send(
            json!(41),
            "tools/call",
            json!({ "name": "test_streaming_elicitation", "arguments": {} }),
        )
        .await
        .expect("tools/call");
    let e = exchange_error(
        &ex,
        "elicitation without the capability",
        400,
        -32021,
        &json!(41),
    );
    assert_eq!(
        e["data"]["requiredCapabilities"]["elicitation"],
        json!({}),
        "{e}"
    );

    let ex = bare
        .send(
            json!(42),
            "tools/call",
            json!({ "name": "test_missing_capability", "arguments": {} }),
        )
        .await
        .expect("tools/call");
    let e = exchange_error(&ex, "sampling required", 400, -32021, &json!(42));
    assert_eq!(
        e["data"]["requiredCapabilities"]["sampling"],
        json!({}),
        "{e}"
    );

    worker.stop().await;
    replica.stop().await;
}

// ---------------------------------------------------------------------------------------
// Inputs PostgreSQL or JSON numbers cannot carry as they are
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_in_task_input_are_not_an_internal_error() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let http = http();

    let state = round_one(&replica.client("alice")).await;
    for (what, params) in [
        (
            "failing_job with a NUL in an argument",
            json!({ "name": "failing_job", "arguments": { "note": "a\u{0}b" } }),
        ),
        (
            "slow_compute with a NUL in its label",
            json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": "a\u{0}b" } }),
        ),
        (
            "MRTR answer with a NUL",
            round_two(&state, json!({}), user_name(json!("a\u{0}b"))),
        ),
    ] {
        let raw = Req::rpc(json!(what), "tools/call", params)
            .principal("alice")
            .send(&http, &replica.url)
            .await;
        let body = assert_jsonrpc(&raw, what);
        assert_id(&body, &raw, what, Some(&json!(what)));
        let accepted = raw.status == 200 && body["result"]["resultType"] == "task";
        let refused = matches!(raw.status, 200 | 400) && body["error"]["code"] == -32602;
        assert!(
            accepted || refused,
            "{what}: a well-formed request must create the task or be refused with -32602, \
             not HTTP {} {body}",
            raw.status
        );
    }
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_beyond_64_bits_are_echoed_exactly_or_refused() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, registry("conformance")).await;
    let http = http();
    for id in ["123456789012345678901234567890", "-9223372036854775809"] {
        let req = Req::rpc(json!("@@ID@@"), "server/discover", json!({}));
        let text = String::from_utf8(req.body.clone())
            .expect("UTF-8")
            .replace("\"@@ID@@\"", id);
        let raw = req.body(text).send(&http, &replica.url).await;
        let body = assert_jsonrpc(&raw, id);
        let echoed = raw.text().contains(&format!("\"id\":{id}"));
        let refused =
            raw.status == 400 && body["error"]["code"] == -32600 && body.get("id").is_none();
        assert!(
            echoed || refused,
            "id {id}: must be echoed exactly or refused (-32600, no id): HTTP {} {}",
            raw.status,
            raw.text()
        );
    }
    replica.stop().await;
}
