//! (a) Any bytes as the body get a well-formed answer: a parse error for what is not
//! JSON, nothing read further of what is not one object, the id echoed.

use std::collections::BTreeSet;
use std::sync::Mutex;

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Value, json};

use super::{app, assert_reached, bases, check, contract, fail, outcome, post};
use crate::harness::spec::{VERSION, tasks_meta};

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
    let app = app();
    let seen = Mutex::new(BTreeSet::new());
    let enough = check(1500, any_body(), |(method, body)| {
        let headers = [
            ("mcp-protocol-version", VERSION.as_bytes().to_vec()),
            ("mcp-method", method.into_bytes()),
        ];
        let answer = post(&app, &headers, body.clone());
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
