//! `GET /console/tasks/{id}/events`: the task page's live part, as SSE.
//!
//! The page registers a watch on its task with the replica's push hub, exactly as a
//! `subscriptions/listen` stream does (so the task's changes NOTIFY, and whichever
//! replica serves the page hears them), and each new version goes out as one event:
//! the status, the message, and the pending input already rendered for this viewer.
//! The stream ends after the task's final state. Streams count against the principal's
//! limit of open streams on this replica, like listen streams.

use std::convert::Infallible;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, StreamExt};
use serde_json::json;
use tokio_stream::wrappers::WatchStream;

use super::session::Viewer;
use super::{layout, task};
use crate::AppState;
use crate::push::hub::Snapshot;

pub(crate) async fn events(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    let task = match task::load(&state, &viewer, &id).await {
        Ok(task) => task,
        Err(response) => return response,
    };
    let Some(permit) = state
        .streams()
        .try_open(&viewer.owner, state.config().max_streams_per_principal)
    else {
        return layout::too_many_requests();
    };
    // Subscribed as the task's owner: the hub keys watches by owner, and `load` has
    // just checked that this viewer may see it.
    let watchers = match state.hub().subscribe(&task.owner, &[task.id]).await {
        Ok(w) => w,
        Err(e) => return layout::store_error(e),
    };
    let Some(watcher) = watchers.into_iter().next() else {
        return layout::not_found(&viewer);
    };
    let owner = viewer.is_owner(&task);
    let id = task.id.to_string();
    let shutdown = state.shutdown().clone();
    let rx = watcher.rx.clone();
    let updates = WatchStream::new(rx)
        .take_until(async move { shutdown.cancelled_owned().await })
        .filter_map(move |snapshot| {
            let event = match snapshot {
                Snapshot::Task(snap) => {
                    let detailed = &snap.detailed;
                    let keys: Vec<&str> = detailed
                        .get("inputRequests")
                        .and_then(serde_json::Value::as_object)
                        .map(|r| r.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    let data = json!({
                        "status": snap.status.as_str(),
                        "message": detailed.get("statusMessage"),
                        "keys": keys.join(" "),
                        "inputs": task::inputs(&viewer, owner, &id, detailed).into_string(),
                        "result": owner.then(|| task::result(detailed).into_string()),
                        "terminal": snap.status.is_terminal(),
                    });
                    Some((
                        Some(Event::default().data(data.to_string())),
                        snap.status.is_terminal(),
                    ))
                }
                Snapshot::Loading => None,
                // Deleted: nothing more will come (a reconnect gets the 404 page).
                Snapshot::Gone => Some((None, true)),
            };
            std::future::ready(event)
        });
    // Up to and including the final state, then the end of the stream.
    let body = stream::unfold(
        (Box::pin(updates), false, watcher, permit),
        |(mut s, done, w, p)| async move {
            if done {
                return None;
            }
            let (event, terminal) = s.next().await?;
            let event = event?;
            Some((Ok::<_, Infallible>(event), (s, terminal, w, p)))
        },
    );
    let mut response = Sse::new(body)
        .keep_alive(KeepAlive::new().interval(state.config().keep_alive))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    *response.status_mut() = StatusCode::OK;
    response
}
