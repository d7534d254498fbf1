//! Tombstones at high rates: compact rows keyed by an owner digest, a purge that keeps up
//! (every batch of a pass), and the owner check kept exact.

use mcp_tasks_store::{Lookup, Owner, TaskId};

use super::alice;
use crate::harness::TestDb;

const WEEK_MS: i64 = 7 * 24 * 3600 * 1000;

async fn tombstone(db: &TestDb, owner: &Owner, id: TaskId, age: &str) {
    sqlx::query(
        "INSERT INTO tombstones (owner, id, deleted_at)
         VALUES (mcp_tasks_owner_digest($1, $2), $3, now() - $4::interval)",
    )
    .bind(&owner.tenant)
    .bind(&owner.principal)
    .bind(id.0)
    .bind(age)
    .execute(&db.pool)
    .await
    .expect("tombstone");
}

async fn count(db: &TestDb) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tombstones")
        .fetch_one(&db.pool)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_purges_every_batch_of_old_tombstones() {
    let db = TestDb::new().await;
    let owner = alice();
    // Three and a half batches past retention, and some young ones.
    sqlx::query(
        "INSERT INTO tombstones (owner, id, deleted_at)
         SELECT mcp_tasks_owner_digest('acme', 'alice'), gen_random_uuid(),
                now() - interval '8 days' - g * interval '1 second'
         FROM generate_series(1, 350) g",
    )
    .execute(&db.pool)
    .await
    .expect("old tombstones");
    let young = TaskId::random();
    tombstone(&db, &owner, young, "1 day").await;
    let old = TaskId::random();
    tombstone(&db, &owner, old, "8 days").await;
    assert_eq!(count(&db).await, 352);

    let report = db
        .store
        .worker()
        .maintain(100, WEEK_MS)
        .await
        .expect("maintain");
    assert_eq!(report.tombstones_deleted, 351, "{report:?}");
    assert_eq!(count(&db).await, 1);
    assert_eq!(
        db.store
            .replica()
            .get_task(&owner, young)
            .await
            .expect("get"),
        Lookup::Expired
    );
    assert_eq!(
        db.store.replica().get_task(&owner, old).await.expect("get"),
        Lookup::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_answers_only_its_owner() {
    let db = TestDb::new().await;
    let owner = alice();
    let id = TaskId::random();
    tombstone(&db, &owner, id, "1 second").await;
    assert_eq!(
        db.store.replica().get_task(&owner, id).await.expect("get"),
        Lookup::Expired
    );
    // Same tenant, other principal; other tenant, same principal; and the two names'
    // boundary moved (the digest must tell "acme"+"alice" from "acmea"+"lice").
    for other in [
        Owner::new("acme", "bob"),
        Owner::new("other", "alice"),
        Owner::new("acmea", "lice"),
        Owner::new("acm", "ealice"),
    ] {
        assert_eq!(
            db.store.replica().get_task(&other, id).await.expect("get"),
            Lookup::NotFound,
            "{other:?}"
        );
        assert_eq!(
            db.store
                .replica()
                .cancel_task(&other, id)
                .await
                .expect("cancel"),
            Lookup::NotFound,
            "{other:?}"
        );
    }
}

/// Workers of the previous release write the old table during a rolling deploy;
/// maintenance moves their tombstones into the compact one, owner and age kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_tombstones_are_adopted() {
    let db = TestDb::new().await;
    let owner = alice();
    let (recent, old) = (TaskId::random(), TaskId::random());
    sqlx::query(
        "INSERT INTO task_tombstones (tenant, principal, id, deleted_at)
         VALUES ($1, $2, $3, now()), ($1, $2, $4, now() - interval '8 days')",
    )
    .bind(&owner.tenant)
    .bind(&owner.principal)
    .bind(recent.0)
    .bind(old.0)
    .execute(&db.pool)
    .await
    .expect("legacy tombstones");
    let report = db
        .store
        .worker()
        .maintain(100, WEEK_MS)
        .await
        .expect("maintain");
    assert_eq!(report.tombstones_deleted, 1, "{report:?}");
    let legacy: i64 = sqlx::query_scalar("SELECT count(*) FROM task_tombstones")
        .fetch_one(&db.pool)
        .await
        .expect("legacy count");
    assert_eq!(legacy, 0);
    assert_eq!(
        db.store
            .replica()
            .get_task(&owner, recent)
            .await
            .expect("get"),
        Lookup::Expired
    );
    assert_eq!(
        db.store
            .replica()
            .get_task(&Owner::new("acme", "bob"), recent)
            .await
            .expect("get"),
        Lookup::NotFound
    );
    assert_eq!(
        db.store.replica().get_task(&owner, old).await.expect("get"),
        Lookup::NotFound
    );
}
