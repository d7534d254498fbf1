//! 2025-era clients (protocol 2025-03-26, 2025-06-18 and 2025-11-25) on the same
//! `POST /mcp`.
//!
//! They open with `initialize` and then send requests without `_meta`: what a 2026-07-28
//! request says about itself, their session says for them. The session id
//! (`Mcp-Session-Id`) is a token signed with the state keys every replica shares, so any
//! replica can serve any request of a session; ending a session (`DELETE`) is recorded in
//! the store, where every replica looks.
//!
//! Once its session is checked, a request reaches the same methods a 2026-07-28 request
//! does (`delegate`), with the session's version and capabilities standing in for
//! `_meta`; only what differs between the revisions is here: `initialize` and `ping`,
//! `tools/call` answered on a stream (`call`, `stream`), the 2025-11-25 tasks
//! (`tasks`), responses to the server's requests (`responses`), and the forms and HTTP
//! statuses of errors.

mod call;
pub(crate) mod context;
mod initialize;
mod responses;
mod revision;
mod shapes;
mod stream;
mod tasks;
pub(crate) mod token;

use std::future::Future;

use axum::http::{HeaderMap, StatusCode};
use mcp_tasks_store::{Owner, Revocation};
use mcp_tasks_tools::ExecutionPolicy;
use mcp_tasks_wire::headers::{PROTOCOL_VERSION, SESSION_ID};
use mcp_tasks_wire::{ClientResponse, ErrorObject, Notification, Request, RequestMeta, meta_keys};
use serde_json::{Value, json};

use self::context::{Session, time_of};
use self::revision::Revision;
use crate::AppState;
use crate::error::RpcError;
use crate::reply::Reply;

/// Methods of 2026-07-28 alone (and the tasks methods, before 2025-11-25): not found in a
/// session, whatever the 2026-07-28 side would answer.
const NOT_IN_SESSIONS: &[&str] = &[
    "server/discover",
    "subscriptions/listen",
    "tasks/update",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
];

/// Whether a request is a 2025-era one: an `initialize` asking for a 2025 revision, or
/// any request in a session (or claiming a 2025 version without one). A request that
/// carries the 2026-07-28 `_meta` is always a 2026-07-28 one.
pub(crate) fn applies(headers: &HeaderMap, request: &Request) -> bool {
    let modern = request
        .params
        .get("_meta")
        .and_then(Value::as_object)
        .is_some_and(|m| m.contains_key(meta_keys::PROTOCOL_VERSION));
    if modern {
        return false;
    }
    if request.method == "initialize" {
        return initialize::requested(&request.params).is_some();
    }
    headers.contains_key(SESSION_ID)
        || headers
            .get(PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok())
            .and_then(Revision::parse)
            .is_some()
}

/// Serves a 2025-era request. `delegate` runs a 2026-07-28 method with the given
/// `_meta`.
pub(crate) async fn handle<F, Fut>(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    request: Request,
    delegate: F,
) -> Result<Reply, RpcError>
where
    F: FnOnce(RequestMeta, Request) -> Fut,
    Fut: Future<Output = Result<Reply, RpcError>>,
{
    if let Some(revision) = (request.method == "initialize")
        .then(|| initialize::requested(&request.params))
        .flatten()
    {
        return initialize::initialize(state, owner, request, revision, delegate)
            .await
            .map_err(in_revision);
    }
    let session = context::resolve(state, owner, headers).await?;
    let method = request.method.clone();
    let outcome = match method.as_str() {
        "ping" => Ok(Reply::Result(json!({}))),
        "tools/call" => call::call(state, owner, headers, &session, request).await,
        m if m.starts_with("tasks/") && m != "tasks/update" && session.revision.has_tasks() => {
            tasks::handle(state, owner, headers, &session, request).await
        }
        m if NOT_IN_SESSIONS.contains(&m) => {
            Err(RpcError::method(ErrorObject::method_not_found(m)))
        }
        _ => {
            let meta = session.meta(&request.params);
            delegate(meta, request)
                .await
                .and_then(|reply| adapt(state, &session, &method, reply))
        }
    };
    outcome.map_err(in_revision)
}

/// A 2026-07-28 method's answer in the session's revision: no `resultType`, and at
/// 2025-11-25 each tool says whether it runs as a task. MRTR is not in these revisions,
/// so a prompt or resource that needs input first is an error here.
fn adapt(
    state: &AppState,
    session: &Session,
    method: &str,
    reply: Reply,
) -> Result<Reply, RpcError> {
    let reply = match reply {
        // No method a session delegates answers this way today; read it back if one does.
        Reply::Serialized(text) => {
            Reply::Result(serde_json::from_str(text.as_str()).map_err(|_| RpcError::internal())?)
        }
        other => other,
    };
    let Reply::Result(Value::Object(result)) = reply else {
        return Ok(reply);
    };
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        return Err(RpcError::method(ErrorObject::new(
            mcp_tasks_wire::codes::INVALID_REQUEST,
            format!(
                "{method} needs input first, which a {} session cannot provide; use protocol 2026-07-28",
                session.revision
            ),
        )));
    }
    let mut result = shapes::result(result);
    if method == "tools/list"
        && session.revision.has_tasks()
        && let Some(Value::Array(tools)) = result.get_mut("tools")
    {
        let registry = state.registry();
        for tool in tools.iter_mut() {
            let policy = tool
                .get("name")
                .and_then(Value::as_str)
                .and_then(|name| registry.get(name))
                .map(|t| t.policy);
            let support = match policy {
                Some(ExecutionPolicy::TaskOptional) => "optional",
                Some(ExecutionPolicy::TaskRequired) => "required",
                Some(ExecutionPolicy::SyncOnly) | None => continue,
            };
            if let Some(tool) = tool.as_object_mut() {
                tool.insert("execution".into(), json!({ "taskSupport": support }));
            }
        }
    }
    Ok(Reply::Result(Value::Object(result)))
}

/// Errors as the 2025 transport carries them: a JSON-RPC error is an HTTP 200 response
/// (a 2025 client reads another status as the transport failing, and 404 as its session
/// gone). Only what is the transport's own keeps its status: authentication, origin,
/// size and media type, rate limits, an unavailable store, and the session checks.
fn in_revision(mut e: RpcError) -> RpcError {
    let keep = matches!(
        e.status,
        StatusCode::UNAUTHORIZED
            | StatusCode::FORBIDDEN
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNSUPPORTED_MEDIA_TYPE
            | StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
    );
    if !keep {
        e.status = StatusCode::OK;
    }
    e
}

/// Whether an HTTP request (a notification, a response, a `DELETE`) names a session.
pub(crate) fn named(headers: &HeaderMap) -> bool {
    headers.contains_key(SESSION_ID)
}

/// A notification in a session (`notifications/initialized`, `notifications/cancelled`,
/// …): accepted once the session checks out. Nothing is done with it: a call's task is
/// cancelled when its stream is abandoned.
pub(crate) async fn on_notification(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    notification: &Notification,
) -> Result<(), RpcError> {
    let session = context::resolve(state, owner, headers).await?;
    tracing::debug!(method = %notification.method, revision = %session.revision, "session notification");
    Ok(())
}

/// A response to a request the server sent on a stream.
pub(crate) async fn on_response(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    response: ClientResponse,
) -> Result<(), RpcError> {
    let session = context::resolve(state, owner, headers).await?;
    responses::apply(state, owner, &session, response).await
}

/// `DELETE` of a session: ended for every replica (404 from then on).
pub(crate) async fn delete(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
) -> Result<(), RpcError> {
    let session = context::resolve(state, owner, headers).await?;
    let ttl_ms = i64::try_from(state.config().session_ttl.as_millis()).unwrap_or(i64::MAX);
    state
        .sessions()
        .revoke_session(
            owner,
            &Revocation {
                session: &session.token.nonce,
                expires_at: time_of(session.token.expires_ms),
                session_ttl_ms: ttl_ms,
                max_per_owner: state.config().max_session_revocations,
            },
        )
        .await?;
    tracing::info!(revision = %session.revision, "session ended");
    Ok(())
}
