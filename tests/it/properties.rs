//! Property tests of the real router, in process and without sockets: the router is
//! built from a real `AppState` (real PostgreSQL, the conformance tools) and driven with
//! `tower::ServiceExt::oneshot`, so every case runs the whole request path in a few
//! milliseconds.
//!
//! Every answer must keep the transport's contract: 202 with an empty body, or one
//! `application/json` JSON-RPC object with exactly one of `result`/`error`, a 5xx only
//! for `-32603`, and never a panic. On top of that each property checks what its inputs
//! determine: parse errors for non-JSON, `-32020` exactly when the routing headers do
//! not mirror the body (by the spec's rules, modelled here independently), id echo.
//!
//! Cases run from a fixed seed so CI is reproducible; set `PROPTEST_RNG_SEED=<u64>` to
//! explore others and `PROPTEST_CASES=<n>` to change the number of cases.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, header};
use base64::Engine as _;
use mcp_tasks_server::{AppState, NoAuth, StateKeys};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::harness::{self, TestDb, registry};

const VERSION: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";
const PV: &str = "io.modelcontextprotocol/protocolVersion";
const CC: &str = "io.modelcontextprotocol/clientCapabilities";
/// A well-formed task id that no task has.
const UNKNOWN_TASK: &str = "6f9619ff-8b86-4011-b42d-00cf4fc964ff";

// ---------------------------------------------------------------------------------------
// The router in process
// ---------------------------------------------------------------------------------------

/// A router over a fresh database, and the runtime that drives it.
struct App {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    shutdown: CancellationToken,
    _db: TestDb,
}

/// One answer, as a client sees it.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: Option<Vec<u8>>,
    body: Vec<u8>,
}

impl App {
    fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let shutdown = CancellationToken::new();
        let (db, router) = rt.block_on(async {
            let db = TestDb::new().await;
            let mut config = harness::server_config();
            // No worker runs here: a task-optional call from a client without the Tasks
            // extension would wait this long for one.
            config.sync_wait = Duration::from_millis(200);
            let state = AppState::new(
                db.store.clone(),
                registry("conformance"),
                config,
                Arc::new(NoAuth::default()),
                StateKeys::parse(&"ab".repeat(32)).expect("key"),
                shutdown.clone(),
            );
            (db, mcp_tasks_server::router(state))
        });
        Self {
            rt,
            router,
            shutdown,
            _db: db,
        }
    }

    /// POSTs `body` to `/mcp` with `Host: localhost`, `Content-Type: application/json`
    /// and `headers` (each value must be valid for a `HeaderValue`).
    fn post(&self, headers: &[(&str, Vec<u8>)], body: Vec<u8>) -> Answer {
        self.rt.block_on(async {
            let mut request = Request::builder()
                .method("POST")
                .uri("/mcp")
                .header(header::HOST, "localhost")
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json, text/event-stream");
            for (name, value) in headers {
                request = request.header(
                    *name,
                    HeaderValue::from_bytes(value).expect("a valid header value"),
                );
            }
            let request = request.body(Body::from(body)).expect("request");
            let response = self
                .router
                .clone()
                .oneshot(request)
                .await
                .unwrap_or_else(|e| match e {});
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes().to_vec());
            let body = axum::body::to_bytes(response.into_body(), 16 * 1024 * 1024)
                .await
                .expect("response body");
            Answer {
                status,
                content_type,
                body: body.to_vec(),
            }
        })
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The number of cases to run: `PROPTEST_CASES`, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

fn runner(cases: u32) -> TestRunner {
    let defaults = Config::default();
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        defaults.rng_seed
    } else {
        RngSeed::Fixed(0x6d63_705f_7461_736b)
    };
    TestRunner::new(Config {
        cases,
        rng_seed,
        // Failures print the shrunk input; nothing is written next to the sources.
        failure_persistence: None,
        ..defaults
    })
}

/// Runs `test` over `strategy` (`default` cases unless `PROPTEST_CASES` says otherwise)
/// and fails the Rust test with proptest's minimal input. Returns whether at least
/// `default` cases ran, which the checks of what the cases reached need.
fn check<S: Strategy>(
    default: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> bool {
    let cases = cases(default);
    if let Err(e) = runner(cases).run(&strategy, test) {
        panic!("{e}");
    }
    cases >= default
}

fn fail(why: impl Into<String>, answer: &Answer) -> TestCaseError {
    TestCaseError::fail(format!(
        "{}: HTTP {} {:?}",
        why.into(),
        answer.status,
        String::from_utf8_lossy(&answer.body)
            .chars()
            .take(400)
            .collect::<String>()
    ))
}

/// The transport's contract for any answer. Returns the JSON body, or `None` for 202.
fn contract(answer: &Answer) -> Result<Option<Value>, TestCaseError> {
    if answer.status == 202 {
        if !answer.body.is_empty() {
            return Err(fail("202 with a body", answer));
        }
        return Ok(None);
    }
    if answer.content_type.as_deref() != Some(&b"application/json"[..]) {
        return Err(fail(
            format!(
                "Content-Type {:?}",
                answer.content_type.as_deref().map(String::from_utf8_lossy)
            ),
            answer,
        ));
    }
    let body: Value =
        serde_json::from_slice(&answer.body).map_err(|e| fail(format!("not JSON: {e}"), answer))?;
    let Some(obj) = body.as_object() else {
        return Err(fail("not one JSON object", answer));
    };
    if obj.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(fail("no \"jsonrpc\":\"2.0\"", answer));
    }
    if obj.contains_key("result") == obj.contains_key("error") {
        return Err(fail("not exactly one of result/error", answer));
    }
    if let Some(error) = obj.get("error")
        && (!error["code"].is_i64() || error["message"].as_str().is_none_or(str::is_empty))
    {
        return Err(fail("error without integer code and message", answer));
    }
    if obj.contains_key("result") && answer.status != 200 {
        return Err(fail("a result with a status other than 200", answer));
    }
    if answer.status >= 500 && body["error"]["code"] != json!(-32603) {
        return Err(fail("a 5xx that is not -32603", answer));
    }
    if let Some(id) = obj.get("id")
        && !(id.is_string() || id.is_i64() || id.is_u64())
    {
        return Err(fail("an id that is not a string or an integer", answer));
    }
    Ok(Some(body))
}

/// `(status, code)` of an answer, for the record of which layers were reached.
fn outcome(answer: &Answer, body: Option<&Value>) -> (u16, i64) {
    (
        answer.status,
        body.and_then(|b| b["error"]["code"].as_i64()).unwrap_or(0),
    )
}

/// With enough cases, asserts that each expected `(status, code)` was seen at least
/// once, so a strategy that stops reaching a layer fails rather than passing vacuously.
fn assert_reached(enough: bool, seen: &Mutex<BTreeSet<(u16, i64)>>, expected: &[(u16, i64)]) {
    if !enough {
        return;
    }
    let seen = seen.lock().expect("lock");
    for e in expected {
        assert!(
            seen.contains(e),
            "no case got {e:?}: the strategy no longer reaches that layer; seen {seen:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Valid requests to start from
// ---------------------------------------------------------------------------------------

fn tasks_meta() -> Value {
    json!({ PV: VERSION, CC: { "elicitation": {}, "extensions": { TASKS: {} } } })
}

fn rpc(id: Value, method: &str, mut params: Value) -> Value {
    if let Some(p) = params.as_object_mut() {
        p.entry("_meta").or_insert_with(tasks_meta);
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// Valid requests, and what each gets when its headers mirror it.
fn bases() -> Vec<(Value, Expect)> {
    vec![
        (rpc(json!(1), "server/discover", json!({})), Expect::Result),
        (rpc(json!("l"), "tools/list", json!({})), Expect::Result),
        (
            rpc(
                json!(3),
                "tools/call",
                json!({ "name": "greet", "arguments": { "name": "x" } }),
            ),
            Expect::Result,
        ),
        (
            rpc(json!(-4), "tasks/get", json!({ "taskId": UNKNOWN_TASK })),
            Expect::Error(200, -32602),
        ),
        (
            rpc(
                json!(5),
                "tasks/cancel",
                json!({ "taskId": UNKNOWN_TASK.to_uppercase() }),
            ),
            Expect::Error(200, -32602),
        ),
        (
            rpc(
                json!("six"),
                "tools/call",
                json!({ "name": "h\u{e9}llo \u{1f44b}", "arguments": {} }),
            ),
            Expect::Error(200, -32602),
        ),
        (
            rpc(
                json!(7),
                "resources/read",
                json!({ "uri": "file:///tmp/a b" }),
            ),
            Expect::Error(200, -32602),
        ),
        (
            rpc(json!(8), "foo/bar", json!({})),
            Expect::Error(404, -32601),
        ),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Result,
    Error(u16, i64),
}

/// The body value `Mcp-Name` mirrors.
fn name_source(body: &Value) -> Option<&str> {
    let key = match body["method"].as_str()? {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    body["params"][key].as_str()
}

/// Headers that mirror `body` faithfully, in the encoding the spec gives.
fn faithful_headers(body: &Value) -> Vec<(&'static str, Vec<u8>)> {
    let mut headers = vec![("mcp-protocol-version", VERSION.as_bytes().to_vec())];
    if let Some(method) = body["method"].as_str() {
        headers.push(("mcp-method", encode(method).into_bytes()));
    }
    if let Some(name) = name_source(body) {
        headers.push(("mcp-name", encode(name).into_bytes()));
    }
    headers
}

/// The spec's header encoding, written here independently of the wire crate.
fn encode(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with([' ', '\t'])
        && !value.ends_with([' ', '\t'])
        && !value.starts_with("=?base64?");
    if plain {
        value.to_owned()
    } else {
        b64(value.as_bytes())
    }
}

fn b64(raw: &[u8]) -> String {
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

/// The spec's header decoding: trim SP/HT, refuse controls and raw non-ASCII, unwrap
/// `=?base64?{standard base64, padded}?=` holding UTF-8.
fn decode(raw: &[u8]) -> Option<String> {
    let start = raw
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    let t = &raw[start..end];
    if !t.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)) {
        return None;
    }
    if t.len() >= 11 && t.starts_with(b"=?base64?") && t.ends_with(b"?=") {
        let inner = &t[9..t.len() - 2];
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(inner)
            .ok()?;
        return String::from_utf8(bytes).ok();
    }
    String::from_utf8(t.to_vec()).ok()
}

// ---------------------------------------------------------------------------------------
// (a) Any bytes as the body
// ---------------------------------------------------------------------------------------

/// Byte edits: (where, byte, 0 replace / 1 insert / 2 delete).
fn mutate(mut bytes: Vec<u8>, edits: &[(Index, u8, u8)]) -> Vec<u8> {
    for (at, byte, op) in edits {
        match op {
            0 if !bytes.is_empty() => {
                let i = at.index(bytes.len());
                bytes[i] = *byte;
            }
            1 => {
                let i = at.index(bytes.len() + 1);
                bytes.insert(i, *byte);
            }
            _ if !bytes.is_empty() => {
                let i = at.index(bytes.len());
                bytes.remove(i);
            }
            _ => {}
        }
    }
    bytes
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    " ",
    "\"jsonrpc\"",
    "\"2.0\"",
    "\"id\"",
    "1",
    "-0",
    "1e400",
    "1.5",
    "18446744073709551616",
    "\"x\"",
    "\"method\"",
    "\"tools/list\"",
    "\"params\"",
    "\"_meta\"",
    "{}",
    "null",
    "true",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\u{e9}\"",
    "\u{ff}",
    "\"io.modelcontextprotocol/protocolVersion\"",
    "\"2026-07-28\"",
    "\"io.modelcontextprotocol/clientCapabilities\"",
];

/// (Mcp-Method header, body).
fn any_body() -> impl Strategy<Value = (String, Vec<u8>)> {
    let mut bases: Vec<Value> = bases().into_iter().map(|(b, _)| b).collect();
    bases.push(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    bases.push(json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": 1, "_meta": tasks_meta() },
    }));
    let mutated = (
        select(bases),
        proptest::collection::vec((any::<Index>(), any::<u8>(), 0u8..3), 0..6),
    )
        .prop_map(|(base, edits)| {
            let method = base["method"].as_str().unwrap_or_default().to_owned();
            (method, mutate(base.to_string().into_bytes(), &edits))
        });
    prop_oneof![
        3 => mutated,
        2 => proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|b| ("tools/list".to_owned(), b)),
        2 => proptest::collection::vec(select(TOKENS), 0..40)
            .prop_map(|t| ("tools/list".to_owned(), t.concat().into_bytes())),
        1 => any::<String>().prop_map(|s| ("tools/list".to_owned(), s.into_bytes())),
    ]
}

#[test]
fn any_body_gets_a_well_formed_answer() {
    let app = App::start();
    let seen = Mutex::new(BTreeSet::new());
    let enough = check(1500, any_body(), |(method, body)| {
        let headers = [
            ("mcp-protocol-version", VERSION.as_bytes().to_vec()),
            ("mcp-method", method.into_bytes()),
        ];
        let answer = app.post(&headers, body.clone());
        let json = contract(&answer)?;
        seen.lock()
            .expect("lock")
            .insert(outcome(&answer, json.as_ref()));
        let plain: Option<Value> = serde_json::from_slice(&body).ok();
        let Some(json) = json else {
            // 202: only for a notification, which has no id.
            let ok = plain.as_ref().is_some_and(|p| {
                p.get("id").is_none() && p["jsonrpc"] == "2.0" && p["method"].is_string()
            });
            return if ok {
                Ok(())
            } else {
                Err(fail(
                    "202 for something that is not a notification",
                    &answer,
                ))
            };
        };
        let code = json["error"]["code"].as_i64();
        match &plain {
            // Not JSON at all: a parse error, with no id.
            None => {
                prop_assert_eq!((answer.status, code), (400, Some(-32700)), "{:?}", answer);
                prop_assert!(json.get("id").is_none(), "{}", json);
            }
            // JSON, but not one object: never read further.
            Some(p) if !p.is_object() => {
                prop_assert_eq!(answer.status, 400, "{:?}", answer);
                prop_assert!(matches!(code, Some(-32600 | -32700)), "{}", json);
                prop_assert!(json.get("id").is_none(), "{}", json);
            }
            Some(p) => {
                // An echoed id is the request's own, with its JSON type.
                if let Some(id) = json.get("id") {
                    prop_assert_eq!(Some(id), p.get("id"), "id echo: {}", json);
                }
            }
        }
        Ok(())
    });
    assert_reached(
        enough,
        &seen,
        &[
            (400, -32700),
            (400, -32600),
            (200, 0),
            (400, -32020),
            (202, 0),
        ],
    );
}

// ---------------------------------------------------------------------------------------
// (b) Any header values around a valid request
// ---------------------------------------------------------------------------------------

/// How one routing header is set, relative to the value it should mirror.
#[derive(Debug, Clone)]
enum HeaderChoice {
    Absent,
    Faithful,
    Base64,
    Padded,
    /// Base64 of the value, with its `=` padding removed.
    Unpadded,
    /// URL-safe alphabet instead of the standard one.
    UrlSafe,
    /// Base64 of the base64 form.
    Double,
    /// Base64 of the value with CR LF appended.
    EncodedCrLf,
    UpperCase,
    /// Raw UTF-8, not encoded.
    RawUtf8,
    Bytes(Vec<u8>),
    Sentinel(String),
}

fn header_choice() -> impl Strategy<Value = HeaderChoice> {
    // Every byte a `HeaderValue` can hold: HT, visible ASCII, space, obs-text.
    let byte = prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff];
    prop_oneof![
        2 => Just(HeaderChoice::Absent),
        4 => Just(HeaderChoice::Faithful),
        2 => Just(HeaderChoice::Base64),
        1 => Just(HeaderChoice::Padded),
        1 => Just(HeaderChoice::Unpadded),
        1 => Just(HeaderChoice::UrlSafe),
        1 => Just(HeaderChoice::Double),
        1 => Just(HeaderChoice::EncodedCrLf),
        1 => Just(HeaderChoice::UpperCase),
        1 => Just(HeaderChoice::RawUtf8),
        2 => proptest::collection::vec(byte, 0..40).prop_map(HeaderChoice::Bytes),
        1 => "[A-Za-z0-9+/=_ -]{0,16}".prop_map(HeaderChoice::Sentinel),
    ]
}

fn header_value(choice: &HeaderChoice, mirrored: &str) -> Option<Vec<u8>> {
    let engine = &base64::engine::general_purpose::STANDARD;
    Some(match choice {
        HeaderChoice::Absent => return None,
        HeaderChoice::Faithful => encode(mirrored).into_bytes(),
        HeaderChoice::Base64 => b64(mirrored.as_bytes()).into_bytes(),
        HeaderChoice::Padded => format!(" \t{} ", encode(mirrored)).into_bytes(),
        HeaderChoice::Unpadded => format!(
            "=?base64?{}?=",
            engine.encode(mirrored).trim_end_matches('=')
        )
        .into_bytes(),
        HeaderChoice::UrlSafe => format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::URL_SAFE.encode(mirrored)
        )
        .into_bytes(),
        HeaderChoice::Double => b64(b64(mirrored.as_bytes()).as_bytes()).into_bytes(),
        HeaderChoice::EncodedCrLf => b64(format!("{mirrored}\r\n").as_bytes()).into_bytes(),
        HeaderChoice::UpperCase => mirrored.to_uppercase().into_bytes(),
        HeaderChoice::RawUtf8 => mirrored.as_bytes().to_vec(),
        HeaderChoice::Bytes(b) => b.clone(),
        HeaderChoice::Sentinel(s) => format!("=?base64?{s}?=").into_bytes(),
    })
}

#[test]
fn any_routing_header_values_get_minus_32020_exactly_when_they_do_not_mirror_the_body() {
    let app = App::start();
    let seen = Mutex::new(BTreeSet::new());
    let bases = bases();
    let strategy = (
        0..bases.len(),
        header_choice(),
        header_choice(),
        header_choice(),
    );
    let enough = check(1500, strategy, |(i, pv, method, name)| {
        let (body, expect) = &bases[i];
        let body_method = body["method"].as_str().unwrap_or_default();
        let source = name_source(body);
        let mut headers = Vec::new();
        let pv = header_value(&pv, VERSION);
        let method = header_value(&method, body_method);
        // A name header on a method without a name mirrors nothing in particular.
        let name = header_value(&name, source.unwrap_or("anything"));
        for (n, v) in [
            ("mcp-protocol-version", &pv),
            ("mcp-method", &method),
            ("mcp-name", &name),
        ] {
            if let Some(v) = v
                && HeaderValue::from_bytes(v).is_ok()
            {
                headers.push((n, v.clone()));
            }
        }
        let sent = |n: &str| headers.iter().find(|(h, _)| *h == n).map(|(_, v)| v);
        let mirrors = sent("mcp-protocol-version")
            .and_then(|v| decode(v))
            .as_deref()
            == Some(VERSION)
            && sent("mcp-method").and_then(|v| decode(v)).as_deref() == Some(body_method)
            && match (sent("mcp-name").map(|v| decode(v)), source) {
                (Some(None), _) => false,
                (Some(Some(n)), Some(s)) => n == s,
                (Some(Some(_)), None) => true,
                (None, Some(_)) => body_method.starts_with("tasks/"),
                (None, None) => true,
            };

        let answer = app.post(&headers, body.to_string().into_bytes());
        let json = contract(&answer)?.ok_or_else(|| fail("202 for a request", &answer))?;
        seen.lock()
            .expect("lock")
            .insert(outcome(&answer, Some(&json)));
        prop_assert_eq!(&json["id"], &body["id"], "id echo");
        let code = json["error"]["code"].as_i64();
        if mirrors {
            match expect {
                Expect::Result => prop_assert_eq!(
                    (answer.status, code),
                    (200, None),
                    "mirroring headers {:?} refused: {}",
                    headers,
                    json
                ),
                Expect::Error(status, c) => prop_assert_eq!(
                    (answer.status, code),
                    (*status, Some(*c)),
                    "mirroring headers {:?}: {}",
                    headers,
                    json
                ),
            }
        } else {
            prop_assert_eq!(
                (answer.status, code),
                (400, Some(-32020)),
                "headers {:?} do not mirror {}: {}",
                headers,
                body,
                json
            );
        }
        Ok(())
    });
    assert_reached(
        enough,
        &seen,
        &[(200, 0), (200, -32602), (404, -32601), (400, -32020)],
    );
}

// ---------------------------------------------------------------------------------------
// (c) Valid-looking requests with arbitrary JSON in every field
// ---------------------------------------------------------------------------------------

fn interesting_string() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "",
            "x",
            "greet",
            "slow_compute",
            "failing_job",
            "test_tool_with_task",
            "tools/call",
            "tasks/get",
            "tasks/update",
            "tasks/cancel",
            "server/discover",
            "2026-07-28",
            "v999.0.0",
            UNKNOWN_TASK,
            "v1.eyJ0IjoieCJ9.AAAA",
            "a\u{0}b",
            "\u{e9}\u{1f44b}",
            "=?base64?Z3JlZXQ=?=",
            "accept",
            "decline",
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ]
}

fn interesting_key() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "name",
            "arguments",
            "_meta",
            PV,
            CC,
            "extensions",
            TASKS,
            "elicitation",
            "sampling",
            "action",
            "content",
            "user_name",
            "seconds",
            "label",
            "taskId",
            "inputResponses",
            "requestState",
            "progressToken",
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        select(vec![0i64, 1, -1, 3600, 3601]).prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        interesting_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((interesting_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Where a value is put (or, with `None`, what is removed).
const PATHS: &[&[&str]] = &[
    &["id"],
    &["method"],
    &["params"],
    &["params", "_meta"],
    &["params", "_meta", PV],
    &["params", "_meta", CC],
    &["params", "_meta", CC, "extensions"],
    &["params", "_meta", CC, "extensions", TASKS],
    &["params", "_meta", "progressToken"],
    &["params", "name"],
    &["params", "arguments"],
    &["params", "arguments", "name"],
    &["params", "arguments", "seconds"],
    &["params", "taskId"],
    &["params", "inputResponses"],
    &["params", "inputResponses", "user_name"],
    &["params", "requestState"],
    &["params", "cursor"],
];

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

fn structured_bases() -> Vec<Value> {
    let mut v: Vec<Value> = bases().into_iter().map(|(b, _)| b).collect();
    v.extend([
        rpc(
            json!(10),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": "l" } }),
        ),
        rpc(
            json!(11),
            "tools/call",
            json!({ "name": "test_tool_with_task", "arguments": {} }),
        ),
        rpc(
            json!(12),
            "tools/call",
            json!({
                "name": "test_tool_with_task",
                "arguments": {},
                "inputResponses": { "user_name": { "action": "accept", "content": { "name": "x" } } },
                "requestState": "v1.eyJ0IjoieCJ9.AAAA",
            }),
        ),
        rpc(
            json!(13),
            "tasks/update",
            json!({
                "taskId": UNKNOWN_TASK,
                "inputResponses": { "k": { "action": "accept", "content": {} } },
            }),
        ),
        rpc(json!(14), "tools/call", json!({ "name": "failing_job" })),
    ]);
    v
}

#[test]
fn arbitrary_json_in_any_field_never_breaks_the_contract() {
    let app = App::start();
    let seen = Mutex::new(BTreeSet::new());
    let bases = structured_bases();
    let edit = (select(PATHS), proptest::option::weighted(0.85, any_json()));
    let strategy = (
        0..bases.len(),
        proptest::collection::vec(edit, 1..4),
        proptest::option::weighted(0.2, interesting_string()),
    );
    let enough = check(1000, strategy, |(i, edits, method_header)| {
        let mut body = bases[i].clone();
        for (path, value) in &edits {
            set_path(&mut body, path, value.clone());
        }
        // Headers that mirror the mutated body, so the request reaches the method;
        // sometimes with another Mcp-Method.
        let mut headers = faithful_headers(&body);
        if let Some(m) = &method_header {
            headers.retain(|(n, _)| *n != "mcp-method");
            headers.push(("mcp-method", encode(m).into_bytes()));
        }
        let answer = app.post(&headers, body.to_string().into_bytes());
        let json = contract(&answer)?;
        seen.lock()
            .expect("lock")
            .insert(outcome(&answer, json.as_ref()));
        let id = body.get("id");
        let envelope_ok =
            body["method"].is_string() && body.get("params").is_none_or(Value::is_object);
        let Some(json) = json else {
            prop_assert!(id.is_none(), "202 for a request with id {:?}", id);
            prop_assert!(envelope_ok, "202 for an invalid notification {}", body);
            return Ok(());
        };
        let code = json["error"]["code"].as_i64();
        let Some(id) = id else {
            // Without an id only an invalid envelope is answered, and with no id.
            prop_assert!(!envelope_ok, "a notification was answered: {}", json);
            prop_assert_eq!((answer.status, code), (400, Some(-32600)), "{}", json);
            prop_assert!(json.get("id").is_none(), "{}", json);
            return Ok(());
        };
        if id.is_string() || id.is_i64() || id.is_u64() {
            prop_assert_eq!(json.get("id"), Some(id), "id echo: {}", json);
        } else {
            prop_assert_eq!(
                (answer.status, code),
                (400, Some(-32600)),
                "bad id: {}",
                json
            );
            prop_assert!(json.get("id").is_none(), "{}", json);
            return Ok(());
        }
        if !envelope_ok {
            prop_assert_eq!((answer.status, code), (400, Some(-32600)), "{}", json);
            return Ok(());
        }
        let meta = &body["params"]["_meta"];
        if !meta[PV].is_string() || !meta[CC].is_object() {
            prop_assert_eq!(
                (answer.status, code),
                (400, Some(-32602)),
                "bad _meta: {}",
                json
            );
            return Ok(());
        }
        if method_header.is_some_and(|m| body["method"] != m.as_str()) {
            prop_assert_eq!((answer.status, code), (400, Some(-32020)), "{}", json);
            return Ok(());
        }
        // -32603 is reserved for the server's own failures, which none of this causes
        // (no worker runs, so task-optional calls without the extension time out and
        // say so; that is the only internal error allowed).
        if answer.status == 500 {
            let message = json["error"]["message"].as_str().unwrap_or_default();
            prop_assert!(
                message.contains("did not finish within"),
                "internal error for {}: {}",
                body,
                json
            );
        }
        Ok(())
    });
    assert_reached(
        enough,
        &seen,
        &[
            (200, 0),
            (200, -32602),
            (400, -32600),
            (400, -32602),
            (400, -32020),
            (202, 0),
        ],
    );
}
