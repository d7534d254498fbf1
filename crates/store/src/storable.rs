//! What the store refuses to send, checked before a request joins a batch: one request
//! PostgreSQL would reject must fail alone, with a reason its caller can show, not fail
//! the statement it shares with other tenants' creates or a worker's other finishes.
//!
//! - U+0000 in any string or key: `text` and `jsonb` cannot hold it (`\u0000` in JSON is
//!   refused as "unsupported Unicode escape sequence"). What a client sent is refused
//!   ([`StoreError::refusal`]); what a tool produced fails its task, saying why.
//! - A result larger than [`MAX_RESULT_BYTES`] fails its task: every read of the task
//!   would carry it, and a batch of them would pass what one statement can send.

use mcp_tasks_wire::json::{contains_nul, serialized_len};
use mcp_tasks_wire::{ErrorObject, codes};
use serde_json::{Map, Value, json};

use crate::{Result, StoreError};

/// The largest result a task stores (compact JSON); a larger one fails the task.
pub const MAX_RESULT_BYTES: usize = 16 * 1024 * 1024;

/// What a batch of one kind may carry at most, so that a batch flushes before its
/// statement grows past what is cheap to send and to parse (a single larger request
/// still goes, alone).
pub(crate) const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

const NUL: &str = "the NUL character (U+0000), which cannot be stored";

/// Refuses `value` when a string or key in it has U+0000; `what` names it for the caller
/// ("the arguments").
pub(crate) fn json(what: &str, value: &Value) -> Result<()> {
    if contains_nul(value) {
        return Err(StoreError::refused(format!("{what} contain {NUL}")));
    }
    Ok(())
}

/// [`json`] for an object held as a map.
pub(crate) fn map(what: &str, value: &Map<String, Value>) -> Result<()> {
    if value
        .iter()
        .any(|(k, v)| k.contains('\0') || contains_nul(v))
    {
        return Err(StoreError::refused(format!("{what} contain {NUL}")));
    }
    Ok(())
}

/// [`json`] for an optional value.
pub(crate) fn json_opt(what: &str, value: Option<&Value>) -> Result<()> {
    value.map_or(Ok(()), |v| json(what, v))
}

/// Refuses text with U+0000 (PostgreSQL `text` cannot hold it either).
pub(crate) fn text(what: &str, value: &str) -> Result<()> {
    if value.contains('\0') {
        return Err(StoreError::refused(format!("{what} contains {NUL}")));
    }
    Ok(())
}

/// [`text`] for an optional value.
pub(crate) fn text_opt(what: &str, value: Option<&str>) -> Result<()> {
    value.map_or(Ok(()), |v| text(what, v))
}

/// A result a tool returned, or the failure to store it instead; and its size.
pub(crate) fn result(value: Value) -> std::result::Result<(Value, usize), ErrorObject> {
    if contains_nul(&value) {
        return Err(ErrorObject::new(
            codes::INTERNAL_ERROR,
            format!("The tool's result could not be stored: it contains {NUL}"),
        ));
    }
    let size = serialized_len(&value);
    if size > MAX_RESULT_BYTES {
        return Err(ErrorObject::new(
            codes::INTERNAL_ERROR,
            format!("The tool's result is {size} bytes; the limit is {MAX_RESULT_BYTES} bytes"),
        )
        .with_data(json!({ "limit": "result_bytes", "max": MAX_RESULT_BYTES })));
    }
    Ok((value, size))
}

/// A tool's error, made storable: U+0000 replaced, and one larger than a result may be
/// cut to its code and the start of its message (its data dropped).
pub(crate) fn error(mut error: ErrorObject) -> (Value, usize) {
    error.message = error.message.replace('\0', "\u{fffd}");
    if let Some(data) = error.data.as_mut() {
        mcp_tasks_wire::json::replace_nul(data);
    }
    let value = serde_json::to_value(&error).unwrap_or(Value::Null);
    let size = serialized_len(&value);
    if size <= MAX_RESULT_BYTES {
        return (value, size);
    }
    let mut message: String = error.message.chars().take(4096).collect();
    message.push_str(" (truncated: the error was larger than the limit of a result)");
    let cut = serde_json::to_value(ErrorObject::new(error.code, message)).unwrap_or(Value::Null);
    let size = serialized_len(&cut);
    (cut, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_output_that_cannot_be_stored_becomes_a_reason() {
        let nul = result(json!({ "text": "a\u{0}" })).expect_err("nul");
        assert!(nul.message.contains("U+0000"), "{nul:?}");
        let big = result(json!("x".repeat(MAX_RESULT_BYTES))).expect_err("big");
        assert_eq!(big.data.expect("data")["limit"], "result_bytes");
        let (ok, size) = result(json!({ "ok": true })).expect("ok");
        assert_eq!((ok, size), (json!({ "ok": true }), 11));

        let (e, _) = error(ErrorObject::new(1, "a\u{0}b").with_data(json!({ "k\u{0}": 1 })));
        assert_eq!(
            e,
            json!({ "code": 1, "message": "a\u{fffd}b", "data": { "k\u{fffd}": 1 } })
        );
        let (e, size) =
            error(ErrorObject::new(2, "m").with_data(json!("x".repeat(MAX_RESULT_BYTES))));
        assert!(size < 5000 && e.get("data").is_none(), "{size}");
    }

    #[test]
    fn client_input_with_nul_is_refused_by_name() {
        let e = json("the arguments", &json!({ "a": ["\u{0}"] })).expect_err("nul");
        assert_eq!(
            e.refusal(),
            Some("the arguments contain the NUL character (U+0000), which cannot be stored")
        );
        assert!(text("the tool name", "a\u{0}").is_err());
        assert!(json("the arguments", &json!({ "a": "b" })).is_ok());
    }
}
