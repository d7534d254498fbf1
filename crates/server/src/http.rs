//! The HTTP surface: `POST /mcp` (and `DELETE /mcp` of a 2025-era session), `GET /healthz`,
//! `GET /readyz`, `GET /metrics` (here, or on a metrics listener of its own).

use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use mcp_tasks_wire::jsonrpc::{self, EnvelopeError, parse_value};
use mcp_tasks_wire::{ClientResponse, ErrorObject, Incoming, RequestId, strict};
use serde_json::{Value, json};
use tokio::time::{Instant, timeout_at};

use mcp_tasks_observe::record as observe;

use crate::auth::AuthError;
use crate::error::RpcError;
use crate::{AppState, dispatch, session};

/// The API's routes: `/mcp`, health, readiness, metrics and the protected-resource
/// metadata. The binary serves them with the console's (`mcp-tasks-console`) merged in.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/mcp", any(mcp))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*path}",
            get(resource_metadata),
        )
        .with_state(state)
}

/// `GET /metrics` alone, for a listener of its own (`--metrics-listen`): with it the
/// replica's main listener answers 404 there (`ServerConfig::metrics_on_listener`).
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics_anywhere))
        .with_state(state)
}

/// Serves [`metrics_router`] on `listener` until `shutdown`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, metrics_router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

/// RFC 9728 protected-resource metadata: where clients get tokens for this server.
async fn resource_metadata(State(state): State<AppState>) -> Response {
    match &state.config().protected_resource {
        Some(resource) => axum::Json(resource.document()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// 401 with a `WWW-Authenticate` challenge that points at the resource metadata (RFC 9728
/// §5.1), so a client can discover the authorization server.
fn unauthorized(state: &AppState, error: &AuthError) -> Response {
    tracing::info!(reason = %error, "request refused: not authenticated");
    let mut challenge = String::from("Bearer");
    let mut params = Vec::new();
    if let Some(resource) = &state.config().protected_resource {
        params.push(format!("resource_metadata=\"{}\"", resource.metadata_url()));
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

/// Prometheus metrics. No tenant, principal or task appears in them, only counts by
/// method, tool, status and outcome; operators keep the path off the public load
/// balancer all the same (see the README's *Observe*).
async fn metrics(State(state): State<AppState>) -> Response {
    if !state.config().metrics_on_listener {
        return StatusCode::NOT_FOUND.into_response();
    }
    metrics_anywhere(State(state)).await
}

async fn metrics_anywhere(State(state): State<AppState>) -> Response {
    match &state.config().metrics {
        Some(metrics) => {
            observe::listen_streams(state.open_streams());
            mcp_tasks_observe::metrics_response(metrics).await
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn healthz() -> impl IntoResponse {
    axum::Json(json!({ "status": "alive" }))
}

async fn readyz(State(state): State<AppState>) -> Response {
    match tokio::time::timeout(Duration::from_secs(2), state.store().ping()).await {
        // Upstream tool sources are reported, not required: a replica serves the tools
        // it has while an upstream is down.
        Ok(Ok(())) => match state.tool_sources() {
            Some(upstreams) => {
                axum::Json(json!({ "status": "ready", "upstreams": upstreams })).into_response()
            }
            None => axum::Json(json!({ "status": "ready" })).into_response(),
        },
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "not ready: database unreachable");
            not_ready("database unreachable")
        }
        Err(_) => not_ready("database did not answer within 2 s"),
    }
}

fn not_ready(reason: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({ "status": "unavailable", "reason": reason })),
    )
        .into_response()
}

/// The MCP endpoint. Only POST carries messages; `DELETE` ends a 2025-era client's
/// session. There is no GET stream (405, which the 2025 transport allows).
///
/// Each request gets a server span (continuing the caller's `traceparent`) and is
/// counted by JSON-RPC method and outcome.
async fn mcp(
    State(state): State<AppState>,
    method: Method,
    version: Version,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format!("{method} /mcp"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = "/mcp",
        url.path = "/mcp",
        network.protocol.version = ?version,
        http.response.status_code = tracing::field::Empty,
    );
    mcp_tasks_observe::otel::continue_trace(&span, &HeaderCarrier(&headers));
    let mut label = "none";
    let response = tracing::Instrument::instrument(
        serve_mcp(state, method, version, headers, body, &mut label),
        span.clone(),
    )
    .await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    let outcome = if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
        observe::Outcome::Unavailable
    } else if status.is_client_error() || response.extensions().get::<RpcFailed>().is_some() {
        observe::Outcome::Error
    } else {
        observe::Outcome::Ok
    };
    observe::http_request(label, outcome, started.elapsed());
    response
}

/// Marks an answer that carries a JSON-RPC error (some travel with HTTP 200).
#[derive(Debug, Clone, Copy)]
struct RpcFailed;

struct HeaderCarrier<'a>(&'a HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

async fn serve_mcp(
    state: AppState,
    method: Method,
    version: Version,
    headers: HeaderMap,
    body: Body,
    label: &mut &'static str,
) -> Response {
    // One deadline from the head to the answer (a listen stream's frames come after).
    let limits = &state.config().connections;
    let deadline = Instant::now() + limits.request_timeout;
    if method == Method::DELETE && session::named(&headers) {
        *label = "session/delete";
        return delete_session(&state, &headers).await;
    }
    if method != Method::POST {
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
        let allow = if session::named(&headers) {
            "POST, DELETE"
        } else {
            "POST"
        };
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        return response;
    }

    if let Err(reason) =
        crate::origin::check_host_and_origin(&state.config().allowed_hosts, &headers)
    {
        tracing::warn!(%reason, "request refused: host or origin not allowed");
        return json_response(
            StatusCode::FORBIDDEN,
            error_body(None, &ErrorObject::invalid_request(reason)),
        );
    }

    let owner = match timeout_at(deadline, state.auth().authenticate(&headers)).await {
        Ok(Ok(owner)) => owner,
        Ok(Err(e)) => return unauthorized(&state, &e),
        Err(_) => return deadline_passed(&state, None),
    };

    if let Some(limiter) = state.rate_limiter()
        && let Err(wait) = limiter.check(&owner, std::time::Instant::now())
    {
        let per_second = limiter.limit().per_second;
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        tracing::info!(tenant = %owner.tenant, principal = %owner.principal, "request refused: rate limit");
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
        return response;
    }

    if !is_json(&headers) {
        return json_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            error_body(
                None,
                &ErrorObject::invalid_request("Content-Type must be application/json"),
            ),
        );
    }

    let limit = state.config().max_body_bytes;
    // A body that stalls would otherwise hold the connection and this task for as long
    // as the client likes.
    let read_by = deadline.min(Instant::now() + limits.body_timeout);
    let read = match timeout_at(read_by, axum::body::to_bytes(body, limit)).await {
        Ok(read) => read,
        Err(_) => return body_too_slow(&state, version),
    };
    let bytes: Bytes = match read {
        Ok(bytes) => bytes,
        Err(e)
            if std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) =>
        {
            return json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                error_body(
                    None,
                    &ErrorObject::invalid_request(format!(
                        "the request body is larger than the {limit}-byte limit"
                    ))
                    .with_data(json!({ "limit": "body_bytes", "max": limit })),
                ),
            );
        }
        Err(_) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                error_body(
                    None,
                    &ErrorObject::invalid_request("the request body could not be read in full"),
                ),
            );
        }
    };

    let message = match strict::parse(&bytes, state.config().json_limits) {
        Ok(message) => message,
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                error_body(None, &ErrorObject::parse_error(e)),
            );
        }
    };
    let in_session = session::named(&headers);
    // A client's answer to a request the server sent (2025-era sessions only).
    if in_session && let Some(response) = ClientResponse::from_value(&message) {
        *label = "response";
        let outcome = match response {
            Ok(response) => session::on_response(&state, &owner, &headers, response).await,
            Err(EnvelopeError { error, .. }) => Err(RpcError::protocol(error)),
        };
        return match outcome {
            Ok(()) => StatusCode::ACCEPTED.into_response(),
            Err(e) => error_response(None, e),
        };
    }
    let request = match parse_value(message) {
        Ok(Incoming::Request(request)) => request,
        // Nothing is ever sent back for a notification. 2026-07-28 defines none from
        // client to server over HTTP, so any that arrive are accepted and dropped; in a
        // 2025-era session they are accepted once the session checks out.
        Ok(Incoming::Notification(n)) => {
            *label = "notification";
            if in_session
                && let Err(e) = session::on_notification(&state, &owner, &headers, &n).await
            {
                return error_response(None, e);
            }
            tracing::debug!(method = %n.method, "notification accepted and ignored");
            return StatusCode::ACCEPTED.into_response();
        }
        Err(EnvelopeError { id, error }) => {
            return json_response(StatusCode::BAD_REQUEST, error_body(id.as_ref(), &error));
        }
    };

    let id = request.id.clone();
    *label = mcp_tasks_observe::names::method_label(&request.method);
    let span = tracing::info_span!(
        "mcp.request",
        method = %request.method,
        id = %id,
        tenant = %owner.tenant,
        principal = %owner.principal,
        otel.name = *label,
        rpc.system = "jsonrpc",
        rpc.method = *label,
        rpc.jsonrpc.version = "2.0",
        mcp.method.name = *label,
    );
    let outcome = tracing::Instrument::instrument(
        timeout_at(
            deadline,
            dispatch::handle(&state, &owner, &headers, request),
        ),
        span.clone(),
    )
    .await;
    let Ok(outcome) = outcome else {
        span.in_scope(|| tracing::info!("request failed: deadline passed"));
        return deadline_passed(&state, Some(&id));
    };
    match outcome {
        Ok(dispatch::Reply::Result(result)) => json_response(
            StatusCode::OK,
            jsonrpc::Response::result(id, result).to_json(),
        ),
        Ok(dispatch::Reply::Serialized(result)) => json_text_response(
            StatusCode::OK,
            jsonrpc::Response::serialized_result_body(&id, &result),
        ),
        Ok(dispatch::Reply::Stream(response)) => response,
        Err(e) => span.in_scope(|| error_response(Some(&id), e)),
    }
}

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

/// `DELETE` with an `Mcp-Session-Id`: the same checks as a POST, then the session ends.
async fn delete_session(state: &AppState, headers: &HeaderMap) -> Response {
    if let Err(reason) =
        crate::origin::check_host_and_origin(&state.config().allowed_hosts, headers)
    {
        tracing::warn!(%reason, "request refused: host or origin not allowed");
        return json_response(
            StatusCode::FORBIDDEN,
            error_body(None, &ErrorObject::invalid_request(reason)),
        );
    }
    let owner = match state.auth().authenticate(headers).await {
        Ok(owner) => owner,
        Err(e) => return unauthorized(state, &e),
    };
    match session::delete(state, &owner, headers).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error_response(None, e),
    }
}

/// 408: the body did not arrive within the body timeout. The connection is closed after
/// the answer (HTTP/1.1), as the rest of the body can no longer be told from a next
/// request.
fn body_too_slow(state: &AppState, version: Version) -> Response {
    let max = millis(state.config().connections.body_timeout);
    tracing::info!(max_ms = max, "request refused: body not received in time");
    let mut response = json_response(
        StatusCode::REQUEST_TIMEOUT,
        error_body(
            None,
            &ErrorObject::invalid_request(format!(
                "the request body did not arrive within {max} ms"
            ))
            .with_data(json!({ "limit": "body_ms", "max": max })),
        ),
    );
    if version < Version::HTTP_2 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// 503: the request was not answered within the request timeout (whatever it waited
/// for is abandoned, as when a client goes away).
fn deadline_passed(state: &AppState, id: Option<&RequestId>) -> Response {
    let max = millis(state.config().connections.request_timeout);
    let mut response = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        error_body(
            id,
            &ErrorObject::new(
                mcp_tasks_wire::codes::INTERNAL_ERROR,
                format!("the request was not answered within {max} ms"),
            )
            .with_data(json!({ "limit": "request_ms", "max": max })),
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(1));
    response
}

/// 503 for a connection past the replica's connection cap: retry in a moment, or on
/// another replica.
pub(crate) fn over_capacity(max_connections: usize) -> Response {
    let mut response = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        error_body(
            None,
            &ErrorObject::new(
                mcp_tasks_wire::codes::INTERNAL_ERROR,
                format!(
                    "this replica is serving its maximum of {max_connections} connections; retry after 1 s"
                ),
            )
            .with_data(json!({ "limit": "connections", "max": max_connections })),
        ),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(1));
    response
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

fn error_body(id: Option<&RequestId>, error: &ErrorObject) -> Value {
    jsonrpc::Response::error(id.cloned(), error.clone()).to_json()
}

/// A single-line JSON body. (Some clients read responses line by line.)
fn json_response(status: StatusCode, body: Value) -> Response {
    json_text_response(status, body.to_string())
}

fn json_text_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
