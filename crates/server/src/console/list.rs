//! `GET /console/tasks`: a placeholder until its page lands (console-views replaces
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
    Router::new().route("/console/tasks", get(page))
}

async fn page(viewer: Viewer) -> Response {
    layout::respond(
        StatusCode::OK,
        layout::page(
            &viewer,
            "Tasks",
            html! { h1 { "Tasks" } p { "Not built yet." } },
        ),
    )
}
