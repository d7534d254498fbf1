//! What a task without a TTL keeps forever is bounded: its row (the owner asked for it)
//! and at most [`EVENTS_PER_TASK`] history events, the newest.

use mcp_tasks_store::{EVENTS_PER_TASK, NewTask, TaskId};
use serde_json::json;

use super::{alice, answers, confirm_schema, validator};
use crate::harness::TestDb;
use crate::harness::fixtures::{create, leased, new_task};

async fn events(db: &TestDb, id: TaskId) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM task_events WHERE id = $1")
        .bind(id.0)
        .fetch_one(&db.pool)
        .await
        .expect("count events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_without_a_ttl_keeps_a_bounded_history_the_newest() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let task = NewTask {
        ttl_ms: None,
        ..new_task("echo", json!({}))
    };
    let id = create(store, &owner, task).await.id;
    // A long life already behind it: many input rounds, a year ago.
    sqlx::query(
        "INSERT INTO task_events (tenant, id, at, kind, attempt, detail)
         SELECT 'acme', $1, now() - interval '1 year' + g * interval '1 second',
                'input_requested', 1, 'old'
         FROM generate_series(1, $2) g",
    )
    .bind(id.0)
    .bind(EVENTS_PER_TASK + 100)
    .execute(&db.pool)
    .await
    .expect("old events");

    // And on it goes: each round asks, is answered, and is claimed again.
    let mut keys = Vec::new();
    for round in 0..3 {
        let lease = leased(store, id).await;
        let key = format!("confirm-{round}");
        let requests = answers(&[(key.as_str(), confirm_schema())]);
        store
            .worker()
            .request_input(&lease, &requests, None, None)
            .await
            .expect("request input");
        store
            .replica()
            .update_inputs(
                &owner,
                id,
                &answers(&[(key.as_str(), json!({ "confirm": true }))]),
                validator,
            )
            .await
            .expect("answer");
        keys.push(key);
    }

    let kept = events(&db, id).await;
    assert!(kept <= EVENTS_PER_TASK, "{kept} events kept for one task");
    // The newest are what is kept: every round of this test is there.
    for key in &keys {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM task_events WHERE id = $1 AND detail = $2")
                .bind(id.0)
                .bind(key)
                .fetch_one(&db.pool)
                .await
                .expect("count");
        assert!(n >= 1, "round {key} was forgotten");
    }
    // Other tasks' history is left alone.
    let other = create(store, &owner, new_task("echo", json!({}))).await.id;
    let lease = leased(store, other).await;
    store
        .worker()
        .request_input(&lease, &answers(&[("k", confirm_schema())]), None, None)
        .await
        .expect("request input");
    assert_eq!(events(&db, other).await, 1);
}
