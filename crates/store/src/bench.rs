//! SQL used only by `mcp-tasks bench`: scratch databases and the designs the benchmark
//! compares ours against. Kept here because this crate alone writes SQL.

use sqlx::{Connection, PgConnection};

use crate::{Lease, PoolConfig, Result, Store};

/// A database created for one benchmark run and dropped afterwards.
#[derive(Debug)]
pub struct ScratchDatabase {
    pub url: String,
    pub store: Store,
    admin_url: String,
    name: String,
}

impl ScratchDatabase {
    /// Creates and migrates a new database on the server `admin_url` points at.
    pub async fn create(admin_url: &str, pool: &PoolConfig) -> Result<Self> {
        let name = format!("mcp_tasks_bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await?;
        let url = with_database(admin_url, &name);
        let store = Store::connect(&url, pool).await?;
        store.migrate().await?;
        Ok(Self {
            url,
            store,
            admin_url: admin_url.to_owned(),
            name,
        })
    }

    pub async fn drop_database(self) -> Result<()> {
        self.store.pool().close().await;
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut admin)
        .await?;
        Ok(())
    }
}

/// `postgres://host/db?x` with another database name.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| i + scheme_end);
    let mut out = format!("{}/{db}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl Store {
    /// The naive design the push issue warns against: a status change that NOTIFYs in its
    /// own transaction whether or not anyone listens.
    pub async fn bench_status_with_notify(&self, lease: &Lease, message: &str) -> Result<bool> {
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
        .fetch_optional(self.pool())
        .await?;
        Ok(notified.is_some())
    }

    /// Turns the watchers trigger off or on (scratch databases only).
    pub async fn bench_set_watch_trigger(&self, enabled: bool) -> Result<()> {
        let sql = if enabled {
            "ALTER TABLE tasks ENABLE TRIGGER tasks_notify_watchers"
        } else {
            "ALTER TABLE tasks DISABLE TRIGGER tasks_notify_watchers"
        };
        sqlx::query(sql).execute(self.pool()).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn rewrites_database_names() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "x"),
            "postgres://u@h:5/x"
        );
        assert_eq!(with_database("postgres://u@h:5", "x"), "postgres://u@h:5/x");
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}
