//! Ended sessions of 2025-era clients (`session_revocations`).
//!
//! A session id is a token every replica verifies on its own; this table is only where a
//! deleted one is remembered, until it would have expired anyway. Rows per owner are
//! bounded: past `max_per_owner`, they collapse into one wildcard row that ends every
//! session of the owner issued before it.

use time::OffsetDateTime;

use crate::{DbResult, Owner, Result, Sessions, WorkerStore};

/// One session to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation<'a> {
    /// The session token's nonce (never `*`).
    pub session: &'a str,
    /// When the token expires: the row is needed until then.
    pub expires_at: OffsetDateTime,
    /// The longest any session lives, for the wildcard row's own expiry.
    pub session_ttl_ms: i64,
    /// Most rows one owner may have before they collapse into the wildcard.
    pub max_per_owner: i64,
}

impl Sessions {
    /// Ends a session for every replica. Idempotent.
    #[tracing::instrument(name = "db.session.revoke", skip_all, err(level = "debug"))]
    pub async fn revoke_session(&self, owner: &Owner, revocation: &Revocation<'_>) -> Result<()> {
        let mut tx = self.db.pool().begin().await.db()?;
        // Revocations of one owner take turns, so the count below stays exact.
        sqlx::query!(
            "SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 7243))",
            &owner.tenant,
            &owner.principal,
        )
        .execute(&mut *tx)
        .await
        .db()?;
        let rows = sqlx::query_scalar!(
            r#"SELECT count(*) AS "rows!" FROM (
                 SELECT 1 FROM session_revocations
                 WHERE tenant = $1 AND principal = $2 AND session <> '*'
                 LIMIT $3
             ) AS live"#,
            &owner.tenant,
            &owner.principal,
            revocation.max_per_owner,
        )
        .fetch_one(&mut *tx)
        .await
        .db()?;
        if rows < revocation.max_per_owner {
            sqlx::query!(
                "INSERT INTO session_revocations (tenant, principal, session, expires_at)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, principal, session) DO NOTHING",
                &owner.tenant,
                &owner.principal,
                revocation.session,
                revocation.expires_at,
            )
            .execute(&mut *tx)
            .await
            .db()?;
        } else {
            // Every session revoked so far was issued before now, so the wildcard covers
            // them (and this one) and their rows can go.
            sqlx::query!(
                "WITH wildcard AS (
                     INSERT INTO session_revocations
                         (tenant, principal, session, expires_at, revoked_before)
                     VALUES ($1, $2, '*', now() + $3::int8 * interval '1 millisecond', now())
                     ON CONFLICT (tenant, principal, session) DO UPDATE SET
                         revoked_before = now(),
                         expires_at = greatest(session_revocations.expires_at, EXCLUDED.expires_at)
                 )
                 DELETE FROM session_revocations
                 WHERE tenant = $1 AND principal = $2 AND session <> '*'",
                &owner.tenant,
                &owner.principal,
                revocation.session_ttl_ms,
            )
            .execute(&mut *tx)
            .await
            .db()?;
            tracing::warn!(
                tenant = %owner.tenant,
                principal = %owner.principal,
                "too many ended sessions: every earlier session of this principal is now ended"
            );
        }
        tx.commit().await.db()?;
        Ok(())
    }

    /// Whether a session of this owner, issued at `issued_at`, has been ended.
    #[tracing::instrument(name = "db.session.revoked", skip_all, err(level = "debug"))]
    pub async fn session_revoked(
        &self,
        owner: &Owner,
        session: &str,
        issued_at: OffsetDateTime,
    ) -> Result<bool> {
        sqlx::query_scalar!(
            r#"SELECT EXISTS (
                 SELECT 1 FROM session_revocations
                 WHERE tenant = $1 AND principal = $2
                   AND (session = $3 OR (session = '*' AND revoked_before >= $4))
             ) AS "revoked!""#,
            &owner.tenant,
            &owner.principal,
            session,
            issued_at,
        )
        .fetch_one(self.db.pool())
        .await
        .db()
    }
}

impl WorkerStore {
    /// Forgets revocations of sessions that have expired by now.
    #[tracing::instrument(
        name = "db.maintenance.purge_session_revocations",
        skip_all,
        err(level = "debug")
    )]
    pub async fn purge_session_revocations(&self, limit: i64) -> Result<u64> {
        // By ctid, as the tombstone purge does: a key join may be planned as a hash join
        // over the whole table.
        let done = sqlx::query!(
            "DELETE FROM session_revocations
             WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM session_revocations
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
