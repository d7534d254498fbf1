//! What replicas do on behalf of clients: create, read, answer input, cancel.

use mcp_tasks_wire::service_messages;
use serde_json::{Map, Value};
use sqlx::{Postgres, Transaction};

use crate::record::TaskRow;
use crate::{DbResult, Lookup, Owner, Result, Store, StoreError, TaskId, TaskRecord, notify};

/// Columns every statement that finishes a task sets: clears the lease and the runnable
/// mark, and raises ttl_ms so the task stays readable for its retention period.
macro_rules! finish_columns {
    () => {
        "finished_at = now(),
         updated_at = now(),
         version = version + 1,
         run_after = NULL,
         lease_owner = NULL,
         lease_expires_at = NULL,
         input_requests = NULL,
         ttl_ms = mcp_tasks_retained_ttl(created_at, ttl_ms, retention_ms),
         expires_at = created_at
             + mcp_tasks_retained_ttl(created_at, ttl_ms, retention_ms) * interval '1 millisecond'"
    };
}
pub(crate) use finish_columns;

/// A task about to be created.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub tool: String,
    pub arguments: Value,
    pub status_message: Option<String>,
    /// From creation; `None` is unlimited.
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: Option<i64>,
    /// Minimum time a finished task stays readable.
    pub retention_ms: i64,
    pub max_attempts: i32,
    /// Answers gathered before the task existed (MRTR), visible to the handler.
    pub input_responses: Map<String, Value>,
    pub trace_context: Option<Value>,
    /// Makes creation idempotent: a second create with the same key finds this task.
    pub idempotency: Option<Idempotency>,
}

/// An idempotency key and a digest of the request it was first used with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    pub key: String,
    pub request_digest: String,
}

/// What a create did.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    New(TaskRecord),
    /// An earlier create with the same idempotency key and request made this task.
    Existing(TaskRecord),
    /// The idempotency key was used before with a different request.
    KeyConflict,
    /// The owner has too many unfinished tasks.
    LimitReached,
}

/// What `tasks/update` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// These keys were outstanding and are now answered. `resumed` is true when no key
    /// is left and the task is runnable again.
    Applied { keys: Vec<String>, resumed: bool },
    /// Nothing was outstanding under the keys given (unknown, superseded, already
    /// answered, or the task is not waiting for input).
    Ignored,
}

/// An answer that does not fit its request. Nothing of the update was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputValidationError {
    pub key: String,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The task was not running, so it is now cancelled.
    Cancelled,
    /// A worker holds the task; it has been asked to stop.
    Requested,
    /// The task had already finished; nothing changed.
    AlreadyTerminal,
}

impl Store {
    /// Creates a task and commits it, so it is readable from every replica as soon as
    /// this returns. Wake the workers afterwards ([`crate::Waker`]).
    pub async fn create_task(&self, owner: &Owner, task: NewTask) -> Result<TaskRecord> {
        match self.create(owner, task, None).await? {
            Created::New(task) | Created::Existing(task) => Ok(task),
            other => Err(StoreError::corrupt(format!(
                "unlimited create refused: {other:?}"
            ))),
        }
    }

    /// Creates a task, unless the owner already has `max_in_flight` unfinished tasks, or
    /// the task's idempotency key names an existing task (returned, when the request is
    /// the same). With a limit, an owner's creates are serialised on an advisory lock
    /// (transaction-scoped, so it cannot leak), which keeps the count exact.
    #[tracing::instrument(name = "db.task.create", skip_all, fields(tool = %task.tool), err(level = "debug"))]
    pub async fn create(
        &self,
        owner: &Owner,
        task: NewTask,
        max_in_flight: Option<i64>,
    ) -> Result<Created> {
        macro_rules! insert {
            ($condition:literal) => {
                concat!(
                    r"
                    INSERT INTO tasks (
                        tenant, principal, id, tool, arguments, trace_context,
                        status_message, ttl_ms, poll_interval_ms, retention_ms, expires_at,
                        input_responses, max_attempts, run_after,
                        idempotency_key, request_digest
                    )
                    SELECT
                        $1, $2, $3, $4, $5, $6,
                        $7, $8, $9, $10, now() + $8 * interval '1 millisecond',
                        $11, $12, now(),
                        $14, $15
                    ",
                    $condition,
                    "
                    ON CONFLICT (tenant, principal, idempotency_key)
                        WHERE idempotency_key IS NOT NULL
                        DO NOTHING
                    RETURNING *"
                )
            };
        }
        let sql = match max_in_flight {
            None => insert!("WHERE $13::bigint IS NULL"),
            Some(_) => insert!(
                "WHERE (
                    SELECT count(*) FROM (
                        SELECT 1 FROM tasks
                        WHERE tenant = $1 AND principal = $2 AND finished_at IS NULL
                        LIMIT $13
                    ) AS live
                ) < $13"
            ),
        };
        let id = TaskId::random();
        let (key, digest) = match &task.idempotency {
            Some(i) => (Some(i.key.as_str()), Some(i.request_digest.as_str())),
            None => (None, None),
        };
        let mut tx = self.pool().begin().await.db()?;
        if max_in_flight.is_some() {
            // Creates of one owner take turns, so each counts what the previous ones
            // committed: without this, simultaneous creates all see the same count.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 7242))")
                .bind(&owner.tenant)
                .bind(&owner.principal)
                .execute(&mut *tx)
                .await
                .db()?;
        }
        let row: Option<TaskRow> = sqlx::query_as(sql)
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .bind(id.0)
            .bind(&task.tool)
            .bind(&task.arguments)
            .bind(&task.trace_context)
            .bind(&task.status_message)
            .bind(task.ttl_ms)
            .bind(task.poll_interval_ms)
            .bind(task.retention_ms)
            .bind(Value::Object(task.input_responses))
            .bind(task.max_attempts)
            .bind(max_in_flight)
            .bind(key)
            .bind(digest)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        if let Some(row) = row {
            return Ok(Created::New(row.try_into()?));
        }
        let (Some(key), Some(digest)) = (key, digest) else {
            return Ok(Created::LimitReached);
        };
        let existing: Option<TaskRow> = sqlx::query_as(
            "SELECT * FROM tasks WHERE tenant = $1 AND principal = $2 AND idempotency_key = $3",
        )
        .bind(&owner.tenant)
        .bind(&owner.principal)
        .bind(key)
        .fetch_optional(self.pool())
        .await
        .db()?;
        Ok(match existing {
            Some(row) if row.request_digest.as_deref() == Some(digest) => {
                Created::Existing(row.try_into()?)
            }
            Some(_) => Created::KeyConflict,
            // No conflict, so the limit refused it.
            None => Created::LimitReached,
        })
    }

    #[tracing::instrument(name = "db.task.get", skip_all, err(level = "debug"))]
    pub async fn get_task(&self, owner: &Owner, id: TaskId) -> Result<Lookup<TaskRecord>> {
        let row: Option<TaskRow> =
            sqlx::query_as("SELECT * FROM tasks WHERE tenant = $1 AND principal = $2 AND id = $3")
                .bind(&owner.tenant)
                .bind(&owner.principal)
                .bind(id.0)
                .fetch_optional(self.pool())
                .await
                .db()?;
        match row {
            Some(row) => Ok(Lookup::Found(row.try_into()?)),
            None => self.missing(self.pool(), owner, id).await,
        }
    }

    /// Tells an expired-and-deleted task of this owner from one it never had.
    async fn missing<'e, T>(
        &self,
        executor: impl sqlx::PgExecutor<'e>,
        owner: &Owner,
        id: TaskId,
    ) -> Result<Lookup<T>> {
        let expired: bool = sqlx::query_scalar(
            "SELECT EXISTS (
                 SELECT 1 FROM task_tombstones WHERE tenant = $1 AND principal = $2 AND id = $3
             )",
        )
        .bind(&owner.tenant)
        .bind(&owner.principal)
        .bind(id.0)
        .fetch_one(executor)
        .await
        .db()?;
        Ok(if expired {
            Lookup::Expired
        } else {
            Lookup::NotFound
        })
    }

    async fn lock_task(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        owner: &Owner,
        id: TaskId,
    ) -> Result<Lookup<TaskRecord>> {
        let row: Option<TaskRow> = sqlx::query_as(
            "SELECT * FROM tasks WHERE tenant = $1 AND principal = $2 AND id = $3 FOR UPDATE",
        )
        .bind(&owner.tenant)
        .bind(&owner.principal)
        .bind(id.0)
        .fetch_optional(&mut **tx)
        .await
        .db()?;
        match row {
            Some(row) => Ok(Lookup::Found(row.try_into()?)),
            None => self.missing(&mut **tx, owner, id).await,
        }
    }

    /// Applies answers to outstanding input requests, all or nothing, before returning.
    /// When the outcome says `resumed`, wake the workers ([`crate::Waker`]).
    ///
    /// `validate(key, request, response)` checks one answer against its request. Keys that
    /// are not outstanding are ignored without being validated.
    #[tracing::instrument(name = "db.task.update_inputs", skip_all, err(level = "debug"))]
    pub async fn update_inputs(
        &self,
        owner: &Owner,
        id: TaskId,
        responses: &Map<String, Value>,
        validate: impl Fn(&str, &Value, &Value) -> Result<(), String>,
    ) -> Result<Lookup<Result<UpdateOutcome, InputValidationError>>> {
        // Every path that changes nothing rolls back explicitly: a dropped transaction is
        // only rolled back once its connection is back in the pool, and until then the
        // row stays locked and claims skip the task.
        let mut tx = self.pool().begin().await.db()?;
        let task = match self.lock_task(&mut tx, owner, id).await? {
            Lookup::Found(task) => task,
            Lookup::Expired => {
                tx.rollback().await.db()?;
                return Ok(Lookup::Expired);
            }
            Lookup::NotFound => {
                tx.rollback().await.db()?;
                return Ok(Lookup::NotFound);
            }
        };
        let AnswerPlan {
            answered,
            outstanding,
        } = match plan_answers(task.input_requests, responses, &validate) {
            Ok(Some(plan)) => plan,
            nothing_to_do => {
                tx.rollback().await.db()?;
                return Ok(Lookup::Found(nothing_to_do.map(|_| UpdateOutcome::Ignored)));
            }
        };
        let resumed = outstanding.is_empty();
        let keys: Vec<String> = answered.keys().cloned().collect();

        sqlx::query(
            r"
            UPDATE tasks SET
                status = CASE WHEN $4 THEN 'working' ELSE 'input_required' END,
                input_requests = CASE WHEN $4 THEN NULL ELSE $5 END,
                input_responses = input_responses || $6,
                run_after = CASE WHEN $4 THEN now() ELSE NULL END,
                attempt = CASE WHEN $4 THEN 0 ELSE attempt END,
                status_message = CASE WHEN $4 THEN $7 ELSE status_message END,
                updated_at = now(),
                version = version + 1
            WHERE tenant = $1 AND principal = $2 AND id = $3 AND status = 'input_required'
            ",
        )
        .bind(&owner.tenant)
        .bind(&owner.principal)
        .bind(id.0)
        .bind(resumed)
        .bind(Value::Object(outstanding))
        .bind(Value::Object(answered))
        .bind(service_messages::INPUT_RECEIVED)
        .execute(&mut *tx)
        .await
        .db()?;
        tx.commit().await.db()?;
        Ok(Lookup::Found(Ok(UpdateOutcome::Applied { keys, resumed })))
    }

    /// Cooperative cancellation: a task no worker holds is cancelled at once; a held one
    /// is flagged and its worker told. Finished tasks are left as they are.
    #[tracing::instrument(name = "db.task.cancel", skip_all, err(level = "debug"))]
    pub async fn cancel_task(&self, owner: &Owner, id: TaskId) -> Result<Lookup<CancelOutcome>> {
        let mut tx = self.pool().begin().await.db()?;
        let task = match self.lock_task(&mut tx, owner, id).await? {
            Lookup::Found(task) => task,
            Lookup::Expired => {
                tx.rollback().await.db()?;
                return Ok(Lookup::Expired);
            }
            Lookup::NotFound => {
                tx.rollback().await.db()?;
                return Ok(Lookup::NotFound);
            }
        };
        if task.status.is_terminal() {
            tx.rollback().await.db()?;
            return Ok(Lookup::Found(CancelOutcome::AlreadyTerminal));
        }

        // A lease that has lapsed counts as not held: its worker can no longer write.
        let held: bool = sqlx::query_scalar(
            "SELECT lease_expires_at > now() FROM tasks
             WHERE tenant = $1 AND principal = $2 AND id = $3 AND lease_owner IS NOT NULL",
        )
        .bind(&owner.tenant)
        .bind(&owner.principal)
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .db()?
        .unwrap_or(false);

        let outcome = if held {
            sqlx::query(
                r"
                WITH flagged AS (
                    UPDATE tasks SET cancel_requested_at = coalesce(cancel_requested_at, now())
                    WHERE tenant = $1 AND principal = $2 AND id = $3
                    RETURNING id
                )
                SELECT pg_notify($4, id::text) FROM flagged
                ",
            )
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .bind(id.0)
            .bind(notify::CANCEL)
            .execute(&mut *tx)
            .await
            .db()?;
            CancelOutcome::Requested
        } else {
            sqlx::query(concat!(
                "UPDATE tasks SET
                     status = 'cancelled',
                     end_reason = 'cancelled_by_client',
                     status_message = NULL,
                     cancel_requested_at = coalesce(cancel_requested_at, now()),
                     ",
                finish_columns!(),
                "
                 WHERE tenant = $1 AND principal = $2 AND id = $3"
            ))
            .bind(&owner.tenant)
            .bind(&owner.principal)
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .db()?;
            CancelOutcome::Cancelled
        };
        tx.commit().await.db()?;
        Ok(Lookup::Found(outcome))
    }
}

/// Answers that each answer an outstanding request, and the requests left after them.
struct AnswerPlan {
    answered: Map<String, Value>,
    outstanding: Map<String, Value>,
}

/// Keeps the answers to outstanding requests (validated) and ignores the rest. `None`
/// when nothing would change.
fn plan_answers(
    outstanding: Option<Map<String, Value>>,
    responses: &Map<String, Value>,
    validate: &impl Fn(&str, &Value, &Value) -> Result<(), String>,
) -> Result<Option<AnswerPlan>, InputValidationError> {
    let Some(mut outstanding) = outstanding else {
        return Ok(None);
    };
    let mut answered = Map::new();
    for (key, response) in responses {
        let Some(request) = outstanding.get(key) else {
            continue;
        };
        validate(key, request, response).map_err(|reason| InputValidationError {
            key: key.clone(),
            reason,
        })?;
        answered.insert(key.clone(), response.clone());
    }
    if answered.is_empty() {
        return Ok(None);
    }
    for key in answered.keys() {
        outstanding.remove(key);
    }
    Ok(Some(AnswerPlan {
        answered,
        outstanding,
    }))
}
