//! What replicas do on behalf of clients: create, read, answer input, cancel.

use mcp_tasks_wire::service_messages;
use serde_json::{Map, Value};
use sqlx::{Postgres, Transaction};

use crate::record::TaskRow;
use crate::sql::checked;
use crate::{DbResult, Lookup, Owner, ReplicaStore, Result, TaskId, TaskRecord, notify};

/// What `tasks/update` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// These keys were outstanding and are now answered. `resumed` is true when no key
    /// is left and the task is working again: runnable, or (when the run that asked
    /// still holds it) going on in that run.
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

impl ReplicaStore {
    #[tracing::instrument(name = "db.task.get", skip_all, err(level = "debug"))]
    pub async fn get_task(&self, owner: &Owner, id: TaskId) -> Result<Lookup<TaskRecord>> {
        let row = checked!(query_as!(
            TaskRow,
            "SELECT "
                + TASK_COLUMNS
                + " FROM tasks WHERE tenant = $1 AND principal = $2 AND id = $3",
            &owner.tenant,
            &owner.principal,
            id.0
        ))
        .fetch_optional(self.db.pool())
        .await
        .db()?;
        match row {
            Some(row) => Ok(Lookup::Found(row.try_into()?)),
            None => missing(self.db.pool(), owner, id).await,
        }
    }

    async fn lock_task(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        owner: &Owner,
        id: TaskId,
    ) -> Result<Lookup<TaskRecord>> {
        let row = checked!(query_as!(
            TaskRow,
            "SELECT "
                + TASK_COLUMNS
                + " FROM tasks WHERE tenant = $1 AND principal = $2 AND id = $3
             FOR UPDATE",
            &owner.tenant,
            &owner.principal,
            id.0
        ))
        .fetch_optional(&mut **tx)
        .await
        .db()?;
        match row {
            Some(row) => Ok(Lookup::Found(row.try_into()?)),
            None => missing(&mut **tx, owner, id).await,
        }
    }

    /// Applies answers to outstanding input requests, all or nothing, before returning.
    /// When the outcome says `resumed`, wake the workers ([`crate::Waker`]).
    ///
    /// `validate(key, request, response)` checks one answer against its request. Keys that
    /// are not outstanding are ignored without being validated. Answers with U+0000 are
    /// refused ([`crate::StoreError::refusal`]).
    #[tracing::instrument(name = "db.task.update_inputs", skip_all, err(level = "debug"))]
    pub async fn update_inputs(
        &self,
        owner: &Owner,
        id: TaskId,
        responses: &Map<String, Value>,
        validate: impl Fn(&str, &Value, &Value) -> Result<(), String>,
    ) -> Result<Lookup<Result<UpdateOutcome, InputValidationError>>> {
        crate::storable::map("the input responses", responses)?;
        // Every path that changes nothing rolls back explicitly: a dropped transaction is
        // only rolled back once its connection is back in the pool, and until then the
        // row stays locked and claims skip the task.
        let mut tx = self.db.pool().begin().await.db()?;
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

        sqlx::query!(
            r"
            UPDATE tasks SET
                status = CASE WHEN $4 THEN 'working' ELSE 'input_required' END,
                input_requests = CASE WHEN $4 THEN NULL ELSE $5::jsonb END,
                input_responses = input_responses || $6::jsonb,
                -- A task whose run still holds it (it asked while holding the lease, see
                -- held_input.rs) goes on in that run: working again, but not runnable.
                run_after = CASE WHEN $4 AND lease_owner IS NULL THEN now() ELSE NULL END,
                attempt = CASE WHEN $4 AND lease_owner IS NULL THEN 0 ELSE attempt END,
                status_message = CASE WHEN $4 THEN $7 ELSE status_message END,
                updated_at = now(),
                version = version + 1
            WHERE tenant = $1 AND principal = $2 AND id = $3 AND status = 'input_required'
            ",
            &owner.tenant,
            &owner.principal,
            id.0,
            resumed,
            Value::Object(outstanding),
            Value::Object(answered),
            service_messages::INPUT_RECEIVED,
        )
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
        let mut tx = self.db.pool().begin().await.db()?;
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
        let held = sqlx::query_scalar!(
            "SELECT lease_expires_at > now() FROM tasks
             WHERE tenant = $1 AND principal = $2 AND id = $3 AND lease_owner IS NOT NULL",
            &owner.tenant,
            &owner.principal,
            id.0,
        )
        .fetch_optional(&mut *tx)
        .await
        .db()?
        .flatten()
        .unwrap_or(false);

        let outcome = if held {
            sqlx::query!(
                r"
                WITH flagged AS (
                    UPDATE tasks SET cancel_requested_at = coalesce(cancel_requested_at, now())
                    WHERE tenant = $1 AND principal = $2 AND id = $3
                    RETURNING id
                )
                SELECT pg_notify($4, id::text) FROM flagged
                ",
                &owner.tenant,
                &owner.principal,
                id.0,
                notify::CANCEL,
            )
            .fetch_all(&mut *tx)
            .await
            .db()?;
            CancelOutcome::Requested
        } else {
            checked!(query!(
                "UPDATE tasks SET
                     status = 'cancelled',
                     end_reason = 'cancelled_by_client',
                     status_message = NULL,
                     cancel_requested_at = coalesce(cancel_requested_at, now()),
                     "
                    + FINISH_COLUMNS
                    + "
                 WHERE tenant = $1 AND principal = $2 AND id = $3",
                &owner.tenant,
                &owner.principal,
                id.0
            ))
            .execute(&mut *tx)
            .await
            .db()?;
            CancelOutcome::Cancelled
        };
        tx.commit().await.db()?;
        Ok(Lookup::Found(outcome))
    }
}

/// Tells an expired-and-deleted task of this owner from one it never had.
pub(crate) async fn missing<'e, T>(
    executor: impl sqlx::PgExecutor<'e>,
    owner: &Owner,
    id: TaskId,
) -> Result<Lookup<T>> {
    let expired = sqlx::query_scalar!(
        r#"SELECT EXISTS (
               SELECT 1 FROM tombstones
               WHERE owner = mcp_tasks_owner_digest($1, $2) AND id = $3
           ) AS "expired!""#,
        &owner.tenant,
        &owner.principal,
        id.0,
    )
    .fetch_one(executor)
    .await
    .db()?;
    Ok(if expired {
        Lookup::Expired
    } else {
        Lookup::NotFound
    })
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
