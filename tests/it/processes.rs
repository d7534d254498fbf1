//! Real `mcp-tasks` processes sharing one database: replicas that are interchangeable and
//! restartable, workers that are killed or stopped mid-run, the CLI's `migrate` and
//! `--help`, and the task methods end to end through separate processes.

use std::time::{Duration, Instant};

use mcp_tasks_client::Client;
use serde_json::{Value, json};
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{Connection, Row};
use time::OffsetDateTime;

use crate::harness::fixtures::create_task;
use crate::harness::procs::{self, Proc};
use crate::harness::spec::all_text;
use crate::harness::{TestDb, status};

const PACK: &str = "conformance";

/// The acknowledgement `tasks/update` and `tasks/cancel` answer with, less the `_meta`
/// every result carries (the server's serverInfo stamp).
fn ack() -> Value {
    json!({ "resultType": "complete" })
}

fn without_meta(mut result: Value) -> Value {
    if let Some(m) = result.as_object_mut() {
        m.remove("_meta");
    }
    result
}

/// The columns of a task row these tests look at.
#[derive(Debug, Clone)]
struct TaskRow {
    status: String,
    status_message: Option<String>,
    attempt: i32,
    lease_owner: Option<String>,
    lease_expires_at: Option<OffsetDateTime>,
    finished_at: Option<OffsetDateTime>,
    cancel_requested_at: Option<OffsetDateTime>,
    runnable_now: bool,
    version: i64,
}

fn uuid_of(id: &str) -> uuid::Uuid {
    uuid::Uuid::parse_str(id).expect("task ids are UUIDs")
}

async fn task_row(pool: &PgPool, id: &str) -> TaskRow {
    let rows: Vec<PgRow> = sqlx::query(
        "SELECT status, status_message, attempt, lease_owner, lease_expires_at, finished_at,
                cancel_requested_at, coalesce(run_after <= now(), false) AS runnable_now, version
         FROM tasks WHERE id = $1",
    )
    .bind(uuid_of(id))
    .fetch_all(pool)
    .await
    .expect("reading the task row");
    assert_eq!(rows.len(), 1, "exactly one row for task {id}");
    let r = &rows[0];
    TaskRow {
        status: r.get("status"),
        status_message: r.get("status_message"),
        attempt: r.get("attempt"),
        lease_owner: r.get("lease_owner"),
        lease_expires_at: r.get("lease_expires_at"),
        finished_at: r.get("finished_at"),
        cancel_requested_at: r.get("cancel_requested_at"),
        runnable_now: r.get("runnable_now"),
        version: r.get("version"),
    }
}

/// Polls the task's row until `ok` holds; panics with the last row after `timeout`.
async fn wait_row(
    pool: &PgPool,
    id: &str,
    timeout: Duration,
    what: &str,
    ok: impl Fn(&TaskRow) -> bool,
) -> TaskRow {
    let deadline = Instant::now() + timeout;
    loop {
        let row = task_row(pool, id).await;
        if ok(&row) {
            return row;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; last row: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `lease_owner` is `worker` and the handler has started computing.
fn computing_under(worker: &'static str) -> impl Fn(&TaskRow) -> bool {
    move |r: &TaskRow| {
        r.status == "working"
            && r.lease_owner.as_deref() == Some(worker)
            && r.status_message
                .as_deref()
                .is_some_and(|m| m.starts_with("Computing"))
    }
}

fn input_keys(task: &Value) -> Vec<String> {
    let mut keys: Vec<String> = task["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

/// `tasks/cancel`, less `_meta`.
async fn cancel(client: &Client, id: &str) -> Value {
    without_meta(client.cancel_task(id).await.expect("tasks/cancel"))
}

async fn get(client: &Client, id: &str) -> Value {
    client.get_task(id).await.expect("tasks/get")
}

fn worker_env(id: &'static str) -> [(&'static str, &'static str); 3] {
    [
        ("MCP_TASKS_WORKER_ID", id),
        ("MCP_TASKS_LEASE_MS", "1500"),
        ("MCP_TASKS_POLL_MS", "100"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_is_readable_at_once_on_another_replica() {
    let db = TestDb::new().await;
    let a = Proc::serve(&db.url, PACK, &[]).await;
    let b = Proc::serve(&db.url, PACK, &[]).await;
    let via_a = Client::with_tasks(a.url());
    let via_b = Client::with_tasks(b.url());

    let (id, created) = create_task(&via_a, "slow_compute", json!({ "seconds": 5 })).await;
    let got = get(&via_b, &id).await;

    assert_eq!(got["resultType"], "complete", "{got}");
    assert_eq!(got["taskId"], id.as_str());
    assert_eq!(status(&got), "working", "{got}");
    assert_eq!(got["createdAt"], created["createdAt"], "{got} vs {created}");
    // No worker runs, so nothing has changed since creation: B sees exactly the task A
    // handed out.
    for (key, value) in created.as_object().expect("object") {
        if key != "resultType" {
            assert_eq!(&got[key], value, "{key} differs: {got} vs {created}");
        }
    }
    // And A agrees with B.
    assert_eq!(get(&via_a, &id).await, got);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_replica_serves_the_same_snapshot() {
    let db = TestDb::new().await;
    let a = Proc::serve(&db.url, PACK, &[]).await;
    let via_a = Client::with_tasks(a.url());
    let (id, _) = create_task(&via_a, "slow_compute", json!({ "seconds": 5 })).await;
    let snapshot = get(&via_a, &id).await;
    assert_eq!(status(&snapshot), "working", "{snapshot}");
    a.kill().await;

    let c = Proc::serve(&db.url, PACK, &[]).await;
    let via_c = Client::with_tasks(c.url());
    let again = get(&via_c, &id).await;
    assert_eq!(
        again, snapshot,
        "a new replica must serve the same snapshot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_worker_is_replaced_and_the_task_completes() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let client = Client::with_tasks(replica.url());
    let w1 = Proc::worker(&db.url, PACK, &worker_env("w1")).await;

    let (id, _) = create_task(&client, "slow_compute", json!({ "seconds": 3 })).await;
    let first = wait_row(
        &pool,
        &id,
        Duration::from_secs(20),
        "w1 to run the task",
        computing_under("w1"),
    )
    .await;
    assert_eq!(first.attempt, 1, "{first:?}");
    w1.kill().await;

    let _w2 = Proc::worker(&db.url, PACK, &worker_env("w2")).await;
    let second = wait_row(
        &pool,
        &id,
        Duration::from_secs(20),
        "w2 to take over after w1's lease lapsed",
        |r| r.lease_owner.as_deref() == Some("w2") || r.status != "working",
    )
    .await;
    assert_eq!(second.attempt, 2, "the run is redone: {second:?}");

    let done = client
        .wait_terminal(&id, Duration::from_secs(30))
        .await
        .expect("the task finishes");
    assert_eq!(status(&done), "completed", "{done}");
    assert!(
        all_text(&done["result"]).contains("Computed job in 3 s."),
        "{done}"
    );

    let row = task_row(&pool, &id).await;
    assert_eq!(row.status, "completed", "{row:?}");
    assert_eq!(row.attempt, 2, "exactly one redo: {row:?}");
    assert!(row.finished_at.is_some(), "{row:?}");
    assert!(
        row.lease_owner.is_none() && row.lease_expires_at.is_none(),
        "no lease is held after the finish: {row:?}"
    );
    // Finished once: the snapshot stays as it is.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = task_row(&pool, &id).await;
    assert_eq!(later.finished_at, row.finished_at, "{later:?}");
    assert_eq!(later.version, row.version, "{later:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_worker_finishes_or_releases() {
    tokio::join!(
        sigterm_releases_a_long_task(),
        sigterm_finishes_a_short_task()
    );
}

/// A task still running when the grace period ends is released at once, not left to
/// its (long) lease, and another worker starts it right away.
async fn sigterm_releases_a_long_task() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let client = Client::with_tasks(replica.url());
    let long_lease = |id: &'static str| {
        [
            ("MCP_TASKS_WORKER_ID", id),
            ("MCP_TASKS_LEASE_MS", "30000"),
            ("MCP_TASKS_POLL_MS", "100"),
            ("MCP_TASKS_SHUTDOWN_GRACE_MS", "500"),
        ]
    };
    let w1 = Proc::worker(&db.url, PACK, &long_lease("w1")).await;
    let (id, _) = create_task(&client, "slow_compute", json!({ "seconds": 60 })).await;
    wait_row(
        &pool,
        &id,
        Duration::from_secs(20),
        "w1 to run the 60 s task",
        computing_under("w1"),
    )
    .await;

    let asked = Instant::now();
    assert!(
        w1.terminate(Duration::from_secs(10)).await,
        "the worker exits cleanly within 10 s of SIGTERM (grace 500 ms)"
    );
    let took = asked.elapsed();
    let row = task_row(&pool, &id).await;
    assert_eq!(row.status, "working", "{row:?}");
    assert!(
        row.lease_owner.is_none() && row.lease_expires_at.is_none(),
        "released on exit, not left to the 30 s lease: {row:?}"
    );
    assert!(row.runnable_now, "runnable at once: {row:?}");
    assert_eq!(
        row.attempt, 0,
        "the interrupted run is not an attempt: {row:?}"
    );
    assert!(row.finished_at.is_none(), "{row:?}");

    let _w2 = Proc::worker(&db.url, PACK, &long_lease("w2")).await;
    let taken = wait_row(
        &pool,
        &id,
        Duration::from_secs(10),
        "w2 to pick the released task up (well before w1's 30 s lease would lapse)",
        computing_under("w2"),
    )
    .await;
    assert_eq!(taken.attempt, 1, "{taken:?}");
    assert_eq!(status(&get(&client, &id).await), "working");
    eprintln!("SIGTERM to exit with a task released: {took:?}");
}

/// With the default grace, a task about to finish finishes before the worker exits.
async fn sigterm_finishes_a_short_task() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let client = Client::with_tasks(replica.url());
    let w = Proc::worker(
        &db.url,
        PACK,
        &[("MCP_TASKS_WORKER_ID", "w3"), ("MCP_TASKS_POLL_MS", "100")],
    )
    .await;
    let (id, _) = create_task(&client, "slow_compute", json!({ "seconds": 1 })).await;
    let running = wait_row(
        &pool,
        &id,
        Duration::from_secs(20),
        "w3 to run the 1 s task",
        computing_under("w3"),
    )
    .await;
    assert!(running.finished_at.is_none(), "{running:?}");

    assert!(
        w.terminate(Duration::from_secs(15)).await,
        "the worker exits cleanly once its task is done"
    );
    // No waiting: the outcome was recorded before the process exited.
    let done = get(&client, &id).await;
    assert_eq!(status(&done), "completed", "{done}");
    assert!(
        all_text(&done["result"]).contains("Computed job in 1 s."),
        "{done}"
    );
    let row = task_row(&pool, &id).await;
    assert_eq!(row.attempt, 1, "{row:?}");
    assert!(row.lease_owner.is_none(), "{row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_working_input_required_and_terminal() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let client = Client::with_tasks(replica.url());
    // One slot: each task below can only run once the one before it has let go.
    let _worker = Proc::worker(
        &db.url,
        PACK,
        &[
            ("MCP_TASKS_LEASE_MS", "3000"),
            ("MCP_TASKS_POLL_MS", "100"),
            ("MCP_TASKS_CONCURRENCY", "1"),
        ],
    )
    .await;

    // A working task: the handler is told and stops.
    let (slow, _) = create_task(&client, "slow_compute", json!({ "seconds": 60 })).await;
    let running = wait_row(
        &pool,
        &slow,
        Duration::from_secs(20),
        "the 60 s task to run",
        |r| {
            r.status_message
                .as_deref()
                .is_some_and(|m| m.starts_with("Computing"))
        },
    )
    .await;
    assert!(running.lease_owner.is_some(), "{running:?}");
    assert_eq!(cancel(&client, &slow).await, ack());
    // The worker gives a handler that ignores cancellation 5 s before aborting it, and
    // until then such a handler would keep advancing its status message. Reaching
    // cancelled well before that, with the message frozen, shows the handler stopped.
    let asked = Instant::now();
    let mut computing = std::collections::BTreeSet::new();
    let cancelled = loop {
        let t = get(&client, &slow).await;
        if status(&t) == "cancelled" {
            break t;
        }
        assert_eq!(status(&t), "working", "{t}");
        if let Some(m) = t["statusMessage"].as_str() {
            computing.insert(m.to_owned());
        }
        assert!(
            asked.elapsed() < Duration::from_millis(4500),
            "not cancelled within 4.5 s of tasks/cancel: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // At most one step may have raced the cancellation.
    assert!(
        computing.len() <= 2,
        "the handler kept going after tasks/cancel: {computing:?}"
    );
    assert!(
        cancelled.get("result").is_none() && cancelled.get("error").is_none(),
        "{cancelled}"
    );
    let stopped = task_row(&pool, &slow).await;
    assert!(
        stopped.finished_at.is_some()
            && stopped.cancel_requested_at.is_some()
            && stopped.lease_owner.is_none(),
        "{stopped:?}"
    );
    // The handler is gone: the status message does not advance any more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let still = task_row(&pool, &slow).await;
    assert_eq!(still.status_message, stopped.status_message, "{still:?}");
    assert_eq!(still.version, stopped.version, "{still:?}");
    assert_eq!(get(&client, &slow).await, cancelled);
    assert_eq!(cancel(&client, &slow).await, ack());
    assert_eq!(get(&client, &slow).await, cancelled);

    // A task waiting for input holds no lease: cancelled on the spot.
    let (confirm, _) = create_task(&client, "confirm_delete", json!({ "filename": "x" })).await;
    client
        .poll_until(
            &confirm,
            Duration::from_secs(20),
            Duration::from_millis(100),
            |t| status(t) == "input_required",
        )
        .await
        .expect("confirm_delete asks for input");
    assert_eq!(cancel(&client, &confirm).await, ack());
    let now = get(&client, &confirm).await;
    assert_eq!(status(&now), "cancelled", "at once, without waiting: {now}");
    assert!(now.get("inputRequests").is_none(), "{now}");
    assert_eq!(cancel(&client, &confirm).await, ack());
    assert_eq!(get(&client, &confirm).await, now);

    // A finished task stays as it is.
    let (failing, _) = create_task(&client, "failing_job", json!({})).await;
    let finished = client
        .wait_terminal(&failing, Duration::from_secs(20))
        .await
        .expect("failing_job finishes");
    assert_eq!(status(&finished), "completed", "{finished}");
    assert_eq!(finished["result"]["isError"], true, "{finished}");
    assert_eq!(cancel(&client, &failing).await, ack());
    assert_eq!(get(&client, &failing).await, finished);
    assert_eq!(cancel(&client, &failing).await, ack());
    assert_eq!(get(&client, &failing).await, finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_update_with_two_keys_and_reused_key_is_ignored() {
    let db = TestDb::new().await;
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let client = Client::with_tasks(replica.url());
    let _worker = Proc::worker(&db.url, PACK, &worker_env("w1")).await;

    let (id, _) = create_task(&client, "multi_input", json!({})).await;
    let asking = client
        .poll_until(
            &id,
            Duration::from_secs(20),
            Duration::from_millis(100),
            |t| status(t) == "input_required",
        )
        .await
        .expect("multi_input asks for input");
    assert_eq!(input_keys(&asking), ["confirm", "name"], "{asking}");

    let answer = client
        .update_task(
            &id,
            json!({ "confirm": { "action": "accept", "content": { "confirm": true } } }),
        )
        .await
        .expect("tasks/update confirm");
    assert_eq!(without_meta(answer), ack());
    let partial = get(&client, &id).await;
    assert_eq!(status(&partial), "input_required", "{partial}");
    assert_eq!(input_keys(&partial), ["name"], "{partial}");

    // "confirm" is answered already: another answer under it changes nothing.
    let reused = client
        .update_task(
            &id,
            json!({ "confirm": { "action": "accept", "content": { "confirm": false } } }),
        )
        .await
        .expect("tasks/update confirm again");
    assert_eq!(without_meta(reused), ack());
    assert_eq!(get(&client, &id).await, partial, "a reused key is ignored");

    let last = client
        .update_task(
            &id,
            json!({ "name": { "action": "accept", "content": { "name": "Ada" } } }),
        )
        .await
        .expect("tasks/update name");
    assert_eq!(without_meta(last), ack());
    let done = client
        .wait_terminal(&id, Duration::from_secs(20))
        .await
        .expect("multi_input finishes");
    assert_eq!(status(&done), "completed", "{done}");
    let text = all_text(&done["result"]);
    assert!(text.contains("Ada"), "{done}");
    assert!(
        text.contains("confirmed: true"),
        "the first answer to confirm counts, not the reused one: {done}"
    );

    let late = client
        .update_task(
            &id,
            json!({ "name": { "action": "accept", "content": { "name": "Bob" } } }),
        )
        .await
        .expect("tasks/update after completion");
    assert_eq!(without_meta(late), ack());
    assert_eq!(get(&client, &id).await, done);
}

async fn migrate_process(url: &str) -> std::process::Output {
    let migrate = procs::mcp_tasks(
        &["migrate"],
        &[("DATABASE_URL", url), ("MCP_TASKS_LOG", "info,sqlx=warn")],
    );
    procs::output(migrate, Duration::from_secs(60)).await
}

fn check_exit(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} exited with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_subcommand_is_idempotent_and_concurrent() {
    let db = TestDb::empty().await;
    let url = db.url.clone();

    let (a, b, c) = tokio::join!(
        migrate_process(&url),
        migrate_process(&url),
        migrate_process(&url)
    );
    for (i, out) in [a, b, c].iter().enumerate() {
        check_exit(out, &format!("concurrent migrate #{i}"));
    }
    check_exit(
        &migrate_process(&url).await,
        "migrate on a migrated database",
    );

    let mut fresh = sqlx::PgConnection::connect(&url)
        .await
        .expect("connecting to the migrated database");
    let has_tasks: bool = sqlx::query_scalar("SELECT to_regclass('public.tasks') IS NOT NULL")
        .fetch_one(&mut fresh)
        .await
        .expect("to_regclass");
    assert!(has_tasks, "the tasks table exists");
    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&mut fresh)
            .await
            .expect("reading _sqlx_migrations");
    let expected: Vec<(i64, bool)> = mcp_tasks_store::migration_versions()
        .into_iter()
        .map(|v| (v, true))
        .collect();
    assert_eq!(applied, expected, "each migration applied exactly once");
    fresh.close().await.expect("closing");
}

async fn help(command: &str) -> String {
    // The help shows the values of variables that are set; in the scrubbed environment of
    // a child none is.
    let help = procs::mcp_tasks(&[command, "--help"], &[]);
    let out = procs::output(help, Duration::from_secs(60)).await;
    check_exit(&out, &format!("{command} --help"));
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// Whether the help documents `needle`: a flag (`--x <X>`) or an environment variable
/// (`[env: NAME=default]`, or `[env: NAME]` when its value is hidden; clap may wrap the
/// line after `env:`).
fn documents(help: &str, needle: &str) -> bool {
    if needle.starts_with("--") {
        help.contains(&format!("{needle} <")) || help.contains(&format!("{needle}\n"))
    } else {
        help.contains(&format!("{needle}=")) || help.contains(&format!("{needle}]"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_lists_every_environment_variable() {
    const COMMON: &[&str] = &[
        "DATABASE_URL",
        "MCP_TASKS_DB_MAX_CONNECTIONS",
        "MCP_TASKS_DB_ACQUIRE_TIMEOUT_MS",
        "MCP_TASKS_TOOLS",
        "--tools",
        "MCP_TASKS_LOG",
        "MCP_TASKS_LOG_FORMAT",
    ];
    const SERVER: &[&str] = &[
        "MCP_TASKS_LISTEN",
        "--listen",
        "MCP_TASKS_ALLOWED_HOSTS",
        "MCP_TASKS_MAX_BODY_BYTES",
        "MCP_TASKS_SYNC_WAIT_MS",
        "MCP_TASKS_RETENTION_MS",
        "MCP_TASKS_STATE_KEY",
        "MCP_TASKS_SERVER_NAME",
    ];
    const WORKER: &[&str] = &[
        "MCP_TASKS_LEASE_MS",
        "--lease-ms",
        "MCP_TASKS_CONCURRENCY",
        "--concurrency",
        "MCP_TASKS_POLL_MS",
        "MCP_TASKS_SHUTDOWN_GRACE_MS",
        "MCP_TASKS_WORKER_ID",
    ];
    let cases: [(&str, Vec<&str>, Vec<&str>); 3] = [
        (
            "serve",
            [COMMON, SERVER, &["MCP_TASKS_MIGRATE"]].concat(),
            WORKER.to_vec(),
        ),
        ("worker", [COMMON, WORKER].concat(), SERVER.to_vec()),
        ("dev", [COMMON, SERVER, WORKER].concat(), Vec::new()),
    ];
    for (command, present, absent) in cases {
        let text = help(command).await;
        for needle in present {
            assert!(
                documents(&text, needle),
                "`{command} --help` does not document {needle}:\n{text}"
            );
        }
        for needle in absent {
            assert!(
                !documents(&text, needle) && !text.contains(needle),
                "`{command} --help` mentions {needle}, which it does not take:\n{text}"
            );
        }
    }

    let db = TestDb::new().await;
    let serve = procs::mcp_tasks(
        &["serve", "--listen", "127.0.0.1:0", "--tools", "nope"],
        &[("DATABASE_URL", &db.url)],
    );
    // `serve --tools nope` exits instead of serving.
    let out = procs::output(serve, Duration::from_secs(30)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit {}: {stderr}", out.status);
    assert!(
        stderr.contains("\"nope\"") && stderr.contains("unknown tool pack"),
        "the error names the unknown pack: {stderr}"
    );
}

/// `mcp-tasks health`, the image's health check: exit 0 while a replica's `/readyz`
/// answers 200 (asked by base URL, MCP endpoint or the probe's own URL), non-zero with the
/// reason once nothing answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_subcommand_exits_zero_only_while_the_replica_is_ready() {
    let db = TestDb::new().await;
    let replica = Proc::serve(&db.url, PACK, &[]).await;
    let mcp = replica.url();
    let base = mcp.trim_end_matches("/mcp").to_owned();
    let health = |url: &str| procs::mcp_tasks(&["health", "--url", url], &[]);
    for url in [mcp.clone(), base.clone(), format!("{base}/readyz")] {
        check_exit(
            &procs::output(health(&url), Duration::from_secs(30)).await,
            &format!("health --url {url}"),
        );
    }
    replica.kill().await;
    let out = procs::output(health(&mcp), Duration::from_secs(30)).await;
    assert!(
        !out.status.success(),
        "health succeeded with the replica gone"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/readyz did not answer"),
        "health says why: {stderr}"
    );
}
