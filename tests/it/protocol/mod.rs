//! The protocol surface over real HTTP: envelope, `_meta` and routing-header validation
//! with their exact JSON-RPC codes and HTTP statuses, id echo, discovery, isolation of
//! one owner's tasks from every other owner, durable task creation, the synchronous
//! fallback, MRTR, and a deterministic fuzz pass that must never crash a replica.

mod bad_requests;
mod catalog;
mod creation;
mod discovery;
mod fuzz;
mod input_kinds;
mod inputs;
mod mrtr;
mod ownership;
mod param_headers;
mod passthrough;

use mcp_tasks_client::Exchange;
use serde_json::{Value, json};

use crate::harness::http::Answer;

/// [`Answer::error`], and the id echoed exactly as it was written.
pub(super) fn assert_error(
    raw: &Answer,
    what: &str,
    http: u16,
    code: i64,
    id: Option<&Value>,
) -> Value {
    let error = raw.error(what, http, code, id);
    assert_id(&raw.json(), raw, what, id);
    error
}

/// [`Answer::result`], and the id echoed exactly as it was written.
pub(super) fn assert_result(raw: &Answer, what: &str, id: &Value) -> Value {
    let result = raw.result(what, id);
    assert_id(&raw.json(), raw, what, Some(id));
    result
}

pub(super) fn assert_id(body: &Value, raw: &Answer, what: &str, id: Option<&Value>) {
    match id {
        None => assert!(
            body.get("id").is_none(),
            "{what}: no id can be echoed, and null is not an id: {body}"
        ),
        Some(id) => {
            // serde_json numbers compare by kind, so 7 != 7.0: this checks the JSON type.
            assert_eq!(body.get("id"), Some(id), "{what}: id echo: {body}");
            raw.assert_id_lexical(what, id);
        }
    }
}

pub(super) fn fresh_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The error of a client exchange, after checking status and id echo.
pub(super) fn exchange_error(ex: &Exchange, what: &str, http: u16, code: i64, id: &Value) -> Value {
    let body = ex
        .body
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: HTTP {} without a body", ex.status));
    assert_eq!(ex.status, http, "{what}: HTTP status; body {body}");
    assert_eq!(body["error"]["code"], json!(code), "{what}: {body}");
    assert_eq!(body.get("id"), Some(id), "{what}: {body}");
    body["error"].clone()
}

pub(super) fn exchange_result(ex: Exchange, what: &str) -> Value {
    assert_eq!(ex.status, 200, "{what}: {:?}", ex.body);
    ex.into_result()
        .unwrap_or_else(|e| panic!("{what}: expected a result, got {e}"))
}
