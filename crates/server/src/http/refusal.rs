//! How `/mcp` says no: [`McpError`], each refusal of the endpoint with the HTTP status and
//! the JSON-RPC error body it is answered with, and the JSON answers every route shares.

use std::time::Duration;

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcp_tasks_wire::jsonrpc;
use mcp_tasks_wire::{ErrorObject, RequestId};
use serde_json::{Value, json};

use crate::auth::AuthError;
use crate::error::RpcError;

/// A request to `/mcp` answered with an error, in the order the checks run (see the
/// crate's docs): each variant is one answer, with its status, body and headers.
#[derive(Debug)]
pub(crate) enum McpError {
    /// 405: only POST carries messages (and DELETE ends a 2025-era session); `Allow`
    /// names what the request could have used.
    MethodNotAllowed { method: Method, allow: &'static str },
    /// 403: the `Host` or `Origin` is not one this replica answers to.
    HostNotAllowed(String),
    /// 401, with a `WWW-Authenticate` challenge that points at the resource metadata
    /// (RFC 9728 §5.1), so a client can discover the authorization server.
    Unauthorized {
        error: AuthError,
        resource_metadata: Option<String>,
    },
    /// 429 with `Retry-After`: the principal's rate limit.
    RateLimited { per_second: f64, seconds: u64 },
    /// 415: the body is not `application/json`.
    NotJson,
    /// 408: the body did not arrive within the body timeout. The connection is closed
    /// after the answer on HTTP/1.1 (`close`), as the rest of the body can no longer be
    /// told from a next request.
    BodyTooSlow { max_ms: u64, close: bool },
    /// 413: the body is over the size limit.
    BodyTooLarge { limit: usize },
    /// 400: the body broke off.
    BodyIncomplete,
    /// 400: not JSON, or not a JSON-RPC message (with the request's id when it had one).
    Malformed {
        id: Option<RequestId>,
        error: ErrorObject,
    },
    /// 503 with `Retry-After`: the request was not answered within the request timeout
    /// (whatever it waited for is abandoned, as when a client goes away).
    DeadlinePassed { id: Option<RequestId>, max_ms: u64 },
    /// What a method (or a session's check) answered: its own status and `Retry-After`.
    Rpc {
        id: Option<RequestId>,
        error: RpcError,
    },
}

impl IntoResponse for McpError {
    fn into_response(self) -> Response {
        match self {
            Self::MethodNotAllowed { method, allow } => {
                let mut response = json_response(
                    StatusCode::METHOD_NOT_ALLOWED,
                    error_body(
                        None,
                        &ErrorObject::new(
                            mcp_tasks_wire::codes::INVALID_REQUEST,
                            format!(
                                "{method} is not supported on the MCP endpoint; send every message with POST"
                            ),
                        ),
                    ),
                );
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static(allow));
                response
            }
            Self::HostNotAllowed(reason) => json_response(
                StatusCode::FORBIDDEN,
                error_body(None, &ErrorObject::invalid_request(reason)),
            ),
            Self::Unauthorized {
                error,
                resource_metadata,
            } => unauthorized(&error, resource_metadata.as_deref()),
            Self::RateLimited {
                per_second,
                seconds,
            } => {
                let mut response = json_response(
                    StatusCode::TOO_MANY_REQUESTS,
                    error_body(
                        None,
                        &ErrorObject::invalid_request(format!(
                            "too many requests for this principal (limit {per_second} per second); retry after {seconds} s"
                        ))
                        .with_data(json!({ "limit": "requests_per_second", "max": per_second })),
                    ),
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                response
            }
            Self::NotJson => json_response(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                error_body(
                    None,
                    &ErrorObject::invalid_request("Content-Type must be application/json"),
                ),
            ),
            Self::BodyTooSlow { max_ms, close } => {
                tracing::info!(max_ms, "request refused: body not received in time");
                let mut response = json_response(
                    StatusCode::REQUEST_TIMEOUT,
                    error_body(
                        None,
                        &ErrorObject::invalid_request(format!(
                            "the request body did not arrive within {max_ms} ms"
                        ))
                        .with_data(json!({ "limit": "body_ms", "max": max_ms })),
                    ),
                );
                if close {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                response
            }
            Self::BodyTooLarge { limit } => json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                error_body(
                    None,
                    &ErrorObject::invalid_request(format!(
                        "the request body is larger than the {limit}-byte limit"
                    ))
                    .with_data(json!({ "limit": "body_bytes", "max": limit })),
                ),
            ),
            Self::BodyIncomplete => json_response(
                StatusCode::BAD_REQUEST,
                error_body(
                    None,
                    &ErrorObject::invalid_request("the request body could not be read in full"),
                ),
            ),
            Self::Malformed { id, error } => {
                json_response(StatusCode::BAD_REQUEST, error_body(id.as_ref(), &error))
            }
            Self::DeadlinePassed { id, max_ms } => {
                let mut response = json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    error_body(
                        id.as_ref(),
                        &ErrorObject::new(
                            mcp_tasks_wire::codes::INTERNAL_ERROR,
                            format!("the request was not answered within {max_ms} ms"),
                        )
                        .with_data(json!({ "limit": "request_ms", "max": max_ms })),
                    ),
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(1));
                response
            }
            Self::Rpc { id, error } => error_response(id.as_ref(), error),
        }
    }
}

fn unauthorized(error: &AuthError, resource_metadata: Option<&str>) -> Response {
    tracing::info!(reason = %error, "request refused: not authenticated");
    let mut challenge = String::from("Bearer");
    let mut params = Vec::new();
    if let Some(url) = resource_metadata {
        params.push(format!("resource_metadata=\"{url}\""));
    }
    if let AuthError::Invalid(why) = error {
        params.push("error=\"invalid_token\"".to_owned());
        params.push(format!(
            "error_description=\"{}\"",
            why.replace(['"', '\\'], "'")
        ));
    }
    if !params.is_empty() {
        challenge.push(' ');
        challenge.push_str(&params.join(", "));
    }
    let mut response = json_response(
        StatusCode::UNAUTHORIZED,
        error_body(None, &ErrorObject::invalid_request(error)),
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// Marks an answer that carries a JSON-RPC error (some travel with HTTP 200), so the
/// request is counted as failed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RpcFailed;

/// An error answer with its status (and `Retry-After`, for 429 and 503).
fn error_response(id: Option<&RequestId>, e: RpcError) -> Response {
    let RpcError {
        error,
        status,
        retry_after,
    } = e;
    // Messages can quote what the client sent; they stay out of info-level logs.
    tracing::info!(
        code = error.code,
        status = status.as_u16(),
        "request failed"
    );
    tracing::debug!(message = %error.message, "request failed");
    let mut response = json_response(status, error_body(id, &error));
    response.extensions_mut().insert(RpcFailed);
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn error_body(id: Option<&RequestId>, error: &ErrorObject) -> Value {
    jsonrpc::Response::error(id.cloned(), error.clone()).to_json()
}

/// A single-line JSON body. (Some clients read responses line by line.)
pub(crate) fn json_response(status: StatusCode, body: Value) -> Response {
    json_text_response(status, body.to_string())
}

pub(crate) fn json_text_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
