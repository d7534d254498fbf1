//! A fresh, migrated database per test, so tests run in parallel without seeing each
//! other's tasks.
//!
//! Where the server comes from, in order:
//! 1. `DATABASE_URL` (as in CI): a new database is created on that server per test;
//! 2. a PostgreSQL container (testcontainers), when a Docker-compatible engine answers
//!    (`container.rs`), removed when the test process ends;
//! 3. a throwaway cluster from the local PostgreSQL binaries (what `mcp-tasks dev` uses),
//!    also when the engine is present but unusable.

use std::sync::OnceLock;
use std::time::Duration;

use mcp_tasks_devdb::with_database;
use mcp_tasks_server::Stores;
use mcp_tasks_store::{PoolConfig, Store};
use sqlx::Connection;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};

/// A database that is dropped when the test ends.
pub(crate) struct TestDb {
    pub(crate) url: String,
    pub(crate) store: Store,
    /// A pool of the test's own, for checks in SQL that the store API does not offer
    /// (the store's pool is its own business).
    pub(crate) pool: PgPool,
    name: String,
    admin_url: String,
}

static SERVER: OnceLock<String> = OnceLock::new();

pub(crate) fn server_url() -> String {
    SERVER
        .get_or_init(|| {
            if let Ok(url) = std::env::var("DATABASE_URL") {
                super::announce("tests: PostgreSQL from DATABASE_URL");
                return url;
            }
            if super::container::engine_socket().is_some() {
                // Its own thread: the container is started on a runtime of its own, and
                // this may be called from inside a test's runtime.
                match std::thread::spawn(super::container::start).join() {
                    Ok(Ok(url)) => return url,
                    Ok(Err(why)) => super::announce(&format!(
                        "tests: the container engine is present but unusable ({why}); falling back to a local throwaway cluster"
                    )),
                    Err(_) => super::announce(
                        "tests: starting a container failed unexpectedly; falling back to a local throwaway cluster",
                    ),
                }
            }
            let db = mcp_tasks_devdb::DevDatabase::start_watched().expect(
                "no DATABASE_URL, no usable container engine, and no local PostgreSQL binaries: cannot run the tests",
            );
            super::announce(&format!("tests: PostgreSQL from a local throwaway cluster ({})", db.url()));
            let url = db.url().to_owned();
            // Kept for the life of the test process; its watcher stops the cluster and
            // deletes its directory once this process is gone.
            std::mem::forget(db);
            url
        })
        .clone()
}

impl TestDb {
    /// A fresh database with the schema migrated.
    pub(crate) async fn new() -> Self {
        let db = Self::empty().await;
        db.store.migrate().await.expect("migrate");
        db
    }

    /// A fresh database without any schema (for tests of migrating itself).
    pub(crate) async fn empty() -> Self {
        let admin_url = server_url();
        let name = format!("mcp_tasks_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = connect_retrying(&admin_url).await;
        sqlx::query(sqlx::AssertSqlSafe(mcp_tasks_devdb::create_database_sql(
            &name,
        )))
        .execute(&mut admin)
        .await
        .expect("CREATE DATABASE");
        let url = with_database(&admin_url, &name);
        let store = Store::connect(
            &url,
            &PoolConfig {
                max_connections: 10,
                ..PoolConfig::default()
            },
        )
        .await
        .expect("connect");
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_lazy(&url)
            .expect("test pool");
        Self {
            url,
            store,
            pool,
            name,
            admin_url,
        }
    }

    /// A plain connection, for checks the store API does not offer.
    pub(crate) async fn sql(&self) -> PgConnection {
        connect_retrying(&self.url).await
    }

    /// The number of task rows where `condition` (SQL) holds; `true` counts them all.
    pub(crate) async fn count_tasks(&self, condition: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM tasks WHERE {condition}"
        )))
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|e| panic!("counting tasks where {condition}: {e}"))
    }
}

/// The handles a replica gets from `store`, as the binary wires them.
pub(crate) fn replica_stores(store: &Store) -> Stores {
    Stores {
        tasks: store.replica(),
        console: store.console(),
        sessions: store.sessions(),
    }
}

async fn connect_retrying(url: &str) -> PgConnection {
    let mut last = None;
    for _ in 0..50 {
        match PgConnection::connect(url).await {
            Ok(c) => return c,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot connect to {url}: {last:?}");
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Dropping needs async I/O, and the test's runtime may be gone already.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut c) = PgConnection::connect(&admin_url).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut c)
                    .await;
                }
            });
        })
        .join();
    }
}
