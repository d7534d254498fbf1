//! A JSON-RPC error together with the HTTP status it travels with.

use axum::http::StatusCode;
use mcp_tasks_store::StoreError;
use mcp_tasks_wire::{ErrorObject, codes};

/// An error answer. Errors found before a method runs (envelope, `_meta`, headers,
/// version, capabilities) carry the 4xx status the transport spec assigns; errors a
/// method reports about its own params travel with 200, like any other response.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub error: ErrorObject,
    pub status: StatusCode,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

impl RpcError {
    /// An error with the status the transport spec gives its code.
    pub(crate) fn protocol(error: ErrorObject) -> Self {
        let status = match error.code {
            codes::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            codes::INTERNAL_ERROR => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        Self {
            error,
            status,
            retry_after: None,
        }
    }

    /// An error a method reports about its own params.
    pub(crate) fn method(error: ErrorObject) -> Self {
        let status = match error.code {
            codes::MISSING_REQUIRED_CLIENT_CAPABILITY => StatusCode::BAD_REQUEST,
            codes::INTERNAL_ERROR => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::OK,
        };
        Self {
            error,
            status,
            retry_after: None,
        }
    }

    pub(crate) fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::method(ErrorObject::invalid_params(detail))
    }

    pub(crate) fn internal() -> Self {
        Self::method(ErrorObject::internal())
    }

    /// The database is unreachable: tell the client to come back, don't pretend it was
    /// its fault.
    pub(crate) fn unavailable() -> Self {
        Self {
            error: ErrorObject::new(
                codes::INTERNAL_ERROR,
                "The task store is temporarily unavailable; retry shortly",
            ),
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after: Some(1),
        }
    }
}

impl From<StoreError> for RpcError {
    fn from(e: StoreError) -> Self {
        // Something in the request that cannot be stored (U+0000): the client's to fix.
        if let Some(why) = e.refusal() {
            return Self::invalid_params(why);
        }
        if e.is_unavailable() {
            tracing::warn!(error = %e, "task store unavailable");
            Self::unavailable()
        } else {
            tracing::error!(error = %e, "task store error");
            Self::internal()
        }
    }
}

impl From<ErrorObject> for RpcError {
    fn from(e: ErrorObject) -> Self {
        Self::method(e)
    }
}
