//! The task page's actions. Each applies exactly what the API method does, through the
//! same code (the server's `core`): cancel is `tasks/cancel`'s, an answer goes through
//! `tasks/update`'s checks and is applied as it applies one. Then 303 back to the task
//! page.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use mcp_tasks_server::AppState;
use mcp_tasks_server::core::{self, RpcError};
use serde_json::Map;

use super::form::Form;
use super::session::Viewer;
use super::{layout, schema_form, task};

/// `POST /console/tasks/{id}/cancel`: by the task's owner, or an admin of its tenant.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    // The CSRF check comes before any lookup: a forged post learns nothing.
    if let Err(response) = Form::read_checked(&state, &viewer, body).await {
        return response;
    }
    let task = match task::load(&state, &viewer, &id).await {
        Ok(task) => task,
        Err(response) => return response,
    };
    match core::cancel(&state, &task.owner, task.id).await {
        Ok(_) => back(&task.id.to_string()),
        Err(e) => failed(e),
    }
}

/// `POST /console/tasks/{id}/answer`: the owner's answer to one pending input request.
pub(crate) async fn answer(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let form = match Form::read_checked(&state, &viewer, body).await {
        Ok(form) => form,
        Err(response) => return response,
    };
    let task = match task::load(&state, &viewer, &id).await {
        Ok(task) => task,
        Err(response) => return response,
    };
    if !viewer.is_owner(&task) {
        return layout::forbidden("only the task's owner can answer its input requests");
    }
    let id = task.id.to_string();
    let Some(key) = form.get("key") else {
        return layout::bad_request(StatusCode::BAD_REQUEST, "the form names no input request");
    };
    let Some(request) = task.input_requests.as_ref().and_then(|r| r.get(key)) else {
        // Answered meanwhile (in another tab, by a client), or superseded: as
        // `tasks/update` does, an answer to nothing outstanding changes nothing.
        return back(&id);
    };
    let response = match schema_form::answer(request, &form) {
        Ok(response) => response,
        Err(why) => return layout::bad_request(StatusCode::BAD_REQUEST, &why),
    };
    let mut responses = Map::new();
    responses.insert(key.to_owned(), response);
    match core::answer(&state, &task.owner, task.id, responses).await {
        Ok(()) => back(&id),
        Err(e) => failed(e),
    }
}

fn back(id: &str) -> Response {
    Redirect::to(&format!("/console/tasks/{id}")).into_response()
}

/// An API error as a page: the store's trouble as 503/500, the answer's own as 400 with
/// the message `tasks/update` would have given.
fn failed(e: RpcError) -> Response {
    if e.status.is_server_error() {
        return layout::unavailable(e.status);
    }
    layout::bad_request(StatusCode::BAD_REQUEST, &e.error.message)
}
