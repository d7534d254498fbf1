//! Multi-row writes lock their rows in key order, so two of them that share rows (a
//! worker's finish batch and a replica's watch marks, two replicas' watch marks) wait
//! for each other at worst, and never deadlock.
//!
//! The interleaving that deadlocks statements locking in the order they were given is
//! built with two blocking transactions: the watch takes `b`, then waits for `x`; the
//! finish batch takes `a`, then waits for `y`. Once both blockers end, the watch wants
//! `a` and the batch wants `b`.

use std::time::Duration;

use futures::future::join_all;
use mcp_tasks_store::testing::{Seed, SeedState};
use mcp_tasks_store::{Finish, Lease, Owner, PoolConfig, Store, TaskId};
use serde_json::json;

use super::{text_result, until_lock_waiters};
use crate::harness::fixtures::{create, new_task};
use crate::harness::{TestDb, eventually};

/// Enough other rows that the planner reads the batch's rows by the primary key, one
/// after another in the order given, as it does in production.
async fn filler(db: &TestDb) {
    let stuck = |_| Seed {
        state: SeedState::Queued { run_after: None },
        retention_ms: 60_000,
        ..Seed::new(Owner::new("filler", "filler"), "echo")
    };
    db.store.seed((0..5000).map(stuck)).await.expect("filler");
    sqlx::query("ANALYZE tasks")
        .execute(&db.pool)
        .await
        .expect("analyze");
}

async fn lock_row(tx: &mut sqlx::PgConnection, id: TaskId) {
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(id.0)
        .execute(tx)
        .await
        .expect("lock row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_batch_and_watch_marks_sharing_rows_do_not_deadlock() {
    let db = TestDb::new().await;
    filler(&db).await;
    let owner = super::alice();

    let worker = Store::connect(&db.url, &PoolConfig::default())
        .await
        .expect("worker store");
    let replica = Store::connect(&db.url, &PoolConfig::default())
        .await
        .expect("replica store");
    let (finishes, marks) = (worker.worker(), replica.replica());
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            create(&db.store, &owner, new_task("echo", json!({ "i": i })))
                .await
                .id,
        );
    }
    let claimed = worker.worker().claim("W", 5, 600_000).await.expect("claim");
    let lease = |id: TaskId| -> Lease {
        claimed
            .iter()
            .find(|c| c.lease.id == id)
            .expect("claimed")
            .lease
            .clone()
    };
    let (gate, a, b, x, y) = (ids[0], ids[1], ids[2], ids[3], ids[4]);

    let mut hold_gate = db.pool.begin().await.expect("begin");
    lock_row(&mut hold_gate, gate).await;
    let mut hold_x = db.pool.begin().await.expect("begin");
    lock_row(&mut hold_x, x).await;
    let mut hold_y = db.pool.begin().await.expect("begin");
    lock_row(&mut hold_y, y).await;

    let done = Finish::Completed(text_result("done"));
    let (gate_lease, batch_leases) = (lease(gate), [a, y, b].map(lease));
    // The gate's batch waits for its row; a, y and b then queue, in that order, for the
    // next batch.
    let first = finishes.finish(&gate_lease, &done, None);
    tokio::pin!(first);
    assert!(futures::poll!(&mut first).is_pending());
    until_lock_waiters(&db.pool, 1).await;
    let batch = join_all(batch_leases.iter().map(|l| finishes.finish(l, &done, None)));
    tokio::pin!(batch);
    assert!(futures::poll!(&mut batch).is_pending());
    // The watch takes `b` and waits for `x`.
    let watch_marks = [b, x, a].map(|id| (owner.clone(), id));
    let watch = marks.watch(&watch_marks, 60_000);
    let release = async {
        until_lock_waiters(&db.pool, 2).await;
        hold_gate.commit().await.expect("commit");
        // Once the gate's batch is done, the next one takes `a` and waits for `y`.
        eventually(Duration::from_secs(20), "the gate's finish", || async {
            let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
                .bind(gate.0)
                .fetch_one(&db.pool)
                .await
                .expect("status");
            (status == "completed").then_some(())
        })
        .await;
        until_lock_waiters(&db.pool, 2).await;
        hold_x.commit().await.expect("commit");
        tokio::time::sleep(Duration::from_millis(200)).await;
        hold_y.commit().await.expect("commit");
    };
    let (first, batch, watched, ()) = tokio::join!(first, batch, watch, release);

    assert!(matches!(first, Ok(true)), "{first:?}");
    for landed in batch {
        assert!(matches!(landed, Ok(true)), "{landed:?}");
    }
    watched.expect("the watch marks deadlocked with the finish batch");
    let marked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE id = ANY($1) AND watched_until > now()",
    )
    .bind([a, b, x].map(|id| id.0).to_vec())
    .fetch_one(&db.pool)
    .await
    .expect("marks");
    assert_eq!(marked, 3);
    worker.close().await;
    replica.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_watch_marks_sharing_rows_do_not_deadlock() {
    let db = TestDb::new().await;
    filler(&db).await;
    let owner = Owner::new("acme", "watcher");
    let other = Store::connect(&db.url, &PoolConfig::default())
        .await
        .expect("second replica");
    let second_replica = other.replica();
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            create(&db.store, &owner, new_task("echo", json!({ "i": i })))
                .await
                .id,
        );
    }
    let (a, b, x, y) = (ids[0], ids[1], ids[2], ids[3]);
    let mut hold_x = db.pool.begin().await.expect("begin");
    lock_row(&mut hold_x, x).await;
    let mut hold_y = db.pool.begin().await.expect("begin");
    lock_row(&mut hold_y, y).await;

    let one = [a, y, b].map(|id| (owner.clone(), id));
    let two = [b, x, a].map(|id| (owner.clone(), id));
    let replica = db.store.replica();
    let first = replica.watch(&one, 60_000);
    let second = async {
        until_lock_waiters(&db.pool, 1).await;
        second_replica.watch(&two, 60_000).await
    };
    let release = async {
        until_lock_waiters(&db.pool, 2).await;
        hold_x.commit().await.expect("commit");
        tokio::time::sleep(Duration::from_millis(200)).await;
        hold_y.commit().await.expect("commit");
    };
    let (first, second, ()) = tokio::join!(first, second, release);
    first.expect("the first replica's marks");
    second.expect("the second replica's marks");
    other.close().await;
}
