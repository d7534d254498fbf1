//! `tasks/get` reads in batches (`views.rs`): the gets that queue while one statement
//! runs go together in the next, and each still gets only its own owner's task.

use std::time::Duration;

use futures::future::join_all;
use mcp_tasks_store::{Lookup, Owner, TaskId};
use serde_json::json;

use super::{alice, lock_waiters, until_lock_waiters};
use crate::harness::TestDb;
use crate::harness::fixtures::{create, new_task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_that_queue_together_are_one_statement_and_each_sees_only_its_owners_task() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let replica = store.replica();
    let owner = alice();
    let stranger = Owner::new("acme", "bob");
    let mine = [
        create(store, &owner, new_task("echo", json!({"n": 1})))
            .await
            .id,
        create(store, &owner, new_task("echo", json!({"n": 2})))
            .await
            .id,
    ];
    let theirs = create(store, &stranger, new_task("echo", json!({})))
        .await
        .id;
    let deleted = TaskId(uuid::Uuid::new_v4());
    sqlx::query(
        "INSERT INTO tombstones (owner, id, deleted_at)
         VALUES (mcp_tasks_owner_digest($1, $2), $3, now())",
    )
    .bind(&owner.tenant)
    .bind(&owner.principal)
    .bind(deleted.0)
    .execute(pool)
    .await
    .expect("tombstone");

    // A transaction holding the table against reads: the first get's statement waits
    // behind it, and the gets sent meanwhile queue for the next.
    let mut gate = pool.begin().await.expect("begin");
    sqlx::query("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *gate)
        .await
        .expect("lock table");
    let first = replica.get_view(&owner, mine[0]);
    tokio::pin!(first);
    assert!(futures::poll!(&mut first).is_pending());
    until_lock_waiters(pool, 1).await;

    // Each request with the answer it must get: its owner's task, another owner's task
    // (not found, as an id that never was), a task deleted (expired), an unknown id, and
    // the same task twice.
    let unknown = TaskId(uuid::Uuid::new_v4());
    let requests = [
        (&owner, mine[1], Some(mine[1])),
        (&owner, theirs, None),
        (&stranger, theirs, Some(theirs)),
        (&stranger, mine[0], None),
        (&owner, deleted, None),
        (&owner, unknown, None),
        (&owner, mine[0], Some(mine[0])),
        (&owner, mine[0], Some(mine[0])),
    ];
    let gets = join_all(
        requests
            .iter()
            .map(|(who, id, _)| replica.get_view(who, *id)),
    );
    tokio::pin!(gets);
    assert!(futures::poll!(&mut gets).is_pending());
    // Sent one by one, each would be a statement of its own waiting for the lock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(futures::poll!(&mut gets).is_pending());
    assert_eq!(
        lock_waiters(pool).await,
        1,
        "the gets sent while a batch ran queue in the store, not each as a statement"
    );

    gate.commit().await.expect("release the table");
    let first = first.await.expect("first get");
    assert!(matches!(&first, Lookup::Found(v) if v.task_id == mine[0].to_string()));
    for ((who, id, expected), answer) in requests.iter().zip(gets.await) {
        let answer = answer.expect("get");
        match (expected, answer) {
            (Some(want), Lookup::Found(view)) => assert_eq!(view.task_id, want.to_string()),
            (None, Lookup::Expired) => assert_eq!(*id, deleted, "only the deleted one expired"),
            (None, Lookup::NotFound) => assert_ne!(*id, deleted),
            (want, got) => panic!(
                "{}/{} reading {id}: expected {want:?}, got {}",
                who.tenant,
                who.principal,
                match got {
                    Lookup::Found(v) => format!("task {}", v.task_id),
                    Lookup::Expired => "expired".into(),
                    Lookup::NotFound => "not found".into(),
                }
            ),
        }
    }
}
