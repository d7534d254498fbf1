//! What waits in the queue: runnable tasks nobody has claimed for a while, by tool. A
//! worker claims only tools it has, so a tool no live worker has leaves its tasks here
//! (queued, never failed for it); this is how that becomes visible.

use crate::{DbResult, Result, WorkerStore};

impl WorkerStore {
    /// Tools whose runnable, unclaimed tasks have waited longer than `older_than_ms`, with
    /// how many, at most `limit` tools. Reads the claimable index's rows only.
    #[tracing::instrument(name = "db.queue.waiting", skip_all, err(level = "debug"))]
    pub async fn waiting_by_tool(
        &self,
        older_than_ms: i64,
        limit: i64,
    ) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query!(
            r#"
            SELECT tool, count(*) AS "count!"
            FROM tasks
            WHERE status = 'working'
              AND lease_owner IS NULL
              AND cancel_requested_at IS NULL
              AND run_after <= now() - $1::int8 * interval '1 millisecond'
            GROUP BY tool
            ORDER BY tool
            LIMIT $2
            "#,
            older_than_ms,
            limit,
        )
        .fetch_all(self.db.pool())
        .await
        .db()?;
        Ok(rows.into_iter().map(|r| (r.tool, r.count)).collect())
    }
}
