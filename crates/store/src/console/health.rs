//! The health page's figures for a scope: the claimable queue, pickup delay and run
//! duration percentiles per tool over time, lapsed leases, and the workers holding the
//! scope's running tasks. Each statement reads a partial index of live work
//! (`tasks_queued`, `tasks_leased`), the newest tasks created in each bucket of a window
//! (the created-order indexes, at most [`SAMPLES_PER_BUCKET`] per bucket), or the history's lapses (`task_events`).

use std::time::Duration;

use time::OffsetDateTime;
use uuid::Uuid;

use super::Scope;
use crate::{ConsoleReads, DbResult, Result, TaskId};

/// Most finished tasks one bucket's percentiles are taken from (the newest of it).
pub const SAMPLES_PER_BUCKET: i64 = 500;
/// Most queued tasks counted: past it the depth is a lower bound.
pub const QUEUE_COUNT_LIMIT: i64 = 10_000;
/// Most running tasks listed under the workers.
pub const RUNNING_LIMIT: i64 = 1_000;

/// Percentiles (p50, p90, p99) of one tool's tasks created in one time bucket, in
/// milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct PercentileBucket {
    pub start: OffsetDateTime,
    pub tool: String,
    /// Tasks the figures are taken from.
    pub samples: u64,
    /// From becoming claimable to being claimed (the run that finished).
    pub pickup_ms: [f64; 3],
    /// From that claim to the finish.
    pub run_ms: [f64; 3],
}

/// Lapsed leases in the window, by what followed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LapseCounts {
    /// Claimed again by another worker: a crash recovered.
    pub reclaimed: u64,
    /// Failed: no attempts were left (CRASH_RECOVERY).
    pub failed: u64,
    /// Cancelled: cancellation had been asked for.
    pub cancelled: u64,
}

impl LapseCounts {
    pub fn total(&self) -> u64 {
        self.reclaimed + self.failed + self.cancelled
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunningTask {
    pub id: TaskId,
    pub principal: String,
    pub tool: String,
    pub claimed_at: Option<OffsetDateTime>,
    pub lease_expires_at: OffsetDateTime,
    pub attempt: i32,
}

/// A worker holding live leases on tasks of the scope.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerLoad {
    pub worker: String,
    pub running: Vec<RunningTask>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    pub queue_depth: u64,
    /// More are queued than [`QUEUE_COUNT_LIMIT`]: at least `queue_depth`.
    pub queue_depth_at_least: bool,
    /// How long the oldest claimable task has waited; `None` when none waits.
    pub oldest_claimable: Option<Duration>,
    pub window: Duration,
    pub bucket: Duration,
    pub percentiles: Vec<PercentileBucket>,
    pub lapses: LapseCounts,
    pub workers: Vec<WorkerLoad>,
}

pub(super) const QUEUE: &str = r"
    SELECT (SELECT count(*) FROM (
                SELECT 1 FROM tasks
                WHERE status = 'working' AND lease_owner IS NULL AND run_after <= now()
                  AND tenant = $1 AND ($2::text IS NULL OR principal = $2)
                LIMIT $3) q)::int8,
           (SELECT EXTRACT(EPOCH FROM now() - min(run_after)) * 1000 FROM tasks
            WHERE status = 'working' AND lease_owner IS NULL AND run_after <= now()
              AND tenant = $1 AND ($2::text IS NULL OR principal = $2))::float8";

/// Percentiles per creation bucket and tool: the newest [`SAMPLES_PER_BUCKET`] tasks
/// created in each bucket (through the scope's created-order index), of them the finished.
macro_rules! percentiles {
    ($scope:literal) => {
        concat!(
            r"
    SELECT b.lo, s.tool, count(*)::int8,
           percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY s.pickup),
           percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY s.run)
    FROM generate_series(1, $4::int4) AS g(n)
    CROSS JOIN LATERAL (
        SELECT now() - (($4 - g.n + 1) * $3::int8) * interval '1 millisecond' AS lo,
               now() - (($4 - g.n) * $3::int8) * interval '1 millisecond' AS hi
    ) b
    CROSS JOIN LATERAL (
        SELECT tool, pickup_ms::float8 AS pickup,
               EXTRACT(EPOCH FROM finished_at - claimed_at)::float8 * 1000 AS run
        FROM (
            SELECT tool, pickup_ms, finished_at, claimed_at FROM tasks
            WHERE ",
            $scope,
            r" AND created_at >= b.lo AND created_at < b.hi
            ORDER BY created_at DESC
            LIMIT $5
        ) newest
        WHERE finished_at IS NOT NULL AND claimed_at IS NOT NULL AND pickup_ms IS NOT NULL
    ) s
    GROUP BY b.lo, s.tool
    ORDER BY b.lo, s.tool"
        )
    };
}

pub(super) const PERCENTILES_OWNER: &str = percentiles!("tenant = $1 AND principal = $2");
pub(super) const PERCENTILES_TENANT: &str = percentiles!("tenant = $1 AND $2::text IS NULL");

/// The percentile statement of a scope.
pub(super) fn percentiles_sql(scope: &Scope) -> &'static str {
    if scope.principal.is_some() {
        PERCENTILES_OWNER
    } else {
        PERCENTILES_TENANT
    }
}

pub(super) const LAPSES: &str = r"
    SELECT e.detail, count(*)::int8
    FROM task_events e
    WHERE e.kind = 'lease_lapsed' AND e.at >= now() - $3::int8 * interval '1 millisecond'
      AND e.tenant = $1
      -- One key probe per lapse (a scalar subquery; EXISTS may be planned as a hash of
      -- every task of the principal).
      AND ($2::text IS NULL OR (
          SELECT true FROM tasks t
          WHERE t.tenant = e.tenant AND t.principal = $2 AND t.id = e.id) IS NOT NULL)
    GROUP BY e.detail";

pub(super) const RUNNING: &str = r"
    SELECT lease_owner, id, principal, tool, claimed_at, lease_expires_at, attempt
    FROM tasks
    WHERE lease_owner IS NOT NULL AND status = 'working' AND lease_expires_at > now()
      AND tenant = $1 AND ($2::text IS NULL OR principal = $2)
    ORDER BY lease_owner, claimed_at
    LIMIT $3";

type PercentileRow = (OffsetDateTime, String, i64, Vec<f64>, Vec<f64>);
type RunningRow = (
    String,
    Uuid,
    String,
    String,
    Option<OffsetDateTime>,
    OffsetDateTime,
    i32,
);

fn three(v: &[f64]) -> [f64; 3] {
    [0, 1, 2].map(|i| v.get(i).copied().unwrap_or(0.0))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl ConsoleReads {
    /// The health page of a scope: percentiles over `window` in `buckets` buckets.
    #[tracing::instrument(name = "db.console.health", skip_all, err(level = "debug"))]
    pub async fn console_health(
        &self,
        scope: &Scope,
        window: Duration,
        buckets: u32,
    ) -> Result<Health> {
        let buckets = buckets.clamp(1, 120);
        let bucket = window / buckets;
        let principal = scope.principal.as_deref();
        let (depth, oldest_ms): (i64, Option<f64>) = sqlx::query_as(QUEUE)
            .bind(&scope.tenant)
            .bind(principal)
            .bind(QUEUE_COUNT_LIMIT)
            .fetch_one(self.db.pool())
            .await
            .db()?;
        let rows: Vec<PercentileRow> = sqlx::query_as(percentiles_sql(scope))
            .bind(&scope.tenant)
            .bind(principal)
            .bind(millis(bucket))
            .bind(i32::try_from(buckets).unwrap_or(1))
            .bind(SAMPLES_PER_BUCKET)
            .fetch_all(self.db.pool())
            .await
            .db()?;
        let lapse_rows: Vec<(Option<String>, i64)> = sqlx::query_as(LAPSES)
            .bind(&scope.tenant)
            .bind(principal)
            .bind(millis(window))
            .fetch_all(self.db.pool())
            .await
            .db()?;
        let running: Vec<RunningRow> = sqlx::query_as(RUNNING)
            .bind(&scope.tenant)
            .bind(principal)
            .bind(RUNNING_LIMIT)
            .fetch_all(self.db.pool())
            .await
            .db()?;
        let mut lapses = LapseCounts::default();
        for (detail, n) in lapse_rows {
            let n = u64::try_from(n).unwrap_or(0);
            match detail.as_deref() {
                Some("failed") => lapses.failed += n,
                Some("cancelled") => lapses.cancelled += n,
                _ => lapses.reclaimed += n,
            }
        }
        let mut workers: Vec<WorkerLoad> = Vec::new();
        for (worker, id, principal, tool, claimed_at, lease_expires_at, attempt) in running {
            let task = RunningTask {
                id: TaskId(id),
                principal,
                tool,
                claimed_at,
                lease_expires_at,
                attempt,
            };
            match workers.last_mut() {
                Some(w) if w.worker == worker => w.running.push(task),
                _ => workers.push(WorkerLoad {
                    worker,
                    running: vec![task],
                }),
            }
        }
        Ok(Health {
            queue_depth: u64::try_from(depth).unwrap_or(0),
            queue_depth_at_least: depth >= QUEUE_COUNT_LIMIT,
            oldest_claimable: oldest_ms.map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0)),
            window,
            bucket,
            percentiles: rows
                .into_iter()
                .map(|(start, tool, samples, pickup, run)| PercentileBucket {
                    start,
                    tool,
                    samples: u64::try_from(samples).unwrap_or(0),
                    pickup_ms: three(&pickup),
                    run_ms: three(&run),
                })
                .collect(),
            lapses,
            workers,
        })
    }
}
