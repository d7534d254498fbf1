//! The JSON-RPC 2.0 envelope as MCP 2026-07-28 uses it: one message per HTTP body, no
//! batches, ids that are strings or numbers and keep their JSON type on the way back.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ErrorObject;
use crate::strict::{self, JsonLimits};

/// A request id. Numbers are kept as written so `7` comes back as `7`, not `7.0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(serde_json::Number),
    String(String),
}

impl RequestId {
    /// Strings and integers only: the MCP schema allows no fractional ids, and a number
    /// beyond 64 bits could not be echoed exactly.
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Number(n) if n.is_i64() || n.is_u64() => Some(Self::Number(n.clone())),
            Value::String(s) => Some(Self::String(s.clone())),
            _ => None,
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            Self::Number(n) => Value::Number(n.clone()),
            Self::String(s) => Value::String(s.clone()),
        }
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        Self::Number(n.into())
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

/// A request: it has an id and expects exactly one response.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    /// Always an object; an absent `params` is an empty object.
    pub params: Map<String, Value>,
}

/// A message without an id. Nothing is ever sent back for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request(Request),
    Notification(Notification),
}

/// Why a body could not be read as one message, with the id to answer with when one
/// could be recovered.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvelopeError {
    pub id: Option<RequestId>,
    pub error: ErrorObject,
}

impl EnvelopeError {
    fn new(id: Option<RequestId>, error: ErrorObject) -> Self {
        Self { id, error }
    }
}

/// Parses one HTTP body: strict JSON (bounded depth, no duplicate keys), then the
/// envelope.
pub fn parse_message(body: &[u8], limits: JsonLimits) -> Result<Incoming, EnvelopeError> {
    let value = strict::parse(body, limits)
        .map_err(|e| EnvelopeError::new(None, ErrorObject::parse_error(e)))?;
    parse_value(value)
}

pub fn parse_value(value: Value) -> Result<Incoming, EnvelopeError> {
    let mut object = match value {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Err(EnvelopeError::new(
                None,
                ErrorObject::invalid_request("batch requests are not supported"),
            ));
        }
        _ => {
            return Err(EnvelopeError::new(
                None,
                ErrorObject::invalid_request("the body must be a JSON-RPC object"),
            ));
        }
    };

    let id = match object.get("id") {
        None => None,
        Some(raw) => match RequestId::from_value(raw) {
            Some(id) => Some(id),
            None => {
                return Err(EnvelopeError::new(
                    None,
                    ErrorObject::invalid_request("\"id\" must be a string or a 64-bit integer"),
                ));
            }
        },
    };
    let fail = |detail: &str| EnvelopeError::new(id.clone(), ErrorObject::invalid_request(detail));

    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(fail("\"jsonrpc\" must be \"2.0\""));
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => return Err(fail("\"method\" must be a string")),
        None if object.contains_key("result") || object.contains_key("error") => {
            return Err(fail(
                "this server sends no requests, so it accepts no responses",
            ));
        }
        None => return Err(fail("\"method\" is missing")),
    };
    let params = match object.remove("params") {
        None => Map::new(),
        Some(Value::Object(params)) => params,
        Some(_) => return Err(fail("\"params\" must be an object")),
    };

    Ok(match id {
        Some(id) => Incoming::Request(Request { id, method, params }),
        None => Incoming::Notification(Notification { method }),
    })
}

/// A response a client sends back to a request the server made (2025-era sessions only:
/// the server's `elicitation/create` on a `tools/call` stream).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientResponse {
    pub id: RequestId,
    /// The `result`, or the `error` the client answered with.
    pub outcome: Result<Value, ErrorObject>,
}

impl ClientResponse {
    /// `None` when the message is not shaped as a response (it has a `method`, or
    /// neither `result` nor `error`): such a message is read by [`parse_value`].
    pub fn from_value(value: &Value) -> Option<Result<Self, EnvelopeError>> {
        let object = value.as_object()?;
        if object.contains_key("method")
            || !(object.contains_key("result") || object.contains_key("error"))
        {
            return None;
        }
        let id = object.get("id").and_then(RequestId::from_value);
        let fail = |detail: &str| {
            Some(Err(EnvelopeError::new(
                None,
                ErrorObject::invalid_request(detail),
            )))
        };
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return fail("\"jsonrpc\" must be \"2.0\"");
        }
        let Some(id) = id else {
            return fail("a response must carry the id of the request it answers");
        };
        let outcome = match (object.get("result"), object.get("error")) {
            (Some(result), None) => Ok(result.clone()),
            (None, Some(error)) => match serde_json::from_value::<ErrorObject>(error.clone()) {
                Ok(error) => Err(error),
                Err(_) => return fail("\"error\" must have an integer code and a string message"),
            },
            _ => return fail("a response has either \"result\" or \"error\", not both"),
        };
        Some(Ok(Self { id, outcome }))
    }
}

/// A response. `id` is left out (rather than `null`, which the MCP schema forbids) only
/// when the request's id could not be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub jsonrpc: JsonRpcVersion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<RequestId>,
    #[serde(flatten)]
    pub payload: Payload,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Payload {
    Result(Value),
    Error(ErrorObject),
}

/// Serializes as the literal `"2.0"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JsonRpcVersion;

impl Serialize for JsonRpcVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("2.0")
    }
}

impl<'de> Deserialize<'de> for JsonRpcVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "2.0" {
            Ok(Self)
        } else {
            Err(serde::de::Error::custom("jsonrpc must be \"2.0\""))
        }
    }
}

impl Response {
    pub fn result(id: RequestId, result: Value) -> Self {
        Self {
            jsonrpc: JsonRpcVersion,
            id: Some(id),
            payload: Payload::Result(result),
        }
    }

    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Self {
            jsonrpc: JsonRpcVersion,
            id,
            payload: Payload::Error(error),
        }
    }

    /// The body of a result response around a result this crate serialised, spliced in
    /// as it is rather than parsed and written again.
    pub fn serialized_result_body(id: &RequestId, result: &crate::SerializedResult) -> String {
        // A RequestId is a string or an integer, which always serialises.
        let id = serde_json::to_string(id).unwrap_or_else(|_| String::from("null"));
        let result = result.as_str();
        let mut body = String::with_capacity(36 + id.len() + result.len());
        body.push_str(r#"{"jsonrpc":"2.0","id":"#);
        body.push_str(&id);
        body.push_str(r#","result":"#);
        body.push_str(result);
        body.push('}');
        body
    }

    pub fn to_json(&self) -> Value {
        // A Response holds only maps, strings and numbers, which always serialize.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: &str) -> Result<Incoming, EnvelopeError> {
        parse_message(body.as_bytes(), JsonLimits::default())
    }

    #[test]
    fn request_keeps_id_type() {
        let Incoming::Request(r) = parse(r#"{"jsonrpc":"2.0","id":7,"method":"m"}"#).unwrap()
        else {
            panic!("expected a request")
        };
        assert_eq!(r.id.to_value(), json!(7));
        let Incoming::Request(r) = parse(r#"{"jsonrpc":"2.0","id":"7","method":"m"}"#).unwrap()
        else {
            panic!("expected a request")
        };
        assert_eq!(r.id.to_value(), json!("7"));
        assert!(r.params.is_empty());
    }

    #[test]
    fn notification_has_no_id() {
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#).unwrap(),
            Incoming::Notification(Notification {
                method: "notifications/x".into()
            })
        );
    }

    #[test]
    fn rejects_bad_envelopes() {
        for (body, code, has_id) in [
            ("{", -32700, false),
            ("[]", -32600, false),
            ("42", -32600, false),
            (r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#, -32600, false),
            (r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#, -32600, false),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#, -32600, false),
            (
                r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"m"}"#,
                -32600,
                false,
            ),
            (r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#, -32600, true),
            (r#"{"jsonrpc":"2.0","id":1}"#, -32600, true),
            (r#"{"jsonrpc":"2.0","id":1,"method":5}"#, -32600, true),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
                -32600,
                true,
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, -32600, true),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
                -32700,
                false,
            ),
        ] {
            let err = parse(body).unwrap_err();
            assert_eq!(err.error.code, code, "{body}");
            assert_eq!(err.id.is_some(), has_id, "{body}");
        }
    }

    #[test]
    fn deep_nesting_is_a_parse_error_not_a_crash() {
        let body = "[".repeat(100_000);
        assert_eq!(parse(&body).unwrap_err().error.code, -32700);
    }

    #[test]
    fn client_responses_are_told_from_requests() {
        let value = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let ok = ClientResponse::from_value(&value(
            r#"{"jsonrpc":"2.0","id":"e1.x","result":{"action":"accept"}}"#,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(ok.id, RequestId::from("e1.x"));
        assert_eq!(ok.outcome, Ok(json!({"action":"accept"})));
        let err = ClientResponse::from_value(&value(
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}"#,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(err.outcome.unwrap_err().code, -32601);
        for not_a_response in [
            r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/x"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            "[]",
        ] {
            assert!(
                ClientResponse::from_value(&value(not_a_response)).is_none(),
                "{not_a_response}"
            );
        }
        for bad in [
            r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#,
        ] {
            let e = ClientResponse::from_value(&value(bad))
                .unwrap()
                .unwrap_err();
            assert_eq!(e.error.code, -32600, "{bad}");
        }
    }

    #[test]
    fn response_shapes() {
        let ok = Response::result(RequestId::from(1), json!({"resultType":"complete"}));
        assert_eq!(
            ok.to_json(),
            json!({"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}})
        );
        let err = Response::error(None, ErrorObject::parse_error("x"));
        assert!(err.to_json().get("id").is_none());
        assert_eq!(err.to_json()["error"]["code"], -32700);
    }
}
