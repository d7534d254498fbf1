//! Expiry, retention and tombstones: a task past its ttl fails, stays readable for its
//! retention, is deleted, and its owner is told "expired" for a while after.

use std::time::{Duration, Instant};

use mcp_tasks_store::{Finish, Lookup, MaintenanceReport, NewTask, Owner, TaskId};
use mcp_tasks_wire::TaskStatus;
use serde_json::{Value, json};

use super::{alice, answers, micros, text_result, validator};
use crate::harness::fixtures::{claim_id, create, found, new_task, row};
use crate::harness::{TestDb, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_and_retention() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();

    // A task without a ttl, held by a worker for the whole test.
    let forever = create(
        store,
        &owner,
        NewTask {
            ttl_ms: None,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let forever_lease = claim_id(store, "W", 120_000, forever.id).await.lease;

    // A task with ttl 300 ms that nobody runs.
    let started = Instant::now();
    let task = create(
        store,
        &owner,
        NewTask {
            ttl_ms: Some(300),
            retention_ms: 400,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let id = task.id;
    let r = row(pool, id).await;
    assert_ne!(r["expires_at"], Value::Null);
    let consistent: bool = sqlx::query_scalar(
        "SELECT expires_at = created_at + ttl_ms * interval '1 millisecond' FROM tasks WHERE id = $1",
    )
    .bind(id.0)
    .fetch_one(pool)
    .await
    .expect("expires_at");
    assert!(consistent, "expires_at is not created_at + ttl_ms: {r}");
    if started.elapsed() < Duration::from_millis(200) {
        assert_eq!(store.worker().expire_overdue(100).await.expect("expire"), 0);
        assert_eq!(found(store, &owner, id).await.status, TaskStatus::Working);
    }

    eventually(
        Duration::from_secs(10),
        "the task to expire",
        || async move { (store.worker().expire_overdue(100).await.expect("expire") == 1).then_some(()) },
    )
    .await;
    let expired_at = Instant::now();
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Failed);
    assert_eq!(rec.status_message.as_deref(), Some("Task has expired"));
    let error = rec.error.clone().expect("error");
    assert_eq!(error.code, -32603);
    assert_eq!(error.message, "Task has expired");
    let finished = rec.finished_at.expect("finished_at");
    assert!(finished - rec.created_at >= time::Duration::milliseconds(300));
    // ttl_ms is raised so the failed task stays readable for its retention period:
    // created_at + ttl_ms >= finished_at + retention_ms. ttlMs is whole milliseconds, so
    // the comparison allows half a millisecond (see `retained_ttl_covers_retention`).
    let ttl = rec.ttl_ms.expect("ttl_ms");
    let readable_until = i128::from(ttl) * 1000;
    let retained_until = micros(finished - rec.created_at) + i128::from(rec.retention_ms) * 1000;
    assert!(
        readable_until + 500 >= retained_until,
        "ttl_ms {ttl} does not cover retention: readable {readable_until} µs < {retained_until} µs after creation"
    );
    assert!(
        readable_until <= retained_until + 1000,
        "ttl_ms {ttl} raised beyond what retention needs"
    );
    let consistent: bool = sqlx::query_scalar(
        "SELECT expires_at = created_at + ttl_ms * interval '1 millisecond' FROM tasks WHERE id = $1",
    )
    .bind(id.0)
    .fetch_one(pool)
    .await
    .expect("expires_at");
    assert!(
        consistent,
        "expires_at not kept in step with the raised ttl_ms"
    );

    // Not deleted before its retention is over.
    if expired_at.elapsed() < Duration::from_millis(250) {
        assert_eq!(store.worker().purge_expired(100).await.expect("purge"), 0);
        assert_eq!(found(store, &owner, id).await.status, TaskStatus::Failed);
    }
    // Deleted after.
    eventually(
        Duration::from_secs(10),
        "the task to be purged",
        || async move { (store.worker().purge_expired(100).await.expect("purge") == 1).then_some(()) },
    )
    .await;
    assert_eq!(row(pool, id).await, Value::Null, "row not deleted");

    // The owner is told "expired"; nobody else can tell it ever existed.
    assert_eq!(
        store.replica().get_task(&owner, id).await.expect("get"),
        Lookup::Expired
    );
    assert_eq!(
        store
            .replica()
            .get_task(&Owner::new("acme", "bob"), id)
            .await
            .expect("get"),
        Lookup::NotFound
    );
    assert_eq!(
        store
            .replica()
            .get_task(&Owner::new("other", "alice"), id)
            .await
            .expect("get"),
        Lookup::NotFound
    );
    assert_eq!(
        store
            .replica()
            .get_task(&owner, TaskId::random())
            .await
            .expect("get"),
        Lookup::NotFound
    );
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, id)
            .await
            .expect("cancel"),
        Lookup::Expired
    );
    assert_eq!(
        store
            .replica()
            .update_inputs(&owner, id, &answers(&[("k", json!({}))]), validator)
            .await
            .expect("update"),
        Lookup::Expired
    );

    // Young tombstones are kept; old ones are forgotten.
    assert_eq!(
        store
            .worker()
            .purge_tombstones(600_000, 100)
            .await
            .expect("tombstones"),
        0
    );
    assert_eq!(
        store.replica().get_task(&owner, id).await.expect("get"),
        Lookup::Expired
    );
    eventually(
        Duration::from_secs(10),
        "the tombstone to go",
        || async move {
            (store
                .worker()
                .purge_tombstones(0, 100)
                .await
                .expect("tombstones")
                == 1)
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        store.replica().get_task(&owner, id).await.expect("get"),
        Lookup::NotFound
    );

    // A task that completes keeps its result readable for its retention, past its ttl.
    let short = create(
        store,
        &owner,
        NewTask {
            ttl_ms: Some(300),
            retention_ms: 1000,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let c = claim_id(store, "W", 60_000, short.id).await;
    assert!(
        store
            .worker()
            .finish(&c.lease, &Finish::Completed(text_result("kept")), None)
            .await
            .expect("finish")
    );
    let finished_at = Instant::now();
    let rec = found(store, &owner, short.id).await;
    assert!(
        rec.ttl_ms.expect("ttl") >= 1000,
        "ttl_ms not raised at finish: {:?}",
        rec.ttl_ms
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let report = store
        .worker()
        .maintain(100, 600_000)
        .await
        .expect("maintain");
    if finished_at.elapsed() < Duration::from_millis(950) {
        // (The fair order's lanes are its own bookkeeping, forgotten as the clock passes.)
        assert_eq!(
            MaintenanceReport {
                lanes_forgotten: 0,
                ..report
            },
            MaintenanceReport::default()
        );
        let rec = found(store, &owner, short.id).await;
        assert_eq!(rec.status, TaskStatus::Completed);
        assert_eq!(rec.result, Some(text_result("kept")));
    }
    // ... and is deleted once that is over.
    eventually(
        Duration::from_secs(10),
        "the completed task to be purged",
        || async move { (store.worker().purge_expired(100).await.expect("purge") == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        store
            .replica()
            .get_task(&owner, short.id)
            .await
            .expect("get"),
        Lookup::Expired
    );

    // A held task expires too, and its worker loses the lease at that moment.
    let held = create(
        store,
        &owner,
        NewTask {
            ttl_ms: Some(300),
            retention_ms: 60_000,
            ..new_task("slow_compute", json!({"seconds": 1}))
        },
    )
    .await;
    let held_lease = claim_id(store, "W", 60_000, held.id).await.lease;
    eventually(
        Duration::from_secs(10),
        "the held task to expire",
        || async move { (store.worker().expire_overdue(100).await.expect("expire") == 1).then_some(()) },
    )
    .await;
    let rec = found(store, &owner, held.id).await;
    assert_eq!(rec.status, TaskStatus::Failed);
    assert_eq!(rec.status_message.as_deref(), Some("Task has expired"));
    assert_eq!(rec.lease_owner, None);
    let before = row(pool, held.id).await;
    assert!(!store.worker().holds(&held_lease).await.expect("holds"));
    assert!(
        store
            .worker()
            .heartbeat(std::slice::from_ref(&held_lease), 60_000)
            .await
            .expect("heartbeat")
            .is_empty()
    );
    assert!(
        !store
            .worker()
            .finish(
                &held_lease,
                &Finish::Completed(text_result("too late")),
                None
            )
            .await
            .expect("finish")
    );
    assert_eq!(
        row(pool, held.id).await,
        before,
        "the expired task's worker wrote"
    );

    // A task without a ttl never expires, running or finished.
    let rec = found(store, &owner, forever.id).await;
    assert_eq!(rec.status, TaskStatus::Working);
    assert_eq!(rec.ttl_ms, None);
    assert_eq!(row(pool, forever.id).await["expires_at"], Value::Null);
    assert!(
        store
            .worker()
            .finish(
                &forever_lease,
                &Finish::Completed(text_result("done")),
                None
            )
            .await
            .expect("finish")
    );
    let rec = found(store, &owner, forever.id).await;
    assert_eq!(rec.status, TaskStatus::Completed);
    assert_eq!(rec.ttl_ms, None, "finishing gave an unlimited task a ttl");
    assert_eq!(row(pool, forever.id).await["expires_at"], Value::Null);
    let report = store
        .worker()
        .maintain(100, 600_000)
        .await
        .expect("maintain");
    assert_eq!((report.expired, report.deleted), (0, 0), "{report:?}");
    assert_eq!(
        found(store, &owner, forever.id).await.status,
        TaskStatus::Completed
    );
}

/// The ttl a task gets when it finishes must keep it readable for its *whole* retention
/// period. `mcp_tasks_retained_ttl` computes `(elapsed seconds * 1000)::bigint +
/// retention`, and numeric-to-bigint rounds to nearest, so whenever the elapsed time has
/// a sub-millisecond part below one half, the task expires up to 0.5 ms before
/// `finished_at + retention_ms`. Checked here with exact, fixed elapsed times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_ttl_covers_retention() {
    let db = TestDb::new().await;
    for elapsed_us in [1_000_000_i64, 1_000_400, 1_000_499, 1_000_500, 1_000_900] {
        // created = now() - elapsed; the task is readable until created + ttl, which must
        // be at least now() + retention.
        let (ttl, covered): (i64, bool) = sqlx::query_as(
            "WITH c AS (SELECT now() - $1 * interval '1 microsecond' AS created)
             SELECT mcp_tasks_retained_ttl(c.created, 1, 400),
                    c.created + mcp_tasks_retained_ttl(c.created, 1, 400) * interval '1 millisecond'
                        >= now() + 400 * interval '1 millisecond'
             FROM c",
        )
        .bind(elapsed_us)
        .fetch_one(&db.pool)
        .await
        .expect("retained ttl");
        assert!(
            covered,
            "elapsed {elapsed_us} µs, retention 400 ms: ttl {ttl} ms ends before the retention does"
        );
    }
}
