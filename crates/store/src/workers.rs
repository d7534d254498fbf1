//! The `workers` table: each worker process says it is there, idle or busy, so the
//! console's health page can list it (a lease only names the workers running something).
//! A worker registers as it starts, refreshes its row every [`WorkerInfo::refresh`], and
//! deletes it when it stops cleanly; one that died stops refreshing and reads as gone
//! after [`MISSED_REFRESHES`] missed refreshes; maintenance forgets it after
//! [`FORGET_WORKERS_AFTER`].

use std::time::Duration;

use time::OffsetDateTime;

use crate::{ConsoleReads, DbResult, Result, WorkerStore};

/// A worker is live while its last refresh is younger than this many refresh intervals
/// (one late refresh on a loaded machine or a slow database must not make it "gone").
pub const MISSED_REFRESHES: i32 = 3;
/// Rows not refreshed for this long are deleted by maintenance.
pub const FORGET_WORKERS_AFTER: Duration = Duration::from_secs(3600);
/// Most worker rows read for a page.
pub const WORKERS_LIMIT: i64 = 500;

/// What a worker says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    /// Its lease-owner name.
    pub id: String,
    /// The tools it claims; empty: any tool.
    pub tools: Vec<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub concurrency: u32,
    /// How often it refreshes its row.
    pub refresh: Duration,
}

/// A worker's row as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPresence {
    pub id: String,
    pub tools: Vec<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub concurrency: u32,
    pub started_at: OffsetDateTime,
    pub last_seen_at: OffsetDateTime,
    /// Refreshed within [`MISSED_REFRESHES`] of its intervals.
    pub live: bool,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl WorkerStore {
    /// Registers the worker (again, after a restart under the same id or after
    /// maintenance forgot it): a fresh `started_at` and `last_seen_at`.
    #[tracing::instrument(name = "db.workers.register", skip_all, err(level = "debug"))]
    pub async fn register_worker(&self, worker: &WorkerInfo) -> Result<()> {
        sqlx::query!(
            "INSERT INTO workers (id, tools, host, pid, concurrency, refresh_ms)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (id) DO UPDATE SET
                 tools = EXCLUDED.tools, host = EXCLUDED.host, pid = EXCLUDED.pid,
                 concurrency = EXCLUDED.concurrency, refresh_ms = EXCLUDED.refresh_ms,
                 started_at = now(), last_seen_at = now()",
            &worker.id,
            &worker.tools,
            worker.host.as_deref(),
            worker.pid.and_then(|p| i32::try_from(p).ok()),
            i32::try_from(worker.concurrency).unwrap_or(i32::MAX),
            i32::try_from(millis(worker.refresh)).unwrap_or(i32::MAX),
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(())
    }

    /// Says the worker is still there, with the tools it claims now (a live registry
    /// may change them). Neither column is indexed, so this is a HOT update. Registers
    /// the worker when its row is gone (maintenance forgot it during a long outage).
    #[tracing::instrument(name = "db.workers.refresh", skip_all, err(level = "debug"))]
    pub async fn refresh_worker(&self, worker: &WorkerInfo) -> Result<()> {
        let done = sqlx::query!(
            "UPDATE workers SET last_seen_at = now(), tools = $2 WHERE id = $1",
            &worker.id,
            &worker.tools,
        )
        .execute(self.db.pool())
        .await
        .db()?;
        if done.rows_affected() == 0 {
            return self.register_worker(worker).await;
        }
        Ok(())
    }

    /// Deletes the worker's row (a clean shutdown).
    #[tracing::instrument(name = "db.workers.deregister", skip_all, err(level = "debug"))]
    pub async fn deregister_worker(&self, id: &str) -> Result<bool> {
        let done = sqlx::query!("DELETE FROM workers WHERE id = $1", id)
            .execute(self.db.pool())
            .await
            .db()?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes the rows of workers not seen for `after` (they died without deleting
    /// their row). The table holds a row per worker process, so one statement does.
    #[tracing::instrument(name = "db.maintenance.forget_workers", skip_all, err(level = "debug"))]
    pub async fn forget_workers(&self, after: Duration) -> Result<u64> {
        let done = sqlx::query!(
            "DELETE FROM workers WHERE last_seen_at < now() - $1::int8 * interval '1 millisecond'",
            millis(after),
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }
}

impl ConsoleReads {
    /// The workers seen within `within` (live ones, and those gone since), by id.
    #[tracing::instrument(name = "db.workers.list", skip_all, err(level = "debug"))]
    pub async fn workers_seen(&self, within: Duration) -> Result<Vec<WorkerPresence>> {
        let rows = sqlx::query!(
            r#"SELECT id, tools, host, pid, concurrency, started_at, last_seen_at,
                    last_seen_at > now() - ($3::int4 * refresh_ms) * interval '1 millisecond'
                        AS "live!"
             FROM workers
             WHERE last_seen_at > now() - $1::int8 * interval '1 millisecond'
             ORDER BY id
             LIMIT $2"#,
            millis(within),
            WORKERS_LIMIT,
            MISSED_REFRESHES,
        )
        .fetch_all(self.db.pool())
        .await
        .db()?;
        Ok(rows
            .into_iter()
            .map(|r| WorkerPresence {
                id: r.id,
                tools: r.tools,
                host: r.host,
                pid: r.pid.and_then(|p| u32::try_from(p).ok()),
                concurrency: u32::try_from(r.concurrency).unwrap_or(0),
                started_at: r.started_at,
                last_seen_at: r.last_seen_at,
                live: r.live,
            })
            .collect())
    }
}
