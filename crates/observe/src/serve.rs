//! A worker's metrics listener (`--metrics-listen`): `GET /metrics` and nothing else.
//! Replicas serve the same document on their own listener, or with `--metrics-listen` on
//! one like this (`mcp_tasks_server::serve_metrics`, which also refreshes what only the
//! replica knows, its open listen streams).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::Metrics;

/// The media type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics` as an answer: the exposition with its media type.
pub async fn metrics_response(metrics: &Metrics) -> Response {
    let mut response = metrics.render().await.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    response
}

async fn handler(State(metrics): State<Metrics>) -> Response {
    metrics_response(&metrics).await
}

/// Serves `GET /metrics` on `listener` until `shutdown`.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(handler))
        .with_state(metrics);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
