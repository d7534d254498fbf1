//! `GET /console/tasks/{id}`: one task, as its viewer may see it. Status, message,
//! pending input, result, attempt and timeline are the live part (see `live`); the rest
//! (tool, owner, arguments, trace id) never changes.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, PreEscaped, html};
use mcp_tasks_store::{HistoryEvent, Lookup, TaskId, TaskRecord};
use serde_json::{Map, Value};

use super::session::Viewer;
use super::{layout, schema_form, script, timeline};
use mcp_tasks_server::AppState;

/// The task `raw` names, when `viewer` may see it; otherwise the one 404 page, the same
/// for a malformed id, an unknown one, another principal's and another tenant's.
pub(crate) async fn load(
    state: &AppState,
    viewer: &Viewer,
    raw: &str,
) -> Result<TaskRecord, Response> {
    let Some(id) = TaskId::parse(raw) else {
        return Err(layout::not_found(viewer));
    };
    let store = state.store();
    let found = if viewer.is_admin {
        state
            .console_reads()
            .get_task_in_tenant(&viewer.owner.tenant, id)
            .await
            .map_err(layout::store_error)?
    } else {
        match store.get_task(&viewer.owner, id).await {
            Ok(Lookup::Found(task)) => Some(task),
            Ok(Lookup::Expired | Lookup::NotFound) => None,
            Err(e) => return Err(layout::store_error(e)),
        }
    };
    match found {
        Some(task) if viewer.can_see(&task) => Ok(task),
        _ => Err(layout::not_found(viewer)),
    }
}

pub(crate) async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Response {
    let task = match load(&state, &viewer, &id).await {
        Ok(task) => task,
        Err(response) => return response,
    };
    // The task's history (every claim, lapse and input round), read for its owner.
    let history = match state
        .console_reads()
        .task_history(&task.owner, task.id)
        .await
    {
        Ok(Lookup::Found(events)) => Some(events),
        Ok(Lookup::Expired | Lookup::NotFound) => None,
        Err(e) => return layout::store_error(e),
    };
    let title = format!("Task {}", task.id);
    layout::respond(
        StatusCode::OK,
        layout::page(&viewer, &title, body(&viewer, &task, history.as_deref())),
    )
}

fn body(viewer: &Viewer, task: &TaskRecord, history: Option<&[HistoryEvent]>) -> Markup {
    let owner = viewer.is_owner(task);
    let detailed = task.view().detailed();
    let id = task.id.to_string();
    html! {
        h1 { "Task " code #task-id { (id) } }
        table #task-summary {
            tr { th { "Status" } td { span .status #task-status { (task.status.as_str()) } } }
            tr { th { "Message" } td { span #task-status-message { (task.status_message.as_deref().unwrap_or_default()) } } }
            tr { th { "Tool" } td #task-tool { (task.tool) } }
            tr { th { "Owner" } td #task-owner { (task.owner.principal) } }
            tr { th { "Created" } td { (timeline::when(task.created_at)) } }
            tr { th { "Attempt" } td #task-attempt { (task.current_attempt()) " of " (task.max_attempts) } }
            tr { th { "Trace id" } td { code #task-trace-id { (trace_id(task).unwrap_or_default()) } } }
        }
        @if !task.status.is_terminal() && (owner || viewer.is_admin) {
            form #task-cancel method="post" action={ "/console/tasks/" (id) "/cancel" } {
                input type="hidden" name="csrf" value=(viewer.csrf);
                button type="submit" { "Cancel task" }
            }
        }
        h2 { "Input" }
        (inputs(viewer, owner, &id, &detailed))
        @if owner {
            h2 { "Arguments" }
            pre #task-arguments { (pretty(&task.arguments)) }
            h2 { "Result" }
            (result(&detailed))
        }
        h2 { "Timeline" }
        (timeline::render(task, history))
        script { (PreEscaped(script::SCRIPT)) }
    }
}

/// The task's trace id (from the W3C `traceparent` it was created under).
fn trace_id(task: &TaskRecord) -> Option<&str> {
    let traceparent = task.trace_context.as_ref()?.get("traceparent")?.as_str()?;
    traceparent.split('-').nth(1)
}

/// The pending input requests: for the owner a form each, for an admin only how many.
/// `data-keys` lists the keys, so a live update replaces the forms only when they change
/// (never under someone typing).
pub(crate) fn inputs(
    viewer: &Viewer,
    owner: bool,
    id: &str,
    detailed: &Map<String, Value>,
) -> Markup {
    let requests = detailed
        .get("inputRequests")
        .and_then(Value::as_object)
        .filter(|r| !r.is_empty());
    let keys: Vec<&str> = requests
        .map(|r| r.keys().map(String::as_str).collect())
        .unwrap_or_default();
    html! {
        div #task-inputs data-keys=(keys.join(" ")) {
            @match requests {
                None => p { "No input is waiting." },
                Some(requests) if owner => {
                    @for (key, request) in requests {
                        (schema_form::render(id, key, request, &viewer.csrf))
                    }
                }
                Some(requests) => p { (requests.len()) " input request(s) wait for the task's owner." },
            }
        }
    }
}

/// The result (or the error) once the task has one.
pub(crate) fn result(detailed: &Map<String, Value>) -> Markup {
    let shown = detailed.get("result").or_else(|| detailed.get("error"));
    html! {
        pre #task-result {
            @match shown {
                Some(value) => (pretty(value)),
                None => "No result yet.",
            }
        }
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}
