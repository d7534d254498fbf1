//! What a `POST /mcp` is checked for before its message is read, as axum extractors that
//! a handler takes in this order (axum runs them in the order of its arguments):
//! [`Deadline`] (first, so it counts from the head), [`Caller`] (Host/Origin, then
//! authentication, then the rate limit) and last [`Message`] (media type, the body within
//! its size and time limits, strict JSON). Each refuses with its [`McpError`].

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Version, header};
use mcp_tasks_store::Owner;
use mcp_tasks_wire::{ErrorObject, strict};
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use super::refusal::{McpError, millis};
use crate::AppState;

/// One deadline from the head to the answer (a listen stream's frames come after): the
/// request timeout from when the request's head was taken up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline(pub(crate) Instant);

impl Deadline {
    /// The request's deadline, set by whichever extractor asks first.
    fn of(parts: &mut Parts, state: &AppState) -> Self {
        *parts.extensions.get_or_insert_with(|| {
            Self(Instant::now() + state.config().connections.request_timeout)
        })
    }

    /// The answer for a request still unanswered at the deadline.
    pub(crate) fn passed(state: &AppState, id: Option<mcp_tasks_wire::RequestId>) -> McpError {
        McpError::DeadlinePassed {
            id,
            max_ms: millis(state.config().connections.request_timeout),
        }
    }
}

impl FromRequestParts<AppState> for Deadline {
    type Rejection = McpError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, McpError> {
        Ok(Self::of(parts, state))
    }
}

/// Who sends the request: a request from an allowed Host and Origin, authenticated
/// within the deadline, and within its principal's rate limit.
#[derive(Debug)]
pub(crate) struct Caller(pub(crate) Owner);

impl FromRequestParts<AppState> for Caller {
    type Rejection = McpError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, McpError> {
        let deadline = Deadline::of(parts, state);
        allowed_host(state, &parts.headers)?;
        let owner = match timeout_at(deadline.0, authenticate(state, &parts.headers)).await {
            Ok(owner) => owner?,
            Err(_) => return Err(Deadline::passed(state, None)),
        };
        if let Some(limiter) = state.rate_limiter()
            && let Err(wait) = limiter.check(&owner, std::time::Instant::now())
        {
            let per_second = limiter.limit().per_second;
            let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
            tracing::info!(tenant = %owner.tenant, principal = %owner.principal, "request refused: rate limit");
            return Err(McpError::RateLimited {
                per_second,
                seconds,
            });
        }
        Ok(Self(owner))
    }
}

/// DNS-rebinding defence: the Host/Origin check every HTTP surface shares.
pub(crate) fn allowed_host(state: &AppState, headers: &HeaderMap) -> Result<(), McpError> {
    crate::origin::check_host_and_origin(&state.config().allowed_hosts, headers).map_err(|reason| {
        tracing::warn!(%reason, "request refused: host or origin not allowed");
        McpError::HostNotAllowed(reason)
    })
}

/// The principal the request's credentials name (no deadline of its own).
pub(crate) async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Owner, McpError> {
    state
        .auth()
        .authenticate(headers)
        .await
        .map_err(|error| McpError::Unauthorized {
            error,
            resource_metadata: state
                .config()
                .protected_resource
                .as_ref()
                .map(|resource| resource.metadata_url()),
        })
}

/// The request's JSON message: `application/json`, read whole within the body size
/// limit and the body timeout (and the deadline), and parsed strictly (depth, size,
/// duplicate keys: the replica's JSON limits).
#[derive(Debug)]
pub(crate) struct Message(pub(crate) Value);

impl FromRequest<AppState> for Message {
    type Rejection = McpError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, McpError> {
        if !is_json(request.headers()) {
            return Err(McpError::NotJson);
        }
        let (mut parts, body) = request.into_parts();
        let deadline = Deadline::of(&mut parts, state);
        let limits = &state.config().connections;
        let limit = state.config().max_body_bytes;
        // A body that stalls would otherwise hold the connection and this task for as
        // long as the client likes.
        let read_by = deadline.0.min(Instant::now() + limits.body_timeout);
        let Ok(read) = timeout_at(read_by, axum::body::to_bytes(body, limit)).await else {
            return Err(McpError::BodyTooSlow {
                max_ms: millis(limits.body_timeout),
                close: parts.version < Version::HTTP_2,
            });
        };
        let bytes: Bytes = match read {
            Ok(bytes) => bytes,
            Err(e)
                if std::error::Error::source(&e)
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) =>
            {
                return Err(McpError::BodyTooLarge { limit });
            }
            Err(_) => return Err(McpError::BodyIncomplete),
        };
        strict::parse(&bytes, state.config().json_limits)
            .map(Self)
            .map_err(|e| McpError::Malformed {
                id: None,
                error: ErrorObject::parse_error(e),
            })
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}
