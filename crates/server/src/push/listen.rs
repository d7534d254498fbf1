//! `subscriptions/listen`: a POST whose response is an SSE stream scoped to that request.
//!
//! The stream sends the acknowledgement first (what the server agreed to: the caller's own
//! task ids, nothing else), then the current snapshot of each task, then one
//! `notifications/tasks` per change, each equal to what `tasks/get` shows at that moment.
//! It ends with the listen result when every task is terminal, when the replica shuts
//! down, and when the shell ends it (the caller's token expired or is refused now, or the
//! stream reached its maximum lifetime: see `sse`), so the client listens again with
//! what it holds then. A client that cannot keep up sees only the latest snapshot of
//! each task.

use std::collections::{HashMap, HashSet, VecDeque};

use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use futures::stream::{BoxStream, SelectAll, StreamExt};
use mcp_tasks_store::{Owner, TaskId};
use mcp_tasks_wire::jsonrpc::Response as RpcResponse;
use mcp_tasks_wire::listen as wire_listen;
use mcp_tasks_wire::{ErrorObject, RequestId, RequestMeta};
use serde_json::{Map, Value};
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::AppState;
use crate::error::RpcError;
use crate::push::hub::{Snapshot, Watcher};
use crate::push::streams::{self, StreamPermit};
use crate::sse::{self, Bearer, End, EventSource, frame};

pub(crate) async fn listen(
    state: &AppState,
    owner: &Owner,
    headers: &HeaderMap,
    meta: &RequestMeta,
    id: &RequestId,
    params: &Map<String, Value>,
) -> Result<Response, RpcError> {
    let filter = match params.get("notifications") {
        Some(Value::Object(filter)) => filter,
        Some(_) => {
            return Err(RpcError::invalid_params(
                "params.notifications must be an object",
            ));
        }
        None => return Err(RpcError::invalid_params("params.notifications is required")),
    };
    let requested: Option<&Vec<Value>> = match filter.get("taskIds") {
        None | Some(Value::Null) => None,
        Some(Value::Array(ids)) => Some(ids),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "params.notifications.taskIds must be an array of strings",
            ));
        }
    };
    if requested.is_some() && !meta.client_capabilities.declares_tasks() {
        return Err(RpcError::method(ErrorObject::tasks_extension_required()));
    }
    let limit = state.config().max_listen_tasks;
    if requested.is_some_and(|ids| ids.len() > limit) {
        return Err(RpcError::invalid_params(format!(
            "params.notifications.taskIds lists more than {limit} tasks; open several streams or list fewer"
        )));
    }
    let permit = streams::permit(
        state.streams(),
        owner,
        state.config().max_streams_per_principal,
    )?;

    // Malformed ids are dropped like unknown ones: the ack lists what was accepted.
    let mut seen = HashSet::new();
    let ids: Vec<TaskId> = requested
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(TaskId::parse)
        .filter(|id| seen.insert(*id))
        .collect();
    let watchers = state.hub().subscribe(owner, &ids).await?;
    tracing::info!(
        requested = ids.len(),
        accepted = watchers.len(),
        "listen stream opened"
    );

    let sub_id = id.to_value();
    let agreed: Option<Vec<String>> =
        requested.map(|_| watchers.iter().map(|w| w.id.to_string()).collect());
    let ack = wire_listen::acknowledgement(&sub_id, agreed.as_deref());
    let mut result = wire_listen::listen_result(&sub_id);
    state.config().server_info.stamp(&mut result, "complete");
    let end = RpcResponse::result(id.clone(), Value::Object(result)).to_json();

    let body = ListenStream::new(watchers, sub_id, ack, end, state.shutdown().clone(), permit);
    Ok(sse::response(state, body, Bearer::new(headers, owner)))
}

struct ListenStream {
    sub_id: Value,
    pending: VecDeque<Event>,
    updates: SelectAll<BoxStream<'static, (TaskId, Snapshot)>>,
    last_sent: HashMap<TaskId, i64>,
    finished_tasks: HashSet<TaskId>,
    total: usize,
    end: Option<Value>,
    shutdown: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    _guards: Vec<Watcher>,
    _permit: StreamPermit,
}

impl ListenStream {
    fn new(
        watchers: Vec<Watcher>,
        sub_id: Value,
        ack: Value,
        end: Value,
        shutdown: CancellationToken,
        permit: StreamPermit,
    ) -> Self {
        let mut updates = SelectAll::new();
        let mut guards = Vec::with_capacity(watchers.len());
        for w in watchers {
            let id = w.id;
            updates.push(WatchStream::new(w.rx.clone()).map(move |s| (id, s)).boxed());
            guards.push(w);
        }
        Self {
            sub_id,
            pending: VecDeque::from([frame(&ack)]),
            total: guards.len(),
            updates,
            last_sent: HashMap::new(),
            finished_tasks: HashSet::new(),
            end: Some(end),
            shutdown: Box::pin(shutdown.cancelled_owned()),
            _guards: guards,
            _permit: permit,
        }
    }
}

impl EventSource for ListenStream {
    /// The graceful close, as when every task is terminal.
    fn closing(&mut self, _end: End) -> Option<Event> {
        self.end.take().map(|end| frame(&end))
    }

    async fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            let end = self.end.take()?;
            if self.finished_tasks.len() >= self.total {
                return Some(frame(&end));
            }
            self.end = Some(end);
            tokio::select! {
                update = self.updates.next() => match update {
                    Some((id, snapshot)) => self.on_update(id, snapshot),
                    // Every channel closed: nothing more can come.
                    None => self.total = self.finished_tasks.len(),
                },
                () = self.shutdown.as_mut() => {
                    self.total = self.finished_tasks.len();
                }
            }
        }
    }
}

impl ListenStream {
    fn on_update(&mut self, id: TaskId, snapshot: Snapshot) {
        match snapshot {
            Snapshot::Loading => {}
            Snapshot::Gone => {
                self.finished_tasks.insert(id);
            }
            Snapshot::Task(task) => {
                let last = self.last_sent.get(&id).copied().unwrap_or(0);
                if task.version <= last {
                    return;
                }
                self.last_sent.insert(id, task.version);
                self.pending
                    .push_back(frame(&wire_listen::task_notification(
                        &task.detailed,
                        &self.sub_id,
                    )));
                if task.status.is_terminal() {
                    self.finished_tasks.insert(id);
                }
            }
        }
    }
}
