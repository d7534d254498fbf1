//! A deterministic fuzz pass: no request makes a replica panic or answer a bare 500, and
//! the mutated requests reach every layer of the request path.

use std::time::Duration;

use futures::StreamExt;
use mcp_tasks_wire::headers::encode_value;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use crate::harness::TestApp;
use crate::harness::fixtures::set_path;
use crate::harness::http::{self, Answer, Request};
use crate::harness::spec::{CC, PV, TASKS, VERSION, meta, name_key, tasks_caps, text_of};

/// The body value `Mcp-Name` mirrors, encoded, for the methods that have one.
fn name_of(method: &str, params: &Value) -> Option<String> {
    params
        .get(name_key(method)?)
        .and_then(Value::as_str)
        .map(encode_value)
}

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
fn fuzz_variant(rng: &mut XorShift, bases: &[Base]) -> (Request, String) {
    let base = rng.pick(bases);
    let mut body = base.body.clone();
    let mut req = Request::raw(Vec::new()).set("mcp-method", base.method);
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
fn insane(raw: &Answer) -> Option<String> {
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
    // Task-optional calls from clients without the extension wait for a worker; there is
    // none here, so keep that wait short.
    let app = TestApp::builder()
        .config(|c| c.sync_wait = Duration::from_millis(300))
        .start()
        .await;
    let replica = app.replica();
    let http = http::client();
    let bases = fuzz_bases();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let variants: Vec<(usize, Request, String)> = (0..400)
        .map(|i| {
            let (req, desc) = fuzz_variant(&mut rng, &bases);
            (i, req, desc)
        })
        .collect();

    let outcomes: Vec<(usize, String, Result<Answer, String>)> =
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
    app.stop().await;
}
