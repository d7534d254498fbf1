//! Tasks the service ends on its own account (cancelled with no run to record it,
//! expired, lost on every attempt) record why; the status message and error clients read
//! are composed from that. Rows that earlier versions wrote carry those texts themselves,
//! and must read exactly alike; the schema refuses rows that would say two things.

use std::time::Duration;

use mcp_tasks_store::{
    CancelOutcome, Lookup, NewTask, Owner, RescueReport, Store, TaskId, TaskRecord,
};
use mcp_tasks_wire::TaskStatus;
use mcp_tasks_wire::service_messages::EndReason;
use serde_json::json;

use crate::harness::fixtures::{self, force_lapse, new_task};
use crate::harness::{TestDb, eventually};

fn owner() -> Owner {
    Owner::new("acme", "ends")
}

async fn create(store: &Store, ttl_ms: Option<i64>, max_attempts: i32) -> TaskId {
    let task = NewTask {
        ttl_ms,
        poll_interval_ms: None,
        max_attempts,
        ..new_task("slow_compute", json!({ "seconds": 1 }))
    };
    fixtures::create(store, &owner(), task).await.id
}

async fn found(store: &Store, id: TaskId) -> TaskRecord {
    fixtures::found(store, &owner(), id).await
}

/// The same task, rewritten as the statements of earlier versions left it: the texts in
/// the row, no reason. (These are those statements' expressions, verbatim.)
async fn rewrite_as_before(db: &TestDb, id: TaskId, reason: EndReason) {
    let texts = match reason {
        EndReason::CancelledByClient => {
            "status_message = 'Cancelled at the client''s request', error = NULL"
        }
        EndReason::Expired => {
            r#"status_message = 'Task has expired',
               error = '{"code": -32603, "message": "Task has expired"}'::jsonb"#
        }
        EndReason::CrashRecovery => {
            r"status_message = 'CRASH_RECOVERY: the worker running this task was lost',
              error = jsonb_build_object(
                  'code', -32603,
                  'message', 'Task failed: the worker running it was lost ' || attempt
                      || ' time(s) and no attempts are left',
                  'data', jsonb_build_object('reason', 'CRASH_RECOVERY', 'attempts', attempt))"
        }
    };
    let done = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE tasks SET end_reason = NULL, {texts} WHERE id = $1"
    )))
    .bind(id.0)
    .execute(&db.pool)
    .await
    .expect("rewrite as before");
    assert_eq!(done.rows_affected(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_tasks_read_the_same_whether_the_row_has_a_reason_or_the_texts() {
    let db = TestDb::new().await;
    let store = &db.store;

    // Cancelled while nobody held it.
    let cancelled = create(store, None, 3).await;
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner(), cancelled)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Cancelled)
    );
    // Past its ttlMs.
    let expired = create(store, Some(1), 3).await;
    eventually(Duration::from_secs(10), "the task to expire", || async {
        (store.worker().expire_overdue(100).await.expect("expire") == 1).then_some(())
    })
    .await;
    // Its only worker lost.
    let lost = create(store, None, 1).await;
    let claimed = store
        .worker()
        .claim("lost", 1, 60_000)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].lease.id, lost);
    force_lapse(&db.pool, lost).await;
    assert_eq!(
        store.worker().rescue_lapsed(100).await.expect("rescue"),
        RescueReport {
            failed: 1,
            cancelled: 0
        }
    );

    for (id, reason, status) in [
        (
            cancelled,
            EndReason::CancelledByClient,
            TaskStatus::Cancelled,
        ),
        (expired, EndReason::Expired, TaskStatus::Failed),
        (lost, EndReason::CrashRecovery, TaskStatus::Failed),
    ] {
        let now = found(store, id).await;
        assert_eq!(now.status, status);
        assert_eq!(now.end_reason, Some(reason));
        let columns: (Option<String>, Option<serde_json::Value>, Option<String>) =
            sqlx::query_as("SELECT status_message, error, end_reason FROM tasks WHERE id = $1")
                .bind(id.0)
                .fetch_one(&db.pool)
                .await
                .expect("columns");
        assert_eq!(
            (columns.0, columns.1),
            (None, None),
            "{reason:?}: the row holds texts"
        );
        assert!(columns.2.is_some());

        rewrite_as_before(&db, id, reason).await;
        let before = found(store, id).await;
        assert_eq!(before.end_reason, None);
        assert_eq!(
            before.view(),
            now.view(),
            "{reason:?}: clients would see a change"
        );
        assert_eq!(
            TaskRecord {
                end_reason: Some(reason),
                ..before
            },
            now
        );
    }
    let lost = found(store, lost).await;
    assert_eq!(
        lost.error.and_then(|e| e.data),
        Some(json!({ "reason": "CRASH_RECOVERY", "attempts": 1 }))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_refuses_a_reason_that_contradicts_the_row() {
    let db = TestDb::new().await;
    let store = &db.store;
    let cancelled = create(store, None, 3).await;
    store
        .replica()
        .cancel_task(&owner(), cancelled)
        .await
        .expect("cancel");
    let working = create(store, None, 3).await;

    for (what, id, set, constraint) in [
        (
            "an unknown reason",
            cancelled,
            "end_reason = 'bored'",
            "tasks_end_reason_known",
        ),
        (
            "a reason and a stored message",
            cancelled,
            "status_message = 'Cancelled'",
            "tasks_end_reason_or_texts",
        ),
        (
            "a failure's reason on a cancelled task",
            cancelled,
            "end_reason = 'expired'",
            "tasks_end_reason_matches_status",
        ),
        (
            "a reason on a live task",
            working,
            "end_reason = 'cancelled_by_client'",
            "tasks_end_reason_matches_status",
        ),
        (
            "a failed task with neither error nor reason",
            cancelled,
            "status = 'failed', end_reason = NULL, status_message = 'x'",
            "tasks_error_iff_failed",
        ),
        (
            "a reason and a stored error",
            cancelled,
            r#"status = 'failed', end_reason = 'expired', error = '{"code": 1, "message": "x"}'"#,
            "tasks_end_reason_or_texts",
        ),
    ] {
        let refused = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET {set} WHERE id = $1"
        )))
        .bind(id.0)
        .execute(&db.pool)
        .await;
        match refused {
            Ok(_) => panic!("{what} was accepted"),
            Err(e) => assert!(
                e.to_string().contains(constraint),
                "{what}: refused, but not by {constraint}: {e}"
            ),
        }
    }
    // And the rows are as they were.
    assert_eq!(
        found(store, cancelled).await.end_reason,
        Some(EndReason::CancelledByClient)
    );
    assert_eq!(found(store, working).await.end_reason, None);
}
