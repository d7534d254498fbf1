//! Limits that hold across every worker (issue 26): running tasks at once per tool and
//! per tenant, and starts per second per tool, set in the configuration file and obeyed
//! by real `mcp-tasks worker` processes racing each other, also when one of them is
//! killed mid-run (its slots come back when its leases lapse). What runs is recorded by a
//! trigger at every change of the task table, so the check sees every moment, not
//! samples.

use std::time::Duration;

use futures::StreamExt;
use mcp_tasks_store::Owner;
use serde_json::json;

use crate::harness::fixtures::new_task;
use crate::harness::procs::Proc;
use crate::harness::{TestDb, eventually};

/// Records, after every statement that changes `tasks`, how many tasks hold a live lease
/// per tool and per tenant.
async fn audit(db: &TestDb) {
    for statement in [
        "CREATE TABLE running_audit (at timestamptz NOT NULL DEFAULT clock_timestamp(),
             kind text NOT NULL, name text NOT NULL, running int NOT NULL)",
        "CREATE FUNCTION audit_running() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO running_audit (kind, name, running)
             SELECT 'tool', tool, count(*) FROM tasks
             WHERE lease_owner IS NOT NULL AND lease_expires_at > clock_timestamp()
             GROUP BY tool;
             INSERT INTO running_audit (kind, name, running)
             SELECT 'tenant', tenant, count(*) FROM tasks
             WHERE lease_owner IS NOT NULL AND lease_expires_at > clock_timestamp()
             GROUP BY tenant;
             RETURN NULL;
         END $$",
        "CREATE TRIGGER audit_running AFTER UPDATE ON tasks
         FOR EACH STATEMENT EXECUTE FUNCTION audit_running()",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// The most tasks that ran at once under `kind` `name`.
async fn most_running(db: &TestDb, kind: &str, name: &str) -> i32 {
    sqlx::query_scalar(
        "SELECT coalesce(max(running), 0) FROM running_audit WHERE kind = $1 AND name = $2",
    )
    .bind(kind)
    .bind(name)
    .fetch_one(&db.pool)
    .await
    .expect("reading the audit")
}

/// Queues `n` tasks of `slow_compute` for `owner`, each running `seconds`.
async fn queue(db: &TestDb, owner: &Owner, n: usize, seconds: u64) {
    let replica = db.store.replica();
    futures::stream::iter(0..n)
        .map(|i| {
            let (replica, owner) = (replica.clone(), owner.clone());
            async move {
                replica
                    .create_task(
                        &owner,
                        new_task(
                            "slow_compute",
                            json!({ "seconds": seconds, "label": i.to_string() }),
                        ),
                    )
                    .await
                    .expect("queueing a task");
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
}

/// Three workers of 16 slots with `config`, 2-second leases; the first is killed with
/// SIGKILL once tasks run, and the others run every task to its end.
async fn race_three_workers_killing_one(db: &TestDb, config: &str, tasks: i64) {
    let dir = tempfile_dir();
    let path = dir.join("limits.toml");
    std::fs::write(&path, config).expect("writing the configuration");
    let path = path.display().to_string();
    let env = [
        ("MCP_TASKS_CONFIG", path.as_str()),
        ("MCP_TASKS_LEASE_MS", "2000"),
        ("MCP_TASKS_CONCURRENCY", "16"),
    ];
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(Proc::worker(&db.url, "conformance", &env).await);
    }
    eventually(Duration::from_secs(30), "tasks to run", || async {
        (db.count_tasks("lease_owner IS NOT NULL").await > 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    workers.remove(0).kill().await;
    eventually(
        Duration::from_secs(120),
        "every task to complete",
        || async { (db.count_tasks("status = 'completed'").await == tasks).then_some(()) },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-limits-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_limit_of_4_holds_across_three_workers_and_a_killed_one() {
    let db = TestDb::new().await;
    audit(&db).await;
    queue(&db, &Owner::new("t", "p"), 40, 1).await;
    race_three_workers_killing_one(&db, "[tool.\"slow_compute\"]\nmax_concurrency = 4\n", 40).await;
    let most = most_running(&db, "tool", "slow_compute").await;
    assert_eq!(most, 4, "at most 4 at once, and the limit was used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_limit_of_10_holds_across_three_workers_and_a_killed_one() {
    let db = TestDb::new().await;
    audit(&db).await;
    // Two principals of the limited tenant, and another tenant that is not held back.
    queue(&db, &Owner::new("capped", "one"), 30, 1).await;
    queue(&db, &Owner::new("capped", "two"), 30, 1).await;
    queue(&db, &Owner::new("free", "x"), 20, 1).await;
    race_three_workers_killing_one(&db, "[tenant.\"capped\"]\nmax_concurrency = 10\n", 80).await;
    assert_eq!(most_running(&db, "tenant", "capped").await, 10);
    assert!(
        most_running(&db, "tenant", "free").await > 10,
        "another tenant is not held back by it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_of_20_a_second_starts_20_a_second() {
    let db = TestDb::new().await;
    queue(&db, &Owner::new("t", "p"), 400, 0).await;
    let dir = tempfile_dir();
    let path = dir.join("rate.toml");
    std::fs::write(&path, "[tool.\"slow_compute\"]\nmax_per_second = 20\n")
        .expect("writing the configuration");
    let path = path.display().to_string();
    let env = [("MCP_TASKS_CONFIG", path.as_str())];
    let _workers = [
        Proc::worker(&db.url, "conformance", &env).await,
        Proc::worker(&db.url, "conformance", &env).await,
    ];
    // The first second spends the burst (a second's worth kept while nothing ran); the
    // ten after it show the rate.
    eventually(Duration::from_secs(60), "12 s of starts", || async {
        let span: f64 = sqlx::query_scalar(
            "SELECT coalesce(EXTRACT(EPOCH FROM max(claimed_at) - min(claimed_at)), 0)::float8
             FROM tasks",
        )
        .fetch_one(&db.pool)
        .await
        .expect("reading the starts");
        (span >= 11.5).then_some(())
    })
    .await;
    let per_second: Vec<i64> = sqlx::query_scalar(
        "WITH t0 AS (SELECT min(claimed_at) AS t0 FROM tasks)
         SELECT count(x.claimed_at) FROM generate_series(1, 10) AS s(n)
         CROSS JOIN t0
         LEFT JOIN tasks x ON x.claimed_at >= t0.t0 + s.n * interval '1 second'
                          AND x.claimed_at < t0.t0 + (s.n + 1) * interval '1 second'
         GROUP BY s.n ORDER BY s.n",
    )
    .fetch_all(&db.pool)
    .await
    .expect("counting starts per second");
    let total: i64 = per_second.iter().sum();
    assert!(
        (180..=220).contains(&total),
        "{total} starts in 10 s, 20 ± 2 a second expected: {per_second:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
