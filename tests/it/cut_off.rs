//! Workers cut off from PostgreSQL: a worker whose database connections hang (a paused
//! relay between them) but whose upstream still answers stops its run before its lease
//! runs out, so the worker that claims the task next never runs it beside it; and the
//! connections that hold a lock or a place in the notification queue for as long as
//! they live (the wake-up duty, LISTEN) have the server probe their peer within
//! seconds, so a dead worker's session ends in tens of seconds rather than hours.

use crate::harness::{Need, skip};
use std::time::Duration;

use mcp_tasks_devdb::DevDatabase;
use mcp_tasks_store::{
    DUTY_APPLICATION_NAME, LISTENER_APPLICATION_NAME, NewTask, Owner, PoolConfig, Store, duty_key,
};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

use crate::harness::procs::Proc;
use crate::harness::relay::Relay;
use crate::harness::{TestDb, eventually};

const WAIT: Duration = Duration::from_secs(120);

/// A FastMCP server whose tool writes down when it starts, is cancelled and ends: what
/// a side effect outside the service would see.
const SERVER: &str = r#"
import asyncio, time
from fastmcp import FastMCP

mcp = FastMCP("cutoff")

def note(path, what):
    with open(path, "a") as f:
        f.write(f"{what} {time.time()}\n")

@mcp.tool
async def work(marker: str, seconds: float = 600.0) -> str:
    """Works for a while, writing down what happened to marker."""
    note(marker, "started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note(marker, "cancelled")
        raise
    note(marker, "finished")
    return "worked"

if __name__ == "__main__":
    mcp.run(show_banner=False)
"#;

/// The marker's lines as (what, when in seconds since the epoch).
fn notes(path: &std::path::Path) -> Vec<(String, f64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (what, at) = l.split_once(' ')?;
            Some((what.to_owned(), at.parse().ok()?))
        })
        .collect()
}

/// Workers whose row lists at least one tool, seen within the last seconds.
async fn workers_with_tools(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM workers
          WHERE cardinality(tools) >= 1 AND last_seen_at > now() - interval '3 seconds'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_its_database_stops_its_run_before_the_lease_runs_out() {
    if skip(Need::UpstreamServers).await {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mcp-tasks-cutoff-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let script = dir.join("server.py");
    std::fs::write(&script, SERVER).expect("script");
    let python = crate::harness::installed("upstreams/setup")
        .await
        .unwrap_or_else(|why| panic!("the upstream servers: {why}"))
        .join("py/bin/python");
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[upstream]]\nname = \"py\"\ncommand = [{:?}, {:?}]\nprefix = \"py_\"\nmode = \"task-required\"\nidempotent = true\nmax_attempts = 3\ntimeout_ms = 600000\n",
            python.display().to_string(),
            script.display().to_string()
        ),
    )
    .expect("config");
    let config = config.display().to_string();
    let env = [
        ("MCP_TASKS_CONFIG", config.as_str()),
        ("MCP_TASKS_LEASE_MS", "3000"),
        ("MCP_TASKS_POLL_MS", "200"),
        ("MCP_TASKS_PRESENCE_MS", "300"),
        ("MCP_TASKS_LOG", "info,sqlx=warn,rmcp=warn"),
    ];

    let db = TestDb::new().await;
    let relay = Relay::to(&db.url).await;
    // The first worker reaches the database only through the relay.
    let cut = Proc::worker(&relay.url(&db.url), "none", &env).await;
    eventually(WAIT, "the first worker reaching its upstream", || async {
        (workers_with_tools(&db).await >= 1).then_some(())
    })
    .await;
    let owner = Owner::new("acme", "alice");
    let marker = dir.join("marker");
    let task = db
        .store
        .replica()
        .create_task(
            &owner,
            NewTask {
                tool: "py_work".into(),
                arguments: json!({ "marker": marker.display().to_string() }),
                status_message: None,
                ttl_ms: None,
                poll_interval_ms: None,
                retention_ms: 60_000,
                max_attempts: 3,
                input_responses: serde_json::Map::new(),
                trace_context: None,
                client_capabilities: None,
                idempotency: None,
            },
        )
        .await
        .expect("create");
    eventually(WAIT, "the first worker's run to start upstream", || async {
        (!notes(&marker).is_empty()).then_some(())
    })
    .await;
    // A second worker, on the database directly, for when the lease has run out.
    let other = Proc::worker(&db.url, "none", &env).await;
    eventually(WAIT, "the second worker reaching its upstream", || async {
        (workers_with_tools(&db).await >= 2).then_some(())
    })
    .await;

    // The first worker's database goes silent: its heartbeats hang, and its lease runs
    // out. Its upstream still answers.
    relay.pause();
    let seen = eventually(WAIT, "the second worker's run to start", || async {
        let seen = notes(&marker);
        (seen.iter().filter(|(what, _)| what == "started").count() >= 2).then_some(seen)
    })
    .await;
    let lapsed: f64 = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM at)::float8 FROM task_events
          WHERE id = $1 AND kind = 'lease_lapsed'",
    )
    .bind(task.id.0)
    .fetch_one(&db.pool)
    .await
    .expect("the lapse of the first worker's lease");

    let what: Vec<&str> = seen.iter().map(|(what, _)| what.as_str()).collect();
    assert!(
        what.starts_with(&["started", "cancelled", "started"]),
        "the first run must have stopped before the second started: {seen:?}"
    );
    let (cancelled, restarted) = (seen[1].1, seen[2].1);
    assert!(
        cancelled < lapsed,
        "the first run was stopped {:.3} s after its lease ran out",
        cancelled - lapsed
    );
    assert!(restarted >= lapsed, "{seen:?}, lapsed at {lapsed}");

    // The second worker has the task; stop its run.
    db.store
        .replica()
        .cancel_task(&owner, task.id)
        .await
        .expect("cancel");
    relay.resume();
    drop(other);
    drop(cut);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The timer of the server's end of the connection from `client_port`, from
/// `/proc/net/tcp`: (its kind, seconds until it fires). Kind 2 is the keepalive timer.
fn server_socket_timer(server_port: u16, client_port: u16) -> Option<(u8, f64)> {
    // Clock ticks (USER_HZ, 100 on Linux) in `tm->when`.
    const TICKS_PER_SECOND: f64 = 100.0;
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let local = format!("0100007F:{server_port:04X}");
    let remote = format!("0100007F:{client_port:04X}");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&local.as_str()) || fields.get(2) != Some(&remote.as_str()) {
            return None;
        }
        let (kind, when) = fields.get(5)?.split_once(':')?;
        let ticks = u64::from_str_radix(when, 16).ok()?;
        Some((kind.parse().ok()?, ticks as f64 / TICKS_PER_SECOND))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_probes_the_duty_and_listen_connections_within_seconds() {
    // A server of our own on this machine, so that its sockets are in /proc/net/tcp.
    let db = tokio::task::spawn_blocking(DevDatabase::start)
        .await
        .expect("join")
        .expect("a throwaway PostgreSQL (needs the server binaries)");
    let store = Store::connect(db.url(), &PoolConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store.close().await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(db.url())
        .await
        .expect("pool");
    let server_port = url::Url::parse(db.url())
        .expect("url")
        .port()
        .expect("port");
    let worker = Proc::worker(db.url(), "conformance", &[("MCP_TASKS_POLL_MS", "200")]).await;

    for (name, longest) in [
        (DUTY_APPLICATION_NAME, 10.0),
        (LISTENER_APPLICATION_NAME, 10.0),
    ] {
        let (kind, left) = eventually(
            WAIT,
            &format!("the server's keepalive timer on the {name} connection"),
            || async {
                let port: i32 = sqlx::query_scalar(
                    "SELECT client_port FROM pg_stat_activity WHERE application_name = $1",
                )
                .bind(name)
                .fetch_optional(&pool)
                .await
                .ok()??;
                let timer = server_socket_timer(server_port, u16::try_from(port).ok()?)?;
                // Between a probe and its answer the timer is another one: look again.
                (timer.0 == 2).then_some(timer)
            },
        )
        .await;
        assert_eq!(kind, 2);
        assert!(
            left <= longest,
            "the server probes the {name} connection only after {left} s of silence"
        );
    }
    // The pool's connections keep the system's default (hours): this test can tell.
    let port: i32 = sqlx::query_scalar(
        "SELECT client_port FROM pg_stat_activity WHERE application_name = 'mcp-tasks' LIMIT 1",
    )
    .fetch_one(&pool)
    .await
    .expect("a pool connection of the worker");
    let pooled = server_socket_timer(server_port, u16::try_from(port).expect("port"));
    assert!(
        pooled.is_some_and(|(kind, left)| kind != 2 || left > 600.0),
        "{pooled:?}"
    );
    drop(worker);
    pool.close().await;
}

/// Advisory locks of duty connections: (held, waited for).
async fn duty_locks(db: &TestDb) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE l.granted), count(*) FILTER (WHERE NOT l.granted)
           FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND a.datname = current_database()
            AND a.application_name = $1",
    )
    .bind(DUTY_APPLICATION_NAME)
    .fetch_one(&db.pool)
    .await
    .unwrap_or((0, 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_server_goes_silent_gives_up_its_duty_connection() {
    let db = TestDb::new().await;
    let relay = Relay::to(&db.url).await;
    let cut = Store::connect(&relay.url(&db.url), &PoolConfig::default())
        .await
        .expect("connect through the relay");
    let key = duty_key(&["tool".to_owned()]);

    // Waiting in the duty's queue when the server goes silent: the wait ends, instead of
    // lasting as long as the connection (for ever, for a server that is gone).
    let mut holder = db.store.worker().duty();
    holder.take(key).await.expect("the duty");
    let mut waiter = cut.worker().duty();
    let waiting = tokio::spawn(async move { waiter.take(key).await });
    eventually(WAIT, "the second duty connection queued", || async {
        (duty_locks(&db).await == (1, 1)).then_some(())
    })
    .await;
    relay.pause();
    let waited = tokio::time::timeout(Duration::from_secs(120), waiting)
        .await
        .expect("a wait for the duty on a silent server never ended")
        .expect("join");
    assert!(
        waited
            .as_ref()
            .is_err_and(mcp_tasks_store::StoreError::is_unavailable),
        "{waited:?}"
    );
    relay.resume();
    holder.close().await;

    // Holding the duty when the server goes silent: the check says so.
    let mut held = cut.worker().duty();
    held.take(key).await.expect("the duty, through the relay");
    held.check().await.expect("an answering server");
    relay.pause();
    let checked = tokio::time::timeout(Duration::from_secs(120), held.check())
        .await
        .expect("a check of the duty on a silent server never ended");
    assert!(checked.is_err_and(|e| e.is_unavailable()));
    assert_eq!(held.held(), None);
}
