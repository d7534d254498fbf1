//! Expiry and deletion, in bounded batches so no statement holds many locks for long.
//! Safe to run from every worker at once: each batch skips rows another one has locked.

use crate::sql::checked;
use crate::{DbResult, Result, WorkerStore};

/// The advisory lock (the two-key form) a worker holds while it checks the task table's
/// statistics and analyses it, so that one does at a time: "mcpm", 1. Its first key is
/// not the wake-up duty's, whose second keys are hashes of tool names.
pub const ANALYZE_LOCK: (i32, i32) = (0x6d63_706d, 1);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Live tasks past their ttlMs, now failed.
    pub expired: u64,
    /// Finished tasks past their (raised) ttlMs, now deleted and tombstoned.
    pub deleted: u64,
    /// Tombstones older than their retention, now deleted.
    pub tombstones_deleted: u64,
    /// Revocations of sessions that have expired since, now forgotten.
    pub session_revocations_deleted: u64,
    /// Renewals of console sessions no request can need any more, now forgotten.
    pub console_refreshes_deleted: u64,
    /// Lanes of the fair order the clock has passed, and stopped workers' clock rows,
    /// now forgotten.
    pub lanes_forgotten: u64,
    /// Rows of workers not seen for [`crate::FORGET_WORKERS_AFTER`], now deleted.
    pub workers_forgotten: u64,
}

impl WorkerStore {
    /// Fails live tasks whose ttlMs (counted from creation) has passed, recording why
    /// (`expired`: what clients read is composed from it). A worker holding one loses its
    /// lease at the same moment, because its writes require `working`.
    #[tracing::instrument(name = "db.maintenance.expire", skip_all, err(level = "debug"))]
    pub async fn expire_overdue(&self, limit: i64) -> Result<u64> {
        let done = checked!(query!(
            r"
            WITH overdue AS MATERIALIZED (
                SELECT ctid
                FROM tasks
                WHERE expires_at <= now() AND status IN ('working', 'input_required')
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            )
            UPDATE tasks t SET
                status = 'failed',
                end_reason = 'expired',
                error = NULL,
                status_message = NULL,
            " + FINISH_COLUMNS
                + r"
            -- By ctid, as a claim does (see there): the rows are locked.
            WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM overdue))
            ",
            limit
        ))
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }

    /// Deletes finished tasks whose ttlMs has passed, and their history, leaving a
    /// tombstone so their owner is told "expired" rather than "not found".
    #[tracing::instrument(name = "db.maintenance.purge", skip_all, err(level = "debug"))]
    pub async fn purge_expired(&self, limit: i64) -> Result<u64> {
        let done = sqlx::query!(
            r"
            WITH due AS MATERIALIZED (
                SELECT ctid
                FROM tasks
                WHERE expires_at <= now() AND finished_at IS NOT NULL
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            ),
            gone AS (
                DELETE FROM tasks WHERE ctid = ANY (ARRAY(SELECT ctid FROM due))
                RETURNING tenant, principal, id
            ),
            -- History goes with its task (ids are unique, so the id alone finds it).
            history AS (
                DELETE FROM task_events e USING gone g WHERE e.id = g.id
            )
            INSERT INTO tombstones (owner, id)
            SELECT mcp_tasks_owner_digest(tenant, principal), id FROM gone
            ON CONFLICT DO NOTHING
            ",
            limit
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }

    /// Forgets tombstones older than `keep_ms`.
    #[tracing::instrument(
        name = "db.maintenance.purge_tombstones",
        skip_all,
        err(level = "debug")
    )]
    pub async fn purge_tombstones(&self, keep_ms: i64, limit: i64) -> Result<u64> {
        let done = sqlx::query!(
            r"
            -- By ctid: a key join (IN) was planned as a hash join over every
            -- tombstone, which made a purge as slow as the table is big.
            DELETE FROM tombstones
            WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM tombstones
                WHERE deleted_at < now() - $1::int8 * interval '1 millisecond'
                LIMIT $2
                FOR UPDATE SKIP LOCKED
            ))
            ",
            keep_ms,
            limit
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }

    /// Moves tombstones that workers of the previous release wrote into the old table
    /// (`task_tombstones`, kept for the length of a rolling deploy) into `tombstones`.
    #[tracing::instrument(
        name = "db.maintenance.adopt_tombstones",
        skip_all,
        err(level = "debug")
    )]
    pub async fn adopt_legacy_tombstones(&self, limit: i64) -> Result<u64> {
        let done = sqlx::query!(
            r"
            WITH moved AS (
                DELETE FROM task_tombstones
                WHERE ctid = ANY (ARRAY(
                    SELECT ctid FROM task_tombstones LIMIT $1 FOR UPDATE SKIP LOCKED
                ))
                RETURNING tenant, principal, id, deleted_at
            )
            INSERT INTO tombstones (owner, id, deleted_at)
            SELECT mcp_tasks_owner_digest(tenant, principal), id, deleted_at FROM moved
            ON CONFLICT DO NOTHING
            ",
            limit
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }

    /// Gives the task table statistics when it has none and `min_rows` live rows, or when
    /// more rows changed since its last ANALYZE than the planner believes it holds (and at
    /// least `min_rows`), unless it was analysed within `min_gap_ms`. True when it analysed.
    ///
    /// Stale statistics make the planner serve a primary-key lookup (`tenant, principal,
    /// id`) from the owner's part of `tasks_owner_created` or `tasks_tenant_created` (which
    /// have `id` last), walking every entry, live or dead, of that owner: before the first
    /// ANALYZE a finish batch read every task of its owner once per task it finished, and
    /// after a burst of creates and deletes on a table last analysed small, `tasks/get`
    /// took 20 ms instead of 0.03 ms. Autovacuum analyses only every `autovacuum_naptime`
    /// (a minute by default), long enough for a busy database to crawl first. The gap
    /// bounds what a table churning faster than it is big costs: one ANALYZE (a 30,000-row
    /// sample) per gap, whichever worker takes it.
    ///
    /// One worker at a time: the check and the ANALYZE run in one transaction holding the
    /// advisory lock [`ANALYZE_LOCK`], which the others try for and skip when it is taken
    /// (a worker finding it free afterwards sees the new statistics, and the gap). And
    /// never in autovacuum's way: `SKIP_LOCKED` skips the table while another process
    /// (autovacuum, a manual VACUUM or ANALYZE) holds it, where a plain ANALYZE would
    /// queue for its lock, and a statement queued behind autovacuum for a second cancels
    /// it (the deadlock check does), which undoes the vacuum's work.
    #[tracing::instrument(name = "db.maintenance.analyze", skip_all, err(level = "debug"))]
    pub async fn analyze_if_stale(&self, min_rows: i64, min_gap_ms: i64) -> Result<bool> {
        let mut tx = self.db.pool().begin().await.db()?;
        let state = sqlx::query!(
            r#"
            SELECT pg_try_advisory_xact_lock($3, $4) AND CASE
                WHEN coalesce(s.last_analyze, s.last_autoanalyze) IS NULL THEN s.n_live_tup >= $1
                WHEN greatest(s.last_analyze, s.last_autoanalyze)
                     > now() - $2::int8 * interval '1 millisecond' THEN false
                ELSE s.n_mod_since_analyze >= greatest($1, c.reltuples::bigint)
            END AS "stale!",
            s.analyze_count AS "analyses!"
            FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
            WHERE s.relid = 'tasks'::regclass
            "#,
            min_rows,
            min_gap_ms,
            ANALYZE_LOCK.0,
            ANALYZE_LOCK.1,
        )
        .fetch_one(&mut *tx)
        .await
        .db()?;
        if !state.stale {
            return Ok(false);
        }
        sqlx::query!("ANALYZE (SKIP_LOCKED) tasks")
            .execute(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        // A skipped table says so only in a warning; the count tells.
        let after = sqlx::query_scalar!(
            r#"SELECT analyze_count AS "analyses!" FROM pg_stat_user_tables
               WHERE relid = 'tasks'::regclass"#,
        )
        .fetch_one(self.db.pool())
        .await
        .db()?;
        Ok(after > state.analyses)
    }

    /// One maintenance pass: expire, delete, forget tombstones, ended sessions, spent
    /// console renewals, dead workers and the fair order's passed lanes. Each step repeats its batch while batches come
    /// back full (up to `MAX_ROUNDS`), so maintenance keeps up with any rate of expiry
    /// instead of one batch per interval.
    pub async fn maintain(&self, batch: i64, tombstone_keep_ms: i64) -> Result<MaintenanceReport> {
        let expired = repeat(batch, || self.expire_overdue(batch)).await?;
        let deleted = repeat(batch, || self.purge_expired(batch)).await?;
        repeat(batch, || self.adopt_legacy_tombstones(batch)).await?;
        Ok(MaintenanceReport {
            expired,
            deleted,
            tombstones_deleted: repeat(batch, || self.purge_tombstones(tombstone_keep_ms, batch))
                .await?,
            session_revocations_deleted: repeat(batch, || self.purge_session_revocations(batch))
                .await?,
            console_refreshes_deleted: repeat(batch, || self.purge_console_refreshes(batch))
                .await?,
            workers_forgotten: self.forget_workers(crate::FORGET_WORKERS_AFTER).await?,
            lanes_forgotten: repeat(batch, || self.forget_passed_lanes(batch)).await?
                + self.forget_stopped_clocks().await?,
        })
    }
}

/// Most batches of one maintenance step per pass, so one pass still ends.
pub(crate) const MAX_ROUNDS: u32 = 50;

/// Runs `step` until a batch is not full; the total of rows done.
pub(crate) async fn repeat<F, Fut>(batch: i64, step: F) -> Result<u64>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<u64>>,
{
    let mut total = 0;
    for _ in 0..MAX_ROUNDS {
        let done = step().await?;
        total += done;
        if i64::try_from(done).unwrap_or(i64::MAX) < batch {
            break;
        }
    }
    Ok(total)
}
