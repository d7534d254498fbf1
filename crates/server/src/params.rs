//! Reading a request's params and routing headers: the checks every method shares, each
//! with the one error message clients see for it.

use axum::http::HeaderMap;
use mcp_tasks_store::{Lookup, TaskId};
use mcp_tasks_wire::{ErrorObject, codes};
use serde_json::{Map, Value, json};

use crate::error::RpcError;
use crate::limits::json_size;

pub(crate) fn string_param<'a>(
    params: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a str, RpcError> {
    match params.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RpcError::invalid_params(format!(
            "params.{key} must be a string"
        ))),
        None => Err(RpcError::invalid_params(format!(
            "params.{key} is required"
        ))),
    }
}

/// `params.inputResponses` where a method needs it (`tasks/update`). `null` is not an
/// object, so it is refused like any other non-object.
pub(crate) fn required_input_responses(
    params: &Map<String, Value>,
) -> Result<&Map<String, Value>, RpcError> {
    match params.get("inputResponses") {
        None => Err(RpcError::invalid_params(
            "params.inputResponses is required",
        )),
        Some(value) => answers_object(value),
    }
}

/// `params.inputResponses` where a method may go without (`tools/call`): absent or `null`
/// means no answers.
pub(crate) fn optional_input_responses(
    params: &Map<String, Value>,
) -> Result<Option<&Map<String, Value>>, RpcError> {
    match params.get("inputResponses") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => answers_object(value).map(Some),
    }
}

/// Answers keyed by the input request they answer.
fn answers_object(value: &Value) -> Result<&Map<String, Value>, RpcError> {
    match value {
        Value::Object(responses) => Ok(responses),
        _ => Err(RpcError::invalid_params(
            "params.inputResponses must be an object",
        )),
    }
}

/// PostgreSQL cannot store U+0000 in text or jsonb, so params that would be stored must
/// not carry it.
pub(crate) fn refuse_nul(params: &Map<String, Value>, what: &str) -> Result<(), RpcError> {
    if params
        .get(what)
        .is_some_and(mcp_tasks_wire::json::contains_nul)
    {
        return Err(RpcError::invalid_params(format!(
            "params.{what} must not contain the NUL character (U+0000)"
        )));
    }
    Ok(())
}

/// Refuses a param larger than `max` bytes serialized.
pub(crate) fn refuse_larger(
    params: &Map<String, Value>,
    what: &str,
    max: usize,
) -> Result<(), RpcError> {
    if let Some(value) = params.get(what) {
        let size = json_size(value);
        if size > max {
            return Err(RpcError::method(
                ErrorObject::invalid_params(format!(
                    "params.{what} is {size} bytes; the limit is {max}"
                ))
                .with_data(json!({ "limit": what, "max": max })),
            ));
        }
    }
    Ok(())
}

/// Only ids of the exact form this server issues are looked up.
pub(crate) fn parse_task_id(raw: &str) -> Result<TaskId, RpcError> {
    TaskId::parse(raw).ok_or_else(|| {
        RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            "Failed to retrieve task: Invalid task id (not an id this server issues)",
        ))
    })
}

/// A task lookup's answer: an expired task says so; an unknown id and another owner's id
/// get the same error.
pub(crate) fn found<T>(lookup: Lookup<T>) -> Result<T, RpcError> {
    match lookup {
        Lookup::Found(t) => Ok(t),
        Lookup::Expired => Err(RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            "Failed to retrieve task: Task has expired",
        ))),
        Lookup::NotFound => Err(RpcError::method(ErrorObject::new(
            codes::INVALID_PARAMS,
            "Failed to retrieve task: Task not found",
        ))),
    }
}

/// A routing header's one value. Two values are refused: a proxy that routes on the
/// other one would read the request differently from this server.
pub(crate) fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a [u8]>, RpcError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(RpcError::protocol(ErrorObject::header_mismatch(format!(
            "the {name} header appears more than once"
        ))));
    }
    Ok(first.map(|v| v.as_bytes()))
}

/// The `Idempotency-Key` header: 1 to 255 visible ASCII characters.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, RpcError> {
    let Some(raw) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = raw.as_bytes();
    if key.is_empty() || key.len() > 255 || !key.iter().all(|b| (0x21..0x7f).contains(b)) {
        return Err(RpcError::protocol(ErrorObject::invalid_request(
            "the Idempotency-Key header must be 1 to 255 visible ASCII characters",
        )));
    }
    Ok(Some(String::from_utf8_lossy(key).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn message(e: RpcError) -> String {
        e.error.message
    }

    #[test]
    fn input_responses_required_or_optional() {
        let answers = params(json!({ "inputResponses": { "k": { "action": "accept" } } }));
        assert_eq!(
            required_input_responses(&answers).map(Map::len).ok(),
            Some(1)
        );
        assert_eq!(
            optional_input_responses(&answers)
                .ok()
                .flatten()
                .map(Map::len),
            Some(1)
        );

        for absent in [json!({}), json!({ "inputResponses": null })] {
            assert!(matches!(
                optional_input_responses(&params(absent)),
                Ok(None)
            ));
        }
        assert_eq!(
            required_input_responses(&params(json!({})))
                .map_err(message)
                .err()
                .as_deref(),
            Some("Invalid params: params.inputResponses is required")
        );

        let not_an_object = Some("Invalid params: params.inputResponses must be an object");
        // `null` is present, and not an object, when answers are required.
        for bad in [json!(null), json!([1]), json!("x")] {
            let p = params(json!({ "inputResponses": bad }));
            assert_eq!(
                required_input_responses(&p)
                    .map_err(message)
                    .err()
                    .as_deref(),
                not_an_object,
                "{bad}"
            );
            if !bad.is_null() {
                assert_eq!(
                    optional_input_responses(&p)
                        .map_err(message)
                        .err()
                        .as_deref(),
                    not_an_object,
                    "{bad}"
                );
            }
        }
    }
}
