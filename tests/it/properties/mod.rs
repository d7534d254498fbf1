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

mod bodies;
mod fields;
mod headers;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use crate::harness::app::InProcess;
use crate::harness::http::{Answer, Request};
use crate::harness::spec::{VERSION, tasks_meta};

/// A well-formed task id that no task has.
const UNKNOWN_TASK: &str = "6f9619ff-8b86-4011-b42d-00cf4fc964ff";

/// The router in process, on a fresh database, with no worker.
fn app() -> InProcess {
    // No worker runs here: a task-optional call from a client without the Tasks
    // extension would wait this long for one.
    InProcess::start(|config| config.sync_wait = Duration::from_millis(200))
}

/// POSTs `body` to `/mcp` with `Host: localhost`, `Content-Type: application/json`
/// and `headers` (each value must be valid for a `HeaderValue`).
fn post(app: &InProcess, headers: &[(&str, Vec<u8>)], body: Vec<u8>) -> Answer {
    let req = headers.iter().fold(
        Request::bare(body).set("host", "localhost"),
        |req, (n, v)| req.add(n, v),
    );
    app.send(&req)
}

/// The number of cases to run: `PROPTEST_CASES`, or `default`.
pub(super) fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

pub(super) fn runner(cases: u32) -> TestRunner {
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
pub(super) fn check<S: Strategy>(
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

pub(super) fn fail(why: impl Into<String>, answer: &Answer) -> TestCaseError {
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
pub(super) fn contract(answer: &Answer) -> Result<Option<Value>, TestCaseError> {
    if answer.status == 202 {
        if !answer.body.is_empty() {
            return Err(fail("202 with a body", answer));
        }
        return Ok(None);
    }
    let content_type = answer
        .headers
        .get("content-type")
        .map(HeaderValue::as_bytes);
    if content_type != Some(&b"application/json"[..]) {
        return Err(fail(
            format!(
                "Content-Type {:?}",
                content_type.map(String::from_utf8_lossy)
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
pub(super) fn outcome(answer: &Answer, body: Option<&Value>) -> (u16, i64) {
    (
        answer.status,
        body.and_then(|b| b["error"]["code"].as_i64()).unwrap_or(0),
    )
}

/// With enough cases, asserts that each expected `(status, code)` was seen at least
/// once, so a strategy that stops reaching a layer fails rather than passing vacuously.
pub(super) fn assert_reached(
    enough: bool,
    seen: &Mutex<BTreeSet<(u16, i64)>>,
    expected: &[(u16, i64)],
) {
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

pub(super) fn rpc(id: Value, method: &str, mut params: Value) -> Value {
    if let Some(p) = params.as_object_mut() {
        p.entry("_meta").or_insert_with(tasks_meta);
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// Valid requests, and what each gets when its headers mirror it.
pub(super) fn bases() -> Vec<(Value, Expect)> {
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
pub(super) enum Expect {
    Result,
    Error(u16, i64),
}

/// The body value `Mcp-Name` mirrors.
pub(super) fn name_source(body: &Value) -> Option<&str> {
    let key = match body["method"].as_str()? {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    body["params"][key].as_str()
}

/// Headers that mirror `body` faithfully, in the encoding the spec gives.
pub(super) fn faithful_headers(body: &Value) -> Vec<(&'static str, Vec<u8>)> {
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
pub(super) fn encode(value: &str) -> String {
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

pub(super) fn b64(raw: &[u8]) -> String {
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

/// The spec's header decoding: trim SP/HT, refuse controls and raw non-ASCII, unwrap
/// `=?base64?{standard base64, padded}?=` holding UTF-8.
pub(super) fn decode(raw: &[u8]) -> Option<String> {
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
