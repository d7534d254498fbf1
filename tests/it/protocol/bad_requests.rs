//! Bad requests, one table: every way an envelope, its `_meta`, its routing headers or
//! its transport can be wrong, with the exact HTTP status, JSON-RPC code and id echo.

use mcp_tasks_server::StateKeys;
use reqwest::Method;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

use super::{assert_error, assert_result, fresh_id};
use crate::harness::http::{self, Answer, Request};
use crate::harness::spec::{CC, PV, VERSION, meta, tasks_caps, text_of};
use crate::harness::{self, Replica, TestDb, registry};

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
    req: Request,
    /// Over a bare TCP connection rather than reqwest.
    tcp: bool,
    /// To the replica with a 4096-byte body limit.
    small: bool,
    status: u16,
    want: Want,
    extra: Option<fn(&Answer, &Value)>,
}

fn case(name: &'static str, req: Request, status: u16, want: Want) -> Case {
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

    fn then(mut self, extra: fn(&Answer, &Value)) -> Self {
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
    let list = |id: i64| Request::rpc(json!(id), "tools/list", json!({}));
    let greet = |id: i64, who: &str| {
        Request::rpc(
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
            Request::raw("not json").set("mcp-method", "tools/list"),
            400,
            Want::Error(-32700, None),
        ),
        case(
            "batch",
            Request::raw("[]").set("mcp-method", "tools/list"),
            400,
            Want::Error(-32600, None),
        ),
        case(
            "boolean id",
            Request::raw(r#"{"jsonrpc":"2.0","id":true,"method":"x"}"#).set("mcp-method", "x"),
            400,
            Want::Error(-32600, None),
        ),
        case(
            "null id",
            Request::raw(r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#).set("mcp-method", "x"),
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
            Request::rpc(json!(16), "tasks/get", json!({ "taskId": unknown_task }))
                .unset("mcp-name"),
            200,
            Want::Error(-32602, Some(json!(16))),
        )
        .then(|_, body| {
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("not found"), "{body}");
        }),
        case(
            "Mcp-Name mismatch on tasks/get",
            Request::rpc(json!(33), "tasks/get", json!({ "taskId": fresh_id() }))
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
            Request::rpc(json!(20), "foo/bar", json!({})),
            404,
            Want::Error(-32601, Some(json!(20))),
        ),
        case(
            "tasks/result",
            Request::rpc(json!(21), "tasks/result", json!({ "taskId": fresh_id() })),
            404,
            Want::Error(-32601, Some(json!(21))),
        ),
        case(
            "tasks/list",
            Request::rpc(json!(22), "tasks/list", json!({})),
            404,
            Want::Error(-32601, Some(json!(22))),
        ),
        case(
            "tasks/status",
            Request::rpc(json!(23), "tasks/status", json!({ "taskId": fresh_id() })),
            404,
            Want::Error(-32601, Some(json!(23))),
        ),
        case(
            "ping",
            Request::rpc(json!(24), "ping", json!({})),
            404,
            Want::Error(-32601, Some(json!(24))),
        ),
        case(
            "initialize with _meta",
            Request::rpc(
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
            Request::raw(
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
            Request::rpc(
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
            Request::rpc(
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
            Request::raw(
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
            Request::raw(
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
            Request::rpc(id.clone(), "server/discover", json!({})),
            200,
            Want::Result(id.clone()),
        ));
        cases.push(case(
            "id echo on an error",
            Request::rpc(id.clone(), "foo/bar", json!({})),
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
    let http = http::client();

    for c in bad_request_cases() {
        let (url, addr) = if c.small {
            (&small.url, small.addr)
        } else {
            (&replica.url, replica.addr)
        };
        let raw = if c.tcp {
            c.req.send_tcp(addr).await.answer(c.name)
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
