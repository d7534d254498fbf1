//! Renewals of the web console's OAuth sessions (`console_refreshes`): what makes
//! refresh-token rotation safe when several requests of one session renew at once on
//! different replicas. See the migration for why.

use sqlx::{Postgres, Transaction};
use time::OffsetDateTime;

use crate::{DbResult, Result, Sessions, WorkerStore};

/// One session's turn to renew: the other requests of that session wait for it to end
/// (commit or drop) before theirs starts.
pub struct RefreshTurn {
    tx: Transaction<'static, Postgres>,
    session: String,
}

impl std::fmt::Debug for RefreshTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefreshTurn").finish_non_exhaustive()
    }
}

impl Sessions {
    /// Waits for `session`'s turn to renew. The turn holds a connection until it ends, so
    /// what it waits on in between (the token endpoint) must be bounded by a timeout
    /// shorter than the idle-in-transaction limit.
    #[tracing::instrument(name = "db.console.refresh_turn", skip_all, err(level = "debug"))]
    pub async fn refresh_turn(&self, session: &str) -> Result<RefreshTurn> {
        let mut tx = self.db.pool().begin().await.db()?;
        sqlx::query!(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 7244))",
            session
        )
        .execute(&mut *tx)
        .await
        .db()?;
        Ok(RefreshTurn {
            tx,
            session: session.to_owned(),
        })
    }
}

impl WorkerStore {
    /// Forgets renewals no request can need any more.
    #[tracing::instrument(
        name = "db.maintenance.purge_console_refreshes",
        skip_all,
        err(level = "debug")
    )]
    pub async fn purge_console_refreshes(&self, limit: i64) -> Result<u64> {
        let done = sqlx::query!(
            "DELETE FROM console_refreshes
             WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM console_refreshes
                 WHERE expires_at < now()
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
}

impl RefreshTurn {
    /// What an earlier renewal of this session that spent `spent` (a digest of the
    /// refresh token) made of it, while it is remembered.
    pub async fn successor(&mut self, spent: &[u8]) -> Result<Option<String>> {
        sqlx::query_scalar!(
            "SELECT successor FROM console_refreshes
             WHERE session = $1 AND spent = $2 AND expires_at > now()",
            &self.session,
            spent,
        )
        .fetch_optional(&mut *self.tx)
        .await
        .db()
    }

    /// Records that spending `spent` made `successor` (sealed), remembered until
    /// `expires_at`, and ends the turn.
    pub async fn record(
        mut self,
        spent: &[u8],
        successor: &str,
        expires_at: OffsetDateTime,
    ) -> Result<()> {
        sqlx::query!(
            "INSERT INTO console_refreshes (session, spent, successor, expires_at)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (session, spent) DO UPDATE SET
                 successor = EXCLUDED.successor, expires_at = EXCLUDED.expires_at",
            &self.session,
            spent,
            successor,
            expires_at,
        )
        .execute(&mut *self.tx)
        .await
        .db()?;
        self.tx.commit().await.db()
    }
}
