//! The MCP endpoint's handlers: `POST /mcp` carries every message, `DELETE /mcp` ends a
//! 2025-era client's session, and anything else is refused (405; there is no GET stream,
//! which the 2025 transport allows). What a request is checked for before its message is
//! read is `extract`'s; how each refusal is answered, `refusal`'s.

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use mcp_tasks_wire::jsonrpc::{self, EnvelopeError, parse_value};
use mcp_tasks_wire::{ClientResponse, Incoming};
use tokio::time::timeout_at;

use super::extract::{self, Caller, Deadline, Message};
use super::refusal::{McpError, json_response, json_text_response};
use crate::error::RpcError;
use crate::{AppState, dispatch, session};

/// What the request is counted as in the metrics (its JSON-RPC method's label, or what
/// else it was), carried out to the middleware that counts it. A request refused before
/// its message was read has none (`"none"`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Label(pub(crate) &'static str);

impl IntoResponseParts for Label {
    type Error = std::convert::Infallible;

    fn into_response_parts(self, mut res: ResponseParts) -> Result<ResponseParts, Self::Error> {
        res.extensions_mut().insert(self);
        Ok(res)
    }
}

/// `POST /mcp`: one JSON-RPC message. A client's answer to a request the server sent
/// (2025-era sessions) or a notification is accepted (202); a request is dispatched and
/// answered within the deadline.
pub(crate) async fn post(
    State(state): State<AppState>,
    deadline: Deadline,
    Caller(owner): Caller,
    headers: HeaderMap,
    Message(message): Message,
) -> (Label, Result<Response, McpError>) {
    let in_session = session::named(&headers);
    // A client's answer to a request the server sent (2025-era sessions only).
    if in_session && let Some(response) = ClientResponse::from_value(&message) {
        let outcome = match response {
            Ok(response) => session::on_response(&state, &owner, &headers, response).await,
            Err(EnvelopeError { error, .. }) => Err(RpcError::protocol(error)),
        };
        return (Label("response"), accepted(outcome));
    }
    let request = match parse_value(message) {
        Ok(Incoming::Request(request)) => request,
        // Nothing is ever sent back for a notification. 2026-07-28 defines none from
        // client to server over HTTP, so any that arrive are accepted and dropped; in a
        // 2025-era session they are accepted once the session checks out.
        Ok(Incoming::Notification(n)) => {
            if in_session
                && let Err(e) = session::on_notification(&state, &owner, &headers, &n).await
            {
                return (Label("notification"), accepted(Err(e)));
            }
            tracing::debug!(method = %n.method, "notification accepted and ignored");
            return (Label("notification"), accepted(Ok(())));
        }
        Err(EnvelopeError { id, error }) => {
            return (Label("none"), Err(McpError::Malformed { id, error }));
        }
    };

    let id = request.id.clone();
    let label = mcp_tasks_observe::names::method_label(&request.method);
    let span = tracing::info_span!(
        "mcp.request",
        method = %request.method,
        id = %id,
        tenant = %owner.tenant,
        principal = %owner.principal,
        otel.name = label,
        rpc.system = "jsonrpc",
        rpc.method = label,
        rpc.jsonrpc.version = "2.0",
        mcp.method.name = label,
    );
    let outcome = tracing::Instrument::instrument(
        timeout_at(
            deadline.0,
            dispatch::handle(&state, &owner, &headers, request),
        ),
        span.clone(),
    )
    .await;
    let Ok(outcome) = outcome else {
        span.in_scope(|| tracing::info!("request failed: deadline passed"));
        return (Label(label), Err(Deadline::passed(&state, Some(id))));
    };
    let answer = match outcome {
        Ok(dispatch::Reply::Result(result)) => json_response(
            StatusCode::OK,
            jsonrpc::Response::result(id, result).to_json(),
        ),
        Ok(dispatch::Reply::Serialized(result)) => json_text_response(
            StatusCode::OK,
            jsonrpc::Response::serialized_result_body(&id, &result),
        ),
        Ok(dispatch::Reply::Stream(response)) => response,
        // Answered in the request's span, where its failure is logged.
        Err(error) => span.in_scope(|| {
            McpError::Rpc {
                id: Some(id),
                error,
            }
            .into_response()
        }),
    };
    (Label(label), Ok(answer))
}

/// 202 for what needs no answer, or the error it was refused with.
fn accepted(outcome: Result<(), RpcError>) -> Result<Response, McpError> {
    match outcome {
        Ok(()) => Ok(StatusCode::ACCEPTED.into_response()),
        Err(error) => Err(McpError::Rpc { id: None, error }),
    }
}

/// `DELETE /mcp` with an `Mcp-Session-Id`: the same checks as a POST (but the rate limit
/// and the deadline), then the session ends. Without one, as any other method.
pub(crate) async fn delete(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    if !session::named(&headers) {
        return not_allowed(method, headers).await;
    }
    let ended = async {
        extract::allowed_host(&state, &headers)?;
        let owner = extract::authenticate(&state, &headers).await?;
        match session::delete(&state, &owner, &headers).await {
            Ok(()) => Ok(StatusCode::NO_CONTENT),
            Err(error) => Err(McpError::Rpc { id: None, error }),
        }
    };
    (Label("session/delete"), ended.await).into_response()
}

/// Any other method: 405, with what the request could have used.
pub(crate) async fn not_allowed(method: Method, headers: HeaderMap) -> Response {
    let allow = if session::named(&headers) {
        "POST, DELETE"
    } else {
        "POST"
    };
    McpError::MethodNotAllowed { method, allow }.into_response()
}
