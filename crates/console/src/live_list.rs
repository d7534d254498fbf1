//! `GET /console/tasks/events?<the page's query>&top=<its newest row>`: the tasks list's
//! live part, as SSE.
//!
//! - **Rows.** The stream reads the page's rows again (the same keyset query, bounded by
//!   `top` so it finds the very rows the page showed) and subscribes to each with the
//!   push hub as its owner, exactly as the task page does, after checking that the
//!   viewer may see it. Each new version of a row goes out as `{"rows": [...]}` (status,
//!   attempt, message; whatever is ready at once goes in one event), the first version of
//!   each included, so what changed between the page load and the stream's start is
//!   caught up. At most [`PAGE`] rows are watched.
//! - **New tasks** (first page only): when the hub hears the workers' wake-up for the
//!   viewer's tenant (which every created task causes, coalesced, on whichever replica
//!   it was created) or a resync, at most once a second, and every [`BACKSTOP`] anyway, the stream runs the
//!   page's query for tasks newer than `top` only, and when their number changed sends
//!   `{"new": n, "more": bool, "ids": [...], "notice": "..."}`; the page shows "n new
//!   tasks — show", a link to the first page. New rows are announced, not inserted:
//!   nothing moves under the reader's pointer, the page's keyset links stay right, and
//!   the watched set stays the page's rows.
//!
//! Like every console stream it counts against the principal's open streams and ends
//! when the replica shuts down or the viewer's session ends (see `standing`; the
//! browser then reconnects, to any replica).

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::response::sse::Event;
use futures::{FutureExt, StreamExt};
use mcp_tasks_store::{ListCursor, Owner, Scope, TaskId, TaskPage, TaskSummary};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::layout;
use super::list::{self, PAGE, Params};
use super::live::Requery;
use super::session::Viewer;
use super::standing::Signed;
use mcp_tasks_server::AppState;
use mcp_tasks_server::core::StreamPermit;
use mcp_tasks_server::core::sse::{self, EventSource};
use mcp_tasks_server::core::{Snapshot, TaskSnapshot, Watcher};

/// How often the first page looks for new tasks when no wake-up said to.
pub(super) const BACKSTOP: Duration = Duration::from_secs(15);

pub(crate) async fn events(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let params = match list::parse(query.as_deref()) {
        Ok(p) => p,
        Err(why) => return layout::bad_request(StatusCode::BAD_REQUEST, &why),
    };
    let mut filter = match params.filter(OffsetDateTime::now_utc()) {
        Ok(f) => f,
        Err(why) => return layout::bad_request(StatusCode::BAD_REQUEST, &why),
    };
    let Some(permit) = state
        .streams()
        .try_open(&viewer.owner, state.config().max_streams_per_principal)
    else {
        return layout::too_many_requests();
    };
    let scope = list::scope(&viewer, &params.owner);
    // The page's own rows: on the first page, those up to `top` (newer ones are new).
    let top = params.after.is_none().then_some(params.top).flatten();
    if let Some(top) = top {
        let bound = top.created_at + time::Duration::microseconds(1);
        filter.created_before = Some(filter.created_before.map_or(bound, |b| b.min(bound)));
    }
    let first_page = params.after.is_none();
    let page = if first_page && top.is_none() {
        // The page was empty: no row to follow, everything is new.
        TaskPage {
            tasks: Vec::new(),
            next: None,
            scan_capped: false,
        }
    } else {
        match state
            .console_reads()
            .console_tasks(&scope, &filter, params.after, PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => return layout::store_error(e),
        }
    };
    let rows: Vec<&TaskSummary> = page
        .tasks
        .iter()
        .filter(|t| top.is_none_or(|c| key(t) <= (c.created_at, c.id)))
        .filter(|t| viewer.may_see(&t.owner))
        .collect();
    let mut by_owner: HashMap<&Owner, Vec<TaskId>> = HashMap::new();
    for t in &rows {
        by_owner.entry(&t.owner).or_default().push(t.id);
    }
    let mut updates = StreamMap::new();
    let mut watchers = Vec::with_capacity(rows.len());
    for (owner, ids) in by_owner {
        match state.hub().subscribe(owner, &ids).await {
            Ok(found) => {
                for w in found {
                    updates.insert(w.id, WatchStream::new(w.rx.clone()));
                    watchers.push(w);
                }
            }
            Err(e) => return layout::store_error(e),
        }
    }
    let standing = Signed::new(&headers, &viewer);
    let source = LiveList {
        requery: first_page.then(|| Requery::new(&state, &viewer.owner.tenant, BACKSTOP)),
        shutdown: Box::pin(state.shutdown().clone().cancelled_owned()),
        state: state.clone(),
        viewer,
        scope,
        params,
        top,
        updates,
        sent: HashMap::new(),
        announced: None,
        _watchers: watchers,
        _permit: permit,
    };
    sse::response(&state, source, standing)
}

/// A row's place in the list's order.
fn key(t: &TaskSummary) -> (OffsetDateTime, TaskId) {
    (t.created_at, t.id)
}

/// One viewer's stream of one page of the list.
struct LiveList {
    state: AppState,
    viewer: Viewer,
    scope: Scope,
    params: Params,
    /// The page's newest row, on the first page.
    top: Option<ListCursor>,
    updates: StreamMap<TaskId, WatchStream<Snapshot>>,
    /// The version last sent of each row.
    sent: HashMap<TaskId, i64>,
    /// How many new tasks were last announced (`None`: not looked yet).
    announced: Option<(usize, bool)>,
    /// First page only: when to look for new tasks.
    requery: Option<Requery>,
    shutdown: std::pin::Pin<Box<WaitForCancellationFutureOwned>>,
    _watchers: Vec<Watcher>,
    _permit: StreamPermit,
}

impl LiveList {
    /// A row as the page shows it, when it is newer than what was sent.
    fn row(&mut self, id: TaskId, snapshot: Snapshot) -> Option<Value> {
        let Snapshot::Task(snap) = snapshot else {
            return None;
        };
        let TaskSnapshot {
            version,
            status,
            attempt,
            max_attempts,
            detailed,
        } = &*snap;
        if self.sent.get(&id).is_some_and(|v| v >= version) {
            return None;
        }
        self.sent.insert(id, *version);
        Some(json!({
            "id": id.to_string(),
            "status": status.as_str(),
            "attempt": format!("{attempt} of {max_attempts}"),
            "message": detailed.get("statusMessage"),
        }))
    }

    /// The tasks newer than `top` that the page's filters keep: `None` when their count
    /// is what was last announced (or the store failed; the next look tries again).
    async fn look_for_new(&mut self) -> Option<Value> {
        let mut filter = self.params.filter(OffsetDateTime::now_utc()).ok()?;
        if let Some(top) = self.top {
            // Bounds the index range to what is newer: a look costs little however long
            // the list is.
            filter.created_after = Some(
                filter
                    .created_after
                    .map_or(top.created_at, |a| a.max(top.created_at)),
            );
        }
        let page = match self
            .state
            .console_reads()
            .console_tasks(&self.scope, &filter, None, PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                tracing::debug!(error = %e, "console: could not look for new tasks");
                return None;
            }
        };
        let new: Vec<String> = page
            .tasks
            .iter()
            .filter(|t| self.top.is_none_or(|c| key(t) > (c.created_at, c.id)))
            .filter(|t| self.viewer.may_see(&t.owner))
            .map(|t| t.id.to_string())
            .collect();
        let more = page.next.is_some() || page.scan_capped;
        let count = (new.len(), more);
        if self.announced == Some(count) || (self.announced.is_none() && new.is_empty()) {
            self.announced = Some(count);
            return None;
        }
        self.announced = Some(count);
        let plural = if new.len() == 1 && !more { "" } else { "s" };
        let plus = if more { "+" } else { "" };
        Some(json!({
            "new": new.len(),
            "more": more,
            "notice": format!("{}{plus} new task{plural}", new.len()),
            "ids": new,
        }))
    }
}

impl EventSource for LiveList {
    async fn next_event(&mut self) -> Option<Event> {
        loop {
            let has_rows = !self.updates.is_empty();
            let requery = &mut self.requery;
            let look = async {
                match requery.as_mut() {
                    Some(r) => r.due().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.shutdown.as_mut() => return None,
                update = self.updates.next(), if has_rows => {
                    let Some((id, snapshot)) = update else { continue };
                    let mut rows: Vec<Value> = self.row(id, snapshot).into_iter().collect();
                    // Whatever else is ready goes in the same event.
                    while let Some(Some((id, snapshot))) = self.updates.next().now_or_never() {
                        rows.extend(self.row(id, snapshot));
                    }
                    if !rows.is_empty() {
                        return Some(sse::frame(&json!({ "rows": rows })));
                    }
                }
                () = look => {
                    if let Some(notice) = self.look_for_new().await {
                        return Some(sse::frame(&notice));
                    }
                }
            }
        }
    }
}
