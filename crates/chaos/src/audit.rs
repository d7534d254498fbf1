//! The harness's own SQL: an audit trail of task transitions, installed only in the
//! harness's throwaway database, the checks made on it, and killing LISTEN backends. None
//! of it belongs in the shipped store, so the harness talks to PostgreSQL directly here.

use std::time::Duration;

use mcp_tasks_store::{LISTENER_APPLICATION_NAME, TaskId};
use sqlx::postgres::{PgPool, PgPoolOptions};
use time::OffsetDateTime;
use uuid::Uuid;

type Result<T> = std::result::Result<T, sqlx::Error>;

/// What the audit trail says about the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Audit {
    /// Tasks that entered a terminal status more than once.
    pub(crate) double_finalized: i64,
    /// Updates that replaced a stored result.
    pub(crate) results_overwritten: i64,
    /// Updates that moved a task out of a terminal status.
    pub(crate) left_terminal: i64,
    /// Leases still held.
    pub(crate) leases_held: i64,
    /// Claims made (first runs, re-runs after input, and reclaims).
    pub(crate) claims: i64,
}

/// One row of the audit trail: `finished` (with the status entered), `left_terminal`,
/// `result_overwritten`, or `claimed` (with the new lease token and owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AuditEvent {
    pub(crate) id: TaskId,
    pub(crate) event: String,
    pub(crate) status: Option<String>,
    pub(crate) lease_token: Option<i64>,
    pub(crate) lease_owner: Option<String>,
    /// The owner of a lease this event took over without it being given back (a
    /// reclaim, or a finish after the lease lapsed): that owner's run was lost.
    pub(crate) lapsed_owner: Option<String>,
    pub(crate) at: OffsetDateTime,
}

#[derive(sqlx::FromRow)]
struct AuditRow {
    id: Uuid,
    event: String,
    status: Option<String>,
    lease_token: Option<i64>,
    lease_owner: Option<String>,
    lapsed_owner: Option<String>,
    at: OffsetDateTime,
}

/// The harness's connection to its database. The pool outlives the PostgreSQL restart:
/// connections that died with the server are replaced before they are handed out.
pub(crate) struct AuditDb {
    pool: PgPool,
}

impl AuditDb {
    pub(crate) fn connect(url: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2))
            .test_before_acquire(true)
            .connect_lazy(url)?;
        Ok(Self { pool })
    }

    /// Points the pool at another server (the promoted standby); connections to the old
    /// one fail their test and are replaced.
    pub(crate) fn move_to(&self, url: &str) -> Result<()> {
        self.pool.set_connect_options(url.parse()?);
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    /// Installs the audit trigger. Only ever in a database made for the harness.
    pub(crate) async fn install(&self) -> Result<()> {
        for statement in [
            r"CREATE TABLE IF NOT EXISTS chaos_audit (
                seq bigserial PRIMARY KEY,
                id uuid NOT NULL,
                event text NOT NULL,
                status text,
                lease_token bigint,
                lease_owner text,
                -- Set when the event took over from a lease that was never given back:
                -- a reclaim, or a finish after the lease lapsed. Its run was lost.
                lapsed_owner text,
                at timestamptz NOT NULL DEFAULT clock_timestamp()
            )",
            r"CREATE OR REPLACE FUNCTION chaos_audit_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.status IN ('completed', 'failed', 'cancelled') AND OLD.status IS DISTINCT FROM NEW.status THEN
                    INSERT INTO chaos_audit (id, event, status, lapsed_owner)
                    VALUES (NEW.id, 'finished', NEW.status,
                            CASE WHEN OLD.lease_expires_at <= now() THEN OLD.lease_owner END);
                END IF;
                IF OLD.status IN ('completed', 'failed', 'cancelled') AND NEW.status IS DISTINCT FROM OLD.status THEN
                    INSERT INTO chaos_audit (id, event, status) VALUES (NEW.id, 'left_terminal', NEW.status);
                END IF;
                IF OLD.result IS NOT NULL AND NEW.result IS DISTINCT FROM OLD.result THEN
                    INSERT INTO chaos_audit (id, event) VALUES (NEW.id, 'result_overwritten');
                END IF;
                -- A claim takes over a lease never given back: one still on the row, or one
                -- the maintenance leader put back in the queue (`lease_lapsed`; its worker
                -- is the row's last claimer).
                IF NEW.lease_token IS DISTINCT FROM OLD.lease_token THEN
                    INSERT INTO chaos_audit (id, event, lease_token, lease_owner, lapsed_owner)
                    VALUES (NEW.id, 'claimed', NEW.lease_token, NEW.lease_owner,
                            coalesce(OLD.lease_owner,
                                     CASE WHEN OLD.lease_lapsed THEN OLD.claimed_by END));
                END IF;
                RETURN NULL;
            END $$",
            "DROP TRIGGER IF EXISTS chaos_audit ON tasks",
            "CREATE TRIGGER chaos_audit AFTER UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION chaos_audit_tasks()",
        ] {
            sqlx::query(statement).execute(&self.pool).await?;
        }
        Ok(())
    }

    pub(crate) async fn audit(&self) -> Result<Audit> {
        let (double_finalized, results_overwritten, left_terminal, leases_held, claims): (
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = sqlx::query_as(
            r"
            SELECT
                (SELECT count(*) FROM (
                    SELECT id FROM chaos_audit WHERE event = 'finished' GROUP BY id HAVING count(*) > 1
                ) d),
                (SELECT count(*) FROM chaos_audit WHERE event = 'result_overwritten'),
                (SELECT count(*) FROM chaos_audit WHERE event = 'left_terminal'),
                (SELECT count(*) FROM tasks WHERE lease_owner IS NOT NULL),
                (SELECT count(*) FROM chaos_audit WHERE event = 'claimed')
            ",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(Audit {
            double_finalized,
            results_overwritten,
            left_terminal,
            leases_held,
            claims,
        })
    }

    /// The tasks a worker holds now, with their lease tokens, and the database's clock.
    pub(crate) async fn held_by(
        &self,
        worker: &str,
    ) -> Result<(OffsetDateTime, Vec<(TaskId, i64)>)> {
        let now: OffsetDateTime = sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&self.pool)
            .await?;
        let held: Vec<(Uuid, i64)> =
            sqlx::query_as("SELECT id, lease_token FROM tasks WHERE lease_owner = $1")
                .bind(worker)
                .fetch_all(&self.pool)
                .await?;
        Ok((
            now,
            held.into_iter().map(|(id, t)| (TaskId(id), t)).collect(),
        ))
    }

    /// Every task in the database, with its status.
    pub(crate) async fn tasks(&self) -> Result<Vec<(TaskId, String)>> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as("SELECT id, status FROM tasks")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(id, status)| (TaskId(id), status))
            .collect())
    }

    /// The whole audit trail, in the order it was written.
    pub(crate) async fn events(&self) -> Result<Vec<AuditEvent>> {
        let rows: Vec<AuditRow> = sqlx::query_as(
            "SELECT id, event, status, lease_token, lease_owner, lapsed_owner, at
             FROM chaos_audit ORDER BY seq",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| AuditEvent {
                id: TaskId(r.id),
                event: r.event,
                status: r.status,
                lease_token: r.lease_token,
                lease_owner: r.lease_owner,
                lapsed_owner: r.lapsed_owner,
                at: r.at,
            })
            .collect())
    }

    /// Ends every LISTEN connection of the database, as a network blip or a failover would.
    pub(crate) async fn terminate_listeners(&self) -> Result<u64> {
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = $1 AND datname = current_database()",
        )
        .bind(LISTENER_APPLICATION_NAME)
        .fetch_all(&self.pool)
        .await?;
        Ok(killed.into_iter().filter(|k| *k).count() as u64)
    }
}
