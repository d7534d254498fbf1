//! Hand-made attacks over real HTTP, against a replica and a worker on a real database.
//!
//! Each test first creates a few tasks (two owners; completed and waiting for input),
//! takes a digest of every task row, runs its attacks, and at the end checks that the
//! digest is unchanged: no attack may create, alter or delete a task. Every refusal is
//! checked for its exact HTTP status and JSON-RPC code, and for the id it echoes.
//!
//! Requests that an HTTP client library refuses to send (CR, LF, NUL in header values,
//! bodies that never end) go over a bare TCP connection.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use mcp_tasks_wire::headers::encode_value;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{Replica, TestDb, Worker, registry, status, task_id};

const VERSION: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";
const PV: &str = "io.modelcontextprotocol/protocolVersion";
const CC: &str = "io.modelcontextprotocol/clientCapabilities";
/// The default `ServerConfig::max_body_bytes`.
const BODY_LIMIT: usize = 1024 * 1024;
/// The default `ServerConfig::json_limits.max_depth`.
const MAX_DEPTH: usize = 64;

// ---------------------------------------------------------------------------------------
// The target: a replica, a worker, and tasks whose rows must not change
// ---------------------------------------------------------------------------------------

struct Target {
    db: TestDb,
    replica: Replica,
    worker: Worker,
    http: reqwest::Client,
    /// Alice's completed task.
    done: String,
    /// Alice's task waiting for `confirm_delete` input.
    waiting: String,
    /// Bob's completed task.
    bobs: String,
    before: (i64, String),
}

impl Target {
    async fn start() -> Self {
        let db = TestDb::new().await;
        let replica = Replica::start(&db.store, registry("conformance")).await;
        let worker = Worker::start(&db.store, registry("conformance"));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("http client");

        // Tasks of two owners, in states that stay put: completed, and waiting for input.
        let alice = replica.client("alice");
        let bob = replica.client("bob");
        let mut ids = Vec::new();
        for (client, tool, arguments, until) in [
            (
                &alice,
                "slow_compute",
                json!({ "seconds": 0, "label": "a" }),
                "completed",
            ),
            (
                &alice,
                "confirm_delete",
                json!({ "filename": "f" }),
                "input_required",
            ),
            (
                &bob,
                "slow_compute",
                json!({ "seconds": 0, "label": "b" }),
                "completed",
            ),
        ] {
            let created = client
                .call_tool(tool, arguments)
                .await
                .unwrap_or_else(|e| panic!("creating a {tool} task: {e}"));
            let id = task_id(&created);
            client
                .poll_until(
                    &id,
                    Duration::from_secs(30),
                    Duration::from_millis(50),
                    |t| status(t) == until,
                )
                .await
                .unwrap_or_else(|e| panic!("{tool} task never got {until}: {e}"));
            ids.push(id);
        }
        let before = digest(&db).await;
        assert_eq!(before.0, 3, "three tasks before the attacks");
        let [done, waiting, bobs] = <[String; 3]>::try_from(ids).expect("three ids");
        Self {
            db,
            replica,
            worker,
            http,
            done,
            waiting,
            bobs,
            before,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.replica.addr
    }

    /// Checks that the replica still serves and that no task row changed, then stops.
    async fn finish(self) {
        let hello = self
            .replica
            .client("alice")
            .call_tool("greet", json!({ "name": "after" }))
            .await
            .expect("greet after the attacks");
        assert_eq!(hello["content"][0]["text"], "Hello, after!", "{hello}");
        let after = digest(&self.db).await;
        assert_eq!(
            after, self.before,
            "the attacks changed the stored tasks (count, md5 of every row)"
        );
        self.replica.stop().await;
        self.worker.stop().await;
    }
}

/// Number of task rows and an md5 of all of them, every column.
async fn digest(db: &TestDb) -> (i64, String) {
    let mut conn = db.sql().await;
    sqlx::query_as::<_, (i64, String)>(
        "SELECT count(*), md5(coalesce(string_agg(to_jsonb(t)::text, ',' ORDER BY id), '')) \
         FROM tasks t",
    )
    .fetch_one(&mut conn)
    .await
    .expect("digest of the tasks table")
}

fn meta() -> Value {
    json!({ PV: VERSION, CC: { "elicitation": {}, "extensions": { TASKS: {} } } })
}

// ---------------------------------------------------------------------------------------
// Requests and answers
// ---------------------------------------------------------------------------------------

/// One POST /mcp, headers and body exactly as given.
#[derive(Debug, Clone)]
struct Req {
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Req {
    /// The usual transport headers (as principal alice) around `body`.
    fn raw(body: impl Into<Vec<u8>>) -> Self {
        Self {
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                (
                    "accept".into(),
                    b"application/json, text/event-stream".to_vec(),
                ),
                ("mcp-protocol-version".into(), VERSION.as_bytes().to_vec()),
                ("x-test-principal".into(), b"alice".to_vec()),
            ],
            body: body.into(),
        }
    }

    /// A well-formed request with `_meta` and the routing headers it needs.
    fn rpc(id: Value, method: &str, mut params: Value) -> Self {
        if let Some(p) = params.as_object_mut() {
            p.entry("_meta").or_insert_with(meta);
        }
        let key = match method {
            "tools/call" | "prompts/get" => Some("name"),
            "resources/read" => Some("uri"),
            "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
            _ => None,
        };
        let name = key.and_then(|k| params.get(k)).and_then(Value::as_str);
        let mut req = Self::raw(
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string(),
        )
        .set("mcp-method", encode_value(method));
        if let Some(name) = name {
            req = req.set("mcp-name", encode_value(name));
        }
        req
    }

    /// `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{…}}` with `params`
    /// spliced in as raw text, for JSON that `serde_json` cannot build.
    fn call_raw(name: &str, params_text: &str) -> Self {
        Self::raw(format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params_text}}}"#
        ))
        .set("mcp-method", "tools/call")
        .set("mcp-name", encode_value(name))
    }

    fn set(self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.unset(name).add(name, value)
    }

    /// Adds one more header line, even if one of that name is there already.
    fn add(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.headers
            .push((name.to_owned(), value.as_ref().to_vec()));
        self
    }

    fn unset(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    async fn send(&self, t: &Target) -> Answer {
        let mut rb = t.http.post(&t.replica.url);
        for (n, v) in &self.headers {
            let name = reqwest::header::HeaderName::from_bytes(n.as_bytes()).expect("header name");
            let value = reqwest::header::HeaderValue::from_bytes(v)
                .unwrap_or_else(|e| panic!("{n}: {e}: send it with send_tcp"));
            rb = rb.header(name, value);
        }
        let response = rb
            .body(self.body.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("no HTTP answer: {e:?}"));
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        let body = response.bytes().await.expect("response body").to_vec();
        Answer {
            status,
            headers,
            body,
        }
    }

    /// The request as bytes on the wire, with `Content-Length` for its body.
    fn wire(&self, addr: SocketAddr) -> Vec<u8> {
        let mut wire = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
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
        wire
    }

    async fn send_tcp(&self, addr: SocketAddr) -> Tcp {
        exchange(addr, self.wire(addr)).await
    }
}

/// One HTTP answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body)
            .chars()
            .take(600)
            .collect()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The JSON-RPC body, after the invariants every answer keeps.
    fn json(&self, what: &str) -> Value {
        assert_eq!(
            self.header("content-type"),
            Some(&b"application/json"[..]),
            "{what}: Content-Type; HTTP {} {}",
            self.status,
            self.text()
        );
        let body: Value = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{what}: not JSON ({e}): HTTP {} {}",
                self.status,
                self.text()
            )
        });
        assert_eq!(body["jsonrpc"], "2.0", "{what}: {body}");
        assert!(
            body.get("result").is_some() != body.get("error").is_some(),
            "{what}: exactly one of result/error: {body}"
        );
        body
    }

    /// Asserts an error answer: HTTP status, code, and the id echoed (`None`: no id).
    fn error(&self, what: &str, status: u16, code: i64, id: Option<&Value>) -> Value {
        let body = self.json(what);
        assert_eq!(
            (self.status, body["error"]["code"].as_i64()),
            (status, Some(code)),
            "{what}: HTTP status and code: {}",
            self.text()
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: a message: {body}"
        );
        assert_eq!(body.get("id"), id, "{what}: id echo: {}", self.text());
        body["error"].clone()
    }

    /// Asserts a result answer with HTTP 200 and returns the result.
    fn result(&self, what: &str, id: &Value) -> Value {
        let body = self.json(what);
        assert_eq!(self.status, 200, "{what}: {}", self.text());
        assert!(body["result"].is_object(), "{what}: a result: {body}");
        assert_eq!(body.get("id"), Some(id), "{what}: id echo: {}", self.text());
        body["result"].clone()
    }
}

/// What a bare TCP exchange produced.
#[derive(Debug)]
enum Tcp {
    /// The server closed the connection (or reset it) without answering.
    Closed,
    Answer(Answer),
}

impl Tcp {
    /// Refused at the HTTP layer: 400 (any body) or a closed connection; never accepted.
    fn assert_refused(&self, what: &str) {
        match self {
            Tcp::Closed => {}
            Tcp::Answer(a) => {
                assert_eq!(a.status, 400, "{what}: must be refused: {}", a.text());
                // When the MCP layer answers rather than the HTTP parser, it is a
                // header error.
                if a.header("content-type") == Some(&b"application/json"[..]) {
                    let body = a.json(what);
                    assert_eq!(body["error"]["code"], -32020, "{what}: {body}");
                }
            }
        }
    }

    fn answer(self, what: &str) -> Answer {
        match self {
            Tcp::Answer(a) => a,
            Tcp::Closed => panic!("{what}: the server closed the connection without answering"),
        }
    }
}

/// Writes `bytes` on a fresh connection (from another task, so a server that answers
/// early is heard while the write is still going on) and reads one answer. The write
/// side stays open until the answer is read, so a server waiting for the rest of a body
/// would wait forever: the read times out after 20 s, which fails the test.
async fn exchange(addr: SocketAddr, bytes: Vec<u8>) -> Tcp {
    exchange_then(addr, bytes, Vec::new()).await
}

/// Like [`exchange`], and then keeps writing `more` (for bodies sent slowly).
async fn exchange_then(addr: SocketAddr, bytes: Vec<u8>, more: Vec<Vec<u8>>) -> Tcp {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let mut written = 0usize;
        if wr.write_all(&bytes).await.is_ok() {
            written += bytes.len();
            for chunk in more {
                if wr.write_all(&chunk).await.is_err() {
                    break;
                }
                written += chunk.len();
            }
        }
        let _ = done_rx.await;
        written
    });
    let answer = tokio::time::timeout(Duration::from_secs(20), read_answer(&mut rd))
        .await
        .expect("no answer and no close within 20 s: the server is waiting for something");
    let _ = done_tx.send(());
    let _ = writer.await;
    answer
}

/// Writes `bytes`, then closes the write side (the request ends there), and reads the
/// answer.
async fn half_closed(addr: SocketAddr, bytes: Vec<u8>) -> Tcp {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(&bytes).await.expect("write");
    stream.shutdown().await.expect("shutdown");
    let (mut rd, _wr) = stream.into_split();
    tokio::time::timeout(Duration::from_secs(20), read_answer(&mut rd))
        .await
        .expect("no answer and no close within 20 s after the client finished")
}

async fn read_answer(rd: &mut tokio::net::tcp::OwnedReadHalf) -> Tcp {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match rd.read(&mut chunk).await {
            Ok(0) | Err(_) if buf.is_empty() => return Tcp::Closed,
            Ok(0) | Err(_) => panic!(
                "connection ended inside an answer's head: {:?}",
                String::from_utf8_lossy(&buf)
            ),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, Vec<u8>)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().as_bytes().to_vec()))
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    assert!(
        get("transfer-encoding").is_none(),
        "no chunked answers expected: {head}"
    );
    let mut body = buf[head_end + 4..].to_vec();
    match get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(len) => {
            while body.len() < len {
                match rd.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => body.extend_from_slice(&chunk[..n]),
                }
            }
            body.truncate(len);
        }
        None => loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        },
    }
    Tcp::Answer(Answer {
        status,
        headers,
        body,
    })
}

fn greet(id: Value, who: &str) -> Req {
    Req::rpc(
        id,
        "tools/call",
        json!({ "name": "greet", "arguments": { "name": who } }),
    )
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Nesting
// ---------------------------------------------------------------------------------------

fn arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn objects(depth: usize) -> String {
    format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

/// A greet call whose `arguments.pad` holds `pad`: the envelope, params and arguments
/// are three levels, so the whole body is nested `3 + depth(pad)` deep.
fn greet_padded(pad: &str) -> Req {
    Req::call_raw(
        "greet",
        &format!(
            r#"{{"name":"greet","arguments":{{"name":"deep","pad":{pad}}},"_meta":{}}}"#,
            meta()
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nesting_is_refused_exactly_past_the_limit_and_never_counted_inside_strings() {
    let t = Target::start().await;
    let pad = MAX_DEPTH - 3;

    for (what, shape) in [
        ("arrays", arrays as fn(usize) -> String),
        ("objects", objects),
    ] {
        // Exactly at the limit: an ordinary call.
        let at = greet_padded(&shape(pad)).send(&t).await;
        let result = at.result(&format!("{what} nested {MAX_DEPTH} deep"), &json!(1));
        assert_eq!(text_of(&result), "Hello, deep!", "{result}");
        // One level more, or very many: a parse error with no id, before anything runs.
        for extra in [1, 2, 10_000] {
            let over = greet_padded(&shape(pad + extra)).send(&t).await;
            over.error(
                &format!("{what} nested {} deep", MAX_DEPTH + extra),
                400,
                -32700,
                None,
            );
        }
    }

    // Inside `_meta` and inside `inputResponses` (three levels down too): at the limit
    // an ordinary call, one level over a parse error.
    let meta_pad = |depth: usize| {
        format!(
            r#"{{"name":"greet","arguments":{{"name":"m"}},"_meta":{{"{PV}":"{VERSION}","{CC}":{{}},"x":{}}}}}"#,
            arrays(depth)
        )
    };
    let responses_pad = |depth: usize| {
        format!(
            r#"{{"name":"greet","arguments":{{"name":"m"}},"inputResponses":{{"k":{}}},"_meta":{}}}"#,
            objects(depth),
            meta()
        )
    };
    for (what, params) in [
        ("_meta", &meta_pad as &dyn Fn(usize) -> String),
        ("inputResponses", &responses_pad),
    ] {
        let at = Req::call_raw("greet", &params(MAX_DEPTH - 3))
            .send(&t)
            .await;
        assert_eq!(
            text_of(&at.result(&format!("{what} nested 64 deep"), &json!(1))),
            "Hello, m!"
        );
        Req::call_raw("greet", &params(MAX_DEPTH - 2))
            .send(&t)
            .await
            .error(&format!("{what} nested 65 deep"), 400, -32700, None);
    }
    // A notification that is too deep is still answered with a parse error: nothing
    // could tell that it had no id.
    Req::raw(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/x","params":{}}}"#,
        objects(MAX_DEPTH)
    ))
    .set("mcp-method", "notifications/x")
    .send(&t)
    .await
    .error("a notification nested 65 deep", 400, -32700, None);

    // Brackets inside strings are text, however many.
    for (what, name) in [
        ("brackets", "[".repeat(100_000)),
        ("braces", "{".repeat(100_000)),
        ("escaped quotes", format!("\\\"{}", "[{".repeat(50_000))),
        ("a trailing backslash", format!("{}\\\\", "[".repeat(1000))),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{{"name":"greet","arguments":{{"name":"{name}"}},"_meta":{}}}}}"#,
            meta()
        );
        let answer = Req::raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "greet")
            .send(&t)
            .await;
        let result = answer.result(&format!("{what} inside a string"), &json!("s"));
        let decoded: String = serde_json::from_str(&format!("\"{name}\"")).expect("a JSON string");
        assert_eq!(text_of(&result), format!("Hello, {decoded}!"), "{what}");
    }

    // A string that ends in an escaped backslash really ends: nesting after it counts.
    let hidden = greet_padded(&format!(r#"["\\",{}]"#, arrays(MAX_DEPTH - 3)))
        .send(&t)
        .await;
    hidden.error("nesting after a string ending in \\\\", 400, -32700, None);
    // And a quote escaped inside a string does not end it.
    let quoted = greet_padded(&format!(r#"["\"{}"]"#, "[".repeat(500)))
        .send(&t)
        .await;
    quoted.result("brackets after an escaped quote", &json!(1));

    t.finish().await;
}

// ---------------------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_tiny_numbers_are_parse_errors_or_plain_numbers() {
    let t = Target::start().await;
    let hundred_digits = "9".repeat(100);
    let m = meta().to_string();
    let envelope = |id: &str, params: &str| {
        Req::raw(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#
        ))
        .set("mcp-method", "tools/call")
        .set("mcp-name", "greet")
    };
    let greet_params = |extra: &str| {
        format!(r#"{{"name":"greet","arguments":{{"name":"n"{extra}}},"_meta":{m}}}"#)
    };

    // Ids: out of range is not JSON this server can read; anything fractional or beyond
    // 64 bits is not an id. Neither is echoed.
    for id in ["1e400", "-1e400", "1E+400"] {
        envelope(id, &greet_params("")).send(&t).await.error(
            &format!("id {id}"),
            400,
            -32700,
            None,
        );
    }
    for id in [
        "1e-400",
        "-1e-400",
        "1e2",
        "1.0",
        "-0",
        hundred_digits.as_str(),
        "18446744073709551616",
        "-9223372036854775809",
    ] {
        envelope(id, &greet_params("")).send(&t).await.error(
            &format!("id {id}"),
            400,
            -32600,
            None,
        );
    }

    // In arguments: out of range is a parse error; a tiny or long number is a number.
    envelope("2", &greet_params(r#","big":1e400"#))
        .send(&t)
        .await
        .error("1e400 in arguments", 400, -32700, None);
    for extra in [
        r#","tiny":1e-400"#.to_owned(),
        format!(r#","long":{hundred_digits}"#),
        format!(r#","neg":-{hundred_digits}.{hundred_digits}e-5"#),
    ] {
        let result = envelope("3", &greet_params(&extra))
            .send(&t)
            .await
            .result(&format!("arguments with {extra}"), &json!(3));
        assert_eq!(text_of(&result), "Hello, n!", "{result}");
    }
    // Where the schema wants a bounded integer, a 100-digit one is invalid params. (Not
    // 1e-400: that is 0.0, which JSON Schema counts as the integer 0, and would create
    // a task.)
    for seconds in [
        hundred_digits.as_str(),
        "1e400000000",
        "3600.5",
        "-1",
        "3601",
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"slow_compute","arguments":{{"seconds":{seconds}}},"_meta":{m}}}}}"#
        );
        let answer = Req::raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "slow_compute")
            .send(&t)
            .await;
        if seconds.starts_with("1e4") {
            answer.error(&format!("seconds {seconds}"), 400, -32700, None);
        } else {
            answer.error(&format!("seconds {seconds}"), 200, -32602, Some(&json!(4)));
        }
    }

    // In _meta.
    for (what, meta_text, code, status) in [
        (
            "progressToken 1e400",
            format!(r#"{{"{PV}":"{VERSION}","{CC}":{{}},"progressToken":1e400}}"#),
            -32700,
            400,
        ),
        (
            "protocolVersion 1e400",
            format!(r#"{{"{PV}":1e400,"{CC}":{{}}}}"#),
            -32700,
            400,
        ),
        (
            "protocolVersion 100 digits",
            format!(r#"{{"{PV}":{hundred_digits},"{CC}":{{}}}}"#),
            -32602,
            400,
        ),
    ] {
        let params =
            format!(r#"{{"name":"greet","arguments":{{"name":"n"}},"_meta":{meta_text}}}"#);
        let id = (code != -32700).then(|| json!(5));
        envelope("5", &params)
            .send(&t)
            .await
            .error(what, status, code, id.as_ref());
    }
    for token in ["1e-400", hundred_digits.as_str()] {
        let params = format!(
            r#"{{"name":"greet","arguments":{{"name":"p"}},"_meta":{{"{PV}":"{VERSION}","{CC}":{{}},"progressToken":{token}}}}}"#
        );
        let result = envelope("6", &params)
            .send(&t)
            .await
            .result(&format!("progressToken {token}"), &json!(6));
        assert_eq!(text_of(&result), "Hello, p!", "{result}");
    }

    t.finish().await;
}

// ---------------------------------------------------------------------------------------
// Encodings
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_anywhere_in_the_body_is_a_parse_error() {
    let t = Target::start().await;
    let valid = greet(json!(1), "x").body;
    let at = |needle: &[u8], insert: &[u8]| {
        let i = valid
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("needle")
            + needle.len();
        [&valid[..i], insert, &valid[i..]].concat()
    };
    for (what, body) in [
        ("0xff inside the name", at(b"\"name\":\"x", &[0xff])),
        ("0xff outside strings", at(b"\"id\":1", &[0xff])),
        ("a lone continuation byte", at(b"\"name\":\"x", &[0x80])),
        ("an overlong slash", at(b"\"name\":\"x", &[0xc0, 0xaf])),
        (
            "a UTF-8-encoded surrogate",
            at(b"\"name\":\"x", &[0xed, 0xa0, 0x80]),
        ),
        ("a truncated sequence", at(b"\"name\":\"x", &[0xe2, 0x82])),
        (
            "beyond U+10FFFF",
            at(b"\"name\":\"x", &[0xf4, 0x90, 0x80, 0x80]),
        ),
        ("in a key", at(b"{\"", &[0xfe])),
        ("in the method", at(b"\"method\":\"tools", &[0xff])),
        (
            "a byte-order mark",
            [&[0xef, 0xbb, 0xbf][..], &valid].concat(),
        ),
        (
            "UTF-16",
            String::from_utf8_lossy(&valid)
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
        ),
        ("an escaped lone surrogate", at(b"\"name\":\"x", b"\\ud800")),
        (
            "an escaped reversed pair",
            at(b"\"name\":\"x", b"\\udc00\\ud800"),
        ),
    ] {
        Req {
            body,
            ..greet(json!(1), "x")
        }
        .send(&t)
        .await
        .error(what, 400, -32700, None);
    }
    // A charset parameter changes nothing: the body is still read as UTF-8.
    Req {
        body: at(b"\"name\":\"x", &[0xe9]),
        ..greet(json!(1), "x")
    }
    .set("content-type", "application/json; charset=iso-8859-1")
    .send(&t)
    .await
    .error("Latin-1 é with charset=iso-8859-1", 400, -32700, None);

    t.finish().await;
}

fn b64(raw: &[u8]) -> String {
    use base64::Engine;
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base64_header_values_are_decoded_once_and_strictly() {
    let t = Target::start().await;
    let unknown = |id: i64, name: &str| {
        Req::rpc(
            json!(id),
            "tools/call",
            json!({ "name": name, "arguments": {} }),
        )
    };

    // Refused: the decoded value is not the body's, or there is no valid decoding.
    for (what, name) in [
        ("encoded CR LF", b64(b"greet\r\n")),
        (
            "encoded CR LF and a header",
            b64(b"greet\r\nMcp-Name: greet"),
        ),
        ("encoded NUL", b64(b"greet\0")),
        ("encoded non-UTF-8", "=?base64?/w==?=".to_owned()),
        ("encoded latin-1 é", b64(b"gr\xe9et")),
        ("double encoding", b64(b64(b"greet").as_bytes())),
        ("missing padding", "=?base64?Z3JlZXQ?=".to_owned()),
        ("padding in the middle", "=?base64?Z3Jl=ZXQ=?=".to_owned()),
        ("inner spaces", "=?base64? Z3JlZXQ= ?=".to_owned()),
        ("URL-safe alphabet", "=?base64?Z3JlZXQ_?=".to_owned()),
        ("upper-case sentinel", "=?BASE64?Z3JlZXQ=?=".to_owned()),
        ("no closing sentinel", "=?base64?Z3JlZXQ=".to_owned()),
        ("empty payload", "=?base64??=".to_owned()),
        ("raw obs-text", "gr\u{e9}et".to_owned()),
    ] {
        greet(json!(what), "x")
            .set("mcp-name", name.as_bytes())
            .send(&t)
            .await
            .error(&format!("Mcp-Name {what}"), 400, -32020, Some(&json!(what)));
    }
    // The same tricks on the other two routing headers.
    for (header, value) in [
        ("mcp-method", b64(b"tools/call\r\n")),
        ("mcp-method", b64(b64(b"tools/call").as_bytes())),
        ("mcp-method", "=?base64?dG9vbHMvY2FsbA?=".to_owned()),
        ("mcp-protocol-version", b64(b"2026-07-28\n")),
        ("mcp-protocol-version", "=?base64?/w==?=".to_owned()),
        (
            "mcp-protocol-version",
            b64(b64(VERSION.as_bytes()).as_bytes()),
        ),
    ] {
        greet(json!(7), "x")
            .set(header, value.as_bytes())
            .send(&t)
            .await
            .error(&format!("{header}: {value}"), 400, -32020, Some(&json!(7)));
    }

    // Accepted: every routing header encoded, with whitespace around.
    let result = greet(json!(8), "enc")
        .set("mcp-protocol-version", b64(VERSION.as_bytes()))
        .set("mcp-method", format!(" {}\t", b64(b"tools/call")))
        .set("mcp-name", b64(b"greet"))
        .send(&t)
        .await
        .result("every header encoded", &json!(8));
    assert_eq!(text_of(&result), "Hello, enc!", "{result}");

    // A body value that itself looks encoded: the header must be its encoding, and the
    // literal text decodes to something else.
    let looks_encoded = b64(b"greet");
    unknown(9, &looks_encoded)
        .set("mcp-name", looks_encoded.as_bytes())
        .send(&t)
        .await
        .error(
            "literal sentinel text as Mcp-Name",
            400,
            -32020,
            Some(&json!(9)),
        );
    let answer = unknown(10, &looks_encoded)
        .set("mcp-name", b64(looks_encoded.as_bytes()))
        .send(&t)
        .await;
    let error = answer.error("sentinel text, encoded", 200, -32602, Some(&json!(10)));
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool")),
        "it reached the tool lookup: {error}"
    );
    // Body values with CR LF or non-ASCII match only their encoding, and reach the
    // tool lookup (an unknown tool) without anything being injected.
    for (id, name) in [
        (11, "greet\r\nX-Injected: 1"),
        (12, "gr\u{e9}et \u{1f44b}"),
        (13, " greet "),
        (14, "Pz8/"),
    ] {
        let answer = unknown(id, name).send(&t).await;
        answer.error(&format!("tool {name:?}"), 200, -32602, Some(&json!(id)));
        assert!(
            answer.header("x-injected").is_none(),
            "{:?}",
            answer.headers
        );
    }
    // "???" encodes as Pz8/ in the standard alphabet and Pz8_ in the URL-safe one.
    unknown(15, "???")
        .set("mcp-name", "=?base64?Pz8_?=")
        .send(&t)
        .await
        .error("URL-safe encoding of ???", 400, -32020, Some(&json!(15)));
    unknown(16, "???")
        .set("mcp-name", "=?base64?Pz8/?=")
        .send(&t)
        .await
        .error("standard encoding of ???", 200, -32602, Some(&json!(16)));

    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_bytes_in_header_values_are_refused_at_the_door() {
    let t = Target::start().await;
    let addr = t.addr();
    // Sanity: the bare TCP path itself gets an ordinary answer.
    let ok = greet(json!(1), "tcp")
        .send_tcp(addr)
        .await
        .answer("plain TCP");
    assert_eq!(text_of(&ok.result("plain TCP", &json!(1))), "Hello, tcp!");

    for (header, value) in [
        ("mcp-name", &b"gre\0et"[..]),
        ("mcp-name", b"greet\0"),
        ("mcp-name", b"gre\ret"),
        ("mcp-name", b"greet\r"),
        ("mcp-name", b"gre\neet"),
        ("mcp-name", b"gre\r\n et"),
        ("mcp-name", b"gre\r\n\tet"),
        ("mcp-name", b"greet\x7f"),
        ("mcp-name", b"gre\x1bet"),
        ("mcp-method", b"tools/call\0"),
        ("mcp-method", b"tools/\rcall"),
        ("mcp-method", b"tools/\ncall"),
        ("mcp-protocol-version", b"2026-07-28\0"),
        ("mcp-protocol-version", b"2026-\r07-28"),
        ("mcp-protocol-version", b"2026-\n07-28"),
    ] {
        let what = format!("{header}: {:?}", String::from_utf8_lossy(value));
        greet(json!(2), "x")
            .set(header, value)
            .send_tcp(addr)
            .await
            .assert_refused(&what);
    }
    // Malformed header lines around otherwise valid routing headers.
    for (what, line) in [
        ("a space before the colon", &b"Mcp-Name : greet"[..]),
        ("a NUL in a header name", b"Mcp-Na\0me: greet"),
        ("a header line without a colon", b"Mcp-Name greet"),
        ("a lone CR line", b"\r"),
    ] {
        let mut wire = greet(json!(3), "x").unset("mcp-name").wire(addr);
        let at = wire
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("end of head")
            + 2;
        wire.splice(at..at, [line, b"\r\n"].concat());
        exchange(addr, wire).await.assert_refused(what);
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_routing_headers_are_refused() {
    let t = Target::start().await;
    let addr = t.addr();
    for (header, good, bad) in [
        ("mcp-name", "greet", "test_logging_tool"),
        ("mcp-method", "tools/call", "tools/list"),
        ("mcp-protocol-version", VERSION, "2025-11-25"),
    ] {
        for (order, first, second) in [("good first", good, bad), ("bad first", bad, good)] {
            let what = format!("{header} twice, {order}");
            let req = greet(json!(what), "x")
                .set(header, first)
                .add(header, second);
            req.send(&t)
                .await
                .error(&what, 400, -32020, Some(&json!(what)));
            req.send_tcp(addr)
                .await
                .answer(&what)
                .error(&what, 400, -32020, Some(&json!(what)));
        }
    }
    t.finish().await;
}

// ---------------------------------------------------------------------------------------
// Duplicate keys and ids
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_keys_at_every_level_are_parse_errors() {
    let t = Target::start().await;
    let m = meta().to_string();
    let inner_meta = &m[1..m.len() - 1];
    for (what, body) in [
        (
            "method, then tools/list",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "id",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"id":"other","method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "jsonrpc",
            format!(
                r#"{{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{}},"params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params.name",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"test_logging_tool","name":"greet","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params.arguments",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{}},"arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "params._meta",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{{}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "_meta protocolVersion",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{{"{PV}":"v999.0.0",{inner_meta}}}}}}}"#
            ),
        ),
        (
            "_meta clientCapabilities.extensions",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{{"{PV}":"{VERSION}","{CC}":{{"extensions":{{}},"extensions":{{"{TASKS}":{{}}}}}}}}}}}}"#
            ),
        ),
        (
            "arguments.name",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"a","name":"b"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "a key written with an escape",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","n\u0061me":"test_logging_tool","arguments":{{"name":"x"}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "inputResponses keys",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"inputResponses":{{"k":{{}},"k":{{"action":"accept"}}}},"_meta":{m}}}}}"#
            ),
        ),
        (
            "deep inside arguments",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x","pad":[{{"a":[{{"b":1,"b":2}}]}}]}},"_meta":{m}}}}}"#
            ),
        ),
    ] {
        Req::raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "greet")
            .send(&t)
            .await
            .error(&format!("duplicate {what}"), 400, -32700, None);
    }
    // The same key twice in a task method's params, naming a real task: nothing is
    // looked up or changed (the digest at the end says so).
    for (first, second) in [
        (t.waiting.clone(), t.waiting.clone()),
        (uuid::Uuid::new_v4().to_string(), t.waiting.clone()),
        (t.waiting.clone(), t.bobs.clone()),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{{"taskId":"{first}","taskId":"{second}","_meta":{m}}}}}"#
        );
        Req::raw(body)
            .set("mcp-method", "tasks/cancel")
            .set("mcp-name", second.as_bytes())
            .send(&t)
            .await
            .error("duplicate taskId on tasks/cancel", 400, -32700, None);
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_of_every_json_type() {
    let t = Target::start().await;
    let long = "i".repeat(100_000);
    // Echoed exactly, with their JSON type.
    for id in [
        json!("abc"),
        json!(""),
        json!(long),
        json!("\u{0}\u{1f44b}\"\\"),
        json!(0),
        json!(7),
        json!(-7),
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
    ] {
        let what = format!("id {}", id.to_string().chars().take(40).collect::<String>());
        let answer = greet(id.clone(), "id").send(&t).await;
        answer.result(&what, &id);
        // Lexically too: 7 stays 7, never 7.0.
        let lexical = format!("\"id\":{id}");
        assert!(
            String::from_utf8_lossy(&answer.body).contains(&lexical),
            "{what}: id must come back exactly"
        );
        // And on an error answer.
        Req::rpc(id.clone(), "foo/bar", json!({}))
            .send(&t)
            .await
            .error(&what, 404, -32601, Some(&id));
    }
    // Not ids: refused before anything runs, with no id in the answer.
    for id in [
        "1.5",
        "1.0",
        "1e3",
        "-0",
        "0.0",
        "true",
        "false",
        "null",
        "{}",
        r#"{"a":1}"#,
        "[]",
        "[1]",
        "18446744073709551616",
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{}}}}}"#,
            meta()
        );
        Req::raw(body)
            .set("mcp-method", "tools/call")
            .set("mcp-name", "greet")
            .send(&t)
            .await
            .error(&format!("id {id}"), 400, -32600, None);
    }
    // The same for a task method on a real task: it is not cancelled.
    for id in ["{\"x\":1}", "null", "1.5", "[1]"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tasks/cancel","params":{{"taskId":"{}","_meta":{}}}}}"#,
            t.waiting,
            meta()
        );
        Req::raw(body)
            .set("mcp-method", "tasks/cancel")
            .set("mcp-name", t.waiting.as_bytes())
            .send(&t)
            .await
            .error(&format!("id {id} on tasks/cancel"), 400, -32600, None);
    }
    t.finish().await;
}

// ---------------------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------------------

/// A greet call padded to exactly `len` bytes with a `structuredContent` member of
/// params (which nothing reads: arguments have a smaller limit of their own).
fn greet_of_len(len: usize) -> Req {
    let padded = |pad: &str| {
        Req::call_raw(
            "greet",
            &format!(
                r#"{{"name":"greet","arguments":{{"name":"big"}},"structuredContent":{{"text":"{pad}"}},"_meta":{}}}"#,
                meta()
            ),
        )
    };
    let pad = len - padded("").body.len();
    padded(&"x".repeat(pad))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_refused_before_they_are_read() {
    let t = Target::start().await;
    let addr = t.addr();

    // The limit is exact.
    let at = greet_of_len(BODY_LIMIT);
    assert_eq!(at.body.len(), BODY_LIMIT);
    let result = at
        .send(&t)
        .await
        .result("a body of exactly the limit", &json!(1));
    assert_eq!(text_of(&result), "Hello, big!", "{result}");
    greet_of_len(BODY_LIMIT + 1).send(&t).await.error(
        "a body one byte over the limit",
        413,
        -32600,
        None,
    );

    // A 10 MB body, announced by Content-Length: answered after at most the limit is
    // read. Only 2 MB are ever sent and the connection stays open, so a server that
    // waited for the rest would never answer.
    let ten_mb = 10 * 1024 * 1024;
    let in_arguments = greet_padded(&format!(r#""{}""#, "a".repeat(ten_mb)));
    for (what, big) in [
        ("10 MB of structuredContent", greet_of_len(ten_mb)),
        ("10 MB of arguments", in_arguments),
    ] {
        let head_len = big.wire(addr).len() - big.body.len();
        let mut wire = big.wire(addr);
        wire.truncate(head_len + 2 * 1024 * 1024);
        exchange(addr, wire)
            .await
            .answer(what)
            .error(what, 413, -32600, None);
    }

    // The same without a length: chunked, 64 KiB at a time, stalling after 2 MB.
    let mut head = greet(json!(1), "x")
        .wire(addr)
        .split(|&b| b == b'\n')
        .take_while(|l| *l != b"\r")
        .filter(|l| !l.to_ascii_lowercase().starts_with(b"content-length"))
        .flat_map(|l| [l, b"\n"].concat())
        .collect::<Vec<u8>>();
    head.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
    let chunk = [
        format!("{:x}\r\n", 64 * 1024).into_bytes(),
        vec![b' '; 64 * 1024],
        b"\r\n".to_vec(),
    ]
    .concat();
    let mut first = head;
    first.extend_from_slice(b"4\r\n{\"a\"\r\n");
    exchange_then(addr, first, vec![chunk; 32])
        .await
        .answer("10 MB chunked")
        .error("a chunked body over the limit", 413, -32600, None);

    // A body shorter than its Content-Length, then the client stops sending: the
    // truncated body is not served, and the server does not hang (see also
    // `an_incomplete_body_is_a_bad_request_not_a_large_one`).
    let mut short = greet(json!(2), "x").wire(addr);
    let cut = short.len() - 10;
    short.truncate(cut);
    let answer = half_closed(addr, short).await.answer("a truncated body");
    let body = answer.json("a truncated body");
    assert!(
        answer.status >= 400 && answer.status < 500 && body.get("error").is_some(),
        "a truncated body: {}",
        answer.text()
    );

    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incomplete_body_is_a_bad_request_not_a_large_one() {
    let t = Target::start().await;
    let addr = t.addr();
    // Ten bytes short of its Content-Length, then the client closes its side.
    let mut short = greet(json!(1), "x").wire(addr);
    let cut = short.len() - 10;
    short.truncate(cut);
    // A chunk size that is not hexadecimal.
    let mut bad_chunk = greet(json!(1), "x")
        .wire(addr)
        .split(|&b| b == b'\n')
        .take_while(|l| *l != b"\r")
        .filter(|l| !l.to_ascii_lowercase().starts_with(b"content-length"))
        .flat_map(|l| [l, b"\n"].concat())
        .collect::<Vec<u8>>();
    bad_chunk.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n");
    for (what, wire) in [
        ("a truncated body", short),
        ("a malformed chunk", bad_chunk),
    ] {
        let answer = half_closed(addr, wire).await.answer(what);
        let body = answer.json(what);
        assert_eq!(answer.status, 400, "{what}: {}", answer.text());
        assert!(
            matches!(body["error"]["code"].as_i64(), Some(-32600 | -32700)),
            "{what}: {body}"
        );
        assert!(body.get("id").is_none(), "{what}: {body}");
        assert!(
            !body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("larger than"),
            "{what}: a small body is not too large: {body}"
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_headers_and_many_requests() {
    let t = Target::start().await;
    let addr = t.addr();

    // Many small requests, each with 64 KiB of extra headers: all served.
    let pad = "p".repeat(8 * 1024);
    let answers: Vec<Answer> = futures::stream::iter((0..64).map(|i| {
        let mut req = greet(json!(i), "many");
        for h in 0..8 {
            req = req.set(&format!("x-pad-{h}"), pad.as_bytes());
        }
        let t = &t;
        async move { req.send(t).await }
    }))
    .buffer_unordered(8)
    .collect()
    .await;
    assert_eq!(answers.len(), 64);
    for a in &answers {
        let id = a.json("padded request")["id"].clone();
        assert_eq!(text_of(&a.result("padded request", &id)), "Hello, many!");
    }

    // An Mcp-Name of 64 KiB: compared like any other, matching or not.
    let long_name = "n".repeat(64 * 1024);
    let unknown = Req::rpc(
        json!("long"),
        "tools/call",
        json!({ "name": long_name, "arguments": {} }),
    );
    unknown.send(&t).await.error(
        "a 64 KiB tool name, mirrored",
        200,
        -32602,
        Some(&json!("long")),
    );
    greet(json!("long"), "x")
        .set("mcp-name", long_name.as_bytes())
        .send(&t)
        .await
        .error(
            "a 64 KiB Mcp-Name, not mirrored",
            400,
            -32020,
            Some(&json!("long")),
        );

    // Past what the HTTP layer reads: one 1 MiB header, or hundreds of header lines.
    // Refused with 431 (or the connection closed), never served.
    let huge = greet(json!(1), "x").set("x-huge", "h".repeat(1024 * 1024));
    let many = (0..500).fold(greet(json!(1), "x"), |r, i| r.set(&format!("x-{i}"), "v"));
    for (what, req) in [("a 1 MiB header", huge), ("500 header lines", many)] {
        match req.send_tcp(addr).await {
            Tcp::Closed => {}
            Tcp::Answer(a) => assert_eq!(a.status, 431, "{what}: {}", a.text()),
        }
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn megabyte_task_ids_are_refused_without_a_lookup_or_an_echo() {
    let t = Target::start().await;
    let huge = "a".repeat(1_000_000);
    // A real task's id, padded: still not an id this server issues.
    let real_padded = format!("{}{}", t.waiting, "0".repeat(999_964));
    for (method, params) in [
        ("tasks/get", json!({ "taskId": huge })),
        ("tasks/cancel", json!({ "taskId": huge })),
        ("tasks/cancel", json!({ "taskId": real_padded })),
        ("tasks/get", json!({ "taskId": format!("{} ", t.done) })),
        ("tasks/get", json!({ "taskId": t.done.to_uppercase() })),
        (
            "tasks/update",
            json!({ "taskId": huge, "inputResponses": { "confirm_delete": { "action": "accept", "content": { "confirm": true } } } }),
        ),
    ] {
        // Mcp-Name is optional on tasks/*; a megabyte does not fit in a header anyway.
        let req = Req::rpc(json!(method), method, params).unset("mcp-name");
        assert!(req.body.len() < BODY_LIMIT, "inside the body limit");
        let answer = req.send(&t).await;
        let error = answer.error(method, 200, -32602, Some(&json!(method)));
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("Invalid task id")),
            "{method}: {error}"
        );
        assert!(
            answer.body.len() < 4096,
            "{method}: the answer echoes the id ({} bytes)",
            answer.body.len()
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_state_garbage_of_every_shape_is_invalid_params_and_creates_nothing() {
    let t = Target::start().await;
    let alice = t.replica.client("alice");
    // A genuine state for alice's test_tool_with_task, and one for another tool.
    let first = alice
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("round one");
    assert_eq!(first["resultType"], "input_required", "{first}");
    let state = first["requestState"].as_str().expect("a state").to_owned();
    let other_tool = alice
        .call_tool("test_streaming_elicitation", json!({}))
        .await
        .expect("another tool's round one");
    let other_state = other_tool["requestState"]
        .as_str()
        .expect("a state")
        .to_owned();
    let bobs_state = t
        .replica
        .client("bob")
        .call_tool("test_tool_with_task", json!({}))
        .await
        .expect("bob's round one")["requestState"]
        .as_str()
        .expect("a state")
        .to_owned();
    let answer = json!({ "user_name": { "action": "accept", "content": { "name": "mallory" } } });

    let (payload, tag) = state.rsplit_once('.').expect("payload.tag");
    let flipped_tag = {
        let mut t = tag.to_owned().into_bytes();
        t[0] = if t[0] == b'A' { b'B' } else { b'A' };
        String::from_utf8(t).expect("ASCII")
    };
    let states: Vec<(&str, Value)> = vec![
        ("a number", json!(1)),
        ("a float", json!(1.5)),
        ("true", json!(true)),
        ("an object", json!({ "v": 1 })),
        ("an array", json!([state])),
        ("empty", json!("")),
        ("the prefix only", json!("v1.")),
        ("no tag", json!(payload)),
        ("three dots", json!("v1...")),
        ("garbage", json!("v1.!!!.???")),
        ("another version", json!(state.replacen("v1.", "v2.", 1))),
        ("a flipped tag", json!(format!("{payload}.{flipped_tag}"))),
        ("a truncated tag", json!(&state[..state.len() - 2])),
        ("an appended byte", json!(format!("{state}A"))),
        ("a NUL", json!(format!("{state}\u{0}"))),
        ("non-ASCII", json!(format!("{state}\u{e9}"))),
        ("300 KiB", json!("A".repeat(300 * 1024))),
        ("another tool's", json!(other_state)),
        ("another principal's", json!(bobs_state)),
    ];
    for (what, request_state) in states {
        let answer_obj = Req::rpc(
            json!(what),
            "tools/call",
            json!({
                "name": "test_tool_with_task",
                "arguments": {},
                "requestState": request_state,
                "inputResponses": answer,
            }),
        )
        .send(&t)
        .await;
        let error = answer_obj.error(
            &format!("requestState {what}"),
            200,
            -32602,
            Some(&json!(what)),
        );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("requestState")),
            "{what}: {error}"
        );
    }
    // A genuine state with answers of the wrong shape: refused, nothing created.
    for (what, responses) in [
        ("an array", json!([1])),
        ("a string", json!("x")),
        (
            "a declined answer with content",
            json!({ "user_name": { "action": "nope" } }),
        ),
        (
            "an answer against the schema",
            json!({ "user_name": { "action": "accept", "content": { "name": 5 } } }),
        ),
    ] {
        let answer_obj = Req::rpc(
            json!(what),
            "tools/call",
            json!({
                "name": "test_tool_with_task",
                "arguments": {},
                "requestState": state,
                "inputResponses": responses,
            }),
        )
        .send(&t)
        .await;
        answer_obj.error(
            &format!("inputResponses {what}"),
            200,
            -32602,
            Some(&json!(what)),
        );
    }
    // The state is bound to its arguments.
    Req::rpc(
        json!("args"),
        "tools/call",
        json!({
            "name": "test_tool_with_task",
            "arguments": { "extra": 1 },
            "requestState": state,
            "inputResponses": answer,
        }),
    )
    .send(&t)
    .await
    .error("changed arguments", 200, -32602, Some(&json!("args")));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_garbage_for_a_waiting_task_changes_nothing() {
    let t = Target::start().await;
    let update = |id: Value, task: &str, responses: Value| {
        Req::rpc(
            id,
            "tasks/update",
            json!({ "taskId": task, "inputResponses": responses }),
        )
    };
    for (what, responses) in [
        ("an array", json!([])),
        ("a string", json!("x")),
        ("null", Value::Null),
        ("an answer that is a number", json!({ "confirm_delete": 5 })),
        (
            "an unknown action",
            json!({ "confirm_delete": { "action": "bogus" } }),
        ),
        (
            "content against the schema",
            json!({ "confirm_delete": { "action": "accept", "content": { "confirm": "yes" } } }),
        ),
        (
            "a NUL deep inside",
            json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true, "x": ["\u{0}"] } } }),
        ),
        (
            "a NUL in a key",
            json!({ "confirm_delete\u{0}": { "action": "decline" } }),
        ),
    ] {
        update(json!(what), &t.waiting, responses)
            .send(&t)
            .await
            .error(
                &format!("inputResponses {what}"),
                200,
                -32602,
                Some(&json!(what)),
            );
    }
    // Bob answering (or cancelling) Alice's task learns nothing and changes nothing.
    let valid = json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } });
    for (method, params) in [
        (
            "tasks/update",
            json!({ "taskId": t.waiting, "inputResponses": valid }),
        ),
        ("tasks/cancel", json!({ "taskId": t.waiting })),
        ("tasks/get", json!({ "taskId": t.done })),
    ] {
        let error = Req::rpc(json!(method), method, params)
            .set("x-test-principal", "bob")
            .send(&t)
            .await
            .error(
                &format!("bob's {method}"),
                200,
                -32602,
                Some(&json!(method)),
            );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("not found")),
            "{method}: {error}"
        );
    }
    // Answers to keys the task never asked for are ignored, not stored.
    let ack = update(
        json!("unasked"),
        &t.waiting,
        json!({ "other": { "action": "accept", "content": {} } }),
    )
    .send(&t)
    .await
    .result("an answer nobody asked for", &json!("unasked"));
    assert_eq!(ack["resultType"], "complete", "{ack}");
    // A completed task takes no input.
    update(json!("done"), &t.done, valid.clone())
        .send(&t)
        .await
        .result("input for a completed task", &json!("done"));
    t.finish().await;
}
