//! The `workers` table: registration, refreshes (HOT updates), the clean delete, a dead
//! worker read as gone, and maintenance forgetting it after a long while.

use std::time::Duration;

use mcp_tasks_store::{WorkerInfo, WorkerPresence};

use crate::harness::{TestDb, eventually};

fn info(id: &str, refresh: Duration) -> WorkerInfo {
    WorkerInfo {
        id: id.into(),
        tools: vec!["alpha".into(), "beta".into()],
        host: Some("host-1".into()),
        pid: Some(4242),
        concurrency: 8,
        refresh,
    }
}

async fn seen(db: &TestDb) -> Vec<WorkerPresence> {
    db.store
        .console()
        .workers_seen(Duration::from_secs(3600))
        .await
        .expect("workers")
}

/// (HOT updates, all updates) of `workers`, as the statistics have them.
async fn updates(db: &TestDb) -> (i64, i64) {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&db.pool)
        .await
        .ok();
    sqlx::query_as(
        "SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE relname = 'workers'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("table statistics")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_register_refresh_leave_and_are_forgotten() {
    let db = TestDb::new().await;
    let store = &db.store;
    let a = info("worker-a", Duration::from_secs(60));
    store.worker().register_worker(&a).await.expect("register");
    let rows = seen(&db).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let first = &rows[0];
    assert_eq!(
        (
            first.id.as_str(),
            &first.tools,
            first.host.as_deref(),
            first.pid,
            first.concurrency,
            first.live
        ),
        ("worker-a", &a.tools, Some("host-1"), Some(4242), 8, true)
    );

    // Refreshes move last_seen_at and the tools, never started_at, and are HOT.
    let before = updates(&db).await;
    let a2 = WorkerInfo {
        tools: vec!["gamma".into()],
        ..a.clone()
    };
    for _ in 0..5 {
        store.worker().refresh_worker(&a2).await.expect("refresh");
    }
    let rows = seen(&db).await;
    assert_eq!(rows[0].tools, ["gamma"]);
    assert_eq!(rows[0].started_at, first.started_at);
    assert!(rows[0].last_seen_at > first.last_seen_at, "{rows:?}");
    let after = eventually(Duration::from_secs(10), "refresh statistics", || async {
        let now = updates(&db).await;
        (now.1 - before.1 >= 5).then_some(now)
    })
    .await;
    assert_eq!(
        after.0 - before.0,
        after.1 - before.1,
        "a refresh that was not a HOT update"
    );

    // A refresh of a forgotten row registers it again.
    assert!(
        store
            .worker()
            .deregister_worker("worker-a")
            .await
            .expect("delete")
    );
    assert!(seen(&db).await.is_empty());
    store.worker().refresh_worker(&a).await.expect("refresh");
    assert_eq!(seen(&db).await.len(), 1);

    // A worker that stops refreshing reads as gone after three intervals.
    let b = info("worker-b", Duration::from_millis(20));
    store.worker().register_worker(&b).await.expect("register");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rows = seen(&db).await;
    let live: Vec<(&str, bool)> = rows.iter().map(|w| (w.id.as_str(), w.live)).collect();
    assert_eq!(live, [("worker-a", true), ("worker-b", false)]);

    // Maintenance forgets rows not seen for an hour, and only those.
    sqlx::query(
        "UPDATE workers SET last_seen_at = now() - interval '2 hours' WHERE id = 'worker-b'",
    )
    .execute(&db.pool)
    .await
    .expect("age worker-b");
    let report = store
        .worker()
        .maintain(100, 60_000)
        .await
        .expect("maintain");
    assert_eq!(report.workers_forgotten, 1);
    let rows: Vec<String> = sqlx::query_scalar("SELECT id FROM workers")
        .fetch_all(&db.pool)
        .await
        .expect("rows");
    assert_eq!(rows, ["worker-a"]);
}
