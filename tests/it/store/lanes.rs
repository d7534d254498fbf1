//! The fair order's bookkeeping stays small: a lane the clock has passed is forgotten
//! (its next task starts at the clock either way), one with queued work is kept, and the
//! clock rows of stopped workers go, but never the highest.

use mcp_tasks_store::Owner;
use serde_json::json;

use crate::harness::TestDb;
use crate::harness::fixtures::{create, new_task};

async fn lanes(db: &TestDb) -> Vec<(String, String)> {
    sqlx::query_as("SELECT tenant, principal FROM queue_lanes ORDER BY tenant, principal")
        .fetch_all(&db.pool)
        .await
        .expect("reading the lanes")
}

#[tokio::test]
async fn passed_lanes_and_stopped_workers_clocks_are_forgotten() {
    let db = TestDb::new().await;
    let (done, waiting) = (Owner::new("t", "done"), Owner::new("t", "waiting"));
    let first = create(&db.store, &done, new_task("echo", json!({ "n": 1 }))).await;
    create(&db.store, &waiting, new_task("echo", json!({ "n": 2 }))).await;
    create(&db.store, &waiting, new_task("echo", json!({ "n": 3 }))).await;
    let worker = db.store.worker();
    // Keys: `done` 1; `waiting` 2 and 4 (two lanes of the tenant with work, weight 1, so
    // a step of 2). Claims in key order take 1 and 2, and the clock moves to 2.
    let claimed = worker.claim("w1", 2, 60_000).await.expect("claim");
    assert!(
        claimed.iter().any(|c| c.lease.id == first.id),
        "{claimed:?}"
    );
    assert_eq!(lanes(&db).await.len(), 2);

    let forgotten = worker.forget_passed_lanes(100).await.expect("forget lanes");
    assert_eq!(forgotten, 1);
    assert_eq!(
        lanes(&db).await,
        vec![("t".to_owned(), "waiting".to_owned())]
    );

    // Two workers' clocks, both old; only the lower goes.
    worker.claim("w2", 1, 60_000).await.expect("claim");
    sqlx::query("UPDATE queue_clock SET at = now() - interval '2 hours'")
        .execute(&db.pool)
        .await
        .expect("ageing the clock rows");
    assert_eq!(
        worker.forget_stopped_clocks().await.expect("forget clocks"),
        1
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT worker FROM queue_clock")
        .fetch_all(&db.pool)
        .await
        .expect("reading the clock");
    assert_eq!(left, vec!["w2".to_owned()]);
    // Now `waiting` is passed too.
    assert_eq!(
        worker.forget_passed_lanes(100).await.expect("forget lanes"),
        1
    );
    assert!(lanes(&db).await.is_empty());
}
