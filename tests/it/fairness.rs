//! Fair claiming (issue 26): the queue is handed out round-robin across tenants, by
//! weight, and within a tenant across its principals; a priority moves a task ahead by a
//! bounded number of rounds, so lower priorities still start. Tasks are created through a
//! replica (which places them from its scheduling policy) and run by real `mcp-tasks
//! worker` processes; the order they started in is read from the store (`claimed_at`).

use std::time::Duration;

use futures::StreamExt;
use mcp_tasks_client::Client;
use mcp_tasks_store::Owner;
use mcp_tasks_tools::scheduling::{Limits, PRIORITY_META_KEY, Scheduling, TenantPolicy};
use serde_json::{Value, json};

use crate::harness::fixtures::new_task;
use crate::harness::procs::Proc;
use crate::harness::{TestApp, TestDb, eventually};

/// A client of tenant `tenant`, principal `principal`, on the app's replica.
fn client(app: &TestApp, tenant: &str, principal: &str) -> Client {
    Client::with_tasks(app.url())
        .header("x-test-tenant", tenant)
        .header("x-test-principal", principal)
}

/// Creates `n` tasks of `slow_compute` (0 s) as `client`, `at_once` in flight.
async fn create_many(client: &Client, n: usize, at_once: usize) {
    futures::stream::iter(0..n)
        .map(|i| async move {
            let created = client
                .call_tool(
                    "slow_compute",
                    json!({ "seconds": 0, "label": i.to_string() }),
                )
                .await
                .unwrap_or_else(|e| panic!("creating task {i}: {e}"));
            assert_eq!(created["resultType"], "task", "a task: {created}");
        })
        .buffer_unordered(at_once)
        .collect::<Vec<()>>()
        .await;
}

/// The client's own `_meta` with the priority key set to `level`.
fn with_priority(client: &Client, level: Value) -> Value {
    let mut meta = client.meta();
    meta[PRIORITY_META_KEY] = level;
    meta
}

/// Real worker processes with the conformance tools, `concurrency` slots each.
async fn workers(db: &TestDb, n: usize, concurrency: usize) -> Vec<Proc> {
    let concurrency = concurrency.to_string();
    let mut procs = Vec::new();
    for _ in 0..n {
        procs.push(
            Proc::worker(
                &db.url,
                "conformance",
                &[("MCP_TASKS_CONCURRENCY", concurrency.as_str())],
            )
            .await,
        );
    }
    procs
}

/// Tenants of the tasks claimed so far, in the order they were claimed (ties, claimed in
/// one statement, by their place in the queue).
async fn starts(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT tenant FROM tasks WHERE claimed_at IS NOT NULL ORDER BY claimed_at, queue_key",
    )
    .fetch_all(&db.pool)
    .await
    .expect("reading the starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_light_tenant_starts_before_a_flooding_tenants_200th_task() {
    let app = TestApp::builder().start().await;
    let db = &app.db;
    // Tenant A's flood through the store (the replica's path for the default policy, and
    // quicker than 20,000 requests); tenant B's ten through the replica.
    let replica = db.store.replica();
    let flood = Owner::new("a", "flooder");
    futures::stream::iter(0..20_000)
        .map(|i| {
            let (replica, flood) = (replica.clone(), flood.clone());
            async move {
                replica
                    .create_task(
                        &flood,
                        new_task(
                            "slow_compute",
                            json!({ "seconds": 0, "label": format!("a{i}") }),
                        ),
                    )
                    .await
                    .expect("queueing A's task");
            }
        })
        .buffer_unordered(256)
        .collect::<Vec<()>>()
        .await;
    create_many(&client(&app, "b", "light"), 10, 10).await;
    assert_eq!(db.count_tasks("claimed_at IS NOT NULL").await, 0);

    let _workers = workers(db, 2, 16).await;
    eventually(Duration::from_secs(60), "B's tasks to start", || async {
        (db.count_tasks("tenant = 'b' AND claimed_at IS NOT NULL")
            .await
            == 10)
            .then_some(())
    })
    .await;
    let order = starts(db).await;
    let last_b = order.iter().rposition(|t| t == "b").expect("B started");
    let a_before = order[..last_b].iter().filter(|t| *t == "a").count();
    assert!(
        a_before < 200,
        "B's last task started after {a_before} of A's (oldest first would be 20,000)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_of_weights_3_and_1_start_tasks_3_to_1() {
    let mut scheduling = Scheduling::default();
    scheduling.tenants.insert(
        "heavy".into(),
        TenantPolicy {
            weight: Some(3),
            ..TenantPolicy::default()
        },
    );
    let app = TestApp::builder()
        .config(|c| {
            c.scheduling = scheduling;
            c.max_tasks_in_flight = 0;
        })
        .start()
        .await;
    let db = &app.db;
    // Both backlogged the whole time: 4,000 starts out of 8,000 queued.
    create_many(&client(&app, "heavy", "h"), 4_000, 32).await;
    create_many(&client(&app, "light", "l"), 4_000, 32).await;

    let workers = workers(db, 2, 16).await;
    eventually(Duration::from_secs(120), "4,000 starts", || async {
        (db.count_tasks("claimed_at IS NOT NULL").await >= 4_000).then_some(())
    })
    .await;
    drop(workers);
    let order = starts(db).await;
    let first = &order[..4_000];
    let heavy = first.iter().filter(|t| *t == "heavy").count() as f64;
    let light = first.iter().filter(|t| *t == "light").count() as f64;
    let ratio = heavy / light;
    assert!(
        (2.7..=3.3).contains(&ratio),
        "of the first 4,000 starts {heavy} were the weight-3 tenant's and {light} the weight-1 tenant's: {ratio:.2} to 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_principals_share_its_turn_round_robin() {
    let app = TestApp::builder()
        .config(|c| c.max_tasks_in_flight = 0)
        .start()
        .await;
    let db = &app.db;
    // One principal of tenant A floods; then a second principal of A, and tenant B.
    create_many(&client(&app, "a", "flooder"), 2_000, 32).await;
    create_many(&client(&app, "a", "second"), 100, 32).await;
    create_many(&client(&app, "b", "only"), 100, 32).await;

    let _workers = workers(db, 1, 16).await;
    eventually(
        Duration::from_secs(60),
        "B's and A's second principal's tasks",
        || async {
            (db.count_tasks("principal IN ('second', 'only') AND claimed_at IS NULL")
                .await
                == 0)
                .then_some(())
        },
    )
    .await;
    let principals: Vec<String> = sqlx::query_scalar(
        "SELECT principal FROM tasks WHERE claimed_at IS NOT NULL ORDER BY claimed_at, queue_key",
    )
    .fetch_all(&db.pool)
    .await
    .expect("reading the starts");
    // Keys: the flooder's 1, 2, 3, …; the second principal's 2, 4, …, 200 (two lanes of A
    // with work); B's 1, …, 100. So all 200 are in by key 200, some 400 starts.
    let first: Vec<&String> = principals.iter().take(450).collect();
    let count = |p: &str| first.iter().filter(|x| x.as_str() == p).count();
    // B gets half the turns; A's half is shared by its two principals.
    assert_eq!(
        count("only"),
        100,
        "B's tasks are all among the first 450: {first:?}"
    );
    assert_eq!(
        count("second"),
        100,
        "A's second principal's too: {first:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_priority_task_still_starts_while_higher_priority_work_keeps_arriving() {
    let mut scheduling = Scheduling {
        priority_rounds: 4,
        ..Scheduling::default()
    };
    scheduling.tools.insert(
        "slow_compute".into(),
        Limits {
            priority: 10,
            ..Limits::default()
        },
    );
    let app = TestApp::builder()
        .config(|c| {
            c.scheduling = scheduling;
            c.max_tasks_in_flight = 0;
        })
        .start()
        .await;
    let db = &app.db;
    let caller = client(&app, "t", "p");
    // A backlog of high-priority work, then the caller's own low-priority task (lowered by
    // all ten levels), then more high-priority work for as long as the test runs.
    create_many(&caller, 200, 32).await;
    let low = caller
        .call_tool_params(json!({
            "name": "slow_compute",
            "arguments": { "seconds": 0, "label": "low" },
            "_meta": with_priority(&caller, json!(-10)),
        }))
        .await
        .expect("the low-priority task");
    let low_id = low["taskId"].as_str().expect("a task id").to_owned();

    let keep_arriving = {
        let more = client(&app, "t", "p");
        tokio::spawn(async move {
            loop {
                create_many(&more, 50, 16).await;
            }
        })
    };
    let _workers = workers(db, 1, 4).await;
    eventually(
        Duration::from_secs(60),
        "the low-priority task to start",
        || async {
            (db.count_tasks(&format!("id = '{low_id}' AND claimed_at IS NOT NULL"))
                .await
                == 1)
                .then_some(())
        },
    )
    .await;
    // Not at its place in the lane: ten levels at 4 rounds each let some 40 of the
    // lane's tasks created after it go first; oldest first would let none.
    let overtaken: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks t, tasks low WHERE low.id = $1::uuid
         AND t.created_at > low.created_at AND t.claimed_at < low.claimed_at",
    )
    .bind(&low_id)
    .fetch_one(&db.pool)
    .await
    .expect("counting who went first");
    keep_arriving.abort();
    assert!(
        (30..=50).contains(&overtaken),
        "{overtaken} higher-priority tasks created after it started before it (some 40 expected)"
    );
}

#[tokio::test]
async fn a_caller_may_lower_its_priority_but_not_raise_it() {
    let app = TestApp::builder().start().await;
    let caller = client(&app, "t", "p");
    for (value, accepted) in [
        (json!(0), true),
        (json!(-3), true),
        (json!(1), false),
        (json!(-1.5), false),
        (json!("low"), false),
    ] {
        let answer = caller
            .call_tool_params(json!({
                "name": "slow_compute",
                "arguments": { "seconds": 0 },
                "_meta": with_priority(&caller, value.clone()),
            }))
            .await;
        match (answer, accepted) {
            (Ok(created), true) => assert_eq!(created["resultType"], "task", "{value}: {created}"),
            (Err(e), false) => {
                assert_eq!(e.code(), Some(-32602), "{value}: {e}");
                assert!(e.to_string().contains(PRIORITY_META_KEY), "{value}: {e}");
            }
            (other, _) => panic!("{value}: {other:?}"),
        }
    }
}
