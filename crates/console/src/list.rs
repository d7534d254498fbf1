//! `GET /console/tasks`: the viewer's tasks (an admin's: the whole tenant's), newest
//! first, filtered by the GET parameters of a plain form (`status`, `tool`, `age`,
//! `attempts`, `owner`) and paged by keyset (`after`), with counts by status. Nothing
//! here needs JavaScript; with it, `live_list` keeps the rows' status, attempt and
//! message current and tells of new tasks (`top` is for that stream: the newest row the
//! page showed).
//!
//! The store bounds every page (see `mcp_tasks_store::console`): a rare filter may give a
//! short page that says how far it looked, and its "next" link looks on from there.

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use maud::{Markup, PreEscaped, html};
use mcp_tasks_store::{
    ListCursor, SCAN_LIMIT, Scope, StatusCount, TaskFilter, TaskId, TaskPage, TaskSummary,
};
use mcp_tasks_wire::TaskStatus;
use time::OffsetDateTime;

use super::session::Viewer;
use super::{layout, script, timeline};
use mcp_tasks_server::AppState;

use crate::Console;

/// Rows per page.
pub(super) const PAGE: i64 = 50;
/// Longest filter value read (a tool name, an owner); longer ones are refused.
const MAX_PARAM: usize = 200;

pub(super) fn routes() -> Router<Console> {
    Router::new().route("/console/tasks", get(page))
}

/// The form's fields as given (echoed back into the form), and what they mean.
#[derive(Debug, Clone, Default)]
pub(super) struct Params {
    status: String,
    tool: String,
    age: String,
    attempts: String,
    pub(super) owner: String,
    pub(super) after: Option<ListCursor>,
    /// The events stream's: the page's newest row (none: the page was empty).
    pub(super) top: Option<ListCursor>,
}

/// Reads the query string; `Err` names the field that makes no sense.
pub(super) fn parse(query: Option<&str>) -> Result<Params, String> {
    let mut p = Params::default();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if value.len() > MAX_PARAM {
            return Err(format!("{key} is too long"));
        }
        let value = value.trim().to_owned();
        match key.as_ref() {
            "status" => p.status = value,
            "tool" => p.tool = value,
            "age" => p.age = value,
            "attempts" => p.attempts = value,
            "owner" => p.owner = value,
            "after" if !value.is_empty() => {
                p.after = Some(parse_cursor(&value).ok_or("after is not a page cursor")?);
            }
            "top" if !value.is_empty() => {
                p.top = Some(parse_cursor(&value).ok_or("top is not a page cursor")?);
            }
            _ => {}
        }
    }
    Ok(p)
}

/// `<unix microseconds>_<task id>`.
fn cursor_text(c: &ListCursor) -> String {
    format!("{}_{}", c.created_at.unix_timestamp_nanos() / 1000, c.id)
}

fn parse_cursor(s: &str) -> Option<ListCursor> {
    let (micros, id) = s.split_once('_')?;
    let micros: i128 = micros.parse().ok()?;
    Some(ListCursor {
        created_at: OffsetDateTime::from_unix_timestamp_nanos(micros.checked_mul(1000)?).ok()?,
        id: TaskId::parse(id)?,
    })
}

/// `15m`, `2h`, `7d`, `30s` as seconds.
fn duration_secs(s: &str) -> Option<i64> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().ok()?;
    let unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(unit)
}

impl Params {
    /// The store's filter; `age` is `<15m` (created within the last 15 minutes; a bare
    /// `15m` too) or `>1h` (created more than an hour ago).
    pub(super) fn filter(&self, now: OffsetDateTime) -> Result<TaskFilter, String> {
        let status = match self.status.as_str() {
            "" => None,
            s => Some(
                s.parse::<TaskStatus>()
                    .map_err(|_| "status is not a task status".to_owned())?,
            ),
        };
        let attempts = match self.attempts.as_str() {
            "" => None,
            s => Some(
                s.parse::<i32>()
                    .ok()
                    .filter(|n| (0..=1000).contains(n))
                    .ok_or("attempts is not a number from 0 to 1000")?,
            ),
        };
        let (mut after, mut before) = (None, None);
        if !self.age.is_empty() {
            let (older, spec) = match self.age.strip_prefix('>') {
                Some(rest) => (true, rest),
                None => (false, self.age.strip_prefix('<').unwrap_or(&self.age)),
            };
            let secs = duration_secs(spec).ok_or("age is not like <15m, <24h or >7d")?;
            let at = now
                .checked_sub(time::Duration::seconds(secs))
                .ok_or("age is too long")?;
            if older {
                before = Some(at);
            } else {
                after = Some(at);
            }
        }
        Ok(TaskFilter {
            status,
            tool: (!self.tool.is_empty()).then(|| self.tool.clone()),
            created_after: after,
            created_before: before,
            min_attempts: attempts,
        })
    }

    /// This query string with `after` replaced.
    pub(super) fn with_after(&self, after: Option<&ListCursor>) -> String {
        self.query(after, None)
    }

    /// The URL of this page's events stream, whose newest row is `top`.
    fn events_url(&self, top: Option<&ListCursor>) -> String {
        format!(
            "/console/tasks/events?{}",
            self.query(self.after.as_ref(), top)
        )
    }

    fn query(&self, after: Option<&ListCursor>, top: Option<&ListCursor>) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("status", &self.status),
            ("tool", &self.tool),
            ("age", &self.age),
            ("attempts", &self.attempts),
            ("owner", &self.owner),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        if let Some(c) = after {
            q.append_pair("after", &cursor_text(c));
        }
        if let Some(c) = top {
            q.append_pair("top", &cursor_text(c));
        }
        q.finish()
    }
}

/// Whose tasks the viewer sees: its own; an admin the tenant's, or one owner's of it.
pub(super) fn scope(viewer: &Viewer, owner: &str) -> Scope {
    if viewer.is_admin {
        Scope {
            tenant: viewer.owner.tenant.clone(),
            principal: (!owner.is_empty()).then(|| owner.to_owned()),
        }
    } else {
        Scope::owner(&viewer.owner)
    }
}

async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(query): RawQuery,
) -> Response {
    let params = match parse(query.as_deref()) {
        Ok(p) => p,
        Err(why) => return layout::bad_request(StatusCode::BAD_REQUEST, &why),
    };
    let filter = match params.filter(OffsetDateTime::now_utc()) {
        Ok(f) => f,
        Err(why) => return layout::bad_request(StatusCode::BAD_REQUEST, &why),
    };
    let scope = scope(&viewer, &params.owner);
    let store = state.console_reads();
    let (page, counts) = match tokio::try_join!(
        store.console_tasks(&scope, &filter, params.after, PAGE),
        store.console_status_counts(&scope),
    ) {
        Ok(found) => found,
        Err(e) => return layout::store_error(e),
    };
    layout::respond(
        StatusCode::OK,
        layout::page(&viewer, "Tasks", body(&viewer, &params, &page, &counts)),
    )
}

fn body(viewer: &Viewer, params: &Params, page: &TaskPage, counts: &[StatusCount]) -> Markup {
    let top = page.tasks.first().map(|t| ListCursor {
        created_at: t.created_at,
        id: t.id,
    });
    html! {
        h1 { "Tasks" }
        (status_counts(params, counts))
        (filter_form(viewer, params))
        // Filled in and shown by the script when new tasks match (see `live_list`).
        p #new-tasks hidden data-events=(params.events_url(top.as_ref())) {
            span .count {} " — "
            a href={ "/console/tasks?" (params.with_after(None)) } { "show" }
        }
        @if page.tasks.is_empty() {
            p #no-tasks { "No tasks match." }
        } @else {
            (table(viewer, &page.tasks))
        }
        @if page.scan_capped {
            p #scan-note { "This page looked at " (SCAN_LIMIT) " tasks; older ones may match too." }
        }
        @if let Some(next) = &page.next {
            p { a #next-page href={ "/console/tasks?" (params.with_after(Some(next))) } { "Older tasks →" } }
        }
        @if params.after.is_some() {
            p { a #first-page href={ "/console/tasks?" (params.with_after(None)) } { "← Newest" } }
        }
        script { (PreEscaped(script::LIST)) }
    }
}

/// A count, `5,000+` when it is a lower bound.
pub(super) fn count_text(n: u64, at_least: bool) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if at_least {
        out.push('+');
    }
    out
}

fn status_counts(params: &Params, counts: &[StatusCount]) -> Markup {
    html! {
        ul #status-counts {
            @for c in counts {
                @let link = Params { status: c.status.as_str().to_owned(), after: None, ..params.clone() };
                li data-status=(c.status.as_str()) {
                    a href={ "/console/tasks?" (link.with_after(None)) } { (c.status.as_str()) }
                    ": " span .count { (count_text(c.count, c.at_least)) }
                }
            }
        }
    }
}

const AGES: [(&str, &str); 7] = [
    ("", "any age"),
    ("<15m", "last 15 minutes"),
    ("<1h", "last hour"),
    ("<24h", "last 24 hours"),
    (">1h", "older than an hour"),
    (">24h", "older than a day"),
    (">7d", "older than a week"),
];

fn filter_form(viewer: &Viewer, p: &Params) -> Markup {
    let statuses = [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ];
    let custom_age = !AGES.iter().any(|(v, _)| *v == p.age);
    html! {
        form #task-filter method="get" action="/console/tasks" {
            label { "Status "
                select name="status" {
                    option value="" selected[p.status.is_empty()] { "any" }
                    @for s in statuses {
                        option value=(s) selected[p.status == s] { (s) }
                    }
                }
            }
            label { "Tool " input type="text" name="tool" value=(p.tool); }
            label { "Age "
                select name="age" {
                    @for (value, text) in AGES {
                        option value=(value) selected[p.age == value] { (text) }
                    }
                    @if custom_age {
                        option value=(p.age) selected { (p.age) }
                    }
                }
            }
            label { "Attempts at least " input type="number" min="0" name="attempts" value=(p.attempts); }
            @if viewer.is_admin {
                label { "Owner " input type="text" name="owner" value=(p.owner) placeholder="any principal"; }
            }
            button type="submit" { "Filter" }
        }
    }
}

fn table(viewer: &Viewer, tasks: &[TaskSummary]) -> Markup {
    html! {
        table #tasks {
            thead { tr {
                th { "Task" } th { "Status" } th { "Tool" }
                @if viewer.is_admin { th { "Owner" } }
                th { "Attempt" } th { "Created" } th { "Message" }
            } }
            tbody {
                @for t in tasks {
                    tr data-task-id=(t.id) data-status=(t.status.as_str()) {
                        td { a href={ "/console/tasks/" (t.id) } { code { (t.id) } } }
                        td .status { (t.status.as_str()) }
                        td { (t.tool) }
                        @if viewer.is_admin { td { (t.owner.principal) } }
                        td .attempt { (t.attempt) " of " (t.max_attempts) }
                        td { time datetime=(timeline::when(t.created_at)) { (timeline::when(t.created_at)) } }
                        td .message { (t.status_message.as_deref().unwrap_or_default()) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_read_from_the_query_and_refuse_nonsense() {
        let now = OffsetDateTime::now_utc();
        let p = parse(Some("status=completed&tool=x&age=%3C1h&attempts=2")).expect("parses");
        let f = p.filter(now).expect("filter");
        assert_eq!(f.status, Some(TaskStatus::Completed));
        assert_eq!(f.tool.as_deref(), Some("x"));
        assert_eq!(f.created_after, Some(now - time::Duration::hours(1)));
        assert_eq!(f.min_attempts, Some(2));
        let older = parse(Some("age=%3E7d"))
            .expect("parses")
            .filter(now)
            .expect("filter");
        assert_eq!(older.created_before, Some(now - time::Duration::days(7)));
        for bad in ["status=done", "age=soon", "attempts=-1", "attempts=x"] {
            assert!(
                parse(Some(bad)).expect("parses").filter(now).is_err(),
                "{bad}"
            );
        }
        assert!(parse(Some("after=junk")).is_err());
        let cursor = ListCursor {
            created_at: now,
            id: TaskId::random(),
        };
        let back = parse_cursor(&cursor_text(&cursor)).expect("round trip");
        assert_eq!(back.id, cursor.id);
        assert_eq!(
            back.created_at.unix_timestamp_nanos() / 1000,
            now.unix_timestamp_nanos() / 1000
        );
        assert_eq!(count_text(1_234_567, true), "1,234,567+");
        assert_eq!(count_text(12, false), "12");
    }
}
