//! Behind PgBouncer in transaction mode (a real one, Debian's): a replica and a worker
//! whose pooled statements go through it and whose LISTEN, wake-up duty and migrations go
//! straight to PostgreSQL (`MCP_TASKS_DIRECT_DATABASE_URL`).

use std::time::Duration;

use mcp_tasks_client::{Client, status_of};
use mcp_tasks_devdb::{DevDatabase, DevPooler};
use mcp_tasks_store::{Owner, PoolConfig, Store};
use mcp_tasks_wire::secret::Secret;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

use crate::harness::fixtures::new_task;
use crate::harness::procs::Proc;
use crate::harness::{Need, eventually, last_status, skip};

const WAIT: Duration = Duration::from_secs(60);

/// A throwaway cluster and PgBouncer in transaction mode in front of it.
async fn cluster_behind_a_pooler() -> (DevDatabase, DevPooler) {
    tokio::task::spawn_blocking(|| {
        let db = DevDatabase::start().expect("a cluster");
        let pooler = db.pooler().expect("pgbouncer in front of it");
        (db, pooler)
    })
    .await
    .expect("join")
}

/// A store as a fleet behind the pooler runs: its pools through the pooler, what needs a
/// session (LISTEN, the duty, migrations) straight to the cluster.
async fn store_behind(db: &DevDatabase, pooler: &DevPooler) -> Store {
    let direct: Secret = db.url().parse().expect("url");
    Store::connect(
        pooler.url(),
        &PoolConfig {
            direct_url: Some(direct),
            ..PoolConfig::default()
        },
    )
    .await
    .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_answer_and_push_through_a_transaction_pooler() {
    if skip(Need::Pooler).await {
        return;
    }
    let (db, pooler) = cluster_behind_a_pooler().await;

    // Migrations take a session lock: through the direct URL.
    let store = store_behind(&db, &pooler).await;
    store.migrate().await.expect("migrate behind the pooler");
    let budget = store.connection_budget(2).await.expect("budget");
    assert!(budget.behind_pooler);
    assert_eq!(budget.this_process, 2, "only the direct connections count");
    assert_eq!(
        budget.synchronous_commit, "on",
        "the pooler's connect_query"
    );
    assert_eq!(budget.jit, "off", "the pooler's connect_query");
    store.close().await;

    let env = [("MCP_TASKS_DIRECT_DATABASE_URL", db.url())];
    let replica = Proc::serve(pooler.url(), "conformance", &env).await;
    let worker = Proc::worker(pooler.url(), "conformance", &env).await;
    let client = Client::with_tasks(replica.url());

    // Many statements on shared server connections: nothing prepared on one is looked
    // for on another.
    let mut ids = Vec::new();
    for _ in 0..40 {
        let task = client
            .call_tool("slow_compute", json!({ "seconds": 0 }))
            .await
            .expect("create through the pooler");
        ids.push(task["taskId"].as_str().expect("id").to_owned());
    }
    for id in &ids {
        let done = client.wait_terminal(id, WAIT).await.expect("terminal");
        assert_eq!(status_of(&done), "completed", "{done}");
    }

    // Input: asked, answered, resumed (the answer's wake-up goes by NOTIFY, heard on the
    // worker's direct LISTEN connection).
    let asked = client
        .call_tool("confirm_delete", json!({ "filename": "x" }))
        .await
        .expect("create");
    let id = asked["taskId"].as_str().expect("id").to_owned();
    client
        .poll_until(&id, WAIT, Duration::from_millis(100), |t| {
            status_of(t) == "input_required"
        })
        .await
        .expect("asks for input");
    client
        .update_task(
            &id,
            json!({ "confirm_delete": { "action": "accept", "content": { "confirm": true } } }),
        )
        .await
        .expect("answer");
    let done = client.wait_terminal(&id, WAIT).await.expect("terminal");
    assert_eq!(status_of(&done), "completed", "{done}");

    // Push: a listen stream hears a task's changes, which come by NOTIFY to the replica's
    // direct LISTEN connection.
    let task = client
        .call_tool("slow_compute", json!({ "seconds": 1 }))
        .await
        .expect("create");
    let id = task["taskId"].as_str().expect("id").to_owned();
    let mut sub = client
        .listen(json!("sub"), json!({ "taskIds": [id] }))
        .await
        .expect("listen");
    let last = last_status(&mut sub, WAIT).await;
    assert_eq!(last.as_deref(), Some("completed"));

    // The LISTEN connections are PostgreSQL's own sessions, not the pooler's.
    let sql = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy(db.url())
        .expect("pool");
    eventually(
        WAIT,
        "both LISTEN connections straight to PostgreSQL",
        || async {
            let listeners: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'mcp-tasks-listen'",
            )
            .fetch_one(&sql)
            .await
            .ok()?;
            (listeners >= 2).then_some(())
        },
    )
    .await;
    drop(worker);
    drop(replica);
    drop(pooler);
}

/// A pooler's server connections can lead to a server that refuses writes (a standby it
/// moved to, or a primary being demoted) while the service's own connections to the
/// pooler stay open and were never refused. The write fails with SQLSTATE 25006, which
/// is a database not reachable for writes yet: "try again later" (503 and Retry-After),
/// as in the rest of a failover, not an internal error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_pooler_hands_to_a_read_only_server_is_try_again_later() {
    if skip(Need::Pooler).await {
        return;
    }
    let (db, pooler) = cluster_behind_a_pooler().await;
    let direct = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy(db.url())
        .expect("pool");
    // The store's statements go through the pooler, so none of its connections hears
    // what happens to the server's sessions behind it (the direct URL takes only the
    // migrations here: no LISTEN, no duty).
    let store = store_behind(&db, &pooler).await;
    store.migrate().await.expect("migrate");
    let owner = Owner::new("tenant", "someone");
    store
        .replica()
        .create(&owner, new_task("echo", json!({})), None)
        .await
        .expect("a create on a writable server");

    // From now on the server's new sessions are read-only, and the pooler's server
    // connections are new ones.
    // The server's sessions other than this test's own: the pooler's server connections
    // (and the direct one the migrations used).
    const OTHERS: &str = "FROM pg_stat_activity WHERE datname = 'postgres' \
        AND backend_type = 'client backend' AND pid <> pg_backend_pid()";
    for statement in [
        "ALTER DATABASE postgres SET default_transaction_read_only = on".to_owned(),
        format!("SELECT pg_terminate_backend(pid) {OTHERS}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&direct)
            .await
            .expect(&statement);
    }
    eventually(WAIT, "the pooler's server connections to end", || async {
        let left: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) {OTHERS}")))
                .fetch_one(&direct)
                .await
                .ok()?;
        (left == 0).then_some(())
    })
    .await;
    // PgBouncer reads each ended connection's last message as it comes; a statement sent
    // before it did would get "terminating connection" instead of reaching a new one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = store
        .replica()
        .create(&owner, new_task("echo", json!({})), None)
        .await
        .expect_err("a write on a read-only server");
    assert!(
        refused.to_string().contains("read-only transaction"),
        "the write reached the read-only server: {refused}"
    );
    assert!(refused.is_unavailable(), "{refused}");
    store.close().await;
    drop(pooler);
}
