//! Workers in this process: many workers run each task once, a graceful stop hands the
//! task over at once, and a crashed worker's task is run again by another.

use std::collections::{BTreeSet, HashMap};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use mcp_tasks_store::{CancelOutcome, Lookup, Owner, PoolConfig, Store};
use mcp_tasks_tools::{Outcome, Registry, Tool};
use mcp_tasks_wire::TaskStatus;
use serde_json::{Value, json};

use crate::harness::fixtures::{create, found, new_task};
use crate::harness::replica::IsolatedWorker;
use crate::harness::{TestDb, Worker, eventually, registry, worker_config};

fn alice() -> Owner {
    Owner::new("acme", "alice")
}

// ---------------------------------------------------------------------------------------
// Many workers, each task runs once
// ---------------------------------------------------------------------------------------

static RUNS: LazyLock<Mutex<HashMap<String, usize>>> = LazyLock::new(Mutex::default);

fn counting_registry() -> Registry {
    let tool = Tool::builder("count_runs")
        .description("Counts how often each task runs.")
        .handler(|ctx| async move {
            let id = ctx.task_id().expect("runs as a task").to_owned();
            *RUNS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(id)
                .or_default() += 1;
            ctx.sleep(Duration::from_millis(5)).await?;
            Ok(Outcome::text("counted"))
        })
        .build()
        .expect("tool");
    Registry::new(vec![tool]).expect("registry")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_each_task_once() {
    let db = TestDb::new().await;
    let (store, pool) = (&db.store, &db.pool);
    let owner = alice();
    let registry = counting_registry();

    let mut workers = Vec::new();
    for i in 0..4 {
        // Each worker has its own pool, as separate processes would.
        let worker_store = Store::connect(
            &db.url,
            &PoolConfig {
                max_connections: 6,
                ..PoolConfig::default()
            },
        )
        .await
        .expect("connect");
        let mut cfg = worker_config();
        cfg.worker_id = format!("many-{i}");
        cfg.concurrency = 8;
        workers.push(Worker::start_with(&worker_store, registry.clone(), cfg));
    }

    let mut ids = BTreeSet::new();
    for _ in 0..200 {
        let t = create(store, &owner, new_task("count_runs", json!({}))).await;
        ids.insert(t.id.to_string());
    }
    assert_eq!(ids.len(), 200);

    eventually(
        Duration::from_secs(120),
        "all 200 tasks to complete",
        || async move {
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM tasks WHERE status = 'completed'")
                    .fetch_one(pool)
                    .await
                    .expect("count");
            (done == 200).then_some(())
        },
    )
    .await;
    for w in workers {
        w.stop().await;
    }

    let runs: HashMap<String, usize> = {
        let all = RUNS.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter()
            .map(|id| (id.clone(), all.get(id).copied().unwrap_or(0)))
            .collect()
    };
    let wrong: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(wrong.is_empty(), "tasks not run exactly once: {wrong:?}");

    let (total, completed, leased, claims_not_one, attempts_not_one): (i64, i64, i64, i64, i64) =
        sqlx::query_as(
            "SELECT count(*),
                    count(*) FILTER (WHERE status = 'completed' AND result IS NOT NULL
                                     AND finished_at IS NOT NULL),
                    count(*) FILTER (WHERE lease_owner IS NOT NULL),
                    count(*) FILTER (WHERE lease_token <> 1),
                    count(*) FILTER (WHERE attempt <> 1)
             FROM tasks",
        )
        .fetch_one(pool)
        .await
        .expect("summary");
    assert_eq!(total, 200);
    assert_eq!(completed, 200);
    assert_eq!(leased, 0, "leases left held");
    assert_eq!(claims_not_one, 0, "tasks claimed more than once");
    assert_eq!(attempts_not_one, 0, "tasks run in more than one attempt");
}

// ---------------------------------------------------------------------------------------
// Graceful shutdown hands tasks over at once
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_worker_shutdown_releases() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let config = |id: &str| {
        let mut c = worker_config();
        c.worker_id = id.into();
        c.lease = Duration::from_secs(30);
        c.shutdown_grace = Duration::from_millis(300);
        c.cancel_grace = Duration::from_millis(300);
        c
    };
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 60, "label": "graceful"})),
    )
    .await;
    let id = task.id;

    let first = Worker::start_with(store, registry("conformance"), config("graceful-1"));
    let owner_ref = &owner;
    eventually(
        Duration::from_secs(20),
        "graceful-1 to run the task",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("graceful-1")
                && t.status_message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Computing graceful")))
            .then_some(())
        },
    )
    .await;
    first.stop().await;
    let stopped = Instant::now();

    let rec = found(store, &owner, id).await;
    assert_eq!(rec.status, TaskStatus::Working);
    assert_eq!(rec.lease_owner, None, "the task was not released");
    assert_eq!(rec.lease_expires_at, None);
    assert_eq!(rec.attempt, 0, "the interrupted run counted as an attempt");
    assert_eq!(rec.finished_at, None);
    assert_eq!(rec.lease_token, 1);

    let second = Worker::start_with(store, registry("conformance"), config("graceful-2"));
    eventually(
        Duration::from_secs(15),
        "graceful-2 to take over",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("graceful-2")
                && t.status_message.as_deref().is_some_and(|m| {
                    m.starts_with("Running") || m.starts_with("Computing graceful")
                }))
            .then_some(t)
        },
    )
    .await;
    assert!(
        stopped.elapsed() < Duration::from_secs(30),
        "taken over only after the lease would have lapsed"
    );
    let rec = found(store, &owner, id).await;
    assert_eq!(rec.attempt, 1, "the released task starts a fresh attempt");
    assert_eq!(rec.lease_token, 2);
    assert_eq!(rec.status, TaskStatus::Working);

    // Finish quickly: cancel it.
    assert_eq!(
        store
            .replica()
            .cancel_task(&owner, id)
            .await
            .expect("cancel"),
        Lookup::Found(CancelOutcome::Requested)
    );
    eventually(
        Duration::from_secs(15),
        "the task to be cancelled",
        || async move {
            (found(store, owner_ref, id).await.status == TaskStatus::Cancelled).then_some(())
        },
    )
    .await;
    second.stop().await;
}

// ---------------------------------------------------------------------------------------
// A crashed worker's task is run again by another
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_in_process_worker_is_replaced() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let config = |id: &str| {
        let mut c = worker_config();
        c.worker_id = id.into();
        // Short, so the dead worker's lease lapses soon, but not 1 s: on a loaded machine
        // (CI's lanes side by side) the replacement's heartbeats then came late, its run
        // was stopped as the lease ran short and given back, and claimed once more.
        c.lease = Duration::from_secs(3);
        c
    };
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 2, "label": "crash"})),
    )
    .await;
    let id = task.id;

    let doomed = IsolatedWorker::start(&db.url, registry("conformance"), config("crash-1"));
    let owner_ref = &owner;
    eventually(
        Duration::from_secs(20),
        "crash-1 to run the task",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("crash-1")
                && t.status_message.as_deref() == Some("Computing crash: 0 of 2 s"))
            .then_some(())
        },
    )
    .await;
    doomed.crash();
    let held = found(store, &owner, id).await;
    assert_eq!(
        held.status,
        TaskStatus::Working,
        "finished before the crash"
    );
    assert_eq!(held.attempt, 1);

    let replacement = Worker::start_with(store, registry("conformance"), config("crash-2"));
    let done = eventually(
        Duration::from_secs(30),
        "the task to complete",
        || async move {
            let t = found(store, owner_ref, id).await;
            t.status.is_terminal().then_some(t)
        },
    )
    .await;
    replacement.stop().await;
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.attempt, 2, "the task was not re-run after the crash");
    assert_eq!(done.lease_token, 2);
    let text = done
        .result
        .as_ref()
        .and_then(|r| r.pointer("/content/0/text"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert_eq!(text, "Computed crash in 2 s.");
    assert_eq!(done.lease_owner, None);
}

/// `harness::Worker::abort` is documented as simulating a crash, but it aborts only the
/// wrapper task; see the ignore reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_worker_abort_stops_the_worker() {
    let db = TestDb::new().await;
    let store = &db.store;
    let owner = alice();
    let config = |id: &str| {
        let mut c = worker_config();
        c.worker_id = id.into();
        c.lease = Duration::from_secs(1);
        c
    };
    let task = create(
        store,
        &owner,
        new_task("slow_compute", json!({"seconds": 2, "label": "abort"})),
    )
    .await;
    let id = task.id;
    let doomed = Worker::start_with(store, registry("conformance"), config("abort-1"));
    let owner_ref = &owner;
    eventually(
        Duration::from_secs(20),
        "abort-1 to run the task",
        || async move {
            let t = found(store, owner_ref, id).await;
            (t.lease_owner.as_deref() == Some("abort-1")
                && t.status_message.as_deref() == Some("Computing abort: 0 of 2 s"))
            .then_some(())
        },
    )
    .await;
    doomed.abort();
    let replacement = Worker::start_with(store, registry("conformance"), config("abort-2"));
    let done = eventually(
        Duration::from_secs(30),
        "the task to complete",
        || async move {
            let t = found(store, owner_ref, id).await;
            t.status.is_terminal().then_some(t)
        },
    )
    .await;
    replacement.stop().await;
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(
        done.attempt, 2,
        "the aborted worker finished the task itself: it was never stopped"
    );
}
