//! What replicas need for push: registering the tasks they watch, and reading many
//! tasks at once.

use uuid::Uuid;

use crate::record::TaskRow;
use crate::{Owner, Result, Store, TaskId, TaskRecord};

/// Splits `(owner, id)` pairs into the three arrays `unnest` takes.
fn columns(tasks: &[(Owner, TaskId)]) -> (Vec<&str>, Vec<&str>, Vec<Uuid>) {
    let tenants = tasks.iter().map(|(o, _)| o.tenant.as_str()).collect();
    let principals = tasks.iter().map(|(o, _)| o.principal.as_str()).collect();
    let ids = tasks.iter().map(|(_, id)| id.0).collect();
    (tenants, principals, ids)
}

impl Store {
    /// Registers (or refreshes) `replica`'s interest in these tasks for `ttl_ms`. Changes
    /// to them NOTIFY `mcp_tasks_changed` until the registration expires.
    #[tracing::instrument(name = "db.watch.register", skip_all, fields(tasks = tasks.len()), err)]
    pub async fn watch(&self, replica: &str, tasks: &[(Owner, TaskId)], ttl_ms: i64) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let (tenants, principals, ids) = columns(tasks);
        sqlx::query(
            r"
            INSERT INTO task_watches (tenant, principal, id, replica, expires_at)
            SELECT t, p, i, $4, now() + $5 * interval '1 millisecond'
            FROM unnest($1::text[], $2::text[], $3::uuid[]) AS w(t, p, i)
            ON CONFLICT (tenant, principal, id, replica)
            DO UPDATE SET expires_at = EXCLUDED.expires_at
            ",
        )
        .bind(&tenants)
        .bind(&principals)
        .bind(&ids)
        .bind(replica)
        .bind(ttl_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Withdraws `replica`'s interest in these tasks.
    #[tracing::instrument(name = "db.watch.unregister", skip_all, fields(tasks = tasks.len()), err)]
    pub async fn unwatch(&self, replica: &str, tasks: &[(Owner, TaskId)]) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let (tenants, principals, ids) = columns(tasks);
        sqlx::query(
            r"
            DELETE FROM task_watches w
            USING unnest($1::text[], $2::text[], $3::uuid[]) AS d(t, p, i)
            WHERE w.tenant = d.t AND w.principal = d.p AND w.id = d.i AND w.replica = $4
            ",
        )
        .bind(&tenants)
        .bind(&principals)
        .bind(&ids)
        .bind(replica)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Deletes expired registrations (of replicas that went away).
    pub async fn purge_watches(&self, limit: i64) -> Result<u64> {
        let done = sqlx::query(
            r"
            DELETE FROM task_watches
            WHERE ctid IN (SELECT ctid FROM task_watches WHERE expires_at < now() LIMIT $1)
            ",
        )
        .bind(limit)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Reads many tasks in one statement, each only for its own owner. Missing ones are
    /// simply absent from the result.
    #[tracing::instrument(name = "db.task.get_many", skip_all, fields(tasks = tasks.len()), err)]
    pub async fn get_tasks(&self, tasks: &[(Owner, TaskId)]) -> Result<Vec<TaskRecord>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let (tenants, principals, ids) = columns(tasks);
        let rows: Vec<TaskRow> = sqlx::query_as(
            r"
            SELECT t.* FROM tasks t
            JOIN unnest($1::text[], $2::text[], $3::uuid[]) AS k(tenant, principal, id)
              ON t.tenant = k.tenant AND t.principal = k.principal AND t.id = k.id
            ",
        )
        .bind(&tenants)
        .bind(&principals)
        .bind(&ids)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(TryInto::try_into).collect()
    }

    /// The current version of each of these tasks that still exists.
    pub async fn versions(&self, tasks: &[(Owner, TaskId)]) -> Result<Vec<(TaskId, i64)>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let (tenants, principals, ids) = columns(tasks);
        let rows: Vec<(Uuid, i64)> = sqlx::query_as(
            r"
            SELECT t.id, t.version FROM tasks t
            JOIN unnest($1::text[], $2::text[], $3::uuid[]) AS k(tenant, principal, id)
              ON t.tenant = k.tenant AND t.principal = k.principal AND t.id = k.id
            ",
        )
        .bind(&tenants)
        .bind(&principals)
        .bind(&ids)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|(id, v)| (TaskId(id), v)).collect())
    }
}
