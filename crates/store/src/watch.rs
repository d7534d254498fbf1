//! What replicas need for push: registering the tasks they watch, and reading many
//! tasks at once.

use uuid::Uuid;

use crate::record::TaskRow;
use crate::sql::checked;
use crate::{DbResult, Owner, ReplicaStore, Result, TaskId, TaskRecord};

/// Splits `(owner, id)` pairs into the three arrays `unnest` takes.
pub(crate) fn columns(tasks: &[(Owner, TaskId)]) -> (Vec<&str>, Vec<&str>, Vec<Uuid>) {
    let tenants = tasks.iter().map(|(o, _)| o.tenant.as_str()).collect();
    let principals = tasks.iter().map(|(o, _)| o.principal.as_str()).collect();
    let ids = tasks.iter().map(|(_, id)| id.0).collect();
    (tenants, principals, ids)
}

impl ReplicaStore {
    /// Marks these tasks watched for `ttl_ms`: changes to them NOTIFY `mcp_tasks_changed`
    /// until the mark lapses. Marks with more than half their time left are not rewritten,
    /// so frequent refreshes cost few writes.
    #[tracing::instrument(name = "db.watch.mark", skip_all, fields(tasks = tasks.len()), err(level = "debug"))]
    pub async fn watch(&self, tasks: &[(Owner, TaskId)], ttl_ms: i64) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let (tenants, principals, ids) = columns(tasks);
        sqlx::query!(
            r"
            WITH locked AS MATERIALIZED (
                -- In key order, as a finish batch takes them (see finish.rs): marks and
                -- finishes sharing rows, or two replicas' marks, cannot deadlock.
                SELECT 1 FROM tasks t
                JOIN unnest($1::text[], $2::text[], $3::uuid[]) AS k(tenant, principal, id)
                  ON t.tenant = k.tenant AND t.principal = k.principal AND t.id = k.id
                WHERE t.watched_until IS NULL
                   OR t.watched_until < now() + $4::int8 * interval '0.5 millisecond'
                ORDER BY t.tenant, t.principal, t.id
                FOR UPDATE OF t
            )
            UPDATE tasks t SET watched_until = now() + $4::int8 * interval '1 millisecond'
            FROM unnest($1::text[], $2::text[], $3::uuid[]) AS k(tenant, principal, id)
            WHERE (SELECT count(*) FROM locked) >= 0
              AND t.tenant = k.tenant AND t.principal = k.principal AND t.id = k.id
              AND (t.watched_until IS NULL OR t.watched_until < now() + $4::int8 * interval '0.5 millisecond')
            ",
            &tenants as _,
            &principals as _,
            &ids,
            ttl_ms,
        )
        .execute(self.db.pool())
        .await
        .db()?;
        Ok(())
    }

    /// Reads many tasks in one statement, each only for its own owner. Missing ones are
    /// simply absent from the result.
    #[tracing::instrument(name = "db.task.get_many", skip_all, fields(tasks = tasks.len()), err(level = "debug"))]
    pub async fn get_tasks(&self, tasks: &[(Owner, TaskId)]) -> Result<Vec<TaskRecord>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let (tenants, principals, ids) = columns(tasks);
        let rows = checked!(query_as!(
            TaskRow,
            "SELECT "
                + TASK_COLUMNS
                + " FROM tasks t
            JOIN unnest($1::text[], $2::text[], $3::uuid[]) AS k(k_tenant, k_principal, k_id)
              ON t.tenant = k.k_tenant AND t.principal = k.k_principal AND t.id = k.k_id",
            &tenants as _,
            &principals as _,
            &ids
        ))
        .fetch_all(self.db.pool())
        .await
        .db()?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The current version of each of these tasks that still exists.
    pub async fn versions(&self, tasks: &[(Owner, TaskId)]) -> Result<Vec<(TaskId, i64)>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let (tenants, principals, ids) = columns(tasks);
        let rows = sqlx::query!(
            r"
            SELECT t.id, t.version FROM tasks t
            JOIN unnest($1::text[], $2::text[], $3::uuid[]) AS k(tenant, principal, id)
              ON t.tenant = k.tenant AND t.principal = k.principal AND t.id = k.id
            ",
            &tenants as _,
            &principals as _,
            &ids,
        )
        .fetch_all(self.db.pool())
        .await
        .db()?;
        Ok(rows
            .into_iter()
            .map(|r| (TaskId(r.id), r.version))
            .collect())
    }
}
