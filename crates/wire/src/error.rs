//! JSON-RPC error objects and the error codes of the 2026-07-28 revision.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::TASKS_EXTENSION;

/// Error codes. `-32020..=-32099` is reserved for the spec; nothing outside this list is
/// emitted from that range.
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// A JSON-RPC error object, as carried by an error response or a `failed` task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn parse_error(detail: impl std::fmt::Display) -> Self {
        Self::new(codes::PARSE_ERROR, format!("Parse error: {detail}"))
    }

    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(codes::INVALID_REQUEST, format!("Invalid request: {detail}"))
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(codes::INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// Never carries the cause: internal details are logged, not sent.
    pub fn internal() -> Self {
        Self::new(codes::INTERNAL_ERROR, "Internal error")
    }

    pub fn header_mismatch(detail: impl std::fmt::Display) -> Self {
        Self::new(codes::HEADER_MISMATCH, format!("Header mismatch: {detail}"))
    }

    pub fn unsupported_version(requested: &str, supported: &[&str]) -> Self {
        Self::new(
            codes::UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
        )
        .with_data(json!({ "supported": supported, "requested": requested }))
    }

    /// `requiredCapabilities` is a `ClientCapabilities` object, e.g. `{"sampling":{}}`.
    pub fn missing_capability(message: impl Into<String>, required: Value) -> Self {
        Self::new(codes::MISSING_REQUIRED_CLIENT_CAPABILITY, message)
            .with_data(json!({ "requiredCapabilities": required }))
    }

    /// The error for a request that needs the Tasks extension the client did not declare.
    pub fn tasks_extension_required() -> Self {
        Self::missing_capability(
            "Missing required client capability: this request requires the io.modelcontextprotocol/tasks extension",
            json!({ "extensions": { TASKS_EXTENSION: {} } }),
        )
    }
}

impl std::fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ErrorObject {}
