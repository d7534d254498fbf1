//! `GET /console/inbox/events`: the inbox's live part, as SSE. Each event is the inbox's
//! list rendered again (`{"html": ..., "ids": [...]}`), sent when it changed: first
//! at once (whatever changed since the page load), then whenever a task of the
//! principal starts or stops waiting for input.
//!
//! A task notifies only while someone watches it, and a task that is about to ask for
//! input is a live one that does not wait yet. So the stream subscribes with the push
//! hub (as the viewer, whose inbox it is) to the principal's waiting tasks and its
//! [`WATCHED_WORKING`] newest working ones, and reads the membership again (two bounded
//! index reads) when a watched task's status changes, when the hub hears the workers'
//! wake-up for its tenant (a task was created, resumed or released: a new task to
//! watch), and every [`BACKSTOP`]; at most once a second. Past that many working tasks, an older one that
//! starts waiting shows up at the next re-read rather than at once. At most
//! `LIMIT + WATCHED_WORKING` tasks are watched per stream.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use futures::StreamExt;
use mcp_tasks_store::{Owner, Scope, TaskFilter, TaskId, TaskSummary};
use mcp_tasks_wire::TaskStatus;
use serde_json::{Value, json};
use tokio_stream::StreamMap;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::inbox::{self, LIMIT};
use super::layout;
use super::live::Requery;
use super::session::Viewer;
use super::standing::Signed;
use mcp_tasks_server::AppState;
use mcp_tasks_server::core::StreamPermit;
use mcp_tasks_server::core::sse::{self, EventSource};
use mcp_tasks_server::core::{Snapshot, Watcher};

/// How many of the principal's working tasks (the newest) a stream watches.
pub(super) const WATCHED_WORKING: i64 = 200;
/// How often the membership is read again when nothing said to.
pub(super) const BACKSTOP: Duration = Duration::from_secs(15);

pub(crate) async fn events(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
) -> Response {
    let standing = Signed::new(&headers, &viewer);
    let Some(permit) = state
        .streams()
        .try_open(&viewer.owner, state.config().max_streams_per_principal)
    else {
        return layout::too_many_requests();
    };
    let source = LiveInbox {
        requery: Requery::new(&state, &viewer.owner.tenant, BACKSTOP),
        shutdown: Box::pin(state.shutdown().clone().cancelled_owned()),
        state: state.clone(),
        owner: viewer.owner,
        updates: StreamMap::new(),
        watchers: HashMap::new(),
        known: HashMap::new(),
        sent: None,
        _permit: permit,
    };
    sse::response(&state, source, standing)
}

/// What a re-read found of one task: its status, and its message while it waits (both
/// are on the page).
type Seen = (TaskStatus, Option<String>);

struct LiveInbox {
    state: AppState,
    owner: Owner,
    requery: Requery,
    updates: StreamMap<TaskId, WatchStream<Snapshot>>,
    watchers: HashMap<TaskId, Watcher>,
    known: HashMap<TaskId, Seen>,
    /// The rendering last sent.
    sent: Option<String>,
    shutdown: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    _permit: StreamPermit,
}

impl LiveInbox {
    /// Whether this version of a watched task changes what the inbox shows.
    fn matters(&self, id: TaskId, snapshot: &Snapshot) -> bool {
        match snapshot {
            Snapshot::Loading => false,
            Snapshot::Gone => self.known.contains_key(&id),
            Snapshot::Task(snap) => {
                let message = snap.detailed.get("statusMessage").and_then(Value::as_str);
                match self.known.get(&id) {
                    None => true,
                    Some((status, _)) if *status != snap.status => true,
                    Some((status, known)) => {
                        *status == TaskStatus::InputRequired && known.as_deref() != message
                    }
                }
            }
        }
    }

    /// Reads the membership again, follows what it found, and renders the list: `None`
    /// when it is what was sent last (or the store failed; the next re-read tries again).
    async fn reread(&mut self) -> Option<Value> {
        let store = self.state.console_reads();
        let working = TaskFilter {
            status: Some(TaskStatus::Working),
            ..TaskFilter::default()
        };
        let scope = Scope::owner(&self.owner);
        let read = tokio::try_join!(
            store.console_inbox(&self.owner, LIMIT),
            store.console_tasks(&scope, &working, None, WATCHED_WORKING),
        );
        let (waiting, working) = match read {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(error = %e, "console: could not read the inbox again");
                return None;
            }
        };
        let seen = |t: &TaskSummary| -> Seen {
            let message = (t.status == TaskStatus::InputRequired)
                .then(|| t.status_message.clone())
                .flatten();
            (t.status, message)
        };
        self.known = waiting
            .iter()
            .chain(&working.tasks)
            .filter(|t| t.owner == self.owner)
            .map(|t| (t.id, seen(t)))
            .collect();
        self.watch_known().await;
        let html = inbox::items(&waiting).into_string();
        if self.sent.as_ref() == Some(&html) {
            return None;
        }
        let ids: Vec<String> = waiting.iter().map(|t| t.id.to_string()).collect();
        let event = json!({ "html": html, "ids": ids });
        self.sent = Some(html);
        Some(event)
    }

    /// Watches exactly the tasks the last re-read found.
    async fn watch_known(&mut self) {
        let gone: Vec<TaskId> = self
            .watchers
            .keys()
            .filter(|id| !self.known.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            self.watchers.remove(&id);
            self.updates.remove(&id);
        }
        let new: Vec<TaskId> = self
            .known
            .keys()
            .filter(|id| !self.watchers.contains_key(id))
            .copied()
            .collect();
        if new.is_empty() {
            return;
        }
        match self.state.hub().subscribe(&self.owner, &new).await {
            Ok(found) => {
                for w in found {
                    // From its current version: one that moved since the re-read pokes.
                    self.updates.insert(w.id, WatchStream::new(w.rx.clone()));
                    self.watchers.insert(w.id, w);
                }
            }
            // Those are tried again at the next re-read.
            Err(e) => tracing::debug!(error = %e, "console: could not watch the inbox's tasks"),
        }
    }
}

impl EventSource for LiveInbox {
    async fn next_event(&mut self) -> Option<Event> {
        loop {
            let has_watched = !self.updates.is_empty();
            tokio::select! {
                () = self.shutdown.as_mut() => return None,
                update = self.updates.next(), if has_watched => {
                    if let Some((id, snapshot)) = update
                        && self.matters(id, &snapshot)
                    {
                        self.requery.poke();
                    }
                }
                () = self.requery.due() => {
                    if let Some(event) = self.reread().await {
                        return Some(sse::frame(&event));
                    }
                }
            }
        }
    }
}
