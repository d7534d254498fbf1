//! What workers do with a lease (claimed in `claim.rs`): heartbeat, and write outcomes
//! that only land while the lease is still theirs.

use mcp_tasks_wire::ErrorObject;
use serde_json::{Map, Value};

use crate::finish::FinishRequest;
use crate::record::Lease;
use crate::sql::checked;
use crate::{DbResult, Result, TaskId, WorkerStore, notify, storable};

/// A lease that is still held after a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    pub id: TaskId,
    pub cancel_requested: bool,
    /// False when the row was busy and this heartbeat left the lease as it was.
    pub extended: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// A `CallToolResult`, possibly with `isError: true`.
    Completed(Value),
    /// A JSON-RPC error.
    Failed(ErrorObject),
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputOutcome {
    /// The task is `input_required` and the lease is released.
    Applied,
    /// Cancellation was requested meanwhile; the caller should finish as cancelled.
    CancelRequested,
    /// The handler asked again under keys already issued for this task.
    KeyReused(Vec<String>),
    /// The lease is gone.
    Stale,
}

/// Lapsed leases that were finished instead of re-run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RescueReport {
    pub failed: u64,
    pub cancelled: u64,
}

impl WorkerStore {
    /// Finishes runnable tasks that must not run again: cancellation was requested
    /// (cancelled), or their lease lapsed with every attempt used (failed, worker lost).
    /// Both record their [`EndReason`](mcp_tasks_wire::service_messages::EndReason); what
    /// clients read is composed from it.
    #[tracing::instrument(name = "db.lease.rescue", skip_all, err(level = "debug"))]
    pub async fn rescue_lapsed(&self, limit: i64) -> Result<RescueReport> {
        let statuses = checked!(query_scalar!(
            r"
            WITH doomed AS MATERIALIZED (
                SELECT ctid
                FROM tasks
                WHERE lease_owner IS NOT NULL
                  AND status IN ('working', 'input_required')
                  AND lease_expires_at <= now()
                  AND (cancel_requested_at IS NOT NULL OR attempt >= max_attempts)
                -- In index order, so that this is a plain index scan of tasks_leased,
                -- which marks the dead entries it meets (every claim since the last
                -- vacuum left one) and skips them next time; a bitmap scan visited
                -- them all in the heap on every pass (6 ms after 16k claims).
                ORDER BY id
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            )
            UPDATE tasks t SET
                status = CASE WHEN t.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'failed' END,
                end_reason = CASE WHEN t.cancel_requested_at IS NOT NULL
                    THEN 'cancelled_by_client' ELSE 'crash_recovery' END,
                error = NULL,
                status_message = NULL,
            " + FINISH_COLUMNS + r"
            WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
            RETURNING t.status
            ",
            limit
        ))
        .fetch_all(self.db.pool())
        .await
        .db()?;
        let cancelled = statuses.iter().filter(|s| *s == "cancelled").count() as u64;
        Ok(RescueReport {
            failed: statuses.len() as u64 - cancelled,
            cancelled,
        })
    }

    /// Turns lapsed leases with attempts left back into queued rows, so that any worker's
    /// claim (which reads only the queue) runs them again; the maintenance leader does
    /// this, one statement per batch for the whole fleet. The task keeps its place in the
    /// queue (`queue_key`: ahead of what came after it), becomes runnable from when the
    /// lease lapsed (for the pickup delay), and its next claim is a reclaim
    /// (`lease_lapsed`). Input the lost run had asked for dies with it, as on a claim.
    /// The lapsed lease's token stays, and the heartbeat of a worker that was only cut
    /// off finds its lease gone (`FENCED`) and stops the run. Wakes idle workers when
    /// anything was requeued. Returns how many were.
    #[tracing::instrument(name = "db.lease.requeue", skip_all, err(level = "debug"))]
    pub async fn requeue_lapsed(&self, limit: i64) -> Result<u64> {
        let requeued = checked!(query_scalar!(
            r#"
            WITH lapsed AS MATERIALIZED (
                SELECT ctid
                FROM tasks
                WHERE lease_owner IS NOT NULL
                  AND status IN ('working', 'input_required')
                  AND lease_expires_at <= now()
                  AND attempt < max_attempts
                  AND cancel_requested_at IS NULL
                  AND (expires_at IS NULL OR expires_at > now())
                -- A plain index scan of tasks_leased, as rescue's.
                ORDER BY id
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            ),
            requeued AS (
                UPDATE tasks t SET
                    status = 'working',
                    input_requests = NULL,
                    lease_owner = NULL,
                    lease_expires_at = NULL,
                    run_after = t.lease_expires_at,
                    lease_lapsed = true,
                    updated_at = now(),
                    version = t.version + 1
                WHERE t.ctid = ANY (ARRAY(SELECT ctid FROM lapsed))
                RETURNING 1
            )
            SELECT count(*) AS "n!" FROM requeued
            "#,
            limit
        ))
        .fetch_one(self.db.pool())
        .await
        .db()?;
        let requeued = u64::try_from(requeued).unwrap_or(0);
        if requeued > 0 {
            self.db
                .notify(notify::RUNNABLE, &notify::Tenants::ALL.payload())
                .await?;
        }
        Ok(requeued)
    }

    /// Extends every lease in `leases` that is still held, in one statement. Leases not
    /// in the reply are lost.
    ///
    /// A lease whose row another transaction has locked is skipped this time (`SKIP
    /// LOCKED`), not waited for: it is still in the reply (its token is current) and is
    /// extended by a later heartbeat, so one busy row never stalls the others. A lease that
    /// lapsed without anybody claiming the task since is taken back (see `FENCED` in `sql.rs`).
    /// Only `lease_expires_at` changes, an unindexed column, so the update is HOT.
    #[tracing::instrument(name = "db.lease.heartbeat", skip_all, fields(leases = leases.len()), err(level = "debug"))]
    pub async fn heartbeat(&self, leases: &[Lease], lease_ms: i64) -> Result<Vec<HeartbeatReply>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let tenants: Vec<&str> = leases.iter().map(|l| l.owner.tenant.as_str()).collect();
        let principals: Vec<&str> = leases.iter().map(|l| l.owner.principal.as_str()).collect();
        let ids: Vec<uuid::Uuid> = leases.iter().map(|l| l.id.0).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let rows = sqlx::query!(
            r#"
            WITH held AS MATERIALIZED (
                SELECT t.tenant, t.principal, t.id, t.lease_token AS token,
                       t.cancel_requested_at IS NOT NULL AS cancel
                FROM tasks t
                JOIN unnest($1::text[], $2::text[], $3::uuid[], $4::bigint[])
                    AS h(tenant, principal, id, token)
                  ON t.tenant = h.tenant AND t.principal = h.principal AND t.id = h.id
                 AND t.lease_token = h.token
                -- Held, by the primary key (see FENCED in sql.rs).
                WHERE t.status IN ('working', 'input_required') AND t.lease_expires_at IS NOT NULL
            ),
            free AS MATERIALIZED (
                SELECT t.tenant, t.principal, t.id
                FROM tasks t JOIN held h
                  ON t.tenant = h.tenant AND t.principal = h.principal AND t.id = h.id
                 AND t.lease_token = h.token
                WHERE t.status IN ('working', 'input_required')
                FOR UPDATE OF t SKIP LOCKED
            ),
            extended AS (
                UPDATE tasks t SET lease_expires_at = now() + $5::int8 * interval '1 millisecond'
                FROM free f
                WHERE t.tenant = f.tenant AND t.principal = f.principal AND t.id = f.id
                RETURNING t.id
            )
            SELECT id AS "id!", cancel AS "cancel!", id IN (SELECT id FROM extended) AS "extended!"
            FROM held
            "#,
            &tenants as _,
            &principals as _,
            &ids,
            &tokens,
            lease_ms,
        )
        .fetch_all(self.db.pool())
        .await
        .db()?;
        Ok(rows
            .into_iter()
            .map(|r| HeartbeatReply {
                id: TaskId(r.id),
                cancel_requested: r.cancel,
                extended: r.extended,
            })
            .collect())
    }

    /// Sets the status message a client sees. False when the lease is gone; refused
    /// ([`crate::StoreError::refusal`]) with U+0000, as every worker write is.
    #[tracing::instrument(name = "db.lease.status_message", skip_all, err(level = "debug"))]
    pub async fn set_status_message(&self, lease: &Lease, message: &str) -> Result<bool> {
        storable::text("the status message", message)?;
        let done = checked!(query!(
            "UPDATE tasks SET status_message = $5, updated_at = now(), version = version + 1
             WHERE " + FENCED + " AND status_message IS DISTINCT FROM $5",
            @lease(lease),
            message
        ))
        .execute(self.db.pool())
        .await
        .db()?;
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        // An unchanged message updates nothing; tell that apart from a lost lease.
        self.holds(lease).await
    }

    /// Saves the handler's checkpoint, which the next run of this task receives.
    #[tracing::instrument(name = "db.lease.checkpoint", skip_all, err(level = "debug"))]
    pub async fn save_checkpoint(&self, lease: &Lease, checkpoint: &Value) -> Result<bool> {
        storable::json("the checkpoint", checkpoint)?;
        let done = checked!(query!(
            "UPDATE tasks SET checkpoint = $5 WHERE " + FENCED,
            @lease(lease),
            checkpoint
        ))
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected() == 1)
    }

    async fn finish_if_cancel_requested(&self, lease: &Lease) -> Result<bool> {
        let done = checked!(query!(
            "UPDATE tasks SET
                 status = 'cancelled',
                 end_reason = 'cancelled_by_client',
                 status_message = NULL,
                 " + FINISH_COLUMNS + "
             WHERE " + FENCED + " AND cancel_requested_at IS NOT NULL",
            @lease(lease)
        ))
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether this lease is still held.
    pub async fn holds(&self, lease: &Lease) -> Result<bool> {
        let held = checked!(query_scalar!(
            r#"SELECT true AS "held!" FROM tasks WHERE "# + FENCED,
            @lease(lease)
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        Ok(held.is_some())
    }

    /// Records how the run ended, exactly once: false when the lease is gone, in which
    /// case nothing was written. The finishes of a worker that arrive together are written
    /// in one statement and one commit (see `batch.rs`); this returns once that commit is
    /// durable.
    ///
    /// A result that cannot be stored (U+0000, larger than [`crate::MAX_RESULT_BYTES`])
    /// fails the task instead, with an error that says why; U+0000 in an error or the
    /// message is replaced with U+FFFD.
    #[tracing::instrument(name = "db.lease.finish", skip_all, err(level = "debug"))]
    pub async fn finish(
        &self,
        lease: &Lease,
        finish: &Finish,
        status_message: Option<&str>,
    ) -> Result<bool> {
        let mut message = status_message.map(|m| m.replace('\0', "\u{fffd}"));
        let (status, result, error, bytes) = match finish {
            Finish::Completed(result) => match storable::result(result.clone()) {
                Ok((result, bytes)) => ("completed", Some(result), None, bytes),
                Err(why) => {
                    tracing::warn!(task = %lease.id, reason = %why.message, "the tool's result cannot be stored; the task fails instead");
                    message = Some("Failed".to_owned());
                    let (error, bytes) = storable::error(why);
                    ("failed", None, Some(error), bytes)
                }
            },
            Finish::Failed(error) => {
                let (error, bytes) = storable::error(error.clone());
                ("failed", None, Some(error), bytes)
            }
            Finish::Cancelled => ("cancelled", None, None, 0),
        };
        let request = FinishRequest {
            lease: lease.clone(),
            status,
            result,
            error,
            message,
        };
        let bytes = bytes + request.message.as_ref().map_or(0, String::len);
        Ok(self.db.finishes().run(request, bytes).await?.1)
    }

    /// Parks the task until its new input requests are answered, releasing the lease.
    #[tracing::instrument(name = "db.lease.request_input", skip_all, err(level = "debug"))]
    pub async fn request_input(
        &self,
        lease: &Lease,
        requests: &Map<String, Value>,
        status_message: Option<&str>,
        checkpoint: Option<&Value>,
    ) -> Result<InputOutcome> {
        storable::map("the input requests", requests)?;
        storable::text_opt("the status message", status_message)?;
        storable::json_opt("the checkpoint", checkpoint)?;
        let keys: Vec<&str> = requests.keys().map(String::as_str).collect();
        let done = checked!(query!(
            "UPDATE tasks SET
                 status = 'input_required',
                 input_requests = $5,
                 issued_keys = issued_keys || $6::text[],
                 status_message = coalesce($7, status_message),
                 checkpoint = coalesce($8, checkpoint),
                 run_after = NULL,
                 lease_owner = NULL,
                 lease_expires_at = NULL,
                 attempt = 0,
                 updated_at = now(),
                 version = version + 1
             WHERE " + FENCED + " AND status = 'working' AND cancel_requested_at IS NULL
              AND NOT (issued_keys && $6::text[])",
            @lease(lease),
            Value::Object(requests.clone()),
            &keys as _,
            status_message,
            checkpoint
        ))
        .execute(self.db.pool())
        .await
        .db()?;
        if done.rows_affected() == 1 {
            return Ok(InputOutcome::Applied);
        }
        let why = checked!(query!(
            r#"SELECT cancel_requested_at IS NOT NULL AS "cancel!",
                    ARRAY(SELECT k FROM unnest(issued_keys) AS k WHERE k = ANY($5::text[]))
                        AS "reused!"
             FROM tasks WHERE "# + FENCED,
            @lease(lease),
            &keys as _
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        Ok(match why {
            None => InputOutcome::Stale,
            Some(why) if why.cancel => InputOutcome::CancelRequested,
            Some(why) => InputOutcome::KeyReused(why.reused),
        })
    }

    /// Gives a task back unfinished (worker shutdown), so another worker can start it at
    /// once. The interrupted run does not count as an attempt. A task whose cancellation
    /// was requested meanwhile is finished as cancelled instead of being run again.
    #[tracing::instrument(name = "db.lease.release", skip_all, err(level = "debug"))]
    pub async fn release(&self, lease: &Lease) -> Result<bool> {
        if self.finish_if_cancel_requested(lease).await? {
            return Ok(true);
        }
        let payload = notify::Tenants::of(&lease.owner.tenant).payload();
        let released = checked!(query_scalar!(
            "WITH released AS (
                 UPDATE tasks SET
                     -- Input the run asked for while holding the task dies with the run.
                     status = 'working',
                     input_requests = NULL,
                     lease_owner = NULL,
                     lease_expires_at = NULL,
                     run_after = now(),
                     attempt = greatest(attempt - 1, 0)
                 WHERE " + FENCED + " AND cancel_requested_at IS NULL
                 RETURNING id
             )
             SELECT pg_notify($5, $6) IS NOT NULL FROM released",
            @lease(lease),
            notify::RUNNABLE,
            payload
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        Ok(released.is_some())
    }
}
