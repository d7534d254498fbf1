//! What the metrics read: cheap aggregates over live work, never a scan of finished
//! tasks (which can be millions).

use std::time::Duration;

use crate::claim::{ClaimLimits, HeldBack};
use crate::console::Scope;
use crate::{ConsoleReads, DbResult, QueryPlan, Result, SharedStore};

/// Run as they are, not checked by `query_as!`: their plans are also read with `EXPLAIN`
/// ([`SharedStore::task_stats_plans`]), which needs the text.
///
/// The counts of live work, each through a partial index that holds live rows only, so
/// the statement costs as much as there is live work, however many finished tasks the
/// table holds. Every predicate repeats its index's own (`lease_owner IS NULL` and
/// `finished_at IS NULL` add nothing by the table's CHECKs), or the planner cannot use
/// the index: written without them this read the whole table, 471 ms at 323k rows, on
/// every scrape of every replica.
const LIVE_COUNTS: &str = r"
    SELECT q.depth, q.oldest_ms, f.working, f.input_required
    FROM (
        -- tasks_queued: working and unleased (a claim clears run_after).
        SELECT count(*) AS depth,
               COALESCE(EXTRACT(EPOCH FROM now() - min(run_after)) * 1000, 0)::float8
                   AS oldest_ms
        FROM tasks
        WHERE status = 'working' AND lease_owner IS NULL AND run_after <= now()
    ) q, (
        -- tasks_in_flight: unfinished.
        SELECT count(*) FILTER (WHERE status = 'working') AS working,
               count(*) FILTER (WHERE status = 'input_required') AS input_required
        FROM tasks
        WHERE finished_at IS NULL
    ) f
";

/// Finished tasks by status, as the planner estimates them: free, and never a scan.
const ESTIMATES: &str = r"
    SELECT v.status, (v.freq * c.reltuples)::float8
    FROM pg_class c
    JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = 'tasks'
        AND s.attname = 'status'
    CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs)
        AS v(status, freq)
    WHERE c.oid = 'tasks'::regclass AND c.reltuples >= 0
      AND v.status IN ('completed', 'failed', 'cancelled')
";

/// The claimable queue per tenant, of at most `$1` queued tasks, oldest first (through
/// `tasks_queued`): what a scrape may cost is bounded however long the queue.
const QUEUE_BY_TENANT: &str = r"
    SELECT tenant, count(*),
           (EXTRACT(EPOCH FROM now() - min(run_after)) * 1000)::float8
    FROM (
        SELECT tenant, run_after
        FROM tasks
        WHERE status = 'working' AND lease_owner IS NULL AND run_after <= now()
        ORDER BY run_after
        LIMIT $1
    ) q
    GROUP BY tenant
";

/// One tenant's claimable queue.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantQueue {
    pub tenant: String,
    /// Claimable tasks (of those read: see [`SharedStore::queue_by_tenant`]).
    pub depth: i64,
    /// How long its oldest claimable task has been claimable.
    pub oldest_age: Duration,
}

/// Connections of the pool, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Handed out to a statement.
    pub active: u32,
    pub idle: u32,
    pub max: u32,
}

/// Tasks by status and the claimable queue.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStats {
    /// `working` and `input_required` counted exactly (through `tasks_in_flight`, which
    /// holds live tasks only); `completed`, `failed` and `cancelled` as the planner
    /// estimates them (`pg_stats` and `reltuples`, kept by autovacuum's ANALYZE), absent
    /// while the table has never been analyzed.
    pub by_status: Vec<(String, f64)>,
    /// Tasks a worker could claim now (`tasks_queued`: working, no lease, runnable now).
    pub queue_depth: i64,
    /// How long the oldest of them has been claimable; zero when there is none.
    pub queue_oldest_age: Duration,
}

impl SharedStore {
    pub fn pool_stats(&self) -> PoolStats {
        let open = self.db.pool().size();
        let idle = u32::try_from(self.db.pool().num_idle()).unwrap_or(u32::MAX);
        PoolStats {
            active: open.saturating_sub(idle),
            idle,
            max: self.max_connections(),
        }
    }

    #[tracing::instrument(name = "db.stats.tasks", skip_all, err(level = "debug"))]
    pub async fn task_stats(&self) -> Result<TaskStats> {
        let (queue_depth, oldest_ms, working, input_required): (i64, f64, i64, i64) =
            sqlx::query_as(LIVE_COUNTS)
                .fetch_one(self.db.pool())
                .await
                .db()?;
        let mut by_status = vec![
            ("working".to_owned(), working as f64),
            ("input_required".to_owned(), input_required as f64),
        ];
        let estimated: Vec<(String, f64)> = sqlx::query_as(ESTIMATES)
            .fetch_all(self.db.pool())
            .await
            .db()?;
        for status in ["completed", "failed", "cancelled"] {
            let count = estimated
                .iter()
                .find(|(s, _)| s == status)
                .map_or(0.0, |(_, n)| n.round());
            // A status the statistics have not seen is estimated at none rather than left
            // out, once the table has been analyzed at all.
            if !estimated.is_empty() {
                by_status.push((status.to_owned(), count));
            }
        }
        Ok(TaskStats {
            by_status,
            queue_depth,
            queue_oldest_age: Duration::from_secs_f64(oldest_ms.max(0.0) / 1000.0),
        })
    }

    /// The claimable queue by tenant, reading at most `cap` queued tasks, oldest first:
    /// the oldest ages are exact; past `cap`, the younger tasks are not counted (the
    /// queue's total, [`TaskStats::queue_depth`], has them). Deepest first.
    #[tracing::instrument(name = "db.stats.queue_by_tenant", skip_all, err(level = "debug"))]
    pub async fn queue_by_tenant(&self, cap: i64) -> Result<Vec<TenantQueue>> {
        let rows: Vec<(String, i64, f64)> = sqlx::query_as(QUEUE_BY_TENANT)
            .bind(cap)
            .fetch_all(self.db.pool())
            .await
            .db()?;
        let mut tenants: Vec<TenantQueue> = rows
            .into_iter()
            .map(|(tenant, depth, oldest_ms)| TenantQueue {
                tenant,
                depth,
                oldest_age: Duration::from_secs_f64(oldest_ms.max(0.0) / 1000.0),
            })
            .collect();
        tenants.sort_by(|a, b| b.depth.cmp(&a.depth).then_with(|| a.tenant.cmp(&b.tenant)));
        Ok(tenants)
    }

    /// Claimable tasks that `limits` hold back now, by limit, of at most `cap` queued
    /// tasks (oldest first).
    #[tracing::instrument(name = "db.stats.held_back", skip_all, err(level = "debug"))]
    pub async fn held_back(&self, limits: &ClaimLimits, cap: i64) -> Result<Vec<HeldBack>> {
        self.db.held_back(limits, cap, None, None).await
    }

    /// The plans (`EXPLAIN`) of the metrics' statements, for the tests that check they
    /// read live work through its indexes at any size of the table.
    pub async fn task_stats_plans(&self) -> Result<Vec<QueryPlan>> {
        let mut plans = Vec::new();
        for (name, sql) in [("live counts", LIVE_COUNTS), ("estimates", ESTIMATES)] {
            let lines: Vec<String> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
                    .fetch_all(self.db.pool())
                    .await
                    .db()?;
            plans.push(QueryPlan {
                name: name.to_owned(),
                plan: lines.join("\n"),
            });
        }
        Ok(plans)
    }
}

impl ConsoleReads {
    /// The scope's claimable tasks that `limits` hold back now, by limit, of at most
    /// `cap` of its queued tasks. Running counts are the whole queue's (a tool's limit
    /// holds for every tenant), but only the scope's tasks are counted.
    #[tracing::instrument(name = "db.console.held_back", skip_all, err(level = "debug"))]
    pub async fn console_held_back(
        &self,
        scope: &Scope,
        limits: &ClaimLimits,
        cap: i64,
    ) -> Result<Vec<HeldBack>> {
        self.db
            .held_back(limits, cap, Some(&scope.tenant), scope.principal.as_deref())
            .await
    }
}
