//! Attempts: workers lost on every attempt end in CRASH_RECOVERY; a lapsed or released
//! task whose cancellation was requested is cancelled, not run again.

use mcp_tasks_store::{CancelOutcome, Finish, Lookup, RescueReport};
use mcp_tasks_wire::TaskStatus;
use serde_json::json;

use super::{alice, text_result};
use crate::harness::TestDb;
use crate::harness::fixtures::{claim_id, create, force_lapse, found, new_task, row};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_workers_exhaust_attempts() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();

    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let id = task.id;
    assert_eq!(task.max_attempts, 3);
    for attempt in 1..=3 {
        let c = claim_id(store, &format!("lost-{attempt}"), 60_000, id).await;
        assert_eq!(c.task.attempt, attempt);
        assert_eq!(c.reclaimed, attempt > 1, "attempt {attempt}");
        assert_eq!(c.lease.token, i64::from(attempt));
        if attempt == 3 {
            // Held (not lapsed) with no attempts left: not rescue's business yet.
            assert_eq!(
                store.worker().rescue_lapsed(100).await.expect("rescue"),
                RescueReport::default()
            );
            assert_eq!(found(store, &owner, id).await.status, TaskStatus::Working);
        }
        force_lapse(pool, id).await;
    }

    // No attempts left: nobody may claim it again.
    let before = row(pool, id).await;
    assert!(
        store
            .worker()
            .claim("late", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a task with no attempts left was claimed"
    );
    assert_eq!(row(pool, id).await, before);

    assert_eq!(
        store.worker().rescue_lapsed(100).await.expect("rescue"),
        RescueReport {
            failed: 1,
            cancelled: 0
        }
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Failed);
    let error = rec.error.clone().expect("error");
    assert_eq!(error.code, -32603);
    let data = error.data.clone().expect("error.data");
    assert_eq!(data["reason"], json!("CRASH_RECOVERY"));
    assert_eq!(data["attempts"], json!(3));
    let msg = rec.status_message.clone().unwrap_or_default();
    assert!(msg.contains("CRASH_RECOVERY"), "status message: {msg:?}");
    assert_eq!(rec.attempt, 3);
    assert_eq!(rec.lease_owner, None);
    assert_eq!(rec.lease_expires_at, None);
    assert!(rec.finished_at.is_some());
    assert_eq!(rec.result, None);
    // Nothing more to do.
    assert_eq!(
        store.worker().rescue_lapsed(100).await.expect("rescue"),
        RescueReport::default()
    );
    assert!(
        store
            .worker()
            .claim("late", 10, 60_000)
            .await
            .expect("claim")
            .is_empty()
    );

    // A lapsed lease with attempts left and no cancellation is not rescue's: it is
    // reclaimed.
    let t2 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    claim_id(store, "lost", 60_000, t2.id).await;
    force_lapse(pool, t2.id).await;
    assert_eq!(
        store.worker().rescue_lapsed(100).await.expect("rescue"),
        RescueReport::default()
    );
    let again = claim_id(store, "next", 60_000, t2.id).await;
    assert!(again.reclaimed);
    assert_eq!(again.task.attempt, 2);
    assert!(
        store
            .worker()
            .finish(&again.lease, &Finish::Completed(text_result("ok")), None)
            .await
            .expect("finish")
    );

    // A lapsed lease whose cancellation was requested is cancelled, not re-run.
    let t3 = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    claim_id(store, "lost", 60_000, t3.id).await;
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, t3.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    force_lapse(pool, t3.id).await;
    let before = row(pool, t3.id).await;
    assert!(
        store
            .worker()
            .claim("next", 10, 60_000)
            .await
            .expect("claim")
            .is_empty(),
        "a task whose cancellation was requested was re-run"
    );
    assert_eq!(row(pool, t3.id).await, before);
    assert_eq!(
        store.worker().rescue_lapsed(100).await.expect("rescue"),
        RescueReport {
            failed: 0,
            cancelled: 1
        }
    );
    let rec = found(store, &owner, t3.id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled);
    assert_eq!(rec.error, None);
    assert_eq!(rec.attempt, 1);
    assert_eq!(rec.lease_owner, None);
    assert!(rec.finished_at.is_some());
    assert_eq!(
        rec.status_message.as_deref(),
        Some("Cancelled at the client's request")
    );
}

/// A task whose cancellation was requested while it was held, and whose worker then
/// released it (graceful shutdown), must not be run again: a client that asked to cancel
/// a task nobody holds gets it cancelled at once, and this is the same situation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_task_with_cancel_requested_is_not_rerun() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 1})),
    )
    .await;
    let c = claim_id(store, "draining", 60_000, task.id).await;
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, task.id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    // The worker shuts down before it saw the cancellation and gives the task back.
    assert!(store.worker().release(&c.lease).await.expect("release"));

    let reclaimed = store
        .worker()
        .claim("next", 10, 60_000)
        .await
        .expect("claim");
    assert!(
        reclaimed.is_empty(),
        "the cancelled-by-the-client task was handed to another worker: {:?}",
        reclaimed
            .iter()
            .map(|c| c.lease.clone())
            .collect::<Vec<_>>()
    );
    store.worker().rescue_lapsed(100).await.expect("rescue");
    store
        .worker()
        .maintain(100, 60_000)
        .await
        .expect("maintain");
    let rec = found(store, &owner, task.id).await;
    assert_eq!(rec.status, TaskStatus::Cancelled, "{rec:?}");
}
