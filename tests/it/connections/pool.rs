//! The database reserve: client requests that hold every pooled connection cannot take
//! the readiness probe's own connection, so `/readyz` still answers from the database.

use super::*;
use mcp_tasks_store::PoolConfig;
use sqlx::Connection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_while_client_requests_hold_every_pooled_connection() {
    let db = TestDb::new().await;
    let store = Store::connect(
        &db.url,
        &PoolConfig {
            max_connections: 2,
            ..PoolConfig::default()
        },
    )
    .await
    .expect("connect");
    let replica = Replica::start(&store, registry("conformance")).await;
    let client = replica.client("alice");
    let created = bounded(
        "tools/call",
        client.call_tool("slow_compute", json!({ "seconds": 60 })),
    )
    .await
    .expect("tools/call");
    let id = task_id(&created);

    // Hold the task's row, so each cancel waits on it while holding a pooled connection.
    let mut holder = db.sql().await;
    let mut tx = holder.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1::uuid FOR UPDATE")
        .bind(&id)
        .execute(&mut *tx)
        .await
        .expect("lock the row");
    let cancels: Vec<_> = (0..4)
        .map(|_| {
            let (client, id) = (replica.client("alice"), id.clone());
            tokio::spawn(async move { client.cancel_task(&id).await })
        })
        .collect();
    eventually(
        BOUND,
        "both pooled connections wait on the held row",
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'mcp-tasks'
               AND wait_event_type = 'Lock'",
            )
            .fetch_one(&db.pool)
            .await
            .expect("pg_stat_activity");
            (waiting == 2).then_some(())
        },
    )
    .await;

    // Every pooled connection is taken and more requests queue for one; the probe's
    // connection is not among them.
    let base = replica.origin();
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);

    tx.commit().await.expect("release the row");
    // Queued behind the lock, a cancel either lands or is told to retry; none hangs.
    let mut landed = 0;
    for cancel in cancels {
        landed += usize::from(
            bounded("tasks/cancel", cancel)
                .await
                .expect("joined")
                .is_ok(),
        );
    }
    assert!(landed > 0, "no cancel landed once the row was free");
    let task = bounded("tasks/get", client.get_task(&id))
        .await
        .expect("tasks/get");
    assert_eq!(task["status"], "cancelled", "{task}");
    replica.stop().await;
}
