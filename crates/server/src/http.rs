//! The HTTP surface: `POST /mcp` (and `DELETE /mcp` of a 2025-era session), `GET /healthz`,
//! `GET /readyz`, `GET /metrics` (here, or on a metrics listener of its own).

mod extract;
mod mcp;
mod refusal;

use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mcp_tasks_wire::ErrorObject;
use serde_json::json;
use tokio::time::Instant;

use mcp_tasks_observe::record as observe;

use self::mcp::Label;
use self::refusal::{RpcFailed, error_body, json_response};
use crate::AppState;

/// The API's routes: `/mcp`, health, readiness, metrics and the protected-resource
/// metadata. The binary serves them with the console's (`mcp-tasks-console`) merged in.
pub fn router(state: AppState) -> Router {
    let mcp = post(mcp::post)
        .delete(mcp::delete)
        .fallback(mcp::not_allowed)
        .layer(middleware::from_fn(observed));
    Router::new()
        .route("/mcp", mcp)
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

/// Every request to `/mcp`, whatever its method and however it is answered: a server span
/// (continuing the caller's `traceparent`), and a count by JSON-RPC method (the answer's
/// [`Label`]) and outcome.
async fn observed(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format!("{method} /mcp"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = "/mcp",
        url.path = "/mcp",
        network.protocol.version = ?request.version(),
        http.response.status_code = tracing::field::Empty,
    );
    mcp_tasks_observe::otel::continue_trace(&span, &HeaderCarrier(request.headers()));
    let mut response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    let label = response
        .extensions_mut()
        .remove::<Label>()
        .map_or("none", |Label(label)| label);
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

struct HeaderCarrier<'a>(&'a HeaderMap);

impl opentelemetry::propagation::Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
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
