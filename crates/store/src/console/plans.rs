//! The plans of the console's statements, for the tests and `mcp-tasks bench console`
//! that check each page reads through indexes (a plan is the planner's choice at the
//! table's current size and statistics, with the parameters a page would send).

use mcp_tasks_wire::TaskStatus;
use sqlx::Postgres;
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;

use super::health::{LAPSES, QUEUE, RUNNING, percentiles_sql};
use super::history::{EVENTS, FACTS};
use super::list::{COUNT_LIMIT, INBOX, bind_list, counts_sql, list_sql};
use super::{Scope, TaskFilter};
use crate::{ConsoleReads, DbResult, Result};

/// One statement's plan (`EXPLAIN`, text format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPlan {
    /// Which page and statement: `list`, `list status=completed`, `health queue`, ...
    pub name: String,
    pub plan: String,
}

impl QueryPlan {
    /// Whether the plan reads `tasks` (or `task_events`) from end to end.
    pub fn scans_table(&self) -> bool {
        self.plan.contains("Seq Scan on tasks") || self.plan.contains("Seq Scan on task_events")
    }

    /// The indexes the plan reads.
    pub fn indexes(&self) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        for line in self.plan.lines().filter(|l| l.contains("Index")) {
            let rest = line
                .split(" using ")
                .nth(1)
                .or_else(|| line.split("Bitmap Index Scan on ").nth(1));
            if let Some(name) = rest.and_then(|r| r.split_whitespace().next()) {
                found.push(name.to_owned());
            }
        }
        found.sort();
        found.dedup();
        found
    }
}

async fn explain<'q>(
    store: &ConsoleReads,
    name: &str,
    q: QueryAs<'q, Postgres, (String,), PgArguments>,
) -> Result<QueryPlan> {
    let lines: Vec<(String,)> = q.fetch_all(store.db.pool()).await.db()?;
    Ok(QueryPlan {
        name: name.to_owned(),
        plan: lines
            .into_iter()
            .map(|(l,)| l)
            .collect::<Vec<_>>()
            .join("\n"),
    })
}

/// `EXPLAIN` of one of this module's own statements (constants, no input in them).
fn explained(sql: &str) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(format!("EXPLAIN {sql}"))
}

impl ConsoleReads {
    /// The plans of every statement of the list, inbox, health and task pages for this
    /// scope (the inbox and the history as `principal`'s, the scope's or a sample one).
    pub async fn console_plans(&self, scope: &Scope, tool: &str) -> Result<Vec<QueryPlan>> {
        let mut plans = Vec::new();
        let filters = [
            ("list", TaskFilter::default()),
            (
                "list status=completed",
                TaskFilter {
                    status: Some(TaskStatus::Completed),
                    ..TaskFilter::default()
                },
            ),
            (
                "list status=input_required",
                TaskFilter {
                    status: Some(TaskStatus::InputRequired),
                    ..TaskFilter::default()
                },
            ),
            (
                "list tool+attempts",
                TaskFilter {
                    tool: Some(tool.to_owned()),
                    min_attempts: Some(2),
                    ..TaskFilter::default()
                },
            ),
        ];
        for (name, filter) in &filters {
            let sql = explained(list_sql(scope, filter));
            let q = bind_list(sqlx::query_as(sql), scope, filter, None, 50);
            plans.push(explain(self, name, q).await?);
        }
        let sql = explained(counts_sql(scope));
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(scope.principal.as_deref())
            .bind(COUNT_LIMIT);
        plans.push(explain(self, "list counts", q).await?);

        let principal = scope.principal.clone().unwrap_or_default();
        let sql = explained(INBOX);
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(&principal)
            .bind(200_i64);
        plans.push(explain(self, "inbox", q).await?);

        let id = uuid::Uuid::nil();
        let sql = explained(FACTS);
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(&principal)
            .bind(id);
        plans.push(explain(self, "task page history", q).await?);
        if scope.principal.is_none() {
            // An admin opens a task of its tenant without knowing whose it is.
            let sql = explained(crate::tenant_read::GET_IN_TENANT);
            let q = sqlx::query_as(sql).bind(&scope.tenant).bind(id);
            plans.push(explain(self, "task page (admin)", q).await?);
        }
        let sql = explained(EVENTS);
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(id)
            .bind(500_i64);
        plans.push(explain(self, "task history", q).await?);

        let p = scope.principal.as_deref();
        let sql = explained(QUEUE);
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(p)
            .bind(10_000_i64);
        plans.push(explain(self, "health queue", q).await?);
        let sql = explained(percentiles_sql(scope));
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(p)
            .bind(300_000_i64)
            .bind(12_i32)
            .bind(super::health::SAMPLES_PER_BUCKET);
        plans.push(explain(self, "health percentiles", q).await?);
        let sql = explained(LAPSES);
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(p)
            .bind(3_600_000_i64);
        plans.push(explain(self, "health lapses", q).await?);
        let sql = explained(RUNNING);
        let q = sqlx::query_as(sql)
            .bind(&scope.tenant)
            .bind(p)
            .bind(1_000_i64);
        plans.push(explain(self, "health workers", q).await?);
        Ok(plans)
    }
}
