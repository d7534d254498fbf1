//! What the metrics read and the workers' ANALYZE: the metrics' statements read live
//! work through its partial indexes however many finished tasks the table holds, and
//! ANALYZE runs in one worker at a time and never queues behind another process (such
//! as autovacuum) that holds the table.

use std::time::Duration;

use futures::future::join_all;
use mcp_tasks_store::testing::{Seed, SeedState};
use mcp_tasks_store::{ANALYZE_LOCK, Owner};
use serde_json::json;
use sqlx::Connection;
use sqlx::postgres::PgConnection;
use time::OffsetDateTime;

use crate::harness::fixtures::{create, new_task};
use crate::harness::{TestDb, eventually};

const FINISHED: i64 = 98_500;
const QUEUED: i64 = 1_000;
const LEASED: i64 = 300;
const WAITING: i64 = 200;

/// A table of 100k tasks, most of them finished long ago (as a table that has run for a
/// while is), seeded through the store.
async fn load(db: &TestDb) {
    let now = OffsetDateTime::now_utc();
    let hour = time::Duration::hours(1);
    let bulk = |g: i64, tool: &str| Seed::new(Owner::new("bulk", format!("p{}", g % 100)), tool);
    let finished = (1..=FINISHED).map(|g| Seed {
        state: SeedState::Completed {
            result: json!({ "content": [{ "type": "text", "text": "done" }], "isError": false }),
            finished_at: now - hour,
        },
        created_at: now - hour,
        attempt: 1,
        ..bulk(g, "slow_compute")
    });
    let queued = (1..=QUEUED).map(|g| Seed {
        state: SeedState::Queued {
            run_after: Some(now - time::Duration::minutes(1)),
        },
        ..bulk(g, "slow_compute")
    });
    let leased = (1..=LEASED).map(|g| Seed {
        state: SeedState::Leased {
            worker: "worker-1".into(),
            token: 1,
            expires_at: now + hour,
        },
        attempt: 1,
        ..bulk(g, "slow_compute")
    });
    let waiting = (1..=WAITING).map(|g| Seed {
        state: SeedState::InputRequired {
            requests: json!({ "confirm": { "method": "elicitation/create", "params": {} } })
                .as_object()
                .cloned()
                .unwrap_or_default(),
        },
        ..bulk(g, "confirm_delete")
    });
    db.store
        .seed(finished.chain(queued).chain(leased).chain(waiting))
        .await
        .expect("bulk load");
    sqlx::query("VACUUM ANALYZE tasks")
        .execute(&db.pool)
        .await
        .expect("vacuum analyze");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_read_live_work_through_its_indexes_never_the_whole_table() {
    let db = TestDb::new().await;
    load(&db).await;

    let plans = db.store.shared().task_stats_plans().await.expect("plans");
    assert_eq!(plans.len(), 2);
    for plan in &plans {
        assert!(
            !plan.scans_table(),
            "{} reads the whole task table:\n{}",
            plan.name,
            plan.plan
        );
    }
    let live = &plans[0];
    for index in ["tasks_queued", "tasks_in_flight"] {
        assert!(
            live.indexes().iter().any(|i| i == index),
            "{} does not read {index}:\n{}",
            live.name,
            live.plan
        );
    }

    // And what they count is right.
    let stats = db.store.shared().task_stats().await.expect("stats");
    assert_eq!(stats.queue_depth, QUEUED);
    assert!(
        stats.queue_oldest_age >= Duration::from_secs(59),
        "{stats:?}"
    );
    let count = |status: &str| {
        stats
            .by_status
            .iter()
            .find(|(s, _)| s == status)
            .map(|(_, n)| *n)
    };
    assert_eq!(count("working"), Some((QUEUED + LEASED) as f64));
    assert_eq!(count("input_required"), Some(WAITING as f64));
    let completed = count("completed").expect("an estimate once analysed");
    assert!(
        (completed - FINISHED as f64).abs() < FINISHED as f64 * 0.05,
        "{completed}"
    );
}

/// What the statistics views say of the task table: (live rows, analyses by hand).
async fn table_stats(db: &TestDb) -> (i64, i64) {
    sqlx::query_as(
        "SELECT n_live_tup, analyze_count FROM pg_stat_user_tables WHERE relname = 'tasks'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("statistics")
}

async fn creates(db: &TestDb, n: usize) {
    let owner = Owner::new("acme", "stats");
    for i in 0..n {
        create(
            &db.store,
            &owner,
            new_task("slow_compute", json!({ "seconds": 0, "n": i })),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_analyse_one_at_a_time_and_skip_a_table_another_process_holds() {
    let db = TestDb::new().await;
    creates(&db, 20).await;
    // The statistics views see the rows within a second or so.
    eventually(Duration::from_secs(30), "the new rows counted", || async {
        (table_stats(&db).await.0 >= 20).then_some(())
    })
    .await;

    // Another worker's pass holds the lock: this one skips, however stale the table.
    let mut other = PgConnection::connect(&db.url).await.expect("connect");
    sqlx::query("BEGIN")
        .execute(&mut other)
        .await
        .expect("begin");
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
        .bind(ANALYZE_LOCK.0)
        .bind(ANALYZE_LOCK.1)
        .execute(&mut other)
        .await
        .expect("lock");
    for _ in 0..5 {
        assert!(
            !db.store
                .worker()
                .analyze_if_stale(10, 0)
                .await
                .expect("check"),
            "analysed while another worker's pass held the lock"
        );
    }
    assert_eq!(table_stats(&db).await.1, 0);
    sqlx::query("COMMIT")
        .execute(&mut other)
        .await
        .expect("commit");
    assert!(
        db.store
            .worker()
            .analyze_if_stale(10, 0)
            .await
            .expect("check")
    );
    assert_eq!(table_stats(&db).await.1, 1);

    // Passes of several workers at once on a stale table: one analyses; the others skip
    // it, or find it analysed within the gap.
    creates(&db, 50).await;
    eventually(Duration::from_secs(30), "the new rows counted", || async {
        (table_stats(&db).await.0 >= 70).then_some(())
    })
    .await;
    let worker = db.store.worker();
    let passes = join_all((0..4).map(|_| worker.analyze_if_stale(10, 600_000))).await;
    // The gap holds since the ANALYZE above: stale, but too soon for anyone.
    assert!(passes.iter().all(|p| matches!(p, Ok(false))), "{passes:?}");
    let passes = join_all((0..4).map(|_| worker.analyze_if_stale(10, 0))).await;
    let analysed = passes.iter().filter(|p| matches!(p, Ok(true))).count();
    assert!(passes.iter().all(Result::is_ok), "{passes:?}");
    assert_eq!(analysed, 1, "passes that analysed at once: {passes:?}");

    // A table another process holds (autovacuum, a VACUUM or ANALYZE by hand) is skipped
    // at once, not queued for: a wait behind autovacuum would cancel it.
    creates(&db, 100).await;
    eventually(Duration::from_secs(30), "the new rows counted", || async {
        (table_stats(&db).await.0 >= 170).then_some(())
    })
    .await;
    let before = table_stats(&db).await.1;
    sqlx::query("BEGIN")
        .execute(&mut other)
        .await
        .expect("begin");
    sqlx::query("LOCK TABLE tasks IN SHARE UPDATE EXCLUSIVE MODE")
        .execute(&mut other)
        .await
        .expect("lock the table as autovacuum does");
    let skipped = db.store.worker().analyze_if_stale(10, 0).await;
    assert!(
        matches!(skipped, Ok(false)),
        "an ANALYZE of a table another process holds: {skipped:?}"
    );
    assert_eq!(table_stats(&db).await.1, before);
    sqlx::query("ROLLBACK")
        .execute(&mut other)
        .await
        .expect("rollback");
    assert!(
        db.store
            .worker()
            .analyze_if_stale(10, 0)
            .await
            .expect("check")
    );
    assert_eq!(table_stats(&db).await.1, before + 1);
}
