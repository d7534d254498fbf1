//! The benchmarks' own SQL: a scratch database per run, and the designs ours is compared
//! against. None of it belongs in the shipped store (it creates and drops databases and
//! turns triggers off), so the benchmarks talk to PostgreSQL directly here.

use mcp_tasks_store::{Lease, PoolConfig, Store};
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use sqlx::{Connection, PgConnection};

/// A database created for one benchmark run and dropped afterwards.
pub(crate) struct ScratchDatabase {
    pub(crate) url: String,
    /// The store under test.
    pub(crate) store: Store,
    /// A pool of the benchmark's own, for the SQL the store does not (and must not) offer.
    pub(crate) sql: PgPool,
    admin_url: String,
    name: String,
}

impl ScratchDatabase {
    /// Creates and migrates a new database on the server `admin_url` points at.
    pub(crate) async fn create(admin_url: &str, pool: &PoolConfig) -> anyhow::Result<Self> {
        let name = format!("mcp_tasks_bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(mcp_tasks_devdb::create_database_sql(
            &name,
        )))
        .execute(&mut admin)
        .await?;
        admin.close().await?;
        let url = mcp_tasks_devdb::with_database(admin_url, &name);
        let store = Store::connect(&url, pool).await?;
        store.migrate().await?;
        let sql = PgPoolOptions::new()
            .max_connections(pool.max_connections)
            .connect_lazy(&url)?;
        Ok(Self {
            url,
            store,
            sql,
            admin_url: admin_url.to_owned(),
            name,
        })
    }

    pub(crate) async fn drop_database(self) -> anyhow::Result<()> {
        self.store.close().await;
        self.sql.close().await;
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut admin)
        .await?;
        Ok(())
    }

    /// Turns the watchers trigger off or on.
    pub(crate) async fn set_watch_trigger(&self, enabled: bool) -> anyhow::Result<()> {
        let sql = if enabled {
            "ALTER TABLE tasks ENABLE TRIGGER tasks_notify_watchers"
        } else {
            "ALTER TABLE tasks DISABLE TRIGGER tasks_notify_watchers"
        };
        sqlx::query(sql).execute(&self.sql).await?;
        Ok(())
    }

    /// Clears every watch mark (a replica never does: it cannot know whether another one
    /// still watches a task, so it lets its marks lapse).
    pub(crate) async fn unwatch_all(&self) -> anyhow::Result<()> {
        sqlx::query("UPDATE tasks SET watched_until = NULL WHERE watched_until IS NOT NULL")
            .execute(&self.sql)
            .await?;
        Ok(())
    }

    /// A LISTEN connection on `channel`, for the bare NOTIFY-to-LISTEN baseline.
    pub(crate) async fn listener(&self, channel: &str) -> anyhow::Result<PgListener> {
        let mut listener = PgListener::connect(&self.url).await?;
        listener.listen(channel).await?;
        Ok(listener)
    }
}

/// The naive design the push issue warns against: a status change that NOTIFYs in its
/// own transaction whether or not anyone listens. The same fenced UPDATE as the store's
/// `set_status_message`, plus the NOTIFY.
pub(crate) async fn status_with_notify(
    sql: &PgPool,
    lease: &Lease,
    message: &str,
) -> anyhow::Result<bool> {
    let notified: Option<bool> = sqlx::query_scalar(
        r"
        WITH changed AS (
            UPDATE tasks SET status_message = $5, updated_at = now(), version = version + 1
            WHERE tenant = $1 AND principal = $2 AND id = $3 AND lease_token = $4
              AND status = 'working' AND lease_expires_at > now()
            RETURNING id, version
        )
        SELECT pg_notify('mcp_tasks_bench', id::text || ' ' || version) IS NOT NULL FROM changed
        ",
    )
    .bind(&lease.owner.tenant)
    .bind(&lease.owner.principal)
    .bind(lease.id.0)
    .bind(lease.token)
    .bind(message)
    .fetch_optional(sql)
    .await?;
    Ok(notified.is_some())
}

/// One bare NOTIFY, as the baseline's sender.
pub(crate) async fn notify(sql: &PgPool, channel: &str, payload: &str) -> anyhow::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(sql)
        .await?;
    Ok(())
}
