//! The fair order's bookkeeping (see ARCHITECTURE.md, *Scheduling*): `queue_lanes`, each
//! (tenant, principal) lane's last key, and `queue_clock`, the highest key each worker
//! has claimed. Creates and claims write them in their own statements (`create.rs`,
//! `lease.rs`); what is here keeps them small.

use crate::{DbResult, Result, WorkerStore};

/// A worker's clock row is kept this long after its last claim (the highest row always).
const CLOCK_ROW_KEPT_MS: i64 = 3_600_000;

impl WorkerStore {
    /// Forgets up to `limit` lanes the clock has passed: a lane whose last key is behind
    /// the clock has nothing queued ahead of it, and its next task starts at the clock
    /// whether its row is there or not. A lane a create holds is skipped (it is moving on).
    #[tracing::instrument(name = "db.maintenance.lanes", skip_all, err(level = "debug"))]
    pub async fn forget_passed_lanes(&self, limit: i64) -> Result<u64> {
        let done = sqlx::query!(
            "DELETE FROM queue_lanes WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM queue_lanes
                WHERE last_key <= mcp_tasks_queue_clock()
                ORDER BY last_key
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            ))",
            limit,
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }

    /// Forgets the clock rows of workers that have not claimed for an hour (workers that
    /// stopped), but never the highest: the clock only moves forward.
    #[tracing::instrument(name = "db.maintenance.clock", skip_all, err(level = "debug"))]
    pub async fn forget_stopped_clocks(&self) -> Result<u64> {
        let done = sqlx::query!(
            "DELETE FROM queue_clock
             WHERE at < now() - $1::int8 * interval '1 millisecond'
               AND key < (SELECT max(key) FROM queue_clock)",
            CLOCK_ROW_KEPT_MS,
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }
}
