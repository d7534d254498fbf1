//! The hot paths' behaviour under concurrency: creates of one owner are batched, not
//! serialised, and the in-flight limit holds within its documented margin; a heartbeat
//! is not held up by a row another transaction has locked; a task past its TTL is never
//! started; finishes that arrive together all land, each exactly once; a table never
//! analyzed gets its first statistics from maintenance.

use std::time::Duration;

use futures::future::join_all;
use mcp_tasks_store::{Created, Finish, MAX_CREATE_BATCH, Owner, PoolConfig, Store};
use serde_json::json;

use super::text_result;
use crate::harness::TestDb;
use crate::harness::fixtures::{create, found, new_task, row};

async fn creates(store: &Store, owner: &Owner, n: usize, limit: Option<i64>) -> Vec<Created> {
    let replica = store.replica();
    join_all((0..n).map(|i| {
        replica.create(
            owner,
            new_task("slow_compute", json!({ "seconds": 0, "n": i })),
            limit,
        )
    }))
    .await
    .into_iter()
    .map(|c| c.expect("create"))
    .collect()
}

fn count_new(created: &[Created]) -> usize {
    created
        .iter()
        .filter(|c| matches!(c, Created::New(_)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_owner_all_succeed_and_the_limit_holds() {
    let db = TestDb::new().await;
    let owner = Owner::new("acme", "busy");

    // Under the limit, every one of many simultaneous creates succeeds, each a task of
    // its own that reads back as created.
    let created = creates(&db.store, &owner, 300, Some(1000)).await;
    assert_eq!(count_new(&created), 300);
    let mut ids: Vec<_> = created
        .iter()
        .map(|c| match c {
            Created::New(t) => t.id,
            other => panic!("{other:?}"),
        })
        .collect();
    for c in created.iter().take(5) {
        let Created::New(t) = c else { unreachable!() };
        assert_eq!(&found(&db.store, &owner, t.id).await, t);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 300);

    // On one replica the limit is exact however many arrive at once.
    let limited = Owner::new("acme", "limited");
    let created = creates(&db.store, &limited, 120, Some(25)).await;
    assert_eq!(
        count_new(&created),
        25,
        "one replica admits exactly the limit"
    );
    assert!(
        created
            .iter()
            .all(|c| matches!(c, Created::New(_) | Created::LimitReached))
    );
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE principal = 'limited' AND finished_at IS NULL",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count");
    assert_eq!(live, 25);

    // Two replicas creating at once may overshoot by at most one batch of the other.
    let other = Store::connect(&db.url, &PoolConfig::default())
        .await
        .expect("second store");
    let two = Owner::new("acme", "two-replicas");
    let (a, b) = tokio::join!(
        creates(&db.store, &two, 150, Some(40)),
        creates(&other, &two, 150, Some(40)),
    );
    let admitted = count_new(&a) + count_new(&b);
    assert!(
        (40..=40 + MAX_CREATE_BATCH).contains(&admitted),
        "admitted {admitted} with a limit of 40"
    );
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE principal = 'two-replicas' AND finished_at IS NULL",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count");
    assert_eq!(live as usize, admitted);
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_row_does_not_hold_up_the_heartbeat_of_the_others() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = super::alice();
    for _ in 0..3 {
        create(
            store,
            &owner,
            new_task("slow_compute", json!({ "seconds": 9 })),
        )
        .await;
    }
    let claimed = store.worker().claim("W", 10, 20_000).await.expect("claim");
    assert_eq!(claimed.len(), 3);
    let leases: Vec<_> = claimed.iter().map(|c| c.lease.clone()).collect();
    let busy = leases[0].id;

    // Another transaction holds one of the rows (as a tasks/update or cancel would).
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(busy.0)
        .execute(&mut *tx)
        .await
        .expect("lock");
    let before = row(pool, busy).await;

    // Without SKIP LOCKED this waits for the other transaction, which never ends here;
    // the timeout only turns that hang into a failure.
    let replies = tokio::time::timeout(
        Duration::from_secs(20),
        store.worker().heartbeat(&leases, 600_000),
    )
    .await
    .expect("the heartbeat waited for the locked row")
    .expect("heartbeat");
    // Every lease is still held (the busy one included: its token is current) ...
    let mut held: Vec<_> = replies.iter().map(|r| r.id).collect();
    held.sort();
    let mut all: Vec<_> = leases.iter().map(|l| l.id).collect();
    all.sort();
    assert_eq!(held, all);
    // ... the others are extended, and the busy one is left for the next heartbeat (and
    // said so, so that its worker does not count on the new expiry).
    for r in &replies {
        assert_eq!(r.extended, r.id != busy, "{r:?}");
    }
    let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(60);
    for lease in &leases[1..] {
        let t = found(store, &owner, lease.id).await;
        assert!(t.lease_expires_at.expect("leased") > soon, "not extended");
    }
    assert_eq!(row(pool, busy).await, before);
    tx.rollback().await.expect("rollback");

    let replies = store
        .worker()
        .heartbeat(&leases, 600_000)
        .await
        .expect("heartbeat");
    assert_eq!(replies.len(), 3);
    let t = found(store, &owner, busy).await;
    assert!(
        t.lease_expires_at.expect("leased") > soon,
        "extended once free"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_past_its_ttl_is_not_started() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = super::alice();
    let task = mcp_tasks_store::NewTask {
        ttl_ms: Some(1),
        ..new_task("slow_compute", json!({ "seconds": 0 }))
    };
    let doomed = create(store, &owner, task).await;
    let fresh = create(
        store,
        &owner,
        new_task("slow_compute", json!({ "seconds": 0 })),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let claimed = store.worker().claim("W", 10, 60_000).await.expect("claim");
    let ids: Vec<_> = claimed.iter().map(|c| c.lease.id).collect();
    assert_eq!(
        ids,
        vec![fresh.id],
        "only the task within its TTL is started"
    );
    assert_eq!(found(store, &owner, doomed.id).await.attempt, 0);
    // Maintenance then fails it as expired.
    assert_eq!(store.worker().expire_overdue(100).await.expect("expire"), 1);
    let t = found(store, &owner, doomed.id).await;
    assert_eq!(t.status, mcp_tasks_wire::TaskStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finishes_that_arrive_together_each_land_once() {
    let db = TestDb::new().await;
    let store = &db.store;
    let worker = store.worker();
    let owner = super::alice();
    for _ in 0..40 {
        create(
            store,
            &owner,
            new_task("slow_compute", json!({ "seconds": 0 })),
        )
        .await;
    }
    let claimed = worker.claim("W", 100, 60_000).await.expect("claim");
    assert_eq!(claimed.len(), 40);
    // Every lease finished twice at once, and a stale token once: each lands exactly once.
    let stale = mcp_tasks_store::Lease {
        token: claimed[0].lease.token + 7,
        ..claimed[0].lease.clone()
    };
    let finish = Finish::Completed(text_result("done"));
    let mut all: Vec<_> = claimed.iter().map(|c| c.lease.clone()).collect();
    all.extend(claimed.iter().map(|c| c.lease.clone()));
    let results = join_all(
        all.iter()
            .map(|l| worker.finish(l, &finish, Some("Completed"))),
    )
    .await;
    let landed = results
        .into_iter()
        .filter(|r| *r.as_ref().expect("finish"))
        .count();
    assert_eq!(landed, 40);
    assert!(!worker.finish(&stale, &finish, None).await.expect("finish"));
    for c in &claimed {
        let t = found(store, &owner, c.lease.id).await;
        assert_eq!(t.status, mcp_tasks_wire::TaskStatus::Completed);
        assert_eq!(t.result, Some(text_result("done")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_task_table_is_analysed_when_it_has_none_or_stale_statistics() {
    let db = TestDb::new().await;
    let analyses = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'tasks'",
        )
        .fetch_one(&db.pool)
        .await
        .expect("statistics")
    };
    let analysed_when = |min_rows: i64, what: &'static str| {
        let store = db.store.clone();
        crate::harness::eventually(Duration::from_secs(30), what, move || {
            let store = store.clone();
            async move {
                store
                    .worker()
                    .analyze_if_stale(min_rows, 0)
                    .await
                    .expect("check")
                    .then_some(())
            }
        })
    };
    let owner = Owner::new("acme", "stats");
    creates(&db.store, &owner, 20, None).await;
    // Too few rows: nothing to learn from them yet (the row count is reported within a
    // second or so, and only rises).
    assert!(
        !db.store
            .worker()
            .analyze_if_stale(1_000_000, 0)
            .await
            .expect("check")
    );
    assert_eq!(analyses().await, 0);
    analysed_when(10, "the first statistics of the task table").await;
    assert_eq!(analyses().await, 1);
    // Fresh: nothing changed since.
    assert!(
        !db.store
            .worker()
            .analyze_if_stale(10, 0)
            .await
            .expect("check")
    );

    // More rows change than the planner believes the table holds (20): stale, but not
    // within the gap of the last ANALYZE.
    creates(&db.store, &owner, 50, None).await;
    assert!(
        !db.store
            .worker()
            .analyze_if_stale(10, 600_000)
            .await
            .expect("check")
    );
    assert_eq!(analyses().await, 1);
    analysed_when(10, "new statistics of the changed table").await;
    assert_eq!(analyses().await, 2);
    // A change smaller than the table is not staleness.
    creates(&db.store, &owner, 5, None).await;
    assert!(
        !db.store
            .worker()
            .analyze_if_stale(1, 0)
            .await
            .expect("check")
    );
}
