//! `GET /console/inbox`: every task of the signed-in principal that waits for input,
//! oldest first (an admin's inbox is its own too: only an owner answers its tasks). The
//! page is complete as served; with JavaScript, `live_inbox` puts each change of the list
//! in place, so what starts waiting shows up and what was answered leaves.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use maud::{Markup, PreEscaped, html};
use mcp_tasks_store::TaskSummary;

use super::session::Viewer;
use super::{layout, script, timeline};
use mcp_tasks_server::AppState;

use crate::Console;

/// Most tasks listed.
pub(super) const LIMIT: i64 = 200;

pub(super) fn routes() -> Router<Console> {
    Router::new().route("/console/inbox", get(page))
}

async fn page(State(state): State<AppState>, viewer: Viewer) -> Response {
    let waiting = match state
        .console_reads()
        .console_inbox(&viewer.owner, LIMIT)
        .await
    {
        Ok(tasks) => tasks,
        Err(e) => return layout::store_error(e),
    };
    let body = html! {
        h1 { "Inbox" }
        p { "Tasks of yours that wait for your input, oldest first." }
        div #inbox-live data-events="/console/inbox/events" { (items(&waiting)) }
        script { (PreEscaped(script::INBOX)) }
    };
    layout::respond(StatusCode::OK, layout::page(&viewer, "Inbox", body))
}

/// The list itself, as the page and each live update show it.
pub(super) fn items(waiting: &[TaskSummary]) -> Markup {
    html! {
        @if waiting.is_empty() {
            p #inbox-empty { "Nothing waits for you." }
        }
        ul #inbox {
            @for t in waiting {
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
    }
}
