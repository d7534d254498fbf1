//! Ended sessions of 2025-era clients (`session_revocations`).
//!
//! A session id is a token every replica verifies on its own; this table is only where a
//! deleted one is remembered, until it would have expired anyway. Rows per owner are
//! bounded: past `max_per_owner`, they collapse into one wildcard row that ends every
//! session of the owner issued before it.

use time::OffsetDateTime;

use crate::{DbResult, Owner, Result, Store};

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

impl Store {
    /// Ends a session for every replica. Idempotent.
    #[tracing::instrument(name = "db.session.revoke", skip_all, err(level = "debug"))]
    pub async fn revoke_session(&self, owner: &Owner, revocation: &Revocation<'_>) -> Result<()> {
        let mut tx = self.pool().begin().await.db()?;
        // Revocations of one owner take turns, so the count below stays exact.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 7243))")
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .execute(&mut *tx)
            .await
            .db()?;
        let rows: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (
                 SELECT 1 FROM session_revocations
                 WHERE tenant = $1 AND principal = $2 AND session <> '*'
                 LIMIT $3
             ) AS live",
        )
        .bind(&owner.tenant)
        .bind(&owner.principal)
        .bind(revocation.max_per_owner)
        .fetch_one(&mut *tx)
        .await
        .db()?;
        if rows < revocation.max_per_owner {
            sqlx::query(
                "INSERT INTO session_revocations (tenant, principal, session, expires_at)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, principal, session) DO NOTHING",
            )
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .bind(revocation.session)
            .bind(revocation.expires_at)
            .execute(&mut *tx)
            .await
            .db()?;
        } else {
            // Every session revoked so far was issued before now, so the wildcard covers
            // them (and this one) and their rows can go.
            sqlx::query(
                "WITH wildcard AS (
                     INSERT INTO session_revocations
                         (tenant, principal, session, expires_at, revoked_before)
                     VALUES ($1, $2, '*', now() + $3 * interval '1 millisecond', now())
                     ON CONFLICT (tenant, principal, session) DO UPDATE SET
                         revoked_before = now(),
                         expires_at = greatest(session_revocations.expires_at, EXCLUDED.expires_at)
                 )
                 DELETE FROM session_revocations
                 WHERE tenant = $1 AND principal = $2 AND session <> '*'",
            )
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .bind(revocation.session_ttl_ms)
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
        sqlx::query_scalar(
            "SELECT EXISTS (
                 SELECT 1 FROM session_revocations
                 WHERE tenant = $1 AND principal = $2
                   AND (session = $3 OR (session = '*' AND revoked_before >= $4))
             )",
        )
        .bind(&owner.tenant)
        .bind(&owner.principal)
        .bind(session)
        .bind(issued_at)
        .fetch_one(self.pool())
        .await
        .db()
    }

    /// Forgets revocations of sessions that have expired by now.
    #[tracing::instrument(
        name = "db.maintenance.purge_session_revocations",
        skip_all,
        err(level = "debug")
    )]
    pub async fn purge_session_revocations(&self, limit: i64) -> Result<u64> {
        let done = sqlx::query(
            // By ctid, as the tombstone purge does: a key join may be planned as a hash
            // join over the whole table.
            "DELETE FROM session_revocations
             WHERE ctid = ANY (ARRAY(
                 SELECT ctid FROM session_revocations
                 WHERE expires_at < now()
                 LIMIT $1
                 FOR UPDATE SKIP LOCKED
             ))",
        )
        .bind(limit)
        .execute(self.pool())
        .await
        .db()?;
        Ok(done.rows_affected())
    }
}
