//! (c) Valid-looking requests with arbitrary JSON in every field never break the
//! transport's contract.

use std::collections::BTreeSet;
use std::sync::Mutex;

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};

use super::{
    UNKNOWN_TASK, app, assert_reached, bases, check, contract, encode, faithful_headers, outcome,
    post, rpc,
};
use crate::harness::fixtures::set_path;
use crate::harness::spec::{CC, PV, TASKS};

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
    let app = app();
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
        let answer = post(&app, &headers, body.to_string().into_bytes());
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
