//! A task's timeline: its history from the store (created, each claim with its worker
//! and pickup delay, lapsed leases, input rounds, releases, a cancel asked for, the end),
//! or, should that be gone, what the row itself still tells.

use maud::{Markup, html};
use mcp_tasks_store::{HistoryEvent, HistoryKind, TaskRecord};
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
                task.current_attempt(),
                task.max_attempts
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

/// One history event in words.
fn describe(e: &HistoryEvent) -> String {
    let worker = e
        .worker
        .as_deref()
        .map(|w| format!(" by worker {w}"))
        .unwrap_or_default();
    let attempt = e
        .attempt
        .map(|a| format!(" (attempt {a})"))
        .unwrap_or_default();
    let detail = e.detail.as_deref().unwrap_or_default();
    match e.kind {
        HistoryKind::Created => "created".into(),
        HistoryKind::Claimed => {
            let waited = e
                .pickup_ms
                .map(|ms| format!(", after waiting {ms} ms"))
                .unwrap_or_default();
            format!("claimed{worker}{attempt}{waited}")
        }
        HistoryKind::LeaseLapsed => {
            format!("lease lapsed{worker}{attempt}: the worker was lost; then {detail}")
        }
        HistoryKind::InputRequested => format!("input requested{worker}: {detail}"),
        HistoryKind::InputAnswered => format!("input answered: {detail} (more outstanding)"),
        HistoryKind::Resumed => format!("input answered: {detail}; runnable again"),
        HistoryKind::Released => format!("released unfinished{worker} (worker shut down)"),
        HistoryKind::CancelRequested => "cancel requested".into(),
        HistoryKind::Finished => {
            let status = e.status.map(TaskStatus::as_str).unwrap_or("finished");
            match e.end_reason {
                Some(reason) => format!("finished: {status}: {}", reason.status_message()),
                None => format!("finished: {status}{worker}{attempt}"),
            }
        }
    }
}

pub(crate) fn render(task: &TaskRecord, history: Option<&[HistoryEvent]>) -> Markup {
    let events: Vec<(OffsetDateTime, String, &str)> = match history {
        Some(history) => history
            .iter()
            .map(|e| (e.at, describe(e), e.kind.as_str()))
            .collect(),
        None => events(task)
            .into_iter()
            .map(|(at, what)| (at, what, ""))
            .collect(),
    };
    html! {
        ol #task-timeline {
            @for (at, what, kind) in events {
                li data-kind=(kind) { time datetime=(when(at)) { (when(at)) } " " (what) }
            }
        }
    }
}
