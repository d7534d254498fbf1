//! `GET /console/inbox`: every task of the signed-in principal that waits for input,
//! oldest first (an admin's inbox is its own too: only an owner answers its tasks). The
//! page asks the browser to reload it every few seconds (`Refresh`), so what starts
//! waiting shows up without a script.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::get;
use maud::html;

use super::session::Viewer;
use super::{layout, timeline};
use crate::AppState;

/// Most tasks listed.
const LIMIT: i64 = 200;
/// Seconds between reloads.
pub(super) const REFRESH: &str = "10";

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/console/inbox", get(page))
}

async fn page(State(state): State<AppState>, viewer: Viewer) -> Response {
    let waiting = match state.store().console_inbox(&viewer.owner, LIMIT).await {
        Ok(tasks) => tasks,
        Err(e) => return layout::store_error(e),
    };
    let body = html! {
        h1 { "Inbox" }
        p { "Tasks of yours that wait for your input, oldest first." }
        @if waiting.is_empty() {
            p #inbox-empty { "Nothing waits for you." }
        }
        ul #inbox {
            @for t in &waiting {
                li data-task-id=(t.id) {
                    a href={ "/console/tasks/" (t.id) } { code { (t.id) } }
                    " " strong { (t.tool) }
                    " waiting since "
                    time datetime=(timeline::when(t.updated_at)) { (timeline::when(t.updated_at)) }
                    @if let Some(message) = &t.status_message {
                        ": " span .message { (message) }
                    }
                }
            }
        }
        @if waiting.len() as i64 >= LIMIT {
            p { "Showing the oldest " (LIMIT) "." }
        }
    };
    let mut response = layout::respond(StatusCode::OK, layout::page(&viewer, "Inbox", body));
    response
        .headers_mut()
        .insert("refresh", HeaderValue::from_static(REFRESH));
    response
}
