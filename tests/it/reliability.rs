//! Faults: a database that goes away and comes back, retried creates, and rolling
//! restarts of replicas and workers under load.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_tasks_client::{Client, ClientError, is_terminal, status_of};
use mcp_tasks_devdb::DevDatabase;
use mcp_tasks_store::{PoolConfig, Store};
use serde_json::{Value, json};
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::sync::Mutex;

use crate::harness::http::{self, Request};
use crate::harness::procs::Proc;
use crate::harness::{Need, TestApp, TestDb, eventually, skip};

const WAIT: Duration = Duration::from_secs(60);

/// A database of our own, so the test may stop and start the server.
/// A throwaway cluster, migrated, and a pool for checks in SQL.
async fn own_database() -> (DevDatabase, PgPool) {
    let db = tokio::task::spawn_blocking(DevDatabase::start)
        .await
        .expect("join")
        .expect("a throwaway PostgreSQL (needs the server binaries)");
    let store = Store::connect(
        db.url(),
        &PoolConfig {
            max_connections: 4,
            acquire_timeout: Duration::from_secs(1),
            ..PoolConfig::default()
        },
    )
    .await
    .expect("connect");
    store.migrate().await.expect("migrate");
    store.close().await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy(db.url())
        .expect("pool");
    (db, pool)
}

/// A GET's status and body; status 0 when there was no answer.
async fn get(url: &str) -> (u16, String) {
    match Request::get().try_send(&http::client(), url).await {
        Ok(answer) => (answer.status, answer.text()),
        Err(e) => (0, e),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_answered_with_503_and_everything_recovers_without_restarts() {
    if skip(Need::LocalPostgres).await {
        return;
    }
    let (mut db, pool) = own_database().await;
    let env = [
        ("MCP_TASKS_DB_ACQUIRE_TIMEOUT_MS", "1000"),
        ("MCP_TASKS_LEASE_MS", "1500"),
        ("MCP_TASKS_POLL_MS", "200"),
    ];
    let replica = Proc::serve(db.url(), "conformance", &env).await;
    let worker = Proc::worker(db.url(), "conformance", &env).await;
    let client = Client::with_tasks(replica.url());
    let base = format!("http://{}", replica.addr.expect("addr"));

    // Working before the outage, and a long task in flight when it starts.
    let first = client
        .call_tool("slow_compute", json!({ "seconds": 0 }))
        .await
        .expect("create");
    client
        .wait_terminal(first["taskId"].as_str().expect("id"), WAIT)
        .await
        .expect("completes");
    let long = client
        .call_tool("slow_compute", json!({ "seconds": 4 }))
        .await
        .expect("create");
    let long_id = long["taskId"].as_str().expect("id").to_owned();
    client
        .poll_until(&long_id, WAIT, Duration::from_millis(50), |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("Computing"))
        })
        .await
        .expect("the long task runs");

    tokio::task::block_in_place(|| db.stop());

    // While the database is down: quick answers, 503 with Retry-After and -32603, never a
    // hang; /readyz says not ready, /healthz still alive.
    for method in ["tools/call", "tasks/get"] {
        let started = Instant::now();
        let params = if method == "tools/call" {
            json!({ "name": "slow_compute", "arguments": { "seconds": 0 } })
        } else {
            json!({ "taskId": long_id })
        };
        let reply = tokio::time::timeout(
            Duration::from_secs(20),
            client.send(json!(1), method, params),
        )
        .await
        .expect("a request blocked while the database was down")
        .expect("an HTTP answer");
        assert_eq!(reply.status, 503, "{method}: {:?}", reply.body);
        assert_eq!(reply.headers["retry-after"], "1");
        assert_eq!(reply.body.as_ref().expect("body")["error"]["code"], -32603);
        assert!(started.elapsed() < Duration::from_secs(20));
    }
    assert_eq!(get(&format!("{base}/readyz")).await.0, 503);
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);

    // Longer than a lease: the worker's lease on the long task lapses meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| db.start_again()).expect("restart");

    // Back without restarting anything.
    eventually(WAIT, "/readyz to turn ready again", || async {
        (get(&format!("{base}/readyz")).await.0 == 200).then_some(())
    })
    .await;
    let after = eventually(WAIT, "tools/call to work again", || async {
        client
            .call_tool("slow_compute", json!({ "seconds": 0 }))
            .await
            .ok()
    })
    .await;
    let done = client
        .wait_terminal(after["taskId"].as_str().expect("id"), WAIT)
        .await
        .expect("the worker runs new tasks again");
    assert_eq!(status_of(&done), "completed");
    // The task in flight during the outage is finished too, and no lease is left behind.
    let long_done = client
        .wait_terminal(&long_id, WAIT)
        .await
        .expect("long task");
    assert_eq!(status_of(&long_done), "completed", "{long_done}");
    let held: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks WHERE lease_owner IS NOT NULL")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(held, 0);

    drop(worker);
    drop(replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_creates_with_an_idempotency_key_return_the_same_task() {
    let app = TestApp::start(1).await;
    let db = &app.db;
    let alice = app.client("alice");

    let args = json!({ "seconds": 1, "label": "report" });
    let first = alice
        .call_tool_idempotent("slow_compute", args.clone(), "key-1")
        .await
        .expect("create");
    let again = alice
        .call_tool_idempotent("slow_compute", args.clone(), "key-1")
        .await
        .expect("retry");
    assert_eq!(
        first["taskId"], again["taskId"],
        "a retry must not create a second task"
    );
    assert_eq!(again["resultType"], "task");

    // Argument order does not make it another request.
    let reordered = json!({ "label": "report", "seconds": 1 });
    let third = alice
        .call_tool_idempotent("slow_compute", reordered, "key-1")
        .await
        .expect("retry");
    assert_eq!(third["taskId"], first["taskId"]);

    // The same key with another request is refused, and creates nothing.
    for (tool, args) in [
        ("slow_compute", json!({ "seconds": 2, "label": "report" })),
        ("failing_job", json!({})),
    ] {
        let err = alice
            .call_tool_idempotent(tool, args, "key-1")
            .await
            .expect_err("conflict");
        assert_eq!(err.code(), Some(-32602), "{err}");
        assert!(err.to_string().contains("Idempotency-Key"), "{err}");
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(count, 1);

    // Keys are scoped to the caller: another principal's same key is another task.
    let bob = app
        .client("bob")
        .call_tool_idempotent("slow_compute", args.clone(), "key-1")
        .await
        .expect("bob");
    assert_ne!(bob["taskId"], first["taskId"]);

    // Still the same task after it finished (the key lives as long as the task).
    alice
        .wait_terminal(first["taskId"].as_str().expect("id"), WAIT)
        .await
        .expect("completes");
    let late = alice
        .call_tool_idempotent("slow_compute", args.clone(), "key-1")
        .await
        .expect("late retry");
    assert_eq!(late["taskId"], first["taskId"]);
    assert_eq!(late["status"], "completed");

    // A client without the Tasks extension retrying with a key gets the same result.
    let plain = Client::new(app.url(), json!({})).header("x-test-principal", "carol");
    let one = plain
        .call_tool_idempotent("slow_compute", json!({ "seconds": 0 }), "sync-key")
        .await
        .expect("sync");
    let two = plain
        .call_tool_idempotent("slow_compute", json!({ "seconds": 0 }), "sync-key")
        .await
        .expect("sync retry");
    assert_eq!(one["content"], two["content"]);
    let carol_tasks: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tasks WHERE principal = 'carol'")
            .fetch_one(&db.pool)
            .await
            .expect("count");
    assert_eq!(carol_tasks, 1);

    // Malformed keys are refused before anything happens.
    for bad in ["", "has space", &"k".repeat(256), "tab\there"] {
        let response = Request::rpc_as(
            json!(1),
            "tools/call",
            json!({ "name": "slow_compute", "arguments": { "seconds": 0 } }),
            json!({}),
        )
        .unset("accept")
        .set("idempotency-key", bad)
        .send_to_app(&app)
        .await;
        assert_eq!(response.status, 400, "{bad:?}");
        let body = response.json();
        assert_eq!(body["error"]["code"], -32600, "{bad:?}: {body}");
    }

    app.stop().await;
}

/// A load balancer that sends each request to a replica in rotation and never to one
/// being drained.
#[derive(Clone)]
struct Balancer {
    urls: Arc<Mutex<Vec<String>>>,
    next: Arc<AtomicUsize>,
}

impl Balancer {
    async fn pick(&self) -> String {
        let urls = self.urls.lock().await;
        urls[self.next.fetch_add(1, Ordering::Relaxed) % urls.len()].clone()
    }

    async fn remove(&self, url: &str) {
        self.urls.lock().await.retain(|u| u != url);
    }

    async fn add(&self, url: String) {
        self.urls.lock().await.push(url);
    }
}

#[derive(Default)]
struct Tally {
    requests: AtomicUsize,
    failures: Mutex<Vec<String>>,
}

impl Tally {
    async fn record<T>(&self, what: &str, result: Result<T, ClientError>) -> Option<T> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.failures.lock().await.push(format!("{what}: {e}"));
                None
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restarts_of_replicas_and_workers_lose_nothing() {
    let db = TestDb::new().await;
    let state_key = "ef".repeat(32);
    let env = [
        ("MCP_TASKS_STATE_KEY", state_key.as_str()),
        ("MCP_TASKS_LEASE_MS", "30000"),
        ("MCP_TASKS_POLL_MS", "200"),
        ("MCP_TASKS_SHUTDOWN_GRACE_MS", "2000"),
        ("MCP_TASKS_DRAIN_GRACE_MS", "5000"),
        // One anonymous principal makes all of the load here.
        ("MCP_TASKS_RATE_LIMIT", "0"),
    ];
    let mut replicas = vec![
        Proc::serve(&db.url, "conformance", &env).await,
        Proc::serve(&db.url, "conformance", &env).await,
    ];
    let mut workers = vec![
        Proc::worker(&db.url, "conformance", &env).await,
        Proc::worker(&db.url, "conformance", &env).await,
    ];
    let balancer = Balancer {
        urls: Arc::new(Mutex::new(replicas.iter().map(Proc::url).collect())),
        next: Arc::new(AtomicUsize::new(0)),
    };
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let created: Arc<Mutex<HashMap<String, &'static str>>> = Arc::new(Mutex::new(HashMap::new()));

    // A listen stream on the first replica, which is about to be restarted: it must end
    // with the listen result, not a dropped connection.
    let long = Client::with_tasks(replicas[0].url())
        .call_tool("slow_compute", json!({ "seconds": 60 }))
        .await
        .expect("long task");
    let long_id = long["taskId"].as_str().expect("id").to_owned();
    let mut stream = Client::with_tasks(replicas[0].url())
        .listen(json!("rolling"), json!({ "taskIds": [long_id] }))
        .await
        .expect("listen");
    assert!(stream.next().await.expect("ack").is_some());

    // Load: tasks created and polled through the balancer, and synchronous calls from a
    // client without the Tasks extension, which the replica answers after a worker ran
    // the tool.
    let mut load = Vec::new();
    for n in 0..4 {
        let (balancer, tally, stop, created) = (
            balancer.clone(),
            tally.clone(),
            stop.clone(),
            created.clone(),
        );
        load.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let url = balancer.pick().await;
                if n == 0 {
                    let plain = Client::new(&url, json!({}));
                    if let Some(result) = tally
                        .record(
                            "sync call",
                            plain
                                .call_tool("slow_compute", json!({ "seconds": 1 }))
                                .await,
                        )
                        .await
                    {
                        assert_eq!(result["resultType"], "complete", "{result}");
                    }
                } else {
                    let client = Client::with_tasks(&url);
                    let seconds = i % 3;
                    if let Some(task) = tally
                        .record(
                            "create",
                            client
                                .call_tool("slow_compute", json!({ "seconds": seconds }))
                                .await,
                        )
                        .await
                    {
                        let id = task["taskId"].as_str().expect("id").to_owned();
                        created.lock().await.insert(id.clone(), "completed");
                        let poll_url = balancer.pick().await;
                        tally
                            .record("poll", Client::with_tasks(&poll_url).get_task(&id).await)
                            .await;
                    }
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    // Restart each replica in turn: out of rotation, a moment for requests already on
    // their way, SIGTERM, wait for a clean exit, a new one in. Then each worker in turn.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..replicas.len() {
        let old = replicas.remove(i);
        balancer.remove(&old.url()).await;
        // As a load balancer does: let requests already routed there arrive before the
        // replica stops accepting connections.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            old.terminate(Duration::from_secs(30)).await,
            "a replica did not exit cleanly on SIGTERM"
        );
        let new = Proc::serve(&db.url, "conformance", &env).await;
        balancer.add(new.url()).await;
        replicas.insert(i, new);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for i in 0..workers.len() {
        let old = workers.remove(i);
        assert!(
            old.terminate(Duration::from_secs(30)).await,
            "a worker did not exit cleanly on SIGTERM"
        );
        workers.insert(i, Proc::worker(&db.url, "conformance", &env).await);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.expect("load task");
    }

    // The stream on the restarted replica ended gracefully, with the listen result.
    let mut last = Value::Null;
    while let Some(frame) = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the stream neither ended nor went on")
        .expect("the stream broke instead of ending with the listen result")
    {
        last = frame;
    }
    assert_eq!(
        last["id"], "rolling",
        "the last frame must be the listen result: {last}"
    );
    assert_eq!(last["result"]["resultType"], "complete");

    // Every request got an answer, and every task completes.
    let failures = tally.failures.lock().await.clone();
    assert!(
        failures.is_empty(),
        "requests without an answer: {failures:#?}"
    );
    assert!(
        tally.requests.load(Ordering::Relaxed) > 20,
        "too little load to mean anything"
    );
    let created = created.lock().await.clone();
    assert!(!created.is_empty());
    let checker = Client::with_tasks(replicas[0].url());
    for (id, expected) in &created {
        let task = checker.wait_terminal(id, WAIT).await.expect("terminal");
        assert!(is_terminal(&task));
        assert_eq!(status_of(&task), *expected, "{task}");
    }
    checker
        .cancel_task(&long_id)
        .await
        .expect("cancel the long task");
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE lease_owner IS NOT NULL AND status <> 'working'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count");
    assert_eq!(held, 0);
}

/// The task's status and attempt, once it is finished.
async fn finished_attempt(pool: &PgPool, id: uuid::Uuid) -> (String, i32) {
    eventually(WAIT, "the task to finish", || async {
        sqlx::query_as::<_, (String, i32)>(
            "SELECT status, attempt FROM tasks WHERE id = $1 AND finished_at IS NOT NULL",
        )
        .bind(id)
        .fetch_optional(pool)
        .await
        .ok()
        .flatten()
    })
    .await
}

async fn running(pool: &PgPool, id: uuid::Uuid) {
    eventually(WAIT, "the task to run", || async {
        let message: Option<String> =
            sqlx::query_scalar("SELECT status_message FROM tasks WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await
                .ok()
                .flatten();
        message.filter(|m| m.starts_with("Computing")).map(|_| ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_shorter_than_the_lease_costs_no_attempt_but_a_killed_worker_does() {
    if skip(Need::LocalPostgres).await {
        return;
    }
    let (mut db, pool) = own_database().await;
    let store = Store::connect(db.url(), &PoolConfig::default())
        .await
        .expect("connect");
    let env = [("MCP_TASKS_LEASE_MS", "5000"), ("MCP_TASKS_POLL_MS", "200")];
    let worker = Proc::worker(db.url(), "conformance", &env).await;
    let owner = mcp_tasks_store::Owner::new("acme", "alice");
    let task = |seconds: u64| mcp_tasks_store::NewTask {
        tool: "slow_compute".into(),
        arguments: json!({ "seconds": seconds }),
        status_message: None,
        ttl_ms: None,
        poll_interval_ms: None,
        retention_ms: 60_000,
        max_attempts: 3,
        input_responses: serde_json::Map::new(),
        trace_context: None,
        client_capabilities: None,
        idempotency: None,
    };

    // The database restarts while the task runs; the outage is shorter than the lease,
    // though the lease may well lapse before the worker reaches the database again.
    let t = store
        .replica()
        .create_task(&owner, task(6))
        .await
        .expect("create");
    running(&pool, t.id.0).await;
    tokio::task::block_in_place(|| db.stop());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    tokio::task::block_in_place(|| db.start_again()).expect("restart");
    let (status, attempt) = finished_attempt(&pool, t.id.0).await;
    assert_eq!(status, "completed");
    assert_eq!(attempt, 1, "the outage cost an attempt");

    // A worker killed mid-task costs one: the next worker runs it again. (The first
    // statements on connections from before the restart fail: retried.)
    let t = eventually(WAIT, "a create after the restart", || async {
        store.replica().create_task(&owner, task(2)).await.ok()
    })
    .await;
    running(&pool, t.id.0).await;
    worker.kill().await;
    let _next = Proc::worker(db.url(), "conformance", &env).await;
    let (status, attempt) = finished_attempt(&pool, t.id.0).await;
    assert_eq!(status, "completed");
    assert_eq!(attempt, 2, "a lost worker's run counts");
    store.close().await;
}
