//! One maintenance leader among real `mcp-tasks worker` processes (issue 26, item 6): a
//! single worker requeues lapsed leases for the fleet, and when it is SIGKILLed while
//! running a task, another worker takes the leadership over once the term runs out and
//! requeues that task, which then completes.

use std::time::Duration;

use mcp_tasks_store::Owner;
use serde_json::json;

use crate::harness::fixtures::new_task;
use crate::harness::procs::Proc;
use crate::harness::{TestDb, eventually};

async fn leader(db: &TestDb) -> Option<String> {
    db.store
        .worker()
        .leader()
        .await
        .expect("reading the leader")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leaders_task_is_requeued_by_the_next_leader() {
    let db = TestDb::new().await;
    let mut workers = Vec::new();
    for id in ["worker-a", "worker-b"] {
        let env = [
            ("MCP_TASKS_WORKER_ID", id),
            ("MCP_TASKS_LEASE_MS", "1500"),
            ("MCP_TASKS_CONCURRENCY", "1"),
        ];
        workers.push((id, Proc::worker(&db.url, "conformance", &env).await));
    }
    let first = eventually(Duration::from_secs(30), "a leader", || leader(&db)).await;
    assert!(workers.iter().any(|(id, _)| *id == first), "{first}");

    // Each worker runs one task at a time: two long tasks keep both busy, one each.
    let replica = db.store.replica();
    let owner = Owner::new("t", "p");
    let mut ids = Vec::new();
    for n in 0..2 {
        let created = replica
            .create_task(
                &owner,
                new_task(
                    "slow_compute",
                    json!({ "seconds": 3, "label": n.to_string() }),
                ),
            )
            .await
            .expect("create");
        ids.push(created.id);
    }
    eventually(Duration::from_secs(30), "both tasks running", || async {
        (db.count_tasks("lease_owner IS NOT NULL").await == 2).then_some(())
    })
    .await;

    let at = workers
        .iter()
        .position(|(id, _)| *id == first)
        .expect("the leader is one of them");
    let (_, killed) = workers.remove(at);
    killed.kill().await;
    let (survivor, _) = workers[0];

    let next = eventually(Duration::from_secs(30), "a new leader", || async {
        leader(&db).await.filter(|l| *l != first)
    })
    .await;
    assert_eq!(next, survivor);
    eventually(Duration::from_secs(60), "both tasks completed", || async {
        (db.count_tasks("status = 'completed'").await == 2).then_some(())
    })
    .await;
    let detail: Vec<(String, String)> =
        sqlx::query_as("SELECT worker, detail FROM task_events WHERE kind = 'lease_lapsed'")
            .fetch_all(&db.pool)
            .await
            .expect("the lapses");
    assert_eq!(
        detail,
        vec![(first.clone(), "requeued".to_owned())],
        "the killed worker's run lapsed and was requeued, nothing else"
    );
    let rerun: Vec<String> = sqlx::query_scalar(
        "SELECT claimed_by FROM tasks WHERE attempt = 2 AND status = 'completed'",
    )
    .fetch_all(&db.pool)
    .await
    .expect("the rerun");
    assert_eq!(rerun, vec![survivor.to_owned()]);
}
