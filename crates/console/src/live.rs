//! `GET /console/tasks/{id}/events`: the task page's live part, as SSE.
//!
//! The page registers a watch on its task with the replica's push hub, exactly as a
//! `subscriptions/listen` stream does (so the task's changes NOTIFY, and whichever
//! replica serves the page hears them), and each new version goes out as one event:
//! the status, the message, and the pending input already rendered for this viewer; and
//! the attempt and the timeline, which the snapshot does not carry, read again for it
//! (the row and its history by key: two statements per change of a task someone has
//! open, and none for the tasks nobody looks at). The stream ends after the task's final
//! state. Streams count against the principal's limit of open streams on this replica,
//! like listen streams.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::WaitForCancellationFutureOwned;

use mcp_tasks_store::{Lookup, Owner, TaskId};

use super::session::Viewer;
use super::standing::Signed;
use super::{layout, task, timeline};
use mcp_tasks_server::AppState;
use mcp_tasks_server::core::StreamPermit;
use mcp_tasks_server::core::sse::{self, EventSource};
use mcp_tasks_server::core::{Snapshot, TaskSnapshot, Watcher};

pub(crate) async fn events(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
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
    let standing = Signed::new(&headers, &viewer);
    let source = LiveTask {
        updates: WatchStream::new(watcher.rx.clone()),
        owner: viewer.is_owner(&task),
        task: (task.owner.clone(), task.id),
        state: state.clone(),
        viewer,
        done: false,
        shutdown: Box::pin(state.shutdown().clone().cancelled_owned()),
        _watcher: watcher,
        _permit: permit,
    };
    sse::response(&state, source, standing)
}

/// One viewer's stream of one task: each new version, up to and including the final one.
struct LiveTask {
    updates: WatchStream<Snapshot>,
    viewer: Viewer,
    owner: bool,
    /// The task's owner and id (the hub's key, and how its row and history are read).
    task: (Owner, TaskId),
    state: AppState,
    done: bool,
    shutdown: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    _watcher: Watcher,
    _permit: StreamPermit,
}

impl LiveTask {
    /// What the page puts in place: status, message, the pending input rendered for this
    /// viewer, and (for the owner) the result.
    fn render(&self, snap: &TaskSnapshot, extra: Option<(String, String)>) -> Value {
        let detailed = &snap.detailed;
        let keys: Vec<&str> = detailed
            .get("inputRequests")
            .and_then(Value::as_object)
            .map(|r| r.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let (attempt, timeline) = extra.unzip();
        json!({
            "status": snap.status.as_str(),
            "message": detailed.get("statusMessage"),
            "keys": keys.join(" "),
            "inputs": task::inputs(&self.viewer, self.owner, &self.task.1.to_string(), detailed).into_string(),
            "result": self.owner.then(|| task::result(detailed).into_string()),
            "attempt": attempt,
            "timeline": timeline,
            "terminal": snap.status.is_terminal(),
        })
    }

    /// The attempt ("1 of 3") and the timeline as they are now; `None` when either read
    /// fails or the task is gone (the page keeps what it shows: the rest of the update
    /// still goes out).
    async fn attempt_and_timeline(&self) -> Option<(String, String)> {
        let (owner, id) = &self.task;
        let store = self.state.store();
        let Ok(Lookup::Found(task)) = store.get_task(owner, *id).await else {
            return None;
        };
        let history = match self.state.console_reads().task_history(owner, *id).await {
            Ok(Lookup::Found(events)) => Some(events),
            Ok(Lookup::Expired | Lookup::NotFound) => None,
            Err(e) => {
                tracing::debug!(error = %e, "task page: history not read for a live update");
                return None;
            }
        };
        Some((
            format!("{} of {}", task.current_attempt(), task.max_attempts),
            timeline::render(&task, history.as_deref()).into_string(),
        ))
    }
}

impl EventSource for LiveTask {
    async fn next_event(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        loop {
            let snapshot = tokio::select! {
                snapshot = self.updates.next() => snapshot?,
                () = self.shutdown.as_mut() => return None,
            };
            match snapshot {
                Snapshot::Loading => {}
                // Deleted: nothing more will come (a reconnect gets the 404 page).
                Snapshot::Gone => return None,
                Snapshot::Task(snap) => {
                    self.done = snap.status.is_terminal();
                    let extra = self.attempt_and_timeline().await;
                    return Some(sse::frame(&self.render(&snap, extra)));
                }
            }
        }
    }
}

/// Least time between two re-reads of one list stream's query.
const MIN_GAP: std::time::Duration = std::time::Duration::from_secs(1);

/// When a console list stream (`live_list`, `live_inbox`, `live_health`) re-runs its
/// page's query: soon after the hub hears a wake-up of the workers that may concern the
/// viewer's tenant (a task of it was created, resumed or released, on any replica) or a
/// resync, or after [`Requery::poke`]; at most once per [`MIN_GAP`];
/// and every `backstop` whatever happens. Between wake-ups it does nothing, and during
/// the gap after a re-read it does not even look at the wake-ups (a flood of them costs
/// a stream one look per gap).
pub(crate) struct Requery {
    runnable: tokio::sync::watch::Receiver<u64>,
    backstop: std::time::Duration,
    last: tokio::time::Instant,
    pending: bool,
}

impl Requery {
    /// Due at once (the stream's first read), then as above, on wake-ups that may
    /// concern `tenant` (the viewer's: every stream shows one tenant's tasks).
    pub(crate) fn new(state: &AppState, tenant: &str, backstop: std::time::Duration) -> Self {
        let mut runnable = state.hub().runnable(tenant);
        runnable.mark_unchanged();
        Self {
            runnable,
            backstop,
            last: tokio::time::Instant::now() - MIN_GAP,
            pending: true,
        }
    }

    /// Something the stream saw makes its query worth re-running.
    pub(crate) fn poke(&mut self) {
        self.pending = true;
    }

    /// Resolves when the query should run again. Cancel-safe: a wake-up heard before the
    /// future is dropped stays pending.
    pub(crate) async fn due(&mut self) {
        tokio::time::sleep_until(self.last + MIN_GAP).await;
        if !self.pending {
            let backstop = tokio::time::sleep_until(self.last + self.backstop);
            tokio::pin!(backstop);
            tokio::select! {
                changed = self.runnable.changed() => {
                    // No hub any more (the replica is stopping): the backstop only.
                    if changed.is_err() {
                        backstop.await;
                    }
                }
                () = &mut backstop => {}
            }
        }
        self.runnable.mark_unchanged();
        self.pending = false;
        self.last = tokio::time::Instant::now();
    }
}
