//! The maintenance leader: of all the workers, one at a time rescues and requeues lapsed
//! leases and runs maintenance, so that the fleet reads the leased rows once per interval
//! rather than once per worker (workers² × concurrency rows a second, before).
//!
//! Leadership is a row (`maintenance_leader`) with a term: the leader extends it at each
//! round, and any worker takes it over once the term has run out, so a leader that dies
//! is replaced within one term. A row rather than a session advisory lock, so that it
//! needs no connection of its own and works through a pooler in transaction mode. Two
//! leaders at once (a leader stalled past its term) would only do the same work twice:
//! every maintenance statement skips rows another has locked.

use crate::{DbResult, Result, WorkerStore};

impl WorkerStore {
    /// Takes or extends the leadership for `term_ms` from now, if it is free, lapsed, or
    /// already `worker`'s. True when `worker` leads.
    #[tracing::instrument(name = "db.leader.lead", skip_all, err(level = "debug"))]
    pub async fn lead(&self, worker: &str, term_ms: i64) -> Result<bool> {
        let led = sqlx::query_scalar!(
            "INSERT INTO maintenance_leader AS l (worker, until)
             VALUES ($1, now() + $2::int8 * interval '1 millisecond')
             ON CONFLICT (only_row) DO UPDATE SET worker = EXCLUDED.worker, until = EXCLUDED.until
                 WHERE l.worker = EXCLUDED.worker OR l.until <= now()
             RETURNING worker",
            worker,
            term_ms
        )
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        Ok(led.is_some())
    }

    /// Gives the leadership up (a worker shutting down), so the next worker to look takes
    /// it at once rather than after the term.
    #[tracing::instrument(name = "db.leader.resign", skip_all, err(level = "debug"))]
    pub async fn resign(&self, worker: &str) -> Result<()> {
        sqlx::query!("DELETE FROM maintenance_leader WHERE worker = $1", worker)
            .execute(self.db.pool())
            .await
            .db()?;
        Ok(())
    }

    /// The worker leading now, if its term runs.
    pub async fn leader(&self) -> Result<Option<String>> {
        sqlx::query_scalar!("SELECT worker FROM maintenance_leader WHERE until > now()")
            .fetch_optional(self.db.pool())
            .await
            .db()
    }
}
