//! A task's timeline, from the columns its row has: when it was created, the attempt a
//! worker holds it for, input waiting and answered, a cancel asked for, and how it ended.

use maud::{Markup, html};
use mcp_tasks_store::TaskRecord;
use mcp_tasks_wire::TaskStatus;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub(crate) fn when(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// What the row tells, in time order.
fn events(task: &TaskRecord) -> Vec<(OffsetDateTime, String)> {
    let mut events = vec![(task.created_at, format!("created: {}", task.tool))];
    if let Some(worker) = &task.lease_owner {
        let until = task.lease_expires_at.map(when).unwrap_or_default();
        events.push((
            task.updated_at,
            format!(
                "attempt {} of {} claimed by worker {worker} (lease until {until})",
                task.attempt, task.max_attempts
            ),
        ));
    }
    if !task.input_responses.is_empty() {
        events.push((
            task.updated_at,
            format!("{} input request(s) answered", task.input_responses.len()),
        ));
    }
    if task.status == TaskStatus::InputRequired {
        let n = task.input_requests.as_ref().map_or(0, serde_json::Map::len);
        events.push((
            task.updated_at,
            format!("waiting for input ({n} request(s))"),
        ));
    }
    if let Some(at) = task.cancel_requested_at {
        events.push((at, "cancel requested".into()));
    }
    if let Some(at) = task.finished_at {
        let how = match task.end_reason {
            Some(reason) => format!("{}: {}", task.status, reason.status_message()),
            None => task.status.to_string(),
        };
        events.push((at, format!("finished: {how}")));
    }
    events.sort_by_key(|(at, _)| *at);
    events
}

pub(crate) fn render(task: &TaskRecord) -> Markup {
    html! {
        ol #task-timeline {
            @for (at, what) in events(task) {
                li { time datetime=(when(at)) { (when(at)) } " " (what) }
            }
        }
    }
}
