//! The tasks list (newest first, filtered, keyset-paged), its counts by status, and the
//! inbox.
//!
//! A page visits at most [`SCAN_LIMIT`] rows of its scope, newest first through a
//! created-order index (`tasks_owner_created` for one principal, `tasks_tenant_created`
//! for a tenant), and keeps those that match the filters; when that many were visited
//! without filling the page, the page ends early and its cursor continues the scan where
//! it stopped. So a filter that matches rarely costs pages, never a scan of the table.
//! A filter on a live status (`working`, `input_required`) reads the live tasks only
//! (`tasks_in_flight`).

use mcp_tasks_wire::TaskStatus;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use time::OffsetDateTime;

use super::{Scope, SummaryRow, TaskSummary};
use crate::sql::summary_columns;
use crate::{ConsoleReads, DbResult, ListCursor, Result};

/// Most rows one page of the list visits.
pub const SCAN_LIMIT: i64 = 5_000;
/// Most rows the counts visit (as many as a page of the list): past it they are lower
/// bounds ("5,000+").
pub const COUNT_LIMIT: i64 = 5_000;

/// What the list keeps. Every field is optional; none means no filter.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub tool: Option<String>,
    /// Created at or after.
    pub created_after: Option<OffsetDateTime>,
    /// Created before.
    pub created_before: Option<OffsetDateTime>,
    /// At least this many attempts (claims of the current run).
    pub min_attempts: Option<i32>,
}

/// One page of the list.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    pub tasks: Vec<TaskSummary>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<ListCursor>,
    /// The page stopped at [`SCAN_LIMIT`] visited rows before it was full: more may match
    /// past `next`.
    pub scan_capped: bool,
}

/// How many tasks of a scope have one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCount {
    pub status: TaskStatus,
    pub count: u64,
    /// The scope has more tasks than the counts visit ([`COUNT_LIMIT`]): at least `count`.
    pub at_least: bool,
}

/// The scope's condition on the owner; `$2` is the principal, NULL for a whole tenant.
macro_rules! scoped {
    (owner) => {
        "tenant = $1 AND principal = $2"
    };
    (tenant) => {
        "tenant = $1 AND $2::text IS NULL"
    };
}

/// Age and cursor bounds, in the index's own terms (so they bound its range scan).
macro_rules! bounds {
    () => {
        " AND created_at >= coalesce($3, '-infinity'::timestamptz)
          AND created_at < coalesce($4, 'infinity'::timestamptz)
          AND (created_at, id) < (coalesce($5, 'infinity'::timestamptz),
                                  coalesce($6, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))"
    };
}

macro_rules! filters {
    () => {
        " AND ($7::text IS NULL OR status = $7)
          AND ($8::text IS NULL OR tool = $8)
          AND ($9::int4 IS NULL OR attempt >= $9)"
    };
}

macro_rules! live_list {
    ($scope:tt) => {
        concat!(
            "SELECT false AS edge, 0::int8 AS scanned, ",
            summary_columns!(),
            " FROM tasks WHERE ",
            scoped!($scope),
            " AND finished_at IS NULL",
            bounds!(),
            filters!(),
            " ORDER BY created_at DESC, id DESC LIMIT least($10 + 1, $11)"
        )
    };
}

macro_rules! scanned_list {
    ($scope:tt) => {
        concat!(
            "WITH scanned AS MATERIALIZED (SELECT ",
            summary_columns!(),
            // For the outer selects' `coalesce(claimed_attempt, attempt)`.
            ", claimed_attempt FROM tasks WHERE ",
            scoped!($scope),
            bounds!(),
            " ORDER BY created_at DESC, id DESC LIMIT $11),
             total AS (SELECT count(*) AS n FROM scanned)
             (SELECT false AS edge, (SELECT n FROM total) AS scanned, ",
            summary_columns!(),
            " FROM scanned WHERE true",
            filters!(),
            " ORDER BY created_at DESC, id DESC LIMIT $10 + 1)
             UNION ALL
             (SELECT true, (SELECT n FROM total), ",
            summary_columns!(),
            " FROM scanned ORDER BY created_at, id LIMIT 1)"
        )
    };
}

macro_rules! counts {
    ($scope:tt) => {
        concat!(
            "WITH recent AS MATERIALIZED (
                 SELECT status FROM tasks WHERE ",
            scoped!($scope),
            " ORDER BY created_at DESC, id DESC LIMIT $3),
             live AS MATERIALIZED (
                 SELECT status FROM tasks WHERE ",
            scoped!($scope),
            " AND finished_at IS NULL LIMIT $3)
             SELECT false AS live, status, count(*) FROM recent GROUP BY status
             UNION ALL SELECT false, '', count(*) FROM recent
             UNION ALL SELECT true, status, count(*) FROM live GROUP BY status
             UNION ALL SELECT true, '', count(*) FROM live"
        )
    };
}

pub(super) const LIST_LIVE_OWNER: &str = live_list!(owner);
pub(super) const LIST_LIVE_TENANT: &str = live_list!(tenant);
pub(super) const LIST_SCAN_OWNER: &str = scanned_list!(owner);
pub(super) const LIST_SCAN_TENANT: &str = scanned_list!(tenant);
pub(super) const COUNTS_OWNER: &str = counts!(owner);
pub(super) const COUNTS_TENANT: &str = counts!(tenant);
pub(super) const INBOX: &str = concat!(
    "SELECT ",
    summary_columns!(),
    " FROM tasks WHERE tenant = $1 AND principal = $2 AND finished_at IS NULL
       AND status = 'input_required'
     ORDER BY created_at, id LIMIT $3"
);

#[derive(Debug, sqlx::FromRow)]
struct Hit {
    edge: bool,
    scanned: i64,
    #[sqlx(flatten)]
    row: SummaryRow,
}

/// The statement of a list page for this scope and filter.
pub(super) fn list_sql(scope: &Scope, filter: &TaskFilter) -> &'static str {
    let live = filter.status.is_some_and(|s| !s.is_terminal());
    match (live, scope.principal.is_some()) {
        (true, true) => LIST_LIVE_OWNER,
        (true, false) => LIST_LIVE_TENANT,
        (false, true) => LIST_SCAN_OWNER,
        (false, false) => LIST_SCAN_TENANT,
    }
}

pub(super) fn counts_sql(scope: &Scope) -> &'static str {
    if scope.principal.is_some() {
        COUNTS_OWNER
    } else {
        COUNTS_TENANT
    }
}

/// Binds `$1..$11` of a list statement.
pub(super) fn bind_list<'q, O>(
    q: QueryAs<'q, Postgres, O, PgArguments>,
    scope: &'q Scope,
    filter: &'q TaskFilter,
    after: Option<ListCursor>,
    limit: i64,
) -> QueryAs<'q, Postgres, O, PgArguments> {
    q.bind(&scope.tenant)
        .bind(scope.principal.as_deref())
        .bind(filter.created_after)
        .bind(filter.created_before)
        .bind(after.map(|c| c.created_at))
        .bind(after.map(|c| c.id.0))
        .bind(filter.status.map(TaskStatus::as_str))
        .bind(filter.tool.as_deref())
        .bind(filter.min_attempts)
        .bind(limit)
        .bind(SCAN_LIMIT)
}

impl ConsoleReads {
    /// One page of the scope's tasks, newest first, after `after` (see the module).
    #[tracing::instrument(name = "db.console.list", skip_all, err(level = "debug"))]
    pub async fn console_tasks(
        &self,
        scope: &Scope,
        filter: &TaskFilter,
        after: Option<ListCursor>,
        limit: i64,
    ) -> Result<TaskPage> {
        let limit = limit.clamp(1, 500);
        let sql = list_sql(scope, filter);
        let hits: Vec<Hit> = bind_list(sqlx::query_as(sql), scope, filter, after, limit)
            .fetch_all(self.db.pool())
            .await
            .db()?;
        let scanned = hits.first().map_or(0, |h| h.scanned);
        let mut edge = None;
        let mut tasks = Vec::new();
        for hit in hits {
            let summary: TaskSummary = hit.row.try_into()?;
            if hit.edge {
                edge = Some(summary);
            } else {
                tasks.push(summary);
            }
        }
        // (The halves of a UNION ALL come in no promised order.)
        tasks.sort_by_key(|t| std::cmp::Reverse((t.created_at, t.id)));
        let cursor = |t: &TaskSummary| ListCursor {
            created_at: t.created_at,
            id: t.id,
        };
        if tasks.len() > limit as usize {
            tasks.truncate(limit as usize);
            let next = tasks.last().map(cursor);
            return Ok(TaskPage {
                tasks,
                next,
                scan_capped: false,
            });
        }
        // Not full: the scan ended (last page), or it stopped at its limit.
        let capped = scanned >= SCAN_LIMIT;
        Ok(TaskPage {
            tasks,
            next: if capped {
                edge.as_ref().map(cursor)
            } else {
                None
            },
            scan_capped: capped,
        })
    }

    /// Tasks of the scope by status: exact while the scope holds fewer than
    /// [`COUNT_LIMIT`] tasks (live ones: fewer than that many live); past that, the
    /// finished statuses are counted among the newest [`COUNT_LIMIT`] and marked "at
    /// least". Every status is listed, zeros too.
    #[tracing::instrument(name = "db.console.counts", skip_all, err(level = "debug"))]
    pub async fn console_status_counts(&self, scope: &Scope) -> Result<Vec<StatusCount>> {
        let rows: Vec<(bool, String, i64)> = sqlx::query_as(counts_sql(scope))
            .bind(&scope.tenant)
            .bind(scope.principal.as_deref())
            .bind(COUNT_LIMIT)
            .fetch_all(self.db.pool())
            .await
            .db()?;
        let total = |live: bool| {
            rows.iter()
                .find(|(l, s, _)| *l == live && s.is_empty())
                .map_or(0, |r| r.2)
        };
        let (live_total, recent_total) = (total(true), total(false));
        let statuses = [
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ];
        Ok(statuses
            .into_iter()
            .map(|status| {
                let live = !status.is_terminal();
                let count = rows
                    .iter()
                    .find(|(l, s, _)| *l == live && s == status.as_str())
                    .map_or(0, |r| r.2);
                let seen = if live { live_total } else { recent_total };
                StatusCount {
                    status,
                    count: u64::try_from(count).unwrap_or(0),
                    at_least: seen >= COUNT_LIMIT,
                }
            })
            .collect())
    }

    /// The principal's tasks that wait for input, oldest first (at most `limit`).
    #[tracing::instrument(name = "db.console.inbox", skip_all, err(level = "debug"))]
    pub async fn console_inbox(
        &self,
        owner: &crate::Owner,
        limit: i64,
    ) -> Result<Vec<TaskSummary>> {
        let rows: Vec<SummaryRow> = sqlx::query_as(INBOX)
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .bind(limit.clamp(1, 1000))
            .fetch_all(self.db.pool())
            .await
            .db()?;
        rows.into_iter().map(TryInto::try_into).collect()
    }
}
