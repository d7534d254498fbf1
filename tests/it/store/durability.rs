//! "Committed before the handle is returned" holds whatever the database's defaults say:
//! the store's sessions pin `synchronous_commit = on` (and `jit = off`).

use mcp_tasks_store::{PoolConfig, Store};
use sqlx::Connection;

use crate::harness::TestDb;

/// Sets a default of the test's database (`setting = value`), which every new session
/// takes unless it sets its own.
async fn set_database_default(db: &TestDb, assignment: &str) {
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&db.pool)
        .await
        .expect("name");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {name} SET {assignment}"
    )))
    .execute(&db.pool)
    .await
    .expect("alter database");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_commits_synchronously_when_the_database_default_is_off() {
    let db = TestDb::new().await;
    set_database_default(&db, "synchronous_commit = off").await;

    // A session of anyone else takes the database's default ...
    let mut plain = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    let default: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut plain)
        .await
        .expect("show");
    assert_eq!(default, "off");

    // ... and the store's do not.
    let store = Store::connect(&db.url, &PoolConfig::default())
        .await
        .expect("connect");
    assert_eq!(
        store
            .shared()
            .setting("synchronous_commit")
            .await
            .expect("setting"),
        "on"
    );
    store.close().await;
}

/// The claims keep a generic plan, whose estimated cost on a large queue passes
/// `jit_above_cost`: with JIT on, each claim at a million queued tasks compiled itself
/// for some 40 ms (`bench fairness`). The store's sessions turn it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_runs_without_jit_whatever_the_server_default() {
    let db = TestDb::new().await;
    set_database_default(&db, "jit = on").await;

    let store = Store::connect(&db.url, &PoolConfig::default())
        .await
        .expect("connect");
    assert_eq!(store.shared().setting("jit").await.expect("setting"), "off");
    let budget = store.connection_budget(0).await.expect("budget");
    assert_eq!(
        budget.jit, "off",
        "the budget reads what the pools run with"
    );
    store.close().await;
}
