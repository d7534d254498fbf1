//! `GET /console/health`: a placeholder until its page lands (console-views replaces
//! this file).

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use maud::html;

use super::layout;
use super::session::Viewer;
use crate::AppState;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/console/health", get(page))
}

async fn page(viewer: Viewer) -> Response {
    layout::respond(
        StatusCode::OK,
        layout::page(
            &viewer,
            "Health",
            html! { h1 { "Health" } p { "Not built yet." } },
        ),
    )
}
